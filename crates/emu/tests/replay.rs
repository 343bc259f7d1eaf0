//! Replay of captured streams: what it sends is a valid FEROL stream that goes on where the
//! capture ends (LV1 ids, CRC-16, trigger records), pass 0 is the capture byte for byte, and a
//! bad capture is refused with its file named.

use std::sync::Arc;
use tessera_config::emulation::{ClockSpec, FedSpec, SizeModel};
use tessera_emu::generator::StreamConfig;
use tessera_emu::replay::Capture;
use tessera_emu::sender::{self, End, Limits, RunSummary, SenderConfig, Sink, StopLine, capture_path};
use tessera_formats::fed::lv1_id;
use tessera_formats::ferol::FerolStream;
use tessera_formats::tcds::{TCDS_FED_ID, TcdsRecord};

fn stream(fed: u16, size: SizeModel, first_event: u64) -> StreamConfig {
    StreamConfig {
        run: 9,
        fed: FedSpec { fed, size },
        first_event,
        // Short lumi sections, so that the capture spans several.
        clock: ClockSpec { rate_hz: 100_000.0, seed: 3, orbits_per_lumi_section: 1 },
        faults: Vec::new(),
        seed: 3,
    }
}

fn streams(first_event: u64) -> Vec<StreamConfig> {
    vec![
        stream(3, SizeModel::Fixed(2048), first_event),
        // Several blocks per fragment, and many lengths.
        stream(7, SizeModel::LogNormal { mean_bytes: 9000.0, sigma_bytes: 6000.0 }, first_event),
        stream(TCDS_FED_ID, SizeModel::Fixed(64), first_event),
    ]
}

fn replay(capture: Capture, sink: Sink, limits: Limits, stop: Option<Arc<StopLine>>) -> RunSummary {
    sender::run(SenderConfig {
        streams: Vec::new(),
        replay: Some(Arc::new(capture)),
        sink,
        paced: false,
        pace_percent: 100,
        limits,
        stop,
    })
    .unwrap()
}

#[test]
fn a_replay_goes_on_where_the_capture_ends() {
    // 16777211 crosses the 24-bit LV1 wrap within the second pass.
    let first = 16_777_211 - 40;
    let capture = Capture::generate(&streams(first), 30).unwrap();
    assert_eq!((capture.feds(), capture.events()), (vec![3, 7, TCDS_FED_ID], 30));
    let dir = tempfile::tempdir().unwrap();
    let summary = replay(capture, Sink::Directory(dir.path().into()), Limits { events: Some(75), seconds: None }, None);
    assert!(summary.streams.iter().all(|s| (s.events, s.end) == (75, End::Events)), "{summary}");
    // What a generating sender writes for the first 30 events.
    let generated = tempfile::tempdir().unwrap();
    sender::run(SenderConfig {
        streams: streams(first),
        replay: None,
        sink: Sink::Directory(generated.path().into()),
        paced: false,
        pace_percent: 100,
        limits: Limits { events: Some(30), seconds: None },
        stop: None,
    })
    .unwrap();
    let mut lumi_sections = Vec::new();
    for fed in [3, 7, TCDS_FED_ID] {
        let bytes = std::fs::read(capture_path(dir.path(), fed)).unwrap();
        let original = std::fs::read(capture_path(generated.path(), fed)).unwrap();
        assert_eq!(bytes[..original.len()], original[..], "FED {fed}: pass 0 is the capture");
        assert!(summary.streams.iter().any(|s| s.fed == fed && s.bytes == bytes.len() as u64));
        let mut n = 0u64;
        for item in FerolStream::new(&bytes) {
            let (at, f) = item.unwrap_or_else(|e| panic!("FED {fed}: {e}"));
            f.check_crc().unwrap_or_else(|e| panic!("FED {fed}, event {n} at {at}: {e}"));
            assert_eq!(f.header.lv1_id, lv1_id(first + n), "FED {fed}, event {n}");
            if fed == TCDS_FED_ID {
                let (record, _) = TcdsRecord::parse(f.as_single().unwrap().as_bytes()).unwrap();
                assert_eq!((record.event_number, record.trigger_count), (first + n, record.trigger_count));
                assert_eq!(record.trigger_count, n + 1);
                assert_eq!(tessera_formats::tcds::lumi_section_of_orbit(record.orbit), record.lumi_section);
                lumi_sections.push(record.lumi_section);
            }
            n += 1;
        }
        assert_eq!(n, 75, "FED {fed}");
    }
    // Lumi sections never go back, and each pass moves on by the span of the capture.
    assert!(lumi_sections.windows(2).all(|w| w[0] <= w[1]), "{lumi_sections:?}");
    let span = lumi_sections[29] - lumi_sections[0];
    assert!(span > 0, "the capture spans several lumi sections: {lumi_sections:?}");
    assert_eq!(lumi_sections[30], lumi_sections[0] + span);
    assert_eq!(lumi_sections[60], lumi_sections[0] + 2 * span);
}

#[test]
fn captures_are_loaded_from_the_files_the_emulator_writes() {
    let dir = tempfile::tempdir().unwrap();
    sender::run(SenderConfig {
        streams: streams(1),
        replay: None,
        sink: Sink::Directory(dir.path().into()),
        paced: false,
        pace_percent: 100,
        limits: Limits { events: Some(20), seconds: None },
        stop: None,
    })
    .unwrap();
    let capture = Capture::load(dir.path()).unwrap();
    assert_eq!((capture.feds(), capture.events()), (vec![3, 7, TCDS_FED_ID], 20));
    let total: u64 =
        [3, 7, TCDS_FED_ID].iter().map(|&f| std::fs::metadata(capture_path(dir.path(), f)).unwrap().len()).sum();
    assert_eq!(capture.bytes(), total);
    // A stop line ends every stream after the same event.
    let out = tempfile::tempdir().unwrap();
    let line = StopLine::new();
    line.stop(0);
    let summary = replay(capture, Sink::Directory(out.path().into()), Limits::default(), Some(line));
    assert!(summary.streams.iter().all(|s| s.end == End::Stopped && s.events == 0), "{summary}");
}

