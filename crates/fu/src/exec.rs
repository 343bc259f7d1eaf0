//! An external program as the HLT: [`ExecHlt`] runs a long-lived child process and talks to it
//! with a line protocol on its standard input and output. The program reads the raw files itself
//! (docs/formats.md §4, §5); the FU only tells it which file to judge and collects its answers.
//!
//! # Protocol
//!
//! Every line is UTF-8 text ended by `\n` (a `\r` before it is dropped), at most
//! [`MAX_LINE_BYTES`] bytes. The program's standard error is the FU's: use it for diagnostics.
//!
//! 1. **Start.** The program's first line on standard output is
//!    `STREAMS <name>,<name>,...`: its output streams, at least one and at most
//!    [`MAX_EXEC_STREAMS`], each non-empty ASCII alphanumeric, all different, none of them
//!    [`ERROR_STREAM`]. The FU waits [`ExecConfig::startup_timeout`] for it.
//! 2. **A file.** The FU writes `FILE <skip> <path>`: `<path>` is the absolute path of a raw file
//!    (the rest of the line, so it may hold spaces), `<skip>` the number of records at its start
//!    that the program must pass over without judging them (0 unless the program is being
//!    restarted in the middle of the file). The program answers one line per record of the file
//!    from record `<skip>` on, in file order:
//!    `<event> <streams>`, where `<event>` is the event number of the record's FRD header
//!    (decimal u32, docs/formats.md §4) and `<streams>` is `-` (rejected) or a comma-separated list of
//!    names from its `STREAMS` line. After the last record it writes `END`. A program may stop
//!    with `END` at a record it cannot read (a truncated file); the FU does not need those.
//!    The FU also passes over the answers for records it has set aside itself (a bad CRC), so
//!    the program judges every record it can, corrupt or not.
//! 3. **The end.** When the FU is done it closes the program's standard input; the program
//!    should then exit. It is killed if it has not exited after [`EXIT_GRACE`].
//!
//! # Failures
//!
//! The program *fails at record r* when, before it has answered record `r`, it exits or closes
//! its standard output, writes a line that is not the expected answer (too long, not
//! `<event> <streams>`, the wrong event number, an unknown stream, `END` too early), or has not
//! written `END` within [`ExecConfig::file_timeout`] of the `FILE` line. The FU then kills it,
//! starts it again (which must announce the same streams) and sends `FILE <r> <path>`, to
//! retry record `r`. A record is tried at most `1 + max_retries` times
//! ([`ExecConfig::max_retries`]); after that its event gets
//! [`Verdict::Failed`] with the last reason, e.g. `"python3 select.py exited with status 3 at
//! event 20"`, and the FU goes on with `FILE <r + 1> <path>`. A record the FU does not need an
//! answer for is not retried. A failure after the last needed answer only ends the program:
//! the next file starts a new one.
//!
//! The program failing to start (it cannot be run, exits or prints anything but a valid
//! `STREAMS` line, or stays silent for the startup timeout) is an [`FuError::Hlt`]: at once when
//! the FU starts, and after `1 + max_retries` attempts in a row when it is restarted.
//!
//! Every wait is bounded: a reader thread per program passes its lines through a channel read
//! with [`Receiver::recv_timeout`].

use crate::{ERROR_STREAM, FuError};
use crate::{Hlt, StreamSet, Verdict};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant};
use tessera_formats::frd::{FRD_HEADER_BYTES, FrdEvent, FrdHeader};
use tessera_formats::names::validate_stream_name;
use tessera_formats::raw::RawFileHeader;

/// The longest line, `\n` included, the FU reads from the program or writes to it.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Streams a program may announce: a [`StreamSet`] has 64 bits and the error stream comes on top.
pub const MAX_EXEC_STREAMS: usize = StreamSet::MAX_STREAMS - 1;

/// How long a program may take to exit once its standard input is closed, or to be reaped once
/// it has closed its standard output, before it is killed.
pub const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Lines the reader thread holds before it waits for the FU to take them.
const LINE_QUEUE: usize = 1024;

