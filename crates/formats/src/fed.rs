//! FED fragments in the CMS common data format (SLINK-64), docs/formats.md §1.
//!
//! A fragment is whole 64-bit little-endian words: a header word, the payload, a trailer word.
//! [`Fragment::parse`] checks a fragment in place without copying it; [`seal_fragment`] and
//! [`write_fragment`] write one into a caller's buffer with its CRC-16.

use crate::crc::Crc16Words;
use crate::error::{FormatError, Result, dec, hex, need_space};

/// Size of the header and of the trailer word in bytes.
pub const WORD_BYTES: usize = 8;
/// Smallest fragment: a header and a trailer.
pub const MIN_FRAGMENT_BYTES: usize = 2 * WORD_BYTES;
/// The LV1 id is 24 bits on the wire and wraps at 2^24.
pub const LV1_MASK: u32 = 0x00FF_FFFF;
/// Largest length the 24-bit trailer length field can hold, in words.
pub const MAX_FRAGMENT_WORDS: u32 = 0x00FF_FFFF;
/// Bunch crossings are numbered 0..3564 in an LHC orbit.
pub const BX_PER_ORBIT: u16 = 3564;
/// Length of an LHC orbit in seconds (3564 bunch crossings at 40.079 MHz).
pub const ORBIT_SECONDS: f64 = 88.924e-6;
/// Largest FED id: the header's source id field has 12 bits.
pub const MAX_FED_ID: u16 = 4095;
/// Bit mask of the CRC field and the C, F and R bits in a trailer word: zero while the CRC is
/// computed.
const TRAILER_CRC_MASK: u64 = (0xFFFF << 16) | 0xC004;

const BOE: u64 = 0x5;
const EOE: u64 = 0xA;

/// FED event types (header bits 59:56).
pub mod event_type {
    /// Physics trigger.
    pub const PHYSICS: u8 = 1;
    /// Calibration trigger.
    pub const CALIBRATION: u8 = 2;
    /// Random trigger.
    pub const RANDOM: u8 = 3;
    /// Traced event.
    pub const TRACED: u8 = 5;
    /// Test event.
    pub const TEST: u8 = 6;
    /// Error event.
    pub const ERROR: u8 = 15;
}

/// The LV1 id carried on the wire for a 64-bit event number: its low 24 bits.
pub fn lv1_id(event_number: u64) -> u32 {
    (event_number as u32) & LV1_MASK
}

/// The header word of a FED fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FedHeader {
    /// Event type, bits 59:56 (see [`event_type`]).
    pub event_type: u8,
    /// L1A event number, 24 bits.
    pub lv1_id: u32,
    /// Bunch crossing, 0..3563.
    pub bx_id: u16,
    /// FED id, 12 bits.
    pub source_id: u16,
    /// Format version, 4 bits.
    pub format_version: u8,
    /// H bit: another header word follows.
    pub more_headers: bool,
}

impl FedHeader {
    /// Decodes a header word, checking the BOE marker. `offset` locates the word in errors.
    pub fn from_word(word: u64, offset: usize) -> Result<Self> {
        let marker = word >> 60;
        if marker != BOE {
            return Err(FormatError::bad("FED header", "BOE marker", offset, hex(BOE), hex(marker)));
        }
        Ok(FedHeader {
            event_type: ((word >> 56) & 0xF) as u8,
            lv1_id: ((word >> 32) as u32) & LV1_MASK,
            bx_id: ((word >> 20) & 0xFFF) as u16,
            source_id: ((word >> 8) & 0xFFF) as u16,
            format_version: ((word >> 4) & 0xF) as u8,
            more_headers: word & 0x8 != 0,
        })
    }

    /// Encodes the header word. Fields wider than their bits are truncated to them.
    pub fn to_word(&self) -> u64 {
        (BOE << 60)
            | (u64::from(self.event_type & 0xF) << 56)
            | (u64::from(self.lv1_id & LV1_MASK) << 32)
            | (u64::from(self.bx_id & 0xFFF) << 20)
            | (u64::from(self.source_id & 0xFFF) << 8)
            | (u64::from(self.format_version & 0xF) << 4)
            | (u64::from(self.more_headers) << 3)
    }
}

