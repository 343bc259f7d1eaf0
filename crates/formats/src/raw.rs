//! Raw files, docs/formats.md §5: a BU's output file, a header followed by FRD event records.
//!
//! Tessera writes `RAW_0002` (32-byte header) and reads `RAW_0001` (24 bytes) and `RAW_0002`.
//! A BU in orbit mode writes orbit files instead, with no header ([`crate::orbit::OrbitFile`]).

use crate::error::{FormatError, Result, dec, le_u16, le_u32, le_u64, need_space, take};
use crate::frd::FrdEvent;

/// Magic of a version-2 raw file.
pub const RAW_V2_MAGIC: &[u8; 8] = b"RAW_0002";
/// Magic of a version-1 raw file.
pub const RAW_V1_MAGIC: &[u8; 8] = b"RAW_0001";
/// Header size of `RAW_0002`.
pub const RAW_V2_HEADER_BYTES: usize = 32;
/// Header size of `RAW_0001`.
pub const RAW_V1_HEADER_BYTES: usize = 24;

/// Data types of a `RAW_0002` header.
pub mod data_type {
    /// FRD events.
    pub const FRD_EVENTS: u16 = 0;
    /// Used by a Phase-2 scouting tool; Tessera reads its header but not its records.
    pub const PHASE2_SCOUTING: u16 = 20;
}

/// The header of a raw file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFileHeader {
    /// 1 or 2.
    pub version: u8,
    /// Header size in bytes, as stored.
    pub header_bytes: u16,
    /// Data type (version 2; [`data_type::FRD_EVENTS`] for version 1).
    pub data_type: u16,
    /// Number of records in the file.
    pub event_count: u32,
    /// Run number (version 2 only).
    pub run: Option<u32>,
    /// Lumi section.
    pub lumi_section: u32,
    /// File size in bytes, header included.
    pub file_bytes: u64,
}

impl RawFileHeader {
    /// A version-2 header.
    pub fn v2(data_type: u16, event_count: u32, run: u32, lumi_section: u32, file_bytes: u64) -> Self {
        RawFileHeader {
            version: 2,
            header_bytes: RAW_V2_HEADER_BYTES as u16,
            data_type,
            event_count,
            run: Some(run),
            lumi_section,
            file_bytes,
        }
    }

    /// Reads a `RAW_0001` or `RAW_0002` header at the start of `buf`.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        const WHAT: &str = "raw file header";
        let magic = take::<8>(buf, 0, WHAT)?;
        let (version, expected_size) = match &magic {
            m if m == RAW_V2_MAGIC => (2u8, RAW_V2_HEADER_BYTES),
            m if m == RAW_V1_MAGIC => (1u8, RAW_V1_HEADER_BYTES),
            m => {
                let found = String::from_utf8_lossy(m).escape_debug().to_string();
                return Err(FormatError::bad(WHAT, "magic", 0, "\"RAW_0002\" or \"RAW_0001\"", format!("\"{found}\"")));
            }
        };
        if buf.len() < expected_size {
            return Err(FormatError::truncated(WHAT, 0, expected_size, buf.len()));
        }
        let header_bytes = le_u16(buf, 8, WHAT)?;
        if usize::from(header_bytes) != expected_size {
            return Err(FormatError::bad(WHAT, "header size", 8, dec(expected_size), dec(header_bytes)));
        }
        Ok(if version == 2 {
            RawFileHeader {
                version,
                header_bytes,
                data_type: le_u16(buf, 10, WHAT)?,
                event_count: le_u32(buf, 12, WHAT)?,
                run: Some(le_u32(buf, 16, WHAT)?),
                lumi_section: le_u32(buf, 20, WHAT)?,
                file_bytes: le_u64(buf, 24, WHAT)?,
            }
        } else {
            RawFileHeader {
                version,
                header_bytes,
                data_type: data_type::FRD_EVENTS,
                event_count: le_u16(buf, 10, WHAT)?.into(),
                run: None,
                lumi_section: le_u32(buf, 12, WHAT)?,
                file_bytes: le_u64(buf, 16, WHAT)?,
            }
        })
    }

    /// Encodes a version-2 header (the only version Tessera writes).
    pub fn to_bytes(&self) -> [u8; RAW_V2_HEADER_BYTES] {
        let mut out = [0u8; RAW_V2_HEADER_BYTES];
        out[0..8].copy_from_slice(RAW_V2_MAGIC);
        out[8..10].copy_from_slice(&(RAW_V2_HEADER_BYTES as u16).to_le_bytes());
        out[10..12].copy_from_slice(&self.data_type.to_le_bytes());
        out[12..16].copy_from_slice(&self.event_count.to_le_bytes());
        out[16..20].copy_from_slice(&self.run.unwrap_or(0).to_le_bytes());
        out[20..24].copy_from_slice(&self.lumi_section.to_le_bytes());
        out[24..32].copy_from_slice(&self.file_bytes.to_le_bytes());
        out
    }

    /// Writes the version-2 header at the start of `out`.
    pub fn write(&self, out: &mut [u8]) -> Result<usize> {
        need_space(out, RAW_V2_HEADER_BYTES, "raw file header")?;
        out[..RAW_V2_HEADER_BYTES].copy_from_slice(&self.to_bytes());
        Ok(RAW_V2_HEADER_BYTES)
    }
}

/// A view of a whole raw file in memory.
#[derive(Debug, Clone, Copy)]
pub struct RawFile<'a> {
    /// The decoded header.
    pub header: RawFileHeader,
    bytes: &'a [u8],
}

