//! The filter farm on the command line: `tessera fu` (one FU process), `tessera reader` and
//! `tessera merge` (the mergers of a farm). The farm that `tessera run` starts behind its BUs is
//! `tessera_control::farm`.

use anyhow::{Context, Result, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_control::chain::{check_chain, storage_run_dir};
use tessera_control::farm::{FarmDirs, MergerPart, Mergers, make_hlt, system_streams};
use tessera_formats::frd::FrdEvent;
use tessera_formats::names;
use tessera_fu::claim::host_name;
use tessera_fu::merge::with_error_stream;
use tessera_fu::process::{FuConfig, FuReport, run_fu};
use tessera_fu::remote::BuAccess;
use tessera_fu::{FuError, Hlt, Verdict};
use tessera_rundir::resources::now_unix_ms;

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
    /// Keep FILE up to date (about once a second) while this FU lives, for `tessera fu-alive`,
    /// a container's liveness and readiness probe: when it was last written, whether the HLT
    /// has started, and since when the HLT has been on the call in progress, if it is on one.
    /// Removed when the FU ends.
    #[arg(long, value_name = "FILE")]
    pub alive_file: Option<PathBuf>,
}

/// `tessera fu`: one FU process, until the BU's run has ended and every file is processed.
pub fn fu(args: &FuArgs) -> Result<FuReport> {
    // Written before the HLT starts: its start (an external program's, up to its startup
    // timeout) is the first HLT call the file shows.
    let alive = args.alive_file.as_ref().map(|path| AliveFile::start(path, args.run)).transpose()?;
    let beat = alive.as_ref().map(|a| a.beat.clone());
    let mut hlt = {
        let _call = beat.as_deref().map(HltBeat::call);
        make_hlt(args.menu.as_deref(), &args.exec)?
    };
    if let Some(beat) = &beat {
        beat.started.store(true, Ordering::SeqCst);
    }
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
    let report = match beat {
        Some(beat) => run_fu(&cfg, &mut WatchedHlt { inner: hlt.as_mut(), beat }, &stop)?,
        None => run_fu(&cfg, hlt.as_mut(), &stop)?,
    };
    drop(alive);
    Ok(report)
}

/// How often `tessera fu --alive-file` writes its file: as often as the FU publishes its
/// resource summary (which its BU, not its own container, sees).
pub const FU_ALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// How old, by default, the file of `tessera fu --alive-file` may be for `tessera fu-alive`, in
/// s: 30 writes missed. The file is written by a thread of its own, whatever the HLT does, so
/// only a process that is frozen or gone misses them.
pub const FU_ALIVE_STALE_S: u64 = 30;

/// How long, by default, one call of the HLT (or its start) may last for `tessera fu-alive`, in
/// s. Longer than anything a working HLT takes: an external HLT has 60 s for a file, and when it
/// fails on a record it is killed and started again (30 s for its start) up to 2 more times,
/// 270 s at most; the menu decides a batch of events in milliseconds. And as long as a BU's
/// file broker waits by default (`fu.claim_lease_s`, 300 s) before it gives the files of a
/// silent FU (one on an HLT call asks it nothing) to others, dropping what the FU made of them.
pub const FU_HLT_CALL_LIMIT_S: u64 = 300;

/// What an FU shows of its HLT, for its alive file: whether it has started, and since when (ms
/// since the Unix epoch; 0: not on a call) it has been on the call in progress.
#[derive(Debug, Default)]
struct HltBeat {
    started: AtomicBool,
    call_since_unix_ms: AtomicU64,
}

/// The HLT call in progress while it lives.
struct HltCall<'a>(&'a HltBeat);

impl HltBeat {
    fn call(&self) -> HltCall<'_> {
        self.call_since_unix_ms.store(now_unix_ms().max(1), Ordering::SeqCst);
        HltCall(self)
    }

    /// The alive file's document, written at `now` (ms since the Unix epoch).
    fn document(&self, pid: u32, run: u32, now: u64) -> serde_json::Value {
        let since = self.call_since_unix_ms.load(Ordering::SeqCst);
        json!({
            "pid": pid,
            "run": run,
            "updated_unix_ms": now,
            "hlt_started": self.started.load(Ordering::SeqCst),
            "hlt_call_since_unix_ms": (since != 0).then_some(since),
        })
    }
}

