//! FUs on a BU's orbit files (docs/formats.md §6, §7): the events unpacked orbit by orbit go
//! through the same selection as an event file's and come out as FRD v6 records in the usual
//! stream files, every event counted once, every orbit counted, a bad orbit's events as error
//! events.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, FuOutputDoc, IndexDoc};
use tessera_formats::frd::{FrdEvent, flags};
use tessera_formats::names::{BuFileName, StreamFileName};
use tessera_formats::orbit::{
    FRAME_BYTES, FragmentInfo, OrbitBlockWriter, SlinkRocketHeader, SlinkRocketTrailer, UNIT_BYTES,
};
use tessera_formats::raw::RawFile;
use tessera_formats::seeded::fill_payload;
use tessera_fu::broker::{Broker, BrokerConfig};
use tessera_fu::menu::Menu;
use tessera_fu::output::UNPACKED_DIR;
use tessera_fu::process::{FuConfig, FuReport, run_fu};
use tessera_fu::reader::{ReaderConfig, run_reader};
use tessera_fu::remote::BuAccess;
use tessera_fu::{FuError, Hlt, MenuHlt, StreamSet, Verdict};

#[path = "../../cli/tests/common/require.rs"]
mod require;

const RUN: u32 = 7;
/// The trigger source first, as a BU orders an orbit's blocks.
const SOURCES: [u32; 3] = [1024, 3, 5];

/// One orbit of a test file: its number, its first event id and its event count.
#[derive(Debug, Clone, Copy)]
struct OrbitSpec {
    orbit: u32,
    first_event: u64,
    events: u16,
}

impl OrbitSpec {
    fn event_ids(self) -> impl Iterator<Item = u64> {
        (0..u64::from(self.events)).map(move |i| self.first_event + i)
    }
}

/// The BX of event `i` of an orbit.
fn bx(i: u64) -> u16 {
    1 + 20 * i as u16
}

/// A payload length that varies with source and event and is rarely a multiple of 16.
fn payload_len(source: u32, event: u64) -> usize {
    8 + (event as usize * 7 + source as usize) % 5 * 24
}

fn seeded_payload(source: u32, event: u64) -> Vec<u8> {
    let mut bytes = vec![0; payload_len(source, event)];
    fill_payload(RUN, source as u16, event, &mut bytes);
    bytes
}

/// An orbit file of `orbits`, every source's block of each orbit one after another; also the
/// file offset of every block, per orbit.
fn orbit_file(orbits: &[OrbitSpec]) -> (Vec<u8>, Vec<Vec<usize>>) {
    orbit_file_with(orbits, |_, _, event| event)
}

/// [`orbit_file`], the event id that each (orbit, source, event) is written with given by `id`.
fn orbit_file_with(orbits: &[OrbitSpec], id: impl Fn(u32, u32, u64) -> u64) -> (Vec<u8>, Vec<Vec<usize>>) {
    let mut file = Vec::new();
    let mut offsets = Vec::new();
    let mut block = vec![0u8; 1 << 16];
    for spec in orbits {
        let mut blocks = Vec::new();
        for &source in &SOURCES {
            let mut writer = OrbitBlockWriter::new(&mut block, source, RUN, spec.orbit).unwrap();
            for (i, event) in spec.event_ids().enumerate() {
                let event_id = id(spec.orbit, source, event);
                let info = FragmentInfo { event_id, bx: bx(i as u64), physics_type: 1, ..Default::default() };
                writer.push_fragment(&info, &seeded_payload(source, event)).unwrap();
            }
            let len = writer.finish().unwrap();
            blocks.push(file.len());
            file.extend_from_slice(&block[..len]);
        }
        offsets.push(blocks);
    }
    (file, offsets)
}

/// A BU run directory with one raw file per lumi section (`files[ls - 1]`, holding `events`
/// events), each with its index JSON and EoLS, and the EoR.
fn write_bu_run(bu_dir: &Path, files: &[(Vec<u8>, u64)]) {
    let run_dir = bu_dir.join(format!("run{RUN:06}"));
    fs::create_dir_all(&run_dir).unwrap();
    let json = |name: String, text: String| fs::write(run_dir.join(name), text).unwrap();
    let mut total = 0;
    for (i, (bytes, events)) in files.iter().enumerate() {
        let ls = i as u32 + 1;
        fs::write(run_dir.join(BuFileName::Raw { run: RUN, ls, index: 0 }.to_string()), bytes).unwrap();
        let index = IndexDoc { events: *events, bytes: bytes.len() as u64, orbits: None };
        json(
            BuFileName::IndexJson { run: RUN, ls, index: 0 }.to_string(),
            index.to_doc("jsd/rawData.jsd", "bu0").to_json(),
        );
        let eols = EolsDoc {
            events: *events,
            files: 1,
            total_events: *events,
            lost_events: 0,
            bytes: bytes.len() as u64,
            orbits: None,
        };
        json(BuFileName::EndOfLumi { run: RUN, ls }.to_string(), eols.to_doc("jsd/EoLS.jsd", "bu0").to_json());
        total += events;
    }
    let lumis = files.len() as u64;
    let eor = EorDoc { events: total, files: lumis, lumis, last_lumi: lumis, orbits: None };
    json(BuFileName::EndOfRun { run: RUN }.to_string(), eor.to_doc("jsd/EoR.jsd", "bu0").to_json());
}

