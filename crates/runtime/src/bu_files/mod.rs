//! A BU's file actions on its run directory: what the BU core's `WriteFile`, `PublishFile` and
//! `DiscardFile` outputs mean on disk, and the end-of-lumi and end-of-run records.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::thread::JoinHandle;
use tessera_evb::BuDisk;
use tessera_evb::msg::FragmentRef;
use tessera_evb::types::FileId;
use tessera_evb::unit::BuiltEvent;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, OrbitCounts as OrbitTally};
use tessera_formats::frd::flags;
use tessera_formats::names::BuFileName;
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader, data_type};
use tessera_rundir::{EventPieces, FileSummary, PublishedFile, RunDirError, RunDirectory};

mod orbit_file;

/// Where the bytes of a fragment are: the receive buffers a BU's data arrived in.
pub trait FragmentBytes {
    /// The bytes of `fragment`, if they are still held.
    fn bytes(&self, fragment: &FragmentRef) -> Option<&[u8]>;
}

/// What can go wrong with a BU's files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuFilesError {
    /// The run directory refused an operation.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The protocol's count of a lumi section's events differs from the published files'.
    #[error("lumi section {lumi_section}: {published} events published, the protocol says {expected}")]
    LumiCount {
        /// The lumi section.
        lumi_section: u32,
        /// Events in the published files.
        published: u64,
        /// Events the EVM committed to this BU.
        expected: u64,
    },
    /// What a restarted BU found in its run directory makes no sense.
    #[error("recovering the run directory: {0}")]
    Recovery(String),
    /// The bytes of a fragment to write are gone: a bug in the buffer handling.
    #[error("event {event}: the bytes of FED {fed}'s fragment are not held")]
    MissingBytes {
        /// The event.
        event: u64,
        /// The FED.
        fed: u16,
    },
}

impl BuFilesError {
    /// Whether the file system had no room: the write may succeed once space is freed.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, BuFilesError::RunDir(e) if e.is_disk_full())
    }
}

/// A lumi section's published files, as its end-of-lumi record counts them.
#[derive(Debug, Default, Clone, Copy)]
struct LumiCount {
    /// Files in the run directory (an orbit file of no orbit is not).
    files: u64,
    /// The protocol's units: events, or in orbit mode orbits, the empty ones included.
    units: u64,
    /// Events.
    events: u64,
    bytes: u64,
    /// Orbit mode: orbits written (those with events).
    written_orbits: u64,
}

impl LumiCount {
    fn add(&mut self, p: &FileSummary) {
        self.files += u64::from(p.orbits.is_none_or(|o| o.written > 0));
        self.units += u64::from(p.units());
        self.events += u64::from(p.events);
        self.bytes += p.bytes;
        self.written_orbits += p.orbits.map_or(0, |o| u64::from(o.written));
    }

    /// Orbit mode's counts of orbits for the end-of-lumi and end-of-run records.
    fn orbit_counts(&self) -> OrbitTally {
        OrbitTally { orbits: self.units, empty_orbits: self.units - self.written_orbits }
    }
}

/// The files of one BU in one run.
#[derive(Debug)]
pub struct BuFiles {
    writer: RawWriter,
    lumis: BTreeMap<u32, LumiCount>,
    /// Files renamed into place whose `.jsn` found the disk full: published once it is written.
    renamed: BTreeMap<FileId, PublishedFile>,
}

/// The part of a BU's files that writes raw files: shared by its writer threads.
#[derive(Debug, Clone)]
pub struct RawWriter {
    dir: Arc<RunDirectory>,
    /// FRD flags added to every event (the "generated" bit for emulated data).
    extra_flags: u16,
    /// Orbit mode: each "event" is an orbit, written as an orbit file (no header, no FRD).
    orbits: bool,
    /// Orbit mode: check every block's CRC-32C before writing it, because some RU does not
    /// (`ru.fragment_crc_check` other than `always`): CMSSW's reader refuses a file with a bad one.
    check_orbit_crc: bool,
}

