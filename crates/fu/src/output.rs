//! One FU process's outputs (docs/formats.md §8): per lumi section and stream, a raw file of the
//! accepted events (RAW_0002 + FRD v6, the records copied as the BU wrote them) and its `.jsn`.
//!
//! Outputs are written under `open/` and published together when the lumi section closes, by a
//! commit record that names them and the inputs they hold: write the record, move the outputs
//! into the run directory, remove the inputs, remove the record. A process that dies at any
//! point leaves either no record (its `open/` files are dropped and its claims return to the
//! pool) or a record that any FU or merger on the host carries out ([`FuOutputDir::finish_dead`]);
//! so every input is processed exactly once.
//!
//! Carrying out a record also leaves a ledger entry, `ledger/<record's name>.processed`, holding
//! the events the outputs processed. It outlives the process, so the run counts the events of
//! every incarnation of its FUs, killed ones included ([`ledger_events`]); being
//! named by the record, it is written once however often the record is carried out.

use crate::claim::{BuRunState, FileSource, remove_if_present};
use crate::instance;
use crate::{ERROR_STREAM, FuError, io_error};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_formats::bookkeeping::{Adler32, FuOutputDoc, Legend, adler32, adler32_combine};
use tessera_formats::names::{self, ClaimedRawName, Producer, StreamFileName};
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader, data_type};

/// The `.jsd` of filter-farm outputs, relative to an output run directory.
pub const FU_OUTPUT_JSD: &str = "jsd/streamOutput.jsd";

/// Where files fetched from a broker are kept while they are processed, in an output run
/// directory.
pub const SPOOL_DIR: &str = "spool";

/// Where the events an FU unpacked from an orbit file are written for an external HLT while it
/// judges them (a RAW_0002 file named as the claim), under [`SPOOL_DIR`].
pub const UNPACKED_DIR: &str = "unpacked";

/// Extension of output data files: they are raw files.
pub const DATA_EXT: &str = "raw";

/// The ledger of published lumi-section outputs, in an output run directory (see the module's
/// documentation).
pub const LEDGER_DIR: &str = "ledger";

/// Extension of a ledger entry.
const LEDGER_EXT: &str = "processed";

/// Writes `bytes` to `path` through a temporary file of this process and a rename.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), FuError> {
    Ok(tessera_rundir::write_atomically(path, bytes)?)
}

/// An output run directory (`<dir>/runRRRRRR`) with `open/` and the output `.jsd`.
#[derive(Debug, Clone)]
pub struct FuOutputDir {
    dir: PathBuf,
    run: u32,
}

/// The commit record of one process's lumi section: `runRRRRRR_lsLLLL_<producer>.commit`, the
/// producer being the outputs' (`pidPPPPP`, or `pidPPPPPcK` for its K-th commit of the section).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CommitRecord {
    /// Claimed inputs (names under the BU's `fu/`).
    inputs: Vec<String>,
    /// Output files under `open/`, data files before their JSON.
    outputs: Vec<String>,
    /// Events the outputs processed, for the ledger.
    processed: u64,
    /// Orbits of orbit files the outputs processed, for the ledger (0 for event files).
    #[serde(default, skip_serializing_if = "is_zero")]
    orbits: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn commit_name(run: u32, ls: u32, producer: &Producer) -> String {
    format!("run{run:06}_ls{ls:04}_{producer}.commit")
}

/// The FU process whose commit record `name` is, for run `run`.
fn commit_pid(run: u32, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(&format!("run{run:06}_"))?.strip_suffix(".commit")?;
    let (ls, producer) = rest.split_once('_')?;
    ls.strip_prefix("ls")?.parse::<u32>().ok()?;
    Producer::from_token(producer).ok()?.pid()
}

impl FuOutputDir {
    /// Creates (or opens) the output run directory of run `run` under `dir`.
    pub fn create(dir: &Path, run: u32) -> Result<Self, FuError> {
        let dir = dir.join(names::run_dir_name(run));
        let unpacked = Path::new(SPOOL_DIR).join(UNPACKED_DIR);
        let subs = [
            Path::new(names::OPEN_DIR),
            Path::new(names::JSD_DIR),
            unpacked.as_path(),
            Path::new(LEDGER_DIR),
            Path::new(instance::INSTANCES_DIR),
        ];
        for sub in subs {
            let path = dir.join(sub);
            fs::create_dir_all(&path).map_err(io_error("creating", &path))?;
        }
        let jsd = dir.join(FU_OUTPUT_JSD);
        if !jsd.exists() {
            write_atomically(&jsd, Legend::fu_output().to_json().as_bytes())?;
        }
        Ok(FuOutputDir { dir, run })
    }

