//! Per-event state indexed by event number: a ring, because events enter and leave in nearly
//! increasing order. A released event leaves a hole until every older one is released too.

use crate::types::EventNumber;
use std::collections::VecDeque;

/// Slots for events `base..base + len`.
#[derive(Debug)]
pub(crate) struct EventRing<T> {
    base: EventNumber,
    slots: VecDeque<Option<T>>,
    live: usize,
}

impl<T: Default> EventRing<T> {
    /// A ring whose first event is `base`.
    pub fn new(base: EventNumber) -> Self {
        EventRing { base, slots: VecDeque::new(), live: 0 }
    }

    /// Events from the oldest live one to the newest: the memory the ring takes.
    pub fn window(&self) -> usize {
        self.slots.len()
    }

    /// Live (unreleased) events.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The event after the newest slot: every event below it was created.
    pub fn end(&self) -> EventNumber {
        self.base + self.slots.len() as u64
    }

    /// Whether `event` was created and then removed.
    pub fn was_removed(&self, event: EventNumber) -> bool {
        event < self.end() && self.get(event).is_none()
    }

    fn index(&self, event: EventNumber) -> Option<usize> {
        event.checked_sub(self.base).and_then(|i| usize::try_from(i).ok())
    }

    pub fn get(&self, event: EventNumber) -> Option<&T> {
        self.slots.get(self.index(event)?)?.as_ref()
    }

    pub fn get_mut(&mut self, event: EventNumber) -> Option<&mut T> {
        let i = self.index(event)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// The slot of `event`, created (with every event before it) if it is new. `None` for an
    /// event already removed.
    pub fn entry(&mut self, event: EventNumber) -> Option<&mut T> {
        if self.was_removed(event) {
            return None;
        }
        let i = self.index(event)?;
        while self.slots.len() <= i {
            self.slots.push_back(Some(T::default()));
            self.live += 1;
        }
        self.slots[i].as_mut()
    }

    /// Moves an empty ring to start at `event`: for a user that meets its first event late (the
    /// EVM learns the run's first event from the first trigger).
    pub fn rebase_if_empty(&mut self, event: EventNumber) {
        if self.slots.is_empty() {
            self.base = event;
        }
    }

    /// Live events in order, with their state.
    pub fn iter(&self) -> impl Iterator<Item = (EventNumber, &T)> {
        let base = self.base;
        self.slots.iter().enumerate().filter_map(move |(i, s)| s.as_ref().map(|t| (base + i as u64, t)))
    }

    /// Live events in order, with their state, to change.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (EventNumber, &mut T)> {
        let base = self.base;
        self.slots.iter_mut().enumerate().filter_map(move |(i, s)| s.as_mut().map(|t| (base + i as u64, t)))
    }

    /// Removes `event`, dropping the holes at the front.
    pub fn remove(&mut self, event: EventNumber) -> Option<T> {
        let i = self.index(event)?;
        let taken = self.slots.get_mut(i)?.take();
        if taken.is_some() {
            self.live -= 1;
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_close_from_the_front() {
        let mut r: EventRing<u32> = EventRing::new(10);
        *r.entry(12).unwrap() = 7;
        assert_eq!((r.window(), r.live(), r.end()), (3, 3, 13));
        assert_eq!(r.remove(11), Some(0));
        assert!(r.was_removed(11));
        assert!(r.entry(11).is_none());
        assert_eq!(r.window(), 3);
        r.remove(10);
        assert_eq!((r.window(), r.live()), (1, 1));
        assert_eq!(r.get(12), Some(&7));
        assert!(r.was_removed(10) && !r.was_removed(13));
    }
}
