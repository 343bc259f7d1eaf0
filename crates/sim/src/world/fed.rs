//! The FED streams: each FED's next fragment offered to its RU when its trigger time comes,
//! unless the RU's memory for it is full or a fault holds it back; the trigger's information. In
//! orbit mode a FED is a DTH source and its fragment an orbit block.

use super::{Ev, World, ru_node};

/// Push: how often a held trigger looks at the throttle again, in nanoseconds.
const THROTTLE_POLL_NS: u64 = 10_000;
/// Push: data messages a connection holds unread by its BU before its RU's sends wait (TCP's
/// buffers, in messages).
pub(super) const UNREAD_MESSAGES_MAX: usize = 4;
use tessera_evb::msg::{BufferRef, FragmentRef, TriggerInfo};
use tessera_evb::ru::StreamChange;
use tessera_evb::types::{EventNumber, FedId, Nanos, Peer};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::orbit::{ORBIT_HEADER_BYTES, orbit_fragment_len};
use tessera_formats::tcds::{TCDS_FED_ID, lumi_section_of_orbit, orbit_in_lumi_section, orbit_number};

/// How long a stranger that names nothing keeps its place before the RU drops it.
const NAME_TIMEOUT_NS: Nanos = 30_000_000;

impl World {
    /// A front end connects to RU `ru` (see [`Ev::Connect`]): the RU's intake must take every
    /// configured stream, whatever the strangers do; it names its FED a while later.
    pub(super) fn connect(&mut self, ru: usize, fed: Option<usize>, names: Option<FedId>) {
        if let Err(why) = self.intakes[ru].accept() {
            match fed {
                Some(f) => self.violation(format!("RU {ru} refused FED {}'s stream: {why}", self.sources[ru][f].id)),
                None => self.tally.refused_connections += 1,
            }
            return;
        }
        let delay_max = self.sc.faults.connect_delay_max_ns;
        let delay = match (fed, names) {
            (None, None) => NAME_TIMEOUT_NS,
            _ if delay_max > 0 => self.rng.below(delay_max / 4 + 1),
            _ => 0,
        };
        self.schedule(self.now + delay, Ev::Name { ru, fed, names });
    }

    /// A connection's first block header comes (see [`Ev::Name`]): a configured stream becomes
    /// its FED's, and offers its first fragment; a stranger is refused.
    pub(super) fn name(&mut self, ru: usize, fed: Option<usize>, names: Option<FedId>) {
        let Some(f) = fed else {
            match names {
                Some(id) => {
                    if let Ok(i) = self.intakes[ru].name(id) {
                        self.violation(format!("RU {ru} took a stranger naming FED {id} as its stream {i}"));
                    }
                }
                None => self.intakes[ru].forget_unnamed(),
            }
            self.tally.refused_connections += 1;
            return;
        };
        let id = self.sources[ru][f].id;
        match self.intakes[ru].name(id) {
            Ok(i) if i == f => {}
            other => {
                self.violation(format!("RU {ru}: FED {id}'s stream named as {other:?}"));
                return;
            }
        }
        self.sources[ru][f].named = true;
        self.readout.stream_changed(self.now, ru, f, StreamChange::Connected);
        if self.sources.iter().flatten().all(|s| s.named) {
            self.all_named_at = Some(self.now);
        }
        self.schedule(self.now.max(self.trigger_times[0]), Ev::FedReady { ru, fed: f });
        self.drain_outputs(ru_node(ru));
    }

    pub(super) fn fed_ready(&mut self, ru: usize, fed: usize) {
        let first = self.sc.first_event;
        let last = first + self.sc.events;
        let sends_stalled = self.sends_stalled(ru);
        let s = &mut self.sources[ru][fed];
        if !s.named {
            return;
        }
        if s.skip == Some(s.next_event) {
            s.next_event += 1;
        }
        let event = s.next_event;
        if event >= last || event > s.last_event {
            if s.id == TCDS_FED_ID && !s.ended {
                s.ended = true;
                self.readout.trigger_stream_ended(self.now);
                self.drain_outputs(Peer::Evm);
            }
            return;
        }
        let index = (event - first) as usize;
        let triggered = match self.sc.push {
            None => self.trigger_times[index],
            // Push: the trigger holds while throttled; the FED waits for it to issue the event.
            Some(_) => match self.push.triggered_at.get(index) {
                Some(&at) => at,
                None => {
                    s.awaiting_trigger = true;
                    return;
                }
            },
        };
        let mut due = triggered + 2_000 * fed as u64;
        if s.slow {
            due = due.max(s.sent_at + 2 * self.sc.trigger_interval_ns);
        }
        if (s.id != TCDS_FED_ID && s.held >= self.sc.fed_buffer_fragments) || sends_stalled {
            // The RU's memory for this stream is full, or its sends wait: it does not read the
            // stream, and says so.
            self.readout.ru_mut(ru).stream_alive(fed, self.now);
            self.tally.back_pressure += 1;
            self.schedule(self.now + 50_000, Ev::FedReady { ru, fed });
            return;
        }
        if self.now < due {
            self.schedule(due, Ev::FedReady { ru, fed });
            return;
        }
        if let Some((from, to)) = s.stall
            && self.now >= from
            && self.now < to
        {
            if to != Nanos::MAX {
                self.schedule(to, Ev::FedReady { ru, fed });
            }
            return;
        }
        // A fragment read in pieces: its first part shows the stream alive, the rest comes later.
        match s.partial_until {
            Some(at) if self.now < at => {
                self.schedule(at, Ev::FedReady { ru, fed });
                return;
            }
            Some(_) => s.partial_until = None,
            None if self.sc.faults.partial_reads && self.rng.chance(0.05) => {
                let rest = self.now + self.rng.between(1_000, 500_000);
                self.sources[ru][fed].partial_until = Some(rest);
                self.tally.partial_reads += 1;
                self.readout.ru_mut(ru).stream_alive(fed, self.now);
                self.schedule(rest, Ev::FedReady { ru, fed });
                return;
            }
            None => {}
        }
        let s = &self.sources[ru][fed];
        let id = s.id;
        let corrupt = self.rng.chance(self.sc.faults.corrupt_fragment_probability);
        let trigger = (id == TCDS_FED_ID).then(|| self.trigger_info(event));
        let bytes = self.fragment_bytes(id, event);
        let fragment = FragmentRef {
            fed: id,
            lv1: (event as u32) & LV1_MASK,
            bytes,
            corrupt,
            buffer: BufferRef { area: ru as u32, chunk: fed as u32, offset: self.next_buffer, len: bytes, head: 0 },
            trigger,
        };
        let offered = self.readout.offer(self.now, ru, fed, fragment);
        match offered {
            Ok(()) => {
                self.next_buffer += 1;
                self.buffers.insert(fragment.buffer, (ru, fed, event));
                let s = &mut self.sources[ru][fed];
                s.held += 1;
                s.sent_at = self.now;
                self.tally.fragments += 1;
                if corrupt {
                    self.tally.corrupt_fragments += 1;
                    self.corrupt.insert((id, event));
                }
                self.sources[ru][fed].next_event += 1;
                self.schedule(self.now, Ev::FedReady { ru, fed });
            }
            Err(_) => {
                self.tally.back_pressure += 1;
                // Under pull the trigger holds while RU 0 refuses its fragments: dead time.
                if id == TCDS_FED_ID && self.sc.push.is_none() {
                    self.tally.dead_time_ns += 50_000;
                }
                self.schedule(self.now + 50_000, Ev::FedReady { ru, fed });
            }
        }
        self.drain_outputs(ru_node(ru));
    }