    /// The output run directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Removes the working directories ([`create`](Self::create) makes them) that are empty,
    /// once the run is over here: what is left is the run's files. One that is not empty stays
    /// (what is in it is worth a look); a later `create` makes them again.
    pub fn remove_empty_work_dirs(&self) {
        let spool = self.dir.join(SPOOL_DIR);
        for dir in [
            spool.join(UNPACKED_DIR),
            spool,
            self.dir.join(names::OPEN_DIR),
            self.dir.join(LEDGER_DIR),
            self.dir.join(instance::INSTANCES_DIR),
        ] {
            // remove_dir fails on a directory that is not empty, as wanted.
            let _ = fs::remove_dir(&dir);
        }
    }

    /// Where files fetched from a broker are kept while they are processed.
    pub fn spool(&self) -> PathBuf {
        self.dir.join(SPOOL_DIR)
    }

    /// Where the events unpacked from the orbit file of `claim` are written for an external HLT.
    pub fn unpacked(&self, claim: &ClaimedRawName) -> PathBuf {
        self.spool().join(UNPACKED_DIR).join(claim.to_string())
    }

    /// Starts the outputs of lumi section `ls` for `producer` (an FU process's, see
    /// [`Producer::fu`]), one per stream of `streams` and one for [`ERROR_STREAM`] (last).
    pub fn lumi(&self, ls: u32, producer: Producer, streams: &[String]) -> LumiOutputs {
        let mut all: Vec<String> = streams.to_vec();
        all.push(ERROR_STREAM.to_owned());
        LumiOutputs {
            dir: self.clone(),
            ls,
            producer,
            streams: all.into_iter().map(StreamOutput::new).collect(),
            processed: 0,
            error_events: 0,
            hlt_error_events: 0,
            orbits: 0,
            bad_orbits: 0,
            inputs: Vec::new(),
        }
    }

    /// Gives claims of processes on the source's host that no longer run back to the pool,
    /// after finishing whatever each left half done ([`FuOutputDir::finish_dead`]); a process
    /// runs while it holds its id here ([`instance`]). Returns the claims given
    /// back (not those finished or given back meanwhile).
    pub fn return_dead_claims(
        &self,
        source: &dyn FileSource,
        state: &BuRunState,
    ) -> Result<Vec<ClaimedRawName>, FuError> {
        let mine = |c: &&ClaimedRawName| c.host == source.host();
        let others: BTreeSet<u32> =
            state.claimed.iter().filter(mine).map(|c| c.pid).filter(|&pid| pid != source.pid()).collect();
        let mut returned = Vec::new();
        for pid in others {
            // Held until its claims are given back: no process takes the id meanwhile.
            let Some(_held) = instance::dead(&self.dir, pid)? else { continue };
            self.finish_dead(pid, source)?;
            for claim in state.claimed.iter().filter(mine).filter(|c| c.pid == pid) {
                // A listing is a moment's: the claim may have been finished since.
                if source.give_back(claim)? {
                    returned.push(claim.clone());
                }
            }
        }
        Ok(returned)
    }

    /// Completes what process `pid`, now dead, left half done: carries out its commit records
    /// (moving its outputs into place and removing their inputs through `claimer`), then drops
    /// its other files under `open/`. Idempotent.
    pub fn finish_dead(&self, pid: u32, claimer: &dyn FileSource) -> Result<(), FuError> {
        for name in list(&self.dir)? {
            if commit_pid(self.run, &name) == Some(pid) {
                let path = self.dir.join(&name);
                let text = fs::read_to_string(&path).map_err(io_error("reading", &path))?;
                let record: CommitRecord = serde_json::from_str(&text)
                    .map_err(|e| FuError::Bookkeeping { path: path.clone(), problem: e.to_string() })?;
                self.carry_out(&path, &record, claimer)?;
            }
        }
        let open = self.dir.join(names::OPEN_DIR);
        for name in list(&open)? {
            if StreamFileName::parse(&name).is_ok_and(|n| n.producer.pid() == Some(pid)) {
                remove_if_present(&open.join(name))?;
            }
        }
        for spool in [self.spool(), self.spool().join(UNPACKED_DIR)] {
            for name in list(&spool)? {
                if ClaimedRawName::parse(&name).is_ok_and(|c| c.pid == pid) {
                    remove_if_present(&spool.join(name))?;
                }
            }
        }
        Ok(())
    }

