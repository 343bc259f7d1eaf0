//! The DTH generator against the formats crate's readers: every orbit parses (stream blocks,
//! orbit header and CRC-32C, fragments and their CRC-16), the sources agree on each orbit's events,
//! payloads are the seeded ones, event counts follow their Poisson mean, and each fault shows as
//! the problem it should and no other.

use tessera_config::emulation::{OrbitFaultSpec, SizeModel};
use tessera_emu::orbit::{GARBAGE_BYTES, OrbitGenerator, OrbitStreamConfig};
use tessera_formats::orbit::{DEFAULT_MAX_BLOCK_BYTES, DthOrbit, DthStream, OrbitBlock, UNIT_BYTES};
use tessera_formats::seeded::first_payload_mismatch;

const RUN: u32 = 777;

fn config(source: u16, size: SizeModel) -> OrbitStreamConfig {
    OrbitStreamConfig {
        run: RUN,
        source,
        size,
        first_orbit: 100,
        orbits_per_lumi_section: 1 << 18,
        first_event: 1,
        l1_rate_hz: 750_000.0,
        seed: 5,
        faults: Vec::new(),
        max_block_bytes: DEFAULT_MAX_BLOCK_BYTES,
    }
}

/// What a reader finds in one orbit of a stream.
#[derive(Debug, Clone, PartialEq)]
struct SeenOrbit {
    orbit: u32,
    source: u32,
    /// Event number and BX of each fragment, in block order.
    events: Vec<(u64, u16)>,
}

/// The stream bytes of `orbits` orbits, and whether a fault ended the stream.
fn stream(config: OrbitStreamConfig, orbits: usize) -> (Vec<u8>, bool) {
    let mut generator = OrbitGenerator::new(config).unwrap();
    let mut bytes = Vec::new();
    for _ in 0..orbits {
        let orbit = generator.next_orbit().unwrap();
        bytes.extend_from_slice(orbit.bytes);
        if orbit.ends_stream {
            return (bytes, true);
        }
    }
    (bytes, false)
}

/// Reads every orbit of a stream, checking CRC-32C, fragments' CRC-16 and source ids, and the
/// seeded payloads (with `size`); returns the orbits read and the first error.
fn read(bytes: &[u8], size: SizeModel) -> (Vec<SeenOrbit>, Option<String>) {
    let mut seen = Vec::new();
    for item in DthStream::new(bytes) {
        let (_, dth) = match item {
            Ok(x) => x,
            Err(e) => return (seen, Some(e.to_string())),
        };
        match check_orbit(&dth, size) {
            Ok(orbit) => seen.push(orbit),
            Err(e) => return (seen, Some(e)),
        }
    }
    (seen, None)
}

fn check_orbit(dth: &DthOrbit, size: SizeModel) -> Result<SeenOrbit, String> {
    dth.check_source_id(None).map_err(|e| e.to_string())?;
    let mut block = vec![0; dth.orbit_len()];
    dth.copy_to(&mut block).unwrap();
    let parsed = OrbitBlock::parse(&block).map_err(|e| e.to_string())?;
    parsed.check_crc().map_err(|e| e.to_string())?;
    let header = parsed.header;
    let mut events = Vec::new();
    for fragment in parsed.fragments() {
        let fragment = fragment.map_err(|e| e.to_string())?;
        fragment.check_crc().map_err(|e| e.to_string())?;
        assert_eq!(fragment.source_id(), header.source_id);
        assert_eq!(fragment.trailer.orbit, header.orbit);
        let source = u16::try_from(header.source_id).unwrap();
        let len = size.fragment_bytes(RUN, source, fragment.event_id());
        let payload = fragment.payload();
        assert_eq!(payload.len(), len.div_ceil(UNIT_BYTES) * UNIT_BYTES);
        assert_eq!(first_payload_mismatch(RUN, source, fragment.event_id(), &payload[..len]), None);
        assert!(payload[len..].iter().all(|&b| b == 0));
        events.push((fragment.event_id(), fragment.bx()));
    }
    events.reverse();
    assert_eq!(events.len(), usize::from(header.event_count));
    Ok(SeenOrbit { orbit: header.orbit, source: header.source_id, events })
}

