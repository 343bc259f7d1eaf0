//! The filter-farm chain on sample BU runs: FU processes, then micro, mini and macro mergers,
//! with the faults a crashed process leaves behind. Each test checks that every built event is
//! processed exactly once and that the final files hold exactly the selected events.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tessera_formats::bookkeeping::{FuOutputDoc, adler32};
use tessera_formats::frd::FrdEvent;
use tessera_formats::names::{ClaimedRawName, Producer, StreamFileName};
use tessera_formats::raw::RawFile;
use tessera_fu::merge::{MacroMerger, MicroMerger, MiniMerger, STORAGE_PRODUCER};
use tessera_fu::process::{FuConfig, run_fu};
use tessera_fu::remote::BuAccess;
use tessera_fu::{FuError, Hlt, StreamSet, Verdict};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

#[path = "../../cli/tests/common/require.rs"]
mod require;

/// Physics: every event; Express: event numbers divisible by 3; the HLT fails on multiples of 17.
struct TestHlt {
    streams: Vec<String>,
}

impl TestHlt {
    fn new() -> Self {
        TestHlt { streams: vec!["Physics".into(), "Express".into()] }
    }

    fn expected(event: u32) -> &'static [&'static str] {
        if event.is_multiple_of(17) {
            &["Error"]
        } else if event.is_multiple_of(3) {
            &["Physics", "Express"]
        } else {
            &["Physics"]
        }
    }
}

impl Hlt for TestHlt {
    fn streams(&self) -> &[String] {
        &self.streams
    }

    fn select_file(&mut self, _: &Path, events: &[FrdEvent<'_>], verdicts: &mut Vec<Verdict>) -> Result<(), FuError> {
        for e in events {
            verdicts.push(if e.header.event.is_multiple_of(17) {
                Verdict::Failed("test HLT fails on multiples of 17".into())
            } else {
                let mut set = StreamSet::NONE;
                set.insert(0);
                if e.header.event.is_multiple_of(3) {
                    set.insert(1);
                }
                Verdict::Streams(set)
            });
        }
        Ok(())
    }
}

struct Farm {
    root: tempfile::TempDir,
    buses: Vec<String>,
    spec: SampleSpec,
}

impl Farm {
    fn new(bus: usize) -> Self {
        let root = tempfile::tempdir().unwrap();
        let spec =
            SampleSpec { lumi_sections: 3, events_per_lumi_section: 25, events_per_file: 6, ..Default::default() };
        let buses: Vec<String> = (0..bus).map(|i| format!("bu{i}")).collect();
        for (i, bu) in buses.iter().enumerate() {
            // Each BU holds its own events, as the EVM would assign them.
            let spec = SampleSpec { first_event: 1 + 1000 * i as u64, source: bu.clone(), ..spec.clone() };
            write_sample_run(&root.path().join(bu), &spec).unwrap();
        }
        Farm { root, buses, spec }
    }

    fn bu_dir(&self, bu: &str) -> PathBuf {
        self.root.path().join(bu)
    }

    fn fu_dir(&self, bu: &str) -> PathBuf {
        self.root.path().join("fu").join(bu)
    }

    fn mini_dir(&self, bu: &str) -> PathBuf {
        self.root.path().join("mini").join(bu)
    }

    fn storage(&self) -> PathBuf {
        self.root.path().join("storage")
    }

    fn run_dir(&self, base: PathBuf) -> PathBuf {
        base.join(format!("run{:06}", self.spec.run))
    }

    fn fu_config(&self, bu: &str) -> FuConfig {
        FuConfig {
            bu: BuAccess::Directory(self.bu_dir(bu)),
            output_dir: self.fu_dir(bu),
            run: self.spec.run,
            host: "testhost".into(),
            pid: std::process::id(),
            poll_interval: Duration::from_millis(5),
            recovery_interval: Duration::from_millis(50),
            run_start_timeout: Duration::from_secs(5),
            summary_interval: Duration::from_secs(1),
        }
    }

    fn run_fu(&self, bu: &str) -> tessera_fu::process::FuReport {
        self.run_fu_as(&self.fu_config(bu))
    }

    fn run_fu_as(&self, cfg: &FuConfig) -> tessera_fu::process::FuReport {
        run_fu(cfg, &mut TestHlt::new(), &AtomicBool::new(false)).unwrap()
    }

