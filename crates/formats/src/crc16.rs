//! CRC-16/CMS over 64-bit words taken most significant byte first (docs/formats.md §1), by
//! carry-less multiplication where the CPU has it, and by table otherwise.
//!
//! A 16-bit CRC is the top half of a 32-bit CRC whose generator is the 16-bit one times x^16
//! (here x^32 + x^31 + x^18 + x^16), so the folding of the usual 32-bit CLMUL engine computes it.
//! The word order costs one shuffle: a 16-byte block of two little-endian words, taken most
//! significant byte first word by word, is the block as it lies with its two 64-bit halves
//! swapped, so each 128-bit lane is loaded unaligned and its halves swapped in the register.
//!
//! Three folding kernels, the widest the CPU has picked at run time (the 512-bit one folds a
//! 2 kB fragment in cache about twice as fast as the 128-bit one):
//! - 512-bit (VPCLMULQDQ and AVX-512F): four registers of four lanes, 256 bytes a turn;
//! - 256-bit (VPCLMULQDQ and AVX2, for the CPUs with the one and not AVX-512): four registers of
//!   two lanes, 128 bytes a turn;
//! - 128-bit (PCLMULQDQ): four registers, 64 bytes a turn.
//!
//! Four accumulators rather than two: on a Sapphire Rapids Xeon two, four and eight fold as
//! fast, but a CPU whose carry-less multiplication takes longer needs more of them in flight.
//! The wide kernels fold their registers into one, then its lanes into one 128-bit state;
//! 16-byte blocks left over are folded into that one at a time. The word left over (if any) and
//! the last word (masked) are folded in together with the state in one step, which leaves at
//! most 96 bits, and those twelve bytes are looked up at once (slicing, as the table does words
//! by eight): the fixed cost of a call, which a 2 kB fragment feels, is a few multiplications
//! and one lookup rather than a lookup a word after the state's. A byte-at-a-time table is the
//! reference every kernel and the word tables are tested against.

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
/// bytes are looked up at once ("slicing by 8") rather than one after another, and the twelve
/// of a folded state likewise.
const SLICES: [[u16; 256]; 12] = {
    let mut slices = [[0u16; 256]; 12];
    slices[0] = TABLE;
    let mut k = 1;
    while k < 12 {
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
    words_with(fast::words, crc, bytes, last_word_mask)
}

/// [`crc16_words`] through `fold` where it gives the CRC (the tests pass each kernel in turn),
/// else through the table.
fn words_with(fold: impl FnOnce(u16, &[u8], u64) -> Option<u16>, crc: u16, bytes: &[u8], last_word_mask: u64) -> u16 {
    let whole = bytes.len() / 8 * 8;
    if whole == 0 {
        return crc;
    }
    fold(crc, &bytes[..whole], last_word_mask).unwrap_or_else(|| {
        let (body, last) = bytes[..whole].split_at(whole - 8);
        table_word(table_words(crc, body), u64::from_le_bytes(last.try_into().expect("one word")) & !last_word_mask)
    })
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
    use super::{SLICES, table_word, table_words, x_pow_mod};
    use std::arch::is_x86_feature_detected;
    use std::arch::x86_64::{
        __m128i, __m256i, __m512i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_loadu_si128, _mm_set_epi64x,
        _mm_shuffle_epi32, _mm_unpackhi_epi64, _mm_xor_si128, _mm256_castsi256_si128, _mm256_clmulepi64_epi128,
        _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_set_epi64x, _mm256_shuffle_epi32, _mm256_xor_si256,
        _mm512_broadcast_i32x4, _mm512_castsi512_si256, _mm512_clmulepi64_epi128, _mm512_extracti64x4_epi64,
        _mm512_loadu_si512, _mm512_set_epi64, _mm512_shuffle_epi32, _mm512_ternarylogic_epi64, _mm512_xor_si512,
        _mm512_zextsi128_si512,
    };

    /// Folding by `d` bits takes `(x^(d+64) mod P, x^d mod P)`.
    const fn fold_keys(d: u32) -> (i64, i64) {
        (x_pow_mod(d + 64) as i64, x_pow_mod(d) as i64)
    }
    const BY_2048: (i64, i64) = fold_keys(2048);
    const BY_1536: (i64, i64) = fold_keys(1536);
    const BY_1024: (i64, i64) = fold_keys(1024);
    const BY_768: (i64, i64) = fold_keys(768);
    const BY_512: (i64, i64) = fold_keys(512);
    const BY_384: (i64, i64) = fold_keys(384);
    const BY_256: (i64, i64) = fold_keys(256);
    const BY_128: (i64, i64) = fold_keys(128);
    const BY_64: (i64, i64) = fold_keys(64);
    /// "Folding" by nothing: `x^64 mod P` for the high half, 1 for the low, which leaves a value
    /// congruent to the block in at most 96 bits. The last lane of a wide register (already
    /// where the others are folded to) and the last two words go through it, so that they take
    /// the multiplication that what is folded onto them takes rather than a step of their own.
    const BY_0: (i64, i64) = fold_keys(0);

    /// The folding engines, widest first.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Kernel {
        /// Four 128-bit lanes to a 512-bit register (VPCLMULQDQ with AVX-512: Intel since Ice
        /// Lake, AMD since Zen 4), four registers: 256 bytes a turn.
        Clmul512,
        /// Two lanes to a 256-bit register (VPCLMULQDQ with AVX2 alone: AMD Zen 3, Intel's
        /// E-cores), four registers: 128 bytes a turn.
        Clmul256,
        /// One lane to a register (PCLMULQDQ, every x86_64 of the last fifteen years), four
        /// registers: 64 bytes a turn.
        Clmul128,
    }

    impl Kernel {
        /// Every kernel, in the order `words` tries them.
        pub(super) const ALL: [Kernel; 3] = [Kernel::Clmul512, Kernel::Clmul256, Kernel::Clmul128];

        /// The CPU features the kernel is compiled for, as `is_x86_feature_detected!` names them
        /// (the tests' message when one is missing).
        #[cfg(test)]
        pub(super) fn needs(self) -> &'static str {
            match self {
                Kernel::Clmul512 => "vpclmulqdq, avx512f, pclmulqdq",
                Kernel::Clmul256 => "vpclmulqdq, avx2, pclmulqdq",
                Kernel::Clmul128 => "pclmulqdq",
            }
        }

        /// Whether this CPU has every feature the kernel's `target_feature` enables. The
        /// detection is cached by std: each call is a load and a test.
        pub(super) fn runs_here(self) -> bool {
            let clmul = is_x86_feature_detected!("pclmulqdq");
            match self {
                Kernel::Clmul512 => {
                    clmul && is_x86_feature_detected!("vpclmulqdq") && is_x86_feature_detected!("avx512f")
                }
                Kernel::Clmul256 => clmul && is_x86_feature_detected!("vpclmulqdq") && is_x86_feature_detected!("avx2"),
                Kernel::Clmul128 => clmul,
            }
        }

        /// The CRC of `words` (whole words, the last with the bits of `last_word_mask` taken as
        /// zero) from `crc` by this kernel, or `None` when the CPU lacks it or there is too
        /// little to fold (less than 64 bytes before the last word).
        pub(super) fn words(self, crc: u16, words: &[u8], last_word_mask: u64) -> Option<u16> {
            let (body, last) = words.split_last_chunk::<8>()?;
            if body.len() < 64 || !self.runs_here() {
                return None;
            }
            let last = u64::from_le_bytes(*last) & !last_word_mask;
            // The crate's one unsafe call (its other unsafe code is the kernels' loads): each
            // kernel needs CPU features beyond x86_64's baseline, which were just found.
            #[allow(unsafe_code)]
            // SAFETY: the CPU has every feature the kernel's `target_feature` enables (checked
            // just above by `runs_here`, which tests the same list).
            Some(unsafe {
                match self {
                    Kernel::Clmul512 => fold_512(crc, body, last),
                    Kernel::Clmul256 => fold_256(crc, body, last),
                    Kernel::Clmul128 => fold_128(crc, body, last),
                }
            })
        }
    }

    /// [`Kernel::words`] by the widest kernel the CPU has, or `None` when it has none or there
    /// is too little to fold.
    pub(super) fn words(crc: u16, words: &[u8], last_word_mask: u64) -> Option<u16> {
        Kernel::ALL.into_iter().find_map(|kernel| kernel.words(crc, words, last_word_mask))
    }

    /// A 16-byte block arranged so that bit 127 is the message's first bit: loaded as it lies,
    /// the first word is the low half, so the halves are swapped.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn block(bytes: &[u8; 16]) -> __m128i {
        #[allow(unsafe_code)]
        // SAFETY: `bytes` is 16 readable bytes, all an unaligned 16-byte load reads.
        let lying = unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) };
        _mm_shuffle_epi32::<0x4E>(lying)
    }

    /// Four blocks of 64 bytes, in message order.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn blocks(bytes: &[u8; 64]) -> [__m128i; 4] {
        let (b, _) = bytes.as_chunks::<16>();
        [block(&b[0]), block(&b[1]), block(&b[2]), block(&b[3])]
    }

    /// `a` folded forward by the distance whose keys are `keys`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn fold_by(a: __m128i, keys: (i64, i64)) -> __m128i {
        let k = _mm_set_epi64x(keys.0, keys.1);
        // High half times x^(d+64) mod P, low half times x^d mod P.
        _mm_xor_si128(_mm_clmulepi64_si128::<0x11>(a, k), _mm_clmulepi64_si128::<0x00>(a, k))
    }

    /// The CRC from `r`, a state congruent to the message so far, through `rest` (16-byte
    /// blocks, then at most one word) and the `last` word.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn finish(mut r: __m128i, rest: &[u8], last: u64) -> u16 {
        let (blocks, odd) = rest.as_chunks::<16>();
        for b in blocks {
            r = _mm_xor_si128(fold_by(r, BY_128), block(b));
        }
        // The words left are folded in with the state in one step rather than a table lookup
        // each after the state's: each term is a product of 64 by 32 bits or a word alone, so
        // their sum has at most 96 bits.
        let s = match odd.first_chunk::<8>() {
            Some(odd) => {
                _mm_xor_si128(fold_by(r, BY_128), fold_by(_mm_set_epi64x(i64::from_le_bytes(*odd), last as i64), BY_0))
            }
            None => _mm_xor_si128(fold_by(r, BY_64), _mm_set_epi64x(0, last as i64)),
        };
        // The state's CRC from 0 is the message's.
        let (high, low) = (_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)) as u64, _mm_cvtsi128_si64(s) as u64);
        debug_assert!(high >> 32 == 0, "a folded state has at most 96 bits");
        table_96(high as u32, low)
    }

    /// The CRC, from 0, of the 96 bits `high` (32) then `low` (64): twelve bytes looked up at once.
    pub(super) fn table_96(high: u32, low: u64) -> u16 {
        let byte = |k: u32| usize::from((high >> (24 - 8 * k)) as u8);
        SLICES[11][byte(0)] ^ SLICES[10][byte(1)] ^ SLICES[9][byte(2)] ^ SLICES[8][byte(3)] ^ table_word(0, low)
    }

    /// The 128-bit kernel: four accumulators of one block.
    #[target_feature(enable = "pclmulqdq")]
    fn fold_128(crc: u16, bytes: &[u8], last: u64) -> u16 {
        let (quads, rest) = bytes.as_chunks::<64>();
        let [first, quads @ ..] = quads else {
            return table_word(table_words(crc, bytes), last);
        };
        let mut acc = blocks(first);
        // The running CRC is the initial value of the first 16 bits of the message.
        acc[0] = _mm_xor_si128(acc[0], _mm_set_epi64x((u64::from(crc) << 48) as i64, 0));
        for quad in quads {
            let next = blocks(quad);
            for (a, b) in acc.iter_mut().zip(next) {
                *a = _mm_xor_si128(fold_by(*a, BY_512), b);
            }
        }
        let r = _mm_xor_si128(
            _mm_xor_si128(fold_by(acc[0], BY_384), fold_by(acc[1], BY_256)),
            _mm_xor_si128(fold_by(acc[2], BY_128), acc[3]),
        );
        finish(r, rest, last)
    }

    /// 32 bytes as two blocks, the first in the low lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn vector_256(bytes: &[u8; 32]) -> __m256i {
        #[allow(unsafe_code)]
        // SAFETY: `bytes` is 32 readable bytes, all an unaligned 32-byte load reads.
        let lying = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
        _mm256_shuffle_epi32::<0x4E>(lying)
    }

    /// Each lane of `a` folded forward by the distance of the lane's keys in `k`, plus `b`.
    #[inline]
    #[target_feature(enable = "vpclmulqdq,avx2")]
    fn fold_in_256(a: __m256i, k: __m256i, b: __m256i) -> __m256i {
        let folded = _mm256_xor_si256(_mm256_clmulepi64_epi128::<0x11>(a, k), _mm256_clmulepi64_epi128::<0x00>(a, k));
        _mm256_xor_si256(folded, b)
    }

    /// `keys` in every lane.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn keys_256(keys: (i64, i64)) -> __m256i {
        _mm256_set_epi64x(keys.0, keys.1, keys.0, keys.1)
    }

    /// The 256-bit kernel: four accumulators of two lanes.
    #[target_feature(enable = "vpclmulqdq,avx2,pclmulqdq")]
    fn fold_256(crc: u16, bytes: &[u8], last: u64) -> u16 {
        let (vectors, rest) = bytes.as_chunks::<32>();
        let init = _mm256_set_epi64x(0, 0, (u64::from(crc) << 48) as i64, 0);
        let zero = _mm256_set_epi64x(0, 0, 0, 0);
        let (mut x, left) = if let Some((head, tail)) = vectors.split_first_chunk::<4>() {
            let mut acc = [vector_256(&head[0]), vector_256(&head[1]), vector_256(&head[2]), vector_256(&head[3])];
            acc[0] = _mm256_xor_si256(acc[0], init);
            let (turns, left) = tail.as_chunks::<4>();
            for turn in turns {
                for (a, v) in acc.iter_mut().zip(turn) {
                    *a = fold_in_256(*a, keys_256(BY_1024), vector_256(v));
                }
            }
            let x = fold_in_256(acc[2], keys_256(BY_256), acc[3]);
            let x = fold_in_256(acc[1], keys_256(BY_512), x);
            (fold_in_256(acc[0], keys_256(BY_768), x), left)
        } else if let [first, left @ ..] = vectors {
            (_mm256_xor_si256(vector_256(first), init), left)
        } else {
            return table_word(table_words(crc, bytes), last);
        };
        for v in left {
            x = fold_in_256(x, keys_256(BY_256), vector_256(v));
        }
        // The low lane folded onto the high one.
        let lanes = fold_in_256(x, _mm256_set_epi64x(BY_0.0, BY_0.1, BY_128.0, BY_128.1), zero);
        let r = _mm_xor_si128(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256::<1>(lanes));
        finish(r, rest, last)
    }

    /// 64 bytes as four blocks, the first in the lowest lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn vector_512(bytes: &[u8; 64]) -> __m512i {
        #[allow(unsafe_code)]
        // SAFETY: `bytes` is 64 readable bytes, all an unaligned 64-byte load reads.
        let lying = unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) };
        _mm512_shuffle_epi32::<0x4E>(lying)
    }

    /// Each lane of `a` folded forward by the distance of the lane's keys in `k`, plus `b`.
    #[inline]
    #[target_feature(enable = "vpclmulqdq,avx512f")]
    fn fold_in_512(a: __m512i, k: __m512i, b: __m512i) -> __m512i {
        // One three-way exclusive or (0x96: a ^ b ^ c) for the two products and the data.
        _mm512_ternarylogic_epi64::<0x96>(
            _mm512_clmulepi64_epi128::<0x11>(a, k),
            _mm512_clmulepi64_epi128::<0x00>(a, k),
            b,
        )
    }

    /// `keys` in every lane.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn keys_512(keys: (i64, i64)) -> __m512i {
        _mm512_broadcast_i32x4(_mm_set_epi64x(keys.0, keys.1))
    }

    /// The 512-bit kernel: four accumulators of four lanes.
    #[target_feature(enable = "vpclmulqdq,avx512f,pclmulqdq")]
    fn fold_512(crc: u16, bytes: &[u8], last: u64) -> u16 {
        let (vectors, rest) = bytes.as_chunks::<64>();
        let init = _mm512_zextsi128_si512(_mm_set_epi64x((u64::from(crc) << 48) as i64, 0));
        let (mut x, left) = if let Some((head, tail)) = vectors.split_first_chunk::<4>() {
            let mut acc = [vector_512(&head[0]), vector_512(&head[1]), vector_512(&head[2]), vector_512(&head[3])];
            acc[0] = _mm512_xor_si512(acc[0], init);
            let (turns, left) = tail.as_chunks::<4>();
            for turn in turns {
                for (a, v) in acc.iter_mut().zip(turn) {
                    *a = fold_in_512(*a, keys_512(BY_2048), vector_512(v));
                }
            }
            let x = fold_in_512(acc[2], keys_512(BY_512), acc[3]);
            let x = fold_in_512(acc[1], keys_512(BY_1024), x);
            (fold_in_512(acc[0], keys_512(BY_1536), x), left)
        } else if let [first, left @ ..] = vectors {
            (_mm512_xor_si512(vector_512(first), init), left)
        } else {
            return table_word(table_words(crc, bytes), last);
        };
        for v in left {
            x = fold_in_512(x, keys_512(BY_512), vector_512(v));
        }
        // Each lane folded onto the last, then the lanes added.
        let k = _mm512_set_epi64(BY_0.0, BY_0.1, BY_128.0, BY_128.1, BY_256.0, BY_256.1, BY_384.0, BY_384.1);
        let lanes = fold_in_512(x, k, _mm512_zextsi128_si512(_mm_set_epi64x(0, 0)));
        let halves = _mm256_xor_si256(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64::<1>(lanes));
        let r = _mm_xor_si128(_mm256_castsi256_si128(halves), _mm256_extracti128_si256::<1>(halves));
        finish(r, rest, last)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod fast {
    /// No carry-less multiplication here: the table does it all.
    pub(super) fn words(_crc: u16, _words: &[u8], _last_word_mask: u64) -> Option<u16> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: a byte at a time, each word's bytes reversed, the last word masked.
    fn reference(init: u16, bytes: &[u8], mask: u64) -> u16 {
        let whole = bytes.len() / 8 * 8;
        if whole == 0 {
            return init;
        }
        let (body, last) = bytes[..whole].split_at(whole - 8);
        let last = u64::from_le_bytes(last.try_into().unwrap()) & !mask;
        let body = table_bytes(init, body.chunks_exact(8).flat_map(|w| w.iter().rev().copied()));
        table_bytes(body, last.to_be_bytes())
    }

    /// Bytes that are not all alike, so that a block taken from the wrong place shows.
    fn varied(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8).collect()
    }

    /// The table, word by word, is the reference: the catalogue's check value through it.
    #[test]
    fn the_table_gives_the_catalogue_check_value() {
        assert_eq!(table_bytes(0xFFFF, *b"123456789"), 0xAEE7);
    }

    /// The folding path runs here (the property test below compares it with the table), and
    /// under CI it must: a machine without carry-less multiplication would test the table alone.
    #[test]
    fn the_folding_path_runs_on_this_machine() {
        let runs = fast::words(0xFFFF, &[0x5A; 128], 0).is_some();
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(runs || !ci, "no carry-less multiplication on this CPU: the CRC-16 fold is not tested");
        if runs {
            let reference = table_bytes(0xFFFF, [0x5A; 128]);
            assert_eq!(fast::words(0xFFFF, &[0x5A; 128], 0), Some(reference));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// The folding path gives the table's CRC for every length, start value and mask.
        #[test]
        fn folding_gives_the_table_s_crc(
            bytes in proptest::collection::vec(any::<u8>(), 0..4096),
            init in any::<u16>(),
            mask in any::<u64>(),
        ) {
            prop_assert_eq!(crc16_words(init, &bytes, mask), reference(init, &bytes, mask));
        }
    }

    /// Each kernel on its own, where the CPU has it: the dispatch tests only the widest.
    #[cfg(target_arch = "x86_64")]
    mod kernels {
        use super::*;
        use crate::crc16::fast::Kernel;
        use std::io::Write;

        /// Whether `kernel` runs on this CPU; when it does not, says so where the test log
        /// shows it. Written to the standard error stream itself, not by `eprintln!`, which a
        /// passing test's capture would swallow: a kernel left untested must not look tested.
        fn runs(kernel: Kernel) -> bool {
            let runs = kernel.runs_here();
            if !runs {
                let _ = writeln!(
                    std::io::stderr(),
                    "crc16: {kernel:?} NOT TESTED: this CPU lacks one of {} (the kernel is never used on it)",
                    kernel.needs()
                );
            }
            runs
        }

        /// [`crc16_words`] through `kernel` alone (the table where it does not fold: less than
        /// 64 bytes before the last word).
        fn by(kernel: Kernel, init: u16, bytes: &[u8], mask: u64) -> u16 {
            words_with(|crc, words, mask| kernel.words(crc, words, mask), init, bytes, mask)
        }

        /// Every length to 1100 bytes, so every branch of every kernel: before the last word,
        /// less than a 64-byte vector, exactly one, less than a 256-byte turn, several turns
        /// with every count of vectors, blocks and odd words left over.
        fn every_length(kernel: Kernel) {
            let bytes = varied(1100);
            for len in 0..=bytes.len() {
                for (init, mask) in [(0xFFFF, 0), (0x1234, 0xFFFF_0000_0000_0000), (0, u64::MAX)] {
                    let (got, want) = (by(kernel, init, &bytes[..len], mask), reference(init, &bytes[..len], mask));
                    assert_eq!(got, want, "{kernel:?}, {len} bytes, init {init:#06x}, mask {mask:#x}");
                }
            }
        }

        /// The 128-bit kernel is the fallback of every x86_64: under CI it must run.
        #[test]
        fn the_128_bit_fold_runs_on_this_machine() {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(runs(Kernel::Clmul128) || !ci, "no pclmulqdq on this CPU: the 128-bit CRC-16 fold is not tested");
            if Kernel::Clmul128.runs_here() {
                every_length(Kernel::Clmul128);
            }
        }

        /// The 256-bit kernel, where the CPU has it; else a line in the log (an older CI
        /// machine does not fail, as the kernel is never used on it).
        #[test]
        fn the_256_bit_fold_runs_where_the_cpu_has_it() {
            if runs(Kernel::Clmul256) {
                every_length(Kernel::Clmul256);
            }
        }

        /// The 512-bit kernel, where the CPU has it; else a line in the log.
        #[test]
        fn the_512_bit_fold_runs_where_the_cpu_has_it() {
            if runs(Kernel::Clmul512) {
                every_length(Kernel::Clmul512);
            }
        }

        /// The widest kernel the CPU has is the one the dispatch takes.
        #[test]
        fn the_dispatch_takes_the_widest_kernel() {
            let bytes = varied(2040);
            let widest = Kernel::ALL.into_iter().find(|k| k.runs_here());
            assert_eq!(fast::words(0xFFFF, &bytes, 0), widest.and_then(|k| k.words(0xFFFF, &bytes, 0)));
        }

        proptest! {
            /// The twelve-byte lookup that ends every kernel is the table's CRC of those bytes.
            #[test]
            fn the_96_bit_lookup_gives_the_table_s_crc(high in any::<u32>(), low in any::<u64>()) {
                let bytes = high.to_be_bytes().into_iter().chain(low.to_be_bytes());
                prop_assert_eq!(fast::table_96(high, low), table_bytes(0, bytes));
            }
        }

        /// `kernel` gives the table's CRC for the arbitrary bytes, start value and mask.
        fn gives_the_table_s_crc(kernel: Kernel, bytes: &[u8], init: u16, mask: u64) -> Result<(), TestCaseError> {
            // Untested kernels are reported by the tests above, once rather than per case.
            if kernel.runs_here() {
                prop_assert_eq!(by(kernel, init, bytes, mask), reference(init, bytes, mask));
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]
            /// The 512-bit kernel gives the table's CRC for every length, start value and mask.
            #[test]
            fn the_512_bit_fold_gives_the_table_s_crc(
                bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                init in any::<u16>(),
                mask in any::<u64>(),
            ) {
                gives_the_table_s_crc(Kernel::Clmul512, &bytes, init, mask)?;
            }

            /// The 256-bit kernel gives the table's CRC for every length, start value and mask.
            #[test]
            fn the_256_bit_fold_gives_the_table_s_crc(
                bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                init in any::<u16>(),
                mask in any::<u64>(),
            ) {
                gives_the_table_s_crc(Kernel::Clmul256, &bytes, init, mask)?;
            }

            /// The 128-bit kernel gives the table's CRC for every length, start value and mask.
            #[test]
            fn the_128_bit_fold_gives_the_table_s_crc(
                bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                init in any::<u16>(),
                mask in any::<u64>(),
            ) {
                gives_the_table_s_crc(Kernel::Clmul128, &bytes, init, mask)?;
            }
        }
    }
}
