//! Seeded fragment content: every payload byte is a function of (run, source id, event number),
//! so any stage downstream of an emulator can recompute and check what it received.
//!
//! Word `i` of a payload is `mix(seed + (i + 1) · φ)`, with `seed` mixed from the three numbers
//! and `mix` the SplitMix64 finaliser: cheap, stateless, and the same on every host.

use crate::error::{Result, need_space};
use crate::fed::{FedHeader, FedTrailer, WORD_BYTES, event_type, fragment_len, lv1_id, seal_fragment};

/// SplitMix64's increment: 2^64 over the golden ratio.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: a stateless mix of 64 bits into 64. Every seeded number in Tessera
/// (payloads, the emulator's and the simulator's draws, the menu's random fractions) comes from
/// it, so that a seed gives the same numbers on every host.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: a seeded generator, the same sequence on every host for a seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// A number in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed of a payload.
pub fn payload_seed(run: u32, source_id: u16, event: u64) -> u64 {
    mix(mix(mix(u64::from(run)) ^ u64::from(source_id)) ^ event)
}

/// Word `index` of the payload with `seed`.
fn payload_word(seed: u64, index: usize) -> u64 {
    mix(seed.wrapping_add((index as u64 + 1).wrapping_mul(GOLDEN)))
}

/// Fills `out` (whole words; a trailing partial word is left untouched) with the seeded payload.
pub fn fill_payload(run: u32, source_id: u16, event: u64, out: &mut [u8]) {
    let seed = payload_seed(run, source_id, event);
    for (i, word) in out.chunks_exact_mut(WORD_BYTES).enumerate() {
        word.copy_from_slice(&payload_word(seed, i).to_le_bytes());
    }
}

/// The offset of the first payload byte that differs from the seeded content, if any.
pub fn first_payload_mismatch(run: u32, source_id: u16, event: u64, payload: &[u8]) -> Option<usize> {
    let seed = payload_seed(run, source_id, event);
    let whole = payload.len() / WORD_BYTES * WORD_BYTES;
    if let Some(i) = payload[..whole]
        .chunks_exact(WORD_BYTES)
        .enumerate()
        .position(|(i, w)| w != payload_word(seed, i).to_le_bytes())
    {
        let expected = payload_word(seed, i).to_le_bytes();
        let word = &payload[i * WORD_BYTES..(i + 1) * WORD_BYTES];
        let byte = word.iter().zip(expected).position(|(a, b)| *a != b).unwrap_or(0);
        return Some(i * WORD_BYTES + byte);
    }
    (whole != payload.len()).then_some(whole)
}

/// Writes a physics FED fragment with a seeded payload of `payload_bytes` (rounded up to whole
/// words) at the start of `out`; returns its length.
pub fn write_seeded_fragment(
    out: &mut [u8],
    run: u32,
    source_id: u16,
    event: u64,
    bx: u16,
    payload_bytes: usize,
) -> Result<usize> {
    let payload_bytes = payload_bytes.div_ceil(WORD_BYTES) * WORD_BYTES;
    let len = fragment_len(payload_bytes);
    need_space(out, len, "seeded FED fragment")?;
    fill_payload(run, source_id, event, &mut out[WORD_BYTES..WORD_BYTES + payload_bytes]);
    let header = FedHeader {
        event_type: event_type::PHYSICS,
        lv1_id: lv1_id(event),
        bx_id: bx,
        source_id,
        format_version: 0,
        more_headers: false,
    };
    seal_fragment(&mut out[..len], &header, &FedTrailer::default())?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::Fragment;

    #[test]
    fn content_depends_on_every_input_and_checks_back() {
        let mut a = vec![0u8; 64];
        fill_payload(1, 2, 3, &mut a);
        for (run, src, ev) in [(2, 2, 3), (1, 3, 3), (1, 2, 4)] {
            let mut b = vec![0u8; 64];
            fill_payload(run, src, ev, &mut b);
            assert_ne!(a, b);
        }
        assert_eq!(first_payload_mismatch(1, 2, 3, &a), None);
        a[42] ^= 0x10;
        assert_eq!(first_payload_mismatch(1, 2, 3, &a), Some(42));
        assert_eq!(first_payload_mismatch(1, 2, 3, &a[..5]), Some(0));
    }

    #[test]
    fn seeded_fragment_is_valid() {
        let mut out = vec![0u8; 256];
        let n = write_seeded_fragment(&mut out, 7, 33, (1 << 24) + 2, 100, 61).unwrap();
        assert_eq!(n, 64 + 16);
        let f = Fragment::parse(&out[..n]).unwrap();
        f.check_crc().unwrap();
        assert_eq!((f.header.source_id, f.header.lv1_id, f.header.bx_id), (33, 2, 100));
        assert_eq!(first_payload_mismatch(7, 33, (1 << 24) + 2, f.payload()), None);
    }
}
