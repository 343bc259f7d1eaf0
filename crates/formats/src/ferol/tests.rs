//! Tests of FEROL block framing: parsing, refusals with their offsets, and round trips.

use super::*;
use crate::fed::write_fragment;
use proptest::prelude::*;

/// docs/formats.md §10: the 3-word fragment (FED 1, LV1 id 1).
const VECTOR: [u8; 24] = [
    0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00, 0x85,
    0x2f, 0x03, 0x00, 0x00, 0xa0,
];

/// A fragment with `payload_words` words of payload that differ from each other.
fn fragment(source_id: u16, lv1_id: u32, payload_words: usize) -> Vec<u8> {
    let payload: Vec<u8> =
        (0..payload_words as u64).flat_map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5).to_le_bytes()).collect();
    let header = FedHeader { event_type: 1, lv1_id, bx_id: 7, source_id, format_version: 0, more_headers: false };
    let mut out = vec![0; payload.len() + 16];
    write_fragment(&mut out, &header, &payload, &FedTrailer::default()).unwrap();
    out
}

fn stream_of(fragment: &[u8]) -> Vec<u8> {
    let mut out = vec![0; ferol_wire_len(fragment.len())];
    assert_eq!(write_ferol_blocks(fragment, &mut out).unwrap(), out.len());
    out
}

/// Block header offsets of a stream holding one fragment.
fn block_offsets(stream: &[u8]) -> Vec<usize> {
    let mut offsets = vec![];
    let mut pos = 0;
    while pos < stream.len() {
        offsets.push(pos);
        pos += HEADER_BYTES + FerolBlockHeader::parse(stream, pos).unwrap().data_words as usize * 8;
    }
    offsets
}

fn rewrite_header(stream: &mut [u8], at: usize, edit: impl FnOnce(&mut FerolBlockHeader)) {
    let mut h = FerolBlockHeader::parse(stream, at).unwrap();
    edit(&mut h);
    stream[at..at + 16].copy_from_slice(&h.to_bytes());
}

fn bad_field(err: FormatError) -> (&'static str, &'static str, usize) {
    match err {
        FormatError::BadField { what, field, offset, .. } => (what, field, offset),
        other => panic!("expected BadField, got {other:?}"),
    }
}

#[test]
fn header_bytes_are_big_endian_with_the_documented_bits() {
    let h = FerolBlockHeader {
        first: true,
        last: true,
        block_number: 0x0102,
        data_words: 3,
        fed_id: 0xABC,
        event_number: 0x12_3456,
    };
    assert_eq!(
        h.to_bytes(),
        [0x47, 0x5A, 0x01, 0x02, 0xC0, 0x00, 0x00, 0x03, 0x0A, 0xBC, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56]
    );
    assert_eq!(FerolBlockHeader::parse(&h.to_bytes(), 0).unwrap(), h);
    // Fields wider than their bits are cut to them on write.
    let wide = FerolBlockHeader { fed_id: 0xFABC, event_number: 0xFF12_3456, ..h };
    assert_eq!(FerolBlockHeader::parse(&wide.to_bytes(), 0).unwrap(), h);
}

#[test]
fn header_parse_ignores_unassigned_bits_and_reads_at_offset() {
    let h =
        FerolBlockHeader { first: false, last: true, block_number: 9, data_words: 510, fed_id: 5, event_number: 77 };
    let mut buf = vec![0xEE; 5];
    buf.extend_from_slice(&h.to_bytes());
    buf[5 + 5] |= 0x3F; // word 0 bits 29:24
    buf[5 + 6] |= 0xFC; // word 0 bits 23:10
    buf[5 + 8] |= 0xF0; // word 1 bits 63:60
    buf[5 + 10] = 0xFF; // word 1 bits 47:40
    assert_eq!(FerolBlockHeader::parse(&buf, 5).unwrap(), h);
}

