//! `tessera pipestream` on loopback: a scan through its instances' states with both baselines,
//! its files, and the refusals of a bad file.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::tessera;
use std::fs;

#[test]
fn pipestream_scan_2x2_on_loopback_leaves_csv_table_and_plots_with_baselines_and_no_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ps.yaml");
    let out = tmp.path().join("out");
    fs::write(
        &file,
        format!(
            "clients: 2\nservers: 2\nchecksum: true\nduration_s: 0.3\nwarmup_s: 0.1\npolicy: fair\noutput: {}\n\
             scan:\n  message_bytes: [512, 65536]\n  threads: [1, 2]\n  topologies: [2x2, 1x3]\nbaselines: {{iperf3: false}}\n",
            out.display()
        ),
    )
    .unwrap();
    let run = tessera(&["pipestream", "scan", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let csv = fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    // 2 topologies x 2 thread counts x 2 sizes x (pipestream, raw-tcp).
    assert_eq!(rows.len(), 16, "{csv}");
    for row in &rows {
        let fields: Vec<&str> = row.split(',').collect();
        assert!(fields[9].parse::<u64>().unwrap() > 0, "no bytes: {row}");
        assert_eq!(fields.last(), Some(&"0"), "errors: {row}");
    }
    assert!(rows.iter().any(|r| r.starts_with("1x3,1,3,")), "{csv}");
    assert!(stdout.contains("target at 64 KiB >= 0.95 of raw TCP (2x2, 1 thread)"), "{stdout}");
    assert!(stdout.contains("below 4 KiB (2x2, 2 threads, 512 B)"), "{stdout}");
    // Each point said as it is measured, with its figure; raw TCP with the socket buffers of
    // the better of its two measurements.
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("pipestream: 1 of 16: 2x2, 1 thread, 512 B, pipestream: "), "{stderr}");
    assert!(stderr.contains("pipestream: 16 of 16: 1x3, 2 threads, 65536 B, raw-tcp: "), "{stderr}");
    assert!(
        stderr.lines().filter(|l| l.contains("raw-tcp: ") && l.contains(" socket buffers)")).count() == 8,
        "{stderr}"
    );
    for plot in ["throughput-2x2.svg", "throughput-1x3.svg", "throughput-topologies.svg"] {
        assert!(out.join(plot).exists(), "{plot}: {stdout}");
    }
    assert!(fs::read_to_string(out.join("table.txt")).unwrap().contains("iperf3"));
}

#[test]
fn pipestream_bad_files_are_refused_naming_line_and_key() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ps.yaml");
    fs::write(&file, "clients: 2\nbrust: 4\nscan:\n  topologies: [2x2, 3by3]\n").unwrap();
    for (command, code) in [(&["pipestream", "scan"][..], 2), (&["pipestream", "check"], 1), (&["config", "check"], 1)]
    {
        let run = tessera(&[command, &[file.to_str().unwrap()]].concat());
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(code), "{command:?}: {stderr}");
        assert!(stderr.contains("ps.yaml:2") && stderr.contains("brust"), "{stderr}");
    }
    fs::write(&file, "clients: 2\nscan:\n  topologies: [2x2, 3by3]\n").unwrap();
    let run = tessera(&["pipestream", "check", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("ps.yaml:3") && stderr.contains("scan.topologies[1]"), "{stderr}");
    let good = tmp.path().join("good.yaml");
    fs::write(&good, "scan: {message_bytes: [1024, 4096], threads: [1, 2]}\n").unwrap();
    for command in [&["pipestream", "check"][..], &["config", "check"]] {
        let run = tessera(&[command, &[good.to_str().unwrap()]].concat());
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(stdout.contains("good.yaml: OK: a pipestream file of 4 points"), "{command:?}: {run:?}");
    }
}

