//! `tessera bench protocol`: the cost of the pull protocol inside the cores alone (no I/O), for
//! 1×1, 4×4 and 8×8 systems.
//!
//! A tight driver hands every unit its inputs in order: each event's fragments to the RUs,
//! messages through one queue with no delay, files written and published at once. The figure is
//! CPU time per event and per fragment, and control messages (everything but data) per event.
//! Baseline, in the same run: handing the same fragment descriptors to a vector and clearing it,
//! the least a unit can do with a fragment.

use crate::timing::{Budget, time_per_call};
use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Instant;
use tessera_evb::msg::{FragmentRef, Message, TriggerInfo};
use tessera_evb::types::{FedId, Nanos, Peer};
use tessera_evb::unit::{Input, Output};
use tessera_evb::{Bu, BuConfig, EvmConfig, EvmNode, Ru, RuConfig};
use tessera_formats::fed::LV1_MASK;
use tessera_formats::tcds::TCDS_FED_ID;

/// Data FEDs per RU in every topology.
const FEDS_PER_RU: u16 = 8;
/// Events per measured run.
const EVENTS: u64 = 20_000;

/// One topology's figures.
#[derive(Debug, Clone)]
pub struct Cost {
    /// RUs × BUs.
    pub topology: (u16, u16),
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

struct System {
    evm: EvmNode,
    rus: Vec<Ru>,
    bus: Vec<Bu>,
    queue: VecDeque<(Peer, Peer, Message)>,
    inputs: VecDeque<(Peer, Input)>,
    control: u64,
    data: u64,
}

impl System {
    fn new(n_ru: u16, n_bu: u16) -> Self {
        let feds = |r: u16| {
            let mut f: Vec<FedId> = (0..FEDS_PER_RU).map(|i| r * FEDS_PER_RU + i).collect();
            if r == 0 {
                f.insert(0, TCDS_FED_ID);
            }
            f
        };
        System {
            evm: EvmNode::new(EvmConfig::new(n_ru, n_bu), RuConfig::new(0, feds(0))),
            rus: (1..n_ru).map(|r| Ru::new(RuConfig::new(r, feds(r)))).collect(),
            bus: (0..n_bu).map(|b| Bu::new(BuConfig::new(b, n_ru), 1, Vec::new(), Default::default())).collect(),
            queue: VecDeque::new(),
            inputs: VecDeque::new(),
            control: 0,
            data: 0,
        }
    }

    fn outputs(&mut self, node: Peer) {
        loop {
            let out = match node {
                Peer::Evm | Peer::Ru(0) => self.evm.poll_output(),
                Peer::Ru(r) => self.rus[usize::from(r) - 1].poll_output(),
                Peer::Bu(b) => self.bus[usize::from(b)].poll_output(),
            };
            let Some(out) = out else { return };
            match out {
                Output::Send { to, msg } => {
                    if msg.is_control() {
                        self.control += 1;
                    } else {
                        self.data += 1;
                    }
                    self.queue.push_back((node, to, msg));
                }
                Output::WriteFile { file, .. } => self.inputs.push_back((node, Input::FileWritten(file))),
                Output::PublishFile(file) => self.inputs.push_back((node, Input::FilePublished(file))),
                _ => {}
            }
        }
    }

    fn feed(&mut self, now: Nanos, node: Peer, input: Input) {
        match node {
            Peer::Evm | Peer::Ru(0) => self.evm.handle(now, input),
            Peer::Ru(r) => self.rus[usize::from(r) - 1].handle(now, input),
            Peer::Bu(b) => self.bus[usize::from(b)].handle(now, input),
        }
        self.outputs(node);
    }

    fn pump(&mut self, now: Nanos) {
        loop {
            if let Some((from, to, msg)) = self.queue.pop_front() {
                self.feed(now, to, Input::Message { from, msg });
            } else if let Some((node, input)) = self.inputs.pop_front() {
                self.feed(now, node, input);
            } else {
                return;
            }
        }
    }

    fn tick_all(&mut self, now: Nanos) {
        self.feed(now, Peer::Evm, Input::Tick);
        for r in 1..=self.rus.len() {
            self.feed(now, Peer::Ru(r as u16), Input::Tick);
        }
        for b in 0..self.bus.len() {
            self.feed(now, Peer::Bu(b as u16), Input::Tick);
        }
        self.pump(now);
    }