/// The trailer word of a FED fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FedTrailer {
    /// Fragment length in words, header and trailer included (24 bits).
    pub length_words: u32,
    /// CRC-16/CMS as stored.
    pub crc: u16,
    /// C bit: link CRC error, set by the receiving board.
    pub link_crc_error: bool,
    /// F bit: unexpected FED id, set by the receiving board.
    pub wrong_fed_id: bool,
    /// Event status, 4 bits.
    pub event_status: u8,
    /// TTS state, 4 bits.
    pub tts_state: u8,
    /// T bit: another trailer word follows.
    pub more_trailers: bool,
    /// R bit: the CRC was replaced by the link sender after an error.
    pub crc_replaced: bool,
}

impl FedTrailer {
    /// Decodes a trailer word, checking the EOE marker. `offset` locates the word in errors.
    pub fn from_word(word: u64, offset: usize) -> Result<Self> {
        let marker = word >> 60;
        if marker != EOE {
            return Err(FormatError::bad("FED trailer", "EOE marker", offset, hex(EOE), hex(marker)));
        }
        Ok(FedTrailer {
            length_words: ((word >> 32) as u32) & 0x00FF_FFFF,
            crc: (word >> 16) as u16,
            link_crc_error: word & (1 << 15) != 0,
            wrong_fed_id: word & (1 << 14) != 0,
            event_status: ((word >> 8) & 0xF) as u8,
            tts_state: ((word >> 4) & 0xF) as u8,
            more_trailers: word & 0x8 != 0,
            crc_replaced: word & 0x4 != 0,
        })
    }

    /// Encodes the trailer word.
    pub fn to_word(&self) -> u64 {
        (EOE << 60)
            | (u64::from(self.length_words & 0x00FF_FFFF) << 32)
            | (u64::from(self.crc) << 16)
            | (u64::from(self.link_crc_error) << 15)
            | (u64::from(self.wrong_fed_id) << 14)
            | (u64::from(self.event_status & 0xF) << 8)
            | (u64::from(self.tts_state & 0xF) << 4)
            | (u64::from(self.more_trailers) << 3)
            | (u64::from(self.crc_replaced) << 2)
    }
}

/// A checked view of one FED fragment in a caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    bytes: &'a [u8],
    /// The decoded header word.
    pub header: FedHeader,
    /// The decoded trailer word.
    pub trailer: FedTrailer,
}

impl<'a> Fragment<'a> {
    /// Checks that `bytes` is exactly one fragment: whole words, BOE and EOE markers, and a
    /// trailer length equal to the buffer's. The CRC is checked separately by
    /// [`Fragment::check_crc`], so that callers who only route fragments need not pay for it.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        const WHAT: &str = "FED fragment";
        if bytes.len() < MIN_FRAGMENT_BYTES {
            return Err(FormatError::truncated(WHAT, 0, MIN_FRAGMENT_BYTES, bytes.len()));
        }
        if !bytes.len().is_multiple_of(WORD_BYTES) {
            return Err(FormatError::bad(WHAT, "size", 0, "a multiple of 8 bytes", dec(bytes.len())));
        }
        let last = bytes.len() - WORD_BYTES;
        let header = FedHeader::from_word(word_at(bytes, 0), 0)?;
        let trailer = FedTrailer::from_word(word_at(bytes, last), last)?;
        let words = bytes.len() / WORD_BYTES;
        if trailer.length_words as usize != words {
            return Err(FormatError::bad(WHAT, "trailer length (words)", last, dec(words), dec(trailer.length_words)));
        }
        Ok(Fragment { bytes, header, trailer })
    }

    /// Reads the fragment that ends at the end of `bytes`, as the HLT walks an event backwards:
    /// the trailer's length says where it starts. Returns the fragment and its start offset.
    pub fn parse_from_end(bytes: &'a [u8]) -> Result<(Self, usize)> {
        const WHAT: &str = "FED fragment";
        if bytes.len() < WORD_BYTES {
            return Err(FormatError::truncated("FED trailer", 0, WORD_BYTES, bytes.len()));
        }
        let last = bytes.len() - WORD_BYTES;
        let trailer = FedTrailer::from_word(word_at(bytes, last), last)?;
        let len = trailer.length_words as usize * WORD_BYTES;
        if len < MIN_FRAGMENT_BYTES || len > bytes.len() {
            return Err(FormatError::bad(
                WHAT,
                "trailer length (words)",
                last,
                format!("2..={}", bytes.len() / WORD_BYTES),
                dec(trailer.length_words),
            ));
        }
        let start = bytes.len() - len;
        Fragment::parse(&bytes[start..]).map(|f| (f, start)).map_err(|e| e.shifted(start))
    }

    /// The whole fragment, header to trailer.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The payload between header and trailer (extra header or trailer words included).
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[WORD_BYTES..self.bytes.len() - WORD_BYTES]
    }

    /// Fragment length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a fragment has at least a header and a trailer.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The CRC-16 computed over the fragment as it is.
    pub fn computed_crc(&self) -> u16 {
        fragment_crc(self.bytes)
    }

    /// Checks the stored CRC-16 against the computed one.
    pub fn check_crc(&self) -> Result<()> {
        compare_crc(self.trailer.crc, self.computed_crc(), 0)
    }
}

