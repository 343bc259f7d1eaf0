//! The folder `tests/malformed/` holds one broken input per rule, each with the exact first
//! error `tessera inspect` must report for it. The builders below make every file from a valid
//! one; `regenerate_malformed_inputs` (ignored) rewrites the folder, and a test checks that the
//! folder still equals what the builders make.

use std::path::PathBuf;
use tessera_formats::crc::crc32c;
use tessera_formats::ferol::write_ferol_blocks;
use tessera_formats::frd::write_frd_event;
use tessera_formats::orbit::{FragmentInfo, OrbitBlockWriter, write_dth_blocks};
use tessera_formats::raw::{RawFileHeader, data_type};
use tessera_formats::seeded::write_seeded_fragment;
use tessera_inspect::event::EventChecks;
use tessera_inspect::inspect_path;

/// docs/formats.md §10: the 3-word fragment.
const FRAGMENT: [u8; 24] = [
    0x00, 0x01, 0x10, 0x00, 0x01, 0x00, 0x00, 0x51, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00, 0x85,
    0x2f, 0x03, 0x00, 0x00, 0xa0,
];

/// The raw file of docs/formats.md §10: one event holding the fragment (80 bytes).
fn raw_file() -> Vec<u8> {
    let mut file = vec![0u8; 80];
    write_frd_event(&mut file[32..], 0, 123_456, 1, 1, &[&FRAGMENT]).unwrap();
    RawFileHeader::v2(data_type::FRD_EVENTS, 1, 123_456, 1, 80).write(&mut file).unwrap();
    file
}

/// Applies `change` to the raw file's event payload (from byte 56), then fixes the FRD CRC-32C
/// so that only the intended error remains.
fn raw_with_payload(change: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut file = raw_file();
    change(&mut file[56..]);
    let crc = crc32c(&file[56..]);
    file[52..56].copy_from_slice(&crc.to_le_bytes());
    file
}

/// A FEROL stream of FED 5: a 2 kB fragment (one block) and a 6 kB one (two blocks).
fn ferol_stream() -> Vec<u8> {
    let mut stream = Vec::new();
    for (event, payload) in [(1u64, 2048usize), (2, 6000)] {
        let mut frag = vec![0u8; payload + 16];
        write_seeded_fragment(&mut frag, 1, 5, event, 100, payload).unwrap();
        let mut blocks = vec![0u8; frag.len() + 64];
        let n = write_ferol_blocks(&frag, &mut blocks).unwrap();
        stream.extend_from_slice(&blocks[..n]);
    }
    stream
}

/// A DTH stream of one orbit of source 7 with three events, in 256-byte stream blocks.
fn dth_stream() -> Vec<u8> {
    let mut block = vec![0u8; 4096];
    let mut w = OrbitBlockWriter::new(&mut block, 7, 1, 4242).unwrap();
    for event in 0..3u64 {
        let info = FragmentInfo { event_id: 100 + event, bx: 10 * event as u16, ..FragmentInfo::default() };
        w.push_fragment(&info, &[event as u8; 100]).unwrap();
    }
    let len = w.finish().unwrap();
    let mut out = vec![0u8; 8192];
    let n = write_dth_blocks(&block[..len], 256, &mut out).unwrap();
    out.truncate(n);
    out
}

type Builder = fn() -> Vec<u8>;

