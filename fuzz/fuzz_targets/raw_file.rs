//! Raw files: `RawFile::parse`, `RawFile::from_header(RawFileHeader::parse(..))`, and the walk of
//! their records with `events()`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_formats::frd::FRD_HEADER_BYTES;
use tessera_formats::raw::{RAW_V1_HEADER_BYTES, RAW_V2_HEADER_BYTES, RawFile, RawFileHeader};

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = RawFile::parse(data) {
        assert_eq!(file.header.file_bytes, data.len() as u64);
        walk(&file, data);
    }
    if let Ok(header) = RawFileHeader::parse(data) {
        check_header(&header, data);
        walk(&RawFile::from_header(header, data), data);
    }
});

fn check_header(h: &RawFileHeader, data: &[u8]) {
    match h.version {
        1 => {
            assert_eq!(usize::from(h.header_bytes), RAW_V1_HEADER_BYTES);
            assert!(h.run.is_none());
            assert!(h.event_count <= u32::from(u16::MAX));
        }
        2 => {
            assert_eq!(usize::from(h.header_bytes), RAW_V2_HEADER_BYTES);
            assert!(h.run.is_some());
            // A version-2 header written again reads back the same, and is the input's header.
            let bytes = h.to_bytes();
            assert_eq!(RawFileHeader::parse(&bytes).expect("a written header parses"), *h);
            assert_eq!(&bytes[..], &data[..RAW_V2_HEADER_BYTES]);
        }
        v => panic!("raw file version {v}"),
    }
    assert!(usize::from(h.header_bytes) <= data.len());
}

fn walk(file: &RawFile<'_>, data: &[u8]) {
    assert_eq!(file.as_bytes(), data);
    let mut at = usize::from(file.header.header_bytes);
    let mut seen: u64 = 0;
    let mut failed = false;
    for item in file.events() {
        assert!(!failed, "events() yielded after an error");
        match item {
            Ok((offset, event)) => {
                assert_eq!(offset, at, "records are back to back");
                assert!(offset + event.record_bytes() <= data.len());
                assert!(event.record_bytes() >= FRD_HEADER_BYTES);
                assert_eq!(event.payload().len(), event.header.payload_bytes as usize);
                let _ = event.check_crc();
                for fragment in event.fragments() {
                    if fragment.is_err() {
                        break;
                    }
                }
                at = offset + event.record_bytes();
                seen += 1;
            }
            Err(e) => {
                let _ = e.to_string();
                failed = true;
            }
        }
    }
    if !failed {
        assert_eq!(at, data.len().max(usize::from(file.header.header_bytes)));
        assert_eq!(seen, u64::from(file.header.event_count));
    }
}
