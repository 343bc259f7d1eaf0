//! `tessera dth` as a user runs it: orbit streams received on loopback in which every orbit
//! parses and every source has the same events, capture files that `tessera inspect` reads, a
//! fault that shows, and errors that name the bad argument.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Output};
use tessera_formats::orbit::{DthStream, OrbitBlock};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("tessera runs")
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// One orbit as received: source, orbit number, and (event id, BX) of each fragment.
type Received = (u32, u32, Vec<(u64, u16)>);

/// Every orbit of a stream, each of which must parse with its CRC-32C and its fragments' CRC-16.
fn orbits(stream: &[u8]) -> Vec<Received> {
    DthStream::new(stream)
        .map(|item| {
            let (_, dth) = item.expect("every orbit parses");
            let mut block = vec![0; dth.orbit_len()];
            dth.copy_to(&mut block).unwrap();
            let block = OrbitBlock::parse(&block).unwrap();
            block.check_crc().unwrap();
            let mut events: Vec<(u64, u16)> = block
                .fragments()
                .map(|f| {
                    let f = f.unwrap();
                    f.check_crc().unwrap();
                    (f.event_id(), f.bx())
                })
                .collect();
            events.reverse();
            (block.header.source_id, block.header.orbit, events)
        })
        .collect()
}

#[test]
fn dth_streams_on_loopback_parse_and_agree() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let receiver = std::thread::spawn(move || {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (mut socket, _) = listener.accept().unwrap();
                std::thread::spawn(move || {
                    let mut bytes = Vec::new();
                    socket.read_to_end(&mut bytes).unwrap();
                    bytes
                })
            })
            .collect();
        readers.into_iter().map(|r| r.join().unwrap()).collect::<Vec<_>>()
    });
    let args = ["dth", "--sources", "3,70", "--orbits", "40", "--paced", "--to", &address, "--size", "300"];
    let out = tessera(&args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("paced at the LHC orbit rate"), "{stderr}");
    let mut streams: Vec<_> = receiver.join().unwrap().iter().map(|s| orbits(s)).collect();
    streams.sort_by_key(|s| s[0].0);
    let (a, b) = (&streams[0], &streams[1]);
    assert_eq!((a.len(), b.len()), (40, 40));
    assert!(a.iter().all(|o| o.0 == 3) && b.iter().all(|o| o.0 == 70));
    for (i, (oa, ob)) in a.iter().zip(b).enumerate() {
        assert_eq!((oa.1, ob.1), (1 + i as u32, 1 + i as u32));
        assert_eq!(oa.2, ob.2, "orbit {}", oa.1);
    }
    // The summary counts what the streams carried: 40 orbits and their events.
    let events: usize = a.iter().map(|o| o.2.len()).sum();
    let total: Vec<&str> = stdout.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(&total[..3], ["total", "40", &events.to_string()], "{stdout}");
}

#[test]
fn dth_captures_show_faults_in_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = tessera(&["dth", "--output", d, "--orbits", "30", "--sources", "0-1", "--fault", "skip-orbit@10/1"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let inspect = |file: &str| {
        let out = tessera(&["inspect", dir.path().join(file).to_str().unwrap()]);
        (out.status.code(), text(&out).0)
    };
    let (code, stdout) = inspect("dth0.dth");
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("30 orbits, 0 problems"), "{stdout}");
    let (code, stdout) = inspect("dth1.dth");
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("source 1: 11 follows 9 (expected 10)"), "{stdout}");
}

#[test]
fn dth_errors_name_the_bad_argument() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&["--sources", "0-5000"], "tessera: --sources 0-5000: FED id 5000 is above 4095\n"),
        (&["--fault", "skip@3"], "unknown fault \"skip\"; known: bad-crc, wrong-source-id"),
        (&["--l1-rate-hz", "5e7"], "tessera: --l1-rate-hz: trigger clock: L1 rate 50000000 Hz is outside"),
        (&["--size", "8"], "tessera: --size 8: fragment size: 8 bytes is outside 16..=1048576\n"),
    ];
    for (extra, expected) in cases {
        let out = tessera(&[&["dth", "--output", d, "--orbits", "1"], extra].concat());
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    assert!(!dir.path().join("dth0.dth").exists(), "nothing is sent after a refused argument");
}

/// Captures that cannot fit are refused before anything is written, with the figures, for DTH
/// and FEROL streams alike; a run that fits says what it will take.
#[test]
fn captures_larger_than_the_free_space_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("captures");
    let o = out.to_str().unwrap();
    let refused = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["dth", "--sources", "0-7", "--orbits", "100000000000", "--output", o])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("8 streams of 100000000000 orbits") && said.contains("free; give --output"), "{said}");
    let refused = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["ferol", "--feds", "0-3", "--events", "100000000000", "--output", o])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("4 streams of 100000000000 events"), "{said}");
    assert!(!out.exists(), "nothing was created");
    let fits = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["dth", "--sources", "0-1", "--orbits", "10", "--output", o])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&fits.stderr);
    assert!(fits.status.success() && said.contains("of captures;"), "{said}");
}