/// Every malformed input: file name, builder, the first problem `inspect` must report.
const CASES: &[(&str, Builder, &str)] = &[
    ("raw_truncated.raw", || raw_file()[..70].to_vec(), "raw file truncated at byte 0: needs 80 bytes, 70 available"),
    (
        "raw_bad_magic.raw",
        || {
            let mut f = raw_file();
            f[..8].copy_from_slice(b"RAW_0003");
            f
        },
        "raw file header: bad magic at byte 0: expected \"RAW_0002\" or \"RAW_0001\", found \"RAW_0003\"",
    ),
    (
        "raw_wrong_header_size.raw",
        || {
            let mut f = raw_file();
            f[8] = 24;
            f
        },
        "raw file header: bad header size at byte 8: expected 32, found 24",
    ),
    (
        "raw_file_size_too_small.raw",
        || {
            let mut f = raw_file();
            f[24] = 72;
            f
        },
        "raw file header: bad file size at byte 24: expected 80 (the file's size), found 72",
    ),
    (
        "raw_event_count_wrong.raw",
        || {
            let mut f = raw_file();
            f[12] = 2;
            f
        },
        "raw file header: bad event count at byte 12: expected 1 (records in the file), found 2",
    ),
    (
        "raw_frd_bad_version.raw",
        || {
            let mut f = raw_file();
            f[32] = 7;
            f
        },
        "FRD header: bad version at byte 32: expected 6 (u16) or 5 (u32), found 7",
    ),
    (
        "raw_frd_payload_past_end.raw",
        || {
            let mut f = raw_file();
            f[48] = 32;
            f
        },
        "FRD event payload truncated at byte 56: needs 32 bytes, 24 available",
    ),
    (
        "raw_bad_crc32c.raw",
        || {
            let mut f = raw_file();
            f[52] ^= 0xFF;
            f
        },
        "event 1: FRD event: CRC-32C mismatch at byte 32: stored 0x71a1db2, computed 0x71a1d4d",
    ),
    (
        "raw_bad_crc16.raw",
        || raw_with_payload(|p| p[9] ^= 0x01),
        "event 1 FED 1: FED fragment: CRC-16 mismatch at byte 56: stored 0x2f85, computed 0xcf92",
    ),
    (
        "raw_wrong_boe_marker.raw",
        || raw_with_payload(|p| p[7] = 0x41),
        "event 1: FED header: bad BOE marker at byte 56: expected 0x5, found 0x4",
    ),
    (
        "raw_wrong_eoe_marker.raw",
        || raw_with_payload(|p| p[23] = 0xB0),
        "event 1: FED trailer: bad EOE marker at byte 72: expected 0xa, found 0xb",
    ),
    (
        "raw_fragment_length_past_start.raw",
        || raw_with_payload(|p| p[20] = 100),
        "event 1: FED fragment: bad trailer length (words) at byte 72: expected 2..=3, found 100",
    ),
    (
        "raw_fragment_length_wrong.raw",
        || raw_with_payload(|p| p[20] = 2),
        "event 1: FED header: bad BOE marker at byte 64: expected 0x5, found 0x0",
    ),
    (
        "ferol_truncated.ferol",
        || {
            let s = ferol_stream();
            s[..s.len() - 100].to_vec()
        },
        "FEROL block truncated at byte 6176: needs 1952 bytes, 1852 available",
    ),
    (
        "ferol_bad_signature.ferol",
        || {
            let mut s = ferol_stream();
            s[2080] = 0x48;
            s
        },
        "FEROL block header: bad signature at byte 2080: expected 0x475a, found 0x485a",
    ),
    (
        "ferol_wrong_fed_id.ferol",
        || {
            let mut s = ferol_stream();
            s[8] = 0x00;
            s[9] = 0x09;
            s
        },
        "FEROL block header: bad FED id at byte 0: expected 5, found 9",
    ),
    (
        "ferol_bad_crc16.ferol",
        || {
            let mut s = ferol_stream();
            s[100] ^= 0x01;
            s
        },
        "FED 5: FED fragment: CRC-16 mismatch at byte 16: stored 0xaad3, computed 0x2c4a",
    ),
    (
        "ferol_missing_block.ferol",
        || {
            let s = ferol_stream();
            [&s[..2080], &s[2080 + 4096..]].concat()
        },
        "FEROL block header: bad first-block flag at byte 2080: expected 1, found 0",
    ),
    (
        "dth_bad_orbit_crc32c.dth",
        || {
            let mut s = dth_stream();
            s[100] ^= 0x01;
            s
        },
        "orbit block: CRC-32C mismatch at byte 0: stored 0x722b25b1, computed 0xf0280bb3",
    ),
    (
        "dth_truncated.dth",
        || {
            let s = dth_stream();
            s[..s.len() - 20].to_vec()
        },
        "DTH block truncated at byte 512: needs 48 bytes, 28 available",
    ),
    (
        "run000001_ls0001_index000000.jsn",
        || br#"{"data":["12"],"definition":"jsd/rawData.jsd","source":"bu"}"#.to_vec(),
        "index JSON: field data: expected 2 values (NEvents, NBytes), found 1",
    ),
    (
        "run000001_ls0002_index000000.jsn",
        || br#"{"data":["12","4x"],"definition":"jsd/rawData.jsd","source":"bu"}"#.to_vec(),
        "index JSON: field NBytes: \"4x\" is not an unsigned integer",
    ),
    (
        "run000001_ls0001_EoLS.jsn",
        || br#"{"data":["1","1","2","0","80"],"definition":"jsd/EoLS.jsd"}"#.to_vec(),
        "EoLS JSON: field source: missing",
    ),
    (
        "run000001_ls0000_EoR.jsn",
        || br#"{"data":["1","1","1"#.to_vec(),
        "EoR JSON: field (document): EOF while parsing a string at line 1 column 19",
    ),
    (
        "rawData.jsd",
        || br#"{"legend":[{"name":"NEvents","operation":"add","type":"integer"}]}"#.to_vec(),
        ".jsd legend: field legend[0].operation: unknown operation \"add\"; expected one of sum, binaryOr, same, cat, merge, adler32",
    ),
];

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/malformed")
}

fn first_problem(path: &std::path::Path) -> String {
    let report = inspect_path(path, EventChecks::default()).unwrap();
    let json = serde_json::to_value(&report).unwrap();
    // The first problem anywhere in the report, in report order.
    fn find(v: &serde_json::Value) -> Option<String> {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::Array(ps)) = m.get("problems")
                    && let Some(p) = ps.first()
                {
                    return Some(p["message"].as_str().unwrap().to_owned());
                }
                m.values().find_map(find)
            }
            serde_json::Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    find(&json).unwrap_or_else(|| "no problem reported".into())
}

#[test]
#[ignore = "rewrites tests/malformed from the builders"]
fn regenerate_malformed_inputs() {
    std::fs::create_dir_all(folder()).unwrap();
    for (name, build, _) in CASES {
        std::fs::write(folder().join(name), build()).unwrap();
    }
}

#[test]
fn folder_matches_the_builders() {
    for (name, build, _) in CASES {
        let on_disk = std::fs::read(folder().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(on_disk, build(), "{name} differs from its builder: run the ignored regenerate test");
    }
}

#[test]
fn each_malformed_input_gives_its_exact_error() {
    let mut wrong = Vec::new();
    for (name, _, expected) in CASES {
        let found = first_problem(&folder().join(name));
        if found != *expected {
            wrong.push(format!("{name}:\n  expected: {expected}\n  found:    {found}"));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn valid_inputs_give_no_problem() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [("ok.ferol", ferol_stream()), ("ok.dth", dth_stream())] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(first_problem(&path), "no problem reported", "{name}");
    }
    // The docs/formats.md §10 vector is a valid file whose one event lacks a trigger fragment: only the
    // event-builder rule fails.
    let path = dir.path().join("vector.raw");
    std::fs::write(&path, raw_file()).unwrap();
    assert_eq!(first_problem(&path), "event 1: 0 trigger fragments, expected exactly 1");
}
