//! The BU's file broker over loopback: remote FUs popping, fetching and finishing every file of
//! sample runs, publishing and removing their resource summaries, and the answers to wrong runs,
//! bad queries and path traversal attempts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};
use tessera_formats::bookkeeping::{EolsDoc, EorDoc};
use tessera_formats::names::{ClaimedRawName, run_dir_name};
use tessera_formats::raw::data_type;
use tessera_fu::broker::{Broker, BrokerClient, BrokerConfig, BrokerError, PopAnswer, RemoteRunState, peer_host_name};
use tessera_fu::claim::host_name;
use tessera_rundir::RunDirectory;
use tessera_rundir::resources::{FarmLimits, ResourceSummary, assess, now_unix_ms, read_summaries, summary_path};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

fn spec(run: u32) -> SampleSpec {
    SampleSpec {
        run,
        lumi_sections: 4,
        events_per_lumi_section: 24,
        events_per_file: 5,
        fed_ids: vec![0, 1, 2],
        fed_payload_bytes_mean: 256,
        ..SampleSpec::default()
    }
}

fn start(bu_dir: &Path, run: u32) -> Broker {
    Broker::start(BrokerConfig::new(bu_dir, run)).unwrap()
}

/// Every raw file and index JSON of a run directory, by (LS, index), read before any claim.
fn published(run_dir: &Path) -> BTreeMap<(u32, u32), (Vec<u8>, Vec<u8>)> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(run_dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".raw") {
            let parts: Vec<&str> = stem.split('_').collect();
            let ls = parts[1].strip_prefix("ls").unwrap().parse().unwrap();
            let index = parts[2].strip_prefix("index").unwrap().parse().unwrap();
            let raw = fs::read(run_dir.join(&name)).unwrap();
            let json = fs::read(run_dir.join(format!("{stem}.jsn"))).unwrap();
            files.insert((ls, index), (raw, json));
        }
    }
    files
}

