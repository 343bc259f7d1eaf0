//! FEROL streams: `FerolStream` over the input, `check_crc`, `segments` and `copy_to` on each
//! fragment, and a rewrite with `write_ferol_blocks` that must read back the same.
//!
//! The first input byte selects the mode: see `fixup.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod fixup;
use tessera_formats::fed::{Fragment, WORD_BYTES};
use tessera_formats::ferol::{FerolFragment, FerolStream, HEADER_BYTES, ferol_wire_len, write_ferol_blocks};

fuzz_target!(|input: &[u8]| {
    let data = &fixup::input(input, fixup::ferol_stream)[..];
    let mut stream = FerolStream::new(data);
    let mut expected_at = 0;
    let mut failed = false;
    while let Some(item) = stream.next() {
        assert!(!failed, "FerolStream yielded after an error");
        match item {
            Ok((at, f)) => {
                assert_eq!(at, expected_at, "fragments are back to back");
                assert!(at + f.wire_len() <= data.len());
                assert_eq!(f.as_bytes(), &data[at..at + f.wire_len()]);
                check_fragment(&f);
                expected_at = at + f.wire_len();
                assert_eq!(stream.position(), expected_at);
            }
            Err(e) => {
                assert!(e.offset().is_some_and(|o| o >= expected_at), "error offset is in the stream frame: {e}");
                assert_eq!(stream.position(), expected_at);
                let _ = e.to_string();
                failed = true;
            }
        }
    }
    if !failed {
        assert_eq!(expected_at, data.len(), "a stream read without error is read whole");
    }
});

fn check_fragment(f: &FerolFragment<'_>) {
    assert!(f.block_count() >= 1);
    assert_eq!(f.fragment_len(), f.trailer.length_words as usize * WORD_BYTES);
    assert_eq!(f.wire_len(), f.fragment_len() + HEADER_BYTES * f.block_count());
    let crc_ok = f.check_crc().is_ok();
    assert_eq!(crc_ok, f.computed_crc() == f.trailer.crc);

    // The segments are the fragment in pieces; copy_to puts them together.
    let segments: Vec<&[u8]> = f.segments().collect();
    assert_eq!(segments.len(), f.block_count());
    assert_eq!(segments.iter().map(|s| s.len()).sum::<usize>(), f.fragment_len());
    let mut copy = vec![0u8; f.fragment_len()];
    assert_eq!(f.copy_to(&mut copy).expect("copy fits"), f.fragment_len());
    assert_eq!(copy, segments.concat());
    assert!(f.copy_to(&mut copy[..f.fragment_len() - 1]).is_err(), "copy_to checks its buffer");

    // The copy is a FED fragment with the same fields and CRC.
    let whole = Fragment::parse(&copy).expect("a FEROL fragment's data is a FED fragment");
    assert_eq!(whole.header, f.header);
    assert_eq!(whole.trailer, f.trailer);
    assert_eq!(whole.computed_crc(), f.computed_crc());
    if f.block_count() == 1 {
        let single = f.as_single().expect("a one-block fragment is a fragment in place");
        assert_eq!(single.as_bytes(), &copy[..]);
    } else {
        assert!(f.as_single().is_none());
    }

    // Written again as FEROL blocks, it reads back the same.
    let mut wire = vec![0u8; ferol_wire_len(copy.len())];
    let n = write_ferol_blocks(&copy, &mut wire).expect("a parsed fragment can be written");
    assert_eq!(n, wire.len());
    let back = FerolFragment::parse(&wire).expect("written blocks parse");
    assert_eq!(back.wire_len(), n);
    assert_eq!(back.header, f.header);
    assert_eq!(back.trailer, f.trailer);
    assert_eq!(back.fragment_len(), f.fragment_len());
    assert_eq!(back.segments().collect::<Vec<_>>().concat(), copy);
}