fn fu_config(root: &Path) -> FuConfig {
    FuConfig {
        bu: BuAccess::Directory(root.join("bu")),
        output_dir: root.join("fu"),
        run: RUN,
        host: "testhost".into(),
        pid: std::process::id(),
        poll_interval: Duration::from_millis(5),
        recovery_interval: Duration::from_millis(50),
        run_start_timeout: Duration::from_secs(5),
        summary_interval: Duration::from_secs(1),
    }
}

fn run(root: &Path, hlt: &mut dyn Hlt) -> FuReport {
    run_fu(&fu_config(root), hlt, &AtomicBool::new(false)).unwrap()
}

fn menu_hlt(yaml: &str) -> MenuHlt {
    MenuHlt::new(&Menu::from_yaml(yaml, "menu.yaml".as_ref()).unwrap()).unwrap()
}

const ACCEPT_ALL: &str = "streams: [All]\npaths:\n  - name: all\n    streams: [All]\n";

/// One stream's output of a lumi section: its `.jsn` and the records of its data file (none
/// without one).
type StreamOutput = (FuOutputDoc, Vec<Vec<u8>>);

/// Per lumi section and stream, the outputs in the FU's output run directory.
fn outputs(root: &Path) -> BTreeMap<(u32, String), StreamOutput> {
    let dir = root.join("fu").join(format!("run{RUN:06}"));
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Ok(parsed) = StreamFileName::parse(&name) else { continue };
        if parsed.ext != "jsn" {
            continue;
        }
        let doc = FuOutputDoc::parse(&fs::read_to_string(dir.join(&name)).unwrap()).unwrap();
        let mut records = Vec::new();
        if !doc.file_list.is_empty() {
            let bytes = fs::read(dir.join(&doc.file_list)).unwrap();
            let file = RawFile::parse(&bytes).unwrap();
            assert_eq!(u64::from(file.header.event_count), doc.accepted, "{name}");
            for event in file.events() {
                let (offset, event) = event.unwrap();
                records.push(bytes[offset..offset + event.record_bytes()].to_vec());
            }
        }
        found.insert((parsed.ls, parsed.stream), (doc, records));
    }
    found
}

/// Checks that `record` is the FRD v6 record of event `event` of lumi section `ls`: its numbers,
/// its CRC-32C, and as payload every source's SlinkRocket fragment of the event in block order,
/// each with the event's id and its seeded payload.
fn check_record(record: &[u8], ls: u32, event: u64) {
    let frd = FrdEvent::parse(record).unwrap();
    frd.check_crc().unwrap();
    let h = frd.header;
    assert_eq!((h.version, h.flags & flags::FRAGMENT_ERROR, h.run, h.lumi_section), (6, 0, RUN, ls));
    assert_eq!(h.event, event as u32);
    let payload = frd.payload();
    let mut at = 0;
    for &source in &SOURCES {
        let header = SlinkRocketHeader::parse(payload, at).unwrap();
        assert_eq!((header.source_id, header.event_id), (source, event));
        let expected = seeded_payload(source, event);
        let padded = expected.len().div_ceil(UNIT_BYTES) * UNIT_BYTES;
        let body = &payload[at + FRAME_BYTES..at + FRAME_BYTES + padded];
        assert_eq!(&body[..expected.len()], expected.as_slice(), "source {source} event {event}");
        assert!(body[expected.len()..].iter().all(|&b| b == 0));
        let trailer = SlinkRocketTrailer::parse(payload, at + FRAME_BYTES + padded).unwrap();
        assert_eq!(trailer.length_units as usize * UNIT_BYTES, padded + 2 * FRAME_BYTES);
        at += padded + 2 * FRAME_BYTES;
    }
    assert_eq!(at, payload.len(), "event {event}: bytes after the last source's fragment");
}

