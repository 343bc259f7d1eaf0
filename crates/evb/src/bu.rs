//! The builder unit: asks the EVM for events up to its free capacity, assembles each event from
//! the super-fragments of every RU, writes events into raw files, and publishes a file only once
//! the EVM has committed it.

use crate::invariant::InvariantViolation;
use crate::msg::{BuiltFile, FragmentRef, Message, SuperFragment};
use crate::push::PushBu;
use crate::ru::message_name;
use crate::spare::Spare;
use crate::table::EventTable;
use crate::types::{BuId, Epoch, EventNumber, EventRange, FIRST_EPOCH, FileId, Nanos, Peer, RuId, push_event};
use crate::unit::{BuOutput, BuiltEvent, Input, Notice};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::frd::flags;

/// While draining, how long a file stays open for more events once nothing is being built
/// (at most the file time-out), in nanoseconds.
pub const DRAIN_CLOSE_NS: Nanos = 20_000_000;

/// How long an open file may go without a new event while events wait for data before it is
/// closed (at most the file time-out), in nanoseconds. Events that wait that long are most often
/// held by RUs short of room, which free their memory only when this BU's files are committed:
/// closing the file early breaks the wait instead of letting it last the file time-out.
pub const STARVED_CLOSE_NS: Nanos = 5_000_000;

/// Configuration of a builder unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuConfig {
    /// This BU's index.
    pub bu: BuId,
    /// Readout units, each of which sends a part of every event.
    pub n_ru: u16,
    /// Events the BU holds at most, from request to publication (its RAM-disk budget). Default 1024.
    pub max_events_in_flight: u32,
    /// Free slots that make a request. Default 128.
    pub request_batch_events: u32,
    /// Events per raw file at most. Default 64.
    pub max_events_per_file: u32,
    /// Longest an open file waits for more events before it is closed, in nanoseconds. Default 1 s.
    pub file_timeout_ns: Nanos,
    /// Longest a built or published file waits to ride on a request before one is sent for it
    /// alone, in nanoseconds. Default 1 ms.
    pub report_delay_ns: Nanos,
    /// Files open for writing at once (one per lumi section in flight). Default 4.
    pub max_open_files: usize,
    /// Received data the BU holds until it is written, at most, in bytes: it asks only for
    /// events whose data fits beside what it holds, each counted as large as the largest it has
    /// built (before the first, for one event). Its requests are thus credits for room it has, and
    /// its driver never stops reading what comes for them: a BU full of parts of events that
    /// wait for other RUs' parts, which it no longer reads, would wait forever. An event larger
    /// than every one before may take the store past the bound by its size. `None` (the
    /// default): no bound but `max_events_in_flight`.
    pub store_bytes: Option<u64>,
    /// Push instead of pull: build what the RUs send, unasked; age events; publish files
    /// without a commit. Default none (pull).
    pub push: Option<PushBu>,
    /// Test-only: a deliberate protocol bug, for the simulator's self-check.
    pub bug: Option<BuBug>,
}

impl BuConfig {
    /// Defaults for BU `bu` in a system of `n_ru` RUs.
    pub fn new(bu: BuId, n_ru: u16) -> Self {
        BuConfig {
            bu,
            n_ru,
            max_events_in_flight: 1024,
            request_batch_events: 128,
            max_events_per_file: 64,
            file_timeout_ns: 1_000_000_000,
            report_delay_ns: 1_000_000,
            max_open_files: 4,
            store_bytes: None,
            push: None,
            bug: None,
        }
    }
}

/// What a BU finds on its disk when it (re)starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuDisk {
    /// Complete, unpublished files in `open/`, with their event counts.
    pub unpublished: Vec<(FileId, u32)>,
    /// Next free file index per lumi section.
    pub next_index: BTreeMap<u32, u32>,
    /// Events in published files, per lumi section, those whose end-of-lumi record is written
    /// included (the BU counts its run's publications from them).
    pub published_events: BTreeMap<u32, u64>,
    /// Lumi sections whose end-of-lumi record is written.
    pub lumis_done: Vec<u32>,
}

/// Deliberate BU bugs that the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuBug {
    /// Report a file built when it is closed, before its data is written.
    CommitBeforeWritten,
}

#[derive(Debug)]
struct Building {
    parts: Vec<Option<SuperFragment>>,
    have: u16,
    /// When its first part came (push ages it from then).
    first_at: Nanos,
    /// Fragment bytes of its parts so far.
    bytes: u64,
}

#[derive(Debug)]
struct OpenFile {
    file: FileId,
    lumi_section: u32,
    events: Vec<BuiltEvent>,
    opened_at: Nanos,
    /// When its last event was added.
    grown_at: Nanos,
    /// Fragment bytes of its events.
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileState {
    Writing { committed: bool },
    Written,
    Publishing,
}

#[derive(Debug)]
struct FileEntry {
    state: FileState,
    events: Vec<EventRange>,
    count: u32,
    /// Fragment bytes of its events still held until it is written (0 once written, or for a
    /// file an earlier incarnation wrote).
    held_bytes: u64,
}

/// Counters of a builder unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuCounters {
    /// Events built.
    pub events_built: u64,
    /// Events built with FEDs missing.
    pub incomplete_events: u64,
    /// Events with a corrupt or inconsistent fragment.
    pub error_events: u64,
    /// Files written.
    pub files_written: u64,
    /// Files published.
    pub files_published: u64,
    /// Requests sent.
    pub requests: u64,
    /// Parts dropped as duplicates or from an earlier incarnation.
    pub parts_dropped: u64,
    /// Push: events shipped incomplete for their age.
    pub aged_events: u64,
    /// Push: parts that came after their event was shipped, dropped.
    pub late_parts: u64,
    /// Push: events after the run's last event (the drain's) of which some RU sent parts,
    /// dropped unbuilt: no trigger issued them. None when RU 0's stop line bounded the RUs;
    /// some when the trigger ended before that line, or no window let RU 0 draw one.
    pub events_past_run_end: u64,
    /// Push, a BU started again after its loss: events it was given and never published,
    /// counted lost in its end-of-lumi records.
    pub lost_events: u64,
}

/// The builder unit's state machine.
#[derive(Debug)]
pub struct Bu {
    cfg: BuConfig,
    epoch: Epoch,
    welcomed: bool,
    /// Next file index per lumi section.
    next_index: BTreeMap<u32, u32>,
    /// Events published per lumi section not yet ended.
    published_events: BTreeMap<u32, u64>,
    /// Lumi sections the EVM ended, with the events this BU must have published.
    lumis_due: BTreeMap<u32, u64>,
    /// Lumi sections whose end-of-lumi record is written.
    lumis_written: BTreeSet<u32>,
    /// End-of-lumi records written since the last request.
    lumis_done: Vec<u32>,
    /// The end of the run, once the EVM announced it: (last lumi section, lumi sections).
    ending: Option<(u32, u32)>,
    ended: bool,
    /// Events asked for and not yet seen.
    outstanding: u32,
    building: EventTable<Building>,
    open: Vec<OpenFile>,
    files: BTreeMap<FileId, FileEntry>,
    built: Vec<BuiltFile>,
    published: Vec<FileId>,
    report_since: Option<Nanos>,
    draining: bool,
    /// The run's last event, from the drain (push drops what comes after it).
    last_event: Option<EventNumber>,
    /// Push, an incarnation after a crash: RU 0 excluded this BU, and the others hold its
    /// events no more. It takes no event; it publishes the whole files its last incarnation
    /// wrote, and closes each lumi section it was given events of, counting those it never
    /// published lost, so that its readers see the run end ([`Bu::closing`]).
    closing: bool,
    /// Units (events, or orbits) published in this run by every incarnation of this BU.
    published_in_run: u64,
    /// Why the BU asks for no events now (its RAM disk is full, ...), if it does not.
    throttle: Option<&'static str>,
    /// Most events it may hold for the room its disk has left (see [`Bu::set_room`]).
    room_events: u32,
    out: VecDeque<BuOutput>,
    counters: BuCounters,
    /// Push: the newest event a part came of.
    newest: EventNumber,
    /// Push: per RU, the newest event it sent a part of.
    newest_from: Vec<EventNumber>,
    /// Push: events shipped lately, to tell a late part from a new event's first; events
    /// below `forgotten_below` were shipped long ago, and a part of one is late.
    shipped: EventTable<()>,
    forgotten_below: EventNumber,
    /// Fragment bytes received of events not yet written: being built, in open files, or in
    /// files being written.
    held_bytes: u64,
    /// Of those, the bytes of events built (in open files, or in files being written).
    built_bytes: u64,
    /// The largest event built so far, in fragment bytes.
    largest_event_bytes: u64,
    /// Credits this incarnation asked the EVM for, summed (pull).
    asked: u64,
    /// Events in the unpublished files found on its disk at its start.
    found_events: u64,
    /// `published_in_run` at its start.
    published_at_start: u64,
    /// Events in files discarded at the EVM's word.
    discarded_events: u64,
    /// Emptied lists of the events of written files ([`Bu::recycle`]), each pool at most as
    /// many as the BU may hold at once: the fragment lists of super-fragments (which the
    /// driver's decoder fills, [`Bu::fragment_lists`]), the lists of an event's parts, and the
    /// lists of a file's events. Once the run is under way none of them is allocated.
    spare_fragments: Spare<FragmentRef>,
    spare_parts: Spare<SuperFragment>,
    spare_files: Spare<BuiltEvent>,
    /// Emptied lists of the event ranges of published files, for the next files closed.
    spare_ranges: Spare<EventRange>,
}

