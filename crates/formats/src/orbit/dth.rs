//! DTH TCP stream blocks (Tessera's own header, see the module doc of [`crate::orbit`]): an orbit
//! block split into stream blocks, and gathered back without copying.

use super::*;
use std::ops::Range;

use crate::error::{FormatError, Result, dec, hex, take};
use crate::ferol::{self, BlockStream, ChainHeader, Piece, Split, StreamUnit};

/// Size of a DTH stream block header.
pub const DTH_HEADER_BYTES: usize = 16;
/// DTH block header signature, wire bytes `47 5A` (as FEROL's).
pub const DTH_SIGNATURE: u16 = ferol::SIGNATURE;
/// DTH block header version written and accepted.
pub const DTH_HEADER_VERSION: u8 = 1;
/// Default largest stream block, header included.
pub const DEFAULT_MAX_BLOCK_BYTES: usize = 8192;
/// Smallest `max_block_bytes` a writer accepts: a header and one 16-byte unit.
pub const MIN_MAX_BLOCK_BYTES: usize = DTH_HEADER_BYTES + UNIT_BYTES;
/// Largest data length the 24-bit field holds, in whole 16-byte units.
pub const DTH_MAX_DATA_BYTES: usize = 0xFF_FFF0;

/// The header of one DTH stream block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DthBlockHeader {
    /// First block of an orbit (word 0 bit 31).
    pub start: bool,
    /// Last block of an orbit (word 0 bit 30).
    pub end: bool,
    /// Block number within the orbit, 0, 1, 2... (word 0 bits 47:32).
    pub block_number: u16,
    /// Data bytes in this block: a multiple of 16, at least 16 (word 0 bits 23:0).
    pub data_len: u32,
    /// Source id (word 1 bits 63:32).
    pub source_id: u32,
    /// Orbit number (word 1 bits 31:0).
    pub orbit: u32,
}

impl DthBlockHeader {
    /// Encodes the header (version 1). The data length is cut to 24 bits.
    pub fn to_bytes(&self) -> [u8; DTH_HEADER_BYTES] {
        let word0 = (u64::from(DTH_SIGNATURE) << 48)
            | (u64::from(self.block_number) << 32)
            | (u64::from(self.start) << 31)
            | (u64::from(self.end) << 30)
            | (u64::from(DTH_HEADER_VERSION) << 24)
            | u64::from(self.data_len & 0xFF_FFFF);
        let word1 = (u64::from(self.source_id) << 32) | u64::from(self.orbit);
        ferol::be_words_to_bytes(word0, word1)
    }

    /// Decodes the header at `buf[offset..]`, checking signature, version and data length.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "DTH block header";
        let (word0, word1) = ferol::be_words(take::<DTH_HEADER_BYTES>(buf, offset, WHAT)?);
        let signature = (word0 >> 48) as u16;
        if signature != DTH_SIGNATURE {
            return Err(FormatError::bad(WHAT, "signature", offset, hex(DTH_SIGNATURE), hex(signature)));
        }
        let version = ((word0 >> 24) & 0x3F) as u8;
        if version != DTH_HEADER_VERSION {
            return Err(FormatError::bad(WHAT, "version", offset, dec(DTH_HEADER_VERSION), dec(version)));
        }
        let data_len = (word0 & 0xFF_FFFF) as u32;
        if data_len == 0 || !(data_len as usize).is_multiple_of(UNIT_BYTES) {
            return Err(FormatError::bad(WHAT, "data length", offset, "a non-zero multiple of 16", dec(data_len)));
        }
        Ok(DthBlockHeader {
            start: word0 & (1 << 31) != 0,
            end: word0 & (1 << 30) != 0,
            block_number: (word0 >> 32) as u16,
            data_len,
            source_id: (word1 >> 32) as u32,
            orbit: word1 as u32,
        })
    }
}

