//! One FU process: claims raw files from a BU run directory, checks every event's CRC-32C, asks
//! the HLT for its verdicts, writes the outputs per lumi section and stream, and publishes a
//! lumi section once the BU has ended it and no file of it is left to claim.
//!
//! An FU keeps the input files of a lumi section until it publishes the section's outputs (a
//! crash redoes unpublished work from them). A section larger than the BU's RAM disk would then
//! never end: the BU holds back for a full disk, and the disk is full of the section's inputs.
//! So an FU that has had nothing to claim for [`PART_AFTER_IDLE`] publishes what it holds of
//! sections not yet ended as a part (outputs named `pidPPPPPcK`, as a section met again is),
//! which removes their inputs; the mergers take every part of a section.

use crate::claim::{BuRunState, ClaimedFile, FileSource, remove_if_present};
use crate::instance::Instance;
use crate::orbit::UnpackedOrbits;
use crate::output::{Batch, EventOutcome, FuOutputDir, LumiOutputs, ledger_events, ledger_orbits, write_atomically};
use crate::remote::BuAccess;
use crate::{FuError, Hlt, Verdict};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_formats::frd::FrdEvent;
use tessera_formats::names::Producer;
use tessera_formats::orbit::is_orbit_file;
use tessera_formats::raw::RawFile;
use tessera_rundir::resources::{ResourceSummary, now_unix_ms, used_percent};

/// Where an FU process reads and writes, and how it waits.
#[derive(Debug, Clone)]
pub struct FuConfig {
    /// How the BU's files are reached.
    pub bu: BuAccess,
    /// The FU node's output directory (holding `runRRRRRR/`), shared by its processes.
    pub output_dir: PathBuf,
    /// The run.
    pub run: u32,
    /// This host's name, as written into claimed file names.
    pub host: String,
    /// This process's id: the id written into claimed and output file names when no process of
    /// the run had it in the output directory, as processes in other containers may have
    /// ([`instance`](crate::instance)).
    pub pid: u32,
    /// How long to sleep when there is nothing to claim.
    pub poll_interval: Duration,
    /// How often to look for claims of dead processes on this host.
    pub recovery_interval: Duration,
    /// Give up when the BU's run directory has not appeared after this long.
    pub run_start_timeout: Duration,
    /// How often to publish the resource summary in the BU directory, directly or through the
    /// BU's file broker (see [`resources`](tessera_rundir::resources)).
    pub summary_interval: Duration,
}

/// What an FU process did: counts of published work only (work dropped after a full disk is
/// done again and counted then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FuReport {
    /// Raw files processed.
    pub files: u64,
    /// Events processed.
    pub events: u64,
    /// Orbits of orbit files processed (0 when the BU writes event files).
    pub orbits: u64,
    /// Bad orbits among them: a CRC-32C that fails, a rule of the format broken, or an orbit that
    /// cannot be read (see [`crate::orbit`]); their events that could be unpacked are among
    /// `error_events`.
    pub bad_orbits: u64,
    /// Events set aside in the error stream.
    pub error_events: u64,
    /// Events written per stream (the error stream last), over all lumi sections.
    pub accepted: BTreeMap<String, u64>,
    /// Lumi sections published (one published in parts counts once).
    pub lumi_sections: u64,
    /// Parts of lumi sections published before the BU ended them, for it was waiting for room
    /// on its RAM disk (see [`PART_AFTER_IDLE`]).
    pub early_parts: u64,
    /// Bytes in the data files published.
    pub output_bytes: u64,
    /// Claims of dead processes given back to the pool.
    pub returned_claims: u64,
    /// Times the output disk was full: the unpublished outputs were dropped and their files
    /// given back, and the FU waited.
    pub disk_full_pauses: u64,
    /// Files whose claims a broker took back (this process was silent past its lease) before
    /// their outputs were published: the outputs were dropped, another process read them.
    pub taken_back: u64,
    /// The first reasons events were set aside for (at most [`FuReport::MAX_REASONS`]).
    pub reasons: Vec<String>,
    /// Events processed by every FU process that wrote to this output directory, this one and
    /// the killed ones included, as its ledger says when this process ended with every file
    /// of the BU processed ([`crate::output::ledger_events`]); `None` when it was stopped early.
    pub ledger_events: Option<u64>,
    /// Orbits processed by every FU process that wrote to this output directory, as
    /// [`FuReport::ledger_events`] counts events ([`crate::output::ledger_orbits`]).
    pub ledger_orbits: Option<u64>,
}