    /// Push: the trigger issues its next event unless the throttle is up, and wakes the FEDs
    /// waiting for it; while the throttle is up it holds, and the time is dead time.
    pub(super) fn trigger(&mut self) {
        let i = self.push.issued as usize;
        let Some(&at) = self.trigger_times.get(i) else { return };
        if self.throttled() {
            self.tally.dead_time_ns += THROTTLE_POLL_NS;
            self.push.delay += THROTTLE_POLL_NS;
            self.schedule(self.now + THROTTLE_POLL_NS, Ev::Trigger);
            return;
        }
        debug_assert!(self.now >= at + self.push.delay, "never before its time");
        self.push.triggered_at.push(self.now);
        self.push.issued += 1;
        for ru in 0..self.sources.len() {
            for fed in 0..self.sources[ru].len() {
                if std::mem::take(&mut self.sources[ru][fed].awaiting_trigger) {
                    self.schedule(self.now, Ev::FedReady { ru, fed });
                }
            }
        }
        if let Some(&next) = self.trigger_times.get(i + 1) {
            self.schedule(next + self.push.delay, Ev::Trigger);
        }
    }

    /// Push: whether any RU or BU is past its high-water mark, or an RU's sends wait.
    fn throttled(&self) -> bool {
        self.readout.throttled()
            || self.bus.iter().any(|b| b.unit.as_ref().is_some_and(tessera_evb::Bu::throttled))
            || (0..self.sources.len()).any(|ru| self.sends_stalled(ru))
    }

    /// Push: whether RU `ru` has as many data messages unread by some BU as a connection holds:
    /// it sends no more there, so it reads its streams no further.
    pub(super) fn sends_stalled(&self, ru: usize) -> bool {
        let me = ru_node(ru);
        self.push.unread.iter().any(|(&(from, _), q)| from == me && q.len() >= UNREAD_MESSAGES_MAX)
    }

    /// A FED's fragment of `event`: 1 kB; in orbit mode a source's orbit block, its fragment of
    /// each event of the orbit framed, sizes differing by source.
    fn fragment_bytes(&self, source: FedId, orbit: EventNumber) -> u32 {
        let Some(mode) = self.sc.orbit else { return 1024 };
        let fragment = mode.fragment_bytes as usize * (2 + usize::from(source % 3)) / 3;
        let events = self.block_events(source, orbit);
        (ORBIT_HEADER_BYTES + usize::from(events) * orbit_fragment_len(fragment)) as u32
    }

    /// Orbit mode: the events of `source`'s block of `orbit`, one fewer for a short block.
    pub(super) fn block_events(&self, source: FedId, orbit: EventNumber) -> u16 {
        let events = self.orbit_events[(orbit - self.sc.first_event) as usize];
        events - u16::from(self.short_blocks.contains(&(source, orbit)))
    }

    /// The trigger's information of `event`; in orbit mode the orbit header's, whose lumi
    /// section follows from the orbit number (the orbit's index in the run numbered for its
    /// lumi sections, as the runtime numbers it).
    pub(super) fn trigger_info(&self, event: EventNumber) -> TriggerInfo {
        if let Some(mode) = self.sc.orbit {
            let orbit = orbit_number(event, mode.orbits_per_lumi_section);
            return TriggerInfo { lumi_section: lumi_section_of_orbit(orbit), orbit, bx: 0 };
        }
        let index = event - self.sc.first_event;
        let ls = (index / self.sc.events_per_lumi_section) as u32 + 1;
        TriggerInfo {
            lumi_section: ls,
            orbit: orbit_in_lumi_section(ls, index % self.sc.events_per_lumi_section),
            bx: (event % 3564) as u16,
        }
    }
}
