//! The fixed-size frames of an orbit block: the orbit header, the SlinkRocket header and
//! trailer, the fragment trailer, and the CRC-16 of a SlinkRocket fragment (docs/formats.md §6).

use super::*;
use crate::crc::Crc16Words;
use crate::error::{FormatError, Result, dec, hex, le_u16, le_u32, le_u64, take};

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

    /// Checks the header's CRC-32C against `computed`, that of the block after the header; the
    /// error names `offset`, where the header is.
    pub fn check_crc(&self, computed: u32, offset: usize) -> Result<()> {
        if computed != self.crc32c {
            return Err(FormatError::Checksum {
                what: "orbit block",
                checksum: "CRC-32C",
                offset,
                stored: self.crc32c.into(),
                computed: computed.into(),
            });
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orbit::test_support::*;

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
}