#[test]
fn every_orbit_parses_and_sources_agree_on_events() {
    let fixed = SizeModel::Fixed(200);
    let log_normal = SizeModel::LogNormal { mean_bytes: 1500.0, sigma_bytes: 700.0 };
    let (a, _) = stream(config(3, fixed), 50);
    let (b, _) = stream(config(40, log_normal), 50);
    let (seen_a, err_a) = read(&a, fixed);
    let (seen_b, err_b) = read(&b, log_normal);
    assert_eq!((err_a, err_b), (None, None));
    assert_eq!(seen_a.len(), 50);
    let mut next_event = 1;
    for (i, (oa, ob)) in seen_a.iter().zip(&seen_b).enumerate() {
        assert_eq!((oa.orbit, ob.orbit), (100 + i as u32, 100 + i as u32));
        assert_eq!((oa.source, ob.source), (3, 40));
        assert_eq!(oa.events, ob.events, "orbit {}", oa.orbit);
        // Event numbers run on over orbits; BXs are distinct and increasing.
        let ids: Vec<u64> = oa.events.iter().map(|e| e.0).collect();
        assert_eq!(ids, (next_event..next_event + ids.len() as u64).collect::<Vec<_>>());
        next_event += ids.len() as u64;
        assert!(oa.events.windows(2).all(|w| w[0].1 < w[1].1) && oa.events.iter().all(|e| e.1 < 3564));
    }
    // 50 orbits of a Poisson mean of 66.7 hold events; a log-normal source spans several blocks.
    assert!(next_event > 2000, "{next_event}");
    assert!(DthStream::new(&b).any(|o| o.unwrap().1.block_count() > 1));
}

#[test]
fn same_seed_same_bytes_another_seed_other_events() {
    let size = SizeModel::Fixed(64);
    assert_eq!(stream(config(1, size), 20), stream(config(1, size), 20));
    let other = OrbitStreamConfig { seed: 6, ..config(1, size) };
    let count = |bytes: &[u8]| read(bytes, size).0.iter().map(|o| o.events.len()).collect::<Vec<_>>();
    assert_ne!(count(&stream(config(1, size), 20).0), count(&stream(other, 20).0));
}

#[test]
fn events_per_orbit_follow_the_poisson_mean() {
    let size = SizeModel::Fixed(16);
    for (rate, orbits) in [(750_000.0, 2000), (20_000.0, 4000)] {
        let cfg = OrbitStreamConfig { l1_rate_hz: rate, ..config(1, size) };
        let mean = cfg.mean_events();
        let (bytes, _) = stream(cfg, orbits);
        let (seen, err) = read(&bytes, size);
        assert_eq!((seen.len(), err), (orbits, None));
        let counts: Vec<f64> = seen.iter().map(|o| o.events.len() as f64).collect();
        let n = counts.len() as f64;
        let m = counts.iter().sum::<f64>() / n;
        let var = counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / (n - 1.0);
        // Five standard errors of the mean; a Poisson law's variance equals its mean.
        assert!((m - mean).abs() < 5.0 * (mean / n).sqrt(), "rate {rate}: mean {m} against {mean}");
        assert!((var / mean - 1.0).abs() < 0.2, "rate {rate}: variance {var} against {mean}");
        if rate < 100_000.0 {
            // About 17% of orbits have no event at 1.78 a orbit; they are sent all the same.
            assert!(seen.iter().any(|o| o.events.is_empty()));
        }
    }
}