    fn micro(&self, bu: &str) -> MicroMerger {
        MicroMerger {
            bu: BuAccess::Directory(self.bu_dir(bu)),
            fu_output_dir: self.fu_dir(bu),
            mini_dir: self.mini_dir(bu),
            node: "node0".into(),
            run: self.spec.run,
            streams: TestHlt::new().streams,
            host: "testhost".into(),
        }
    }

    fn mini(&self, bu: &str) -> MiniMerger {
        MiniMerger {
            bu_dir: self.bu_dir(bu),
            mini_dir: self.mini_dir(bu),
            storage_dir: self.storage(),
            bu: bu.into(),
            nodes: vec!["node0".into()],
            run: self.spec.run,
            streams: TestHlt::new().streams,
            bookkeeping_copy: None,
        }
    }

    fn macro_merger(&self) -> MacroMerger {
        MacroMerger {
            storage_dir: self.storage(),
            bus: self.buses.clone(),
            run: self.spec.run,
            streams: TestHlt::new().streams,
        }
    }

    /// Runs every merger until the macro merger has ended the run (a bounded number of passes).
    fn merge_all(&self) {
        for _ in 0..10 {
            for bu in &self.buses {
                self.micro(bu).pass().unwrap();
                self.mini(bu).pass().unwrap();
            }
            if self.macro_merger().pass().unwrap().finished {
                return;
            }
        }
        panic!("the mergers did not finish in 10 passes");
    }

    /// Checks storage: per lumi section and stream, the final file holds exactly the expected
    /// events, its JSON's counts and Adler-32 match it, and Processed is every built event.
    fn check_storage(&self) {
        let storage = self.run_dir(self.storage());
        let per_ls = u64::from(self.spec.events_per_lumi_section) * self.buses.len() as u64;
        for ls in 1..=self.spec.lumi_sections {
            let mut expected: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
            for i in 0..self.buses.len() as u32 {
                let first = 1 + 1000 * i + (ls - 1) * self.spec.events_per_lumi_section;
                for event in first..first + self.spec.events_per_lumi_section {
                    for s in TestHlt::expected(event) {
                        expected.entry(s).or_default().push(event);
                    }
                }
            }
            // ErrorEvents and HLTErrorEvents count the lumi section's failures in every stream.
            let failures = expected.get("Error").map_or(0, Vec::len) as u64;
            for stream in ["Physics", "Express", "Error"] {
                let name = |ext: &str| {
                    StreamFileName {
                        run: self.spec.run,
                        ls,
                        stream: stream.into(),
                        producer: Producer::Named(STORAGE_PRODUCER.into()),
                        ext: ext.into(),
                    }
                    .to_string()
                };
                let doc = FuOutputDoc::parse(&fs::read_to_string(storage.join(name("jsn"))).unwrap()).unwrap();
                assert_eq!(doc.processed, per_ls, "ls {ls} {stream}: Processed");
                let want = expected.remove(stream).unwrap_or_default();
                assert_eq!(doc.accepted, want.len() as u64, "ls {ls} {stream}: Accepted");
                assert_eq!((doc.error_events, doc.hlt_error_events), (failures, failures), "ls {ls} {stream}");
                if want.is_empty() {
                    assert_eq!((doc.file_list.as_str(), doc.file_size, doc.file_adler32), ("", 0, -1));
                    continue;
                }
                let bytes = fs::read(storage.join(name("raw"))).unwrap();
                assert_eq!(doc.file_list, name("raw"));
                assert_eq!(doc.file_size, bytes.len() as u64);
                assert_eq!(doc.file_adler32, i64::from(adler32(&bytes)), "ls {ls} {stream}: Adler-32");
                let file = RawFile::parse(&bytes).unwrap();
                let mut got: Vec<u32> = file
                    .events()
                    .map(|e| {
                        let (_, e) = e.unwrap();
                        e.check_crc().unwrap();
                        assert_eq!(e.header.lumi_section, ls);
                        e.header.event
                    })
                    .collect();
                got.sort_unstable();
                assert_eq!(got, want, "ls {ls} {stream}: events");
            }
        }
        assert!(storage.join(format!("run{:06}_ls0000_EoR.jsn", self.spec.run)).exists());
    }
}

#[test]
fn fu_1x1_chain_processes_every_event_once() {
    let farm = Farm::new(1);
    let report = farm.run_fu("bu0");
    assert_eq!(report.events, 75);
    assert_eq!(report.lumi_sections, 3);
    // The BU directory is empty of data once everything is processed.
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    let left: Vec<_> = fs::read_dir(bu_run.join("fu")).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    farm.merge_all();
    farm.check_storage();
}

#[test]
fn fu_2x1_chain_two_bus_write_one_final_file_per_lumi_section_and_stream() {
    let farm = Farm::new(2);
    for bu in &farm.buses {
        assert_eq!(farm.run_fu(bu).events, 75);
    }
    farm.merge_all();
    farm.check_storage();
    // Nothing is left behind: storage's open/ and its other working directories, empty, are gone.
    let left: Vec<_> = fs::read_dir(farm.run_dir(farm.storage()))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["jsd"], "{left:?}");
}

