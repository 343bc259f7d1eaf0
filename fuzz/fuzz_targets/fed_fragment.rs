//! FED fragments (SLINK-64): `Fragment::parse` with `check_crc`, and `Fragment::parse_from_end`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_formats::fed::{FedHeader, FedTrailer, Fragment, MIN_FRAGMENT_BYTES, WORD_BYTES, write_fragment};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Fragment::parse(data) {
        check_fragment(&f, data.len());
        let crc_ok = f.check_crc().is_ok();
        assert_eq!(crc_ok, f.computed_crc() == f.trailer.crc);
        assert_eq!(f.as_bytes(), data);
        // A whole fragment is also the fragment that ends the buffer, starting at 0.
        let (g, start) = Fragment::parse_from_end(data).expect("a valid fragment parses from its end");
        assert_eq!(start, 0);
        assert_eq!(g.header, f.header);
        assert_eq!(g.trailer, f.trailer);
        // Writing the same header, payload and trailer again gives a fragment with a good CRC and
        // the same decoded fields (the CRC aside).
        let mut out = vec![0u8; f.len()];
        let n = write_fragment(&mut out, &f.header, f.payload(), &f.trailer).expect("rewrite fits");
        assert_eq!(n, f.len());
        let w = Fragment::parse(&out).expect("a written fragment parses");
        w.check_crc().expect("a written fragment has a good CRC");
        assert_eq!(w.header, f.header);
        assert_eq!(w.payload(), f.payload());
        assert_eq!(FedTrailer { crc: f.trailer.crc, ..w.trailer }, f.trailer);
        // Reserved bits are not decoded, so only a fragment whose words re-encode exactly (reserved
        // bits zero) is written back byte for byte, good CRC included.
        let word = |at: usize| u64::from_le_bytes(data[at..at + WORD_BYTES].try_into().unwrap());
        let exact = f.header.to_word() == word(0) && f.trailer.to_word() == word(data.len() - WORD_BYTES);
        if crc_ok && exact {
            assert_eq!(out, data, "a clean fragment is written back byte for byte");
        }
    }

    if let Ok((f, start)) = Fragment::parse_from_end(data) {
        check_fragment(&f, data.len());
        assert_eq!(start + f.len(), data.len());
        assert_eq!(f.as_bytes(), &data[start..]);
        let g = Fragment::parse(&data[start..]).expect("parse_from_end's fragment parses in place");
        assert_eq!(g.header, f.header);
        assert_eq!(g.trailer, f.trailer);
        let _ = f.check_crc();
    }
});

/// Cheap invariants of any parsed fragment.
fn check_fragment(f: &Fragment<'_>, input_len: usize) {
    assert_eq!(f.len(), f.trailer.length_words as usize * WORD_BYTES);
    assert!(f.len() >= MIN_FRAGMENT_BYTES && f.len() <= input_len);
    assert_eq!(f.len() % WORD_BYTES, 0);
    assert_eq!(f.payload().len(), f.len() - MIN_FRAGMENT_BYTES);
    assert!(!f.is_empty());
    // Decoded words re-encode to words that decode to the same fields.
    assert_eq!(FedHeader::from_word(f.header.to_word(), 0).unwrap(), f.header);
    assert_eq!(FedTrailer::from_word(f.trailer.to_word(), 0).unwrap(), f.trailer);
}