fn event_of(record: &[u8]) -> u64 {
    u64::from(FrdEvent::parse(record).unwrap().header.event)
}

/// Two lumi sections, three and two orbits of a few events each.
fn two_lumi_sections() -> Vec<Vec<OrbitSpec>> {
    vec![
        vec![
            OrbitSpec { orbit: 10, first_event: 1, events: 4 },
            OrbitSpec { orbit: 11, first_event: 5, events: 1 },
            OrbitSpec { orbit: 13, first_event: 6, events: 5 },
        ],
        vec![
            OrbitSpec { orbit: 1 << 18, first_event: 11, events: 3 },
            OrbitSpec { orbit: (1 << 18) + 4, first_event: 14, events: 6 },
        ],
    ]
}

fn write_files(root: &Path, sections: &[Vec<OrbitSpec>]) -> Vec<(Vec<u8>, u64)> {
    let files: Vec<(Vec<u8>, u64)> = sections
        .iter()
        .map(|orbits| (orbit_file(orbits).0, orbits.iter().map(|o| u64::from(o.events)).sum()))
        .collect();
    write_bu_run(&root.join("bu"), &files);
    files
}

#[test]
fn a_menu_that_accepts_all_gets_every_event_of_every_orbit_as_an_frd_record() {
    let root = tempfile::tempdir().unwrap();
    let sections = two_lumi_sections();
    write_files(root.path(), &sections);
    let report = run(root.path(), &mut menu_hlt(ACCEPT_ALL));
    let (events, orbits) = (19, 5);
    assert_eq!((report.files, report.events, report.orbits, report.bad_orbits), (2, events, orbits, 0));
    assert_eq!((report.error_events, report.ledger_events, report.ledger_orbits), (0, Some(events), Some(orbits)));
    assert!(report.reasons.is_empty(), "{:?}", report.reasons);
    let outputs = outputs(root.path());
    for (i, orbits) in sections.iter().enumerate() {
        let ls = i as u32 + 1;
        let expected: Vec<u64> = orbits.iter().flat_map(|o| o.event_ids()).collect();
        let (doc, records) = &outputs[&(ls, "All".to_owned())];
        assert_eq!((doc.processed, doc.accepted, doc.error_events), (expected.len() as u64, expected.len() as u64, 0));
        assert_eq!(records.iter().map(|r| event_of(r)).collect::<Vec<_>>(), expected, "ls {ls}: events in file order");
        for (record, &event) in records.iter().zip(&expected) {
            check_record(record, ls, event);
        }
        let (error, error_records) = &outputs[&(ls, "Error".to_owned())];
        assert_eq!((error.processed, error.accepted, error_records.len()), (expected.len() as u64, 0, 0));
    }
    // The BU's files are processed and removed, as an event file's.
    assert!(!root.path().join("bu/run000007/fu").read_dir().unwrap().any(|_| true));
}

#[test]
fn a_menu_selects_orbit_events_on_their_trigger_source_bx_and_sources() {
    let root = tempfile::tempdir().unwrap();
    let sections = two_lumi_sections();
    write_files(root.path(), &sections);
    let menu = "streams: [Early, Physics, Never]\npaths:\n\
                \x20 - name: early\n    streams: [Early]\n    conditions: {bx: {min: 0, max: 50}}\n\
                \x20 - name: physics\n    streams: [Physics]\n    conditions: {trigger_type: [1], feds_present: [3, 5]}\n\
                \x20 - name: never\n    streams: [Never]\n    conditions: {feds_absent: [3]}\n";
    let report = run(root.path(), &mut menu_hlt(menu));
    assert_eq!((report.events, report.orbits, report.error_events), (19, 5, 0));
    let outputs = outputs(root.path());
    for (i, orbits) in sections.iter().enumerate() {
        let ls = i as u32 + 1;
        let all: Vec<u64> = orbits.iter().flat_map(|o| o.event_ids()).collect();
        // BX 1, 21, 41 are the first three events of each orbit.
        let early: Vec<u64> = orbits.iter().flat_map(|o| o.event_ids().take(3)).collect();
        assert!(early.len() < all.len());
        let events = |stream: &str| outputs[&(ls, stream.to_owned())].1.iter().map(|r| event_of(r)).collect::<Vec<_>>();
        assert_eq!(events("Early"), early, "ls {ls}");
        assert_eq!(events("Physics"), all, "ls {ls}");
        assert_eq!(events("Never"), Vec::<u64>::new(), "ls {ls}");
        for stream in ["Early", "Physics", "Never", "Error"] {
            assert_eq!(outputs[&(ls, stream.to_owned())].0.processed, all.len() as u64, "ls {ls} {stream}");
        }
        for record in &outputs[&(ls, "Early".to_owned())].1 {
            check_record(record, ls, event_of(record));
        }
    }
}

