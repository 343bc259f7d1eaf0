//! `verify_run_dir` and `inspect_path` against orbit-mode run directories written by
//! `tessera_rundir::orbit_sample`: an untouched one passes, and each broken rule is reported
//! with its file, offset and exact message.

use serde_json::Value;
use std::fs;
use std::path::PathBuf;
use tempfile::TempDir;
use tessera_formats::orbit::{FragmentInfo, OrbitBlockWriter, OrbitFile, OrbitFragment, orbit_fragment_len};
use tessera_formats::tcds::ORBITS_PER_LUMI_SECTION;
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::{Violation, verify_run_dir};
use tessera_inspect::{Target, inspect_path, render};
use tessera_rundir::orbit_sample::{OrbitSampleSpec, OrbitSampleSummary, write_orbit_sample_run};

const RUN: u32 = 5;

/// The default orbit sample of run 5: 2 lumi sections of 8 orbits, 2 of them empty in each, in
/// files of 3 orbits; sources 1024, 0, 1, 2; up to 3 events an orbit.
struct Run {
    _tmp: TempDir,
    dir: PathBuf,
    summary: OrbitSampleSummary,
}

fn sample() -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let spec = OrbitSampleSpec { run: RUN, source: "test-bu".into(), ..OrbitSampleSpec::default() };
    let summary = write_orbit_sample_run(tmp.path(), &spec).unwrap();
    assert_eq!(summary.files.len(), 4);
    Run { dir: summary.run_dir.clone(), summary, _tmp: tmp }
}

fn raw(ls: u32, index: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_index{index:06}.raw")
}

fn jsn(ls: u32, index: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_index{index:06}.jsn")
}

fn eols(ls: u32) -> String {
    format!("run{RUN:06}_ls{ls:04}_EoLS.jsn")
}

const EOR: &str = "run000005_ls0000_EoR.jsn";

fn v(file: &str, offset: Option<u64>, message: &str) -> Violation {
    Violation { file: file.to_owned(), offset, message: message.to_owned() }
}

/// File offsets of orbit `n` of `bytes`, of its block `block`, and of that block's last
/// fragment (the first a reader walks).
fn offsets(bytes: &[u8], n: usize, block: usize) -> (usize, usize, usize) {
    let orbit = OrbitFile::new(bytes).nth(n).unwrap().unwrap();
    let block_at = orbit.block_offsets()[block];
    let fragment = orbit.blocks()[block].fragments().next().unwrap().unwrap();
    (orbit.offset(), block_at, block_at + fragment.offset())
}

impl Run {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn verify(&self) -> Vec<Violation> {
        verify_run_dir(&self.dir, EventChecks::default()).unwrap()
    }

    fn read(&self, name: &str) -> Vec<u8> {
        fs::read(self.path(name)).unwrap()
    }

    fn edit_file(&self, name: &str, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = self.read(name);
        edit(&mut bytes);
        fs::write(self.path(name), bytes).unwrap();
    }

    /// Changes value `i` of the `data` array of a JSON document by `delta`.
    fn bump(&self, name: &str, i: usize, delta: i64) -> (u64, u64) {
        let path = self.path(name);
        let mut doc: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let old: u64 = doc["data"][i].as_str().unwrap().parse().unwrap();
        let new = old.checked_add_signed(delta).unwrap();
        doc["data"][i] = Value::String(new.to_string());
        fs::write(&path, doc.to_string()).unwrap();
        (old, new)
    }
}

