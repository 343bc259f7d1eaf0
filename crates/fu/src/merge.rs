//! The mergers (docs/formats.md §8): micro (all FU processes of a node), mini (all FU nodes of a BU)
//! and macro (all BUs, into storage).
//!
//! Each works per lumi section, for every stream at once, and only when the bookkeeping says
//! its inputs are final:
//! - **micro** merges the per-process outputs of one node once the BU has ended the lumi
//!   section and no file of it is left in the BU directory (FUs remove an input only after its
//!   outputs are published, so every output is there);
//! - **mini** merges the micro outputs of all the BU's nodes and proves completeness: the sum of
//!   Processed must equal the BU's NEvents for the lumi section. It then writes its events
//!   straight into the final file in storage, at an offset reserved in a ledger that all BUs'
//!   minis share, so that BUs write concurrently and nothing is copied a second time;
//! - **macro** waits for every BU's piece, writes the final file's header, publishes the file
//!   and its JSON, and ends the run with a storage EoR once every BU's mini has ended it.
//!
//! Checksums are combined from the inputs' JSON (a header's share is removed with
//! [`adler32_strip_prefix`]), never by reading the data again. Every step is idempotent: a
//! merger killed at any point redoes or skips each step when it restarts, guided by `.done`
//! markers written after a lumi section's outputs are published.

use crate::claim::remove_if_present;
use crate::instance::NON_FU_ID;
use crate::output::{DATA_EXT, FU_OUTPUT_JSD, FuOutputDir, list, write_atomically};
use crate::remote::BuAccess;
use crate::{ERROR_STREAM, FuError, io_error};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use tessera_formats::bookkeeping::{
    EolsDoc, EorDoc, FuOutputDoc, JsonDoc, Legend, adler32, adler32_combine, adler32_strip_prefix, merge_docs,
};
use tessera_formats::names::{self, BuFileName, Producer, StreamFileName};
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader, data_type};

/// How long a micro merger waits for its BU's file broker to answer.
const BROKER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// The producer name of final files in storage.
pub const STORAGE_PRODUCER: &str = "StorageManager";

/// The streams a merger handles: the selector's streams and [`ERROR_STREAM`].
pub fn with_error_stream(streams: &[String]) -> Vec<String> {
    let mut all = streams.to_vec();
    all.push(ERROR_STREAM.to_owned());
    all
}

fn stream_file(run: u32, ls: u32, stream: &str, producer: Producer, ext: &str) -> String {
    StreamFileName { run, ls, stream: stream.to_owned(), producer, ext: ext.to_owned() }.to_string()
}

fn read_doc(path: &Path) -> Result<(JsonDoc, FuOutputDoc), FuError> {
    let text = fs::read_to_string(path).map_err(io_error("reading", path))?;
    let doc = JsonDoc::parse(FuOutputDoc::WHAT, &text)?;
    let values = FuOutputDoc::from_doc(&doc)?;
    Ok((doc, values))
}

/// One input of a merge: its JSON's path and contents, read once for the merge and the removal.
#[derive(Debug)]
struct Input {
    json: PathBuf,
    doc: JsonDoc,
    values: FuOutputDoc,
}

impl Input {
    fn read(json: PathBuf) -> Result<Self, FuError> {
        let (doc, values) = read_doc(&json)?;
        Ok(Input { json, doc, values })
    }

    /// Removes the input's data file (named by its JSON, in `dir`), then its JSON.
    fn remove(&self, dir: &Path) -> Result<(), FuError> {
        if !self.values.file_list.is_empty() {
            remove_if_present(&dir.join(&self.values.file_list))?;
        }
        remove_if_present(&self.json)
    }
}

/// The documents and record bodies of `inputs`, whose data files are in `dir`.
fn docs_and_bodies(dir: &Path, inputs: &[Input]) -> Result<(Vec<JsonDoc>, Vec<Body>), FuError> {
    let mut docs = Vec::with_capacity(inputs.len());
    let mut bodies = Vec::with_capacity(inputs.len());
    for input in inputs {
        if let Some(body) = body_of(dir, &input.values, &input.json)? {
            bodies.push(body);
        }
        docs.push(input.doc.clone());
    }
    Ok((docs, bodies))
}

