//! The filter farm on the command line: `tessera fu` (one FU process), `tessera merge` (the
//! mergers of a farm), and the farm that `tessera run` starts behind its BUs.

use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_formats::bookkeeping::{FuOutputDoc, adler32};
use tessera_formats::names::{self, BuFileName, Producer, StreamFileName};
use tessera_fu::claim::host_name;
use tessera_fu::menu::Menu;
use tessera_fu::merge::{MacroMerger, MicroMerger, MiniMerger, STORAGE_PRODUCER, with_error_stream};
use tessera_fu::process::{FuConfig, FuReport, run_fu};
use tessera_fu::remote::BuAccess;
use tessera_fu::{Hlt, MenuHlt};
use tessera_rundir::resources::{now_unix_ms, read_summaries};

/// The options of `tessera fu`.
#[derive(clap::Args, Debug, Clone)]
pub struct FuArgs {
    /// The BU's directory, holding `runRRRRRR/` (on this host or a shared file system).
    #[arg(long, conflicts_with = "broker")]
    pub bu_dir: Option<PathBuf>,
    /// Or the BU's file broker, `HOST:PORT` (a host name or an IP address), for a host that
    /// does not see the BU's directory.
    #[arg(long, value_parser = crate::socket_address)]
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

/// The HLT an FU runs: the menu (a file, or the embedded default), or an external program.
pub fn make_hlt(menu: Option<&Path>, exec: &[String]) -> Result<Box<dyn Hlt>> {
    if !exec.is_empty() {
        let hlt = tessera_fu::exec::ExecHlt::start(tessera_fu::exec::ExecConfig::new(exec.to_vec()))
            .with_context(|| format!("starting the HLT {}", exec.join(" ")))?;
        return Ok(Box::new(hlt));
    }
    let menu = match menu {
        Some(path) => Menu::load(path)?,
        None => Menu::default(),
    };
    Ok(Box::new(MenuHlt::new(&menu)?))
}

/// The streams of a system's HLT, which also checks that it can run: the menu is read, or the
/// external program started (it says which streams it has when it starts).
pub fn system_streams(cfg: &SystemConfig) -> Result<Vec<String>> {
    let key = if cfg.fu.exec.is_empty() { "fu.menu" } else { "fu.exec" };
    Ok(make_hlt(cfg.fu.menu.as_deref(), &cfg.fu.exec).with_context(|| key.to_owned())?.streams().to_vec())
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
    #[arg(long, value_parser = crate::socket_address)]
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
        "error_events": report.error_events,
        "accepted": report.accepted,
        "lumi_sections": report.lumi_sections,
        "returned_claims": report.returned_claims,
        "taken_back": report.taken_back,
        "early_parts": report.early_parts,
        "reasons": report.reasons,
        "ledger_events": report.ledger_events,
    })
}

/// Where the farm of a `tessera run` writes, under the run's output directory.
#[derive(Debug, Clone)]
pub struct FarmDirs {
    /// `<output>/fu/<bu>`: the FU processes' outputs of each BU.
    pub fu: Vec<PathBuf>,
    /// `<output>/merge/<bu>`: the micro mergers' outputs of each BU.
    pub mini: Vec<PathBuf>,
    /// `<output>/storage`: the final files.
    pub storage: PathBuf,
}

impl FarmDirs {
    /// The directories of `cfg`'s farm under `output`.
    pub fn of(cfg: &SystemConfig, output: &Path) -> Self {
        FarmDirs {
            fu: cfg.bus.iter().map(|b| output.join("fu").join(&b.name)).collect(),
            mini: cfg.bus.iter().map(|b| output.join("merge").join(&b.name)).collect(),
            storage: output.join("storage"),
        }
    }
}

/// How long the FUs of a run cut short have to leave after SIGTERM before they are killed.
pub const CUT_SHORT_GRACE: Duration = Duration::from_secs(5);

/// How long the mergers wait after a full disk before they try again.
const MERGER_DISK_FULL_PAUSE: Duration = Duration::from_secs(1);

/// The FU node name of a BU's FUs in `tessera run`: they all run on this host.
const NODE: &str = "node0";

