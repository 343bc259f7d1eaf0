//! Claiming a BU's raw files (docs/formats.md §7 (a)): an FU takes a published raw file by renaming
//! it into `fu/<stem>_<host>_pid<pid>.raw`; a failed rename means another FU won. Claims of an
//! FU process that died are given back to the pool by any FU (or merger) on the same host.

use crate::{FuError, io_error};
use std::collections::BTreeSet;
use std::fs;
use std::fs::{File, OpenOptions};
use std::io;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use tessera_formats::bookkeeping::{EolsDoc, IndexDoc};
use tessera_formats::names::{self, BuFileName, ClaimedRawName, FuLock};
use tessera_rundir::resources::{ResourceSummary, summary_path, write_summary};

/// Turns for the `fu.lock` lock among the threads of this process.
static FU_LOCK_TURN: Mutex<()> = Mutex::new(());

/// What the BU's run directory says about the run, from one listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuRunState {
    /// Published raw files not claimed yet (their index JSON exists), lowest (LS, index) first.
    pub unclaimed: Vec<(u32, u32)>,
    /// Claimed raw files, by every FU.
    pub claimed: Vec<ClaimedRawName>,
    /// Lumi sections whose EoLS is written.
    pub ended_lumi_sections: BTreeSet<u32>,
    /// Lumi sections that still have raw files or index JSON in the directory, claimed or not.
    pub lumi_sections_with_files: BTreeSet<u32>,
    /// Whether the EoR is written.
    pub ended: bool,
}

impl BuRunState {
    /// Whether lumi section `ls` is over at the BU and every one of its files has been processed
    /// and removed: all outputs of every FU for it are published (FUs remove their input only
    /// after publishing their outputs).
    pub fn drained(&self, ls: u32) -> bool {
        self.ended_lumi_sections.contains(&ls) && !self.lumi_sections_with_files.contains(&ls)
    }
}

/// A raw file this FU holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The name it has under `fu/`.
    pub name: ClaimedRawName,
    /// Its path.
    pub path: PathBuf,
}

/// One FU process's view of a BU run directory.
#[derive(Debug, Clone)]
pub struct Claimer {
    /// The BU directory, where resource summaries go beside the run directories.
    bu_dir: PathBuf,
    run_dir: PathBuf,
    run: u32,
    host: String,
    pid: u32,
}

impl Claimer {
    /// The claimer of process `pid` on `host` for run `run` in `bu_dir`; creates `fu/`.
    pub fn new(bu_dir: &Path, run: u32, host: &str, pid: u32) -> Result<Self, FuError> {
        names::validate_producer_name(host).map_err(FuError::Format)?;
        let run_dir = bu_dir.join(names::run_dir_name(run));
        let fu_dir = run_dir.join(names::FU_DIR);
        if run_dir.is_dir() {
            fs::create_dir_all(&fu_dir).map_err(io_error("creating", &fu_dir))?;
        }
        Ok(Claimer { bu_dir: bu_dir.to_owned(), run_dir, run, host: host.to_owned(), pid })
    }

