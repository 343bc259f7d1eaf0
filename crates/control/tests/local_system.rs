//! A whole 2×2 system on loopback, in one process: emulated FEROL streams into two RUs (the
//! first with the EVM), two BUs writing run directories. The run crosses the 24-bit LV1 wrap;
//! afterwards every run directory verifies byte for byte against the seeded emulator, every
//! event is in exactly one file, and triggered = built.

mod common;

use common::{RUN, Setup, built_events, plan, violations};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tessera_config::FragmentSize;
use tessera_control::system::RunningSystem;
use tessera_formats::ferol::ferol_wire_len;
use tessera_runtime::stats::UnitStats;

/// Every event in the BUs' files, checking that the run directories verify and that no event is
/// in two files.
fn events_in_files(dir: &Path) -> BTreeSet<u32> {
    let found = violations(dir);
    assert!(found.is_empty(), "{found:#?}");
    built_events(dir).into_keys().collect()
}

#[test]
fn a_2x2_system_on_loopback_builds_every_event_across_the_lv1_wrap() {
    let tmp = tempfile::tempdir().unwrap();
    let first_event = (1u64 << 24) - 700;
    let events = 2000;
    let system = RunningSystem::start(plan(tmp.path(), &Setup::new(first_event, events))).unwrap();
    let bus = system.bu_stats.clone();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    assert_eq!(c.built_incomplete, 0, "{:#?}", outcome.problems);
    // Every BU closes every lumi section of the run, the last one last.
    let closed: Vec<(u64, u64)> =
        bus.iter().map(|b| (b.lumi_sections_closed.get(), b.last_closed_lumi_section.get())).collect();
    assert!(closed[0].0 > 1 && closed.iter().all(|&c| c == closed[0]), "{closed:?}");
    assert!(bus.iter().all(|b| (1..=closed[0].1).contains(&b.lumi_section.get())), "{closed:?}");
    assert!(bus.iter().all(|b| b.sub_states().is_empty()), "nothing wrong");
    assert_eq!(outcome.problem_count, 0, "a clean run has nothing to report: {:#?}", outcome.problems);
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    let expected: BTreeSet<u32> = (first_event..first_event + events).map(|e| e as u32).collect();
    assert_eq!(events_in_files(tmp.path()), expected, "every event in exactly one file");
}

#[test]
fn fragments_larger_than_a_ferol_block_travel_in_pieces() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 300;
    let size = FragmentSize::LogNormal { mean_bytes: 9000.0, sigma_bytes: 4000.0 };
    let system = RunningSystem::start(plan(tmp.path(), &Setup { size, ..Setup::new(1, events) })).unwrap();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    assert_eq!(events_in_files(tmp.path()).len() as u64, events);
}

#[test]
fn stray_clients_on_every_port_are_refused_and_the_run_goes_on() {
    use std::io::Write;
    use tessera_evb::types::Peer;
    use tessera_runtime::link::encode_link;
    let tmp = tempfile::tempdir().unwrap();
    let events = 5000;
    let plan = plan(tmp.path(), &Setup::new(1, events));
    let addr = |l: &std::net::TcpListener| l.local_addr().unwrap();
    let (evm, ru1_control, bu0_data, ru0_ferol) = (
        addr(&plan.rus[0].control_listener),
        addr(&plan.rus[1].control_listener),
        addr(&plan.bus[0].data_listener),
        addr(&plan.rus[0].ferol_listener),
    );
    let system = RunningSystem::start(plan).unwrap();
    let http = b"GET / HTTP/1.1\r\nHost: tessera\r\n\r\n";
    let mut strays = Vec::new();
    for (to, bytes) in [
        (evm, http.to_vec()),
        (ru1_control, http.to_vec()),
        (bu0_data, http.to_vec()),
        (ru0_ferol, http.to_vec()),
        // A well-formed opening from another run.
        (bu0_data, encode_link(Peer::Ru(1), 999).to_vec()),
    ] {
        let mut s = std::net::TcpStream::connect(to).unwrap();
        s.write_all(&bytes).unwrap();
        strays.push(s); // kept open: the units must refuse them, not wait for them to close
    }
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    let said = |what: &str| outcome.problems.iter().filter(|p| p.contains(what)).count();
    assert_eq!(said("not a Tessera connection"), 3, "{:#?}", outcome.problems);
    assert_eq!(said("is in run 999, this unit in run"), 1, "{:#?}", outcome.problems);
    assert_eq!(said("FEROL connection from"), 1, "{:#?}", outcome.problems);
    drop(strays);
}

