//! The push protocol (after LHCb's event builder), the alternative to pull: no event manager
//! talks to anyone per event. Every RU sends each super-fragment, as soon as it has it, to the
//! BU that [`Destinations`] gives its event, the same function in every RU; the BU ages the
//! events it builds and ships those that stay incomplete too long, flagged; a full buffer
//! anywhere raises a throttle that holds the trigger.
//!
//! - [`Destinations`]: consecutive blocks of `block_events` events to one BU, round robin over
//!   the enabled BUs; excluding a BU from an event on is a new list from that event, which every
//!   RU applies at the same event.
//! - [`PushRu`]: an RU ([`Ru`](crate::Ru)) that assigns itself every event it sees to its
//!   destination, sends each super-fragment when complete (or without a FED given up on, masked or ended), and
//!   frees its buffers once sent: there is no commit to wait for.
//! - [`PushNode`]: RU 0, which reads the trigger, with what the event manager does in pull and
//!   push still needs: each lumi section's end with every BU's count of its events, the drain and
//!   the end of run, and the exclusion of a lost BU.
//! - The BU is the pull protocol's [`Bu`](crate::Bu) in push mode ([`BuConfig::push`](crate::BuConfig::push)): it
//!   takes the parts of the events its destination function gives it, builds them without asking,
//!   ages them by event number and by time, drops late parts, and publishes a file as soon as it
//!   is written.

mod destinations;
mod node;
mod ru;

pub use destinations::{Destinations, ExcludeError};
pub use node::{PushNode, PushNodeBug, PushNodeConfig};
pub use ru::{PARTIAL_BLOCK_WAIT_NS, PUSH_EPOCH, PushRu, PushRuCounters};

use crate::types::Nanos;

/// The BU's side of push ([`BuConfig::push`](crate::BuConfig::push)). A BU takes every part it
/// is sent (the RUs chose it) and never asks; its bound on events held is kept by its driver,
/// which reads no data message while [`Bu::accepts_parts`](crate::Bu::accepts_parts) says no,
/// and by the throttle it raises before that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushBu {
    /// An event in progress is shipped incomplete once a part of an event this many events newer
    /// has come. Default 4096.
    pub age_events: u64,
    /// An event in progress is shipped incomplete this long after its first part came, in
    /// nanoseconds. Default 200 ms.
    pub age_ns: Nanos,
    /// Events one data message may carry at most (the RUs' `max_parts_per_message`): the BU
    /// takes a message only while that many more fit its bound. Default 256.
    pub message_events_max: u32,
    /// Events held at which the BU raises the throttle. Default 80 % of its bound.
    pub high_water_events: u32,
}

