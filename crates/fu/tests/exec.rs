//! `ExecHlt` with the example program `examples/hlt/select.py` and with small shell programs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tessera_formats::frd::FrdEvent;
use tessera_formats::raw::RawFile;
use tessera_fu::exec::{ExecConfig, ExecHlt};
use tessera_fu::{FuError, Hlt, StreamSet, Verdict};
use tessera_rundir::sample::{SampleSpec, write_sample_run};

#[path = "../../cli/tests/common/require.rs"]
mod require;

/// The example program's command, or `None` without python3 (a failure under CI:
/// [`require::require`]).
fn select_py() -> Option<Vec<String>> {
    let python = Command::new("python3").arg("--version").output().is_ok();
    if !require::require("no python3: the test runs the example HLT, examples/hlt/select.py", python) {
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hlt/select.py");
    Some(vec!["python3".into(), script.display().to_string()])
}

/// A raw file of `events` events numbered from 1, as a BU writes it, in a temporary directory.
fn raw_file(events: u32) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SampleSpec {
        lumi_sections: 1,
        events_per_lumi_section: events,
        events_per_file: events,
        fed_ids: vec![3, 7],
        fed_payload_bytes_mean: 64,
        ..SampleSpec::default()
    };
    let summary = write_sample_run(tmp.path(), &spec).unwrap();
    let path = summary.files[0].path.clone();
    (tmp, path)
}

/// Runs `hlt` over the events of `path` that `keep` accepts; returns (event number, verdict).
fn judge(hlt: &mut ExecHlt, path: &Path, keep: impl Fn(u32) -> bool) -> Vec<(u32, Verdict)> {
    let bytes = std::fs::read(path).unwrap();
    let raw = RawFile::parse(&bytes).unwrap();
    let events: Vec<FrdEvent<'_>> = raw.events().map(|e| e.unwrap().1).filter(|e| keep(e.header.event)).collect();
    let mut verdicts = Vec::new();
    hlt.select_file(path, &events, &mut verdicts).unwrap();
    assert_eq!(verdicts.len(), events.len());
    events.iter().map(|e| e.header.event).zip(verdicts).collect()
}

/// The example's rule: Physics (bit 0) for even events, Express (bit 1) for multiples of 10.
fn rule(event: u32) -> Verdict {
    let mut set = StreamSet::NONE;
    if event.is_multiple_of(2) {
        set.insert(0);
    }
    if event.is_multiple_of(10) {
        set.insert(1);
    }
    Verdict::Streams(set)
}

fn hlt_error(result: Result<ExecHlt, FuError>) -> String {
    match result {
        Err(FuError::Hlt(message)) => message,
        other => panic!("expected an HLT error, got {other:?}"),
    }
}

#[test]
fn the_example_selects_by_its_rule() {
    let Some(argv) = select_py() else { return };
    let (_tmp, path) = raw_file(21);
    let mut hlt = ExecHlt::start(ExecConfig::new(argv)).unwrap();
    assert_eq!(hlt.streams(), ["Physics", "Express"]);
    for _ in 0..2 {
        let verdicts = judge(&mut hlt, &path, |_| true);
        assert_eq!(verdicts.len(), 21);
        for (event, verdict) in verdicts {
            assert_eq!(verdict, rule(event), "event {event}");
        }
    }
    assert_eq!(hlt.starts(), 1, "one program for both files");
}

#[test]
fn events_the_fu_set_aside_get_no_verdict() {
    let Some(argv) = select_py() else { return };
    let (_tmp, path) = raw_file(12);
    let mut hlt = ExecHlt::start(ExecConfig::new(argv)).unwrap();
    let verdicts = judge(&mut hlt, &path, |e| e % 3 != 0);
    assert_eq!(verdicts.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [1, 2, 4, 5, 7, 8, 10, 11]);
    for (event, verdict) in verdicts {
        assert_eq!(verdict, rule(event), "event {event}");
    }
}

#[test]
fn a_crashing_event_fails_after_its_retries_and_the_others_are_judged() {
    let Some(argv) = select_py() else { return };
    let (_tmp, path) = raw_file(12);
    let mut config = ExecConfig::new(argv);
    config.env.push(("TESSERA_HLT_CRASH_EVENT".into(), "6".into()));
    let mut hlt = ExecHlt::start(config).unwrap();
    let verdicts = judge(&mut hlt, &path, |_| true);
    assert_eq!(verdicts.len(), 12);
    for (event, verdict) in verdicts {
        if event == 6 {
            let Verdict::Failed(reason) = verdict else { panic!("event 6: {verdict:?}") };
            assert!(reason.ends_with("select.py exited with status 3 at event 6"), "{reason}");
        } else {
            assert_eq!(verdict, rule(event), "event {event}");
        }
    }
    assert_eq!(hlt.starts(), 4, "the first run, two retries, and a run for the events after 6");
}

#[test]
fn a_crash_on_an_event_set_aside_is_not_retried() {
    let Some(argv) = select_py() else { return };
    let (_tmp, path) = raw_file(12);
    let mut config = ExecConfig::new(argv);
    config.env.push(("TESSERA_HLT_CRASH_EVENT".into(), "6".into()));
    let mut hlt = ExecHlt::start(config).unwrap();
    for (event, verdict) in judge(&mut hlt, &path, |e| e != 6) {
        assert_eq!(verdict, rule(event), "event {event}");
    }
    assert_eq!(hlt.starts(), 2);
}

