//! The cost of the event-building protocols inside the cores alone (no I/O), for 1×1, 4×4 and
//! 8×8 systems: pull, and push for comparison ([`PUSH`]: blocks of 64 events per destination).
//! The first part of `tessera bench protocols` ([`crate::protocols`]), which compares the two
//! protocols on sockets after it (it was `tessera bench protocol` on its own).
//!
//! The ideal driver of `tessera_sim::ideal` hands every unit its inputs in order: each event's
//! fragments to the RUs, messages through one queue with no delay, files written and published
//! at once. The figure is
//! CPU time per event and per fragment, and control messages (everything but data) per event.
//! Baseline, in the same run: handing the same fragment descriptors to a vector and clearing it,
//! the least a unit can do with a fragment.

use crate::timing::{Budget, time_per_call};
use std::hint::black_box;
use std::time::Instant;
use tessera_evb::msg::{BufferRef, FragmentRef, TriggerInfo};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::tcds::TCDS_FED_ID;
use tessera_sim::ideal::{IdealSystem, NoEffects};
use tessera_sim::scenario::{PushMode, Topology};

/// The push protocol as measured: blocks of 64 events to one BU, the BUs' ageing as the
/// simulator's (it never acts here: every part comes).
pub const PUSH: PushMode =
    PushMode { block_events: 64, age_events: 2048, age_ns: 5_000_000, bu_high_water_percent: 80 };

/// Data FEDs per RU in every topology.
const FEDS_PER_RU: u16 = 8;
/// Events per measured run.
const EVENTS: u64 = 20_000;

/// One topology's figures.
#[derive(Debug, Clone)]
pub struct Cost {
    /// RUs × BUs.
    pub topology: (u16, u16),
    /// `pull` or `push`.
    pub protocol: &'static str,
    /// Fragments per event (data FEDs and the trigger).
    pub fragments_per_event: u64,
    /// CPU nanoseconds per event.
    pub ns_per_event: f64,
    /// CPU nanoseconds per fragment.
    pub ns_per_fragment: f64,
    /// Control messages per event.
    pub control_per_event: f64,
    /// Data messages per event.
    pub data_per_event: f64,
    /// Baseline: nanoseconds per fragment to hand a descriptor to a vector.
    pub baseline_ns_per_fragment: f64,
}

/// Measures one topology, under push when `push` is given.
pub fn measure(n_ru: u16, n_bu: u16, push: Option<PushMode>, budget: Budget) -> Cost {
    let mut best = f64::MAX;
    let mut counts = (0, 0, 0);
    let topology = Topology { n_ru, feds_per_ru: FEDS_PER_RU, n_bu };
    for _ in 0..budget.samples.max(1) {
        let mut system = IdealSystem::with_protocol(topology, 1, NoEffects, push);
        let start = Instant::now();
        let c = system.run(EVENTS, |_, fed, event| FragmentRef {
            fed,
            lv1: (event as u32) & LV1_MASK,
            bytes: 2048,
            corrupt: false,
            buffer: BufferRef { offset: event as u32, len: 2048, ..BufferRef::default() },
            trigger: (fed == TCDS_FED_ID).then_some(TriggerInfo { lumi_section: 1, orbit: event, bx: 1 }),
        });
        best = best.min(start.elapsed().as_secs_f64());
        counts = (c.fragments, c.control, c.data);
    }
    let (fragments, control, data) = counts;
    let descriptors: Vec<FragmentRef> = (0..1024)
        .map(|i| FragmentRef {
            fed: 0,
            lv1: i,
            bytes: 2048,
            corrupt: false,
            buffer: BufferRef { offset: i, len: 2048, ..BufferRef::default() },
            trigger: None,
        })
        .collect();
    let mut sink = Vec::with_capacity(1024);
    let baseline = time_per_call(budget, || {
        sink.extend(black_box(&descriptors).iter().copied());
        black_box(&sink);
        sink.clear();
    });
    Cost {
        topology: (n_ru, n_bu),
        protocol: if push.is_some() { "push" } else { "pull" },
        fragments_per_event: fragments / EVENTS,
        ns_per_event: best * 1e9 / EVENTS as f64,
        ns_per_fragment: best * 1e9 / fragments as f64,
        control_per_event: control as f64 / EVENTS as f64,
        data_per_event: data as f64 / EVENTS as f64,
        baseline_ns_per_fragment: baseline.as_secs_f64() * 1e9 / 1024.0,
    }
}

/// Runs 1×1, 4×4 and 8×8, each under pull then push.
pub fn run(budget: Budget) -> Vec<Cost> {
    [(1, 1), (4, 4), (8, 8)]
        .into_iter()
        .flat_map(|(r, b)| [measure(r, b, None, budget), measure(r, b, Some(PUSH), budget)])
        .collect()
}

/// The figures as a table, with the targets met or missed.
pub fn report(costs: &[Cost]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:<8} {:>10} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "RUxBU", "protocol", "frag/event", "ns/event", "ns/fragment", "÷ baseline", "ctrl/event", "data/event"
    );
    for c in costs {
        let _ = writeln!(
            out,
            "{:<8} {:<8} {:>10} {:>10.0} {:>12.1} {:>12.1} {:>10.3} {:>12.3}",
            format!("{}x{}", c.topology.0, c.topology.1),
            c.protocol,
            c.fragments_per_event,
            c.ns_per_event,
            c.ns_per_fragment,
            c.ns_per_fragment / c.baseline_ns_per_fragment,
            c.control_per_event,
            c.data_per_event
        );
    }
    let baseline = costs.first().map_or(f64::NAN, |c| c.baseline_ns_per_fragment);
    let _ = writeln!(out, "baseline: {baseline:.2} ns per fragment descriptor handed to a vector");
    let pull = || costs.iter().filter(|c| c.protocol == "pull");
    for p in costs.iter().filter(|c| c.protocol == "push") {
        if let Some(q) = pull().find(|q| q.topology == p.topology) {
            let _ = writeln!(
                out,
                "push/pull, {}x{}: {:.2} of pull's CPU per fragment, {:.3} control messages per event against {:.3}",
                p.topology.0,
                p.topology.1,
                p.ns_per_fragment / q.ns_per_fragment,
                p.control_per_event,
                q.control_per_event
            );
        }
    }
    let _ = writeln!(out, "\ntargets (issue #3, pull, default batch sizes):");
    for t in targets(costs) {
        let _ = writeln!(out, "  {}: {}, {}", t.name, t.figure, t.verdict());
    }
    out
}

/// The targets of issue #3, of pull at the default batch sizes.
pub fn targets(costs: &[Cost]) -> Vec<crate::Target> {
    let pull = || costs.iter().filter(|c| c.protocol == "pull");
    let worst_ns = pull().map(|c| c.ns_per_fragment).fold(0.0, f64::max);
    let worst_ctrl = pull().map(|c| c.control_per_event).fold(0.0, f64::max);
    vec![
        crate::Target {
            name: "protocol cores, pull: <= 50 ns per fragment".into(),
            figure: format!("worst {worst_ns:.1} ns"),
            baseline: "a fixed bound (a fragment descriptor handed to a vector beside it)".into(),
            met: worst_ns <= 50.0,
        },
        crate::Target {
            name: "protocol cores, pull: <= 0.1 control messages per event".into(),
            figure: format!("worst {worst_ctrl:.3}"),
            baseline: "a fixed bound".into(),
            met: worst_ctrl <= 0.1,
        },
    ]
}
