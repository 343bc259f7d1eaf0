//! The EVM's node: the event manager and the readout unit next to it (RU 0, which reads the
//! trigger), wired together without a network. Assignments to RU 0 are handed over in memory,
//! and commits for a BU ride on RU 0's next data message to it.

use crate::evm::{Evm, EvmConfig};
use crate::msg::{FragmentRef, Message};
use crate::ru::{BackPressure, Ru, RuConfig};
use crate::types::{Nanos, Peer};
use crate::unit::{Input, Output};
use std::collections::VecDeque;

/// The EVM and RU 0 as one unit.
#[derive(Debug)]
pub struct EvmNode {
    /// The event manager.
    pub evm: Evm,
    /// RU 0.
    pub ru: Ru,
    out: VecDeque<Output>,
}

impl EvmNode {
    /// The EVM's node at the start of a run.
    pub fn new(evm: EvmConfig, ru: RuConfig) -> Self {
        EvmNode { evm: Evm::new(evm), ru: Ru::new(ru), out: VecDeque::new() }
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
                    Output::Triggered { event, lumi_section } => self.evm.triggered(now, event, lumi_section),
                    Output::Send { to: Peer::Bu(bu), msg: Message::Data { ru, epoch, parts, mut commits } } => {
                        commits.extend(self.evm.take_commits(bu));
                        self.out.push_back(Output::Send {
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
                    Output::Send { to: Peer::Ru(Evm::LOCAL_RU), msg } => {
                        self.ru.handle(now, Input::Message { from: Peer::Evm, msg })
                    }
                    other => self.out.push_back(other),
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// The earliest time at which a tick has work.
    pub fn next_timeout(&self) -> Option<Nanos> {
        [self.evm.next_timeout(), self.ru.next_timeout()].into_iter().flatten().min()
    }

    /// The next output, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}
