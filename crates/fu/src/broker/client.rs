//! [`BrokerClient`]: a remote FU's side of the broker protocol.

use super::http::{decimal, percent_encode};
use super::{BuRunState, PROTOCOL_VERSION, ResourceSummary};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tessera_formats::names::{self, ClaimedRawName};

/// What went wrong talking to a broker; every variant names the URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

/// What `/popfile` answered. Every answer also said how far the BU has closed lumi sections
/// (`lasteols`), kept here where a reader acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PopAnswer {
    /// The run directory does not exist yet: ask again later.
    Starting,
    /// A file is claimed for this reader.
    Ready {
        /// Its lumi section.
        ls: u32,
        /// Its claimed name: the file is `<run dir>/fu/<file>` (`fileprefix` and `file`).
        file: ClaimedRawName,
        /// The highest lumi section up to which the BU has closed every one.
        last_eols: u32,
    },
    /// `READY` without a file: nothing now, and the reader stays in lumi section `ls`.
    Wait {
        /// The reader's lumi section.
        ls: u32,
        /// As in [`PopAnswer::Ready`].
        last_eols: u32,
    },
    /// Nothing to claim now (or nothing up to `stopls`): the reader moves to `last_eols + 1`.
    EndOfLumi {
        /// The highest lumi section up to which the BU has closed every one; 0 if none.
        last_eols: u32,
    },
    /// Nothing is left for this reader (the run has ended, or its `stopls` is reached).
    EndOfRun {
        /// The lumi section to end in.
        ls: u32,
    },
    /// The broker serves another run.
    NoRun {
        /// The run it serves.
        served_run: Option<u32>,
    },
}

/// A remote FU's side of the broker protocol, on `ureq`: keep-alive connections (at most a few
/// idle ones), connecting and every read and write bounded by a time-out.
#[derive(Debug, Clone)]
pub struct BrokerClient {
    addr: SocketAddr,
    run: u32,
    pid: u32,
    host: Option<String>,
    stop_ls: Option<u32>,
    any_ls: bool,
    max_body: u64,
    agent: ureq::Agent,
}

/// An HTTP agent whose requests connect, and wait for each read and write, within `timeout`
/// (a file of any size arrives as long as its bytes keep coming); it follows no redirect and
/// reads every status.
fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_connect(Some(timeout))
        .timeout_per_read(Some(timeout))
        .timeout_per_write(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .max_idle_connections(4)
        .max_idle_connections_per_host(4)
        .build()
        .into()
}

impl BrokerClient {
    /// A client of the broker at `addr` for process `pid` in run `run`, claiming under the
    /// host name the broker sees it as ([`peer_host_name`](super::peer_host_name)); 10 s timeouts, answers up to 4 GiB.
    pub fn new(addr: SocketAddr, run: u32, pid: u32) -> Self {
        BrokerClient {
            addr,
            run,
            pid,
            host: None,
            stop_ls: None,
            any_ls: false,
            max_body: 4 << 30,
            agent: agent(Duration::from_secs(10)),
        }
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

    /// Takes files of any lumi section in any order (`anyls=1`), as a Tessera FU can: without
    /// it, the client is a reader that only moves forward, as CMSSW's is.
    pub fn with_any_ls(mut self) -> Self {
        self.any_ls = true;
        self
    }

    /// Bounds connecting, and each read and write, to `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.agent = agent(timeout);
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
        if self.any_ls {
            target.push_str("&anyls=1");
        }
        let (url, body) = self.request("GET", &target, &[])?;
        let doc = parse_document(&url, &body)?;
        let protocol = |problem: String| BrokerError::Protocol { url: url.clone(), problem };
        let field =
            |key: &str| doc.get(key).ok_or_else(|| protocol(format!("no {key:?} in a {:?} answer", doc.get("state"))));
        let number = |key: &str| {
            field(key).and_then(|v| decimal(v).ok_or_else(|| protocol(format!("{key}={v:?} is not a number"))))
        };
        // What a CMSSW reader asserts of every answer.
        if field("runnumber")? != &self.run.to_string() {
            return Err(protocol(format!("runnumber={} answers a request for run {}", doc["runnumber"], self.run)));
        }
        let last_eols = number("lasteols")?;
        match field("state")?.as_str() {
            "STARTING" => Ok(PopAnswer::Starting),
            "READY" if doc.contains_key("file") => {
                let ls = number("lumisection")?;
                let path = format!("{}{}.raw", field("fileprefix")?, field("file")?);
                let file = ClaimedRawName::parse(&path).map_err(|e| protocol(format!("file: {e}")))?;
                if !path.starts_with(&format!("{}/", names::FU_DIR)) || file.ls != ls || file.run != self.run {
                    return Err(protocol(format!(
                        "file {path:?} is not a claim in fu/ of run {} and lumisection {ls}",
                        self.run
                    )));
                }
                Ok(PopAnswer::Ready { ls, file, last_eols })
            }
            "READY" => Ok(PopAnswer::Wait { ls: number("lumisection")?, last_eols }),
            "EOLS" => Ok(PopAnswer::EndOfLumi { last_eols }),
            "EOR" => Ok(PopAnswer::EndOfRun { ls: number("lumisection").unwrap_or(last_eols) }),
            "NORUN" => Ok(PopAnswer::NoRun { served_run: doc.get("servedrun").and_then(|v| decimal(v)) }),
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

    /// Sends one request (with `body`, JSON, unless empty); the URL and the body of a 200
    /// answer.
    fn request(&self, method: &str, target: &str, body: &[u8]) -> Result<(String, Vec<u8>), BrokerError> {
        let url = format!("http://{}{target}", self.addr);
        let protocol = |problem: String| BrokerError::Protocol { url: url.clone(), problem };
        let failed = |error: ureq::Error| match error {
            ureq::Error::Io(source) => BrokerError::Io { url: url.clone(), source },
            ureq::Error::Timeout(what) => BrokerError::Io {
                url: url.clone(),
                source: io::Error::new(io::ErrorKind::TimedOut, format!("timed out: {what}")),
            },
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                BrokerError::Io { url: url.clone(), source: io::Error::other(error.to_string()) }
            }
            ureq::Error::BodyExceedsLimit(_) => protocol(format!("answer over the limit of {} bytes", self.max_body)),
            other => protocol(other.to_string()),
        };
        let request = ureq::http::Request::builder().method(method).uri(&url);
        let sent = if method == "GET" || method == "DELETE" {
            let request = request.body(ureq::SendBody::none()).map_err(|e| protocol(e.to_string()))?;
            self.agent.run(request)
        } else {
            let request = if body.is_empty() { request } else { request.header("Content-Type", "application/json") };
            let request = request.body(body).map_err(|e| protocol(e.to_string()))?;
            self.agent.run(request)
        };
        let mut answer = sent.map_err(failed)?;
        let status = answer.status().as_u16();
        if let Some(length) = answer.body().content_length()
            && length > self.max_body
        {
            return Err(protocol(format!("answer of {length} bytes is over the limit of {}", self.max_body)));
        }
        let body = answer.body_mut().with_config().limit(self.max_body).read_to_vec().map_err(failed)?;
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
    // Lines end with a bare LF: a CMSSW reader keeps anything before it, a CR included, in the
    // value, so a CR is refused here as it would break there.
    for line in text.split('\n') {
        if line.is_empty() {
            ended = true;
            break;
        }
        if line.contains('\r') {
            return Err(protocol(format!("line {line:?} ends with CR: values would keep it")));
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
