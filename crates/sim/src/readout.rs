//! The readout side of a system, under either protocol: under pull the EVM's node (RU 0 with the
//! event manager) and the other RUs; under push RU 0's push node and the other push RUs. The
//! simulator and the ideal driver reach the units through these methods, whichever protocol
//! runs.

use tessera_evb::invariant::InvariantViolation;
use tessera_evb::msg::FragmentRef;
use tessera_evb::push::{Destinations, PushNodeConfig};
use tessera_evb::push::{PushNode, PushRu};
use tessera_evb::ru::{BackPressure, StreamChange};
use tessera_evb::types::{EventNumber, Nanos, Peer};
use tessera_evb::unit::{Input, RuOutput, TriggerBreak};
use tessera_evb::{EvmConfig, EvmNode, Ru, RuConfig};

/// RU 0's node and the other RUs.
pub(crate) enum Readout {
    /// The pull protocol.
    Pull {
        /// RU 0 with the EVM.
        evm: Box<EvmNode>,
        /// RUs 1...
        rus: Vec<Ru>,
    },
    /// The push protocol.
    Push {
        /// RU 0 with the trigger.
        node: Box<PushNode>,
        /// RUs 1...
        rus: Vec<PushRu>,
    },
}

impl Readout {
    /// Pull: the EVM's node over `rus[0]`, and the other RUs.
    pub(crate) fn pull(evm: EvmConfig, rus: &[RuConfig]) -> Self {
        let node = EvmNode::new(evm, rus[0].clone());
        Readout::Pull { evm: Box::new(node), rus: rus[1..].iter().map(|c| Ru::new(c.clone())).collect() }
    }

    /// Push: RU 0's node as `node` says, and the other RUs over the same destinations, each
    /// throttling at `node`'s high-water mark.
    pub(crate) fn push(node: PushNodeConfig, rus: &[RuConfig]) -> Self {
        let destinations: Destinations = node.destinations.clone();
        let high_water = node.high_water_events;
        let rus = rus[1..].iter().map(|c| PushRu::new(c.clone(), destinations.clone(), high_water)).collect();
        Readout::Push { node: Box::new(PushNode::new(node)), rus }
    }

    /// RU `r`'s readout unit.
    pub(crate) fn ru(&self, r: usize) -> &Ru {
        match self {
            Readout::Pull { evm, rus } => {
                if r == 0 {
                    &evm.ru
                } else {
                    &rus[r - 1]
                }
            }
            Readout::Push { node, rus } => {
                if r == 0 {
                    node.ru().ru()
                } else {
                    rus[r - 1].ru()
                }
            }
        }
    }

    /// RU `r`'s readout unit, for what the driver tells it of its streams.
    pub(crate) fn ru_mut(&mut self, r: usize) -> &mut Ru {
        match self {
            Readout::Pull { evm, rus } => {
                if r == 0 {
                    &mut evm.ru
                } else {
                    &mut rus[r - 1]
                }
            }
            Readout::Push { node, rus } => {
                if r == 0 {
                    node.ru_mut().ru_mut()
                } else {
                    rus[r - 1].ru_mut()
                }
            }
        }
    }

    /// RUs in the system.
    pub(crate) fn len(&self) -> usize {
        match self {
            Readout::Pull { rus, .. } => rus.len() + 1,
            Readout::Push { rus, .. } => rus.len() + 1,
        }
    }

    /// Offers RU `r` the next fragment of its FED at `fed`.
    pub(crate) fn offer(&mut self, now: Nanos, r: usize, fed: usize, f: FragmentRef) -> Result<(), BackPressure> {
        match self {
            Readout::Pull { evm, rus } if r == 0 => evm.offer_fragment(now, fed, f),
            Readout::Pull { rus, .. } => rus[r - 1].offer_fragment(now, fed, f),
            Readout::Push { node, .. } if r == 0 => node.offer_fragment(now, fed, f),
            Readout::Push { rus, .. } => rus[r - 1].offer_fragment(now, fed, f),
        }
    }

    /// RU `r`'s stream of its FED at `fed` changed (see [`tessera_evb::Ru::stream_changed`]);
    /// whether the FED's state changed.
    pub(crate) fn stream_changed(&mut self, now: Nanos, r: usize, fed: usize, change: StreamChange) -> bool {
        match self {
            Readout::Pull { evm, .. } if r == 0 => evm.stream_changed(now, fed, change),
            Readout::Pull { rus, .. } => rus[r - 1].stream_changed(now, fed, change),
            Readout::Push { node, .. } if r == 0 => node.stream_changed(now, fed, change),
            Readout::Push { rus, .. } => rus[r - 1].stream_changed(now, fed, change),
        }
    }

