//! FRD event records: `FrdEvent::parse`, `check_crc`, the whole backward `fragments()` walk, and
//! a rewrite with `write_frd_event` of a record whose walk succeeded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_formats::fed::WORD_BYTES;
use tessera_formats::frd::{FRD_HEADER_BYTES, FRD_VERSION, FrdEvent, FrdHeader, write_frd_event};

fuzz_target!(|data: &[u8]| {
    let Ok(event) = FrdEvent::parse(data) else { return };
    check_event(&event, data);
});

fn check_event(event: &FrdEvent<'_>, data: &[u8]) {
    let h = event.header;
    assert!(h.version == 5 || h.version == 6);
    assert!(h.version == 6 || h.flags == 0);
    assert_eq!(FrdHeader::parse(&h.to_bytes()).expect("a header re-encodes"), h);
    assert_eq!(event.payload().len(), h.payload_bytes as usize);
    assert_eq!(event.record_bytes(), FRD_HEADER_BYTES + event.payload().len());
    assert!(event.record_bytes() <= data.len());
    assert_eq!(event.payload(), &data[FRD_HEADER_BYTES..event.record_bytes()]);
    let crc_ok = event.check_crc().is_ok();

    // Walk the fragments from the end: each ends where the one after it starts.
    let mut end = event.record_bytes();
    let mut fragments = Vec::new();
    let mut failed = false;
    for item in event.fragments() {
        assert!(!failed, "the fragment walk yielded after an error");
        match item {
            Ok((offset, f)) => {
                assert!(offset >= FRD_HEADER_BYTES);
                assert_eq!(offset + f.len(), end, "fragments are back to back");
                assert_eq!(f.len(), f.trailer.length_words as usize * WORD_BYTES);
                assert_eq!(f.as_bytes(), &data[offset..end]);
                let _ = f.check_crc();
                end = offset;
                fragments.push(f.as_bytes());
            }
            Err(e) => {
                let _ = e.to_string();
                failed = true;
            }
        }
    }
    if failed {
        return;
    }
    assert_eq!(end, FRD_HEADER_BYTES, "a walk without error covers the whole payload");

    // Written again from its fragments (version 6), the record has the same payload and fields.
    fragments.reverse();
    let mut out = vec![0u8; event.record_bytes()];
    let n = write_frd_event(&mut out, h.flags, h.run, h.lumi_section, h.event, &fragments).expect("rewrite fits");
    assert_eq!(n, event.record_bytes());
    let back = FrdEvent::parse(&out).expect("a written record parses");
    back.check_crc().expect("a written record has a good CRC");
    assert_eq!(back.payload(), event.payload());
    assert_eq!(back.header.version, FRD_VERSION);
    assert_eq!(
        FrdHeader { version: h.version, flags: h.flags, crc32c: h.crc32c, ..back.header },
        h,
        "fields other than version and CRC survive a rewrite"
    );
    if crc_ok {
        assert_eq!(back.header.crc32c, h.crc32c);
    }
    assert_eq!(back.fragments().count(), fragments.len());
}