/// An orbit block a BU left out of its orbit (orbit mode): the orbit is then incomplete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// The orbit's number.
    pub orbit: u32,
    /// The orbit's index in the run: its event number in the protocol.
    pub index: u64,
    /// The source whose block it is.
    pub source: u16,
    /// Why, as a key: `unreadable`, `crc32c`, `source_id`, `trailer_flags` (CMSSW's reader would
    /// refuse the block), or `run`, `orbit`, `event_count`, `event_id` (it disagrees with the
    /// orbit's reference block).
    pub reason: &'static str,
    /// Why, in words.
    pub why: String,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "orbit {} (index {}): source {}'s block left out of the file, the orbit counted incomplete: {}",
            self.orbit, self.index, self.source, self.why
        )
    }
}

/// What writing a file found, besides the file (orbit mode; nothing in event mode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// Orbits built whole that lost a block here: they count as incomplete.
    pub orbits_made_incomplete: u32,
    /// The blocks left out.
    pub left_out: Vec<LeftOut>,
}

impl RawWriter {
    /// Writes `events` as `file` under `open/` and closes it: each event an FRD v6 record of its
    /// fragments in RU order, written with vectored writes straight from where `bytes` holds
    /// them. A write that fails
    /// leaves nothing behind: what it wrote of the file is removed, so that it can be written
    /// again (after a full disk, [`BuFilesError::is_disk_full`]).
    ///
    /// In orbit mode each event is an orbit, written as an orbit file (docs/formats.md §6); what it
    /// left out of an orbit comes back in [`Written`].
    pub fn write(
        &self,
        file: FileId,
        events: &[BuiltEvent],
        bytes: &impl FragmentBytes,
    ) -> Result<Written, BuFilesError> {
        let written = if self.orbits {
            orbit_file::write(&self.dir, file, events, bytes, self.check_orbit_crc)
        } else {
            self.write_file(file, events, bytes).map(|()| Written::default())
        };
        if written.is_err() {
            // The write's own error is the one to report; a file that cannot be removed either
            // is deleted as partial by a restarted BU.
            let _ = self.dir.remove_partial(file.lumi_section, file.index);
        }
        written
    }

    fn write_file(&self, file: FileId, events: &[BuiltEvent], bytes: &impl FragmentBytes) -> Result<(), BuFilesError> {
        // Every fragment of the file, in order, and where each event's are among them.
        let mut fragments: Vec<&[u8]> = Vec::new();
        let mut ends = Vec::with_capacity(events.len());
        for event in events {
            for fragment in event.parts.iter().flat_map(|p| &p.fragments) {
                let b = bytes
                    .bytes(fragment)
                    .ok_or(BuFilesError::MissingBytes { event: event.event, fed: fragment.fed })?;
                crate::copies::written_by_bu(b);
                fragments.push(b);
            }
            ends.push(fragments.len());
        }
        let mut start = 0;
        let pieces: Vec<EventPieces<'_>> = events
            .iter()
            .zip(&ends)
            .map(|(event, &end)| {
                let fragments = &fragments[std::mem::replace(&mut start, end)..end];
                EventPieces { flags: event.flags | self.extra_flags, event: event.event as u32, fragments }
            })
            .collect();
        let mut out = self.dir.open_raw_file(file.lumi_section, file.index, data_type::FRD_EVENTS)?;
        out.append_events(&pieces)?;
        self.dir.close(out)?;
        Ok(())
    }
}

impl BuFiles {
    /// Creates the run directory `<bu_dir>/runRRRRRR` for BU `source`. With `generated`, every
    /// event carries FRD flag bit 0 (emulated data).
    ///
    /// With `orbits` (orbit mode) the files are orbit files and the bookkeeping counts orbits.
    pub fn create(bu_dir: &Path, run: u32, source: &str, generated: bool, orbits: bool) -> Result<Self, BuFilesError> {
        let extra_flags = if generated { flags::GENERATED } else { 0 };
        let dir = if orbits {
            RunDirectory::create_for_orbits(bu_dir, run, source)?
        } else {
            RunDirectory::create(bu_dir, run, source)?
        };
        let dir = Arc::new(dir);
        Ok(BuFiles {
            writer: RawWriter { dir, extra_flags, orbits, check_orbit_crc: false },
            lumis: BTreeMap::new(),
            renamed: BTreeMap::new(),
        })
    }