/// The producers of the ledger entries of an FU output run directory: which ids published.
fn ledger_producers(fu_run: &Path) -> BTreeSet<String> {
    fs::read_dir(fu_run.join("ledger"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .split('_')
                .nth(2)
                .unwrap()
                .trim_end_matches(".processed")
                .to_owned()
        })
        .map(|p| p.split('c').next().unwrap().to_owned())
        .collect()
}

/// Two FUs of one BU in two containers of one node (a Deployment of FUs) are both process 1 and
/// share the output directory: they take different ids, so neither writes over the other's
/// outputs, and storage holds every event once.
#[test]
fn fu_1x1_two_fus_both_process_1_in_one_output_directory_take_different_ids() {
    let farm = Farm::new(1);
    let cfg = FuConfig { pid: 1, ..farm.fu_config("bu0") };
    let arrived = Arc::new(AtomicUsize::new(0));
    let reports: Vec<_> = std::thread::scope(|s| {
        let fus: Vec<_> = (0..2)
            .map(|_| {
                let (cfg, arrived) = (&cfg, arrived.clone());
                s.spawn(move || {
                    // Each waits at its first file until both have claimed one (at most 10 s),
                    // so that they share the work.
                    let mut hlt = HookedHlt::new(
                        |_| true,
                        move || {
                            arrived.fetch_add(1, Ordering::SeqCst);
                            let deadline = Instant::now() + Duration::from_secs(10);
                            while arrived.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                        },
                    );
                    run_fu(cfg, &mut hlt, &AtomicBool::new(false)).unwrap()
                })
            })
            .collect();
        fus.into_iter().map(|fu| fu.join().unwrap()).collect()
    });
    assert!(reports.iter().all(|r| r.events > 0), "both FUs processed files: {reports:?}");
    assert_eq!(reports.iter().map(|r| r.events).sum::<u64>(), 75);
    let producers = ledger_producers(&farm.run_dir(farm.fu_dir("bu0")));
    assert_eq!(producers, BTreeSet::from(["pid00001".to_owned(), "pid4194305".to_owned()]));
    farm.merge_all();
    farm.check_storage();
}

/// An FU that is process 1 in its container stops holding claims; its replacement is process 1
/// too: it takes another id, finds the first one's id no longer held, and takes its claims over
/// (before ids were registered, it took them for its own and never processed them).
#[test]
fn fu_1x1_fu_restarted_as_the_same_process_id_takes_over_its_predecessors_claims() {
    let farm = Farm::new(1);
    let cfg = FuConfig { pid: 1, ..farm.fu_config("bu0") };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let mut hlt =
        HookedHlt::new(|file| file.to_string_lossy().contains("_ls0002_"), move || flag.store(true, Ordering::SeqCst));
    let first = run_fu(&cfg, &mut hlt, &stop).unwrap();
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    let held: Vec<_> = fs::read_dir(bu_run.join("fu")).unwrap().collect();
    assert!(!held.is_empty(), "the first FU left with claims");
    let second = farm.run_fu_as(&cfg);
    assert!(second.returned_claims >= 1, "{second:?}");
    assert_eq!(first.events + second.events, 75, "{first:?} {second:?}");
    farm.merge_all();
    farm.check_storage();
}

/// A pid no process has: above the kernel's largest.
const DEAD_PID: u32 = 4_194_304 + 17;

#[test]
fn fu_1x1_fu_crash_mid_file_returns_its_claims_and_drops_its_partial_outputs() {
    let farm = Farm::new(1);
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    fs::create_dir_all(bu_run.join("fu")).unwrap();
    // A dead FU holds two files and has half-written outputs.
    for index in [0, 1] {
        let claim = ClaimedRawName { run: 1, ls: 1, index, host: "testhost".into(), pid: DEAD_PID };
        fs::rename(bu_run.join(claim.raw().to_string()), bu_run.join(claim.path())).unwrap();
    }
    let fu_open = farm.run_dir(farm.fu_dir("bu0")).join("open");
    fs::create_dir_all(&fu_open).unwrap();
    fs::write(fu_open.join(format!("run000001_ls0001_streamPhysics_pid{DEAD_PID}.raw")), b"partial").unwrap();
    let report = farm.run_fu("bu0");
    assert_eq!(report.returned_claims, 2);
    assert_eq!(report.events, 75);
    assert!(fs::read_dir(&fu_open).unwrap().next().is_none());
    farm.merge_all();
    farm.check_storage();
}

