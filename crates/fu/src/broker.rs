//! The BU's file broker (docs/formats.md §7 (c) and §16): a small HTTP/1.1 server that hands a BU's raw files
//! to FUs without a shared file system and takes their resource summaries, and [`BrokerClient`],
//! its client.
//!
//! The broker claims files for a remote FU exactly as a local FU claims them (docs/formats.md
//! §7 (a)): by an
//! atomic rename of `runRRRRRR_lsLLLL_indexIIIIII.raw` into
//! `fu/runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw`, through a [`Claimer`] with the remote
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
//! | `POST /summary?runnumber=R[&host=H]` | the body, a [`ResourceSummary`] in JSON of run `R` and host `H`, is written where a local FU's goes ([`write_summary`]), stamped with the time of receipt |
//! | `DELETE /summary?runnumber=R&pid=P[&host=H]` | removes the summary of process `P` on host `H`: the FU is leaving |
//!
//! `N` is a claimed file's name, `runRRRRRR_lsLLLL_indexIIIIII_<host>_pid<pid>.raw`, with or
//! without the leading `fu/`; anything else (a path, `..`, another run's file) is refused with
//! 400. `H` defaults to the peer's IP address with `.` and `:` replaced by `-` (`10-0-0-2`); it
//! must be a valid host token (ASCII alphanumeric, `-`, `.`) and may not be the BU's own host
//! name, since local FUs give back the claims of dead processes of their own host.
//!
//! `/popfile` answers `text/plain`: `key=value` lines, then an empty line. Always `version=1`,
//! `runnumber` (the run the broker serves) and `state`:
//!
//! - `STARTING`: the run directory does not exist yet;
//! - `READY`: a file was claimed: `lumisection`, `index`, `file` (the claimed path relative to
//!   the run directory, `fu/<name>`) and `fileprefix` (the BU stem `runRRRRRR_lsLLLL_indexIIIIII`,
//!   shared by the raw file and its index JSON);
//! - `EOLS`: nothing to claim now, but lumi sections are still open (or, with `stopls`, only
//!   files of later lumi sections are left): `lasteols`, the highest lumi section whose EoLS is
//!   written (0 if none);
//! - `EOR`: the run has ended and no file is left to claim;
//! - `NORUN`: `runnumber` in the query is not the run the broker serves;
//! - `ERROR`: with `errormessage`; the HTTP status is 400 for a bad query, 500 when the BU's
//!   directory cannot be read or renamed in.
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
//! [`BrokerConfig::read_timeout`] passes without a request.

use crate::claim::{BuRunState, Claimer, FileSource, host_name};
use crate::resources::{ResourceSummary, now_unix_ms, summary_path, write_summary};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;
use tessera_formats::names::{self, ClaimedRawName};

/// The version of the `key=value` answers.
pub const PROTOCOL_VERSION: u32 = 1;
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

/// What a broker serves and how.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The BU directory holding the run directories.
    pub bu_dir: PathBuf,
    /// The run served at start.
    pub run: u32,
    /// Address to listen on; loopback with a free port by default.
    pub listen: SocketAddr,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// How long a connection may take to send a request, or stay idle between requests.
    pub read_timeout: Duration,
    /// How long writing an answer may block.
    pub write_timeout: Duration,
}

