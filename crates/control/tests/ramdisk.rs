//! BUs on RAM disks smaller than their run: each BU writes to a tmpfs of its own that the test
//! mounts (root, as CI has), and a consumer in the test takes the published files away slowly,
//! as a filter farm would. A full RAM disk must hold the BU back (`RAMDISK_FULL`), never fail it
//! or lose an event: every event is built, published once, and taken by the consumer.

mod common;

#[path = "../../cli/tests/common/require.rs"]
mod require;
#[path = "../../cli/tests/common/tmpfs.rs"]
mod tmpfs;

use common::{RUN, Setup, plan};
use require::require;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_control::system::RunningSystem;
use tessera_formats::names::BuFileName;
use tessera_formats::raw::RawFile;
use tessera_runtime::stats::{Throttle, UnitStats};
use tmpfs::Tmpfs;

/// Size of each BU's RAM disk, in MB.
const RAMDISK_MB: u64 = 6;

/// A tmpfs per BU, or `None` (the test skips) where it cannot be mounted.
fn ramdisks() -> Option<[Tmpfs; 2]> {
    let mounted = Tmpfs::mount(RAMDISK_MB).and_then(|a| Ok([a, Tmpfs::mount(RAMDISK_MB)?]));
    let why = mounted.as_ref().err().cloned().unwrap_or_default();
    require(&format!("a tmpfs for each BU's RAM disk: {why}"), mounted.is_ok()).then(|| mounted.unwrap())
}

