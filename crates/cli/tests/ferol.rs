//! `tessera ferol` as a user runs it: capture files that `tessera inspect` reads clean, faults
//! that it flags, and errors that name the bad argument.

use std::process::{Command, Output};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("tessera runs")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn ferol_writes_captures_that_inspect_reads_clean() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = tessera(&["ferol", "--output", d, "--events", "100", "--feds", "0-2,1024"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 5, "{stdout}");
    for (row, fed) in rows.iter().zip(["0", "1", "2", "1024", "total"]) {
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], fed, "{row}");
        assert_eq!(cols[1], if fed == "total" { "400" } else { "100" }, "{row}");
    }
    // 2048-byte fragments in one block each; trigger fragments of 952 bytes.
    assert!(rows[1].split_whitespace().nth(3) == Some("206400"), "{}", rows[1]);
    assert!(rows[3].split_whitespace().nth(3) == Some("96800"), "{}", rows[3]);
    let path = dir.path().join("fed1.ferol");
    let out = tessera(&["inspect", path.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("100 fragments, 0 problems"), "{stdout}");
}

#[test]
fn ferol_faults_show_in_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let args = ["ferol", "--output", d, "--events", "20", "--feds", "5", "--first-event", "16777211"];
    let out =
        tessera(&[&args[..], &["--fault", "skip@16777217", "--size-mean", "3000", "--size-sigma", "500"]].concat());
    assert!(out.status.success(), "{:?}", text(&out));
    let out = tessera(&["inspect", dir.path().join("fed5.ferol").to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    // Event 2^24 + 1 has LV1 id 1; the wrap itself (16777215 -> 0) is not a gap.
    assert!(stdout.contains("source 5: 2 follows 0 (expected 1)"), "{stdout}");
    assert!(stdout.contains("19 fragments, 1 problems"), "{stdout}");
}

#[test]
fn ferol_errors_name_the_bad_argument() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["--feds", "0-5000"], "tessera: --feds 0-5000: FED id 5000 is above 4095\n"),
        (&["--feds", "0-600"], "tessera: --feds 0-600: more than 512 FEDs for one process\n"),
        (&["--feds", "7-3"], "tessera: --feds 7-3: range 7-3 runs backwards\n"),
        (
            &["--fault", "bogus@1"],
            "tessera: --fault bogus@1: unknown fault \"bogus\"; known: bad-crc, wrong-fed-id, skip, truncate, garbage, disconnect, stall\n",
        ),
        (&["--size", "8"], "tessera: --size 8: fragment size: 8 bytes is outside 16..=1048576\n"),
    ];
    for (extra, message) in cases {
        let out = tessera(&[&["ferol", "--output", d, "--events", "1"][..], extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert_eq!(text(&out).1, message);
    }
    assert!(!dir.path().join("fed0.ferol").exists(), "nothing is sent after a refused argument");
}

#[test]
fn ferol_replays_a_capture_that_inspect_reads_clean() {
    let capture = tempfile::tempdir().unwrap();
    let c = capture.path().to_str().unwrap();
    let out = tessera(&["ferol", "--output", c, "--events", "100", "--feds", "0-1,1024", "--size", "5000"]);
    assert!(out.status.success(), "{:?}", text(&out));
    // Two and a half passes of the capture.
    let replayed = tempfile::tempdir().unwrap();
    let r = replayed.path().to_str().unwrap();
    let out = tessera(&["ferol", "--replay", c, "--output", r, "--events", "250"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("replaying 3 FED streams of 100 events"), "{stderr}");
    assert!(stdout.lines().last().unwrap().split_whitespace().nth(1) == Some("750"), "{stdout}");
    for fed in ["0", "1", "1024"] {
        let out = tessera(&["inspect", replayed.path().join(format!("fed{fed}.ferol")).to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(0), "FED {fed}: {stdout}\n{stderr}");
        assert!(stdout.contains("250 fragments, 0 problems"), "{stdout}");
    }
    // A capture cut short is refused, naming its file.
    let fed1 = capture.path().join("fed1.ferol");
    let bytes = std::fs::read(&fed1).unwrap();
    std::fs::write(&fed1, &bytes[..bytes.len() - 8]).unwrap();
    let out = tessera(&["ferol", "--replay", c, "--output", r, "--events", "1"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with(&format!("tessera: --replay: {}: ", fed1.display())), "{stderr}");
    assert!(stderr.contains("truncated"), "{stderr}");
    // Generation arguments make no sense with a replay.
    let out = tessera(&["ferol", "--replay", c, "--output", r, "--events", "1", "--size", "64"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("cannot be used with"), "{:?}", text(&out));
}