impl ChainHeader for DthBlockHeader {
    const WHAT: &'static str = "DTH block";
    const HEADER: &'static str = "DTH block header";
    const FIRST_FLAG: &'static str = "start-of-orbit flag";

    fn read(buf: &[u8], offset: usize) -> Result<Self> {
        DthBlockHeader::parse(buf, offset)
    }
    fn is_first(&self) -> bool {
        self.start
    }
    fn is_last(&self) -> bool {
        self.end
    }
    fn number(&self) -> u16 {
        self.block_number
    }
    fn data_len(&self) -> usize {
        self.data_len as usize
    }
    fn ids(&self) -> [(&'static str, u64); 2] {
        [("source id", self.source_id.into()), ("orbit", self.orbit.into())]
    }
}

/// Data bytes per block for a largest block of `max_block_bytes`: whole 16-byte units.
fn dth_data_per_block(max_block_bytes: usize) -> usize {
    (max_block_bytes.saturating_sub(DTH_HEADER_BYTES) / UNIT_BYTES * UNIT_BYTES).min(DTH_MAX_DATA_BYTES)
}

/// Bytes an orbit block of `orbit_len` bytes takes on a DTH stream with blocks of at most
/// `max_block_bytes` (0 when that is below [`MIN_MAX_BLOCK_BYTES`]).
pub fn dth_wire_len(orbit_len: usize, max_block_bytes: usize) -> usize {
    match dth_data_per_block(max_block_bytes) {
        0 => 0,
        per_block => orbit_len.saturating_add(DTH_HEADER_BYTES.saturating_mul(orbit_len.div_ceil(per_block))),
    }
}

/// One stream block of an orbit being sent: its header and the range of the orbit block it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DthBlock {
    /// The block's header.
    pub header: DthBlockHeader,
    /// The bytes of the orbit block this block carries.
    pub data: Range<usize>,
}

impl DthBlock {
    /// The header as it goes on the wire.
    pub fn header_bytes(&self) -> [u8; DTH_HEADER_BYTES] {
        self.header.to_bytes()
    }
}

/// The stream blocks an orbit block is sent in, in order; holds no reference to the orbit block,
/// for vectored writes.
#[derive(Debug, Clone)]
pub struct DthBlocks {
    split: Split,
    source_id: u32,
    orbit: u32,
    wire_len: usize,
}

impl DthBlocks {
    /// Plans the stream blocks of `orbit_block`, which must be exactly one orbit block (its
    /// header's size equal to its length); source id and orbit come from its header. Blocks take
    /// at most `max_block_bytes`, header included, and there can be at most 65536 of them.
    pub fn new(orbit_block: &[u8], max_block_bytes: usize) -> Result<Self> {
        let block = OrbitBlock::parse(orbit_block)?;
        if block.wire_len() != orbit_block.len() {
            return Err(FormatError::bad(
                "orbit header",
                "block size (16-byte units)",
                0,
                dec(orbit_block.len() / UNIT_BYTES),
                dec(block.header.block_units),
            ));
        }
        let per_block = dth_data_per_block(max_block_bytes);
        if per_block == 0 {
            return Err(FormatError::bad(
                "DTH block writer",
                "max block bytes",
                0,
                format!("at least {MIN_MAX_BLOCK_BYTES}"),
                dec(max_block_bytes),
            ));
        }
        let blocks = orbit_block.len().div_ceil(per_block);
        if blocks > 1 << 16 {
            return Err(FormatError::bad("DTH stream", "block count", 0, "at most 65536", dec(blocks)));
        }
        Ok(DthBlocks {
            split: Split::new(orbit_block.len(), per_block),
            source_id: block.header.source_id,
            orbit: block.header.orbit,
            wire_len: dth_wire_len(orbit_block.len(), max_block_bytes),
        })
    }

    /// Bytes the whole orbit takes on the wire.
    pub fn wire_len(&self) -> usize {
        self.wire_len
    }
}