fn faulty(fault: &str, orbits: usize) -> (Vec<u8>, bool, Vec<SeenOrbit>, Option<String>) {
    let size = SizeModel::Fixed(128);
    let mut cfg = config(9, size);
    let spec = fault.parse::<OrbitFaultSpec>().unwrap();
    cfg.faults = vec![spec];
    // The generator names the fault on the orbit it strikes, and on no other.
    let mut generator = OrbitGenerator::new(cfg.clone()).unwrap();
    for _ in 0..orbits {
        let orbit = generator.next_orbit().unwrap();
        let struck = spec.strikes(cfg.seed, 0, RUN, 9, orbit.events.orbit);
        assert_eq!(orbit.fault, struck.then_some(spec.fault), "{fault}, orbit {}", orbit.events.orbit);
        if orbit.ends_stream {
            break;
        }
    }
    let (bytes, ended) = stream(cfg, orbits);
    let (seen, err) = read(&bytes, size);
    (bytes, ended, seen, err)
}

#[test]
fn each_fault_shows_as_itself() {
    let (clean, _) = stream(config(9, SizeModel::Fixed(128)), 6);
    let (clean_seen, _) = read(&clean, SizeModel::Fixed(128));
    let at = |i: usize| &clean_seen[i];

    let (_, ended, seen, err) = faulty("bad-crc@102", 6);
    assert!(!ended && seen.len() == 2, "{seen:?}");
    assert!(err.unwrap().contains("CRC-32C"));

    let (_, _, seen, err) = faulty("wrong-source-id@103", 6);
    assert_eq!(seen.len(), 3);
    let err = err.unwrap();
    assert!(err.contains("orbit header") && err.contains("source id"), "{err}");

    let (_, _, seen, err) = faulty("drop-event@101", 6);
    assert_eq!(err, None);
    assert_eq!(seen[1].events, at(1).events[..at(1).events.len() - 1]);
    assert_eq!(seen[2], *at(2));

    let (_, _, seen, err) = faulty("extra-event@101", 6);
    assert_eq!(err, None);
    assert_eq!(seen[1].events.len(), at(1).events.len() + 1);
    assert_eq!(seen[1].events.last().unwrap().0, at(2).events[0].0);
    assert_eq!(seen[2], *at(2));

    let start = |i: usize| DthStream::new(&clean).nth(i).unwrap().unwrap().0;
    let (bytes, ended, seen, err) = faulty("truncate@104", 6);
    assert!(ended && seen.len() == 4 && err.is_some());
    assert!(DthStream::new(&bytes).last().unwrap().unwrap_err().is_truncated());
    assert_eq!(bytes.len(), start(4) + (start(5) - start(4)) / 32 * 16);

    let (bytes, ended, seen, err) = faulty("garbage@100", 3);
    assert!(!ended && seen.is_empty());
    assert!(err.unwrap().contains("signature"), "{bytes:?}");
    assert_eq!(bytes[GARBAGE_BYTES..], clean[start(1)..start(3)]);

    let (bytes, ended, seen, err) = faulty("disconnect@102", 6);
    assert!(ended && err.is_none());
    assert_eq!(seen, clean_seen[..2]);
    assert_eq!(bytes, clean[..start(2)]);

    let (_, ended, seen, err) = faulty("skip-orbit@102", 6);
    assert!(!ended && err.is_none());
    let orbits: Vec<u32> = seen.iter().map(|o| o.orbit).collect();
    assert_eq!(orbits, [100, 101, 103, 104, 105]);
    assert_eq!(seen[2], *at(3));

    // A fault for another source leaves this one clean.
    let (bytes, _, _, err) = faulty("garbage@101/10", 6);
    assert_eq!((bytes, err), (clean, None));
}

/// A DTH stream's failure names its source, not a FED.
#[test]
fn a_dth_stream_that_cannot_connect_is_named_by_its_source() {
    use tessera_emu::dth::{self, DthSenderConfig};
    use tessera_emu::sender::Sink;
    let address = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let e = dth::run(DthSenderConfig {
        streams: vec![config(5, SizeModel::Fixed(64))],
        sink: Sink::Connect { address: address.clone(), wait: std::time::Duration::ZERO },
        paced: false,
        orbits: Some(10),
        seconds: None,
        stop: None,
    })
    .unwrap_err();
    assert_eq!(e.to_string(), format!("source 5: cannot connect to {address}"));
}