#[test]
fn header_parse_errors() {
    let h = FerolBlockHeader { first: true, last: true, block_number: 0, data_words: 1, fed_id: 1, event_number: 1 };
    let mut buf = vec![0u8; 3];
    buf.extend_from_slice(&h.to_bytes());
    assert_eq!(
        FerolBlockHeader::parse(&buf[..18], 3).unwrap_err(),
        FormatError::truncated("FEROL block header", 3, 16, 15)
    );
    assert_eq!(FerolBlockHeader::parse(&buf, 40).unwrap_err(), FormatError::truncated("FEROL block header", 40, 16, 0));
    let mut b = buf.clone();
    b[4] = 0x5B;
    assert_eq!(
        FerolBlockHeader::parse(&b, 3).unwrap_err(),
        FormatError::bad("FEROL block header", "signature", 3, hex(0x475Au16), hex(0x475Bu16))
    );
    for words in [0u16, 511, 1023] {
        let mut b = buf.clone();
        let raw = FerolBlockHeader { data_words: words, ..h }.to_bytes();
        b[3..].copy_from_slice(&raw);
        assert_eq!(
            FerolBlockHeader::parse(&b, 3).unwrap_err(),
            FormatError::bad("FEROL block header", "data length (words)", 3, "1..=510", dec(words))
        );
    }
}

#[test]
fn wire_len_counts_one_header_per_4080_bytes() {
    assert_eq!(ferol_wire_len(0), 0);
    assert_eq!(ferol_wire_len(16), 32);
    assert_eq!(ferol_wire_len(4080), 4096);
    assert_eq!(ferol_wire_len(4088), 4088 + 32);
    assert_eq!(ferol_wire_len(3 * 4080), 3 * 4096);
    assert_eq!(ferol_wire_len(usize::MAX), usize::MAX);
}

#[test]
fn writes_the_formats_md_vector_in_one_block() {
    let out = stream_of(&VECTOR);
    assert_eq!(&out[..16], &[0x47, 0x5A, 0, 0, 0xC0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 0, 1]);
    assert_eq!(&out[16..], &VECTOR);
    let f = FerolFragment::parse(&out).unwrap();
    assert_eq!((f.wire_len(), f.block_count(), f.fragment_len()), (40, 1, 24));
    assert_eq!(f.as_single().unwrap().as_bytes(), &VECTOR);
    f.check_crc().unwrap();
    assert_eq!(f.computed_crc(), 0x2F85);
}

#[test]
fn blocks_plan_splits_at_4080_bytes() {
    let frag = fragment(0x123, 0xFF_FFFF, 1020 - 2 + 3); // 4080 * 2 + 24 bytes
    let blocks: Vec<FerolBlock> = FerolBlocks::new(&frag).unwrap().collect();
    assert_eq!(blocks.len(), 3);
    assert_eq!(FerolBlocks::new(&frag).unwrap().size_hint(), (3, Some(3)));
    let ranges: Vec<_> = blocks.iter().map(|b| b.data.clone()).collect();
    assert_eq!(ranges, vec![0..4080, 4080..8160, 8160..8184]);
    let flags: Vec<_> = blocks.iter().map(|b| (b.header.block_number, b.header.first, b.header.last)).collect();
    assert_eq!(flags, vec![(0, true, false), (1, false, false), (2, false, true)]);
    assert!(blocks.iter().all(|b| b.header.fed_id == 0x123 && b.header.event_number == 0xFF_FFFF));
    assert_eq!(blocks.iter().map(|b| b.header.data_words).collect::<Vec<_>>(), vec![510, 510, 3]);
    assert_eq!(FerolBlocks::new(&frag).unwrap().wire_len(), 8184 + 48);
}

