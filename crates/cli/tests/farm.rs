//! The filter unit as a process: `tessera fu` killed with SIGKILL mid-run, and `tessera verify`
//! of a storage directory.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_formats::bookkeeping::{EolsDoc, FuOutputDoc};
use tessera_formats::names::{BuFileName, ClaimedRawName, StreamFileName};

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

fn fu(bu_dir: &Path, out: &Path) -> Command {
    let mut c = tessera();
    c.arg("fu").arg("--bu-dir").arg(bu_dir).arg("--output").arg(out).args(["--run", "1", "--poll-ms", "5"]);
    c
}

/// Processed per lumi section in an FU output run directory, from the first stream's JSON of
/// every process.
fn processed(dir: &Path) -> BTreeMap<u32, u64> {
    let mut per_ls = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if let Ok(n) = StreamFileName::parse(&name)
            && n.ext == "jsn"
            && n.stream == "Physics"
            && n.producer.pid().is_some()
        {
            let doc = FuOutputDoc::parse(&fs::read_to_string(dir.join(&name)).unwrap()).unwrap();
            *per_ls.entry(n.ls).or_default() += doc.processed;
        }
    }
    per_ls
}

#[test]
fn fu_1x1_fu_killed_mid_run_its_files_are_processed_once_by_another() {
    let tmp = tempfile::tempdir().unwrap();
    let bu = tmp.path().join("bu");
    let out = tmp.path().join("fu");
    let status = tessera()
        .args(["sample", "--lumi-sections", "4", "--events-per-ls", "200", "--events-per-file", "10"])
        .arg("--output")
        .arg(&bu)
        .status()
        .unwrap();
    assert!(status.success());
    let run = bu.join("run000001");
    // The first FU is killed as soon as it holds a claim.
    let mut first = fu(&bu, &out).stdout(std::process::Stdio::null()).spawn().unwrap();
    let pid = first.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let claimed = || {
        fs::read_dir(run.join("fu"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| ClaimedRawName::parse(&e.file_name().to_string_lossy()).is_ok_and(|c| c.pid == pid))
    };
    while !claimed() {
        assert!(Instant::now() < deadline, "the FU claimed nothing in 30 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // The second finds the claims of a dead process, gives them back, and processes the run.
    let second = fu(&bu, &out).output().unwrap();
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let report: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert!(report["returned_claims"].as_u64().unwrap() >= 1, "{report}");
    // Every event of every lumi section is in exactly one published output.
    let out_run = out.join("run000001");
    let mut built = BTreeMap::new();
    for ls in 1..=4 {
        let eols = fs::read_to_string(run.join(BuFileName::EndOfLumi { run: 1, ls }.to_string())).unwrap();
        built.insert(ls, EolsDoc::parse(&eols).unwrap().events);
    }
    assert_eq!(processed(&out_run), built);
    // Nothing is left: no claim, no raw file, no partial output of the killed FU.
    let leftover: Vec<_> = fs::read_dir(run.join("fu")).unwrap().collect();
    assert!(leftover.is_empty(), "{leftover:?}");
    let partial: Vec<_> = fs::read_dir(out_run.join("open")).unwrap().collect();
    assert!(partial.is_empty(), "{partial:?}");
    // tessera verify checks the FU outputs against their JSON, and finds a damaged one.
    let verify = tessera().arg("verify").arg(&out_run).output().unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    let data = fs::read_dir(&out_run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "raw"))
        .unwrap();
    let mut bytes = fs::read(&data).unwrap();
    bytes[100] ^= 1;
    fs::write(&data, bytes).unwrap();
    let verify = tessera().arg("verify").arg(&out_run).output().unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(text.contains("Adler-32 does not match its JSON"), "{text}");
}

#[test]
fn fu_bad_menu_is_named_with_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let menu = tmp.path().join("menu.yaml");
    fs::write(&menu, "streams: [Physics]\npaths:\n  - name: p\n    streams: [Phys]\n").unwrap();
    let out = fu(tmp.path(), tmp.path()).arg("--menu").arg(&menu).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("menu.yaml:4") && err.contains("paths[0].streams[0]"), "{err}");
}

/// A system file in `dir` whose run (number 3, 4000 events into `out`) leaves the merging to
/// `tessera merge`: one RU, the BUs `bus`, `fus` FU processes each.
fn merge_apart_system(dir: &Path, out: &Path, bus: &[&str], fus: u32) -> PathBuf {
    let bus: String = bus.iter().map(|b| format!("  - {{name: {b}}}\n")).collect();
    let system = dir.join("system.yaml");
    fs::write(
        &system,
        format!(
            "run: {{number: 3, events: 4000, orbits_per_lumi_section: 256, output: {}}}\n\
             trigger: {{free_running: true}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-7\", fragment_size: {{bytes: 8192}}}}\n\
             bus:\n{bus}\
             fu: {{merge: false, processes_per_bu: {fus}}}\n",
            out.display()
        ),
    )
    .unwrap();
    system
}