#[test]
fn a_bu_above_its_ramdisk_high_water_mark_asks_for_nothing_and_the_other_builds_everything() {
    let (tmp, _) = bu_1_held_back(
        |plan| {
            // Any file system in use is fuller than 1 %: BU 1 is above its mark from the start.
            plan.bus[1].ramdisk_high_water_percent = 1;
            plan.bus[1].ramdisk_low_water_percent = 0;
        },
        "RAMDISK_HIGH_WATER",
    );
    assert_eq!(events_in_files(tmp.path()).len() as u64, 1000);
}

#[test]
fn discarding_bus_build_every_event_and_touch_no_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 1500;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
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

#[test]
fn a_push_system_drains_cleanly_whichever_ru_sends_its_last_part_first() {
    // RU 1 reads fewer streams than RU 0 (the trigger and 3 data FEDs), so it usually sends its
    // last part before RU 0 has sent its own: it must not end then, for RU 0 would take its close
    // for a loss and fail the run with events still at the BUs. Three runs, for a race.
    for attempt in 0..3 {
        let tmp = tempfile::tempdir().unwrap();
        let events = 20_000;
        let mut cfg = common::system(tmp.path(), &Setup::new(1, events));
        cfg.run.protocol = tessera_config::Protocol::Push;
        // The BUs' default bound: the tests' 1024 events in flight is below what the RUs'
        // window of 2048 events can put into a BU of two.
        cfg.bu = tessera_config::BuParams {
            discard_events: true,
            ramdisk_high_water_percent: 100,
            ramdisk_low_water_percent: 99,
            ..tessera_config::BuParams::default()
        };
        let system = RunningSystem::start(common::plan_system(tmp.path(), &cfg)).unwrap();
        let outcome = system.wait(Duration::from_secs(30));
        assert!(outcome.clean(), "run {attempt}: {outcome:#?}");
        let c = outcome.conservation();
        assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "run {attempt}: {c:?}");
        assert_eq!(c.built_incomplete, 0, "run {attempt}: {:#?}", outcome.problems);
        assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    }
}

#[test]
fn an_ingest_only_ru_takes_every_fragment_builds_and_releases_every_super_fragment() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 3000;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    plan.rus.truncate(1);
    plan.emulators.truncate(1);
    plan.bus.clear();
    let ru = &mut plan.rus[0];
    ru.evm = None;
    ru.ingest_only = true;
    ru.ru_control.clear();
    let feds = ru.ru.feds.len() as u64;
    let system = RunningSystem::start(plan).unwrap();
    let stats = system.ru_stats[0].clone();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let r = outcome.rus[0].as_ref().unwrap();
    assert_eq!(r.ru.fragments, feds * events);
    assert_eq!((r.ru.parts_sent, r.ru.released, r.ru.incomplete_parts), (events, events, 0));
    assert_eq!((stats.events_buffered.get(), outcome.problem_count), (0, 0), "{:#?}", outcome.problems);
}

#[test]
fn units_pin_their_loops_to_cores_and_say_so_when_a_core_cannot_be_had() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 500;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    plan.rus[0].pin_core = Some(0);
    plan.bus[0].pin_core = Some(0);
    plan.rus[1].pin_core = Some(1000);
    let outcome = RunningSystem::start(plan).unwrap().wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    let pins: Vec<&String> = outcome.problems.iter().filter(|p| p.contains("could not pin")).collect();
    assert_eq!(pins, ["RU 1: could not pin its loop to CPU core 1000; it runs unpinned"], "{:#?}", outcome.problems);
}

#[test]
fn data_messages_larger_than_a_frame_travel_in_several() {
    let tmp = tempfile::tempdir().unwrap();
    let events = 2000;
    let setup = Setup { size: FragmentSize::Fixed { bytes: 16 << 10 }, ..Setup::new(1, events) };
    let mut plan = plan(tmp.path(), &setup);
    // A BU asks for a hundred events at a time: messages of megabytes of 16 kB fragments. The
    // frames here hold 1.1 MiB, of which 1 MiB is kept for descriptors.
    let frame = (11 << 20) / 10;
    for ru in &mut plan.rus {
        ru.max_frame_bytes = frame;
        ru.max_wire_bytes = 20 << 10;
    }
    for bu in &mut plan.bus {
        bu.max_frame_bytes = frame;
    }
    let outcome = RunningSystem::start(plan).unwrap().wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    assert_eq!(outcome.conservation().built, events);
    assert_eq!(events_in_files(tmp.path()).len() as u64, events);
}

#[test]
fn an_ru_whose_super_fragments_cannot_fit_in_a_frame_refuses_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let mut plan = plan(tmp.path(), &Setup::new(1, 10));
    plan.rus[1].max_frame_bytes = 1 << 20;
    // Its largest fragment on the wire: a 2 kB fragment in one FEROL block.
    let wire = plan.rus[1].max_wire_bytes;
    assert_eq!(wire, ferol_wire_len(2048));
    let outcome = RunningSystem::start(plan).unwrap().wait(Duration::from_secs(30));
    let error = outcome.rus[1].as_ref().unwrap_err().to_string();
    let said =
        format!("RU 1: a super-fragment of 3 FEDs of up to {wire} bytes may not fit in a frame of 1048576 bytes");
    assert!(error.contains(&said), "{error}");
}

