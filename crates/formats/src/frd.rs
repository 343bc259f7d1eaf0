//! FRD events, docs/formats.md §4: what a BU writes, one record per event.
//!
//! A record is a 24-byte header (version 6: u16 version, u16 flags; version 5: u32 version) and a
//! payload of FED fragments back to back. Readers walk the payload backwards from its end, as the
//! HLT does: each trailer's length gives its fragment's start, until exactly zero bytes remain.

use crate::crc::{Crc32c, crc32c};
use crate::error::{FormatError, Result, dec, le_u16, le_u32, need_space};
use crate::fed::Fragment;

/// Size of an FRD header, version 5 or 6.
pub const FRD_HEADER_BYTES: usize = 24;
/// The version Tessera writes.
pub const FRD_VERSION: u16 = 6;

/// Flag bits of a version-6 header. CMSSW reads only bit 0; the others are Tessera's own.
pub mod flags {
    /// Bit 0: generated (emulated) data.
    pub const GENERATED: u16 = 1 << 0;
    /// Bit 1 (Tessera): incomplete event, one or more FEDs missing; the event's bookkeeping says
    /// which.
    pub const INCOMPLETE: u16 = 1 << 1;
    /// Bit 2 (Tessera): a fragment failed its checks at the RU and is kept as it was received.
    pub const FRAGMENT_ERROR: u16 = 1 << 2;
    /// Bit 3 (Tessera): the trigger fragment is missing or unreadable, so the event's numbers come
    /// from the event builder alone.
    pub const NO_TRIGGER: u16 = 1 << 3;
}

/// The header of an FRD event record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct FrdHeader {
    /// 5 or 6.
    pub version: u16,
    /// Flags (version 6 only; zero for version 5). See [`flags`].
    pub flags: u16,
    /// Run number.
    pub run: u32,
    /// Lumi section.
    pub lumi_section: u32,
    /// Event number (low 32 bits of the event builder's 64-bit number).
    pub event: u32,
    /// Payload size in bytes, header excluded.
    pub payload_bytes: u32,
    /// CRC-32C of the payload.
    pub crc32c: u32,
}

impl FrdHeader {
    /// Reads a version 5 or 6 header at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        const WHAT: &str = "FRD header";
        if buf.len() < FRD_HEADER_BYTES {
            return Err(FormatError::truncated(WHAT, 0, FRD_HEADER_BYTES, buf.len()));
        }
        let (version, flags) = match (le_u16(buf, 0, WHAT)?, le_u16(buf, 2, WHAT)?) {
            (6, flags) => (6, flags),
            (5, 0) => (5, 0),
            _ => {
                let found = le_u32(buf, 0, WHAT)?;
                return Err(FormatError::bad(WHAT, "version", 0, "6 (u16) or 5 (u32)", dec(found)));
            }
        };
        Ok(FrdHeader {
            version,
            flags,
            run: le_u32(buf, 4, WHAT)?,
            lumi_section: le_u32(buf, 8, WHAT)?,
            event: le_u32(buf, 12, WHAT)?,
            payload_bytes: le_u32(buf, 16, WHAT)?,
            crc32c: le_u32(buf, 20, WHAT)?,
        })
    }

    /// Encodes the header as version 6 (a version-5 header is written with its u32 version and
    /// without flags).
    pub fn to_bytes(&self) -> [u8; FRD_HEADER_BYTES] {
        let mut out = [0u8; FRD_HEADER_BYTES];
        if self.version == 5 {
            out[0..4].copy_from_slice(&5u32.to_le_bytes());
        } else {
            out[0..2].copy_from_slice(&self.version.to_le_bytes());
            out[2..4].copy_from_slice(&self.flags.to_le_bytes());
        }
        out[4..8].copy_from_slice(&self.run.to_le_bytes());
        out[8..12].copy_from_slice(&self.lumi_section.to_le_bytes());
        out[12..16].copy_from_slice(&self.event.to_le_bytes());
        out[16..20].copy_from_slice(&self.payload_bytes.to_le_bytes());
        out[20..24].copy_from_slice(&self.crc32c.to_le_bytes());
        out
    }

    /// Record size in bytes: header and payload.
    pub fn record_bytes(&self) -> usize {
        FRD_HEADER_BYTES + self.payload_bytes as usize
    }
}