impl Iterator for DthBlocks {
    type Item = DthBlock;

    fn next(&mut self) -> Option<DthBlock> {
        let Piece { number, first, last, range } = self.split.next()?;
        let header = DthBlockHeader {
            start: first,
            end: last,
            block_number: number,
            // At most DTH_MAX_DATA_BYTES, so it fits.
            data_len: range.len() as u32,
            source_id: self.source_id,
            orbit: self.orbit,
        };
        Some(DthBlock { header, data: range })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.split.size_hint()
    }
}

/// Writes `orbit_block` as DTH stream blocks of at most `max_block_bytes` at the start of `out`;
/// returns the bytes written.
pub fn write_dth_blocks(orbit_block: &[u8], max_block_bytes: usize, out: &mut [u8]) -> Result<usize> {
    let blocks = DthBlocks::new(orbit_block, max_block_bytes)?;
    let wire_len = blocks.wire_len();
    ferol::write_blocks(orbit_block, blocks.map(|b| (b.header_bytes(), b.data)), wire_len, out, "DTH blocks")
}

/// A checked view of the stream blocks of one orbit at the start of a DTH stream buffer.
#[derive(Debug, Clone, Copy)]
pub struct DthOrbit<'a> {
    bytes: &'a [u8],
    blocks: usize,
    orbit_len: usize,
    /// The orbit header at the start of the first block's data.
    pub header: OrbitHeader,
    /// The source id of its stream block headers (the same in every one).
    pub stream_source_id: u32,
}