/// Takes the BU's published raw files away, one every `pause`, as a farm does, until `stop` is
/// set and none is left; returns the number of times it took each event.
fn consumer(bu_dir: PathBuf, pause: Duration, stop: Arc<AtomicBool>) -> JoinHandle<BTreeMap<u32, u32>> {
    std::thread::spawn(move || {
        let run_dir = bu_dir.join(format!("run{RUN:06}"));
        let mut taken: BTreeMap<u32, u32> = BTreeMap::new();
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            // A raw file is published (renamed out of open/) before its .jsn: take it by its .jsn.
            let mut published: Vec<(u32, u32)> = std::fs::read_dir(&run_dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| match BuFileName::parse(&e.file_name().to_string_lossy()) {
                    Ok(BuFileName::IndexJson { ls, index, .. }) => Some((ls, index)),
                    _ => None,
                })
                .collect();
            published.sort_unstable();
            let Some(&(ls, index)) = published.first() else {
                if stopping {
                    return taken;
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let raw = run_dir.join(BuFileName::Raw { run: RUN, ls, index }.to_string());
            let bytes = std::fs::read(&raw).unwrap();
            for event in RawFile::parse(&bytes).unwrap().events() {
                *taken.entry(event.unwrap().1.header.event).or_default() += 1;
            }
            std::fs::remove_file(&raw).unwrap();
            std::fs::remove_file(run_dir.join(BuFileName::IndexJson { run: RUN, ls, index }.to_string())).unwrap();
            std::thread::sleep(pause);
        }
    })
}

/// Records every throttle the BUs show until the system ends.
fn watch_throttles(system: &RunningSystem, bus: &[Arc<UnitStats>]) -> Vec<Throttle> {
    let mut seen = Vec::new();
    while !system.finished() {
        for bu in bus {
            let t = bu.throttle();
            if !seen.contains(&t) {
                seen.push(t);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    seen
}

/// Runs the 2×2 system with each BU on its RAM disk (`disks`) at an 80 % high-water mark and a
/// consumer per BU; `during` runs beside it, with the BUs' figures. Checks that the run ends cleanly with every event
/// built and taken exactly once, and returns the throttles seen, the problems said and the
/// events each BU built.
fn run_on_ramdisks(
    disks: &[Tmpfs; 2],
    events: u64,
    pause: Duration,
    during: impl FnOnce(&[Arc<UnitStats>]) + Send,
) -> (Vec<Throttle>, Vec<String>, Vec<u64>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    for (bu, disk) in plan.bus.iter_mut().zip(disks) {
        bu.directory = disk.path().join("bu");
        bu.ramdisk_high_water_percent = 80;
        bu.ramdisk_low_water_percent = 70;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = plan.bus.iter().map(|bu| consumer(bu.directory.clone(), pause, stop.clone())).collect();
    let system = RunningSystem::start(plan).unwrap();
    let bus = system.bu_stats.clone();
    let throttles = std::thread::scope(|s| {
        s.spawn(|| during(&bus));
        watch_throttles(&system, &bus)
    });
    let outcome = system.wait(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let mut taken: BTreeMap<u32, u32> = BTreeMap::new();
    for c in consumers {
        for (event, n) in c.join().unwrap() {
            *taken.entry(event).or_default() += n;
        }
    }
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds, c.built_incomplete), (events, events, true, 0), "{c:?}");
    assert!(c.per_bu.iter().all(|&n| n > 0), "both BUs built events: {c:?}");
    let expected: BTreeMap<u32, u32> = (1..=events as u32).map(|e| (e, 1)).collect();
    assert!(taken == expected, "every event published once and taken: {} of {events} taken", taken.len());
    (throttles, outcome.problems, c.per_bu)
}

#[test]
fn bu_2x2_ramdisk_full_throttles_and_loses_nothing() {
    let Some(disks) = ramdisks() else { return };
    // About 12.5 kB an event: 4000 events are 50 MB, four times what the two disks hold.
    let (throttles, problems, _) = run_on_ramdisks(&disks, 4000, Duration::from_millis(30), |_| {});
    assert!(throttles.contains(&Throttle::RamdiskFull), "the BUs held back for their disks: {throttles:?}");
    assert!(!problems.iter().any(|p| p.contains("No space left")), "no write found a disk full: {problems:#?}");
}

/// Takes every byte free on `disk` into one file until `bu` has held back for it
/// (`RAMDISK_FULL`) and `after` more has passed, and removes it; returns the events `bu` had
/// built then.
fn fill(disk: &Path, bu: &UnitStats, after: Duration) -> u64 {
    use std::io::Write;
    let path = disk.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xAAu8; 64 << 10];
    let started = std::time::Instant::now();
    let mut until = None;
    // Room the consumer frees is taken again at once: the disk stays full until released.
    while until.is_none_or(|t| std::time::Instant::now() < t) && started.elapsed() < Duration::from_secs(20) {
        if until.is_none() && bu.throttle() == Throttle::RamdiskFull {
            until = Some(std::time::Instant::now() + after);
        }
        while f.write_all(&chunk).is_ok() {}
        let _ = f.write_all(&chunk[..4096]);
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(f);
    let built = bu.events_built.get();
    std::fs::remove_file(&path).unwrap();
    built
}

#[test]
fn bu_2x2_ramdisk_filled_by_another_writer_pauses_names_the_cause_and_loses_nothing() {
    let Some(disks) = ramdisks() else { return };
    let disk = disks[0].path().to_owned();
    let built_when_released = std::sync::atomic::AtomicU64::new(u64::MAX);
    let (throttles, problems, per_bu) = run_on_ramdisks(&disks, 8000, Duration::from_millis(2), |bus| {
        std::thread::sleep(Duration::from_millis(100));
        built_when_released.store(fill(&disk, &bus[0], Duration::from_millis(300)), Ordering::Relaxed);
    });
    assert!(throttles.contains(&Throttle::RamdiskFull), "{throttles:?}");
    // Said with its cause and where: a write that found the disk full, or a file that waits
    // because it does not fit in what the filler left.
    let said =
        problems.iter().find(|p| p.starts_with("BU 0: RAM disk full: ")).unwrap_or_else(|| panic!("{problems:#?}"));
    assert!(said.contains(&disk.display().to_string()) && said.contains("RAMDISK_FULL"), "{said}");
    assert!(said.contains("No space left on device") || said.contains("waits for room"), "{said}");
    // It went on once the filler's file was removed.
    let released = built_when_released.into_inner();
    assert!(released < u64::MAX, "the filler saw BU 0 hold back: {throttles:?}");
    assert!(per_bu[0] > released, "BU 0 built {} events, {released} of them before the release", per_bu[0]);
}

#[test]
fn bu_2x2_write_that_finds_the_disk_full_is_removed_and_written_again() {
    // BU 0's first file is made to find its disk full: its name in open/ leads to /dev/full,
    // which takes no byte (ENOSPC). No tmpfs needed.
    if !require("/dev/full, a device that is always full", Path::new("/dev/full").exists()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let events = 1000;
    let mut plan = plan(tmp.path(), &Setup::new(1, events));
    // BU 1 asks for nothing (any file system is fuller than 1 %): BU 0 builds every event, its
    // first file included.
    plan.bus[1].ramdisk_high_water_percent = 1;
    plan.bus[1].ramdisk_low_water_percent = 0;
    let open = plan.bus[0].directory.join(format!("run{RUN:06}")).join("open");
    std::fs::create_dir_all(&open).unwrap();
    let first = BuFileName::Raw { run: RUN, ls: 1, index: 0 }.to_string();
    std::os::unix::fs::symlink("/dev/full", open.join(&first)).unwrap();
    let system = RunningSystem::start(plan).unwrap();
    let outcome = system.wait(Duration::from_secs(60));
    assert!(outcome.clean(), "{outcome:#?}");
    let c = outcome.conservation();
    assert_eq!((c.triggered, c.built, c.holds), (events, events, true), "{c:?}");
    let said = outcome.problems.iter().find(|p| p.starts_with("BU 0: RAM disk full: ")).unwrap_or_else(|| {
        panic!("{:#?}", outcome.problems);
    });
    assert!(said.contains(&first) && said.contains("No space left on device"), "the cause and the file: {said}");
    // Written again, whole: the run directories verify and hold every event once.
    let found = common::violations(tmp.path());
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(common::built_events(tmp.path()).len() as u64, events);
}