#[test]
fn a_program_without_a_streams_line_is_refused() {
    let argv = vec!["sh".into(), "-c".into(), "echo hello".into()];
    let message = hlt_error(ExecHlt::start(ExecConfig::new(argv)));
    assert_eq!(message, "sh -c echo hello printed hello instead of STREAMS (at startup)");

    let argv = vec!["sh".into(), "-c".into(), "exit 4".into()];
    let message = hlt_error(ExecHlt::start(ExecConfig::new(argv)));
    assert_eq!(message, "sh -c exit 4 exited with status 4 (at startup)");

    let mut config = ExecConfig::new(vec!["sh".into(), "-c".into(), "exec sleep 10".into()]);
    config.startup_timeout = Duration::from_millis(200);
    let message = hlt_error(ExecHlt::start(config));
    assert_eq!(message, "sh -c exec sleep 10 printed no STREAMS line within 200ms (at startup)");

    let argv = vec!["sh".into(), "-c".into(), "echo STREAMS Physics,Error".into()];
    let message = hlt_error(ExecHlt::start(ExecConfig::new(argv)));
    assert!(message.contains("announced the stream Error"), "{message}");
}

#[test]
fn a_program_that_does_not_exist_is_refused() {
    let message = hlt_error(ExecHlt::start(ExecConfig::new(vec!["/nonexistent/tessera-hlt".into()])));
    assert!(message.starts_with("cannot start /nonexistent/tessera-hlt: "), "{message}");
}

#[test]
fn garbage_and_silence_fail_the_events() {
    let (_tmp, path) = raw_file(3);
    let script = "echo STREAMS A; while read line; do echo nonsense; done";
    let mut hlt = ExecHlt::start(ExecConfig::new(vec!["sh".into(), "-c".into(), script.into()])).unwrap();
    for (event, verdict) in judge(&mut hlt, &path, |_| true) {
        let Verdict::Failed(reason) = verdict else { panic!("event {event}: {verdict:?}") };
        assert!(reason.contains("answered nonsense where `") && reason.ends_with(&format!("at event {event}")));
    }
    assert_eq!(hlt.starts(), 9, "three tries per event, each but the first in a new run");

    let mut config = ExecConfig::new(vec!["sh".into(), "-c".into(), "echo STREAMS A; exec sleep 10".into()]);
    config.file_timeout = Duration::from_millis(200);
    config.max_retries = 0;
    let mut hlt = ExecHlt::start(config).unwrap();
    for (event, verdict) in judge(&mut hlt, &path, |_| true) {
        let expected = format!("sh -c echo STREAMS A; exec sleep 10 did not answer within 200ms at event {event}");
        assert_eq!(verdict, Verdict::Failed(expected));
    }
}

#[test]
fn a_program_that_cannot_be_restarted_stops_the_fu() {
    let (tmp, path) = raw_file(3);
    let marker = tmp.path().join("started");
    // Starts once; every later start fails.
    let script =
        format!("[ -e '{m}' ] && exit 1; touch '{m}'; echo STREAMS A; read line; exit 5", m = marker.display());
    let mut hlt = ExecHlt::start(ExecConfig::new(vec!["sh".into(), "-c".into(), script.clone()])).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let raw = RawFile::parse(&bytes).unwrap();
    let events: Vec<FrdEvent<'_>> = raw.events().map(|e| e.unwrap().1).collect();
    let mut verdicts = Vec::new();
    match hlt.select_file(&path, &events, &mut verdicts) {
        Err(FuError::Hlt(message)) => assert_eq!(
            message,
            format!(
                "sh -c {script} failed to restart 3 times, the last time: sh -c {script} exited with status 1 (at startup)"
            )
        ),
        other => panic!("expected an HLT error, got {other:?}"),
    }
    assert_eq!(hlt.starts(), 4);
}

#[test]
fn an_fu_process_sets_aside_the_events_its_program_fails_on() {
    use std::sync::atomic::AtomicBool;
    use tessera_fu::process::{FuConfig, run_fu};
    let Some(argv) = select_py() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spec = SampleSpec {
        lumi_sections: 2,
        events_per_lumi_section: 12,
        events_per_file: 5,
        fed_ids: vec![3],
        fed_payload_bytes_mean: 64,
        ..SampleSpec::default()
    };
    write_sample_run(&tmp.path().join("bu"), &spec).unwrap();
    let mut config = ExecConfig::new(argv);
    config.env.push(("TESSERA_HLT_CRASH_EVENT".into(), "16".into()));
    let mut hlt = ExecHlt::start(config).unwrap();
    let cfg = FuConfig {
        bu: tessera_fu::remote::BuAccess::Directory(tmp.path().join("bu")),
        output_dir: tmp.path().join("out"),
        run: spec.run,
        host: "testhost".into(),
        pid: std::process::id(),
        poll_interval: Duration::from_millis(10),
        recovery_interval: Duration::from_secs(60),
        run_start_timeout: Duration::from_secs(5),
        summary_interval: Duration::from_secs(1),
    };
    let report = run_fu(&cfg, &mut hlt, &AtomicBool::new(false)).unwrap();
    assert_eq!((report.files, report.events, report.error_events, report.lumi_sections), (6, 24, 1, 2));
    let accepted: Vec<(&str, u64)> = report.accepted.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    assert_eq!(accepted, [("Error", 1), ("Express", 2), ("Physics", 11)]);
    assert_eq!(report.reasons.len(), 1);
    assert!(report.reasons[0].ends_with("select.py exited with status 3 at event 16"), "{}", report.reasons[0]);
}