/// The test HLT with something done once, before the first file whose path `when` takes: what
/// a fault test needs to happen while an FU is at work.
struct HookedHlt {
    hlt: TestHlt,
    when: fn(&Path) -> bool,
    then: Option<Box<dyn FnOnce()>>,
}

impl HookedHlt {
    fn new(when: fn(&Path) -> bool, then: impl FnOnce() + 'static) -> Self {
        HookedHlt { hlt: TestHlt::new(), when, then: Some(Box::new(then)) }
    }
}

impl Hlt for HookedHlt {
    fn streams(&self) -> &[String] {
        &self.hlt.streams
    }

    fn select_file(
        &mut self,
        file: &Path,
        events: &[FrdEvent<'_>],
        verdicts: &mut Vec<Verdict>,
    ) -> Result<(), FuError> {
        if (self.when)(file)
            && let Some(then) = self.then.take()
        {
            then();
        }
        self.hlt.select_file(file, events, verdicts)
    }
}

/// Another FU holds a file of lumi section 1 and dies after this one has published that
/// section: this one takes the file over and publishes it in outputs of a second name
/// (`pidPPPPPc2`), never over its first, and storage holds every event exactly once.
#[test]
fn fu_1x1_fu_killed_after_its_section_was_published_is_taken_over_without_overwriting() {
    let farm = Farm::new(1);
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    fs::create_dir_all(bu_run.join("fu")).unwrap();
    let victim = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    let claim = ClaimedRawName { run: 1, ls: 1, index: 0, host: "testhost".into(), pid: victim.id() };
    fs::rename(bu_run.join(claim.raw().to_string()), bu_run.join(claim.path())).unwrap();
    let mut victim = victim;
    let mut hlt = HookedHlt::new(
        |file| file.to_string_lossy().contains("_ls0002_"),
        move || {
            victim.kill().unwrap();
            victim.wait().unwrap();
        },
    );
    let report = run_fu(&farm.fu_config("bu0"), &mut hlt, &AtomicBool::new(false)).unwrap();
    assert_eq!((report.returned_claims, report.events), (1, 75));
    let fu_run = farm.run_dir(farm.fu_dir("bu0"));
    let pid = std::process::id();
    for name in
        [format!("run000001_ls0001_streamPhysics_pid{pid:05}"), format!("run000001_ls0001_streamPhysics_pid{pid:05}c2")]
    {
        let doc = FuOutputDoc::parse(&fs::read_to_string(fu_run.join(format!("{name}.jsn"))).unwrap()).unwrap();
        let expected = if name.ends_with("c2") { 6 } else { 25 - 6 };
        assert_eq!(doc.processed, expected, "{name}");
    }
    farm.merge_all();
    farm.check_storage();
}

#[test]
fn fu_1x1_fu_crash_mid_commit_is_carried_out_not_redone() {
    let farm = Farm::new(1);
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    let fu_run = farm.run_dir(farm.fu_dir("bu0"));
    fs::create_dir_all(bu_run.join("fu")).unwrap();
    // First process everything of LS 1 as pid DEAD_PID would have, up to its commit record.
    let claim = ClaimedRawName { run: 1, ls: 1, index: 0, host: "testhost".into(), pid: DEAD_PID };
    fs::rename(bu_run.join(claim.raw().to_string()), bu_run.join(claim.path())).unwrap();
    let outputs = tessera_fu::output::FuOutputDir::create(&farm.fu_dir("bu0"), 1).unwrap();
    let claimer = tessera_fu::claim::Claimer::new(&farm.bu_dir("bu0"), 1, "testhost", DEAD_PID).unwrap();
    let mut lumi = outputs.lumi(1, Producer::Pid(DEAD_PID), &TestHlt::new().streams);
    let bytes = fs::read(bu_run.join(claim.path())).unwrap();
    let file = RawFile::parse(&bytes).unwrap();
    let mut verdicts = Vec::new();
    let events: Vec<_> = file.events().map(|e| e.unwrap()).collect();
    let frd: Vec<_> = events.iter().map(|(_, e)| *e).collect();
    TestHlt::new().select_file(Path::new(""), &frd, &mut verdicts).unwrap();
    let mut batch = tessera_fu::output::Batch::default();
    for ((offset, e), v) in events.iter().zip(&verdicts) {
        let record = &bytes[*offset..offset + e.record_bytes()];
        match v {
            Verdict::Streams(set) => {
                lumi.add_event(&mut batch, tessera_fu::output::EventOutcome::Selected, record, set.iter())
            }
            Verdict::Failed(_) => lumi.add_event(&mut batch, tessera_fu::output::EventOutcome::HltFailed, record, [2]),
        }
    }
    lumi.write(&mut batch).unwrap();
    lumi.add_input(claim.clone());
    // Publishing under a claimer whose run directory is elsewhere fails after the commit record
    // is written and before the inputs are removed: what a crash there leaves.
    let elsewhere = tempfile::tempdir().unwrap();
    fs::create_dir_all(elsewhere.path().join("run000001")).unwrap();
    let broken = tessera_fu::claim::Claimer::new(elsewhere.path(), 1, "testhost", DEAD_PID).unwrap();
    drop(claimer);
    lumi.publish(&broken, "dead").unwrap();
    assert!(bu_run.join(claim.path()).exists(), "the input is still claimed");
    // Undo the carrying out of the record's outputs to stand for a crash right after it.
    let record = fu_run.join(format!("run000001_ls0001_pid{DEAD_PID}.commit"));
    fs::write(&record, serde_json_record(&fu_run, &claim)).unwrap();
    let report = farm.run_fu("bu0");
    // The dead process's file was carried out, not processed again; its events are in the
    // ledger once, though its record was carried out twice.
    assert_eq!(report.events, 75 - 6);
    assert_eq!(report.ledger_events, Some(75));
    assert_eq!(tessera_fu::output::ledger_events(&fu_run).unwrap(), 75);
    farm.merge_all();
    farm.check_storage();
}

/// A commit record naming `claim` and every output of pid DEAD_PID, whose outputs are moved
/// back under `open/`.
fn serde_json_record(fu_run: &Path, claim: &ClaimedRawName) -> String {
    let mut outputs = Vec::new();
    for entry in fs::read_dir(fu_run).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.contains(&format!("pid{DEAD_PID}.")) && !name.ends_with(".commit") {
            fs::rename(fu_run.join(&name), fu_run.join("open").join(&name)).unwrap();
            outputs.push(name);
        }
    }
    outputs.sort_by_key(|n| n.ends_with(".jsn"));
    format!("{{\"inputs\":[\"{claim}\"],\"outputs\":{outputs:?},\"processed\":6}}")
}

