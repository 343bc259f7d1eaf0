//! A BU's account of the room on its RAM disk, so that its own writes never find it full.
//!
//! The file system is asked (`statvfs`) how much is free, off the BU's event loop: a
//! [`DiskWatcher`] thread looks every [`SPACE_CHECK`] (and reads the filter farm's resource
//! summaries every [`FARM_CHECK`]), and each writer thread looks after every file it writes; the
//! looks come back to the loop as messages, the newest taken standing ([`Room::look`]). The BU
//! adds what it has taken on and not yet written: every event it holds that is not in a file on
//! the disk yet (asked for, being built, in a file being filled, queued to or at the writers),
//! each counted as large as the largest event it has built. It asks for events only while all of
//! that still fits below the high-water mark ([`Room::events`]), and hands a file to its writers
//! only while the file fits in what is free ([`Room::fits`]). A disk that another writer fills
//! can still be full: the write then fails with ENOSPC, and the BU writes the file again later.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_evb::msg::SuperFragment;
use tessera_evb::types::FileId;
use tessera_evb::unit::BuiltEvent;
use tessera_formats::frd::FRD_HEADER_BYTES;
use tessera_formats::raw::RAW_V2_HEADER_BYTES;
use tessera_rundir::resources::{ResourceSummary, read_summaries};

/// Room kept free beside the raw files, for the BU's bookkeeping (`.jsn`, end-of-lumi and
/// end-of-run records, the ledger of published files) and the file system's rounding of each
/// file to its pages, in bytes.
pub const BOOKKEEPING_BYTES: u64 = 1 << 20;

/// How often the [`DiskWatcher`] looks at the file system: what others do to the disk (FUs
/// removing files, another writer filling it) shows within this.
pub const SPACE_CHECK: Duration = Duration::from_millis(10);

/// How often the [`DiskWatcher`] reads the filter farm's resource summaries.
pub const FARM_CHECK: Duration = Duration::from_millis(200);

/// What the file system of a directory has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged writer may still write.
    pub free_bytes: u64,
    /// Bytes in all.
    pub total_bytes: u64,
}

impl Space {
    /// The space of the file system holding `path`, if it can be asked.
    pub fn of(path: &Path) -> Option<Space> {
        let s = rustix::fs::statvfs(path).ok()?;
        Some(Space {
            free_bytes: s.f_bavail.saturating_mul(s.f_frsize),
            total_bytes: s.f_blocks.saturating_mul(s.f_frsize),
        })
    }

    /// How full the file system is, in percent of what an unprivileged writer may use.
    pub fn used_percent(&self) -> Option<u8> {
        let free = self.free_bytes.min(self.total_bytes);
        (self.total_bytes > 0).then(|| (100 - (u128::from(free) * 100 / u128::from(self.total_bytes))) as u8)
    }

    /// The bytes that must stay free for the disk to be at most `high_water_percent` full.
    pub fn kept_free_bytes(&self, high_water_percent: u8) -> u64 {
        let percent = u64::from(100u8.saturating_sub(high_water_percent));
        (self.total_bytes / 100).saturating_mul(percent)
    }
}

/// The bytes `event` takes in a raw file: its FRD header and its fragments.
pub fn event_bytes(event: &BuiltEvent) -> u64 {
    let fragments: u64 = event.parts.iter().flat_map(|p| &p.fragments).map(|f| u64::from(f.bytes)).sum();
    FRD_HEADER_BYTES as u64 + fragments
}

/// The bytes of a raw file of `events`, header included, and of its largest event: one pass
/// over the events' fragments.
pub fn file_bytes(events: &[BuiltEvent]) -> (u64, u64) {
    events
        .iter()
        .map(event_bytes)
        .fold((RAW_V2_HEADER_BYTES as u64, 0), |(file, largest), event| (file + event, largest.max(event)))
}

/// How many events a BU may hold, with `space` on its disk, at most `high_water_percent` full:
/// the events of its files already on the disk and not yet published (`on_disk_events`), plus
/// as many events of `largest_event_bytes` as fit in what is free above the mark (less
/// [`BOOKKEEPING_BYTES`]). Before it has built any event (`largest_event_bytes` 0), one
/// `batch` if anything is free above the mark.
pub fn room_events(
    space: Space,
    high_water_percent: u8,
    largest_event_bytes: u64,
    on_disk_events: u64,
    batch: u32,
) -> u32 {
    let budget =
        space.free_bytes.saturating_sub(space.kept_free_bytes(high_water_percent)).saturating_sub(BOOKKEEPING_BYTES);
    let fit = match largest_event_bytes {
        0 if budget > 0 => u64::from(batch),
        0 => 0,
        size => budget / size,
    };
    u32::try_from(on_disk_events.saturating_add(fit)).unwrap_or(u32::MAX)
}

