//! No allocation per fragment or per event at steady state on the RU's and the BU's hot paths:
//! every allocation of this process is counted by a global allocator, and a case of `tessera
//! bench evb` is run twice, for about N and about 4N events. What the longer run allocates more,
//! over the fragments it carries more, is what the hot paths allocate per fragment: set-up and
//! teardown are the same in both runs and cancel out. The tests of this file run one at a time:
//! the count is the process's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_bench::evb::{BuOutput, EvbCase, Tuning, run_case};
use tessera_bench::net::{NetBudget, StreamMode};
use tessera_config::Protocol;
use tessera_formats::fed::CrcCheck;

/// Allocations (`alloc`, `alloc_zeroed`, `realloc`) of this process so far.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting.
struct Counting;

// SAFETY: every call goes unchanged to `System`, which keeps `GlobalAlloc`'s contract; counting
// touches no memory and does not allocate.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller keeps `alloc`'s contract, which is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` and `layout` come from this allocator, that is from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, that is from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A case of 2 kB fragments on 4 streams (the trigger's and 3 of data, over `rus` RUs) under
/// `protocol`, measured over a window of `bytes` of wire bytes.
fn case(rus: usize, bus: usize, output: BuOutput, protocol: Protocol, bytes: u64) -> EvbCase {
    EvbCase {
        rus,
        bus,
        streams: 4,
        fragment_bytes: 2048,
        mode: StreamMode::Event,
        crc_check: CrcCheck::Always,
        output,
        budget: NetBudget { seconds: 60.0, bytes },
        protocol,
        slow_bu_events_per_s: None,
        tuning: Tuning::Bench,
        ucx: None,
    }
}

/// Allocations of one whole run of `case` (set-up, window, drain and teardown), and the
/// fragments of its window.
fn run(case: &EvbCase) -> (u64, u64) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let m = run_case(case).unwrap_or_else(|e| panic!("{}: {e}", case.label()));
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    // The fragments of the window: those before it (a warm-up of the same length) and after it
    // (the drain of what the units hold) are about as many in both runs.
    let fragments = m.fragments;
    eprintln!(
        "{}: {allocations} allocations, {fragments} fragments ({} events built), {:.2} GB/s",
        case.label(),
        m.built,
        m.gb_per_s()
    );
    (allocations, fragments)
}

/// Allocations per fragment the hot paths make: those of a run about 4 times longer than
/// another, over the fragments it carries more.
fn marginal(rus: usize, bus: usize, output: BuOutput, protocol: Protocol) -> f64 {
    // About 120 000 fragments, and 4 times as many: a few seconds even in a debug build, whose
    // runtime and cores are optimised (the workspace's Cargo.toml).
    let short = 256 << 20;
    let (a_short, f_short) = run(&case(rus, bus, output, protocol, short));
    let (a_long, f_long) = run(&case(rus, bus, output, protocol, 4 * short));
    assert!(f_long > f_short + f_short / 2, "{f_long} fragments in the long run, {f_short} in the short");
    let per_fragment = a_long.saturating_sub(a_short) as f64 / (f_long - f_short) as f64;
    eprintln!(
        "{}: {per_fragment:.5} allocations per fragment at steady state",
        case(rus, bus, output, protocol, short).label()
    );
    per_fragment
}

/// One allocation per fragment is 1, one per event 1/4 (4 streams). What a batch of events
/// costs (an assignment, a data message and its frame, a release: a few allocations each) is
/// spread over its events: an allocation per batch of 64 events, the ingest-only RU's smallest,
/// is 1/256. The bound leaves room for a few of those per batch and for what happens per second
/// (the bench's sampling every 5 ms, monitoring), and is five times below one per event.
const BOUND: f64 = 0.05;

/// The runs of the tests in this file, one at a time: the count is the process's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn the_ru_allocates_nothing_per_fragment_at_steady_state() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ru = marginal(1, 0, BuOutput::IngestOnly, Protocol::Pull);
    assert!(ru < BOUND, "the RU ingesting allocates {ru:.4} times per fragment; at most {BOUND}");
}

/// The bound of a chain of `rus` RUs. Each unit an event passes through (each RU, and the BU
/// that builds it) allocates a few times per batch of its own, as the RU alone does: a frame per
/// message received, the protocol messages' lists, a writev piece list per write, and at a BU a
/// file's and a request's (the EVM's assignments and commits are RU 0's). Each is held to
/// `BOUND`. An allocation per event would still add 1/4, one per super-fragment at a BU `rus`
/// times that.
fn chain_bound(rus: usize) -> f64 {
    (rus + 1) as f64 * BOUND
}

/// Checks that `rus` RUs into 2 BUs under `protocol` allocate nothing per fragment or per event
/// at steady state.
fn chain_allocates_nothing_per_fragment(rus: usize, protocol: Protocol, bound: f64) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let chain = marginal(rus, 2, BuOutput::Discard, protocol);
    assert!(
        chain < bound,
        "{rus} RUs into 2 BUs ({protocol:?}) allocate {chain:.4} times per fragment; at most {bound}"
    );
}

/// A BU allocates nothing per super-fragment or per event: it decodes each super-fragment into a
/// fragment list of an event its writers are done with, and builds each event into a list of
/// parts of one (the driver hands written events back, `Bu::recycle`). With one RU a
/// super-fragment is an event.
#[test]
fn chain_1x2_allocates_nothing_per_fragment_at_steady_state() {
    chain_allocates_nothing_per_fragment(1, Protocol::Pull, chain_bound(1));
}

/// With two RUs each event waits in the BU's building table for its second part: the table and
/// its slots allocate nothing per event either.
#[test]
fn chain_2x2_allocates_nothing_per_fragment_at_steady_state() {
    chain_allocates_nothing_per_fragment(2, Protocol::Pull, chain_bound(2));
}

/// Under push the BUs build what the RUs send unasked, and remember the events they shipped
/// lately to tell a late part from a new event's first: that memory allocates nothing per event
/// either: a `BTreeSet` of them made the chain 0.12 per fragment, 0.056–0.081 since (four runs,
/// the higher ones beside other jobs). The bound is the pull chain's: it catches an allocation
/// per event, not one every few events.
#[test]
fn chain_2x2_push_allocates_nothing_per_fragment_at_steady_state() {
    chain_allocates_nothing_per_fragment(2, Protocol::Push, chain_bound(2));
}