impl<'a> DthOrbit<'a> {
    /// Reads the stream blocks of the orbit that starts `buf`: signature, version and data length
    /// of each, start flag on block 0 only, block numbers 0, 1, 2..., the same source id and orbit
    /// throughout, and an orbit header of the same orbit whose size is the data carried. Its
    /// source id is checked apart ([`DthOrbit::check_source_id`]).
    /// A buffer that ends before the end-of-orbit block does gives [`FormatError::Truncated`].
    /// Offsets in orbit header errors are that of the header, 16.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let chain = ferol::read_chain::<DthBlockHeader>(buf)?;
        let bytes = buf.get(..chain.wire_len).unwrap_or_default();
        // The orbit header may straddle blocks when they are small: gather it.
        let mut head = [0u8; ORBIT_HEADER_BYTES];
        let mut filled = 0;
        for segment in ferol::segments::<DthBlockHeader>(bytes) {
            let n = segment.len().min(ORBIT_HEADER_BYTES - filled);
            head[filled..filled + n].copy_from_slice(&segment[..n]);
            filled += n;
            if filled == ORBIT_HEADER_BYTES {
                break;
            }
        }
        if filled < ORBIT_HEADER_BYTES {
            return Err(FormatError::bad(
                "DTH orbit",
                "data length",
                0,
                format!("at least {ORBIT_HEADER_BYTES}"),
                dec(chain.data_len),
            ));
        }
        let header = OrbitHeader::parse(&head, 0).map_err(|e| e.shifted(DTH_HEADER_BYTES))?;
        let first = chain.first;
        // A source id that differs is the content's fault, not the stream's: the orbit's bounds
        // are sound, and the reader judges which header is wrong ([`DthOrbit::check_source_id`]).
        if header.orbit != first.orbit {
            return Err(FormatError::bad("DTH block header", "orbit", 0, dec(header.orbit), dec(first.orbit)));
        }
        if header.block_len() != chain.data_len {
            return Err(FormatError::bad(
                "orbit header",
                "block size (16-byte units)",
                DTH_HEADER_BYTES,
                dec(chain.data_len / UNIT_BYTES),
                dec(header.block_units),
            ));
        }
        Ok(DthOrbit {
            bytes,
            blocks: chain.blocks,
            orbit_len: chain.data_len,
            header,
            stream_source_id: first.source_id,
        })
    }

    /// Checks that the stream's blocks and the orbit header name `source`, the source the
    /// stream is read for (`None`: the blocks' own): the error names the header that is wrong,
    /// the stream block header (at 0) or the orbit header (at 16).
    pub fn check_source_id(&self, source: Option<u32>) -> Result<()> {
        let source = source.unwrap_or(self.stream_source_id);
        if self.stream_source_id != source {
            return Err(FormatError::bad("DTH block header", "source id", 0, dec(source), dec(self.stream_source_id)));
        }
        if self.header.source_id != source {
            return Err(FormatError::bad(
                "orbit header",
                "source id",
                DTH_HEADER_BYTES,
                dec(source),
                dec(self.header.source_id),
            ));
        }
        Ok(())
    }

    /// Bytes the orbit takes in the stream, block headers included.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// The stream blocks as they are, headers included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of stream blocks.
    pub fn block_count(&self) -> usize {
        self.blocks
    }

    /// Length of the orbit block itself (the data of all stream blocks).
    pub fn orbit_len(&self) -> usize {
        self.orbit_len
    }

    /// The data of each stream block in order: the orbit block in pieces, without copying.
    pub fn segments(&self) -> impl Iterator<Item = &'a [u8]> + Clone + use<'a> {
        ferol::segments::<DthBlockHeader>(self.bytes)
    }

    /// As [`DthOrbit::segments`], of the stream blocks `blocks` of an orbit read before (by
    /// [`DthOrbit::parse`]): for a receiver that keeps only where the orbit lies, and need not
    /// check its blocks again to hand them on. Blocks not so read give pieces up to the first
    /// that does not hold together.
    pub fn segments_of(blocks: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + Clone + use<'a> {
        ferol::segments::<DthBlockHeader>(blocks)
    }

    /// Copies the orbit block contiguously to the start of `out`; returns its length. Parse the
    /// copy with [`OrbitBlock::parse`] to walk its fragments.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<usize> {
        ferol::copy_segments(self.segments(), self.orbit_len, out, "orbit block")
    }

    /// The CRC-32C of the orbit block after its header, computed over the stream blocks' data
    /// in place.
    pub fn computed_crc(&self) -> u32 {
        let mut crc = crate::crc::Crc32c::new();
        let mut skip = ORBIT_HEADER_BYTES;
        for segment in self.segments() {
            let n = skip.min(segment.len());
            skip -= n;
            crc.update(&segment[n..]);
        }
        crc.finish()
    }

    /// Checks the orbit header's CRC-32C against the data the stream blocks carry. The error's
    /// offset is the orbit header's in the stream, 16.
    pub fn check_crc(&self) -> Result<()> {
        self.header.check_crc(self.computed_crc(), DTH_HEADER_BYTES)
    }

    /// The orbit block in place, when it fits in one stream block.
    pub fn as_single(&self) -> Option<OrbitBlock<'a>> {
        if self.blocks != 1 {
            return None;
        }
        OrbitBlock::parse(self.bytes.get(DTH_HEADER_BYTES..)?).ok()
    }
}

/// A reader of a DTH stream's orbits (see [`BlockStream`]).
pub type DthStream<'a> = BlockStream<'a, DthOrbit<'a>>;

impl<'a> StreamUnit<'a> for DthOrbit<'a> {
    fn read(buf: &'a [u8]) -> Result<(Self, usize)> {
        DthOrbit::parse(buf).map(|o| (o, o.wire_len()))
    }
}

