//! FEROL streams, docs/formats.md §2: the TCP stream that carries one FED's fragments into an RU.
//!
//! A stream is a sequence of blocks, each a 16-byte header (two **big-endian** 64-bit words) and
//! up to 4080 data bytes. A fragment larger than one block's data spans several blocks; the first
//! block's data starts with the FED header, the last block's data ends with the FED trailer.
//!
//! Header bits, with the two that are **Tessera's choice** (not public) marked:
//!
//! | word | bits | field |
//! |---|---|---|
//! | 0 | 63:48 | signature 0x475A |
//! | 0 | 47:32 | block number within the fragment, 0, 1, 2... (Tessera's choice) |
//! | 0 | 31 | first block of a fragment (Tessera's choice) |
//! | 0 | 30 | last block of a fragment |
//! | 0 | 9:0 | data length of this block in 64-bit words, 1..=510 |
//! | 1 | 59:48 | FED id |
//! | 1 | 23:0 | event number (the fragment's LV1 id) |
//!
//! Every other bit is written zero and ignored when read. Both guessed fields live in
//! [`FerolBlockHeader`] only, so correcting them later touches one small parser.
//!
//! Writing never copies a fragment: [`FerolBlocks`] gives each block's header bytes and the range
//! of the fragment it carries, for vectored writes; [`write_ferol_blocks`] is the copying form.
//! Reading is zero-copy: [`FerolFragment`] is a checked view of one fragment's blocks in a
//! receive buffer and [`FerolStream`] walks a buffer of them.
//!
//! The block-chain machinery here (splitting, gathering, walking a stream) is shared with the DTH
//! orbit streams of [`crate::orbit`], whose headers differ but whose chaining rules are the same.

use std::marker::PhantomData;
use std::ops::Range;

use crate::error::{FormatError, Result, dec, hex, le_u64, need_space, take};
use crate::fed::{self, FedHeader, FedTrailer, Fragment, MAX_FRAGMENT_WORDS, MIN_FRAGMENT_BYTES, WORD_BYTES};

/// Size of a full FEROL block, header included.
pub const BLOCK_BYTES: usize = 4096;
/// Size of a FEROL block header.
pub const HEADER_BYTES: usize = 16;
/// Most data bytes one block carries.
pub const MAX_DATA_BYTES: usize = BLOCK_BYTES - HEADER_BYTES;
/// Most data words one block carries.
pub const MAX_DATA_WORDS: u16 = (MAX_DATA_BYTES / WORD_BYTES) as u16;
/// Block header signature, wire bytes `47 5A`.
pub const SIGNATURE: u16 = 0x475A;

const EVENT_NUMBER_MASK: u32 = 0x00FF_FFFF;

/// The header of one FEROL block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FerolBlockHeader {
    /// First block of a fragment (word 0 bit 31, Tessera's choice).
    pub first: bool,
    /// Last block of a fragment (word 0 bit 30).
    pub last: bool,
    /// Block number within the fragment, 0, 1, 2... (word 0 bits 47:32, Tessera's choice).
    pub block_number: u16,
    /// Data length of this block in 64-bit words, 1..=510 (word 0 bits 9:0).
    pub data_words: u16,
    /// FED id, 12 bits (word 1 bits 59:48).
    pub fed_id: u16,
    /// Event number, 24 bits: the fragment's LV1 id (word 1 bits 23:0).
    pub event_number: u32,
}

