//! A builder unit on real I/O.
//!
//! One thread runs the protocol: it reads the data frames of every RU (and of the EVM's node,
//! whose connection also carries the EVM's messages) into the frame store, hands the messages to
//! the core, and carries out the core's file actions. Writing raw files, the bulk of the work,
//! goes to a few writer threads through a bounded queue; each job carries shared handles to the
//! frames that hold its fragments, so nothing is copied between receipt and file. No file system
//! call blocks the loop: publishing, discarding and the end-of-lumi and end-of-run records go to
//! a bookkeeping thread ([`crate::bu_files::Bookkeeper`]) one at a time, in the order the core
//! asks for them (its later outputs wait for each result, the loop reading on meanwhile); the
//! disk's room (`statvfs`) and the filter farm's resource summaries (a listing and JSON reads)
//! come from a watcher thread ([`crate::ramdisk::DiskWatcher`]) and from the writers, after each
//! file. Every result comes back as a message on a bounded channel and wakes the loop.
//!
//! The loop is the event loop every unit shares (`crate::event_loop`), with the BU's own part
//! plugged in: its disk watcher, its room and throttle, its writers and bookkeeping, and the
//! rules of the EVM's going.
//!
//! Bounds: under pull the core asks only for events whose data fit in the store beside what it
//! holds (its requests are credits for room, `BuConfig::store_bytes`), and the loop reads all
//! that comes for them: a loop that stopped reading with its store full of parts of events that
//! wait for other RUs' parts would wait for ever. Under push, where RUs send unasked, the store
//! holds at most its budget of frames (the loop stops reading data while it is full, and TCP holds
//! the RUs back). The writer queue holds two jobs per thread; the core holds at most
//! `max_events_in_flight` events. Above the RAM disk's high-water mark the BU asks for
//! no events (`RAMDISK_HIGH_WATER`) until it is below the low-water mark.
//!
//! **RAM disk room** ([`crate::ramdisk`]): the BU's own writes never fill its disk. It asks for
//! no more events than fit below the high-water mark with what it already holds to write, and
//! hands a file to its writers only when the file fits in what is free; otherwise it holds back
//! (`RAMDISK_FULL`). A write that still finds the disk full (another writer took the room) is
//! removed and written again, whole, once there is room: the BU says so, holds back, and loses
//! nothing. Any other I/O error fails the BU.
//!
//! **Discard mode** ([`BuNodeConfig::discard`], for benchmarks of the chain without a disk): the
//! node touches no file system at all. It creates no run directory and no incarnation file, starts
//! no writer thread and never looks at a RAM disk. A `WriteFile` output is acknowledged at once as
//! written, its frames freed; `PublishFile` counts the file's events and fragment bytes as
//! published; `DiscardFile`, `EndOfLumi` and `EndOfRun` do nothing on disk. The protocol is
//! unchanged: the BU still asks for events, builds and checks them, and the EVM still commits.
//!
//! **A slow BU, for benchmarks** ([`BuNodeConfig::intake_events_per_s`]): the loop reads no
//! connection while the BU is ahead of a rate of events, so that `tessera bench protocols` can
//! compare how pull and push treat one BU slower than the others. No system file sets it.

use crate::bu_files::{BookAction, Bookkeeper, BookkeeperGone, BuFiles, BuFilesError, RawWriter, Written};
use crate::conn::{LinkSide, NoPieces};
use crate::error::NodeError;
use crate::event_loop::{Control, EventLoop, Links, Unit, io_err, pin_to, poller, say_end};
use crate::frame_store::{FrameStore, SharedFrames};
use crate::link::LinkKey;
use crate::ramdisk::{DiskWatcher, Room, Space, file_bytes};
use crate::state::{Transition, UnitState};
use crate::stats::{SubState, Throttle, UnitStats};
use mio::net::TcpStream;
use mio::{Poll, Token, Waker};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_config::TransportSection;
use tessera_evb::types::{Epoch, FIRST_EPOCH, FileId, Nanos, Peer};
use tessera_evb::unit::{BuOutput, BuiltEvent, Input};
use tessera_evb::wire::encode;
use tessera_evb::{Bu, BuConfig, BuDisk};
use tessera_rundir::resources::{FarmCpu, FarmPressure, assess, now_unix_ms};

