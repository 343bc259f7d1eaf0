//! The protocol core an RU node drives: a plain RU, the EVM's node, an ingest-only RU, or the
//! push protocol's RU and RU 0 node, behind one trait so that one loop serves them all. RU 0's
//! node under either protocol also reads the trigger and leads the run: that part is
//! [`Leader`].

use super::*;
use tessera_evb::evm::EvmCounters;
use tessera_evb::push::{PushNode, PushRu, PushRuCounters};
use tessera_evb::types::BuId;

/// The protocol core an RU node drives.
pub(super) trait RuCore: Send {
    /// See [`Ru::offer_fragment`].
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure>;
    /// See [`Ru::accepts`].
    fn accepts(&self, fed_index: usize) -> bool {
        self.ru().accepts(fed_index)
    }
    /// See [`Ru::handle`].
    fn handle(&mut self, now: Nanos, input: Input);
    /// See [`Ru::next_timeout`].
    fn next_timeout(&self) -> Option<Nanos>;
    /// See [`Ru::poll_output`].
    fn poll_output(&mut self) -> Option<RuOutput>;
    /// The RU.
    fn ru(&self) -> &Ru;
    /// The RU, to tell it of its streams ([`Ru::stream_alive`]).
    fn ru_mut(&mut self) -> &mut Ru;
    /// The FED at `fed_index`'s stream changed (see [`Ru::stream_changed`]); what it makes the
    /// core say is ready to poll. Whether the FED's state changed.
    fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        self.ru_mut().stream_changed(now, fed_index, change)
    }
    /// RU 0's node, which judges the trigger stream and leads the run (none but on RU 0).
    fn leader(&self) -> Option<&dyn Leader> {
        None
    }
    /// RU 0's node, to tell it of the trigger stream's end.
    fn leader_mut(&mut self) -> Option<&mut dyn Leader> {
        None
    }
    /// The core frees a fragment as soon as its super-fragment is sent (push): the loop
    /// releases its memory only once the frame that carries it is written.
    fn frees_on_send(&self) -> bool {
        false
    }
    /// Push: the counters beyond the RU's.
    fn push_counters(&self) -> Option<PushRuCounters> {
        None
    }
    /// Push: a FED stream waits for the slowest RU ([`PushRu::held_by_window`]).
    fn held_by_window(&self) -> bool {
        false
    }
    /// Push: the RU holds events past its high-water mark ([`PushRu::throttled`]).
    fn push_throttled(&self) -> bool {
        false
    }
}

/// What RU 0's node does beyond its RU: it reads the trigger and leads the run to its end (the
/// EVM under pull, the little push keeps of it under push).
pub(super) trait Leader {
    /// Whether the trigger is off: stopped by run control, ended cleanly, or broken.
    fn trigger_stopped(&self) -> bool;
    /// The trigger stream may close cleanly after `events` events.
    fn limit_trigger(&mut self, events: u64);
    /// The trigger stream ended (`broken`: why it could not be read on).
    fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>);
    /// The last event triggered.
    fn last_triggered(&self) -> Option<EventNumber>;
    /// Events triggered.
    fn triggered(&self) -> u64;
    /// Whether the run is drained: its end is told to every unit (pull: every event committed;
    /// push: the trigger's end told).
    fn drained(&self) -> bool;
    /// What keeps it from having drained, for a report on a stuck run.
    fn pending(&self) -> String;
    /// BUs lost during the run that it waits for to come back for their end of run.
    fn bus_lost(&self) -> Vec<BuId>;
    /// BUs in the run.
    fn n_bu(&self) -> u16;
    /// Whether the run has started: every stream of every RU is connected.
    fn started(&self) -> bool;
    /// The event manager's counters (pull only).
    fn evm_counters(&self) -> Option<EvmCounters>;
}

impl Leader for EvmNode {
    fn trigger_stopped(&self) -> bool {
        EvmNode::trigger_stopped(self)
    }
    fn limit_trigger(&mut self, events: u64) {
        EvmNode::limit_trigger(self, events)
    }
    fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>) {
        EvmNode::trigger_stream_ended(self, now, broken)
    }
    fn last_triggered(&self) -> Option<EventNumber> {
        self.evm.last_triggered()
    }
    fn triggered(&self) -> u64 {
        self.evm.counters().triggered
    }
    fn drained(&self) -> bool {
        self.evm.drained()
    }
    fn pending(&self) -> String {
        self.evm.pending()
    }
    fn bus_lost(&self) -> Vec<BuId> {
        self.evm.bus_lost()
    }
    fn n_bu(&self) -> u16 {
        self.evm.config().n_bu
    }
    fn started(&self) -> bool {
        EvmNode::started(self)
    }
    fn evm_counters(&self) -> Option<EvmCounters> {
        Some(self.evm.counters())
    }
}

impl Leader for PushNode {
    fn trigger_stopped(&self) -> bool {
        PushNode::trigger_stopped(self)
    }
    fn limit_trigger(&mut self, events: u64) {
        PushNode::limit_trigger(self, events)
    }
    fn trigger_stream_ended(&mut self, now: Nanos, broken: Option<String>) {
        PushNode::trigger_stream_ended(self, now, broken)
    }
    fn last_triggered(&self) -> Option<EventNumber> {
        PushNode::last_triggered(self)
    }
    fn triggered(&self) -> u64 {
        PushNode::triggered(self)
    }
    /// The drain is told: RU 0 may still be sending its last parts (its node's end waits for
    /// them).
    fn drained(&self) -> bool {
        PushNode::drained(self)
    }
    fn pending(&self) -> String {
        PushNode::pending(self)
    }
    /// A BU lost under push is excluded; it is waited for to come back and close its lumi
    /// sections.
    fn bus_lost(&self) -> Vec<BuId> {
        PushNode::bus_lost(self)
    }
    fn n_bu(&self) -> u16 {
        PushNode::n_bu(self)
    }
    fn started(&self) -> bool {
        PushNode::started(self)
    }
    fn evm_counters(&self) -> Option<EvmCounters> {
        None
    }
}

