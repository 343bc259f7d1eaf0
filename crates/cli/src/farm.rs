//! The filter farm on the command line: `tessera fu` (one FU process), `tessera reader` and
//! `tessera merge` (the mergers of a farm). The farm that `tessera run` starts behind its BUs is
//! `tessera_control::farm`.

use anyhow::{Context, Result, bail};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_control::chain::{check_chain, storage_run_dir};
use tessera_control::farm::{FarmDirs, MergerPart, Mergers, make_hlt, system_streams};
use tessera_formats::names;
use tessera_fu::claim::host_name;
use tessera_fu::merge::with_error_stream;
use tessera_fu::process::{FuConfig, FuReport, run_fu};
use tessera_fu::remote::BuAccess;

/// The options of `tessera fu`.
#[derive(clap::Args, Debug, Clone)]
pub struct FuArgs {
    /// The BU's directory, holding `runRRRRRR/` (on this host or a shared file system).
    #[arg(long, conflicts_with = "broker")]
    pub bu_dir: Option<PathBuf>,
    /// Or the BU's file broker, `HOST:PORT` (a host name or an IP address), for a host that
    /// does not see the BU's directory.
    #[arg(long, value_parser = crate::options::socket_address)]
    pub broker: Option<std::net::SocketAddr>,
    /// This node's output directory, holding `runRRRRRR/`: every FU process on this host that
    /// reads the same BU directory must use the same one.
    #[arg(long)]
    pub output: PathBuf,
    /// The run to process.
    #[arg(long)]
    pub run: u32,
    /// The selection menu (default: the embedded menu; see examples/menu.yaml).
    #[arg(long, conflicts_with = "exec")]
    pub menu: Option<PathBuf>,
    /// Run this program as the HLT instead of the menu, e.g. `--exec python3 --exec
    /// examples/hlt/select.py` (one value per argument; see docs/hlt-contract.md).
    #[arg(long, allow_hyphen_values = true)]
    pub exec: Vec<String>,
    /// How long to sleep when there is nothing to claim, in ms.
    #[arg(long, default_value_t = 20)]
    pub poll_ms: u64,
    /// Give up if the BU's run directory has not appeared after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub wait_for_run_s: u64,
    /// The process that started this FU (`tessera run`): this FU stops, as on SIGTERM, when that
    /// process ends. FUs run in a process group of their own, so that a terminal's Ctrl-C reaches
    /// only `tessera run`, which then drains them; this keeps them from outliving it.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
}

/// `tessera fu`: one FU process, until the BU's run has ended and every file is processed.
pub fn fu(args: &FuArgs) -> Result<FuReport> {
    let mut hlt = make_hlt(args.menu.as_deref(), &args.exec)?;
    let cfg = FuConfig {
        bu: match (&args.bu_dir, args.broker) {
            (Some(dir), None) => BuAccess::Directory(dir.clone()),
            (None, Some(addr)) => BuAccess::Broker(addr),
            _ => bail!("give the BU's files as --bu-dir DIR or --broker HOST:PORT"),
        },
        output_dir: args.output.clone(),
        run: args.run,
        host: host_name(),
        pid: std::process::id(),
        poll_interval: Duration::from_millis(args.poll_ms.max(1)),
        recovery_interval: Duration::from_secs(1),
        run_start_timeout: Duration::from_secs(args.wait_for_run_s),
        summary_interval: Duration::from_secs(1),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    // Ctrl-C or SIGTERM leaves at once; the claims return to the pool when this process is gone.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
    if let Some(parent) = args.parent_pid {
        end_with_parent(parent)?;
    }
    Ok(run_fu(&cfg, hlt.as_mut(), &stop)?)
}

/// The options of `tessera reader`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReaderArgs {
    /// The BU's file broker, `HOST:PORT` (a host name or an IP address).
    #[arg(long, value_parser = crate::options::socket_address)]
    pub broker: std::net::SocketAddr,
    /// The BU's directory, holding `runRRRRRR/`, as this host sees it (a shared file system).
    #[arg(long)]
    pub bu_dir: PathBuf,
    /// The run to read.
    #[arg(long)]
    pub run: u32,
    /// Ask for no file after this lumi section (`stopls`), as a CMSSW process told to stop does.
    #[arg(long)]
    pub stop_ls: Option<u32>,
    /// Take this long more over each file, as a slow selection would, in ms (readers that
    /// `tessera run` starts take it from the environment).
    #[arg(long, default_value_t = 0, env = "TESSERA_READER_FILE_DELAY_MS")]
    pub file_delay_ms: u64,
    /// Give up when the run has not ended after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout_s: u64,
    /// The process that started this reader: it stops when that process ends.
    #[arg(long, hide = true)]
    pub parent_pid: Option<u32>,
}

