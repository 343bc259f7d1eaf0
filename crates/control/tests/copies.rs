//! How often a payload byte is copied in user space between a socket and a file, as
//! docs/design.md says ("How often a payload byte is copied"): never in the BU, and in the RU
//! only the bytes of the one fragment a chunk ends inside, when its stream moves on to the next
//! chunk. Counted by `tessera_runtime::copies` in a debug build, over a whole 2×2 system on
//! loopback. One test in this file: the counts are the process's.

mod common;

use common::{CHUNK_BYTES, Setup, each_built_event, plan, violations};
use std::time::Duration;
use tessera_control::system::RunningSystem;
use tessera_formats::ferol::ferol_wire_len;
use tessera_runtime::copies::{Unit, copied_bytes};

#[test]
fn the_bu_copies_no_payload_byte_and_the_ru_only_a_fragment_at_a_chunks_end() {
    let (Some(ru_before), Some(bu_before)) = (copied_bytes(Unit::Ru), copied_bytes(Unit::Bu)) else {
        let why = "copies are counted in debug builds only; this is a release build";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let events = 3000;
    let system = RunningSystem::start(plan(tmp.path(), &Setup::new(1, events))).unwrap();
    let outcome = system.wait(Duration::from_secs(60));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    let found = violations(tmp.path());
    assert!(found.is_empty(), "{found:#?}");
    // Every payload byte the BUs wrote: the fragments of every event in their files.
    let mut payload = 0u64;
    each_built_event(tmp.path(), |_, ev| payload += u64::from(ev.header.payload_bytes));
    assert!(payload > 0);
    let bu = copied_bytes(Unit::Bu).unwrap() - bu_before;
    assert_eq!(bu, 0, "the BUs copied {bu} of {payload} payload bytes: none is copied between socket and file");
    // An RU copies at most one fragment each time one of its streams moves on to a new chunk:
    // a stream moves on once per chunk it fills, plus once for the chunk it ends in. Here no
    // fragment is larger than 2 kB, one FEROL block.
    let ru = copied_bytes(Unit::Ru).unwrap() - ru_before;
    let streams = common::FEDS.iter().map(|feds| feds.len() as u64).sum::<u64>();
    let moves = payload / CHUNK_BYTES as u64 + streams;
    let fragment = ferol_wire_len(2048) as u64;
    assert!(
        ru <= moves * fragment,
        "the RUs copied {ru} of {payload} payload bytes, more than a fragment per chunk ({moves} chunks)"
    );
}