impl BrokerConfig {
    /// Serves run `run` of `bu_dir` on `127.0.0.1:0`, 64 connections, 10 s to read a request and
    /// 30 s to write a block of an answer.
    pub fn new(bu_dir: impl Into<PathBuf>, run: u32) -> Self {
        BrokerConfig {
            bu_dir: bu_dir.into(),
            run,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            max_connections: 64,
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
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
    read_timeout: Duration,
    write_timeout: Duration,
    /// The BU's host name: remote FUs may not claim under it.
    local_host: String,
    /// Open connections by id, so that `stop` can end their reads.
    connections: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    fn connections(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
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
            read_timeout: config.read_timeout,
            write_timeout: config.write_timeout,
            local_host: host_name(),
            connections: Mutex::new(HashMap::new()),
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
    while !shared.stop.load(Ordering::Relaxed) {
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
        let spawned = thread::Builder::new().name("broker-conn".into()).spawn(move || {
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

/// A parsed request.
#[derive(Debug)]
struct Request {
    method: String,
    path: String,
    query: String,
    /// At most [`MAX_REQUEST_BODY_BYTES`]; only `/summary` reads it.
    body: Vec<u8>,
    keep_alive: bool,
}

/// Why no request could be read.
#[derive(Debug)]
enum RequestError {
    /// The connection failed or timed out: drop it without an answer.
    Io,
    /// A request the broker will not serve: answer this status and message, then close.
    Bad(u16, String),
}

/// Reads one request, its body included; `None` at a clean end of the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> Result<Option<Request>, RequestError> {
    let mut budget = MAX_REQUEST_HEAD_BYTES;
    let mut line = Vec::new();
    // Blank lines before a request line are tolerated (RFC 9112 §2.2).
    let request_line = loop {
        match read_line(reader, &mut line, &mut budget) {
            Ok(Some(l)) if l.is_empty() => continue,
            Ok(Some(l)) => break l,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.for_part(414, "request line")),
        }
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(RequestError::Bad(400, format!("malformed request line {request_line:?}")));
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(RequestError::Bad(505, format!("unsupported protocol {version:?}"))),
    };
    if !target.starts_with('/') {
        return Err(RequestError::Bad(400, format!("request target {target:?} must start with '/'")));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut keep_alive = http11;
    let mut body_bytes = 0u64;
    let mut headers = 0;
    loop {
        let header = match read_line(reader, &mut line, &mut budget) {
            Ok(Some(header)) => header,
            Ok(None) => return Err(RequestError::Io),
            Err(e) => return Err(e.for_part(431, "request head")),
        };
        if header.is_empty() {
            break;
        }
        headers += 1;
        if headers > MAX_REQUEST_HEADERS {
            return Err(RequestError::Bad(431, format!("more than {MAX_REQUEST_HEADERS} header lines")));
        }
        let Some((name, value)) = header.split_once(':') else {
            return Err(RequestError::Bad(400, format!("malformed header line {header:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body_bytes = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| RequestError::Bad(400, format!("bad Content-Length {value:?}")))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(RequestError::Bad(501, "Transfer-Encoding is not supported".into()));
        }
    }
    if body_bytes > MAX_REQUEST_BODY_BYTES {
        return Err(RequestError::Bad(413, format!("request body over {MAX_REQUEST_BODY_BYTES} bytes")));
    }
    let mut body = Vec::with_capacity(body_bytes as usize);
    reader.by_ref().take(body_bytes).read_to_end(&mut body).map_err(|_| RequestError::Io)?;
    if body.len() as u64 != body_bytes {
        return Err(RequestError::Io);
    }
    Ok(Some(Request { method: method.to_owned(), path: path.to_owned(), query: query.to_owned(), body, keep_alive }))
}

/// Why a line could not be read.
enum LineError {
    Io,
    TooLong,
    NotText,
}

impl LineError {
    fn for_part(self, too_long_status: u16, part: &str) -> RequestError {
        match self {
            LineError::Io => RequestError::Io,
            LineError::TooLong => {
                RequestError::Bad(too_long_status, format!("{part} over {MAX_REQUEST_HEAD_BYTES} bytes"))
            }
            LineError::NotText => RequestError::Bad(400, format!("{part} is not ASCII text")),
        }
    }
}

/// Reads one CRLF- (or LF-) terminated line of at most `budget` bytes, taking its length from
/// the budget. `None` at the end of the stream before any byte.
fn read_line(
    reader: &mut BufReader<TcpStream>,
    line: &mut Vec<u8>,
    budget: &mut usize,
) -> Result<Option<String>, LineError> {
    line.clear();
    let read = reader.by_ref().take(*budget as u64).read_until(b'\n', line).map_err(|_| LineError::Io)?;
    if read == 0 {
        return if *budget == 0 { Err(LineError::TooLong) } else { Ok(None) };
    }
    *budget -= read;
    if line.last() != Some(&b'\n') {
        return Err(if *budget == 0 { LineError::TooLong } else { LineError::Io });
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    if !line.iter().all(|b| b.is_ascii() && (!b.is_ascii_control() || *b == b'\t')) {
        return Err(LineError::NotText);
    }
    Ok(Some(String::from_utf8_lossy(line).into_owned()))
}

/// What to send back.
struct Answer {
    status: u16,
    content_type: &'static str,
    body: Body,
    /// For `405`: the method the path takes.
    allow: Option<&'static str>,
    /// For a `READY` answer: the claim and the file's BU path, to rename back if the answer
    /// cannot be sent.
    give_back: Option<(PathBuf, PathBuf)>,
}

enum Body {
    Text(String),
    File { file: File, len: u64 },
}

impl Answer {
    fn text(status: u16, text: String) -> Answer {
        Answer { status, content_type: "text/plain", body: Body::Text(text), allow: None, give_back: None }
    }

    /// A `key=value` document: `version`, `runnumber`, then `fields`, then an empty line.
    fn document(status: u16, run: u32, fields: &[(&str, String)]) -> Answer {
        let mut text = format!("version={PROTOCOL_VERSION}\nrunnumber={run}\n");
        for (key, value) in fields {
            // Values are single lines.
            let value = value.replace(['\n', '\r'], " ");
            let _ = writeln!(text, "{key}={value}");
        }
        text.push('\n');
        Answer::text(status, text)
    }

    fn state(run: u32, state: &str) -> Answer {
        Answer::document(200, run, &[("state", state.to_owned())])
    }

    fn error(status: u16, run: u32, message: &str) -> Answer {
        Answer::document(status, run, &[("state", "ERROR".to_owned()), ("errormessage", message.to_owned())])
    }

    fn send(self, out: &mut TcpStream, keep_alive: bool) -> io::Result<()> {
        let len = match &self.body {
            Body::Text(text) => text.len() as u64,
            Body::File { len, .. } => *len,
        };
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {len}\r\nConnection: {}\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            if keep_alive { "keep-alive" } else { "close" },
        );
        if let Some(allow) = self.allow {
            let _ = write!(head, "Allow: {allow}\r\n");
        }
        head.push_str("\r\n");
        match self.body {
            Body::Text(text) => {
                head.push_str(&text);
                out.write_all(head.as_bytes())?;
            }
            Body::File { file, len } => {
                out.write_all(head.as_bytes())?;
                let copied = io::copy(&mut file.take(len), out)?;
                if copied != len {
                    // The file shrank under us: the client sees a short body and the
                    // connection closes.
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shorter than announced"));
                }
            }
        }
        out.flush()
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Internal Server Error",
    }
}

/// Routes a request.
fn handle(request: &Request, peer: SocketAddr, shared: &Shared) -> Answer {
    let run = shared.run.load(Ordering::Relaxed);
    let result = match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/popfile") => popfile(&request.query, peer, shared),
        ("GET", "/state") => run_state(&request.query, peer, shared),
        ("GET", "/file") => serve_claimed(&request.query, shared, false),
        ("GET", "/index") => serve_claimed(&request.query, shared, true),
        ("POST", "/done") => done(&request.query, shared),
        ("POST", "/release") => release(&request.query, shared),
        ("POST", "/summary") => publish_summary(&request.query, &request.body, peer, shared),
        ("DELETE", "/summary") => remove_summary(&request.query, peer, shared),
        (_, "/popfile" | "/state" | "/file" | "/index") => {
            let mut answer = Answer::error(405, run, &format!("{} takes GET", request.path));
            answer.allow = Some("GET");
            Ok(answer)
        }
        (_, "/done" | "/release") => {
            let mut answer = Answer::error(405, run, &format!("{} takes POST", request.path));
            answer.allow = Some("POST");
            Ok(answer)
        }
        (_, "/summary") => {
            let mut answer = Answer::error(405, run, "/summary takes POST or DELETE");
            answer.allow = Some("POST, DELETE");
            Ok(answer)
        }
        _ => Err((404, format!("no endpoint {:?}", request.path))),
    };
    result.unwrap_or_else(|(status, message)| Answer::error(status, run, &message))
}

/// An error answer's status and message.
type Refusal = (u16, String);

/// `GET /popfile`.
fn popfile(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "pid", "host", "stopls"])?;
    let run = query.number("runnumber")?;
    let pid = query.number("pid")?;
    let stop_ls = query.optional_number("stopls")?;
    let host = remote_host(&query, peer, shared)?;
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        return Ok(Answer::state(current, "NORUN"));
    }
    if !shared.run_dir(run).is_dir() {
        return Ok(Answer::state(run, "STARTING"));
    }
    let internal = |e: crate::FuError| (500, e.to_string());
    let claimer = Claimer::new(&shared.bu_dir, run, &host, pid).map_err(internal)?;
    let mut last_eols = 0;
    for _ in 0..CLAIM_ATTEMPTS {
        let state = claimer.listing().map_err(internal)?;
        last_eols = state.ended_lumi_sections.last().copied().unwrap_or(0);
        let candidates: Vec<(u32, u32)> =
            state.unclaimed.iter().copied().filter(|&(ls, _)| stop_ls.is_none_or(|stop| ls <= stop)).collect();
        if candidates.is_empty() {
            if state.ended && state.unclaimed.is_empty() {
                return Ok(Answer::state(run, "EOR"));
            }
            break;
        }
        if let Some(claim) = claimer.claim_first(&candidates).map_err(internal)? {
            let raw = claim.name.raw();
            let mut answer = Answer::document(
                200,
                run,
                &[
                    ("state", "READY".to_owned()),
                    ("lumisection", claim.name.ls.to_string()),
                    ("index", claim.name.index.to_string()),
                    ("file", claim.name.path()),
                    ("fileprefix", raw.stem()),
                ],
            );
            answer.give_back = Some((claim.path, claimer.run_dir().join(raw.to_string())));
            return Ok(answer);
        }
        // Other FUs took every candidate between the listing and the renames: list again.
    }
    Ok(Answer::document(200, run, &[("state", "EOLS".to_owned()), ("lasteols", last_eols.to_string())]))
}

/// The name a remote FU claims under: `host` if given (checked), else its address.
fn remote_host(query: &Query, peer: SocketAddr, shared: &Shared) -> Result<String, Refusal> {
    let host = match query.get("host") {
        Some(host) => host.to_owned(),
        None => peer_host_name(peer.ip()),
    };
    names::validate_producer_name(&host).map_err(|e| (400, format!("host: {e}")))?;
    if host == shared.local_host {
        return Err((400, format!("host {host:?} is the BU's own host name, which its local FUs claim under")));
    }
    Ok(host)
}

/// `GET /state`: what the run directory says, for a remote FU or micro merger.
fn run_state(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "host"])?;
    let run = query.number("runnumber")?;
    let host = remote_host(&query, peer, shared)?;
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        return Ok(Answer::state(current, "NORUN"));
    }
    if !shared.run_dir(run).is_dir() {
        return Ok(Answer::document(200, run, &[("state", "STARTING".to_owned()), ("host", host)]));
    }
    let internal = |e: crate::FuError| (500, e.to_string());
    let state = Claimer::new(&shared.bu_dir, run, &host, 0).map_err(internal)?.listing().map_err(internal)?;
    let join = |v: Vec<String>| v.join(",");
    let fields = [
        ("state", if state.ended { "ENDED" } else { "RUNNING" }.to_owned()),
        ("host", host.clone()),
        ("endedls", join(state.ended_lumi_sections.iter().map(u32::to_string).collect())),
        ("filels", join(state.lumi_sections_with_files.iter().map(u32::to_string).collect())),
        ("unclaimed", join(state.unclaimed.iter().map(|(ls, i)| format!("{ls}:{i}")).collect())),
        ("claimed", join(state.claimed.iter().filter(|c| c.host == host).map(ToString::to_string).collect())),
    ];
    Ok(Answer::document(200, run, &fields))
}

/// The claim named by `runnumber` and `name`, for the run served.
fn claimed_name(query: &Query, shared: &Shared) -> Result<(u32, ClaimedRawName), Refusal> {
    let run = query.number("runnumber")?;
    let name = query.required("name")?;
    let claim = ClaimedRawName::parse(name).map_err(|e| (400, format!("name: {e}")))?;
    if name != claim.to_string() && name != claim.path() {
        return Err((400, format!("name {name:?} is not spelt as the broker writes it")));
    }
    if claim.run != run {
        return Err((400, format!("name {name:?} is not a file of run {run}")));
    }
    Ok((served(run, shared)?, claim))
}

/// Whether `path` is a regular file (not a link to one).
fn is_plain_file(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// `GET /file` and `GET /index`.
fn serve_claimed(raw_query: &str, shared: &Shared, index: bool) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    let run_dir = shared.run_dir(run);
    let claimed = run_dir.join(claim.path());
    if !is_plain_file(&claimed) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    let path =
        if index { run_dir.join(claim.raw().index_json().map(|j| j.to_string()).unwrap_or_default()) } else { claimed };
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err((404, format!("{} is gone", path.display()))),
        Err(e) => return Err((500, format!("opening {}: {e}", path.display()))),
    };
    let len = file.metadata().map_err(|e| (500, format!("reading the size of {}: {e}", path.display())))?.len();
    let content_type = if index { "application/json" } else { "application/octet-stream" };
    Ok(Answer { status: 200, content_type, body: Body::File { file, len }, allow: None, give_back: None })
}

/// `POST /done`.
fn done(raw_query: &str, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    if !is_plain_file(&shared.run_dir(run).join(claim.path())) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    let claimer = Claimer::new(&shared.bu_dir, run, &claim.host, claim.pid).map_err(|e| (500, e.to_string()))?;
    claimer.remove_processed(&claim).map_err(|e| (500, e.to_string()))?;
    Ok(Answer::document(200, run, &[("file", claim.path()), ("result", "removed".to_owned())]))
}

/// `POST /release`.
fn release(raw_query: &str, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    let run_dir = shared.run_dir(run);
    let from = run_dir.join(claim.path());
    let to = run_dir.join(claim.raw().to_string());
    if !is_plain_file(&from) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    if fs::symlink_metadata(&to).is_ok() {
        return Err((409, format!("{} exists already", claim.raw())));
    }
    match fs::rename(&from, &to) {
        Ok(()) => Ok(Answer::document(200, run, &[("file", claim.path()), ("result", "released".to_owned())])),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err((404, format!("{} is not claimed", claim.path()))),
        Err(e) => Err((500, format!("giving back {}: {e}", from.display()))),
    }
}

/// `POST /summary`: a remote FU's resource summary (JSON, [`ResourceSummary`]), written where
/// a local FU's goes. Its `run` must be the run served and its `host` the name the FU claims
/// under; `updated_unix_ms` is replaced by the time of receipt, so that the BU judges the
/// summary's age by its own clock, not by the FU host's.
fn publish_summary(raw_query: &str, body: &[u8], peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "host"])?;
    let run = served(query.number("runnumber")?, shared)?;
    let host = remote_host(&query, peer, shared)?;
    let mut summary: ResourceSummary =
        serde_json::from_slice(body).map_err(|e| (400, format!("the body is not a resource summary: {e}")))?;
    if summary.run != run {
        return Err((400, format!("a summary of run {} posted for run {run}", summary.run)));
    }
    if summary.host != host {
        return Err((
            400,
            format!("a summary of host {:?} from a client whose claims are made under {host:?}", summary.host),
        ));
    }
    if !(summary.output_bytes_per_s >= 0.0 && summary.cpu_seconds >= 0.0) {
        return Err((400, "output_bytes_per_s and cpu_seconds must not be negative".into()));
    }
    summary.updated_unix_ms = now_unix_ms();
    write_summary(&shared.bu_dir, &summary).map_err(|e| (500, e.to_string()))?;
    Ok(Answer::document(200, run, &[("pid", summary.pid.to_string()), ("result", "published".to_owned())]))
}

