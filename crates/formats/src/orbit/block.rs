//! Orbit blocks in a caller's buffer: [`OrbitBlockWriter`] writes one, [`OrbitBlock`] reads one
//! in place and walks its fragments backwards from its end, as the DTH's readers do.

use super::*;
use crate::crc::crc32c;
use crate::error::{FormatError, Result, dec, need_space};

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
        self.header.check_crc(self.computed_crc(), 0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::crc16_cms_bytes;
    use crate::error::hex;
    use crate::orbit::test_support::*;

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
}