mod conns;
mod disk;
mod outputs;
mod pass;
use disk::write_files;

/// How a BU node runs.
#[derive(Debug)]
pub struct BuNodeConfig {
    /// The run number, which every peer's link must name.
    pub run: u32,
    /// The run's link key, with which every peer proves that it belongs to the run.
    pub link_key: LinkKey,
    /// The BU core.
    pub bu: BuConfig,
    /// Where RUs connect to send data.
    pub data_listener: std::net::TcpListener,
    /// The EVM's address.
    pub evm: SocketAddr,
    /// The BU's output directory (on its RAM disk): the run directory goes under it.
    pub directory: PathBuf,
    /// The BU's name in its JSON documents.
    pub name: String,
    /// Restarting after a crash: reopen the run directory instead of creating it (when the BU has
    /// an incarnation on disk; with none, it starts afresh).
    pub restart: bool,
    /// Emulated data: set the FRD "generated" flag on every event.
    pub generated: bool,
    /// Threads that write raw files.
    pub writer_threads: usize,
    /// Bound on received data held until it is written, in bytes.
    pub frame_store_bytes: usize,
    /// Stop asking for events above this fullness of the RAM disk, in percent.
    pub ramdisk_high_water_percent: u8,
    /// Ask again below this fullness, in percent.
    pub ramdisk_low_water_percent: u8,
    /// How long to keep trying to reach the EVM at start-up.
    pub connect_timeout: Duration,
    /// Largest protocol frame accepted, in bytes.
    pub max_frame_bytes: u32,
    /// The addresses RUs may send data from; `None` accepts any.
    pub allowed_peers: Option<Vec<std::net::IpAddr>>,
    /// Discard mode (see the module docs): build events, write nothing. `directory`, `name`,
    /// `restart`, `generated`, `writer_threads` and the RAM-disk marks are then unused.
    pub discard: bool,
    /// Orbit mode: each event is an orbit, files are orbit files (docs/formats.md §6) and the
    /// bookkeeping counts orbits beside events.
    pub orbits: bool,
    /// Orbit mode: check every orbit block's CRC-32C before writing it, because some RU does not
    /// check them all (`ru.fragment_crc_check` other than `always`); CMSSW's reader refuses a
    /// file that holds a bad one.
    pub check_orbit_crc: bool,
    /// Pin the unit's loop thread to this CPU core; a core that cannot be had is reported, and
    /// the unit runs unpinned.
    pub pin_core: Option<usize>,
    /// What its protocol links travel on, per link class (`transport` of the system file).
    pub transport: TransportSection,
    /// Hold back on the filter farm's resource summaries in `directory` (see
    /// [`tessera_rundir::resources`]); `None` when no farm reads this BU's files.
    pub farm_limits: Option<tessera_rundir::resources::FarmLimits>,
    /// **Benchmarks only**: a slow BU (`tessera bench protocols`). The loop reads no connection
    /// while the events its core has built run ahead of this many per second since it was
    /// enabled (a token bucket that holds [`INTAKE_BURST`] of them), so the BU takes events at
    /// most at this rate whatever the protocol offers it, as a BU whose disk or farm is slow
    /// would. `None`: as fast as it can. No system file sets it; `tessera_control::plan` leaves
    /// it `None`.
    pub intake_events_per_s: Option<f64>,
}

/// How a BU node ended.
#[derive(Debug, Clone, Default)]
pub struct BuReport {
    /// The core's counters.
    pub counters: tessera_evb::bu::BuCounters,
    /// Events published in files by this incarnation (in orbit mode, orbits: the protocol's
    /// units).
    pub events_published: u64,
    /// The protocol's units (events, or in orbit mode orbits) published in the run by every
    /// incarnation of this BU, as its disk's ledger and its own publications say.
    pub published_in_run: u64,
    /// Events published in the run by every incarnation (in orbit mode, the events in its
    /// orbits): what its readers see in all.
    pub events_in_run: u64,
    /// Files published in the run by every incarnation, where readers see them.
    pub files_in_run: u64,
    /// Orbit mode: the events in the orbits it published.
    pub orbit_events: u64,
    /// Orbit mode: the orbits it wrote in the files it published (those with events).
    pub orbits_written: u64,
    /// Files it published in its run directory, where readers see them (an orbit file whose
    /// orbits were all empty is counted in the protocol's `counters.files_published` but
    /// removed, never published).
    pub files_published: u64,
    /// Orbit mode: blocks it left out of their orbits, per source and reason key
    /// ([`crate::bu_files::LeftOut::reason`]).
    pub blocks_left_out: BTreeMap<u16, BTreeMap<&'static str, u64>>,
    /// Its run directory (empty in discard mode).
    pub run_dir: PathBuf,
    /// Its incarnation.
    pub epoch: Epoch,
}

