//! The pure generator against the formats' own parsers and `tessera inspect`'s stream report:
//! streams parse, CRCs and seeded payloads check, sizes follow their model, the LV1 id wraps,
//! the trigger clock keeps CMSSW's lumi rule, and every fault shows as the problem it should.

use tessera_config::emulation::{ClockSpec, Fault, FaultSpec, FedSpec, SizeModel};
use tessera_emu::generator::{StreamConfig, StreamGenerator, Trigger, Wire};
use tessera_formats::ferol::FerolStream;
use tessera_formats::seeded::first_payload_mismatch;
use tessera_formats::tcds::TcdsRecord;
use tessera_inspect::stream::inspect_ferol_stream;

const RUN: u32 = 4321;

fn config(fed: u16, size: SizeModel) -> StreamConfig {
    StreamConfig {
        run: RUN,
        fed: FedSpec { fed, size },
        first_event: 1,
        clock: ClockSpec::default(),
        faults: Vec::new(),
        seed: 9,
    }
}

/// The stream bytes of `events` events, and each event's trigger.
fn capture(config: StreamConfig, events: usize) -> (Vec<u8>, Vec<Trigger>) {
    let mut generator = StreamGenerator::new(config).unwrap();
    let mut bytes = Vec::new();
    let mut triggers = Vec::new();
    for _ in 0..events {
        let event = generator.next_event().unwrap();
        let before = bytes.len();
        event.append_wire_bytes(&mut bytes);
        assert_eq!(bytes.len() - before, event.wire_len());
        triggers.push(event.trigger);
    }
    (bytes, triggers)
}

/// Every fragment of a clean stream: CRC-16, seeded payload (or trigger record), LV1 id, BX.
fn check_stream(bytes: &[u8], fed: u16, first_event: u64, triggers: &[Trigger]) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut frag = vec![0u8; 1 << 21];
    for (i, item) in FerolStream::new(bytes).enumerate() {
        let (offset, f) = item.unwrap_or_else(|e| panic!("fragment {i}: {e}"));
        f.check_crc().unwrap_or_else(|e| panic!("fragment {i} at {offset}: {e}"));
        let event = first_event + i as u64;
        assert_eq!(f.header.source_id, fed);
        assert_eq!(u64::from(f.header.lv1_id), event & 0xFF_FFFF);
        assert_eq!(f.header.bx_id, triggers[i].bx, "BX from the trigger clock");
        let n = f.copy_to(&mut frag).unwrap();
        if fed == 1024 {
            let (record, _) = TcdsRecord::parse(&frag[..n]).unwrap();
            assert_eq!((record.run, record.event_number, record.trigger_count), (RUN, event, i as u64 + 1));
            assert_eq!((record.orbit, record.bx, record.lumi_section), (triggers[i].orbit, triggers[i].bx, 1));
            record.check_lumi_section().unwrap();
        } else {
            assert_eq!(first_payload_mismatch(RUN, fed, event, &frag[8..n - 8]), None, "fragment {i}");
        }
        sizes.push(n);
    }
    sizes
}

#[test]
fn streams_parse_and_every_fragment_checks() {
    let models = [
        (0, SizeModel::Fixed(2048)),
        (1, SizeModel::LogNormal { mean_bytes: 3000.0, sigma_bytes: 2000.0 }),
        (2, SizeModel::Fixed(20_008)), // five blocks per fragment
        (1024, SizeModel::Fixed(64)),  // ignored: the trigger fragment is 952 bytes
    ];
    for (fed, size) in models {
        let (bytes, triggers) = capture(config(fed, size), 300);
        let sizes = check_stream(&bytes, fed, 1, &triggers);
        assert_eq!(sizes.len(), 300, "FED {fed}");
        match (fed, size) {
            (1024, _) => assert!(sizes.iter().all(|&n| n == 952)),
            (_, SizeModel::Fixed(b)) => assert!(sizes.iter().all(|&n| n == b), "FED {fed}"),
            _ => assert!(sizes.iter().any(|&n| n != sizes[0]), "log-normal sizes vary"),
        }
        let report = inspect_ferol_stream("capture", &bytes);
        assert!(report.problems.is_empty(), "FED {fed}: {:?}", report.problems);
        assert_eq!(report.sources[&u32::from(fed)].units, 300);
    }
}

