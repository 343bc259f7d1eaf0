//! The iperf3 baseline, on loopback only: a one-off `iperf3` server bound to 127.0.0.1 and a
//! client sending to it, as many parallel streams as a point has connections, writes of the
//! point's message size. The client's JSON report gives the figure.
//!
//! Nothing here ever names an address other than 127.0.0.1: the baseline measures the host, and
//! an iperf3 server on a public address would serve anyone.
//!
//! Every wait is bounded: the server must listen within [`LISTEN_WAIT`], the client must end
//! within its test time and [`GRACE`], the server must leave within [`GRACE`] after that; a
//! process that overruns is killed, and the server is killed and reaped whatever happens.

use crate::results::{PointResult, Sender};
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The only address the baseline uses.
pub const LOOPBACK: &str = "127.0.0.1";
/// How long the server may take to listen.
pub const LISTEN_WAIT: Duration = Duration::from_secs(3);
/// How long a process may run past its due time (the client: connecting and exchanging the
/// results around its test time; the server: leaving after its one test).
pub const GRACE: Duration = Duration::from_secs(5);
/// Most parallel streams iperf3 accepts (`-P`).
pub const MAX_STREAMS: u32 = 128;
/// Longest test accepted, in seconds: a scan point lasts seconds, a day is a mistake.
pub const MAX_SECONDS: f64 = 86_400.0;
/// Bytes of a process's output kept (its head for stdout, its tail for stderr).
const OUTPUT_CAP: usize = 64 << 20;
/// How long the readers of a killed process's output may take to end.
const READER_WAIT: Duration = Duration::from_secs(1);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// What iperf3 measured: what the server received, over the client's test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Iperf3Figure {
    /// Payload throughput, over all streams.
    pub bits_per_second: f64,
    /// Payload bytes, over all streams.
    pub bytes: u64,
    /// Length of the measurement, in seconds.
    pub seconds: f64,
}

/// Why the baseline could not be measured. Where a process had said something on stderr, the
/// message ends with its tail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Iperf3Error {
    /// The arguments make no test iperf3 runs.
    #[error("iperf3: bad argument: {0}")]
    BadArgument(String),
    /// A system call failed (finding a free port, starting a process).
    #[error("iperf3: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not listen on 127.0.0.1:`port`: it ended, or did not listen in time.
    #[error("iperf3 server on {LOOPBACK}:{port}: {reason}{}", note(.stderr))]
    ServerNotListening {
        /// Its port.
        port: u16,
        /// What happened instead.
        reason: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// A process ran past its bound and was killed.
    #[error("iperf3 {what}: still running after {after:?}, killed{}", note(.stderr))]
    Timeout {
        /// "client" or "server".
        what: &'static str,
        /// How long it was given.
        after: Duration,
        /// The tail of its stderr.
        stderr: String,
    },
    /// The client failed without a JSON report (iperf3 checks its parameters before it writes
    /// any, and prints its usage instead: a message size over 1 MiB, say).
    #[error("iperf3 client: {status}{}", note(.stderr))]
    Failed {
        /// How it ended.
        status: String,
        /// The tail of its stderr.
        stderr: String,
    },
    /// The client's report holds an error.
    #[error("iperf3 reported: {message}{}", note(.stderr))]
    Reported {
        /// iperf3's message.
        message: String,
        /// The tail of the client's stderr.
        stderr: String,
    },
    /// The client's report is not the JSON expected.
    #[error("iperf3 report: {reason}{}", note(.stderr))]
    BadReport {
        /// What is wrong with it.
        reason: String,
        /// The tail of the client's stderr.
        stderr: String,
    },
}

/// "; stderr: <tail>", or nothing for an empty stderr.
fn note(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!("; stderr: {stderr}") }
}

/// The last lines of `text` (at most 20, at most 2000 bytes), trimmed.
fn tail(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.trim().lines().collect();
    let mut out = lines[lines.len().saturating_sub(20)..].join("\n");
    if out.len() > 2000 {
        let mut cut = out.len() - 2000;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    out
}

/// iperf3 on the `PATH`, if there is one.
pub fn find() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("iperf3")).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The parts of iperf3's JSON report the figure is made of (the rest is ignored, including the
/// keys iperf3 3.12 writes twice in `start`).
#[derive(Deserialize)]
struct Report {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    end: Option<End>,
}

