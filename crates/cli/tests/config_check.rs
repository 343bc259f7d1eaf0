//! `tessera config check`: every mistake of each wrong system file or menu kept in
//! `crates/config/tests/bad/` (its `.expected` beside it), OK for every example (those that name
//! placeholder hosts once real addresses are put in), and every key of the default system
//! documented in `docs/configuration.md`.

#[allow(dead_code)] // each test binary uses a part of the shared helpers
mod common;

use common::{PLACEHOLDERS, placeholder_lines};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tessera ARGS` run in `dir`: exit code, stdout, stderr.
fn tessera(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let Output { status, stdout, stderr } =
        Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).current_dir(dir).output().unwrap();
    (status.code(), String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned())
}

/// `tessera config check NAME` run in `dir`: exit code, stdout, stderr.
fn check(dir: &Path, name: &str) -> (Option<i32>, String, String) {
    tessera(dir, &["config", "check", name])
}

#[test]
fn each_wrong_file_gets_every_precise_message() {
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
    assert!(checked >= 14, "{checked} fixtures");
}

/// The lines of `stderr` but the last, which must say that there are `count` mistakes in `name`.
fn mistakes<'a>(name: &str, stderr: &'a str, count: usize) -> Vec<&'a str> {
    let mut lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.pop(), Some(format!("{name}: {count} mistakes").as_str()), "{stderr}");
    assert_eq!(lines.len(), count, "{stderr}");
    lines
}

#[test]
fn a_system_file_with_several_mistakes_gets_each_at_its_line_and_column() {
    let dir = repo().join("crates/config/tests/bad");
    let (code, _, stderr) = check(&dir, "several-mistakes.yaml");
    assert_eq!(code, Some(1), "{stderr}");
    let lines = mistakes("several-mistakes.yaml", &stderr, 8);
    let line = |at: &str| {
        let prefix = format!("several-mistakes.yaml:{at}: ");
        lines.iter().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("nothing at {at}:\n{stderr}"))
    };
    // Misspelt keys, at the top and in a section, with the key meant.
    assert!(line("2:1").starts_with("several-mistakes.yaml:2:1: runn: unknown field `runn`"), "{stderr}");
    assert!(line("2:1").ends_with("did you mean `run`?"), "{stderr}");
    assert!(
        line("6:3").contains("trigger.sede: unknown field `sede`") && line("6:3").ends_with("did you mean `seed`?")
    );
    assert!(line("11:21").contains("rus[0].fragment_size.byte: ") && line("11:21").ends_with("did you mean `bytes`?"));
    assert!(line("20:22").contains("unknown variant `contine`") && line("20:22").ends_with("did you mean `continue`?"));
    // A value of the wrong type: what was expected, what was found.
    assert!(line("5:12").ends_with("trigger.rate_hz: expected a number (f64), found \"fast\""), "{stderr}");
    // Values that are wrong together or alone.
    assert!(line("13:5").ends_with("rus[1].feds: FED 3 is already read by rus[0]"), "{stderr}");
    assert!(line("16:5").ends_with("bus[0].data_port: port 9000 on 127.0.0.1 is already taken by rus[0].ferol_port"));
    assert!(line("18:3").ends_with("bu.writer_threads: 17 is outside 1..=16"), "{stderr}");
}

#[test]
fn a_menu_is_checked_as_a_menu_with_every_mistake() {
    let (code, stdout, stderr) = check(&repo().join("examples"), "menu.yaml");
    assert_eq!((code, stderr.as_str()), (Some(0), ""), "{stdout}");
    assert_eq!(
        stdout,
        "menu.yaml: OK: a selection menu of 3 streams (Physics, Express, Calibration) and 3 paths \
         (physics_all, express, calibration)\n"
    );
    let dir = repo().join("crates/config/tests/bad");
    let (code, _, stderr) = check(&dir, "menu-several-mistakes.yaml");
    assert_eq!(code, Some(1), "{stderr}");
    let lines = mistakes("menu-several-mistakes.yaml", &stderr, 7);
    for (at, says) in [
        ("3:29", "streams[2]: stream \"Express\" is already streams[1]"),
        ("7:5", "paths[0].prescal: unknown field `prescal`"),
        ("9:25", "paths[0].conditions.trigger_type[1]: trigger type 16 is above 15"),
        ("10:7", "paths[0].conditions.random_fraction: 1.5 is outside 0..=1"),
        ("11:7", "paths[0].conditions.bunch: unknown field `bunch`"),
        ("13:15", "paths[1].streams[0]: stream \"Expres\" is not in streams"),
        ("14:15", "paths[1].prescale: expected a whole number of 0 or more (u32), found \"often\""),
    ] {
        let prefix = format!("menu-several-mistakes.yaml:{at}: {says}");
        assert!(lines.iter().any(|l| l.starts_with(&prefix)), "{prefix}\n{stderr}");
    }
    assert!(lines[1].ends_with("did you mean `prescale`?"), "{stderr}");
    // Either kind of file can be named: a system file checked as a menu has none of its keys.
    let (code, _, stderr) = tessera(&repo().join("examples"), &["config", "check", "--menu", "laptop-2x2.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("laptop-2x2.yaml:4:1: run: unknown field `run`, expected one of streams, paths"),
        "{stderr}"
    );
    let (code, _, stderr) = tessera(&repo().join("examples"), &["config", "check", "--system", "menu.yaml"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("menu.yaml:3:1: streams: unknown field `streams`"), "{stderr}");
}

#[test]
fn every_example_checks_ok_once_its_placeholder_hosts_are_replaced() {
    let dir = repo().join("examples");
    let substituted = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let (code, stdout, stderr) = check(&dir, &name);
        if name == "ucx.yaml" && !cfg!(feature = "ucx") {
            // A build without UCX refuses its links on UCX, each named, with the remedy.
            assert_eq!(code, Some(1), "{stdout}");
            for key in ["transport.ru_bu", "transport.evm_ru"] {
                assert!(
                    stderr
                        .contains(&format!("{key}: this build of Tessera has no UCX: build it with `--features ucx`")),
                    "{stderr}"
                );
            }
            checked += 1;
            continue;
        }
        let Some((_, hosts)) = PLACEHOLDERS.iter().find(|(example, _)| *example == name) else {
            assert_eq!(placeholder_lines(&text), 0, "{name} names a placeholder host but is not in PLACEHOLDERS");
            assert_eq!(code, Some(0), "{name}: {stderr}");
            assert!(stdout.starts_with(&format!("{name}: OK: ")), "{stdout}");
            checked += 1;
            continue;
        };
        // As written: refused, every host key named, nothing else wrong.
        assert_eq!(code, Some(1), "{name}: {stdout}");
        let lines = stderr.lines().collect::<Vec<_>>();
        let (count, refused) = lines.split_last().unwrap();
        assert_eq!(*count, format!("{name}: {} mistakes", refused.len()));
        assert_eq!(refused.len(), placeholder_lines(&text), "{stderr}");
        for line in refused {
            let host = hosts.iter().map(|(placeholder, _)| placeholder).find(|p| line.contains(&format!("\"{p}\"")));
            assert!(host.is_some() && line.ends_with("is a placeholder: put your hosts' names here"), "{line}");
        }
        // With addresses in place of the placeholders: OK.
        let text = hosts.iter().fold(text, |text, (placeholder, address)| text.replace(placeholder, address));
        assert_eq!(placeholder_lines(&text), 0, "{name}: a placeholder that the test does not replace");
        fs::write(substituted.path().join(&name), text).unwrap();
        let (code, stdout, stderr) = check(substituted.path(), &name);
        assert_eq!(code, Some(0), "{name} with addresses: {stderr}");
        assert!(stdout.starts_with(&format!("{name}: OK: ")), "{stdout}");
        checked += 1;
    }
    assert!(checked >= 6, "{checked} examples");
}

#[test]
fn run_refuses_placeholder_hosts_before_it_starts_anything() {
    let dir = tempfile::tempdir().unwrap();
    let example = repo().join("examples/multi-host.yaml");
    let out = dir.path().join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("run")
        .arg(&example)
        .arg("--output")
        .arg(&out)
        .env("TESSERA_AGENT_TOKEN", "no-agent-is-asked")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Every error that stops `tessera run` before it starts is exit status 2.
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // Only the refusal is said: no agent was called, no unit started, nothing written.
    let (_, _, checked) = check(&repo().join("examples"), "multi-host.yaml");
    let refusal = checked.replace("multi-host.yaml", &example.display().to_string());
    assert_eq!(stderr, format!("tessera: {refusal}"));
    assert!(stderr.contains("rus[0].host: \"ru-host.example\" is a placeholder: put your hosts' names here"));
    assert!(!out.exists(), "nothing was started");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "nothing was written");
    assert!(output.stdout.is_empty(), "{}", String::from_utf8_lossy(&output.stdout));
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
    // Every section is printed, those a laptop leaves at their defaults too.
    for section in ["run", "trigger", "evm", "push", "rus", "bus", "ru", "bu", "fu", "controller", "transport"] {
        assert!(all.iter().any(|k| k == section), "config default leaves out {section}: {all:?}");
    }
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

#[test]
fn a_missing_file_and_a_negative_limit_are_refused_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) = tessera(dir.path(), &["config", "check", "nosuch.yaml"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("nosuch.yaml: cannot read it: No such file or directory"), "{stderr}");
    for (option, said) in
        [("--seconds", "is not a number of seconds above 0"), ("--events", "is not a whole number above 0")]
    {
        let (code, _, stderr) = tessera(dir.path(), &["run", option, "-1"]);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(&format!("\"-1\" {said}")) && !stderr.contains("tip:"), "{stderr}");
    }
}
