//! The two checksums of the formats: CRC-16/CMS over FED fragments and CRC-32C over events.
//!
//! CRC-32C runs on `crc-fast`, which dispatches at run time to carry-less-multiply code where the
//! CPU has it. The FED CRC-16 takes each 64-bit word's bytes most significant first (docs/formats.md
//! §1), for a little-endian word the reverse of memory order: its own folding engine takes the
//! words as they lie (`crc16`).

use crate::crc16::{crc16_words, table_word};
use crc_fast::{CrcAlgorithm, Digest};

/// Incremental CRC-16/CMS (poly 0x8005, init 0xFFFF, no reflection, no final XOR) over whole
/// 64-bit little-endian words, each taken most significant byte first.
#[derive(Clone)]
pub struct Crc16Words {
    crc: u16,
}

impl Default for Crc16Words {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc16Words {
    /// A digest at its initial value.
    pub fn new() -> Self {
        Crc16Words { crc: 0xFFFF }
    }

    /// Feeds whole words. Bytes past the last whole word are ignored: callers pass word-aligned
    /// lengths, which every format that uses this CRC guarantees.
    pub fn update(&mut self, bytes: &[u8]) {
        self.update_masking_last(bytes, 0);
    }

    /// Feeds whole words, the last one with the bits of `last_word_mask` taken as zero (a FED
    /// trailer's CRC field and C, F, R bits).
    pub fn update_masking_last(&mut self, bytes: &[u8], last_word_mask: u64) {
        self.crc = crc16_words(self.crc, bytes, last_word_mask);
    }

    /// Feeds one word given as its value.
    pub fn update_word(&mut self, word: u64) {
        self.crc = table_word(self.crc, word);
    }

    /// The CRC of everything fed so far.
    pub fn finish(&self) -> u16 {
        self.crc
    }
}

/// CRC-16/CMS of a plain byte string in memory order (the catalogue definition; used for the
/// check value and by tests).
pub fn crc16_cms_bytes(bytes: &[u8]) -> u16 {
    crc_fast::checksum(CrcAlgorithm::Crc16Cms, bytes) as u16
}

/// CRC-32C (Castagnoli) of a byte string, as the FRD event header and the DTH orbit header carry.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, bytes) as u32
}

/// The CRC-32C of `a` followed by `b`, from the CRC-32C of each and the length of `b`: a sender
/// whose messages differ only in a short prefix checksums the long rest once.
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc_fast::checksum_combine(CrcAlgorithm::Crc32Iscsi, u64::from(crc_a), u64::from(crc_b), len_b) as u32
}

/// Incremental CRC-32C, for data that arrives in pieces (an event built from many fragments).
#[derive(Clone)]
pub struct Crc32c {
    digest: Digest,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A digest at its initial value.
    pub fn new() -> Self {
        Crc32c { digest: Digest::new(CrcAlgorithm::Crc32Iscsi) }
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
    }

    /// The CRC of everything fed so far.
    pub fn finish(&self) -> u32 {
        self.digest.finalize() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_crc32c_is_that_of_the_concatenation() {
        let (a, b) = (b"12345".as_slice(), b"6789".as_slice());
        assert_eq!(crc32c_combine(crc32c(a), crc32c(b), b.len() as u64), crc32c(b"123456789"));
    }

    #[test]
    fn check_values_match_formats_md() {
        assert_eq!(crc16_cms_bytes(b"123456789"), 0xAEE7);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn word_crc_is_bytewise_crc_of_big_endian_words() {
        let words: Vec<u64> = (0..1000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        let le: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let be: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let mut d = Crc16Words::new();
        d.update(&le);
        assert_eq!(d.finish(), crc16_cms_bytes(&be));
        // Pieces of any word-aligned split give the same result.
        let mut d = Crc16Words::new();
        d.update(&le[..8 * 333]);
        d.update(&le[8 * 333..]);
        assert_eq!(d.finish(), crc16_cms_bytes(&be));
    }

    #[test]
    fn incremental_crc32c_equals_one_shot() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut d = Crc32c::new();
        d.update(&data[..1234]);
        d.update(&data[1234..]);
        assert_eq!(d.finish(), crc32c(&data));
    }
}
