//! An FU (or micro merger) on a host without the BU's directory: the [`FileSource`] that claims,
//! reads and removes files through the BU's HTTP file broker ([`crate::broker`]), and publishes
//! the FU's resource summary through it.

use crate::FuError;
use crate::broker::{BrokerClient, BrokerError, PopAnswer, RemoteRunState};
use crate::claim::{BuRunState, ClaimedFile, FileSource};
use crate::output::write_atomically;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_formats::bookkeeping::IndexDoc;
use tessera_formats::names::ClaimedRawName;
use tessera_rundir::resources::ResourceSummary;

/// The broker's files as a [`FileSource`].
#[derive(Debug, Clone)]
pub struct BrokerSource {
    client: BrokerClient,
    host: String,
    pid: u32,
}

fn broker_error(e: BrokerError) -> FuError {
    FuError::Broker(e.to_string())
}

impl BrokerSource {
    /// Connects to the broker at `addr` for process `pid` in run `run`, and learns the host
    /// name the broker gives this host's claims. Keeps trying for `patience` while the broker
    /// cannot be reached (it may start after the FU).
    pub fn connect(addr: SocketAddr, run: u32, pid: u32, patience: Duration) -> Result<Self, FuError> {
        let client = BrokerClient::new(addr, run, pid).with_any_ls();
        let started = Instant::now();
        loop {
            match client.state() {
                Ok(RemoteRunState::Starting { host } | RemoteRunState::Running { host, .. }) => {
                    return Ok(BrokerSource { client, host, pid });
                }
                Ok(RemoteRunState::NoRun { current_run }) => {
                    return Err(FuError::Broker(format!(
                        "the broker at {addr} serves run {current_run}, not run {run}"
                    )));
                }
                Err(BrokerError::Io { .. }) if started.elapsed() < patience => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(broker_error(e)),
            }
        }
    }
}

/// Whether a broker error means "no such claim": a request repeated after it succeeded.
fn gone(e: &BrokerError) -> bool {
    matches!(e, BrokerError::Refused { status: 404, .. })
}

impl FileSource for BrokerSource {
    fn host(&self) -> &str {
        &self.host
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn state(&self) -> Result<Option<BuRunState>, FuError> {
        match self.client.state().map_err(broker_error)? {
            RemoteRunState::Running { state, .. } => Ok(Some(state)),
            RemoteRunState::Starting { .. } => Ok(None),
            RemoteRunState::NoRun { current_run } => {
                Err(FuError::Broker(format!("the broker now serves run {current_run}")))
            }
        }
    }

    fn claim(&self, state: &BuRunState, spool: &Path, buf: &mut Vec<u8>) -> Result<Option<ClaimedFile>, FuError> {
        if state.unclaimed.is_empty() {
            return Ok(None);
        }
        let name = match self.client.popfile().map_err(broker_error)? {
            PopAnswer::Ready { file, .. } => file,
            _ => return Ok(None),
        };
        *buf = self.client.fetch(&name).map_err(broker_error)?;
        let indexed_events = self
            .client
            .fetch_index(&name)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|text| IndexDoc::parse(&text).ok())
            .map(|doc| doc.events);
        // A local copy, for an external HLT that reads the file itself; removed once processed.
        let path = spool.join(name.to_string());
        write_atomically(&path, buf)?;
        Ok(Some(ClaimedFile { name, path, indexed_events }))
    }

    fn remove_processed(&self, claim: &ClaimedRawName) -> Result<(), FuError> {
        match self.client.done(claim) {
            Err(e) if !gone(&e) => Err(broker_error(e)),
            _ => Ok(()),
        }
    }

    fn still_held(&self, claims: &[ClaimedRawName]) -> Result<bool, FuError> {
        match self.client.state().map_err(broker_error)? {
            RemoteRunState::Running { state, .. } => Ok(claims.iter().all(|c| state.claimed.contains(c))),
            _ => Ok(false),
        }
    }

    fn give_back(&self, claim: &ClaimedRawName) -> Result<bool, FuError> {
        match self.client.release(claim) {
            Ok(_) => Ok(true),
            Err(e) if gone(&e) => Ok(false),
            Err(e) => Err(broker_error(e)),
        }
    }

    fn publish_summary(&self, summary: &ResourceSummary) -> Result<(), FuError> {
        self.client.publish_summary(summary).map_err(broker_error)
    }

    fn remove_summary(&self) -> Result<(), FuError> {
        self.client.remove_summary().map_err(broker_error)
    }
}

/// How an FU or micro merger reaches its BU's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuAccess {
    /// The BU directory (holding `runRRRRRR/`), local or on a shared file system.
    Directory(std::path::PathBuf),
    /// The BU's HTTP file broker.
    Broker(SocketAddr),
}

impl BuAccess {
    /// The source of run `run`'s files for process `pid` on `host` (the broker names remote
    /// hosts itself); a broker is waited for up to `patience`.
    pub fn open(&self, run: u32, host: &str, pid: u32, patience: Duration) -> Result<Box<dyn FileSource>, FuError> {
        Ok(match self {
            BuAccess::Directory(dir) => Box::new(crate::claim::Claimer::new(dir, run, host, pid)?),
            BuAccess::Broker(addr) => Box::new(BrokerSource::connect(*addr, run, pid, patience)?),
        })
    }
}