fn done_marker(dir: &Path, run: u32, ls: u32, level: &str) -> PathBuf {
    dir.join(format!("run{run:06}_ls{ls:04}_{level}.done"))
}

/// The lumi sections a BU has ended, with their EoLS, and whether it has ended the run.
pub fn bu_lumi_sections(bu_run_dir: &Path, run: u32) -> Result<(BTreeMap<u32, EolsDoc>, bool), FuError> {
    let mut ended = BTreeMap::new();
    let mut eor = false;
    for name in list(bu_run_dir)? {
        match BuFileName::parse(&name) {
            Ok(BuFileName::EndOfLumi { run: r, ls }) if r == run => {
                let path = bu_run_dir.join(&name);
                let text = fs::read_to_string(&path).map_err(io_error("reading", &path))?;
                ended.insert(ls, EolsDoc::parse(&text)?);
            }
            Ok(BuFileName::EndOfRun { run: r }) if r == run => eor = true,
            _ => {}
        }
    }
    Ok((ended, eor))
}

/// Where one input's data lies: its file, its body (records) size and the body's Adler-32.
#[derive(Debug, Clone)]
struct Body {
    path: PathBuf,
    bytes: u64,
    adler: u32,
}

/// The record bytes of an input from its JSON: the checksum of the records alone is the file's
/// with the header's share removed (the header is read, the records are not).
fn body_of(dir: &Path, doc: &FuOutputDoc, doc_path: &Path) -> Result<Option<Body>, FuError> {
    if doc.file_list.is_empty() || doc.file_size == 0 {
        return Ok(None);
    }
    let path = dir.join(&doc.file_list);
    let mut header = [0u8; RAW_V2_HEADER_BYTES];
    File::open(&path).and_then(|mut f| f.read_exact(&mut header)).map_err(io_error("reading", &path))?;
    let parsed = RawFileHeader::parse(&header)?;
    if parsed.file_bytes != doc.file_size {
        return Err(FuError::Bookkeeping {
            path: doc_path.to_owned(),
            problem: format!("Filesize {} but {} says {} bytes", doc.file_size, path.display(), parsed.file_bytes),
        });
    }
    let whole = u32::try_from(doc.file_adler32).map_err(|_| FuError::Bookkeeping {
        path: doc_path.to_owned(),
        problem: format!("FileAdler32 {} for a non-empty file", doc.file_adler32),
    })?;
    let bytes = doc.file_size - RAW_V2_HEADER_BYTES as u64;
    Ok(Some(Body { path, bytes, adler: adler32_strip_prefix(whole, adler32(&header), bytes) }))
}

/// The RAW_0002 header of a merged file of `events` events and `file_bytes` bytes; `json` names
/// the merged file's JSON in the error of a count too large for the header.
fn merged_header(run: u32, ls: u32, events: u64, file_bytes: u64, json: &Path) -> Result<[u8; 32], FuError> {
    let count = u32::try_from(events).map_err(|_| FuError::Bookkeeping {
        path: json.to_owned(),
        problem: format!("{events} events do not fit a raw file header"),
    })?;
    Ok(RawFileHeader::v2(data_type::FRD_EVENTS, count, run, ls, file_bytes).to_bytes())
}

/// Copies the records of `body` into `out` at `offset`.
fn copy_body(body: &Body, out: &mut File, out_path: &Path, offset: u64) -> Result<(), FuError> {
    let mut input = File::open(&body.path).map_err(io_error("reading", &body.path))?;
    input.seek(SeekFrom::Start(RAW_V2_HEADER_BYTES as u64)).map_err(io_error("reading", &body.path))?;
    out.seek(SeekFrom::Start(offset)).map_err(io_error("writing", out_path))?;
    // `io::copy` between files uses copy_file_range where the kernel has it.
    let copied = io::copy(&mut input.take(body.bytes), out).map_err(io_error("copying into", out_path))?;
    if copied != body.bytes {
        return Err(FuError::Bookkeeping {
            path: body.path.clone(),
            problem: format!("{copied} record bytes where the JSON says {}", body.bytes),
        });
    }
    Ok(())
}

