//! An RU alone, to measure what it takes in: with no EVM and no BU, it assigns itself every event
//! all its FEDs have delivered, and frees the event's buffers as soon as its super-fragment is
//! ready, as if a BU had taken and committed it. Every fragment is still checked and every event
//! still assembled; nothing leaves the RU.

use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig};
use crate::types::{EventNumber, EventRange, Nanos, Peer, push_event};
use crate::unit::{Input, RuOutput};
use std::collections::VecDeque;

/// Events delivered that are assigned at once while fragments come in: one assignment (and one
/// release) per this many events, not per event. Fewer wait for the next tick, which
/// [`IngestRu::next_timeout`] asks for at once.
pub const ASSIGN_BATCH_EVENTS: u64 = 64;

/// An RU that builds its super-fragments for nobody.
#[derive(Debug)]
pub struct IngestRu {
    ru: Ru,
    /// The first event not yet assigned.
    next: EventNumber,
    out: VecDeque<RuOutput>,
}

impl IngestRu {
    /// An ingest-only RU at the start of a run.
    pub fn new(cfg: RuConfig) -> Self {
        IngestRu { next: cfg.first_event, ru: Ru::new(cfg), out: VecDeque::new() }
    }

    /// The RU inside.
    pub fn ru(&self) -> &Ru {
        &self.ru
    }

    /// The RU inside, for what the driver tells it of its streams.
    pub fn ru_mut(&mut self) -> &mut Ru {
        &mut self.ru
    }

    /// Offers the next fragment of the FED at `fed_index` (see [`Ru::offer_fragment`]).
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        let result = self.ru.offer_fragment(now, fed_index, fragment);
        self.step(now, ASSIGN_BATCH_EVENTS);
        result
    }

    /// Handles one input (ticks: there is nobody to send messages), and assigns every event
    /// delivered.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        self.ru.handle(now, input);
        self.step(now, 1);
    }

    /// Assigns the events every FED has delivered, when at least `batch` are, and frees those
    /// whose super-fragment is ready.
    fn step(&mut self, now: Nanos, batch: u64) {
        let through = self.ru.delivered_through();
        if through >= self.next + batch {
            let count = u32::try_from(through - self.next).unwrap_or(u32::MAX);
            let events = vec![EventRange { first: self.next, count }];
            self.next += u64::from(count);
            let msg = Message::Assign { bu: 0, epoch: 1, events, release: Vec::new() };
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg });
        }
        let mut done = Vec::new();
        while let Some(o) = self.ru.poll_output() {
            match o {
                RuOutput::Send { msg: Message::Data { parts, .. }, .. } => {
                    for p in &parts {
                        push_event(&mut done, p.event);
                    }
                    self.ru.recycle(parts);
                }
                // Nobody waits for the streams: an RU alone starts at once.
                RuOutput::Send { msg: Message::StreamsConnected { .. }, .. } => {}
                other => self.out.push_back(other),
            }
        }
        if !done.is_empty() {
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg: Message::Release { events: done } });
            self.out.extend(std::iter::from_fn(|| self.ru.poll_output()));
        }
    }

    /// When a tick has work: at once while delivered events wait to be assigned, else as
    /// [`Ru::next_timeout`] says.
    pub fn next_timeout(&self) -> Option<Nanos> {
        if self.ru.delivered_through() > self.next {
            return Some(0);
        }
        self.ru.next_timeout()
    }

    /// The next output: freed buffers and notices.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BufferRef;
    use crate::types::FedId;

    fn fragment(fed: FedId, lv1: u32, at: u32) -> FragmentRef {
        FragmentRef {
            fed,
            lv1,
            bytes: 64,
            corrupt: false,
            buffer: BufferRef { offset: at, ..BufferRef::default() },
            trigger: None,
        }
    }

    #[test]
    fn every_event_all_feds_delivered_is_built_once_and_every_buffer_freed_once() {
        let cfg = RuConfig { max_events_buffered: 4, max_parts_per_message: 3, ..RuConfig::new(1, vec![7, 8]) };
        let mut ru = IngestRu::new(cfg);
        let mut freed = Vec::new();
        // Driven as the runtime drives it: FED 7 is read first, FED 8 only when FED 7 is held
        // back (the RU's window of 4 events is full), and a tick whenever one is due.
        let (mut next7, mut next8, now) = (1u32, 1u32, 0);
        while next8 <= 20 {
            let offered = if next7 <= 20 && ru.offer_fragment(0, 0, fragment(7, next7, next7)).is_ok() {
                next7 += 1;
                true
            } else {
                false
            };
            if !offered && next8 < next7 {
                ru.offer_fragment(0, 1, fragment(8, next8, 1000 + next8)).unwrap();
                next8 += 1;
            }
            if ru.next_timeout().is_some_and(|t| now >= t) {
                ru.handle(now, Input::Tick);
            }
            freed.extend(std::iter::from_fn(|| ru.poll_output()));
        }
        assert_eq!(ru.next_timeout(), None, "nothing left to assign or to wait for");
        let mut buffers: Vec<u32> = freed
            .into_iter()
            .flat_map(|o| match o {
                RuOutput::FreeBuffers(f) => f,
                other => panic!("unexpected {other:?}"),
            })
            .map(|f| f.buffer.offset)
            .collect();
        buffers.sort_unstable();
        let expected: Vec<u32> = (1..=20).chain(1001..=1020).collect();
        assert_eq!(buffers, expected, "each fragment freed exactly once");
        assert_eq!(ru.ru().events_buffered(), 0);
        assert_eq!(ru.ru().counters().parts_sent, 20);
    }
}
