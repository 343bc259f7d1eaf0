//! HL-LHC DTH orbit data, docs/formats.md §6: orbit blocks of SlinkRocket fragments, and the TCP
//! stream blocks that carry them.
//!
//! An orbit block from one source is, all little-endian:
//!
//! ```text
//! orbit header (32 bytes, "HO")
//! for each event: [SR header 16 | payload, padded to 16 | SR trailer 16] [fragment trailer 16, "TF"]
//! ```
//!
//! Readers walk a block backwards from its end, as the DTH's readers do: each fragment trailer
//! gives the size of the fragment before it. [`OrbitBlockWriter`] writes a block into a caller's
//! buffer; [`OrbitBlock`] and [`OrbitFragment`] read one in place.
//!
//! **Tessera's choices**, where the public sources stop:
//!
//! - The SR trailer's CRC is CRC-16/CMS computed word-wise (each 64-bit little-endian word most
//!   significant byte first, [`Crc16Words`]) over SR header, payload and SR trailer, with the
//!   trailer's CRC field taken as zero. The fragment trailer's CRC-16 repeats that value.
//! - The fragment trailer's size equals the SR length: the fragment, SR header and trailer
//!   included, in 16-byte units.
//! - The link CRC is written 0 and not checked.
//! - A payload is zero-padded to a multiple of 16 bytes; the SR length counts the padded length,
//!   so a reader sees the padded payload.
//! - The DTH's own TCP block header is not public: Tessera defines [`DthBlockHeader`], below.
//!
//! ## DTH stream blocks (Tessera's own)
//!
//! An orbit block travels on TCP in stream blocks of at most `max_block_bytes` (default 8192),
//! each a 16-byte header of two **big-endian** 64-bit words, like a FEROL header, and its data:
//!
//! | word | bits | field |
//! |---|---|---|
//! | 0 | 63:48 | signature 0x475A (wire bytes `47 5A`) |
//! | 0 | 47:32 | block number within the orbit, 0, 1, 2... |
//! | 0 | 31 | start of orbit |
//! | 0 | 30 | end of orbit |
//! | 0 | 29:24 | header version = 1 |
//! | 0 | 23:0 | data length in bytes, a multiple of 16, at least 16 |
//! | 1 | 63:32 | source id |
//! | 1 | 31:0 | orbit number |
//!
//! The version field is what tells a DTH stream from a FEROL one, whose bits 29:24 are zero
//! ([`looks_like_dth_stream`]). [`DthBlocks`] and [`write_dth_blocks`] split an orbit block into
//! stream blocks; [`DthOrbit`] and [`DthStream`] gather them back, zero-copy.

use std::ops::Range;

use crate::crc::{Crc16Words, crc32c};
use crate::error::{FormatError, Result, dec, hex, le_u16, le_u32, le_u64, need_space, take};
use crate::ferol::{self, BlockStream, ChainHeader, Piece, Split, StreamUnit};

/// Size of the orbit header.
pub const ORBIT_HEADER_BYTES: usize = 32;
/// Orbit sizes and fragment lengths count 16-byte units.
pub const UNIT_BYTES: usize = 16;
/// Orbit header marker, wire bytes `48 4F` ("HO").
pub const ORBIT_MARKER: [u8; 2] = *b"HO";
/// The orbit header version this module reads and writes.
pub const ORBIT_VERSION: u16 = 1;
/// Largest event count the 12-bit field holds.
pub const MAX_EVENTS: u16 = 0xFFF;
/// Size of a SlinkRocket header, of a SlinkRocket trailer, and of a fragment trailer.
pub const FRAME_BYTES: usize = 16;
/// SlinkRocket header marker (bits 63:56 of its second word).
pub const SR_HEADER_MARKER: u8 = 0x55;
/// SlinkRocket header version (bits 55:52 of its second word).
pub const SR_VERSION: u8 = 3;
/// SlinkRocket trailer marker (bits 31:24 of its last u32).
pub const SR_TRAILER_MARKER: u8 = 0xAA;
/// Fragment trailer marker, wire bytes `54 46` ("TF").
pub const FRAGMENT_TRAILER_MARKER: [u8; 2] = *b"TF";
/// Event ids are 44 bits on the wire.
pub const EVENT_ID_MASK: u64 = (1 << 44) - 1;
/// Largest SR length the 20-bit field holds, in 16-byte units.
pub const MAX_SR_UNITS: u32 = 0xF_FFFF;

/// Orbit header flag bits.
pub mod orbit_flags {
    /// Bit 0: the DTH saw an error in this orbit.
    pub const ERROR: u32 = 1 << 0;
}

/// SlinkRocket trailer status bits.
pub mod sr_status {
    /// FED CRC error.
    pub const FED_CRC: u16 = 1 << 0;
    /// Link CRC error.
    pub const LINK_CRC: u16 = 1 << 1;
    /// Source id error.
    pub const SOURCE_ID: u16 = 1 << 2;
    /// Synchronisation lost.
    pub const SYNC_LOST: u16 = 1 << 3;
    /// Fragment cut.
    pub const CUT: u16 = 1 << 4;
}

/// Fragment trailer flag bits.
pub mod trailer_flags {
    /// FED CRC error.
    pub const FED_CRC: u16 = 1 << 0;
    /// Link CRC error.
    pub const LINK_CRC: u16 = 1 << 1;
    /// Source id error.
    pub const SOURCE_ID: u16 = 1 << 2;
    /// Fragment cut.
    pub const CUT: u16 = 1 << 3;
    /// Event id out of sync.
    pub const EVENT_ID_SYNC: u16 = 1 << 4;
    /// Time-out.
    pub const TIMEOUT: u16 = 1 << 5;
    /// Length error.
    pub const LENGTH: u16 = 1 << 6;
}

/// Little-endian u128 of 16 bytes, for frames whose fields are read by shifting.
fn le128(bytes: [u8; 16]) -> u128 {
    u128::from_le_bytes(bytes)
}

