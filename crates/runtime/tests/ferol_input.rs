//! The RU's receive memory for a FEROL stream: fragments come out whole whatever the read sizes,
//! stay put until released, and a full pool stops the reading until releases make room.

use tessera_formats::fed::CrcCheck;
use tessera_formats::ferol::{FerolFragment, HEADER_BYTES, ferol_wire_len, write_ferol_blocks};
use tessera_formats::seeded::write_seeded_fragment;
use tessera_runtime::ferol_input::{ConfigError, StreamBuffer};

/// A stream of FED 7: `count` fragments whose sizes cycle from 64 bytes to 12 kB (three blocks).
fn stream(count: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut wire = Vec::new();
    let mut fragments = Vec::new();
    for event in 1..=count {
        let payload = (64 + (event as usize * 1_337) % 12_000) / 8 * 8;
        let mut f = vec![0u8; payload + 16];
        let n = write_seeded_fragment(&mut f, 1, 7, event, 3, payload).unwrap();
        f.truncate(n);
        let mut blocks = vec![0u8; ferol_wire_len(n)];
        write_ferol_blocks(&f, &mut blocks).unwrap();
        wire.extend_from_slice(&blocks);
        fragments.push(f);
    }
    (wire, fragments)
}

/// Reads `wire` into `buf` in pieces of the sizes `sizes` cycles through, taking fragments as
/// they complete; releases each `keep` fragments after it arrives. Returns the fragments'
/// contiguous bytes in order and how often the buffer was full.
fn receive(buf: &mut StreamBuffer, wire: &[u8], sizes: &[usize], keep: usize) -> (Vec<Vec<u8>>, usize) {
    let mut at = 0;
    let mut out = Vec::new();
    let mut held = std::collections::VecDeque::new();
    let mut full = 0;
    let mut i = 0;
    loop {
        while let Some(r) = buf.next_fragment() {
            let r = r.unwrap();
            assert!(r.problem.is_none(), "{:?}", r.problem);
            out.push(buf.segments(r.handle).flatten().copied().collect::<Vec<u8>>());
            assert_eq!(out.last().unwrap().len(), r.fragment_len);
            // A fragment of one block is found without reading its header again; one of several
            // has its headers read.
            let one_block = r.handle.wire_len as usize == HEADER_BYTES + r.fragment_len;
            assert_eq!(r.handle.head, if one_block { HEADER_BYTES as u32 } else { 0 });
            held.push_back(r.handle);
            if held.len() > keep {
                buf.release(held.pop_front().unwrap());
            }
        }
        if at == wire.len() {
            return (out, full);
        }
        let Some(spare) = buf.spare() else {
            full += 1;
            buf.release(held.pop_front().expect("a full buffer holds fragments"));
            continue;
        };
        let n = sizes[i % sizes.len()].min(spare.len()).min(wire.len() - at);
        i += 1;
        spare[..n].copy_from_slice(&wire[at..at + n]);
        buf.filled(n);
        at += n;
    }
}

#[test]
fn fragments_come_out_whole_whatever_the_read_sizes() {
    let (wire, fragments) = stream(300);
    for sizes in [&[1usize, 7, 4096][..], &[65536], &[13, 100_000, 3]] {
        let mut buf = StreamBuffer::new(7, 64 * 1024, 8, ferol_wire_len(12_100)).unwrap();
        let (out, _) = receive(&mut buf, &wire, sizes, 4);
        assert_eq!(out, fragments, "read sizes {sizes:?}");
        // Both ways of finding a fragment's data were taken.
        let one_block = |f: &Vec<u8>| ferol_wire_len(f.len()) == HEADER_BYTES + f.len();
        assert!(fragments.iter().any(one_block) && !fragments.iter().all(one_block));
    }
}

#[test]
fn a_full_pool_stops_reading_until_fragments_are_released() {
    let (wire, fragments) = stream(200);
    let mut buf = StreamBuffer::new(7, 32 * 1024, 3, ferol_wire_len(12_100)).unwrap();
    let (out, full) = receive(&mut buf, &wire, &[8192], 50);
    assert_eq!(out, fragments);
    assert!(full > 0, "holding 50 fragments must fill three 32 kB chunks");
}