#[test]
fn multi_block_round_trip() {
    let frag = fragment(700, 42, 2000);
    let out = stream_of(&frag);
    assert_eq!(block_offsets(&out), vec![0, 4096, 8192, 12288]);
    let f = FerolFragment::parse(&out).unwrap();
    assert_eq!((f.block_count(), f.fragment_len(), f.wire_len()), (4, frag.len(), out.len()));
    assert_eq!(f.header.source_id, 700);
    assert_eq!(f.header.lv1_id, 42);
    assert_eq!(f.trailer.length_words as usize, frag.len() / 8);
    assert_eq!(f.segments().map(<[u8]>::len).collect::<Vec<_>>(), vec![4080, 4080, 4080, frag.len() - 3 * 4080]);
    assert_eq!(f.segments().flatten().copied().collect::<Vec<u8>>(), frag);
    // The blocks as a receiver keeps them give the same pieces without being read again.
    assert!(FerolFragment::segments_of(f.as_bytes()).eq(f.segments()));
    let mut copy = vec![0; frag.len()];
    assert_eq!(f.copy_to(&mut copy).unwrap(), frag.len());
    assert_eq!(copy, frag);
    assert!(f.as_single().is_none());
    assert_eq!(f.computed_crc(), fed::fragment_crc(&frag));
    f.check_crc().unwrap();
    assert_eq!(
        f.copy_to(&mut copy[1..]).unwrap_err(),
        FormatError::BufferTooSmall { what: "FED fragment", needed: frag.len(), available: frag.len() - 1 }
    );
}

#[test]
fn writer_errors() {
    let mut out = vec![0; 100];
    let err = write_ferol_blocks(&VECTOR[..20], &mut out).unwrap_err();
    assert_eq!(bad_field(err), ("FED fragment", "size", 0));
    let err = write_ferol_blocks(&VECTOR[..8], &mut out).unwrap_err();
    assert_eq!(bad_field(err), ("FED fragment", "size", 0));
    let mut v = VECTOR;
    v[7] = 0x61;
    assert_eq!(
        write_ferol_blocks(&v, &mut out).unwrap_err(),
        FormatError::bad("FED header", "BOE marker", 0, hex(5u8), hex(6u8))
    );
    assert_eq!(
        write_ferol_blocks(&VECTOR, &mut out[..39]).unwrap_err(),
        FormatError::BufferTooSmall { what: "FEROL blocks", needed: 40, available: 39 }
    );
    let huge = vec![0u8; (MAX_FRAGMENT_WORDS as usize + 1) * 8];
    assert_eq!(bad_field(FerolBlocks::new(&huge).unwrap_err()), ("FED fragment", "size (words)", 0));
}

#[test]
fn every_prefix_is_truncated() {
    let out = stream_of(&fragment(3, 4, 1100));
    for len in 0..out.len() {
        let err = FerolFragment::parse(&out[..len]).unwrap_err();
        assert!(err.is_truncated(), "prefix {len}: {err}");
    }
    // The two kinds: a header cut short, a block's data cut short.
    assert_eq!(
        FerolFragment::parse(&out[..4100]).unwrap_err(),
        FormatError::truncated("FEROL block header", 4096, 16, 4)
    );
    assert_eq!(FerolFragment::parse(&out[..5000]).unwrap_err(), FormatError::truncated("FEROL block", 4096, 4096, 904));
}

#[test]
fn block_chain_errors() {
    let good = stream_of(&fragment(9, 10, 1100)); // three blocks at 0, 4096, 8192
    let check = |edit: &dyn Fn(&mut Vec<u8>), expected: FormatError| {
        let mut s = good.clone();
        edit(&mut s);
        assert_eq!(FerolFragment::parse(&s).unwrap_err(), expected);
    };
    check(&|s| s[8192] = 0, FormatError::bad("FEROL block header", "signature", 8192, hex(0x475Au16), hex(0x005Au16)));
    check(
        &|s| rewrite_header(s, 0, |h| h.first = false),
        FormatError::bad("FEROL block header", "first-block flag", 0, dec(1), dec(0)),
    );
    check(
        &|s| rewrite_header(s, 4096, |h| h.first = true),
        FormatError::bad("FEROL block header", "first-block flag", 4096, dec(0), dec(1)),
    );
    check(
        &|s| rewrite_header(s, 0, |h| h.block_number = 1),
        FormatError::bad("FEROL block header", "block number", 0, dec(0), dec(1)),
    );
    check(
        &|s| rewrite_header(s, 8192, |h| h.block_number = 3),
        FormatError::bad("FEROL block header", "block number", 8192, dec(2), dec(3)),
    );
    check(
        &|s| rewrite_header(s, 4096, |h| h.fed_id = 8),
        FormatError::bad("FEROL block header", "FED id", 4096, dec(9), dec(8)),
    );
    check(
        &|s| rewrite_header(s, 8192, |h| h.event_number = 11),
        FormatError::bad("FEROL block header", "event number", 8192, dec(10), dec(11)),
    );
    check(
        &|s| rewrite_header(s, 4096, |h| h.data_words = 0),
        FormatError::bad("FEROL block header", "data length (words)", 4096, "1..=510", dec(0)),
    );
    // A last flag too early ends the fragment there: the trailer is not where it should be.
    check(
        &|s| rewrite_header(s, 4096, |h| h.last = true),
        FormatError::bad("FED trailer", "EOE marker", 8184, hex(0xAu8), hex(good[8191] >> 4)),
    );
}