/// A view of one FRD event record in a caller's buffer.
#[derive(Debug, Clone, Copy)]
pub struct FrdEvent<'a> {
    /// The decoded header.
    pub header: FrdHeader,
    payload: &'a [u8],
}

impl<'a> FrdEvent<'a> {
    /// Reads the record at the start of `buf` (which may hold more after it). The payload CRC and
    /// the fragments are checked separately ([`FrdEvent::check_crc`], [`FrdEvent::fragments`]).
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let header = FrdHeader::parse(buf)?;
        let end = FRD_HEADER_BYTES.saturating_add(header.payload_bytes as usize);
        let payload = buf.get(FRD_HEADER_BYTES..end).ok_or_else(|| {
            FormatError::truncated(
                "FRD event payload",
                FRD_HEADER_BYTES,
                header.payload_bytes as usize,
                buf.len() - FRD_HEADER_BYTES,
            )
        })?;
        Ok(FrdEvent { header, payload })
    }

    /// The payload: FED fragments back to back.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Record size in bytes: header and payload.
    pub fn record_bytes(&self) -> usize {
        self.header.record_bytes()
    }

    /// Checks the header's CRC-32C against the payload.
    pub fn check_crc(&self) -> Result<()> {
        let computed = crc32c(self.payload);
        if computed != self.header.crc32c {
            return Err(FormatError::Checksum {
                what: "FRD event",
                checksum: "CRC-32C",
                offset: 0,
                stored: self.header.crc32c.into(),
                computed: computed.into(),
            });
        }
        Ok(())
    }

    /// The event's fragments, last first, each with its offset from the start of the record.
    /// The iterator ends after the first error; a walk that would leave bytes before the first
    /// fragment is an error at offset [`FRD_HEADER_BYTES`].
    pub fn fragments(&self) -> FragmentsBackwards<'a> {
        FragmentsBackwards { payload: self.payload, end: self.payload.len(), failed: false }
    }
}

/// Iterator over an FRD payload's fragments from its end: see [`FrdEvent::fragments`].
#[derive(Debug, Clone)]
pub struct FragmentsBackwards<'a> {
    payload: &'a [u8],
    end: usize,
    failed: bool,
}

impl<'a> Iterator for FragmentsBackwards<'a> {
    type Item = Result<(usize, Fragment<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.end == 0 {
            return None;
        }
        match Fragment::parse_from_end(&self.payload[..self.end]) {
            Ok((fragment, start)) => {
                self.end = start;
                Some(Ok((FRD_HEADER_BYTES + start, fragment)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.shifted(FRD_HEADER_BYTES)))
            }
        }
    }
}