/// The header of an orbit block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OrbitHeader {
    /// Source id.
    pub source_id: u32,
    /// Run number.
    pub run: u32,
    /// Orbit number.
    pub orbit: u32,
    /// Number of fragments in the block (12 bits).
    pub event_count: u16,
    /// Size of the whole block, this header included, in 16-byte units.
    pub block_units: u32,
    /// Flags (see [`orbit_flags`]).
    pub flags: u32,
    /// CRC-32C of everything after the header.
    pub crc32c: u32,
}

impl OrbitHeader {
    /// Encodes the header (version 1). The event count is cut to 12 bits.
    pub fn to_bytes(&self) -> [u8; ORBIT_HEADER_BYTES] {
        let mut b = [0u8; ORBIT_HEADER_BYTES];
        b[0..2].copy_from_slice(&ORBIT_MARKER);
        b[2..4].copy_from_slice(&ORBIT_VERSION.to_le_bytes());
        b[4..8].copy_from_slice(&self.source_id.to_le_bytes());
        b[8..12].copy_from_slice(&self.run.to_le_bytes());
        b[12..16].copy_from_slice(&self.orbit.to_le_bytes());
        b[16..20].copy_from_slice(&u32::from(self.event_count & MAX_EVENTS).to_le_bytes());
        b[20..24].copy_from_slice(&self.block_units.to_le_bytes());
        b[24..28].copy_from_slice(&self.flags.to_le_bytes());
        b[28..32].copy_from_slice(&self.crc32c.to_le_bytes());
        b
    }

    /// Decodes the header at `buf[offset..]`, checking marker and version. Errors carry `offset`.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "orbit header";
        let b = take::<ORBIT_HEADER_BYTES>(buf, offset, WHAT)?;
        if b[0..2] != ORBIT_MARKER {
            let found = u16::from_be_bytes([b[0], b[1]]);
            return Err(FormatError::bad(WHAT, "marker", offset, hex(u16::from_be_bytes(ORBIT_MARKER)), hex(found)));
        }
        let version = le_u16(&b, 2, WHAT)?;
        if version != ORBIT_VERSION {
            return Err(FormatError::bad(WHAT, "version", offset, dec(ORBIT_VERSION), dec(version)));
        }
        Ok(OrbitHeader {
            source_id: le_u32(&b, 4, WHAT)?,
            run: le_u32(&b, 8, WHAT)?,
            orbit: le_u32(&b, 12, WHAT)?,
            event_count: (le_u32(&b, 16, WHAT)? as u16) & MAX_EVENTS,
            block_units: le_u32(&b, 20, WHAT)?,
            flags: le_u32(&b, 24, WHAT)?,
            crc32c: le_u32(&b, 28, WHAT)?,
        })
    }

    /// Size of the whole block in bytes (saturating where `usize` is narrow).
    pub fn block_len(&self) -> usize {
        (self.block_units as usize).saturating_mul(UNIT_BYTES)
    }

    /// True when the error flag is set.
    pub fn has_error(&self) -> bool {
        self.flags & orbit_flags::ERROR != 0
    }
}

/// A SlinkRocket header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlinkRocketHeader {
    /// Source id.
    pub source_id: u32,
    /// L1A types.
    pub l1a_types: u16,
    /// Physics type.
    pub physics_type: u8,
    /// Emulation status, 2 bits.
    pub emulation_status: u8,
    /// Event id, 44 bits.
    pub event_id: u64,
}

impl SlinkRocketHeader {
    /// Encodes the header (version 3). Fields wider than their bits are cut to them.
    pub fn to_bytes(&self) -> [u8; FRAME_BYTES] {
        let w = u128::from(self.source_id)
            | (u128::from(self.l1a_types) << 32)
            | (u128::from(self.physics_type) << 48)
            | (u128::from(self.emulation_status & 0x3) << 56)
            | (u128::from(self.event_id & EVENT_ID_MASK) << 64)
            | (u128::from(SR_VERSION) << (64 + 52))
            | (u128::from(SR_HEADER_MARKER) << (64 + 56));
        w.to_le_bytes()
    }

    /// Decodes the header at `buf[offset..]`, checking marker and version.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "SlinkRocket header";
        let w = le128(take::<FRAME_BYTES>(buf, offset, WHAT)?);
        let marker = (w >> 120) as u8;
        if marker != SR_HEADER_MARKER {
            return Err(FormatError::bad(WHAT, "marker", offset, hex(SR_HEADER_MARKER), hex(marker)));
        }
        let version = ((w >> 116) & 0xF) as u8;
        if version != SR_VERSION {
            return Err(FormatError::bad(WHAT, "version", offset, dec(SR_VERSION), dec(version)));
        }
        Ok(SlinkRocketHeader {
            source_id: w as u32,
            l1a_types: (w >> 32) as u16,
            physics_type: (w >> 48) as u8,
            emulation_status: ((w >> 56) as u8) & 0x3,
            event_id: ((w >> 64) as u64) & EVENT_ID_MASK,
        })
    }
}

/// A SlinkRocket trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlinkRocketTrailer {
    /// Status (see [`sr_status`]).
    pub status: u16,
    /// CRC-16 of the fragment (Tessera's choice of algorithm, see the module doc).
    pub crc: u16,
    /// Orbit number.
    pub orbit: u32,
    /// Bunch crossing, 12 bits.
    pub bx: u16,
    /// Fragment length in 16-byte units, SR header and trailer included (20 bits).
    pub length_units: u32,
    /// Link CRC, 16 bits (written 0 by Tessera, not checked).
    pub link_crc: u16,
}

impl SlinkRocketTrailer {
    /// Encodes the trailer. Fields wider than their bits are cut to them.
    pub fn to_bytes(&self) -> [u8; FRAME_BYTES] {
        let w = u128::from(self.status)
            | (u128::from(self.crc) << 16)
            | (u128::from(self.orbit) << 32)
            | (u128::from(self.bx & 0xFFF) << 64)
            | (u128::from(self.length_units & MAX_SR_UNITS) << 76)
            | (u128::from(self.link_crc) << 104)
            | (u128::from(SR_TRAILER_MARKER) << 120);
        w.to_le_bytes()
    }