    /// Moves the outputs of a written commit record into place, writes its ledger entry, removes
    /// its inputs, then the record. Each step tolerates having been done before.
    fn carry_out(&self, record_path: &Path, record: &CommitRecord, claimer: &dyn FileSource) -> Result<(), FuError> {
        let open = self.dir.join(names::OPEN_DIR);
        for name in &record.outputs {
            let (from, to) = (open.join(name), self.dir.join(name));
            if from.exists() && to.exists() {
                return Err(FuError::Bookkeeping {
                    path: to,
                    problem: format!("is published already; {} would replace it", from.display()),
                });
            }
            match fs::rename(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound && to.exists() => {}
                Err(e) => return Err(io_error("publishing", &from)(e)),
            }
        }
        let record_name = record_path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let entry = self
            .dir
            .join(LEDGER_DIR)
            .join(format!("{}.{LEDGER_EXT}", record_name.strip_suffix(".commit").unwrap_or(record_name)));
        if !entry.exists() {
            let counts = match record.orbits {
                0 => format!("{}\n", record.processed),
                orbits => format!("{} {orbits}\n", record.processed),
            };
            write_atomically(&entry, counts.as_bytes())?;
        }
        for input in &record.inputs {
            claimer.remove_processed(&ClaimedRawName::parse(input)?)?;
        }
        remove_if_present(record_path)
    }
}

/// Events processed by every output published in the output run directory `run_dir`
/// (`<dir>/runRRRRRR`), by whichever process: the sum of its ledger's entries. Once the BU's
/// files are all processed (their inputs removed), every entry is there: a commit record writes
/// its entry before it removes its inputs.
pub fn ledger_events(run_dir: &Path) -> Result<u64, FuError> {
    Ok(ledger_counts(run_dir)?.0)
}

/// Orbits of orbit files processed by every output published in the output run directory
/// `run_dir`, by whichever process, as [`ledger_events`] counts events: an entry is `EVENTS`, or
/// `EVENTS ORBITS` for outputs that processed orbit files.
pub fn ledger_orbits(run_dir: &Path) -> Result<u64, FuError> {
    Ok(ledger_counts(run_dir)?.1)
}

/// The sums of the ledger's events and orbits.
fn ledger_counts(run_dir: &Path) -> Result<(u64, u64), FuError> {
    let ledger = run_dir.join(LEDGER_DIR);
    let (mut events, mut orbits) = (0, 0);
    for name in list(&ledger)? {
        if !name.ends_with(&format!(".{LEDGER_EXT}")) {
            continue; // a temporary file of a write in progress
        }
        let path = ledger.join(&name);
        let text = fs::read_to_string(&path).map_err(io_error("reading", &path))?;
        let bad = |e: std::num::ParseIntError| FuError::Bookkeeping {
            path: path.clone(),
            problem: format!("a ledger entry holds {:?}, not a count of events and orbits: {e}", text.trim()),
        };
        let mut counts = text.split_whitespace();
        events += counts.next().unwrap_or_default().parse::<u64>().map_err(bad)?;
        orbits += counts.next().map_or(Ok(0), str::parse::<u64>).map_err(bad)?;
    }
    Ok((events, orbits))
}

/// The file names in `dir`, or none if it does not exist.
pub(crate) fn list(dir: &Path) -> Result<Vec<String>, FuError> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(io_error("listing", dir))?;
                if let Some(name) = entry.file_name().to_str() {
                    names.push(name.to_owned());
                }
            }
            Ok(names)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error("listing", dir)(e)),
    }
}

/// One stream's output file of a lumi section, opened at its first event.
#[derive(Debug)]
struct StreamOutput {
    name: String,
    /// The open data file and its path, from the first event written.
    file: Option<(File, PathBuf)>,
    events: u32,
    body_bytes: u64,
    body_adler: Adler32,
}

impl StreamOutput {
    fn new(name: String) -> Self {
        StreamOutput { name, file: None, events: 0, body_bytes: 0, body_adler: Adler32::new() }
    }
}