    /// Reopens the run directory of a BU that restarted (see `RunDirectory::reopen`): partial
    /// files are deleted, and what the BU core needs to know comes back as a [`BuDisk`]: its
    /// complete unpublished files with their event counts, the next file index of each lumi
    /// section, its published events per lumi section, and the lumi sections it has closed.
    /// `bu` is this BU's index, which names its files in the protocol.
    pub fn reopen(
        bu_dir: &Path,
        run: u32,
        source: &str,
        generated: bool,
        orbits: bool,
        bu: u16,
    ) -> Result<(Self, BuDisk), BuFilesError> {
        let extra_flags = if generated { flags::GENERATED } else { 0 };
        let (dir, recovery) = RunDirectory::reopen(bu_dir, run, source)?;
        let mut disk = BuDisk { next_index: recovery.next_index, ..BuDisk::default() };
        let mut lumis: BTreeMap<u32, LumiCount> = BTreeMap::new();
        let read_header = |path: &Path| -> Result<RawFileHeader, BuFilesError> {
            let io = |source| RunDirError::Io { action: "reading", path: path.to_owned(), source };
            let mut head = [0u8; RAW_V2_HEADER_BYTES];
            std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).map_err(io)?;
            RawFileHeader::parse(&head).map_err(|e| BuFilesError::Recovery(format!("{}: {e}", path.display())))
        };
        for &(ls, index, units) in &recovery.unpublished {
            disk.unpublished.push((FileId { bu, lumi_section: ls, index }, units));
        }
        let listing = std::fs::read_dir(dir.path()).map_err(|source| RunDirError::Io {
            action: "listing",
            path: dir.path().to_owned(),
            source,
        })?;
        // Published files are counted from the ledger, since readers delete them; one in the
        // run directory that the ledger lacks is counted from its header.
        for (&(ls, _), summary) in &recovery.published {
            lumis.entry(ls).or_default().add(summary);
        }
        for entry in listing.flatten() {
            match BuFileName::parse(&entry.file_name().to_string_lossy()) {
                Ok(BuFileName::Raw { run: r, ls, index })
                    if r == run && !recovery.published_names.contains(&(ls, index)) =>
                {
                    // Orbit files are all in the ledger: a published file without a line there
                    // is an event file, counted from its header.
                    let header = read_header(&entry.path())?;
                    let summary = FileSummary { events: header.event_count, bytes: header.file_bytes, orbits: None };
                    lumis.entry(ls).or_default().add(&summary);
                }
                Ok(BuFileName::EndOfLumi { run: r, ls }) if r == run => disk.lumis_done.push(ls),
                _ => {}
            }
        }
        disk.lumis_done.sort_unstable();
        disk.published_events = lumis.iter().map(|(&ls, c)| (ls, c.units)).collect();
        let writer = RawWriter { dir: Arc::new(dir), extra_flags, orbits, check_orbit_crc: false };
        Ok((BuFiles { writer, lumis, renamed: BTreeMap::new() }, disk))
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        self.writer.dir.path()
    }

    /// Orbit mode: checks every block's CRC-32C before writing it (see [`RawWriter`]); for a BU
    /// some of whose RUs do not check them all.
    pub fn checking_orbit_crc(mut self, check: bool) -> Self {
        self.writer.check_orbit_crc = check;
        self
    }

    /// The raw-file writer, for writer threads.
    pub fn writer(&self) -> RawWriter {
        self.writer.clone()
    }

    /// Writes `events` as `file` under `open/` and closes it (see [`RawWriter::write`]).
    pub fn write(
        &self,
        file: FileId,
        events: &[BuiltEvent],
        bytes: &impl FragmentBytes,
    ) -> Result<Written, BuFilesError> {
        self.writer.write(file, events, bytes)
    }

    /// Publishes `file` (after its commit): rename, then `.jsn`. When it fails for a full disk
    /// ([`BuFilesError::is_disk_full`]), calling it again carries on where it stopped.
    pub fn publish(&mut self, file: FileId) -> Result<PublishedFile, BuFilesError> {
        let p = match self.renamed.remove(&file) {
            Some(p) => p,
            None => self.writer.dir.publish_raw(file.lumi_section, file.index)?,
        };
        if let Err(e) = self.writer.dir.write_index(&p) {
            self.renamed.insert(file, p);
            return Err(e.into());
        }
        let summary = FileSummary { events: p.events, bytes: p.bytes, orbits: p.orbits };
        self.lumis.entry(file.lumi_section).or_default().add(&summary);
        Ok(p)
    }

    /// The files published so far in the run, every incarnation's (as the ledger says), and
    /// the events in them (in orbit mode the events in their orbits).
    pub fn published_so_far(&self) -> (u64, u64) {
        self.lumis.values().fold((0, 0), |(files, events), c| (files + c.files, events + c.events))
    }

    /// Deletes the unpublished `file` (its events went to another BU).
    pub fn discard(&mut self, file: FileId) -> Result<(), BuFilesError> {
        Ok(self.writer.dir.discard(file.lumi_section, file.index)?)
    }

    /// Writes the end-of-lumi record of `lumi_section` (the BU core's `EndOfLumi` output): its
    /// counts are this BU's published files of that section, which must hold `units` of the
    /// protocol's units (events, or in orbit mode orbits), and `lost` units it was given and
    /// never published. A BU of the pull protocol loses no event it was given (`lost` 0); a
    /// push BU started again after its loss counts what it lost.
    pub fn end_lumi(&mut self, lumi_section: u32, units: u64, lost: u64) -> Result<(), BuFilesError> {
        let c = self.lumis.get(&lumi_section).copied().unwrap_or_default();
        if c.units != units {
            return Err(BuFilesError::LumiCount { lumi_section, published: c.units, expected: units });
        }
        let orbits = self.writer.orbits.then(|| c.orbit_counts());
        let eols = EolsDoc {
            events: c.events,
            files: c.files,
            total_events: c.events + lost,
            lost_events: lost,
            bytes: c.bytes,
            orbits,
        };
        self.writer.dir.end_lumi_section(lumi_section, &eols)?;
        Ok(())
    }

    /// Writes the end-of-run record (the BU core's `EndOfRun` output), which removes `open/`.
    pub fn end_run(&mut self, last_lumi_section: u32, lumi_sections: u32) -> Result<(), BuFilesError> {
        let events = self.lumis.values().map(|c| c.events).sum();
        let files = self.lumis.values().map(|c| c.files).sum();
        let orbits = self.writer.orbits.then(|| {
            let tallies = self.lumis.values().map(LumiCount::orbit_counts);
            tallies.fold(OrbitTally::default(), |a, t| OrbitTally {
                orbits: a.orbits + t.orbits,
                empty_orbits: a.empty_orbits + t.empty_orbits,
            })
        });
        let eor = EorDoc { events, files, lumis: lumi_sections.into(), last_lumi: last_lumi_section.into(), orbits };
        self.writer.dir.end_run(&eor)?;
        Ok(())
    }
}