    /// Decodes the trailer at `buf[offset..]`, checking its marker.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "SlinkRocket trailer";
        let w = le128(take::<FRAME_BYTES>(buf, offset, WHAT)?);
        let marker = (w >> 120) as u8;
        if marker != SR_TRAILER_MARKER {
            return Err(FormatError::bad(WHAT, "marker", offset, hex(SR_TRAILER_MARKER), hex(marker)));
        }
        Ok(SlinkRocketTrailer {
            status: w as u16,
            crc: (w >> 16) as u16,
            orbit: (w >> 32) as u32,
            bx: ((w >> 64) as u16) & 0xFFF,
            length_units: ((w >> 76) as u32) & MAX_SR_UNITS,
            link_crc: (w >> 104) as u16,
        })
    }
}

/// The fragment trailer ("TF") that follows each fragment in an orbit block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FragmentTrailer {
    /// Flags (see [`trailer_flags`]).
    pub flags: u16,
    /// Size of the preceding fragment in 16-byte units (equal to its SR length).
    pub size_units: u32,
    /// Event id, 44 bits.
    pub event_id: u64,
    /// CRC-16 of the preceding fragment (repeats the SR trailer's).
    pub crc: u16,
}

impl FragmentTrailer {
    /// Encodes the trailer. The event id is cut to 44 bits.
    pub fn to_bytes(&self) -> [u8; FRAME_BYTES] {
        let w = u128::from(u16::from_le_bytes(FRAGMENT_TRAILER_MARKER))
            | (u128::from(self.flags) << 16)
            | (u128::from(self.size_units) << 32)
            | (u128::from(self.event_id & EVENT_ID_MASK) << 64)
            | (u128::from(self.crc) << 112);
        w.to_le_bytes()
    }

    /// Decodes the trailer at `buf[offset..]`, checking its marker.
    pub fn parse(buf: &[u8], offset: usize) -> Result<Self> {
        const WHAT: &str = "fragment trailer";
        let b = take::<FRAME_BYTES>(buf, offset, WHAT)?;
        if b[0..2] != FRAGMENT_TRAILER_MARKER {
            let expected = u16::from_be_bytes(FRAGMENT_TRAILER_MARKER);
            return Err(FormatError::bad(WHAT, "marker", offset, hex(expected), hex(u16::from_be_bytes([b[0], b[1]]))));
        }
        let w = le128(b);
        Ok(FragmentTrailer {
            flags: (w >> 16) as u16,
            size_units: (w >> 32) as u32,
            event_id: ((w >> 64) as u64) & EVENT_ID_MASK,
            crc: (w >> 112) as u16,
        })
    }
}

/// CRC-16 of a SlinkRocket fragment (SR header to SR trailer, whole 16-byte units) with the
/// trailer's CRC field taken as zero: Tessera's choice, see the module doc.
pub fn sr_fragment_crc(fragment: &[u8]) -> u16 {
    let mut crc = Crc16Words::new();
    let trailer_at = fragment.len().saturating_sub(FRAME_BYTES);
    let (body, trailer) = fragment.split_at(trailer_at);
    crc.update(body);
    if let Ok(word) = le_u64(trailer, 0, "SlinkRocket trailer") {
        // The CRC field is bits 31:16 of the trailer's first word.
        crc.update_word(word & !0xFFFF_0000);
        crc.update(trailer.get(8..).unwrap_or_default());
    }
    crc.finish()
}

/// Bytes one fragment with a payload of `payload_len` bytes takes in an orbit block: SR header,
/// padded payload, SR trailer and fragment trailer.
pub fn orbit_fragment_len(payload_len: usize) -> usize {
    payload_len.div_ceil(UNIT_BYTES).saturating_mul(UNIT_BYTES).saturating_add(3 * FRAME_BYTES)
}

/// What a writer needs to know of a fragment besides its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FragmentInfo {
    /// Event id, 44 bits (cut to them).
    pub event_id: u64,
    /// Bunch crossing, 12 bits (cut to them).
    pub bx: u16,
    /// L1A types.
    pub l1a_types: u16,
    /// Physics type.
    pub physics_type: u8,
    /// Emulation status, 2 bits (cut to them).
    pub emulation_status: u8,
    /// SR trailer status (see [`sr_status`]); 0 for a clean fragment.
    pub status: u16,
    /// Fragment trailer flags (see [`trailer_flags`]), set by a DTH; 0 for a clean fragment.
    pub flags: u16,
}

/// Writes an orbit block from one source into a caller's buffer: the header is reserved first and
/// filled by [`OrbitBlockWriter::finish`], once the event count, size and CRC are known.
#[derive(Debug)]
pub struct OrbitBlockWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    header: OrbitHeader,
}

impl<'a> OrbitBlockWriter<'a> {
    /// Starts a block for `orbit` of `run` from `source_id` at the start of `out`.
    pub fn new(out: &'a mut [u8], source_id: u32, run: u32, orbit: u32) -> Result<Self> {
        need_space(out, ORBIT_HEADER_BYTES, "orbit header")?;
        let header = OrbitHeader { source_id, run, orbit, ..OrbitHeader::default() };
        Ok(OrbitBlockWriter { out, pos: ORBIT_HEADER_BYTES, header })
    }

    /// Sets the orbit header's flags (see [`orbit_flags`]).
    pub fn set_flags(&mut self, flags: u32) {
        self.header.flags = flags;
    }

    /// Fragments written so far.
    pub fn event_count(&self) -> u16 {
        self.header.event_count
    }