/// Writes orbit `n` of an orbit file again with the orbit number `orbit` and each fragment's
/// payload changed by `edit` (given its source and event id), CRCs computed for the new bytes.
fn rewrite_orbit(bytes: &mut Vec<u8>, n: usize, orbit: u32, edit: impl Fn(u32, u64, &mut Vec<u8>)) {
    let old = OrbitFile::new(bytes).nth(n).unwrap().unwrap();
    let (start, end) = (old.offset(), old.offset() + old.wire_len());
    let mut new = Vec::new();
    for block in old.blocks() {
        let mut fragments: Vec<OrbitFragment> = block.fragments().map(Result::unwrap).collect();
        fragments.reverse();
        let at = new.len();
        new.resize(at + 32 + fragments.iter().map(|f| orbit_fragment_len(f.payload().len())).sum::<usize>(), 0);
        let mut w = OrbitBlockWriter::new(&mut new[at..], block.header.source_id, block.header.run, orbit).unwrap();
        for f in &fragments {
            let info = FragmentInfo {
                event_id: f.event_id(),
                bx: f.bx(),
                l1a_types: f.header.l1a_types,
                physics_type: f.header.physics_type,
                emulation_status: f.header.emulation_status,
                status: f.status(),
                flags: f.flags(),
            };
            let mut payload = f.payload().to_vec();
            edit(f.source_id(), f.event_id(), &mut payload);
            w.push_fragment(&info, &payload).unwrap();
        }
        w.finish().unwrap();
    }
    assert_eq!(new.len(), end - start);
    bytes.splice(start..end, new);
}

#[test]
fn an_orbit_run_passes() {
    let run = sample();
    assert_eq!(run.verify(), vec![]);
    let Target::RunDir(report) = inspect_path(&run.dir, EventChecks::default()).unwrap() else {
        panic!("a run directory");
    };
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let rows: Vec<_> = report.lumi_sections.iter().map(|r| (r.ls, r.files, r.orbits, r.eols.as_str())).collect();
    assert_eq!(rows, vec![(1, 2, Some(6), "complete"), (2, 2, Some(6), "complete")]);
    assert_eq!(report.lumi_sections.iter().map(|r| r.events).sum::<u64>(), run.summary.events);
    let eor = report.end_of_run.as_ref().unwrap().as_ref().unwrap();
    assert_eq!((eor.orbits, eor.empty_orbits), (Some(16), Some(4)));
    let text = render::run_dir(&report);
    assert!(text.contains("orbits"), "{text}");
    assert!(text.contains("16 orbits (4 empty)"), "{text}");
}

#[test]
fn inspect_reads_an_orbit_file_orbit_by_orbit() {
    let run = sample();
    let file = &run.summary.files[0];
    let target = inspect_path(&file.path, EventChecks::default()).unwrap();
    assert_eq!(target.problem_count(), 0);
    let Target::OrbitFile(report) = &target else { panic!("an orbit file") };
    assert_eq!(report.orbits.len() as u64, file.orbits);
    assert_eq!(report.event_count(), file.events);
    assert_eq!(report.actual_bytes, file.bytes);
    let bytes = run.read(&raw(1, 0));
    for (o, read) in report.orbits.iter().zip(OrbitFile::new(&bytes)) {
        let read = read.unwrap();
        assert_eq!((o.offset, o.orbit, o.run, o.lumi_section), (read.offset() as u64, read.orbit(), RUN, 1));
        assert_eq!(o.sources, vec![1024, 0, 1, 2]);
        assert_eq!(o.bytes, read.wire_len() as u64);
        assert_eq!(o.events.len(), usize::from(read.event_count()));
        // In increasing event id order, a fragment per source, each at its file offset.
        for (e, f) in o.events.windows(2).map(|w| (&w[0], &w[1])) {
            assert_eq!(f.event_id, e.event_id + 1);
        }
        for e in &o.events {
            assert_eq!(e.fragments.iter().map(|f| f.source_id).collect::<Vec<_>>(), vec![1024, 0, 1, 2]);
            for f in &e.fragments {
                assert_eq!(&bytes[f.offset as usize + 15], &0x55, "an SR header's marker");
                assert!(f.crc16_ok);
            }
        }
    }
    let brief = render::target(&target, false);
    let full = render::target(&target, true);
    assert!(brief.contains(&format!("orbit file  run {RUN}  3 orbits  {} events", file.events)), "{brief}");
    assert!(!brief.contains("source 1024"), "{brief}");
    let first = &report.orbits[0].events[0];
    assert!(full.contains(&format!("event {}", first.event_id)), "{full}");
    assert!(full.contains(&format!("{:>12}     source 1024", first.fragments[0].offset)), "{full}");
    // The JSON form is the report.
    let json: Value = serde_json::to_value(&target).unwrap();
    assert_eq!(json["kind"], "orbit_file");
    assert_eq!(json["orbits"][0]["orbit"], report.orbits[0].orbit);
}

