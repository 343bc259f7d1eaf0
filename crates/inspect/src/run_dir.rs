//! A BU run directory: what is in it (shared by `inspect` and `verify`) and a report per lumi
//! section.

use crate::event::{EventChecks, Problem};
use crate::orbit_file::inspect_orbit_file;
use crate::raw_file::inspect_raw_file;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, IndexDoc};
use tessera_formats::names::{self, BuFileName};
use tessera_formats::orbit::is_orbit_file;

/// The files of a run directory, sorted by kind.
#[derive(Debug, Default)]
pub struct RunDirScan {
    /// Run number from the directory's name, if it follows the rule.
    pub run: Option<u32>,
    /// Raw files by (lumi section, index).
    pub raw_files: BTreeMap<(u32, u32), PathBuf>,
    /// Index JSON files by (lumi section, index).
    pub index_jsons: BTreeMap<(u32, u32), PathBuf>,
    /// End-of-lumi records by lumi section.
    pub end_of_lumis: BTreeMap<u32, PathBuf>,
    /// End-of-run records (one expected).
    pub end_of_runs: Vec<PathBuf>,
    /// Names that carry another run's number.
    pub wrong_run: Vec<PathBuf>,
    /// Temporary files left behind (`*.tmp`).
    pub temporaries: Vec<PathBuf>,
    /// Files whose names follow no rule.
    pub unknown: Vec<PathBuf>,
    /// Whether `open/` exists, and the files in it.
    pub open_dir: Option<Vec<PathBuf>>,
}

/// A directory that is not a run directory (`runRRRRRR`), with the run directories it holds, if
/// it is a BU directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} is not a run directory (runRRRRRR){}", hint(.runs))]
pub struct NotARunDir {
    /// The directory.
    pub path: String,
    /// Run directories inside it.
    pub runs: Vec<String>,
}

fn hint(runs: &[String]) -> String {
    match runs {
        [] => String::new(),
        [one] => format!("; it holds {one}: name that"),
        many => format!("; it holds {}: name one of them", many.join(", ")),
    }
}

/// Checks that `dir` is named like a run directory; if not, says which run directories it holds.
pub fn require_run_dir(dir: &Path) -> Result<(), NotARunDir> {
    let is_run = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| names::parse_run_dir_name(n).is_ok());
    if is_run {
        return Ok(());
    }
    let runs_in = |dir: &Path| -> Vec<String> {
        fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .filter(|n| names::parse_run_dir_name(n).is_ok())
            .collect()
    };
    let mut runs = runs_in(dir);
    if runs.is_empty() {
        // A run's output directory (`tessera run --output`): its BUs' and storage's runs.
        for sub in fs::read_dir(dir).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
            let name = sub.file_name().to_string_lossy().into_owned();
            runs.extend(runs_in(&sub.path()).into_iter().map(|r| format!("{name}/{r}")));
        }
    }
    runs.sort();
    Err(NotARunDir { path: dir.display().to_string(), runs })
}

/// Lists `dir` and sorts what it holds.
pub fn scan_run_dir(dir: &Path) -> io::Result<RunDirScan> {
    let mut scan = RunDirScan {
        run: dir.file_name().and_then(|n| n.to_str()).and_then(|n| names::parse_run_dir_name(n).ok()),
        ..RunDirScan::default()
    };
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            if name == names::OPEN_DIR {
                let mut files: Vec<PathBuf> =
                    fs::read_dir(&path)?.map(|e| e.map(|e| e.path())).collect::<io::Result<_>>()?;
                files.sort();
                scan.open_dir = Some(files);
            } else if ![names::JSD_DIR, names::HLT_DIR, names::FU_DIR].contains(&name.as_str()) {
                scan.unknown.push(path);
            }
            continue;
        }
        if names::is_temporary(&name) {
            scan.temporaries.push(path);
            continue;
        }
        if name == names::FU_LOCK {
            continue;
        }
        let Ok(parsed) = BuFileName::parse(&name) else {
            scan.unknown.push(path);
            continue;
        };
        if scan.run.is_some_and(|r| r != parsed.run()) {
            scan.wrong_run.push(path);
            continue;
        }
        match parsed {
            BuFileName::Raw { ls, index, .. } => {
                scan.raw_files.insert((ls, index), path);
            }
            BuFileName::IndexJson { ls, index, .. } => {
                scan.index_jsons.insert((ls, index), path);
            }
            BuFileName::EndOfLumi { ls, .. } => {
                scan.end_of_lumis.insert(ls, path);
            }
            BuFileName::EndOfRun { .. } => scan.end_of_runs.push(path),
        }
    }
    Ok(scan)
}

