//! The sender over real sockets and files: a loopback TCP receiver checks every fragment of one
//! FED's stream; a front end waits, a bounded time, for a receiver that is not listening yet;
//! capture files hold each FED's stream; bounded runs end by themselves.

use std::io::Read;
use std::net::TcpListener;
use std::time::{Duration, Instant};
use tessera_config::emulation::{ClockSpec, FedSpec, SizeModel};
use tessera_emu::generator::StreamConfig;
use tessera_emu::sender::{self, End, Limits, SenderConfig, Sink, StopLine, capture_path};
use tessera_formats::ferol::FerolStream;
use tessera_formats::seeded::first_payload_mismatch;
use tessera_inspect::stream::inspect_ferol_stream;

fn stream(fed: u16, size: SizeModel) -> StreamConfig {
    StreamConfig {
        run: 77,
        fed: FedSpec { fed, size },
        first_event: 1,
        clock: ClockSpec::default(),
        faults: Vec::new(),
        seed: 1,
    }
}

#[test]
fn a_front_end_started_before_its_receiver_waits_for_it_to_listen_and_gives_up_after_its_wait() {
    // A port nobody listens on: bind one, then free it; the receiver takes it 300 ms later.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let receiver = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let mut bytes = Vec::new();
        conn.read_to_end(&mut bytes).unwrap();
        bytes.len() as u64
    });
    let run = |wait| {
        sender::run(SenderConfig {
            replay: None,
            streams: vec![stream(3, SizeModel::Fixed(1024))],
            sink: Sink::Connect { address: address.clone(), wait },
            paced: false,
            pace_percent: 100,
            limits: Limits { events: Some(100), seconds: None },
            stop: None,
        })
    };
    let summary = run(Duration::from_secs(10)).unwrap();
    assert_eq!((summary.streams[0].events, summary.streams[0].end), (100, End::Events));
    assert_eq!(summary.streams[0].bytes, receiver.join().unwrap(), "every byte reached the late receiver");
    // Nobody listens any more: it tries for its wait, then says how long it tried.
    let started = Instant::now();
    let e = run(Duration::from_millis(400)).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    let why = std::error::Error::source(&e).map(ToString::to_string).unwrap_or_default();
    assert_eq!(e.to_string(), format!("FED 3: cannot connect to {address}"));
    assert!(why.ends_with("; tried for 400ms"), "{why}");
}

/// A stream that stalls sends nothing from its event on but keeps its connection open, however
/// long the receiver waits; it ends once the receiver closes the connection, having sent exactly
/// the events before it.
#[test]
fn a_stalled_stream_keeps_its_connection_open_and_ends_when_its_receiver_closes_it() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let mut stalled = stream(5, SizeModel::Fixed(1024));
    stalled.faults = vec!["stall@11".parse().unwrap()];
    let sender = std::thread::spawn(move || {
        sender::run(SenderConfig {
            replay: None,
            streams: vec![stalled],
            sink: Sink::connect(address),
            paced: false,
            pace_percent: 100,
            limits: Limits { events: Some(100), seconds: None },
            stop: None,
        })
    });
    let (mut conn, _) = listener.accept().unwrap();
    // Ten fragments come, then nothing for a second: the stream is silent, not closed.
    conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut bytes = Vec::new();
    let err = conn.read_to_end(&mut bytes).unwrap_err();
    assert!(matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{err}");
    assert_eq!(FerolStream::new(&bytes).count(), 10, "events 1..=10, then the stall");
    assert!(!sender.is_finished(), "a stalled stream waits for its receiver");
    drop(conn);
    let summary = sender.join().unwrap().unwrap();
    let s = &summary.streams[0];
    assert_eq!((s.events, s.faults, s.end, s.bytes), (10, 1, End::Stalled, bytes.len() as u64));
}

/// A stream that only run control ends (no event or time limit) takes its receiver's close as
/// its end, as at the end of a run whose EVM kept the time; a stream with a limit that loses its
/// receiver first was cut short, and says so.
#[test]
fn a_stream_without_limits_ends_cleanly_when_its_receiver_closes_and_one_with_limits_fails() {
    let run = |limits: Limits| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let sender = std::thread::spawn(move || {
            sender::run(SenderConfig {
                replay: None,
                streams: vec![stream(6, SizeModel::Fixed(1024))],
                sink: Sink::connect(address),
                paced: false,
                pace_percent: 100,
                limits,
                stop: Some(StopLine::new()),
            })
        });
        let (mut conn, _) = listener.accept().unwrap();
        let mut first = vec![0u8; 64 * 1024];
        conn.read_exact(&mut first).unwrap();
        drop(conn);
        sender.join().unwrap()
    };
    let summary = run(Limits::default()).expect("a clean end");
    assert_eq!(summary.streams[0].end, End::ReceiverClosed);
    assert!(summary.streams[0].events > 0);
    let e = run(Limits { events: Some(u64::MAX), seconds: None }).unwrap_err();
    assert!(e.to_string().starts_with("FED 6: write failed after"), "{e}");
}

