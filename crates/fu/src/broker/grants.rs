//! What the broker handed out and what became of it: the files it granted, the readers it
//! granted them to and where each stands, and the tally of files their readers deleted.
//!
//! A reader that follows CMSSW's rules never calls the broker back: it deletes each file when
//! it has processed it. So the broker looks at its grants every [`super::server::SWEEP_INTERVAL`]: a
//! granted file that is gone was processed, and its events (read from its index JSON when it
//! was granted) are counted and written to the run's reader ledger, `fu/readers.ledger`, one
//! line `<claimed name> <events>` each, so that the count survives a restart of the BU; its
//! index JSON is removed, as a Tessera FU's `/done` would. A grant whose reader has not asked
//! anything for the lease is taken back: the reader is presumed dead, and the file goes back to
//! the pool for another. A Tessera FU's `/done` and `/release` end its grant at once.

use crate::claim::remove_if_present;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera_formats::bookkeeping::IndexDoc;
use tessera_formats::names::{self, ClaimedRawName};

/// Why a sweep of the grants stopped: the ledger could not be read or written, or a claim not
/// taken back.
#[derive(Debug, thiserror::Error)]
pub(super) enum SweepError {
    /// The reader ledger could not be read.
    #[error("reading {path}: {source}")]
    ReadLedger {
        /// The ledger.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A line of the reader ledger is not `<claimed name> <events>`.
    #[error("{path}:{line}: not \"<claimed name> <events>\": {text:?}")]
    BadLedgerLine {
        /// The ledger.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// The line.
        text: String,
    },
    /// The reader ledger could not be written.
    #[error("writing {path}: {source}")]
    WriteLedger {
        /// The ledger.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The index JSON of a deleted file could not be removed.
    #[error(transparent)]
    RemoveIndex(#[from] crate::FuError),
    /// A claim whose reader's lease ran out could not be renamed back.
    #[error("taking back {path}: {source}")]
    TakeBack {
        /// The claim.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// The reader ledger's name in a run directory's `fu/` (it is not a claim's name).
pub const READER_LEDGER: &str = "readers.ledger";

/// What became of the files a broker granted in its run, as far as it knows (a BU's end of run
/// says it, as JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BrokerTally {
    /// Files granted.
    pub files_granted: u64,
    /// Files their readers deleted (processed without calling back), with the ledger's from
    /// before a restart.
    pub files_deleted: u64,
    /// The events of those files.
    pub events_deleted: u64,
    /// Files a Tessera FU declared done (its events are in its own ledger).
    pub files_done: u64,
    /// Grants taken back after their reader's lease ran out, or given back by the reader.
    pub claims_returned: u64,
    /// Grants still out.
    pub files_out: u64,
}

/// One reader: a process on a host.
type ReaderId = (String, u32);

#[derive(Debug)]
struct Reader {
    /// Its lumi section, as the broker's answers have moved it.
    ls: u32,
    /// When it last asked anything.
    seen: Instant,
}

#[derive(Debug)]
struct Grant {
    claim: ClaimedRawName,
    events: u64,
}

/// The broker's grants for one run.
#[derive(Debug)]
pub(super) struct Grants {
    run: u32,
    lease: Duration,
    readers: HashMap<ReaderId, Reader>,
    granted: BTreeMap<String, Grant>,
    tally: BrokerTally,
    /// Whether the ledger of this run was read (once, at the first sweep).
    ledger_read: bool,
}

impl Grants {
    /// No grants yet for run `run`; readers silent for `lease` lose theirs.
    pub(super) fn new(run: u32, lease: Duration) -> Self {
        Grants {
            run,
            lease,
            readers: HashMap::new(),
            granted: BTreeMap::new(),
            tally: BrokerTally::default(),
            ledger_read: false,
        }
    }

    /// The run the grants are of.
    pub(super) fn run(&self) -> u32 {
        self.run
    }

    /// The tally now.
    pub(super) fn tally(&self) -> BrokerTally {
        BrokerTally { files_out: self.granted.len() as u64, ..self.tally }
    }

    /// Reader `(host, pid)` asked something now: its lease starts again. Its lumi section.
    pub(super) fn seen(&mut self, host: &str, pid: u32, now: Instant) -> u32 {
        let reader = self.readers.entry((host.to_owned(), pid)).or_insert(Reader { ls: 0, seen: now });
        reader.seen = now;
        reader.ls
    }

    /// The reader was answered so that it stands in lumi section `ls` (it only moves forward).
    pub(super) fn moved(&mut self, host: &str, pid: u32, ls: u32) {
        if let Some(reader) = self.readers.get_mut(&(host.to_owned(), pid)) {
            reader.ls = reader.ls.max(ls);
        }
    }

    /// `claim` was granted; its events are read from its index JSON in `run_dir` now, while it
    /// is certainly there.
    pub(super) fn granted(&mut self, run_dir: &Path, claim: ClaimedRawName) {
        let events = index_events(run_dir, &claim).unwrap_or(0);
        self.tally.files_granted += 1;
        self.granted.insert(claim.to_string(), Grant { claim, events });
    }

    /// A Tessera FU declared `claim` done (`/done`) or gave it back (`/release`).
    pub(super) fn ended(&mut self, claim: &ClaimedRawName, done: bool) {
        if self.granted.remove(&claim.to_string()).is_some() {
            if done {
                self.tally.files_done += 1;
            } else {
                self.tally.claims_returned += 1;
            }
        }
    }

    /// Looks at every grant in `run_dir` (see the module's documentation); returns what it
    /// did that an operator should know (claims taken back), or the error that kept it from
    /// recording a deleted file.
    pub(super) fn sweep(&mut self, run_dir: &Path, now: Instant) -> Result<Vec<String>, SweepError> {
        let ledger = run_dir.join(names::FU_DIR).join(READER_LEDGER);
        if !self.ledger_read {
            self.ledger_read = true;
            let (files, events) = read_ledger(&ledger)?;
            self.tally.files_deleted += files;
            self.tally.events_deleted += events;
        }
        let mut said = Vec::new();
        let names: Vec<String> = self.granted.keys().cloned().collect();
        for name in names {
            let grant = &self.granted[&name];
            let claimed = run_dir.join(grant.claim.path());
            if fs::symlink_metadata(&claimed).is_err() {
                append_ledger(&ledger, &name, grant.events)?;
                if let Some(json) = grant.claim.raw().index_json() {
                    remove_if_present(&run_dir.join(json.to_string()))?;
                }
                self.tally.files_deleted += 1;
                self.tally.events_deleted += grant.events;
                self.granted.remove(&name);
                continue;
            }
            let reader = (grant.claim.host.clone(), grant.claim.pid);
            let silent = self.readers.get(&reader).is_none_or(|r| now.duration_since(r.seen) > self.lease);
            if silent {
                let raw = run_dir.join(grant.claim.raw().to_string());
                match fs::rename(&claimed, &raw) {
                    Ok(()) => said.push(format!(
                        "took back {} from {} pid {}: it asked nothing for {:?} (its lease)",
                        grant.claim.raw(),
                        grant.claim.host,
                        grant.claim.pid,
                        self.lease
                    )),
                    // Deleted meanwhile: the next sweep counts it.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(source) => return Err(SweepError::TakeBack { path: claimed, source }),
                }
                self.tally.claims_returned += 1;
                self.granted.remove(&name);
            }
        }
        // Readers without grants that have been silent for the lease are forgotten.
        let lease = self.lease;
        self.readers.retain(|_, r| now.duration_since(r.seen) <= lease);
        Ok(said)
    }
}

/// The events of a claimed file, from its index JSON.
fn index_events(run_dir: &Path, claim: &ClaimedRawName) -> Option<u64> {
    let json = claim.raw().index_json()?;
    let text = fs::read_to_string(run_dir.join(json.to_string())).ok()?;
    IndexDoc::parse(&text).ok().map(|doc| doc.events)
}

/// The files and events a reader ledger records (none if there is no ledger).
fn read_ledger(path: &Path) -> Result<(u64, u64), SweepError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(source) => return Err(SweepError::ReadLedger { path: path.to_owned(), source }),
    };
    let (mut files, mut events) = (0, 0);
    for (i, line) in text.lines().enumerate() {
        let n = line
            .split_once(' ')
            .and_then(|(_, n)| n.parse::<u64>().ok())
            .ok_or_else(|| SweepError::BadLedgerLine { path: path.to_owned(), line: i + 1, text: line.to_owned() })?;
        files += 1;
        events += n;
    }
    Ok((files, events))
}

/// Appends a line to a reader ledger.
fn append_ledger(path: &Path, name: &str, events: u64) -> Result<(), SweepError> {
    let write = |source| SweepError::WriteLedger { path: path.to_owned(), source };
    let mut file = fs::OpenOptions::new().create(true).append(true).open(path).map_err(write)?;
    file.write_all(format!("{name} {events}\n").as_bytes()).map_err(write)
}
