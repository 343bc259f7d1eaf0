//! A whole run of seeded orbits written as a BU writes them in orbit mode (docs/formats.md §6–§7),
//! for tools and tests: raw files with no file header, each a sequence of orbits, each orbit the
//! orbit blocks of every source one after another; `.jsn` with NOrbits; EoLS and EoR with
//! NOrbits and NEmptyOrbits. An orbit with no event is counted, never written.
//!
//! Fragments are as the DTH emulator writes them (docs/formats.md §12): SR source id the source,
//! physics type 1, the event id and BX, and a payload `seeded::fill_payload(run, source, event)`
//! of a whole number of 8-byte words, zero-padded to 16 bytes by the block writer. The sizes,
//! event counts and BXs here are simple functions of the orbit and event, not the emulator's
//! draws: readers check payload bytes against their seeds, which do not depend on them.

use crate::summary::OrbitCounts as FileOrbits;
use crate::{RunDirError, RunDirectory};
use std::path::{Path, PathBuf};
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, OrbitCounts};
use tessera_formats::fed::{BX_PER_ORBIT, event_type};
use tessera_formats::orbit::{FragmentInfo, ORBIT_HEADER_BYTES, OrbitBlockWriter, orbit_fragment_len};
use tessera_formats::seeded::fill_payload;
use tessera_formats::tcds::orbit_in_lumi_section;

/// What orbit run to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrbitSampleSpec {
    /// Run number.
    pub run: u32,
    /// Lumi sections, numbered from 1.
    pub lumi_sections: u32,
    /// Orbits of each lumi section given to the BU, numbered from `(ls − 1) · 2^18`
    /// ([`orbit_in_lumi_section`]).
    pub orbits_per_lumi_section: u32,
    /// Orbits (with events) per raw file at most.
    pub orbits_per_file: u32,
    /// Source ids, in the system's order (the trigger source 1024 first).
    pub sources: Vec<u16>,
    /// Most events in an orbit: orbit `k` of a lumi section holds `(k · 7 + ls) mod (max + 1)`
    /// events, so some orbits are empty.
    pub max_events_per_orbit: u16,
    /// Number of the first event; events are numbered on over orbits.
    pub first_event: u64,
    /// Name of the writing BU in the JSON bookkeeping.
    pub source: String,
}

impl Default for OrbitSampleSpec {
    fn default() -> Self {
        OrbitSampleSpec {
            run: 1,
            lumi_sections: 2,
            orbits_per_lumi_section: 8,
            orbits_per_file: 3,
            sources: vec![1024, 0, 1, 2],
            max_events_per_orbit: 3,
            first_event: 1,
            source: "sample-bu".into(),
        }
    }
}

/// One raw file [`write_orbit_sample_run`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrbitSampleFile {
    /// The raw file.
    pub path: PathBuf,
    /// Its lumi section.
    pub ls: u32,
    /// Its index in the lumi section.
    pub index: u32,
    /// Events in it.
    pub events: u64,
    /// Orbits in it.
    pub orbits: u64,
    /// Its size.
    pub bytes: u64,
}

/// What [`write_orbit_sample_run`] wrote.
#[derive(Debug, Clone)]
pub struct OrbitSampleSummary {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Raw files, in order.
    pub files: Vec<OrbitSampleFile>,
    /// Events written.
    pub events: u64,
    /// Orbits given to the BU, empty ones included.
    pub orbits: u64,
    /// Of them, the empty ones (not written).
    pub empty_orbits: u64,
}

/// Payload bytes of `source`'s fragment of `event`: 8 to 160, whole 8-byte words, so that about
/// half of them end in a word of zero padding.
pub fn orbit_payload_bytes(source: u16, event: u64) -> usize {
    8 * (1 + ((event * 3 + u64::from(source)) % 20) as usize)
}