/// The outputs of one process for one lumi section, being written.
#[derive(Debug)]
pub struct LumiOutputs {
    dir: FuOutputDir,
    ls: u32,
    producer: Producer,
    streams: Vec<StreamOutput>,
    processed: u64,
    error_events: u64,
    hlt_error_events: u64,
    orbits: u64,
    bad_orbits: u64,
    inputs: Vec<ClaimedRawName>,
}

/// What an event was, for the counts of [`LumiOutputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// Selected by the HLT (into any number of streams, possibly none).
    Selected,
    /// Corrupt: set aside in the error stream.
    Corrupt,
    /// The HLT failed on it: set aside in the error stream.
    HltFailed,
}

impl LumiOutputs {
    /// The inputs whose events are in these outputs.
    pub fn inputs(&self) -> &[ClaimedRawName] {
        &self.inputs
    }

    /// Drops these outputs unpublished: their files under `open/` are removed, their inputs
    /// left alone (another process reads them again).
    pub fn discard(self) -> Result<(), FuError> {
        for stream in self.streams {
            if let Some((file, path)) = stream.file {
                drop(file);
                remove_if_present(&path)?;
            }
        }
        Ok(())
    }

    /// Counts `orbits` orbits of an orbit file, `bad` of them bad (a CRC-32C that fails, a rule
    /// broken, or an orbit that cannot be read).
    pub fn add_orbits(&mut self, orbits: u64, bad: u64) {
        self.orbits += orbits;
        self.bad_orbits += bad;
    }

    /// Records that the events of `input` are in these outputs: it is removed when they are
    /// published.
    pub fn add_input(&mut self, input: ClaimedRawName) {
        self.inputs.push(input);
    }

    fn file_name(&self, stream: &str, ext: &str) -> String {
        StreamFileName {
            run: self.dir.run,
            ls: self.ls,
            stream: stream.to_owned(),
            producer: self.producer.clone(),
            ext: ext.to_owned(),
        }
        .to_string()
    }

