//! What the whole-system tests share: a 2×2 system on loopback (two RUs, the first with the EVM
//! and the trigger FED 1024; two BUs) written as a system file ([`system`]) and planned unit by
//! unit as `tessera run` plans it ([`plan`]), and readers of what the BUs wrote.
//!
//! FEDs: RU 0 reads 1024 (trigger), 0, 1, 2; RU 1 reads 3, 4, 5. BU `b` writes under
//! `<dir>/bu<b>/run000077`.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_config::emulation::FaultSpec;
use tessera_config::{
    BuParams, BuSection, CorruptStreamPolicy, FragmentSize, RuParams, RuSection, RunSection, SystemConfig,
    TriggerSection,
};
use tessera_control::plan::{Listeners, emulator};
use tessera_control::system::SystemPlan;
use tessera_emu::generator::StreamConfig;
use tessera_formats::raw::RawFile;
use tessera_inspect::event::EventChecks;
use tessera_inspect::verify::{Violation, verify_run_dir};
use tessera_runtime::link::LinkKey;

/// The run number of every test run.
pub const RUN: u32 = 77;

/// The FEDs of each RU; RU 0 (the EVM's node) has the trigger FED 1024 first.
pub const FEDS: [&[u16]; 2] = [&[1024, 0, 1, 2], &[3, 4, 5]];

/// The chunks of each FEROL stream, unless a fragment size needs larger ones.
pub const CHUNK_BYTES: usize = 1 << 20;

/// What varies between runs of the 2×2 system.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Event number of the first event.
    pub first_event: u64,
    /// Events every FED stream sends (fewer where a fault ends a stream early).
    pub events: u64,
    /// Fragment sizes of every FED but the trigger.
    pub size: FragmentSize,
    /// Faults as a system file writes them (`garbage@101/4`): each should name its FED, and goes
    /// to the RU that reads it.
    pub faults: Vec<String>,
    /// What the RUs do with a stream that cannot be read on.
    pub on_corrupt_stream: CorruptStreamPolicy,
}

impl Setup {
    /// `events` events from `first_event`, 2 kB fragments, no faults, streams that break are
    /// closed.
    pub fn new(first_event: u64, events: u64) -> Self {
        Setup {
            first_event,
            events,
            size: FragmentSize::Fixed { bytes: 2048 },
            faults: Vec::new(),
            on_corrupt_stream: CorruptStreamPolicy::Continue,
        }
    }
}

/// The system file of the 2×2 system of `setup`, BUs writing under `dir`: free running on a
/// 100 kHz clock, lumi sections of 16 orbits, no filter farm (the tests read the BUs' files).
pub fn system(dir: &Path, setup: &Setup) -> SystemConfig {
    let ru = |r: usize| RuSection {
        fragment_size: setup.size,
        faults: setup
            .faults
            .iter()
            .filter(|spec| {
                let fed = spec.parse::<FaultSpec>().expect("a fault as a system file writes it").fed;
                fed.is_none_or(|fed| FEDS[r].contains(&fed))
            })
            .cloned()
            .collect(),
        ..RuSection::new(&format!("ru{r}"), FEDS[r].to_vec())
    };
    let rus = vec![ru(0), ru(1)];
    // A chunk holds the largest fragment the sizes can give (a log-normal size's is the
    // emulator's 1 MiB clamp, with FEROL block headers on top).
    let largest = rus.iter().map(RuSection::max_wire_fragment_bytes).max().unwrap_or(0);
    let mut cfg = SystemConfig {
        run: RunSection {
            number: RUN,
            first_event: setup.first_event,
            events: Some(setup.events),
            seconds: None,
            orbits_per_lumi_section: 16,
            output: Some(dir.to_owned()),
            ..RunSection::default()
        },
        trigger: TriggerSection { rate_hz: None, seed: 5, ..TriggerSection::default() },
        rus,
        bus: vec![BuSection::new("bu0"), BuSection::new("bu1")],
        // Tighter than a laptop's defaults: the figures these tests were written for.
        ru: RuParams {
            max_events_buffered: 4096,
            max_parts_per_message: 256,
            chunk_bytes: CHUNK_BYTES.max(largest),
            chunks_per_fed: 8,
            on_corrupt_stream: setup.on_corrupt_stream,
            ..RuParams::default()
        },
        bu: BuParams {
            max_events_in_flight: 1024,
            request_batch_events: 128,
            max_events_per_file: 50,
            file_timeout_ms: 1000,
            frame_store_bytes: 128 << 20,
            // The tests' disks are whatever the machine has: never hold back on them.
            ramdisk_high_water_percent: 100,
            ramdisk_low_water_percent: 99,
            ..BuParams::default()
        },
        ..SystemConfig::default()
    };
    cfg.evm.assign_batch_events = 128;
    cfg.evm.assign_delay_us = 1000;
    cfg.fu.enabled = false;
    cfg.validate().expect("the tests' system is a valid system file");
    cfg
}

/// The 2×2 system of `setup`, BUs writing under `dir`, planned as `tessera run` plans a system
/// file, on free loopback ports.
pub fn plan(dir: &Path, setup: &Setup) -> SystemPlan {
    plan_system(dir, &system(dir, setup))
}

/// The system `cfg`, BUs writing under `dir`, planned as `tessera run` plans a system file, on
/// free loopback ports.
pub fn plan_system(dir: &Path, cfg: &SystemConfig) -> SystemPlan {
    let cfg = cfg.clone();
    // A key of the run, as run control would make it.
    let link_key = LinkKey::generate().unwrap();
    let mut plan = tessera_control::plan::plan(&cfg, Listeners::bind_all(&cfg).unwrap(), dir, &link_key).unwrap();
    // Not a key of the file: a unit that cannot reach its peer fails well within a test's wait.
    for ru in &mut plan.rus {
        ru.connect_timeout = Duration::from_secs(10);
    }
    for bu in &mut plan.bus {
        bu.connect_timeout = Duration::from_secs(10);
    }
    plan
}

/// The emulator's configuration of `fed`'s stream in the system of `setup`.
pub fn stream(fed: u16, setup: &Setup) -> StreamConfig {
    let cfg = system(Path::new("/nowhere"), setup);
    let ru = FEDS.iter().position(|feds| feds.contains(&fed)).expect("a FED of the system");
    // The emulator is not started: where it would send does not matter.
    let sender = emulator(&cfg, ru, ([127, 0, 0, 1], 9).into()).unwrap();
    sender.streams.into_iter().find(|s| s.fed.fed == fed).unwrap()
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
