//! `tessera deploy`: the Kubernetes manifests of every example system file (and of one with a
//! pipestream scan's Job) decode strictly against the official Kubernetes API types (the Go program `deploy/k8s-check`, built on
//! k8s.io/api; under CI it must run), written readable by their owner alone; the systemd units of
//! the multi-host example, per host, run nothing as root; a wrong file is refused naming it.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{PLACEHOLDERS, require};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example system files (pipestream files and menus left out), with their placeholder hosts
/// given node names (`ru-host.example` becomes `ru-host`), written into `dir`.
fn examples(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(repo().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.extension().is_none_or(|e| e != "yaml") || ["menu.yaml", "pipestream.yaml"].contains(&name.as_str()) {
            continue;
        }
        if name == "ucx.yaml" && !cfg!(feature = "ucx") {
            continue;
        }
        let mut text = fs::read_to_string(&path).unwrap();
        if let Some((_, hosts)) = PLACEHOLDERS.iter().find(|(example, _)| *example == name) {
            for (placeholder, _) in *hosts {
                text = text.replace(placeholder, placeholder.trim_end_matches(".example"));
            }
        }
        let copy = dir.join(&name);
        fs::write(&copy, text).unwrap();
        out.push(copy);
    }
    out.sort();
    out
}

fn tessera(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).current_dir(dir).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_example_renders_manifests_the_kubernetes_api_types_decode_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let files = examples(dir.path());
    assert!(files.len() >= 6, "{files:?}");
    let mut manifests = Vec::new();
    for file in &files {
        let out = file.with_extension("k8s.yaml");
        let (ok, _, stderr) =
            tessera(&["deploy", "kubernetes", file.to_str().unwrap(), "--output", out.to_str().unwrap()], dir.path());
        assert!(ok, "{}: {stderr}", file.display());
        let mode = fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the manifests hold the run's keys");
        let text = fs::read_to_string(&out).unwrap();
        assert!(text.contains("kind: Pod") && text.contains("kind: ConfigMap") && text.contains("kind: Secret"));
        manifests.push(out);
    }
    // With a pipestream scan as a Job beside the system.
    let with_scan = dir.path().join("laptop-2x2.scan.k8s.yaml");
    let laptop = dir.path().join("laptop-2x2.yaml");
    let pipestream = repo().join("examples/pipestream.yaml");
    let (ok, _, stderr) = tessera(
        &[
            "deploy",
            "kubernetes",
            laptop.to_str().unwrap(),
            "--pipestream",
            pipestream.to_str().unwrap(),
            "--output",
            with_scan.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(ok, "{stderr}");
    assert!(fs::read_to_string(&with_scan).unwrap().contains("name: tessera-1-pipestream-scan"));
    manifests.push(with_scan);
    let go = Command::new("go").arg("version").output().is_ok_and(|o| o.status.success());
    if !require("Go (the strict decoder deploy/k8s-check is a Go program on k8s.io/api)", go) {
        return;
    }
    let checker = dir.path().join("k8s-check");
    let built = Command::new("go")
        .args(["build", "-o", checker.to_str().unwrap(), "."])
        .current_dir(repo().join("deploy/k8s-check"))
        .output()
        .unwrap();
    assert!(built.status.success(), "building deploy/k8s-check: {}", String::from_utf8_lossy(&built.stderr));
    let out = Command::new(&checker).args(&manifests).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.contains("objects decoded strictly")).count(), manifests.len(), "{stdout}");
    // The checker refuses what the API does not know.
    let bad = dir.path().join("bad.k8s.yaml");
    let text = fs::read_to_string(&manifests[0]).unwrap().replacen("hostNetwork: true", "hostNetwrk: true", 1);
    fs::write(&bad, text).unwrap();
    let out = Command::new(&checker).arg(&bad).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("hostNetwrk"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_multi_host_example_renders_hardened_systemd_units_per_host_and_none_as_root() {
    let dir = tempfile::tempdir().unwrap();
    let file = examples(dir.path()).into_iter().find(|f| f.ends_with("multi-host.yaml")).unwrap();
    let out = dir.path().join("units");
    let (ok, _, stderr) =
        tessera(&["deploy", "systemd", file.to_str().unwrap(), "--output", out.to_str().unwrap()], dir.path());
    assert!(ok, "{stderr}");
    let hosts: Vec<String> =
        fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    for host in ["ru-host", "bu-host", "fu-host"] {
        assert!(hosts.contains(&host.to_owned()), "{hosts:?}");
        assert!(out.join(host).join("etc/tessera/system.yaml").is_file(), "{host}");
    }
    let bu = fs::read_to_string(out.join("bu-host/tessera-2001-bu0.service")).unwrap();
    assert!(bu.contains("User=tessera\n") && bu.contains("ProtectSystem=strict\n") && !bu.contains("User=root"));
    assert!(out.join("fu-host/tessera-2001-fu-bu0@.service").is_file());
    assert!(out.join("fu-host/tessera-2001-mergers.service").is_file());
    let keys = out.join("ru-host/etc/tessera/run-2001.env");
    assert_eq!(fs::metadata(&keys).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(fs::read_to_string(&keys).unwrap().contains("TESSERA_LINK_KEY="));
}

#[test]
fn a_wrong_system_file_is_refused_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    fs::write(&file, "rus:\n  - name: ru0\n    feds: \"1024\"\nbus: []\nrunn: 3\n").unwrap();
    let (ok, stdout, stderr) = tessera(&["deploy", "kubernetes", file.to_str().unwrap()], dir.path());
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("bad.yaml:5:1: runn: unknown field"), "{stderr}");
    assert!(stdout.is_empty(), "nothing rendered: {stdout}");
}
