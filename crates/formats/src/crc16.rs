//! CRC-16/CMS over 64-bit words taken most significant byte first (docs/formats.md §1), by
//! carry-less multiplication where the CPU has it, and by table otherwise.
//!
//! A 16-bit CRC is the top half of a 32-bit CRC whose generator is the 16-bit one times x^16
//! (here x^32 + x^31 + x^18 + x^16), so the folding of the usual 32-bit CLMUL engine computes it.
//! The word order costs nothing there: a 16-byte block of two little-endian words, taken most
//! significant byte first word by word, is the block with its two 64-bit halves swapped, which
//! is how the block is loaded anyway. Four accumulators fold 64 bytes a turn; what is left (and
//! the 128 bits of the folded state) goes through tables a word at a time (slicing by 8), and a
//! byte-at-a-time table is the reference both are tested against.

/// The generator, x^16 + x^15 + x^2 + 1.
const POLY16: u16 = 0x8005;

/// The table of the bytewise CRC-16 (most significant bit first).
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ POLY16 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// `SLICES[k][v]`: the CRC, from 0, of byte `v` followed by `k` zero bytes: a word's eight
/// bytes are looked up at once ("slicing by 8") rather than one after another.
const SLICES: [[u16; 256]; 8] = {
    let mut slices = [[0u16; 256]; 8];
    slices[0] = TABLE;
    let mut k = 1;
    while k < 8 {
        let mut v = 0;
        while v < 256 {
            let prev = slices[k - 1][v];
            slices[k][v] = (prev << 8) ^ TABLE[(prev >> 8) as usize];
            v += 1;
        }
        k += 1;
    }
    slices
};

