//! A reader of a BU's files through its file broker that keeps to the rules CMS's HLT keeps to
//! (docs/formats.md §16), written from those rules alone: `tessera reader`. It stands in for an
//! unchanged CMSSW process in tests of the broker, and anything such a process would abort on
//! is a *deviation* here, counted and said.
//!
//! Its protocol: `GET /popfile?runnumber=R&pid=P[&stopls=L]` on one keep-alive connection (a
//! new one after any failure), `Host` without a port; the answer must fit in 512 bytes (a
//! CMSSW reader parses what its first read brings), its header lines end with CRLF and its
//! `key=value` lines with a bare LF; `version`, `runnumber` (the run asked for), `state` and
//! `lasteols` must be in every answer, and `version`'s major number must be at least 2. The
//! file to open is `<BU dir>/runRRRRRR/<fileprefix><file>.raw`; its events are counted from its
//! RAW_0002 header and each one's CRC-32C checked (an orbit file's, which has no header, orbit by
//! orbit as CMSSW's DTH mode reads it: every block's CRC-32C, every event unpacked); then it is
//! deleted, and the broker is never called back. The reader's lumi section only moves forward: a `READY` file's `lumisection`, a
//! `READY` without a file's `lumisection` (at least `lasteols + 1`), an `EOLS`'s `lasteols +
//! 1`; a file of an older section than the open one is a deviation. `EOR` and `NORUN` end the
//! run once they leave the reader where it stands; an error answer costs a second and an
//! increasing back-off.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_formats::names;
use tessera_formats::orbit::{OrbitFile, is_orbit_file};
use tessera_formats::raw::RawFile;

/// The most an answer may take: what a CMSSW reader's first read brings.
pub const MAX_ANSWER_BYTES: usize = 512;

/// How a reader runs.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// The broker's address.
    pub broker: SocketAddr,
    /// The name in the `Host` header (no port).
    pub broker_host: String,
    /// The BU directory, holding `runRRRRRR/`, as this host sees it.
    pub bu_dir: PathBuf,
    /// The run.
    pub run: u32,
    /// This process's id, as the broker is told.
    pub pid: u32,
    /// Ask for no file after this lumi section (`stopls`).
    pub stop_ls: Option<u32>,
    /// Extra time spent on each file, as a slow selection would take.
    pub file_delay: Duration,
    /// Give up when the run has not ended after this long.
    pub timeout: Duration,
}

/// What a reader did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderReport {
    /// Files processed and deleted.
    pub files: u64,
    /// Their events.
    pub events: u64,
    /// Orbits of the orbit files among them (docs/formats.md §6).
    pub orbits: u64,
    /// The lumi section it ended in.
    pub last_ls: u32,
    /// Answers received.
    pub answers: u64,
    /// What a CMSSW reader would have aborted on (or lost a file to), in the order met.
    pub deviations: Vec<String>,
}

/// Why a reader could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaderError {
    /// The run did not end in time.
    #[error("run {run}: not ended after {timeout:?}")]
    Timeout {
        /// The run.
        run: u32,
        /// The bound.
        timeout: Duration,
    },
    /// A file could not be read or deleted.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// One answer, as a CMSSW reader reads it.
#[derive(Debug, Default)]
struct Answer {
    keys: std::collections::HashMap<String, String>,
}

impl Answer {
    fn get(&self, key: &str) -> Option<&str> {
        self.keys.get(key).map(String::as_str)
    }

    fn number(&self, key: &str) -> Option<u32> {
        self.get(key)?.parse().ok()
    }
}

/// An answer a CMSSW reader would not take: a deviation of the broker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadAnswer {
    /// Longer than a CMSSW reader reads.
    #[error("an answer of {bytes} bytes: a CMSSW reader reads at most {MAX_ANSWER_BYTES}")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// Not UTF-8.
    #[error("an answer that is not text")]
    NotText,
    /// No empty line after the HTTP header.
    #[error("an answer whose header does not end with CRLF CRLF")]
    HeaderNotEnded,
    /// A status other than 200.
    #[error("status line {line:?}")]
    Status {
        /// The status line.
        line: String,
    },
    /// A key every answer carries is missing.
    #[error("no {key} in a {state:?} answer")]
    MissingKey {
        /// The key.
        key: &'static str,
        /// The answer's `state`, if it has one.
        state: Option<String>,
    },
    /// The answer is of another run than the one asked for.
    #[error("runnumber={runnumber:?} answers a request for run {run}")]
    WrongRun {
        /// The answer's `runnumber`.
        runnumber: Option<String>,
        /// The run asked for.
        run: u32,
    },
    /// A version-1 answer, whose reader looks for a JSON file beside each raw file.
    #[error("version {version:?}: a reader of version 1 looks for a JSON beside the file")]
    Version1 {
        /// The answer's `version`.
        version: Option<String>,
    },
}