/// The arguments of `tessera` for one FU process of BU `i`: it reads the BU's directory, or
/// `broker` (`HOST:PORT` of the BU's file broker) from another host.
pub fn fu_args(cfg: &SystemConfig, i: usize, output: &Path, broker: Option<String>) -> Vec<String> {
    let dirs = FarmDirs::of(cfg, output);
    let mut args = vec!["fu".to_owned()];
    match broker {
        Some(address) => args.extend(["--broker".to_owned(), address]),
        None => args.extend(["--bu-dir".to_owned(), cfg.bu_directory(i, output).display().to_string()]),
    }
    args.extend([
        "--output".to_owned(),
        dirs.fu[i].display().to_string(),
        "--run".to_owned(),
        cfg.run.number.to_string(),
        "--poll-ms".to_owned(),
        cfg.fu.poll_interval_ms.to_string(),
    ]);
    if let Some(menu) = &cfg.fu.menu {
        args.extend(["--menu".to_owned(), menu.display().to_string()]);
    }
    args.extend(cfg.fu.exec.iter().map(|arg| format!("--exec={arg}")));
    args
}

/// The filter farm of a `tessera run`: FU processes per BU and a merger thread.
pub struct Farm {
    fus: Vec<FuSlot>,
    /// FU processes that ended badly and were started again: their names and why. Their
    /// published work is in the ledger ([`tessera_fu::output::ledger_events`]); the rest is
    /// taken over by the others.
    replaced: Vec<(String, String)>,
    max_restarts: u32,
    merger: Option<JoinHandle<Result<()>>>,
    stop: Arc<AtomicBool>,
    /// Readers only: per BU, its directory and the arguments of a reader of it, to start
    /// a late reader when files come back to the pool after every reader has ended.
    late: Vec<LateReaders>,
    /// The streams, the error stream last.
    pub streams: Vec<String>,
    /// Where it writes.
    pub dirs: FarmDirs,
}

/// Late readers of one BU: a reader's lumi section only moves forward, so a file that comes
/// back to the pool (its reader died, and its lease ran out) after the others have passed its
/// section, or have ended, is for a new reader.
struct LateReaders {
    bu: String,
    bu_dir: PathBuf,
    run: u32,
    args: Vec<String>,
    started: u32,
}

/// Late readers started per BU at most.
const MAX_LATE_READERS: u32 = 4;

impl LateReaders {
    /// The BU's run directory now, if it can be read.
    fn listing(&self) -> Option<tessera_fu::claim::BuRunState> {
        tessera_fu::claim::Claimer::new(&self.bu_dir, self.run, &host_name(), std::process::id()).ok()?.listing().ok()
    }
}

/// One FU process of the farm and how to start it again.
struct FuSlot {
    name: String,
    args: Vec<String>,
    log: PathBuf,
    child: Child,
    restarts: u32,
}

impl FuSlot {
    /// Starts `tessera` with `args` as one FU process, its standard error appended to `log`.
    fn spawn(args: &[String], log: &Path) -> Result<Child> {
        let exe = std::env::current_exe().context("finding this program to start the FUs")?;
        let mut cmd = Command::new(exe);
        cmd.args(args).args(["--parent-pid", &std::process::id().to_string()]);
        // A group of its own: a terminal's Ctrl-C goes to `tessera run` alone, which drains the
        // FUs rather than losing them mid-file.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        Ok(cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn()?)
    }
}

/// What the farm did.
#[derive(Debug, Default)]
pub struct FarmOutcome {
    /// Per FU process: its name and its report, or why there is none.
    pub fus: Vec<(String, Result<serde_json::Value, String>)>,
    /// FU processes that ended badly and were started again, and why.
    pub replaced: Vec<(String, String)>,
    /// Readers (`fu.process: reader`): what each BU's broker counted of the files they read.
    pub read_through_brokers: Option<Vec<tessera_fu::broker::BrokerTally>>,
    /// The mergers' error, if they failed or did not finish.
    pub merger_error: Option<String>,
    /// Whether it was stopped at once rather than drained ([`Farm::finish`]).
    pub cut_short: bool,
}