/// A bookkeeping action of a BU on its run directory, in the order its core asks for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookAction {
    /// [`BuFiles::publish`].
    Publish(FileId),
    /// [`BuFiles::discard`].
    Discard(FileId),
    /// [`BuFiles::end_lumi`].
    EndOfLumi {
        /// The lumi section.
        lumi_section: u32,
        /// Its events.
        events: u64,
        /// Its events given to this BU and never published.
        lost: u64,
    },
    /// [`BuFiles::end_run`].
    EndOfRun {
        /// The last lumi section.
        last_lumi_section: u32,
        /// Lumi sections in the run.
        lumi_sections: u32,
    },
}

/// The bookkeeping thread ended before the BU did.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the BU's bookkeeping thread is gone")]
pub struct BookkeeperGone;

/// What a [`BookAction`] came to: the file published, if it was a publication.
pub type BookResult = Result<Option<PublishedFile>, BuFilesError>;

/// A thread that carries out a BU's bookkeeping off its event loop (renames, `.jsn`, EoLS and
/// EoR records, deletions), one action at a time in the order given, each result coming back
/// as a message that wakes the loop. It owns the [`BuFiles`]; it ends when dropped.
pub struct Bookkeeper {
    actions: Option<SyncSender<BookAction>>,
    results: Receiver<(BookAction, BookResult)>,
    thread: Option<JoinHandle<()>>,
}

