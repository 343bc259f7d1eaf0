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
//! Bounds: the store holds at most its budget of frames (the loop stops reading data while it is
//! full, and TCP holds the RUs back); the writer queue holds two jobs per thread; the core holds
//! at most `max_events_in_flight` events. Above the RAM disk's high-water mark the BU asks for
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

use crate::bu_files::{BookAction, Bookkeeper, BookkeeperGone, BuFiles, BuFilesError, RawWriter};
use crate::conn::{Conn, ConnError, LinkSide, NoPieces};
use crate::frame_store::{FrameStore, SharedFrames};
use crate::link::LinkKey;
use crate::ramdisk::{DiskWatcher, Room, Space, file_bytes};
use crate::ru_node::{Control, NodeError, WAKER, connect, io_err, poller};
use crate::state::{Transition, UnitState};
use crate::stats::{CpuSampler, SubState, Throttle, UnitStats};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_evb::types::{Epoch, FileId, Nanos, Peer};
use tessera_evb::unit::{BuOutput, BuiltEvent, Input};
use tessera_evb::wire::encode;
use tessera_evb::{Bu, BuConfig, BuDisk};
use tessera_rundir::resources::{FarmCpu, FarmPressure, assess, now_unix_ms};

mod conns;
mod disk;
mod outputs;
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
    /// Restarting after a crash: reopen the run directory instead of creating it.
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
    /// Pin the unit's loop thread to this CPU core; a core that cannot be had is reported, and
    /// the unit runs unpinned.
    pub pin_core: Option<usize>,
    /// Hold back on the filter farm's resource summaries in `directory` (see
    /// [`tessera_rundir::resources`]); `None` when no farm reads this BU's files.
    pub farm_limits: Option<tessera_rundir::resources::FarmLimits>,
}

/// How a BU node ended.
#[derive(Debug, Clone, Default)]
pub struct BuReport {
    /// The core's counters.
    pub counters: tessera_evb::bu::BuCounters,
    /// Events published in files by this incarnation.
    pub events_published: u64,
    /// Its run directory (empty in discard mode).
    pub run_dir: PathBuf,
    /// Its incarnation.
    pub epoch: Epoch,
}

const DATA_LISTENER: Token = Token(1);
const EVM_CONN: Token = Token(2);
const CONN_BASE: usize = 16;
const MAX_SLEEP: Duration = Duration::from_millis(10);
/// How long a BU that has written its end-of-run record waits for the EVM to close.
const FINAL_ACK_WAIT: Duration = Duration::from_secs(10);
/// How long a file waits for room before the BU looks again: after a write found the disk full,
/// or when the file does not fit in what is free.
const DISK_FULL_RETRY: Duration = Duration::from_millis(200);
/// How long a BU may hold back for its RAM disk before it says so, with what would free it.
const DISK_HELD_SAID_AFTER: Duration = Duration::from_secs(5);

struct Job {
    file: FileId,
    events: Vec<BuiltEvent>,
    frames: SharedFrames,
    /// The file's size, header included.
    bytes: u64,
}

/// A job back from a writer: its frames are still held, for a file that found the disk full
/// is written again; with the writer's look at the disk after it, and when it was taken.
type Done = (Job, Result<(), BuFilesError>, Instant, Option<Space>);

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
    let last: Epoch =
        if restart { std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0) } else { 0 };
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
        crate::ru_node::pin_to(cfg.pin_core, &stats, &format!("BU {}", cfg.bu.bu));
        let generated = cfg.generated;
        let (files, disk, epoch) = if cfg.discard {
            (None, BuDisk::default(), 1)
        } else {
            let (files, disk) = if cfg.restart {
                BuFiles::reopen(&cfg.directory, cfg.run, &cfg.name, generated, cfg.bu.bu)?
            } else {
                (BuFiles::create(&cfg.directory, cfg.run, &cfg.name, generated)?, BuDisk::default())
            };
            (Some(files), disk, next_epoch(&cfg.directory, cfg.run, cfg.restart)?)
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
        let core = Bu::new(cfg.bu.clone(), epoch, disk);
        let store = FrameStore::new(cfg.frame_store_bytes);
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
        let mut lp = BuLoop {
            start: Instant::now(),
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
            cpu: CpuSampler::default(),
            core,
            store,
            conns: BTreeMap::new(),
            next_conn: CONN_BASE,
            jobs: Some(job_tx),
            backlog: VecDeque::new(),
            done: done_rx,
            writing: 0,
            ended: false,
            published: 0,
            stats,
            control,
            poll,
            epoch,
            cfg,
        };
        let result = lp.run();
        lp.jobs = None; // the writers end when the queue closes
        lp.watcher = None;
        for w in writers {
            let _ = w.join();
        }
        match &result {
            Ok(_) => lp.stats.end_cleanly(),
            Err(e) => {
                // Said where run control looks, before the state says Failed.
                lp.stats.problem(e.to_string());
                lp.stats.set_failed()
            }
        }
        result
    }
}