impl Farm {
    /// Starts `fu.processes_per_bu` FU processes per BU (this program, `tessera fu`) and the
    /// merger thread; `streams` are the HLT's ([`system_streams`]).
    pub fn start(cfg: &SystemConfig, output: &Path, streams: &[String]) -> Result<Farm> {
        let fu = &cfg.fu;
        let dirs = FarmDirs::of(cfg, output);
        let mut fus = Vec::new();
        for (i, bu) in cfg.bus.iter().enumerate() {
            fs::create_dir_all(&dirs.fu[i]).with_context(|| format!("creating {}", dirs.fu[i].display()))?;
            for k in 0..fu.processes_per_bu {
                let log = dirs.fu[i].join(format!("fu{k}.log"));
                let args = fu_args(cfg, i, output, None);
                let child = FuSlot::spawn(&args, &log).with_context(|| format!("starting FU {k} of {}", bu.name))?;
                fus.push(FuSlot { name: format!("{}/fu{k}", bu.name), args, log, child, restarts: 0 });
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let merger = if fu.merge {
            let mergers = Mergers::new(cfg, output, &dirs, streams);
            let (flag, poll) = (stop.clone(), Duration::from_millis(fu.poll_interval_ms.max(1)));
            let thread = std::thread::Builder::new()
                .name("mergers".into())
                .spawn(move || mergers.run(&flag, poll, None))
                .context("starting the mergers")?;
            Some(thread)
        } else {
            None
        };
        Ok(Farm {
            fus,
            replaced: Vec::new(),
            max_restarts: cfg.controller.max_restarts,
            merger,
            stop,
            late: Vec::new(),
            streams: with_error_stream(streams),
            dirs,
        })
    }

    /// Starts `fu.processes_per_bu` readers per BU (`tessera reader`, `fu.process: reader`),
    /// each reading BU `i`'s files through its broker at `brokers[i]`; nothing is merged.
    pub fn start_readers(cfg: &SystemConfig, output: &Path, brokers: &[std::net::SocketAddr]) -> Result<Farm> {
        let dirs = FarmDirs::of(cfg, output);
        let mut fus = Vec::new();
        let mut late = Vec::new();
        for (i, (bu, broker)) in cfg.bus.iter().zip(brokers).enumerate() {
            fs::create_dir_all(&dirs.fu[i]).with_context(|| format!("creating {}", dirs.fu[i].display()))?;
            let bu_dir = cfg.bu_directory(i, output);
            let args: Vec<String> = [
                "reader".to_owned(),
                "--broker".to_owned(),
                broker.to_string(),
                "--bu-dir".to_owned(),
                bu_dir.display().to_string(),
                "--run".to_owned(),
                cfg.run.number.to_string(),
            ]
            .into();
            for k in 0..cfg.fu.processes_per_bu {
                let log = dirs.fu[i].join(format!("reader{k}.log"));
                let child =
                    FuSlot::spawn(&args, &log).with_context(|| format!("starting reader {k} of {}", bu.name))?;
                fus.push(FuSlot {
                    name: format!("{}/reader{k}", bu.name),
                    args: args.clone(),
                    log,
                    child,
                    restarts: 0,
                });
            }
            late.push(LateReaders { bu: bu.name.clone(), bu_dir, run: cfg.run.number, args, started: 0 });
        }
        Ok(Farm {
            fus,
            replaced: Vec::new(),
            max_restarts: cfg.controller.max_restarts,
            merger: None,
            stop: Arc::new(AtomicBool::new(false)),
            late,
            streams: Vec::new(),
            dirs,
        })
    }

    /// Readers only: starts a late reader for a BU whose readers have all ended while files
    /// of it are back in the pool (see [`LateReaders`]).
    fn start_late_readers(&mut self) {
        for (i, late) in self.late.iter_mut().enumerate() {
            let prefix = format!("{}/", late.bu);
            let all_ended = self
                .fus
                .iter_mut()
                .filter(|s| s.name.starts_with(&prefix))
                .all(|s| matches!(s.child.try_wait(), Ok(Some(_))));
            if !all_ended || late.started >= MAX_LATE_READERS {
                continue;
            }
            if late.listing().is_none_or(|state| state.unclaimed.is_empty()) {
                continue;
            }
            late.started += 1;
            let name = format!("{}late{}", prefix, late.started);
            let log = self.dirs.fu[i].join(format!("late{}.log", late.started));
            match FuSlot::spawn(&late.args, &log) {
                Ok(child) => {
                    tracing::warn!(unit = %late.bu, "{}: files came back to the pool after its readers ended: {name} reads them", late.bu);
                    self.fus.push(FuSlot { name, args: late.args.clone(), log, child, restarts: 0 });
                }
                Err(e) => tracing::error!(unit = %late.bu, "{}: could not start a late reader: {e:#}", late.bu),
            }
        }
    }

    /// Starts again every FU process that ended badly (killed, or failed), at most
    /// `controller.max_restarts` times each, as the controller does on agents: its claims go
    /// back to the pool, its published work stays, and the new process takes its place. A
    /// process that ended well is left for [`Farm::finish`] to read.
    pub fn restart_failed(&mut self) {
        for slot in &mut self.fus {
            let Ok(Some(status)) = slot.child.try_wait() else { continue };
            if status.success() || slot.restarts >= self.max_restarts {
                continue;
            }
            let why = format!("{status} (pid {}; see {})", slot.child.id(), slot.log.display());
            match FuSlot::spawn(&slot.args, &slot.log) {
                Ok(child) => {
                    slot.restarts += 1;
                    tracing::warn!(
                        unit = %slot.name,
                        "FU {}: {why}; started again as pid {} ({} of at most {} restarts)",
                        slot.name,
                        child.id(),
                        slot.restarts,
                        self.max_restarts
                    );
                    self.replaced.push((slot.name.clone(), why));
                    slot.child = child;
                }
                Err(e) => {
                    tracing::error!(unit = %slot.name, "FU {}: {why}; could not start it again: {e:#}", slot.name)
                }
            }
        }
    }

    /// Waits up to `timeout` for the FUs and the mergers to finish the run (the BUs have ended
    /// it), then stops what is left. `tick` is called on every pass (every 20 ms; it may refresh
    /// figures); once it returns true (an operator's second Ctrl-C), the farm is stopped at once: every FU gets SIGTERM and leaves within
    /// [`CUT_SHORT_GRACE`] with its published outputs whole (its claims return to the pool), or
    /// is killed; the mergers stop after their current step.
    pub fn finish(mut self, timeout: Duration, mut tick: impl FnMut() -> bool) -> FarmOutcome {
        let mut deadline = Instant::now() + timeout;
        let mut cut = false;
        // Bounded by the deadline, which a cut only brings closer.
        loop {
            if !cut {
                self.restart_failed();
                self.start_late_readers();
            }
            // Readers delete their files: a file still claimed by a dead reader waits for its
            // lease, then for a late reader.
            let fus_done = self.fus.iter_mut().all(|slot| matches!(slot.child.try_wait(), Ok(Some(_))))
                && self.late.iter().all(|l| l.listing().is_none_or(|s| s.lumi_sections_with_files.is_empty()));
            let mergers_done = self.merger.as_ref().is_none_or(JoinHandle::is_finished);
            if (fus_done && mergers_done) || Instant::now() >= deadline {
                break;
            }
            if tick() && !cut {
                cut = true;
                self.stop.store(true, Ordering::SeqCst);
                deadline = deadline.min(Instant::now() + CUT_SHORT_GRACE);
                for slot in &mut self.fus {
                    if matches!(slot.child.try_wait(), Ok(None))
                        && let Some(pid) = rustix::process::Pid::from_raw(slot.child.id() as i32)
                    {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut outcome = FarmOutcome { replaced: std::mem::take(&mut self.replaced), ..FarmOutcome::default() };
        for FuSlot { name, mut child, log, .. } in std::mem::take(&mut self.fus) {
            let status = child.try_wait().ok().flatten().or_else(|| {
                let _ = child.kill();
                let _ = child.wait();
                None
            });
            let mut out = String::new();
            if let Some(mut stdout) = child.stdout.take() {
                let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
            }
            // The end of its log says why it failed.
            let last = || {
                let text = fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().rev().take(3).collect();
                lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
            };
            let result = match status {
                Some(s) if s.success() => serde_json::from_str(out.trim())
                    .map_err(|e| format!("unreadable report ({e}); see {}", log.display())),
                Some(s) => Err(format!("exited with {s}: {}; see {}", last(), log.display())),
                None if cut => Err(format!(
                    "killed: it did not leave within {CUT_SHORT_GRACE:?} of SIGTERM; see {}",
                    log.display()
                )),
                None => Err(format!("did not finish in {timeout:?}; stopped: {}; see {}", last(), log.display())),
            };
            outcome.fus.push((name, result));
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(merger) = self.merger.take() {
            outcome.merger_error = match merger.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("{e:#}")),
                Err(_) => Some("the merger thread panicked".into()),
            };
        }
        outcome.cut_short = cut;
        outcome
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for slot in &mut self.fus {
            let _ = slot.child.kill();
            let _ = slot.child.wait();
        }
    }
}

/// Every merger of a farm, run in turn by one thread.
struct Mergers {
    micro: Vec<MicroMerger>,
    mini: Vec<MiniMerger>,
    macro_merger: MacroMerger,
}

impl Mergers {
    fn new(cfg: &SystemConfig, output: &Path, dirs: &FarmDirs, streams: &[String]) -> Self {
        let run = cfg.run.number;
        let host = host_name();
        let micro = (0..cfg.bus.len())
            .map(|i| MicroMerger {
                bu: BuAccess::Directory(cfg.bu_directory(i, output)),
                fu_output_dir: dirs.fu[i].clone(),
                mini_dir: dirs.mini[i].clone(),
                node: NODE.into(),
                run,
                streams: streams.to_vec(),
                host: host.clone(),
            })
            .collect();
        let mini = (0..cfg.bus.len())
            .map(|i| MiniMerger {
                bu_dir: cfg.bu_directory(i, output),
                mini_dir: dirs.mini[i].clone(),
                storage_dir: dirs.storage.clone(),
                bu: cfg.bus[i].name.clone(),
                nodes: vec![NODE.into()],
                run,
                streams: streams.to_vec(),
            })
            .collect();
        let macro_merger = MacroMerger {
            storage_dir: dirs.storage.clone(),
            bus: cfg.bus.iter().map(|b| b.name.clone()).collect(),
            run,
            streams: streams.to_vec(),
        };
        Mergers { micro, mini, macro_merger }
    }

    /// Passes until the macro merger has ended the run, `stop` is set, or `deadline` passes.
    fn run(&self, stop: &AtomicBool, poll: Duration, deadline: Option<Instant>) -> Result<()> {
        let mut full_since: Option<Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                bail!("the run was not merged in time");
            }
            match self.pass() {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    full_since = None;
                    std::thread::sleep(poll);
                }
                // Every merger step can be redone: wait for room and try again.
                Err(e) if e.downcast_ref::<tessera_fu::FuError>().is_some_and(tessera_fu::FuError::is_disk_full) => {
                    let since = *full_since.get_or_insert_with(Instant::now);
                    tracing::warn!("mergers: DISK FULL for {:.0} s: {e:#}; waiting", since.elapsed().as_secs_f64());
                    std::thread::sleep(MERGER_DISK_FULL_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
        bail!("stopped before the run was merged")
    }

    /// One pass of every merger; true once the macro merger has ended the run.
    fn pass(&self) -> Result<bool> {
        for m in &self.micro {
            m.pass().with_context(|| format!("micro merger of {}", m.fu_output_dir.display()))?;
        }
        for m in &self.mini {
            m.pass().with_context(|| format!("mini merger of {}", m.bu))?;
        }
        Ok(self.macro_merger.pass().context("macro merger")?.finished)
    }
}

/// The chain's conservation: per lumi section, the events the BUs built against the events
/// processed in storage, and what storage holds per stream, checked against the files.
#[derive(Debug, Default)]
pub struct ChainCheck {
    /// Lumi section → (built by the BUs, processed according to storage).
    pub per_ls: BTreeMap<u32, (u64, u64)>,
    /// Stream → events accepted.
    pub accepted: BTreeMap<String, u64>,
    /// Final data files and their bytes.
    pub files: u64,
    /// Bytes in final data files.
    pub bytes: u64,
    /// What does not add up.
    pub problems: Vec<String>,
}

impl ChainCheck {
    /// Whether every built event was processed exactly once and storage matches its JSON.
    pub fn holds(&self) -> bool {
        self.problems.is_empty() && self.per_ls.values().all(|(b, p)| b == p)
    }

    /// Built and processed over all lumi sections.
    pub fn totals(&self) -> (u64, u64) {
        self.per_ls.values().fold((0, 0), |(b, p), (x, y)| (b + x, p + y))
    }
}

/// Checks storage against the BUs' bookkeeping: for every lumi section, the sum of the BUs'
/// NEvents equals Processed in every stream's final JSON; every final file's size, event count
/// and Adler-32 match its JSON (the files are read here, once).
pub fn check_chain(bu_run_dirs: &[PathBuf], storage_run_dir: &Path, run: u32, streams: &[String]) -> ChainCheck {
    let mut check = ChainCheck::default();
    for dir in bu_run_dirs {
        match tessera_fu::merge::bu_lumi_sections(dir, run) {
            Ok((ended, _)) => {
                for (ls, eols) in ended {
                    check.per_ls.entry(ls).or_default().0 += eols.events;
                }
            }
            Err(e) => check.problems.push(format!("{}: {e}", dir.display())),
        }
    }
    if bu_run_dirs.is_empty() {
        // Without the BUs' bookkeeping, the lumi sections are those storage holds.
        for name in fs::read_dir(storage_run_dir).into_iter().flatten().flatten() {
            if let Ok(n) = StreamFileName::parse(&name.file_name().to_string_lossy())
                && n.run == run
            {
                check.per_ls.entry(n.ls).or_default();
            }
        }
    }
    let lumis: Vec<u32> = check.per_ls.keys().copied().collect();
    for ls in lumis {
        for (k, stream) in streams.iter().enumerate() {
            let name = |ext: &str| {
                StreamFileName {
                    run,
                    ls,
                    stream: stream.clone(),
                    producer: Producer::Named(STORAGE_PRODUCER.into()),
                    ext: ext.into(),
                }
                .to_string()
            };
            let json = storage_run_dir.join(name("jsn"));
            let doc = match fs::read_to_string(&json)
                .map_err(|e| e.to_string())
                .and_then(|t| FuOutputDoc::parse(&t).map_err(|e| e.to_string()))
            {
                Ok(doc) => doc,
                Err(e) => {
                    check.problems.push(format!("{}: {e}", json.display()));
                    continue;
                }
            };
            if k == 0 {
                check.per_ls.entry(ls).or_default().1 = doc.processed;
            } else if doc.processed != check.per_ls[&ls].1 {
                check.problems.push(format!(
                    "{}: Processed {} but {} says {}",
                    json.display(),
                    doc.processed,
                    streams[0],
                    check.per_ls[&ls].1
                ));
            }
            *check.accepted.entry(stream.clone()).or_default() += doc.accepted;
            if doc.file_list.is_empty() {
                if doc.accepted != 0 {
                    check.problems.push(format!("{}: {} accepted but no file", json.display(), doc.accepted));
                }
                continue;
            }
            check_data_file(storage_run_dir, &doc, &mut check);
        }
    }
    if !storage_run_dir.join(BuFileName::EndOfRun { run }.to_string()).exists() {
        check.problems.push(format!("{}: no EoR", storage_run_dir.display()));
    }
    check
}

/// The storage run directory of a run.
pub fn storage_run_dir(dirs: &FarmDirs, run: u32) -> PathBuf {
    dirs.storage.join(names::run_dir_name(run))
}

/// `tessera verify` of a storage run directory: the streams it holds (the error stream last),
/// checked as [`check_chain`] does; with no BU run directories the completeness proof is left
/// out (built is taken to be what storage says was processed).
pub fn verify_storage(storage_run_dir: &Path, built: &[PathBuf]) -> Result<ChainCheck> {
    let name = storage_run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let run = names::parse_run_dir_name(&name).with_context(|| format!("{}", storage_run_dir.display()))?;
    let mut streams: Vec<String> = Vec::new();
    for entry in fs::read_dir(storage_run_dir).with_context(|| format!("reading {}", storage_run_dir.display()))? {
        if let Ok(n) = StreamFileName::parse(&entry?.file_name().to_string_lossy())
            && n.run == run
            && !streams.contains(&n.stream)
        {
            streams.push(n.stream);
        }
    }
    streams.sort_by_key(|s| (s == tessera_fu::ERROR_STREAM, s.clone()));
    if streams.is_empty() {
        bail!("{}: no final stream files: not a storage run directory", storage_run_dir.display());
    }
    let mut check = check_chain(built, storage_run_dir, run, &streams);
    if built.is_empty() {
        for (b, p) in check.per_ls.values_mut() {
            *b = *p;
        }
    }
    Ok(check)
}

/// Whether `dir` is a storage run directory (it holds final files of the macro merger).
pub fn is_storage_run_dir(dir: &Path) -> bool {
    fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        StreamFileName::parse(&e.file_name().to_string_lossy())
            .is_ok_and(|n| n.producer == Producer::Named(STORAGE_PRODUCER.into()))
    })
}

/// Starts the file broker of BU `i` if the system file gives it a port, or on a free port of the
/// BU's host if it is `required` (readers read through it).
pub fn start_broker(
    cfg: &SystemConfig,
    i: usize,
    output: &Path,
    required: bool,
) -> Result<Option<tessera_fu::broker::Broker>> {
    let bu = &cfg.bus[i];
    let port = match (bu.broker_port, required) {
        (Some(port), _) => port,
        (None, true) => 0,
        (None, false) => return Ok(None),
    };
    let listen = std::net::ToSocketAddrs::to_socket_addrs(&(bu.host.as_str(), port))
        .with_context(|| format!("{}: cannot resolve {}:{port} for its file broker", bu.name, bu.host))?
        .next()
        .with_context(|| format!("{}: {}:{port} resolves to nothing", bu.name, bu.host))?;
    let config = tessera_fu::broker::BrokerConfig {
        listen,
        lease: Duration::from_secs(cfg.fu.claim_lease_s),
        max_connections: cfg.fu.broker_max_connections as usize,
        ..tessera_fu::broker::BrokerConfig::new(cfg.bu_directory(i, output), cfg.run.number)
    };
    let broker = tessera_fu::broker::Broker::start(config)
        .with_context(|| format!("{}: cannot serve its file broker on {listen}", bu.name))?;
    tracing::info!(unit = %bu.name, address = %broker.local_addr(), "{}: file broker on http://{}", bu.name, broker.local_addr());
    Ok(Some(broker))
}

/// Waits, at most `timeout`, until every file of the BU's ended run has been processed and
/// removed, so that remote FUs can finish through the broker before it goes; then, within the
/// same `timeout`, until no FU's resource summary of the run is younger than `stale_after`, so
/// that the FUs, which leave after their last file, can remove theirs through the broker too (a
/// summary no longer renewed stops counting). It stops waiting as soon as `cut` says so (an
/// operator's stop). Whether every file was processed.
pub fn wait_drained(bu_dir: &Path, run: u32, stale_after: Duration, timeout: Duration, cut: &dyn Fn() -> bool) -> bool {
    let claimer = match tessera_fu::claim::Claimer::new(bu_dir, run, &host_name(), std::process::id()) {
        Ok(c) => c,
        Err(_) => return false,
    };
    let deadline = Instant::now() + timeout;
    loop {
        match claimer.listing() {
            Ok(state) if state.ended && state.lumi_sections_with_files.is_empty() => break,
            Err(_) => return false,
            _ if Instant::now() >= deadline || cut() => return false,
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    let stale_after_ms = u64::try_from(stale_after.as_millis()).unwrap_or(u64::MAX);
    let publishing = || {
        let now = now_unix_ms();
        read_summaries(bu_dir, run).iter().any(|s| now.saturating_sub(s.updated_unix_ms) <= stale_after_ms)
    };
    while publishing() && Instant::now() < deadline && !cut() {
        std::thread::sleep(Duration::from_millis(100));
    }
    true
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
    let mergers = Mergers::new(&cfg, &output, &dirs, &streams);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)).context("installing the signal handler")?;
    let poll = Duration::from_millis(cfg.fu.poll_interval_ms.max(1));
    mergers.run(&stop, poll, Some(Instant::now() + Duration::from_secs(args.timeout_s)))?;
    let bu_run_dirs: Vec<PathBuf> =
        (0..cfg.bus.len()).map(|i| cfg.bu_directory(i, &output).join(names::run_dir_name(cfg.run.number))).collect();
    let storage = storage_run_dir(&dirs, cfg.run.number);
    let check = check_chain(&bu_run_dirs, &storage, cfg.run.number, &with_error_stream(&streams));
    let (built, processed) = check.totals();
    for p in check.problems.iter().take(10) {
        println!("chain problem: {p}");
    }
    println!(
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

/// Checks the data file of an output JSON against it: size, Adler-32, and the events it holds
/// (each with a good CRC-32C) against Accepted.
fn check_data_file(dir: &Path, doc: &FuOutputDoc, check: &mut ChainCheck) {
    let data = dir.join(&doc.file_list);
    match fs::read(&data) {
        Ok(bytes) => {
            check.files += 1;
            check.bytes += bytes.len() as u64;
            let events = tessera_formats::raw::RawFile::parse(&bytes)
                .map(|f| f.events().filter(|e| e.as_ref().is_ok_and(|(_, e)| e.check_crc().is_ok())).count());
            if bytes.len() as u64 != doc.file_size {
                check.problems.push(format!("{}: {} bytes, JSON says {}", data.display(), bytes.len(), doc.file_size));
            }
            if i64::from(adler32(&bytes)) != doc.file_adler32 {
                check.problems.push(format!("{}: Adler-32 does not match its JSON", data.display()));
            }
            if events.as_ref().ok().map(|&n| n as u64) != Some(doc.accepted) {
                check.problems.push(format!(
                    "{}: {:?} good events, JSON says {} accepted",
                    data.display(),
                    events,
                    doc.accepted
                ));
            }
        }
        Err(e) => check.problems.push(format!("{}: {e}", data.display())),
    }
}

/// `tessera verify` of a directory of FU or micro-merger outputs: every output JSON against its
/// data file; per lumi section, Processed summed over producers (the same in every stream).
pub fn verify_outputs(dir: &Path) -> Result<ChainCheck> {
    let mut check = ChainCheck::default();
    let mut processed: BTreeMap<(u32, String), u64> = BTreeMap::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Ok(n) = StreamFileName::parse(&name) else { continue };
        if n.ext != "jsn" {
            continue;
        }
        let path = dir.join(&name);
        let read = fs::read_to_string(&path).map_err(|e| e.to_string());
        let doc = match read.and_then(|t| FuOutputDoc::parse(&t).map_err(|e| e.to_string())) {
            Ok(doc) => doc,
            Err(e) => {
                check.problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        *processed.entry((n.ls, n.stream.clone())).or_default() += doc.processed;
        *check.accepted.entry(n.stream.clone()).or_default() += doc.accepted;
        if doc.file_list.is_empty() {
            if doc.accepted != 0 {
                check.problems.push(format!("{}: {} accepted but no file", path.display(), doc.accepted));
            }
        } else {
            check_data_file(dir, &doc, &mut check);
        }
    }
    for ((ls, stream), n) in &processed {
        match check.per_ls.get(ls) {
            Some(&(_, first)) if first != *n => check
                .problems
                .push(format!("lumi section {ls}: stream {stream} has Processed {n}, another stream {first}")),
            _ => {
                check.per_ls.insert(*ls, (*n, *n));
            }
        }
    }
    Ok(check)
}

/// Whether `dir` holds output JSON of the filter farm (of FUs, mergers or storage).
pub fn is_output_dir(dir: &Path) -> bool {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| StreamFileName::parse(&e.file_name().to_string_lossy()).is_ok_and(|n| n.ext == "jsn"))
}