    /// Bytes written so far, header included.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Always false: the header is reserved from the start.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends one fragment: SR header, payload zero-padded to 16 bytes, SR trailer with its
    /// CRC-16, fragment trailer. Fails, leaving the block as it was, when the block already holds
    /// 4095 fragments, the payload is longer than the SR length field can say, or `out` is full.
    pub fn push_fragment(&mut self, info: &FragmentInfo, payload: &[u8]) -> Result<()> {
        if self.header.event_count >= MAX_EVENTS {
            return Err(FormatError::bad(
                "orbit header",
                "event count",
                0,
                format!("at most {MAX_EVENTS}"),
                dec(self.header.event_count + 1),
            ));
        }
        let padded = payload.len().div_ceil(UNIT_BYTES).saturating_mul(UNIT_BYTES);
        let sr_len = padded.saturating_add(2 * FRAME_BYTES);
        let units = sr_len / UNIT_BYTES;
        if units > MAX_SR_UNITS as usize {
            let max = (MAX_SR_UNITS as usize - 2) * UNIT_BYTES;
            return Err(FormatError::bad(
                "orbit fragment payload",
                "size",
                0,
                format!("at most {max} bytes"),
                dec(payload.len()),
            ));
        }
        let total = self.pos.saturating_add(sr_len + FRAME_BYTES);
        need_space(self.out, total, "orbit block")?;
        let units = units as u32;
        let fragment = &mut self.out[self.pos..self.pos + sr_len];
        let header = SlinkRocketHeader {
            source_id: self.header.source_id,
            l1a_types: info.l1a_types,
            physics_type: info.physics_type,
            emulation_status: info.emulation_status,
            event_id: info.event_id,
        };
        fragment[..FRAME_BYTES].copy_from_slice(&header.to_bytes());
        let (body, trailer_bytes) = fragment[FRAME_BYTES..].split_at_mut(padded);
        body[..payload.len()].copy_from_slice(payload);
        body[payload.len()..].fill(0);
        let mut trailer = SlinkRocketTrailer {
            status: info.status,
            crc: 0,
            orbit: self.header.orbit,
            bx: info.bx,
            length_units: units,
            link_crc: 0,
        };
        trailer_bytes.copy_from_slice(&trailer.to_bytes());
        trailer.crc = sr_fragment_crc(fragment);
        fragment[sr_len - FRAME_BYTES..].copy_from_slice(&trailer.to_bytes());
        let tf = FragmentTrailer { flags: info.flags, size_units: units, event_id: info.event_id, crc: trailer.crc };
        self.out[self.pos + sr_len..total].copy_from_slice(&tf.to_bytes());
        self.pos = total;
        self.header.event_count += 1;
        Ok(())
    }

    /// Writes the orbit header (event count, size, CRC-32C) and returns the block's length.
    pub fn finish(self) -> Result<usize> {
        let units = u32::try_from(self.pos / UNIT_BYTES).map_err(|_| {
            FormatError::bad(
                "orbit header",
                "block size (16-byte units)",
                0,
                format!("at most {}", u32::MAX),
                dec(self.pos / UNIT_BYTES),
            )
        })?;
        let header =
            OrbitHeader { block_units: units, crc32c: crc32c(&self.out[ORBIT_HEADER_BYTES..self.pos]), ..self.header };
        self.out[..ORBIT_HEADER_BYTES].copy_from_slice(&header.to_bytes());
        Ok(self.pos)
    }
}

/// A checked view of one orbit block at the start of a buffer.
#[derive(Debug, Clone, Copy)]
pub struct OrbitBlock<'a> {
    bytes: &'a [u8],
    /// The decoded orbit header.
    pub header: OrbitHeader,
}

impl<'a> OrbitBlock<'a> {
    /// Reads the orbit header at the start of `buf` and takes the `block_units × 16` bytes it
    /// announces. The size must hold the header and at least 48 bytes per announced event.
    /// Fragments are checked as [`OrbitBlock::fragments`] walks them, the CRC by
    /// [`OrbitBlock::check_crc`].
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let header = OrbitHeader::parse(buf, 0)?;
        // Each event takes at least an SR header, an SR trailer and a fragment trailer.
        let min_units = 2 + 3 * u32::from(header.event_count);
        if header.block_units < min_units {
            return Err(FormatError::bad(
                "orbit header",
                "block size (16-byte units)",
                0,
                format!("at least {min_units} for {} events", header.event_count),
                dec(header.block_units),
            ));
        }
        let len = header.block_len();
        let bytes = buf.get(..len).ok_or_else(|| FormatError::truncated("orbit block", 0, len, buf.len()))?;
        Ok(OrbitBlock { bytes, header })
    }

    /// Bytes the block takes, header included.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// The whole block.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The CRC-32C computed over everything after the header.
    pub fn computed_crc(&self) -> u32 {
        crc32c(self.bytes.get(ORBIT_HEADER_BYTES..).unwrap_or_default())
    }

    /// Checks the header's CRC-32C against the computed one.
    pub fn check_crc(&self) -> Result<()> {
        let computed = self.computed_crc();
        if computed != self.header.crc32c {
            return Err(FormatError::Checksum {
                what: "orbit block",
                checksum: "CRC-32C",
                offset: 0,
                stored: self.header.crc32c.into(),
                computed: computed.into(),
            });
        }
        Ok(())
    }

    /// The fragments, last first, as readers walk a block. Yields an error and stops at the
    /// first malformed fragment, or at the end if the walk did not find the header's event count.
    pub fn fragments(&self) -> OrbitFragments<'a> {
        OrbitFragments { block: *self, end: self.bytes.len(), count: 0, done: false }
    }

    /// Walks every fragment and returns how many there are, or the first error.
    pub fn validate(&self) -> Result<usize> {
        self.fragments().try_fold(0, |n, f| f.map(|_| n + 1))
    }
}

/// Iterator over the fragments of an orbit block, from its end to its header.
#[derive(Debug, Clone)]
pub struct OrbitFragments<'a> {
    block: OrbitBlock<'a>,
    /// Where the unread part of the block ends.
    end: usize,
    count: usize,
    done: bool,
}

