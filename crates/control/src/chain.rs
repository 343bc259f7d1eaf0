//! The chain's conservation, proven from the files: the events the BUs built against the events
//! processed in storage, per lumi section, and every final file against its JSON
//! ([`check_chain`]); `tessera verify` of a storage run directory ([`verify_storage`]) or of a
//! directory of FU outputs ([`verify_outputs`]).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use tessera_formats::FormatError;
use tessera_formats::bookkeeping::{FuOutputDoc, adler32};
use tessera_formats::names::{self, BuFileName, Producer, StreamFileName};
use tessera_fu::merge::STORAGE_PRODUCER;

use crate::farm::FarmDirs;

/// Why a directory could not be verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// Its name is no run directory's.
    #[error("{}", path.display())]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// It could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It holds no final stream file.
    #[error("{}: no final stream files: not a storage run directory", path.display())]
    NotStorage {
        /// The directory.
        path: PathBuf,
    },
}

/// The chain's conservation: per lumi section, the events the BUs built against the events
/// processed in storage, and what storage holds per stream, checked against the files.
#[derive(Debug, Default)]
pub struct ChainCheck {
    /// Lumi section → (built by the BUs, processed according to storage).
    pub per_ls: BTreeMap<u32, (u64, u64)>,
    /// Stream → events accepted.
    pub accepted: BTreeMap<String, u64>,
    /// Final data files and their bytes.
    pub files: u64,
    /// Bytes in final data files.
    pub bytes: u64,
    /// What does not add up.
    pub problems: Vec<String>,
}

impl ChainCheck {
    /// Whether every built event was processed exactly once and storage matches its JSON.
    pub fn holds(&self) -> bool {
        self.problems.is_empty() && self.per_ls.values().all(|(b, p)| b == p)
    }

    /// Built and processed over all lumi sections.
    pub fn totals(&self) -> (u64, u64) {
        self.per_ls.values().fold((0, 0), |(b, p), (x, y)| (b + x, p + y))
    }
}

/// Checks storage against the BUs' bookkeeping: for every lumi section, the sum of the BUs'
/// NEvents equals Processed in every stream's final JSON; every final file's size, event count
/// and Adler-32 match its JSON (the files are read here, once).
pub fn check_chain(bu_run_dirs: &[PathBuf], storage_run_dir: &Path, run: u32, streams: &[String]) -> ChainCheck {
    let mut check = ChainCheck::default();
    for dir in bu_run_dirs {
        match tessera_fu::merge::bu_lumi_sections(dir, run) {
            Ok((ended, _)) => {
                for (ls, eols) in ended {
                    check.per_ls.entry(ls).or_default().0 += eols.events;
                }
            }
            Err(e) => check.problems.push(format!("{}: {e}", dir.display())),
        }
    }
    if bu_run_dirs.is_empty() {
        // Without the BUs' bookkeeping, the lumi sections are those storage holds.
        for name in fs::read_dir(storage_run_dir).into_iter().flatten().flatten() {
            if let Ok(n) = StreamFileName::parse(&name.file_name().to_string_lossy())
                && n.run == run
            {
                check.per_ls.entry(n.ls).or_default();
            }
        }
    }
    let lumis: Vec<u32> = check.per_ls.keys().copied().collect();
    for ls in lumis {
        for (k, stream) in streams.iter().enumerate() {
            let name = |ext: &str| {
                StreamFileName {
                    run,
                    ls,
                    stream: stream.clone(),
                    producer: Producer::Named(STORAGE_PRODUCER.into()),
                    ext: ext.into(),
                }
                .to_string()
            };
            let json = storage_run_dir.join(name("jsn"));
            let doc = match fs::read_to_string(&json)
                .map_err(|e| e.to_string())
                .and_then(|t| FuOutputDoc::parse(&t).map_err(|e| e.to_string()))
            {
                Ok(doc) => doc,
                Err(e) => {
                    check.problems.push(format!("{}: {e}", json.display()));
                    continue;
                }
            };
            if k == 0 {
                check.per_ls.entry(ls).or_default().1 = doc.processed;
            } else if doc.processed != check.per_ls[&ls].1 {
                check.problems.push(format!(
                    "{}: Processed {} but {} says {}",
                    json.display(),
                    doc.processed,
                    streams[0],
                    check.per_ls[&ls].1
                ));
            }
            *check.accepted.entry(stream.clone()).or_default() += doc.accepted;
            if doc.file_list.is_empty() {
                if doc.accepted != 0 {
                    check.problems.push(format!("{}: {} accepted but no file", json.display(), doc.accepted));
                }
                continue;
            }
            check_data_file(storage_run_dir, &doc, &mut check);
        }
    }
    if !storage_run_dir.join(BuFileName::EndOfRun { run }.to_string()).exists() {
        check.problems.push(format!("{}: no EoR", storage_run_dir.display()));
    }
    check
}

/// The storage run directory of a run.
pub fn storage_run_dir(dirs: &FarmDirs, run: u32) -> PathBuf {
    dirs.storage.join(names::run_dir_name(run))
}

