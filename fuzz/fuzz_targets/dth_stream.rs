//! DTH streams: `DthStream` over the input, `copy_to` of each orbit into a `Vec`, then
//! `OrbitBlock::parse` (and its fragment walk) on the copy, and a rewrite with
//! `write_dth_blocks` that must read back the same.
//!
//! The first input byte selects the mode: see `fixup.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod fixup;
use tessera_formats::orbit::{
    DTH_HEADER_BYTES, DthOrbit, DthStream, MIN_MAX_BLOCK_BYTES, ORBIT_HEADER_BYTES, OrbitBlock, UNIT_BYTES,
    dth_wire_len, looks_like_dth_stream, write_dth_blocks,
};

fuzz_target!(|input: &[u8]| {
    let data = &fixup::input(input, fixup::dth_stream)[..];
    let _ = looks_like_dth_stream(data);
    let mut stream = DthStream::new(data);
    let mut expected_at = 0;
    let mut failed = false;
    while let Some(item) = stream.next() {
        assert!(!failed, "DthStream yielded after an error");
        match item {
            Ok((at, orbit)) => {
                assert_eq!(at, expected_at, "orbits are back to back");
                assert!(at + orbit.wire_len() <= data.len());
                assert_eq!(orbit.as_bytes(), &data[at..at + orbit.wire_len()]);
                check_orbit(&orbit);
                expected_at = at + orbit.wire_len();
                assert_eq!(stream.position(), expected_at);
            }
            Err(e) => {
                assert!(e.offset().is_some_and(|o| o >= expected_at), "error offset is in the stream frame: {e}");
                assert_eq!(stream.position(), expected_at);
                failed = true;
            }
        }
    }
    if !failed {
        assert_eq!(expected_at, data.len(), "a stream read without error is read whole");
    }
});

fn check_orbit(orbit: &DthOrbit<'_>) {
    assert!(orbit.block_count() >= 1);
    assert!(orbit.orbit_len() >= ORBIT_HEADER_BYTES);
    assert_eq!(orbit.orbit_len() % UNIT_BYTES, 0);
    assert_eq!(orbit.orbit_len(), orbit.header.block_len());
    assert_eq!(orbit.wire_len(), orbit.orbit_len() + DTH_HEADER_BYTES * orbit.block_count());

    let segments: Vec<&[u8]> = orbit.segments().collect();
    assert_eq!(segments.len(), orbit.block_count());
    let mut copy = Vec::new();
    copy.resize(orbit.orbit_len(), 0u8);
    assert_eq!(orbit.copy_to(&mut copy).expect("copy fits"), orbit.orbit_len());
    assert_eq!(copy, segments.concat());
    assert!(orbit.copy_to(&mut copy[..orbit.orbit_len() - 1]).is_err(), "copy_to checks its buffer");

    // DthOrbit checks less than OrbitBlock (not the event count against the size), so the copy
    // need not parse; when it does, it is the orbit's header and size.
    let parsed = OrbitBlock::parse(&copy);
    if orbit.block_count() == 1 {
        assert_eq!(orbit.as_single().is_some(), parsed.is_ok(), "as_single agrees with parsing the copy");
    } else {
        assert!(orbit.as_single().is_none());
    }
    let Ok(block) = parsed else { return };
    assert_eq!(block.header, orbit.header);
    assert_eq!(block.wire_len(), copy.len());
    let _ = block.check_crc();
    for fragment in block.fragments() {
        match fragment {
            Ok(f) => {
                let _ = f.check_crc();
            }
            Err(_) => break,
        }
    }

    // Written again as DTH blocks (small ones, to get several), it reads back the same.
    for max_block_bytes in [MIN_MAX_BLOCK_BYTES, 4 * MIN_MAX_BLOCK_BYTES + 16] {
        let mut wire = vec![0u8; dth_wire_len(copy.len(), max_block_bytes)];
        // More than 65536 blocks is refused; fuzz inputs are far smaller, but do not insist.
        let Ok(n) = write_dth_blocks(&copy, max_block_bytes, &mut wire) else { continue };
        assert_eq!(n, wire.len());
        let mut again = DthStream::new(&wire);
        let (at, back) = again.next().expect("one orbit").expect("written blocks parse");
        assert_eq!(at, 0);
        assert!(again.next().is_none());
        assert_eq!(back.header, orbit.header);
        assert_eq!(back.orbit_len(), orbit.orbit_len());
        assert_eq!(back.segments().collect::<Vec<_>>().concat(), copy);
    }
}