/// Parses a whole answer; a deviation if a CMSSW reader would not take it.
fn parse_answer(bytes: &[u8], run: u32) -> Result<Answer, BadAnswer> {
    if bytes.len() > MAX_ANSWER_BYTES {
        return Err(BadAnswer::TooLong { bytes: bytes.len() });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| BadAnswer::NotText)?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or(BadAnswer::HeaderNotEnded)?;
    let status = head.lines().next().unwrap_or_default();
    if !status.starts_with("HTTP/") || status.split(' ').nth(1) != Some("200") {
        return Err(BadAnswer::Status { line: status.to_owned() });
    }
    let mut answer = Answer::default();
    for line in body.split('\n') {
        if line.is_empty() || line == "\r" {
            break;
        }
        if let Some((key, value)) = line.split_once('=') {
            answer.keys.insert(key.to_owned(), value.to_owned());
        }
    }
    let owned = |key| answer.get(key).map(str::to_owned);
    for key in ["version", "runnumber", "state", "lasteols"] {
        if answer.get(key).is_none() {
            return Err(BadAnswer::MissingKey { key, state: owned("state") });
        }
    }
    if answer.get("runnumber") != Some(run.to_string().as_str()) {
        return Err(BadAnswer::WrongRun { runnumber: owned("runnumber"), run });
    }
    let major = answer.get("version").unwrap_or_default().trim_start_matches('"').split('.').next().unwrap_or_default();
    if major.parse::<u32>().is_ok_and(|v| v < 2) {
        return Err(BadAnswer::Version1 { version: owned("version") });
    }
    Ok(answer)
}

/// The reader's connection to its broker.
struct Link {
    cfg: ReaderConfig,
    stream: Option<TcpStream>,
}

impl Link {
    /// Sends one request and reads its answer (up to the empty line that ends the document).
    fn ask(&mut self, ls: u32) -> io::Result<Vec<u8>> {
        if self.stream.is_none() {
            let stream = TcpStream::connect_timeout(&self.cfg.broker, Duration::from_secs(10))?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            stream.set_write_timeout(Some(Duration::from_secs(30)))?;
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        let mut request = format!("GET /popfile?runnumber={}&pid={}", self.cfg.run, self.cfg.pid);
        if let Some(stop) = self.cfg.stop_ls {
            request.push_str(&format!("&stopls={}", stop.max(ls)));
        }
        request.push_str(&format!(
            " HTTP/1.1\r\nHost: {}\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n",
            self.cfg.broker_host
        ));
        stream.write_all(request.as_bytes())?;
        let mut answer = Vec::with_capacity(MAX_ANSWER_BYTES);
        let mut chunk = [0u8; MAX_ANSWER_BYTES + 1];
        // The document ends with an empty line after the header's empty line.
        while !(answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"\n\n")) {
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            answer.extend_from_slice(&chunk[..n]);
            if answer.len() > MAX_ANSWER_BYTES {
                break;
            }
        }
        Ok(answer)
    }
}

/// Runs a reader until the broker ends its run for it, `stop` is set, or the time-out.
pub fn run_reader(cfg: &ReaderConfig, stop: &AtomicBool) -> Result<ReaderReport, ReaderError> {
    let mut link = Link { cfg: cfg.clone(), stream: None };
    let mut report = ReaderReport::default();
    let started = Instant::now();
    let mut backoff = 0u32;
    let run_dir = cfg.bu_dir.join(names::run_dir_name(cfg.run));
    while !stop.load(Ordering::Relaxed) {
        if started.elapsed() > cfg.timeout {
            return Err(ReaderError::Timeout { run: cfg.run, timeout: cfg.timeout });
        }
        let answer = match link.ask(report.last_ls) {
            Ok(bytes) => parse_answer(&bytes, cfg.run).map_err(|bad| report.deviations.push(bad.to_string())),
            Err(e) => {
                if backoff.is_multiple_of(10) {
                    tracing::warn!(
                        "reader pid {}: asking the broker: {e} ({}); trying again, as a CMSSW reader does",
                        cfg.pid,
                        cfg.broker
                    );
                }
                Err(())
            }
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(()) => {
                // What a CMSSW reader does on any failure: close, a second's pause, back off.
                link.stream = None;
                std::thread::sleep(Duration::from_secs(1) + Duration::from_millis(100 << backoff.min(4)));
                backoff += 1;
                continue;
            }
        };
        report.answers += 1;
        backoff = 0;
        let closed = answer.number("lasteols").unwrap_or(0);
        match answer.get("state").unwrap_or_default() {
            "READY" if answer.get("file").is_some() => {
                let ls = answer.number("lumisection").unwrap_or(closed + 1).max(1);
                if ls < report.last_ls {
                    report.deviations.push(format!(
                        "a file of lumi section {ls} while {} is open: a CMSSW reader aborts",
                        report.last_ls
                    ));
                }
                report.last_ls = report.last_ls.max(ls);
                let path = run_dir.join(format!(
                    "{}{}.raw",
                    answer.get("fileprefix").unwrap_or_default().trim_matches('"'),
                    answer.get("file").unwrap_or_default().trim_matches('"')
                ));
                process_file(&path, ls, cfg.file_delay, &mut report)?;
            }
            state @ ("READY" | "STARTING" | "EOLS") => {
                let told = if state == "EOLS" {
                    closed + 1
                } else {
                    answer.number("lumisection").unwrap_or(closed + 1).max(1).max(closed + 1)
                };
                if told < report.last_ls {
                    report.deviations.push(format!(
                        "{state} moves the reader back to lumi section {told} from {}: a CMSSW reader ignores it and pauses a second",
                        report.last_ls
                    ));
                }
                report.last_ls = report.last_ls.max(told);
                std::thread::sleep(Duration::from_millis(20));
            }
            "EOR" | "NORUN" => {
                let end = answer.number("lumisection").unwrap_or(closed + 1).max(report.last_ls);
                if end == report.last_ls {
                    return Ok(report);
                }
                // A CMSSW reader opens the sections up to `end` first, then asks again.
                report.last_ls = end;
            }
            other => {
                report.deviations.push(format!("state {other:?}: a CMSSW reader takes it as a failure"));
                link.stream = None;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    Ok(report)
}

/// Reads a granted file, counts and checks its events against its header, spends `delay` on it
/// as a selection would (the file still held), and deletes it.
fn process_file(
    path: &std::path::Path,
    ls: u32,
    delay: Duration,
    report: &mut ReaderReport,
) -> Result<(), ReaderError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            report.deviations.push(format!("{} was granted but is not there: a CMSSW reader loses it", path.display()));
            return Ok(());
        }
        Err(source) => return Err(ReaderError::File { path: path.to_owned(), source }),
    };
    if is_orbit_file(&bytes) {
        read_orbit_file(path, &bytes, report);
    } else {
        read_event_file(path, &bytes, ls, report);
    }
    report.files += 1;
    std::thread::sleep(delay);
    fs::remove_file(path).map_err(|source| ReaderError::File { path: path.to_owned(), source })
}

