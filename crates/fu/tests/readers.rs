//! The broker as CMS's HLT meets it: readers that keep to CMSSW's rules ([`run_reader`]) take
//! every file of a run exactly once, in lumi-section order, and delete them; the broker counts
//! the deleted files' events; a reader that dies after a grant loses the file to another once
//! its lease has run out; `stopls` ends a reader at its lumi section; a thousand readers keep
//! their connections open at once.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::{Duration, Instant};
use tessera_formats::names::BuFileName;
use tessera_fu::broker::{Broker, BrokerClient, BrokerConfig, BrokerTally, PopAnswer};
use tessera_fu::reader::{ReaderConfig, ReaderReport, run_reader};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

const RUN: u32 = 412;

/// 6 lumi sections of 40 events, files of 7: 36 files, 240 events.
fn sample(bu_dir: &Path) -> (u64, u64) {
    let spec = SampleSpec {
        run: RUN,
        lumi_sections: 6,
        events_per_lumi_section: 40,
        events_per_file: 7,
        fed_ids: vec![0, 1, 1024],
        fed_payload_bytes_mean: 128,
        ..SampleSpec::default()
    };
    let summary = write_sample_run(bu_dir, &spec).unwrap();
    (summary.files.len() as u64, 6 * 40)
}

fn reader(broker: &Broker, bu_dir: &Path, pid: u32) -> ReaderConfig {
    ReaderConfig {
        broker: broker.local_addr(),
        broker_host: "127.0.0.1".into(),
        bu_dir: bu_dir.to_owned(),
        run: RUN,
        pid,
        stop_ls: None,
        file_delay: Duration::ZERO,
        timeout: Duration::from_secs(60),
    }
}