    /// Counts one event and adds its FRD record (header included) to `batch` for the streams of
    /// `into` (indices into the stream list; the error stream is the last);
    /// [`LumiOutputs::write`] writes it.
    pub fn add_event<'a>(
        &mut self,
        batch: &mut Batch<'a>,
        outcome: EventOutcome,
        record: &'a [u8],
        into: impl IntoIterator<Item = usize>,
    ) {
        self.processed += 1;
        match outcome {
            EventOutcome::Selected => {}
            EventOutcome::Corrupt => self.error_events += 1,
            EventOutcome::HltFailed => {
                self.error_events += 1;
                self.hlt_error_events += 1;
            }
        }
        if batch.records.len() < self.streams.len() {
            batch.records.resize_with(self.streams.len(), Vec::new);
        }
        for index in into {
            let stream = &mut self.streams[index];
            stream.events += 1;
            stream.body_bytes += record.len() as u64;
            stream.body_adler.update(record);
            batch.records[index].push(record);
        }
    }

    /// Writes the records of `batch` into their streams' files (each stream's with as few
    /// system calls as it takes, straight from where the records lie) and empties it.
    pub fn write(&mut self, batch: &mut Batch<'_>) -> Result<(), FuError> {
        for (index, records) in batch.records.iter_mut().enumerate() {
            if records.is_empty() {
                continue;
            }
            let stream = &mut self.streams[index];
            if stream.file.is_none() {
                let name = StreamFileName {
                    run: self.dir.run,
                    ls: self.ls,
                    stream: stream.name.clone(),
                    producer: self.producer.clone(),
                    ext: DATA_EXT.to_owned(),
                };
                let path = self.dir.dir.join(names::OPEN_DIR).join(name.to_string());
                // Ids are never reused within a run, so the name is new: an existing file is
                // another process's, never to be overwritten.
                let mut file =
                    OpenOptions::new().write(true).create_new(true).open(&path).map_err(io_error("creating", &path))?;
                file.write_all(&[0; RAW_V2_HEADER_BYTES]).map_err(io_error("writing", &path))?;
                stream.file = Some((file, path));
            }
            let (file, path) = stream.file.as_mut().expect("opened above");
            write_all_vectored(file, records).map_err(io_error("writing", path))?;
            records.clear();
        }
        Ok(())
    }

    /// Closes every output, writes their JSON under `open/` and publishes them with their
    /// inputs' removal (see the module's documentation). `source` names this process in the
    /// JSON.
    pub fn publish(mut self, claimer: &dyn FileSource, source: &str) -> Result<LumiPublished, FuError> {
        let open = self.dir.dir.join(names::OPEN_DIR);
        let definition = self.dir.dir.join(FU_OUTPUT_JSD).display().to_string();
        let input_files: Vec<String> = self.inputs.iter().map(|c| c.raw().to_string()).collect();
        let mut outputs = Vec::new();
        let mut accepted = Vec::new();
        let mut bytes = 0;
        for i in 0..self.streams.len() {
            let data_name = self.file_name(&self.streams[i].name, DATA_EXT);
            let json_name = self.file_name(&self.streams[i].name, "jsn");
            let stream = &mut self.streams[i];
            let mut doc = FuOutputDoc {
                accepted: u64::from(stream.events),
                error_events: self.error_events,
                input_files: input_files.join(","),
                merge_type: DATA_EXT.to_owned(),
                hlt_error_events: self.hlt_error_events,
                ..FuOutputDoc::empty(self.processed)
            };
            if let Some((file, path)) = stream.file.take() {
                let file_bytes = RAW_V2_HEADER_BYTES as u64 + stream.body_bytes;
                let header = RawFileHeader::v2(data_type::FRD_EVENTS, stream.events, self.dir.run, self.ls, file_bytes)
                    .to_bytes();
                file.write_all_at(&header, 0).map_err(io_error("writing", &path))?;
                file.sync_all().map_err(io_error("syncing", &path))?;
                doc.file_list = data_name.clone();
                doc.file_size = file_bytes;
                bytes += file_bytes;
                doc.file_adler32 =
                    i64::from(adler32_combine(adler32(&header), stream.body_adler.finish(), stream.body_bytes));
                outputs.push(data_name);
            }
            let json_path = open.join(&json_name);
            fs::write(&json_path, doc.to_doc(&definition, source).to_json())
                .map_err(io_error("writing", &json_path))?;
            outputs.push(json_name);
            accepted.push((stream.name.clone(), u64::from(stream.events)));
        }
        let record = CommitRecord {
            inputs: self.inputs.iter().map(ToString::to_string).collect(),
            outputs,
            processed: self.processed,
            orbits: self.orbits,
        };
        let record_path = self.dir.dir.join(commit_name(self.dir.run, self.ls, &self.producer));
        let text = serde_json::to_string(&record).expect("a commit record always serializes");
        write_atomically(&record_path, text.as_bytes())?;
        self.dir.carry_out(&record_path, &record, claimer)?;
        Ok(LumiPublished {
            ls: self.ls,
            processed: self.processed,
            error_events: self.error_events,
            orbits: self.orbits,
            bad_orbits: self.bad_orbits,
            accepted,
            bytes,
            files: self.inputs.len() as u64,
        })
    }
}

/// The counts of a published lumi section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LumiPublished {
    /// The lumi section.
    pub ls: u32,
    /// Events processed.
    pub processed: u64,
    /// Events set aside in the error stream.
    pub error_events: u64,
    /// Orbits of orbit files processed.
    pub orbits: u64,
    /// Bad orbits among them (see [`crate::orbit`]).
    pub bad_orbits: u64,
    /// Events written per stream, the error stream last.
    pub accepted: Vec<(String, u64)>,
    /// Bytes in the published data files.
    pub bytes: u64,
    /// Input files whose events these outputs hold.
    pub files: u64,
}

/// Events of one batch to be written, per stream: slices of the input file's bytes.
#[derive(Debug, Default)]
pub struct Batch<'a> {
    records: Vec<Vec<&'a [u8]>>,
}

/// Writes every slice of `records` with vectored writes of at most [`MAX_IOVECS`] slices each.
fn write_all_vectored(file: &mut File, records: &[&[u8]]) -> io::Result<()> {
    for chunk in records.chunks(MAX_IOVECS) {
        let mut slices: Vec<IoSlice<'_>> = chunk.iter().map(|r| IoSlice::new(r)).collect();
        let mut slices = slices.as_mut_slice();
        while !slices.is_empty() {
            match file.write_vectored(slices) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "wrote nothing")),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Slices per vectored write: Linux takes at most 1024.
const MAX_IOVECS: usize = 1024;