/// A BU's account of its RAM disk (see the module docs).
#[derive(Debug)]
pub struct Room {
    directory: PathBuf,
    high_water_percent: u8,
    /// The newest look at the file system, and when it was taken.
    space: Option<(Instant, Space)>,
    /// The BU's files written on the disk and not yet published, with their events.
    on_disk: BTreeMap<FileId, u32>,
    largest_event_bytes: u64,
    /// The largest part of an event each RU has sent, in fragment bytes: their sum bounds an
    /// event before the BU has built one.
    largest_part_bytes: BTreeMap<u16, u64>,
    /// Whether a file's events were seen: from then on, events tell their size.
    built: bool,
}

impl Room {
    /// The account of the file system holding `directory`, to be kept at most
    /// `high_water_percent` full.
    pub fn new(directory: &Path, high_water_percent: u8) -> Self {
        Room {
            directory: directory.to_owned(),
            high_water_percent,
            space: None,
            on_disk: BTreeMap::new(),
            largest_event_bytes: 0,
            largest_part_bytes: BTreeMap::new(),
            built: false,
        }
    }

    /// Takes a look at the file system, `space` as it was at `at`, unless a newer one stands.
    pub fn look(&mut self, at: Instant, space: Space) {
        if self.space.is_none_or(|(newest, _)| at >= newest) {
            self.space = Some((at, space));
        }
    }

    /// The newest look at the file system; `None` before one could be taken.
    pub fn space(&self) -> Option<Space> {
        self.space.map(|(_, space)| space)
    }

    /// Notes the largest event of a file the BU is about to write (see [`file_bytes`]): the
    /// largest sets what each event not yet written is counted as.
    pub fn saw(&mut self, largest_event_bytes: u64) {
        self.largest_event_bytes = self.largest_event_bytes.max(largest_event_bytes);
        self.built = true;
    }

    /// Whether the parts RUs send are still looked at ([`Room::saw_parts`]): only until the
    /// first file is built, whose events then tell their size.
    pub fn counts_parts(&self) -> bool {
        !self.built
    }

    /// Notes the parts of events that RU `ru` sent: as soon as every RU has sent one, events
    /// are counted as large as their largest parts together, before the first is built.
    pub fn saw_parts(&mut self, ru: u16, parts: &[SuperFragment]) {
        let largest = parts.iter().map(|p| p.fragments.iter().map(|f| u64::from(f.bytes)).sum()).max().unwrap_or(0);
        let entry = self.largest_part_bytes.entry(ru).or_default();
        *entry = (*entry).max(largest);
        let event = FRD_HEADER_BYTES as u64 + self.largest_part_bytes.values().sum::<u64>();
        self.largest_event_bytes = self.largest_event_bytes.max(event);
    }

    /// Notes that `file`, of `events` events, is written on the disk.
    pub fn written(&mut self, file: FileId, events: u32) {
        self.on_disk.insert(file, events);
    }

    /// Notes that `file` is published or discarded: its events are no longer the BU's.
    pub fn gone(&mut self, file: FileId) {
        self.on_disk.remove(&file);
    }

    /// How many events the BU may hold now (see [`room_events`]); `None` if the file system
    /// cannot be asked.
    pub fn events(&self, batch: u32) -> Option<u32> {
        let space = self.space()?;
        let on_disk = self.on_disk.values().map(|&n| u64::from(n)).sum();
        Some(room_events(space, self.high_water_percent, self.largest_event_bytes, on_disk, batch))
    }

    /// Whether its room is the one `batch` granted before any event's size is known (there
    /// being room above the mark): the BU waits for those events, not for room.
    pub fn grants_first_batch(&self, batch: u32) -> bool {
        self.largest_event_bytes == 0 && self.events(batch).is_some_and(|n| n > 0)
    }

    /// Whether a file of `bytes` fits in what is free, with `writing_bytes` of files at the
    /// writers still to come and [`BOOKKEEPING_BYTES`] kept; true if the file system cannot be
    /// asked (the write then says what is wrong).
    pub fn fits(&self, bytes: u64, writing_bytes: u64) -> bool {
        self.space()
            .is_none_or(|s| s.free_bytes >= bytes.saturating_add(writing_bytes).saturating_add(BOOKKEEPING_BYTES))
    }

    /// The directory whose file system this is.
    pub fn directory(&self) -> &Path {
        &self.directory
    }
}

/// What a [`DiskWatcher`] saw.
#[derive(Debug)]
pub struct DiskLook {
    /// When it looked.
    pub at: Instant,
    /// The file system's space; `None` if it could not be asked.
    pub space: Option<Space>,
    /// The filter farm's resource summaries, every [`FARM_CHECK`] when the BU has a farm.
    pub summaries: Option<Vec<ResourceSummary>>,
}

/// A thread that does a BU's looking at its disk off the event loop: `statvfs` of its run
/// directory every [`SPACE_CHECK`], and the listing and reading of its filter farm's resource
/// summaries every [`FARM_CHECK`]. Each look is a [`DiskLook`] message on a bounded channel (a
/// look that finds the channel full is dropped: a newer one follows), and wakes the loop. The
/// thread ends when the watcher is dropped.
pub struct DiskWatcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    looks: Receiver<DiskLook>,
}