/// Merges documents and fixes the fields that describe the merged data: the file name, its
/// size and checksum (the merged records, after `header` if any), and the merge type.
fn merged_doc(
    inputs: &[JsonDoc],
    bodies: &[Body],
    file_name: &str,
    header: Option<&[u8]>,
) -> Result<FuOutputDoc, FuError> {
    let merged = FuOutputDoc::from_doc(&merge_docs(&Legend::fu_output(), inputs, file_name)?)?;
    let body_bytes: u64 = bodies.iter().map(|b| b.bytes).sum();
    if bodies.is_empty() {
        return Ok(FuOutputDoc { file_list: String::new(), file_size: 0, file_adler32: -1, ..merged });
    }
    let mut adler = header.map_or(1, adler32);
    for body in bodies {
        adler = adler32_combine(adler, body.adler, body.bytes);
    }
    let header_bytes = header.map_or(0, |h| h.len() as u64);
    Ok(FuOutputDoc {
        file_list: file_name.to_owned(),
        file_size: header_bytes + body_bytes,
        file_adler32: i64::from(adler),
        merge_type: DATA_EXT.to_owned(),
        ..merged
    })
}

/// What one merger pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergePass {
    /// Lumi sections merged in this pass.
    pub lumi_sections: Vec<u32>,
    /// Whether the merger has nothing more to do in this run.
    pub finished: bool,
}

/// The micro merger of one FU node: the outputs of the node's processes for one BU.
#[derive(Debug, Clone)]
pub struct MicroMerger {
    /// How the BU's files are reached, for the lumi sections' state.
    pub bu: BuAccess,
    /// The node's FU output directory (holding `runRRRRRR/`).
    pub fu_output_dir: PathBuf,
    /// Where the merged files go: the mini merger's input directory (holding `runRRRRRR/`).
    pub mini_dir: PathBuf,
    /// This node's name, the producer of its merged files.
    pub node: String,
    /// The run.
    pub run: u32,
    /// The selector's streams (the error stream is added).
    pub streams: Vec<String>,
    /// This host's name, for finishing the work of dead FU processes.
    pub host: String,
}

impl MicroMerger {
    /// One pass: finishes what dead FU processes left, then merges every lumi section that is
    /// drained at the BU and not merged yet.
    pub fn pass(&self) -> Result<MergePass, FuError> {
        let source = self.bu.open(self.run, &self.host, NON_FU_ID, BROKER_PATIENCE)?;
        let source = source.as_ref();
        let outputs = FuOutputDir::create(&self.fu_output_dir, self.run)?;
        let target = FuOutputDir::create(&self.mini_dir, self.run)?;
        let Some(mut state) = source.state()? else { return Ok(MergePass::default()) };
        if !outputs.return_dead_claims(source, &state)?.is_empty() {
            state = source.state()?.unwrap_or_default();
        }
        let streams = with_error_stream(&self.streams);
        let mut pass = MergePass::default();
        // Listed once, after the state: a drained section's outputs were all published by then.
        let mut names = None;
        for &ls in &state.ended_lumi_sections {
            let marker = done_marker(outputs.path(), self.run, ls, "micro");
            if marker.exists() || !state.drained(ls) {
                continue;
            }
            let names = match &names {
                Some(names) => names,
                None => names.insert(list(outputs.path())?),
            };
            let inputs: Vec<Vec<Input>> =
                streams.iter().map(|stream| self.inputs(&outputs, names, ls, stream)).collect::<Result<_, _>>()?;
            for (stream, inputs) in streams.iter().zip(&inputs) {
                self.merge_stream(&outputs, &target, ls, stream, inputs)?;
            }
            write_atomically(&marker, b"")?;
            // The per-process outputs are in the merged files now.
            for input in inputs.iter().flatten() {
                input.remove(outputs.path())?;
            }
            pass.lumi_sections.push(ls);
        }
        pass.finished = state.ended
            && state.ended_lumi_sections.iter().all(|&ls| done_marker(outputs.path(), self.run, ls, "micro").exists());
        Ok(pass)
    }