#[derive(Deserialize)]
struct End {
    #[serde(default)]
    sum_received: Option<Sum>,
    #[serde(default)]
    sum_sent: Option<Sum>,
}

#[derive(Deserialize)]
struct Sum {
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
}

/// The figure of an iperf3 client's JSON report (`-J`): `end.sum_received`, what the server
/// received, or `end.sum_sent` in a report without it (a sender's count overstates by what was
/// still in flight, so it is only the fallback). A report with an `error` is an
/// [`Iperf3Error::Reported`].
pub fn parse(json: &str) -> Result<Iperf3Figure, Iperf3Error> {
    parse_with(json, String::new())
}

/// [`parse`], with `stderr` for the errors.
fn parse_with(json: &str, stderr: String) -> Result<Iperf3Figure, Iperf3Error> {
    let report: Report = match serde_json::from_str(json) {
        Ok(report) => report,
        Err(e) => return Err(Iperf3Error::BadReport { reason: format!("not JSON: {e}"), stderr }),
    };
    if let Some(message) = report.error {
        return Err(Iperf3Error::Reported { message, stderr });
    }
    let end = report.end.unwrap_or(End { sum_received: None, sum_sent: None });
    match end.sum_received.or(end.sum_sent) {
        Some(sum) => Ok(Iperf3Figure { bits_per_second: sum.bits_per_second, bytes: sum.bytes, seconds: sum.seconds }),
        None => Err(Iperf3Error::BadReport { reason: "neither end.sum_received nor end.sum_sent".into(), stderr }),
    }
}

/// A child process with its output read by threads (so that a full pipe never stops it), killed
/// and reaped when dropped unless it was waited for.
struct Process {
    child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    reaped: bool,
}

/// Reads `pipe` to its end on a thread, keeping its head (`keep_tail` false) or its tail.
fn drain(pipe: Option<impl Read + Send + 'static>, keep_tail: bool) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > OUTPUT_CAP {
                if keep_tail {
                    kept.drain(..kept.len() - OUTPUT_CAP);
                } else {
                    kept.truncate(OUTPUT_CAP);
                }
            }
        }
        kept
    }))
}

impl Process {
    fn spawn(what: &str, program: &Path, args: &[String], stdout: bool) -> Result<Process, Iperf3Error> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(if stdout { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| Iperf3Error::Io {
                what: format!("starting the {what} ({})", program.display()),
                source,
            })?;
        let stdout = drain(child.stdout.take(), false);
        let stderr = drain(child.stderr.take(), true);
        Ok(Process { child, stdout, stderr, reaped: false })
    }

    /// Its exit status, if it has ended (and is now reaped).
    fn ended(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().ok().flatten();
        self.reaped |= status.is_some();
        status
    }