#[test]
fn merge_1x1_merger_killed_mid_run_resumes_and_storage_proves_every_event() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let system = merge_apart_system(tmp.path(), &out, &["bu0"], 2);
    let run = tessera().arg("run").arg(&system).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(text.contains("storage is left to `tessera merge`"), "{text}");
    // Kill the mergers early, then again later, then let them finish.
    for delay_ms in [30, 150] {
        let mut merger =
            tessera().arg("merge").arg("--system").arg(&system).stdout(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        merger.kill().unwrap();
        merger.wait().unwrap();
    }
    // A merger that cannot finish fails in minutes, not after the default hour.
    let text = merged(&system, []);
    assert!(text.contains("built 4000 = processed 4000") && text.ends_with("holds\n"), "{text}");
    let verify = tessera()
        .arg("verify")
        .arg(out.join("storage/run000003"))
        .arg("--built")
        .arg(out.join("bu0/run000003"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// Each BU's mergers apart, where its directory is seen (as beside a BU whose RAM disk is its
/// own), copying its bookkeeping; then the macro merger elsewhere, checking against the copies.
#[test]
fn merge_2x1_each_bus_mergers_apart_then_the_macro_merger_checks_against_their_copies() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let copies = tmp.path().join("copies");
    let at_bus = merge_apart_system(tmp.path(), &out, &["bu0", "bu1"], 2);
    let run = tessera().arg("run").arg(&at_bus).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let wrong = tessera().args(["merge", "--bu", "bu7", "--system"]).arg(&at_bus).output().unwrap();
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success() && err.contains("--bu bu7") && err.contains("it has bu0, bu1"), "{err}");
    for bu in ["bu0", "bu1"] {
        let text =
            merged(&at_bus, [Path::new("--bu"), Path::new(bu), Path::new("--bookkeeping-copy"), &copies.join(bu)]);
        assert!(text.contains(&format!("merged {bu}'s share of run 3")), "{text}");
        // The copies are the BU's own records.
        let (own, copy) = (out.join(bu).join("run000003"), copies.join(bu).join("run000003"));
        let copied: Vec<_> = fs::read_dir(&copy).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(copied.iter().any(|n| n.to_string_lossy().ends_with("_EoR.jsn")), "{copied:?}");
        for name in copied {
            assert_eq!(fs::read(own.join(&name)).unwrap(), fs::read(copy.join(&name)).unwrap(), "{name:?}");
        }
    }
    // Where the macro merger runs, it checks against the copies: the BUs' directories are not
    // there.
    for bu in ["bu0", "bu1"] {
        fs::rename(out.join(bu), tmp.path().join(format!("elsewhere-{bu}"))).unwrap();
    }
    let text = merged(&at_bus, [Path::new("--macro-only"), Path::new("--bookkeeping"), &copies]);
    assert!(text.contains("built 4000 = processed 4000") && text.ends_with("holds\n"), "{text}");
}

/// `tessera merge` of `system` with `args`, which must succeed within 300 s: its standard output.
fn merged<'a>(system: &Path, args: impl IntoIterator<Item = &'a Path>) -> String {
    let out = tessera().args(["merge", "--timeout-s", "300", "--system"]).arg(system).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn run_with_a_menu_that_cannot_be_read_is_refused_before_anything_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let system = tmp.path().join("system.yaml");
    let out = tmp.path().join("out");
    fs::write(
        &system,
        "rus:\n  - {name: ru0, feds: \"1024,0\"}\nbus:\n  - {name: bu0}\nfu: {menu: no-such-menu.yaml}\n",
    )
    .unwrap();
    let run = tessera().arg("run").arg(&system).arg("--output").arg(&out).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("fu.menu: no-such-menu.yaml: cannot read it"), "{err}");
    assert!(!out.exists(), "nothing was started");
}