impl Drop for HltCall<'_> {
    fn drop(&mut self) {
        self.0.call_since_unix_ms.store(0, Ordering::SeqCst);
    }
}

/// The FU's HLT, each call noted in its [`HltBeat`].
struct WatchedHlt<'a> {
    inner: &'a mut dyn Hlt,
    beat: Arc<HltBeat>,
}

impl Hlt for WatchedHlt<'_> {
    fn streams(&self) -> &[String] {
        self.inner.streams()
    }

    fn select_file(
        &mut self,
        file: &Path,
        events: &[FrdEvent<'_>],
        verdicts: &mut Vec<Verdict>,
    ) -> std::result::Result<(), FuError> {
        let _call = self.beat.call();
        self.inner.select_file(file, events, verdicts)
    }

    fn reads_file(&self) -> bool {
        self.inner.reads_file()
    }

    fn batch_events(&self) -> usize {
        self.inner.batch_events()
    }
}

/// The file of `tessera fu --alive-file`, written every [`FU_ALIVE_INTERVAL`] by a thread of
/// its own until dropped, then removed.
struct AliveFile {
    path: PathBuf,
    beat: Arc<HltBeat>,
    stop: Arc<AtomicBool>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl AliveFile {
    /// Writes the file at once (a directory that cannot take it is an error now, not a probe
    /// that fails later), then every interval.
    fn start(path: &Path, run: u32) -> Result<AliveFile> {
        let beat = Arc::new(HltBeat::default());
        let pid = std::process::id();
        write_alive(path, &beat.document(pid, run, now_unix_ms()))
            .with_context(|| format!("--alive-file {}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (path, beat, stop) = (path.to_owned(), beat.clone(), stop.clone());
            std::thread::Builder::new()
                .name("fu-alive".into())
                .spawn(move || {
                    let mut failing = false;
                    loop {
                        std::thread::park_timeout(FU_ALIVE_INTERVAL);
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        match write_alive(&path, &beat.document(pid, run, now_unix_ms())) {
                            Ok(()) => failing = false,
                            Err(e) if !std::mem::replace(&mut failing, true) => {
                                tracing::warn!("{}: not written: {e:#}", path.display());
                            }
                            Err(_) => {}
                        }
                    }
                })
                .context("starting the alive file's thread")?
        };
        Ok(AliveFile { path: path.to_owned(), beat, stop, writer: Some(writer) })
    }
}

impl Drop for AliveFile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(writer) = self.writer.take() {
            writer.thread().unpark();
            let _ = writer.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `doc` into `path` atomically (a probe never reads half a file).
fn write_alive(path: &Path, doc: &serde_json::Value) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, doc.to_string()).with_context(|| format!("writing {}", PathBuf::from(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))
}

/// The options of `tessera fu-alive`.
#[derive(clap::Args, Debug, Clone)]
pub struct FuAliveArgs {
    /// The file the FU keeps (`tessera fu --alive-file FILE`).
    #[arg(long, value_name = "FILE")]
    pub file: PathBuf,
    /// Also require that the HLT has started (a readiness probe).
    #[arg(long)]
    pub ready: bool,
    /// The file may be this old, in s: older, the FU process is frozen or gone.
    #[arg(long, value_name = "S", default_value_t = FU_ALIVE_STALE_S)]
    pub max_age_s: u64,
    /// One HLT call (or the HLT's start) may last this long, in s: longer, the HLT hangs.
    #[arg(long, value_name = "S", default_value_t = FU_HLT_CALL_LIMIT_S)]
    pub max_hlt_s: u64,
}

/// `tessera fu-alive`: status 0 and what the FU is doing while it is alive (and with `--ready`,
/// its HLT has started); status 1 and why not otherwise.
pub fn fu_alive(args: &FuAliveArgs) -> Result<std::process::ExitCode> {
    Ok(match check_alive(args, now_unix_ms()) {
        Ok(state) => {
            say!("FU alive: {state}");
            std::process::ExitCode::SUCCESS
        }
        Err(problem) => {
            say!("FU {}: {problem}", if args.ready { "not ready" } else { "not alive" });
            std::process::ExitCode::from(1)
        }
    })
}

/// What [`fu_alive`] judges at `now` (ms since the Unix epoch): what the FU does, or why it is
/// not alive.
fn check_alive(args: &FuAliveArgs, now: u64) -> std::result::Result<String, String> {
    let path = args.file.display();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("{path}: {e} (no FU runs with --alive-file {path})"))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let ms = |key: &str| doc[key].as_u64();
    let updated = ms("updated_unix_ms").ok_or_else(|| format!("{path}: no updated_unix_ms"))?;
    let age = now.saturating_sub(updated) / 1000;
    if age > args.max_age_s {
        return Err(format!("{path} not written for {age} s (at most {} s): the FU is frozen or gone", args.max_age_s));
    }
    if args.ready && doc["hlt_started"] != true {
        return Err("its HLT is starting".into());
    }
    match ms("hlt_call_since_unix_ms") {
        Some(since) => {
            let busy = now.saturating_sub(since) / 1000;
            let what = if doc["hlt_started"] == true { "one HLT call" } else { "the HLT's start" };
            if busy > args.max_hlt_s {
                return Err(format!("{what} has lasted {busy} s (at most {} s): the HLT hangs", args.max_hlt_s));
            }
            Ok(format!("on {what} for {busy} s"))
        }
        None => Ok("not on an HLT call".into()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tessera_fu::StreamSet;

    fn alive_args(file: &Path) -> FuAliveArgs {
        FuAliveArgs { file: file.to_owned(), ready: false, max_age_s: FU_ALIVE_STALE_S, max_hlt_s: FU_HLT_CALL_LIMIT_S }
    }

    #[test]
    fn fu_alive_fails_on_a_missing_stale_or_hung_file_and_passes_on_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fu-alive.json");
        let args = alive_args(&path);
        let now = now_unix_ms();
        let missing = check_alive(&args, now).unwrap_err();
        assert!(missing.contains("no FU runs with --alive-file"), "{missing}");
        assert_eq!(fu_alive(&args).unwrap(), std::process::ExitCode::from(1));
        std::fs::write(&path, "{\"updated_").unwrap();
        assert!(check_alive(&args, now).is_err(), "half a file");

        let beat = HltBeat::default();
        write_alive(&path, &beat.document(1, 7, now)).unwrap();
        assert_eq!(check_alive(&args, now).as_deref(), Ok("not on an HLT call"));
        assert_eq!(fu_alive(&args).unwrap(), std::process::ExitCode::SUCCESS);
        // Not written for longer than the bound: frozen.
        assert!(check_alive(&args, now + FU_ALIVE_STALE_S * 1000).is_ok());
        let stale = check_alive(&args, now + (FU_ALIVE_STALE_S + 1) * 1000).unwrap_err();
        assert!(stale.contains("frozen"), "{stale}");
        // Ready only once the HLT has started.
        let ready = FuAliveArgs { ready: true, ..args.clone() };
        assert!(check_alive(&ready, now).unwrap_err().contains("starting"));
        beat.started.store(true, Ordering::SeqCst);
        write_alive(&path, &beat.document(1, 7, now)).unwrap();
        assert!(check_alive(&ready, now).is_ok());

        // On an HLT call: alive while the call is no longer than the bound, written every second.
        let call = beat.call();
        let since = beat.call_since_unix_ms.load(Ordering::SeqCst);
        let later = |s: u64| since + s * 1000;
        write_alive(&path, &beat.document(1, 7, later(FU_HLT_CALL_LIMIT_S))).unwrap();
        let long = check_alive(&args, later(FU_HLT_CALL_LIMIT_S)).unwrap();
        assert_eq!(long, format!("on one HLT call for {FU_HLT_CALL_LIMIT_S} s"));
        write_alive(&path, &beat.document(1, 7, later(FU_HLT_CALL_LIMIT_S + 1))).unwrap();
        let hung = check_alive(&args, later(FU_HLT_CALL_LIMIT_S + 1)).unwrap_err();
        assert!(hung.contains("the HLT hangs"), "{hung}");
        assert!(check_alive(&FuAliveArgs { max_hlt_s: 600, ..args.clone() }, later(FU_HLT_CALL_LIMIT_S + 1)).is_ok());
        drop(call);
        write_alive(&path, &beat.document(1, 7, later(FU_HLT_CALL_LIMIT_S + 1))).unwrap();
        assert_eq!(check_alive(&args, later(FU_HLT_CALL_LIMIT_S + 1)).unwrap(), "not on an HLT call");
    }

    /// An HLT that, on its call, waits until the alive file shows the call.
    struct Watched {
        streams: Vec<String>,
        file: PathBuf,
        seen: Option<serde_json::Value>,
    }

    impl Hlt for Watched {
        fn streams(&self) -> &[String] {
            &self.streams
        }

        fn select_file(
            &mut self,
            _: &Path,
            events: &[FrdEvent<'_>],
            verdicts: &mut Vec<Verdict>,
        ) -> std::result::Result<(), FuError> {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let text = std::fs::read_to_string(&self.file).unwrap();
                let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
                if doc["hlt_call_since_unix_ms"].is_u64() {
                    self.seen = Some(doc);
                    break;
                }
                assert!(Instant::now() < deadline, "the call never shows: {doc}");
                std::thread::sleep(Duration::from_millis(50));
            }
            verdicts.extend(events.iter().map(|_| Verdict::Streams(StreamSet::NONE)));
            Ok(())
        }
    }

    #[test]
    fn the_alive_file_shows_the_hlt_call_in_progress_and_goes_with_the_fu() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fu-alive.json");
        let alive = AliveFile::start(&path, 7).unwrap();
        let args = FuAliveArgs { ready: true, ..alive_args(&path) };
        assert!(check_alive(&args, now_unix_ms()).unwrap_err().contains("starting"), "written at once");
        alive.beat.started.store(true, Ordering::SeqCst);
        let mut inner = Watched { streams: vec!["A".into()], file: path.clone(), seen: None };
        let mut hlt = WatchedHlt { inner: &mut inner, beat: alive.beat.clone() };
        let mut verdicts = Vec::new();
        hlt.select_file(Path::new("x.raw"), &[], &mut verdicts).unwrap();
        assert_eq!(hlt.streams(), ["A"]);
        let seen = inner.seen.take().unwrap();
        assert_eq!((seen["pid"].as_u64(), seen["run"].as_u64()), (Some(u64::from(std::process::id())), Some(7)));
        let since = seen["hlt_call_since_unix_ms"].as_u64().unwrap();
        std::fs::write(&path, seen.to_string()).unwrap();
        assert!(check_alive(&args, since).unwrap().starts_with("on one HLT call for"));
        // Judged as if the call had hung, with the file still being written.
        let hung = FuAliveArgs { max_age_s: 3600, ..args.clone() };
        assert!(check_alive(&hung, since + (FU_HLT_CALL_LIMIT_S + 1) * 1000).unwrap_err().contains("hangs"));
        // Once the call is over, the next write says so.
        let deadline = Instant::now() + Duration::from_secs(20);
        while check_alive(&args, now_unix_ms()).as_deref() != Ok("not on an HLT call") {
            assert!(Instant::now() < deadline, "{:?}", check_alive(&args, now_unix_ms()));
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(alive);
        assert!(!path.exists(), "removed when the FU ends");
    }

    #[test]
    fn the_rendered_fu_deployment_runs_and_probes_with_this_command_line() {
        let opts = tessera_deploy::KubernetesOptions {
            namespace: "daq".into(),
            image: "tessera:test".into(),
            base_port: 9100,
            link_key_hex: "00".repeat(32),
            control_token: "token".into(),
            storage_class: None,
            output_size: "1Gi".into(),
            menu: None,
            bu_storage: tessera_deploy::BuStorage::RamDisk,
            pipestream: None,
        };
        let docs = tessera_deploy::kubernetes(&SystemConfig::default(), &opts).unwrap();
        let fu = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let container = &fu["spec"]["template"]["spec"]["containers"][0];
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect()
        };
        let args = std::iter::once("tessera".to_owned()).chain(strings(&container["args"]));
        let crate::Command::Fu(fu) = crate::Cli::try_parse_from(args).unwrap().command else { panic!("not fu") };
        let file = fu.alive_file.expect("an alive file");
        for (probe, ready) in [("readinessProbe", true), ("livenessProbe", false)] {
            let command = strings(&container[probe]["exec"]["command"]);
            assert_eq!(command[0], "/usr/local/bin/tessera");
            let crate::Command::FuAlive(check) = crate::Cli::try_parse_from(&command).unwrap().command else {
                panic!("not fu-alive: {command:?}")
            };
            assert_eq!((&check.file, check.ready, check.max_age_s), (&file, ready, FU_ALIVE_STALE_S));
            let bound = if ready { 90 } else { FU_HLT_CALL_LIMIT_S };
            assert_eq!(check.max_hlt_s, bound, "{probe}");
        }
    }
}