#[test]
fn fed_header_and_trailer_errors() {
    let good = stream_of(&fragment(9, 10, 1100));
    let end = good.len();
    let check = |edit: &dyn Fn(&mut Vec<u8>), expected: FormatError| {
        let mut s = good.clone();
        edit(&mut s);
        assert_eq!(FerolFragment::parse(&s).unwrap_err(), expected);
    };
    check(&|s| s[23] = 0x41, FormatError::bad("FED header", "BOE marker", 16, hex(5u8), hex(4u8)));
    check(
        &|s| (0..3).for_each(|b| rewrite_header(s, b * 4096, |h| h.fed_id = 10)),
        FormatError::bad("FEROL block header", "FED id", 0, dec(9), dec(10)),
    );
    check(
        &|s| (0..3).for_each(|b| rewrite_header(s, b * 4096, |h| h.event_number = 11)),
        FormatError::bad("FEROL block header", "event number", 0, dec(10), dec(11)),
    );
    check(&|s| s[end - 1] = 0xB0, FormatError::bad("FED trailer", "EOE marker", end - 8, hex(0xAu8), hex(0xBu8)));
    check(
        &|s| s[end - 4] ^= 1,
        FormatError::bad("FED fragment", "trailer length (words)", end - 8, dec(1102), dec(1103)),
    );
    // The last block shortened by a word: the trailer is now the last payload word.
    let mut s = good.clone();
    rewrite_header(&mut s, 8192, |h| h.data_words -= 1);
    let err = FerolFragment::parse(&s).unwrap_err();
    assert_eq!(err.offset(), Some(end - 16));
}

#[test]
fn a_fed_header_naming_another_fed_is_framed_by_its_blocks() {
    let good = stream_of(&fragment(9, 10, 1100));
    let mut s = good.clone();
    (0..3).for_each(|b| rewrite_header(&mut s, b * 4096, |h| h.fed_id = 10));
    let expected = FormatError::bad("FEROL block header", "FED id", 0, dec(9), dec(10));
    let (f, wrong) = FerolFragment::parse_framed(&s).unwrap();
    assert_eq!(wrong, Some(expected));
    assert_eq!((f.header.source_id, f.wire_len(), f.fragment_len()), (9, good.len(), 1102 * 8));
    let (_, none) = FerolFragment::parse_framed(&good).unwrap();
    assert_eq!(none, None);
    // Framing errors still fail it.
    rewrite_header(&mut s, 4096, |h| h.block_number = 3);
    assert!(FerolFragment::parse_framed(&s).is_err());
}

#[test]
fn crc_error_is_reported_at_the_fed_header() {
    let mut s = stream_of(&fragment(9, 10, 1100));
    s[5000] ^= 0x10;
    let f = FerolFragment::parse(&s).unwrap();
    let stored = f.trailer.crc;
    assert_eq!(
        f.check_crc().unwrap_err(),
        FormatError::Checksum {
            what: "FED fragment",
            checksum: "CRC-16",
            offset: 16,
            stored: stored.into(),
            computed: f.computed_crc().into()
        }
    );
    assert_ne!(f.computed_crc(), stored);
}

