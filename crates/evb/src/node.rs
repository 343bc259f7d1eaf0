//! The EVM's node: the event manager and the readout unit next to it (RU 0, which reads the
//! trigger), wired together without a network. Assignments to RU 0 are handed over in memory,
//! and commits for a BU ride on RU 0's next data message to it.
//!
//! The node also judges the trigger stream: its only clean ends are run control's stop and,
//! with an event limit, its close after exactly that many events. Anything else (a close before
//! it, a stream that cannot be read on, an event out of sequence) stops the trigger at the last
//! good fragment and is said as [`Notice::TriggerStreamBroken`]: the events triggered before it
//! are built, and the run has failed.

use crate::evm::{Evm, EvmConfig};
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig};
use crate::trigger_stream::TriggerStream;
use crate::types::{Nanos, Peer};
use crate::unit::{EvmOutput, Input, Notice, RuOutput, TriggerBreak};
use std::collections::VecDeque;
use tessera_formats::tcds::TCDS_FED_ID;

/// The EVM and RU 0 as one unit.
#[derive(Debug)]
pub struct EvmNode {
    /// The event manager.
    pub evm: Evm,
    /// RU 0.
    pub ru: Ru,
    out: VecDeque<RuOutput>,
    /// The trigger stream's end.
    trigger: TriggerStream,
    /// The other RUs were told the run is drained.
    drain_sent: bool,
}

impl EvmNode {
    /// The EVM's node at the start of a run.
    pub fn new(evm: EvmConfig, ru: RuConfig) -> Self {
        EvmNode {
            drain_sent: false,
            evm: Evm::new(evm),
            ru: Ru::new(ru),
            out: VecDeque::new(),
            trigger: TriggerStream::default(),
        }
    }

    /// The trigger stream may close cleanly after `events` events (the run's event limit, or
    /// run control's stop line); a lower limit given later wins.
    pub fn limit_trigger(&mut self, events: u64) {
        self.trigger.limit(events);
    }

    /// Whether the trigger is off: stopped by run control, ended cleanly, or broken.
    pub fn trigger_stopped(&self) -> bool {
        self.trigger.stopped()
    }

    /// How the trigger stream broke before run control stopped the trigger, if it did.
    pub fn trigger_break(&self) -> Option<&TriggerBreak> {
        self.trigger.broke()
    }