#[test]
fn fu_1x1_corrupt_event_goes_to_the_error_stream_and_is_counted() {
    let farm = Farm::new(1);
    let raw = farm.run_dir(farm.bu_dir("bu0")).join("run000001_ls0002_index000000.raw");
    let mut bytes = fs::read(&raw).unwrap();
    // A payload byte of the first event.
    bytes[32 + 24 + 20] ^= 0xFF;
    fs::write(&raw, &bytes).unwrap();
    let report = farm.run_fu("bu0");
    assert_eq!(report.events, 75);
    assert!(report.reasons.iter().any(|r| r.contains("CRC")), "{:?}", report.reasons);
    farm.merge_all();
    let doc = FuOutputDoc::parse(
        &fs::read_to_string(farm.run_dir(farm.storage()).join("run000001_ls0002_streamError_StorageManager.jsn"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(doc.processed, 25);
    // Event 26 is corrupt; 34 fails in the HLT.
    assert_eq!((doc.accepted, doc.error_events, doc.hlt_error_events), (2, 2, 1));
}

/// Copies a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Puts `dir` back as `snapshot` holds it.
fn restore(dir: &Path, snapshot: &Path) {
    fs::remove_dir_all(dir).unwrap();
    copy_tree(snapshot, dir);
}

#[test]
fn fu_2x1_mergers_killed_anywhere_resume_without_loss_or_duplicate() {
    let farm = Farm::new(2);
    for bu in &farm.buses {
        farm.run_fu(bu);
    }
    let snapshots = tempfile::tempdir().unwrap();
    let snap = |name: &str, dir: &Path| {
        let to = snapshots.path().join(name);
        copy_tree(dir, &to);
        to
    };
    // Micro: killed after publishing its merged files, before its .done marker and before
    // removing its inputs. The next pass must not merge again.
    for bu in &farm.buses {
        let fu_run = farm.run_dir(farm.fu_dir(bu));
        let before = snap(&format!("fu-{bu}"), &fu_run);
        farm.micro(bu).pass().unwrap();
        restore(&fu_run, &before);
        farm.micro(bu).pass().unwrap();
    }
    // Mini of bu0: killed after writing its pieces' bytes at their reserved offsets, before the
    // pieces' JSON and its marker. The next pass finds its reservations and writes them again.
    let mini_run = farm.run_dir(farm.mini_dir("bu0"));
    let before = snap("mini-bu0", &mini_run);
    farm.mini("bu0").pass().unwrap();
    restore(&mini_run, &before);
    let open = farm.run_dir(farm.storage()).join("open");
    let mut pieces = 0;
    for entry in fs::read_dir(&open).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with("_bu0.jsn") {
            fs::remove_file(open.join(&name)).unwrap();
            pieces += 1;
        }
    }
    assert_eq!(pieces, 9, "3 lumi sections x 3 streams");
    farm.mini("bu1").pass().unwrap();
    farm.mini("bu0").pass().unwrap();
    // Macro: killed after renaming the final files into place, before their JSON.
    let storage_run = farm.run_dir(farm.storage());
    let before = snap("storage", &storage_run);
    farm.macro_merger().pass().unwrap();
    for entry in fs::read_dir(&storage_run).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with("StorageManager.jsn") {
            fs::remove_file(storage_run.join(name)).unwrap();
        }
    }
    // The finished pass removed open/, empty; the killed one had not.
    fs::create_dir_all(&open).unwrap();
    for entry in fs::read_dir(before.join("open")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.ends_with(".jsn") || name.ends_with(".ledger") {
            fs::copy(entry.path(), open.join(name)).unwrap();
        }
    }
    farm.merge_all();
    farm.check_storage();
}

#[test]
fn fu_2x1_macro_merger_killed_while_clearing_a_published_file_ends_the_run() {
    let farm = Farm::new(2);
    for bu in &farm.buses {
        farm.run_fu(bu);
        farm.micro(bu).pass().unwrap();
        farm.mini(bu).pass().unwrap();
    }
    let storage_run = farm.run_dir(farm.storage());
    let open = storage_run.join("open");
    let snapshots = tempfile::tempdir().unwrap();
    let before = snapshots.path().join("open");
    copy_tree(&open, &before);
    assert!(farm.macro_merger().pass().unwrap().finished);
    // Killed after publishing the final files and their JSON, having removed bu0's pieces but
    // neither bu1's nor the ledgers, so before the run's end. What is left names published files
    // and must be cleared, not waited for: a merger killed there once waited for good.
    fs::remove_file(storage_run.join("run000001_ls0000_EoR.jsn")).unwrap();
    // The finished pass removed open/, empty; the killed one had not.
    fs::create_dir_all(&open).unwrap();
    let mut left = 0;
    for entry in fs::read_dir(&before).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.ends_with("_bu1.jsn") || name.ends_with(".ledger") {
            fs::copy(entry.path(), open.join(&name)).unwrap();
            left += 1;
        }
        if name.ends_with("_bu0_EoR.jsn") || name.ends_with("_bu1_EoR.jsn") {
            fs::copy(entry.path(), open.join(name)).unwrap();
        }
    }
    assert!(left > 9, "bu1's pieces and the ledgers are back: {left}");
    // And a JSON document half written by the killed merger.
    fs::write(open.join("run000001_ls0002_streamPhysics_bu0.jsn.4242.tmp"), b"{\"da").unwrap();
    farm.merge_all();
    farm.check_storage();
    // Everything cleared: open/, empty, is gone.
    assert!(
        !open.exists(),
        "{:?}",
        fs::read_dir(&open).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
}

#[test]
fn fu_2x1_chain_through_the_file_broker_with_a_dead_remote_fu() {
    use tessera_fu::broker::{Broker, BrokerConfig};
    let farm = Farm::new(2);
    let brokers: Vec<Broker> =
        farm.buses.iter().map(|bu| Broker::start(BrokerConfig::new(farm.bu_dir(bu), 1)).unwrap()).collect();
    // A remote FU of this host (as the broker names it) died holding a file of bu0.
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    fs::create_dir_all(bu_run.join("fu")).unwrap();
    let claim = ClaimedRawName { run: 1, ls: 2, index: 1, host: "127-0-0-1".into(), pid: DEAD_PID };
    fs::rename(bu_run.join(claim.raw().to_string()), bu_run.join(claim.path())).unwrap();
    for (bu, broker) in farm.buses.iter().zip(&brokers) {
        let cfg = FuConfig { bu: BuAccess::Broker(broker.local_addr()), ..farm.fu_config(bu) };
        let report = run_fu(&cfg, &mut TestHlt::new(), &AtomicBool::new(false)).unwrap();
        assert_eq!(report.events, 75, "{bu}");
        assert_eq!(report.returned_claims, u64::from(bu == "bu0"), "{bu}");
        // The FU published its resource summary through the broker (which made the directory)
        // and removed it when it left.
        let resources = farm.bu_dir(bu).join(tessera_rundir::resources::RESOURCES_DIR);
        assert_eq!(fs::read_dir(&resources).map(Iterator::count).ok(), Some(0), "{bu}");
    }
    for _ in 0..10 {
        for (bu, broker) in farm.buses.iter().zip(&brokers) {
            MicroMerger { bu: BuAccess::Broker(broker.local_addr()), ..farm.micro(bu) }.pass().unwrap();
            farm.mini(bu).pass().unwrap();
        }
        if farm.macro_merger().pass().unwrap().finished {
            break;
        }
    }
    farm.check_storage();
}

/// A small tmpfs mounted on a directory, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Option<SmallDisk> {
        fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tessera-test", dir.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let why = format!("cannot mount a tmpfs on {}: the test fills a small disk of its own (root)", dir.display());
        require::require(&why, ok).then(|| SmallDisk(dir.to_owned()))
    }

    fn grow(&self, size: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}"), self.0.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn fu_1x1_output_disk_full_drops_unpublished_work_waits_and_loses_nothing() {
    let farm = Farm::new(1);
    // 64 kB holds the first outputs but not a lumi section's.
    let Some(disk) = SmallDisk::mount(&farm.fu_dir("bu0"), "64k") else { return };
    let cfg = farm.fu_config("bu0");
    let fu = std::thread::spawn(move || run_fu(&cfg, &mut TestHlt::new(), &AtomicBool::new(false)));
    std::thread::sleep(Duration::from_millis(1500));
    // Nothing was published from the full disk, and no input was lost: every file is still in
    // the BU directory, claimed or not.
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    let raws = |dir: &Path| {
        fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".raw"))
            .count()
    };
    assert_eq!(raws(&bu_run) + raws(&bu_run.join("fu")), 15, "3 lumi sections of 5 files");
    disk.grow("64m");
    let report = fu.join().unwrap().unwrap();
    assert!(report.disk_full_pauses >= 1, "{report:?}");
    assert_eq!(report.events, 75);
    farm.merge_all();
    farm.check_storage();
}

