//! Identifiers and small value types shared by the units.

use tessera_formats::fed::LV1_MASK;

/// Time in nanoseconds since an arbitrary origin chosen by the driver (real or simulated).
pub type Nanos = u64;

/// An event's number: 64 bits inside Tessera; the wire's 24-bit LV1 id is its low bits.
pub type EventNumber = u64;

/// A FED id (12 bits on the wire).
pub type FedId = u16;

/// Index of a readout unit in the system, 0..n_ru. RU 0 sits with the EVM and reads the trigger.
pub type RuId = u16;

/// Index of a builder unit in the system, 0..n_bu.
pub type BuId = u16;

/// Incarnation of a BU: raised each time it (re)starts, so that messages meant for an earlier
/// incarnation are recognised and dropped.
pub type Epoch = u32;

/// A BU's first incarnation in a run; each start after a crash is one more.
pub const FIRST_EPOCH: Epoch = 1;

/// A raw file of a BU: its lumi section and index within it, as in the file's name
/// (`runRRRRRR_lsLLLL_indexIIIIII.raw`). Never reused by the BU, across restarts too: a
/// restarted BU numbers on from the files it finds on its disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    /// The BU that writes the file.
    pub bu: BuId,
    /// Lumi section of the file.
    pub lumi_section: u32,
    /// Index of the file within its lumi section at this BU, from 0.
    pub index: u32,
}

impl std::fmt::Display for FileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LS {} index {}", self.lumi_section, self.index)
    }
}

/// A peer of a unit on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Peer {
    /// The event manager.
    Evm,
    /// A readout unit.
    Ru(RuId),
    /// A builder unit.
    Bu(BuId),
}

impl std::fmt::Display for Peer {
    /// As people name the unit: `EVM`, `RU 1`, `BU 0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Evm => write!(f, "EVM"),
            Peer::Ru(r) => write!(f, "RU {r}"),
            Peer::Bu(b) => write!(f, "BU {b}"),
        }
    }
}

/// A run of consecutive event numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventRange {
    /// First event.
    pub first: EventNumber,
    /// Number of events, at least 1.
    pub count: u32,
}

impl std::fmt::Display for EventRange {
    /// `event 5`, or `events 5-12`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.count {
            1 => write!(f, "event {}", self.first),
            n => write!(f, "events {}-{}", self.first, self.first + u64::from(n) - 1),
        }
    }
}

impl EventRange {
    /// The events of the range.
    pub fn iter(&self) -> impl Iterator<Item = EventNumber> + use<> {
        self.first..self.first + u64::from(self.count)
    }
}

/// Appends `event` to a list of ranges, extending the last range when it follows it: assignment
/// and release lists stay one range long in the common case.
pub fn push_event(ranges: &mut Vec<EventRange>, event: EventNumber) {
    if let Some(last) = ranges.last_mut()
        && last.first + u64::from(last.count) == event
        && last.count < u32::MAX
    {
        last.count += 1;
        return;
    }
    ranges.push(EventRange { first: event, count: 1 });
}

/// Turns a FED's 24-bit LV1 ids into 64-bit event numbers across the wrap at 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lv1Unwrapper {
    next: EventNumber,
}

impl Lv1Unwrapper {
    /// Expects `first` as the first event number.
    pub fn new(first: EventNumber) -> Self {
        Lv1Unwrapper { next: first }
    }

    /// The event number expected next.
    pub fn expected(&self) -> EventNumber {
        self.next
    }

    /// Accepts `lv1` if it is the expected event's LV1 id and returns the full event number;
    /// otherwise returns the expected event number as the error (a sync loss).
    pub fn accept(&mut self, lv1: u32) -> Result<EventNumber, EventNumber> {
        if lv1 & LV1_MASK == (self.next as u32) & LV1_MASK {
            self.next += 1;
            Ok(self.next - 1)
        } else {
            Err(self.next)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lv1_unwrapper_crosses_the_wrap() {
        let mut u = Lv1Unwrapper::new((1 << 24) - 2);
        assert_eq!(u.accept(0xFF_FFFE), Ok((1 << 24) - 2));
        assert_eq!(u.accept(0xFF_FFFF), Ok((1 << 24) - 1));
        assert_eq!(u.accept(0), Ok(1 << 24));
        assert_eq!(u.accept(2), Err((1 << 24) + 1));
    }

    #[test]
    fn ranges_extend() {
        let mut r = Vec::new();
        for e in [5, 6, 7, 9] {
            push_event(&mut r, e);
        }
        assert_eq!(r, vec![EventRange { first: 5, count: 3 }, EventRange { first: 9, count: 1 }]);
    }
}