    /// Whether the run has started: every stream of every RU connected.
    pub(crate) fn started(&self) -> bool {
        match self {
            Readout::Pull { evm, .. } => evm.started(),
            Readout::Push { node, .. } => node.started(),
        }
    }

    /// Gives `input` to RU node `node` (`Peer::Evm` is RU 0's node).
    pub(crate) fn handle(&mut self, now: Nanos, node: Peer, input: Input) {
        match (self, node) {
            (Readout::Pull { evm, .. }, Peer::Evm | Peer::Ru(0)) => evm.handle(now, input),
            (Readout::Pull { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].handle(now, input),
            (Readout::Push { node, .. }, Peer::Evm | Peer::Ru(0)) => node.handle(now, input),
            (Readout::Push { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].handle(now, input),
            (_, Peer::Bu(_)) => {}
        }
    }

    /// The next output of RU node `node`.
    pub(crate) fn poll(&mut self, node: Peer) -> Option<RuOutput> {
        match (self, node) {
            (Readout::Pull { evm, .. }, Peer::Evm | Peer::Ru(0)) => evm.poll_output(),
            (Readout::Pull { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].poll_output(),
            (Readout::Push { node, .. }, Peer::Evm | Peer::Ru(0)) => node.poll_output(),
            (Readout::Push { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].poll_output(),
            (_, Peer::Bu(_)) => None,
        }
    }

    /// When RU node `node` has work on a tick.
    pub(crate) fn next_timeout(&self, node: Peer) -> Option<Nanos> {
        match (self, node) {
            (Readout::Pull { evm, .. }, Peer::Evm | Peer::Ru(0)) => evm.next_timeout(),
            (Readout::Pull { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].next_timeout(),
            (Readout::Push { node, .. }, Peer::Evm | Peer::Ru(0)) => node.next_timeout(),
            (Readout::Push { rus, .. }, Peer::Ru(r)) => rus[usize::from(r) - 1].next_timeout(),
            (_, Peer::Bu(_)) => None,
        }
    }

    /// The trigger stream ended at a fragment boundary.
    pub(crate) fn trigger_stream_ended(&mut self, now: Nanos) {
        match self {
            Readout::Pull { evm, .. } => evm.trigger_stream_ended(now, None),
            // Push scenarios end their trigger by run control's stop only.
            Readout::Push { .. } => {}
        }
    }

    /// How the trigger stream broke, if it did.
    pub(crate) fn trigger_break(&self) -> Option<&TriggerBreak> {
        match self {
            Readout::Pull { evm, .. } => evm.trigger_break(),
            Readout::Push { .. } => None,
        }
    }

    /// The last event triggered.
    pub(crate) fn last_triggered(&self) -> Option<EventNumber> {
        match self {
            Readout::Pull { evm, .. } => evm.evm.last_triggered(),
            Readout::Push { node, .. } => node.last_triggered(),
        }
    }

    /// Whether RU 0's node has drained the run.
    pub(crate) fn drained(&self) -> bool {
        match self {
            Readout::Pull { evm, .. } => evm.evm.drained(),
            Readout::Push { node, .. } => node.drained(),
        }
    }

    /// Whether some RU is past its high-water mark (push's throttle).
    pub(crate) fn throttled(&self) -> bool {
        match self {
            Readout::Pull { .. } => false,
            Readout::Push { node, rus } => node.throttled() || rus.iter().any(PushRu::throttled),
        }
    }

    /// The conservation laws of every unit, the EVM's included: the first broken of each.
    pub(crate) fn check_invariants(&self) -> Vec<InvariantViolation> {
        let evm = match self {
            Readout::Pull { evm, .. } => evm.evm.check_invariants().err(),
            Readout::Push { .. } => None,
        };
        evm.into_iter().chain((0..self.len()).filter_map(|r| self.ru(r).check_invariants().err())).collect()
    }

    /// Events the EVM tracks (none under push), and what it is waiting for.
    pub(crate) fn evm_state(&self) -> (usize, String) {
        match self {
            Readout::Pull { evm, .. } => (evm.evm.events_in_flight(), evm.evm.pending()),
            Readout::Push { node, .. } => (0, format!("push; drained {}", node.drained())),
        }
    }
}