impl FerolBlockHeader {
    /// Encodes the header. Fields wider than their bits are truncated to them.
    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let word0 = (u64::from(SIGNATURE) << 48)
            | (u64::from(self.block_number) << 32)
            | (u64::from(self.first) << 31)
            | (u64::from(self.last) << 30)
            | u64::from(self.data_words & 0x3FF);
        let word1 = (u64::from(self.fed_id & 0xFFF) << 48) | u64::from(self.event_number & EVENT_NUMBER_MASK);
        be_words_to_bytes(word0, word1)
    }

    /// Decodes the header at `buf[offset..]`, checking the signature and the data length.
    /// Errors carry `offset`.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "FEROL block header";
        let (word0, word1) = be_words(take::<HEADER_BYTES>(buf, offset, WHAT)?);
        let signature = (word0 >> 48) as u16;
        if signature != SIGNATURE {
            return Err(FormatError::bad(WHAT, "signature", offset, hex(SIGNATURE), hex(signature)));
        }
        let data_words = (word0 & 0x3FF) as u16;
        if !(1..=MAX_DATA_WORDS).contains(&data_words) {
            return Err(FormatError::bad(
                WHAT,
                "data length (words)",
                offset,
                format!("1..={MAX_DATA_WORDS}"),
                dec(data_words),
            ));
        }
        Ok(FerolBlockHeader {
            first: word0 & (1 << 31) != 0,
            last: word0 & (1 << 30) != 0,
            block_number: (word0 >> 32) as u16,
            data_words,
            fed_id: ((word1 >> 48) & 0xFFF) as u16,
            event_number: (word1 as u32) & EVENT_NUMBER_MASK,
        })
    }
}

/// Bytes a fragment of `fragment_len` bytes takes on a FEROL stream, block headers included.
pub fn ferol_wire_len(fragment_len: usize) -> usize {
    fragment_len.saturating_add(HEADER_BYTES.saturating_mul(fragment_len.div_ceil(MAX_DATA_BYTES)))
}

/// One block of a fragment being sent: its header and the range of the fragment it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FerolBlock {
    /// The block's header.
    pub header: FerolBlockHeader,
    /// The bytes of the fragment this block carries.
    pub data: Range<usize>,
}

impl FerolBlock {
    /// The header as it goes on the wire.
    pub fn header_bytes(&self) -> [u8; HEADER_BYTES] {
        self.header.to_bytes()
    }
}

/// The blocks a fragment is sent in, in order. Holds no reference to the fragment, so a sender
/// can keep it beside the buffer and write header and data slices with vectored writes.
#[derive(Debug, Clone)]
pub struct FerolBlocks {
    split: Split,
    fed_id: u16,
    event_number: u32,
}

impl FerolBlocks {
    /// Plans the blocks of `fragment`: whole words, at least a header and a trailer, at most
    /// what a trailer's length field can describe. FED id and event number come from its FED
    /// header, whose BOE marker is checked; the rest of the fragment is sent as it is.
    pub fn new(fragment: &[u8]) -> Result<Self> {
        const WHAT: &str = "FED fragment";
        let len = fragment.len();
        if len < MIN_FRAGMENT_BYTES || !len.is_multiple_of(WORD_BYTES) {
            return Err(FormatError::bad(WHAT, "size", 0, "a multiple of 8 bytes, at least 16", dec(len)));
        }
        if len / WORD_BYTES > MAX_FRAGMENT_WORDS as usize {
            return Err(FormatError::bad(
                WHAT,
                "size (words)",
                0,
                format!("at most {MAX_FRAGMENT_WORDS}"),
                dec(len / WORD_BYTES),
            ));
        }
        let header = FedHeader::from_word(le_u64(fragment, 0, "FED header")?, 0)?;
        Ok(FerolBlocks {
            split: Split::new(len, MAX_DATA_BYTES),
            fed_id: header.source_id,
            event_number: header.lv1_id,
        })
    }

    /// Bytes the whole fragment takes on the wire.
    pub fn wire_len(&self) -> usize {
        ferol_wire_len(self.split.len)
    }
}

impl Iterator for FerolBlocks {
    type Item = FerolBlock;

    fn next(&mut self) -> Option<FerolBlock> {
        let piece = self.split.next()?;
        let header = FerolBlockHeader {
            first: piece.first,
            last: piece.last,
            block_number: piece.number,
            // At most MAX_DATA_BYTES, so it fits.
            data_words: (piece.range.len() / WORD_BYTES) as u16,
            fed_id: self.fed_id,
            event_number: self.event_number,
        };
        Some(FerolBlock { header, data: piece.range })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.split.size_hint()
    }
}