#[test]
fn loopback_tcp_receiver_checks_every_fragment() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut bytes = Vec::new();
        conn.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let size = SizeModel::LogNormal { mean_bytes: 6000.0, sigma_bytes: 4000.0 };
    let summary = sender::run(SenderConfig {
        replay: None,
        streams: vec![stream(12, size)],
        sink: Sink::connect(address),
        paced: false,
        pace_percent: 100,
        limits: Limits { events: Some(500), seconds: None },
        stop: None,
    })
    .unwrap();
    let bytes = receiver.join().unwrap();
    assert_eq!(summary.streams[0].bytes, bytes.len() as u64);
    assert_eq!((summary.streams[0].events, summary.streams[0].end), (500, End::Events));
    let mut frag = vec![0u8; 1 << 21];
    let mut n = 0u64;
    for item in FerolStream::new(&bytes) {
        let (offset, f) = item.unwrap();
        f.check_crc().unwrap_or_else(|e| panic!("at {offset}: {e}"));
        let len = f.copy_to(&mut frag).unwrap();
        assert_eq!(len, size.fragment_bytes(77, 12, n + 1), "size recomputed downstream");
        assert_eq!(first_payload_mismatch(77, 12, n + 1, &frag[8..len - 8]), None);
        n += 1;
    }
    assert_eq!(n, 500);
}

#[test]
fn capture_files_hold_each_fed_and_faults_end_or_mark_streams() {
    let dir = tempfile::tempdir().unwrap();
    let mut faulty = stream(2, SizeModel::Fixed(1024));
    faulty.faults = vec!["disconnect@31".parse().unwrap(), "bad-crc@7".parse().unwrap()];
    let summary = sender::run(SenderConfig {
        replay: None,
        streams: vec![stream(0, SizeModel::Fixed(300_000)), faulty, stream(1024, SizeModel::Fixed(64))],
        sink: Sink::Directory(dir.path().to_owned()),
        paced: false,
        pace_percent: 100,
        limits: Limits { events: Some(50), seconds: None },
        stop: None,
    })
    .unwrap();
    let ends: Vec<(u16, u64, u64, End)> = summary.streams.iter().map(|s| (s.fed, s.events, s.faults, s.end)).collect();
    assert_eq!(ends, [(0, 50, 0, End::Events), (2, 30, 2, End::Disconnect), (1024, 50, 0, End::Events)]);
    for (fed, units, problems) in [(0, 50, 0), (2, 30, 1), (1024, 50, 0)] {
        let bytes = std::fs::read(capture_path(dir.path(), fed)).unwrap();
        assert_eq!(bytes.len() as u64, summary.streams.iter().find(|s| s.fed == fed).unwrap().bytes);
        let report = inspect_ferol_stream("capture", &bytes);
        assert_eq!(report.sources[&u32::from(fed)].units, units, "FED {fed}");
        assert_eq!(report.problems.len(), problems, "FED {fed}: {:?}", report.problems);
    }
    let table = summary.to_string();
    assert!(table.contains("Disconnect") && table.contains("free running"), "{table}");
}

#[test]
fn a_paced_run_with_a_time_limit_ends_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stream(4, SizeModel::Fixed(512));
    config.clock.rate_hz = 1000.0;
    let line = StopLine::new();
    let before = Instant::now();
    let summary = sender::run(SenderConfig {
        replay: None,
        streams: vec![config],
        sink: Sink::Directory(dir.path().to_owned()),
        paced: true,
        pace_percent: 100,
        limits: Limits { events: None, seconds: Some(0.3) },
        stop: Some(line.clone()),
    })
    .unwrap();
    // The trigger clock started once, after the call and before the run ended.
    let starts = line.clock_starts();
    assert!(starts.len() == 1 && starts[0] >= before && starts[0] <= Instant::now(), "{starts:?}");
    let s = &summary.streams[0];
    assert_eq!(s.end, End::Deadline);
    // About 300 triggers in 0.3 s at 1 kHz; the bounds only catch a sender that ignores pacing.
    assert!((150..=450).contains(&s.events), "{} events", s.events);
    assert!(summary.seconds < 5.0);
    assert!(summary.to_string().lines().last().unwrap().contains(" s"));
}

#[test]
fn bad_configurations_are_refused_before_anything_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let run = |streams, sink, limits| {
        sender::run(SenderConfig { streams, replay: None, sink, paced: false, pace_percent: 100, limits, stop: None })
    };
    let one = vec![stream(1, SizeModel::Fixed(64))];
    let events = Limits { events: Some(1), seconds: None };
    let msg = |r: Result<_, tessera_emu::EmuError>| r.unwrap_err().to_string();
    assert_eq!(
        msg(run(one.clone(), Sink::Directory(dir.path().into()), Limits::default())),
        "sender: no limit: give a number of events or seconds"
    );
    assert_eq!(msg(run(vec![], Sink::Directory(dir.path().into()), events)), "sender: no FED streams");
    let missing = dir.path().join("missing");
    assert_eq!(
        msg(run(one.clone(), Sink::Directory(missing.clone()), events)),
        format!("FED 1: cannot create {}", missing.join("fed1.ferol").display())
    );
    // A port nobody listens on: bind one, then free it.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    assert_eq!(
        msg(run(one, Sink::Connect { address: address.clone(), wait: Duration::ZERO }, events)),
        format!("FED 1: cannot connect to {address}")
    );
}