/// Feeds `bytes` (in message order) into the CRC `crc`, a byte at a time: the tests' reference.
#[cfg(test)]
fn table_bytes(mut crc: u16, bytes: impl IntoIterator<Item = u8>) -> u16 {
    for b in bytes {
        crc = (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// Feeds one word, most significant byte first.
pub(crate) fn table_word(crc: u16, word: u64) -> u16 {
    let x = word ^ (u64::from(crc) << 48);
    let byte = |k: u32| usize::from((x >> (56 - 8 * k)) as u8);
    SLICES[7][byte(0)]
        ^ SLICES[6][byte(1)]
        ^ SLICES[5][byte(2)]
        ^ SLICES[4][byte(3)]
        ^ SLICES[3][byte(4)]
        ^ SLICES[2][byte(5)]
        ^ SLICES[1][byte(6)]
        ^ SLICES[0][byte(7)]
}

/// Feeds whole little-endian words, each most significant byte first.
fn table_words(crc: u16, words: &[u8]) -> u16 {
    words.chunks_exact(8).fold(crc, |crc, w| table_word(crc, u64::from_le_bytes(w.try_into().expect("8 bytes"))))
}

/// The CRC, from `crc`, of the whole words of `bytes` (a trailing partial word is ignored), the
/// last one with the bits of `last_word_mask` taken as zero.
pub(crate) fn crc16_words(crc: u16, bytes: &[u8], last_word_mask: u64) -> u16 {
    let whole = bytes.len() / 8 * 8;
    if whole == 0 {
        return crc;
    }
    let (body, last) = bytes[..whole].split_at(whole - 8);
    let crc = fast::words(crc, body).unwrap_or_else(|| table_words(crc, body));
    table_word(crc, u64::from_le_bytes(last.try_into().expect("one word")) & !last_word_mask)
}

/// `x^n mod P` for the 32-bit generator P = x^32 + x^31 + x^18 + x^16, as 32 bits.
const fn x_pow_mod(n: u32) -> u64 {
    const P: u64 = 0x1_8005_0000;
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= P;
        }
        i += 1;
    }
    r
}

#[cfg(target_arch = "x86_64")]
mod fast {
    use super::{table_word, x_pow_mod};
    use std::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set_epi64x, _mm_unpackhi_epi64, _mm_xor_si128,
    };

    /// Folding by `d` bits takes `(x^(d+64) mod P, x^d mod P)`.
    const fn fold_keys(d: u32) -> (i64, i64) {
        (x_pow_mod(d + 64) as i64, x_pow_mod(d) as i64)
    }
    const BY_512: (i64, i64) = fold_keys(512);
    const BY_384: (i64, i64) = fold_keys(384);
    const BY_256: (i64, i64) = fold_keys(256);
    const BY_128: (i64, i64) = fold_keys(128);

    /// The CRC of `words` (whole words, at least 64 bytes of them) from `crc`, or `None` when
    /// the CPU lacks carry-less multiplication or there is too little to fold.
    pub(super) fn words(crc: u16, words: &[u8]) -> Option<u16> {
        if words.len() < 64 || !std::arch::is_x86_feature_detected!("pclmulqdq") {
            return None;
        }
        // The one unsafe call of the crate: the kernel needs `pclmulqdq`, which was just found.
        #[allow(unsafe_code)]
        // SAFETY: the CPU has pclmulqdq (checked above) and SSE2 (every x86_64 has it).
        Some(unsafe { fold(crc, words) })
    }

    /// Block `i` of 16 bytes of `bytes`, arranged so that bit 127 is the message's first bit:
    /// the first word, taken most significant byte first, is the high half.
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn block(bytes: &[u8], i: usize) -> __m128i {
        let word =
            |k: usize| i64::from_le_bytes(bytes[16 * i + 8 * k..16 * i + 8 * k + 8].try_into().expect("8 bytes"));
        _mm_set_epi64x(word(0), word(1))
    }

    /// `a` folded forward by the distance whose keys are `keys`.
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold_by(a: __m128i, keys: (i64, i64)) -> __m128i {
        let k = _mm_set_epi64x(keys.0, keys.1);
        // High half times x^(d+64) mod P, low half times x^d mod P.
        _mm_xor_si128(_mm_clmulepi64_si128::<0x11>(a, k), _mm_clmulepi64_si128::<0x00>(a, k))
    }

    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold(crc: u16, bytes: &[u8]) -> u16 {
        let blocks = bytes.len() / 16;
        let mut acc = [block(bytes, 0), block(bytes, 1), block(bytes, 2), block(bytes, 3)];
        // The running CRC is the initial value of the first 16 bits of the message.
        acc[0] = _mm_xor_si128(acc[0], _mm_set_epi64x((u64::from(crc) << 48) as i64, 0));
        let mut next = 4;
        while next + 4 <= blocks {
            for (k, a) in acc.iter_mut().enumerate() {
                *a = _mm_xor_si128(fold_by(*a, BY_512), block(bytes, next + k));
            }
            next += 4;
        }
        let mut r = _mm_xor_si128(
            _mm_xor_si128(fold_by(acc[0], BY_384), fold_by(acc[1], BY_256)),
            _mm_xor_si128(fold_by(acc[2], BY_128), acc[3]),
        );
        while next < blocks {
            r = _mm_xor_si128(fold_by(r, BY_128), block(bytes, next));
            next += 1;
        }
        // The state is congruent to the message so far: its CRC from 0, then the odd word.
        let (high, low) = (_mm_cvtsi128_si64(_mm_unpackhi_epi64(r, r)), _mm_cvtsi128_si64(r));
        let crc = table_word(table_word(0, high as u64), low as u64);
        super::table_words(crc, &bytes[16 * blocks..])
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fast {
    /// No carry-less multiplication here: the table does it all.
    pub(super) fn words(_crc: u16, _words: &[u8]) -> Option<u16> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The table, word by word, is the reference: the catalogue's check value through it.
    #[test]
    fn the_table_gives_the_catalogue_check_value() {
        assert_eq!(table_bytes(0xFFFF, *b"123456789"), 0xAEE7);
    }

    /// The folding path runs here (the property test below compares it with the table), and
    /// under CI it must: a machine without carry-less multiplication would test the table alone.
    #[test]
    fn the_folding_path_runs_on_this_machine() {
        let runs = fast::words(0xFFFF, &[0x5A; 128]).is_some();
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(runs || !ci, "no carry-less multiplication on this CPU: the CRC-16 fold is not tested");
        if runs {
            let reference = table_bytes(0xFFFF, [0x5A; 128]);
            assert_eq!(fast::words(0xFFFF, &[0x5A; 128]), Some(reference));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The folding path gives the table's CRC for every length, start value and mask.
        #[test]
        fn folding_gives_the_table_s_crc(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            init in any::<u16>(),
            mask in any::<u64>(),
        ) {
            let whole = bytes.len() / 8 * 8;
            // The reference goes a byte at a time, each word's bytes reversed.
            let reference = if whole == 0 {
                init
            } else {
                let (body, last) = bytes[..whole].split_at(whole - 8);
                let last = u64::from_le_bytes(last.try_into().unwrap()) & !mask;
                let body = table_bytes(init, body.chunks_exact(8).flat_map(|w| w.iter().rev().copied()));
                table_bytes(body, last.to_be_bytes())
            };
            prop_assert_eq!(crc16_words(init, &bytes, mask), reference);
        }
    }
}