#[test]
fn an_orbit_whose_crc_fails_gives_error_events_not_a_crash() {
    let root = tempfile::tempdir().unwrap();
    let orbits = two_lumi_sections().remove(0);
    let (mut bytes, offsets) = orbit_file(&orbits);
    // The CRC-32C of the second source's block of the third orbit (5 events).
    let block = offsets[2][1];
    bytes[block + 28] ^= 0x40;
    write_bu_run(&root.path().join("bu"), &[(bytes, 10)]);
    let report = run(root.path(), &mut menu_hlt(ACCEPT_ALL));
    assert_eq!((report.events, report.orbits, report.bad_orbits, report.error_events), (10, 3, 1, 5));
    assert!(
        report.reasons.iter().any(|r| r.contains("orbit 13 at byte") && r.contains(&format!("at byte {block}"))),
        "{:?}",
        report.reasons
    );
    let outputs = outputs(root.path());
    let (all, records) = &outputs[&(1, "All".to_owned())];
    assert_eq!((all.processed, all.error_events, all.hlt_error_events), (10, 5, 0));
    assert_eq!(records.iter().map(|r| event_of(r)).collect::<Vec<_>>(), (1..=5).collect::<Vec<_>>());
    // The bad orbit's events are kept whole in the error stream.
    let (error, error_records) = &outputs[&(1, "Error".to_owned())];
    assert_eq!((error.accepted, error.error_events), (5, 5));
    for (record, event) in error_records.iter().zip(6..=10) {
        check_record(record, 1, event);
    }
}

#[test]
fn an_orbit_whose_sources_disagree_gives_the_events_it_can_unpack_as_error_events_and_counts_the_rest() {
    let root = tempfile::tempdir().unwrap();
    let orbits = two_lumi_sections().remove(0);
    // In orbit 13 (events 6 to 10), source 5 numbers its third event 99: walking back, events 10
    // and 9 unpack, the step of event 8 breaks the rule, 6 to 8 cannot be unpacked.
    let (bytes, offsets) = orbit_file_with(&orbits, |orbit, source, event| match (orbit, source, event) {
        (13, 5, 8) => 99,
        _ => event,
    });
    write_bu_run(&root.path().join("bu"), &[(bytes, 10)]);
    let report = run(root.path(), &mut menu_hlt(ACCEPT_ALL));
    assert_eq!((report.events, report.orbits, report.bad_orbits, report.error_events), (10, 3, 1, 5));
    let at = format!("orbit 13 at byte {}", offsets[2][0]);
    assert!(report.reasons.iter().any(|r| r.contains(&at) && r.contains("99")), "{:?}", report.reasons);
    let outputs = outputs(root.path());
    let (all, records) = &outputs[&(1, "All".to_owned())];
    assert_eq!((all.processed, all.error_events), (10, 5));
    assert_eq!(records.iter().map(|r| event_of(r)).collect::<Vec<_>>(), (1..=5).collect::<Vec<_>>());
    let error_records = &outputs[&(1, "Error".to_owned())].1;
    assert_eq!(error_records.iter().map(|r| event_of(r)).collect::<Vec<_>>(), [9, 10]);
    for record in error_records {
        check_record(record, 1, event_of(record));
    }
}

#[test]
fn a_truncated_orbit_file_is_said_with_its_offset_and_its_events_counted() {
    let root = tempfile::tempdir().unwrap();
    let orbits = two_lumi_sections().remove(0);
    let (mut bytes, offsets) = orbit_file(&orbits);
    // The file breaks off inside the last source's block of the last orbit.
    let block = offsets[2][2];
    bytes.truncate(block + 40);
    write_bu_run(&root.path().join("bu"), &[(bytes, 10)]);
    let report = run(root.path(), &mut menu_hlt(ACCEPT_ALL));
    // Its events, unknown, are counted from the index JSON as error events.
    assert_eq!((report.events, report.orbits, report.bad_orbits, report.error_events), (10, 3, 1, 5));
    assert!(
        report.reasons.iter().any(|r| r.contains("cannot be read") && r.contains(&format!("at byte {block}"))),
        "{:?}",
        report.reasons
    );
    let outputs = outputs(root.path());
    let (all, records) = &outputs[&(1, "All".to_owned())];
    assert_eq!((all.processed, all.accepted, all.error_events), (10, 5, 5));
    assert_eq!(records.len(), 5);
}