/// Waits for the broker's sweep to have counted `files` deleted files.
fn tally_when(broker: &Broker, done: impl Fn(&BrokerTally) -> bool) -> BrokerTally {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tally = broker.tally();
        if done(&tally) {
            return tally;
        }
        assert!(Instant::now() < deadline, "the broker's tally stays at {tally:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The raw files and index JSON left in a run directory and its `fu/`.
fn left(run_dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in [run_dir.to_owned(), run_dir.join("fu")] {
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().into_string().unwrap();
            if name.ends_with(".raw")
                || BuFileName::parse(&name).is_ok_and(|n| matches!(n, BuFileName::IndexJson { .. }))
            {
                names.push(name);
            }
        }
    }
    names
}

#[test]
fn four_cmssw_readers_take_every_file_once_in_order_and_the_broker_counts_what_they_deleted() {
    let bu = tempfile::tempdir().unwrap();
    let (files, events) = sample(bu.path());
    let broker = Broker::start(BrokerConfig::new(bu.path(), RUN)).unwrap();
    let readers: Vec<_> = (0..4)
        .map(|k| {
            let cfg = reader(&broker, bu.path(), 7000 + k);
            thread::spawn(move || run_reader(&cfg, &AtomicBool::new(false)).unwrap())
        })
        .collect();
    let reports: Vec<ReaderReport> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    for report in &reports {
        assert!(report.deviations.is_empty(), "{report:?}");
        assert_eq!(report.last_ls, 6, "each reader ends in the run's last lumi section: {report:?}");
    }
    assert_eq!(reports.iter().map(|r| r.files).sum::<u64>(), files);
    assert_eq!(reports.iter().map(|r| r.events).sum::<u64>(), events);
    let tally = tally_when(&broker, |t| t.files_deleted == files);
    assert_eq!((tally.events_deleted, tally.files_granted, tally.files_out), (events, files, 0));
    // Nothing is left: the broker removed the index JSON of every deleted file.
    assert_eq!(left(&bu.path().join("run000412")), Vec::<String>::new());
    // The count survives the broker: a new one reads it from the reader ledger.
    drop(broker);
    let again = Broker::start(BrokerConfig::new(bu.path(), RUN)).unwrap();
    let tally = tally_when(&again, |t| t.files_deleted == files);
    assert_eq!(tally.events_deleted, events);
}

#[test]
fn a_reader_that_dies_after_a_grant_loses_the_file_to_another_once_its_lease_has_run_out() {
    let bu = tempfile::tempdir().unwrap();
    let (files, events) = sample(bu.path());
    let broker =
        Broker::start(BrokerConfig { lease: Duration::from_secs(1), ..BrokerConfig::new(bu.path(), RUN) }).unwrap();
    // A reader is granted the first file and is never heard of again.
    let dead = BrokerClient::new(broker.local_addr(), RUN, 6000);
    let PopAnswer::Ready { file, .. } = dead.popfile().unwrap() else { panic!("a file for the first reader") };
    assert_eq!((file.ls, file.index), (1, 0));
    // A reader that starts after the lease has run out takes it, and everything else.
    thread::sleep(Duration::from_millis(1600));
    let report = run_reader(&reader(&broker, bu.path(), 6001), &AtomicBool::new(false)).unwrap();
    assert!(report.deviations.is_empty(), "{report:?}");
    assert_eq!((report.files, report.events), (files, events));
    let tally = tally_when(&broker, |t| t.files_deleted == files);
    assert_eq!((tally.claims_returned, tally.events_deleted), (1, events));
    // The dead reader's late work is refused: its claim is not its own any more.
    assert!(dead.done(&file).is_err());
}

#[test]
fn stopls_ends_a_reader_at_its_lumi_section_and_leaves_the_rest_to_others() {
    let bu = tempfile::tempdir().unwrap();
    let (files, events) = sample(bu.path());
    let broker = Broker::start(BrokerConfig::new(bu.path(), RUN)).unwrap();
    let stopping = ReaderConfig { stop_ls: Some(2), ..reader(&broker, bu.path(), 5000) };
    let first = run_reader(&stopping, &AtomicBool::new(false)).unwrap();
    assert!(first.deviations.is_empty(), "{first:?}");
    assert_eq!((first.last_ls, first.events), (2, 80), "{first:?}");
    let rest = run_reader(&reader(&broker, bu.path(), 5001), &AtomicBool::new(false)).unwrap();
    assert!(rest.deviations.is_empty(), "{rest:?}");
    assert_eq!((first.files + rest.files, first.events + rest.events), (files, events));
}

/// Sends a `/popfile` of reader `pid` on `stream` and reads its answer; its status.
fn ask(stream: &mut TcpStream, pid: u32) -> u16 {
    let request = format!(
        "GET /popfile?runnumber={RUN}&pid={pid} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !(answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"\n\n")) {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "the broker closed the connection of reader {pid}");
        answer.push(byte[0]);
    }
    String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
}

#[test]
fn a_broker_keeps_a_thousand_reader_connections_open_at_once() {
    const READERS: u32 = 1000;
    // Both ends of every connection are in this process.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let (soft, hard) = (limit.current, limit.maximum);
    let wanted = u64::from(2 * READERS + 256);
    if soft.is_some_and(|s| s < wanted) {
        let raised = rustix::process::Rlimit { current: Some(wanted.min(hard.unwrap_or(wanted))), maximum: hard };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, raised).unwrap();
    }
    let bu = tempfile::tempdir().unwrap();
    sample(bu.path());
    let broker = Broker::start(BrokerConfig::new(bu.path(), RUN)).unwrap();
    let mut streams: Vec<TcpStream> = (0..READERS)
        .map(|_| {
            let s = TcpStream::connect(broker.local_addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s
        })
        .collect();
    // Every reader is answered, then every one again on the same connection: all were open at
    // once, and none was refused.
    for round in 0..2 {
        for (k, stream) in streams.iter_mut().enumerate() {
            assert_eq!(ask(stream, 10_000 + k as u32), 200, "reader {k}, round {round}");
        }
    }
    let tally = broker.tally();
    assert_eq!(tally.files_granted, 36, "the 36 files went to the first readers: {tally:?}");
}

#[test]
fn the_longest_ready_answer_fits_in_what_a_cmssw_reader_reads_at_once() {
    let bu = tempfile::tempdir().unwrap();
    sample(bu.path());
    let broker = Broker::start(BrokerConfig::new(bu.path(), RUN)).unwrap();
    let host = "h".repeat(63);
    let mut stream = TcpStream::connect(broker.local_addr()).unwrap();
    let request = format!(
        "GET /popfile?runnumber={RUN}&pid={}&host={host} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        u32::MAX
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8(answer.clone()).unwrap();
    assert!(text.contains("state=READY\nfile=run000412_ls0001_index000000_"), "{text}");
    assert!(answer.len() <= tessera_fu::reader::MAX_ANSWER_BYTES, "{} bytes: {text}", answer.len());
    // One character more is refused.
    let mut stream = TcpStream::connect(broker.local_addr()).unwrap();
    let request = format!("GET /popfile?runnumber={RUN}&pid=1&host={host}h HTTP/1.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
}