/// `DELETE /summary`: a remote FU is leaving; its summary is removed, if there.
fn remove_summary(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "pid", "host"])?;
    let run = served(query.number("runnumber")?, shared)?;
    let pid = query.number("pid")?;
    let host = remote_host(&query, peer, shared)?;
    let path = summary_path(&shared.bu_dir, &host, pid);
    let result = match fs::remove_file(&path) {
        Ok(()) => "removed",
        Err(e) if e.kind() == io::ErrorKind::NotFound => "absent",
        Err(e) => return Err((500, format!("removing {}: {e}", path.display()))),
    };
    Ok(Answer::document(200, run, &[("pid", pid.to_string()), ("result", result.to_owned())]))
}

/// `run` if it is the run served; 404 otherwise.
fn served(run: u32, shared: &Shared) -> Result<u32, Refusal> {
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        return Err((404, format!("run {run} is not served (the broker serves run {current})")));
    }
    Ok(run)
}

/// The host name a remote FU claims under when it gives none: its IP address with `.` and `:`
/// replaced by `-` (`10.0.0.2` becomes `10-0-0-2`; an IPv4 address mapped into IPv6 is written
/// as IPv4).
pub fn peer_host_name(ip: IpAddr) -> String {
    ip.to_canonical().to_string().replace(['.', ':'], "-")
}