impl FuReport {
    /// Reasons kept in a report.
    pub const MAX_REASONS: usize = 20;

    fn note(&mut self, reason: String) {
        if self.reasons.len() < Self::MAX_REASONS {
            self.reasons.push(reason);
        }
    }
}

/// Runs an FU process until the BU's run has ended and every file of it is processed, or
/// until `stop` is set (then it leaves at once; its claims go back to the pool when it is gone).
pub fn run_fu(cfg: &FuConfig, hlt: &mut dyn Hlt, stop: &AtomicBool) -> Result<FuReport, FuError> {
    let outputs = FuOutputDir::create(&cfg.output_dir, cfg.run)?;
    // Held for the process's life: its id among the processes sharing the output directory.
    let instance = Instance::register(outputs.path(), cfg.pid)?;
    if instance.id() != cfg.pid {
        tracing::info!(
            "FU process {} takes the id pid{} in {}: another process of the run had its process id there",
            cfg.pid,
            instance.id(),
            outputs.path().display()
        );
    }
    let cfg = &FuConfig { pid: instance.id(), ..cfg.clone() };
    let source = cfg.bu.open(cfg.run, &cfg.host, cfg.pid, cfg.run_start_timeout)?;
    let mut resources = Resources::new(cfg, source.as_ref());
    let result = run_loop(cfg, outputs, source.as_ref(), hlt, stop, &mut resources);
    // Gone is not stale: the BU judges the FUs that remain.
    resources.remove();
    result
}

/// The resource summary of this process, where it is published (the BU directory, or the
/// broker that writes it there), and when it was last published.
struct Resources<'a> {
    summary: ResourceSummary,
    source: &'a dyn FileSource,
    output_dir: PathBuf,
    interval: Duration,
    last: Option<(Instant, u64)>,
    /// Whether the last publication failed: a run of failures is said once, not every interval.
    failing: bool,
}

impl<'a> Resources<'a> {
    fn new(cfg: &FuConfig, source: &'a dyn FileSource) -> Self {
        Resources {
            summary: ResourceSummary {
                // The name the claims are made under: a broker names a remote FU's host itself.
                host: source.host().to_owned(),
                pid: cfg.pid,
                run: cfg.run,
                updated_unix_ms: 0,
                free_slots: 1,
                queued_lumi_sections: 0,
                output_bytes_per_s: 0.0,
                output_used_percent: 0,
                cpu_seconds: 0.0,
            },
            source,
            output_dir: cfg.output_dir.clone(),
            interval: cfg.summary_interval,
            last: None,
            failing: false,
        }
    }

    /// Publishes the summary if the interval has passed: `queued` lumi sections the BU has ended
    /// and the farm not yet processed, `idle` when there was nothing to claim. A summary that
    /// cannot be published is a warning, not a failure of the FU: the BU sees it go stale and
    /// holds back, and the next interval tries again.
    fn publish(&mut self, queued: u32, idle: bool, output_bytes: u64) {
        let now = Instant::now();
        if self.last.is_some_and(|(t, _)| now.duration_since(t) < self.interval) {
            return;
        }
        let s = &mut self.summary;
        s.updated_unix_ms = now_unix_ms();
        s.free_slots = u32::from(idle);
        s.queued_lumi_sections = queued;
        s.output_bytes_per_s = self
            .last
            .map_or(0.0, |(t, bytes)| (output_bytes - bytes) as f64 / now.duration_since(t).as_secs_f64().max(1e-3));
        s.output_used_percent = used_percent(&self.output_dir).unwrap_or(0);
        if let Ok(cpu) = cpu_time::ProcessTime::try_now() {
            s.cpu_seconds = cpu.as_duration().as_secs_f64();
        }
        self.last = Some((now, output_bytes));
        match self.source.publish_summary(s) {
            Ok(()) if std::mem::take(&mut self.failing) => {
                tracing::info!(host = %s.host, pid = s.pid, "resource summary published again");
            }
            Ok(()) => {}
            Err(e) if !std::mem::replace(&mut self.failing, true) => {
                tracing::warn!(host = %s.host, pid = s.pid, "resource summary not published: {e}");
            }
            Err(_) => {}
        }
    }