struct BuLoop {
    cfg: BuNodeConfig,
    core: Bu,
    /// The bookkeeping thread, which owns the run directory; `None` in discard mode.
    books: Option<Bookkeeper>,
    /// The core's output the bookkeeping thread carries out now.
    at_books: Option<BuOutput>,
    /// Discard mode: the events and fragment bytes of each file acknowledged as written and not
    /// yet published or discarded (as many as the core has files open: bounded by its in-flight
    /// events).
    discarded: BTreeMap<FileId, (u64, u64)>,
    store: FrameStore,
    cpu: CpuSampler,
    stats: Arc<UnitStats>,
    control: Control,
    poll: Poll,
    start: Instant,
    conns: BTreeMap<Token, Conn>,
    next_conn: usize,
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
    /// record), to be carried out again before any later one.
    deferred: Option<BuOutput>,
    ended: bool,
    published: u64,
    run_dir: PathBuf,
    epoch: Epoch,
}

impl BuLoop {
    fn now(&self) -> Nanos {
        self.start.elapsed().as_nanos() as Nanos
    }

    fn run(&mut self) -> Result<BuReport, NodeError> {
        let side = LinkSide { me: Peer::Bu(self.cfg.bu.bu), run: self.cfg.run, key: self.cfg.link_key.clone() };
        let evm = connect(self.cfg.evm, Peer::Evm, self.cfg.connect_timeout, &self.control)?;
        let mut conn = Conn::opened(TcpStream::from_std(evm), EVM_CONN, Peer::Evm, &side, self.cfg.max_frame_bytes);
        conn.register(self.poll.registry()).map_err(io_err("registering the EVM connection"))?;
        self.conns.insert(EVM_CONN, conn);
        let l = self.cfg.data_listener.try_clone().map_err(io_err("data listener"))?;
        l.set_nonblocking(true).map_err(io_err("data listener"))?;
        let mut listener = TcpListener::from_std(l);
        self.poll
            .registry()
            .register(&mut listener, DATA_LISTENER, Interest::READABLE)
            .map_err(io_err("data listener"))?;
        let mut events = Events::with_capacity(256);
        let mut ramdisk_high = false;
        let mut farm: Option<FarmPressure> = None;
        let mut farm_cpu = FarmCpu::default();
        let mut throttle = Throttle::None;
        let mut ended_at: Option<Instant> = None;
        let mut evm_gone_at: Option<Instant> = None;
        // Since when the BU holds back for its RAM disk, and whether it has said so.
        let mut disk_held: Option<Instant> = None;
        let mut disk_held_said = false;
        self.stats.transition(Transition::Configured);
        self.control.wait_enabled(&format!("BU {}", self.cfg.bu.bu), &self.stats)?;
        self.stats.transition(Transition::Enable);
        let enabled_at = Instant::now();
        // The farm's grace counts from the moment the BU takes data.
        let started = Instant::now();
        loop {
            if self.control.aborted() {
                return Err(NodeError::Aborted(format!("{} events in flight", self.core.events_in_flight())));
            }
            if self.core.draining() && self.stats.state() == UnitState::Enabled {
                self.stats.transition(Transition::Stop);
            }
            let looks: Vec<_> = self.watcher.iter().flat_map(|w| w.looks()).collect();
            for look in looks {
                if let Some(space) = look.space
                    && let Some(room) = &mut self.room
                {
                    room.look(look.at, space);
                }
                if let Some(full) = look.space.and_then(|s| s.used_percent()) {
                    self.stats.ramdisk_used_percent.set(u64::from(full));
                    if !ramdisk_high && full >= self.cfg.ramdisk_high_water_percent {
                        ramdisk_high = true;
                        self.stats.problem(format!("BU {}: RAM disk {full}% full: RAMDISK_HIGH_WATER", self.cfg.bu.bu));
                    } else if ramdisk_high && full <= self.cfg.ramdisk_low_water_percent {
                        ramdisk_high = false;
                    }
                }
                if let (Some(limits), Some(summaries)) = (&self.cfg.farm_limits, look.summaries) {
                    let now_ms = now_unix_ms();
                    let pressure = assess(&summaries, now_ms, started.elapsed(), limits);
                    self.stats.fu_cpu_ms.set((farm_cpu.update(&summaries) * 1e3) as u64);
                    let live: Vec<_> = summaries
                        .iter()
                        .filter(|s| now_ms.saturating_sub(s.updated_unix_ms) <= limits.stale_after.as_millis() as u64)
                        .collect();
                    self.stats.fu_processes.set(live.len() as u64);
                    self.stats.fu_free_slots.set(live.iter().map(|s| u64::from(s.free_slots)).sum());
                    self.stats
                        .fu_queued_lumi_sections
                        .set(live.iter().map(|s| u64::from(s.queued_lumi_sections)).max().unwrap_or(0));
                    self.stats.fu_output_bytes_per_s.set(live.iter().map(|s| s.output_bytes_per_s as u64).sum());
                    if let Some(p) = &pressure
                        && farm.as_ref().is_none_or(|f: &FarmPressure| f.key() != p.key())
                    {
                        self.stats.problem(format!("BU {}: {p}", self.cfg.bu.bu));
                    }
                    farm = pressure;
                }
            }
            let now_throttle = if self.waits_for_room || self.deferred.is_some() {
                Throttle::RamdiskFull
            } else if ramdisk_high {
                Throttle::RamdiskHighWater
            } else {
                farm.as_ref().map_or(Throttle::None, Throttle::of_farm)
            };
            if now_throttle != throttle {
                throttle = now_throttle;
                let now = self.now();
                self.core.set_throttle(now, (throttle != Throttle::None).then(|| throttle.key()));
            }
            self.update_room();
            self.hand_to_writers()?;
            let held = self.held_for_room(throttle);
            if matches!(held, Throttle::RamdiskFull | Throttle::RamdiskHighWater) {
                let since = *disk_held.get_or_insert_with(Instant::now);
                if since.elapsed() >= DISK_HELD_SAID_AFTER && !disk_held_said {
                    disk_held_said = true;
                    self.say_disk_held(held, since.elapsed());
                }
            } else {
                disk_held = None;
                disk_held_said = false;
            }
            let now = self.now();
            if self.core.next_timeout().is_some_and(|t| now >= t) {
                self.core.handle(now, Input::Tick);
            }
            self.dispatch()?;
            self.collect_written()?;
            self.collect_books()?;
            let busy = self.read_conns()?;
            self.close_overdue_links(enabled_at)?;
            self.dispatch()?;
            self.flush_conns();
            self.publish_stats(self.held_for_room(throttle));
            self.cpu.sample(&self.stats, false);
            // After its end-of-run record the BU still acknowledges its last end-of-lumi
            // records; the EVM closes the connection once it has them all.
            if self.ended {
                let since = *ended_at.get_or_insert_with(Instant::now);
                if !self.conns.contains_key(&EVM_CONN) || since.elapsed() > FINAL_ACK_WAIT {
                    return Ok(BuReport {
                        counters: self.core.counters(),
                        events_published: self.published,
                        run_dir: self.run_dir.clone(),
                        epoch: self.epoch,
                    });
                }
            } else if !self.conns.contains_key(&EVM_CONN) {
                // The EVM may close as soon as it has every acknowledgement, while this BU's
                // end-of-run record is still on its way to the disk: that is no loss, for a while.
                let gone = *evm_gone_at.get_or_insert_with(Instant::now);
                if !self.core.run_ended() || gone.elapsed() > FINAL_ACK_WAIT {
                    return Err(NodeError::EvmLostBeforeEnd {
                        bu: self.cfg.bu.bu,
                        why: Some("it closed the connection".into()),
                        pending: self.core.pending(),
                    });
                }
            }
            let wait = if busy {
                Duration::ZERO
            } else {
                let until = self.core.next_timeout().map(|t| Duration::from_nanos(t.saturating_sub(self.now())));
                until.map_or(MAX_SLEEP, |u| u.min(MAX_SLEEP))
            };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(NodeError::Io { what: "polling".into(), source: e }),
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER => {}
                    DATA_LISTENER => {
                        while let Ok((stream, _)) = listener.accept() {
                            let _ = stream.set_nodelay(true);
                            let token = Token(self.next_conn);
                            self.next_conn += 1;
                            let mut c = Conn::accepted(stream, token, &side, self.cfg.max_frame_bytes)
                                .map_err(io_err("a challenge for a connection"))?;
                            c.register(self.poll.registry()).map_err(io_err("registering a connection"))?;
                            self.conns.insert(token, c);
                        }
                    }
                    token => {
                        if let Some(c) = self.conns.get_mut(&token) {
                            c.readable = true;
                        }
                    }
                }
            }
        }
    }

    fn publish_stats(&self, throttle: Throttle) {
        let c = self.core.counters();
        if c.incomplete_events > self.stats.incomplete_events.get() {
            self.stats.saw(SubState::MissingData);
        }
        self.stats.events_built.set(c.events_built);
        self.stats.incomplete_events.set(c.incomplete_events);
        self.stats.events_published.set(self.published);
        self.stats.store_bytes.set(self.store.held() as u64);
        self.stats.events_in_flight.set(u64::from(self.core.events_in_flight()));
        let full = self.store.held() + self.cfg.max_frame_bytes as usize > self.cfg.frame_store_bytes;
        self.stats.set_throttle(if throttle != Throttle::None {
            throttle
        } else if full {
            Throttle::StoreFull
        } else {
            Throttle::None
        });
    }
}