/// Looks a [`DiskWatcher`] keeps until the loop takes them.
const LOOKS_QUEUED: usize = 4;

impl DiskWatcher {
    /// Starts the watcher thread `name` on the file system of `run_dir`, reading the resource
    /// summaries of run `farm.1` under the BU directory `farm.0` if given; `wake` wakes the loop.
    pub fn start(
        name: String,
        run_dir: PathBuf,
        farm: Option<(PathBuf, u32)>,
        wake: impl Fn() + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, looks) = sync_channel(LOOKS_QUEUED);
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let mut farm_at: Option<Instant> = None;
            while !stopped.load(Ordering::Relaxed) {
                let at = Instant::now();
                let space = Space::of(&run_dir);
                let due = farm.is_some() && farm_at.is_none_or(|t| t.elapsed() >= FARM_CHECK);
                let summaries = farm.as_ref().filter(|_| due).map(|(bu_dir, run)| read_summaries(bu_dir, *run));
                if due {
                    farm_at = Some(at);
                }
                match tx.try_send(DiskLook { at, space, summaries }) {
                    Ok(()) => wake(),
                    // Missed summaries are read again at the next look.
                    Err(TrySendError::Full(look)) => {
                        if look.summaries.is_some() {
                            farm_at = None;
                        }
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
                std::thread::sleep(SPACE_CHECK);
            }
        })?;
        Ok(DiskWatcher { stop, thread: Some(thread), looks })
    }

    /// The looks taken since the last call, oldest first.
    pub fn looks(&self) -> impl Iterator<Item = DiskLook> + '_ {
        self.looks.try_iter()
    }
}

impl Drop for DiskWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn events_fit_below_the_mark_each_counted_as_the_largest() {
        let space = Space { free_bytes: 50 * MB, total_bytes: 100 * MB };
        // 90 %: 10 MB stay free, 1 MB for bookkeeping: 39 MB for events of 1 MB.
        assert_eq!(room_events(space, 90, MB, 0, 64), 39);
        // Files on the disk, not yet published, are already in what is used.
        assert_eq!(room_events(space, 90, MB, 5, 64), 44);
        // 100 %: only the bookkeeping stays free.
        assert_eq!(room_events(space, 100, MB, 0, 64), 49);
    }

    #[test]
    fn the_first_batch_is_granted_for_want_of_sizes_only_while_there_is_room_above_the_mark() {
        let mut room = Room::new(Path::new("/"), 90);
        assert!(!room.grants_first_batch(64), "no look at the disk yet: nothing granted");
        room.look(Instant::now(), Space { free_bytes: 50 * MB, total_bytes: 100 * MB });
        assert!(room.grants_first_batch(64));
        room.saw(MB);
        assert!(!room.grants_first_batch(64), "sizes known: the room is the disk's");
        let mut above = Room::new(Path::new("/"), 90);
        above.look(Instant::now(), Space { free_bytes: 5 * MB, total_bytes: 100 * MB });
        assert!(!above.grants_first_batch(64), "above the mark: short of room, sizes or not");
    }

    #[test]
    fn the_newest_look_stands_whatever_order_the_looks_come_in() {
        let mut room = Room::new(Path::new("/"), 90);
        assert_eq!(room.space(), None);
        let t0 = Instant::now();
        let older = Space { free_bytes: 10 * MB, total_bytes: 100 * MB };
        let newer = Space { free_bytes: 60 * MB, total_bytes: 100 * MB };
        room.look(t0 + Duration::from_millis(5), newer);
        room.look(t0, older);
        assert_eq!(room.space(), Some(newer));
        assert_eq!(newer.used_percent(), Some(40));
        assert_eq!(Space { free_bytes: 0, total_bytes: 0 }.used_percent(), None);
    }

    #[test]
    fn the_watcher_looks_off_the_loop_and_wakes_it() {
        let tmp = std::env::temp_dir();
        let (woke_tx, woke) = std::sync::mpsc::channel();
        let watcher = DiskWatcher::start("disk-watcher-test".into(), tmp.clone(), None, move || {
            let _ = woke_tx.send(());
        })
        .unwrap();
        woke.recv_timeout(Duration::from_secs(10)).expect("the watcher wakes the loop");
        let look = watcher.looks().next().expect("a look");
        assert_eq!(look.space.map(|s| s.total_bytes), Space::of(&tmp).map(|s| s.total_bytes));
        assert!(look.summaries.is_none(), "no farm, no summaries");
        drop(watcher);
    }

    #[test]
    fn a_disk_at_its_mark_takes_no_event_and_an_unknown_size_one_batch() {
        let at_mark = Space { free_bytes: 10 * MB, total_bytes: 100 * MB };
        assert_eq!(room_events(at_mark, 90, MB, 3, 64), 3);
        assert_eq!(room_events(at_mark, 90, 0, 0, 64), 0);
        let empty = Space { free_bytes: 100 * MB, total_bytes: 100 * MB };
        assert_eq!(room_events(empty, 90, 0, 0, 64), 64);
    }
}