/// Writes `fragment` as FEROL blocks at the start of `out`; returns the bytes written
/// ([`ferol_wire_len`] of the fragment's length).
pub fn write_ferol_blocks(fragment: &[u8], out: &mut [u8]) -> Result<usize> {
    let blocks = FerolBlocks::new(fragment)?;
    let wire_len = blocks.wire_len();
    write_blocks(fragment, blocks.map(|b| (b.header_bytes(), b.data)), wire_len, out, "FEROL blocks")
}

/// A checked view of the blocks of one fragment at the start of a FEROL stream buffer.
#[derive(Debug, Clone, Copy)]
pub struct FerolFragment<'a> {
    /// The blocks, headers included.
    bytes: &'a [u8],
    blocks: usize,
    fragment_len: usize,
    /// The FED header at the start of the first block's data.
    pub header: FedHeader,
    /// The FED trailer at the end of the last block's data.
    pub trailer: FedTrailer,
}

impl<'a> FerolFragment<'a> {
    /// Reads the blocks of the fragment that starts `buf`, checking every block header (signature,
    /// first flag on block 0 only, block numbers 0, 1, 2..., data length, same FED id and event
    /// number throughout), the FED header and trailer markers, that the block headers agree with
    /// the FED header, and that the trailer length equals the data carried. The CRC is checked
    /// separately by [`FerolFragment::check_crc`]. A buffer that ends before the last block does
    /// gives [`FormatError::Truncated`]; bytes after it are left alone.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        Self::read(buf, true).map(|(fragment, _)| fragment)
    }

    /// Reads the fragment as [`FerolFragment::parse`] does, except that a FED header whose source
    /// id differs from the block headers' FED id does not fail the read: the blocks frame the
    /// fragment whatever its header says, and the disagreement is returned beside it (the error
    /// `parse` gives), for a receiver that passes such a fragment on flagged.
    pub fn parse_framed(buf: &'a [u8]) -> Result<(Self, Option<FormatError>)> {
        Self::read(buf, false)
    }

    fn read(buf: &'a [u8], strict: bool) -> Result<(Self, Option<FormatError>)> {
        let chain = read_chain::<FerolBlockHeader>(buf)?;
        let bytes = buf.get(..chain.wire_len).unwrap_or_default();
        let header = FedHeader::from_word(le_u64(bytes, HEADER_BYTES, "FED header")?, HEADER_BYTES)?;
        let first = chain.first;
        let mut wrong_id = None;
        if first.fed_id != header.source_id {
            let e = FormatError::bad("FEROL block header", "FED id", 0, dec(header.source_id), dec(first.fed_id));
            if strict {
                return Err(e);
            }
            wrong_id = Some(e);
        }
        if first.event_number != header.lv1_id {
            return Err(FormatError::bad(
                "FEROL block header",
                "event number",
                0,
                dec(header.lv1_id),
                dec(first.event_number),
            ));
        }
        // Every block carries at least one word, so the trailer lies inside the last block.
        let at = chain.wire_len.saturating_sub(WORD_BYTES);
        let trailer = FedTrailer::from_word(le_u64(bytes, at, "FED trailer")?, at)?;
        if trailer.length_words as usize * WORD_BYTES != chain.data_len {
            return Err(FormatError::bad(
                "FED fragment",
                "trailer length (words)",
                at,
                dec(chain.data_len / WORD_BYTES),
                dec(trailer.length_words),
            ));
        }
        Ok((FerolFragment { bytes, blocks: chain.blocks, fragment_len: chain.data_len, header, trailer }, wrong_id))
    }

    /// Bytes the fragment takes in the stream, block headers included.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// The blocks as they are in the stream, headers included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of blocks.
    pub fn block_count(&self) -> usize {
        self.blocks
    }

    /// Length of the FED fragment itself (the data of all blocks).
    pub fn fragment_len(&self) -> usize {
        self.fragment_len
    }

    /// The data of each block in order: the FED fragment in pieces, without copying.
    pub fn segments(&self) -> impl Iterator<Item = &'a [u8]> + Clone + use<'a> {
        segments::<FerolBlockHeader>(self.bytes)
    }

    /// Copies the FED fragment contiguously to the start of `out`; returns its length.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<usize> {
        copy_segments(self.segments(), self.fragment_len, out, "FED fragment")
    }

    /// The fragment as a [`Fragment`] in place, when it fits in one block.
    pub fn as_single(&self) -> Option<Fragment<'a>> {
        if self.blocks != 1 {
            return None;
        }
        Fragment::parse(self.bytes.get(HEADER_BYTES..)?).ok()
    }

    /// The CRC-16 computed over the fragment's pieces.
    pub fn computed_crc(&self) -> u16 {
        fed::fragment_crc_pieces(self.segments())
    }

    /// Checks the trailer's CRC-16 against the computed one. The error's offset is that of the
    /// FED header, just after the first block header.
    pub fn check_crc(&self) -> Result<()> {
        fed::compare_crc(self.trailer.crc, self.computed_crc(), HEADER_BYTES)
    }
}