/// Events of the `k`-th orbit of lumi section `ls` (see [`OrbitSampleSpec::max_events_per_orbit`]).
fn events_in_orbit(spec: &OrbitSampleSpec, ls: u32, k: u32) -> u16 {
    let n = (u64::from(k) * 7 + u64::from(ls)) % (u64::from(spec.max_events_per_orbit) + 1);
    n as u16
}

/// Appends the blocks of orbit `orbit`, whose events are `first_event..first_event + count`, to
/// `out`, one per source.
fn append_orbit(spec: &OrbitSampleSpec, orbit: u32, first_event: u64, count: u16, out: &mut Vec<u8>) {
    let events: Vec<(u64, u16)> = (0..count)
        .map(|i| {
            (first_event + u64::from(i), ((orbit as u64 * 13 + u64::from(i) * 100) % u64::from(BX_PER_ORBIT)) as u16)
        })
        .collect();
    let mut payload = Vec::new();
    for &source in &spec.sources {
        let len = ORBIT_HEADER_BYTES
            + events.iter().map(|&(e, _)| orbit_fragment_len(orbit_payload_bytes(source, e))).sum::<usize>();
        let at = out.len();
        out.resize(at + len, 0);
        let mut writer =
            OrbitBlockWriter::new(&mut out[at..], source.into(), spec.run, orbit).expect("block sized for its header");
        for &(event_id, bx) in &events {
            payload.resize(orbit_payload_bytes(source, event_id), 0);
            fill_payload(spec.run, source, event_id, &mut payload);
            let info = FragmentInfo { event_id, bx, physics_type: event_type::PHYSICS, ..FragmentInfo::default() };
            writer.push_fragment(&info, &payload).expect("block sized for its fragments");
        }
        writer.finish().expect("block sized for its fragments");
    }
}

