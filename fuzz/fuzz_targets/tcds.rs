//! Trigger (TCDS) fragments: `TcdsRecord::parse` and `check_lumi_section`, and a write of the
//! parsed record that must read back the same.
//!
//! The first input byte selects the mode: see `fixup.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod fixup;
use tessera_formats::tcds::{TCDS_FED_ID, TCDS_FRAGMENT_BYTES, TcdsRecord, is_tcds_fed, lumi_section_of_orbit};

fuzz_target!(|input: &[u8]| {
    let data = &fixup::input(input, fixup::tcds)[..];
    let Ok((record, fragment)) = TcdsRecord::parse(data) else { return };
    assert_eq!(fragment.len(), TCDS_FRAGMENT_BYTES);
    assert_eq!(data.len(), TCDS_FRAGMENT_BYTES);
    assert!(is_tcds_fed(fragment.header.source_id));
    assert!(record.orbit < 1 << 48, "the orbit is 48 bits on the wire");
    let ls_ok = record.check_lumi_section().is_ok();
    assert_eq!(ls_ok, record.lumi_section == lumi_section_of_orbit(record.orbit));
    let _ = fragment.check_crc();

    let mut out = vec![0u8; TCDS_FRAGMENT_BYTES];
    let n = record.write(&mut out, fragment.header.event_type).expect("a parsed record can be written");
    assert_eq!(n, TCDS_FRAGMENT_BYTES);
    let (back, back_fragment) = TcdsRecord::parse(&out).expect("a written record parses");
    assert_eq!(back, record);
    back_fragment.check_crc().expect("a written record has a good CRC");
    assert_eq!(back_fragment.header.source_id, TCDS_FED_ID);
    assert_eq!(back_fragment.header.event_type, fragment.header.event_type & 0xF);
    assert_eq!(back.check_lumi_section().is_ok(), ls_ok);
});