/// Why a JSON bookkeeping file could not be read into its typed form. A report shows it as its
/// sentence (in JSON too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocError {
    /// The file could not be read: the reason as the operating system gives it.
    #[error("cannot read: {0}")]
    Unreadable(String),
    /// The file was read, but its content breaks the document's format.
    #[error(transparent)]
    Format(#[from] tessera_formats::FormatError),
}

impl Serialize for DocError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reads a JSON bookkeeping file into its typed form.
pub fn read_doc<T>(path: &Path, parse: impl Fn(&str) -> tessera_formats::Result<T>) -> Result<T, DocError> {
    let text = fs::read_to_string(path).map_err(|e| DocError::Unreadable(e.to_string()))?;
    Ok(parse(&text)?)
}

/// One lumi section of a run directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LumiRow {
    /// The lumi section.
    pub ls: u32,
    /// Raw files present.
    pub files: u64,
    /// Events in them, from their headers (from their orbit headers, for orbit files).
    pub events: u64,
    /// Orbits written in them (orbit files only).
    pub orbits: Option<u64>,
    /// Their bytes.
    pub bytes: u64,
    /// Events lost, from the EoLS record.
    pub lost: Option<u64>,
    /// State of the end-of-lumi record: "complete", "missing", or what is wrong.
    pub eols: String,
}

/// A run directory: one row per lumi section and the state of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunDirReport {
    /// The directory.
    pub path: String,
    /// Run number, from the directory's name.
    pub run: Option<u32>,
    /// Lumi sections in order.
    pub lumi_sections: Vec<LumiRow>,
    /// The end-of-run record as read, or why it could not be.
    pub end_of_run: Option<Result<EorSummary, DocError>>,
    /// Files left in `open/` (None: no `open/`).
    pub open_files: Option<usize>,
    /// What is wrong, as far as a listing shows (run `verify` for every rule).
    pub problems: Vec<Problem>,
}

/// The end-of-run record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EorSummary {
    /// Events built in the run.
    pub events: u64,
    /// Raw files in the run.
    pub files: u64,
    /// Lumi sections in the run.
    pub lumis: u64,
    /// The last lumi section.
    pub last_lumi: u64,
    /// Orbit mode only: orbits given to the BU, empty ones included.
    pub orbits: Option<u64>,
    /// Orbit mode only: the orbits with no event (counted, not written).
    pub empty_orbits: Option<u64>,
}

impl From<EorDoc> for EorSummary {
    fn from(d: EorDoc) -> Self {
        EorSummary {
            events: d.events,
            files: d.files,
            lumis: d.lumis,
            last_lumi: d.last_lumi,
            orbits: d.orbits.map(|c| c.orbits),
            empty_orbits: d.orbits.map(|c| c.empty_orbits),
        }
    }
}