/// True when `buf` starts like a DTH orbit stream rather than a FEROL stream: signature `47 5A`,
/// header version 1 in word 0 bits 29:24 (zero in a FEROL header), and `"HO"` at offset 16.
pub fn looks_like_dth_stream(buf: &[u8]) -> bool {
    buf.get(0..2) == Some(&DTH_SIGNATURE.to_be_bytes()[..])
        && buf.get(4).is_some_and(|b| b & 0x3F == DTH_HEADER_VERSION)
        && buf.get(16..18) == Some(&ORBIT_MARKER[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orbit::test_support::*;
    use proptest::prelude::*;

    #[test]
    fn dth_header_bytes_and_errors() {
        let h = DthBlockHeader {
            start: true,
            end: false,
            block_number: 2,
            data_len: 0x10_0010,
            source_id: SOURCE,
            orbit: ORBIT,
        };
        let b = h.to_bytes();
        assert_eq!(b, [0x47, 0x5A, 0, 2, 0x81, 0x10, 0x00, 0x10, 1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D]);
        assert_eq!(DthBlockHeader::parse(&b, 0).unwrap(), h);
        let mut x = b;
        x[1] = 0x5B;
        assert_eq!(
            DthBlockHeader::parse(&x, 0).unwrap_err(),
            FormatError::bad("DTH block header", "signature", 0, hex(0x475Au16), hex(0x475Bu16))
        );
        let mut x = b;
        x[4] = 0x80;
        assert_eq!(
            DthBlockHeader::parse(&x, 0).unwrap_err(),
            FormatError::bad("DTH block header", "version", 0, dec(1), dec(0))
        );
        for len in [0u32, 8, 17] {
            let x = DthBlockHeader { data_len: len, ..h }.to_bytes();
            assert_eq!(
                DthBlockHeader::parse(&x, 0).unwrap_err(),
                FormatError::bad("DTH block header", "data length", 0, "a non-zero multiple of 16", dec(len))
            );
        }
        assert_eq!(
            DthBlockHeader::parse(&b[..10], 0).unwrap_err(),
            FormatError::truncated("DTH block header", 0, 16, 10)
        );
    }

    #[test]
    fn dth_split_and_round_trip() {
        let block = orbit_block(&[100; 100]); // 32 + 100 * 160 = 16032 bytes
        assert_eq!(dth_wire_len(block.len(), DEFAULT_MAX_BLOCK_BYTES), block.len() + 2 * 16);
        assert_eq!(dth_wire_len(100, 31), 0);
        assert_eq!(dth_wire_len(100, 32), 100 + 7 * 16);
        // A max that is not header + whole units rounds the data down to units.
        assert_eq!(dth_wire_len(64, 16 + 40), 64 + 2 * 16);
        let plan: Vec<DthBlock> = DthBlocks::new(&block, DEFAULT_MAX_BLOCK_BYTES).unwrap().collect();
        let ranges: Vec<_> = plan.iter().map(|b| b.data.clone()).collect();
        assert_eq!(ranges, vec![0..8176, 8176..16032]);
        let flags: Vec<_> = plan.iter().map(|b| (b.header.block_number, b.header.start, b.header.end)).collect();
        assert_eq!(flags, vec![(0, true, false), (1, false, true)]);
        assert!(plan.iter().all(|b| b.header.source_id == SOURCE && b.header.orbit == ORBIT));

        for max in [32, 48, 100, 4096, DEFAULT_MAX_BLOCK_BYTES, 1 << 20] {
            let s = dth_stream(&block, max);
            assert!(looks_like_dth_stream(&s));
            let d = DthOrbit::parse(&s).unwrap();
            assert_eq!(d.wire_len(), s.len());
            assert_eq!(d.orbit_len(), block.len());
            assert_eq!(d.block_count(), block.len().div_ceil(dth_data_per_block(max)));
            assert_eq!(d.header, OrbitHeader::parse(&block, 0).unwrap());
            assert!(d.segments().all(|seg| seg.len() + 16 <= max));
            assert_eq!(d.segments().flatten().copied().collect::<Vec<u8>>(), block);
            let mut copy = vec![0; block.len()];
            assert_eq!(d.copy_to(&mut copy).unwrap(), block.len());
            assert_eq!(copy, block);
            assert_eq!(d.as_single().is_some(), d.block_count() == 1);
            assert_eq!(OrbitBlock::parse(&copy).unwrap().validate().unwrap(), 100);
            // The CRC-32C over the pieces in place is the block's own, wherever they split it.
            assert_eq!(d.computed_crc(), OrbitBlock::parse(&copy).unwrap().computed_crc());
            assert_eq!(d.check_crc(), Ok(()));
        }
        let mut bad = block.clone();
        bad[5000] ^= 1;
        let s = dth_stream(&bad, 100);
        let err = DthOrbit::parse(&s).unwrap().check_crc().unwrap_err();
        assert!(matches!(err, FormatError::Checksum { checksum: "CRC-32C", offset: 16, .. }), "{err:?}");
    }

    #[test]
    fn dth_chain_errors() {
        let block = orbit_block(&[100; 3]); // 32 + 3 * 160 = 512 bytes
        let good = dth_stream(&block, 16 + 256); // data 256, 256; blocks at 0 and 272
        assert_eq!(good.len(), 544);
        let rewrite = |s: &mut Vec<u8>, at: usize, edit: &dyn Fn(&mut DthBlockHeader)| {
            let mut h = DthBlockHeader::parse(s, at).unwrap();
            edit(&mut h);
            s[at..at + 16].copy_from_slice(&h.to_bytes());
        };
        let check = |edit: &dyn Fn(&mut Vec<u8>), expected: FormatError| {
            let mut s = good.clone();
            edit(&mut s);
            assert_eq!(DthOrbit::parse(&s).unwrap_err(), expected);
        };
        const H: &str = "DTH block header";
        check(&|s| rewrite(s, 0, &|h| h.start = false), FormatError::bad(H, "start-of-orbit flag", 0, dec(1), dec(0)));
        check(
            &|s| rewrite(s, 272, &|h| h.start = true),
            FormatError::bad(H, "start-of-orbit flag", 272, dec(0), dec(1)),
        );
        check(&|s| rewrite(s, 272, &|h| h.block_number = 0), FormatError::bad(H, "block number", 272, dec(1), dec(0)));
        check(&|s| rewrite(s, 272, &|h| h.source_id = 9), FormatError::bad(H, "source id", 272, dec(SOURCE), dec(9)));
        check(&|s| rewrite(s, 272, &|h| h.orbit = 9), FormatError::bad(H, "orbit", 272, dec(ORBIT), dec(9)));
        check(&|s| s[272 + 4] = 0xC0, FormatError::bad(H, "version", 272, dec(1), dec(0)));
        // Block headers that agree with each other but not with the orbit header.
        // Block headers that name another source than the orbit header read as an orbit; the
        // reader is told which header differs from the source it reads for.
        let mut s = good.clone();
        [0, 272].iter().for_each(|&at| rewrite(&mut s, at, &|h| h.source_id = 9));
        let orbit = DthOrbit::parse(&s).unwrap();
        assert_eq!(orbit.check_source_id(Some(SOURCE)), Err(FormatError::bad(H, "source id", 0, dec(SOURCE), dec(9))));
        assert_eq!(
            orbit.check_source_id(None),
            Err(FormatError::bad("orbit header", "source id", 16, dec(9), dec(SOURCE)))
        );
        assert_eq!(DthOrbit::parse(&good).unwrap().check_source_id(Some(SOURCE)), Ok(()));
        check(
            &|s| [0, 272].iter().for_each(|&at| rewrite(s, at, &|h| h.orbit = 9)),
            FormatError::bad(H, "orbit", 0, dec(ORBIT), dec(9)),
        );
        // An orbit header that is not one, and one whose size disagrees with the data carried.
        check(&|s| s[17] = b'X', FormatError::bad("orbit header", "marker", 16, hex(0x484Fu16), hex(0x4858u16)));
        check(
            &|s| s[16 + 20] = 31,
            FormatError::bad("orbit header", "block size (16-byte units)", 16, dec(32), dec(31)),
        );
        // End flag one block early: the data is short of the orbit header's size.
        check(
            &|s| rewrite(s, 0, &|h| h.end = true),
            FormatError::bad("orbit header", "block size (16-byte units)", 16, dec(16), dec(32)),
        );
        // A one-block orbit of a single unit cannot hold an orbit header.
        let tiny = DthBlockHeader { start: true, end: true, block_number: 0, data_len: 16, source_id: 1, orbit: 1 };
        let mut s = tiny.to_bytes().to_vec();
        s.extend_from_slice(&block[..16]);
        assert_eq!(
            DthOrbit::parse(&s).unwrap_err(),
            FormatError::bad("DTH orbit", "data length", 0, "at least 32", dec(16))
        );
        // Every strict prefix is truncated, at the block it ends in.
        for len in 0..good.len() {
            assert!(DthOrbit::parse(&good[..len]).unwrap_err().is_truncated(), "prefix {len}");
        }
        assert_eq!(DthOrbit::parse(&good[..300]).unwrap_err(), FormatError::truncated("DTH block", 272, 272, 28));
    }

    #[test]
    fn dth_writer_errors() {
        let block = orbit_block(&[1, 2]);
        let mut out = vec![0; 1000];
        assert_eq!(
            write_dth_blocks(&block, 31, &mut out).unwrap_err(),
            FormatError::bad("DTH block writer", "max block bytes", 0, "at least 32", dec(31))
        );
        let mut longer = block.clone();
        longer.extend_from_slice(&[0; 16]);
        assert_eq!(
            write_dth_blocks(&longer, 64, &mut out).unwrap_err(),
            FormatError::bad("orbit header", "block size (16-byte units)", 0, dec(11), dec(10))
        );
        assert!(write_dth_blocks(&block[..100], 64, &mut out).unwrap_err().is_truncated());
        assert_eq!(
            write_dth_blocks(&block, 64, &mut out[..10]).unwrap_err(),
            FormatError::BufferTooSmall { what: "DTH blocks", needed: dth_wire_len(block.len(), 64), available: 10 }
        );
        // More than 65536 blocks cannot be numbered.
        let big = orbit_block(&[16 * 70_000]);
        let blocks = big.len().div_ceil(16);
        assert_eq!(
            DthBlocks::new(&big, 32).unwrap_err(),
            FormatError::bad("DTH stream", "block count", 0, "at most 65536", dec(blocks))
        );
        assert_eq!(DthBlocks::new(&big, 48).unwrap().count(), big.len().div_ceil(32));
    }

    #[test]
    fn dth_stream_offsets_errors_and_detection() {
        let a = dth_stream(&orbit_block(&[10]), 64);
        let b = dth_stream(&orbit_block(&[300, 5]), DEFAULT_MAX_BLOCK_BYTES);
        let mut s = [a.clone(), b.clone()].concat();
        let got: Vec<(usize, usize)> =
            DthStream::new(&s).map(|r| r.map(|(at, o)| (at, o.block_count())).unwrap()).collect();
        assert_eq!(got, vec![(0, 2), (a.len(), 1)]);
        let mut stream = DthStream::new(&s[..s.len() - 1]);
        assert!(stream.next().unwrap().is_ok());
        let err = stream.next().unwrap().unwrap_err();
        assert_eq!(err, FormatError::truncated("DTH block", a.len(), b.len(), b.len() - 1));
        assert_eq!(stream.position(), a.len());
        assert!(stream.next().is_none());
        s[a.len() + 1] = 0;
        let results: Vec<_> = DthStream::new(&s).collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].as_ref().unwrap_err().offset(), Some(a.len()));

        assert!(looks_like_dth_stream(&a));
        assert!(!looks_like_dth_stream(&a[..17]));
        assert!(!looks_like_dth_stream(&[]));
        let mut not_ho = a.clone();
        not_ho[16] = b'X';
        assert!(!looks_like_dth_stream(&not_ho));
        // A FEROL stream, even one whose FED header's first bytes happen to read "HO".
        let ferol = crate::ferol::FerolBlockHeader {
            first: true,
            last: true,
            block_number: 0,
            data_words: 2,
            fed_id: 1,
            event_number: 1,
        };
        let mut f = ferol.to_bytes().to_vec();
        f.extend_from_slice(b"HO\0\0\0\0\0\x50");
        f.extend_from_slice(&[0; 8]);
        assert!(!looks_like_dth_stream(&f));
    }

    proptest! {
        #[test]
        fn prop_orbit_round_trip_through_a_dth_stream(
            frags in proptest::collection::vec((0u64..(1 << 44), 0u16..3564, any::<u16>(), proptest::collection::vec(any::<u8>(), 0..200)), 0..12),
            source_id: u32, run: u32, orbit: u32, max in 32usize..600,
        ) {
            let mut out = vec![0; 32 + frags.iter().map(|f| orbit_fragment_len(f.3.len())).sum::<usize>()];
            let mut w = OrbitBlockWriter::new(&mut out, source_id, run, orbit).unwrap();
            for (id, bx, status, payload) in &frags {
                w.push_fragment(&FragmentInfo { event_id: *id, bx: *bx, status: *status, ..FragmentInfo::default() }, payload).unwrap();
            }
            let n = w.finish().unwrap();
            prop_assert_eq!(n, out.len());
            let stream = dth_stream(&out, max);
            let (at, d) = DthStream::new(&stream).next().unwrap().unwrap();
            prop_assert_eq!((at, d.wire_len()), (0, stream.len()));
            let mut copy = vec![0; d.orbit_len()];
            d.copy_to(&mut copy).unwrap();
            prop_assert_eq!(&copy, &out);
            let o = OrbitBlock::parse(&copy).unwrap();
            prop_assert!(o.check_crc().is_ok());
            prop_assert_eq!(o.validate().unwrap(), frags.len());
            for (f, (id, bx, status, payload)) in o.fragments().map(Result::unwrap).zip(frags.iter().rev()) {
                prop_assert_eq!((f.event_id(), f.bx(), f.status(), f.source_id()), (*id, *bx, *status, source_id));
                prop_assert_eq!(&f.payload()[..payload.len()], &payload[..]);
                prop_assert!(f.check_crc().is_ok());
            }
        }

        #[test]
        fn prop_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = looks_like_dth_stream(&bytes);
            exercise(&bytes);
            // The same bytes behind valid-looking headers reach the deeper checks.
            let mut framed = OrbitHeader { block_units: (32 + bytes.len() as u32) / 16, event_count: 3, ..OrbitHeader::default() }.to_bytes().to_vec();
            framed.extend_from_slice(&bytes);
            exercise(&framed);
        }

        #[test]
        fn prop_corrupted_orbits_never_panic(lens in proptest::collection::vec(0usize..80, 0..6),
                                             flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let mut block = orbit_block(&lens);
            let mut stream = dth_stream(&block, 64);
            for (at, v) in flips {
                let i = at % block.len();
                block[i] ^= v;
                let j = at % stream.len();
                stream[j] ^= v;
            }
            exercise(&block);
            exercise(&stream);
        }
    }

    /// Runs every reader over `bytes`, discarding results: only panics matter.
    fn exercise(bytes: &[u8]) {
        if let Ok(o) = OrbitBlock::parse(bytes) {
            let _ = o.check_crc();
            let _ = o.validate();
            for f in o.fragments().flatten() {
                let _ = (f.check_crc(), f.payload(), f.trailer_offset());
            }
        }
        let mut out = vec![0; bytes.len()];
        for (_, d) in DthStream::new(bytes).flatten() {
            let _ = d.copy_to(&mut out);
            let _ = d.as_single();
            let _ = d.segments().count();
        }
    }
}