/// How long a BU that has written its end-of-run record waits for the EVM to close.
const FINAL_ACK_WAIT: Duration = Duration::from_secs(10);
/// How long a file waits for room before the BU looks again: after a write found the disk full,
/// or when the file does not fit in what is free.
const DISK_FULL_RETRY: Duration = Duration::from_millis(200);
/// How long a BU may hold back for its RAM disk before it says so, with what would free it.
const DISK_HELD_SAID_AFTER: Duration = Duration::from_secs(5);
/// The most a capped BU ([`BuNodeConfig::intake_events_per_s`]) takes ahead of its rate: this
/// long at that rate (and at least one event), so that it never idles between reads.
pub const INTAKE_BURST: Duration = Duration::from_millis(5);

/// The token bucket of a capped BU ([`BuNodeConfig::intake_events_per_s`]): events it may still
/// build before it reads again. A read brings whole messages, so the tokens go below zero by up
/// to a message's events, and the loop waits until they are back above it: the rate holds on
/// average, a read's worth at a time.
#[derive(Debug, Clone)]
struct Intake {
    events_per_s: f64,
    burst_events: f64,
    tokens: f64,
    at: Instant,
    built: u64,
}

impl Intake {
    fn new(events_per_s: f64, now: Instant, built: u64) -> Intake {
        let burst_events = (events_per_s * INTAKE_BURST.as_secs_f64()).max(1.0);
        Intake { events_per_s, burst_events, tokens: burst_events, at: now, built }
    }

    /// Refills for the time since the last look and takes the events built since.
    fn update(&mut self, now: Instant, built: u64) {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.events_per_s;
        self.tokens = (self.tokens + refill).min(self.burst_events) - built.saturating_sub(self.built) as f64;
        (self.at, self.built) = (now, built.max(self.built));
    }

    /// Whether the BU may read now.
    fn open(&self) -> bool {
        self.tokens > 0.0
    }

    /// How long until it may read again (zero when it may now).
    fn wait(&self) -> Duration {
        if self.open() {
            return Duration::ZERO;
        }
        // Just past zero: one more token's time, so the loop does not wake a hair too early.
        Duration::from_secs_f64((1.0 - self.tokens) / self.events_per_s)
    }
}

struct Job {
    file: FileId,
    events: Vec<BuiltEvent>,
    frames: SharedFrames,
    /// The file's size, header included.
    bytes: u64,
}

/// A job back from a writer: its frames are still held, for a file that found the disk full
/// is written again; with the writer's look at the disk after it, and when it was taken.
/// A written file's result carries what its writer left out of it, to say (orbit mode).
type Done = (Job, Result<Written, BuFilesError>, Instant, Option<Space>);

/// A BU node, ready to run.
pub struct BuNode {
    cfg: BuNodeConfig,
    stats: Arc<UnitStats>,
    control: Control,
    poll: Poll,
}

/// The file a BU keeps its incarnation number in, beside its run directory.
fn epoch_path(directory: &Path, run: u32) -> PathBuf {
    directory.join(format!(".epoch-run{run:06}"))
}

/// The next incarnation of the BU: one more than the last, kept on disk across crashes.
fn next_epoch(directory: &Path, run: u32, restart: bool) -> Result<Epoch, NodeError> {
    let path = epoch_path(directory, run);
    let last: Epoch = if restart {
        std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(FIRST_EPOCH - 1)
    } else {
        FIRST_EPOCH - 1
    };
    let epoch = last + 1;
    std::fs::create_dir_all(directory).map_err(io_err(format!("creating {}", directory.display())))?;
    tessera_rundir::write_atomically(&path, epoch.to_string().as_bytes())
        .map_err(|e| NodeError::Incarnation { path: path.clone(), source: Box::new(e) })?;
    Ok(epoch)
}