/// `tessera reader`: reads the run through the broker until it ends the run for this reader.
pub fn reader(args: &ReaderArgs) -> Result<tessera_fu::reader::ReaderReport> {
    let cfg = tessera_fu::reader::ReaderConfig {
        broker: args.broker,
        broker_host: args.broker.ip().to_string(),
        bu_dir: args.bu_dir.clone(),
        run: args.run,
        pid: std::process::id(),
        stop_ls: args.stop_ls,
        file_delay: Duration::from_millis(args.file_delay_ms),
        timeout: Duration::from_secs(args.timeout_s),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
    if let Some(parent) = args.parent_pid {
        end_with_parent(parent)?;
    }
    let report = tessera_fu::reader::run_reader(&cfg, &stop)?;
    for deviation in report.deviations.iter().take(10) {
        tracing::error!("reader pid {}: DEVIATION: {deviation}", cfg.pid);
    }
    Ok(report)
}

/// The report of a reader as one JSON line.
pub fn reader_json(report: &tessera_fu::reader::ReaderReport) -> serde_json::Value {
    json!({
        "files": report.files,
        "events": report.events,
        "orbits": report.orbits,
        "last_ls": report.last_ls,
        "answers": report.answers,
        "deviations": report.deviations,
    })
}

/// Asks the kernel to send this process SIGTERM when its parent ends, and checks that the parent
/// is still `parent` (it may have ended before the request was made).
fn end_with_parent(parent: u32) -> Result<()> {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    set_parent_process_death_signal(Some(Signal::TERM)).context("asking to end with the parent process")?;
    if getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(parent) {
        bail!("--parent-pid {parent}: that process has ended; this FU ends too");
    }
    Ok(())
}

/// The report of an FU process as one JSON line, which `tessera run` reads back.
pub fn report_json(report: &FuReport) -> serde_json::Value {
    json!({
        "files": report.files,
        "events": report.events,
        "orbits": report.orbits,
        "bad_orbits": report.bad_orbits,
        "error_events": report.error_events,
        "accepted": report.accepted,
        "lumi_sections": report.lumi_sections,
        "returned_claims": report.returned_claims,
        "taken_back": report.taken_back,
        "early_parts": report.early_parts,
        "reasons": report.reasons,
        "ledger_events": report.ledger_events,
        "ledger_orbits": report.ledger_orbits,
    })
}

/// The options of `tessera merge`.
#[derive(clap::Args, Debug, Clone)]
pub struct MergeArgs {
    /// The system file whose run to merge.
    #[arg(long)]
    pub system: PathBuf,
    /// The run's output directory (as given to `tessera run --output`); overrides the system
    /// file.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout_s: u64,
    /// Run only this BU's micro and mini mergers, on a host that sees its directory (beside a
    /// BU whose RAM disk no other host sees), until its share of the run is in storage; the
    /// macro merger then runs elsewhere with `--macro-only`.
    #[arg(long, value_name = "BU", conflicts_with = "macro_only")]
    pub bu: Option<String>,
    /// With `--bu`: copy the BU's end-of-lumi-section and end-of-run documents into this
    /// directory (it holds `runRRRRRR/`), before anything that depends on them reaches storage,
    /// so that `--macro-only` on another host checks storage against them there.
    #[arg(long, value_name = "DIR", requires = "bu")]
    pub bookkeeping_copy: Option<PathBuf>,
    /// Run only the macro merger, then the check against the BUs' bookkeeping.
    #[arg(long)]
    pub macro_only: bool,
    /// Read each BU's bookkeeping for the check from `DIR/<bu>/runRRRRRR/` (the copies its
    /// `--bu` mergers made) instead of its directory.
    #[arg(long, value_name = "DIR", conflicts_with = "bu")]
    pub bookkeeping: Option<PathBuf>,
}

/// `tessera merge`: every merger of a system's farm, in this process, until the run is merged
/// into storage (for systems with `fu.merge: false`, or to finish the work of mergers that were
/// stopped); then the chain's check against the BUs' bookkeeping. True if it holds.
pub fn merge(args: &MergeArgs) -> Result<bool> {
    let mut cfg = SystemConfig::load(&args.system)?;
    if args.output.is_some() {
        cfg.run.output = args.output.clone();
    }
    let output = cfg.run.output.clone().with_context(|| {
        format!("{}: no run.output: give the run's output directory with --output", args.system.display())
    })?;
    let streams = system_streams(&cfg)?;
    let dirs = FarmDirs::of(&cfg, &output);
    let part = match (&args.bu, args.macro_only) {
        (Some(name), _) => MergerPart::Bu {
            index: cfg.bus.iter().position(|b| &b.name == name).with_context(|| {
                let names: Vec<&str> = cfg.bus.iter().map(|b| b.name.as_str()).collect();
                format!("--bu {name}: {} has no such BU (it has {})", args.system.display(), names.join(", "))
            })?,
            bookkeeping_copy: args.bookkeeping_copy.clone(),
        },
        (None, true) => MergerPart::Macro,
        (None, false) => MergerPart::All,
    };
    let mergers = Mergers::part(&cfg, &output, &dirs, &streams, &part);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
    let poll = Duration::from_millis(cfg.fu.poll_interval_ms.max(1));
    mergers.run(&stop, poll, Some(Instant::now() + Duration::from_secs(args.timeout_s)))?;
    if let MergerPart::Bu { index, .. } = part {
        // Each lumi section was proven against the BU's NEvents before it reached storage; the
        // whole chain is checked where the macro merger runs.
        say!("merged {}'s share of run {} into {}", cfg.bus[index].name, cfg.run.number, dirs.storage.display());
        return Ok(true);
    }
    let bu_run_dirs: Vec<PathBuf> = (0..cfg.bus.len())
        .map(|i| match &args.bookkeeping {
            Some(copies) => copies.join(&cfg.bus[i].name),
            None => cfg.bu_directory(i, &output),
        })
        .map(|dir| dir.join(names::run_dir_name(cfg.run.number)))
        .collect();
    let storage = storage_run_dir(&dirs, cfg.run.number);
    let check = check_chain(&bu_run_dirs, &storage, cfg.run.number, &with_error_stream(&streams));
    let (built, processed) = check.totals();
    for p in check.problems.iter().take(10) {
        say!("chain problem: {p}");
    }
    say!(
        "merged run {} into {}: {} files, {:.1} MB; built {built} = processed {processed} over {} lumi sections  {}",
        cfg.run.number,
        storage.display(),
        check.files,
        check.bytes as f64 / 1e6,
        check.per_ls.len(),
        if check.holds() { "holds" } else { "DOES NOT HOLD" }
    );
    Ok(check.holds())
}