/// A FED fragment's stored CRC-16 against the computed one; `offset` locates the fragment.
pub(crate) fn compare_crc(stored: u16, computed: u16, offset: usize) -> Result<()> {
    if computed != stored {
        return Err(FormatError::Checksum {
            what: "FED fragment",
            checksum: "CRC-16",
            offset,
            stored: stored.into(),
            computed: computed.into(),
        });
    }
    Ok(())
}

/// Little-endian word at byte `offset`; the caller has checked the bounds.
fn word_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + WORD_BYTES].try_into().expect("8 bytes"))
}

/// How often a reader checks the CRC-16 of the fragments of a stream (an RU's
/// `ru.fragment_crc_check`). Production systems sample it: a link that corrupts data does so
/// again and again, and a sampled check still finds it within a few fragments, at a fraction of
/// the cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CrcCheck {
    /// Every fragment.
    #[default]
    Always,
    /// Fragments 0, N, 2N, … of each stream (`{sampled: N}`, N ≥ 1).
    Sampled(u32),
    /// None.
    Never,
}

impl CrcCheck {
    /// Whether the `n`-th fragment of a stream (from 0) is checked.
    pub fn checks(self, n: u64) -> bool {
        match self {
            CrcCheck::Always => true,
            CrcCheck::Sampled(every) => every <= 1 || n.is_multiple_of(u64::from(every)),
            CrcCheck::Never => false,
        }
    }
}

/// CRC-16/CMS of a whole fragment (header to trailer), with the trailer's CRC field and C, F, R
/// bits taken as zero. `bytes` must be whole words, at least one.
pub fn fragment_crc(bytes: &[u8]) -> u16 {
    fragment_crc_pieces([bytes])
}

/// [`fragment_crc`] of a fragment held in several pieces (a fragment split over FEROL blocks):
/// the trailer is the last word of the last non-empty piece. Each piece must be whole words.
pub fn fragment_crc_pieces<'b>(pieces: impl IntoIterator<Item = &'b [u8]>) -> u16 {
    let mut crc = Crc16Words::new();
    // Each piece is fed once it is known not to be the last, whose final word is the trailer.
    let mut held: Option<&[u8]> = None;
    for piece in pieces.into_iter().filter(|p| p.len() >= WORD_BYTES) {
        if let Some(previous) = held.replace(piece) {
            crc.update(previous);
        }
    }
    if let Some(last) = held {
        crc.update_masking_last(last, TRAILER_CRC_MASK);
    }
    crc.finish()
}

/// Fragment length in bytes for a payload of `payload_len` bytes.
pub fn fragment_len(payload_len: usize) -> usize {
    payload_len + MIN_FRAGMENT_BYTES
}

/// Completes a fragment whose payload is already in place at `fragment[8..len-8]`: writes the
/// header and the trailer (length and CRC computed here, other fields from `trailer`).
/// Returns the trailer as written.
pub fn seal_fragment(fragment: &mut [u8], header: &FedHeader, trailer: &FedTrailer) -> Result<FedTrailer> {
    const WHAT: &str = "FED fragment";
    let len = fragment.len();
    if len < MIN_FRAGMENT_BYTES || !len.is_multiple_of(WORD_BYTES) {
        return Err(FormatError::bad(WHAT, "size", 0, "a multiple of 8 bytes, at least 16", dec(len)));
    }
    let words = len / WORD_BYTES;
    if words > MAX_FRAGMENT_WORDS as usize {
        return Err(FormatError::bad(WHAT, "size (words)", 0, format!("at most {MAX_FRAGMENT_WORDS}"), dec(words)));
    }
    fragment[..WORD_BYTES].copy_from_slice(&header.to_word().to_le_bytes());
    let mut sealed = FedTrailer { length_words: words as u32, crc: 0, ..*trailer };
    let last = len - WORD_BYTES;
    fragment[last..].copy_from_slice(&sealed.to_word().to_le_bytes());
    sealed.crc = fragment_crc(fragment);
    fragment[last..].copy_from_slice(&sealed.to_word().to_le_bytes());
    Ok(sealed)
}

