//! The run's start barrier, kept by RU 0's node under either protocol (the EVM's under pull,
//! [`PushNode`](crate::push::PushNode) under push): the trigger is enabled only once every
//! configured stream of every RU has connected and named its FED. Until then front ends may
//! connect in any order; what the connected ones send waits in their RUs (and, once an RU's
//! buffers are full, in the front ends: that is back-pressure), and the trigger fragments RU 0
//! takes are kept aside, to make their events at the start. A run whose streams never all come
//! is failed by its RUs, each naming the FEDs it never saw, before any event was made.

use crate::types::{EventNumber, RuId};
use std::collections::VecDeque;

/// The start barrier of one run.
#[derive(Debug, Clone)]
pub struct StartBarrier {
    /// Per RU, whether it said that every stream of its is connected (RU 0's own included).
    ready: Vec<bool>,
    /// Every RU was ready: the run started.
    started: bool,
    /// Triggers RU 0 took before the start, oldest first, with their lumi sections: their events
    /// are made at the start. Bounded by RU 0's buffer, which holds their fragments.
    deferred: VecDeque<(EventNumber, u32)>,
    /// Run control stopped the run before it started, with no event issued: it never starts,
    /// and no trigger makes an event.
    abandoned: bool,
}

/// An RU that the run does not have said that its streams are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("streams connected said for RU {ru}, which a run of {n_ru} RUs does not have")]
pub struct UnknownRu {
    /// The RU it named.
    pub ru: RuId,
    /// The run's RUs.
    pub n_ru: usize,
}

impl StartBarrier {
    /// A barrier for a run of `n_ru` RUs, none ready yet.
    pub fn new(n_ru: u16) -> Self {
        StartBarrier {
            ready: vec![false; usize::from(n_ru)],
            started: false,
            deferred: VecDeque::new(),
            abandoned: false,
        }
    }

    /// RU `ru` said that every stream of its is connected. When this starts the run, the
    /// triggers kept aside, oldest first, to make their events now; said twice, or after the run
    /// was abandoned, it changes nothing.
    pub fn ready(&mut self, ru: RuId) -> Result<Option<VecDeque<(EventNumber, u32)>>, UnknownRu> {
        let n_ru = self.ready.len();
        *self.ready.get_mut(usize::from(ru)).ok_or(UnknownRu { ru, n_ru })? = true;
        if self.started || self.abandoned || !self.ready.iter().all(|&r| r) {
            return Ok(None);
        }
        self.started = true;
        Ok(Some(std::mem::take(&mut self.deferred)))
    }

    /// A trigger RU 0 took: whether it makes its event now. Before the start it is kept aside
    /// for the start; once the run is abandoned it is of no event.
    pub fn admit(&mut self, event: EventNumber, lumi_section: u32) -> bool {
        if self.abandoned {
            return false;
        }
        if self.started() {
            return true;
        }
        self.deferred.push_back((event, lumi_section));
        false
    }

    /// Run control stopped the run before it started, with no event issued: the triggers kept
    /// aside are of no event, and the run never starts.
    pub fn abandon(&mut self) {
        debug_assert!(!self.started(), "a run that started drains instead");
        self.abandoned = true;
        self.deferred.clear();
    }

    /// Whether the run has started.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Whether the run still waits to start: neither started nor abandoned.
    pub fn waits(&self) -> bool {
        !self.started() && !self.abandoned
    }

    /// The RUs not yet ready, in order.
    pub fn waiting_for(&self) -> Vec<RuId> {
        (0..self.ready.len()).filter(|&r| !self.ready[r]).map(|r| r as RuId).collect()
    }

    /// Triggers kept aside so far.
    pub fn deferred(&self) -> usize {
        self.deferred.len()
    }

    /// The last trigger kept aside, if any.
    pub fn last_deferred(&self) -> Option<EventNumber> {
        self.deferred.back().map(|&(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_starts_once_every_ru_is_ready_in_any_order_and_only_once() {
        let mut b = StartBarrier::new(3);
        assert_eq!(b.waiting_for(), vec![0, 1, 2]);
        assert!(!b.admit(1, 1) && !b.admit(2, 1), "kept aside before the start");
        assert_eq!(b.ready(2), Ok(None));
        assert_eq!(b.ready(2), Ok(None), "said twice");
        assert_eq!(b.ready(7), Err(UnknownRu { ru: 7, n_ru: 3 }));
        assert_eq!(b.ready(0), Ok(None));
        assert_eq!((b.waiting_for(), b.deferred(), b.last_deferred()), (vec![1], 2, Some(2)));
        assert_eq!(b.ready(1), Ok(Some(VecDeque::from([(1, 1), (2, 1)]))), "the triggers kept aside");
        assert_eq!((b.started(), b.deferred()), (true, 0));
        assert_eq!(b.ready(1), Ok(None), "started once");
        assert!(b.admit(3, 1), "after the start a trigger makes its event at once");
    }

    #[test]
    fn an_abandoned_run_never_starts_and_its_triggers_make_no_event() {
        let mut b = StartBarrier::new(2);
        assert!(!b.admit(1, 1));
        b.abandon();
        assert!(!b.waits() && !b.started());
        assert_eq!((b.ready(0), b.ready(1)), (Ok(None), Ok(None)));
        assert!(!b.admit(2, 1) && b.deferred() == 0);
    }
}