impl<'a> OrbitFragments<'a> {
    /// Reads the fragment and fragment trailer that end at `self.end`.
    fn read(&self) -> Result<OrbitFragment<'a>> {
        let bytes = self.block.bytes;
        let header = &self.block.header;
        let tf_at = self.end.checked_sub(FRAME_BYTES).filter(|&at| at >= ORBIT_HEADER_BYTES).ok_or_else(|| {
            FormatError::bad(
                "orbit block",
                "fragment trailer position",
                self.end,
                "after the orbit header",
                dec(self.end),
            )
        })?;
        let tf = FragmentTrailer::parse(bytes, tf_at)?;
        let room = (tf_at - ORBIT_HEADER_BYTES) / UNIT_BYTES;
        if tf.size_units < 2 || tf.size_units as usize > room {
            return Err(FormatError::bad(
                "fragment trailer",
                "size (16-byte units)",
                tf_at,
                format!("2..={room}"),
                dec(tf.size_units),
            ));
        }
        let start = tf_at - tf.size_units as usize * UNIT_BYTES;
        let sr_header = SlinkRocketHeader::parse(bytes, start)?;
        let sr_at = tf_at - FRAME_BYTES;
        let sr_trailer = SlinkRocketTrailer::parse(bytes, sr_at)?;
        if sr_trailer.length_units != tf.size_units {
            return Err(FormatError::bad(
                "SlinkRocket trailer",
                "length (16-byte units)",
                sr_at,
                dec(tf.size_units),
                dec(sr_trailer.length_units),
            ));
        }
        if sr_trailer.orbit != header.orbit {
            return Err(FormatError::bad(
                "SlinkRocket trailer",
                "orbit",
                sr_at,
                dec(header.orbit),
                dec(sr_trailer.orbit),
            ));
        }
        if sr_header.source_id != header.source_id {
            return Err(FormatError::bad(
                "SlinkRocket header",
                "source id",
                start,
                dec(header.source_id),
                dec(sr_header.source_id),
            ));
        }
        if tf.event_id != sr_header.event_id {
            return Err(FormatError::bad(
                "fragment trailer",
                "event id",
                tf_at,
                dec(sr_header.event_id),
                dec(tf.event_id),
            ));
        }
        Ok(OrbitFragment {
            bytes: bytes.get(start..tf_at).unwrap_or_default(),
            offset: start,
            header: sr_header,
            trailer: sr_trailer,
            fragment_trailer: tf,
        })
    }
}

impl<'a> Iterator for OrbitFragments<'a> {
    type Item = Result<OrbitFragment<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.end <= ORBIT_HEADER_BYTES {
            self.done = true;
            let announced = usize::from(self.block.header.event_count);
            return (self.count != announced)
                .then(|| Err(FormatError::bad("orbit header", "event count", 0, dec(self.count), dec(announced))));
        }
        match self.read() {
            Ok(fragment) => {
                self.end = fragment.offset;
                self.count += 1;
                Some(Ok(fragment))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A checked view of one SlinkRocket fragment inside an orbit block.
#[derive(Debug, Clone, Copy)]
pub struct OrbitFragment<'a> {
    /// SR header to SR trailer.
    bytes: &'a [u8],
    offset: usize,
    /// The SlinkRocket header.
    pub header: SlinkRocketHeader,
    /// The SlinkRocket trailer.
    pub trailer: SlinkRocketTrailer,
    /// The fragment trailer that follows it.
    pub fragment_trailer: FragmentTrailer,
}

impl<'a> OrbitFragment<'a> {
    /// Event id (44 bits).
    pub fn event_id(&self) -> u64 {
        self.header.event_id
    }

    /// Bunch crossing.
    pub fn bx(&self) -> u16 {
        self.trailer.bx
    }

    /// Source id.
    pub fn source_id(&self) -> u32 {
        self.header.source_id
    }

    /// SR trailer status (see [`sr_status`]).
    pub fn status(&self) -> u16 {
        self.trailer.status
    }

    /// Fragment trailer flags (see [`trailer_flags`]).
    pub fn flags(&self) -> u16 {
        self.fragment_trailer.flags
    }

    /// The payload between SR header and trailer, with its zero padding to 16 bytes.
    pub fn payload(&self) -> &'a [u8] {
        self.bytes.get(FRAME_BYTES..self.bytes.len().saturating_sub(FRAME_BYTES)).unwrap_or_default()
    }

    /// The fragment, SR header to SR trailer.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Offset of the SR header in the orbit block.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Offset of the fragment trailer in the orbit block.
    pub fn trailer_offset(&self) -> usize {
        self.offset + self.bytes.len()
    }

    /// The CRC-16 computed over the fragment.
    pub fn computed_crc(&self) -> u16 {
        sr_fragment_crc(self.bytes)
    }

    /// Checks the SR trailer's CRC-16, then the copy in the fragment trailer, against the
    /// computed one. Offsets are in the orbit block.
    pub fn check_crc(&self) -> Result<()> {
        let computed = self.computed_crc();
        let checks = [
            ("SlinkRocket fragment", self.offset, self.trailer.crc),
            ("fragment trailer", self.trailer_offset(), self.fragment_trailer.crc),
        ];
        for (what, offset, stored) in checks {
            if stored != computed {
                return Err(FormatError::Checksum {
                    what,
                    checksum: "CRC-16",
                    offset,
                    stored: stored.into(),
                    computed: computed.into(),
                });
            }
        }
        Ok(())
    }
}

// ---- DTH TCP stream blocks (Tessera's own header, see the module doc). ----

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
}

impl<'a> DthOrbit<'a> {
    /// Reads the stream blocks of the orbit that starts `buf`: signature, version and data length
    /// of each, start flag on block 0 only, block numbers 0, 1, 2..., the same source id and orbit
    /// throughout, and an orbit header that agrees with them and whose size is the data carried.
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
        if header.source_id != first.source_id {
            return Err(FormatError::bad(
                "DTH block header",
                "source id",
                0,
                dec(header.source_id),
                dec(first.source_id),
            ));
        }
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
        Ok(DthOrbit { bytes, blocks: chain.blocks, orbit_len: chain.data_len, header })
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

    /// Copies the orbit block contiguously to the start of `out`; returns its length. Parse the
    /// copy with [`OrbitBlock::parse`] to walk its fragments.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<usize> {
        ferol::copy_segments(self.segments(), self.orbit_len, out, "orbit block")
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
    use crate::crc::crc16_cms_bytes;
    use proptest::prelude::*;

    const SOURCE: u32 = 0x0102_0304;
    const RUN: u32 = 123_456;
    const ORBIT: u32 = 0x0A0B_0C0D;

