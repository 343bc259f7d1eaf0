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

    /// As [`FerolFragment::segments`], of the blocks `blocks` of a fragment read before (by
    /// [`FerolFragment::parse`] or [`FerolFragment::parse_framed`]): for a receiver that keeps
    /// only where the fragment lies, and need not check its blocks again to hand them on.
    /// Blocks not so read give pieces up to the first that does not hold together.
    pub fn segments_of(blocks: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + Clone + use<'a> {
        segments::<FerolBlockHeader>(blocks)
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
mod tests;
