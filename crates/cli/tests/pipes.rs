//! Output to a reader that goes away: `tessera run … 2>&1 | tee log` whose `tee` dies, or
//! `tessera inspect FILE | head`. A run drains and writes its summary as ever; a one-shot command
//! ends quietly with status 0, as Unix tools do; neither panics.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

const TESSERA: &str = env!("CARGO_BIN_EXE_tessera");

#[test]
fn inspect_whose_reader_goes_after_a_few_bytes_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sample");
    let args = ["--lumi-sections", "1", "--events-per-ls", "2000", "--events-per-file", "2000"];
    let made = Command::new(TESSERA).arg("sample").arg("--output").arg(&out).args(args).output().unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let raw = std::fs::read_dir(out.join("run000001"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "raw"))
        .unwrap();
    // Some megabytes of JSON, far more than a pipe holds: the writes after the close fail.
    let mut child = Command::new(TESSERA)
        .arg("inspect")
        .arg(&raw)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.is_empty(), "nothing said: {err}");
}

#[test]
fn a_run_whose_output_and_log_readers_go_drains_and_writes_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = Command::new(TESSERA)
        .args(["run", "--seconds", "2", "--output"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The first line of the log, then both readers go, as `| head -1` would.
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap()).read_line(&mut first).unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?} after {first}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["conservation_holds"], true, "{summary}");
    assert_eq!(summary["chain"]["holds"], true, "{summary}");
}