#[test]
fn log_normal_sizes_have_the_configured_mean_and_sigma() {
    let model = SizeModel::LogNormal { mean_bytes: 8192.0, sigma_bytes: 4096.0 };
    let sizes: Vec<f64> = (0..40_000u64).map(|e| model.fragment_bytes(RUN, 7, e) as f64).collect();
    let mean = sizes.iter().sum::<f64>() / sizes.len() as f64;
    let sigma = (sizes.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / sizes.len() as f64).sqrt();
    assert!((mean / 8192.0 - 1.0).abs() < 0.02, "mean {mean}");
    assert!((sigma / 4096.0 - 1.0).abs() < 0.05, "sigma {sigma}");
    // Deterministic: a downstream stage recomputes the same size.
    assert_eq!(model.fragment_bytes(RUN, 7, 123), model.fragment_bytes(RUN, 7, 123));
    assert_ne!((0..50).map(|e| model.fragment_bytes(RUN, 7, e)).collect::<Vec<_>>(), vec![sizes[0] as usize; 50]);
}

#[test]
fn lv1_id_wraps_at_2_24_without_a_gap() {
    let first = (1u64 << 24) - 3;
    let mut data = config(5, SizeModel::Fixed(256));
    data.first_event = first;
    let mut trigger = config(1024, SizeModel::Fixed(256));
    trigger.first_event = first;
    for cfg in [data, trigger] {
        let fed = cfg.fed.fed;
        let (bytes, triggers) = capture(cfg, 6);
        check_stream(&bytes, fed, first, &triggers);
        let report = inspect_ferol_stream("capture", &bytes);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let lv1: Vec<u64> = report.units.iter().map(|u| u.number).collect();
        assert_eq!(lv1, [(1 << 24) - 3, (1 << 24) - 2, (1 << 24) - 1, 0, 1, 2]);
    }
}

#[test]
fn trigger_clock_keeps_the_lumi_rule_and_time_order() {
    let mut cfg = config(1024, SizeModel::Fixed(64));
    cfg.clock = ClockSpec { rate_hz: 50_000.0, seed: 3, orbits_per_lumi_section: 1000 };
    let mut generator = StreamGenerator::new(cfg).unwrap();
    let mut previous: Option<(Trigger, TcdsRecord)> = None;
    let mut lumi_sections = std::collections::BTreeSet::new();
    let events = 20_000;
    for i in 0..events {
        let event = generator.next_event().unwrap();
        let (record, fragment) = TcdsRecord::parse(event.bytes).unwrap();
        fragment.check_crc().unwrap();
        record.check_lumi_section().unwrap();
        let t = event.trigger;
        assert!(record.bx < 3564);
        assert_eq!(t.lumi_section, (t.orbit_count / 1000 + 1) as u32);
        assert_eq!(record.orbit, u64::from(t.lumi_section - 1) * (1 << 18) + t.orbit_count % 1000);
        assert_eq!(record.trigger_count, i + 1);
        if let Some((p, precord)) = previous {
            assert!(t.time_seconds > p.time_seconds);
            assert!(t.orbit_count >= p.orbit_count, "orbits increase with time");
            assert!((t.orbit_count, t.bx) >= (p.orbit_count, p.bx));
            assert!(record.lumi_section >= precord.lumi_section);
            assert!(record.orbit >= precord.orbit, "written orbits increase too");
        }
        lumi_sections.insert(record.lumi_section);
        previous = Some((t, record));
    }
    let (last, _) = previous.unwrap();
    // 20,000 triggers at 50 kHz: 0.4 s, about 4,500 orbits, so lumi sections 1 to 5.
    let mean_gap = last.time_seconds / events as f64;
    assert!((mean_gap * 50_000.0 - 1.0).abs() < 0.03, "mean gap {mean_gap}");
    assert_eq!(lumi_sections.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    // The same seed gives the same triggers on every FED.
    let mut again = config(9, SizeModel::Fixed(64));
    again.clock = ClockSpec { rate_hz: 50_000.0, seed: 3, orbits_per_lumi_section: 1000 };
    let (_, triggers) = capture(again, events as usize);
    assert_eq!(triggers.last().unwrap(), &last);
}

/// The stream of FED 3 with one fault at event 5 of 10, and its inspect report's problems.
fn faulty(fault: &str) -> (Vec<u8>, Vec<String>) {
    let mut cfg = config(3, SizeModel::Fixed(5000));
    cfg.faults = vec![fault.parse::<FaultSpec>().unwrap()];
    let (bytes, _) = capture(cfg, 10);
    let problems = inspect_ferol_stream("capture", &bytes).problems.into_iter().map(|p| p.message).collect();
    (bytes, problems)
}

/// Offset of event 5's fragment in a stream of 5000-byte fragments (2 blocks each).
const EVENT_5: usize = 4 * (5000 + 32);

#[test]
fn bad_crc_is_a_crc_mismatch_at_that_fragment() {
    let (bytes, problems) = faulty("bad-crc@5");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with(&format!("FED 3: FED fragment: CRC-16 mismatch at byte {}", EVENT_5 + 16)));
    let report = inspect_ferol_stream("capture", &bytes);
    assert_eq!(report.units.len(), 10);
    assert_eq!(report.units.iter().filter(|u| !u.crc_ok).map(|u| u.number).collect::<Vec<_>>(), [5]);
}

