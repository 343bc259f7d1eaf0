//! `tessera config check`: a precise message for each wrong system file kept in
//! `crates/config/tests/bad/` (its `.expected` beside it), OK for every example, and every key of
//! the default system documented in `docs/configuration.md`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tessera config check NAME` run in `dir`: exit code, stdout, stderr.
fn check(dir: &Path, name: &str) -> (Option<i32>, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_tessera")).args(["config", "check", name]).current_dir(dir).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn each_wrong_system_file_gets_its_precise_message() {
    let dir = repo().join("crates/config/tests/bad");
    let mut checked = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        let expected = fs::read_to_string(path.with_extension("expected")).unwrap();
        let (code, stdout, stderr) = check(&dir, name);
        assert_eq!(code, Some(1), "{name}: {stdout}{stderr}");
        assert_eq!(stderr, expected, "{name}");
        checked += 1;
    }
    assert!(checked >= 12, "{checked} fixtures");
}

#[test]
fn every_example_system_file_checks_ok() {
    let dir = repo().join("examples");
    let mut checked = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        // menu.yaml is a selection menu, not a system.
        if path.extension().is_none_or(|e| e != "yaml") || name == "menu.yaml" {
            continue;
        }
        let (code, stdout, stderr) = check(&dir, &name);
        assert_eq!(code, Some(0), "{name}: {stderr}");
        assert!(stdout.starts_with(&format!("{name}: OK: ")), "{stdout}");
        checked += 1;
    }
    assert!(checked >= 4, "{checked} examples");
}

/// The key paths of a YAML value: `run.number`, `rus[i].feds`, ...
fn keys(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.push(path.clone());
                keys(v, &path, out);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                keys(item, &format!("{prefix}[i]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_key_of_the_default_system_is_documented() {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(["config", "default"]).output().unwrap();
    let value: serde_json::Value = serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let mut all = Vec::new();
    keys(&value, "", &mut all);
    let docs = fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    for key in all {
        // A key is documented by itself or by a documented ancestor (`rus[i].fragment_size`
        // covers its `mean_bytes`); a whole section (`run`) by its keys.
        let mut documented = false;
        let mut at = key.as_str();
        loop {
            if docs.contains(&format!("`{at}`")) || docs.contains(&format!("`{at}.")) {
                documented = true;
                break;
            }
            match at.rfind('.') {
                Some(i) => at = &at[..i],
                None => break,
            }
        }
        assert!(documented, "{key} is not in docs/configuration.md");
    }
}