/// A unit that a block stream carries back to back: a FEROL fragment, a DTH orbit.
pub trait StreamUnit<'a>: Sized {
    /// Reads the unit at the start of `buf`; returns it and the bytes it takes on the stream.
    fn read(buf: &'a [u8]) -> Result<(Self, usize)>;
}

/// The units of a buffer holding a block stream, back to back: yields each with its offset in
/// the buffer. Errors carry stream offsets; the iterator ends after the first one. A buffer that
/// ends inside a unit yields a [`FormatError::Truncated`] error, and
/// [`BlockStream::position`] says where the incomplete unit starts.
#[derive(Debug, Clone)]
pub struct BlockStream<'a, U> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
    unit: PhantomData<U>,
}

/// A reader of a FEROL stream's fragments.
pub type FerolStream<'a> = BlockStream<'a, FerolFragment<'a>>;

impl<'a, U: StreamUnit<'a>> BlockStream<'a, U> {
    /// A reader over the stream bytes in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        BlockStream { buf, pos: 0, done: false, unit: PhantomData }
    }

    /// Offset just past the last unit read: where the next one starts.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a, U: StreamUnit<'a>> Iterator for BlockStream<'a, U> {
    type Item = Result<(usize, U)>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..).filter(|r| !r.is_empty() && !self.done)?;
        match U::read(rest) {
            Ok((unit, len)) => {
                let at = self.pos;
                self.pos += len;
                Some(Ok((at, unit)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e.shifted(self.pos)))
            }
        }
    }
}

impl<'a> StreamUnit<'a> for FerolFragment<'a> {
    fn read(buf: &'a [u8]) -> Result<(Self, usize)> {
        FerolFragment::parse(buf).map(|f| (f, f.wire_len()))
    }
}

// ---- Block chains, shared with the DTH orbit streams of `crate::orbit`. ----

/// Two big-endian words from 16 header bytes.
pub(crate) fn be_words(bytes: [u8; 16]) -> (u64, u64) {
    let w = u128::from_be_bytes(bytes);
    ((w >> 64) as u64, w as u64)
}

/// 16 header bytes from two big-endian words.
pub(crate) fn be_words_to_bytes(word0: u64, word1: u64) -> [u8; 16] {
    ((u128::from(word0) << 64) | u128::from(word1)).to_be_bytes()
}

/// One piece of data split into blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    pub number: u16,
    pub first: bool,
    pub last: bool,
    pub range: Range<usize>,
}

/// Splits `len` bytes into pieces of at most `max` bytes. Callers keep the piece count within
/// 65536 so that block numbers fit their 16 bits.
#[derive(Debug, Clone)]
pub(crate) struct Split {
    len: usize,
    max: usize,
    start: usize,
    number: usize,
}