#[test]
fn pipestream_instance_refuses_a_listen_address_other_than_loopback() {
    let run = tessera(&["pipestream", "instance", "--name", "x", "--listen", "0.0.0.0:0"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("loopback only") && stderr.contains("tessera agent"), "{stderr}");
}

/// Instances of a scan writing into `out` still running.
fn instances_of(out: &std::path::Path) -> usize {
    let pattern = format!("pipestream instance .*{}", out.display());
    let found = std::process::Command::new("pgrep").args(["-f", &pattern]).output().unwrap();
    String::from_utf8_lossy(&found.stdout).lines().count()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn pipestream_scan_stopped_by_ctrl_c_leaves_its_points_and_a_killed_driver_leaves_no_instance() {
    let tmp = tempfile::tempdir().unwrap();
    for signal in ["INT", "KILL"] {
        let out = tmp.path().join(signal);
        let file = tmp.path().join(format!("{signal}.yaml"));
        fs::write(
            &file,
            format!(
                "duration_s: 1.5\nwarmup_s: 0.1\noutput: {}\nscan: {{message_bytes: [1024, 2048, 4096]}}\n",
                out.display()
            ),
        )
        .unwrap();
        let mut scan = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["pipestream", "scan", file.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Past the first point (at 1.6 s a point, at least one is measured).
        wait_until("the scan's instances start", || instances_of(&out) == 4);
        std::thread::sleep(std::time::Duration::from_millis(4500));
        std::process::Command::new("kill").args([&format!("-{signal}"), &scan.id().to_string()]).status().unwrap();
        let status = scan.wait().unwrap();
        wait_until("every instance leaves", || instances_of(&out) == 0);
        if signal == "INT" {
            let mut stderr = String::new();
            std::io::Read::read_to_string(scan.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            assert_eq!(status.code(), Some(130), "{stderr}");
            assert!(stderr.contains("stopped before the scan ended"), "{stderr}");
            let csv = fs::read_to_string(out.join("results.csv")).unwrap();
            assert!(csv.lines().count() >= 2, "at least the first point: {csv}");
            assert!(fs::read_to_string(out.join("table.txt")).unwrap().contains("the scan ended early"));
        }
    }
}

/// Over UCX (a build with the feature `ucx`): the same scan between processes, on UCX's tcp and
/// on its shared memory, every message accounted for.
#[cfg(feature = "ucx")]
#[test]
fn pipestream_scan_over_ucx_tcp_and_shared_memory_between_processes_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, transports) in ["tcp", "sm,self"].iter().enumerate() {
        let file = tmp.path().join(format!("ucx{i}.yaml"));
        let out = tmp.path().join(format!("out{i}"));
        fs::write(
            &file,
            format!(
                "transport: ucx\nucx_transports: \"{transports}\"\nchecksum: true\nduration_s: 0.3\nwarmup_s: 0.1\n\
                 folded: true\noutput: {}\nscan: {{message_bytes: [4096, 1048576], threads: [1, 2]}}\n\
                 baselines: {{iperf3: false}}\n",
                out.display()
            ),
        )
        .unwrap();
        let run = tessera(&["pipestream", "scan", file.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.success(), "{transports}: {stdout}\n{}", String::from_utf8_lossy(&run.stderr));
        assert!(stdout.contains(&format!("travel on UCX active messages (transports {transports})")), "{stdout}");
        let csv = fs::read_to_string(out.join("results.csv")).unwrap();
        let rows: Vec<&str> = csv.lines().skip(1).filter(|r| r.contains(",pipestream,")).collect();
        assert_eq!(rows.len(), 4, "{csv}");
        for row in rows {
            let fields: Vec<&str> = row.split(',').collect();
            assert!(fields[9].parse::<u64>().unwrap() > 0, "no bytes: {row}");
            assert_eq!(fields.last(), Some(&"0"), "errors: {row}");
        }
    }
}

/// Without the feature `ucx`, a file that asks for it is refused naming the key and the remedy.
#[cfg(not(feature = "ucx"))]
#[test]
fn pipestream_transport_ucx_without_the_feature_is_refused_with_the_remedy() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ucx.yaml");
    fs::write(&file, "transport: ucx\n").unwrap();
    let run = tessera(&["pipestream", "check", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ucx.yaml:1") && stderr.contains("--features ucx"), "{stderr}");
}
