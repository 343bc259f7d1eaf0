//! An RU alone, to measure what it takes in: with no EVM and no BU, it assigns itself every event
//! all its FEDs have delivered, and frees the event's buffers as soon as its super-fragment is
//! ready, as if a BU had taken and committed it. Every fragment is still checked and every event
//! still assembled; nothing leaves the RU.

use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig};
use crate::types::{EventNumber, EventRange, Nanos, Peer, push_event};
use crate::unit::{Input, RuOutput};
use std::collections::VecDeque;

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
        self.step(now);
        result
    }

    /// Handles one input (ticks: there is nobody to send messages).
    pub fn handle(&mut self, now: Nanos, input: Input) {
        self.ru.handle(now, input);
        self.step(now);
    }

    /// Assigns the events every FED has delivered, and frees those whose super-fragment is
    /// ready.
    fn step(&mut self, now: Nanos) {
        let through = self.ru.delivered_through();
        if through > self.next {
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
                }
                other => self.out.push_back(other),
            }
        }
        if !done.is_empty() {
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg: Message::Release { events: done } });
            self.out.extend(std::iter::from_fn(|| self.ru.poll_output()));
        }
    }

    /// When a tick has work (see [`Ru::next_timeout`]).
    pub fn next_timeout(&self) -> Option<Nanos> {
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
        // FED 8 runs behind FED 7: events wait for it, and the RU's window (4) holds FED 7 back.
        for lv1 in 1..=20u32 {
            ru.offer_fragment(0, 0, fragment(7, lv1, lv1)).unwrap_or_else(|_| {
                while ru.ru().events_buffered() >= 4 {
                    let next = ru.ru().delivered_through() as u32;
                    ru.offer_fragment(0, 1, fragment(8, next, 1000 + next)).unwrap();
                    freed.extend(std::iter::from_fn(|| ru.poll_output()));
                }
                ru.offer_fragment(0, 0, fragment(7, lv1, lv1)).unwrap();
            });
            freed.extend(std::iter::from_fn(|| ru.poll_output()));
        }
        while ru.ru().delivered_through() <= 20 {
            let next = ru.ru().delivered_through() as u32;
            ru.offer_fragment(0, 1, fragment(8, next, 1000 + next)).unwrap();
            freed.extend(std::iter::from_fn(|| ru.poll_output()));
        }
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