#[test]
fn fu_1x1_fu_lock_follows_the_files_tessera_fus_take() {
    let farm = Farm::new(1);
    farm.run_fu("bu0");
    // 3 lumi sections, all taken: the next file is the first of lumi section 4.
    let lock = fs::read_to_string(farm.run_dir(farm.bu_dir("bu0")).join("fu.lock")).unwrap();
    assert_eq!(lock, "4 0");
}

/// An FU that follows `fu.lock` alone (docs/formats.md §7 (b)), as FUs written for CMS do: under the
/// fcntl lock it takes the file the lock names and moves the lock on; it reads files in place.
#[test]
fn fu_1x1_an_fu_lock_reader_takes_every_file_of_a_tessera_bu_once() {
    use rustix::fs::{FlockOperation, fcntl_lock};
    use std::io::{Read, Seek, Write};
    use tessera_formats::bookkeeping::EolsDoc;
    use tessera_formats::names::{BuFileName, FuLock};
    let farm = Farm::new(1);
    let run = farm.run_dir(farm.bu_dir("bu0"));
    let mut events = Vec::new();
    for _ in 0..1000 {
        let mut lock = fs::OpenOptions::new().read(true).write(true).open(run.join("fu.lock")).unwrap();
        fcntl_lock(&lock, FlockOperation::LockExclusive).unwrap();
        let mut text = String::new();
        lock.read_to_string(&mut text).unwrap();
        let at = FuLock::parse(&text).unwrap();
        let raw = run.join(BuFileName::Raw { run: 1, ls: at.next_ls, index: at.next_index }.to_string());
        let eols = run.join(BuFileName::EndOfLumi { run: 1, ls: at.next_ls }.to_string());
        let next = if raw.exists() {
            Some(FuLock { next_index: at.next_index + 1, ..at })
        } else if fs::read_to_string(&eols).is_ok_and(|t| EolsDoc::parse(&t).unwrap().files <= u64::from(at.next_index))
        {
            Some(FuLock { next_ls: at.next_ls + 1, next_index: 0 })
        } else {
            None
        };
        let Some(next) = next else { break };
        lock.set_len(0).unwrap();
        lock.rewind().unwrap();
        lock.write_all(next.to_string().as_bytes()).unwrap();
        drop(lock);
        if raw.exists() {
            let bytes = fs::read(&raw).unwrap();
            events.extend(RawFile::parse(&bytes).unwrap().events().map(|e| e.unwrap().1.header.event));
            fs::remove_file(&raw).unwrap();
        }
    }
    events.sort_unstable();
    assert_eq!(events, (1..=75).collect::<Vec<u32>>());
}