impl<'a> RawFile<'a> {
    /// Reads the header of the file held in `bytes` and checks its file size against `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let header = RawFileHeader::parse(bytes)?;
        let size_at = if header.version == 2 { 24 } else { 16 };
        if header.file_bytes != bytes.len() as u64 {
            if header.file_bytes > bytes.len() as u64 {
                return Err(FormatError::truncated(
                    "raw file",
                    0,
                    usize::try_from(header.file_bytes).unwrap_or(usize::MAX),
                    bytes.len(),
                ));
            }
            return Err(FormatError::bad(
                "raw file header",
                "file size",
                size_at,
                format!("{} (the file's size)", bytes.len()),
                dec(header.file_bytes),
            ));
        }
        Ok(RawFile { header, bytes })
    }

    /// A view of `bytes` under an already parsed `header`, without checking the file size: for
    /// tools that show what can be read of a truncated or overlong file. Reading records stays
    /// bounds-checked.
    pub fn from_header(header: RawFileHeader, bytes: &'a [u8]) -> Self {
        RawFile { header, bytes }
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The file's records in order, each with its byte offset in the file. After the last record
    /// the iterator checks that the record count equals the header's event count; it ends after
    /// the first error.
    pub fn events(&self) -> RawEvents<'a> {
        RawEvents {
            bytes: self.bytes,
            at: usize::from(self.header.header_bytes),
            seen: 0,
            expected: self.header.event_count,
            done: false,
        }
    }
}

/// Iterator over a raw file's records: see [`RawFile::events`].
#[derive(Debug, Clone)]
pub struct RawEvents<'a> {
    bytes: &'a [u8],
    at: usize,
    seen: u32,
    expected: u32,
    done: bool,
}

impl<'a> Iterator for RawEvents<'a> {
    type Item = Result<(usize, FrdEvent<'a>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.at >= self.bytes.len() {
            self.done = true;
            if self.seen != self.expected {
                return Some(Err(FormatError::bad(
                    "raw file header",
                    "event count",
                    12,
                    format!("{} (records in the file)", self.seen),
                    dec(self.expected),
                )));
            }
            return None;
        }
        match FrdEvent::parse(&self.bytes[self.at..]) {
            Ok(event) => {
                let offset = self.at;
                self.at += event.record_bytes();
                self.seen += 1;
                Some(Ok((offset, event)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e.shifted(self.at)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frd::write_frd_event;
    use proptest::prelude::*;

    const FRAGMENT: [u8; 24] = [
        0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00,
        0x85, 0x2f, 0x03, 0x00, 0x00, 0xa0,
    ];

    fn vector_file() -> Vec<u8> {
        let mut file = vec![0u8; 80];
        write_frd_event(&mut file[32..], 0, 123_456, 1, 1, &[&FRAGMENT]).unwrap();
        RawFileHeader::v2(data_type::FRD_EVENTS, 1, 123_456, 1, 80).write(&mut file).unwrap();
        file
    }

    #[test]
    fn writes_the_formats_md_header_vector() {
        let expected: [u8; 32] = [
            0x52, 0x41, 0x57, 0x5f, 0x30, 0x30, 0x30, 0x32, 0x20, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0xe2,
            0x01, 0x00, 0x01, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(vector_file()[..32], expected);
    }

    #[test]
    fn reads_its_events() {
        let file = vector_file();
        let raw = RawFile::parse(&file).unwrap();
        let events: Vec<_> = raw.events().collect::<Result<_>>().unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, 32);
        assert_eq!(events[0].1.header.event, 1);
    }

    #[test]
    fn reads_raw_0001() {
        let mut file = vec![0u8; 24];
        file[..8].copy_from_slice(RAW_V1_MAGIC);
        file[8..10].copy_from_slice(&24u16.to_le_bytes());
        file[10..12].copy_from_slice(&0u16.to_le_bytes());
        file[12..16].copy_from_slice(&7u32.to_le_bytes());
        file[16..24].copy_from_slice(&24u64.to_le_bytes());
        let raw = RawFile::parse(&file).unwrap();
        assert_eq!((raw.header.version, raw.header.lumi_section, raw.header.run), (1, 7, None));
        assert_eq!(raw.events().count(), 0);
    }

    #[test]
    fn errors_name_the_field() {
        let mut file = vector_file();
        file[7] = b'9';
        assert_eq!(
            RawFile::parse(&file).unwrap_err().to_string(),
            "raw file header: bad magic at byte 0: expected \"RAW_0002\" or \"RAW_0001\", found \"RAW_0009\""
        );
        let mut file = vector_file();
        file[8] = 24;
        assert_eq!(
            RawFile::parse(&file).unwrap_err().to_string(),
            "raw file header: bad header size at byte 8: expected 32, found 24"
        );
        let file = vector_file();
        assert_eq!(
            RawFile::parse(&file[..70]).unwrap_err().to_string(),
            "raw file truncated at byte 0: needs 80 bytes, 70 available"
        );
        let mut file = vector_file();
        file[12] = 2;
        let raw = RawFile::parse(&file).unwrap();
        let last = raw.events().last().unwrap().unwrap_err();
        assert_eq!(
            last.to_string(),
            "raw file header: bad event count at byte 12: expected 1 (records in the file), found 2"
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..256), magic: bool) {
            if magic && bytes.len() >= 8 { bytes[..8].copy_from_slice(RAW_V2_MAGIC); }
            if let Ok(raw) = RawFile::parse(&bytes) {
                for r in raw.events() { let _ = r; }
            }
        }
    }
}
