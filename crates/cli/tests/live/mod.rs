//! What the tests of a live `tessera run` share: starting it with its control server and
//! talking HTTP to it. The system is the default one (`examples/default.yaml`) with two faults
//! on ru1: FED 5 sends event [`BAD_CRC_EVENT`] with a bad CRC-16, and FED 6 skips event
//! [`SKIP_EVENT`], loses its sync and is left out from then on (ru1 stays in `SYNC_LOSS`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The FED that gets a bad CRC-16, and the event.
pub const BAD_CRC_FED: u16 = 5;
/// See [`BAD_CRC_FED`].
pub const BAD_CRC_EVENT: u64 = 1000;
/// The FED that skips an event, and the event.
pub const SKIP_FED: u16 = 6;
/// See [`SKIP_FED`].
pub const SKIP_EVENT: u64 = 2000;

/// Writes the system of the live tests into `dir`: the default one, with the faults and
/// lumi sections of 4096 orbits (about 0.4 s) so that several close while the tests look. The
/// output goes to the machine's disk, shared with other work, not to a RAM disk: the BUs' and
/// FUs' high-water marks are 100%, so that a disk others have filled does not hold the run back.
/// A machine too busy to keep the FEDs' streams together makes no event incomplete (a silent FED
/// holds the trigger): the faulty FEDs are the only ones in error.
fn system_file(dir: &Path) -> PathBuf {
    let default =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/default.yaml")).unwrap();
    let ru1 = "  - name: ru1\n    feds: \"4-7\"\n";
    let ls = "orbits_per_lumi_section: 16384";
    let fu = "fu:\n  enabled: true\n";
    assert!(
        default.contains(ru1) && default.contains(ls) && default.contains(fu),
        "examples/default.yaml changed:\n{default}"
    );
    let yaml = default
        .replace(
            ru1,
            &format!(
                "{ru1}    faults: [\"bad-crc@{BAD_CRC_EVENT}/{BAD_CRC_FED}\", \"skip@{SKIP_EVENT}/{SKIP_FED}\"]\n"
            ),
        )
        .replace(ls, "orbits_per_lumi_section: 4096")
        .replace(fu, &format!("{fu}  output_high_water_percent: 100\n"))
        + "bu:\n  ramdisk_high_water_percent: 100\n  ramdisk_low_water_percent: 99\n";
    let path = dir.join("system.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Starts `tessera run` of the live tests' system for `seconds` with its output under `dir` (its
/// summary in `dir/summary.txt`), and returns it with the address of its control server.
pub fn start_run(dir: &Path, seconds: u32) -> (Child, SocketAddr) {
    start_run_of(&system_file(dir), &["--seconds", &seconds.to_string()], dir)
}

/// Starts `tessera run` of `system` with `args`, its control server on any free port and its
/// output under `dir` (its summary in `dir/summary.txt`, its log lines in `dir/run.log`), and
/// returns it with the address of its control server.
pub fn start_run_of(system: &Path, args: &[&str], dir: &Path) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg(system)
        .args(args)
        .args(["--control", "127.0.0.1:0", "--output"])
        .arg(dir.join("out"))
        .stdout(std::fs::File::create(dir.join("summary.txt")).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let mut said = String::new();
    let mut addr = None;
    while addr.is_none() && stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line.strip_prefix("monitoring: http://") {
            addr = Some(rest.split('/').next().unwrap().parse::<SocketAddr>().unwrap());
        }
        said.push_str(&line);
        line.clear();
    }
    // Keep reading so that the run never blocks on a full pipe, into its log.
    let mut log = std::fs::File::create(dir.join("run.log")).unwrap();
    let _ = log.write_all(said.as_bytes());
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut log));
    let addr = addr.unwrap_or_else(|| panic!("tessera run never said where its control server is; it said:\n{said}"));
    (child, addr)
}

/// One request; the body of the answer, after checking that it is a success.
pub fn request(addr: SocketAddr, method: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 20"), "{answer}");
    answer.split_once("\r\n\r\n").unwrap().1.to_owned()
}