impl Bu {
    /// A builder unit starting as incarnation `epoch` with what it finds on its disk: complete
    /// unpublished files from an earlier incarnation (their fate is the EVM's answer), the next
    /// file index of each lumi section, and its lumi sections' state. It says Hello to the EVM.
    pub fn new(cfg: BuConfig, epoch: Epoch, disk: BuDisk) -> Self {
        let BuDisk { unpublished, next_index, published_events, lumis_done } = disk;
        let published_in_run = published_events.values().sum();
        let found_events = unpublished.iter().map(|&(_, count)| u64::from(count)).sum();
        let files = unpublished
            .iter()
            .map(|&(file, count)| {
                (file, FileEntry { state: FileState::Written, events: Vec::new(), count, held_bytes: 0 })
            })
            .collect();
        let unpublished: Vec<FileId> = unpublished.into_iter().map(|(f, _)| f).collect();
        let events = cfg.max_events_in_flight as usize;
        let mut bu = Bu {
            epoch,
            welcomed: false,
            next_index,
            published_events,
            lumis_due: BTreeMap::new(),
            lumis_written: lumis_done.iter().copied().collect(),
            lumis_done: Vec::new(),
            ending: None,
            ended: false,
            outstanding: 0,
            building: EventTable::new(),
            open: Vec::new(),
            files,
            built: Vec::new(),
            published: Vec::new(),
            report_since: None,
            draining: false,
            last_event: None,
            closing: false,
            published_in_run,
            throttle: None,
            room_events: u32::MAX,
            out: VecDeque::new(),
            counters: BuCounters::default(),
            newest: 0,
            newest_from: Vec::new(),
            shipped: EventTable::new(),
            forgotten_below: 0,
            held_bytes: 0,
            built_bytes: 0,
            largest_event_bytes: 0,
            asked: 0,
            found_events,
            published_at_start: published_in_run,
            discarded_events: 0,
            spare_fragments: Spare::new(events.saturating_mul(usize::from(cfg.n_ru))),
            spare_parts: Spare::new(events),
            // A file holds an event at least.
            spare_files: Spare::new(events),
            spare_ranges: Spare::new(events),
            cfg,
        };
        if bu.cfg.push.is_some() && epoch > FIRST_EPOCH {
            // Started again after a crash: RU 0 has excluded it. Its whole files are the only
            // copy of their events (the RUs freed them as they sent): published now.
            bu.welcomed = true;
            bu.closing = true;
            for (file, entry) in &mut bu.files {
                entry.state = FileState::Publishing;
                bu.out.push_back(BuOutput::PublishFile(*file));
            }
            let msg = Message::Hello { bu: bu.cfg.bu, epoch, unpublished: Vec::new() };
            bu.out.push_back(BuOutput::Send { to: Peer::Evm, msg });
        } else if bu.cfg.push.is_some() {
            // Nobody to greet: the RUs send what the destination function gives this BU.
            bu.welcomed = true;
        } else {
            let msg = Message::Hello { bu: bu.cfg.bu, epoch, unpublished };
            bu.out.push_back(BuOutput::Send { to: Peer::Evm, msg });
        }
        bu
    }

    /// Whether the BU takes a data message now: under push, while one more message of the most
    /// events it may carry fits its bound (its driver reads no data until then, and the RUs'
    /// sends wait, as TCP makes them); under pull, always (it asked for what comes).
    pub fn accepts_parts(&self) -> bool {
        self.cfg.push.is_none_or(|p| {
            self.events_in_flight().saturating_add(p.message_events_max) <= self.cfg.max_events_in_flight
        })
    }

    /// Whether the BU takes `msg` now: any message but a data message under push that would
    /// begin an event when there is no room for it ([`Bu::accepts_parts`]). A message whose
    /// parts are all of events held (or shipped: late parts, dropped) adds no event, and is
    /// taken whenever it comes, so that the events held can always complete.
    pub fn takes(&self, msg: &Message) -> bool {
        let Message::Data { parts, .. } = msg else { return true };
        self.accepts_parts()
            || parts.iter().all(|p| {
                self.building.contains(p.event) || p.event < self.forgotten_below || self.shipped.contains(p.event)
            })
    }

    /// Under push, whether the BU holds events past its high-water mark: the trigger must hold.
    pub fn throttled(&self) -> bool {
        self.cfg.push.is_some_and(|p| self.events_in_flight() >= p.high_water_events)
    }

    /// The counters.
    pub fn counters(&self) -> BuCounters {
        self.counters
    }

    /// Events held, from request to publication: never more than `max_events_in_flight`.
    pub fn events_in_flight(&self) -> u32 {
        let in_files: u32 = self.files.values().map(|f| f.count).sum();
        let in_open: usize = self.open.iter().map(|f| f.events.len()).sum();
        self.outstanding + self.building.len() as u32 + in_open as u32 + in_files
    }