    /// Waits until it ends or `until`; None if it is still running then.
    fn wait_until(&mut self, until: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.ended() {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills it (if it still runs) and reaps it.
    fn kill(&mut self) {
        if !self.reaped {
            // It may have ended on its own meanwhile: then kill fails and wait reaps it.
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
    }

    /// Kills it, then takes what it wrote: (stdout, the tail of stderr). The readers end with
    /// the process, unless a process it started holds its pipes still: they are then left to
    /// end on their own, after [`READER_WAIT`], with what they read lost.
    fn finish(mut self) -> (Vec<u8>, String) {
        self.kill();
        let until = Instant::now() + READER_WAIT;
        let stdout = join_by(self.stdout.take(), until);
        let stderr = join_by(self.stderr.take(), until);
        (stdout, tail(&stderr))
    }
}

/// What the reader `handle` read, if it ends by `until`.
fn join_by(handle: Option<JoinHandle<Vec<u8>>>, until: Instant) -> Vec<u8> {
    let Some(handle) = handle else { return Vec::new() };
    while !handle.is_finished() && Instant::now() < until {
        std::thread::sleep(POLL);
    }
    if handle.is_finished() { handle.join().unwrap_or_default() } else { Vec::new() }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a socket listens on 127.0.0.1:`port`, from /proc/net/tcp; None where that cannot be
/// read. (Connecting to find out is no probe: a one-off server would take the connection for
/// its one test, fail it and leave.)
fn listening(port: u16) -> Option<bool> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    // The address is the kernel's u32 in hex: 0100007F on a little-endian host.
    let wanted = [format!("0100007F:{port:04X}"), format!("7F000001:{port:04X}")];
    Some(table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // State 0A is LISTEN.
        fields.len() > 3 && wanted.iter().any(|w| w == fields[1]) && fields[3] == "0A"
    }))
}

/// A port free on 127.0.0.1 now (it may be taken again before iperf3 binds it, which iperf3
/// then reports).
fn free_port() -> Result<u16, Iperf3Error> {
    let io = |source| Iperf3Error::Io { what: format!("finding a free port on {LOOPBACK}"), source };
    let listener = std::net::TcpListener::bind((LOOPBACK, 0)).map_err(io)?;
    Ok(listener.local_addr().map_err(io)?.port())
}

/// Runs the baseline: a one-off server `program -s -1 -B 127.0.0.1 -p PORT` (a free port when
/// `port` is None), then, once it listens, the client `program -c 127.0.0.1 -p PORT -P streams
/// -l message_bytes -t SECONDS -J`, with `seconds` rounded up to a whole second, at least 1.
/// Returns the figure of the client's report; the server is killed and reaped in every case.
pub fn run(
    program: &Path,
    streams: u32,
    message_bytes: u32,
    seconds: f64,
    port: Option<u16>,
) -> Result<Iperf3Figure, Iperf3Error> {
    if !(1..=MAX_STREAMS).contains(&streams) {
        return Err(Iperf3Error::BadArgument(format!("{streams} streams; 1 to {MAX_STREAMS}")));
    }
    if message_bytes == 0 {
        return Err(Iperf3Error::BadArgument("a message of 0 bytes".into()));
    }
    if !(0.0..=MAX_SECONDS).contains(&seconds) {
        return Err(Iperf3Error::BadArgument(format!("{seconds} seconds; 0 to {MAX_SECONDS}")));
    }
    if port == Some(0) {
        return Err(Iperf3Error::BadArgument("port 0".into()));
    }
    // iperf3 takes whole seconds.
    let whole_seconds = (seconds.ceil() as u64).max(1);
    let port = match port {
        Some(port) => port,
        None => free_port()?,
    };
    if listening(port) == Some(true) {
        // Its listener would pass for the server's, and the client would test against it.
        return Err(Iperf3Error::ServerNotListening {
            port,
            reason: "another socket listens there already".into(),
            stderr: String::new(),
        });
    }
    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let port_text = port.to_string();
    let mut server = Process::spawn("server", program, &args(&["-s", "-1", "-B", LOOPBACK, "-p", &port_text]), false)?;

    let since = Instant::now();
    loop {
        if let Some(status) = server.ended() {
            let (_, stderr) = server.finish();
            return Err(Iperf3Error::ServerNotListening { port, reason: format!("ended ({status})"), stderr });
        }
        match listening(port) {
            Some(true) => break,
            // Without /proc to look at, the server is given a fixed while to start.
            None if since.elapsed() >= Duration::from_millis(500) => break,
            _ => {}
        }
        if since.elapsed() >= LISTEN_WAIT {
            let (_, stderr) = server.finish();
            return Err(Iperf3Error::ServerNotListening {
                port,
                reason: format!("not listening after {LISTEN_WAIT:?}, killed"),
                stderr,
            });
        }
        std::thread::sleep(POLL);
    }

    let client_args = args(&[
        "-c",
        LOOPBACK,
        "-p",
        &port_text,
        "-P",
        &streams.to_string(),
        "-l",
        &message_bytes.to_string(),
        "-t",
        &whole_seconds.to_string(),
        "-J",
    ]);
    let mut client = Process::spawn("client", program, &client_args, true)?;
    let bound = Duration::from_secs(whole_seconds) + GRACE;
    let status = client.wait_until(Instant::now() + bound);
    let (stdout, stderr) = client.finish();
    let Some(status) = status else {
        return Err(Iperf3Error::Timeout { what: "client", after: bound, stderr });
    };
    // A one-off server leaves after its test; one that does not (its client failed before
    // connecting) is killed, which the figure does not depend on.
    server.wait_until(Instant::now() + if status.success() { GRACE } else { Duration::ZERO });
    let (_, server_stderr) = server.finish();
    let stderr = match (stderr.is_empty(), server_stderr.is_empty()) {
        (_, true) => stderr,
        (true, false) => format!("server: {server_stderr}"),
        (false, false) => format!("{stderr}\nserver: {server_stderr}"),
    };
    match parse_with(&String::from_utf8_lossy(&stdout), stderr) {
        // A client that failed before its report writes its usage, not JSON, to stdout.
        Err(Iperf3Error::BadReport { stderr, .. }) if !status.success() => {
            Err(Iperf3Error::Failed { status: status.to_string(), stderr })
        }
        parsed => parsed,
    }
}

/// The iperf3 [`PointResult`] of `figure`, measured for a point of `clients` × `servers`
/// (`folded` or not) at `threads` threads and `message_bytes`: its messages are its bytes over
/// the message size; no CPU figure (iperf3's CPU is not sampled as pipestream's is), no errors
/// (iperf3 checks nothing).
pub fn point(
    figure: Iperf3Figure,
    clients: u32,
    servers: u32,
    folded: bool,
    threads: u32,
    message_bytes: u32,
) -> PointResult {
    PointResult {
        clients,
        servers,
        folded,
        threads,
        message_bytes,
        sender: Sender::Iperf3,
        seconds: figure.seconds,
        messages: figure.bytes.checked_div(u64::from(message_bytes)).unwrap_or(0),
        bytes: figure.bytes,
        cpu_ns_per_message: None,
        errors: 0,
        socket_buffer_bytes: None,
    }
}

/// The workspace's one rule for a test whose check cannot run here.
#[cfg(test)]
#[path = "../../cli/tests/common/require.rs"]
mod require;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A report recorded from iperf 3.12 on loopback (`-P 2 -l 4096 -t 1 -J`), as it wrote it:
    /// keys written twice in `start` included.
    const SAMPLE: &str = include_str!("../testdata/iperf3-client-2-streams.json");