/// An HLT that reads the file it is given, as an external program does: every event it is asked
/// about must be a record of that file.
struct FileReadingHlt {
    streams: Vec<String>,
    files: Vec<PathBuf>,
}

impl Hlt for FileReadingHlt {
    fn streams(&self) -> &[String] {
        &self.streams
    }

    fn select_file(
        &mut self,
        file: &Path,
        events: &[FrdEvent<'_>],
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), FuError> {
        let bytes = fs::read(file).unwrap();
        let raw = RawFile::parse(&bytes).unwrap();
        let headers: Vec<_> = raw.events().map(|e| e.unwrap().1.header).collect();
        for event in events {
            assert!(headers.contains(&event.header), "event {} not in {}", event.header.event, file.display());
            let mut set = StreamSet::NONE;
            set.insert(0);
            verdicts.push(Verdict::Streams(set));
        }
        self.files.push(file.to_owned());
        Ok(())
    }
}

#[test]
fn an_hlt_that_reads_files_gets_the_unpacked_events_as_a_raw_file_removed_after() {
    let root = tempfile::tempdir().unwrap();
    write_files(root.path(), &two_lumi_sections());
    let mut hlt = FileReadingHlt { streams: vec!["All".into()], files: Vec::new() };
    let report = run(root.path(), &mut hlt);
    assert_eq!((report.events, report.orbits, report.accepted["All"]), (19, 5, 19));
    let unpacked = root.path().join("fu/run000007/spool").join(UNPACKED_DIR);
    assert!(hlt.files.iter().all(|f| f.starts_with(&unpacked)), "{:?}", hlt.files);
    assert!(!unpacked.read_dir().unwrap().any(|_| true), "files left in {}", unpacked.display());
}

#[test]
fn a_cmssw_reader_counts_orbit_files_orbit_by_orbit_and_says_a_bad_crc() {
    let root = tempfile::tempdir().unwrap();
    let sections = two_lumi_sections();
    let (mut bad, offsets) = orbit_file(&sections[1]);
    bad[offsets[1][2] + 28] ^= 1;
    let files = vec![(orbit_file(&sections[0]).0, 10), (bad, 9)];
    let bu_dir = root.path().join("bu");
    write_bu_run(&bu_dir, &files);
    let broker = Broker::start(BrokerConfig::new(&bu_dir, RUN)).unwrap();
    let cfg = ReaderConfig {
        broker: broker.local_addr(),
        broker_host: "127.0.0.1".into(),
        bu_dir: bu_dir.clone(),
        run: RUN,
        pid: 7100,
        stop_ls: None,
        file_delay: Duration::ZERO,
        timeout: Duration::from_secs(60),
    };
    let report = run_reader(&cfg, &AtomicBool::new(false)).unwrap();
    assert_eq!((report.files, report.events, report.orbits, report.last_ls), (2, 19, 5, 2));
    assert_eq!(report.deviations.len(), 1, "{:?}", report.deviations);
    let at = format!("at byte {}", offsets[1][2]);
    assert!(report.deviations[0].contains("CRC-32C") && report.deviations[0].contains(&at), "{:?}", report.deviations);
}

#[test]
fn the_example_external_hlt_judges_orbit_events_on_their_frd_header() {
    use tessera_fu::exec::{ExecConfig, ExecHlt};
    let python = std::process::Command::new("python3").arg("--version").output().is_ok();
    if !require::require("no python3: the test runs the example HLT, examples/hlt/select.py", python) {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hlt/select.py");
    let root = tempfile::tempdir().unwrap();
    write_files(root.path(), &two_lumi_sections());
    let mut hlt = ExecHlt::start(ExecConfig::new(vec!["python3".into(), script.display().to_string()])).unwrap();
    let report = run(root.path(), &mut hlt);
    assert_eq!((report.events, report.orbits, report.error_events), (19, 5, 0), "{:?}", report.reasons);
    // select.py: Physics for even event numbers, Express for multiples of 10, of events 1 to 19.
    let accepted: Vec<(&str, u64)> = report.accepted.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    assert_eq!(accepted, [("Error", 0), ("Express", 1), ("Physics", 9)]);
    let outputs = outputs(root.path());
    let physics: Vec<u64> =
        [1, 2].iter().flat_map(|&ls| outputs[&(ls, "Physics".to_owned())].1.iter()).map(|r| event_of(r)).collect();
    assert_eq!(physics, (2..=18).step_by(2).collect::<Vec<u64>>());
}