    /// Fragment bytes received of events not yet written.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes
    }

    /// The events more it may ask for with the room its store has: what fits beside what it
    /// holds and what it has asked for, each as large as the largest event built (one batch
    /// before the first). `u32::MAX` without a store bound.
    fn store_room_events(&self) -> u32 {
        let Some(store) = self.cfg.store_bytes else { return u32::MAX };
        if self.largest_event_bytes == 0 {
            // Nothing tells an event's size before the first is built: one at a time till then.
            return u32::from(self.outstanding == 0 && self.building.is_empty());
        }
        // An event being built counts whole: its other parts are on their way.
        let coming = u64::from(self.outstanding) + self.building.len() as u64;
        let free =
            store.saturating_sub(self.built_bytes).saturating_sub(coming.saturating_mul(self.largest_event_bytes));
        let fit = u32::try_from(free / self.largest_event_bytes).unwrap_or(u32::MAX);
        // An empty store always takes one event, however large: the run goes on.
        fit.max(u32::from(self.held_bytes == 0 && self.outstanding == 0))
    }

    /// The events of the largest size built that the whole store holds (1 before the first
    /// event, `u32::MAX` without a store bound).
    fn store_capacity_events(&self) -> u32 {
        match (self.cfg.store_bytes, self.largest_event_bytes) {
            (None, _) => u32::MAX,
            (Some(_), 0) => 1,
            (Some(store), largest) => u32::try_from(store / largest).unwrap_or(u32::MAX),
        }
    }

    /// Whether its store is too full of data (received, or on its way for events being built)
    /// for another batch of events: what it asked for and has not begun to receive does not
    /// count, so an idle BU with credits unused is not short.
    pub fn short_of_store(&self) -> bool {
        let (Some(store), largest) = (self.cfg.store_bytes, self.largest_event_bytes) else { return false };
        if largest == 0 {
            return false;
        }
        let coming = (self.building.len() as u64).saturating_mul(largest);
        let room = store.saturating_sub(self.built_bytes).saturating_sub(coming) / largest;
        let batch = self.cfg.request_batch_events.min(self.store_capacity_events()).max(1);
        room < u64::from(batch)
    }

    /// Checks the BU's laws from its state alone; says the first broken. It walks what the BU
    /// holds (events, files, lumi sections), and the simulator calls it after every step.
    ///
    /// - It holds at most `max_events_in_flight` events, and at most its store's bytes or one
    ///   event, whichever is more (an event larger than any before may take it further: the
    ///   simulator's are not).
    /// - The bytes it holds are those of its events being built, in open files and in files
    ///   being written: a file's are let go once it is written.
    /// - Every event it built, or found in a file on its disk, is in an open file, in a file not
    ///   yet published, published, or discarded; and an event it holds is in one place only.
    /// - Under pull, it holds no more events than it asked the EVM for.
    /// - Each file it holds has an index its lumi section issued, and is held once; one file is
    ///   open per lumi section at most, and `max_open_files` in all.
    /// - A lumi section whose end-of-lumi record is written is never due again and holds no
    ///   file: the record follows the publication of all its files.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let bu = self.cfg.bu;
        let in_flight = self.events_in_flight();
        if in_flight > self.cfg.max_events_in_flight {
            return Err(InvariantViolation::BuEventsOverBound {
                bu,
                events: in_flight,
                bound: self.cfg.max_events_in_flight,
            });
        }
        if let Some(store) = self.cfg.store_bytes {
            let bound = store.max(self.largest_event_bytes);
            if self.held_bytes > bound {
                return Err(InvariantViolation::BuStoreOverBound { bu, held_bytes: self.held_bytes, bound });
            }
        }
        let building: u64 = self.building.values().map(|b| b.bytes).sum();
        let writing: u64 =
            self.files.values().filter(|f| matches!(f.state, FileState::Writing { .. })).map(|f| f.held_bytes).sum();
        let built = self.open.iter().map(|f| f.bytes).sum::<u64>() + writing;
        if self.held_bytes != building + built || self.built_bytes != built {
            return Err(InvariantViolation::BuBytesNotConserved {
                bu,
                held_bytes: self.held_bytes,
                built_bytes: self.built_bytes,
                building,
                built,
            });
        }
        let open = self.open.iter().map(|f| f.events.len() as u64).sum::<u64>();
        let unpublished = self.files.values().map(|f| u64::from(f.count)).sum::<u64>();
        let published = self.published_in_run.saturating_sub(self.published_at_start);
        if self.counters.events_built + self.found_events != open + unpublished + published + self.discarded_events {
            return Err(InvariantViolation::BuEventsNotConserved {
                bu,
                built: self.counters.events_built,
                found: self.found_events,
                open,
                unpublished,
                published,
                discarded: self.discarded_events,
            });
        }
        // Files found on disk list no events: theirs were built by an earlier incarnation.
        let mut held: Vec<EventNumber> = self
            .building
            .keys()
            .chain(self.open.iter().flat_map(|f| f.events.iter().map(|e| e.event)))
            .chain(self.files.values().flat_map(|f| f.events.iter().flat_map(EventRange::iter)))
            .collect();
        held.sort_unstable();
        if let Some(w) = held.windows(2).find(|w| w[0] == w[1]) {
            return Err(InvariantViolation::BuEventHeldTwice { bu, event: w[0] });
        }
        if self.cfg.push.is_none() {
            let holds = u64::from(self.outstanding) + self.building.len() as u64 + self.counters.events_built;
            if holds > self.asked {
                return Err(InvariantViolation::BuHoldsUnasked {
                    bu,
                    asked: self.asked,
                    outstanding: self.outstanding,
                    building: self.building.len(),
                    built: self.counters.events_built,
                });
            }
        }
        let open_files = self.open.iter().map(|f| (f.file, true));
        for (file, is_open) in open_files.chain(self.files.keys().map(|&f| (f, false))) {
            let next_index = self.next_index.get(&file.lumi_section).copied().unwrap_or(0);
            if file.index >= next_index || (is_open && self.files.contains_key(&file)) {
                return Err(InvariantViolation::BuFileMisnumbered { bu, file, next_index });
            }
            if self.lumis_written.contains(&file.lumi_section) {
                let lumi_section = file.lumi_section;
                let what = format!("file {file} is held");
                return Err(InvariantViolation::BuEndedLumiSectionReopened { bu, lumi_section, what });
            }
        }
        let bound = self.cfg.max_open_files.max(1);
        if self.open.len() > bound {
            return Err(InvariantViolation::BuOpenFilesOverBound { bu, open: self.open.len(), bound });
        }
        for (i, f) in self.open.iter().enumerate() {
            if self.open[..i].iter().any(|g| g.lumi_section == f.lumi_section) {
                return Err(InvariantViolation::BuLumiSectionOpenTwice { bu, lumi_section: f.lumi_section });
            }
        }
        if let Some(&lumi_section) = self.lumis_due.keys().find(|ls| self.lumis_written.contains(ls)) {
            return Err(InvariantViolation::BuEndedLumiSectionReopened { bu, lumi_section, what: "due again".into() });
        }
        Ok(())
    }

    /// What keeps the BU from its end of run, for a report on a run that ended without it.
    pub fn pending(&self) -> String {
        format!(
            "end of run {}; {} events being built, {} open files, {} files unpublished, end-of-lumi due for {:?}",
            if self.ending.is_some() { "announced" } else { "not announced" },
            self.building.len(),
            self.open.len(),
            self.files.len(),
            self.lumis_due
                .iter()
                .map(|(ls, due)| format!(
                    "{ls} ({} of {due} published)",
                    self.published_events.get(ls).copied().unwrap_or(0)
                ))
                .collect::<Vec<_>>()
        )
    }

    /// Whether the BU has nothing under way: no event being built and no file unpublished.
    pub fn idle(&self) -> bool {
        self.building.is_empty() && self.open.is_empty() && self.files.is_empty()
    }

    /// Whether the BU has given its end of run ([`BuOutput::EndOfRun`]): nothing of the run is
    /// left to it but writing that record.
    pub fn run_ended(&self) -> bool {
        self.ended
    }

    /// Stops asking for events, for `reason` (a stable key such as `RAMDISK_HIGH_WATER`), or
    /// resumes with `None`. Built and published files are still reported while throttled.
    pub fn set_throttle(&mut self, now: Nanos, reason: Option<&'static str>) {
        self.throttle = reason;
        self.maybe_request(now);
    }

    /// Bounds the events it holds (as [`Bu::events_in_flight`] counts them) to `events`, the
    /// room its disk has for them, besides `max_events_in_flight`: it asks for no more than fit.
    /// While the bound is below a request batch, it asks for what still fits, if anything.
    pub fn set_room(&mut self, now: Nanos, events: u32) {
        let grew = events > self.room_events;
        self.room_events = events;
        if grew {
            self.maybe_request(now);
        }
    }

    /// Whether the room its disk has left keeps it from asking for a batch of events now.
    pub fn short_of_room(&self) -> bool {
        let in_flight = self.events_in_flight();
        self.room_events < self.cfg.max_events_in_flight
            && self.room_events < in_flight.saturating_add(self.cfg.request_batch_events)
    }

    /// Whether the EVM has told it to drain (the trigger has stopped).
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Units (events, or in orbit mode orbits) this BU published in the run, every
    /// incarnation's: what its disk said at its start, and what it published since.
    pub fn published_in_run(&self) -> u64 {
        self.published_in_run
    }

    /// Push: whether this is an incarnation after the BU's loss, which takes no event and only
    /// closes the lumi sections it was given events of.
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// Why the BU asks for no events now, if it does not.
    pub fn throttle(&self) -> Option<&'static str> {
        self.throttle
    }

    /// Takes back the events of a file it asked to write ([`BuOutput::WriteFile`]), once the
    /// driver is done with them, to reuse their lists.
    pub fn recycle(&mut self, mut events: Vec<BuiltEvent>) {
        for mut event in events.drain(..) {
            for part in event.parts.drain(..) {
                self.spare_fragments.keep(part.fragments);
            }
            self.spare_parts.keep(event.parts);
        }
        self.spare_files.keep(events);
    }

    /// The emptied fragment lists it keeps, for the driver to decode the super-fragments of the
    /// data messages it receives into ([`crate::wire::Frame::decode_with`]).
    pub fn fragment_lists(&mut self) -> &mut Spare<FragmentRef> {
        &mut self.spare_fragments
    }

    /// Handles one input.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        self.handle_input(now, input);
        debug_assert!(
            self.events_in_flight() <= self.cfg.max_events_in_flight,
            "BU {}: {} events held, bound {}",
            self.cfg.bu,
            self.events_in_flight(),
            self.cfg.max_events_in_flight
        );
    }

    fn handle_input(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Message { from: Peer::Evm, msg: Message::Welcome { epoch, publish, discard } }
                if epoch == self.epoch =>
            {
                self.welcomed = true;
                for file in publish {
                    if let Some(entry) = self.files.get_mut(&file) {
                        entry.state = FileState::Publishing;
                        self.out.push_back(BuOutput::PublishFile(file));
                    }
                }
                for file in discard {
                    if let Some(entry) = self.files.remove(&file) {
                        self.discarded_events += u64::from(entry.count);
                        self.out.push_back(BuOutput::DiscardFile(file));
                    }
                }
            }
            Input::Message { msg: Message::Data { ru, epoch, parts, commits }, .. } => {
                self.commits(commits);
                if epoch == self.epoch {
                    for part in parts {
                        self.part(now, usize::from(ru), part);
                    }
                } else {
                    self.counters.parts_dropped += parts.len() as u64;
                }
            }
            Input::Message { from: Peer::Evm, msg: Message::Commit { files, .. } } => self.commits(files),
            Input::Message { from: Peer::Evm, msg: Message::Drain { last_event } } => {
                self.draining = true;
                if self.cfg.push.is_some() {
                    self.drop_past_run_end(last_event.unwrap_or(0));
                }
                self.close_if_drained(now);
            }
            Input::FileWritten(file) => {
                if let Some(entry) = self.files.get_mut(&file) {
                    self.counters.files_written += 1;
                    let written = std::mem::take(&mut entry.held_bytes);
                    self.held_bytes -= written;
                    self.built_bytes -= written;
                    let committed = matches!(entry.state, FileState::Writing { committed: true });
                    entry.state = FileState::Written;
                    if committed {
                        entry.state = FileState::Publishing;
                        self.out.push_back(BuOutput::PublishFile(file));
                    } else if self.cfg.bug != Some(BuBug::CommitBeforeWritten) {
                        self.built.push(BuiltFile { file, events: entry.events.clone() });
                        self.report_since.get_or_insert(now);
                    }
                }
            }
            // Counted once, while the file is the core's: a restarted BU does not write it again.
            Input::OrbitsLeftIncomplete { file, orbits } if self.files.contains_key(&file) => {
                self.counters.incomplete_events += u64::from(orbits);
            }
            Input::FilePublished(file) => {
                if let Some(entry) = self.files.remove(&file) {
                    self.counters.files_published += 1;
                    self.published.push(file);
                    self.report_since.get_or_insert(now);
                    *self.published_events.entry(file.lumi_section).or_default() += u64::from(entry.count);
                    self.published_in_run += u64::from(entry.count);
                    self.spare_ranges.keep(entry.events);
                    self.end_lumis(now);
                }
            }
            Input::Message { from: Peer::Evm, msg: Message::EndOfLumi { lumi_section, events } } => {
                if self.lumis_written.contains(&lumi_section) {
                    // Told again after a restart: acknowledge again.
                    self.lumis_done.push(lumi_section);
                    self.report_since.get_or_insert(now);
                } else {
                    self.lumis_due.insert(lumi_section, events);
                    self.end_lumis(now);
                }
            }
            Input::Message { from: Peer::Evm, msg: Message::EndOfRun { last_lumi_section, lumi_sections } } => {
                self.ending = Some((last_lumi_section, lumi_sections));
                self.end_lumis(now);
            }
            Input::Tick => {
                if let Some(push) = self.cfg.push {
                    self.age(now, push, true);
                }
                let starved = self.starved_close_ns();
                let stale: Vec<usize> = (0..self.open.len())
                    .filter(|&i| {
                        let f = &self.open[i];
                        now >= f.opened_at.saturating_add(self.cfg.file_timeout_ns)
                            || starved.is_some_and(|wait| now >= f.grown_at.saturating_add(wait))
                    })
                    .collect();
                for i in stale.into_iter().rev() {
                    self.close(now, i);
                }
                self.close_if_drained(now);
            }
            Input::Message { from, msg } => self.out.push_back(BuOutput::Notice(Notice::ProtocolError {
                what: format!("BU {}: unexpected {} from {from}", self.cfg.bu, message_name(&msg)),
            })),
            _ => {}
        }
        self.maybe_request(now);
    }

    /// Writes the end-of-lumi record of every ended lumi section whose events are all published,
    /// then the end-of-run record once the run is over and nothing is left.
    fn end_lumis(&mut self, now: Nanos) {
        // A closing BU (push, after its loss) publishes nothing more once its files are
        // published: what it was given and did not publish is lost.
        let publishing = |ls: u32| self.files.keys().any(|f| f.lumi_section == ls);
        let ready: Vec<(u32, u64)> = self
            .lumis_due
            .iter()
            .filter(|&(&ls, &due)| {
                self.published_events.get(&ls).copied().unwrap_or(0) >= due || (self.closing && !publishing(ls))
            })
            .map(|(&ls, &due)| (ls, due))
            .collect();
        for (ls, due) in ready {
            self.lumis_due.remove(&ls);
            let published = self.published_events.remove(&ls).unwrap_or(0);
            let lost = if self.closing { due.saturating_sub(published) } else { 0 };
            if published + lost != due {
                self.out.push_back(BuOutput::Notice(Notice::ProtocolError {
                    what: format!(
                        "BU {}: lumi section {ls} has {published} events published, the EVM says {due}",
                        self.cfg.bu
                    ),
                }));
            }
            self.lumis_written.insert(ls);
            self.lumis_done.push(ls);
            self.report_since.get_or_insert(now);
            self.counters.lost_events += lost;
            self.out.push_back(BuOutput::EndOfLumi { lumi_section: ls, events: published, lost });
        }
        if let Some((last_lumi_section, lumi_sections)) = self.ending
            && !self.ended
            && self.lumis_due.is_empty()
            && self.idle()
        {
            self.ended = true;
            self.out.push_back(BuOutput::EndOfRun { last_lumi_section, lumi_sections });
        }
    }

    fn commits(&mut self, files: Vec<FileId>) {
        for file in files {
            let Some(entry) = self.files.get_mut(&file) else { continue };
            match entry.state {
                FileState::Written => {
                    entry.state = FileState::Publishing;
                    self.out.push_back(BuOutput::PublishFile(file));
                }
                FileState::Writing { .. } if self.cfg.bug == Some(BuBug::CommitBeforeWritten) => {
                    entry.state = FileState::Publishing;
                    self.out.push_back(BuOutput::PublishFile(file));
                }
                FileState::Writing { .. } => entry.state = FileState::Writing { committed: true },
                FileState::Publishing => {}
            }
        }
    }

    fn part(&mut self, now: Nanos, ru: usize, part: SuperFragment) {
        if let Some(push) = self.cfg.push {
            self.push_part(now, ru, part, push);
            return;
        }
        let n_ru = usize::from(self.cfg.n_ru);
        let event = part.event;
        let Some(b) = self.building.get_mut(event) else {
            if self.outstanding == 0 {
                self.counters.parts_dropped += 1;
                self.out.push_back(BuOutput::Notice(Notice::ProtocolError {
                    what: format!("BU {}: part of event {event} it did not ask for", self.cfg.bu),
                }));
                return;
            }
            self.outstanding -= 1;
            let bytes = part.bytes() as u64;
            if ru < n_ru {
                self.held_bytes += bytes;
            }
            if n_ru == 1 && ru == 0 {
                // The only part: the event is complete without waiting in the table.
                let mut parts = self.spare_parts.take();
                parts.push(part);
                self.complete(now, event, parts, bytes);
            } else if ru < n_ru {
                let mut parts = self.building_slots(n_ru);
                parts[ru] = Some(part);
                self.building.insert(event, Building { parts, have: 1, first_at: now, bytes });
            } else {
                self.counters.parts_dropped += 1;
            }
            return;
        };
        match b.parts.get_mut(ru) {
            Some(slot @ None) => {
                let bytes = part.bytes() as u64;
                self.held_bytes += bytes;
                b.bytes += bytes;
                *slot = Some(part);
                b.have += 1;
            }
            _ => {
                self.counters.parts_dropped += 1;
                return;
            }
        }
        if usize::from(b.have) == n_ru {
            let b = self.building.remove(event).expect("present");
            // Every slot is filled (have == n_ru); collecting in place reuses the allocation.
            let parts = b.parts.into_iter().map(|p| p.expect("every RU's part is present")).collect();
            self.complete(now, event, parts, b.bytes);
        }
    }

    /// Push: takes RU `ru`'s part of an event, unasked; a part of an event already shipped is
    /// late and dropped. Then ages the events in progress by event number.
    fn push_part(&mut self, now: Nanos, ru: usize, part: SuperFragment, push: PushBu) {
        let n_ru = usize::from(self.cfg.n_ru);
        let event = part.event;
        if ru >= n_ru {
            self.counters.parts_dropped += 1;
            return;
        }
        if self.closing || self.last_event.is_some_and(|last| event > last) {
            self.counters.parts_dropped += 1;
            return;
        }
        if !self.building.contains(event) && (event < self.forgotten_below || self.shipped.contains(event)) {
            self.counters.late_parts += 1;
            self.out.push_back(BuOutput::Notice(Notice::LatePart { ru: ru as RuId, event }));
            return;
        }
        if !self.building.contains(event) {
            let parts = self.building_slots(n_ru);
            self.building.insert(event, Building { parts, have: 0, first_at: now, bytes: 0 });
        }
        let b = self.building.get_mut(event).expect("present");
        match &mut b.parts[ru] {
            slot @ None => {
                let bytes = part.bytes() as u64;
                self.held_bytes += bytes;
                b.bytes += bytes;
                *slot = Some(part);
                b.have += 1;
            }
            Some(_) => self.counters.parts_dropped += 1,
        }
        if usize::from(b.have) == n_ru {
            let b = self.building.remove(event).expect("present");
            let parts = b.parts.into_iter().map(|p| p.expect("every RU's part is present")).collect();
            self.complete(now, event, parts, b.bytes);
        }
        self.newest = self.newest.max(event);
        if self.newest_from.len() < n_ru {
            self.newest_from.resize(n_ru, 0);
        }
        self.newest_from[ru] = self.newest_from[ru].max(event);
        self.age(now, push, false);
    }

    /// Push: ships incomplete the events in progress that are too old: by event number, or with
    /// `by_time` also by their wall-clock age, once every RU whose part is missing has sent a
    /// part of a later event (an RU sends its events in order, but for those it waits for a
    /// late FED: one that has not reached the event yet is behind, not missing, however long
    /// that takes on a loaded machine). Only events with RU 0's part, the trigger's, age: it
    /// gives the event its lumi section, and RU 0 sends a part of every event triggered.
    fn age(&mut self, now: Nanos, push: PushBu, by_time: bool) {
        let horizon = self.newest.saturating_sub(push.age_events);
        let old = |e: EventNumber, b: &Building| {
            let by_number = e.saturating_add(push.age_events) <= self.newest;
            let by_time = by_time && now >= b.first_at.saturating_add(push.age_ns) && self.passed(e, b);
            b.parts[0].is_some() && (by_number || by_time)
        };
        let due: Vec<(EventNumber, bool)> = if by_time {
            self.building.iter().filter(|&(e, b)| old(e, b)).map(|(e, _)| (e, e >= horizon)).collect()
        } else {
            self.building
                .below(horizon.saturating_add(1))
                .filter(|&(e, b)| old(e, b))
                .map(|(e, _)| (e, false))
                .collect()
        };
        for (event, aged_by_time) in due {
            let Some(b) = self.building.remove(event) else { continue };
            let missing_rus: Vec<RuId> =
                b.parts.iter().enumerate().filter(|(_, p)| p.is_none()).map(|(r, _)| r as RuId).collect();
            let parts = b
                .parts
                .into_iter()
                .map(|p| p.unwrap_or(SuperFragment { event, fragments: Vec::new(), missing: Vec::new() }))
                .collect();
            self.counters.aged_events += 1;
            self.out.push_back(BuOutput::Notice(Notice::EventAged { event, missing_rus, by_time: aged_by_time }));
            self.complete(now, event, parts, b.bytes);
        }
    }

    /// Push, at the drain: the run's last event is `last`. Events after it that some RU sent
    /// (it read its FEDs on to a stop line the trigger did not reach) were never triggered:
    /// dropped unbuilt and counted, as is any part of one that comes later.
    fn drop_past_run_end(&mut self, last: EventNumber) {
        self.last_event = Some(last);
        for b in self.building.split_off(last + 1) {
            self.counters.events_past_run_end += 1;
            self.held_bytes -= b.bytes;
            self.counters.parts_dropped += u64::from(b.have);
        }
    }

    /// Push: whether every RU whose part of `event` is missing has sent a part of a later one.
    fn passed(&self, event: EventNumber, b: &Building) -> bool {
        b.parts.iter().enumerate().all(|(r, p)| p.is_some() || self.newest_from.get(r).is_some_and(|&n| n > event))
    }

    /// `n_ru` empty slots for the parts of an event, in a spare list of parts: an
    /// `Option<SuperFragment>` is as large as a `SuperFragment`, so the list is reused in place,
    /// and so it is again when the event is complete.
    fn building_slots(&mut self, n_ru: usize) -> Vec<Option<SuperFragment>> {
        let mut slots: Vec<Option<SuperFragment>> = self.spare_parts.take().into_iter().map(Some).collect();
        slots.resize(n_ru, None);
        slots
    }

    /// Builds `event` of `parts`, `bytes` of fragments in all, into its lumi section's open file.
    fn complete(&mut self, now: Nanos, event: EventNumber, parts: Vec<SuperFragment>, bytes: u64) {
        if let Some(push) = self.cfg.push {
            // A part of an event shipped is late while it is remembered, and long after.
            self.shipped.insert(event, ());
            let keep_from = self.newest.saturating_sub(push.age_events.saturating_mul(4));
            while let Some(oldest) = self.shipped.first().filter(|&e| e < keep_from) {
                self.shipped.remove(oldest);
                self.forgotten_below = self.forgotten_below.max(oldest + 1);
            }
        }
        let mut frd_flags = 0;
        let trigger = parts.iter().flat_map(|p| &p.fragments).find_map(|f| f.trigger);
        if trigger.is_none() {
            frd_flags |= flags::NO_TRIGGER;
        }
        // A part with FEDs missing, or an RU's part that never came (empty, push).
        if parts.iter().any(|p| !p.missing.is_empty() || p.fragments.is_empty()) {
            frd_flags |= flags::INCOMPLETE;
            self.counters.incomplete_events += 1;
        }
        let lv1 = (event as u32) & LV1_MASK;
        if parts.iter().flat_map(|p| &p.fragments).any(|f| f.corrupt || f.lv1 != lv1) {
            frd_flags |= flags::FRAGMENT_ERROR;
            self.counters.error_events += 1;
        }
        self.counters.events_built += 1;
        self.largest_event_bytes = self.largest_event_bytes.max(bytes);
        self.built_bytes += bytes;
        let lumi_section = trigger.map_or(0, |t| t.lumi_section);
        let built = BuiltEvent { event, lumi_section, flags: frd_flags, parts };
        let index = match self.open.iter().position(|f| f.lumi_section == lumi_section) {
            Some(i) => i,
            None => {
                // The first event of a newer lumi section: the older sections' files will
                // hardly grow any more, and waiting for their time-out would hold their events
                // (and the RUs' buffers) uncommitted. A straggler opens a file of its own.
                while let Some(i) = self.open.iter().position(|f| f.lumi_section < lumi_section) {
                    self.close(now, i);
                }
                if self.open.len() >= self.cfg.max_open_files.max(1) {
                    self.close(now, 0);
                }
                let next = self.next_index.entry(lumi_section).or_default();
                let file = FileId { bu: self.cfg.bu, lumi_section, index: *next };
                *next += 1;
                let events = self.spare_files.take();
                let open = OpenFile { file, lumi_section, events, opened_at: now, grown_at: now, bytes: 0 };
                self.open.push(open);
                self.open.len() - 1
            }
        };
        self.open[index].events.push(built);
        self.open[index].grown_at = now;
        self.open[index].bytes += bytes;
        if self.open[index].events.len() >= self.cfg.max_events_per_file.max(1) as usize {
            self.close(now, index);
        }
        self.close_if_drained(now);
    }

    fn close(&mut self, now: Nanos, index: usize) {
        let mut f = self.open.remove(index);
        // Written in event order: events given again after a BU was lost come late, and a
        // reader of orbit files refuses an orbit below the one before it in a file.
        f.events.sort_unstable_by_key(|e| e.event);
        let mut ranges = self.spare_ranges.take();
        for e in f.events.iter().map(|e| e.event) {
            push_event(&mut ranges, e);
        }
        let count = f.events.len() as u32;
        if self.cfg.bug == Some(BuBug::CommitBeforeWritten) {
            self.built.push(BuiltFile { file: f.file, events: ranges.clone() });
            self.report_since.get_or_insert(now);
        }
        // Push has no commit: a file is published as soon as it is written.
        let committed = self.cfg.push.is_some();
        let entry = FileEntry { state: FileState::Writing { committed }, events: ranges, count, held_bytes: f.bytes };
        self.files.insert(f.file, entry);
        self.out.push_back(BuOutput::WriteFile { file: f.file, lumi_section: f.lumi_section, events: f.events });
    }

    /// While draining, closes the files that are open for [`DRAIN_CLOSE_NS`] at least, if no
    /// event is being built: the last events of a run then need not wait for the file
    /// time-out, and the events that still trickle in after the trigger stopped are not written
    /// one file each.
    fn close_if_drained(&mut self, now: Nanos) {
        if self.draining && self.building.is_empty() {
            while let Some(i) = self.open.iter().position(|f| now >= f.opened_at.saturating_add(self.drain_close_ns()))
            {
                self.close(now, i);
            }
        }
    }

    fn drain_close_ns(&self) -> Nanos {
        self.cfg.file_timeout_ns.min(DRAIN_CLOSE_NS)
    }

    /// While events wait for data, how long an open file may go without a new one
    /// ([`STARVED_CLOSE_NS`]); `None` while none waits.
    fn starved_close_ns(&self) -> Option<Nanos> {
        (!self.building.is_empty()).then(|| self.cfg.file_timeout_ns.min(STARVED_CLOSE_NS))
    }

    /// Asks for more events when a batch of slots is free, and reports built and published
    /// files on the request (or alone, once they have waited `report_delay_ns`).
    fn maybe_request(&mut self, now: Nanos) {
        if self.cfg.push.is_some() {
            // Nobody to ask or to report to.
            self.report_since = None;
            self.built.clear();
            self.published.clear();
            self.lumis_done.clear();
            return;
        }
        if !self.welcomed {
            return;
        }
        let bound = self.cfg.max_events_in_flight.min(self.room_events);
        let free = bound.saturating_sub(self.events_in_flight()).min(self.store_room_events());
        // A store too small for a whole batch asks for what it holds.
        let batch = self.cfg.request_batch_events.min(bound).min(self.store_capacity_events()).max(1);
        let credits = if free >= batch && self.throttle.is_none() { free } else { 0 };
        let reports_due = self.report_since.is_some_and(|t| now >= t.saturating_add(self.cfg.report_delay_ns));
        if credits == 0 && !reports_due {
            return;
        }
        self.outstanding += credits;
        self.asked += u64::from(credits);
        self.counters.requests += 1;
        self.report_since = None;
        let msg = Message::Request {
            bu: self.cfg.bu,
            epoch: self.epoch,
            credits,
            built: std::mem::take(&mut self.built),
            published: std::mem::take(&mut self.published),
            lumis_done: std::mem::take(&mut self.lumis_done),
        };
        self.out.push_back(BuOutput::Send { to: Peer::Evm, msg });
    }

    /// The earliest time at which a tick has work.
    pub fn next_timeout(&self) -> Option<Nanos> {
        let wait = if self.draining { self.drain_close_ns() } else { self.cfg.file_timeout_ns };
        let starved = self.starved_close_ns();
        let files = self
            .open
            .iter()
            .map(|f| {
                let grown = starved.map_or(Nanos::MAX, |w| f.grown_at.saturating_add(w));
                f.opened_at.saturating_add(wait).min(grown)
            })
            .min();
        let report = self.report_since.map(|t| t.saturating_add(self.cfg.report_delay_ns));
        let aged = self.cfg.push.and_then(|p| {
            let first = self
                .building
                .iter()
                .filter(|&(e, b)| b.parts[0].is_some() && self.passed(e, b))
                .map(|(_, b)| b.first_at)
                .min()?;
            Some(first.saturating_add(p.age_ns))
        });
        [files, report, aged].into_iter().flatten().min()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<BuOutput> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BufferRef;
    use crate::msg::FragmentRef;
    use crate::msg::TriggerInfo;

    fn part(ru: u16, event: EventNumber) -> Input {
        part_in(ru, event, None)
    }

    /// RU `ru`'s part of `event`, of 64 bytes; RU 0's carries the trigger of `lumi_section`.
    fn part_in(ru: u16, event: EventNumber, lumi_section: Option<u32>) -> Input {
        let trigger =
            lumi_section.filter(|_| ru == 0).map(|lumi_section| TriggerInfo { lumi_section, orbit: 1, bx: 1 });
        let fragment = FragmentRef {
            fed: ru,
            lv1: event as u32,
            bytes: 64,
            corrupt: false,
            buffer: BufferRef { offset: event as u32, ..BufferRef::default() },
            trigger,
        };
        let part = SuperFragment { event, fragments: vec![fragment], missing: Vec::new() };
        Input::Message {
            from: Peer::Ru(ru),
            msg: Message::Data { ru, epoch: 1, parts: vec![part], commits: Vec::new() },
        }
    }

    fn written(bu: &mut Bu) -> Vec<usize> {
        std::iter::from_fn(|| bu.poll_output())
            .filter_map(|o| match o {
                BuOutput::WriteFile { events, .. } => Some(events.len()),
                _ => None,
            })
            .collect()
    }

    fn credits(bu: &mut Bu) -> Vec<u32> {
        std::iter::from_fn(|| bu.poll_output())
            .filter_map(|o| match o {
                BuOutput::Send { msg: Message::Request { credits, .. }, .. } => Some(credits),
                _ => None,
            })
            .collect()
    }

    /// Requests are credits for room the BU has: with a store of 1000 bytes and events of 64, it
    /// asks for no more than fit beside what it holds, whatever `max_events_in_flight` allows.
    #[test]
    fn a_bu_asks_only_for_events_whose_data_its_store_has_room_for() {
        let cfg = BuConfig {
            store_bytes: Some(1000),
            request_batch_events: 4,
            max_events_in_flight: 100,
            max_events_per_file: 4,
            ..BuConfig::new(0, 1)
        };
        let mut bu = Bu::new(cfg, 1, BuDisk::default());
        let welcome = Message::Welcome { epoch: 1, publish: Vec::new(), discard: Vec::new() };
        bu.handle(0, Input::Message { from: Peer::Evm, msg: welcome });
        assert_eq!(credits(&mut bu), vec![1], "one event before any event's size is known");
        bu.handle(0, part(0, 1));
        // 1 event of 64 bytes in an open file: (1000 - 64) / 64 = 14 more.
        assert_eq!((bu.held_bytes(), credits(&mut bu)), (64, vec![14]));
        for e in 2..=15 {
            bu.handle(0, part(0, e));
        }
        assert!(bu.short_of_store(), "960 bytes held: no room for a batch");
        assert_eq!(bu.check_invariants(), Ok(()));
        assert!(credits(&mut bu).iter().all(|&c| c == 0), "no credit while short");
        assert_eq!(bu.check_invariants(), Ok(()));
        let files: Vec<FileId> = bu.files.keys().copied().collect();
        for f in files {
            bu.handle(0, Input::FileWritten(f));
        }
        assert_eq!(bu.held_bytes(), 3 * 64, "the three open events are still held");
        assert_eq!(credits(&mut bu).iter().sum::<u32>(), 12, "(1000 - 192) / 64, as each file's room came");
        assert!(!bu.short_of_store(), "what it asked for and has not begun to receive does not fill it");
    }

    /// Events written and handed back build the next ones: their lists of parts are reused in
    /// the building table, and their fragment lists are kept for the decoder.
    #[test]
    fn a_bu_builds_events_into_the_lists_of_those_handed_back() {
        let cfg = BuConfig { max_events_per_file: 1, ..BuConfig::new(0, 2) };
        let mut bu = Bu::new(cfg, 1, BuDisk::default());
        step(&mut bu, 0, welcome());
        let built = |bu: &mut Bu, event| {
            bu.handle(0, part(0, event));
            bu.handle(0, part(1, event));
            std::iter::from_fn(|| bu.poll_output())
                .find_map(|o| match o {
                    BuOutput::WriteFile { events, .. } => Some(events),
                    _ => None,
                })
                .expect("a file of one event")
        };
        let first = built(&mut bu, 1);
        let parts = first[0].parts.as_ptr();
        bu.recycle(first);
        assert_eq!(bu.fragment_lists().take().capacity(), 1, "a fragment list of the event kept");
        let second = built(&mut bu, 2);
        assert!(std::ptr::eq(second[0].parts.as_ptr(), parts), "its list of parts reused");
        assert_eq!(second[0].parts.iter().map(|p| p.event).collect::<Vec<_>>(), [2, 2]);
        assert_eq!(bu.check_invariants(), Ok(()));
    }

    /// A file that stops growing while an event waits for data (an RU short of room waits for
    /// this BU's commits) is closed after STARVED_CLOSE_NS, not the file time-out; with nothing
    /// waiting, it stays open.
    #[test]
    fn a_file_that_stops_growing_while_events_wait_for_data_is_closed_early() {
        let mut bu = Bu::new(BuConfig::new(0, 2), 1, BuDisk::default());
        let welcome = Message::Welcome { epoch: 1, publish: Vec::new(), discard: Vec::new() };
        bu.handle(0, Input::Message { from: Peer::Evm, msg: welcome });
        bu.handle(0, part(0, 1));
        bu.handle(0, part(1, 1));
        bu.handle(STARVED_CLOSE_NS + 1, Input::Tick);
        assert!(written(&mut bu).is_empty(), "nothing waits: the file stays open for the file time-out");
        bu.handle(STARVED_CLOSE_NS + 2, part(0, 2)); // event 2 waits for RU 1
        bu.handle(STARVED_CLOSE_NS + 3, Input::Tick);
        assert_eq!(written(&mut bu), vec![1], "event 1's file closed: it had not grown while event 2 waited");
    }

    /// Events completed out of order (one given again after a BU was lost comes late) go into
    /// their file in event order, and the file's orbit-mode input is counted once.
    #[test]
    fn a_file_holds_its_events_in_event_order_and_counts_orbits_left_incomplete_once() {
        let cfg = BuConfig { max_events_per_file: 3, ..BuConfig::new(0, 1) };
        let mut bu = Bu::new(cfg, 1, BuDisk::default());
        let welcome = Message::Welcome { epoch: 1, publish: Vec::new(), discard: Vec::new() };
        bu.handle(0, Input::Message { from: Peer::Evm, msg: welcome });
        for e in [7, 5, 6] {
            bu.handle(0, part(0, e));
        }
        let (file, order) = std::iter::from_fn(|| bu.poll_output())
            .find_map(|o| match o {
                BuOutput::WriteFile { file, events, .. } => {
                    Some((file, events.iter().map(|e| e.event).collect::<Vec<_>>()))
                }
                _ => None,
            })
            .expect("the file of three events");
        assert_eq!(order, [5, 6, 7]);
        bu.handle(0, Input::OrbitsLeftIncomplete { file, orbits: 2 });
        bu.handle(0, Input::FileWritten(file));
        assert_eq!(bu.counters().incomplete_events, 2);
        bu.handle(0, Input::FilePublished(file));
        // Told again of a file no longer its own, it counts nothing.
        bu.handle(0, Input::OrbitsLeftIncomplete { file, orbits: 2 });
        assert_eq!(bu.counters().incomplete_events, 2);
    }

    fn from_evm(msg: Message) -> Input {
        Input::Message { from: Peer::Evm, msg }
    }

    fn welcome() -> Input {
        from_evm(Message::Welcome { epoch: 1, publish: Vec::new(), discard: Vec::new() })
    }

    /// Handles `input` and checks the laws after it, as the simulator does after each step.
    fn step(bu: &mut Bu, now: Nanos, input: Input) {
        bu.handle(now, input);
        while bu.poll_output().is_some() {}
        assert_eq!(bu.check_invariants(), Ok(()), "after an input at {now} ns");
    }

    /// A pull BU of two RUs, files of two events: events 1-2 of lumi section 1 in a file being
    /// written, event 3 of section 2 in an open file, event 4 being built (RU 1's part to come).
    fn holding() -> Bu {
        let cfg = BuConfig { max_events_per_file: 2, request_batch_events: 8, ..BuConfig::new(0, 2) };
        let mut bu = Bu::new(cfg, 1, BuDisk::default());
        step(&mut bu, 0, welcome());
        for (event, ls) in [(1, 1), (2, 1), (3, 2)] {
            step(&mut bu, 0, part_in(0, event, Some(ls)));
            step(&mut bu, 0, part_in(1, event, Some(ls)));
        }
        step(&mut bu, 0, part_in(0, 4, Some(2)));
        assert_eq!((bu.building.len(), bu.open.len(), bu.files.len()), (1, 1, 1));
        bu
    }

    fn ls1_file() -> FileId {
        FileId { bu: 0, lumi_section: 1, index: 0 }
    }

    /// A pull run through: events built, files written, committed and published, lumi sections
    /// ended, the run ended; every law holds after every input.
    #[test]
    fn the_laws_hold_through_a_pull_run() {
        let mut bu = holding();
        step(&mut bu, 1, part_in(1, 4, Some(2)));
        step(&mut bu, 2, Input::FileWritten(ls1_file()));
        step(&mut bu, 3, from_evm(Message::Commit { epoch: 1, files: vec![ls1_file()] }));
        step(&mut bu, 4, Input::FilePublished(ls1_file()));
        step(&mut bu, 5, from_evm(Message::EndOfLumi { lumi_section: 1, events: 2 }));
        assert!(bu.lumis_written.contains(&1));
        // A second EndOfLumi of an ended section is acknowledged, not due again.
        step(&mut bu, 6, from_evm(Message::EndOfLumi { lumi_section: 1, events: 2 }));
        let ls2 = FileId { bu: 0, lumi_section: 2, index: 0 };
        step(&mut bu, 7, Input::FileWritten(ls2));
        step(&mut bu, 8, from_evm(Message::Commit { epoch: 1, files: vec![ls2] }));
        step(&mut bu, 9, Input::FilePublished(ls2));
        step(&mut bu, 9, Input::FilePublished(ls2)); // told twice: counted once
        step(&mut bu, 10, from_evm(Message::EndOfLumi { lumi_section: 2, events: 2 }));
        step(&mut bu, 11, from_evm(Message::EndOfRun { last_lumi_section: 2, lumi_sections: 2 }));
        assert!(bu.run_ended());
        assert_eq!((bu.published_in_run(), bu.held_bytes()), (4, 0));
    }

    /// A restarted BU publishes one file found on its disk and discards the other at the
    /// EVM's word: its events are counted published and discarded (the count of those found
    /// must add up, or the check fails).
    #[test]
    fn the_laws_hold_for_a_restarted_bu_that_publishes_and_discards_what_it_found() {
        let (keep, drop) = (FileId { bu: 0, lumi_section: 3, index: 0 }, FileId { bu: 0, lumi_section: 3, index: 1 });
        let disk = BuDisk {
            unpublished: vec![(keep, 5), (drop, 7)],
            next_index: [(3, 2)].into(),
            published_events: [(2, 10)].into(),
            lumis_done: vec![2],
        };
        let mut bu = Bu::new(BuConfig::new(0, 1), 2, disk);
        assert_eq!(bu.check_invariants(), Ok(()));
        step(&mut bu, 0, from_evm(Message::Welcome { epoch: 2, publish: vec![keep], discard: vec![drop] }));
        assert_eq!(bu.discarded_events, 7);
        step(&mut bu, 1, Input::FilePublished(keep));
        let Input::Message { msg: Message::Data { parts, .. }, .. } = part_in(0, 40, Some(3)) else { unreachable!() };
        let data = Message::Data { ru: 0, epoch: 2, parts, commits: Vec::new() };
        step(&mut bu, 2, Input::Message { from: Peer::Ru(0), msg: data });
        let next = bu.open[0].file;
        assert_eq!(next.index, 2, "numbered on from the files found");
        step(&mut bu, 3, from_evm(Message::EndOfLumi { lumi_section: 2, events: 10 }));
        assert_eq!(bu.published_in_run(), 15);
    }

    /// Push: events built unasked, aged incomplete, files published without a commit.
    #[test]
    fn the_laws_hold_for_a_push_bu() {
        let cfg = BuConfig {
            max_events_per_file: 2,
            push: Some(crate::push::PushBu { age_events: 2, ..crate::push::PushBu::new(100) }),
            ..BuConfig::new(0, 2)
        };
        let mut bu = Bu::new(cfg, 1, BuDisk::default());
        assert_eq!(bu.check_invariants(), Ok(()));
        step(&mut bu, 0, part_in(0, 1, Some(1)));
        for event in 2..=4 {
            step(&mut bu, 0, part_in(0, event, Some(1)));
            step(&mut bu, 0, part_in(1, event, Some(1)));
        }
        assert_eq!(bu.counters().aged_events, 1, "event 1 shipped without RU 1's part");
        step(&mut bu, 0, part_in(1, 1, Some(1))); // late: dropped
        let file = ls1_file();
        step(&mut bu, 1, Input::FileWritten(file));
        step(&mut bu, 2, Input::FilePublished(file));
    }

    // Below, each law is broken in turn on a sound BU (`holding`), and the check must name it.

    #[test]
    fn a_bu_whose_bytes_held_are_not_its_events_is_caught() {
        let mut bu = holding();
        bu.held_bytes += 1;
        assert!(matches!(bu.check_invariants(), Err(InvariantViolation::BuBytesNotConserved { .. })));
        // A file marked written without letting its bytes go.
        let mut bu = holding();
        bu.files.get_mut(&ls1_file()).expect("held").state = FileState::Written;
        assert!(matches!(
            bu.check_invariants(),
            Err(InvariantViolation::BuBytesNotConserved {
                held_bytes: 448,
                built_bytes: 384,
                building: 64,
                built: 128,
                ..
            })
        ));
    }

    #[test]
    fn a_bu_that_loses_a_file_is_caught() {
        let mut bu = holding();
        bu.files.remove(&ls1_file());
        bu.held_bytes -= 256;
        bu.built_bytes -= 256;
        assert_eq!(
            bu.check_invariants(),
            Err(InvariantViolation::BuEventsNotConserved {
                bu: 0,
                built: 3,
                found: 0,
                open: 1,
                unpublished: 0,
                published: 0,
                discarded: 0
            })
        );
    }

    #[test]
    fn an_event_held_in_two_places_is_caught() {
        let mut bu = holding();
        // Event 2, in the file being written, begun again.
        let b = Building { parts: vec![None, None], have: 0, first_at: 0, bytes: 0 };
        bu.building.insert(2, b);
        bu.outstanding -= 1;
        assert_eq!(bu.check_invariants(), Err(InvariantViolation::BuEventHeldTwice { bu: 0, event: 2 }));
    }

    #[test]
    fn a_pull_bu_holding_more_than_it_asked_for_is_caught() {
        let mut bu = holding();
        bu.cfg.max_events_in_flight += 1; // not the bound's law
        bu.outstanding += 1;
        assert_eq!(
            bu.check_invariants(),
            Err(InvariantViolation::BuHoldsUnasked { bu: 0, asked: 1024, outstanding: 1021, building: 1, built: 3 })
        );
    }

    #[test]
    fn a_file_numbered_past_its_lumi_sections_index_or_held_twice_is_caught() {
        let mut bu = holding();
        bu.next_index.insert(1, 0);
        assert_eq!(
            bu.check_invariants(),
            Err(InvariantViolation::BuFileMisnumbered { bu: 0, file: ls1_file(), next_index: 0 })
        );
        let mut bu = holding();
        let open = bu.open[0].file;
        let entry = FileEntry { state: FileState::Written, events: Vec::new(), count: 0, held_bytes: 0 };
        bu.files.insert(open, entry);
        assert!(
            matches!(bu.check_invariants(), Err(InvariantViolation::BuFileMisnumbered { file, .. }) if file == open)
        );
    }

    #[test]
    fn too_many_open_files_or_two_of_one_lumi_section_are_caught() {
        let mut bu = holding();
        let file = FileId { bu: 0, lumi_section: 2, index: 1 };
        bu.next_index.insert(2, 2);
        bu.open.push(OpenFile { file, lumi_section: 2, events: Vec::new(), opened_at: 0, grown_at: 0, bytes: 0 });
        assert_eq!(bu.check_invariants(), Err(InvariantViolation::BuLumiSectionOpenTwice { bu: 0, lumi_section: 2 }));
        bu.cfg.max_open_files = 1;
        assert_eq!(bu.check_invariants(), Err(InvariantViolation::BuOpenFilesOverBound { bu: 0, open: 2, bound: 1 }));
    }

    #[test]
    fn an_ended_lumi_section_with_a_file_or_due_again_is_caught() {
        let mut bu = holding();
        bu.lumis_written.insert(1);
        assert!(matches!(
            bu.check_invariants(),
            Err(InvariantViolation::BuEndedLumiSectionReopened { lumi_section: 1, .. })
        ));
        let mut bu = holding();
        bu.lumis_written.insert(7);
        bu.lumis_due.insert(7, 0);
        assert_eq!(
            bu.check_invariants(),
            Err(InvariantViolation::BuEndedLumiSectionReopened { bu: 0, lumi_section: 7, what: "due again".into() })
        );
    }

    #[test]
    fn a_bu_over_its_bounds_is_caught() {
        let mut bu = holding();
        bu.cfg.max_events_in_flight = 3;
        assert!(matches!(bu.check_invariants(), Err(InvariantViolation::BuEventsOverBound { bound: 3, .. })));
        let mut bu = holding();
        bu.cfg.store_bytes = Some(300);
        assert_eq!(
            bu.check_invariants(),
            Err(InvariantViolation::BuStoreOverBound { bu: 0, held_bytes: 448, bound: 300 })
        );
    }
}
