//! How often a payload byte is copied in user space on its way from a socket to a file, counted
//! in debug builds (docs/design.md, "How often a payload byte is copied"). Release builds count
//! nothing: every function here is then empty.
//!
//! Two counts, one per unit that carries payload:
//!
//! - **RU**: every place that copies fragment bytes counts them ([`copied`]): the receive buffer
//!   moving the one incomplete fragment at a chunk's end to the next chunk, and, on a link over
//!   UCX, each data frame copied into memory UCX owns until its send ends.
//! - **BU**: the writer threads look at every fragment they write into a file: bytes that do not
//!   lie in the memory a socket read put a frame in ([`crate::conn::ReceivedFrame`], which
//!   registers itself here while it lives) were copied at least once on the way, and are counted.
//!   A copy anywhere between the socket and the writer's vectored write is thus seen without
//!   each place having to say so.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A unit whose copies are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A readout unit: FEROL stream to data frame.
    Ru,
    /// A builder unit: data frame to raw file.
    Bu,
}

static RU_COPIED: AtomicU64 = AtomicU64::new(0);
static BU_COPIED: AtomicU64 = AtomicU64::new(0);
/// The memory of every received frame alive, start address to end address.
static RECEIVED: Mutex<BTreeMap<usize, usize>> = Mutex::new(BTreeMap::new());

fn counter(unit: Unit) -> &'static AtomicU64 {
    match unit {
        Unit::Ru => &RU_COPIED,
        Unit::Bu => &BU_COPIED,
    }
}

/// Counts `bytes` payload bytes copied in user space by `unit`.
pub fn copied(unit: Unit, bytes: usize) {
    if cfg!(debug_assertions) {
        counter(unit).fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// Payload bytes copied in user space by every `unit` of this process so far; `None` in a
/// release build, which does not count.
pub fn copied_bytes(unit: Unit) -> Option<u64> {
    cfg!(debug_assertions).then(|| counter(unit).load(Ordering::Relaxed))
}

fn span(bytes: &[u8]) -> (usize, usize) {
    let start = bytes.as_ptr() as usize;
    (start, start + bytes.len())
}

fn regions() -> std::sync::MutexGuard<'static, BTreeMap<usize, usize>> {
    RECEIVED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes `bytes` as memory a socket read put a frame in.
pub(crate) fn received(bytes: &[u8]) {
    if cfg!(debug_assertions) && !bytes.is_empty() {
        let (start, end) = span(bytes);
        regions().insert(start, end);
    }
}

/// Forgets `bytes`, noted by [`received`], as its memory is freed.
pub(crate) fn forgotten(bytes: &[u8]) {
    if cfg!(debug_assertions) && !bytes.is_empty() {
        regions().remove(&span(bytes).0);
    }
}

/// Counts `bytes`, about to be written into a file by a BU, as copied unless they lie in the
/// memory of a received frame.
pub(crate) fn written_by_bu(bytes: &[u8]) {
    if !cfg!(debug_assertions) || bytes.is_empty() {
        return;
    }
    let (start, end) = span(bytes);
    let in_place = regions().range(..=start).next_back().is_some_and(|(_, &e)| end <= e);
    if !in_place {
        copied(Unit::Bu, bytes.len());
    }
}

/// Whether the memory at `start` is noted as a received frame's ([`received`], not yet
/// [`forgotten`]), for the tests of the frames that note themselves. Only the address is looked
/// at, never the memory.
#[cfg(test)]
pub(crate) fn noted(start: *const u8) -> bool {
    regions().contains_key(&(start as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_written_from_anywhere_but_a_received_frame_count_as_copied() {
        if copied_bytes(Unit::Bu).is_none() {
            let why = "copies are counted in debug builds only; this is a release build";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        // No other test of this crate writes a BU's files: the count moves only here. The
        // memory of a frame as a socket read puts it (conn's ReceivedFrame notes its own).
        let frame: Vec<u8> = (0..100u8).collect();
        received(&frame);
        let before = copied_bytes(Unit::Bu).unwrap();
        written_by_bu(&frame[4..60]);
        assert_eq!(copied_bytes(Unit::Bu).unwrap(), before, "in place");
        let copy = frame[4..60].to_vec();
        written_by_bu(&copy);
        assert_eq!(copied_bytes(Unit::Bu).unwrap(), before + 56, "a copy");
        forgotten(&frame);
        assert!(!noted(frame.as_ptr()), "a freed frame is forgotten");
    }
}
