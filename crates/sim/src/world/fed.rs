//! The FED streams: each FED's next fragment offered to its RU when its trigger time comes,
//! unless the RU's memory for it is full or a fault holds it back; the trigger's information.

use super::{Ev, World};
use tessera_evb::msg::{BufferRef, FragmentRef, TriggerInfo};
use tessera_evb::types::{EventNumber, Nanos, Peer};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::tcds::{TCDS_FED_ID, orbit_in_lumi_section};

impl World {
    pub(super) fn fed_ready(&mut self, ru: usize, fed: usize) {
        let first = self.sc.first_event;
        let last = first + self.sc.events;
        let s = &mut self.sources[ru][fed];
        if s.skip == Some(s.next_event) {
            s.next_event += 1;
        }
        let event = s.next_event;
        if event >= last || event > s.last_event {
            if s.id == TCDS_FED_ID && !s.ended {
                s.ended = true;
                self.evm.trigger_stream_ended(self.now, None);
                self.drain_outputs(Peer::Evm);
            }
            return;
        }
        let mut due = self.trigger_times[(event - first) as usize] + 2_000 * fed as u64;
        if s.slow {
            due = due.max(s.sent_at + 2 * self.sc.trigger_interval_ns);
        }
        if s.id != TCDS_FED_ID && s.held >= self.sc.fed_buffer_fragments {
            // The RU's memory for this stream is full: it does not read it, and says so.
            if ru == 0 {
                self.evm.ru.stream_alive(fed, self.now);
            } else {
                self.rus[ru - 1].stream_alive(fed, self.now);
            }
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
        let id = s.id;
        let corrupt = self.rng.chance(self.sc.faults.corrupt_fragment_probability);
        let trigger = (id == TCDS_FED_ID).then(|| self.trigger_info(event));
        let fragment = FragmentRef {
            fed: id,
            lv1: (event as u32) & LV1_MASK,
            bytes: 1024,
            corrupt,
            buffer: BufferRef { area: ru as u32, chunk: fed as u32, offset: self.next_buffer, len: 1024 },
            trigger,
        };
        let offered = if ru == 0 {
            self.evm.offer_fragment(self.now, fed, fragment)
        } else {
            self.rus[ru - 1].offer_fragment(self.now, fed, fragment)
        };
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
                self.schedule(self.now + 50_000, Ev::FedReady { ru, fed });
            }
        }
        self.drain_outputs(if ru == 0 { Peer::Evm } else { Peer::Ru(ru as u16) });
    }

    pub(super) fn trigger_info(&self, event: EventNumber) -> TriggerInfo {
        let index = event - self.sc.first_event;
        let ls = (index / self.sc.events_per_lumi_section) as u32 + 1;
        TriggerInfo {
            lumi_section: ls,
            orbit: orbit_in_lumi_section(ls, index % self.sc.events_per_lumi_section),
            bx: (event % 3564) as u16,
        }
    }
}
