//! The BU's file broker (docs/formats.md §7 (c) and §16): a small HTTP/1.1 server that hands a BU's raw files
//! to FUs without a shared file system and takes their resource summaries, and [`BrokerClient`],
//! its client.
//!
//! The broker claims files for a remote FU exactly as a local FU claims them (docs/formats.md
//! §7 (a)): by an
//! atomic rename of `runRRRRRR_lsLLLL_indexIIIIII.raw` into
//! `fu/runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw`, through a [`Claimer`](crate::claim::Claimer) with the remote
//! FU's host and pid. Local FUs and remote FUs can therefore share one run directory; a file is
//! handed out once, whoever asks.
//!
//! # Endpoints
//!
//! Every query parameter is a decimal number or a name, percent-encoded as in a URL; an unknown
//! or repeated parameter is a bad query. The broker serves one run at a time
//! ([`BrokerConfig::run`], [`Broker::set_run`]).
//!
//! | request | answer |
//! |---|---|
//! | `GET /popfile?runnumber=R&pid=P[&host=H][&stopls=L]` | claims the next file for process `P` on host `H`: a `key=value` document (below) |
//! | `GET /state?runnumber=R[&host=H]` | the run directory's listing: `state` = `STARTING` \| `RUNNING` \| `ENDED` \| `NORUN`, `host` (the name `H` claims under), `endedls` and `filels` (lumi sections with an EoLS, and with files left), `unclaimed` (`ls:index` pairs) and `claimed` (`H`'s claims), comma-separated |
//! | `GET /file?runnumber=R&name=N` | the bytes of the claimed file `N` (`application/octet-stream`) |
//! | `GET /index?runnumber=R&name=N` | the index JSON of the claimed file `N` (`application/json`) |
//! | `POST /done?runnumber=R&name=N` | the FU has published its outputs for `N`: the claim and its index JSON are removed |
//! | `POST /release?runnumber=R&name=N` | gives the claim `N` back to the pool (renamed back to its BU name) |
//! | `POST /summary?runnumber=R[&host=H]` | the body, a [`ResourceSummary`] in JSON of run `R` and host `H`, is written where a local FU's goes ([`write_summary`](tessera_rundir::resources::write_summary)), stamped with the time of receipt |
//! | `DELETE /summary?runnumber=R&pid=P[&host=H]` | removes the summary of process `P` on host `H`: the FU is leaving |
//!
//! `N` is a claimed file's name, `runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw`, with or
//! without the leading `fu/`; anything else (a path, `..`, another run's file) is refused with
//! 400. `H` defaults to the peer's IP address with `.` and `:` replaced by `-` (`10-0-0-2`); it
//! must be a valid host token (ASCII alphanumeric, `-`, `.`) and may not be the BU's own host
//! name, since local FUs give back the claims of dead processes of their own host.
//!
//! `/popfile` speaks the dialect of CMS's HLT (docs/formats.md §16): every answer has
//! `version=2`, `runnumber` (the run asked for), `state` and `lasteols`; `READY` names the claim
//! by its stem (`file`) and folder (`fileprefix=fu/`). Which answer a reader gets is decided in
//! its `popfile` module: the lowest unclaimed file at or above its lumi section, never an older one, and
//! `EOR` at its `stopls`. What became of each granted file (deleted by its reader, declared done,
//! taken back after its reader's lease) is kept in its `grants` module.
//!
//! A summary's `updated_unix_ms` is replaced by the BU host's clock on receipt, so that the BU
//! judges its age by one clock whatever the FU host's says. A body that is not a summary, or a
//! summary of another run or host, or with a negative figure, is refused with 400; `R` must be
//! the run served (404 otherwise), as for `/done` and `/release`.
//!
//! The other endpoints answer 200 on success (`/done` and `/release` with a `key=value`
//! document holding `version`, `runnumber`, `file` and `result` = `removed` | `released`;
//! `/summary` with `version`, `runnumber`, `pid` and `result` = `published` | `removed` |
//! `absent`); on failure 400 (bad query), 404 (wrong run, no such claim, unknown path), 405
//! (wrong method), 409 (`/release` when the BU name is taken again), 413/414/431 (request too
//! large), 501 (chunked body), 503 (too many connections) or 500, each with a `state=ERROR`
//! document. Every answer has a `Content-Length`. A request that is not HTTP/1.x, or whose head
//! is malformed or over its bounds, gets hyper's answer without a document: 400, or 431 for a
//! head over its bounds.
//!
//! If a `READY` answer is dropped before the connection takes its body (the client went away
//! while the claim was made), the broker gives the claim back at once; an answer lost after
//! that leaves the claim in `fu/` until someone releases it or the reader's lease runs out.
//!
//! # Limits
//!
//! Requests: a head of at most [`MAX_REQUEST_HEAD_BYTES`] and [`MAX_REQUEST_HEADERS`] header
//! lines, a body of at most [`MAX_REQUEST_BODY_BYTES`] (read by `POST /summary`, ignored
//! elsewhere), no chunked bodies.
//! The server is axum on hyper and tokio (its `server` module says how connections, blocking
//! work and waits are bounded): at most [`BrokerConfig::max_connections`] connections at once
//! (others get 503); HTTP/1.1 connections stay open until the client closes them,
//! `Connection: close`, or [`BrokerConfig::idle_timeout`] passes without a request.