    /// The BU's run directory.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Lists the run directory and its `fu/`. A run directory that does not exist yet reads
    /// as an empty state (the BU has not started).
    pub fn listing(&self) -> Result<BuRunState, FuError> {
        let mut state = BuRunState::default();
        let mut raw = BTreeSet::new();
        let mut indexed = BTreeSet::new();
        let entries = match fs::read_dir(&self.run_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(state),
            Err(e) => return Err(io_error("listing", &self.run_dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_error("listing", &self.run_dir))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            match BuFileName::parse(&name) {
                Ok(BuFileName::Raw { run, ls, index }) if run == self.run => {
                    raw.insert((ls, index));
                    state.lumi_sections_with_files.insert(ls);
                }
                Ok(BuFileName::IndexJson { run, ls, index }) if run == self.run => {
                    indexed.insert((ls, index));
                    state.lumi_sections_with_files.insert(ls);
                }
                Ok(BuFileName::EndOfLumi { run, ls }) if run == self.run => {
                    state.ended_lumi_sections.insert(ls);
                }
                Ok(BuFileName::EndOfRun { run }) if run == self.run => state.ended = true,
                _ => {}
            }
        }
        state.unclaimed = raw.intersection(&indexed).copied().collect();
        let fu_dir = self.run_dir.join(names::FU_DIR);
        match fs::read_dir(&fu_dir) {
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(io_error("listing", &fu_dir))?;
                    if let Some(claim) = entry.file_name().to_str().and_then(|n| ClaimedRawName::parse(n).ok())
                        && claim.run == self.run
                    {
                        state.lumi_sections_with_files.insert(claim.ls);
                        state.claimed.push(claim);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("listing", &fu_dir)(e)),
        }
        state.claimed.sort_by_key(|c| (c.ls, c.index, c.pid));
        Ok(state)
    }

    /// Claims the first of `candidates` that no other FU takes first.
    ///
    /// It does so holding the `fcntl` lock of `fu.lock` (docs/formats.md §7 (b)), and moves the
    /// lock's "next LS, next index" past the file it claims and past every lumi section the BU
    /// has ended and whose files are all taken, so that FUs that follow `fu.lock` see the run as
    /// Tessera's FUs take it.
    pub fn claim_first(&self, candidates: &[(u32, u32)]) -> Result<Option<Claim>, FuError> {
        // fcntl locks belong to a process: threads of one (the broker's) take turns here.
        let _turn = FU_LOCK_TURN.lock().unwrap_or_else(PoisonError::into_inner);
        let lock_path = self.run_dir.join(names::FU_LOCK);
        let mut lock = match OpenOptions::new().read(true).write(true).open(&lock_path) {
            Ok(file) => Some(file),
            // A run directory without one (not Tessera's BU): claims by rename still exclude.
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_error("opening", &lock_path)(e)),
        };
        let mut pointer = None;
        let mut old_len = 0;
        if let Some(file) = &mut lock {
            rustix::fs::fcntl_lock(&*file, rustix::fs::FlockOperation::LockExclusive)
                .map_err(|e| io_error("locking", &lock_path)(e.into()))?;
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(io_error("reading", &lock_path))?;
            // A process killed while rewriting it can leave it unreadable: start again from the
            // run's first file; the walk below brings it past what is taken.
            pointer = Some(FuLock::parse(&text).unwrap_or_default());
            old_len = text.len();
        }
        let mut claimed = None;
        for &(ls, index) in candidates {
            let from = self.run_dir.join(BuFileName::Raw { run: self.run, ls, index }.to_string());
            let name = ClaimedRawName { run: self.run, ls, index, host: self.host.clone(), pid: self.pid };
            let to = self.run_dir.join(name.path());
            match fs::rename(&from, &to) {
                Ok(()) => {
                    claimed = Some(Claim { name, path: to });
                    break;
                }
                // Another FU was faster.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_error("claiming", &from)(e)),
            }
        }
        if let (Some(file), Some(old)) = (&mut lock, pointer) {
            let mut next = old;
            if let Some(c) = &claimed
                && (c.name.ls, c.name.index) >= (next.next_ls, next.next_index)
            {
                next = FuLock { next_ls: c.name.ls, next_index: c.name.index + 1 };
            }
            while self.lumi_section_taken(next) {
                next = FuLock { next_ls: next.next_ls + 1, next_index: 0 };
            }
            if next != old {
                // Overwrite (padded with newlines to the old length), then cut: a process killed
                // between the two leaves either the new pointer or an unreadable file that the
                // next claimer mends, never an empty file or a wrong number.
                let text = next.to_string();
                let mut padded = text.clone().into_bytes();
                padded.resize(padded.len().max(old_len), b'\n');
                file.write_all_at(&padded, 0).map_err(io_error("writing", &lock_path))?;
                file.set_len(text.len() as u64).map_err(io_error("writing", &lock_path))?;
            }
        }
        // Closing the file releases the lock.
        Ok(claimed)
    }

    /// Whether the BU has ended `at`'s lumi section with no file at or after `at`'s index.
    fn lumi_section_taken(&self, at: FuLock) -> bool {
        let eols = self.run_dir.join(BuFileName::EndOfLumi { run: self.run, ls: at.next_ls }.to_string());
        fs::read_to_string(eols)
            .ok()
            .and_then(|text| EolsDoc::parse(&text).ok())
            .is_some_and(|doc| doc.files <= u64::from(at.next_index))
    }
}

/// A raw file an FU has claimed (its bytes are in the buffer given to [`FileSource::claim`]).
#[derive(Debug, Clone)]
pub struct ClaimedFile {
    /// Its name under the BU's `fu/`.
    pub name: ClaimedRawName,
    /// A path where an external HLT can read it: the claim itself, or a local copy.
    pub path: PathBuf,
    /// Its events as the BU's index JSON counts them, if it can be read.
    pub indexed_events: Option<u64>,
}

/// Where an FU or a micro merger gets the BU's raw files, and where an FU tells the BU of its
/// resources: the BU directory itself ([`Claimer`]), or the BU's HTTP file broker
/// ([`BrokerSource`](crate::remote::BrokerSource)).
pub trait FileSource {
    /// The host name claims are made under.
    fn host(&self) -> &str;

    /// The claiming process's id.
    fn pid(&self) -> u32;

    /// The run directory's state, or `None` while the BU has not started the run.
    fn state(&self) -> Result<Option<BuRunState>, FuError>;

    /// Claims the next file, if any, and reads it into `buf` (replacing what it held: one buffer
    /// serves every file, so that reading allocates no new memory); a copy that must be kept on
    /// local disk for an external HLT goes under `spool`.
    fn claim(&self, state: &BuRunState, spool: &Path, buf: &mut Vec<u8>) -> Result<Option<ClaimedFile>, FuError>;