impl RuCore for Ru {
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        Ru::offer_fragment(self, now, fed_index, fragment)
    }
    fn handle(&mut self, now: Nanos, input: Input) {
        Ru::handle(self, now, input)
    }
    fn next_timeout(&self) -> Option<Nanos> {
        Ru::next_timeout(self)
    }
    fn poll_output(&mut self) -> Option<RuOutput> {
        Ru::poll_output(self)
    }
    fn ru(&self) -> &Ru {
        self
    }
    fn ru_mut(&mut self) -> &mut Ru {
        self
    }
}

impl RuCore for EvmNode {
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        EvmNode::offer_fragment(self, now, fed_index, fragment)
    }
    fn handle(&mut self, now: Nanos, input: Input) {
        EvmNode::handle(self, now, input)
    }
    fn next_timeout(&self) -> Option<Nanos> {
        EvmNode::next_timeout(self)
    }
    fn poll_output(&mut self) -> Option<RuOutput> {
        EvmNode::poll_output(self)
    }
    fn ru(&self) -> &Ru {
        &self.ru
    }
    fn ru_mut(&mut self) -> &mut Ru {
        &mut self.ru
    }
    fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        EvmNode::stream_changed(self, now, fed_index, change)
    }
    fn leader(&self) -> Option<&dyn Leader> {
        Some(self)
    }
    fn leader_mut(&mut self) -> Option<&mut dyn Leader> {
        Some(self)
    }
}

impl RuCore for PushRu {
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        PushRu::offer_fragment(self, now, fed_index, fragment)
    }
    fn handle(&mut self, now: Nanos, input: Input) {
        PushRu::handle(self, now, input)
    }
    fn next_timeout(&self) -> Option<Nanos> {
        PushRu::next_timeout(self)
    }
    fn poll_output(&mut self) -> Option<RuOutput> {
        PushRu::poll_output(self)
    }
    fn ru(&self) -> &Ru {
        PushRu::ru(self)
    }
    fn ru_mut(&mut self) -> &mut Ru {
        PushRu::ru_mut(self)
    }
    fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        PushRu::stream_changed(self, now, fed_index, change)
    }
    fn frees_on_send(&self) -> bool {
        true
    }
    fn push_counters(&self) -> Option<PushRuCounters> {
        Some(PushRu::push_counters(self))
    }
    fn accepts(&self, fed_index: usize) -> bool {
        PushRu::accepts(self, fed_index)
    }
    fn held_by_window(&self) -> bool {
        PushRu::held_by_window(self)
    }
    fn push_throttled(&self) -> bool {
        PushRu::throttled(self)
    }
}

impl RuCore for PushNode {
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        PushNode::offer_fragment(self, now, fed_index, fragment)
    }
    fn handle(&mut self, now: Nanos, input: Input) {
        PushNode::handle(self, now, input)
    }
    fn next_timeout(&self) -> Option<Nanos> {
        PushNode::next_timeout(self)
    }
    fn poll_output(&mut self) -> Option<RuOutput> {
        PushNode::poll_output(self)
    }
    fn ru(&self) -> &Ru {
        PushNode::ru(self).ru()
    }
    fn ru_mut(&mut self) -> &mut Ru {
        PushNode::ru_mut(self).ru_mut()
    }
    fn stream_changed(&mut self, now: Nanos, fed_index: usize, change: StreamChange) -> bool {
        PushNode::stream_changed(self, now, fed_index, change)
    }
    fn leader(&self) -> Option<&dyn Leader> {
        Some(self)
    }
    fn leader_mut(&mut self) -> Option<&mut dyn Leader> {
        Some(self)
    }
    fn frees_on_send(&self) -> bool {
        true
    }
    fn push_counters(&self) -> Option<PushRuCounters> {
        Some(PushNode::ru(self).push_counters())
    }
    fn accepts(&self, fed_index: usize) -> bool {
        PushNode::ru(self).accepts(fed_index)
    }
    fn held_by_window(&self) -> bool {
        PushNode::ru(self).held_by_window()
    }
    fn push_throttled(&self) -> bool {
        PushNode::ru(self).throttled()
    }
}

impl RuCore for IngestRu {
    fn offer_fragment(&mut self, now: Nanos, fed_index: usize, fragment: FragmentRef) -> Result<(), BackPressure> {
        IngestRu::offer_fragment(self, now, fed_index, fragment)
    }
    fn handle(&mut self, now: Nanos, input: Input) {
        IngestRu::handle(self, now, input)
    }
    fn next_timeout(&self) -> Option<Nanos> {
        IngestRu::next_timeout(self)
    }
    fn poll_output(&mut self) -> Option<RuOutput> {
        IngestRu::poll_output(self)
    }
    fn ru(&self) -> &Ru {
        IngestRu::ru(self)
    }
    fn ru_mut(&mut self) -> &mut Ru {
        IngestRu::ru_mut(self)
    }
}

/// Whether the trigger is off: RU 0's node stopped it (run control, the trigger stream's clean
/// end, or its break). Never on another RU.
pub(super) fn trigger_off(core: &dyn RuCore) -> bool {
    core.leader().is_some_and(|l| l.trigger_stopped())
}