    /// The per-process outputs of lumi section `ls` and `stream` among `names` (the output
    /// directory's listing), in name order.
    fn inputs(&self, outputs: &FuOutputDir, names: &[String], ls: u32, stream: &str) -> Result<Vec<Input>, FuError> {
        let mut found = Vec::new();
        for name in names {
            if let Ok(n) = StreamFileName::parse(name)
                && n.run == self.run
                && n.ls == ls
                && n.stream == stream
                && n.ext == "jsn"
                && n.producer.pid().is_some()
            {
                found.push(outputs.path().join(name));
            }
        }
        found.sort();
        found.into_iter().map(Input::read).collect()
    }

    fn merge_stream(
        &self,
        outputs: &FuOutputDir,
        target: &FuOutputDir,
        ls: u32,
        stream: &str,
        inputs: &[Input],
    ) -> Result<(), FuError> {
        let producer = Producer::Named(self.node.clone());
        let data_name = stream_file(self.run, ls, stream, producer.clone(), DATA_EXT);
        let json_path = target.path().join(stream_file(self.run, ls, stream, producer, "jsn"));
        if json_path.exists() {
            return Ok(());
        }
        let accepted: u64 = inputs.iter().map(|i| i.values.accepted).sum();
        let (mut docs, bodies) = docs_and_bodies(outputs.path(), inputs)?;
        let definition = target.path().join(FU_OUTPUT_JSD).display().to_string();
        if docs.is_empty() {
            // No process of this node had an event of this lumi section.
            docs.push(FuOutputDoc::empty(0).to_doc(&definition, &self.node));
        }
        let body_bytes: u64 = bodies.iter().map(|b| b.bytes).sum();
        let header = merged_header(self.run, ls, accepted, RAW_V2_HEADER_BYTES as u64 + body_bytes, &json_path)?;
        let doc = merged_doc(&docs, &bodies, &data_name, Some(&header))?;
        let open = target.path().join(names::OPEN_DIR).join(&data_name);
        if let ([body], [_]) = (bodies.as_slice(), docs.as_slice()) {
            // One process's file is the node's file as it is (same header, same checksum): a
            // hard link instead of a copy. The input goes when the inputs are removed.
            remove_if_present(&open)?;
            match fs::hard_link(&body.path, &open) {
                Ok(()) => {
                    let to = target.path().join(&data_name);
                    fs::rename(&open, &to).map_err(io_error("publishing", &open))?;
                    return write_atomically(&json_path, doc.to_doc(&definition, &self.node).to_json().as_bytes());
                }
                // Another file system: copy below.
                Err(e) if e.raw_os_error() == Some(18) => {}
                Err(e) => return Err(io_error("linking", &open)(e)),
            }
        }
        if !bodies.is_empty() {
            let mut out = File::create(&open).map_err(io_error("creating", &open))?;
            out.write_all(&header).map_err(io_error("writing", &open))?;
            let mut at = RAW_V2_HEADER_BYTES as u64;
            for body in &bodies {
                copy_body(body, &mut out, &open, at)?;
                at += body.bytes;
            }
            out.sync_all().map_err(io_error("syncing", &open))?;
            let to = target.path().join(&data_name);
            fs::rename(&open, &to).map_err(io_error("publishing", &open))?;
        }
        write_atomically(&json_path, doc.to_doc(&definition, &self.node).to_json().as_bytes())
    }
}