impl PushBu {
    /// Defaults for a BU that holds `max_events_in_flight` events at most.
    pub fn new(max_events_in_flight: u32) -> Self {
        PushBu {
            age_events: 4096,
            age_ns: 200_000_000,
            message_events_max: 256,
            high_water_events: max_events_in_flight / 5 * 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{BufferRef, FragmentRef, Message, SuperFragment, TriggerInfo};
    use crate::types::{EventNumber, FedId, Peer};
    use crate::unit::{BuOutput, Input, Notice, RuOutput};
    use crate::{Bu, BuConfig, BuDisk, RuConfig};
    use tessera_formats::frd::flags;
    use tessera_formats::tcds::TCDS_FED_ID;

    /// RU 0's node reading `feds`, of `n_ru` RUs and `n_bu` BUs given blocks of `block_events`.
    fn node_cfg(
        feds: Vec<FedId>,
        n_ru: u16,
        n_bu: u16,
        block_events: u64,
        exclude_margin_events: u64,
        window_events: Option<u64>,
    ) -> PushNodeConfig {
        PushNodeConfig {
            ru: RuConfig::new(0, feds),
            n_ru,
            n_bu,
            destinations: Destinations::new(1, block_events, (0..n_bu).collect()),
            high_water_events: 1000,
            exclude_margin_events,
            window_events,
            bug: None,
        }
    }

    fn fragment(fed: FedId, event: EventNumber, lumi_section: u32) -> FragmentRef {
        FragmentRef {
            fed,
            lv1: event as u32,
            bytes: 64,
            corrupt: false,
            buffer: BufferRef { chunk: u32::from(fed), offset: event as u32, ..BufferRef::default() },
            trigger: (fed == TCDS_FED_ID).then_some(TriggerInfo { lumi_section, orbit: 1, bx: 1 }),
        }
    }

    /// (destination, events) of every data message, and the events whose buffers were freed.
    fn sent_and_freed(out: Vec<RuOutput>) -> (Vec<(u16, Vec<EventNumber>)>, Vec<EventNumber>) {
        let mut sent = Vec::new();
        let mut freed = Vec::new();
        for o in out {
            match o {
                RuOutput::Send { to: Peer::Bu(b), msg: Message::Data { parts, .. } } => {
                    sent.push((b, parts.iter().map(|p| p.event).collect()))
                }
                RuOutput::FreeBuffers(f) => freed.extend(f.iter().map(|f| u64::from(f.lv1))),
                _ => {}
            }
        }
        (sent, freed)
    }

    #[test]
    fn a_push_ru_sends_blocks_to_their_bus_and_frees_them_once_sent() {
        let mut ru = PushRu::new(RuConfig::new(1, vec![3, 4]), Destinations::new(1, 2, vec![0, 1]), 100);
        ru.start(0);
        for e in 1..=5 {
            ru.offer_fragment(0, 0, fragment(3, e, 1)).unwrap();
            ru.offer_fragment(0, 1, fragment(4, e, 1)).unwrap();
        }
        let (sent, freed) = sent_and_freed(std::iter::from_fn(|| ru.poll_output()).collect());
        assert_eq!(sent, vec![(0, vec![1, 2]), (1, vec![3, 4])], "each block whole, one message");
        assert_eq!(freed, vec![1, 1, 2, 2, 3, 3, 4, 4]);
        // Event 5's block is begun: it waits for the rest of it, then goes alone.
        assert_eq!(ru.next_timeout(), Some(PARTIAL_BLOCK_WAIT_NS));
        ru.handle(PARTIAL_BLOCK_WAIT_NS, Input::Tick);
        let (sent, freed) = sent_and_freed(std::iter::from_fn(|| ru.poll_output()).collect());
        assert_eq!((sent, freed), (vec![(0, vec![5])], vec![5, 5]));
        assert_eq!(ru.ru().events_buffered(), 0);
        assert!(ru.ru().check_invariants().is_ok());
    }

    #[test]
    fn an_exclusion_drops_what_was_held_for_the_lost_bu_before_it_and_redirects_the_rest() {
        let mut ru = PushRu::new(RuConfig::new(1, vec![3, 4]), Destinations::new(1, 2, vec![0, 1]), 100);
        ru.start(0);
        // FED 3 delivers events 1-8, FED 4 nothing: every event is held, assigned.
        for e in 1..=8 {
            ru.offer_fragment(0, 0, fragment(3, e, 1)).unwrap();
        }
        ru.handle(0, Input::Message { from: Peer::Evm, msg: Message::Exclude { bu: 1, from_event: 7 } });
        assert_eq!(ru.push_counters(), PushRuCounters { redirected: 2, dropped_for_excluded: 0 });
        let (_, freed) = sent_and_freed(std::iter::from_fn(|| ru.poll_output()).collect());
        assert!(freed.is_empty(), "held for BU 1 before event 7: kept until whole");
        for e in 1..=8 {
            ru.offer_fragment(0, 1, fragment(4, e, 1)).unwrap();
        }
        let late = ru.ru().counters().late_fragments;
        assert_eq!(late, 0, "FED 4's fragments of events 3 and 4 are taken, not late");
        let (sent, freed) = sent_and_freed(std::iter::from_fn(|| ru.poll_output()).collect());
        let to: Vec<(u16, EventNumber)> =
            sent.into_iter().flat_map(|(b, es)| es.into_iter().map(move |e| (b, e))).collect();
        assert_eq!(to, vec![(0, 1), (0, 2), (0, 5), (0, 6), (0, 7), (0, 8)], "never to BU 1");
        assert!(freed.contains(&3) && freed.contains(&4), "events 3 and 4 freed once whole, unsent");
        assert_eq!(ru.push_counters().dropped_for_excluded, 2);
        assert_eq!(ru.ru().events_buffered(), 0);
    }

    #[test]
    fn events_the_function_gives_an_excluded_bu_before_its_exclusion_are_never_sent_to_it() {
        let mut ru = PushRu::new(RuConfig::new(1, vec![3]), Destinations::new(1, 2, vec![0, 1]), 100);
        ru.start(0);
        ru.handle(0, Input::Message { from: Peer::Evm, msg: Message::Exclude { bu: 1, from_event: 7 } });
        for e in 1..=8 {
            ru.offer_fragment(0, 0, fragment(3, e, 1)).unwrap();
        }
        let (sent, freed) = sent_and_freed(std::iter::from_fn(|| ru.poll_output()).collect());
        assert_eq!(sent, vec![(0, vec![1, 2]), (0, vec![5, 6]), (0, vec![7, 8])]);
        assert_eq!(freed, (1..=8).collect::<Vec<_>>(), "events 3 and 4, BU 1's, freed unsent");
        assert_eq!(ru.push_counters().dropped_for_excluded, 2);
    }

    fn progress_sent(ru: &mut PushRu) -> Vec<(Peer, EventNumber)> {
        std::iter::from_fn(|| ru.poll_output())
            .filter_map(|o| match o {
                RuOutput::Send { to, msg: Message::Progress { through } } => Some((to, through)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_push_ru_reads_a_fed_no_further_than_the_window_past_its_slowest_peer_and_tells_how_far_it_is() {
        // Window of 8 events; told each eighth (1 event); RU 0 its peer.
        let mut ru = PushRu::new(RuConfig::new(1, vec![3]), Destinations::new(1, 64, vec![0]), 100).with_window(
            8,
            vec![Peer::Evm],
            false,
        );
        for e in 1..=9 {
            assert!(ru.accepts(0), "event {e} is within the window of RU 0 at event 1");
            ru.offer_fragment(0, 0, fragment(3, e, 1)).unwrap();
        }
        assert!(!ru.accepts(0) && ru.held_by_window(), "event 10 is 9 past RU 0's event 1");
        assert_eq!(progress_sent(&mut ru).last(), Some(&(Peer::Evm, 10)), "its own point: event 10 next");
        ru.handle(0, Input::Message { from: Peer::Evm, msg: Message::Progress { through: 5 } });
        assert!(ru.accepts(0) && !ru.held_by_window());
    }

    #[test]
    fn ru_0_tells_every_ru_the_slowest_point_so_that_no_two_rus_are_two_windows_apart() {
        let mut ru0 = PushRu::new(RuConfig::new(0, vec![3]), Destinations::new(1, 64, vec![0]), 100).with_window(
            8,
            vec![Peer::Ru(1), Peer::Ru(2)],
            true,
        );
        for e in 1..=8 {
            ru0.offer_fragment(0, 0, fragment(3, e, 1)).unwrap();
        }
        ru0.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::Progress { through: 9 } });
        assert_eq!(progress_sent(&mut ru0), vec![], "RU 2 is still at event 1: nothing new to tell");
        ru0.handle(0, Input::Message { from: Peer::Ru(2), msg: Message::Progress { through: 4 } });
        assert_eq!(progress_sent(&mut ru0), vec![(Peer::Ru(1), 4), (Peer::Ru(2), 4)], "the slowest: RU 2");
    }

    #[test]
    fn a_trigger_whose_event_was_dropped_with_an_excluded_bu_is_still_counted() {
        let cfg = node_cfg(vec![TCDS_FED_ID, 3], 1, 2, 2, 0, None);
        let mut node = PushNode::new(cfg);
        // FED 3 delivers events 1-4; the trigger only 1 and 2. BU 1 (events 3, 4) is lost.
        for e in 1..=4 {
            node.offer_fragment(0, 1, fragment(3, e, 1)).unwrap();
        }
        for e in 1..=2 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
        }
        node.handle(0, Input::PeerLost(Peer::Bu(1)));
        for e in 3..=4 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
        }
        assert_eq!((node.triggered(), node.last_triggered()), (4, Some(4)), "events 3 and 4 were triggered");
    }

    #[test]
    fn ru_0_and_another_ru_telling_each_other_their_progress_run_on_for_many_windows() {
        let cfg = node_cfg(vec![TCDS_FED_ID], 2, 1, 8, 10, Some(16));
        let mut node = PushNode::new(cfg);
        let mut ru1 = PushRu::new(RuConfig::new(1, vec![3]), Destinations::new(1, 8, vec![0]), 1000).with_window(
            16,
            vec![Peer::Evm],
            false,
        );
        let (mut e0, mut e1) = (1, 1);
        for _ in 0..200 {
            // RU 1 runs twice as fast as RU 0: the window holds it back, never for good.
            for _ in 0..2 {
                if ru1.accepts(0) {
                    ru1.offer_fragment(0, 0, fragment(3, e1, 1)).unwrap();
                    e1 += 1;
                }
            }
            if node.ru().accepts(0) {
                node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e0, 1)).unwrap();
                e0 += 1;
            }
            while let Some(o) = node.poll_output() {
                if let RuOutput::Send { to: Peer::Ru(1), msg } = o {
                    ru1.handle(0, Input::Message { from: Peer::Evm, msg });
                }
            }
            while let Some(o) = ru1.poll_output() {
                if let RuOutput::Send { to: Peer::Evm, msg } = o {
                    node.handle(0, Input::Message { from: Peer::Ru(1), msg });
                }
            }
            assert!(e1 <= e0 + 16 + 2 + 1, "RU 1 at {e1} keeps within the window of RU 0 at {e0}");
        }
        assert!(e0 == 201 && e1 > 190, "both ran on: RU 0 at {e0}, RU 1 at {e1}");
    }