impl BuNode {
    /// Sets up the node's poller.
    pub fn new(cfg: BuNodeConfig) -> Result<Self, NodeError> {
        let (poll, control) = poller()?;
        Ok(BuNode { cfg, stats: Arc::new(UnitStats::default()), control, poll })
    }

    /// The unit's live figures.
    pub fn stats(&self) -> Arc<UnitStats> {
        self.stats.clone()
    }

    /// The run-control handle.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Runs the BU until it has written its end-of-run record.
    pub fn run(self) -> Result<BuReport, NodeError> {
        let BuNode { cfg, stats, control, poll } = self;
        stats.transition(Transition::Configure);
        pin_to(cfg.pin_core, &stats, &format!("BU {}", cfg.bu.bu));
        let generated = cfg.generated;
        // A restart with no incarnation on disk (a first start under a supervisor that always
        // says restart, or a new RAM disk) has nothing to recover: it starts afresh.
        let restart = cfg.restart && epoch_path(&cfg.directory, cfg.run).exists();
        let (files, disk, epoch) = if cfg.discard {
            (None, BuDisk::default(), FIRST_EPOCH)
        } else {
            let (files, disk) = if restart {
                BuFiles::reopen(&cfg.directory, cfg.run, &cfg.name, generated, cfg.orbits, cfg.bu.bu)?
            } else {
                (BuFiles::create(&cfg.directory, cfg.run, &cfg.name, generated, cfg.orbits)?, BuDisk::default())
            };
            let files = files.checking_orbit_crc(cfg.check_orbit_crc);
            (Some(files), disk, next_epoch(&cfg.directory, cfg.run, restart)?)
        };
        let threads = if files.is_some() { cfg.writer_threads.max(1) } else { 0 };
        let (job_tx, job_rx) = sync_channel::<Job>(2 * threads.max(1));
        let (done_tx, done_rx) = sync_channel::<Done>(2 * threads.max(1) + 1);
        let job_rx = Arc::new(std::sync::Mutex::new(job_rx));
        let waker = control.waker();
        let writers: Vec<JoinHandle<()>> = files
            .iter()
            .flat_map(|files| (0..threads).map(move |i| (i, files.writer(), files.path().to_owned())))
            .map(|(i, writer, run_dir)| {
                let (jobs, done, waker) = (job_rx.clone(), done_tx.clone(), waker.clone());
                std::thread::Builder::new()
                    .name(format!("bu{}-writer{i}", cfg.bu.bu))
                    .spawn(move || write_files(jobs, done, writer, &run_dir, waker))
                    .expect("spawning a writer thread")
            })
            .collect();
        drop(done_tx);
        let (files_before, events_before) = files.as_ref().map_or((0, 0), BuFiles::published_so_far);
        let core = Bu::new(cfg.bu.clone(), epoch, disk);
        // Under pull the core keeps the store within its budget by what it asks for; the frames
        // that come for its requests are always taken.
        let store = FrameStore::new(if cfg.bu.push.is_some() { cfg.frame_store_bytes } else { usize::MAX });
        // The first look at the disk before the loop starts; the watcher's follow.
        let room = files.as_ref().map(|f| {
            let mut room = Room::new(f.path(), cfg.ramdisk_high_water_percent);
            if let Some(space) = Space::of(f.path()) {
                room.look(Instant::now(), space);
            }
            room
        });
        let watcher = match &files {
            Some(f) => {
                let farm = cfg.farm_limits.is_some().then(|| (cfg.directory.clone(), cfg.run));
                let waker = waker.clone();
                let wake = move || {
                    let _ = waker.wake();
                };
                let name = format!("bu{}-disk", cfg.bu.bu);
                Some(
                    DiskWatcher::start(name, f.path().to_owned(), farm, wake)
                        .map_err(io_err("starting the disk watcher"))?,
                )
            }
            None => None,
        };
        let run_dir = files.as_ref().map(|f| f.path().to_owned()).unwrap_or_default();
        let books = match files {
            Some(files) => {
                let waker = waker.clone();
                let wake = move || {
                    let _ = waker.wake();
                };
                let name = format!("bu{}-books", cfg.bu.bu);
                Some(Bookkeeper::start(files, name, wake).map_err(io_err("starting the bookkeeping thread"))?)
            }
            None => None,
        };
        let links = Links {
            side: LinkSide {
                me: Peer::Bu(cfg.bu.bu),
                run: cfg.run,
                key: cfg.link_key.clone(),
                transport: cfg.transport.clone(),
            },
            max_frame_bytes: cfg.max_frame_bytes,
            connect_timeout: cfg.connect_timeout,
            allowed_peers: cfg.allowed_peers.clone(),
        };
        let mut lp = BuLoop {
            io: EventLoop::new(poll, control, stats.clone(), 256, links)?,
            evm_conn: None,
            room,
            watcher,
            writing_bytes: 0,
            retry_at: None,
            waits_for_room: false,
            disk_full_said: false,
            deferred: None,
            run_dir,
            books,
            at_books: None,
            discarded: BTreeMap::new(),
            core,
            store,
            unread: BTreeMap::new(),
            jobs: Some(job_tx),
            backlog: VecDeque::new(),
            done: done_rx,
            writing: 0,
            ended: false,
            published: 0,
            files_before,
            events_before,
            orbit_events: 0,
            orbits_written: 0,
            files_published: 0,
            blocks_left_out: BTreeMap::new(),
            held: Held::default(),
            intake: None,
            stats,
            epoch,
            cfg,
        };
        let result = lp.run();
        lp.jobs = None; // the writers end when the queue closes
        lp.watcher = None;
        for w in writers {
            let _ = w.join();
        }
        say_end(&lp.stats, &result, false);
        result
    }
}

