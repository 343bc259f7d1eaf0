//! The system a scenario describes: its units' configurations, its trigger times, and the faults
//! it asks for, each drawn from the seed.

use super::{BuSlot, Ev, FedSource, Readout, Tally, World};

/// Push: events a data message carries at most, and what a BU must have room for to read one.
const PUSH_MESSAGE_EVENTS: u32 = 32;
/// Strangers that connect to each RU in scenarios of late connects (half of them name a FED of no
/// RU, half nothing), and the places beyond its streams an RU keeps for such connections.
pub(super) const STRANGERS_PER_RU: usize = 2;
/// The FED a stranger names: one of no RU.
const STRANGER_FED_ID: u16 = 4000;
use crate::rng::Rng;
use crate::scenario::{Bug, MASK_AFTER_NS, Scenario};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use tessera_evb::bu::BuBug;
use tessera_evb::evm::EvmBug;
use tessera_evb::intake::Intake;
use tessera_evb::push::{PushBu, PushNodeBug, PushNodeConfig};
use tessera_evb::ru::RuBug;
use tessera_evb::types::{FedId, Nanos};
use tessera_evb::{BuConfig, EvmConfig, RuConfig};
use tessera_formats::orbit::MAX_EVENTS;
use tessera_formats::tcds::TCDS_FED_ID;

