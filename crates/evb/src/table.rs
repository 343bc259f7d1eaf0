//! Per-event state of a few events by event number, kept in order in one deque: events enter and
//! leave it in nearly increasing order, so an insertion is at the back and a removal at the
//! front, and once its memory has grown it allocates nothing. A `BTreeMap` that a window of
//! event numbers slides through allocates a node every few events.

use crate::types::EventNumber;
use std::collections::VecDeque;

/// Events with their state, in increasing order.
#[derive(Debug)]
pub(crate) struct EventTable<T> {
    entries: VecDeque<(EventNumber, T)>,
}

impl<T> EventTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        EventTable { entries: VecDeque::new() }
    }

    /// Where `event` is, or where it would go.
    fn position(&self, event: EventNumber) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&event, |&(e, _)| e)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, event: EventNumber) -> bool {
        self.position(event).is_ok()
    }

    pub fn get_mut(&mut self, event: EventNumber) -> Option<&mut T> {
        let i = self.position(event).ok()?;
        Some(&mut self.entries[i].1)
    }

    /// Sets the state of `event`, in its place.
    pub fn insert(&mut self, event: EventNumber, value: T) {
        match self.position(event) {
            Ok(i) => self.entries[i].1 = value,
            Err(i) => self.entries.insert(i, (event, value)),
        }
    }

    pub fn remove(&mut self, event: EventNumber) -> Option<T> {
        let i = self.position(event).ok()?;
        self.entries.remove(i).map(|(_, value)| value)
    }

    /// The events in order, with their state.
    pub fn iter(&self) -> impl Iterator<Item = (EventNumber, &T)> {
        self.entries.iter().map(|(e, value)| (*e, value))
    }

    /// The events below `end`, in order, with their state.
    pub fn below(&self, end: EventNumber) -> impl Iterator<Item = (EventNumber, &T)> {
        self.iter().take_while(move |&(e, _)| e < end)
    }

    /// The oldest event.
    pub fn first(&self) -> Option<EventNumber> {
        self.entries.front().map(|&(e, _)| e)
    }

    pub fn keys(&self) -> impl Iterator<Item = EventNumber> {
        self.entries.iter().map(|&(e, _)| e)
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, value)| value)
    }

    /// Removes the events from `first` on and gives their states.
    pub fn split_off(&mut self, first: EventNumber) -> impl Iterator<Item = T> {
        let i = self.position(first).unwrap_or_else(|i| i);
        self.entries.split_off(i).into_iter().map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_stay_in_order_wherever_they_are_inserted_or_removed() {
        let mut t = EventTable::new();
        for e in [5, 9, 7, 1] {
            t.insert(e, e * 10);
        }
        t.insert(7, 71);
        assert_eq!(t.iter().collect::<Vec<_>>(), [(1, &10), (5, &50), (7, &71), (9, &90)]);
        assert_eq!(t.remove(5), Some(50));
        assert_eq!(t.remove(5), None);
        assert!(t.contains(7) && !t.contains(5));
        *t.get_mut(9).expect("held") += 1;
        assert_eq!(t.below(9).map(|(e, _)| e).collect::<Vec<_>>(), [1, 7]);
        assert_eq!(t.split_off(2).collect::<Vec<_>>(), [71, 91]);
        assert_eq!((t.len(), t.keys().collect::<Vec<_>>(), t.first()), (1, vec![1], Some(1)));
    }
}