impl Split {
    pub fn new(len: usize, max: usize) -> Self {
        Split { len, max: max.max(1), start: 0, number: 0 }
    }
}

impl Iterator for Split {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.start >= self.len {
            return None;
        }
        let end = self.start.saturating_add(self.max).min(self.len);
        let piece =
            Piece { number: self.number as u16, first: self.start == 0, last: end == self.len, range: self.start..end };
        self.start = end;
        self.number += 1;
        Some(piece)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.len - self.start.min(self.len)).div_ceil(self.max);
        (n, Some(n))
    }
}

/// Writes header-and-data blocks at the start of `out`; `wire_len` is their total size.
pub(crate) fn write_blocks(
    data: &[u8],
    blocks: impl Iterator<Item = ([u8; 16], Range<usize>)>,
    wire_len: usize,
    out: &mut [u8],
    what: &'static str,
) -> Result<usize> {
    need_space(out, wire_len, what)?;
    let mut pos = 0;
    for (header, range) in blocks {
        let piece = &data[range];
        let end = pos + header.len() + piece.len();
        out[pos..pos + header.len()].copy_from_slice(&header);
        out[pos + header.len()..end].copy_from_slice(piece);
        pos = end;
    }
    Ok(pos)
}

/// What the chain reader needs to know of a block header.
pub(crate) trait ChainHeader: Copy {
    /// The block, e.g. "FEROL block".
    const WHAT: &'static str;
    /// The block header, e.g. "FEROL block header".
    const HEADER: &'static str;
    /// Name of the first-block flag in errors.
    const FIRST_FLAG: &'static str;
    /// Decodes and checks the header at `buf[offset..]`.
    fn read(buf: &[u8], offset: usize) -> Result<Self>;
    fn is_first(&self) -> bool;
    fn is_last(&self) -> bool;
    fn number(&self) -> u16;
    fn data_len(&self) -> usize;
    /// Fields that must be equal in every block of a chain, with their names.
    fn ids(&self) -> [(&'static str, u64); 2];
}

impl ChainHeader for FerolBlockHeader {
    const WHAT: &'static str = "FEROL block";
    const HEADER: &'static str = "FEROL block header";
    const FIRST_FLAG: &'static str = "first-block flag";

    fn read(buf: &[u8], offset: usize) -> Result<Self> {
        FerolBlockHeader::parse(buf, offset)
    }
    fn is_first(&self) -> bool {
        self.first
    }
    fn is_last(&self) -> bool {
        self.last
    }
    fn number(&self) -> u16 {
        self.block_number
    }
    fn data_len(&self) -> usize {
        usize::from(self.data_words) * WORD_BYTES
    }
    fn ids(&self) -> [(&'static str, u64); 2] {
        [("FED id", self.fed_id.into()), ("event number", self.event_number.into())]
    }
}

/// The blocks of one unit (a fragment, an orbit) at the start of a buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chain<H> {
    /// Header of the first block.
    pub first: H,
    pub blocks: usize,
    /// Sum of the blocks' data lengths.
    pub data_len: usize,
    /// Bytes from the start of the buffer to the end of the last block.
    pub wire_len: usize,
}

/// Reads blocks from the start of `buf` up to the one flagged last: first flag on block 0 only,
/// numbers 0, 1, 2..., the same ids in every block, and each block's data present.
pub(crate) fn read_chain<H: ChainHeader>(buf: &[u8]) -> Result<Chain<H>> {
    let mut pos = 0usize;
    let mut data_len = 0usize;
    let mut blocks = 0usize;
    let mut first: Option<H> = None;
    loop {
        let header = H::read(buf, pos)?;
        let is_block0 = blocks == 0;
        if header.is_first() != is_block0 {
            return Err(FormatError::bad(
                H::HEADER,
                H::FIRST_FLAG,
                pos,
                dec(u8::from(is_block0)),
                dec(u8::from(header.is_first())),
            ));
        }
        // Past 65535 blocks no 16-bit number matches, so a chain without a last flag ends here.
        if usize::from(header.number()) != blocks {
            return Err(FormatError::bad(H::HEADER, "block number", pos, dec(blocks), dec(header.number())));
        }
        let first = *first.get_or_insert(header);
        for ((field, expected), (_, found)) in first.ids().into_iter().zip(header.ids()) {
            if expected != found {
                return Err(FormatError::bad(H::HEADER, field, pos, dec(expected), dec(found)));
            }
        }
        let block_len = HEADER_BYTES.saturating_add(header.data_len());
        let available = buf.len().saturating_sub(pos);
        if available < block_len {
            return Err(FormatError::truncated(H::WHAT, pos, block_len, available));
        }
        pos += block_len;
        data_len += header.data_len();
        blocks += 1;
        if header.is_last() {
            return Ok(Chain { first, blocks, data_len, wire_len: pos });
        }
    }
}

/// The data of each block of a chain already checked by [`read_chain`].
pub(crate) fn segments<'a, H: ChainHeader>(chain: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + Clone + use<'a, H> {
    let mut rest = chain;
    std::iter::from_fn(move || {
        let header = H::read(rest, 0).ok()?;
        let end = HEADER_BYTES.checked_add(header.data_len())?;
        let data = rest.get(HEADER_BYTES..end)?;
        rest = rest.get(end..)?;
        Some(data)
    })
}

/// Copies `len` bytes held in `pieces` contiguously to the start of `out`.
pub(crate) fn copy_segments<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
    len: usize,
    out: &mut [u8],
    what: &'static str,
) -> Result<usize> {
    need_space(out, len, what)?;
    let mut pos = 0;
    for piece in pieces {
        let end = pos + piece.len();
        out[pos..end].copy_from_slice(piece);
        pos = end;
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::write_fragment;
    use proptest::prelude::*;

    /// docs/formats.md §10: the 3-word fragment (FED 1, LV1 id 1).
    const VECTOR: [u8; 24] = [
        0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00,
        0x85, 0x2f, 0x03, 0x00, 0x00, 0xa0,
    ];

    /// A fragment with `payload_words` words of payload that differ from each other.
    fn fragment(source_id: u16, lv1_id: u32, payload_words: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..payload_words as u64)
            .flat_map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5).to_le_bytes())
            .collect();
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
        let h = FerolBlockHeader {
            first: false,
            last: true,
            block_number: 9,
            data_words: 510,
            fed_id: 5,
            event_number: 77,
        };
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
        let h =
            FerolBlockHeader { first: true, last: true, block_number: 0, data_words: 1, fed_id: 1, event_number: 1 };
        let mut buf = vec![0u8; 3];
        buf.extend_from_slice(&h.to_bytes());
        assert_eq!(
            FerolBlockHeader::parse(&buf[..18], 3).unwrap_err(),
            FormatError::truncated("FEROL block header", 3, 16, 15)
        );
        assert_eq!(
            FerolBlockHeader::parse(&buf, 40).unwrap_err(),
            FormatError::truncated("FEROL block header", 40, 16, 0)
        );
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
        assert_eq!(
            FerolFragment::parse(&out[..5000]).unwrap_err(),
            FormatError::truncated("FEROL block", 4096, 4096, 904)
        );
    }

    #[test]
    fn block_chain_errors() {
        let good = stream_of(&fragment(9, 10, 1100)); // three blocks at 0, 4096, 8192
        let check = |edit: &dyn Fn(&mut Vec<u8>), expected: FormatError| {
            let mut s = good.clone();
            edit(&mut s);
            assert_eq!(FerolFragment::parse(&s).unwrap_err(), expected);
        };
        check(
            &|s| s[8192] = 0,
            FormatError::bad("FEROL block header", "signature", 8192, hex(0x475Au16), hex(0x005Au16)),
        );
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
}