/// Writes the orbit run described by `spec` into `<bu_dir>/runRRRRRR` and closes it with EoLS
/// and EoR records, with the run directory's own writer, as a BU in orbit mode does: each raw
/// file is written under `open/` with its summary, renamed into the run directory, then its
/// `.jsn` appears.
pub fn write_orbit_sample_run(bu_dir: &Path, spec: &OrbitSampleSpec) -> Result<OrbitSampleSummary, RunDirError> {
    let dir = RunDirectory::create_for_orbits(bu_dir, spec.run, &spec.source)?;
    let mut summary =
        OrbitSampleSummary { run_dir: dir.path().to_owned(), files: Vec::new(), events: 0, orbits: 0, empty_orbits: 0 };
    let mut event = spec.first_event;
    for ls in 1..=spec.lumi_sections {
        let mut ls_files: Vec<OrbitSampleFile> = Vec::new();
        let mut bytes = Vec::new();
        // The orbits since the last file, empty ones included, and those with events.
        let (mut file_events, mut given, mut written, mut empty) = (0u32, 0u32, 0u32, 0u64);
        for k in 0..spec.orbits_per_lumi_section {
            let count = events_in_orbit(spec, ls, k);
            given += 1;
            if count == 0 {
                empty += 1;
            } else {
                let orbit = orbit_in_lumi_section(ls, k.into()) as u32;
                append_orbit(spec, orbit, event, count, &mut bytes);
                event += u64::from(count);
                file_events += u32::from(count);
                written += 1;
            }
            let last = k + 1 == spec.orbits_per_lumi_section;
            if written > 0 && (written == spec.orbits_per_file.max(1) || last) {
                let index = ls_files.len() as u32;
                dir.write_orbit_file(ls, index, &[&bytes], file_events, FileOrbits { orbits: given, written })?;
                let p = dir.publish(ls, index)?;
                let (events, orbits) = (u64::from(file_events), u64::from(written));
                ls_files.push(OrbitSampleFile { path: p.path, ls, index, events, orbits, bytes: p.bytes });
                bytes.clear();
                (file_events, given, written) = (0, 0, 0);
            }
        }
        let events: u64 = ls_files.iter().map(|f| f.events).sum();
        let orbits = OrbitCounts { orbits: spec.orbits_per_lumi_section.into(), empty_orbits: empty };
        let eols = EolsDoc {
            events,
            files: ls_files.len() as u64,
            total_events: events,
            lost_events: 0,
            bytes: ls_files.iter().map(|f| f.bytes).sum(),
            orbits: Some(orbits),
        };
        dir.end_lumi_section(ls, &eols)?;
        summary.events += events;
        summary.orbits += orbits.orbits;
        summary.empty_orbits += empty;
        summary.files.extend(ls_files);
    }
    dir.end_run(&EorDoc {
        events: summary.events,
        files: summary.files.len() as u64,
        lumis: spec.lumi_sections.into(),
        last_lumi: spec.lumi_sections.into(),
        orbits: Some(OrbitCounts { orbits: summary.orbits, empty_orbits: summary.empty_orbits }),
    })?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use tessera_formats::bookkeeping::IndexDoc;
    use tessera_formats::orbit::{OrbitFile, is_orbit_file};
    use tessera_formats::seeded::first_payload_mismatch;
    use tessera_formats::tcds::lumi_section_of_orbit;

    #[test]
    fn writes_a_closed_orbit_run() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = OrbitSampleSpec::default();
        let summary = write_orbit_sample_run(tmp.path(), &spec).unwrap();
        assert!(!summary.run_dir.join("open").exists());
        assert_eq!(summary.orbits, 16);
        // (k·7 + ls) mod 4 is 0 for k = 1, 5 in LS 1 and k = 2, 6 in LS 2.
        assert_eq!(summary.empty_orbits, 4);
        // 12 written orbits in files of at most 3: 2 files per lumi section.
        assert_eq!(
            summary.files.iter().map(|f| (f.ls, f.index, f.orbits)).collect::<Vec<_>>(),
            vec![(1, 0, 3), (1, 1, 3), (2, 0, 3), (2, 1, 3)]
        );
        let mut next_event = spec.first_event;
        for f in &summary.files {
            let bytes = fs::read(&f.path).unwrap();
            assert!(is_orbit_file(&bytes));
            assert_eq!(bytes.len() as u64, f.bytes);
            let mut events = 0;
            for orbit in OrbitFile::new(&bytes) {
                let orbit = orbit.unwrap();
                orbit.check_crcs().unwrap();
                assert_eq!(lumi_section_of_orbit(orbit.orbit().into()), f.ls);
                assert_eq!(orbit.blocks().iter().map(|b| b.header.source_id).collect::<Vec<_>>(), vec![1024, 0, 1, 2]);
                let mut ids: Vec<u64> = Vec::new();
                for event in orbit.events() {
                    let event = event.unwrap();
                    ids.push(event.event_id);
                    for fragment in &event.fragments {
                        let len = orbit_payload_bytes(fragment.source_id() as u16, event.event_id);
                        let payload = fragment.payload();
                        assert_eq!(
                            first_payload_mismatch(
                                spec.run,
                                fragment.source_id() as u16,
                                event.event_id,
                                &payload[..len]
                            ),
                            None
                        );
                        assert!(payload[len..].iter().all(|&b| b == 0));
                    }
                }
                ids.reverse();
                assert_eq!(ids, (next_event..next_event + ids.len() as u64).collect::<Vec<_>>());
                next_event += ids.len() as u64;
                events += ids.len() as u64;
            }
            assert_eq!(events, f.events);
            let jsn = IndexDoc::parse(&fs::read_to_string(f.path.with_extension("jsn")).unwrap()).unwrap();
            assert_eq!(jsn, IndexDoc { events: f.events, bytes: f.bytes, orbits: Some(f.orbits) });
        }
        assert_eq!(summary.events, next_event - spec.first_event);
        let eor =
            EorDoc::parse(&fs::read_to_string(summary.run_dir.join("run000001_ls0000_EoR.jsn")).unwrap()).unwrap();
        assert_eq!(eor.orbits, Some(OrbitCounts { orbits: 16, empty_orbits: 4 }));
        assert_eq!(eor.events, summary.events);
    }
}
