//! The filter farm a `tessera run` starts behind its BUs: FU processes (this program, `tessera
//! fu`) or readers per BU, started again when they fail ([`Farm`]), the mergers in a thread
//! ([`Mergers`]), the BUs' file brokers ([`start_broker`]) and the wait for remote FUs to finish
//! ([`wait_drained`]).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_config::{ConfigErrors, SystemConfig};
use tessera_fu::FuError;
use tessera_fu::claim::host_name;
use tessera_fu::menu::Menu;
use tessera_fu::merge::{MacroMerger, MicroMerger, MiniMerger, with_error_stream};
use tessera_fu::remote::BuAccess;
use tessera_fu::{Hlt, MenuHlt};
use tessera_rundir::resources::{now_unix_ms, read_summaries};

/// Why the farm, its HLT or a BU's broker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FarmError {
    /// The external HLT program did not start.
    #[error("starting the HLT {exec}")]
    Hlt {
        /// Its command line.
        exec: String,
        /// Why.
        source: Box<FuError>,
    },
    /// The menu could not be read.
    #[error(transparent)]
    MenuFile(Box<ConfigErrors>),
    /// The menu could not be made an HLT.
    #[error(transparent)]
    Menu(Box<FuError>),
    /// The system's HLT, named by its setting (`fu.menu`, `fu.exec`), cannot run.
    #[error("{key}")]
    Streams {
        /// The setting.
        key: &'static str,
        /// Why.
        source: Box<FarmError>,
    },
    /// A directory could not be made.
    #[error("creating {}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// This program could not be found to start FUs.
    #[error("finding this program to start the FUs")]
    Program(#[source] std::io::Error),
    /// An FU's log could not be opened.
    #[error("opening {}", path.display())]
    Log {
        /// The log.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An FU process could not be started.
    #[error(transparent)]
    Spawn(std::io::Error),
    /// An FU or reader could not be started.
    #[error("starting {what}")]
    Start {
        /// Which.
        what: String,
        /// Why.
        source: Box<FarmError>,
    },
    /// The mergers' thread could not be started.
    #[error("starting the mergers")]
    Mergers(#[source] std::io::Error),
    /// A BU's broker address does not resolve.
    #[error("{bu}: cannot resolve {host}:{port} for its file broker")]
    BrokerResolve {
        /// The BU.
        bu: String,
        /// Its host.
        host: String,
        /// The broker's port.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// A BU's broker address resolves to nothing.
    #[error("{bu}: {host}:{port} resolves to nothing")]
    BrokerNowhere {
        /// The BU.
        bu: String,
        /// Its host.
        host: String,
        /// The broker's port.
        port: u16,
    },
    /// A BU's broker could not serve.
    #[error("{bu}: cannot serve its file broker on {listen}")]
    Broker {
        /// The BU.
        bu: String,
        /// Where.
        listen: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Why the mergers did not merge the run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Their deadline passed.
    #[error("the run was not merged in time")]
    NotInTime,
    /// They were stopped first.
    #[error("stopped before the run was merged")]
    Stopped,
    /// A micro merger failed.
    #[error("micro merger of {}: {error}", dir.display())]
    Micro {
        /// The FU output directory it merges.
        dir: PathBuf,
        /// Why.
        error: Box<FuError>,
    },
    /// A mini merger failed.
    #[error("mini merger of {bu}: {error}")]
    Mini {
        /// The BU whose FUs' outputs it merges.
        bu: String,
        /// Why.
        error: Box<FuError>,
    },
    /// The macro merger failed.
    #[error("macro merger: {error}")]
    Macro {
        /// Why.
        error: Box<FuError>,
    },
}

impl MergeError {
    /// Whether a merger found its disk full: every merger step can be redone once there is room.
    pub fn is_disk_full(&self) -> bool {
        match self {
            MergeError::Micro { error, .. } | MergeError::Mini { error, .. } | MergeError::Macro { error } => {
                error.is_disk_full()
            }
            MergeError::NotInTime | MergeError::Stopped => false,
        }
    }
}

/// How an FU process of the farm ended without a report.
#[derive(Debug, thiserror::Error)]
pub enum FuEnded {
    /// It ended well, but its report cannot be read.
    #[error("unreadable report ({error}); see {}", log.display())]
    Unreadable {
        /// Why.
        error: serde_json::Error,
        /// Its log.
        log: PathBuf,
    },
    /// It ended badly.
    #[error("exited with {status}: {last}; see {}", log.display())]
    Exited {
        /// How.
        status: ExitStatus,
        /// The last lines of its log.
        last: String,
        /// Its log.
        log: PathBuf,
    },
    /// It was killed: it did not leave within its grace after SIGTERM.
    #[error("killed: it did not leave within {grace:?} of SIGTERM; see {}", log.display())]
    Killed {
        /// The grace it had.
        grace: Duration,
        /// Its log.
        log: PathBuf,
    },
    /// It did not finish in time and was stopped.
    #[error("did not finish in {timeout:?}; stopped: {last}; see {}", log.display())]
    NotFinished {
        /// The time it had.
        timeout: Duration,
        /// The last lines of its log.
        last: String,
        /// Its log.
        log: PathBuf,
    },
}

/// The HLT an FU runs: the menu (a file, or the embedded default), or an external program.
pub fn make_hlt(menu: Option<&Path>, exec: &[String]) -> Result<Box<dyn Hlt>, FarmError> {
    if !exec.is_empty() {
        let hlt = tessera_fu::exec::ExecHlt::start(tessera_fu::exec::ExecConfig::new(exec.to_vec()))
            .map_err(|e| FarmError::Hlt { exec: exec.join(" "), source: Box::new(e) })?;
        return Ok(Box::new(hlt));
    }
    let menu = match menu {
        Some(path) => Menu::load(path).map_err(|e| FarmError::MenuFile(Box::new(e)))?,
        None => Menu::default(),
    };
    Ok(Box::new(MenuHlt::new(&menu).map_err(|e| FarmError::Menu(Box::new(e)))?))
}

/// The streams of a system's HLT, which also checks that it can run: the menu is read, or the
/// external program started (it says which streams it has when it starts).
pub fn system_streams(cfg: &SystemConfig) -> Result<Vec<String>, FarmError> {
    let key = if cfg.fu.exec.is_empty() { "fu.menu" } else { "fu.exec" };
    let hlt =
        make_hlt(cfg.fu.menu.as_deref(), &cfg.fu.exec).map_err(|e| FarmError::Streams { key, source: Box::new(e) })?;
    Ok(hlt.streams().to_vec())
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
    merger: Option<JoinHandle<Result<(), MergeError>>>,
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
    fn spawn(args: &[String], log: &Path) -> Result<Child, FarmError> {
        let exe = std::env::current_exe().map_err(FarmError::Program)?;
        let mut cmd = Command::new(exe);
        cmd.args(args).args(["--parent-pid", &std::process::id().to_string()]);
        // A group of its own: a terminal's Ctrl-C goes to `tessera run` alone, which drains the
        // FUs rather than losing them mid-file.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|source| FarmError::Log { path: log.to_owned(), source })?;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).spawn().map_err(FarmError::Spawn)
    }
}

/// What the farm did.
#[derive(Debug, Default)]
pub struct FarmOutcome {
    /// Per FU process: its name and its report, or why there is none.
    pub fus: Vec<(String, Result<serde_json::Value, FuEnded>)>,
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
    pub fn start(cfg: &SystemConfig, output: &Path, streams: &[String]) -> Result<Farm, FarmError> {
        let fu = &cfg.fu;
        let dirs = FarmDirs::of(cfg, output);
        let mut fus = Vec::new();
        for (i, bu) in cfg.bus.iter().enumerate() {
            fs::create_dir_all(&dirs.fu[i]).map_err(|source| FarmError::Create { path: dirs.fu[i].clone(), source })?;
            for k in 0..fu.processes_per_bu {
                let log = dirs.fu[i].join(format!("fu{k}.log"));
                let args = fu_args(cfg, i, output, None);
                let child = FuSlot::spawn(&args, &log)
                    .map_err(|e| FarmError::Start { what: format!("FU {k} of {}", bu.name), source: Box::new(e) })?;
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
                .map_err(FarmError::Mergers)?;
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
    pub fn start_readers(
        cfg: &SystemConfig,
        output: &Path,
        brokers: &[std::net::SocketAddr],
    ) -> Result<Farm, FarmError> {
        let dirs = FarmDirs::of(cfg, output);
        let mut fus = Vec::new();
        let mut late = Vec::new();
        for (i, (bu, broker)) in cfg.bus.iter().zip(brokers).enumerate() {
            fs::create_dir_all(&dirs.fu[i]).map_err(|source| FarmError::Create { path: dirs.fu[i].clone(), source })?;
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
                let child = FuSlot::spawn(&args, &log).map_err(|e| FarmError::Start {
                    what: format!("reader {k} of {}", bu.name),
                    source: Box::new(e),
                })?;
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
                Err(e) => tracing::error!(unit = %late.bu, "{}: could not start a late reader: {e}", late.bu),
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
                    tracing::error!(unit = %slot.name, "FU {}: {why}; could not start it again: {e}", slot.name)
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
                    if matches!(slot.child.try_wait(), Ok(None)) {
                        end_group(&mut slot.child, rustix::process::Signal::TERM);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut outcome = FarmOutcome { replaced: std::mem::take(&mut self.replaced), ..FarmOutcome::default() };
        for FuSlot { name, mut child, log, .. } in std::mem::take(&mut self.fus) {
            let status = child.try_wait().ok().flatten().or_else(|| {
                end_group(&mut child, rustix::process::Signal::KILL);
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
                Some(s) if s.success() => {
                    serde_json::from_str(out.trim()).map_err(|error| FuEnded::Unreadable { error, log })
                }
                Some(status) => Err(FuEnded::Exited { status, last: last(), log }),
                None if cut => Err(FuEnded::Killed { grace: CUT_SHORT_GRACE, log }),
                None => Err(FuEnded::NotFinished { timeout, last: last(), log }),
            };
            outcome.fus.push((name, result));
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(merger) = self.merger.take() {
            outcome.merger_error = match merger.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!("{e}")),
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
            end_group(&mut slot.child, rustix::process::Signal::KILL);
            let _ = slot.child.wait();
        }
    }
}

/// Sends `signal` to an FU process's group, its HLT program with it (the HLT is the FU's child,
/// in the group [`FuSlot::spawn`] gave the FU): an HLT left behind would judge on for as long
/// as its file takes, with nobody to read it. The group goes once its leader is reaped: a
/// child already waited for is not signalled.
fn end_group(child: &mut Child, signal: rustix::process::Signal) {
    if matches!(child.try_wait(), Ok(None))
        && let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32)
    {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// Every merger of a farm, or a part of them, run in turn by one thread.
pub struct Mergers {
    micro: Vec<MicroMerger>,
    mini: Vec<MiniMerger>,
    macro_merger: Option<MacroMerger>,
}

/// Which of a farm's mergers a [`Mergers`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergerPart {
    /// Every one: micro and mini per BU, and the macro merger.
    All,
    /// The micro and mini mergers of BU `index` alone, on a host that sees its directory (its
    /// pod, when it writes to a memory-backed volume of its own); they end once its share of the
    /// run is in storage.
    Bu {
        /// The BU, an index into the system file's `bus`.
        index: usize,
        /// Where the mini merger copies the BU's bookkeeping for the check (see
        /// [`MiniMerger::bookkeeping_copy`]).
        bookkeeping_copy: Option<PathBuf>,
    },
    /// The macro merger alone, when every BU's own mergers run beside it ([`MergerPart::Bu`]).
    Macro,
}

impl Mergers {
    /// Every merger of the farm of `cfg`'s run under `output`, for the HLT's `streams`.
    pub fn new(cfg: &SystemConfig, output: &Path, dirs: &FarmDirs, streams: &[String]) -> Self {
        Mergers::part(cfg, output, dirs, streams, &MergerPart::All)
    }

    /// The mergers of `part` of the farm of `cfg`'s run under `output`, for the HLT's `streams`.
    pub fn part(cfg: &SystemConfig, output: &Path, dirs: &FarmDirs, streams: &[String], part: &MergerPart) -> Self {
        let run = cfg.run.number;
        let host = host_name();
        let (bus, copy) = match part {
            MergerPart::All => (0..cfg.bus.len(), None),
            MergerPart::Bu { index, bookkeeping_copy } => (*index..*index + 1, bookkeeping_copy.clone()),
            MergerPart::Macro => (0..0, None),
        };
        let micro = bus
            .clone()
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
        let mini = bus
            .map(|i| MiniMerger {
                bu_dir: cfg.bu_directory(i, output),
                mini_dir: dirs.mini[i].clone(),
                storage_dir: dirs.storage.clone(),
                bu: cfg.bus[i].name.clone(),
                nodes: vec![NODE.into()],
                run,
                streams: streams.to_vec(),
                bookkeeping_copy: copy.clone(),
            })
            .collect();
        let macro_merger = matches!(part, MergerPart::All | MergerPart::Macro).then(|| MacroMerger {
            storage_dir: dirs.storage.clone(),
            bus: cfg.bus.iter().map(|b| b.name.clone()).collect(),
            run,
            streams: streams.to_vec(),
        });
        Mergers { micro, mini, macro_merger }
    }

    /// Passes until the run is merged (the macro merger has ended it, or without one, every mini
    /// merger has put its BU's share into storage), `stop` is set, or `deadline` passes.
    pub fn run(&self, stop: &AtomicBool, poll: Duration, deadline: Option<Instant>) -> Result<(), MergeError> {
        let mut full_since: Option<Instant> = None;
        while !stop.load(Ordering::SeqCst) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(MergeError::NotInTime);
            }
            match self.pass() {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    full_since = None;
                    std::thread::sleep(poll);
                }
                // Every merger step can be redone: wait for room and try again.
                Err(e) if e.is_disk_full() => {
                    let since = *full_since.get_or_insert_with(Instant::now);
                    tracing::warn!("mergers: DISK FULL for {:.0} s: {e}; waiting", since.elapsed().as_secs_f64());
                    std::thread::sleep(MERGER_DISK_FULL_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
        Err(MergeError::Stopped)
    }

    /// One pass of every merger; true once the macro merger has ended the run, or without one,
    /// once every mini merger has put its BU's share of the run into storage.
    fn pass(&self) -> Result<bool, MergeError> {
        for m in &self.micro {
            m.pass().map_err(|error| MergeError::Micro { dir: m.fu_output_dir.clone(), error: Box::new(error) })?;
        }
        let mut minis_finished = true;
        for m in &self.mini {
            minis_finished &=
                m.pass().map_err(|error| MergeError::Mini { bu: m.bu.clone(), error: Box::new(error) })?.finished;
        }
        match &self.macro_merger {
            Some(m) => Ok(m.pass().map_err(|error| MergeError::Macro { error: Box::new(error) })?.finished),
            None => Ok(minis_finished),
        }
    }
}

/// Starts the file broker of BU `i` if the system file gives it a port, or on a free port of the
/// BU's host if it is `required` (readers read through it).
pub fn start_broker(
    cfg: &SystemConfig,
    i: usize,
    output: &Path,
    required: bool,
) -> Result<Option<tessera_fu::broker::Broker>, FarmError> {
    let bu = &cfg.bus[i];
    let port = match (bu.broker_port, required) {
        (Some(port), _) => port,
        (None, true) => 0,
        (None, false) => return Ok(None),
    };
    let listen = std::net::ToSocketAddrs::to_socket_addrs(&(bu.host.as_str(), port))
        .map_err(|source| FarmError::BrokerResolve { bu: bu.name.clone(), host: bu.host.clone(), port, source })?
        .next()
        .ok_or_else(|| FarmError::BrokerNowhere { bu: bu.name.clone(), host: bu.host.clone(), port })?;
    let config = tessera_fu::broker::BrokerConfig {
        listen,
        lease: Duration::from_secs(cfg.fu.claim_lease_s),
        max_connections: cfg.fu.broker_max_connections as usize,
        ..tessera_fu::broker::BrokerConfig::new(cfg.bu_directory(i, output), cfg.run.number)
    };
    let broker = tessera_fu::broker::Broker::start(config).map_err(|source| FarmError::Broker {
        bu: bu.name.clone(),
        listen,
        source,
    })?;
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