    /// Runs `events` events through the system; returns the fragments handled.
    fn run(&mut self, events: u64) -> u64 {
        for b in 0..self.bus.len() {
            self.outputs(Peer::Bu(b as u16));
        }
        self.pump(0);
        let mut fragments = 0;
        let mut now = 0;
        for event in 1..=events {
            now = now.max(event * 1_000);
            let lv1 = (event as u32) & LV1_MASK;
            for r in 0..=self.rus.len() {
                let n_feds = if r == 0 { FEDS_PER_RU + 1 } else { FEDS_PER_RU } as usize;
                for f in 0..n_feds {
                    let trigger = (r == 0 && f == 0).then_some(TriggerInfo { lumi_section: 1, orbit: event, bx: 1 });
                    let fragment =
                        FragmentRef { fed: f as u16, lv1, bytes: 2048, corrupt: false, buffer: fragments, trigger };
                    loop {
                        let accepted = if r == 0 {
                            self.evm.offer_fragment(now, f, fragment).is_ok()
                        } else {
                            self.rus[r - 1].offer_fragment(now, f, fragment).is_ok()
                        };
                        self.outputs(if r == 0 { Peer::Evm } else { Peer::Ru(r as u16) });
                        if accepted {
                            break;
                        }
                        // A full buffer waits for commits, which wait for time-outs.
                        now += 100_000;
                        self.tick_all(now);
                    }
                    fragments += 1;
                }
            }
            self.pump(now);
        }
        self.feed(now, Peer::Evm, Input::StopTrigger);
        for _ in 0..100 {
            now += 2_000_000;
            self.tick_all(now);
            if self.evm.evm.drained() {
                break;
            }
        }
        assert!(self.evm.evm.drained(), "the benchmark's system did not drain");
        fragments
    }
}

/// Measures one topology.
pub fn measure(n_ru: u16, n_bu: u16, budget: Budget) -> Cost {
    let mut best = f64::MAX;
    let mut counts = (0, 0, 0);
    for _ in 0..budget.samples.max(1) {
        let mut system = System::new(n_ru, n_bu);
        let start = Instant::now();
        let fragments = system.run(EVENTS);
        best = best.min(start.elapsed().as_secs_f64());
        counts = (fragments, system.control, system.data);
    }
    let (fragments, control, data) = counts;
    let descriptors: Vec<FragmentRef> = (0..1024)
        .map(|i| FragmentRef { fed: 0, lv1: i, bytes: 2048, corrupt: false, buffer: u64::from(i), trigger: None })
        .collect();
    let mut sink = Vec::with_capacity(1024);
    let baseline = time_per_call(budget, || {
        sink.extend(black_box(&descriptors).iter().copied());
        black_box(&sink);
        sink.clear();
    });
    Cost {
        topology: (n_ru, n_bu),
        fragments_per_event: fragments / EVENTS,
        ns_per_event: best * 1e9 / EVENTS as f64,
        ns_per_fragment: best * 1e9 / fragments as f64,
        control_per_event: control as f64 / EVENTS as f64,
        data_per_event: data as f64 / EVENTS as f64,
        baseline_ns_per_fragment: baseline.as_secs_f64() * 1e9 / 1024.0,
    }
}

/// Runs 1×1, 4×4 and 8×8.
pub fn run(budget: Budget) -> Vec<Cost> {
    [(1, 1), (4, 4), (8, 8)].into_iter().map(|(r, b)| measure(r, b, budget)).collect()
}

/// The figures as a table, with the targets met or missed.
pub fn report(costs: &[Cost]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>10} {:>12} {:>12} {:>10} {:>12}",
        "RUxBU", "frag/event", "ns/event", "ns/fragment", "÷ baseline", "ctrl/event", "data/event"
    );
    for c in costs {
        let _ = writeln!(
            out,
            "{:<8} {:>10} {:>10.0} {:>12.1} {:>12.1} {:>10.3} {:>12.3}",
            format!("{}x{}", c.topology.0, c.topology.1),
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
    let worst_ns = costs.iter().map(|c| c.ns_per_fragment).fold(0.0, f64::max);
    let worst_ctrl = costs.iter().map(|c| c.control_per_event).fold(0.0, f64::max);
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    let _ = writeln!(out, "\ntargets (issue #3, default batch sizes):");
    let _ = writeln!(out, "  <= 50 ns per fragment: worst {worst_ns:.1} ns, {}", verdict(worst_ns <= 50.0));
    let _ = writeln!(out, "  <= 0.1 control messages per event: worst {worst_ctrl:.3}, {}", verdict(worst_ctrl <= 0.1));
    out
}
