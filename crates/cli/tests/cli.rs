//! The `tessera` binary as a user meets it: the README's command, exit statuses, and errors that
//! name the bad input.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::tessera;
use std::path::Path;
use std::process::Output;

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn demo_writes_inspects_and_verifies_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = tessera(&["demo", "--output", dir.path().to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("wrote run 1: 60 events in 9 files"), "{stderr}");
    assert!(stdout.contains("EoR: 60 events, 9 files, 3 lumi sections, last 3"), "{stdout}");
    assert!(stdout.contains("OK, every rule holds"), "{stdout}");
}

#[test]
fn demo_without_output_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("demo")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stdout.contains("OK, every rule holds"), "{stdout}\n{stderr}");
    assert!(stdout.contains("the sample is removed now"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "the demo left {left:?}");
}

#[test]
fn verify_fails_with_the_file_and_offset_of_a_corrupt_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = tessera(&["sample", "--output", dir.path().to_str().unwrap(), "--run", "42", "--lumi-sections", "1"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let run_dir = dir.path().join("run000042");
    let raw = run_dir.join("run000042_ls0001_index000000.raw");
    let mut bytes = std::fs::read(&raw).unwrap();
    bytes[2000] ^= 0x40; // inside the first event's first data FED
    std::fs::write(&raw, bytes).unwrap();
    let out = tessera(&["verify", run_dir.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("run000042_ls0001_index000000.raw at byte 32: event 1: FRD event: CRC-32C mismatch"),
        "{stdout}"
    );
    assert!(stdout.contains("payload differs from its seeded content"), "{stdout}");
    let json = tessera(&["verify", "--json", run_dir.to_str().unwrap()]);
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(parsed.as_array().unwrap().iter().any(|v| v["offset"] == 32));
}

#[test]
fn sample_refuses_to_overwrite_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["sample", "--output", dir.path().to_str().unwrap(), "--lumi-sections", "1"];
    assert!(tessera(&args).status.success());
    let out = tessera(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("run000001 exists already"), "{:?}", text(&out));
}

#[test]
fn inspect_names_what_it_cannot_read() {
    let out = tessera(&["inspect", "/nonexistent/file.raw"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("cannot read /nonexistent/file.raw"), "{:?}", text(&out));
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"hello world").unwrap();
    let out = tessera(&["inspect", junk.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("first bytes [68, 65, 6c, 6c"), "{:?}", text(&out));
}

#[test]
fn inspect_reports_a_malformed_input_and_exits_1() {
    let malformed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../inspect/tests/malformed/raw_bad_crc16.raw");
    let out = tessera(&["inspect", malformed.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("!! at byte 56: event 1 FED 1: FED fragment: CRC-16 mismatch at byte 56"), "{stdout}");
}

#[test]
fn verify_points_from_a_bu_directory_to_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    assert!(tessera(&["sample", "--output", dir.path().to_str().unwrap(), "--lumi-sections", "1"]).status.success());
    let out = tessera(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("is not a run directory (runRRRRRR); it holds run000001"), "{:?}", text(&out));
    let out = tessera(&["verify", "/nonexistent/run000001"]);
    let stderr = text(&out).1;
    assert_eq!(stderr.matches("No such file").count(), 1, "the cause once: {stderr}");
}

#[test]
fn bench_net_quick_prints_every_case_and_writes_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("scan");
    let out = tessera(&["bench", "net", "--quick", "--out", out_dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in ["case ", "(a) raw ingest           8     2048", "(e) raw relay ->2        8     2048"] {
        assert!(stdout.contains(row), "no row {row:?} in\n{stdout}");
    }
    for size in ["256", "2048", "16384"] {
        let rows = stdout.lines().filter(|l| l.contains(&format!("      12 {size:>8} "))).count();
        assert_eq!(rows, 2, "(a) and (e) at {size} bytes in\n{stdout}");
    }
    for (file, series) in [("raw-ingest-vs-size", "(e) raw relay"), ("raw-cpu-vs-size", "(e) relay thread")] {
        let csv = std::fs::read_to_string(out_dir.join(format!("{file}.csv"))).unwrap();
        assert!(csv.starts_with("series,fragment bytes,"), "{csv}");
        assert_eq!(csv.lines().filter(|l| l.contains(series)).count(), 3, "{csv}");
        let svg = std::fs::read_to_string(out_dir.join(format!("{file}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains(series), "{file}.svg");
    }
}

#[test]
fn bench_net_json_is_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let out = tessera(&["bench", "net", "--quick", "--json", "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed["suite"], "net");
    assert_eq!(parsed["raw_ingest"]["streams"], 8);
    assert!(parsed["raw_relay"]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(parsed["scan"]["raw_relay"].as_array().unwrap().len(), 3);
    assert_eq!(parsed["files"].as_array().unwrap().len(), 4);
    let refused = tessera(&["bench", "wire", "--quick", "--json"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused).1.contains("--json is supported by the net, evb, orbit, protocols and fu suites only"));
}

#[test]
fn bench_fu_quick_prints_both_ratios() {
    let out = tessera(&["bench", "fu", "--quick"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in ["(a) plain read", "(b) FU read, CRC, select, write", "(c) plain copy", "(d) micro + mini + macro"] {
        assert!(stdout.contains(row), "no row {row:?} in\n{stdout}");
    }
    for line in ["target FU (b)/(a) >= 0.70: ", "target FU (b)/(a2) >= 0.80: ", "target mergers (d)/(c) >= 0.85: "] {
        let rest =
            stdout.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("no {line:?} in\n{stdout}"));
        let ratio: f64 = rest.split(',').next().unwrap().parse().unwrap();
        // Printed to two decimals, a debug build's ratio can read 0.00 (CI's did); the JSON
        // below carries it in full and must be above 0.
        assert!(ratio.is_finite() && ratio >= 0.0, "{line}{rest}");
    }
    let last = stdout.lines().last().unwrap();
    let parsed: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(parsed["suite"], "fu");
    for ratio in ["fu_over_read", "merge_over_copy"] {
        let r = parsed["ratios"][ratio].as_f64().unwrap();
        assert!(r.is_finite() && r > 0.0, "{ratio}: {r}");
    }
    assert_eq!(parsed["raw_files"], 4);
    assert!(parsed["merged_files"].as_u64().unwrap() > 0, "{last}");
}

#[test]
fn bench_evb_quick_prints_every_case_and_writes_the_scans() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("scan");
    let out = tessera(&["bench", "evb", "--quick", "--out", out_dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for row in [
        "(a) raw ingest",
        "(a+) minimal ingest",
        "(b) RU ingest, nothing sent",
        "(c) chain, no disk",
        "(d) chain, RAM disk",
        "(e) raw relay",
        "(e+) minimal relay",
    ] {
        assert!(stdout.contains(row), "no row {row:?} in\n{stdout}");
    }
    for line in [
        "(b)/(a) >= 0.9",
        "(b)/(a+) >= 0.9 from 1 to 16 kB",
        "(c)/(e+) >= 0.85 from 1 to 16 kB",
        "(c)/(e) >= 0.75",
        "beyond the kernel's copy <= 50 ns",
        "memory bounded",
    ] {
        assert!(stdout.contains(line), "no target {line:?} in\n{stdout}");
    }
    for file in [
        "evb-throughput-vs-size",
        "evb-rate-vs-size",
        "evb-cpu-vs-size",
        "evb-rate-vs-sources",
        "evb-throughput-vs-units",
        "evb-throughput-vs-writers",
    ] {
        let csv = std::fs::read_to_string(out_dir.join(format!("{file}.csv"))).unwrap();
        assert!(csv.starts_with("series,") && csv.lines().count() > 2, "{file}.csv: {csv}");
        let svg = std::fs::read_to_string(out_dir.join(format!("{file}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{file}.svg");
    }
    let sources = std::fs::read_to_string(out_dir.join("evb-rate-vs-sources.csv")).unwrap();
    assert!(sources.contains("LHCb") && sources.contains(",32,2600,reference"), "{sources}");
}

#[test]
fn bench_orbit_quick_prints_every_case_and_writes_the_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("orbit");
    let out = tessera(&["bench", "orbit", "--quick", "--json", "--out", out_dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let parsed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let points = parsed["points"].as_array().unwrap();
    assert_eq!(
        points.iter().map(|p| p["block_bytes"].as_u64().unwrap()).collect::<Vec<_>>(),
        [50_000, 125_000, 250_000]
    );
    for p in points {
        let chain = &p["chain"];
        assert!(chain["built"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(chain["built"], chain["triggered"], "every triggered orbit built: {p}");
        assert_eq!((chain["mode"].as_str(), chain["crc_check"].as_str()), (Some("orbit"), Some("always")));
        assert_eq!(p["ru_ingest_crc_never"]["crc_check"], "never");
        for (_, r) in p["ratios"].as_object().unwrap() {
            let r = r.as_f64().unwrap();
            assert!(r.is_finite() && r > 0.0, "{p}");
        }
    }
    let targets = parsed["targets"].as_array().unwrap();
    assert!(targets.iter().any(|t| t["target"].as_str().unwrap().contains(">= 0.95 of raw ingest")), "{targets:?}");
    for file in ["orbit-rate-vs-block", "orbit-throughput-vs-block"] {
        let csv = std::fs::read_to_string(out_dir.join(format!("{file}.csv"))).unwrap();
        assert!(csv.starts_with("series,") && csv.contains(",requirement"), "{file}.csv: {csv}");
        let svg = std::fs::read_to_string(out_dir.join(format!("{file}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{file}.svg");
    }
}

#[test]
fn bench_protocols_quick_measures_every_case_of_both_protocols_and_writes_the_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("protocols");
    let out = tessera(&["bench", "protocols", "--quick", "--json", "--out", out_dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let parsed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // Push in the runtime still fails some cases under load (BENCHMARKS.md): such a case says
    // why, and pull's never fail.
    let failed = |case: &serde_json::Value, name: &str| match case["failed"].as_str() {
        Some(why) => {
            assert!(name.starts_with("push") && !why.is_empty(), "{name}: {why}");
            true
        }
        None => false,
    };
    let cores = parsed["cores"].as_array().unwrap();
    let topologies: Vec<(&str, &str)> =
        cores.iter().map(|c| (c["topology"].as_str().unwrap(), c["protocol"].as_str().unwrap())).collect();
    assert_eq!(
        topologies,
        [("1x1", "pull"), ("1x1", "push"), ("4x4", "pull"), ("4x4", "push"), ("8x8", "pull"), ("8x8", "push")]
    );
    let names = ["pull", "push", "pull, slow BU", "push, slow BU"];
    for name in names {
        let t = &parsed["throughput"][name];
        if !failed(t, name) {
            assert!(t["events_per_s"].as_f64().unwrap() > 0.0, "{name}: {t}");
            assert_eq!(t["built"], t["triggered"], "{name}: every event built: {t}");
            assert_eq!(t["bu_events_per_s"].as_array().unwrap().len(), 2, "{name}: {t}");
            assert!(t["case"].as_str().unwrap().contains("ramdisk"), "{name}: {t}");
        }
        let l = &parsed["latency"][name];
        if !failed(l, name) {
            let (p50, p99, max) =
                (l["p50_ms"].as_f64().unwrap(), l["p99_ms"].as_f64().unwrap(), l["max_ms"].as_f64().unwrap());
            assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{name}: {l}");
            assert_eq!(l["built"], l["seen"], "{name}: the watcher saw every published event: {l}");
            assert_eq!(l["lost"], 0, "{name}: {l}");
            assert!(l["rate_hz"].as_f64().unwrap() > 0.0 && l["dead_fraction"].as_f64().unwrap() >= 0.0, "{name}: {l}");
        }
    }
    let slow = parsed["slow_bu_events_per_s"].as_f64().unwrap();
    assert!(slow > 0.0 && parsed["paced_rate_hz"].as_f64().unwrap() > 0.0, "{parsed}");
    for name in ["pull, slow BU", "push, slow BU"] {
        assert!(parsed["throughput"][name]["case"].as_str().is_none_or(|c| c.ends_with("slow BU")), "{parsed}");
    }
    let sources = parsed["sources"].as_array().unwrap();
    assert_eq!(sources.iter().map(|p| p["sources"].as_u64().unwrap()).collect::<Vec<_>>(), [2, 4]);
    for p in sources {
        assert!(p["raw_fragments_per_s_per_stream"].as_f64().unwrap() > 0.0, "{p}");
        for protocol in ["pull", "push"] {
            if !failed(&p[protocol], protocol) {
                assert!(p[protocol]["events_per_s"].as_f64().unwrap() > 0.0, "{p}");
                assert!(p[protocol]["bu_cpu_ns_per_fragment"].as_f64().unwrap() > 0.0, "{p}");
            }
        }
    }
    assert_eq!(parsed["lhcb"]["ns_per_fragment"], 3200.0);
    let latency_plotted = names.iter().any(|n| parsed["latency"][*n]["failed"].is_null());
    for file in ["protocols-rate-vs-sources", "protocols-cpu-vs-sources", "protocols-latency"] {
        if file == "protocols-latency" && !latency_plotted {
            continue;
        }
        let csv = std::fs::read_to_string(out_dir.join(format!("{file}.csv"))).unwrap();
        assert!(csv.starts_with("series,") && csv.lines().count() > 2, "{file}.csv: {csv}");
        let svg = std::fs::read_to_string(out_dir.join(format!("{file}.svg"))).unwrap();
        assert!(svg.starts_with("<svg"), "{file}.svg");
    }
    let rate = std::fs::read_to_string(out_dir.join("protocols-rate-vs-sources.csv")).unwrap();
    assert!(rate.contains("LHCb") && rate.contains(",32,2600,reference"), "{rate}");
}

#[test]
fn run_and_the_unit_commands_name_the_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let typo = file(
        "typo.yaml",
        "rus:\n  - name: ru0\n    feds: \"1024,0-3\"\n    fragmnet_size: {bytes: 1000}\nbus:\n  - name: bu0\n",
    );
    let out = tessera(&["run", &typo]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = text(&out);
    assert!(stderr.contains("typo.yaml:4:5: rus[0].fragmnet_size: unknown field `fragmnet_size`"), "{stderr}");
    // The printed default system is a valid file, but its ports are 0: fine for `run`, not for
    // units in separate processes.
    let printed = tessera(&["run", "--print-config"]);
    assert!(printed.status.success());
    let default = file("default.yaml", &text(&printed).0);
    let out = tessera(&["bu", "--system", &default, "--name", "bu0"]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = text(&out);
    assert!(stderr.contains("evm.port, rus[0].ferol_port, rus[1].ferol_port, rus[1].control_port, bus[0].data_port, bus[1].data_port are 0"), "{stderr}");
    let out = tessera(&["ru", "--system", &default, "--name", "ru9"]);
    assert!(text(&out).1.contains("no RU named ru9 in"), "{:?}", text(&out));
}

#[test]
fn run_says_where_and_how_much_it_writes_and_keeps_storage_and_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", "--events", "2000", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let said = stderr.lines().find(|l| l.starts_with("output: ")).expect("where and how much, before the run");
    assert!(said.contains("up to 34.7 MB (2000 events of 17.4 kB on average") && said.contains("free on"), "{said}");
    assert!(stdout.contains("kept: ") && stdout.contains("--keep all keeps them"), "{stdout}");
    let mut left: Vec<String> =
        std::fs::read_dir(&output).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["storage", "summary.json"]);
    let storage = output.join("storage/run000001");
    assert!(tessera(&["verify", storage.to_str().unwrap()]).status.success());
}

#[test]
fn run_refuses_to_start_when_its_file_system_lacks_the_room() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", "--events", "100000000000", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("the run may write up to") && stderr.contains("GB free"), "{stderr}");
    assert!(!output.exists(), "nothing was written");
}

#[test]
fn run_writes_a_summary_that_proves_conservation_and_refuses_to_overwrite_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out");
    let out = tessera(&["run", "--events", "2000", "--keep", "all", "--output", output.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("conservation: triggered 2000 = built 2000 + lost 0  holds"), "{stdout}");
    assert!(stdout.contains("events: 2000 built, 2000 complete, 0 incomplete\n"), "{stdout}");
    assert!(!stdout.contains("incomplete events:"), "a clean run says 0 incomplete once, in its events line: {stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(output.join("summary.json")).unwrap()).unwrap();
    assert_eq!((summary["triggered"].as_u64(), summary["built"].as_u64()), (Some(2000), Some(2000)));
    assert_eq!(summary["conservation_holds"], serde_json::Value::Bool(true));
    let per_bu: u64 = summary["per_bu"].as_array().unwrap().iter().map(|b| b["events"].as_u64().unwrap()).sum();
    assert_eq!(per_bu, 2000);
    for bu in ["bu0", "bu1"] {
        let run_dir = output.join(bu).join("run000001");
        let verified = tessera(&["verify", run_dir.to_str().unwrap()]);
        assert!(verified.status.success(), "{:?}", text(&verified));
    }
    let again = tessera(&["run", "--events", "10", "--output", output.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).1.contains("run000001 exists: run 1 was already written into"), "{:?}", text(&again));
}

/// The default `--keep storage` leaves only storage and the summary; `--keep summary` only the
/// summary. A second run of the same number into either is refused, naming what is there,
/// instead of merging into the first run's storage.
#[test]
fn a_second_run_into_an_output_that_keeps_only_storage_or_the_summary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (keep, left) in [("storage", "storage/run000001 exists"), ("summary", "summary.json exists")] {
        let output = dir.path().join(keep);
        let out = tessera(&["run", "--events", "500", "--keep", keep, "--output", output.to_str().unwrap()]);
        assert!(out.status.success(), "{:?}", text(&out));
        if keep == "storage" {
            // What `run` names can be checked: the output directory points at its run, and
            // storage passes `inspect` as it passes `verify`.
            let verify = tessera(&["verify", output.to_str().unwrap()]);
            assert!(text(&verify).1.contains("it holds storage/run000001: name that"), "{:?}", text(&verify));
            let storage = output.join("storage").join("run000001");
            // Storage holds the run's files and their definitions, no empty working directory.
            let dirs: Vec<String> = std::fs::read_dir(&storage)
                .unwrap()
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(dirs, ["jsd"], "{storage:?}");
            for command in ["inspect", "verify"] {
                let checked = tessera(&[command, storage.to_str().unwrap()]);
                assert!(checked.status.success(), "{command}: {:?}", text(&checked));
                assert!(text(&checked).0.contains("no violations"), "{command}: {:?}", text(&checked));
            }
        }
        let again = tessera(&["run", "--events", "500", "--output", output.to_str().unwrap()]);
        assert_eq!(again.status.code(), Some(2), "{:?}", text(&again));
        let said = text(&again).1;
        assert!(said.contains(left) && said.contains("choose another --output or remove it"), "{said}");
    }
}

/// An orbit-mode run directory as a BU writes it (run 1, 2 lumi sections, files of 3 orbits).
fn orbit_run(dir: &Path) -> std::path::PathBuf {
    use tessera_rundir::orbit_sample::{OrbitSampleSpec, write_orbit_sample_run};
    write_orbit_sample_run(dir, &OrbitSampleSpec::default()).unwrap().run_dir
}

#[test]
fn inspect_and_verify_read_an_orbit_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = orbit_run(dir.path());
    let out = tessera(&["verify", run_dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("OK, every rule holds"), "{stdout}");
    let out = tessera(&["inspect", run_dir.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("orbits"), "{stdout}");
    assert!(stdout.contains("16 orbits (4 empty)"), "{stdout}");
    let raw = run_dir.join("run000001_ls0001_index000000.raw");
    let out = tessera(&["inspect", raw.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("orbit file  run 1  3 orbits"), "{stdout}");
    assert!(stdout.contains("3 orbits, 0 problems"), "{stdout}");
    assert!(!stdout.contains("source 1024"), "{stdout}");
    let out = tessera(&["inspect", "--feds", raw.to_str().unwrap()]);
    assert!(text(&out).0.contains("source 1024"), "{:?}", text(&out));
    let out = tessera(&["inspect", "--json", raw.to_str().unwrap()]);
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed["kind"], "orbit_file");
    assert_eq!(parsed["orbits"].as_array().unwrap().len(), 3);
}

#[test]
fn verify_of_an_orbit_run_fails_with_the_file_and_offset_of_a_corrupt_byte() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = orbit_run(dir.path());
    let raw = run_dir.join("run000001_ls0001_index000000.raw");
    let mut bytes = std::fs::read(&raw).unwrap();
    // The first orbit's first block (source 1024): header 32 bytes, then its first fragment's
    // SR header (16 bytes) and payload.
    bytes[32 + 16 + 2] ^= 0x40;
    std::fs::write(&raw, bytes).unwrap();
    let out = tessera(&["verify", run_dir.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .contains("run000001_ls0001_index000000.raw at byte 0: orbit 0 source 1024: orbit block: CRC-32C mismatch"),
        "{stdout}"
    );
    assert!(stdout.contains("run000001_ls0001_index000000.raw at byte 32: orbit 0 event 1 source 1024: SlinkRocket fragment: CRC-16 mismatch"), "{stdout}");
    assert!(stdout.contains("run000001_ls0001_index000000.raw at byte 50: orbit 0 event 1 source 1024: payload differs from its seeded content"), "{stdout}");
    let json = tessera(&["verify", "--json", run_dir.to_str().unwrap()]);
    let parsed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(parsed.as_array().unwrap().iter().any(|v| v["offset"] == 50));
}

#[test]
fn sim_replays_one_seed_of_a_named_scenario_and_refuses_an_unknown_name_listing_every_scenario() {
    let out = tessera(&["sim", "--scenario", "2x2_orbit_event_count_mismatch", "--seeds", "1", "--first-seed", "3"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("2x2_orbit_event_count_mismatch") && l.ends_with("ok")), "{stdout}");
    let out = tessera(&["sim", "--scenario", "2x2_orbit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for name in tessera_sim::scenarios().iter().map(|s| s.name) {
        assert!(stderr.contains(name), "{name} not listed: {stderr}");
    }
}