#[test]
fn run_with_the_python_hlt_in_place_of_the_menu_proves_the_chain() {
    let Some(script) = common::example_hlt("the test runs the filter farm") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let system = tmp.path().join("system.yaml");
    let out = tmp.path().join("out");
    fs::write(
        &system,
        format!(
            "run: {{events: 2000, orbits_per_lumi_section: 256}}\ntrigger: {{free_running: true}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-3\"}}\nbus:\n  - {{name: bu0}}\n\
             fu: {{exec: [python3, {}]}}\n",
            script.display()
        ),
    )
    .unwrap();
    let run = tessera().arg("run").arg(&system).arg("--output").arg(&out).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{text}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(text.contains("chain: built 2000 = processed 2000 by the FUs = processed 2000 in storage"), "{text}");
    // The script's rule: Physics takes even event numbers, Express multiples of 10.
    assert!(text.contains("accepted: Error 0, Express 200, Physics 1000"), "{text}");
}

#[test]
fn fu_log_as_json_gives_one_object_a_line_with_the_lumi_section() {
    let tmp = tempfile::tempdir().unwrap();
    let bu = tmp.path().join("bu");
    assert!(tessera().args(["sample", "--lumi-sections", "2"]).arg("--output").arg(&bu).status().unwrap().success());
    let out = fu(&bu, &tmp.path().join("fu")).arg("--log-format").arg("json").output().unwrap();
    assert!(out.status.success());
    let log = String::from_utf8(out.stderr).unwrap();
    let events: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let published: Vec<_> = events.iter().filter(|e| e["lumi_section"].is_u64()).collect();
    assert_eq!(published.len(), 2, "{log}");
    assert!(published.iter().all(|e| e["level"] == "INFO" && e["message"].as_str().unwrap().contains("published")));
    assert_eq!(published.iter().map(|e| e["processed"].as_u64().unwrap()).sum::<u64>(), 40);
}

/// `tessera run` of 2 RUs and 2 BUs, two FUs per BU behind a slow HLT: one of bu0's FUs is
/// killed (SIGKILL) while it works on a file, after it has published a lumi section of its own.
/// The run starts it again, another FU takes the file over, and both checks count the killed
/// incarnation's published events from the ledger: every event built is processed once and is
/// in storage, and `verify` agrees.
#[test]
fn run_2x2_fu_killed_mid_file_is_started_again_and_every_event_is_processed_once() {
    let Some(script) = common::example_hlt("the test slows the FUs") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let system = tmp.path().join("system.yaml");
    let out = tmp.path().join("out");
    fs::write(
        &system,
        format!(
            "run: {{events: 20000, orbits_per_lumi_section: 1024}}\ntrigger: {{rate_hz: 10000}}\n\
             rus:\n  - {{name: ru0, feds: \"1024,0-1\"}}\n  - {{name: ru1, feds: \"2-3\"}}\n\
             bus:\n  - {{name: bu0}}\n  - {{name: bu1}}\n\
             fu: {{processes_per_bu: 2, exec: [python3, {}]}}\n",
            script.display()
        ),
    )
    .unwrap();
    let mut run = tessera()
        .arg("run")
        .arg(&system)
        .args(["--keep", "all", "--output"])
        .arg(&out)
        .env("TESSERA_HLT_FILE_DELAY_MS", "100")
        .stdout(fs::File::create(tmp.path().join("run.out")).unwrap())
        .stderr(fs::File::create(tmp.path().join("run.log")).unwrap())
        .spawn()
        .unwrap();
    let victim = common::kill_when_found(
        "an FU of bu0 that published a lumi section, holding a claim",
        Duration::from_secs(60),
        || {
            common::fus_of(run.id(), "bu0")
                .first()
                .copied()
                .filter(|&pid| common::has_published(&out, pid) && common::holds_a_claim(&out, pid))
        },
    );
    let status = common::wait_child(&mut run, Duration::from_secs(240));
    let text = fs::read_to_string(tmp.path().join("run.out")).unwrap();
    let log = || fs::read_to_string(tmp.path().join("run.log")).unwrap();
    assert!(status.success(), "{text}\n{}", log());
    assert!(log().contains(&format!("signal: 9 (SIGKILL) (pid {victim};")), "{}", log());
    assert!(text.contains(&format!("ended with signal: 9 (SIGKILL) (pid {victim};")), "{text}");
    assert!(text.contains("conservation: triggered 20000 = built 20000 + lost 0  holds"), "{text}");
    assert!(text.contains("chain: built 20000 = processed 20000 by the FUs = processed 20000 in storage"), "{text}");
    let mut bu_runs = Vec::new();
    for bu in ["bu0", "bu1"] {
        bu_runs.extend(fs::read_dir(out.join(bu)).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    let storage = out.join("storage").join("run000001");
    let verify = tessera().arg("verify").arg(&storage).arg("--built").args(&bu_runs).output().unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}
