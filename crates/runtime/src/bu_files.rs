//! A BU's file actions on its run directory: what the BU core's `WriteFile`, `PublishFile` and
//! `DiscardFile` outputs mean on disk, and the end-of-lumi and end-of-run records.

use std::collections::BTreeMap;
use std::path::Path;
use tessera_evb::msg::FragmentRef;
use tessera_evb::types::FileId;
use tessera_evb::unit::BuiltEvent;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc};
use tessera_formats::frd::flags;
use tessera_formats::raw::data_type;
use tessera_rundir::{PublishedFile, RunDirError, RunDirectory};

/// Where the bytes of a fragment are: the receive buffers a BU's data arrived in.
pub trait FragmentBytes {
    /// The bytes of `fragment`, if they are still held.
    fn bytes(&self, fragment: &FragmentRef) -> Option<&[u8]>;
}

/// What can go wrong with a BU's files.
#[derive(Debug, thiserror::Error)]
pub enum BuFilesError {
    /// The run directory refused an operation.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// The bytes of a fragment to write are gone: a bug in the buffer handling.
    #[error("event {event}: the bytes of FED {fed}'s fragment are not held")]
    MissingBytes {
        /// The event.
        event: u64,
        /// The FED.
        fed: u16,
    },
}

#[derive(Debug, Default, Clone, Copy)]
struct LumiCount {
    files: u64,
    events: u64,
    bytes: u64,
}

/// The files of one BU in one run.
#[derive(Debug)]
pub struct BuFiles {
    dir: RunDirectory,
    /// FRD flags added to every event (the "generated" bit for emulated data).
    extra_flags: u16,
    lumis: BTreeMap<u32, LumiCount>,
}

impl BuFiles {
    /// Creates the run directory `<bu_dir>/runRRRRRR` for BU `source`. With `generated`, every
    /// event carries FRD flag bit 0 (emulated data).
    pub fn create(bu_dir: &Path, run: u32, source: &str, generated: bool) -> Result<Self, BuFilesError> {
        let extra_flags = if generated { flags::GENERATED } else { 0 };
        Ok(BuFiles { dir: RunDirectory::create(bu_dir, run, source)?, extra_flags, lumis: BTreeMap::new() })
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `events` as `file` under `open/` and closes it: each event an FRD v6 record of its
    /// fragments in RU order, written straight from where `bytes` holds them.
    pub fn write(
        &mut self,
        file: FileId,
        events: &[BuiltEvent],
        bytes: &impl FragmentBytes,
    ) -> Result<(), BuFilesError> {
        let mut out = self.dir.open_raw_file(file.lumi_section, file.index, data_type::FRD_EVENTS)?;
        let mut pieces: Vec<&[u8]> = Vec::new();
        for event in events {
            pieces.clear();
            for fragment in event.parts.iter().flat_map(|p| &p.fragments) {
                let b = bytes
                    .bytes(fragment)
                    .ok_or(BuFilesError::MissingBytes { event: event.event, fed: fragment.fed })?;
                pieces.push(b);
            }
            out.append_event(event.flags | self.extra_flags, event.event as u32, &pieces)?;
        }
        self.dir.close(out)?;
        Ok(())
    }

    /// Publishes `file` (after its commit): rename, then `.jsn`.
    pub fn publish(&mut self, file: FileId) -> Result<PublishedFile, BuFilesError> {
        let p = self.dir.publish(file.lumi_section, file.index)?;
        let c = self.lumis.entry(file.lumi_section).or_default();
        c.files += 1;
        c.events += u64::from(p.events);
        c.bytes += p.bytes;
        Ok(p)
    }

    /// Deletes the unpublished `file` (its events went to another BU).
    pub fn discard(&mut self, file: FileId) -> Result<(), BuFilesError> {
        Ok(self.dir.discard(file.lumi_section, file.index)?)
    }

    /// Ends the run: an EoLS for every lumi section up to `last_lumi_section` (from this BU's
    /// published files; a BU of the pull protocol loses no event it was given, so its lost count
    /// is zero and every section closes), then the EoR, which removes `open/`.
    pub fn end_run(self, last_lumi_section: u32) -> Result<(), BuFilesError> {
        let mut total = LumiCount::default();
        for ls in 1..=last_lumi_section {
            let c = self.lumis.get(&ls).copied().unwrap_or_default();
            let eols =
                EolsDoc { events: c.events, files: c.files, total_events: c.events, lost_events: 0, bytes: c.bytes };
            self.dir.end_lumi_section(ls, &eols)?;
            total.files += c.files;
            total.events += c.events;
        }
        let lumis = u64::from(last_lumi_section);
        self.dir.end_run(&EorDoc { events: total.events, files: total.files, lumis, last_lumi: lumis })?;
        Ok(())
    }
}
