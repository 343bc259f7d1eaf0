//! The filter unit (FU) of Tessera's file-based filter farm: it claims raw files from a BU's run
//! directory, runs a selection menu over their events, and writes the accepted events into
//! output streams per lumi section, with the bookkeeping the mergers combine (FORMATS.md §7–§8).

#![warn(missing_docs)]

pub mod select;

pub use select::{EventSummary, MenuSelector, SummaryError};

/// The output streams an event goes to: bit `i` stands for stream `i` of the selector's stream
/// list, so a selector has at most [`StreamSet::MAX_STREAMS`] streams. Empty means rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct StreamSet(pub u64);

impl StreamSet {
    /// Streams a selector may have.
    pub const MAX_STREAMS: usize = 64;

    /// No stream: the event is rejected.
    pub const NONE: StreamSet = StreamSet(0);

    /// Adds stream `index`.
    pub fn insert(&mut self, index: usize) {
        debug_assert!(index < Self::MAX_STREAMS);
        self.0 |= 1 << index;
    }

    /// Whether stream `index` is in the set.
    pub fn contains(self, index: usize) -> bool {
        index < Self::MAX_STREAMS && self.0 & (1 << index) != 0
    }

    /// Whether no stream is in the set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The streams in the set, lowest index first.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        (0..Self::MAX_STREAMS).filter(move |&i| self.contains(i))
    }
}