#[test]
fn a_bad_crc_is_flagged_and_garbage_ends_the_stream_with_its_offset() {
    let (mut wire, _) = stream(3);
    let first = FerolFragment::parse(&wire).unwrap().wire_len();
    wire[40] ^= 1; // inside the first fragment's payload
    let second = FerolFragment::parse(&wire[first..]).unwrap().wire_len();
    wire[first + second] = 0x00; // the third fragment's signature
    let mut buf = StreamBuffer::new(7, 64 * 1024, 2, ferol_wire_len(12_100)).unwrap();
    let spare = buf.spare().unwrap();
    spare[..wire.len()].copy_from_slice(&wire);
    buf.filled(wire.len());
    let r1 = buf.next_fragment().unwrap().unwrap();
    let problem = r1.problem.expect("CRC-16 mismatch flagged").to_string();
    assert!(problem.starts_with("FED fragment: CRC-16 mismatch at byte 16"), "{problem}");
    assert!(buf.next_fragment().unwrap().unwrap().problem.is_none());
    let err = buf.next_fragment().unwrap().unwrap_err();
    assert_eq!(err.stream_offset, (first + second) as u64);
    assert!(
        err.to_string()
            .starts_with(&format!("FED 7 stream, byte {}: FEROL block header: bad signature", first + second))
    );
    assert!(buf.next_fragment().is_none(), "nothing more is read from a failed stream");
}

/// Every fragment of a 6-fragment stream carries a bad CRC-16: which ones a reader flags is the
/// check's choice, `always`, `{sampled: N}` (fragments 0, N, 2N, …) or `never`.
#[test]
fn the_crc_check_flags_every_sampled_or_no_fragment_as_configured() {
    let (mut wire, _) = stream(6);
    let mut at = 0;
    while at < wire.len() {
        let len = FerolFragment::parse(&wire[at..]).unwrap().wire_len();
        wire[at + 40] ^= 1; // inside the fragment's payload
        at += len;
    }
    for (check, flagged) in [
        (CrcCheck::Always, vec![0, 1, 2, 3, 4, 5]),
        (CrcCheck::Sampled(2), vec![0, 2, 4]),
        (CrcCheck::Sampled(4), vec![0, 4]),
        (CrcCheck::Never, vec![]),
    ] {
        let mut buf = StreamBuffer::new(7, 128 * 1024, 2, ferol_wire_len(12_100)).unwrap().with_crc_check(check);
        buf.spare().unwrap()[..wire.len()].copy_from_slice(&wire);
        buf.filled(wire.len());
        let seen: Vec<usize> = (0..6).filter(|_| buf.next_fragment().unwrap().unwrap().problem.is_some()).collect();
        assert_eq!(seen, flagged, "{check:?}");
    }
}

#[test]
fn impossible_pools_are_refused() {
    assert_eq!(
        StreamBuffer::new(7, 4096, 4, 8192).err(),
        Some(ConfigError::ChunkTooSmall { chunk_bytes: 4096, max_wire_bytes: 8192 })
    );
    assert_eq!(StreamBuffer::new(7, 8192, 1, 4096).err(), Some(ConfigError::TooFewChunks(1)));
}

#[test]
fn a_fragment_flagged_for_a_wrong_fed_id_has_only_its_f_bit_set_and_its_crc_still_holds() {
    use tessera_formats::fed::Fragment;
    let (wire, sent) = stream(9);
    let mut buf = StreamBuffer::new(7, 1 << 20, 2, 64 << 10).unwrap();
    buf.spare().unwrap()[..wire.len()].copy_from_slice(&wire);
    buf.filled(wire.len());
    let received: Vec<_> = std::iter::from_fn(|| buf.next_fragment()).map(Result::unwrap).collect();
    assert_eq!(received.len(), 9);
    // The largest takes several blocks: its trailer is in the last one.
    let big = (0..9).max_by_key(|&i| received[i].handle.wire_len).unwrap();
    let blocks = |i: usize| (received[i].handle.wire_len as usize - received[i].fragment_len) / HEADER_BYTES;
    assert_eq!((blocks(0), blocks(big) > 1), (1, true));
    for i in [0, big] {
        buf.flag_wrong_fed_id(received[i].handle);
        let bytes: Vec<u8> = buf.segments(received[i].handle).flatten().copied().collect();
        let fragment = Fragment::parse(&bytes).unwrap();
        assert!(fragment.trailer.wrong_fed_id, "fragment {}", i + 1);
        fragment.check_crc().unwrap();
        let mut expected = sent[i].clone();
        let at = expected.len() - 7;
        expected[at] |= 0x40;
        assert_eq!(bytes, expected, "fragment {}: nothing but the F bit changed", i + 1);
    }
    let untouched: Vec<u8> = buf.segments(received[1].handle).flatten().copied().collect();
    assert_eq!(untouched, sent[1]);
}

