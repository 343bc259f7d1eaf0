//! Orbit files (docs/formats.md §6 and §7): a BU in orbit mode writes each raw file as the orbit
//! blocks of its orbits, one after another, with no file header, as CMSSW's DTH reader wants
//! them. What a header would say (its orbits, events and size) is kept beside the file in
//! `open/` while it is unpublished, in a one-line summary written once the file is complete
//! ([`OrbitCounts`]); the ledger keeps it once the file is published. An orbit file that holds
//! no orbit (all of its orbits were empty) is counted, never published: the filter farm never
//! sees an empty file.

use crate::error::{Result, io_err};
use crate::summary::{FileSummary, OrbitCounts, summary_path};
use crate::writer::{ClosedFile, RunDirectory, write_atomically, write_slices};
use std::fs::File;
use std::io::IoSlice;
use tessera_formats::names::{self, BuFileName};

impl RunDirectory {
    /// Writes raw file `index` of lumi section `ls` under `open/` as an orbit file: `blocks`,
    /// the orbit blocks of its orbits in order (each orbit's blocks of every source one after
    /// another), written straight from where they are, then its summary, which makes it
    /// complete. It holds `events` events in `counts.written` orbits of the `counts.orbits`
    /// given.
    pub fn write_orbit_file(
        &self,
        ls: u32,
        index: u32,
        blocks: &[&[u8]],
        events: u32,
        counts: OrbitCounts,
    ) -> Result<ClosedFile> {
        let path = self.path().join(names::OPEN_DIR).join(BuFileName::Raw { run: self.run(), ls, index }.to_string());
        let mut out = File::create(&path).map_err(io_err("creating", &path))?;
        let mut slices: Vec<IoSlice<'_>> = blocks.iter().map(|b| IoSlice::new(b)).collect();
        let bytes = write_slices(&mut out, &path, &mut slices)?;
        let summary = FileSummary { events, bytes, orbits: Some(counts) };
        write_atomically(&summary_path(&path), summary.ledger_fields().as_bytes())?;
        Ok(ClosedFile { ls, index, events, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_formats::bookkeeping::IndexDoc;

    #[test]
    fn an_orbit_file_is_complete_with_its_summary_published_with_its_counts_and_recovered_from_the_ledger() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDirectory::create_for_orbits(tmp.path(), 7, "bu").unwrap();
        let (a, b) = (vec![0x48u8; 64], vec![0x4Fu8; 32]);
        let counts = OrbitCounts { orbits: 5, written: 2 };
        let closed = dir.write_orbit_file(1, 0, &[&a, &b], 9, counts).unwrap();
        assert_eq!((closed.events, closed.bytes), (9, 96));
        // No summary, no complete file: one written without it is partial.
        dir.write_orbit_file(1, 1, &[], 0, OrbitCounts { orbits: 3, written: 0 }).unwrap();
        let cut = dir.path().join("open").join(BuFileName::Raw { run: 7, ls: 1, index: 2 }.to_string());
        std::fs::write(&cut, [0x48, 0x4F]).unwrap();
        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 7, "bu").unwrap();
        assert_eq!(recovery.unpublished, vec![(1, 0, 5), (1, 1, 3)]);
        assert_eq!(recovery.removed_partial, vec![cut]);

        let p = dir.publish(1, 0).unwrap();
        assert_eq!((p.events, p.bytes, p.orbits, p.units(), p.is_in_place()), (9, 96, Some(counts), 5, true));
        assert_eq!(std::fs::read(&p.path).unwrap(), [a, b].concat(), "no header: the blocks as given");
        let jsn = p.path.with_extension("jsn");
        let doc = IndexDoc::parse(&std::fs::read_to_string(jsn).unwrap()).unwrap();
        assert_eq!(doc, IndexDoc { events: 9, bytes: 96, orbits: Some(2) });
        // A file of empty orbits only is counted, never put where the farm looks.
        let empty = dir.publish(1, 1).unwrap();
        assert_eq!((empty.units(), empty.is_in_place(), empty.path.exists()), (3, false, false));
        assert!(!empty.path.with_extension("jsn").exists());

        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 7, "bu").unwrap();
        assert!(recovery.unpublished.is_empty());
        let units: Vec<u32> = recovery.published.values().map(FileSummary::units).collect();
        assert_eq!(units, vec![5, 3]);
        assert_eq!(recovery.published[&(1, 0)].orbits, Some(counts));
        // A whole file the EVM gives to another BU after a restart is discarded with its counts.
        dir.write_orbit_file(2, 0, &[&[0x48u8; 16]], 4, counts).unwrap();
        dir.discard(2, 0).unwrap();
        // Nothing is left in open/ but the ledger: the run's end removes it.
        dir.end_run(&Default::default()).unwrap();
    }

    #[test]
    fn files_are_numbered_as_published_so_an_empty_orbit_file_leaves_no_hole_even_across_a_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDirectory::create_for_orbits(tmp.path(), 8, "bu").unwrap();
        let block = vec![0x48u8; 32];
        let with_orbits = OrbitCounts { orbits: 2, written: 1 };
        dir.write_orbit_file(3, 0, &[], 0, OrbitCounts { orbits: 4, written: 0 }).unwrap();
        dir.write_orbit_file(3, 1, &[&block], 1, with_orbits).unwrap();
        dir.write_orbit_file(3, 2, &[&block], 1, with_orbits).unwrap();
        let names = |d: &RunDirectory| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".raw"))
                .collect();
            v.sort();
            v
        };
        assert!(!dir.publish(3, 0).unwrap().is_in_place());
        assert_eq!(dir.publish(3, 1).unwrap().index, 0);
        // A restarted BU goes on from what its ledger says was published.
        let (dir, recovery) = RunDirectory::reopen(tmp.path(), 8, "bu").unwrap();
        assert_eq!(recovery.unpublished, vec![(3, 2, 2)]);
        // Its published file is known by its published name, which is not its name in open/.
        assert_eq!(recovery.published_names.iter().copied().collect::<Vec<_>>(), [(3, 0)]);
        assert_eq!(recovery.published.keys().copied().collect::<Vec<_>>(), [(3, 0), (3, 1)]);
        let p = dir.publish(3, 2).unwrap();
        assert_eq!((p.ls, p.index), (3, 1));
        assert_eq!(names(&dir), ["run000008_ls0003_index000000.raw", "run000008_ls0003_index000001.raw"]);
        assert!(p.path.with_extension("jsn").exists());
    }
}