/// Writes a whole fragment (header, a copy of `payload`, trailer with CRC) at the start of `out`
/// and returns its length. `payload` must be whole words.
pub fn write_fragment(out: &mut [u8], header: &FedHeader, payload: &[u8], trailer: &FedTrailer) -> Result<usize> {
    if !payload.len().is_multiple_of(WORD_BYTES) {
        return Err(FormatError::bad("FED fragment payload", "size", 0, "a multiple of 8 bytes", dec(payload.len())));
    }
    let len = fragment_len(payload.len());
    need_space(out, len, "FED fragment")?;
    out[WORD_BYTES..WORD_BYTES + payload.len()].copy_from_slice(payload);
    seal_fragment(&mut out[..len], header, trailer)?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/formats.md §10: the 3-word fragment.
    const VECTOR: [u8; 24] = [
        0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00,
        0x85, 0x2f, 0x03, 0x00, 0x00, 0xa0,
    ];

    fn vector_header() -> FedHeader {
        FedHeader { event_type: 1, lv1_id: 1, bx_id: 1, source_id: 1, format_version: 0, more_headers: false }
    }

    #[test]
    fn writes_the_formats_md_vector() {
        let mut out = [0u8; 24];
        let n =
            write_fragment(&mut out, &vector_header(), &0x0123_4567_89AB_CDEFu64.to_le_bytes(), &FedTrailer::default())
                .unwrap();
        assert_eq!(n, 24);
        assert_eq!(out, VECTOR);
        assert_eq!(vector_header().to_word(), 0x5100_0001_0010_0100);
    }

    #[test]
    fn parses_the_formats_md_vector() {
        let f = Fragment::parse(&VECTOR).unwrap();
        assert_eq!(f.header, vector_header());
        assert_eq!(f.trailer.length_words, 3);
        assert_eq!(f.trailer.crc, 0x2F85);
        assert_eq!(f.trailer.to_word(), 0xA000_0003_2F85_0000);
        f.check_crc().unwrap();
        assert_eq!(f.payload(), &0x0123_4567_89AB_CDEFu64.to_le_bytes());
    }

    #[test]
    fn crc_ignores_c_f_r_bits_and_catches_payload_change() {
        let mut v = VECTOR;
        v[17] |= 0xC0; // C and F bits (15, 14) of the trailer's low half
        v[16] |= 0x04; // R bit
        Fragment::parse(&v).unwrap().check_crc().unwrap();
        v[9] ^= 1;
        let err = Fragment::parse(&v).unwrap().check_crc().unwrap_err();
        assert!(matches!(err, FormatError::Checksum { stored: 0x2F85, .. }), "{err}");
    }

    #[test]
    fn crc_over_pieces_equals_crc_over_whole() {
        let whole = fragment_crc(&VECTOR);
        assert_eq!(fragment_crc_pieces([&VECTOR[..8], &[][..], &VECTOR[8..16], &VECTOR[16..]]), whole);
        assert_eq!(fragment_crc_pieces([&VECTOR[..16], &VECTOR[16..]]), whole);
    }

    #[test]
    fn parse_from_end_finds_the_start() {
        let mut buf = vec![0xEEu8; 16];
        buf.extend_from_slice(&VECTOR);
        let (f, start) = Fragment::parse_from_end(&buf).unwrap();
        assert_eq!(start, 16);
        assert_eq!(f.header.source_id, 1);
    }

    #[test]
    fn lv1_wraps_at_24_bits() {
        assert_eq!(lv1_id((1 << 24) + 5), 5);
        let h = FedHeader { lv1_id: lv1_id((1 << 24) - 1), ..vector_header() };
        assert_eq!(FedHeader::from_word(h.to_word(), 0).unwrap().lv1_id, LV1_MASK);
    }
}
