//! An FU process's id in its output directory, and whether the process behind an id still runs.
//!
//! An FU names its claims and its outputs by a number, `pidPPPPP`. On one host that number can
//! be the process id, and `/proc` tells whether it runs; but processes in containers each have a
//! process-id namespace of their own, so two FUs of one BU in two pods may both be process 1, and
//! a merger in a third pod sees neither in its `/proc`. So the number is registered where every
//! process sharing the output directory sees it: `instances/pidPPPPP.lock` under the output run
//! directory, created by the FU (never reused within the run, so no output of a finished
//! process is ever named again) and locked (`flock`) for the process's life. The kernel drops the
//! lock when the process ends however it ends, and the lock holds across namespaces and
//! containers on one host (and on network file systems that support `flock`).
//!
//! Whether id `P` runs: its lock is held. A process that finds it free holds it itself while it
//! finishes what `P` left (`FuOutputDir::finish_dead`, in the output module above this one),
//! so no new process can take `P` meanwhile. An id without a registration (a process that does
//! not register, such as a reader) is judged by `/proc`, as before.

use crate::claim::process_alive;
use crate::{FuError, io_error};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The directory of registered ids, in an output run directory (made with it).
pub const INSTANCES_DIR: &str = "instances";

/// The id a process that claims nothing (a micro merger) gives the BU: no FU's, since process
/// ids start at 1.
pub const NON_FU_ID: u32 = 0;

/// Linux's largest possible process id (`PID_MAX_LIMIT` on 64-bit): an FU whose own process id
/// is taken takes an id above it, which no process on any host has.
const PID_LIMIT: u32 = 4_194_304;

/// Ids above [`PID_LIMIT`] tried before giving up: one per FU incarnation of the run on the
/// node whose process id was taken.
const SPARE_IDS: u32 = 100_000;

/// The id of a running FU process, registered and held in its output run directory.
#[derive(Debug)]
pub struct Instance {
    id: u32,
    /// Held locked for the process's life; dropping it ends the registration.
    _lock: File,
}

/// What holds a dead process's id, locked, while its work is finished.
#[derive(Debug)]
pub struct DeadId {
    _lock: File,
}

fn lock_path(run_dir: &Path, id: u32) -> PathBuf {
    run_dir.join(INSTANCES_DIR).join(format!("pid{id:05}.lock"))
}

impl Instance {
    /// Registers this process in the output run directory `run_dir` under `preferred` (its
    /// process id) if no process of the run has had that id there, or else under the first free
    /// id above Linux's process-id limit.
    pub fn register(run_dir: &Path, preferred: u32) -> Result<Instance, FuError> {
        let spares = (1..=SPARE_IDS).map(|n| PID_LIMIT + n);
        for id in std::iter::once(preferred).filter(|&p| p != NON_FU_ID).chain(spares) {
            let path = lock_path(run_dir, id);
            match OpenOptions::new().read(true).write(true).create_new(true).open(&path) {
                Ok(mut file) => {
                    // A process judging the id may hold the lock for a moment: this id has no
                    // history, so it finds nothing to finish.
                    file.lock().map_err(io_error("locking", &path))?;
                    writeln!(file, "fu {}", std::process::id()).map_err(io_error("writing", &path))?;
                    return Ok(Instance { id, _lock: file });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_error("creating", &path)(e)),
            }
        }
        Err(FuError::Bookkeeping {
            path: run_dir.join(INSTANCES_DIR),
            problem: format!("every id this FU may take is used ({SPARE_IDS} above {PID_LIMIT}): start a new run"),
        })
    }

    /// The id, written into the process's claimed and output file names.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Whether the process of id `id` has ended, for the processes sharing the output run directory
/// `run_dir`: if so, what holds the id while its work is finished; `None` while it runs.
pub fn dead(run_dir: &Path, id: u32) -> Result<Option<DeadId>, FuError> {
    let path = lock_path(run_dir, id);
    // Created if absent, so that no FU registers the id while its claims are judged.
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_error("opening", &path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(io_error("locking", &path)(e)),
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io_error("reading", &path))?;
    if text.is_empty() && process_alive(id) {
        // Never registered: a process of this host that does not register, judged by `/proc`.
        return Ok(None);
    }
    Ok(Some(DeadId { _lock: file }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_id_runs_until_its_process_lets_it_go() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        std::fs::create_dir(dir.join(INSTANCES_DIR)).unwrap();
        let fu = Instance::register(&dir, 4242).unwrap();
        assert_eq!(fu.id(), 4242);
        assert!(dead(&dir, 4242).unwrap().is_none(), "a held id runs");
        drop(fu);
        let held = dead(&dir, 4242).unwrap().expect("a released id is dead");
        // While its work is finished nobody else judges it dead again, nor takes it.
        assert!(dead(&dir, 4242).unwrap().is_none());
        drop(held);
        assert!(dead(&dir, 4242).unwrap().is_some());
    }

    #[test]
    fn processes_with_the_same_process_id_get_different_ids() {
        // Two FUs in two containers, both process 1.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        std::fs::create_dir(dir.join(INSTANCES_DIR)).unwrap();
        let first = Instance::register(&dir, 1).unwrap();
        let second = Instance::register(&dir, 1).unwrap();
        assert_eq!(first.id(), 1);
        assert_eq!(second.id(), PID_LIMIT + 1);
        // An id is never reused within the run, even once its process has ended.
        drop(first);
        let third = Instance::register(&dir, 1).unwrap();
        assert_eq!(third.id(), PID_LIMIT + 2);
        assert!(dead(&dir, 1).unwrap().is_some());
        assert!(dead(&dir, PID_LIMIT + 1).unwrap().is_none());
    }

    #[test]
    fn an_id_nobody_registered_is_judged_by_proc_and_then_cannot_be_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        std::fs::create_dir(dir.join(INSTANCES_DIR)).unwrap();
        // This test's own process runs; it registered nothing.
        assert!(dead(&dir, std::process::id()).unwrap().is_none());
        // A process id that no process has (above the limit) is dead.
        assert!(dead(&dir, PID_LIMIT + 7).unwrap().is_some());
        // Judging it made the id used: an FU preferring it takes another.
        let fu = Instance::register(&dir, PID_LIMIT + 7).unwrap();
        assert_eq!(fu.id(), PID_LIMIT + 1);
    }
}
