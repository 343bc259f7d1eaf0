//! What the tests of the orbit modules share: fragments, orbit blocks and DTH streams to read.

use super::*;
use crate::crc::crc32c;
use crate::error::FormatError;

pub const SOURCE: u32 = 0x0102_0304;
pub const RUN: u32 = 123_456;
pub const ORBIT: u32 = 0x0A0B_0C0D;

pub fn info(event_id: u64) -> FragmentInfo {
    FragmentInfo {
        event_id,
        bx: (event_id % 3564) as u16,
        l1a_types: 0x0101,
        physics_type: 2,
        emulation_status: 1,
        status: 0,
        flags: 0,
    }
}

pub fn payload(event_id: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 ^ event_id.wrapping_mul(31)) as u8 | 1).collect()
}

/// An orbit block with one fragment per payload length, event ids 100, 101...
pub fn orbit_block(lens: &[usize]) -> Vec<u8> {
    let mut out = vec![0; 32 + lens.iter().map(|&l| orbit_fragment_len(l)).sum::<usize>()];
    let mut w = OrbitBlockWriter::new(&mut out, SOURCE, RUN, ORBIT).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        let id = 100 + i as u64;
        w.push_fragment(&info(id), &payload(id, len)).unwrap();
    }
    let n = w.finish().unwrap();
    assert_eq!(n, out.len());
    out
}

pub fn dth_stream(block: &[u8], max: usize) -> Vec<u8> {
    let mut out = vec![0; dth_wire_len(block.len(), max)];
    assert_eq!(write_dth_blocks(block, max, &mut out).unwrap(), out.len());
    out
}

/// Rewrites the orbit header's CRC after an edit, so that only the edited field is wrong.
pub fn reseal(block: &mut [u8]) {
    let crc = crc32c(&block[32..]);
    block[28..32].copy_from_slice(&crc.to_le_bytes());
}

pub fn walk_error(block: &[u8]) -> FormatError {
    OrbitBlock::parse(block).unwrap().validate().unwrap_err()
}