/// How to run an external HLT program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// The program and its arguments (`argv[0]` is looked up in `PATH`).
    pub argv: Vec<String>,
    /// Variables added to the program's environment.
    pub env: Vec<(String, String)>,
    /// How long the program may take to print its `STREAMS` line.
    pub startup_timeout: Duration,
    /// How long the program may take to answer one `FILE` line, from the line to its `END`.
    pub file_timeout: Duration,
    /// How often a record is retried after the program failed on it.
    pub max_retries: u32,
}

impl ExecConfig {
    /// The defaults for `argv`: no extra environment, 30 s to start, 60 s per file, 2 retries.
    pub fn new(argv: Vec<String>) -> Self {
        ExecConfig {
            argv,
            env: Vec::new(),
            startup_timeout: Duration::from_secs(30),
            file_timeout: Duration::from_secs(60),
            max_retries: 2,
        }
    }
}

/// An external program as the HLT, speaking the protocol of the [module documentation](self).
#[derive(Debug)]
pub struct ExecHlt {
    config: ExecConfig,
    name: String,
    streams: Vec<String>,
    session: Option<Session>,
    starts: u64,
}

impl ExecHlt {
    /// Starts the program and reads its streams. An error names the program and says why it did
    /// not start.
    pub fn start(config: ExecConfig) -> Result<Self, FuError> {
        if config.argv.is_empty() {
            return Err(FuError::Hlt("no HLT program given".into()));
        }
        let name = config.argv.join(" ");
        let (session, streams) = Session::start(&config, &name)?;
        Ok(ExecHlt { config, name, streams, session: Some(session), starts: 1 })
    }

    /// The program as named in messages: its arguments joined by spaces.
    pub fn program(&self) -> &str {
        &self.name
    }

    /// How often the program was started, the first time included.
    pub fn starts(&self) -> u64 {
        self.starts
    }

    /// The running program, started again if it is not running.
    fn session(&mut self) -> Result<&mut Session, FuError> {
        if self.session.is_none() {
            let mut last = String::new();
            for _ in 0..=self.config.max_retries {
                self.starts += 1;
                match Session::start(&self.config, &self.name) {
                    Ok((session, streams)) if streams == self.streams => {
                        self.session = Some(session);
                        break;
                    }
                    Ok((mut session, streams)) => {
                        session.kill();
                        return Err(FuError::Hlt(format!(
                            "{} announced streams {} when restarted, {} before",
                            self.name,
                            streams.join(","),
                            self.streams.join(",")
                        )));
                    }
                    Err(FuError::Hlt(e)) => last = e,
                    Err(e) => return Err(e),
                }
            }
            if self.session.is_none() {
                return Err(FuError::Hlt(format!(
                    "{} failed to restart {} times, the last time: {last}",
                    self.name,
                    self.config.max_retries + 1
                )));
            }
        }
        Ok(self.session.as_mut().expect("started above"))
    }

