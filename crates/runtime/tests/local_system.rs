//! A whole 2×2 system on loopback, in one process: emulated FEROL streams into two RUs (the
//! first with the EVM), two BUs writing run directories. The run crosses the 24-bit LV1 wrap;
//! afterwards every run directory verifies byte for byte against the seeded emulator, every
//! event is in exactly one file, and triggered = built.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;
use tessera_emu::generator::{ClockSpec, FedSpec, SizeModel, StreamConfig};
use tessera_emu::sender::{Limits, SenderConfig, Sink};
use tessera_evb::{BuConfig, EvmConfig, RuConfig};
use tessera_formats::raw::RawFile;
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::verify_run_dir;
use tessera_runtime::bu_node::BuNodeConfig;
use tessera_runtime::ru_node::{OnCorruptStream, RuNodeConfig};
use tessera_runtime::system::{RunningSystem, SystemPlan};

const RUN: u32 = 77;

fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

fn emulator(feds: &[u16], first_event: u64, events: u64, to: &TcpListener, size: SizeModel) -> SenderConfig {
    SenderConfig {
        streams: feds
            .iter()
            .map(|&fed| StreamConfig {
                run: RUN,
                fed: FedSpec { fed, size },
                first_event,
                clock: ClockSpec { rate_hz: 100_000.0, seed: 5, orbits_per_lumi_section: 16 },
                faults: Vec::new(),
                seed: 5,
            })
            .collect(),
        sink: Sink::Connect(to.local_addr().unwrap().to_string()),
        paced: false,
        limits: Limits { events: Some(events), seconds: None },
        stop: None,
    }
}

fn plan(dir: &Path, first_event: u64, events: u64, size: SizeModel) -> SystemPlan {
    let feds = [vec![1024u16, 0, 1, 2], vec![3, 4, 5]];
    let ferol = [bind(), bind()];
    let control = [bind(), bind()];
    let data = [bind(), bind()];
    let evm_address = control[0].local_addr().unwrap();
    let emulators = (0..2).map(|r| emulator(&feds[r], first_event, events, &ferol[r], size)).collect();
    let data_addresses: Vec<_> = data.iter().map(|l| l.local_addr().unwrap()).collect();
    let ru_control = vec![control[1].local_addr().unwrap()];
    let [f0, f1] = ferol;
    let [c0, c1] = control;
    let rus = [(f0, c0), (f1, c1)]
        .into_iter()
        .enumerate()
        .map(|(r, (ferol_listener, control_listener))| RuNodeConfig {
            run: RUN,
            ru: RuConfig {
                first_event,
                fragment_timeout_ns: 1_000_000_000,
                ..RuConfig::new(r as u16, feds[r].clone())
            },
            evm: (r == 0).then(|| EvmConfig::new(2, 2)),
            ferol_listener,
            control_listener,
            bu_data: if r == 0 { Vec::new() } else { data_addresses.clone() },
            ru_control: if r == 0 { ru_control.clone() } else { Vec::new() },
            chunk_bytes: 1 << 20,
            chunks_per_fed: 8,
            max_wire_bytes: 64 << 10,
            on_corrupt_stream: OnCorruptStream::Continue,
            connect_timeout: Duration::from_secs(10),
            max_frame_bytes: 64 << 20,
        })
        .collect();
    let bus = data
        .into_iter()
        .enumerate()
        .map(|(b, data_listener)| BuNodeConfig {
            run: RUN,
            bu: BuConfig { max_events_per_file: 50, ..BuConfig::new(b as u16, 2) },
            data_listener,
            evm: evm_address,
            directory: dir.join(format!("bu{b}")),
            name: format!("bu-{b}"),
            restart: false,
            generated: true,
            writer_threads: 2,
            frame_store_bytes: 128 << 20,
            ramdisk_high_water_percent: 100,
            ramdisk_low_water_percent: 99,
            connect_timeout: Duration::from_secs(10),
            max_frame_bytes: 64 << 20,
            discard: false,
        })
        .collect();
    SystemPlan { rus, bus, emulators }
}

/// Every event in the BUs' files, checking that none is in two files.
fn events_in_files(dir: &Path) -> BTreeSet<u32> {
    let mut seen = BTreeSet::new();
    for b in 0..2 {
        let run_dir = dir.join(format!("bu{b}")).join(format!("run{RUN:06}"));
        let violations = verify_run_dir(&run_dir, EventChecks::default()).unwrap();
        assert!(violations.is_empty(), "{}: {violations:#?}", run_dir.display());
        for entry in std::fs::read_dir(&run_dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|x| x == "raw") {
                let bytes = std::fs::read(&path).unwrap();
                for ev in RawFile::parse(&bytes).unwrap().events() {
                    let (_, ev) = ev.unwrap();
                    assert!(seen.insert(ev.header.event), "event {} in two files", ev.header.event);
                }
            }
        }
    }
    seen
}

#[test]
fn a_2x2_system_on_loopback_builds_every_event_across_the_lv1_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    let first_event = (1u64 << 24) - 700;
    let events = 2000;
    let system = RunningSystem::start(plan(tmp.path(), first_event, events, SizeModel::Fixed(2048))).unwrap();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    assert_eq!(c.built_incomplete, 0, "{:#?}", outcome.problems);
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    let expected: BTreeSet<u32> = (first_event..first_event + events).map(|e| e as u32).collect();
    assert_eq!(events_in_files(tmp.path()), expected, "every event in exactly one file");
}

#[test]
fn fragments_larger_than_a_ferol_block_travel_in_pieces() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 300;
    let size = SizeModel::LogNormal { mean_bytes: 9000.0, sigma_bytes: 4000.0 };
    let system = RunningSystem::start(plan(tmp.path(), 1, events, size)).unwrap();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    assert_eq!(events_in_files(tmp.path()).len() as u64, events);
}

#[test]
fn discarding_bus_build_every_event_and_touch_no_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 1500;
    let mut plan = plan(tmp.path(), 1, events, SizeModel::Fixed(2048));
    for bu in &mut plan.bus {
        bu.discard = true;
    }
    let system = RunningSystem::start(plan).unwrap();
    let stats: Vec<_> = system.ru_stats.iter().chain(&system.bu_stats).cloned().collect();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    assert!(stats.iter().all(|s| s.loop_cpu_ns.get() > 0), "every loop reported its CPU time");
    let built: u64 = outcome.bus.iter().flatten().map(|b| b.counters.events_built).sum();
    assert_eq!(built, events);
    assert!(outcome.bus.iter().flatten().all(|b| b.run_dir.as_os_str().is_empty()));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing written under the BU directories");
}