    fn push_bu(n_ru: u16) -> Bu {
        let cfg = BuConfig {
            max_events_per_file: 2,
            push: Some(PushBu { age_events: 3, age_ns: 1_000, message_events_max: 2, high_water_events: 4 }),
            max_events_in_flight: 6,
            ..BuConfig::new(0, n_ru)
        };
        Bu::new(cfg, 1, BuDisk::default())
    }

    fn data(ru: u16, event: EventNumber) -> Input {
        let fed = if ru == 0 { TCDS_FED_ID } else { ru };
        let part = SuperFragment { event, fragments: vec![fragment(fed, event, 1)], missing: Vec::new() };
        Input::Message { from: Peer::Ru(ru), msg: Message::Data { ru, epoch: 1, parts: vec![part], commits: vec![] } }
    }

    #[test]
    fn a_push_bu_builds_unasked_ages_old_events_drops_late_parts_and_publishes_without_a_commit() {
        let mut bu = push_bu(2);
        let mut out = Vec::new();
        bu.handle(0, data(0, 1)); // event 1 waits for RU 1
        for e in 2..=4 {
            bu.handle(0, data(0, e));
            bu.handle(0, data(1, e));
        }
        out.extend(std::iter::from_fn(|| bu.poll_output()));
        assert!(out.contains(&BuOutput::Notice(Notice::EventAged { event: 1, missing_rus: vec![1], by_time: false })));
        bu.handle(0, data(1, 1));
        assert_eq!(bu.counters().late_parts, 1, "RU 1's part of event 1 came after it was shipped");
        let files: Vec<(Vec<u16>, Vec<usize>)> = std::iter::from_fn(|| bu.poll_output())
            .chain(out)
            .filter_map(|o| match o {
                BuOutput::WriteFile { events, .. } => Some((
                    events.iter().map(|e| e.flags & flags::INCOMPLETE).collect(),
                    events.iter().map(|e| e.parts.len()).collect(),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(files[0], (vec![0, 0], vec![2, 2]), "events 2 and 3");
        assert_eq!(files[1], (vec![flags::INCOMPLETE, 0], vec![2, 2]), "aged event 1 with an empty part, then 4");
        // Written means published: push has no commit.
        let file = tessera_file(&mut bu);
        bu.handle(1, Input::FileWritten(file));
        assert!(std::iter::from_fn(|| bu.poll_output()).any(|o| o == BuOutput::PublishFile(file)));
    }

    fn tessera_file(bu: &mut Bu) -> crate::types::FileId {
        bu.handle(0, data(0, 9));
        bu.handle(0, data(1, 9));
        bu.handle(0, data(0, 10));
        bu.handle(0, data(1, 10));
        std::iter::from_fn(|| bu.poll_output())
            .find_map(|o| match o {
                BuOutput::WriteFile { file, .. } => Some(file),
                _ => None,
            })
            .expect("a file of events 9 and 10")
    }

    #[test]
    fn a_push_bu_ages_by_time_only_events_with_the_trigger_part_and_bounds_what_it_reads() {
        let mut bu = push_bu(2);
        bu.handle(0, data(1, 1)); // no trigger part: it never ages
        bu.handle(0, data(0, 2));
        // RU 1 has not reached event 2: it is behind, not missing, however long it takes.
        assert_eq!(bu.next_timeout(), None);
        bu.handle(5_000, Input::Tick);
        assert!(std::iter::from_fn(|| bu.poll_output()).all(|o| !matches!(o, BuOutput::Notice(_))));
        // RU 1 passed event 2 without its part: the part is late, and the event ages.
        bu.handle(500, data(1, 3));
        assert_eq!(bu.next_timeout(), Some(1_000));
        bu.handle(1_000, Input::Tick);
        let aged: Vec<Notice> = std::iter::from_fn(|| bu.poll_output())
            .filter_map(|o| match o {
                BuOutput::Notice(n) => Some(n),
                _ => None,
            })
            .collect();
        assert_eq!(aged, vec![Notice::EventAged { event: 2, missing_rus: vec![1], by_time: true }]);
        // Bound 6, 2 events a message: it reads while 4 or fewer are held; throttles at 4.
        assert!(bu.accepts_parts() && !bu.throttled());
        for e in 3..=5 {
            bu.handle(0, data(0, e));
        }
        assert_eq!(bu.events_in_flight(), 5);
        assert!(!bu.accepts_parts() && bu.throttled());
        // Full, it still takes what completes the events it holds, never what begins one.
        let Input::Message { msg: completes, .. } = data(1, 3) else { unreachable!() };
        let Input::Message { msg: begins, .. } = data(0, 6) else { unreachable!() };
        assert!(bu.takes(&completes) && !bu.takes(&begins));
        assert!(bu.takes(&Message::Drain { last_event: None }));
    }

    #[test]
    fn the_push_node_ends_lumi_sections_with_each_bus_count_drains_and_excludes_a_lost_bu() {
        let cfg = node_cfg(vec![TCDS_FED_ID], 2, 2, 2, 3, None);
        let mut node = PushNode::new(cfg);
        for e in 1..=5 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
        }
        assert!(!node.started() && node.triggered() == 0, "RU 1's streams are not there yet");
        node.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::StreamsConnected { ru: 1 } });
        assert!(node.started() && node.triggered() == 5, "the triggers kept aside count at the start");
        node.offer_fragment(0, 0, fragment(TCDS_FED_ID, 6, 2)).unwrap();
        let ends = |out: &[RuOutput]| -> Vec<(u16, u32, u64)> {
            out.iter()
                .filter_map(|o| match o {
                    RuOutput::Send { to: Peer::Bu(b), msg: Message::EndOfLumi { lumi_section, events } } => {
                        Some((*b, *lumi_section, *events))
                    }
                    _ => None,
                })
                .collect()
        };
        let out: Vec<RuOutput> = std::iter::from_fn(|| node.poll_output()).collect();
        assert_eq!(ends(&out), vec![(0, 1, 3), (1, 1, 2)], "events 1, 2, 5 to BU 0; 3, 4 to BU 1");
        node.handle(0, Input::PeerLost(Peer::Bu(1)));
        let out: Vec<RuOutput> = std::iter::from_fn(|| node.poll_output()).collect();
        // Seen through event 6: events from 7 + 3 = 10 on, a block start (9, 11, ...): 11.
        assert!(out.contains(&RuOutput::Send { to: Peer::Ru(1), msg: Message::Exclude { bu: 1, from_event: 11 } }));
        assert!(out.contains(&RuOutput::Notice(Notice::BuExcluded { bu: 1, from_event: 11, assigned: 4 })));
        for e in 7..=12 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 2)).unwrap();
        }
        node.handle(0, Input::StopTrigger { last_event: Some(12) });
        let out: Vec<RuOutput> = std::iter::from_fn(|| node.poll_output()).collect();
        assert_eq!(ends(&out), vec![(0, 2, 5)], "events 6, 9, 10, 11, 12 to BU 0; BU 1 is told nothing more");
        assert!(node.drained());
        assert!(out.contains(&RuOutput::Send { to: Peer::Ru(1), msg: Message::Drain { last_event: Some(12) } }));
        let end = Message::EndOfRun { last_lumi_section: 2, lumi_sections: 2 };
        assert!(out.contains(&RuOutput::Send { to: Peer::Bu(0), msg: end }));
    }

    /// Carries RU 0's points to RU 1 and RU 1's back; the rest of their outputs goes nowhere.
    fn exchange(node: &mut PushNode, ru1: &mut PushRu) {
        while let Some(o) = node.poll_output() {
            if let RuOutput::Send { to: Peer::Ru(1), msg: msg @ Message::Progress { .. } } = o {
                ru1.handle(0, Input::Message { from: Peer::Evm, msg });
            }
        }
        while let Some(o) = ru1.poll_output() {
            if let RuOutput::Send { to: Peer::Evm, msg } = o {
                node.handle(0, Input::Message { from: Peer::Ru(1), msg });
            }
        }
    }

    fn node_2x1(window_events: Option<u64>) -> PushNode {
        let mut node = PushNode::new(node_cfg(vec![TCDS_FED_ID, 3], 2, 1, 4, 4, window_events));
        node.handle(0, Input::Message { from: Peer::Ru(1), msg: Message::StreamsConnected { ru: 1 } });
        node
    }

    #[test]
    fn a_stop_under_push_draws_a_line_past_every_event_an_ru_may_have_sent_and_the_trigger_runs_to_it() {
        // Window 8: RU 1, told RU 0's point, reads up to 8 events past it.
        let mut node = node_2x1(Some(8));
        let mut ru1 = PushRu::new(RuConfig::new(1, vec![4]), Destinations::new(1, 4, vec![0]), 1000).with_window(
            8,
            vec![Peer::Evm],
            false,
        );
        ru1.start(0);
        // Each RU tells the other how far it is; RU 1's FEDs run as far ahead as the window lets.
        let mut e1 = 1;
        for e in 1..=40 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
            node.offer_fragment(0, 1, fragment(3, e, 1)).unwrap();
            while ru1.accepts(0) {
                ru1.offer_fragment(0, 0, fragment(4, e1, 1)).unwrap();
                e1 += 1;
            }
            exchange(&mut node, &mut ru1);
        }
        assert!(e1 - 1 > 40, "RU 1 read past RU 0's last trigger, to event {}", e1 - 1);
        // Run control stops at event 40: the line is past what RU 1 may have read.
        node.handle(0, Input::StopTrigger { last_event: Some(40) });
        assert!(!node.trigger_stopped() && !node.drained(), "the trigger runs on to the line");
        let told: Vec<Message> = std::iter::from_fn(|| node.poll_output())
            .filter_map(|o| match o {
                RuOutput::Send { to: Peer::Ru(1), msg: msg @ Message::Drain { .. } } => Some(msg),
                _ => None,
            })
            .collect();
        let [Message::Drain { last_event: Some(line) }] = told[..] else { panic!("one drain to RU 1: {told:?}") };
        assert!(line >= e1 - 1, "line {line} at or past RU 1's last event read, {}", e1 - 1);
        ru1.handle(0, Input::Message { from: Peer::Evm, msg: Message::Drain { last_event: Some(line) } });
        while ru1.accepts(0) {
            ru1.offer_fragment(0, 0, fragment(4, e1, 1)).unwrap();
            e1 += 1;
        }
        assert_eq!(e1 - 1, line, "RU 1 reads to the line and no further");
        ru1.handle(PARTIAL_BLOCK_WAIT_NS, Input::Tick);
        let (sent, _) = sent_and_freed(std::iter::from_fn(|| ru1.poll_output()).collect());
        assert_eq!(sent.iter().flat_map(|(_, es)| es).max(), Some(&line), "nothing past the line is sent");
        // RU 0 reads its FEDs to the line; the trigger's reaching it ends the run there.
        for e in 41..=line {
            assert!(node.ru().accepts(0) && node.ru().accepts(1));
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
            node.offer_fragment(0, 1, fragment(3, e, 1)).unwrap();
        }
        assert!(!node.ru().accepts(0) && !node.ru().accepts(1), "nothing past the line is read");
        assert!(node.trigger_stopped() && node.drained() && node.last_triggered() == Some(line));
        let out: Vec<RuOutput> = std::iter::from_fn(|| node.poll_output()).collect();
        assert!(out.contains(&RuOutput::Send { to: Peer::Bu(0), msg: Message::Drain { last_event: Some(line) } }));
        assert!(!out.iter().any(|o| matches!(o, RuOutput::Send { to: Peer::Ru(1), msg: Message::Drain { .. } })));
    }

    #[test]
    fn a_trigger_that_ends_before_the_stop_line_ends_the_run_at_its_last_event_and_without_a_window_the_stop_is_there()
    {
        let mut node = node_2x1(Some(8));
        for e in 1..=4 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
            node.offer_fragment(0, 1, fragment(3, e, 1)).unwrap();
        }
        node.handle(0, Input::StopTrigger { last_event: Some(4) });
        assert!(!node.drained());
        node.trigger_stream_ended(0, None);
        assert!(node.drained() && node.trigger_stopped(), "the run ends at event 4");
        let out: Vec<RuOutput> = std::iter::from_fn(|| node.poll_output()).collect();
        assert!(out.contains(&RuOutput::Send { to: Peer::Bu(0), msg: Message::Drain { last_event: Some(4) } }));
        let mut node = node_2x1(None);
        node.offer_fragment(0, 0, fragment(TCDS_FED_ID, 1, 1)).unwrap();
        node.offer_fragment(0, 1, fragment(3, 1, 1)).unwrap();
        node.handle(0, Input::StopTrigger { last_event: Some(1) });
        assert!(node.drained(), "no window bounds the RUs: the stop is at the last trigger");
    }

    #[test]
    fn a_push_bu_drops_the_events_after_the_runs_last_event_at_the_drain_and_any_part_of_one_after() {
        let mut bu = push_bu(2);
        bu.handle(0, data(0, 1));
        bu.handle(0, data(1, 1));
        bu.handle(0, data(1, 2)); // RU 1 read past the trigger's end: no trigger part comes
        bu.handle(0, data(1, 3));
        let held = bu.events_in_flight();
        bu.handle(0, Input::Message { from: Peer::Evm, msg: Message::Drain { last_event: Some(1) } });
        assert_eq!((bu.counters().events_past_run_end, bu.events_in_flight()), (2, held - 2));
        let dropped = bu.counters().parts_dropped;
        bu.handle(0, data(1, 4));
        assert_eq!(bu.counters().parts_dropped, dropped + 1, "a part of an event after the last is dropped");
        assert_eq!(bu.counters().events_built, 1);
    }

    #[test]
    fn a_lost_push_bu_started_again_publishes_its_whole_files_and_closes_its_lumi_sections_counting_the_rest_lost() {
        let file = crate::types::FileId { bu: 1, lumi_section: 2, index: 3 };
        let disk = BuDisk {
            unpublished: vec![(file, 5)],
            next_index: [(2, 4)].into(),
            published_events: [(1, 10), (2, 7)].into(),
            lumis_done: vec![1],
        };
        let cfg = BuConfig { push: Some(PushBu::new(100)), ..BuConfig::new(1, 2) };
        let mut bu = Bu::new(cfg, crate::types::FIRST_EPOCH + 1, disk);
        assert!(bu.closing());
        let out: Vec<BuOutput> = std::iter::from_fn(|| bu.poll_output()).collect();
        assert!(out.contains(&BuOutput::PublishFile(file)), "its whole file is the only copy: published");
        assert!(out.iter().any(|o| matches!(o, BuOutput::Send { msg: Message::Hello { bu: 1, .. }, .. })));
        bu.handle(0, data(0, 9));
        assert_eq!(bu.counters().parts_dropped, 1, "it takes no event");
        // RU 0: 10 of lumi section 1 were given it (closed already), 15 of section 2.
        for (lumi_section, events) in [(1, 10), (2, 15)] {
            bu.handle(0, Input::Message { from: Peer::Evm, msg: Message::EndOfLumi { lumi_section, events } });
        }
        assert!(std::iter::from_fn(|| bu.poll_output()).all(|o| !matches!(o, BuOutput::EndOfLumi { .. })));
        bu.handle(0, Input::FilePublished(file));
        let out: Vec<BuOutput> = std::iter::from_fn(|| bu.poll_output()).collect();
        assert_eq!(
            out.iter().filter(|o| matches!(o, BuOutput::EndOfLumi { .. })).collect::<Vec<_>>(),
            vec![&BuOutput::EndOfLumi { lumi_section: 2, events: 12, lost: 3 }],
            "7 + 5 published of 15 given"
        );
        assert_eq!((bu.published_in_run(), bu.counters().lost_events), (22, 3));
        bu.handle(
            0,
            Input::Message { from: Peer::Evm, msg: Message::EndOfRun { last_lumi_section: 2, lumi_sections: 2 } },
        );
        let end = BuOutput::EndOfRun { last_lumi_section: 2, lumi_sections: 2 };
        assert!(std::iter::from_fn(|| bu.poll_output()).any(|o| o == end));
    }

    #[test]
    fn ru_0_tells_a_lost_bu_that_comes_back_what_it_was_given_per_lumi_section_and_the_end_of_run() {
        let cfg = node_cfg(vec![TCDS_FED_ID], 1, 2, 2, 0, None);
        let mut node = PushNode::new(cfg);
        for e in 1..=4 {
            node.offer_fragment(0, 0, fragment(TCDS_FED_ID, e, 1)).unwrap();
        }
        node.offer_fragment(0, 0, fragment(TCDS_FED_ID, 5, 2)).unwrap();
        node.handle(0, Input::PeerLost(Peer::Bu(1)));
        assert_eq!(node.bus_lost(), vec![1], "waited for at the run's end");
        let _ = std::iter::from_fn(|| node.poll_output()).count();
        let hello = Message::Hello { bu: 1, epoch: 2, unpublished: vec![] };
        node.handle(0, Input::Message { from: Peer::Bu(1), msg: hello });
        assert!(node.bus_lost().is_empty());
        let to_bu1 = |out: Vec<RuOutput>| -> Vec<Message> {
            out.into_iter()
                .filter_map(|o| match o {
                    RuOutput::Send { to: Peer::Bu(1), msg } => Some(msg),
                    _ => None,
                })
                .collect()
        };
        let out = to_bu1(std::iter::from_fn(|| node.poll_output()).collect());
        assert_eq!(out, vec![Message::EndOfLumi { lumi_section: 1, events: 2 }], "events 3 and 4");
        node.offer_fragment(0, 0, fragment(TCDS_FED_ID, 6, 2)).unwrap();
        node.handle(0, Input::StopTrigger { last_event: Some(6) });
        let out = to_bu1(std::iter::from_fn(|| node.poll_output()).collect());
        let excluded_from = 7; // seen through 6, margin 0: the next block's start
        let given_in_2 = u64::from(excluded_from > 7);
        assert_eq!(
            out,
            vec![
                Message::EndOfLumi { lumi_section: 2, events: given_in_2 },
                Message::Drain { last_event: Some(6) },
                Message::EndOfRun { last_lumi_section: 2, lumi_sections: 2 },
            ]
        );
    }
}