/// Sends `request` as is and returns the status and the body.
fn raw_request(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status in {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    raw_request(addr, &format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
}

fn post(addr: SocketAddr, target: &str) -> (u16, String) {
    raw_request(addr, &format!("POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}

fn post_json(addr: SocketAddr, target: &str, body: &str) -> (u16, String) {
    raw_request(
        addr,
        &format!(
            "POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The status and message of a refusal.
fn refusal(e: BrokerError) -> (u16, String) {
    match e {
        BrokerError::Refused { status, message, .. } => (status, message),
        other => panic!("expected a refusal, got {other}"),
    }
}

fn refused_status(e: BrokerError) -> u16 {
    match e {
        BrokerError::Refused { status, .. } => status,
        other => panic!("expected a refusal, got {other}"),
    }
}

#[test]
fn two_remote_fus_take_every_file_exactly_once() {
    let bu = tempfile::tempdir().unwrap();
    let run = 314;
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    assert!(addr.ip().is_loopback());
    assert_eq!(BrokerClient::new(addr, run, 1).popfile().unwrap(), PopAnswer::Starting);

    let summary = write_sample_run(bu.path(), &spec(run)).unwrap();
    let expected = published(&summary.run_dir);
    assert_eq!(expected.len(), summary.files.len());
    assert_eq!(expected.len(), 20);

    let workers: Vec<_> = [(1001, None), (1002, Some("fu-b.cluster"))]
        .into_iter()
        .map(|(pid, host)| {
            let expected = expected.clone();
            thread::spawn(move || {
                let mut client = BrokerClient::new(addr, run, pid).with_timeout(Duration::from_secs(10));
                if let Some(host) = host {
                    client = client.with_host(host);
                }
                let mut taken = Vec::new();
                loop {
                    match client.popfile().unwrap() {
                        PopAnswer::Ready { ls, file, .. } => {
                            assert_eq!(ls, file.ls);
                            assert_eq!(file.pid, pid);
                            assert_eq!(file.host, host.map_or_else(|| "127-0-0-1".to_owned(), str::to_owned));
                            let (raw, json) = &expected[&(file.ls, file.index)];
                            assert!(client.fetch(&file).unwrap() == *raw, "bytes of {file} differ");
                            assert_eq!(client.fetch_index(&file).unwrap(), *json);
                            client.done(&file).unwrap();
                            // Gone once done.
                            assert_eq!(refused_status(client.fetch(&file).unwrap_err()), 404);
                            taken.push((file.ls, file.index));
                        }
                        PopAnswer::EndOfRun { .. } => break,
                        other => panic!("unexpected {other:?} while the run's files are all published"),
                    }
                }
                taken
            })
        })
        .collect();
    let taken: Vec<Vec<(u32, u32)>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let all: Vec<(u32, u32)> = taken.iter().flatten().copied().collect();
    let unique: BTreeSet<(u32, u32)> = all.iter().copied().collect();
    assert_eq!(all.len(), unique.len(), "a file was handed out twice: {taken:?}");
    assert_eq!(unique, expected.keys().copied().collect::<BTreeSet<_>>());
    assert!(taken.iter().all(|t| !t.is_empty()), "one client took everything: {taken:?}");

    // Everything processed: no raw file or index JSON left, nothing claimed.
    let left: Vec<String> = fs::read_dir(&summary.run_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("_index"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(fs::read_dir(summary.run_dir.join("fu")).unwrap().count(), 0);
    assert!(matches!(BrokerClient::new(addr, run, 3).popfile().unwrap(), PopAnswer::EndOfRun { .. }));

    broker.stop();
    broker.join().unwrap();
    assert!(TcpStream::connect(addr).is_err() || BrokerClient::new(addr, run, 1).popfile().is_err());
}

#[test]
fn wrong_run_and_run_change() {
    let bu = tempfile::tempdir().unwrap();
    let broker = start(bu.path(), 5);
    let addr = broker.local_addr();
    assert_eq!(BrokerClient::new(addr, 6, 1).popfile().unwrap(), PopAnswer::NoRun { served_run: Some(5) });
    assert_eq!(BrokerClient::new(addr, 5, 1).popfile().unwrap(), PopAnswer::Starting);
    // NORUN names the run asked for, as a CMSSW reader asserts, and carries lasteols.
    let (status, body) = get(addr, "/popfile?runnumber=6&pid=1");
    assert_eq!(status, 200);
    assert_eq!(
        body,
        "version=2\nrunnumber=6\nstate=NORUN\nservedrun=5\nerrormessage=this broker serves run 5\nlasteols=0\n\n"
    );
    broker.set_run(6);
    assert_eq!(broker.run(), 6);
    assert_eq!(BrokerClient::new(addr, 5, 1).popfile().unwrap(), PopAnswer::NoRun { served_run: Some(6) });
    assert_eq!(BrokerClient::new(addr, 6, 1).popfile().unwrap(), PopAnswer::Starting);
}

#[test]
fn open_lumi_sections_answer_eols_and_stopls_holds_later_files_back() {
    let bu = tempfile::tempdir().unwrap();
    let run = 77;
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    let dir = RunDirectory::create(bu.path(), run, "bu-test").unwrap();
    let client = BrokerClient::new(addr, run, 42);
    assert_eq!(client.popfile().unwrap(), PopAnswer::EndOfLumi { last_eols: 0 });

    // LS 1: one file, LS 2: one file; neither ended.
    let publish_one = |ls: u32| {
        let mut file = dir.open_raw_file(ls, 0, data_type::FRD_EVENTS).unwrap();
        file.append_event(0, ls, &[&[0u8; 64]]).unwrap();
        let closed = dir.close(file).unwrap();
        dir.publish(closed.ls, closed.index).unwrap();
    };
    publish_one(1);
    publish_one(2);
    // The BU checks an LS's files before they are claimed.
    dir.end_lumi_section(1, &EolsDoc { events: 1, files: 1, total_events: 1, lost_events: 0, bytes: 0, orbits: None })
        .unwrap();
    let limited = BrokerClient::new(addr, run, 43).with_stop_ls(Some(1));
    // The broker decides on a listing of the run directory at most a few milliseconds old.
    thread::sleep(Duration::from_millis(20));
    let PopAnswer::Ready { ls: 1, file: first, .. } = limited.popfile().unwrap() else { panic!("LS 1 file expected") };
    // LS 1 is handed out and closed: the client that stops at 1 is done, though LS 2 has a file.
    assert_eq!(limited.popfile().unwrap(), PopAnswer::EndOfRun { ls: 1 });

    // Released, the file is handed out again, under the new claimer's name.
    limited.release(&first).unwrap();
    assert_eq!(refused_status(limited.release(&first).unwrap_err()), 404);
    let PopAnswer::Ready { file: again, .. } = client.popfile().unwrap() else { panic!("released file expected") };
    assert_eq!((again.ls, again.index, again.pid), (1, 0, 42));
    let PopAnswer::Ready { file: second, .. } = client.popfile().unwrap() else { panic!("LS 2 file expected") };
    assert_eq!(second.ls, 2);
    assert_eq!(client.popfile().unwrap(), PopAnswer::EndOfLumi { last_eols: 1 });

    // A third file in LS 3 is held back from a client that stops at LS 2, even after EoR.
    publish_one(3);
    dir.end_run(&EorDoc { events: 3, files: 3, lumis: 3, last_lumi: 3, orbits: None }).unwrap();
    thread::sleep(Duration::from_millis(20));
    let stop2 = BrokerClient::new(addr, run, 44).with_stop_ls(Some(2));
    assert_eq!(stop2.popfile().unwrap(), PopAnswer::EndOfRun { ls: 1 });
    let PopAnswer::Ready { ls: 3, file: third, .. } = client.popfile().unwrap() else { panic!("LS 3 file expected") };
    for claim in [&again, &second, &third] {
        client.done(claim).unwrap();
    }
    assert_eq!(refused_status(client.done(&third).unwrap_err()), 404);
}

#[test]
fn bad_queries_and_path_traversal_are_refused() {
    let bu = tempfile::tempdir().unwrap();
    let run = 9;
    let summary = write_sample_run(bu.path(), &SampleSpec { run, ..SampleSpec::default() }).unwrap();
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    let secret = bu.path().join("secret.raw");
    fs::write(&secret, b"not for FUs").unwrap();

    for target in [
        "/popfile?runnumber=9",
        "/popfile?pid=1",
        "/popfile?runnumber=nine&pid=1",
        "/popfile?runnumber=9&pid=-1",
        "/popfile?runnumber=9&pid=+1",
        "/popfile?runnumber=9&pid=99999999999",
        "/popfile?runnumber=9&pid=1&pid=2",
        "/popfile?runnumber=9&pid=1&stopls=x",
        "/popfile?runnumber=9&pid=1&color=red",
        "/popfile?runnumber=9&pid=1&host=a_b",
        "/popfile?runnumber=9&pid=1&host=..%2F..",
        "/popfile?runnumber=9&pid=1&host=",
        "/popfile?runnumber=9&pid=1&host=%ZZ",
    ] {
        let (status, body) = get(addr, target);
        assert_eq!(status, 400, "{target}: {body}");
        assert!(body.starts_with("version=2\nrunnumber=9\nstate=ERROR\nerrormessage="), "{target}: {body}");
        assert!(body.ends_with("\n\n"), "{target}: {body:?}");
    }
    let bad_names = [
        "../../etc/passwd",
        "..%2F..%2Fetc%2Fpasswd",
        "fu/../../secret.raw",
        "fu%2F..%2F..%2Fsecret.raw",
        "/etc/passwd",
        "run000009_ls0001_index000000.raw",
        "run000009_ls0001_index000000.jsn",
        "run000009_ls0001_index000000_host_pid1.raw/..",
        "run000009_ls0001_index000000_a/b_pid1.raw",
        "fu/fu/run000009_ls0001_index000000_host_pid1.raw",
        "run000009_ls0001_index000000_host_pid01.raw",
        "run000010_ls0001_index000000_host_pid1.raw",
        "",
    ];
    for name in bad_names {
        for endpoint in ["file", "index"] {
            let (status, body) = get(addr, &format!("/{endpoint}?runnumber=9&name={name}"));
            assert_eq!(status, 400, "{endpoint} {name}: {body}");
            assert!(body.contains("state=ERROR"), "{body}");
        }
        for endpoint in ["done", "release"] {
            let (status, body) = post(addr, &format!("/{endpoint}?runnumber=9&name={name}"));
            assert_eq!(status, 400, "{endpoint} {name}: {body}");
        }
    }
    assert_eq!(get(addr, "/file?runnumber=9").0, 400);
    // A valid name that nobody claimed; another run's name.
    assert_eq!(get(addr, "/file?runnumber=9&name=run000009_ls0001_index000000_h_pid1.raw").0, 404);
    assert_eq!(get(addr, "/file?runnumber=10&name=run000010_ls0001_index000000_h_pid1.raw").0, 404);
    assert_eq!(post(addr, "/done?runnumber=9&name=run000009_ls0001_index000000_h_pid1.raw").0, 404);
    // Unknown endpoints and wrong methods.
    assert_eq!(get(addr, "/etc/passwd").0, 404);
    assert_eq!(get(addr, "/popfile/../file").0, 404);
    assert_eq!(post(addr, "/popfile?runnumber=9&pid=1").0, 405);
    assert_eq!(get(addr, "/done?runnumber=9&name=x").0, 405);
    // Malformed HTTP, answered by hyper: 400, or 431 for a head over its bounds.
    assert_eq!(raw_request(addr, "GARBAGE\r\n\r\n").0, 400);
    assert_eq!(raw_request(addr, "GET /popfile HTTP/2.0\r\n\r\n").0, 400);
    assert_eq!(raw_request(addr, &format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(9000))).0, 431);
    let many_headers = "X-A: b\r\n".repeat(100);
    assert_eq!(raw_request(addr, &format!("GET /popfile HTTP/1.1\r\n{many_headers}\r\n")).0, 431);
    assert_eq!(raw_request(addr, "POST /done HTTP/1.1\r\nContent-Length: 100000\r\n\r\n").0, 413);
    assert_eq!(raw_request(addr, "POST /done HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").0, 501);

    // None of this claimed or removed anything.
    assert!(fs::read_dir(summary.run_dir.join("fu")).map_or(true, |d| d.count() == 0));
    assert_eq!(published(&summary.run_dir).len(), summary.files.len());
    assert_eq!(fs::read(&secret).unwrap(), b"not for FUs");

    // The client names the URL in its errors.
    let name = ClaimedRawName::parse("run000009_ls0001_index000000_h_pid1.raw").unwrap();
    let err = BrokerClient::new(addr, 9, 1).fetch(&name).unwrap_err().to_string();
    assert!(
        err.contains(&format!("http://{addr}/file?runnumber=9&name=run000009_ls0001_index000000_h_pid1.raw")),
        "{err}"
    );
    assert!(err.contains("404") && err.contains("not claimed"), "{err}");
    let err = BrokerClient::new(addr, 9, 1).with_host("a_b").popfile().unwrap_err().to_string();
    assert!(err.contains("/popfile?runnumber=9&pid=1&host=a_b") && err.contains("HTTP 400"), "{err}");
    let dead: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let err = BrokerClient::new(dead, 9, 1).with_timeout(Duration::from_secs(1)).popfile().unwrap_err();
    assert!(
        matches!(err, BrokerError::Io { .. }) && err.to_string().starts_with("http://127.0.0.1:1/popfile"),
        "{err}"
    );
}

#[test]
fn keep_alive_connections_and_stop() {
    let bu = tempfile::tempdir().unwrap();
    let run = 12;
    write_sample_run(bu.path(), &SampleSpec { run, ..SampleSpec::default() }).unwrap();
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    // Two requests on one connection, then one left idle.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    for _ in 0..2 {
        stream.write_all(b"GET /popfile?runnumber=12&pid=7&host=keep HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let n = stream.read(&mut buf).unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.contains("state=READY"), "{answer}");
        assert!(answer.contains("Connection: keep-alive"), "{answer}");
    }
    let fu_dir = bu.path().join(run_dir_name(run)).join("fu");
    assert_eq!(fs::read_dir(&fu_dir).unwrap().count(), 2);
    let started = Instant::now();
    broker.stop();
    assert!(broker.is_stopped());
    broker.join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "an idle connection held the broker");
    assert_eq!(stream.read(&mut buf).unwrap_or(0), 0);
}

#[test]
fn peer_host_names() {
    assert_eq!(peer_host_name("10.0.0.2".parse().unwrap()), "10-0-0-2");
    assert_eq!(peer_host_name("::ffff:10.1.2.3".parse().unwrap()), "10-1-2-3");
    assert_eq!(peer_host_name("fe80::1".parse().unwrap()), "fe80--1");
}

#[test]
fn connections_over_the_limit_get_503() {
    let bu = tempfile::tempdir().unwrap();
    let mut config = BrokerConfig::new(bu.path(), 1);
    config.max_connections = 1;
    let broker = Broker::start(config).unwrap();
    let addr = broker.local_addr();
    // One idle keep-alive connection holds the only slot.
    let mut held = TcpStream::connect(addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    held.write_all(b"GET /popfile?runnumber=1&pid=1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = [0u8; 1024];
    assert!(held.read(&mut buf).unwrap() > 0);
    let err = BrokerClient::new(addr, 1, 2).popfile().unwrap_err();
    assert!(matches!(err, BrokerError::Refused { status: 503, .. }), "{err}");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while BrokerClient::new(addr, 1, 2).popfile().is_err() {
        assert!(Instant::now() < deadline, "the slot was not freed");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_remote_fu_publishes_and_removes_its_resource_summary_through_the_broker() {
    let bu = tempfile::tempdir().unwrap();
    let run = 15;
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    let pid = 4242;
    let client = BrokerClient::new(addr, run, pid);
    let Ok(RemoteRunState::Starting { host }) = client.state() else { panic!("no run directory yet") };
    assert_eq!(host, "127-0-0-1", "the broker names a client by its address");
    let summary = ResourceSummary {
        host: host.clone(),
        pid,
        run,
        updated_unix_ms: 1,
        free_slots: 1,
        queued_lumi_sections: 2,
        output_bytes_per_s: 1000.0,
        output_used_percent: 30,
        cpu_seconds: 1.5,
    };
    let before = now_unix_ms();
    client.publish_summary(&summary).unwrap();
    // Where a local FU's summary goes, read as the BU reads it, and stamped on receipt.
    let path = summary_path(bu.path(), &host, pid);
    assert!(path.is_file(), "{}", path.display());
    let read = read_summaries(bu.path(), run);
    assert_eq!(read.len(), 1);
    assert!(read[0].updated_unix_ms >= before, "stamped by the BU host's clock, not the FU's");
    assert_eq!(read[0], ResourceSummary { updated_unix_ms: read[0].updated_unix_ms, ..summary.clone() });
    assert_eq!(assess(&read, now_unix_ms(), Duration::from_secs(60), &FarmLimits::default()), None);

    // Summaries of another run, host or process's host, and bodies that are not summaries.
    let (status, message) =
        refusal(client.publish_summary(&ResourceSummary { run: 16, ..summary.clone() }).unwrap_err());
    assert_eq!((status, message.as_str()), (400, "a summary of run 16 posted for run 15"));
    let (status, message) =
        refusal(client.publish_summary(&ResourceSummary { host: "fu7".into(), ..summary.clone() }).unwrap_err());
    assert_eq!(status, 400);
    assert!(message.contains(r#"host "fu7""#) && message.contains(r#"claims are made under "127-0-0-1""#), "{message}");
    let other_run = BrokerClient::new(addr, 16, pid).publish_summary(&ResourceSummary { run: 16, ..summary.clone() });
    assert_eq!(refusal(other_run.unwrap_err()), (404, "run 16 is not served (the broker serves run 15)".into()));
    let local = ResourceSummary { host: host_name(), ..summary.clone() };
    let (status, message) = refusal(client.clone().with_host(host_name()).publish_summary(&local).unwrap_err());
    assert!(status == 400 && message.contains("the BU's own host name"), "{status} {message}");
    let (status, body) = post_json(addr, "/summary?runnumber=15", r#"{"host": "127-0-0-1", "pid": "#);
    assert!(status == 400 && body.contains("the body is not a resource summary"), "{body}");
    let negative = serde_json::to_string(&ResourceSummary { cpu_seconds: -1.0, ..summary.clone() }).unwrap();
    let (status, body) = post_json(addr, "/summary?runnumber=15", &negative);
    assert!(status == 400 && body.contains("must not be negative"), "{body}");
    assert_eq!(post_json(addr, "/summary?runnumber=15", &" ".repeat(5000)).0, 413);
    let (status, body) = get(addr, "/summary?runnumber=15");
    assert!(status == 405 && body.contains("/summary takes POST or DELETE"), "{body}");
    // None of them was written.
    assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
    assert_eq!(read_summaries(bu.path(), run), read);

    // The FU leaves: its summary goes, and removing it again is fine.
    client.remove_summary().unwrap();
    assert!(!path.exists());
    assert!(read_summaries(bu.path(), run).is_empty());
    client.remove_summary().unwrap();
    let (status, body) =
        raw_request(addr, "DELETE /summary?runnumber=15&pid=4242 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(status == 200 && body.contains("result=absent"), "{body}");
}

#[test]
fn an_answer_is_byte_for_byte_what_a_cmssw_reader_reads_and_head_claims_nothing() {
    let bu = tempfile::tempdir().unwrap();
    let summary = write_sample_run(bu.path(), &SampleSpec { run: 21, ..SampleSpec::default() }).unwrap();
    let broker = start(bu.path(), 21);
    let addr = broker.local_addr();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /popfile?runnumber=22&pid=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let body =
        "version=2\nrunnumber=22\nstate=NORUN\nservedrun=21\nerrormessage=this broker serves run 21\nlasteols=0\n\n";
    assert_eq!(
        answer,
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    );
    // HEAD is not GET: it is refused, and no file is claimed for it.
    let (status, _) =
        raw_request(addr, "HEAD /popfile?runnumber=21&pid=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 405);
    assert!(fs::read_dir(summary.run_dir.join("fu")).map_or(true, |d| d.count() == 0));
}

#[test]
fn a_file_longer_than_the_client_takes_is_refused_naming_the_limit() {
    let bu = tempfile::tempdir().unwrap();
    let run = 316;
    let broker = start(bu.path(), run);
    let summary = write_sample_run(bu.path(), &spec(run)).unwrap();
    let expected = published(&summary.run_dir);
    let client = BrokerClient::new(broker.local_addr(), run, 1).with_timeout(Duration::from_secs(10));
    let PopAnswer::Ready { file, .. } = client.popfile().unwrap() else { panic!("a file is ready") };
    let raw = &expected[&(file.ls, file.index)].0;
    // One byte short of the file: refused, and the limit said.
    let short = client.clone().with_max_body(raw.len() as u64 - 1);
    let e = short.fetch(&file).unwrap_err().to_string();
    assert!(e.contains(&format!("over the limit of {}", raw.len() - 1)), "{e}");
    // Exactly the file's length: taken whole.
    let exact = client.with_max_body(raw.len() as u64);
    assert!(exact.fetch(&file).unwrap() == *raw);
}

/// The `key=value` lines of a `/popfile` answer.
fn fields(body: &str) -> BTreeMap<String, String> {
    body.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

#[test]
fn three_cmssw_readers_are_never_told_a_section_is_closed_before_its_files_are_handed_out() {
    // A whole run, every EoLS and the EoR written before the first reader asks: the BU's last
    // EoLS is 4 throughout, but no answer may say a section closed while a file of it is left,
    // since a CMSSW reader marks sections up to `lasteols` ended before it opens its file.
    let bu = tempfile::tempdir().unwrap();
    let run = 515;
    let summary = write_sample_run(bu.path(), &spec(run)).unwrap();
    let files = published(&summary.run_dir);
    let broker = start(bu.path(), run);
    let addr = broker.local_addr();
    let (mut granted, mut said_before, mut answers) = (BTreeSet::new(), 0u32, 0);
    let mut ended = BTreeSet::new();
    while ended.len() < 3 {
        for pid in [7001u32, 7002, 7003] {
            if ended.contains(&pid) {
                continue;
            }
            let (status, body) = get(addr, &format!("/popfile?runnumber={run}&pid={pid}"));
            assert_eq!(status, 200, "{body}");
            let f = fields(&body);
            let last_eols: u32 = f["lasteols"].parse().unwrap();
            answers += 1;
            match f["state"].as_str() {
                "READY" if f.contains_key("file") => {
                    let (ls, index): (u32, u32) = (f["lumisection"].parse().unwrap(), f["index"].parse().unwrap());
                    assert!(last_eols < ls, "a file of lumi section {ls} granted with lasteols={last_eols}: {body}");
                    assert!(ls > said_before, "a file of lumi section {ls} after lasteols={said_before} was said");
                    assert!(granted.insert((ls, index)), "({ls}, {index}) granted twice");
                }
                "EOR" => {
                    ended.insert(pid);
                }
                other => panic!("{other} with files left: {body}"),
            }
            said_before = said_before.max(last_eols);
        }
        assert!(answers < 200, "the readers do not finish");
    }
    assert_eq!(granted, files.keys().copied().collect::<BTreeSet<_>>());
    assert_eq!(said_before, 4, "once every file is handed out, the run's sections are all closed");
}
