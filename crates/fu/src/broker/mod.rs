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
//! large), 501 (chunked body), 503 (too many connections), 505 (not HTTP/1.x) or 500, each with
//! a `state=ERROR` document. Every answer has a `Content-Length`.
//!
//! If writing a `READY` answer fails, the broker gives the claim back at once; an answer lost
//! after the broker wrote it leaves the claim in `fu/` until someone releases it.
//!
//! # Limits
//!
//! Requests: a head of at most [`MAX_REQUEST_HEAD_BYTES`] and [`MAX_REQUEST_HEADERS`] header
//! lines, a body of at most [`MAX_REQUEST_BODY_BYTES`] (read by `POST /summary`, ignored
//! elsewhere), no chunked bodies.
//! One thread per connection, at most [`BrokerConfig::max_connections`] at once (others get
//! 503); HTTP/1.1 connections stay open until the client closes them, `Connection: close`, or
//! [`BrokerConfig::idle_timeout`] passes without a request.

mod client;
mod endpoints;
mod grants;
mod http;
mod popfile;

pub use client::{BrokerClient, BrokerError, PopAnswer, RemoteRunState};
pub use endpoints::peer_host_name;
pub use grants::{BrokerTally, READER_LEDGER};

use crate::claim::{BuRunState, host_name};
use endpoints::{Refusal, handle};
use grants::Grants;
use http::{Answer, RequestError, read_request};
use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};
use tessera_formats::names;
use tessera_rundir::resources::ResourceSummary;

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
/// How long the accepting thread sleeps when no connection is waiting.
const ACCEPT_POLL: Duration = Duration::from_millis(10);
/// How often the broker looks at its grants: files their readers deleted, leases run out.
const SWEEP_INTERVAL: Duration = Duration::from_millis(250);
/// Stack of a connection's thread: it parses one small request at a time, so a thousand idle
/// keep-alive connections cost little memory.
const CONNECTION_STACK_BYTES: usize = 256 << 10;

/// What a broker serves and how.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The BU directory holding the run directories.
    pub bu_dir: PathBuf,
    /// The run served at start.
    pub run: u32,
    /// Address to listen on; loopback with a free port by default.
    pub listen: SocketAddr,
    /// Connections served at once (one thread each); more are answered 503 and closed. A BU's
    /// own farm may hold hundreds of keep-alive connections, one per HLT process.
    pub max_connections: usize,
    /// How long a keep-alive connection may stay idle between requests (a reader asks again
    /// after each file, which may take minutes).
    pub idle_timeout: Duration,
    /// How long a request may take to arrive once its first byte has.
    pub read_timeout: Duration,
    /// How long writing an answer may block.
    pub write_timeout: Duration,
    /// A reader that asks nothing for this long loses its granted files: they go back to the
    /// pool for others (docs/formats.md §16).
    pub lease: Duration,
}