/// A remote FU silent past the broker's lease (its HLT stuck on a file, so it publishes no
/// resource summary) has the file taken back, and another FU reads it; the first, when it goes
/// on, finds its claim gone and drops its outputs of it rather than publish them twice: the
/// ledgers of both add up to every event once.
#[test]
fn fu_1x1_remote_fu_silent_past_its_lease_drops_its_late_outputs() {
    use tessera_fu::broker::{Broker, BrokerConfig};
    let farm = Farm::new(1);
    let broker =
        Broker::start(BrokerConfig { lease: Duration::from_secs(1), ..BrokerConfig::new(farm.bu_dir("bu0"), 1) })
            .unwrap();
    let remote_out = farm.root.path().join("fu-remote").join("bu0");
    let remote = FuConfig {
        bu: BuAccess::Broker(broker.local_addr()),
        output_dir: remote_out.clone(),
        pid: 4001,
        ..farm.fu_config("bu0")
    };
    let stuck = std::thread::spawn(move || {
        // Stuck on its first file for longer than the broker's lease.
        let mut hlt = HookedHlt::new(|_| true, || std::thread::sleep(Duration::from_millis(2500)));
        run_fu(&remote, &mut hlt, &AtomicBool::new(false)).unwrap()
    });
    // The lease runs out 1 s after the remote FU's last sign of life; the broker looks every
    // 250 ms.
    std::thread::sleep(Duration::from_millis(1600));
    let local = farm.run_fu("bu0");
    let late = stuck.join().unwrap();
    assert_eq!(late.taken_back, 1, "{late:?}");
    let total = u64::from(farm.spec.lumi_sections * farm.spec.events_per_lumi_section);
    assert_eq!(local.events + late.events, total, "local {local:?}\nremote {late:?}");
    let ledgers = tessera_fu::output::ledger_events(&farm.run_dir(farm.fu_dir("bu0"))).unwrap()
        + tessera_fu::output::ledger_events(&farm.run_dir(remote_out)).unwrap();
    assert_eq!(ledgers, total);
    assert_eq!(broker.tally().claims_returned, 1);
}