    /// Reads the answers to one `FILE` line from record `next` on, storing the verdicts of the
    /// needed records. Returns the record after the last one answered and, if the program
    /// failed, why.
    fn request(
        &mut self,
        path: &str,
        records: &[FrdHeader],
        wanted: &[Option<usize>],
        mut next: usize,
        found: &mut [Option<Verdict>],
    ) -> Result<(usize, Option<String>), FuError> {
        let timeout = self.config.file_timeout;
        let name = self.name.clone();
        let streams = self.streams.clone();
        let session = self.session()?;
        if let Err(e) = session.send(&format!("FILE {next} {path}\n")) {
            return Ok((next, Some(session.gone(&name, &e.to_string()))));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let line = match session.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Line::Text(line)) => line,
                Ok(Line::TooLong) => {
                    return Ok((next, Some(format!("{name} wrote a line longer than {MAX_LINE_BYTES} bytes"))));
                }
                Ok(Line::Failed(e)) => return Ok((next, Some(session.gone(&name, &e)))),
                Err(RecvTimeoutError::Disconnected) => return Ok((next, Some(session.gone(&name, "")))),
                Err(RecvTimeoutError::Timeout) => {
                    return Ok((next, Some(format!("{name} did not answer within {timeout:?}"))));
                }
            };
            if line == "END" {
                let done = wanted[next..].iter().all(Option::is_none);
                return Ok((next, (!done).then(|| format!("{name} ended the file early"))));
            }
            let Some(record) = records.get(next) else {
                return Ok((next, Some(format!("{name} answered more records than the file holds: {line:.80}"))));
            };
            match parse_answer(&line, record.event, &streams) {
                Ok(set) => {
                    if let Some(i) = wanted[next] {
                        found[i] = Some(Verdict::Streams(set));
                    }
                    next += 1;
                }
                Err(problem) => return Ok((next, Some(format!("{name} answered {problem}")))),
            }
        }
    }
}

impl Hlt for ExecHlt {
    fn streams(&self) -> &[String] {
        &self.streams
    }

    fn select_file(
        &mut self,
        file: &Path,
        events: &[FrdEvent<'_>],
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), FuError> {
        if events.is_empty() {
            return Ok(());
        }
        let absolute = std::path::absolute(file).map_err(crate::io_error("locating", file))?;
        let path = match absolute.to_str() {
            Some(p) if !p.contains(['\n', '\r']) && p.len() < MAX_LINE_BYTES - 32 => p.to_owned(),
            _ => return Err(FuError::Hlt(format!("cannot name {} on a protocol line", absolute.display()))),
        };
        let records = record_headers(file)?;
        // Which of `events` each record is: they are the file's records in order, some left out.
        let mut wanted = vec![None; records.len()];
        let mut matched = 0;
        for (slot, header) in wanted.iter_mut().zip(&records) {
            if events.get(matched).is_some_and(|e| e.header == *header) {
                *slot = Some(matched);
                matched += 1;
            }
        }
        if matched < events.len() {
            return Err(FuError::Hlt(format!(
                "event {} is not among the records of {}",
                events[matched].header.event,
                file.display()
            )));
        }
        let needed = wanted.iter().rposition(Option::is_some).map_or(0, |r| r + 1);
        let mut found: Vec<Option<Verdict>> = vec![None; events.len()];
        let mut next = 0;
        let mut failures = 0;
        while next < needed {
            let (answered, failure) = self.request(&path, &records, &wanted, next, &mut found)?;
            if answered > next {
                failures = 0;
            }
            next = answered;
            let Some(reason) = failure else { break };
            if let Some(mut session) = self.session.take() {
                session.kill();
            }
            if next >= needed {
                break;
            }
            match wanted[next] {
                None => next += 1,
                Some(i) => {
                    failures += 1;
                    if failures > self.config.max_retries {
                        found[i] = Some(Verdict::Failed(format!("{reason} at event {}", records[next].event)));
                        next += 1;
                        failures = 0;
                    }
                }
            }
        }
        for (verdict, event) in found.into_iter().zip(events) {
            match verdict {
                Some(v) => verdicts.push(v),
                None => {
                    return Err(FuError::Hlt(format!(
                        "{} gave no verdict for event {}",
                        self.name, event.header.event
                    )));
                }
            }
        }
        Ok(())
    }
}

/// What is wrong with an answer of the program to one record: said after "`<program>`
/// answered".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadAnswer {
    /// The line is not `<event> <streams>`.
    #[error("{line:.80} where `{event} <streams>` was expected")]
    NotAnAnswer {
        /// The line as printed.
        line: String,
        /// The event of the record it answers.
        event: u32,
    },
    /// The answer names another event than the record's.
    #[error("event {number:.20} for the record of event {event}")]
    WrongEvent {
        /// The event number as printed.
        number: String,
        /// The event of the record it answers.
        event: u32,
    },
    /// The answer names a stream the program did not announce.
    #[error("unknown stream {name:.80}")]
    UnknownStream {
        /// The stream as printed.
        name: String,
    },
}