    /// What iperf 3.12 writes when nothing listens.
    const REFUSED: &str = r#"{
	"start":	{
		"connected":	[],
		"version":	"iperf 3.12",
		"system_info":	"Linux vm 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0 x86_64"
	},
	"intervals":	[],
	"end":	{
	},
	"error":	"unable to connect to server: Connection refused"
}"#;

    /// The tests that start processes, one at a time: a script written while another test
    /// forks may not start (ETXTBSY), and the reaping checks look at all of this process's
    /// children.
    static PROCESSES: Mutex<()> = Mutex::new(());

    fn processes() -> std::sync::MutexGuard<'static, ()> {
        PROCESSES.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An executable shell script `body` in `dir`.
    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-iperf3");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// [`run`], tried again while the script cannot start because a process forked elsewhere
    /// holds it open for writing (ETXTBSY).
    fn run_script(program: &Path, seconds: f64) -> Result<Iperf3Figure, Iperf3Error> {
        for _ in 0..20 {
            match run(program, 1, 4096, seconds, None) {
                Err(Iperf3Error::Io { source, .. }) if source.raw_os_error() == Some(26) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                other => return other,
            }
        }
        panic!("{} busy for a second", program.display());
    }

    /// Whether process `pid` exists at all (a zombie, not reaped, does).
    fn exists(pid: &str) -> bool {
        Path::new("/proc").join(pid.trim()).exists()
    }

    /// The children of this process named iperf3, zombies included.
    fn iperf3_children() -> Vec<String> {
        let me = std::process::id().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // pid (comm) state ppid ...
                let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
                stat.contains("(iperf3)") && after.split_whitespace().nth(1) == Some(me.as_str())
            })
            .collect()
    }

    /// iperf3, or None where it is not installed: the workspace's rule then fails the test
    /// under CI (the baseline would go untested) and skips it elsewhere, saying why.
    fn iperf3_or_skip() -> Option<PathBuf> {
        let found = find();
        let why = "iperf3 is not on the PATH (Debian: apt-get install iperf3), and the test runs it on loopback";
        require::require(why, found.is_some()).then_some(found).flatten()
    }

    #[test]
    fn report_gives_what_the_server_received() {
        let figure = parse(SAMPLE).unwrap();
        assert_eq!(figure, Iperf3Figure { bits_per_second: 5294172405.784612, bytes: 669618176, seconds: 1.011857 });
    }

    #[test]
    fn report_without_the_received_sum_gives_the_sent_one() {
        let json = r#"{"end": {"sum_sent": {"seconds": 2.0, "bytes": 1000, "bits_per_second": 4000.0}}}"#;
        assert_eq!(parse(json).unwrap(), Iperf3Figure { bits_per_second: 4000.0, bytes: 1000, seconds: 2.0 });
    }

    #[test]
    fn bad_reports_say_what_is_wrong() {
        let refused = parse(REFUSED).unwrap_err();
        assert!(matches!(refused, Iperf3Error::Reported { .. }), "{refused:?}");
        assert!(refused.to_string().contains("unable to connect to server: Connection refused"), "{refused}");
        let empty = parse(r#"{"start": {}, "end": {}}"#).unwrap_err().to_string();
        assert!(empty.contains("end.sum_received"), "{empty}");
        let garbage = parse("iperf3: parameter error").unwrap_err().to_string();
        assert!(garbage.contains("not JSON"), "{garbage}");
        let with_stderr = parse_with(REFUSED, "iperf3: some warning".into()).unwrap_err().to_string();
        assert!(with_stderr.ends_with("; stderr: iperf3: some warning"), "{with_stderr}");
    }

    #[test]
    fn stderr_is_cut_to_its_tail() {
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let cut = tail(long.as_bytes());
        assert_eq!(cut.lines().count(), 20);
        assert!(cut.starts_with("line 80") && cut.ends_with("line 99"), "{cut}");
        let wide = "é".repeat(3000);
        let cut = tail(wide.as_bytes());
        assert!(cut.len() <= 2000 + "…".len() + 1 && cut.starts_with('…'), "{}", cut.len());
    }

    #[test]
    fn point_counts_whole_messages() {
        let figure = Iperf3Figure { bits_per_second: 8e9, bytes: 10 * 4096 + 100, seconds: 1.0 };
        let p = point(figure, 4, 2, true, 3, 4096);
        assert_eq!(
            p,
            PointResult {
                clients: 4,
                servers: 2,
                folded: true,
                threads: 3,
                message_bytes: 4096,
                sender: Sender::Iperf3,
                seconds: 1.0,
                messages: 10,
                bytes: 10 * 4096 + 100,
                cpu_ns_per_message: None,
                errors: 0,
                socket_buffer_bytes: None,
            }
        );
        assert_eq!(point(figure, 1, 1, false, 1, 0).messages, 0);
    }

    #[test]
    fn bad_arguments_start_nothing() {
        // A program that does not exist: had anything been started, the error would say so.
        let nowhere = Path::new("/nonexistent/iperf3");
        for (streams, bytes, seconds, port) in
            [(0, 4096, 1.0, None), (129, 4096, 1.0, None), (1, 0, 1.0, None), (1, 4096, f64::NAN, None)]
                .into_iter()
                .chain([(1, 4096, -1.0, None), (1, 4096, 1e9, None), (1, 4096, 1.0, Some(0))])
        {
            let err = run(nowhere, streams, bytes, seconds, port).unwrap_err();
            assert!(matches!(err, Iperf3Error::BadArgument(_)), "{err}");
        }
        let err = run(nowhere, 1, 4096, 1.0, None).unwrap_err().to_string();
        assert!(err.contains("starting the server (/nonexistent/iperf3)"), "{err}");
    }

    #[test]
    fn server_that_ends_at_once_is_reported_with_its_stderr() {
        let _one = processes();
        let dir = tempfile::tempdir().unwrap();
        let fake = script(dir.path(), "echo 'iperf3: unknown option' >&2; exit 3");
        let err = run_script(&fake, 1.0).unwrap_err();
        assert!(matches!(err, Iperf3Error::ServerNotListening { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("ended (exit status: 3)") && text.ends_with("stderr: iperf3: unknown option"), "{text}");
    }

    #[test]
    fn server_that_never_listens_is_killed_and_reaped() {
        let _one = processes();
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let fake = script(dir.path(), &format!("echo $$ > '{}'; exec sleep 30", pid_file.display()));
        let started = Instant::now();
        let err = run_script(&fake, 1.0).unwrap_err();
        let took = started.elapsed();
        assert!(err.to_string().contains("not listening after 3s, killed"), "{err}");
        assert!(took >= LISTEN_WAIT && took < LISTEN_WAIT + Duration::from_secs(2), "{took:?}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(!exists(&pid), "the server (pid {}) is still there", pid.trim());
    }

    #[test]
    fn port_taken_by_another_listener_is_refused() {
        let taken = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = run(Path::new("/nonexistent/iperf3"), 1, 4096, 1.0, Some(port)).unwrap_err().to_string();
        assert!(err.contains(&format!("{LOOPBACK}:{port}: another socket listens there already")), "{err}");
    }

    #[test]
    fn loopback_baseline_measures_and_leaves_no_process() {
        let Some(iperf3) = iperf3_or_skip() else { return };
        let _one = processes();
        let figure = run(&iperf3, 2, 64 << 10, 1.0, None).unwrap();
        assert!(figure.bytes > 0 && figure.bits_per_second > 0.0, "{figure:?}");
        assert!((0.9..3.0).contains(&figure.seconds), "{figure:?}");
        // The rate is the bytes over the seconds (as iperf3 computes it, to rounding).
        let rate = figure.bytes as f64 * 8.0 / figure.seconds;
        assert!((rate / figure.bits_per_second - 1.0).abs() < 0.01, "{rate} vs {figure:?}");
        assert_eq!(iperf3_children(), Vec::<String>::new(), "iperf3 left running or unreaped");

        // A client iperf3 refuses before connecting: its reason is told, and the server, which
        // waits for a test that will not come, is killed at once.
        let started = Instant::now();
        let err = run(&iperf3, 1, 2 << 20, 1.0, None).unwrap_err();
        assert!(matches!(err, Iperf3Error::Failed { .. }), "{err:?}");
        assert!(err.to_string().contains("block size too large"), "{err}");
        assert!(started.elapsed() < GRACE, "{:?}", started.elapsed());
        assert_eq!(iperf3_children(), Vec::<String>::new(), "iperf3 left running or unreaped");
    }

    #[test]
    fn client_that_overruns_is_killed_with_the_server() {
        let Some(iperf3) = iperf3_or_skip() else { return };
        let _one = processes();
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        // A real server, and a client that never ends.
        let fake = script(
            dir.path(),
            &format!(
                "echo $$ >> '{}'\ncase \"$1\" in -s) exec '{}' \"$@\";; *) exec sleep 60;; esac",
                pids.display(),
                iperf3.display()
            ),
        );
        let started = Instant::now();
        let err = run_script(&fake, 1.0).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, Iperf3Error::Timeout { what: "client", .. }), "{err:?}");
        let bound = Duration::from_secs(1) + GRACE;
        assert!(took >= bound && took < bound + Duration::from_secs(3), "{took:?}");
        let pids = std::fs::read_to_string(&pids).unwrap();
        assert_eq!(pids.lines().count(), 2, "{pids}");
        for pid in pids.lines() {
            assert!(!exists(pid), "pid {pid} (server or client) is still there");
        }
    }
}