#[test]
fn a_lumi_section_closed_on_its_time_out_counts_a_later_trigger_for_it_lost() {
    // A broken trigger source: triggers 200 ms apart on average, all stamped lumi section 1 (a
    // section of 2^18 orbits), with a lumi-section time-out of 1 ms. The section closes after
    // the first event is committed, and later triggers for it are counted lost, not built.
    let tmp = tempfile::tempdir().unwrap();
    let events = 5;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    for emulator in &mut plan.emulators {
        emulator.paced = true;
        for s in &mut emulator.streams {
            s.clock.rate_hz = 5.0;
            s.clock.orbits_per_lumi_section = 1 << 18;
        }
    }
    plan.rus[0].evm.as_mut().unwrap().lumi_section_timeout_ns = Some(1_000_000);
    for bu in &mut plan.bus {
        bu.bu.file_timeout_ns = 20_000_000;
    }
    let outcome = RunningSystem::start(plan).unwrap().wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    let lost = c.lost.get("LUMI_SECTION_CLOSED").copied().unwrap_or(0);
    assert!(c.holds && c.triggered == events && lost >= 1 && c.built + lost == events, "{c:?}");
    let said = outcome.problems.iter().filter(|p| p.contains("lost (LUMI_SECTION_CLOSED)")).count() as u64;
    assert_eq!(said, lost, "{:#?}", outcome.problems);
    // What was built verifies: the section's EoLS counts only its built events.
    assert_eq!(events_in_files(tmp.path()).len() as u64, c.built);
}

/// A resource summary of an FU process in `bu_dir`, stamped `updated_unix_ms`, that says it has
/// used `pid` seconds of CPU.
fn fu_summary(bu_dir: &Path, pid: u32, updated_unix_ms: u64) {
    let summary = tessera_rundir::resources::ResourceSummary {
        host: "fuhost".into(),
        pid,
        run: RUN,
        updated_unix_ms,
        free_slots: 1,
        queued_lumi_sections: 0,
        output_bytes_per_s: 0.0,
        output_used_percent: 0,
        cpu_seconds: f64::from(pid),
    };
    tessera_rundir::resources::write_summary(bu_dir, &summary).unwrap();
}

/// Runs the 2×2 system for 1000 events with BU 1 set up by `configure`: BU 1 must ask for
/// nothing, say why with `key`, and BU 0 build everything. Returns the run's directory.
fn bu_1_held_back(
    configure: impl FnOnce(&mut tessera_control::system::SystemPlan),
    key: &str,
) -> (tempfile::TempDir, Arc<UnitStats>) {
    let tmp = tempfile::tempdir().unwrap();
    let events = 1000;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    configure(&mut plan);
    let system = RunningSystem::start(plan).unwrap();
    let throttled = system.bu_stats[1].clone();
    let outcome = system.wait(Duration::from_secs(30));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    assert_eq!(c.per_bu, vec![events, 0], "{c:?}");
    assert!(outcome.problems.iter().any(|p| p.starts_with("BU 1: ") && p.contains(key)), "{:#?}", outcome.problems);
    assert_eq!(throttled.throttle().key(), key);
    (tmp, throttled)
}

/// BU 1 held back by its farm: `limits`, and summaries written by `farm` into its directory;
/// BU 1's figures.
fn bu_held_back_by_its_farm(
    limits: tessera_rundir::resources::FarmLimits,
    farm: impl Fn(&Path),
    key: &str,
) -> Arc<UnitStats> {
    bu_1_held_back(
        |plan| {
            plan.bus[1].farm_limits = Some(limits);
            farm(&plan.bus[1].directory);
        },
        key,
    )
    .1
}

#[test]
fn a_bu_whose_fus_stopped_reporting_asks_for_nothing_resource_summary_stale() {
    bu_held_back_by_its_farm(
        tessera_rundir::resources::FarmLimits::default(),
        |dir| fu_summary(dir, 7, 0),
        "RESOURCE_SUMMARY_STALE",
    );
}

#[test]
fn a_bu_with_fewer_fus_than_required_asks_for_nothing_not_enough_fus() {
    // Stamped in the future, the one summary stays live for the whole run.
    let later =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 3_600_000;
    let bu = bu_held_back_by_its_farm(
        tessera_rundir::resources::FarmLimits { min_fus: 2, ..Default::default() },
        |dir| fu_summary(dir, 7, later),
        "NOT_ENOUGH_FUS",
    );
    assert_eq!((bu.fu_processes.get(), bu.fu_cpu_ms.get()), (1, 7000), "the one FU's CPU time, as it said");
}