    /// The trigger stream ended: closed at a fragment boundary (`broken` none) or could not be
    /// read on (`broken` says why). Its close after the trigger limit stops the trigger
    /// cleanly; any other end before run control stopped the trigger breaks the run.
    pub fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>) {
        if self.trigger.stopped() {
            return;
        }
        let what = self.trigger.ended(self.evm.counters().triggered, broken);
        self.trigger_off(now, what);
        self.pump(now);
    }

    /// The trigger went off (`what`: the break, if it was one): a break is said, and the EVM
    /// drains the events triggered before it.
    fn trigger_off(&mut self, now: Nanos, what: Option<TriggerBreak>) {
        if let Some(what) = what {
            let notice = Notice::TriggerStreamBroken {
                what,
                fragments: self.evm.counters().triggered,
                last_event: self.evm.last_triggered(),
            };
            self.out.push_back(RuOutput::Notice(notice));
        }
        let last_event = self.evm.last_triggered();
        self.evm.handle(now, Input::StopTrigger { last_event });
    }

    /// Offers the next fragment of the FED at `fed_index` of RU 0 (see [`Ru::offer_fragment`]).
    pub fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        let result = self.ru.offer_fragment(now, fed_index, fragment);
        self.pump(now);
        result
    }

    /// Whether RU 0 would take the next fragment of the FED at `fed_index`.
    pub fn accepts(&self, fed_index: usize) -> bool {
        self.ru.accepts(fed_index)
    }

    /// Handles one input: messages from BUs and run control go to the EVM, ticks to both.
    pub fn handle(&mut self, now: Nanos, input: Input) {
        match input {
            Input::Tick => {
                self.evm.handle(now, Input::Tick);
                self.pump(now);
                self.ru.handle(now, Input::Tick);
            }
            Input::StopTrigger { last_event } => {
                // Once: a later stop (the stream's end after run control's) changes nothing.
                if self.trigger.stop() {
                    self.evm.handle(now, Input::StopTrigger { last_event });
                }
            }
            other => self.evm.handle(now, other),
        }
        self.pump(now);
    }

    /// Moves outputs between the two until neither has any for the other.
    fn pump(&mut self, now: Nanos) {
        loop {
            let mut moved = false;
            while let Some(o) = self.ru.poll_output() {
                moved = true;
                match o {
                    // After a break, a trigger fragment is of no event.
                    RuOutput::Triggered { .. } if self.trigger.broke().is_some() => {}
                    RuOutput::Triggered { event, lumi_section } => self.evm.triggered(now, event, lumi_section),
                    // The trigger FED's sync loss is said as such (counted against it) and
                    // breaks the trigger stream.
                    RuOutput::Notice(notice @ Notice::SyncLoss { fed: TCDS_FED_ID, expected, found_lv1 }) => {
                        self.out.push_back(RuOutput::Notice(notice));
                        if let Some(what) = self.trigger.sync_lost(expected, found_lv1) {
                            self.trigger_off(now, Some(what));
                        }
                    }
                    RuOutput::Send { to: Peer::Bu(bu), msg: Message::Data { ru, epoch, parts, mut commits } } => {
                        commits.extend(self.evm.take_commits(bu));
                        self.out.push_back(RuOutput::Send {
                            to: Peer::Bu(bu),
                            msg: Message::Data { ru, epoch, parts, commits },
                        });
                    }
                    other => self.out.push_back(other),
                }
            }
            while let Some(o) = self.evm.poll_output() {
                moved = true;
                match o {
                    EvmOutput::Send { to: Peer::Ru(Evm::LOCAL_RU), msg } => {
                        self.ru.handle(now, Input::Message { from: Peer::Evm, msg })
                    }
                    EvmOutput::Send { to, msg } => self.out.push_back(RuOutput::Send { to, msg }),
                    EvmOutput::Notice(n) => self.out.push_back(RuOutput::Notice(n)),
                }
            }
            if !moved {
                break;
            }
        }
        // Once every event is committed, the other RUs learn the run's end from the EVM: an
        // RU that loses the EVM before this has lost the run.
        if !self.drain_sent && self.evm.drained() {
            self.drain_sent = true;
            let last_event = self.evm.last_triggered();
            self.ru.handle(now, Input::Message { from: Peer::Evm, msg: Message::Drain { last_event } });
            for ru in (0..self.evm.config().n_ru).filter(|&r| r != Evm::LOCAL_RU) {
                self.out.push_back(RuOutput::Send { to: Peer::Ru(ru), msg: Message::Drain { last_event } });
            }
        }
    }

    /// The earliest time at which a tick has work.
    pub fn next_timeout(&self) -> Option<Nanos> {
        [self.evm.next_timeout(), self.ru.next_timeout()].into_iter().flatten().min()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<RuOutput> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::BufferRef;
    use crate::msg::TriggerInfo;

    /// The EVM's node of one RU reading the trigger FED and FED 0, for one BU.
    fn node() -> EvmNode {
        EvmNode::new(EvmConfig::new(1, 1), RuConfig::new(0, vec![TCDS_FED_ID, 0]))
    }

    /// Offers `count` trigger fragments from LV1 `first` on.
    fn trigger(node: &mut EvmNode, first: u32, count: u32) {
        for lv1 in first..first + count {
            let info = TriggerInfo { lumi_section: 1, orbit: 1, bx: 1 };
            let fragment = FragmentRef {
                fed: TCDS_FED_ID,
                lv1,
                bytes: 64,
                corrupt: false,
                buffer: BufferRef { offset: lv1, ..BufferRef::default() },
                trigger: Some(info),
            };
            node.offer_fragment(0, 0, fragment).unwrap();
        }
    }

    fn breaks(node: &mut EvmNode) -> Vec<Notice> {
        std::iter::from_fn(|| node.poll_output())
            .filter_map(|o| match o {
                RuOutput::Notice(n @ Notice::TriggerStreamBroken { .. }) => Some(n),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_trigger_stream_that_closes_after_the_limit_stops_the_trigger_cleanly() {
        let mut n = node();
        n.limit_trigger(5);
        n.limit_trigger(3); // a stop line drawn earlier than the event limit wins
        trigger(&mut n, 1, 3);
        n.trigger_stream_ended(0, None);
        assert!(n.trigger_stopped());
        assert_eq!((n.trigger_break(), n.evm.counters().triggered, n.evm.last_triggered()), (None, 3, Some(3)));
        assert!(breaks(&mut n).is_empty());
    }

    #[test]
    fn a_trigger_stream_that_closes_before_the_limit_breaks_the_run_at_its_last_good_event() {
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 4);
        n.trigger_stream_ended(0, None);
        assert!(n.trigger_stopped());
        let what = TriggerBreak::Closed { expected: Some(10) };
        assert_eq!(n.trigger_break(), Some(&what));
        assert_eq!(breaks(&mut n), vec![Notice::TriggerStreamBroken { what, fragments: 4, last_event: Some(4) }]);
        // Run control's stop after it changes nothing.
        n.handle(0, Input::StopTrigger { last_event: Some(4) });
        assert!(breaks(&mut n).is_empty());
    }

    #[test]
    fn a_trigger_stream_without_a_limit_that_closes_or_cannot_be_read_breaks_the_run() {
        let mut n = node();
        trigger(&mut n, 1, 2);
        n.trigger_stream_ended(0, None);
        assert_eq!(n.trigger_break(), Some(&TriggerBreak::Closed { expected: None }));
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 2);
        n.trigger_stream_ended(0, Some("garbage".into()));
        assert_eq!(n.trigger_break(), Some(&TriggerBreak::Broken("garbage".into())));
    }

    #[test]
    fn a_trigger_event_out_of_sequence_breaks_the_run_and_later_triggers_make_no_events() {
        let mut n = node();
        trigger(&mut n, 1, 3);
        trigger(&mut n, 5, 2); // event 4 skipped
        let what = TriggerBreak::SyncLost { expected: 4, found_lv1: 5 };
        assert_eq!(n.trigger_break(), Some(&what));
        assert_eq!(breaks(&mut n), vec![Notice::TriggerStreamBroken { what, fragments: 3, last_event: Some(3) }]);
        assert_eq!((n.evm.counters().triggered, n.evm.last_triggered()), (3, Some(3)));
    }

    #[test]
    fn after_run_control_stops_the_trigger_its_stream_may_end_as_it_likes() {
        let mut n = node();
        n.limit_trigger(10);
        trigger(&mut n, 1, 2);
        n.handle(0, Input::StopTrigger { last_event: Some(2) });
        n.trigger_stream_ended(0, Some("cut".into()));
        assert_eq!((n.trigger_stopped(), n.trigger_break()), (true, None));
        assert!(breaks(&mut n).is_empty());
    }
}
