//! What the whole-system tests share: a 2×2 plan on loopback (two RUs, the first with the EVM and
//! the trigger FED 1024; two BUs), built by hand with the FEROL emulator, and readers of what the
//! BUs wrote.
//!
//! FEDs: RU 0 reads 1024 (trigger), 0, 1, 2; RU 1 reads 3, 4, 5. BU `b` writes under
//! `<dir>/bu<b>/run000077`.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_config::CorruptStreamPolicy;
use tessera_config::emulation::{ClockSpec, FaultSpec, FedSpec, SizeModel};
use tessera_control::system::SystemPlan;
use tessera_emu::generator::StreamConfig;
use tessera_emu::sender::{Limits, SenderConfig, Sink};
use tessera_evb::{BuConfig, EvmConfig, RuConfig};
use tessera_formats::raw::RawFile;
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::{Violation, verify_run_dir};
use tessera_runtime::bu_node::BuNodeConfig;
use tessera_runtime::link::LinkKey;
use tessera_runtime::ru_node::RuNodeConfig;

/// The run number of every test run.
pub const RUN: u32 = 77;

/// The FEDs of each RU; RU 0 (the EVM's node) has the trigger FED 1024 first.
pub const FEDS: [&[u16]; 2] = [&[1024, 0, 1, 2], &[3, 4, 5]];

/// What varies between runs of the 2×2 system.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Event number of the first event.
    pub first_event: u64,
    /// Events every FED stream sends (fewer where a fault ends a stream early).
    pub events: u64,
    /// Fragment sizes of every FED but the trigger.
    pub size: SizeModel,
    /// Faults, given to every stream: each should name its FED.
    pub faults: Vec<FaultSpec>,
    /// What the RUs do with a stream that cannot be read on.
    pub on_corrupt_stream: CorruptStreamPolicy,
    /// How long an RU waits for a FED's fragment of an assigned event.
    pub fragment_timeout: Duration,
}

impl Setup {
    /// `events` events from `first_event`, 2 kB fragments, no faults, streams that break are
    /// closed, a 1 s fragment time-out.
    pub fn new(first_event: u64, events: u64) -> Self {
        Setup {
            first_event,
            events,
            size: SizeModel::Fixed(2048),
            faults: Vec::new(),
            on_corrupt_stream: CorruptStreamPolicy::Continue,
            fragment_timeout: Duration::from_secs(1),
        }
    }
}

fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// The emulator's configuration of `fed`'s stream.
pub fn stream(fed: u16, setup: &Setup) -> StreamConfig {
    StreamConfig {
        run: RUN,
        fed: FedSpec { fed, size: setup.size },
        first_event: setup.first_event,
        clock: ClockSpec { rate_hz: 100_000.0, seed: 5, orbits_per_lumi_section: 16 },
        faults: setup.faults.clone(),
        seed: 5,
    }
}

fn emulator(feds: &[u16], setup: &Setup, to: &TcpListener) -> SenderConfig {
    SenderConfig {
        replay: None,
        streams: feds.iter().map(|&fed| stream(fed, setup)).collect(),
        sink: Sink::Connect(to.local_addr().unwrap().to_string()),
        paced: false,
        pace_percent: 100,
        limits: Limits { events: Some(setup.events), seconds: None },
        stop: None,
    }
}

/// The 2×2 system of `setup`, BUs writing under `dir`.
pub fn plan(dir: &Path, setup: &Setup) -> SystemPlan {
    let ferol = [bind(), bind()];
    let control = [bind(), bind()];
    let data = [bind(), bind()];
    let evm_address = control[0].local_addr().unwrap();
    let emulators = (0..2).map(|r| emulator(FEDS[r], setup, &ferol[r])).collect();
    let data_addresses: Vec<_> = data.iter().map(|l| l.local_addr().unwrap()).collect();
    let ru_control = vec![control[1].local_addr().unwrap()];
    // A key of the run, as run control would make it.
    let link_key = LinkKey::generate().unwrap();
    let [f0, f1] = ferol;
    let [c0, c1] = control;
    let rus = [(f0, c0), (f1, c1)]
        .into_iter()
        .enumerate()
        .map(|(r, (ferol_listener, control_listener))| RuNodeConfig {
            run: RUN,
            link_key: link_key.clone(),
            ru: RuConfig {
                first_event: setup.first_event,
                fragment_timeout_ns: setup.fragment_timeout.as_nanos() as u64,
                ..RuConfig::new(r as u16, FEDS[r].to_vec())
            },
            evm: (r == 0).then(|| EvmConfig::new(2, 2)),
            ferol_listener,
            control_listener,
            bu_data: if r == 0 { Vec::new() } else { data_addresses.clone() },
            ru_control: if r == 0 { ru_control.clone() } else { Vec::new() },
            chunk_bytes: 1 << 20,
            chunks_per_fed: 8,
            max_wire_bytes: 64 << 10,
            on_corrupt_stream: setup.on_corrupt_stream,
            fragment_crc_check: tessera_formats::fed::CrcCheck::Always,
            event_limit: Some(setup.events),
            connect_timeout: Duration::from_secs(10),
            max_frame_bytes: 64 << 20,
            allowed_peers: None,
            ingest_only: false,
            pin_core: None,
        })
        .collect();
    let bus = data
        .into_iter()
        .enumerate()
        .map(|(b, data_listener)| BuNodeConfig {
            run: RUN,
            link_key: link_key.clone(),
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
            allowed_peers: None,
            discard: false,
            pin_core: None,
            farm_limits: None,
        })
        .collect();
    SystemPlan { rus, bus, emulators }
}

/// The run directory of each BU.
pub fn run_dirs(dir: &Path) -> Vec<PathBuf> {
    (0..2).map(|b| dir.join(format!("bu{b}")).join(format!("run{RUN:06}"))).collect()
}

/// Every violation `tessera verify` finds in the BUs' run directories, each with its BU.
pub fn violations(dir: &Path) -> Vec<(usize, Violation)> {
    let mut all = Vec::new();
    for (b, run_dir) in run_dirs(dir).iter().enumerate() {
        let found = verify_run_dir(run_dir, EventChecks::default()).unwrap();
        all.extend(found.into_iter().map(|v| (b, v)));
    }
    all
}

/// One event as a BU wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The BU that wrote it.
    pub bu: usize,
    /// Its FRD flags.
    pub flags: u16,
    /// The source ids of its fragments, sorted.
    pub feds: Vec<u16>,
}

/// Calls `each` with the BU's index and every event of every raw file of the BUs' run
/// directories under `dir`.
pub fn each_built_event(dir: &Path, mut each: impl FnMut(usize, &tessera_formats::frd::FrdEvent<'_>)) {
    for (bu, run_dir) in run_dirs(dir).iter().enumerate() {
        for entry in std::fs::read_dir(run_dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|x| x != "raw") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            for ev in RawFile::parse(&bytes).unwrap().events() {
                each(bu, &ev.unwrap().1);
            }
        }
    }
}

/// Every event in the BUs' raw files by FRD event number, checking that none is in two files.
pub fn built_events(dir: &Path) -> BTreeMap<u32, Built> {
    let mut seen = BTreeMap::new();
    each_built_event(dir, |bu, ev| {
        let mut feds: Vec<u16> = ev.fragments().map(|f| f.unwrap().1.header.source_id).collect();
        feds.sort_unstable();
        let built = Built { bu, flags: ev.header.flags, feds };
        let event = ev.header.event;
        assert!(seen.insert(event, built).is_none(), "event {event} in two files");
    });
    seen
}