/// A BU node's part of its event loop: its core, its frame store, its writer and bookkeeping
/// threads, its RAM disk's room, and what holds it back.
struct BuLoop {
    cfg: BuNodeConfig,
    core: Bu,
    /// The event loop's shared half: poller, clock, protocol connections, run control.
    io: EventLoop,
    /// The connection to the EVM, once opened.
    evm_conn: Option<Token>,
    /// The bookkeeping thread, which owns the run directory; `None` in discard mode.
    books: Option<Bookkeeper>,
    /// The core's output the bookkeeping thread carries out now.
    at_books: Option<BuOutput>,
    /// Discard mode: the events and fragment bytes of each file acknowledged as written and not
    /// yet published or discarded (as many as the core has files open: bounded by its in-flight
    /// events).
    discarded: BTreeMap<FileId, (u64, u64)>,
    store: FrameStore,
    /// Per connection, messages read that the core has not taken yet (see
    /// `BuLoop::feed_unread`).
    unread: BTreeMap<Token, VecDeque<(Peer, tessera_evb::msg::Message)>>,
    stats: Arc<UnitStats>,
    jobs: Option<SyncSender<Job>>,
    /// Files to write that wait for room in the writers' queue.
    backlog: VecDeque<Job>,
    done: Receiver<Done>,
    /// Files handed to the writers and not yet back.
    writing: usize,
    /// The room on its RAM disk; `None` in discard mode.
    room: Option<Room>,
    /// Looks at the disk and the filter farm off the loop; `None` in discard mode.
    watcher: Option<DiskWatcher>,
    /// Bytes of the files in the writers' queue or being written.
    writing_bytes: u64,
    /// When the file first in the backlog may be tried again, after it found no room.
    retry_at: Option<Instant>,
    /// The file first in the backlog waits for room on the disk.
    waits_for_room: bool,
    /// A full disk has been reported and no file written since.
    disk_full_said: bool,
    /// The core's output that found the disk full (a publication, an end-of-lumi or end-of-run
    /// record), to be carried out again at the time given, before any later one. Not at
    /// `retry_at`: a file that waits for room keeps putting that off, and only publishing makes
    /// room for it.
    deferred: Option<(BuOutput, Instant)>,
    ended: bool,
    published: u64,
    /// Files, and events in them, that earlier incarnations published, as the ledger says.
    files_before: u64,
    events_before: u64,
    /// Orbit mode: events in the orbits published, and those orbits.
    orbit_events: u64,
    orbits_written: u64,
    /// Files published where readers see them ([`BuReport::files_published`]).
    files_published: u64,
    /// Orbit mode: blocks left out of their orbits ([`BuReport::blocks_left_out`]).
    blocks_left_out: BTreeMap<u16, BTreeMap<&'static str, u64>>,
    /// What holds the BU back, and how its run ends.
    held: Held,
    /// A capped BU's intake (benchmarks only, [`BuNodeConfig::intake_events_per_s`]).
    intake: Option<Intake>,
    run_dir: PathBuf,
    epoch: Epoch,
}