/// `tessera verify` of a storage run directory: the streams it holds (the error stream last),
/// checked as [`check_chain`] does; with no BU run directories the completeness proof is left
/// out (built is taken to be what storage says was processed).
pub fn verify_storage(storage_run_dir: &Path, built: &[PathBuf]) -> Result<ChainCheck, ChainError> {
    let name = storage_run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let run = names::parse_run_dir_name(&name)
        .map_err(|source| ChainError::RunDir { path: storage_run_dir.to_owned(), source })?;
    let mut streams: Vec<String> = Vec::new();
    let read = |source| ChainError::Read { path: storage_run_dir.to_owned(), source };
    for entry in fs::read_dir(storage_run_dir).map_err(read)? {
        if let Ok(n) = StreamFileName::parse(&entry.map_err(read)?.file_name().to_string_lossy())
            && n.run == run
            && !streams.contains(&n.stream)
        {
            streams.push(n.stream);
        }
    }
    streams.sort_by_key(|s| (s == tessera_fu::ERROR_STREAM, s.clone()));
    if streams.is_empty() {
        return Err(ChainError::NotStorage { path: storage_run_dir.to_owned() });
    }
    let mut check = check_chain(built, storage_run_dir, run, &streams);
    if built.is_empty() {
        for (b, p) in check.per_ls.values_mut() {
            *b = *p;
        }
    }
    Ok(check)
}

/// Whether `dir` is a storage run directory (it holds final files of the macro merger).
pub fn is_storage_run_dir(dir: &Path) -> bool {
    fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        StreamFileName::parse(&e.file_name().to_string_lossy())
            .is_ok_and(|n| n.producer == Producer::Named(STORAGE_PRODUCER.into()))
    })
}

/// Checks the data file of an output JSON against it: size, Adler-32, and the events it holds
/// (each with a good CRC-32C) against Accepted.
fn check_data_file(dir: &Path, doc: &FuOutputDoc, check: &mut ChainCheck) {
    let data = dir.join(&doc.file_list);
    match fs::read(&data) {
        Ok(bytes) => {
            check.files += 1;
            check.bytes += bytes.len() as u64;
            let events = tessera_formats::raw::RawFile::parse(&bytes)
                .map(|f| f.events().filter(|e| e.as_ref().is_ok_and(|(_, e)| e.check_crc().is_ok())).count());
            if bytes.len() as u64 != doc.file_size {
                check.problems.push(format!("{}: {} bytes, JSON says {}", data.display(), bytes.len(), doc.file_size));
            }
            if i64::from(adler32(&bytes)) != doc.file_adler32 {
                check.problems.push(format!("{}: Adler-32 does not match its JSON", data.display()));
            }
            if events.as_ref().ok().map(|&n| n as u64) != Some(doc.accepted) {
                check.problems.push(format!(
                    "{}: {:?} good events, JSON says {} accepted",
                    data.display(),
                    events,
                    doc.accepted
                ));
            }
        }
        Err(e) => check.problems.push(format!("{}: {e}", data.display())),
    }
}

/// `tessera verify` of a directory of FU or micro-merger outputs: every output JSON against its
/// data file; per lumi section, Processed summed over producers (the same in every stream).
pub fn verify_outputs(dir: &Path) -> Result<ChainCheck, ChainError> {
    let mut check = ChainCheck::default();
    let mut processed: BTreeMap<(u32, String), u64> = BTreeMap::new();
    let read = |source| ChainError::Read { path: dir.to_owned(), source };
    for entry in fs::read_dir(dir).map_err(read)? {
        let name = entry.map_err(read)?.file_name().to_string_lossy().into_owned();
        let Ok(n) = StreamFileName::parse(&name) else { continue };
        if n.ext != "jsn" {
            continue;
        }
        let path = dir.join(&name);
        let read = fs::read_to_string(&path).map_err(|e| e.to_string());
        let doc = match read.and_then(|t| FuOutputDoc::parse(&t).map_err(|e| e.to_string())) {
            Ok(doc) => doc,
            Err(e) => {
                check.problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        *processed.entry((n.ls, n.stream.clone())).or_default() += doc.processed;
        *check.accepted.entry(n.stream.clone()).or_default() += doc.accepted;
        if doc.file_list.is_empty() {
            if doc.accepted != 0 {
                check.problems.push(format!("{}: {} accepted but no file", path.display(), doc.accepted));
            }
        } else {
            check_data_file(dir, &doc, &mut check);
        }
    }
    for ((ls, stream), n) in &processed {
        match check.per_ls.get(ls) {
            Some(&(_, first)) if first != *n => check
                .problems
                .push(format!("lumi section {ls}: stream {stream} has Processed {n}, another stream {first}")),
            _ => {
                check.per_ls.insert(*ls, (*n, *n));
            }
        }
    }
    Ok(check)
}

/// Whether `dir` holds output JSON of the filter farm (of FUs, mergers or storage).
pub fn is_output_dir(dir: &Path) -> bool {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| StreamFileName::parse(&e.file_name().to_string_lossy()).is_ok_and(|n| n.ext == "jsn"))
}