/// The DTH stream of source 7: one orbit block per orbit number in `orbits`, `events` fragments
/// of 200 bytes each, cut into stream blocks of at most 1 kB.
fn dth_stream(orbits: &[u32], events: usize) -> Vec<u8> {
    use tessera_formats::orbit::{FragmentInfo, OrbitBlockWriter, dth_wire_len, orbit_fragment_len, write_dth_blocks};
    let mut wire = Vec::new();
    for &orbit in orbits {
        let mut block = vec![0u8; 32 + events * orbit_fragment_len(200)];
        let mut w = OrbitBlockWriter::new(&mut block, 7, 1, orbit).unwrap();
        for e in 0..events {
            let info = FragmentInfo {
                event_id: e as u64,
                bx: 1,
                l1a_types: 1,
                physics_type: 1,
                emulation_status: 0,
                status: 0,
                flags: 0,
            };
            w.push_fragment(&info, &[e as u8; 200]).unwrap();
        }
        let n = w.finish().unwrap();
        let mut blocks = vec![0u8; dth_wire_len(n, 1024)];
        write_dth_blocks(&block[..n], 1024, &mut blocks).unwrap();
        wire.extend_from_slice(&blocks);
    }
    wire
}

#[test]
fn a_dth_stream_gives_orbit_blocks_numbered_by_their_index_in_the_run_and_flags_a_bad_crc() {
    use tessera_runtime::ferol_input::Framing;
    // Four orbits per lumi section: orbit 2^18 + 1 is the run's sixth (index 5).
    let mut wire = dth_stream(&[3, 1 << 18, (1 << 18) + 1], 5);
    let framing = Framing::Dth { orbits_per_lumi_section: 4 };
    // The second orbit's CRC-32C, its orbit header's last word, flipped.
    let second = wire.len() / 3;
    wire[second + 16 + 28] ^= 1;
    let mut buf = StreamBuffer::new(7, 1 << 20, 2, 64 << 10).unwrap().with_framing(framing);
    buf.spare().unwrap()[..wire.len()].copy_from_slice(&wire);
    buf.filled(wire.len());
    let received: Vec<_> = std::iter::from_fn(|| buf.next_fragment()).map(Result::unwrap).collect();
    let lv1s: Vec<u32> = received.iter().map(|r| r.lv1).collect();
    assert_eq!(lv1s, [3, 4, 5]);
    let problems: Vec<bool> = received.iter().map(|r| r.problem.is_some()).collect();
    assert_eq!(problems, [false, true, false], "only the flipped CRC-32C is a problem");
    // The pieces a BU is sent are the orbit block itself, without the stream block headers.
    let block: Vec<u8> = buf.segments(received[0].handle).flatten().copied().collect();
    assert_eq!((block.len(), &block[..2]), (received[0].fragment_len, &b"HO"[..]));
}

#[test]
fn an_orbit_outside_the_runs_numbering_or_larger_than_a_chunk_ends_its_stream_and_says_why() {
    use tessera_runtime::ferol_input::Framing;
    let framing = Framing::Dth { orbits_per_lumi_section: 4 };
    let wire = dth_stream(&[1, 9], 2); // orbit 9 is past its section's 4 orbits
    let mut buf = StreamBuffer::new(7, 1 << 20, 2, 64 << 10).unwrap().with_framing(framing);
    buf.spare().unwrap()[..wire.len()].copy_from_slice(&wire);
    buf.filled(wire.len());
    assert_eq!(buf.next_fragment().unwrap().unwrap().lv1, 1);
    let e = buf.next_fragment().unwrap().unwrap_err().to_string();
    assert!(e.contains("orbit header") && e.contains("orbit") && e.contains("first 4"), "{e}");
    assert!(buf.next_fragment().is_none(), "nothing more is read from a broken stream");

    let wire = dth_stream(&[1], 40); // 40 fragments of 248 bytes: more than a 4 kB chunk
    let mut buf = StreamBuffer::new(7, 4096, 2, 4096).unwrap().with_framing(framing);
    let room = buf.spare().unwrap().len();
    buf.spare().unwrap()[..room].copy_from_slice(&wire[..room]);
    buf.filled(room);
    let e = buf.next_fragment().unwrap().unwrap_err().to_string();
    assert!(e.contains("at most a chunk of receive memory, 4096 bytes"), "{e}");
}