#[test]
fn skip_leaves_a_gap_in_the_lv1_sequence() {
    let (_, problems) = faulty("skip@5");
    assert_eq!(problems, ["source 3: 6 follows 4 (expected 5)"]);
}

#[test]
fn garbage_is_a_bad_signature() {
    let (bytes, problems) = faulty("garbage@5");
    assert_eq!(bytes.len(), EVENT_5 + 64 + 5 * (5000 + 32));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with(&format!("FEROL block header: bad signature at byte {EVENT_5}")), "{problems:?}");
}

#[test]
fn wrong_fed_id_disagrees_with_the_block_headers() {
    let (_, problems) = faulty("wrong-fed-id@5");
    let expected = format!("FEROL block header: bad FED id at byte {EVENT_5}: expected {}, found 3", 3 ^ 0x800);
    assert_eq!(problems, [expected]);
}

#[test]
fn truncate_sends_half_a_fragment_without_its_trailer() {
    let (bytes, problems) = faulty("truncate@5");
    // 5000 bytes = 625 words; 312 words are sent, in one block.
    assert_eq!(bytes.len(), 9 * (5000 + 32) + 16 + 312 * 8);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let trailer_at = EVENT_5 + 16 + 311 * 8;
    assert!(problems[0].starts_with(&format!("FED trailer: bad EOE marker at byte {trailer_at}")), "{problems:?}");
}

#[test]
fn disconnect_closes_before_its_event_and_faults_hit_only_their_fed() {
    let mut cfg = config(3, SizeModel::Fixed(64));
    // Every event of FED 7 is skipped; FED 3 is not touched by that specification.
    cfg.faults = vec!["skip:1/7".parse().unwrap(), "disconnect@4".parse().unwrap()];
    let mut generator = StreamGenerator::new(cfg).unwrap();
    let seen: Vec<(Option<Fault>, bool)> = (0..5)
        .map(|_| {
            let event = generator.next_event().unwrap();
            (event.fault, matches!(event.wire, Wire::Disconnect))
        })
        .collect();
    assert_eq!(seen, [(None, false), (None, false), (None, false), (Some(Fault::Disconnect), true), (None, false)]);
}

#[test]
fn bad_crc_on_an_empty_fragment_flips_the_crc_field() {
    let mut cfg = config(3, SizeModel::Fixed(16));
    cfg.faults = vec!["bad-crc@1".parse().unwrap()];
    let (bytes, _) = capture(cfg, 2);
    let report = inspect_ferol_stream("capture", &bytes);
    assert_eq!(report.units.iter().map(|u| u.crc_ok).collect::<Vec<_>>(), [false, true]);
}
