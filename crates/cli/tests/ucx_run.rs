//! The event builder with its protocol links on UCX (`examples/ucx.yaml`), as a user runs it: a
//! build with the feature `ucx` builds every event of the 2×2 into storage under UCX's TCP and
//! under shared memory alone (`UCX_TLS=tcp`, `UCX_TLS=sm,self`), conservation and the chain
//! holding and `tessera verify` accepting what was built and stored; orbits too. A build without
//! the feature refuses the file before it starts anything, naming the keys and the remedy. (A BU
//! lost mid-run over UCX is in `processes.rs`.)

use std::path::Path;
use std::process::{Command, Output};

fn example(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)).unwrap()
}

/// `tessera run` of `yaml` under `dir` with `UCX_TLS=tls` (and `--keep all`).
fn run(dir: &Path, yaml: &str, tls: &str) -> Output {
    let system = dir.join("system.yaml");
    std::fs::write(&system, yaml).unwrap();
    let output = dir.join("out");
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["run", system.to_str().unwrap(), "--output", output.to_str().unwrap(), "--keep", "all"])
        .env("UCX_TLS", tls)
        .output()
        .expect("tessera runs")
}

#[cfg(feature = "ucx")]
fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `tessera verify` of each run directory under `out` (the BUs' and storage's): every one OK.
#[cfg(feature = "ucx")]
fn verify_all(out: &Path, run: u32) -> usize {
    let mut verified = 0;
    for (parent, says) in
        [("bu0", "OK, every rule holds"), ("bu1", "OK, every rule holds"), ("storage", "no violations")]
    {
        let dir = out.join(parent).join(format!("run{run:06}"));
        let result = Command::new(env!("CARGO_BIN_EXE_tessera")).arg("verify").arg(&dir).output().unwrap();
        let (stdout, stderr) = text(&result);
        assert!(result.status.success(), "{}: {stdout}{stderr}", dir.display());
        assert!(stdout.contains(says), "{stdout}");
        verified += 1;
    }
    verified
}

/// The example, ended at `events` events (or orbits), on `tls`: every one built and stored.
#[cfg(feature = "ucx")]
fn builds_every_event_on(tls: &str, orbits: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = example("ucx.yaml").replace("  seconds: 5\n", "  events: 3000\n");
    if orbits {
        yaml = yaml.replace("  events: 3000\n", "  mode: orbit\n  orbits: 300\n  orbits_per_lumi_section: 100\n");
        yaml = yaml.replace("  orbits_per_lumi_section: 16384   # ~1.46 s lumi sections\n", "");
    }
    let out = run(dir.path(), &yaml, tls);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{tls}: {stdout}\n{stderr}");
    let unit = if orbits { "orbits" } else { "events" };
    let built = if orbits { 300 } else { 3000 };
    assert!(stdout.contains(&format!("triggered {built} = built {built} + lost 0  holds")), "{stdout}");
    assert!(stdout.contains("chain: built") && stdout.contains("holds"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["problems"], 0, "{unit} on {tls}: the units said problems: {}", summary["first_problems"]);
    assert_eq!(verify_all(&dir.path().join("out"), 22), 3);
}

#[cfg(feature = "ucx")]
#[test]
fn ucx_2x2_on_ucx_tcp_builds_every_event_into_storage_and_verify_accepts_it() {
    builds_every_event_on("tcp", false);
}

#[cfg(feature = "ucx")]
#[test]
fn ucx_2x2_on_shared_memory_builds_every_event_into_storage_and_verify_accepts_it() {
    builds_every_event_on("sm,self", false);
}

#[cfg(feature = "ucx")]
#[test]
fn ucx_2x2_on_shared_memory_builds_every_orbit() {
    builds_every_event_on("sm,self", true);
}

/// A UCX that cannot start (a transport that does not exist) fails the run before any event,
/// saying what UCX found.
#[cfg(feature = "ucx")]
#[test]
fn ucx_2x2_with_a_transport_ucx_lacks_fails_naming_what_ucx_found() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = example("ucx.yaml")
        .replace("  seconds: 5\n", "  events: 100\n")
        .replace("  # ucx_transports: \"sm,self\"", "  ucx_transports: \"no_such_fabric\"");
    let out = run(dir.path(), &yaml, "tcp");
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    let said = format!("{stdout}{stderr}");
    assert!(said.contains("starting UCX") && said.contains("no_such_fabric"), "{said}");
    assert!(said.contains("tcp/") || said.contains("memory"), "names the transports UCX found: {said}");
}

/// Without the feature: refused before anything starts (exit status 2), keys and remedy named.
#[cfg(not(feature = "ucx"))]
#[test]
fn ucx_2x2_without_the_feature_is_refused_before_it_starts_naming_the_keys_and_the_remedy() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &example("ucx.yaml"), "tcp");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for key in ["transport.ru_bu", "transport.evm_ru"] {
        assert!(stderr.contains(&format!("{key}: this build of Tessera has no UCX")), "{stderr}");
    }
    assert!(stderr.contains("--features ucx"), "{stderr}");
    assert!(!dir.path().join("out").exists(), "nothing started");
}