#[test]
fn a_flipped_payload_byte() {
    let run = sample();
    let bytes = run.read(&raw(1, 0));
    let (_, block_at, fragment_at) = offsets(&bytes, 1, 2);
    let at = fragment_at + 16 + 3;
    run.edit_file(&raw(1, 0), |b| b[at] ^= 0x10);
    let found = run.verify();
    let found: Vec<_> = found.iter().map(|x| (x.file.as_str(), x.offset, x.message.as_str())).collect();
    assert_eq!(found.len(), 3, "{found:#?}");
    let offsets: Vec<_> = found.iter().map(|x| (x.0, x.1)).collect();
    let name = raw(1, 0);
    assert_eq!(
        offsets,
        vec![
            (name.as_str(), Some(block_at as u64)),
            (name.as_str(), Some(fragment_at as u64)),
            (name.as_str(), Some(at as u64))
        ]
    );
    assert!(found[0].2.contains("orbit block: CRC-32C mismatch"), "{}", found[0].2);
    assert!(found[1].2.contains("SlinkRocket fragment: CRC-16 mismatch"), "{}", found[1].2);
    assert!(found[2].2.ends_with("source 1: payload differs from its seeded content"), "{}", found[2].2);
}

#[test]
fn a_payload_byte_changed_with_every_crc_recomputed_and_the_seed_check() {
    let run = sample();
    let mut bytes = run.read(&raw(2, 1));
    let read = OrbitFile::new(&bytes).nth(2).unwrap().unwrap();
    let (orbit, last_event) = (read.orbit(), read.events().next().unwrap().unwrap().event_id);
    rewrite_orbit(&mut bytes, 2, orbit, |source, event_id, payload| {
        if (source, event_id) == (0, last_event) {
            payload[5] ^= 1;
        }
    });
    fs::write(run.path(&raw(2, 1)), &bytes).unwrap();
    let (_, _, fragment_at) = offsets(&bytes, 2, 1);
    let found = run.verify();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].file.as_str(), found[0].offset), (raw(2, 1).as_str(), Some(fragment_at as u64 + 16 + 5)));
    assert!(found[0].message.ends_with("payload differs from its seeded content"), "{}", found[0].message);
    // Without the seed check, the bytes are data like any other.
    assert_eq!(verify_run_dir(&run.dir, EventChecks { seeded_payloads: false }).unwrap(), vec![]);
}

#[test]
fn a_flipped_crc32c() {
    let run = sample();
    let bytes = run.read(&raw(1, 1));
    let (_, block_at, _) = offsets(&bytes, 2, 3);
    let stored = u32::from_le_bytes(bytes[block_at + 28..block_at + 32].try_into().unwrap());
    run.edit_file(&raw(1, 1), |b| b[block_at + 29] ^= 0x01);
    let message = format!(
        "orbit {} source 2: orbit block: CRC-32C mismatch at byte {block_at}: stored {:#x}, computed {stored:#x}",
        OrbitFile::new(&bytes).nth(2).unwrap().unwrap().orbit(),
        stored ^ 0x100
    );
    assert_eq!(run.verify(), vec![v(&raw(1, 1), Some(block_at as u64), &message)]);
}

