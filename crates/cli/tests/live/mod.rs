//! What the tests of a live `tessera run` share: starting it with its control server and
//! talking HTTP to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `tessera run` for `seconds` with its output under `dir` (its summary in
/// `dir/summary.txt`), and returns it with the address of its control server.
pub fn start_run(dir: &Path, seconds: u32) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", "--seconds", &seconds.to_string(), "--control", "127.0.0.1:0", "--output"])
        .arg(dir.join("out"))
        .stdout(std::fs::File::create(dir.join("summary.txt")).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let mut addr = None;
    while addr.is_none() && stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(rest) = line.strip_prefix("monitoring: http://") {
            addr = Some(rest.split('/').next().unwrap().parse::<SocketAddr>().unwrap());
        }
        line.clear();
    }
    // Keep reading so that the run never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, addr.expect("tessera run says where its control server is"))
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