/// Counts an event file's events as CMSSW's FRD mode reads them, checking each one's CRC-32C and
/// the header's version, lumi section (`ls`, as the broker answered) and event count.
fn read_event_file(path: &std::path::Path, bytes: &[u8], ls: u32, report: &mut ReaderReport) {
    match RawFile::parse(bytes) {
        Ok(file) => {
            if file.header.version != 2 || file.header.header_bytes != 32 {
                report.deviations.push(format!("{}: not a RAW_0002 header of 32 bytes", path.display()));
            }
            if file.header.lumi_section != ls {
                report.deviations.push(format!(
                    "{}: lumi section {} in its header, {ls} in the answer",
                    path.display(),
                    file.header.lumi_section
                ));
            }
            let mut events = 0u64;
            for event in file.events() {
                match event {
                    Ok((_, event)) => {
                        if let Err(e) = event.check_crc() {
                            report.deviations.push(format!("{}: {e}", path.display()));
                        }
                        events += 1;
                    }
                    Err(e) => {
                        report.deviations.push(format!("{}: {e}", path.display()));
                        break;
                    }
                }
            }
            if events != u64::from(file.header.event_count) {
                report.deviations.push(format!(
                    "{}: {events} events, {} in its header",
                    path.display(),
                    file.header.event_count
                ));
            }
            report.events += events;
        }
        Err(e) => report.deviations.push(format!("{}: {e}", path.display())),
    }
}

/// Counts an orbit file's orbits and events as CMSSW's DTH mode reads them: anything it would
/// abort on (a CRC-32C that fails, a rule broken, an orbit that cannot be read) is a deviation.
fn read_orbit_file(path: &std::path::Path, bytes: &[u8], report: &mut ReaderReport) {
    for orbit in OrbitFile::new(bytes) {
        let orbit = match orbit {
            Ok(orbit) => orbit,
            Err(e) => {
                report.deviations.push(format!("{}: {e}", path.display()));
                return;
            }
        };
        report.orbits += 1;
        if let Err(e) = orbit.check_crcs() {
            report.deviations.push(format!("{}: {e}", path.display()));
        }
        for event in orbit.events() {
            match event {
                Ok(_) => report.events += 1,
                Err(e) => {
                    report.deviations.push(format!("{}: {e}", path.display()));
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> Vec<u8> {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn an_answer_is_taken_only_as_a_cmssw_reader_takes_it() {
        let good = answer("version=2\nrunnumber=7\nstate=EOLS\nlasteols=3\n\n");
        assert_eq!(parse_answer(&good, 7).unwrap().number("lasteols"), Some(3));
        let cases = [
            (answer("version=2\nrunnumber=8\nstate=EOLS\nlasteols=3\n\n"), "answers a request for run 7"),
            (answer("version=2\nrunnumber=7\nstate=EOLS\n\n"), "no lasteols"),
            (answer("version=1\nrunnumber=7\nstate=EOLS\nlasteols=0\n\n"), "version"),
            (answer("version=2\r\nrunnumber=7\r\nstate=EOLS\r\nlasteols=0\r\n\r\n"), "answers a request"),
            (answer(&format!("version=2\nrunnumber=7\nstate=EOLS\nlasteols=0\npad={}\n\n", "x".repeat(500))), "512"),
        ];
        for (bytes, problem) in cases {
            let e = parse_answer(&bytes, 7).unwrap_err().to_string();
            assert!(e.contains(problem), "{e}");
        }
    }
}