/// What holds a BU back (its RAM disk, the filter farm), since when, and how its run ends.
struct Held {
    /// The RAM disk is above its high-water mark (until below the low one).
    ramdisk_high: bool,
    /// The filter farm's pressure, as last assessed.
    farm: Option<FarmPressure>,
    /// The filter farm's CPU time, from its summaries.
    farm_cpu: FarmCpu,
    /// The throttle the core was last given.
    throttle: Throttle,
    /// Since when the BU holds back for its RAM disk, and whether it has said so.
    disk_held: Option<Instant>,
    disk_held_said: bool,
    /// When the farm's grace starts: when the BU took data.
    started: Instant,
    /// When the BU wrote its end-of-run record.
    ended_at: Option<Instant>,
    /// When the EVM's connection was found closed.
    evm_gone_at: Option<Instant>,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            ramdisk_high: false,
            farm: None,
            farm_cpu: FarmCpu::default(),
            throttle: Throttle::None,
            disk_held: None,
            disk_held_said: false,
            started: Instant::now(),
            ended_at: None,
            evm_gone_at: None,
        }
    }
}

impl BuLoop {
    fn now(&self) -> Nanos {
        self.io.now()
    }

    /// Opens the EVM's connection and the data port, waits to be enabled, then runs the loop
    /// until the BU has written its end-of-run record.
    fn run(&mut self) -> Result<BuReport, NodeError> {
        let evm = self.io.connect(self.cfg.evm, Peer::Evm)?;
        self.evm_conn = Some(self.io.open(TcpStream::from_std(evm), Peer::Evm)?);
        self.io.listen(&self.cfg.data_listener, "data listener")?;
        self.io.enable(&format!("BU {}", self.cfg.bu.bu))?;
        // The farm's grace counts from the moment the BU takes data, and so does the intake's
        // rate.
        self.held.started = Instant::now();
        let built = self.core.counters().events_built;
        self.intake = self.cfg.intake_events_per_s.map(|rate| Intake::new(rate, self.held.started, built));
        crate::event_loop::run(self)
    }

    /// Takes what the core built since the intake's last look (a capped BU only).
    fn update_intake(&mut self) {
        if let Some(intake) = &mut self.intake {
            intake.update(Instant::now(), self.core.counters().events_built);
        }
    }