impl BrokerConfig {
    /// Serves run `run` of `bu_dir` on `127.0.0.1:0`: 2048 connections, idle for at most 10
    /// minutes, 10 s to read a request, 30 s to write a block of an answer, a 5-minute lease.
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

/// What the connection threads share.
#[derive(Debug)]
struct Shared {
    bu_dir: PathBuf,
    run: AtomicU32,
    stop: AtomicBool,
    max_connections: usize,
    idle_timeout: Duration,
    read_timeout: Duration,
    write_timeout: Duration,
    lease: Duration,
    /// The BU's host name: remote FUs may not claim under it.
    local_host: String,
    /// Open connections by id, so that `stop` can end their reads.
    connections: Mutex<HashMap<u64, TcpStream>>,
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
    fn connections(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
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
    acceptor: Option<JoinHandle<()>>,
}

impl Broker {
    /// Binds `config.listen` and starts accepting connections on a thread of its own.
    pub fn start(config: BrokerConfig) -> io::Result<Broker> {
        let listener = TcpListener::bind(config.listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            bu_dir: config.bu_dir,
            run: AtomicU32::new(config.run),
            stop: AtomicBool::new(false),
            max_connections: config.max_connections.max(1),
            idle_timeout: config.idle_timeout,
            read_timeout: config.read_timeout,
            write_timeout: config.write_timeout,
            lease: config.lease,
            local_host: host_name(),
            connections: Mutex::new(HashMap::new()),
            grants: Mutex::new(Grants::new(config.run, config.lease)),
            listing: Mutex::new(None),
        });
        let accepting = Arc::clone(&shared);
        let acceptor =
            thread::Builder::new().name("broker-accept".into()).spawn(move || accept_loop(&listener, &accepting))?;
        Ok(Broker { addr, shared, acceptor: Some(acceptor) })
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
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Whether [`Broker::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    /// Waits until the broker has stopped (after [`Broker::stop`]) and its threads are gone.
    pub fn join(mut self) -> thread::Result<()> {
        self.acceptor.take().map_or(Ok(()), JoinHandle::join)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            self.stop();
            let _ = acceptor.join();
        }
    }
}

/// Accepts connections until `stop`, one thread each; then ends every connection's reads and
/// waits for the threads.
fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    let mut swept = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        if swept.elapsed() >= SWEEP_INTERVAL {
            swept = Instant::now();
            sweep(shared);
        }
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::ConnectionAborted => {
                continue;
            }
            // Nothing waiting, or out of descriptors: look again a little later.
            Err(_) => {
                thread::sleep(ACCEPT_POLL);
                continue;
            }
        };
        workers.retain(|w| !w.is_finished());
        if stream.set_nonblocking(false).is_err()
            || stream.set_read_timeout(Some(shared.read_timeout)).is_err()
            || stream.set_write_timeout(Some(shared.write_timeout)).is_err()
        {
            continue;
        }
        let _ = stream.set_nodelay(true);
        let id = next_id;
        next_id += 1;
        {
            let mut connections = shared.connections();
            if connections.len() >= shared.max_connections {
                drop(connections);
                refuse_busy(stream, shared);
                continue;
            }
            let Ok(handle) = stream.try_clone() else { continue };
            connections.insert(id, handle);
        }
        let serving = Arc::clone(shared);
        let spawned =
            thread::Builder::new().name("broker-conn".into()).stack_size(CONNECTION_STACK_BYTES).spawn(move || {
                serve_connection(stream, peer, &serving);
                serving.connections().remove(&id);
            });
        match spawned {
            Ok(worker) => workers.push(worker),
            Err(_) => {
                shared.connections().remove(&id);
            }
        }
    }
    for stream in shared.connections().values() {
        // Wakes a thread waiting for the next request; one writing an answer finishes it.
        let _ = stream.shutdown(Shutdown::Read);
    }
    for worker in workers {
        let _ = worker.join();
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

/// Answers 503 to a connection over the limit, without waiting long for it.
fn refuse_busy(mut stream: TcpStream, shared: &Shared) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let answer = Answer::error(503, shared.run.load(Ordering::Relaxed), "too many connections; try again");
    let _ = answer.send(&mut stream, false);
}

/// Serves the requests of one connection until it closes, fails, or the broker stops.
fn serve_connection(stream: TcpStream, peer: SocketAddr, shared: &Shared) {
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::with_capacity(MAX_REQUEST_HEAD_BYTES, read_half);
    let mut writer = stream;
    while !shared.stop.load(Ordering::Relaxed) {
        // Idle between requests for as long as a reader may work on a file; then the request
        // itself has its own, short bound.
        if writer.set_read_timeout(Some(shared.idle_timeout)).is_err()
            || !matches!(reader.fill_buf(), Ok(b) if !b.is_empty())
        {
            return;
        }
        if writer.set_read_timeout(Some(shared.read_timeout)).is_err() {
            return;
        }
        let request = match read_request(&mut reader) {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(RequestError::Io) => return,
            Err(RequestError::Bad(status, message)) => {
                if Answer::error(status, shared.run.load(Ordering::Relaxed), &message).send(&mut writer, false).is_ok()
                {
                    linger(&mut reader, &writer);
                }
                return;
            }
        };
        let keep_alive = request.keep_alive && !shared.stop.load(Ordering::Relaxed);
        let answer = handle(&request, peer, shared);
        let give_back = answer.give_back.clone();
        let sent = answer.send(&mut writer, keep_alive);
        if sent.is_err() {
            if let Some((claimed, raw)) = give_back {
                // The FU never learnt of the claim: put the file back in the pool.
                let _ = fs::rename(claimed, raw);
            }
            return;
        }
        if !keep_alive {
            return;
        }
    }
}

/// Closes a connection whose request was refused unread: ends the sending side, then reads
/// and drops what the client is still sending (a little, briefly), so that the close does not
/// reset the connection before the client has read the answer.
fn linger(reader: &mut BufReader<TcpStream>, writer: &TcpStream) {
    let _ = writer.shutdown(Shutdown::Write);
    let _ = writer.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = io::copy(&mut reader.by_ref().take(64 * 1024), &mut io::sink());
}
