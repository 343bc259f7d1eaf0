//! DTH orbit blocks: `OrbitBlock::parse`, `check_crc`, the `fragments()` walk with `check_crc` on
//! each, `validate()`, and a rewrite with `OrbitBlockWriter` of a block that validates.
//!
//! The first input byte selects the mode: see `fixup.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod fixup;
use tessera_formats::orbit::{
    EVENT_ID_MASK, FRAME_BYTES, FragmentInfo, MAX_EVENTS, ORBIT_HEADER_BYTES, OrbitBlock, OrbitBlockWriter,
    OrbitFragment, OrbitHeader, UNIT_BYTES,
};

fuzz_target!(|input: &[u8]| {
    let data = &fixup::input(input, fixup::orbit_block)[..];
    let Ok(block) = OrbitBlock::parse(data) else { return };
    check_block(&block, data);
});

fn check_block(block: &OrbitBlock<'_>, data: &[u8]) {
    let h = block.header;
    assert_eq!(OrbitHeader::parse(&h.to_bytes(), 0).expect("a header re-encodes"), h);
    assert!(h.event_count <= MAX_EVENTS);
    assert_eq!(block.wire_len(), h.block_len());
    assert!(block.wire_len() <= data.len());
    assert!(block.wire_len() >= ORBIT_HEADER_BYTES + 3 * FRAME_BYTES * usize::from(h.event_count));
    assert_eq!(block.as_bytes(), &data[..block.wire_len()]);
    let crc_ok = block.check_crc().is_ok();
    assert_eq!(crc_ok, block.computed_crc() == h.crc32c);

    // Walk backwards: each fragment and its trailer end where the one after it starts.
    let mut end = block.wire_len();
    let mut fragments: Vec<OrbitFragment<'_>> = Vec::new();
    let mut failed = false;
    for item in block.fragments() {
        assert!(!failed, "the fragment walk yielded after an error");
        match item {
            Ok(f) => {
                assert!(f.offset() >= ORBIT_HEADER_BYTES);
                assert_eq!(f.trailer_offset(), f.offset() + f.as_bytes().len());
                assert_eq!(f.trailer_offset() + FRAME_BYTES, end, "fragments are back to back");
                assert_eq!(f.as_bytes().len(), f.trailer.length_units as usize * UNIT_BYTES);
                assert_eq!(f.trailer.length_units, f.fragment_trailer.size_units);
                assert_eq!(f.payload().len(), f.as_bytes().len() - 2 * FRAME_BYTES);
                assert_eq!(f.source_id(), h.source_id);
                assert_eq!(f.trailer.orbit, h.orbit);
                assert_eq!(f.event_id(), f.fragment_trailer.event_id);
                assert!(f.event_id() <= EVENT_ID_MASK);
                assert!(f.bx() <= 0xFFF);
                let crc_ok = f.check_crc().is_ok();
                assert_eq!(crc_ok, f.computed_crc() == f.trailer.crc && f.computed_crc() == f.fragment_trailer.crc);
                end = f.offset();
                fragments.push(f);
            }
            Err(e) => {
                let _ = e.to_string();
                failed = true;
            }
        }
    }
    let validated = block.validate();
    assert_eq!(validated.is_ok(), !failed, "validate() agrees with the walk");
    let Ok(count) = validated else { return };
    assert_eq!(count, fragments.len());
    assert_eq!(count, usize::from(h.event_count));
    assert_eq!(end, ORBIT_HEADER_BYTES, "a block that validates is covered by its fragments");

    // Written again from its fragments, the block has the same length and reads back the same.
    let mut out = vec![0u8; block.wire_len()];
    let mut writer = OrbitBlockWriter::new(&mut out, h.source_id, h.run, h.orbit).expect("header fits");
    writer.set_flags(h.flags);
    for f in fragments.iter().rev() {
        let info = FragmentInfo {
            event_id: f.event_id(),
            bx: f.bx(),
            l1a_types: f.header.l1a_types,
            physics_type: f.header.physics_type,
            emulation_status: f.header.emulation_status,
            status: f.status(),
            flags: f.flags(),
        };
        writer.push_fragment(&info, f.payload()).expect("a parsed fragment can be written");
    }
    let n = writer.finish().expect("a written block fits its header");
    assert_eq!(n, block.wire_len());
    let back = OrbitBlock::parse(&out).expect("a written block parses");
    back.check_crc().expect("a written block has a good CRC-32C");
    assert_eq!(OrbitHeader { crc32c: h.crc32c, ..back.header }, h);
    assert_eq!(back.validate().expect("a written block validates"), count);
    for (f, g) in fragments.iter().zip(back.fragments()) {
        let g = g.expect("a written fragment reads back");
        g.check_crc().expect("a written fragment has a good CRC-16");
        assert_eq!(g.offset(), f.offset());
        assert_eq!(g.header, f.header);
        assert_eq!(g.payload(), f.payload());
        assert_eq!((g.bx(), g.status(), g.flags()), (f.bx(), f.status(), f.flags()));
    }
}