impl Bookkeeper {
    /// Starts the thread `name` on `files`; `wake` wakes the loop when a result is ready.
    pub fn start(mut files: BuFiles, name: String, wake: impl Fn() + Send + 'static) -> std::io::Result<Self> {
        // One action at a time: the loop waits for each before it takes the core's next output.
        let (actions, todo) = sync_channel::<BookAction>(1);
        let (done, results) = sync_channel(1);
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for action in todo {
                let result = match action {
                    BookAction::Publish(file) => files.publish(file).map(Some),
                    BookAction::Discard(file) => files.discard(file).map(|()| None),
                    BookAction::EndOfLumi { lumi_section, events, lost } => {
                        files.end_lumi(lumi_section, events, lost).map(|()| None)
                    }
                    BookAction::EndOfRun { last_lumi_section, lumi_sections } => {
                        files.end_run(last_lumi_section, lumi_sections).map(|()| None)
                    }
                };
                if done.send((action, result)).is_err() {
                    return;
                }
                wake();
            }
        })?;
        Ok(Bookkeeper { actions: Some(actions), results, thread: Some(thread) })
    }

    /// Hands `action` to the thread. The loop gives one at a time, after the result of the one
    /// before: the queue is empty, and this never waits.
    pub fn give(&self, action: BookAction) -> Result<(), BookkeeperGone> {
        self.actions.as_ref().ok_or(BookkeeperGone)?.send(action).map_err(|_| BookkeeperGone)
    }

    /// The result of the action given, once it is done.
    pub fn result(&self) -> Result<Option<(BookAction, BookResult)>, BookkeeperGone> {
        match self.results.try_recv() {
            Ok(done) => Ok(Some(done)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(BookkeeperGone),
        }
    }
}

impl Drop for Bookkeeper {
    fn drop(&mut self) {
        self.actions = None; // the thread ends when its queue closes
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Gives `action` and waits for the thread to wake the loop with its result.
    fn carry_out(books: &Bookkeeper, woke: &std::sync::mpsc::Receiver<()>, action: BookAction) -> BookResult {
        books.give(action).unwrap();
        woke.recv_timeout(Duration::from_secs(10)).expect("the thread wakes the loop");
        let (done, result) = books.result().unwrap().expect("a result after the wake");
        assert_eq!(done, action);
        result
    }

    #[test]
    fn the_bookkeeper_carries_out_each_action_off_the_loop_and_hands_back_its_result() {
        let tmp = tempfile::tempdir().unwrap();
        let files = BuFiles::create(tmp.path(), 7, "bu-0", false, false).unwrap();
        let run_dir = files.path().to_owned();
        let (wake, woke) = std::sync::mpsc::channel();
        let books = Bookkeeper::start(files, "books-test".into(), move || {
            let _ = wake.send(());
        })
        .unwrap();
        assert!(books.result().unwrap().is_none(), "nothing given, nothing done");
        // A file that was never written cannot be published: the error comes back, not a panic.
        let missing = FileId { bu: 0, lumi_section: 1, index: 0 };
        let refused = carry_out(&books, &woke, BookAction::Publish(missing)).unwrap_err();
        assert!(!refused.is_disk_full(), "{refused}");
        let eols = run_dir.join(BuFileName::EndOfLumi { run: 7, ls: 1 }.to_string());
        assert!(
            carry_out(&books, &woke, BookAction::EndOfLumi { lumi_section: 1, events: 0, lost: 0 }).unwrap().is_none()
        );
        assert!(eols.exists(), "the end-of-lumi record is written when its result comes back");
        let end = BookAction::EndOfRun { last_lumi_section: 1, lumi_sections: 1 };
        assert!(carry_out(&books, &woke, end).unwrap().is_none());
        assert!(run_dir.join(BuFileName::EndOfRun { run: 7 }.to_string()).exists());
        assert!(!run_dir.join(tessera_formats::names::OPEN_DIR).exists(), "the end of run removes open/");
    }
}