    /// Publishes at once, with no free slot and the lumi sections queued as last seen: a full
    /// output disk shows in `output_used_percent`. The summary lives on the BU's disk, not on
    /// the full one; if it cannot be written either, the BU sees it go stale.
    fn publish_now(&mut self, output_bytes: u64) {
        self.last = None;
        self.publish(self.summary.queued_lumi_sections, false, output_bytes);
    }

    fn remove(&self) {
        if let Err(e) = self.source.remove_summary() {
            tracing::warn!(host = %self.summary.host, pid = self.summary.pid, "resource summary not removed: {e}");
        }
    }
}

fn run_loop(
    cfg: &FuConfig,
    outputs: FuOutputDir,
    source: &dyn FileSource,
    hlt: &mut dyn Hlt,
    stop: &AtomicBool,
    resources: &mut Resources<'_>,
) -> Result<FuReport, FuError> {
    let mut fu = Fu {
        cfg,
        source,
        outputs,
        name: format!("{}-pid{}", source.host(), cfg.pid),
        open: BTreeMap::new(),
        commits: BTreeMap::new(),
        report: FuReport::default(),
        verdicts: Vec::new(),
        buf: Vec::new(),
        unpacked: UnpackedOrbits::default(),
        started: Instant::now(),
        last_recovery: None,
        waiting_said: false,
        idle_since: None,
    };
    let mut full_since: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        match fu.step(hlt, resources) {
            Ok(Step::Again) => full_since = None,
            Ok(Step::Idle) => {
                full_since = None;
                std::thread::sleep(cfg.poll_interval);
            }
            Ok(Step::Done) => {
                fu.report.ledger_events = Some(ledger_events(fu.outputs.path())?);
                fu.report.ledger_orbits = Some(ledger_orbits(fu.outputs.path())?);
                break;
            }
            Err(e) if e.is_disk_full() => {
                // Nothing is lost: the outputs not yet published are dropped and their inputs go
                // back to the pool, to be processed again when there is room.
                let since = *full_since.get_or_insert_with(Instant::now);
                tracing::warn!(
                    unit = %fu.name,
                    run = cfg.run,
                    "FU {}: DISK FULL ({e}) for {:.0} s: dropping unpublished outputs, giving back their files, waiting",
                    fu.name,
                    since.elapsed().as_secs_f64()
                );
                fu.report.disk_full_pauses += 1;
                fu.drop_unpublished()?;
                resources.publish_now(fu.report.output_bytes);
                let pause = DISK_FULL_PAUSE.saturating_mul(1 << fu.report.disk_full_pauses.min(4));
                let until = Instant::now() + pause.min(DISK_FULL_PAUSE_MAX);
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(cfg.poll_interval);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(fu.report)
}

/// How long an FU has had nothing to claim before it publishes the lumi sections it holds that
/// the BU has not ended, as parts (see the module docs).
pub const PART_AFTER_IDLE: Duration = Duration::from_secs(1);

/// How long an FU waits after its output disk was full, at first and at most.
const DISK_FULL_PAUSE: Duration = Duration::from_millis(250);
const DISK_FULL_PAUSE_MAX: Duration = Duration::from_secs(10);

/// What one step of the loop found.
enum Step {
    /// It processed a file: look again at once.
    Again,
    /// Nothing to claim now.
    Idle,
    /// The run is over and everything is published.
    Done,
}

/// An FU process's working state.
struct Fu<'a> {
    cfg: &'a FuConfig,
    source: &'a dyn FileSource,
    outputs: FuOutputDir,
    name: String,
    open: BTreeMap<u32, LumiOutputs>,
    /// Commits made per lumi section: a section published and then met again (a dead
    /// process's input taken over, or outputs dropped for a full disk) gets outputs of a new
    /// name, never the published ones'.
    commits: BTreeMap<u32, u32>,
    report: FuReport,
    verdicts: Vec<Verdict>,
    /// The claimed file's bytes, reused from file to file.
    buf: Vec<u8>,
    /// The events of a claimed orbit file, reused from file to file.
    unpacked: UnpackedOrbits,
    started: Instant,
    last_recovery: Option<Instant>,
    /// Whether it has said that it waits for the run to start.
    waiting_said: bool,
    /// Since when it has had nothing to claim.
    idle_since: Option<Instant>,
}

impl Fu<'_> {
    fn step(&mut self, hlt: &mut dyn Hlt, resources: &mut Resources<'_>) -> Result<Step, FuError> {
        let (cfg, source) = (self.cfg, self.source);
        let Some(mut state) = source.state()? else {
            if !self.waiting_said {
                self.waiting_said = true;
                tracing::info!(
                    unit = %self.name,
                    run = cfg.run,
                    "FU {}: waiting for the BU to start run {} (at most {:?})",
                    self.name,
                    cfg.run,
                    cfg.run_start_timeout
                );
            }
            if self.started.elapsed() > cfg.run_start_timeout {
                return Err(FuError::Bookkeeping {
                    path: cfg.output_dir.clone(),
                    problem: format!("the BU has not started run {} after {:?}", cfg.run, cfg.run_start_timeout),
                });
            }
            return Ok(Step::Idle);
        };
        if self.last_recovery.is_none_or(|t| t.elapsed() >= cfg.recovery_interval) {
            self.last_recovery = Some(Instant::now());
            if self.return_dead_claims(&state)? {
                state = source.state()?.unwrap_or_default();
            }
        }
        let ready: Vec<u32> = self
            .open
            .keys()
            .copied()
            .filter(|ls| state.ended_lumi_sections.contains(ls) && !state.unclaimed.iter().any(|(l, _)| l == ls))
            .collect();
        self.publish(&ready, false)?;
        let queued = state.ended_lumi_sections.intersection(&state.lumi_sections_with_files).count() as u32;
        resources.publish(queued, state.unclaimed.is_empty(), self.report.output_bytes);
        if let Some(file) = source.claim(&state, &self.outputs.spool(), &mut self.buf)? {
            self.idle_since = None;
            let processed = process_file(
                &file,
                &self.buf,
                &self.outputs,
                cfg.pid,
                hlt,
                &mut self.open,
                &self.commits,
                &mut self.verdicts,
                &mut self.unpacked,
                &mut self.report,
            );
            if file.path.starts_with(self.outputs.spool()) {
                remove_if_present(&file.path)?;
            }
            processed?;
            return Ok(Step::Again);
        }
        if state.ended && self.open.is_empty() && state.unclaimed.is_empty() {
            // A dead process's claim would keep its lumi section from draining: take it back
            // before ending (a live process's claim is its own to finish).
            if !state.claimed.is_empty() && self.return_dead_claims(&state)? {
                return Ok(Step::Again);
            }
            return Ok(Step::Done);
        }
        let idle = *self.idle_since.get_or_insert_with(Instant::now);
        if idle.elapsed() >= PART_AFTER_IDLE && !self.open.is_empty() {
            self.idle_since = None;
            let held: Vec<u32> = self.open.keys().copied().collect();
            tracing::info!(
                unit = %self.name,
                run = cfg.run,
                "FU {}: nothing to claim for {PART_AFTER_IDLE:?}: publishing lumi sections {held:?} as parts, so that \
                 their inputs leave the BU's disk",
                self.name
            );
            self.publish(&held, true)?;
            return Ok(Step::Again);
        }
        Ok(Step::Idle)
    }

    /// Publishes the open lumi sections `sections`; `early` when the BU has not ended them
    /// (parts published to free the BU's disk).
    fn publish(&mut self, sections: &[u32], early: bool) -> Result<(), FuError> {
        for &ls in sections {
            let Some(lumi) = self.open.remove(&ls) else { continue };
            if !self.source.still_held(lumi.inputs())? {
                // This process was silent past the broker's lease: its files went back to the
                // pool, and another process reads them; outputs made from them are late.
                tracing::warn!(
                    unit = %self.name,
                    lumi_section = ls,
                    "FU {}: lumi section {ls}: files taken back by the broker (its lease ran out): {} files' outputs dropped, read again by another",
                    self.name,
                    lumi.inputs().len()
                );
                self.report.taken_back += lumi.inputs().len() as u64;
                lumi.discard()?;
                continue;
            }
            let published = lumi.publish(self.source, &self.name)?;
            let commits = self.commits.entry(ls).or_default();
            *commits += 1;
            let report = &mut self.report;
            tracing::info!(
                unit = %self.name,
                lumi_section = ls,
                processed = published.processed,
                error_events = published.error_events,
                orbits = published.orbits,
                files = published.files,
                part = *commits,
                "FU {}: lumi section {ls}{} published: {} events{} from {} files",
                self.name,
                if early { " (a part, before its end)" } else { "" },
                published.processed,
                if published.orbits > 0 { format!(" of {} orbits", published.orbits) } else { String::new() },
                published.files
            );
            if *commits == 1 {
                report.lumi_sections += 1;
            }
            if early {
                report.early_parts += 1;
            }
            report.output_bytes += published.bytes;
            report.files += published.files;
            report.events += published.processed;
            report.orbits += published.orbits;
            report.bad_orbits += published.bad_orbits;
            report.error_events += published.error_events;
            for (stream, n) in published.accepted {
                *report.accepted.entry(stream).or_default() += n;
            }
        }
        Ok(())
    }

    /// Finishes what dead processes on this host left half done and gives their claims back to
    /// the pool; true if there were any.
    fn return_dead_claims(&mut self, state: &BuRunState) -> Result<bool, FuError> {
        let (outputs, source) = (&self.outputs, self.source);
        let returned = outputs.return_dead_claims(source, state)?;
        self.report.returned_claims += returned.len() as u64;
        Ok(!returned.is_empty())
    }

    /// Drops every output not yet published and gives their inputs back to the pool, as a
    /// restart after a crash would (a commit record already written is carried out).
    fn drop_unpublished(&mut self) -> Result<(), FuError> {
        self.open.clear();
        self.outputs.finish_dead(self.cfg.pid, self.source)?;
        if let Some(state) = self.source.state()? {
            let mine = state.claimed.iter().filter(|c| c.host == self.source.host() && c.pid == self.cfg.pid);
            for claim in mine {
                self.source.give_back(claim)?;
            }
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn process_file(
    claim: &ClaimedFile,
    bytes: &[u8],
    outputs: &FuOutputDir,
    pid: u32,
    hlt: &mut dyn Hlt,
    open: &mut BTreeMap<u32, LumiOutputs>,
    commits: &BTreeMap<u32, u32>,
    verdicts: &mut Vec<Verdict>,
    unpacked: &mut UnpackedOrbits,
    report: &mut FuReport,
) -> Result<(), FuError> {
    let ls = claim.name.ls;
    let part = commits.get(&ls).map_or(1, |n| n + 1);
    let lumi = open.entry(ls).or_insert_with(|| outputs.lumi(ls, Producer::fu(pid, part), hlt.streams()));
    let error_stream = hlt.streams().len();
    // An orbit file's events are unpacked into FRD records first (crate::orbit); from there on
    // they are events as an event file's. An external HLT reads them from a file written for it.
    let orbit_file = is_orbit_file(bytes);
    let mut spooled = None;
    let (bytes, hlt_path) = if orbit_file {
        unpacked.unpack(bytes, claim.name.run, ls);
        lumi.add_orbits(unpacked.orbits(), unpacked.bad_orbits());
        for problem in unpacked.problems() {
            report.note(format!("{}: {problem}", claim.name.raw()));
        }
        if hlt.reads_file() {
            let path = outputs.unpacked(&claim.name);
            write_atomically(&path, unpacked.image())?;
            spooled = Some(SpooledFile(path));
        }
        (unpacked.image(), spooled.as_ref().map_or(claim.path.as_path(), |f| f.0.as_path()))
    } else {
        (bytes, claim.path.as_path())
    };
    let unpacked = &*unpacked;
    // Read every record the file holds; a file that breaks off is reported, its readable
    // events processed and the rest counted as errors (their bytes are not there to keep).
    let mut events: Vec<FrdEvent<'_>> = Vec::new();
    let mut offsets: Vec<usize> = Vec::new();
    let mut broken: Option<String> = if orbit_file { unpacked.broken().map(str::to_owned) } else { None };
    match RawFile::parse(bytes) {
        Ok(file) => {
            for event in file.events() {
                match event {
                    Ok((offset, e)) => {
                        offsets.push(offset);
                        events.push(e);
                    }
                    Err(e) => {
                        broken = Some(e.to_string());
                        break;
                    }
                }
            }
        }
        Err(e) => broken = Some(e.to_string()),
    }
    // Corrupt events are set aside before the HLT sees the rest. Batches of events are checked,
    // selected and written in turn, so that each batch is still in the cache when it is
    // selected and written (a raw file is larger than the cache).
    let record = |offset: usize, event: &FrdEvent<'_>| &bytes[offset..offset + event.record_bytes()];
    let batch_events = hlt.batch_events().max(1);
    let mut batch = Batch::default();
    let mut good = Vec::with_capacity(events.len().min(batch_events));
    let mut good_offsets = Vec::with_capacity(events.len().min(batch_events));
    let mut index = 0;
    for (events, offsets) in events.chunks(batch_events).zip(offsets.chunks(batch_events)) {
        good.clear();
        good_offsets.clear();
        for (event, &offset) in events.iter().zip(offsets) {
            // An event of a bad orbit is an error event; its orbit's problem is noted above.
            let bad_orbit = orbit_file && unpacked.bad_record(index).is_some();
            index += 1;
            match event.check_crc() {
                Ok(()) if !bad_orbit => {
                    good.push(*event);
                    good_offsets.push(offset);
                }
                Ok(()) => lumi.add_event(&mut batch, EventOutcome::Corrupt, record(offset, event), [error_stream]),
                Err(e) => {
                    report.note(format!("{} event {}: {e}", claim.name.raw(), event.header.event));
                    lumi.add_event(&mut batch, EventOutcome::Corrupt, record(offset, event), [error_stream]);
                }
            }
        }
        verdicts.clear();
        hlt.select_file(hlt_path, &good, verdicts)?;
        if verdicts.len() != good.len() {
            return Err(FuError::Hlt(format!(
                "{} verdicts for {} events of {}",
                verdicts.len(),
                good.len(),
                claim.name.raw()
            )));
        }
        for ((event, &offset), verdict) in good.iter().zip(&good_offsets).zip(verdicts.iter()) {
            match verdict {
                Verdict::Streams(set) => {
                    lumi.add_event(&mut batch, EventOutcome::Selected, record(offset, event), set.iter())
                }
                Verdict::Failed(reason) => {
                    report.note(format!("{} event {}: {reason}", claim.name.raw(), event.header.event));
                    lumi.add_event(&mut batch, EventOutcome::HltFailed, record(offset, event), [error_stream]);
                }
            }
        }
        lumi.write(&mut batch)?;
    }
    // Events of bad orbits that could not be unpacked: counted, their bytes are not there.
    let lost = if orbit_file { unpacked.lost_events() } else { 0 };
    for _ in 0..lost {
        lumi.add_event(&mut batch, EventOutcome::Corrupt, &[], []);
    }
    if let Some(problem) = broken {
        let readable = events.len() as u64 + lost;
        let missing = claim.indexed_events.unwrap_or(readable).saturating_sub(readable);
        report.note(format!("{}: {problem}; {missing} events unreadable", claim.name.raw()));
        for _ in 0..missing {
            lumi.add_event(&mut batch, EventOutcome::Corrupt, &[], []);
        }
    }
    lumi.add_input(claim.name.clone());
    Ok(())
}

/// A file written under the spool for an external HLT, removed when dropped (also when the
/// processing of its events fails; what a killed process leaves is removed by
/// [`FuOutputDir::finish_dead`]).
struct SpooledFile(PathBuf);

impl Drop for SpooledFile {
    fn drop(&mut self) {
        if let Err(e) = remove_if_present(&self.0) {
            tracing::warn!("{e}");
        }
    }
}