/// What is wrong with the program's `STREAMS` line: said after the program's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadStreams {
    /// The first line is not a `STREAMS` line.
    #[error("printed {line:.80} instead of STREAMS")]
    NotStreams {
        /// The line as printed.
        line: String,
    },
    /// More streams than an FU writes for one program.
    #[error("announced {count} streams, more than {MAX_EXEC_STREAMS}")]
    TooMany {
        /// The streams announced.
        count: usize,
    },
    /// A stream whose name breaks the naming rules.
    #[error("announced a bad stream: {0}")]
    BadName(tessera_formats::FormatError),
    /// The stream the FU keeps for events the HLT could not judge.
    #[error("announced the stream {ERROR_STREAM}, which the FU keeps for itself")]
    ErrorStream,
    /// A stream announced twice.
    #[error("announced stream {0} twice")]
    Twice(String),
}

/// Parses `<event> <streams>` for a record holding event `event`.
fn parse_answer(line: &str, event: u32, streams: &[String]) -> Result<StreamSet, BadAnswer> {
    let garbage = || BadAnswer::NotAnAnswer { line: line.to_owned(), event };
    let (number, names) = line.split_once(' ').ok_or_else(garbage)?;
    if number.parse::<u32>().map_err(|_| garbage())? != event {
        return Err(BadAnswer::WrongEvent { number: number.to_owned(), event });
    }
    let mut set = StreamSet::NONE;
    if names != "-" {
        for name in names.split(',') {
            let index = streams
                .iter()
                .position(|s| s == name)
                .ok_or_else(|| BadAnswer::UnknownStream { name: name.to_owned() })?;
            set.insert(index);
        }
    }
    Ok(set)
}

/// Parses a `STREAMS` line.
fn parse_streams(line: &str) -> Result<Vec<String>, BadStreams> {
    let list = line.strip_prefix("STREAMS ").ok_or_else(|| BadStreams::NotStreams { line: line.to_owned() })?;
    let streams: Vec<String> = list.split(',').map(str::to_owned).collect();
    if streams.len() > MAX_EXEC_STREAMS {
        return Err(BadStreams::TooMany { count: streams.len() });
    }
    for (i, s) in streams.iter().enumerate() {
        validate_stream_name(s).map_err(BadStreams::BadName)?;
        if s == ERROR_STREAM {
            return Err(BadStreams::ErrorStream);
        }
        if streams[..i].contains(s) {
            return Err(BadStreams::Twice(s.clone()));
        }
    }
    Ok(streams)
}

/// The FRD headers of the records of the raw file at `path`, up to the first that is not whole:
/// read by seeking over the payloads.
fn record_headers(path: &Path) -> Result<Vec<FrdHeader>, FuError> {
    let io = |e| FuError::Io { action: "reading", path: path.to_owned(), source: e };
    let mut file = File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut head = [0u8; 32];
    let got = read_up_to(&mut file, &mut head).map_err(io)?;
    let header = RawFileHeader::parse(&head[..got])?;
    let mut at = u64::from(header.header_bytes);
    let mut records = Vec::new();
    let mut buf = [0u8; FRD_HEADER_BYTES];
    while at < size {
        file.seek(SeekFrom::Start(at)).map_err(io)?;
        if read_up_to(&mut file, &mut buf).map_err(io)? < FRD_HEADER_BYTES {
            break;
        }
        let Ok(frd) = FrdHeader::parse(&buf) else { break };
        at += frd.record_bytes() as u64;
        if at > size {
            break;
        }
        records.push(frd);
    }
    Ok(records)
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// What the reader thread passes on.
#[derive(Debug)]
enum Line {
    /// A whole line, without its end.
    Text(String),
    /// A line longer than [`MAX_LINE_BYTES`]: the reader stops.
    TooLong,
    /// Reading failed: the reader stops.
    Failed(String),
}

/// One run of the program.
#[derive(Debug)]
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Line>,
}

