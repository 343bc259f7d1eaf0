//! The run's start barrier, kept by RU 0's node under either protocol (the EVM's under pull,
//! [`PushNode`](crate::push::PushNode) under push): the trigger is enabled only once every
//! configured stream of every RU has connected and named its FED. Until then front ends may
//! connect in any order; what the connected ones send waits in their RUs (and, once an RU's
//! buffers are full, in the front ends: that is back-pressure), and the trigger fragments RU 0
//! takes are kept aside, to make their events at the start. A run whose streams never all come
//! is failed by its RUs, each naming the FEDs it never saw, before any event was made.

use crate::types::{EventNumber, Nanos, RuId};
use std::collections::VecDeque;

/// The start barrier of one run.
#[derive(Debug, Clone)]
pub struct StartBarrier {
    /// Per RU, whether it said that every stream of its is connected (RU 0's own included).
    ready: Vec<bool>,
    /// When every RU was ready: the run started.
    started_at: Option<Nanos>,
    /// Triggers RU 0 took before the start, oldest first, with their lumi sections: their events
    /// are made at the start. Bounded by RU 0's buffer, which holds their fragments.
    deferred: VecDeque<(EventNumber, u32)>,
}

impl StartBarrier {
    /// A barrier for a run of `n_ru` RUs, none ready yet.
    pub fn new(n_ru: u16) -> Self {
        StartBarrier { ready: vec![false; usize::from(n_ru)], started_at: None, deferred: VecDeque::new() }
    }

    /// RU `ru` said that every stream of its is connected. True when this starts the run; an RU
    /// out of range or said twice changes nothing.
    pub fn ready(&mut self, ru: RuId, now: Nanos) -> bool {
        if let Some(r) = self.ready.get_mut(usize::from(ru)) {
            *r = true;
        }
        if self.started_at.is_none() && self.ready.iter().all(|&r| r) {
            self.started_at = Some(now);
            return true;
        }
        false
    }

    /// Whether the run has started.
    pub fn started(&self) -> bool {
        self.started_at.is_some()
    }

    /// When the run started, if it has.
    pub fn started_at(&self) -> Option<Nanos> {
        self.started_at
    }

    /// The RUs not yet ready, in order.
    pub fn waiting_for(&self) -> Vec<RuId> {
        (0..self.ready.len()).filter(|&r| !self.ready[r]).map(|r| r as RuId).collect()
    }

    /// Keeps a trigger RU 0 took before the start.
    pub fn defer(&mut self, event: EventNumber, lumi_section: u32) {
        debug_assert!(!self.started(), "after the start, triggers make their events at once");
        self.deferred.push_back((event, lumi_section));
    }

    /// Triggers kept aside so far.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// The last trigger kept aside, if any.
    pub fn last_deferred(&self) -> Option<EventNumber> {
        self.deferred.back().map(|&(e, _)| e)
    }

    /// The triggers kept aside, oldest first, to make their events now.
    pub fn take_deferred(&mut self) -> VecDeque<(EventNumber, u32)> {
        std::mem::take(&mut self.deferred)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_starts_once_every_ru_is_ready_in_any_order_and_only_once() {
        let mut b = StartBarrier::new(3);
        assert_eq!(b.waiting_for(), vec![0, 1, 2]);
        b.defer(1, 1);
        b.defer(2, 1);
        assert!(!b.ready(2, 10));
        assert!(!b.ready(2, 11), "said twice");
        assert!(!b.ready(7, 12), "no RU 7");
        assert!(!b.ready(0, 13));
        assert_eq!((b.waiting_for(), b.deferred(), b.last_deferred()), (vec![1], 2, Some(2)));
        assert!(b.ready(1, 14));
        assert_eq!(b.started_at(), Some(14));
        assert!(!b.ready(1, 15), "started once");
        assert_eq!(b.take_deferred(), VecDeque::from([(1, 1), (2, 1)]));
        assert_eq!(b.deferred(), 0);
    }
}