/// Writes a version-6 record holding `fragments` (each a whole FED fragment) at the start of
/// `out`, computing payload size and CRC-32C. Returns the record length.
pub fn write_frd_event(
    out: &mut [u8],
    flags: u16,
    run: u32,
    lumi_section: u32,
    event: u32,
    fragments: &[&[u8]],
) -> Result<usize> {
    let payload_len: usize = fragments.iter().map(|f| f.len()).sum();
    let payload_bytes = u32::try_from(payload_len)
        .map_err(|_| FormatError::bad("FRD event", "payload size", 16, "at most 4 GiB", dec(payload_len)))?;
    let total = FRD_HEADER_BYTES + payload_len;
    need_space(out, total, "FRD event")?;
    let mut crc = Crc32c::new();
    let mut at = FRD_HEADER_BYTES;
    for fragment in fragments {
        out[at..at + fragment.len()].copy_from_slice(fragment);
        crc.update(fragment);
        at += fragment.len();
    }
    let header =
        FrdHeader { version: FRD_VERSION, flags, run, lumi_section, event, payload_bytes, crc32c: crc.finish() };
    out[..FRD_HEADER_BYTES].copy_from_slice(&header.to_bytes());
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed::{FedHeader, FedTrailer, write_fragment};
    use proptest::prelude::*;

    const FRAGMENT: [u8; 24] = [
        0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00,
        0x85, 0x2f, 0x03, 0x00, 0x00, 0xa0,
    ];
    const HEADER: [u8; 24] = [
        0x06, 0x00, 0x00, 0x00, 0x40, 0xe2, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x18, 0x00,
        0x00, 0x00, 0x4d, 0x1d, 0x1a, 0x07,
    ];

    #[test]
    fn writes_the_formats_md_vector() {
        let mut out = [0u8; 48];
        assert_eq!(write_frd_event(&mut out, 0, 123_456, 1, 1, &[&FRAGMENT]).unwrap(), 48);
        assert_eq!(out[..24], HEADER);
        assert_eq!(out[24..], FRAGMENT);
        assert_eq!(crc32c(&FRAGMENT), 0x071A_1D4D);
    }

    #[test]
    fn reads_v6_and_v5() {
        let mut rec = HEADER.to_vec();
        rec.extend_from_slice(&FRAGMENT);
        let ev = FrdEvent::parse(&rec).unwrap();
        assert_eq!((ev.header.version, ev.header.run, ev.header.event), (6, 123_456, 1));
        ev.check_crc().unwrap();
        let frags: Vec<_> = ev.fragments().collect::<Result<_>>().unwrap();
        assert_eq!(frags.len(), 1);
        assert_eq!(frags[0].0, 24);
        rec[0..4].copy_from_slice(&5u32.to_le_bytes());
        let v5 = FrdEvent::parse(&rec).unwrap();
        assert_eq!((v5.header.version, v5.header.flags), (5, 0));
        assert_eq!(v5.header.to_bytes()[..4], 5u32.to_le_bytes());
    }

    #[test]
    fn bad_version_and_truncation_are_named() {
        let mut rec = HEADER.to_vec();
        rec.extend_from_slice(&FRAGMENT);
        rec[0] = 4;
        assert_eq!(
            FrdEvent::parse(&rec).unwrap_err().to_string(),
            "FRD header: bad version at byte 0: expected 6 (u16) or 5 (u32), found 4"
        );
        rec[0] = 6;
        assert_eq!(
            FrdEvent::parse(&rec[..40]).unwrap_err().to_string(),
            "FRD event payload truncated at byte 24: needs 24 bytes, 16 available"
        );
    }

    #[test]
    fn leftover_bytes_before_first_fragment_are_an_error() {
        let mut payload = vec![0u8; 8];
        payload.extend_from_slice(&FRAGMENT);
        let mut rec = vec![0u8; 24 + payload.len()];
        write_frd_event(&mut rec, 0, 1, 1, 1, &[&payload]).unwrap();
        let ev = FrdEvent::parse(&rec).unwrap();
        let results: Vec<_> = ev.fragments().collect();
        assert_eq!(results.len(), 2);
        let err = results[1].as_ref().unwrap_err();
        assert!(matches!(err, FormatError::BadField { offset: 24, field: "EOE marker", .. }), "{err}");
    }

    proptest! {
        #[test]
        fn round_trip(sizes in proptest::collection::vec(0usize..64, 1..8), run: u32, ls: u32, event: u32) {
            let mut frags = Vec::new();
            for (i, words) in sizes.iter().enumerate() {
                let payload: Vec<u8> = (0..words * 8).map(|b| (b ^ i) as u8).collect();
                let mut f = vec![0u8; payload.len() + 16];
                let h = FedHeader { source_id: i as u16, lv1_id: event & 0xFF_FFFF, event_type: 1, ..FedHeader::default() };
                write_fragment(&mut f, &h, &payload, &FedTrailer::default()).unwrap();
                frags.push(f);
            }
            let refs: Vec<&[u8]> = frags.iter().map(|f| f.as_slice()).collect();
            let mut out = vec![0u8; 24 + frags.iter().map(|f| f.len()).sum::<usize>()];
            write_frd_event(&mut out, flags::GENERATED, run, ls, event, &refs).unwrap();
            let ev = FrdEvent::parse(&out).unwrap();
            prop_assert!(ev.check_crc().is_ok());
            let back: Vec<_> = ev.fragments().collect::<Result<_>>().unwrap();
            prop_assert_eq!(back.len(), frags.len());
            for ((_, f), orig) in back.iter().rev().zip(&frags) {
                prop_assert_eq!(f.as_bytes(), orig.as_slice());
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(ev) = FrdEvent::parse(&bytes) {
                let _ = ev.check_crc();
                for r in ev.fragments() { let _ = r; }
            }
        }
    }
}