/// The BU has not ended any lumi section and the FU has nothing left to claim (a BU held back by
/// a full RAM disk): after `PART_AFTER_IDLE` the FU publishes what it holds of each section as a
/// part, which removes the inputs from the BU's disk. When the BU then ends the sections, the
/// mergers take every part and storage holds every event exactly once.
#[test]
fn fu_1x1_lumi_sections_the_bu_has_not_ended_are_published_in_parts_when_the_fu_idles() {
    let farm = Farm::new(1);
    let bu_run = farm.run_dir(farm.bu_dir("bu0"));
    let stash = farm.root.path().join("stash");
    fs::create_dir_all(&stash).unwrap();
    let records: Vec<String> = fs::read_dir(&bu_run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_EoLS.jsn") || n.ends_with("_EoR.jsn"))
        .collect();
    assert_eq!(records.len(), 4, "{records:?}");
    for name in &records {
        fs::rename(bu_run.join(name), stash.join(name)).unwrap();
    }
    let raw_left =
        || fs::read_dir(&bu_run).unwrap().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".raw"));
    let report = std::thread::scope(|s| {
        let fu = s.spawn(|| farm.run_fu("bu0"));
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while raw_left() || fs::read_dir(bu_run.join("fu")).map_or(0, |d| d.count()) > 0 {
            assert!(std::time::Instant::now() < deadline, "the FU kept its inputs of sections not ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Every input is gone from the BU's disk, though no section has ended: published as parts.
        for name in &records {
            fs::rename(stash.join(name), bu_run.join(name)).unwrap();
        }
        fu.join().unwrap()
    });
    assert_eq!((report.events, report.early_parts, report.lumi_sections), (75, 3, 3), "{report:?}");
    farm.merge_all();
    farm.check_storage();
}