impl Session {
    /// Starts the program and reads its `STREAMS` line.
    fn start(config: &ExecConfig, name: &str) -> Result<(Session, Vec<String>), FuError> {
        let mut child = Command::new(&config.argv[0])
            .args(&config.argv[1..])
            .envs(config.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| FuError::Hlt(format!("cannot start {name}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let (tx, lines) = sync_channel(LINE_QUEUE);
        // Not joined: a grandchild may hold the pipe open after the program is gone; the thread
        // ends when the pipe closes or the session is dropped.
        let spawned = std::thread::Builder::new().name("hlt-reader".into()).spawn(move || read_lines(stdout, tx));
        let mut session = Session { child, stdin, lines };
        if let Err(e) = spawned {
            session.kill();
            return Err(FuError::Hlt(format!("cannot start a reader thread for {name}: {e}")));
        }
        let problem = match session.lines.recv_timeout(config.startup_timeout) {
            Ok(Line::Text(line)) => match parse_streams(&line) {
                Ok(streams) => return Ok((session, streams)),
                Err(problem) => format!("{name} {problem}"),
            },
            Ok(Line::TooLong) => format!("{name} wrote a line longer than {MAX_LINE_BYTES} bytes"),
            Ok(Line::Failed(e)) => session.gone(name, &e),
            Err(RecvTimeoutError::Disconnected) => session.gone(name, ""),
            Err(RecvTimeoutError::Timeout) => {
                format!("{name} printed no STREAMS line within {:?}", config.startup_timeout)
            }
        };
        session.kill();
        Err(FuError::Hlt(format!("{problem} (at startup)")))
    }

    /// Writes a line to the program.
    fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or(std::io::ErrorKind::BrokenPipe)?;
        stdin.write_all(line.as_bytes())?;
        stdin.flush()
    }

    /// Why the program stopped talking: its exit status if it exits within [`EXIT_GRACE`],
    /// else `detail`.
    fn gone(&mut self, name: &str, detail: &str) -> String {
        self.stdin = None;
        match wait_for(&mut self.child, EXIT_GRACE) {
            Some(status) => format!("{name} {}", describe(status)),
            None if detail.is_empty() => format!("{name} closed its output"),
            None => format!("{name} could not be read: {detail}"),
        }
    }

    /// Ends the program at once.
    fn kill(&mut self) {
        self.stdin = None;
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Closing standard input asks the program to exit.
        self.stdin = None;
        if wait_for(&mut self.child, EXIT_GRACE).is_none() {
            self.kill();
        }
    }
}

/// Waits up to `limit` for `child` to exit, looking every few milliseconds.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// "exited with status N" or "was killed by signal N".
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("ended: {status}")
}

/// The reader thread: passes the program's lines on until its output ends, a line is too long,
/// or nobody listens any more.
fn read_lines(stdout: impl Read, tx: SyncSender<Line>) {
    let mut reader = BufReader::with_capacity(MAX_LINE_BYTES, stdout);
    let mut buf = Vec::with_capacity(256);
    loop {
        buf.clear();
        let line = match (&mut reader).take(MAX_LINE_BYTES as u64).read_until(b'\n', &mut buf) {
            Ok(0) => return,
            Ok(_) if buf.last() == Some(&b'\n') => {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                Line::Text(String::from_utf8_lossy(&buf).into_owned())
            }
            Ok(_) if buf.len() >= MAX_LINE_BYTES => Line::TooLong,
            // The output ended in the middle of a line: pass it on; the next read sees the end.
            Ok(_) => Line::Text(String::from_utf8_lossy(&buf).into_owned()),
            Err(e) => Line::Failed(e.to_string()),
        };
        let last = !matches!(line, Line::Text(_));
        if tx.send(line).is_err() || last {
            return;
        }
    }
}