#[test]
fn a_wrong_nevents_in_a_jsn() {
    let run = sample();
    let file = &run.summary.files[1];
    run.bump(&jsn(1, 1), 0, 1);
    let message = format!(
        "says {} events and {} bytes; the raw file holds {} events and {} bytes",
        file.events + 1,
        file.bytes,
        file.events,
        file.bytes
    );
    assert_eq!(run.verify(), vec![v(&jsn(1, 1), None, &message)]);
}

#[test]
fn a_wrong_norbits_in_a_jsn() {
    let run = sample();
    run.bump(&jsn(2, 0), 2, 1);
    assert_eq!(run.verify(), vec![v(&jsn(2, 0), None, "NOrbits says 4; the raw file holds 3 orbits")]);
}

#[test]
fn a_wrong_norbits_in_an_eols_and_in_the_eor() {
    let run = sample();
    run.bump(&eols(1), 5, 1);
    assert_eq!(
        run.verify(),
        vec![
            v(EOR, None, "NOrbits says 16, the EoLS records sum to 17"),
            v(&eols(1), None, "NOrbits 9 − NEmptyOrbits 2 = 7 orbits written, the lumi section's raw files hold 6"),
        ]
    );
    let run = sample();
    run.bump(EOR, 5, -1);
    assert_eq!(
        run.verify(),
        vec![
            v(EOR, None, "NEmptyOrbits says 3, the EoLS records sum to 4"),
            v(EOR, None, "NOrbits 16 − NEmptyOrbits 3 = 13 orbits written, the run's raw files hold 12"),
        ]
    );
}

#[test]
fn an_orbit_in_the_wrong_lumi_section() {
    let run = sample();
    let mut bytes = run.read(&raw(1, 1));
    let orbit = ORBITS_PER_LUMI_SECTION as u32 + 100;
    rewrite_orbit(&mut bytes, 2, orbit, |_, _, _| {});
    fs::write(run.path(&raw(1, 1)), &bytes).unwrap();
    let (orbit_at, _, _) = offsets(&bytes, 2, 0);
    let message = format!("orbit {orbit}: lumi section 2 (orbit / 2^18 + 1) in a file of lumi section 1");
    assert_eq!(run.verify(), vec![v(&raw(1, 1), Some(orbit_at as u64), &message)]);
}

#[test]
fn an_empty_orbit_written() {
    let run = sample();
    let bytes = run.read(&raw(2, 1));
    let last = OrbitFile::new(&bytes).last().unwrap().unwrap().orbit();
    let end = bytes.len();
    run.edit_file(&raw(2, 1), |b| {
        for source in [1024, 0, 1, 2] {
            let at = b.len();
            b.resize(at + 32, 0);
            OrbitBlockWriter::new(&mut b[at..], source, RUN, last + 1).unwrap().finish().unwrap();
        }
    });
    let found = run.verify();
    let message = format!("orbit file: orbit header: bad event count at byte {end}: expected at least 1, found 0");
    assert!(found.contains(&v(&raw(2, 1), Some(end as u64), &message)), "{found:#?}");
    // The file's new size disagrees with its .jsn and its EoLS; nothing else is wrong.
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found.iter().any(|x| x.file == jsn(2, 1) && x.message.contains(&format!("holds {} bytes", end + 128))));
    assert!(found.iter().any(|x| x.file == eols(2) && x.message.starts_with("NBytes says")));
}

#[test]
fn an_event_file_in_an_orbit_run_directory() {
    let run = sample();
    let tmp = tempfile::tempdir().unwrap();
    let spec = tessera_rundir::sample::SampleSpec { run: RUN, lumi_sections: 1, ..Default::default() };
    let events = tessera_rundir::sample::write_sample_run(tmp.path(), &spec).unwrap();
    fs::copy(&events.files[0].path, run.path(&raw(1, 1))).unwrap();
    let found = run.verify();
    assert!(
        found.contains(&v(&raw(1, 1), Some(0), "not an orbit file (\"HO\") in an orbit-mode run directory")),
        "{found:#?}"
    );
}