/// The mini merger of one BU: the micro outputs of all its FU nodes, written as this BU's piece
/// of the final files in storage.
#[derive(Debug, Clone)]
pub struct MiniMerger {
    /// The BU's directory (holding `runRRRRRR/`), read for NEvents per lumi section.
    pub bu_dir: PathBuf,
    /// The micro mergers' output directory (holding `runRRRRRR/`).
    pub mini_dir: PathBuf,
    /// The storage directory (holding `runRRRRRR/`).
    pub storage_dir: PathBuf,
    /// This BU's name, the producer of its pieces.
    pub bu: String,
    /// The FU nodes whose micro outputs make up this BU's share.
    pub nodes: Vec<String>,
    /// The run.
    pub run: u32,
    /// The selector's streams (the error stream is added).
    pub streams: Vec<String>,
    /// Where to copy the BU's end-of-lumi-section and end-of-run documents (a directory holding
    /// `runRRRRRR/`), for a check on a host that cannot see the BU's directory: each is copied
    /// before anything that depends on it reaches storage.
    pub bookkeeping_copy: Option<PathBuf>,
}

/// One BU's reservation in a final file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reservation {
    bu: String,
    offset: u64,
    bytes: u64,
}

/// The ledger of reservations of a final file: one line `<bu> <offset> <bytes>` each.
fn read_ledger(text: &str, path: &Path) -> Result<Vec<Reservation>, FuError> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let bad = || FuError::Bookkeeping { path: path.to_owned(), problem: format!("bad ledger line {line:?}") };
            let mut parts = line.split(' ');
            let (Some(bu), Some(offset), Some(bytes), None) = (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            Ok(Reservation {
                bu: bu.to_owned(),
                offset: offset.parse().map_err(|_| bad())?,
                bytes: bytes.parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

impl MiniMerger {
    /// One pass: merges every lumi section the BU has ended whose micro outputs are all there.
    pub fn pass(&self) -> Result<MergePass, FuError> {
        let bu_run_dir = self.bu_dir.join(names::run_dir_name(self.run));
        let inputs = FuOutputDir::create(&self.mini_dir, self.run)?;
        let storage = FuOutputDir::create(&self.storage_dir, self.run)?;
        let (ended, eor) = bu_lumi_sections(&bu_run_dir, self.run)?;
        let streams = with_error_stream(&self.streams);
        let mut pass = MergePass::default();
        for (&ls, eols) in &ended {
            let marker = done_marker(inputs.path(), self.run, ls, &format!("mini-{}", self.bu));
            if marker.exists() {
                continue;
            }
            let all_there = streams
                .iter()
                .all(|s| self.nodes.iter().all(|n| inputs.path().join(self.micro_json(ls, s, n)).exists()));
            if !all_there {
                continue;
            }
            self.copy_bookkeeping(&bu_run_dir, &BuFileName::EndOfLumi { run: self.run, ls })?;
            let micro: Vec<Vec<Input>> = streams
                .iter()
                .map(|s| {
                    self.nodes.iter().map(|n| Input::read(inputs.path().join(self.micro_json(ls, s, n)))).collect()
                })
                .collect::<Result<_, _>>()?;
            for (stream, micro) in streams.iter().zip(&micro) {
                self.merge_stream(&inputs, &storage, ls, stream, micro, eols)?;
            }
            write_atomically(&marker, b"")?;
            for input in micro.iter().flatten() {
                input.remove(inputs.path())?;
            }
            pass.lumi_sections.push(ls);
        }
        let all_done =
            ended.keys().all(|&ls| done_marker(inputs.path(), self.run, ls, &format!("mini-{}", self.bu)).exists());
        if eor && all_done {
            // Tell the macro merger which lumi sections this BU had: its EoR, as the BU wrote it.
            let eor_marker = storage.path().join(names::OPEN_DIR).join(self.bu_eor_name());
            if !eor_marker.exists() {
                self.copy_bookkeeping(&bu_run_dir, &BuFileName::EndOfRun { run: self.run })?;
                let from = bu_run_dir.join(BuFileName::EndOfRun { run: self.run }.to_string());
                let text = fs::read_to_string(&from).map_err(io_error("reading", &from))?;
                write_atomically(&eor_marker, text.as_bytes())?;
            }
            pass.finished = true;
        }
        Ok(pass)
    }

    /// Copies the BU's document `name` into [`MiniMerger::bookkeeping_copy`], if there is one
    /// and it is not there yet.
    fn copy_bookkeeping(&self, bu_run_dir: &Path, name: &BuFileName) -> Result<(), FuError> {
        let Some(copy) = &self.bookkeeping_copy else { return Ok(()) };
        let to = copy.join(names::run_dir_name(self.run)).join(name.to_string());
        if to.exists() {
            return Ok(());
        }
        let from = bu_run_dir.join(name.to_string());
        let text = fs::read(&from).map_err(io_error("reading", &from))?;
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(io_error("creating", dir))?;
        }
        write_atomically(&to, &text)
    }

    fn bu_eor_name(&self) -> String {
        bu_eor_name(self.run, &self.bu)
    }

    fn micro_json(&self, ls: u32, stream: &str, node: &str) -> String {
        stream_file(self.run, ls, stream, Producer::Named(node.to_owned()), "jsn")
    }

    fn merge_stream(
        &self,
        inputs: &FuOutputDir,
        storage: &FuOutputDir,
        ls: u32,
        stream: &str,
        micro: &[Input],
        eols: &EolsDoc,
    ) -> Result<(), FuError> {
        let open = storage.path().join(names::OPEN_DIR);
        let piece_json = open.join(stream_file(self.run, ls, stream, Producer::Named(self.bu.clone()), "jsn"));
        let final_name = stream_file(self.run, ls, stream, Producer::Named(STORAGE_PRODUCER.into()), DATA_EXT);
        if piece_json.exists() || storage.path().join(final_json_name(self.run, ls, stream)).exists() {
            return Ok(());
        }
        let (docs, bodies) = docs_and_bodies(inputs.path(), micro)?;
        let doc = merged_doc(&docs, &bodies, &final_name, None)?;
        // The proof: every event the BU built in this lumi section was processed, once.
        if doc.processed != eols.events {
            return Err(FuError::Bookkeeping {
                path: piece_json,
                problem: format!(
                    "lumi section {ls} stream {stream}: Processed {} over {} node(s) but BU {} built {} events",
                    doc.processed,
                    self.nodes.len(),
                    self.bu,
                    eols.events
                ),
            });
        }
        if !bodies.is_empty() {
            let reservation = self.reserve(&open, &final_name, doc.file_size)?;
            let data = open.join(&final_name);
            let mut out = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(false)
                .open(&data)
                .map_err(io_error("opening", &data))?;
            let mut at = reservation.offset;
            for body in &bodies {
                copy_body(body, &mut out, &data, at)?;
                at += body.bytes;
            }
            out.sync_all().map_err(io_error("syncing", &data))?;
        }
        let definition = storage.path().join(FU_OUTPUT_JSD).display().to_string();
        write_atomically(&piece_json, doc.to_doc(&definition, &self.bu).to_json().as_bytes())
    }

    /// This BU's range in the final file `final_name`: found in the ledger if an earlier attempt
    /// reserved it, else appended, under an exclusive lock of the ledger.
    fn reserve(&self, open: &Path, final_name: &str, bytes: u64) -> Result<Reservation, FuError> {
        let path = open.join(format!("{final_name}.ledger"));
        let mut ledger =
            OpenOptions::new().create(true).read(true).append(true).open(&path).map_err(io_error("opening", &path))?;
        ledger.lock().map_err(io_error("locking", &path))?;
        let mut text = String::new();
        ledger.read_to_string(&mut text).map_err(io_error("reading", &path))?;
        let entries = read_ledger(&text, &path)?;
        if let Some(mine) = entries.iter().find(|r| r.bu == self.bu) {
            if mine.bytes != bytes {
                return Err(FuError::Bookkeeping {
                    path,
                    problem: format!("{} reserved {} bytes earlier, now has {bytes}", self.bu, mine.bytes),
                });
            }
            return Ok(mine.clone());
        }
        let offset = entries.iter().map(|r| r.offset + r.bytes).max().unwrap_or(RAW_V2_HEADER_BYTES as u64);
        let line = format!("{} {offset} {bytes}\n", self.bu);
        ledger.write_all(line.as_bytes()).map_err(io_error("writing", &path))?;
        ledger.sync_all().map_err(io_error("syncing", &path))?;
        Ok(Reservation { bu: self.bu.clone(), offset, bytes })
    }
}

fn bu_eor_name(run: u32, bu: &str) -> String {
    format!("run{run:06}_ls0000_{bu}_EoR.jsn")
}

fn final_json_name(run: u32, ls: u32, stream: &str) -> String {
    stream_file(run, ls, stream, Producer::Named(STORAGE_PRODUCER.into()), "jsn")
}

/// The macro merger: publishes the final files in storage once every BU has written its piece.
#[derive(Debug, Clone)]
pub struct MacroMerger {
    /// The storage directory (holding `runRRRRRR/`).
    pub storage_dir: PathBuf,
    /// Every BU of the run.
    pub bus: Vec<String>,
    /// The run.
    pub run: u32,
    /// The selector's streams (the error stream is added).
    pub streams: Vec<String>,
}

impl MacroMerger {
    /// One pass: publishes every (lumi section, stream) whose pieces are all there; ends the
    /// run with a storage EoR when every BU's mini merger has ended it.
    pub fn pass(&self) -> Result<MergePass, FuError> {
        let storage = FuOutputDir::create(&self.storage_dir, self.run)?;
        let open = storage.path().join(names::OPEN_DIR);
        let streams = with_error_stream(&self.streams);
        // Per (lumi section, stream): the BUs whose piece is there; ledgers and open data count
        // too, with no BU, so that what a killed publish left of a published file is cleared.
        let mut pieces: BTreeMap<(u32, String), BTreeSet<String>> = BTreeMap::new();
        for name in list(&open)? {
            if !names::is_temporary(&name)
                && let Ok(n) = StreamFileName::parse(&name)
                && n.run == self.run
                && let Producer::Named(producer) = n.producer
            {
                let from = pieces.entry((n.ls, n.stream)).or_default();
                if n.ext == "jsn" {
                    from.insert(producer);
                }
            }
        }
        let mut pass = MergePass::default();
        for ((ls, stream), from) in &pieces {
            let published = storage.path().join(final_json_name(self.run, *ls, stream)).exists();
            if published || self.bus.iter().all(|b| from.contains(b)) {
                self.publish(&storage, *ls, stream)?;
                if !pass.lumi_sections.contains(ls) {
                    pass.lumi_sections.push(*ls);
                }
            }
        }
        let eor_path = storage.path().join(BuFileName::EndOfRun { run: self.run }.to_string());
        if eor_path.exists() {
            storage.remove_empty_work_dirs();
            pass.finished = true;
            return Ok(pass);
        }
        // The run ends when every BU's mini has ended it (so every piece is written) and no
        // piece is left unpublished.
        for bu in &self.bus {
            if !open.join(bu_eor_name(self.run, bu)).exists() {
                return Ok(pass);
            }
        }
        let left = list(&open)?;
        let pending = left.iter().any(|name| {
            !names::is_temporary(name)
                && StreamFileName::parse(name)
                    .is_ok_and(|n| n.run == self.run && matches!(n.producer, Producer::Named(_)))
        });
        if pending {
            return Ok(pass);
        }
        let mut events = 0;
        let mut files = 0;
        let mut lumis = BTreeSet::new();
        for name in list(storage.path())? {
            if let Ok(n) = StreamFileName::parse(&name)
                && n.run == self.run
                && n.ext == "jsn"
            {
                lumis.insert(n.ls);
                let (_, doc) = read_doc(&storage.path().join(&name))?;
                if n.stream == streams[0] {
                    events += doc.processed;
                }
                files += u64::from(!doc.file_list.is_empty());
            }
        }
        let eor = EorDoc {
            events,
            files,
            lumis: lumis.len() as u64,
            last_lumi: lumis.last().copied().map_or(0, u64::from),
            orbits: None,
        };
        let definition = storage.path().join(names::EOR_JSD).display().to_string();
        write_atomically(&eor_path, eor.to_doc(&definition, STORAGE_PRODUCER).to_json().as_bytes())?;
        for bu in &self.bus {
            remove_if_present(&open.join(bu_eor_name(self.run, bu)))?;
        }
        // Every writer of pieces has finished (each BU's mini merger said so), so a temporary
        // file still here was left by one that was killed.
        for name in left.iter().filter(|n| names::is_temporary(n)) {
            remove_if_present(&open.join(name))?;
        }
        storage.remove_empty_work_dirs();
        pass.finished = true;
        Ok(pass)
    }

    /// Publishes one final file and its JSON; resumes wherever an earlier attempt stopped.
    fn publish(&self, storage: &FuOutputDir, ls: u32, stream: &str) -> Result<(), FuError> {
        let open = storage.path().join(names::OPEN_DIR);
        let data_name = stream_file(self.run, ls, stream, Producer::Named(STORAGE_PRODUCER.into()), DATA_EXT);
        let json_path = storage.path().join(final_json_name(self.run, ls, stream));
        let piece_paths: Vec<PathBuf> = self
            .bus
            .iter()
            .map(|bu| open.join(stream_file(self.run, ls, stream, Producer::Named(bu.clone()), "jsn")))
            .collect();
        let ledger_path = open.join(format!("{data_name}.ledger"));
        if !json_path.exists() {
            let mut docs = Vec::new();
            let mut accepted = 0u64;
            let mut pieces = BTreeMap::new();
            for (bu, path) in self.bus.iter().zip(&piece_paths) {
                let (doc, values) = read_doc(path)?;
                accepted += values.accepted;
                if values.file_size > 0 {
                    pieces.insert(bu.clone(), values);
                }
                docs.push(doc);
            }
            // Bodies in file order, as the ledger placed them.
            let ledger = match fs::read_to_string(&ledger_path) {
                Ok(text) => read_ledger(&text, &ledger_path)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(io_error("reading", &ledger_path)(e)),
            };
            let mut bodies = Vec::new();
            let mut end = RAW_V2_HEADER_BYTES as u64;
            let mut ordered = ledger.clone();
            ordered.sort_by_key(|r| r.offset);
            for r in &ordered {
                let Some(piece) = pieces.get(&r.bu) else { continue };
                if r.offset != end || r.bytes != piece.file_size {
                    return Err(FuError::Bookkeeping {
                        path: ledger_path.clone(),
                        problem: format!(
                            "{} at {} for {} bytes leaves a gap or overlap at {end}",
                            r.bu, r.offset, r.bytes
                        ),
                    });
                }
                let adler = u32::try_from(piece.file_adler32).map_err(|_| FuError::Bookkeeping {
                    path: ledger_path.clone(),
                    problem: format!("piece of {} has FileAdler32 {}", r.bu, piece.file_adler32),
                })?;
                bodies.push(Body { path: PathBuf::new(), bytes: r.bytes, adler });
                end += r.bytes;
            }
            if bodies.len() != pieces.len() {
                return Err(FuError::Bookkeeping {
                    path: ledger_path.clone(),
                    problem: format!("{} pieces with data but {} reservations", pieces.len(), bodies.len()),
                });
            }
            let header = merged_header(self.run, ls, accepted, end, &json_path)?;
            let doc = merged_doc(&docs, &bodies, &data_name, Some(&header))?;
            let data_open = open.join(&data_name);
            let data_final = storage.path().join(&data_name);
            if !bodies.is_empty() && !data_final.exists() {
                let file = OpenOptions::new().write(true).open(&data_open).map_err(io_error("opening", &data_open))?;
                file.write_all_at(&header, 0).map_err(io_error("writing", &data_open))?;
                file.sync_all().map_err(io_error("syncing", &data_open))?;
                fs::rename(&data_open, &data_final).map_err(io_error("publishing", &data_open))?;
            }
            let definition = storage.path().join(FU_OUTPUT_JSD).display().to_string();
            write_atomically(&json_path, doc.to_doc(&definition, STORAGE_PRODUCER).to_json().as_bytes())?;
        }
        for path in &piece_paths {
            remove_if_present(path)?;
        }
        remove_if_present(&ledger_path)
    }
}