    fn publish_stats(&self, throttle: Throttle) {
        let c = self.core.counters();
        if c.incomplete_events > self.stats.incomplete_events.get() {
            self.stats.saw(SubState::MissingData);
        }
        self.stats.events_built.set(c.events_built);
        self.stats.incomplete_events.set(c.incomplete_events);
        self.stats.aged_events.set(c.aged_events);
        self.stats.late_parts.set(c.late_parts);
        // The run's, every incarnation's: a BU started again goes on from its predecessors'
        // count, so what a controller sums never goes back.
        self.stats.events_published.set(self.core.published_in_run());
        self.stats.store_bytes.set(self.store.held() as u64);
        self.stats.events_in_flight.set(u64::from(self.core.events_in_flight()));
        // Under push the store's budget bounds what is read; under pull the core's credits do.
        let full = !self.store_has_room() || self.core.short_of_store();
        self.stats.set_throttle(if throttle != Throttle::None {
            throttle
        } else if full {
            Throttle::StoreFull
        } else if self.core.throttled() {
            Throttle::PushHighWater
        } else {
            Throttle::None
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_intake_reads_at_its_rate_on_average_a_read_at_a_time() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // 1000 events/s: a burst of 5 events (5 ms of them).
        let mut intake = Intake::new(1000.0, t0, 100);
        assert!(intake.open() && intake.wait() == Duration::ZERO);
        // A read brought 20 events: 15 beyond the burst, so 16 ms until the next read.
        intake.update(t0, 120);
        assert!(!intake.open());
        assert_eq!(intake.wait().as_millis(), 16);
        intake.update(ms(10), 120);
        assert!(!intake.open(), "{intake:?}");
        intake.update(ms(16), 120);
        assert!(intake.open(), "{intake:?}");
        // Idle time does not pile up beyond the burst.
        intake.update(ms(1000), 120);
        intake.update(ms(1000), 126);
        assert!(!intake.open(), "{intake:?}");
    }

    /// A BU's loop with a RAM disk of `free` bytes (as last looked at), no threads and no
    /// connection; the sender of `done` must live while a file is at the writers.
    fn bu_loop(free: u64, done: Receiver<Done>) -> (BuLoop, Receiver<Job>) {
        let (poll, control) = poller().unwrap();
        let stats = Arc::new(UnitStats::default());
        let key = LinkKey::from_bytes([7; 32]);
        let side = LinkSide { me: Peer::Bu(0), run: 1, key: key.clone(), transport: TransportSection::default() };
        let links =
            Links { side, max_frame_bytes: 1 << 20, connect_timeout: Duration::from_secs(5), allowed_peers: None };
        let io = EventLoop::new(poll, control, stats.clone(), 16, links).unwrap();
        let cfg = BuNodeConfig {
            run: 1,
            link_key: key,
            bu: BuConfig::new(0, 1),
            data_listener: std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            evm: "127.0.0.1:1".parse().unwrap(),
            directory: std::env::temp_dir(),
            name: "bu0".into(),
            restart: false,
            generated: false,
            writer_threads: 1,
            frame_store_bytes: usize::MAX,
            ramdisk_high_water_percent: 80,
            ramdisk_low_water_percent: 70,
            connect_timeout: Duration::from_secs(5),
            max_frame_bytes: 1 << 20,
            allowed_peers: None,
            discard: false,
            orbits: false,
            check_orbit_crc: false,
            pin_core: None,
            transport: TransportSection::default(),
            farm_limits: None,
            intake_events_per_s: None,
        };
        let mut room = Room::new(&cfg.directory, cfg.ramdisk_high_water_percent);
        room.look(Instant::now(), Space { free_bytes: free, total_bytes: 6 << 20 });
        let (jobs, queued) = sync_channel(2);
        let lp = BuLoop {
            core: Bu::new(cfg.bu.clone(), FIRST_EPOCH, BuDisk::default()),
            io,
            evm_conn: None,
            books: None,
            at_books: None,
            discarded: BTreeMap::new(),
            store: FrameStore::new(usize::MAX),
            unread: BTreeMap::new(),
            stats,
            jobs: Some(jobs),
            backlog: VecDeque::new(),
            done,
            writing: 0,
            room: Some(room),
            watcher: None,
            writing_bytes: 0,
            retry_at: None,
            waits_for_room: false,
            disk_full_said: false,
            deferred: None,
            ended: false,
            published: 0,
            files_before: 0,
            events_before: 0,
            orbit_events: 0,
            orbits_written: 0,
            files_published: 0,
            blocks_left_out: BTreeMap::new(),
            held: Held::default(),
            intake: None,
            run_dir: PathBuf::new(),
            epoch: FIRST_EPOCH,
            cfg,
        };
        (lp, queued)
    }

    #[test]
    fn a_publication_that_found_the_disk_full_is_retried_while_a_file_waits_for_room() {
        let (_done, done) = sync_channel(1);
        let (mut lp, queued) = bu_loop(1 << 20, done);
        let file = |index| FileId { bu: 0, lumi_section: 1, index };
        // The next file does not fit in what is free; only publishing the file before it (which
        // found the disk full) makes room, for readers then take it away.
        let job = Job { file: file(1), events: Vec::new(), frames: lp.store.share(&[]), bytes: 600_000 };
        lp.backlog.push_back(job);
        lp.writing = 1;
        lp.deferred = Some((BuOutput::PublishFile(file(0)), Instant::now()));
        for _ in 0..3 {
            lp.prepare().unwrap();
            lp.step(lp.now()).unwrap();
        }
        assert!(lp.deferred.is_none(), "the publication was carried out again");
        assert_eq!(lp.files_published, 1);
        assert!(lp.waits_for_room && lp.backlog.len() == 1 && queued.try_recv().is_err(), "the file still waits");
    }
}