/// A request's query parameters, decoded.
struct Query(BTreeMap<String, String>);

impl Query {
    /// Decodes `raw`, refusing parameters outside `allowed` and repeated ones.
    fn parse(raw: &str, allowed: &[&str]) -> Result<Query, Refusal> {
        let mut params = BTreeMap::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (key, value) = (percent_decode(key)?, percent_decode(value)?);
            if !allowed.contains(&key.as_str()) {
                return Err((400, format!("unknown parameter {key:?} (this endpoint takes {})", allowed.join(", "))));
            }
            if params.insert(key.clone(), value).is_some() {
                return Err((400, format!("parameter {key:?} given twice")));
            }
        }
        Ok(Query(params))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn required(&self, key: &str) -> Result<&str, Refusal> {
        self.get(key).ok_or_else(|| (400, format!("missing parameter {key:?}")))
    }

    fn number(&self, key: &str) -> Result<u32, Refusal> {
        let value = self.required(key)?;
        decimal(value).ok_or_else(|| (400, format!("parameter {key:?} must be a decimal 32-bit number, not {value:?}")))
    }

    fn optional_number(&self, key: &str) -> Result<Option<u32>, Refusal> {
        self.get(key).map(|_| self.number(key)).transpose()
    }
}

/// A string of ASCII digits only, as a `u32`.
fn decimal(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// Decodes `%XX` escapes and `+` (a space); the result must be UTF-8.
fn percent_decode(s: &str) -> Result<String, Refusal> {
    let bad = || (400, format!("bad percent-encoding in {s:?}"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Encodes everything but unreserved characters (RFC 3986) as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// What went wrong talking to a broker; every variant names the URL.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// Connecting, sending or receiving failed (a timeout included).
    #[error("{url}: {source}")]
    Io {
        /// The request's URL.
        url: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The broker refused the request: a status other than 200, or `state=ERROR`.
    #[error("{url}: HTTP {status}: {message}")]
    Refused {
        /// The request's URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The broker's `errormessage`, or the start of its answer.
        message: String,
    },
    /// An answer that does not follow the protocol.
    #[error("{url}: bad answer: {problem}")]
    Protocol {
        /// The request's URL.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// What `/state` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteRunState {
    /// The run directory does not exist yet.
    Starting {
        /// The host name the broker gives this client's claims.
        host: String,
    },
    /// The run directory as the broker lists it; only this client host's claims are listed.
    Running {
        /// The host name the broker gives this client's claims.
        host: String,
        /// The listing.
        state: BuRunState,
    },
    /// The broker serves another run.
    NoRun {
        /// The run it serves.
        current_run: u32,
    },
}

/// What `/popfile` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopAnswer {
    /// The run directory does not exist yet: ask again later.
    Starting,
    /// A file is claimed for this FU.
    Ready {
        /// Its lumi section.
        ls: u32,
        /// Its claimed name (`file` without `fu/`).
        file: ClaimedRawName,
        /// The BU stem of the raw file and its index JSON.
        file_prefix: String,
    },
    /// Nothing to claim now (or nothing up to `stopls`), lumi sections still open.
    EndOfLumi {
        /// The highest lumi section whose EoLS is written; 0 if none.
        last_eols: u32,
    },
    /// The run has ended and no file is left.
    EndOfRun,
    /// The broker serves another run.
    NoRun {
        /// The run it serves.
        current_run: u32,
    },
}

/// A remote FU's side of the broker protocol: one connection per request, with timeouts.
#[derive(Debug, Clone)]
pub struct BrokerClient {
    addr: SocketAddr,
    run: u32,
    pid: u32,
    host: Option<String>,
    stop_ls: Option<u32>,
    timeout: Duration,
    max_body: u64,
}

impl BrokerClient {
    /// A client of the broker at `addr` for process `pid` in run `run`, claiming under the
    /// host name the broker sees it as ([`peer_host_name`]); 10 s timeouts, answers up to 4 GiB.
    pub fn new(addr: SocketAddr, run: u32, pid: u32) -> Self {
        BrokerClient { addr, run, pid, host: None, stop_ls: None, timeout: Duration::from_secs(10), max_body: 4 << 30 }
    }

    /// Claims under `host` instead (ASCII alphanumeric, `-`, `.`).
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// Takes no file of a lumi section after `stop_ls` (`None`: no limit).
    pub fn with_stop_ls(mut self, stop_ls: Option<u32>) -> Self {
        self.stop_ls = stop_ls;
        self
    }

    /// Bounds connecting, and each read and write, to `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Refuses answers longer than `bytes`.
    pub fn with_max_body(mut self, bytes: u64) -> Self {
        self.max_body = bytes;
        self
    }

    /// The broker's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Asks for the next file.
    pub fn popfile(&self) -> Result<PopAnswer, BrokerError> {
        let mut target = format!("/popfile?runnumber={}&pid={}", self.run, self.pid);
        if let Some(host) = &self.host {
            let _ = write!(target, "&host={}", percent_encode(host));
        }
        if let Some(stop_ls) = self.stop_ls {
            let _ = write!(target, "&stopls={stop_ls}");
        }
        let (url, body) = self.request("GET", &target, &[])?;
        let doc = parse_document(&url, &body)?;
        let protocol = |problem: String| BrokerError::Protocol { url: url.clone(), problem };
        let field =
            |key: &str| doc.get(key).ok_or_else(|| protocol(format!("no {key:?} in a {:?} answer", doc.get("state"))));
        let number = |key: &str| {
            field(key).and_then(|v| decimal(v).ok_or_else(|| protocol(format!("{key}={v:?} is not a number"))))
        };
        match field("state")?.as_str() {
            "STARTING" => Ok(PopAnswer::Starting),
            "READY" => {
                let ls = number("lumisection")?;
                let path = field("file")?;
                let file = ClaimedRawName::parse(path).map_err(|e| protocol(format!("file: {e}")))?;
                if file.ls != ls || file.run != self.run {
                    return Err(protocol(format!(
                        "file {path:?} does not match run {} and lumisection {ls}",
                        self.run
                    )));
                }
                Ok(PopAnswer::Ready { ls, file, file_prefix: field("fileprefix")?.clone() })
            }
            "EOLS" => Ok(PopAnswer::EndOfLumi { last_eols: number("lasteols")? }),
            "EOR" => Ok(PopAnswer::EndOfRun),
            "NORUN" => Ok(PopAnswer::NoRun { current_run: number("runnumber")? }),
            "ERROR" => Err(BrokerError::Refused {
                url: url.clone(),
                status: 200,
                message: doc.get("errormessage").cloned().unwrap_or_default(),
            }),
            other => Err(protocol(format!("unknown state {other:?}"))),
        }
    }

    /// What the run directory holds (see [`RemoteRunState`]).
    pub fn state(&self) -> Result<RemoteRunState, BrokerError> {
        let mut target = format!("/state?runnumber={}", self.run);
        if let Some(host) = &self.host {
            let _ = write!(target, "&host={}", percent_encode(host));
        }
        let (url, body) = self.request("GET", &target, &[])?;
        let doc = parse_document(&url, &body)?;
        let protocol = |problem: String| BrokerError::Protocol { url: url.clone(), problem };
        let field = |key: &str| doc.get(key).ok_or_else(|| protocol(format!("no {key:?} in a /state answer")));
        let numbers = |key: &str| -> Result<Vec<u32>, BrokerError> {
            let v = field(key)?;
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|n| decimal(n).ok_or_else(|| protocol(format!("{key}={v:?} is not a list of numbers"))))
                .collect()
        };
        match field("state")?.as_str() {
            "NORUN" => Ok(RemoteRunState::NoRun { current_run: decimal(field("runnumber")?).unwrap_or(0) }),
            "STARTING" => Ok(RemoteRunState::Starting { host: field("host")?.clone() }),
            s @ ("RUNNING" | "ENDED") => {
                let mut state = BuRunState { ended: s == "ENDED", ..BuRunState::default() };
                state.ended_lumi_sections = numbers("endedls")?.into_iter().collect();
                state.lumi_sections_with_files = numbers("filels")?.into_iter().collect();
                let unclaimed = field("unclaimed")?;
                for pair in unclaimed.split(',').filter(|s| !s.is_empty()) {
                    let (ls, index) = pair
                        .split_once(':')
                        .and_then(|(l, i)| Some((decimal(l)?, decimal(i)?)))
                        .ok_or_else(|| protocol(format!("unclaimed={unclaimed:?} is not a list of ls:index")))?;
                    state.unclaimed.push((ls, index));
                }
                for name in field("claimed")?.split(',').filter(|s| !s.is_empty()) {
                    state.claimed.push(ClaimedRawName::parse(name).map_err(|e| protocol(format!("claimed: {e}")))?);
                }
                Ok(RemoteRunState::Running { host: field("host")?.clone(), state })
            }
            "ERROR" => Err(BrokerError::Refused {
                url: url.clone(),
                status: 200,
                message: doc.get("errormessage").cloned().unwrap_or_default(),
            }),
            other => Err(protocol(format!("unknown state {other:?}"))),
        }
    }

    /// The bytes of the claimed file `name`.
    pub fn fetch(&self, name: &ClaimedRawName) -> Result<Vec<u8>, BrokerError> {
        self.request("GET", &self.file_target("file", name), &[]).map(|(_, body)| body)
    }

    /// The index JSON of the claimed file `name`.
    pub fn fetch_index(&self, name: &ClaimedRawName) -> Result<Vec<u8>, BrokerError> {
        self.request("GET", &self.file_target("index", name), &[]).map(|(_, body)| body)
    }

    /// Tells the broker that the outputs for `name` are published: it removes the file.
    pub fn done(&self, name: &ClaimedRawName) -> Result<(), BrokerError> {
        self.request("POST", &self.file_target("done", name), &[]).map(drop)
    }

    /// Gives the claim `name` back to the pool.
    pub fn release(&self, name: &ClaimedRawName) -> Result<(), BrokerError> {
        self.request("POST", &self.file_target("release", name), &[]).map(drop)
    }

    /// Publishes this process's resource summary in the BU's directory. Its `host` must be the
    /// name the broker gives this client's claims ([`RemoteRunState`]'s `host`), its `run` the
    /// client's.
    pub fn publish_summary(&self, summary: &ResourceSummary) -> Result<(), BrokerError> {
        let body = serde_json::to_vec(summary).expect("a summary always serializes");
        self.request("POST", &self.summary_target(None), &body).map(drop)
    }

    /// Removes this process's resource summary from the BU's directory (one already gone is fine).
    pub fn remove_summary(&self) -> Result<(), BrokerError> {
        self.request("DELETE", &self.summary_target(Some(self.pid)), &[]).map(drop)
    }

    fn summary_target(&self, pid: Option<u32>) -> String {
        let mut target = format!("/summary?runnumber={}", self.run);
        if let Some(pid) = pid {
            let _ = write!(target, "&pid={pid}");
        }
        if let Some(host) = &self.host {
            let _ = write!(target, "&host={}", percent_encode(host));
        }
        target
    }

    fn file_target(&self, endpoint: &str, name: &ClaimedRawName) -> String {
        format!("/{endpoint}?runnumber={}&name={}", self.run, percent_encode(&name.to_string()))
    }

    /// Sends one request (with `body`, JSON, unless empty) on a fresh connection; the URL and
    /// the body of a 200 answer.
    fn request(&self, method: &str, target: &str, body: &[u8]) -> Result<(String, Vec<u8>), BrokerError> {
        let url = format!("http://{}{target}", self.addr);
        let io_err = |source| BrokerError::Io { url: url.clone(), source };
        let stream = TcpStream::connect_timeout(&self.addr, self.timeout).map_err(io_err)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(io_err)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(io_err)?;
        let _ = stream.set_nodelay(true);
        let mut request = format!("{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", self.addr);
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        if method != "GET" {
            let _ = write!(request, "Content-Length: {}\r\n", body.len());
        }
        request.push_str("\r\n");
        let mut request = request.into_bytes();
        request.extend_from_slice(body);
        (&stream).write_all(&request).map_err(io_err)?;
        let mut reader = BufReader::new(stream);
        let protocol = |problem: String| BrokerError::Protocol { url: url.clone(), problem };
        let mut head_budget = 16 * 1024u64;
        let mut read_head_line = |reader: &mut BufReader<TcpStream>| -> Result<String, BrokerError> {
            let mut line = Vec::new();
            let read = reader.by_ref().take(head_budget).read_until(b'\n', &mut line).map_err(io_err)?;
            head_budget -= read as u64;
            if line.last() != Some(&b'\n') {
                return Err(protocol(if head_budget == 0 {
                    "answer head over 16 KiB".into()
                } else {
                    "connection closed in the answer head".into()
                }));
            }
            Ok(String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']).to_owned())
        };
        let status_line = read_head_line(&mut reader)?;
        let status = status_line
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.get(2..5))
            .and_then(|code| code.parse::<u16>().ok())
            .ok_or_else(|| protocol(format!("bad status line {status_line:?}")))?;
        let mut length = None;
        loop {
            let line = read_head_line(&mut reader)?;
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                let value = value.trim();
                length = Some(value.parse::<u64>().map_err(|_| protocol(format!("bad Content-Length {value:?}")))?);
            }
        }
        let limit = length.unwrap_or(self.max_body.saturating_add(1));
        if limit > self.max_body && length.is_some() {
            return Err(protocol(format!("answer of {limit} bytes is over the limit of {}", self.max_body)));
        }
        let mut body = Vec::with_capacity(usize::try_from(limit.min(64 << 20)).unwrap_or(0));
        reader.take(limit).read_to_end(&mut body).map_err(io_err)?;
        match length {
            Some(len) if (body.len() as u64) < len => {
                return Err(protocol(format!("answer cut short: {} of {len} bytes", body.len())));
            }
            None if body.len() as u64 > self.max_body => {
                return Err(protocol(format!("answer over the limit of {} bytes", self.max_body)));
            }
            _ => {}
        }
        if status != 200 {
            let message = parse_document(&url, &body)
                .ok()
                .and_then(|doc| doc.get("errormessage").cloned())
                .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_owned());
            return Err(BrokerError::Refused { url, status, message });
        }
        Ok((url, body))
    }
}

/// Reads a `key=value` answer up to its empty line; checks `version`.
fn parse_document(url: &str, body: &[u8]) -> Result<HashMap<String, String>, BrokerError> {
    let protocol = |problem: String| BrokerError::Protocol { url: url.to_owned(), problem };
    let text = std::str::from_utf8(body).map_err(|_| protocol("answer is not UTF-8".into()))?;
    let mut doc = HashMap::new();
    let mut ended = false;
    for line in text.lines() {
        if line.is_empty() {
            ended = true;
            break;
        }
        let (key, value) = line.split_once('=').ok_or_else(|| protocol(format!("line {line:?} is not key=value")))?;
        doc.insert(key.to_owned(), value.to_owned());
    }
    if !ended {
        return Err(protocol("answer does not end with an empty line".into()));
    }
    match doc.get("version").map(String::as_str) {
        Some(v) if v == PROTOCOL_VERSION.to_string() => Ok(doc),
        other => Err(protocol(format!("version {other:?}, expected {PROTOCOL_VERSION}"))),
    }
}