/// Reads a run directory's files and its bookkeeping into a table per lumi section. Each raw
/// file is checked as `inspect` checks it alone (its header or orbit headers, every event,
/// CRCs, with `checks` the seeded payloads), and its `.jsn` against it: any problem names the
/// file.
pub fn inspect_run_dir(dir: &Path, checks: EventChecks) -> io::Result<RunDirReport> {
    let scan = scan_run_dir(dir)?;
    let mut rows: BTreeMap<u32, LumiRow> = BTreeMap::new();
    let mut problems = Vec::new();
    let row = |ls| LumiRow { ls, files: 0, events: 0, orbits: None, bytes: 0, lost: None, eols: "missing".into() };
    for (&(ls, index), path) in &scan.raw_files {
        let r = rows.entry(ls).or_insert_with(|| row(ls));
        let name = file_name(path);
        let bytes = fs::read(path)?;
        r.files += 1;
        r.bytes += bytes.len() as u64;
        let mut said = |p: &Problem| {
            let at = p.offset.map_or(String::new(), |o| format!(" byte {o}"));
            problems.push(Problem::whole(format!("{name}{at}: {}", p.message)));
        };
        // The file's events and orbits, when all of it could be read.
        let (events, orbits) = if is_orbit_file(&bytes) {
            let report = inspect_orbit_file(&name, &bytes, checks);
            report.problems.iter().for_each(&mut said);
            r.events += report.event_count();
            *r.orbits.get_or_insert(0) += report.orbits.len() as u64;
            report.whole_counts()
        } else {
            let report = inspect_raw_file(&name, &bytes, checks);
            report.all_problems().for_each(&mut said);
            r.events += report.events.len() as u64;
            (report.header.is_some().then_some(report.events.len() as u64), None)
        };
        match scan.index_jsons.get(&(ls, index)) {
            None => problems.push(Problem::whole(format!("{name}: published without its .jsn"))),
            Some(jsn) => match read_doc(jsn, IndexDoc::parse) {
                Err(e) => problems.push(Problem::whole(format!("{}: {e}", file_name(jsn)))),
                Ok(doc) => {
                    for m in check_index_doc(&doc, events, orbits, bytes.len() as u64) {
                        problems.push(Problem::whole(format!("{}: {m}", file_name(jsn))));
                    }
                }
            },
        }
    }
    for (&ls, path) in &scan.end_of_lumis {
        let r = rows.entry(ls).or_insert_with(|| row(ls));
        match read_doc(path, EolsDoc::parse) {
            Ok(d) => {
                r.lost = Some(d.lost_events);
                r.eols = if !d.is_complete() {
                    format!("open: {} + {} lost != {}", d.events, d.lost_events, d.total_events)
                } else if d.files != r.files || d.events != r.events {
                    format!("says {} files, {} events", d.files, d.events)
                } else {
                    "complete".into()
                };
            }
            Err(e) => r.eols = format!("unreadable: {e}"),
        }
    }
    for path in scan.temporaries.iter().chain(&scan.unknown).chain(&scan.wrong_run) {
        problems.push(Problem::whole(format!("{}: unexpected file", file_name(path))));
    }
    let end_of_run = scan.end_of_runs.first().map(|p| read_doc(p, EorDoc::parse).map(EorSummary::from));
    Ok(RunDirReport {
        path: dir.display().to_string(),
        run: scan.run,
        lumi_sections: rows.into_values().collect(),
        end_of_run,
        open_files: scan.open_dir.as_ref().map(Vec::len),
        problems,
    })
}

/// Reads up to `buf.len()` bytes from the start of `path`.
pub(crate) fn read_prefix(path: &Path, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The last component of `path`, for messages.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// How a raw file's `.jsn` disagrees with the file, one sentence each (none: it agrees): events
/// (unless they could not be counted, `None`), bytes, and an orbit file's NOrbits (when both say
/// one).
pub fn check_index_doc(doc: &IndexDoc, events: Option<u64>, orbits: Option<u64>, bytes: u64) -> Vec<String> {
    let counts = match events {
        Some(events) => (doc.events != events || doc.bytes != bytes).then(|| {
            format!(
                "says {} events and {} bytes; the raw file holds {events} events and {bytes} bytes",
                doc.events, doc.bytes
            )
        }),
        None => (doc.bytes != bytes).then(|| format!("says {} bytes; the raw file holds {bytes} bytes", doc.bytes)),
    };
    let orbits = doc
        .orbits
        .zip(orbits)
        .filter(|(says, holds)| says != holds)
        .map(|(says, holds)| format!("NOrbits says {says}; the raw file holds {holds} orbits"));
    counts.into_iter().chain(orbits).collect()
}
