//! A whole run of seeded, emulated events written as a BU would, for tools, tests and the
//! README's first command.
//!
//! Each event holds one trigger fragment (FED 1024) with run, lumi section, orbit, BX and event
//! number, and one seeded fragment per FED whose size varies from event to event around the
//! configured mean. Every byte can be recomputed from (run, FED, event).

use crate::{PublishedFile, RunDirError, RunDirectory};
use std::path::{Path, PathBuf};
use tessera_formats::bookkeeping::{EolsDoc, EorDoc};
use tessera_formats::fed::{BX_PER_ORBIT, event_type};
use tessera_formats::frd::{FRD_HEADER_BYTES, flags, write_frd_event};
use tessera_formats::raw::data_type;
use tessera_formats::seeded::{payload_seed, write_seeded_fragment};
use tessera_formats::tcds::{TCDS_FRAGMENT_BYTES, TcdsRecord, orbit_in_lumi_section};

/// What run to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleSpec {
    /// Run number.
    pub run: u32,
    /// Lumi sections, numbered from 1.
    pub lumi_sections: u32,
    /// Events in each lumi section.
    pub events_per_lumi_section: u32,
    /// Events per raw file at most.
    pub events_per_file: u32,
    /// FED ids of the data fragments (the trigger fragment comes on top).
    pub fed_ids: Vec<u16>,
    /// Mean payload bytes of a data fragment; each event's size lies in [mean/2, 3·mean/2).
    pub fed_payload_bytes_mean: usize,
    /// Number of the first event: set it near 2^24 to see the LV1 id wrap.
    pub first_event: u64,
    /// Name of the writing BU in the JSON bookkeeping.
    pub source: String,
}

impl Default for SampleSpec {
    fn default() -> Self {
        SampleSpec {
            run: 1,
            lumi_sections: 3,
            events_per_lumi_section: 20,
            events_per_file: 8,
            fed_ids: (0..8).collect(),
            fed_payload_bytes_mean: 2048,
            first_event: 1,
            source: "sample-bu".into(),
        }
    }
}

/// What [`write_sample_run`] wrote.
#[derive(Debug, Clone)]
pub struct SampleSummary {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Raw files published, in order.
    pub files: Vec<PublishedFile>,
    /// Events written.
    pub events: u64,
    /// Bytes written, file headers included.
    pub bytes: u64,
}

/// Payload bytes of FED `fed` in `event`: seeded, so readers can recompute it.
pub fn fed_payload_bytes(spec: &SampleSpec, fed: u16, event: u64) -> usize {
    let mean = spec.fed_payload_bytes_mean.max(16);
    let spread = payload_seed(spec.run, fed, event) as usize % mean;
    (mean / 2 + spread) / 8 * 8
}

/// Writes the run described by `spec` into `<bu_dir>/runRRRRRR` (which must not hold a run
/// already) and closes it with EoLS and EoR records.
pub fn write_sample_run(bu_dir: &Path, spec: &SampleSpec) -> Result<SampleSummary, RunDirError> {
    let dir = RunDirectory::create(bu_dir, spec.run, &spec.source)?;
    let mut files = Vec::new();
    let mut record = Vec::new();
    let mut event = spec.first_event;
    let per_file = spec.events_per_file.max(1);
    for ls in 1..=spec.lumi_sections {
        let mut ls_files = 0u64;
        let mut ls_bytes = 0u64;
        let mut remaining = spec.events_per_lumi_section;
        let mut index = 0;
        while remaining > 0 {
            let mut file = dir.open_raw_file(ls, index, data_type::FRD_EVENTS)?;
            for _ in 0..remaining.min(per_file) {
                build_event(spec, ls, event, &mut record);
                file.append(&record)?;
                event += 1;
            }
            remaining -= file.events();
            let closed = dir.close(file)?;
            let published = dir.publish(closed.ls, closed.index)?;
            ls_files += 1;
            ls_bytes += published.bytes;
            files.push(published);
            index += 1;
        }
        let events = u64::from(spec.events_per_lumi_section);
        dir.end_lumi_section(
            ls,
            &EolsDoc { events, files: ls_files, total_events: events, lost_events: 0, bytes: ls_bytes, orbits: None },
        )?;
    }
    let events = event - spec.first_event;
    dir.end_run(&EorDoc {
        events,
        files: files.len() as u64,
        lumis: spec.lumi_sections.into(),
        last_lumi: spec.lumi_sections.into(),
        orbits: None,
    })?;
    let bytes = files.iter().map(|f| f.bytes).sum();
    Ok(SampleSummary { run_dir: dir.path().to_owned(), files, events, bytes })
}