impl World {
    /// A system for `sc`, with every random choice drawn from `seed`.
    pub fn new(sc: &Scenario, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let t = sc.topology;
        let ru_cfgs: Vec<RuConfig> = (0..t.n_ru)
            .map(|r| {
                let mut feds: Vec<FedId> = (0..t.feds_per_ru).map(|i| r * t.feds_per_ru + i).collect();
                if r == 0 {
                    feds.insert(0, TCDS_FED_ID);
                }
                RuConfig {
                    first_event: sc.first_event,
                    max_events_buffered: sc.ru_window_events,
                    silent_fed_give_up_ns: match sc.bug {
                        Some(Bug::GiveUpSilentFeds) => Some(crate::scenario::GIVE_UP_NS),
                        _ => sc.give_up_ns,
                    },
                    // Data messages split by bytes too, sometimes below one super-fragment.
                    // Push BUs read a message only while its most events fit their bound.
                    max_parts_per_message: if sc.push.is_some() { PUSH_MESSAGE_EVENTS as usize } else { 256 },
                    max_data_bytes: match sc.orbit {
                        None => rng.between(1_000, 24_000),
                        // Orbit super-fragments of 0.1 to 4 MB, often alone above the bound.
                        Some(_) => rng.between(100_000, 4_000_000),
                    } as usize,
                    bug: (sc.bug == Some(Bug::ReleaseBeforeCommit)).then_some(RuBug::ReleaseBeforeCommit),
                    ..RuConfig::new(r, feds)
                }
            })
            .collect();
        let evm_cfg = EvmConfig {
            assign_batch_events: 32,
            assign_delay_ns: 500_000,
            bug: match sc.bug {
                Some(Bug::ForgetReassign) => Some(EvmBug::ForgetReassign),
                Some(Bug::StartBeforeStreams) => Some(EvmBug::StartBeforeStreams),
                _ => None,
            },
            ..EvmConfig::new(t.n_ru, t.n_bu)
        };
        // An orbit is ~70 times an event's bytes: BUs hold fewer and write fewer per file.
        let (in_flight, batch, per_file) = if sc.orbit.is_some() { (32, 8, 8) } else { (256, 32, 16) };
        let bu_cfgs: Vec<BuConfig> = (0..t.n_bu)
            .map(|b| BuConfig {
                max_events_in_flight: in_flight,
                request_batch_events: batch,
                max_events_per_file: per_file,
                file_timeout_ns: 20_000_000,
                store_bytes: sc.push.is_none().then_some(sc.bu_store_bytes).flatten(),
                push: sc.push.map(|p| PushBu {
                    age_events: p.age_events,
                    age_ns: p.age_ns,
                    message_events_max: PUSH_MESSAGE_EVENTS,
                    high_water_events: in_flight * p.bu_high_water_percent / 100,
                }),
                bug: (sc.bug == Some(Bug::CommitBeforeWritten)).then_some(BuBug::CommitBeforeWritten),
                ..BuConfig::new(b, t.n_ru)
            })
            .collect();
        let mut trigger_times = Vec::with_capacity(sc.events as usize);
        let mut at = 100_000;
        for _ in 0..sc.events {
            // Orbits come like clockwork; triggers at random.
            at += match sc.orbit {
                Some(_) => sc.trigger_interval_ns,
                None => rng.between(sc.trigger_interval_ns / 2, sc.trigger_interval_ns * 3 / 2),
            };
            trigger_times.push(at);
        }
        let orbit_events: Vec<u16> = match sc.orbit {
            Some(o) => (0..sc.events).map(|_| rng.poisson(o.mean_events).min(MAX_EVENTS.into()) as u16).collect(),
            None => Vec::new(),
        };
        let run_end = at;
        let mut sources: Vec<Vec<FedSource>> = ru_cfgs
            .iter()
            .map(|c| {
                c.feds
                    .iter()
                    .map(|&id| FedSource {
                        id,
                        next_event: sc.first_event,
                        stall: None,
                        skip: None,
                        slow: false,
                        sent_at: 0,
                        held: 0,
                        last_event: sc.first_event + sc.events - 1,
                        ended: false,
                        awaiting_trigger: false,
                        named: false,
                        gone_from: None,
                        partial_until: None,
                    })
                    .collect()
            })
            .collect();
        let mut tally = Tally::default();
        // FED faults never touch the trigger FED: without a trigger there is no event.
        let pick_fed = |rng: &mut Rng| loop {
            let r = rng.below(u64::from(t.n_ru)) as usize;
            let f = rng.below(sources[r].len() as u64) as usize;
            if sources[r][f].id != TCDS_FED_ID {
                break (r, f);
            }
        };
        let mut fed_faults = Vec::new();
        let mut longest_pause = 0;
        for _ in 0..sc.faults.stalled_feds {
            let (r, f) = pick_fed(&mut rng);
            let from = rng.between(run_end / 5, run_end / 2);
            let pause = rng.between(1_000_000, sc.pause_max_ns());
            // The trigger can be held only while it has triggers to give: up to the last one.
            longest_pause = longest_pause.max((from + pause).min(run_end).saturating_sub(from));
            fed_faults.push((r, f, Some((from, from + pause)), None));
        }
        // Streams that end, and FEDs that go silent to be masked: each at a time, silent from it.
        let mut ends = Vec::new();
        // A FED whose stream ends is not also masked: two different FEDs.
        let mut gone = BTreeSet::new();
        let mut pick_gone = |rng: &mut Rng| loop {
            let picked = pick_fed(rng);
            if gone.insert(picked) {
                break picked;
            }
        };
        for _ in 0..sc.faults.dead_feds {
            let (r, f) = pick_gone(&mut rng);
            let at = rng.between(run_end / 5, run_end / 2);
            fed_faults.push((r, f, Some((at, Nanos::MAX)), None));
            ends.push((at, Ev::EndStream { ru: r, fed: f }));
        }
        for _ in 0..sc.faults.masked_feds {
            let (r, f) = pick_gone(&mut rng);
            let at = rng.between(run_end / 5, run_end / 2);
            fed_faults.push((r, f, Some((at, Nanos::MAX)), None));
            ends.push((at + MASK_AFTER_NS, Ev::Mask { ru: r, fed: f }));
        }
        for _ in 0..sc.faults.sync_losses {
            let (r, f) = pick_fed(&mut rng);
            let skip = sc.first_event + rng.between(sc.events / 5, sc.events / 2);
            fed_faults.push((r, f, None, Some(skip)));
        }
        let slow: Vec<(usize, usize)> = (0..sc.faults.slow_feds).map(|_| pick_fed(&mut rng)).collect();
        // A short block drops one event, so only orbits with events can have one.
        let mut short_blocks = BTreeSet::new();
        for _ in 0..sc.faults.short_blocks {
            let (r, f) = pick_fed(&mut rng);
            tally.fed_faults += 1;
            for _ in 0..rng.between(3, 10) {
                let index = rng.below(sc.events);
                if orbit_events.get(index as usize).is_some_and(|&n| n > 0) {
                    short_blocks.insert((sources[r][f].id, sc.first_event + index));
                }
            }
        }
        for (r, f) in slow {
            sources[r][f].slow = true;
        }
        if sc.faults.trigger_stream_lost {
            sources[0][0].last_event = sc.first_event + rng.between(sc.events / 3, sc.events / 2);
            tally.fed_faults += 1;
        }
        for (r, f, stall, skip) in fed_faults {
            let s = &mut sources[r][f];
            s.stall = s.stall.or(stall);
            s.skip = s.skip.or(skip);
            s.gone_from = s.gone_from.or(skip);
            tally.fed_faults += 1;
        }
        let mut bus: Vec<BuSlot> = (0..t.n_bu)
            .map(|_| BuSlot {
                unit: None,
                incarnation: 1,
                slow: false,
                files: BTreeMap::new(),
                next_index: BTreeMap::new(),
                published_events: BTreeMap::new(),
                end_of_lumis: BTreeMap::new(),
                lost_in_records: 0,
                ended: false,
            })
            .collect();
        for _ in 0..sc.faults.slow_bus.min(t.n_bu) {
            let b = rng.below(u64::from(t.n_bu)) as usize;
            tally.slow_bus += u64::from(!bus[b].slow);
            bus[b].slow = true;
        }
        let readout = match sc.push {
            None => {
                let mut readout = Readout::pull(evm_cfg, &ru_cfgs);
                if let Readout::Pull { evm, .. } = &mut readout {
                    // The trigger stream may end cleanly after the run's events, and no sooner.
                    evm.limit_trigger(sc.events);
                }
                readout
            }
            Some(p) => Readout::push(
                PushNodeConfig {
                    ru: ru_cfgs[0].clone(),
                    n_ru: t.n_ru,
                    n_bu: t.n_bu,
                    destinations: p.destinations(sc.first_event, t.n_bu),
                    // An RU throttles at an eighth of its window (128 events, 1.3 ms of triggers
                    // here), well before a BU ages an event (5 ms): a slow FED holds the
                    // trigger, and its events stay whole, as they would under pull.
                    high_water_events: ru_cfgs[0].max_events_buffered / 8,
                    exclude_margin_events: 64,
                    window_events: None,
                    bug: (sc.bug == Some(Bug::ExcludeUntold)).then_some(PushNodeBug::ExcludeUntold),
                },
                &ru_cfgs,
            ),
        };
        let intakes = ru_cfgs.iter().map(|c| Intake::new(c.feds.clone(), STRANGERS_PER_RU)).collect();
        let mut world = World {
            intakes,
            all_named_at: None,
            longest_pause,
            check_every: (u64::from(t.n_ru) * u64::from(t.n_bu) / 16).max(1),
            readout,
            ru_cfgs,
            bus,
            bu_cfgs,
            sources,
            trigger_times,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            pending: HashMap::new(),
            last_delivery: HashMap::new(),
            tick_generation: HashMap::new(),
            buffers: BTreeMap::new(),
            next_buffer: 0,
            corrupt: BTreeSet::new(),
            orbit_events,
            short_blocks,
            published_orbits: BTreeMap::new(),
            published: BTreeMap::new(),
            stop_sent: false,
            last_progress: 0,
            push: Default::default(),
            violations: Vec::new(),
            tally,
            sc: sc.clone(),
        };
        if sc.push.is_some() {
            world.schedule(world.trigger_times[0], Ev::Trigger);
        }
        for b in 0..world.bus.len() {
            world.start_bu(b);
        }
        // Every stream connects, at once or (late connects) in a random order, strangers among
        // them; it offers its first fragment once it has named its FED.
        let delay_max = sc.faults.connect_delay_max_ns;
        for r in 0..world.sources.len() {
            for f in 0..world.sources[r].len() {
                let at = if delay_max > 0 { world.rng.below(delay_max) } else { 0 };
                world.schedule(at, Ev::Connect { ru: r, fed: Some(f), names: None });
            }
            if delay_max > 0 {
                for k in 0..STRANGERS_PER_RU {
                    let at = world.rng.below(delay_max);
                    let names = (k % 2 == 0).then_some(STRANGER_FED_ID);
                    world.schedule(at, Ev::Connect { ru: r, fed: None, names });
                }
            }
        }
        for (at, ev) in ends {
            world.schedule(at, ev);
        }
        for _ in 0..sc.faults.bu_crashes {
            let at = world.rng.between(run_end / 10, run_end);
            let bu = world.rng.below(u64::from(t.n_bu)) as usize;
            world.schedule(at, Ev::BuCrash { bu });
        }
        world.schedule(run_end + 1_000, Ev::StopTrigger);
        world
    }
}
