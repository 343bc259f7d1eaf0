//! The judge of the trigger stream, shared by the two nodes that read it (the EVM's node under
//! pull, RU 0's [`PushNode`](crate::push::PushNode) under push). The trigger's only clean ends
//! are run control's stop and, with an event limit, the stream's close after exactly that many
//! events; anything else (a close before it, a stream that cannot be read on, an event out of
//! sequence) breaks the run at the last good fragment.

use crate::unit::TriggerBreak;

/// What is known of the trigger stream's end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TriggerStream {
    /// Events the stream is expected to bring before it may close: the run's event limit or run
    /// control's stop line, whichever is lower.
    limit: Option<u64>,
    /// The trigger is off: run control stopped it, its stream ended cleanly, or it broke.
    stopped: bool,
    /// How the stream broke, if it did.
    broke: Option<TriggerBreak>,
}

impl TriggerStream {
    /// The stream may close cleanly after `events` events; a lower limit given later wins.
    pub fn limit(&mut self, events: u64) {
        self.limit = Some(self.limit.map_or(events, |n| n.min(events)));
    }

    /// Events the stream may bring at most (the run's event limit or run control's stop line),
    /// once known.
    pub fn limit_events(&self) -> Option<u64> {
        self.limit
    }

    /// Whether the trigger is off.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// How the stream broke before run control stopped the trigger, if it did.
    pub fn broke(&self) -> Option<&TriggerBreak> {
        self.broke.as_ref()
    }

    /// Run control stopped the trigger. Returns whether this turned it off (it was on).
    pub fn stop(&mut self) -> bool {
        !std::mem::replace(&mut self.stopped, true)
    }

    /// The stream ended after `triggered` good fragments: closed at a fragment boundary
    /// (`broken` none) or could not be read on (`broken` says why). Returns the break, when the
    /// end is one; the trigger is off either way. Nothing, if it was off already.
    pub fn ended(&mut self, triggered: u64, broken: Option<String>) -> Option<TriggerBreak> {
        if self.stopped {
            return None;
        }
        match broken {
            Some(why) => self.break_with(TriggerBreak::Broken(why)),
            None if self.limit.is_some_and(|n| triggered >= n) => {
                self.stopped = true;
                None
            }
            None => self.break_with(TriggerBreak::Closed { expected: self.limit }),
        }
    }

    /// The stream brought an event out of sequence: a break, unless the trigger is off already.
    pub fn sync_lost(&mut self, expected: crate::types::EventNumber, found_lv1: u32) -> Option<TriggerBreak> {
        if self.stopped {
            return None;
        }
        self.break_with(TriggerBreak::SyncLost { expected, found_lv1 })
    }

    fn break_with(&mut self, what: TriggerBreak) -> Option<TriggerBreak> {
        self.stopped = true;
        self.broke = Some(what.clone());
        Some(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_close_at_the_limit_or_run_controls_stop_ends_the_trigger_cleanly() {
        let mut t = TriggerStream::default();
        t.limit(5);
        t.limit(3);
        assert_eq!(t.ended(3, None), None);
        assert!(t.stopped() && t.broke().is_none());
        let mut t = TriggerStream::default();
        t.limit(10);
        assert_eq!(t.ended(4, None), Some(TriggerBreak::Closed { expected: Some(10) }));
        assert_eq!(t.ended(4, Some("late".into())), None, "once off, nothing more");
        let mut t = TriggerStream::default();
        assert!(t.stop() && !t.stop());
        assert_eq!(t.sync_lost(3, 7), None, "after the stop, no break");
        let mut t = TriggerStream::default();
        assert_eq!(t.sync_lost(3, 7), Some(TriggerBreak::SyncLost { expected: 3, found_lv1: 7 }));
    }
}