#[test]
fn stream_yields_offsets_and_stops_after_an_error() {
    let a = stream_of(&fragment(5, 1, 1));
    let b = stream_of(&fragment(5, 2, 600));
    let c = stream_of(&VECTOR);
    let mut s = [a.clone(), b.clone(), c.clone()].concat();
    let got: Vec<(usize, u32)> =
        FerolStream::new(&s).map(|r| r.map(|(at, f)| (at, f.header.lv1_id)).unwrap()).collect();
    assert_eq!(got, vec![(0, 1), (a.len(), 2), (a.len() + b.len(), 1)]);

    // A trailing partial fragment: Truncated at its stream offset, position stays at its start.
    let cut = s.len() - 3;
    let mut stream = FerolStream::new(&s[..cut]);
    assert!(stream.next().unwrap().is_ok());
    assert!(stream.next().unwrap().is_ok());
    let err = stream.next().unwrap().unwrap_err();
    assert_eq!(err, FormatError::truncated("FEROL block", a.len() + b.len(), 40, 37));
    assert_eq!(stream.position(), a.len() + b.len());
    assert!(stream.next().is_none());

    // A bad block in the middle: the error is shifted and nothing follows it.
    s[a.len() + 4096 + 1] = 0;
    let results: Vec<_> = FerolStream::new(&s).collect();
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[1].clone().unwrap_err(),
        FormatError::bad("FEROL block header", "signature", a.len() + 4096, hex(0x475Au16), hex(0x4700u16))
    );
    assert!(FerolStream::new(&[]).next().is_none());
}

proptest! {
    #[test]
    fn prop_round_trip(sizes in proptest::collection::vec((0usize..1600, 0u16..4096, 0u32..(1 << 24)), 1..5)) {
        let frags: Vec<Vec<u8>> = sizes.iter().map(|&(words, id, lv1)| fragment(id, lv1, words)).collect();
        let stream: Vec<u8> = frags.iter().flat_map(|f| stream_of(f)).collect();
        let mut n = 0;
        let mut expected_at = 0;
        for (r, frag) in FerolStream::new(&stream).zip(&frags) {
            let (at, f) = r.unwrap();
            prop_assert_eq!(at, expected_at);
            expected_at += f.wire_len();
            prop_assert_eq!(f.wire_len(), ferol_wire_len(frag.len()));
            prop_assert_eq!(f.block_count(), frag.len().div_ceil(MAX_DATA_BYTES));
            let mut copy = vec![0; frag.len()];
            f.copy_to(&mut copy).unwrap();
            prop_assert_eq!(&copy, frag);
            prop_assert!(f.check_crc().is_ok());
            n += 1;
        }
        prop_assert_eq!(n, frags.len());
    }

    #[test]
    fn prop_header_round_trip(first: bool, last: bool, block_number: u16, data_words in 1u16..=510,
                              fed_id in 0u16..4096, event_number in 0u32..(1 << 24)) {
        let h = FerolBlockHeader { first, last, block_number, data_words, fed_id, event_number };
        prop_assert_eq!(FerolBlockHeader::parse(&h.to_bytes(), 0).unwrap(), h);
    }

    #[test]
    fn prop_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), words in 1u16..=510, last: bool) {
        let _ = FerolBlockHeader::parse(&bytes, 3);
        exercise(&bytes);
        // The same bytes behind a valid block header reach the FED header and trailer checks.
        let header = FerolBlockHeader { first: true, last, block_number: 0, data_words: words, fed_id: 0, event_number: 0 };
        let mut framed = header.to_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        exercise(&framed);
    }

    #[test]
    fn prop_corrupted_streams_never_panic(words in 0usize..1200, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut s = stream_of(&fragment(1, 2, words));
        s.extend(stream_of(&VECTOR));
        for (at, v) in flips {
            let i = at % s.len();
            s[i] ^= v;
        }
        exercise(&s);
    }
}

/// Runs every reader over `bytes`; only panics matter, and copies of what parsed.
fn exercise(bytes: &[u8]) {
    let mut out = vec![0; bytes.len()];
    for (_, f) in FerolStream::new(bytes).flatten() {
        let _ = (f.check_crc(), f.as_single());
        assert_eq!(f.copy_to(&mut out).unwrap(), f.fragment_len());
        assert_eq!(f.segments().count(), f.block_count());
    }
}