mod client;
mod endpoints;
mod grants;
mod http;
mod popfile;
mod server;

pub use client::{BrokerClient, BrokerError, PopAnswer, RemoteRunState};
pub use endpoints::peer_host_name;
pub use grants::{BrokerTally, READER_LEDGER};

use crate::claim::{BuRunState, host_name};
use endpoints::Refusal;
use grants::Grants;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use tessera_formats::names;
use tessera_rundir::resources::ResourceSummary;
use tokio::sync::watch;

/// The version of the `key=value` answers: 2, in which `READY` names the claimed file by its
/// stem (`file`) and folder (`fileprefix`, `fu/`), and the reader takes its event count from
/// the file's header.
pub const PROTOCOL_VERSION: u32 = 2;
/// Bytes a request's line and headers may take, line ends included.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8192;
/// Header lines a request may have.
pub const MAX_REQUEST_HEADERS: usize = 64;
/// Bytes of request body the broker reads (a resource summary takes a few hundred); a longer
/// one gets 413.
pub const MAX_REQUEST_BODY_BYTES: u64 = 4096;

/// How many times `/popfile` lists the directory again when other FUs took every candidate.
const CLAIM_ATTEMPTS: usize = 8;
/// Threads of the broker's runtime that serve connections; the endpoints' file work runs on
/// its blocking pool.
const WORKER_THREADS: usize = 2;
/// Threads of that blocking pool at most, each with a small stack (an endpoint lists, renames
/// or opens a few files).
const BLOCKING_THREADS: usize = 64;
/// Stack of each of the runtime's threads.
const THREAD_STACK_BYTES: usize = 256 << 10;
/// How long stopping waits for endpoints still running on the blocking pool.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// What a broker serves and how.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The BU directory holding the run directories.
    pub bu_dir: PathBuf,
    /// The run served at start.
    pub run: u32,
    /// Address to listen on; loopback with a free port by default.
    pub listen: SocketAddr,
    /// Connections served at once; more are answered 503 and closed. A BU's
    /// own farm may hold hundreds of keep-alive connections, one per HLT process.
    pub max_connections: usize,
    /// How long a keep-alive connection may stay idle between requests (a reader asks again
    /// after each file, which may take minutes).
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive once its head has.
    pub read_timeout: Duration,
    /// How long writing an answer may block.
    pub write_timeout: Duration,
    /// A reader that asks nothing for this long loses its granted files: they go back to the
    /// pool for others (docs/formats.md §16).
    pub lease: Duration,
}

impl BrokerConfig {
    /// Serves run `run` of `bu_dir` on `127.0.0.1:0`: 2048 connections, idle for at most 10
    /// minutes, 10 s to read a request's body, 30 s to write a block of an answer, a 5-minute lease.
    pub fn new(bu_dir: impl Into<PathBuf>, run: u32) -> Self {
        BrokerConfig {
            bu_dir: bu_dir.into(),
            run,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            max_connections: 2048,
            idle_timeout: Duration::from_secs(600),
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            lease: Duration::from_secs(300),
        }
    }
}

/// What the connections share.
#[derive(Debug)]
struct Shared {
    bu_dir: PathBuf,
    run: AtomicU32,
    /// Whether the broker is stopping: it tells the connections, and answers keep none open.
    stop: watch::Sender<bool>,
    max_connections: usize,
    idle_timeout: Duration,
    read_timeout: Duration,
    write_timeout: Duration,
    lease: Duration,
    /// The BU's host name: remote FUs may not claim under it.
    local_host: String,
    /// The grants of the run served.
    grants: Mutex<Grants>,
    /// The run directory's listing as last read: `/popfile` decides on it rather than reading
    /// the directory for every request (see [`Shared::on_listing`]).
    listing: Mutex<Option<Listing>>,
}

/// A listing of a run directory and when it was read.
#[derive(Debug)]
struct Listing {
    run: u32,
    read: Instant,
    state: BuRunState,
}

/// How old a listing `/popfile` decides on may be: a file published since is handed out a few
/// milliseconds later, and a claim that loses its race reads the directory again.
const LISTING_MAX_AGE: Duration = Duration::from_millis(5);

