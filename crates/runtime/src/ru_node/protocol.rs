//! The protocol core an RU node drives: a plain RU, the EVM's node, or an ingest-only RU, behind
//! one trait so that one loop serves all three.

use super::*;

/// The protocol core an RU node drives: a plain RU, or the EVM's node.
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
    /// The EVM's node, which judges the trigger stream (none but on the EVM's node).
    fn node(&self) -> Option<&EvmNode> {
        None
    }
    /// The EVM's node, to tell it of the trigger stream's end.
    fn node_mut(&mut self) -> Option<&mut EvmNode> {
        None
    }
    /// The EVM, on the EVM's node.
    fn evm(&self) -> Option<&Evm> {
        self.node().map(|n| &n.evm)
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
    fn node(&self) -> Option<&EvmNode> {
        Some(self)
    }
    fn node_mut(&mut self) -> Option<&mut EvmNode> {
        Some(self)
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

/// Whether the trigger is off: the EVM's node stopped it (run control, the trigger stream's clean
/// end, or its break). Never on a plain RU.
pub(super) fn trigger_off(core: &dyn RuCore) -> bool {
    core.node().is_some_and(EvmNode::trigger_stopped)
}