#[test]
fn bad_captures_are_refused_with_their_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let load_error = || Capture::load(dir.path()).unwrap_err().to_string();
    assert_eq!(load_error(), format!("{}: no capture file fed<ID>.ferol in it", dir.path().display()));
    let mut config = streams(1);
    config[0].faults = vec!["bad-crc@5".parse().unwrap()];
    let write = |config: Vec<StreamConfig>, events| {
        sender::run(SenderConfig {
            streams: config,
            replay: None,
            sink: Sink::Directory(dir.path().into()),
            paced: false,
            pace_percent: 100,
            limits: Limits { events: Some(events), seconds: None },
            stop: None,
        })
        .unwrap()
    };
    write(config, 10);
    let fed3 = capture_path(dir.path(), 3);
    let e = load_error();
    assert!(e.starts_with(&format!("{}: fragment at byte {}: ", fed3.display(), 4 * 2064)), "{e}");
    assert!(e.contains("CRC-16 mismatch"), "{e}");
    // A skipped event leaves a gap.
    let mut config = streams(1);
    config[0].faults = vec!["skip@4".parse().unwrap()];
    write(config, 10);
    assert!(load_error().contains("LV1 id 5 after 3: a capture must hold consecutive events"), "{}", load_error());
    // A file cut short.
    write(streams(1), 10);
    let bytes = std::fs::read(&fed3).unwrap();
    std::fs::write(&fed3, &bytes[..bytes.len() - 100]).unwrap();
    let e = load_error();
    assert!(e.starts_with(&format!("{}: ", fed3.display())) && e.contains("truncated"), "{e}");
    // Streams of different lengths.
    std::fs::write(&fed3, &bytes[..9 * 2064]).unwrap();
    let e = load_error();
    assert_eq!(
        e,
        format!(
            "{}: FED 7 holds 10 events from LV1 id 1, FED 3 9 from 1; every stream must hold the same events",
            dir.path().display()
        )
    );
    // A file whose name says another FED.
    std::fs::write(&fed3, &bytes).unwrap();
    std::fs::rename(&fed3, capture_path(dir.path(), 4)).unwrap();
    let e = load_error();
    assert!(e.ends_with("its fragments are of FED 3, its name says FED 4"), "{e}");
}

#[test]
fn a_replay_refuses_what_it_cannot_do() {
    let capture = Arc::new(Capture::generate(&streams(1), 4).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let run = |streams, paced| {
        sender::run(SenderConfig {
            streams,
            replay: Some(capture.clone()),
            sink: Sink::Directory(dir.path().into()),
            paced,
            pace_percent: 100,
            limits: Limits { events: Some(1), seconds: None },
            stop: None,
        })
        .unwrap_err()
        .to_string()
    };
    assert!(run(Vec::new(), true).contains("a replay is free running"));
    assert!(run(streams(1), false).contains("give no streams to generate"));
}

#[test]
fn a_dth_replay_goes_on_through_the_orbits_and_lumi_sections() {
    use tessera_emu::dth::dth_capture_path;
    use tessera_emu::orbit::OrbitStreamConfig;
    use tessera_formats::orbit::DthOrbit;
    use tessera_formats::tcds::{orbit_index, orbit_number};
    // 3 orbits per lumi section: the capture of 5 spans two, a replay of 12 four.
    let per_ls = 3;
    let source = |source| OrbitStreamConfig {
        run: 9,
        source,
        size: SizeModel::Fixed(900),
        first_orbit: 1,
        orbits_per_lumi_section: per_ls,
        first_event: 1,
        l1_rate_hz: 300_000.0,
        seed: 5,
        faults: Vec::new(),
        // Small stream blocks: an orbit spans several.
        max_block_bytes: 2048,
    };
    let capture = Capture::generate_orbits(&[source(TCDS_FED_ID), source(4)], 5).unwrap();
    assert!(capture.is_orbits());
    assert_eq!((capture.feds(), capture.events()), (vec![TCDS_FED_ID, 4], 5));
    let dir = tempfile::tempdir().unwrap();
    let summary = replay(capture, Sink::Directory(dir.path().into()), Limits { events: Some(12), seconds: None }, None);
    assert!(summary.streams.iter().all(|s| (s.events, s.end) == (12, End::Events)), "{summary}");
    let mut events = Vec::new();
    for id in [TCDS_FED_ID, 4] {
        let bytes = std::fs::read(dth_capture_path(dir.path(), id)).unwrap();
        let (mut at, mut index, mut counts) = (0, orbit_index(1, per_ls).unwrap(), Vec::new());
        while at < bytes.len() {
            let orbit = DthOrbit::parse(&bytes[at..]).unwrap();
            assert!(orbit.block_count() > 1, "orbit {index} in one block");
            orbit.check_crc().unwrap();
            assert_eq!(orbit.header.source_id, u32::from(id));
            assert_eq!(u64::from(orbit.header.orbit), orbit_number(index, per_ls), "orbit {index} of source {id}");
            counts.push(orbit.header.event_count);
            (at, index) = (at + orbit.wire_len(), index + 1);
        }
        assert_eq!(counts.len(), 12);
        // Passes repeat the captured orbits' events.
        assert_eq!(counts[..5], counts[5..10]);
        events.push(counts);
    }
    assert_eq!(events[0], events[1], "every source holds the same events");
}