/// Builds the FRD record of `event` into `record` (reused between events).
fn build_event(spec: &SampleSpec, ls: u32, event: u64, record: &mut Vec<u8>) {
    let bx = (event.wrapping_mul(7919) % u64::from(BX_PER_ORBIT)) as u16;
    let orbit_in_section = (event - spec.first_event) * 41 % (1 << 18);
    let trigger = TcdsRecord {
        run: spec.run,
        lumi_section: ls,
        orbit: orbit_in_lumi_section(ls, orbit_in_section),
        bx,
        event_number: event,
        trigger_count: event,
        nibbles_per_lumi_section: 64,
        ..TcdsRecord::default()
    };
    let sizes: Vec<usize> = spec.fed_ids.iter().map(|&fed| fed_payload_bytes(spec, fed, event) + 16).collect();
    let payload_len = TCDS_FRAGMENT_BYTES + sizes.iter().sum::<usize>();
    let mut fragments = vec![0u8; payload_len];
    let (tcds, mut rest) = fragments.split_at_mut(TCDS_FRAGMENT_BYTES);
    trigger.write(tcds, event_type::PHYSICS).expect("buffer sized for the trigger fragment");
    for (&fed, &size) in spec.fed_ids.iter().zip(&sizes) {
        let (frag, tail) = rest.split_at_mut(size);
        write_seeded_fragment(frag, spec.run, fed, event, bx, size - 16).expect("buffer sized for the fragment");
        rest = tail;
    }
    record.resize(FRD_HEADER_BYTES + payload_len, 0);
    write_frd_event(record, flags::GENERATED, spec.run, ls, event as u32, &[&fragments])
        .expect("record sized for the event");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_formats::raw::RawFile;
    use tessera_formats::raw::data_type;

    #[test]
    fn writes_a_closed_run() {
        let tmp = tempfile::tempdir().unwrap();
        let spec =
            SampleSpec { lumi_sections: 2, events_per_lumi_section: 5, events_per_file: 2, ..SampleSpec::default() };
        let summary = write_sample_run(tmp.path(), &spec).unwrap();
        assert_eq!(summary.events, 10);
        assert_eq!(summary.files.len(), 6, "3 files of at most 2 events per LS");
        assert!(!summary.run_dir.join("open").exists());
        assert!(summary.run_dir.join("run000001_ls0002_EoLS.jsn").exists());
        assert!(summary.run_dir.join("run000001_ls0000_EoR.jsn").exists());
        let bytes = std::fs::read(&summary.files[0].path).unwrap();
        let raw = RawFile::parse(&bytes).unwrap();
        assert_eq!(raw.header.event_count, 2);
        for ev in raw.events() {
            let (_, ev) = ev.unwrap();
            ev.check_crc().unwrap();
            assert_eq!(ev.fragments().count(), 9);
        }
    }

    /// A new run directory of run 9 under `bu_dir`, and the FRD record of one event.
    fn run_9_and_an_event(bu_dir: &std::path::Path) -> (RunDirectory, Vec<u8>) {
        let spec = SampleSpec { fed_ids: vec![1, 2], ..SampleSpec::default() };
        let mut record = Vec::new();
        build_event(&spec, 1, 1, &mut record);
        (RunDirectory::create(bu_dir, 9, "bu").unwrap(), record)
    }

    #[test]
    fn a_restarted_bu_finds_its_complete_files_and_loses_its_partial_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, record) = run_9_and_an_event(tmp.path());
        let mut done = dir.open_raw_file(1, 0, data_type::FRD_EVENTS).unwrap();
        done.append(&record).unwrap();
        let closed = dir.close(done).unwrap();
        let mut published = dir.open_raw_file(1, 1, data_type::FRD_EVENTS).unwrap();
        published.append(&record).unwrap();
        let c = dir.close(published).unwrap();
        dir.publish(c.ls, c.index).unwrap();
        let mut partial = dir.open_raw_file(2, 0, data_type::FRD_EVENTS).unwrap();
        partial.append(&record).unwrap();
        drop(partial); // the crash: never closed
        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 9, "bu").unwrap();
        assert_eq!(recovery.unpublished, vec![(1, 0, 1)]);
        assert_eq!(recovery.removed_partial.len(), 1);
        assert_eq!(recovery.next_index, [(1, 2), (2, 1)].into_iter().collect());
        let p = dir.publish(closed.ls, closed.index).unwrap();
        assert_eq!((p.events, p.bytes), (1, closed.bytes));
        assert!(dir.path().join("run000009_ls0001_index000000.jsn").exists());
        assert!(matches!(dir.publish(2, 0), Err(RunDirError::Io { .. })), "the partial file is gone");
    }

    #[test]
    fn a_bu_that_died_between_publishing_a_file_and_its_jsn_gets_the_jsn_at_its_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, record) = run_9_and_an_event(tmp.path());
        let mut file = dir.open_raw_file(3, 0, data_type::FRD_EVENTS).unwrap();
        file.append(&record).unwrap();
        let c = dir.close(file).unwrap();
        dir.publish(c.ls, c.index).unwrap();
        // The crash: the raw file was renamed into place, its .jsn was still being written.
        let jsn = dir.path().join("run000009_ls0003_index000000.jsn");
        let written = std::fs::read(&jsn).unwrap();
        std::fs::remove_file(&jsn).unwrap();
        let tmp_jsn = dir.path().join("run000009_ls0003_index000000.jsn.tmp");
        std::fs::write(&tmp_jsn, &written[..written.len() / 2]).unwrap();
        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 9, "bu").unwrap();
        assert_eq!(recovery.removed_partial, vec![tmp_jsn.clone()]);
        assert_eq!(recovery.completed_publications, vec![dir.path().join("run000009_ls0003_index000000.raw")]);
        assert!(!tmp_jsn.exists());
        assert_eq!(std::fs::read(&jsn).unwrap(), written, "the .jsn publish would have written");
    }

    /// Readers delete published files: a restarted BU still knows them from the ledger in
    /// `open/`, written before each rename, and an entry whose file is still in `open/` (the
    /// crash came between the two) is not taken as published.
    #[test]
    fn a_restarted_bu_knows_the_files_it_published_that_readers_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, record) = run_9_and_an_event(tmp.path());
        let mut closed = Vec::new();
        for index in 0..3 {
            let mut file = dir.open_raw_file(1, index, data_type::FRD_EVENTS).unwrap();
            for _ in 0..=index {
                file.append(&record).unwrap();
            }
            closed.push(dir.close(file).unwrap());
        }
        for c in &closed[..2] {
            let p = dir.publish(c.ls, c.index).unwrap();
            std::fs::remove_file(&p.path).unwrap(); // a reader took it
        }
        // The crash: file 2 noted in the ledger, not yet renamed.
        let ledger = dir.path().join(tessera_formats::names::OPEN_DIR).join(crate::writer::PUBLISHED_LEDGER);
        let mut text = std::fs::read_to_string(&ledger).unwrap();
        text += &format!("1 2 3 {}\n1 7", closed[2].bytes);
        std::fs::write(&ledger, text).unwrap();
        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 9, "bu").unwrap();
        let published: Vec<_> = recovery.published.into_iter().collect();
        let summary = |events, bytes| crate::FileSummary { events, bytes, orbits: None };
        assert_eq!(published, vec![((1, 0), summary(1, closed[0].bytes)), ((1, 1), summary(2, closed[1].bytes))]);
        assert_eq!(recovery.unpublished, vec![(1, 2, 3)]);
        assert_eq!(recovery.next_index, [(1, 3)].into_iter().collect());
        // The end of the run takes the ledger with `open/`.
        dir.publish(1, 2).unwrap();
        dir.end_run(&EorDoc { events: 6, files: 3, lumis: 1, last_lumi: 1, orbits: None }).unwrap();
        assert!(!dir.path().join(tessera_formats::names::OPEN_DIR).exists());
    }

    #[test]
    fn refuses_an_eols_that_does_not_close() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDirectory::create(tmp.path(), 5, "bu").unwrap();
        let err = dir
            .end_lumi_section(
                1,
                &EolsDoc { events: 3, files: 0, total_events: 4, lost_events: 0, bytes: 0, orbits: None },
            )
            .unwrap_err();
        assert_eq!(err.to_string(), "lumi section 1: 3 built + 0 lost != 4 triggered; EoLS not written");
    }
}