impl Shared {
    /// Whether [`Broker::stop`] was called.
    fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Calls `f` with the listing of run `run` (read through `claimer`), read again if it is
    /// older than [`LISTING_MAX_AGE`], of another run, or `fresh` is asked for.
    fn on_listing<T>(
        &self,
        claimer: &crate::claim::Claimer,
        run: u32,
        fresh: bool,
        f: impl FnOnce(&BuRunState) -> T,
    ) -> Result<T, crate::FuError> {
        let mut listing = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = listing.as_ref().is_none_or(|l| l.run != run || l.read.elapsed() > LISTING_MAX_AGE);
        if fresh || stale {
            *listing = Some(Listing { run, read: Instant::now(), state: claimer.listing()? });
        }
        Ok(f(&listing.as_ref().expect("read above").state))
    }

    /// File `(ls, index)` of run `run` was just claimed: out of the listing's unclaimed files.
    fn claimed(&self, run: u32, ls: u32, index: u32) {
        let mut listing = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = listing.as_mut().filter(|l| l.run == run) {
            l.state.unclaimed.retain(|&f| f != (ls, index));
        }
    }

    /// File `(ls, index)` of run `run` was just given back: among the listing's unclaimed files
    /// again, in order.
    fn released(&self, run: u32, ls: u32, index: u32) {
        let mut listing = self.listing.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = listing.as_mut().filter(|l| l.run == run)
            && let Err(at) = l.state.unclaimed.binary_search(&(ls, index))
        {
            l.state.unclaimed.insert(at, (ls, index));
        }
    }

    /// The grants of the run served now (those of a run served before are dropped).
    fn grants(&self) -> MutexGuard<'_, Grants> {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        let run = self.run.load(Ordering::Relaxed);
        if grants.run() != run {
            *grants = Grants::new(run, self.lease);
        }
        grants
    }

    fn run_dir(&self, run: u32) -> PathBuf {
        self.bu_dir.join(names::run_dir_name(run))
    }
}

/// A running broker. Dropping it stops it and waits for its threads.
#[derive(Debug)]
pub struct Broker {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
}

impl Broker {
    /// Binds `config.listen` and starts serving on a tokio runtime of its own, on threads of
    /// its own.
    pub fn start(config: BrokerConfig) -> io::Result<Broker> {
        let listener = TcpListener::bind(config.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .max_blocking_threads(BLOCKING_THREADS)
            .thread_stack_size(THREAD_STACK_BYTES)
            .thread_name("broker")
            .enable_io()
            .enable_time()
            .build()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let (stop, stopped) = watch::channel(false);
        let shared = Arc::new(Shared {
            bu_dir: config.bu_dir,
            run: AtomicU32::new(config.run),
            stop,
            max_connections: config.max_connections.max(1),
            idle_timeout: config.idle_timeout,
            read_timeout: config.read_timeout,
            write_timeout: config.write_timeout,
            lease: config.lease,
            local_host: host_name(),
            grants: Mutex::new(Grants::new(config.run, config.lease)),
            listing: Mutex::new(None),
        });
        let serving = Arc::clone(&shared);
        let server = thread::Builder::new().name("broker".into()).spawn(move || {
            runtime.block_on(server::serve(listener, serving, stopped));
            runtime.shutdown_timeout(SHUTDOWN_TIMEOUT);
        })?;
        Ok(Broker { addr, shared, server: Some(server) })
    }

    /// The address the broker listens on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The run served.
    pub fn run(&self) -> u32 {
        self.shared.run.load(Ordering::Relaxed)
    }

    /// What became of the files granted in the run served (see [`BrokerTally`]).
    pub fn tally(&self) -> BrokerTally {
        self.shared.grants().tally()
    }

    /// Serves run `run` from now on; requests for any other run get `NORUN`.
    pub fn set_run(&self, run: u32) {
        self.shared.run.store(run, Ordering::Relaxed);
    }

    /// Asks the broker to stop: it accepts no more connections, and each open connection ends
    /// after the answer it is writing.
    pub fn stop(&self) {
        self.shared.stop.send_replace(true);
    }

    /// Whether [`Broker::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.shared.is_stopping()
    }

    /// Waits until the broker has stopped (after [`Broker::stop`]) and its threads are gone.
    pub fn join(mut self) -> thread::Result<()> {
        self.server.take().map_or(Ok(()), JoinHandle::join)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.stop();
            let _ = server.join();
        }
    }
}

/// Looks at the grants of the run served (see [`grants`]); says what it did.
fn sweep(shared: &Shared) {
    let run_dir = shared.run_dir(shared.run.load(Ordering::Relaxed));
    if !run_dir.is_dir() {
        return;
    }
    match shared.grants().sweep(&run_dir, Instant::now()) {
        Ok(said) => {
            for line in said {
                tracing::warn!("file broker of {}: {line}", run_dir.display());
            }
        }
        Err(e) => tracing::error!("file broker of {}: {e}", run_dir.display()),
    }
}