    /// Removes a processed claim and its index JSON: only after the outputs that hold its
    /// events are published. A claim already removed is fine.
    fn remove_processed(&self, claim: &ClaimedRawName) -> Result<(), FuError>;

    /// Gives a claim back to the pool; false if it was gone (finished, or given back by
    /// another process), which is fine.
    fn give_back(&self, claim: &ClaimedRawName) -> Result<bool, FuError>;

    /// Whether every one of `claims` is still this process's: a broker takes back the files
    /// of a process silent for its lease, and outputs made from a file taken back must not be
    /// published (another process reads it again).
    fn still_held(&self, claims: &[ClaimedRawName]) -> Result<bool, FuError>;

    /// Publishes this process's resource summary where the BU reads it
    /// ([`resources`](tessera_rundir::resources)); `summary.host` is [`FileSource::host`].
    fn publish_summary(&self, summary: &ResourceSummary) -> Result<(), FuError>;

    /// Removes this process's resource summary: it is leaving. One already gone is fine.
    fn remove_summary(&self) -> Result<(), FuError>;
}

/// Reads the file at `path` into `buf`, replacing what it held. A buffer too small for the file
/// is replaced, not grown: growing one reallocates it, which copies all its old bytes, stale
/// as they are, and touches as many new pages; room to spare keeps a slightly larger file
/// from replacing it again.
fn read_into(path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut file = File::open(path)?;
    let len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
    buf.clear();
    if buf.capacity() <= len {
        *buf = Vec::with_capacity(len.saturating_add(len / 16).saturating_add(4096));
    }
    file.read_to_end(buf)?;
    Ok(())
}

impl FileSource for Claimer {
    fn host(&self) -> &str {
        &self.host
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn state(&self) -> Result<Option<BuRunState>, FuError> {
        if !self.run_dir.is_dir() {
            return Ok(None);
        }
        // The directory may have appeared after `Claimer::new`.
        let fu_dir = self.run_dir.join(names::FU_DIR);
        fs::create_dir_all(&fu_dir).map_err(io_error("creating", &fu_dir))?;
        self.listing().map(Some)
    }

    fn claim(&self, state: &BuRunState, _spool: &Path, buf: &mut Vec<u8>) -> Result<Option<ClaimedFile>, FuError> {
        let Some(claim) = self.claim_first(&state.unclaimed)? else { return Ok(None) };
        read_into(&claim.path, buf).map_err(io_error("reading", &claim.path))?;
        let index = claim.name.raw().index_json().map(|j| self.run_dir.join(j.to_string()));
        let indexed_events = index
            .and_then(|path| fs::read_to_string(path).ok())
            .and_then(|text| IndexDoc::parse(&text).ok())
            .map(|doc| doc.events);
        Ok(Some(ClaimedFile { name: claim.name, path: claim.path, indexed_events }))
    }

    fn remove_processed(&self, claim: &ClaimedRawName) -> Result<(), FuError> {
        remove_if_present(&self.run_dir.join(claim.path()))?;
        let index =
            self.run_dir.join(BuFileName::IndexJson { run: claim.run, ls: claim.ls, index: claim.index }.to_string());
        remove_if_present(&index)
    }

    fn still_held(&self, claims: &[ClaimedRawName]) -> Result<bool, FuError> {
        // Nothing takes a live local process's claims away; a claim gone is one not held.
        Ok(claims.iter().all(|c| fs::symlink_metadata(self.run_dir.join(c.path())).is_ok()))
    }

    fn give_back(&self, claim: &ClaimedRawName) -> Result<bool, FuError> {
        let from = self.run_dir.join(claim.path());
        let to = self.run_dir.join(claim.raw().to_string());
        match fs::rename(&from, &to) {
            Ok(()) => Ok(true),
            // Finished, or given back by another FU.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error("giving back", &from)(e)),
        }
    }

    fn publish_summary(&self, summary: &ResourceSummary) -> Result<(), FuError> {
        Ok(write_summary(&self.bu_dir, summary)?)
    }

    fn remove_summary(&self) -> Result<(), FuError> {
        remove_if_present(&summary_path(&self.bu_dir, &self.host, self.pid))
    }
}

/// Removes a file; one already gone is fine (another FU or an earlier attempt removed it).
pub(crate) fn remove_if_present(path: &Path) -> Result<(), FuError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("removing", path)(e)),
    }
}

/// Whether process `pid` on this host runs: it exists and is not a zombie (a child killed but
/// not yet reaped by its parent holds nothing any more).
pub fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may itself hold ')'.
        Ok(stat) => {
            stat.rsplit_once(')').is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
        }
        Err(_) => false,
    }
}

/// This host's name as FUs write it into claimed names: the kernel's host name, with any
/// character a name may not hold replaced by `-`.
pub fn host_name() -> String {
    let raw = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cleaned: String =
        raw.trim().chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '-' }).collect();
    if cleaned.is_empty() { "localhost".to_owned() } else { cleaned }
}