    fn info(event_id: u64) -> FragmentInfo {
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

    fn payload(event_id: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 ^ event_id.wrapping_mul(31)) as u8 | 1).collect()
    }

    /// An orbit block with one fragment per payload length, event ids 100, 101...
    fn orbit_block(lens: &[usize]) -> Vec<u8> {
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

    fn dth_stream(block: &[u8], max: usize) -> Vec<u8> {
        let mut out = vec![0; dth_wire_len(block.len(), max)];
        assert_eq!(write_dth_blocks(block, max, &mut out).unwrap(), out.len());
        out
    }

    /// Rewrites the orbit header's CRC after an edit, so that only the edited field is wrong.
    fn reseal(block: &mut [u8]) {
        let crc = crc32c(&block[32..]);
        block[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    fn walk_error(block: &[u8]) -> FormatError {
        OrbitBlock::parse(block).unwrap().validate().unwrap_err()
    }

    #[test]
    fn header_bytes_and_round_trips() {
        let h = OrbitHeader {
            source_id: SOURCE,
            run: RUN,
            orbit: ORBIT,
            event_count: 0xABC,
            block_units: 0x1234,
            flags: 1,
            crc32c: 0xDEAD_BEEF,
        };
        let b = h.to_bytes();
        assert_eq!(&b[..4], &[0x48, 0x4F, 1, 0]);
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(&b[16..24], &[0xBC, 0x0A, 0, 0, 0x34, 0x12, 0, 0]);
        assert_eq!(OrbitHeader::parse(&b, 0).unwrap(), h);
        assert!(h.has_error());
        // Bits above the 12-bit event count are ignored.
        let mut b2 = b;
        b2[18] = 0xFF;
        assert_eq!(OrbitHeader::parse(&b2, 0).unwrap(), h);

        let sr = SlinkRocketHeader {
            source_id: SOURCE,
            l1a_types: 0x1234,
            physics_type: 0x56,
            emulation_status: 3,
            event_id: 0xABC_DEF0_1234,
        };
        let b = sr.to_bytes();
        assert_eq!(&b[8..16], &[0x34, 0x12, 0xF0, 0xDE, 0xBC, 0x0A, 0x30, 0x55]);
        assert_eq!(SlinkRocketHeader::parse(&b, 0).unwrap(), sr);

        let st = SlinkRocketTrailer {
            status: 0x1F,
            crc: 0xBEEF,
            orbit: ORBIT,
            bx: 3563,
            length_units: 0xF_FFFF,
            link_crc: 0x4321,
        };
        let b = st.to_bytes();
        assert_eq!(&b[8..16], &[0xEB, 0xFD, 0xFF, 0xFF, 0x00, 0x21, 0x43, 0xAA]);
        assert_eq!(SlinkRocketTrailer::parse(&b, 0).unwrap(), st);

        let tf = FragmentTrailer { flags: 0x7F, size_units: 9, event_id: EVENT_ID_MASK, crc: 0x1234 };
        let b = tf.to_bytes();
        assert_eq!(&b[..8], &[0x54, 0x46, 0x7F, 0, 9, 0, 0, 0]);
        assert_eq!(&b[8..16], &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x34, 0x12]);
        assert_eq!(FragmentTrailer::parse(&b, 0).unwrap(), tf);
    }

    #[test]
    fn frame_parse_errors() {
        let sr = SlinkRocketHeader { event_id: 5, ..SlinkRocketHeader::default() }.to_bytes();
        let mut b = sr;
        b[15] = 0x56;
        assert_eq!(
            SlinkRocketHeader::parse(&b, 0).unwrap_err(),
            FormatError::bad("SlinkRocket header", "marker", 0, hex(0x55u8), hex(0x56u8))
        );
        let mut b = sr;
        b[14] = 0x20;
        assert_eq!(
            SlinkRocketHeader::parse(&b, 0).unwrap_err(),
            FormatError::bad("SlinkRocket header", "version", 0, dec(3), dec(2))
        );
        assert_eq!(
            SlinkRocketHeader::parse(&sr[..15], 0).unwrap_err(),
            FormatError::truncated("SlinkRocket header", 0, 16, 15)
        );
        let mut b = SlinkRocketTrailer::default().to_bytes();
        b[15] = 0xAB;
        assert_eq!(
            SlinkRocketTrailer::parse(&b, 0).unwrap_err(),
            FormatError::bad("SlinkRocket trailer", "marker", 0, hex(0xAAu8), hex(0xABu8))
        );
        let mut b = FragmentTrailer::default().to_bytes();
        b[1] = b'G';
        assert_eq!(
            FragmentTrailer::parse(&b, 0).unwrap_err(),
            FormatError::bad("fragment trailer", "marker", 0, hex(0x5446u16), hex(0x5447u16))
        );
        let h = OrbitHeader::default().to_bytes();
        let mut b = h;
        b[0] = b'X';
        assert_eq!(
            OrbitHeader::parse(&b, 0).unwrap_err(),
            FormatError::bad("orbit header", "marker", 0, hex(0x484Fu16), hex(0x584Fu16))
        );
        let mut b = h;
        b[2] = 2;
        assert_eq!(
            OrbitHeader::parse(&b, 0).unwrap_err(),
            FormatError::bad("orbit header", "version", 0, dec(1), dec(2))
        );
        assert_eq!(OrbitHeader::parse(&h, 1).unwrap_err(), FormatError::truncated("orbit header", 1, 32, 31));
    }

    #[test]
    fn writes_and_reads_back_an_orbit() {
        let lens = [0usize, 1, 16, 17, 100];
        let block = orbit_block(&lens);
        assert_eq!(block.len(), 32 + (48 + 64 + 64 + 80 + 160));
        let o = OrbitBlock::parse(&block).unwrap();
        assert_eq!(o.header.event_count, 5);
        assert_eq!((o.header.source_id, o.header.run, o.header.orbit), (SOURCE, RUN, ORBIT));
        assert_eq!(o.wire_len(), block.len());
        assert_eq!(o.header.block_units as usize * 16, block.len());
        o.check_crc().unwrap();
        assert_eq!(o.validate().unwrap(), 5);
        let frags: Vec<OrbitFragment> = o.fragments().map(Result::unwrap).collect();
        // Last first.
        assert_eq!(frags.iter().map(|f| f.event_id()).collect::<Vec<_>>(), vec![104, 103, 102, 101, 100]);
        for (f, &len) in frags.iter().rev().zip(&lens) {
            let id = f.event_id();
            assert_eq!(f.source_id(), SOURCE);
            assert_eq!(f.bx(), (id % 3564) as u16);
            assert_eq!(f.header.l1a_types, 0x0101);
            assert_eq!(f.header.physics_type, 2);
            assert_eq!(f.header.emulation_status, 1);
            assert_eq!(f.trailer.orbit, ORBIT);
            assert_eq!(f.trailer.link_crc, 0);
            assert_eq!((f.status(), f.flags()), (0, 0));
            let padded = len.div_ceil(16) * 16;
            assert_eq!(f.payload().len(), padded);
            assert_eq!(&f.payload()[..len], &payload(id, len)[..]);
            assert!(f.payload()[len..].iter().all(|&b| b == 0));
            assert_eq!(f.trailer.length_units as usize, padded / 16 + 2);
            assert_eq!(f.fragment_trailer.size_units, f.trailer.length_units);
            assert_eq!(f.trailer_offset(), f.offset() + f.as_bytes().len());
            assert_eq!(&block[f.offset()..f.offset() + 16], &f.header.to_bytes());
            // The CRC: CRC-16/CMS over big-endian words with the CRC field zero, in both trailers.
            let mut zeroed = f.as_bytes().to_vec();
            let n = zeroed.len();
            zeroed[n - 14..n - 12].fill(0);
            let be: Vec<u8> = zeroed.chunks(8).flat_map(|w| w.iter().rev().copied()).collect();
            assert_eq!(f.trailer.crc, crc16_cms_bytes(&be));
            assert_eq!(f.fragment_trailer.crc, f.trailer.crc);
            f.check_crc().unwrap();
        }
        assert_eq!(frags[4].offset(), 32);
    }

    #[test]
    fn empty_orbit_and_writer_state() {
        let mut out = [0u8; 64];
        let mut w = OrbitBlockWriter::new(&mut out, 7, 1, 2).unwrap();
        assert_eq!((w.len(), w.event_count(), w.is_empty()), (32, 0, false));
        w.set_flags(orbit_flags::ERROR);
        assert_eq!(w.finish().unwrap(), 32);
        let o = OrbitBlock::parse(&out).unwrap();
        assert_eq!(o.wire_len(), 32);
        assert!(o.header.has_error());
        assert_eq!(o.header.crc32c, crc32c(&[]));
        o.check_crc().unwrap();
        assert_eq!(o.validate().unwrap(), 0);
        assert!(o.fragments().next().is_none());
    }

    #[test]
    fn writer_keeps_status_flags_and_cuts_wide_fields() {
        let mut out = vec![0; 200];
        let mut w = OrbitBlockWriter::new(&mut out, SOURCE, RUN, ORBIT).unwrap();
        let wide = FragmentInfo {
            event_id: u64::MAX,
            bx: 0xFFFF,
            emulation_status: 0xFF,
            status: sr_status::CUT | sr_status::FED_CRC,
            flags: trailer_flags::TIMEOUT,
            ..info(0)
        };
        w.push_fragment(&wide, b"abc").unwrap();
        let n = w.finish().unwrap();
        let o = OrbitBlock::parse(&out[..n]).unwrap();
        let f = o.fragments().next().unwrap().unwrap();
        assert_eq!((f.event_id(), f.bx(), f.header.emulation_status), (EVENT_ID_MASK, 0xFFF, 3));
        assert_eq!((f.status(), f.flags()), (0x11, 0x20));
        assert_eq!(&f.payload()[..4], b"abc\0");
    }

    #[test]
    fn writer_errors() {
        let mut tiny = [0u8; 31];
        assert_eq!(
            OrbitBlockWriter::new(&mut tiny, 1, 1, 1).unwrap_err(),
            FormatError::BufferTooSmall { what: "orbit header", needed: 32, available: 31 }
        );
        let mut out = vec![0u8; 100];
        let mut w = OrbitBlockWriter::new(&mut out, 1, 1, 1).unwrap();
        assert_eq!(
            w.push_fragment(&info(1), &[1; 20]).unwrap_err(),
            FormatError::BufferTooSmall { what: "orbit block", needed: 32 + 80, available: 100 }
        );
        // A failed push leaves the block unchanged.
        w.push_fragment(&info(1), &[1; 16]).unwrap();
        assert_eq!(w.len(), 32 + 64);
        let big = vec![0u8; (MAX_SR_UNITS as usize - 1) * 16];
        assert_eq!(
            w.push_fragment(&info(2), &big).unwrap_err(),
            FormatError::bad(
                "orbit fragment payload",
                "size",
                0,
                format!("at most {} bytes", (0xF_FFFF - 2) * 16),
                dec(big.len())
            )
        );
        // The largest payload passes the size check and only lacks room.
        assert!(matches!(w.push_fragment(&info(2), &big[16..]).unwrap_err(), FormatError::BufferTooSmall { .. }));
        assert_eq!(w.finish().unwrap(), 96);

        let mut out = vec![0u8; 32 + 4096 * 48];
        let mut w = OrbitBlockWriter::new(&mut out, 1, 1, 1).unwrap();
        for i in 0..4095 {
            w.push_fragment(&info(i), &[]).unwrap();
        }
        assert_eq!(
            w.push_fragment(&info(4095), &[]).unwrap_err(),
            FormatError::bad("orbit header", "event count", 0, "at most 4095", dec(4096))
        );
        let n = w.finish().unwrap();
        assert_eq!(OrbitBlock::parse(&out[..n]).unwrap().validate().unwrap(), 4095);
    }

    #[test]
    fn block_parse_errors() {
        let block = orbit_block(&[10, 20]);
        assert_eq!(OrbitBlock::parse(&block[..31]).unwrap_err(), FormatError::truncated("orbit header", 0, 32, 31));
        let n = block.len();
        assert_eq!(OrbitBlock::parse(&block[..n - 1]).unwrap_err(), FormatError::truncated("orbit block", 0, n, n - 1));
        // Trailing bytes belong to the next block.
        let mut longer = block.clone();
        longer.extend_from_slice(&[0xEE; 40]);
        assert_eq!(OrbitBlock::parse(&longer).unwrap().wire_len(), n);
        let mut b = block.clone();
        b[20..24].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            OrbitBlock::parse(&b).unwrap_err(),
            FormatError::bad("orbit header", "block size (16-byte units)", 0, "at least 8 for 2 events", dec(1))
        );
        let mut b = block.clone();
        b[16..20].copy_from_slice(&0u32.to_le_bytes());
        b[20..24].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            OrbitBlock::parse(&b).unwrap_err(),
            FormatError::bad("orbit header", "block size (16-byte units)", 0, "at least 2 for 0 events", dec(0))
        );
        let mut b = block.clone();
        b[40] ^= 1;
        let o = OrbitBlock::parse(&b).unwrap();
        assert_eq!(
            o.check_crc().unwrap_err(),
            FormatError::Checksum {
                what: "orbit block",
                checksum: "CRC-32C",
                offset: 0,
                stored: crc32c(&block[32..]).into(),
                computed: crc32c(&b[32..]).into()
            }
        );
    }

    #[test]
    fn fragment_walk_errors() {
        // Two fragments: SR header 32, SR trailer 64, TF 80; SR header 96, SR trailer 144, TF 160.
        let block = orbit_block(&[10, 20]);
        assert_eq!(block.len(), 176);
        let check = |edit: &dyn Fn(&mut Vec<u8>), expected: FormatError| {
            let mut b = block.clone();
            edit(&mut b);
            reseal(&mut b);
            assert_eq!(walk_error(&b), expected);
        };
        check(&|b| b[160] = b'X', FormatError::bad("fragment trailer", "marker", 160, hex(0x5446u16), hex(0x5846u16)));
        check(&|b| b[164] = 9, FormatError::bad("fragment trailer", "size (16-byte units)", 160, "2..=8", dec(9)));
        check(&|b| b[164] = 1, FormatError::bad("fragment trailer", "size (16-byte units)", 160, "2..=8", dec(1)));
        // A size that points into the payload finds no SR header there.
        check(&|b| b[164] = 3, FormatError::bad("SlinkRocket header", "marker", 112, hex(0x55u8), hex(block[127])));
        check(&|b| b[96 + 14] = 0x40, FormatError::bad("SlinkRocket header", "version", 96, dec(3), dec(4)));
        check(&|b| b[144 + 15] = 0, FormatError::bad("SlinkRocket trailer", "marker", 144, hex(0xAAu8), hex(0u8)));
        check(
            &|b| b[144 + 9] ^= 0x10,
            FormatError::bad("SlinkRocket trailer", "length (16-byte units)", 144, dec(4), dec(5)),
        );
        check(&|b| b[144 + 4] ^= 1, FormatError::bad("SlinkRocket trailer", "orbit", 144, dec(ORBIT), dec(ORBIT ^ 1)));
        check(&|b| b[96] ^= 1, FormatError::bad("SlinkRocket header", "source id", 96, dec(SOURCE), dec(SOURCE ^ 1)));
        check(&|b| b[160 + 8] ^= 1, FormatError::bad("fragment trailer", "event id", 160, dec(101), dec(100)));
        // The first fragment (walked second) is checked as well, at its own offsets.
        check(&|b| b[80] = 0, FormatError::bad("fragment trailer", "marker", 80, hex(0x5446u16), hex(0x0046u16)));
        // Event count disagreeing with the fragments found, either way.
        check(
            &|b| b[16..20].copy_from_slice(&1u32.to_le_bytes()),
            FormatError::bad("orbit header", "event count", 0, dec(2), dec(1)),
        );
        check(
            &|b| b[16..20].copy_from_slice(&3u32.to_le_bytes()),
            FormatError::bad("orbit header", "event count", 0, dec(2), dec(3)),
        );
        // Errors end the walk: the good last fragment first, then the error, then nothing.
        let mut b = block.clone();
        b[80] = 0;
        let o = OrbitBlock::parse(&b).unwrap();
        let mut it = o.fragments();
        assert_eq!(it.next().unwrap().unwrap().event_id(), 101);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn fragment_crc_errors() {
        // One fragment: SR header 32, payload 48, SR trailer 64, TF 80.
        let block = orbit_block(&[10]);
        let first = |b: &[u8]| -> (u16, Result<()>) {
            let f = OrbitBlock::parse(b).unwrap().fragments().next().unwrap().unwrap();
            (f.computed_crc(), f.check_crc())
        };
        let (good, ok) = first(&block);
        ok.unwrap();
        // Payload changed: the SR trailer's CRC is the first to disagree.
        let mut b = block.clone();
        b[50] ^= 1;
        let (computed, err) = first(&b);
        assert_ne!(computed, good);
        assert_eq!(
            err.unwrap_err(),
            FormatError::Checksum {
                what: "SlinkRocket fragment",
                checksum: "CRC-16",
                offset: 32,
                stored: good.into(),
                computed: computed.into()
            }
        );
        // Only the fragment trailer's copy changed.
        let mut b = block.clone();
        b[80 + 14] ^= 1;
        assert_eq!(
            first(&b).1.unwrap_err(),
            FormatError::Checksum {
                what: "fragment trailer",
                checksum: "CRC-16",
                offset: 80,
                stored: (good ^ 1).into(),
                computed: good.into()
            }
        );
        // The CRC field itself is not covered ...
        let mut b = block.clone();
        b[64 + 2] ^= 1;
        assert_eq!(first(&b).0, good);
        // ... the status and the link CRC are.
        for at in [64, 64 + 13] {
            let mut b = block.clone();
            b[at] ^= 1;
            assert_ne!(first(&b).0, good);
        }
    }

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
        }
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
        check(
            &|s| [0, 272].iter().for_each(|&at| rewrite(s, at, &|h| h.source_id = 9)),
            FormatError::bad(H, "source id", 0, dec(SOURCE), dec(9)),
        );
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
