//! The destination function of push: every RU computes it alike, so no message names an
//! event's BU.

use crate::types::{BuId, EventNumber};

/// Which BU builds each event: consecutive blocks of `block_events` events go to one BU, round
/// robin over the list of enabled BUs. The list may change at an event (a BU excluded from it
/// on): each change is an epoch of its own, and the blocks keep their alignment across epochs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destinations {
    first_event: EventNumber,
    block_events: u64,
    /// (first event, enabled BUs) in increasing first event; the first starts at `first_event`.
    epochs: Vec<(EventNumber, Vec<BuId>)>,
}

/// Why a BU cannot be excluded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExcludeError {
    /// It is not among the enabled BUs.
    #[error("BU {0} is not a destination")]
    NotEnabled(BuId),
    /// The exclusion would reach back before an earlier change.
    #[error("BU {bu} excluded from event {from}, before the last change of destinations at event {last}")]
    Backwards {
        /// The BU.
        bu: BuId,
        /// The first event it was to be excluded from.
        from: EventNumber,
        /// The first event of the last change.
        last: EventNumber,
    },
}

impl Destinations {
    /// Blocks of `block_events` events (at least 1) round robin over `bus` from `first_event`.
    pub fn new(first_event: EventNumber, block_events: u64, bus: Vec<BuId>) -> Self {
        Destinations { first_event, block_events: block_events.max(1), epochs: vec![(first_event, bus)] }
    }

    /// Events per block.
    pub fn block_events(&self) -> u64 {
        self.block_events
    }

    /// The BUs enabled for `event`.
    fn enabled(&self, event: EventNumber) -> &[BuId] {
        let at = self.epochs.partition_point(|(from, _)| *from <= event).max(1);
        &self.epochs[at - 1].1
    }

    /// The BU of `event`; none when no BU is enabled.
    pub fn of(&self, event: EventNumber) -> Option<BuId> {
        let bus = self.enabled(event);
        let block = event.saturating_sub(self.first_event) / self.block_events;
        bus.get((block % bus.len().max(1) as u64) as usize).copied()
    }

    /// The BUs enabled from the latest change on.
    pub fn current(&self) -> &[BuId] {
        &self.epochs.last().expect("one epoch at least").1
    }

    /// The first event of the last change of destinations.
    pub fn last_change(&self) -> EventNumber {
        self.epochs.last().expect("one epoch at least").0
    }

    /// The first event of a block at or after `event`.
    pub fn block_start_at_or_after(&self, event: EventNumber) -> EventNumber {
        let offset = event.saturating_sub(self.first_event).div_ceil(self.block_events) * self.block_events;
        self.first_event + offset
    }

    /// Excludes `bu` from event `from` on (a change at the latest change or later).
    pub fn exclude(&mut self, bu: BuId, from: EventNumber) -> Result<(), ExcludeError> {
        let last = self.last_change();
        if from < last {
            return Err(ExcludeError::Backwards { bu, from, last });
        }
        let mut bus = self.current().to_vec();
        let before = bus.len();
        bus.retain(|&b| b != bu);
        if bus.len() == before {
            return Err(ExcludeError::NotEnabled(bu));
        }
        if from == last {
            self.epochs.last_mut().expect("one epoch at least").1 = bus;
        } else {
            self.epochs.push((from, bus));
        }
        Ok(())
    }

    /// How many of the events `first..=last` go to `bu`.
    pub fn count_for(&self, bu: BuId, first: EventNumber, last: EventNumber) -> u64 {
        let mut count = 0;
        let mut event = first;
        while event <= last {
            // One block at a time: all of a block's events share a destination within an epoch.
            let block_end = self.block_start_at_or_after(event + 1).max(event + 1) - 1;
            let next_change = self.epochs.iter().map(|(f, _)| *f).find(|&f| f > event).unwrap_or(u64::MAX);
            let end = block_end.min(next_change - 1).min(last);
            if self.of(event) == Some(bu) {
                count += end - event + 1;
            }
            event = end + 1;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blocks_go_round_robin_and_an_exclusion_takes_effect_at_its_event() {
        let mut d = Destinations::new(1, 4, vec![0, 1, 2]);
        let of = |d: &Destinations, r: std::ops::RangeInclusive<u64>| r.map(|e| d.of(e).unwrap()).collect::<Vec<_>>();
        assert_eq!(of(&d, 1..=13), vec![0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0]);
        d.exclude(1, 17).unwrap();
        // Blocks stay aligned: event 17 opens block 4, now the first of [0, 2]'s round.
        assert_eq!(of(&d, 13..=25), vec![0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 0]);
        assert_eq!(d.exclude(1, 30), Err(ExcludeError::NotEnabled(1)));
        assert_eq!(d.exclude(0, 5), Err(ExcludeError::Backwards { bu: 0, from: 5, last: 17 }));
        d.exclude(0, 17).unwrap();
        assert_eq!(d.of(17), Some(2));
        d.exclude(2, 21).unwrap();
        assert_eq!(d.of(21), None);
        assert_eq!(d.block_start_at_or_after(6), 9);
        assert_eq!(d.block_start_at_or_after(9), 9);
    }

    proptest! {
        /// The count of a range's events that go to a BU is what the function gives event by event.
        #[test]
        fn count_for_agrees_with_the_function(
            first in 0u64..50,
            block in 1u64..9,
            n_bu in 1u16..5,
            exclude in proptest::option::of((0u16..5, 0u64..200)),
            range in (0u64..200, 0u64..200),
        ) {
            let mut d = Destinations::new(first, block, (0..n_bu).collect());
            if let Some((bu, from)) = exclude {
                let _ = d.exclude(bu, first + from);
            }
            let (a, b) = (first + range.0.min(range.1), first + range.0.max(range.1));
            for bu in 0..n_bu {
                let by_event = (a..=b).filter(|&e| d.of(e) == Some(bu)).count() as u64;
                prop_assert_eq!(d.count_for(bu, a, b), by_event);
            }
        }
    }
}
