//! `tessera run`: a whole system in this process (the system file turned into units by
//! `tessera_control::plan`, supervised to its end by `tessera_control::local_run`), or across
//! hosts through their agents (`crate::controller`); its progress line and the summary it prints.

use anyhow::{Context, Result, bail};
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tessera_config::SystemConfig;
use tessera_control::capacity;
use tessera_control::local_run::{FarmEnd, LocalRun, ProgressLine};
use tessera_control::plan::{self, Listeners, output_dir, require_ports};
use tessera_control::report::blocks_left_out_words;
use tessera_control::start_wait;
use tessera_control::system::{Conservation, FedErrorCounts, Outcome, Progress};
use tessera_control::trigger::{Interval, TriggerSummary};
use tessera_runtime::link::LinkKey;

use tessera_formats::names;
use tessera_fu::broker::BrokerTally;
use tessera_fu::output::{ledger_events, ledger_orbits};
use tessera_runtime::stats::{FED_SILENT_AFTER, FedError};

use crate::options::{CUT_SHORT_EXIT, ControlArgs, SystemArgs, count_interrupts, load, serve_control};
use crate::space::{Keep, announce_and_check, tidy};
use tessera_control::chain::{check_chain, storage_run_dir};
use tessera_control::farm::{FarmDirs, FarmOutcome, system_streams};
use tessera_control::incomplete::{IncompleteRule, incomplete_line_if_any};

/// `tessera run`: the whole system in this process.
pub fn run(
    system: Option<&Path>,
    args: &SystemArgs,
    control: &ControlArgs,
    print_config: bool,
    keep: Keep,
    max_incomplete: Option<u64>,
) -> Result<ExitCode> {
    let cfg = load(system, args)?;
    let incomplete_rule = IncompleteRule::new(&cfg, max_incomplete);
    if print_config {
        say_part!("{}", cfg.to_yaml());
        return Ok(ExitCode::SUCCESS);
    }
    for advice in cfg.advice() {
        say!("advice: {advice}");
    }
    if cfg.controller.agent_port.is_some() {
        require_ports(&cfg, system.unwrap_or(Path::new("the default system")))?;
        let token = std::env::var("TESSERA_AGENT_TOKEN").ok();
        return crate::controller::run_on_agents(cfg, token, control, &incomplete_rule);
    }
    // A system this machine cannot run, and a farm that cannot run, are refused before anything
    // starts.
    let beyond = beyond_this_machine(&cfg);
    if !beyond.is_empty() {
        bail!("this machine cannot run the system: {}", beyond.join("; "));
    }
    let readers = cfg.fu.read_by_readers();
    let streams = if cfg.fu.enabled && !readers { Some(system_streams(&cfg)?) } else { None };
    let output = output_dir(&cfg);
    if let Some(earlier) = earlier_run_in(&cfg, &output) {
        bail!(
            "{} exists: run {} was already written into {}; choose another --output or remove it",
            earlier.display(),
            cfg.run.number,
            output.display()
        );
    }
    announce_and_check(&cfg, &output, keep)?;
    let l = Listeners::bind_all(&cfg)?;
    std::fs::create_dir_all(&output).with_context(|| format!("creating {}", output.display()))?;
    // The units are threads of this process: the run's key never leaves it.
    let link_key = LinkKey::generate()?;
    let plan = plan::plan(&cfg, l, &output, &link_key)?;
    let interrupts = count_interrupts()?;
    let local = LocalRun::start(&cfg, &output, plan, streams, interrupts)?;
    let _control = serve_control(control, local.served())?;
    let tty = std::io::stderr().is_terminal();
    let mut line = Shown { requested_hz: cfg.unit_rate_hz(), orbits: cfg.is_orbit_mode(), tty };
    let end = local.supervise(Duration::from_millis(if tty { 250 } else { 1000 }), &mut line);
    let failed = summarize(&cfg, &output, &end.system, &end.trigger, &incomplete_rule, end.farm.as_ref())?;
    // Storage proves it holds every built event only through the mergers' chain check; a run
    // that failed otherwise keeps everything too, for its diagnosis.
    let merged = cfg.fu.enabled && cfg.fu.merge && !readers;
    let kept_for = if end.cut_short { Some("the run was cut short") } else { failed };
    say!("{}", tidy(&cfg, &output, if merged { keep } else { Keep::All }, kept_for)?);
    let ok = failed.is_none();
    end.record(ok);
    Ok(if end.cut_short {
        ExitCode::from(CUT_SHORT_EXIT)
    } else if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What a system whose units all run on this machine (no agents: `tessera run` runs them in
/// one process) needs beyond what the machine allows, each with its arithmetic; nothing for a
/// system placed on hosts through agents (each host is its own), or where the machine cannot be
/// read.
pub fn beyond_this_machine(cfg: &SystemConfig) -> Vec<String> {
    if cfg.controller.agent_port.is_some() {
        return Vec::new();
    }
    capacity::Machine::this().map(|m| capacity::beyond(&capacity::needs(cfg), &m)).unwrap_or_default()
}

/// The progress line of `tessera run` on standard error: redrawn in place on a terminal, else
/// a log line each.
struct Shown {
    /// The trigger rate asked for (none: free running).
    requested_hz: Option<f64>,
    /// Orbit mode: the counts are of orbits, and the line says so.
    orbits: bool,
    /// Whether standard error is a terminal.
    tty: bool,
}

impl ProgressLine for Shown {
    fn show(&mut self, now: &Progress, last: &Progress, interval: &Interval) {
        show(now, last, interval, self.requested_hz, self.orbits, self.tty);
    }

    fn end(&mut self) {
        crate::out::end_line();
    }
}

/// One progress line: the trigger's rate got (and asked for) and dead time with its reasons in
/// the interval since `last`, then the data rate, the buffers and what holds back. With
/// `orbits` (orbit mode) the counts and rates are of orbits, and it says so.
fn show(p: &Progress, last: &Progress, trigger: &Interval, requested_hz: Option<f64>, orbits: bool, tty: bool) {
    let dt = (p.seconds - last.seconds).max(1e-9);
    let gbs = (p.fragment_bytes - last.fragment_bytes) as f64 / dt / 1e9;
    let occupancy = if p.chunks.1 > 0 { 100.0 * p.chunks.0 as f64 / p.chunks.1 as f64 } else { 0.0 };
    let rate = match requested_hz {
        Some(r) => format!("{:>6.1} of {:.1} kHz", trigger.achieved_hz / 1e3, r / 1e3),
        None => format!("{:>6.1} kHz free running", trigger.achieved_hz / 1e3),
    };
    let dead = match (requested_hz, trigger.reasons.is_empty()) {
        (None, _) => String::new(),
        (Some(_), true) => format!("  dead {:>3.0}%", 100.0 * trigger.dead_fraction),
        (Some(_), false) => format!("  dead {:>3.0}% ({})", 100.0 * trigger.dead_fraction, trigger.reasons.join(",")),
    };
    // What the run waits for: its streams before it starts, then a FED silent for a while; and
    // the machine, when it is overloaded.
    let waits = match (start_wait(p.started, &p.streams_missing), p.waiting) {
        (Some(wait), _) => format!("  {wait}"),
        (None, Some((fed, waited))) if waited >= FED_SILENT_AFTER => {
            format!("  waiting for FED {fed} ({:.1} s)", waited.as_secs_f64())
        }
        (None, _) => String::new(),
    };
    let overloaded = trigger.load.filter(|_| trigger.overloaded).map(|l| format!("  OVERLOADED: {}", l.figures()));
    let line = format!(
        "{:7.1} s  {}triggered {:>10}  built {:>10}  {rate}{dead}  {:>6.2} GB/s  RU buffers {:>3.0}%  BU store {:>5.1} MB  throttle {}  problems {}{waits}{}",
        p.seconds,
        if orbits { "orbits " } else { "" },
        p.triggered,
        p.built,
        gbs,
        occupancy,
        p.store_bytes as f64 / 1e6,
        if p.throttles.is_empty() { "-".to_string() } else { p.throttles.join(",") },
        p.problems,
        overloaded.unwrap_or_default()
    );
    if tty {
        crate::out::show_in_place(&line);
    } else {
        tracing::info!(
            seconds = p.seconds,
            triggered = p.triggered,
            built = p.built,
            fragment_bytes = p.fragment_bytes,
            store_bytes = p.store_bytes,
            problems = p.problems,
            trigger_hz = trigger.achieved_hz,
            dead_fraction = trigger.dead_fraction,
            "{line}"
        );
    }
}

/// The summary's line of built events: complete, incomplete, and per FED the events that went
/// out without it with the FED's error counts that say why (`MISSING` alone: the fragment
/// time-out expired).
fn events_line(unit: &str, c: &Conservation, fed_errors: &[FedErrorCounts]) -> String {
    let feds: Vec<String> = fed_errors
        .iter()
        .filter(|f| f.missing > 0)
        .map(|f| {
            let missing = FedError::Missing.key();
            let why: Vec<String> =
                f.errors.iter().filter(|(k, _)| k.as_str() != missing).map(|(k, n)| format!("{k} {n}")).collect();
            let why = if why.is_empty() { String::new() } else { format!(" after {}", why.join(", ")) };
            format!("FED {}: {} {missing}{why}", f.fed, f.missing)
        })
        .collect();
    format!(
        "{unit}: {} built, {} complete, {} incomplete{}",
        c.built,
        c.built_complete,
        c.built_incomplete,
        if feds.is_empty() { String::new() } else { format!(" ({})", feds.join("; ")) }
    )
}

/// What an earlier run of the same number left in `output`, if anything: a BU's run directory,
/// the merged storage (all that `--keep storage` leaves), or a summary of that run (all that
/// `--keep summary` leaves). A second run there would mix its files and counts with the first's.
fn earlier_run_in(cfg: &SystemConfig, output: &Path) -> Option<PathBuf> {
    let run = format!("run{:06}", cfg.run.number);
    let bus = (0..cfg.bus.len()).map(|i| cfg.bu_directory(i, output).join(&run));
    let storage = output.join("storage").join(&run);
    let summary = output.join("summary.json");
    let same_run = || {
        let text = std::fs::read_to_string(&summary).ok()?;
        let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
        (doc["run"].as_u64() == Some(u64::from(cfg.run.number))).then_some(())
    };
    bus.chain([storage]).find(|p| p.exists()).or_else(|| same_run().map(|()| summary.clone()))
}

/// Prints the run's summary, ending with the conservation check, and writes
/// `<output>/summary.json`. `None` if every unit ended cleanly, conservation holds, the chain
/// holds and the incomplete events are within `incomplete_rule`; else what did not, in words.
fn summarize(
    cfg: &SystemConfig,
    output: &Path,
    outcome: &Outcome,
    trigger: &TriggerSummary,
    incomplete_rule: &IncompleteRule,
    farm: Option<&FarmEnd>,
) -> Result<Option<&'static str>> {
    let c = outcome.conservation();
    let p = &outcome.progress;
    let cut = outcome.cut_short || farm.is_some_and(|f| f.outcome.cut_short);
    // A unit aborted because the operator cut the run short has not failed.
    let failed = if cut { "cut short" } else { "FAILED" };
    say!("run {} ended after {:.1} s", cfg.run.number, outcome.seconds);
    for (i, r) in outcome.rus.iter().enumerate() {
        match r {
            Ok(r) => {
                say!(
                    "  {:<10} {:>10} fragments, {:>6} corrupt, {:>6} late, {:>8} super-fragments sent, {:>6} incomplete",
                    cfg.rus[i].name,
                    r.ru.fragments,
                    r.ru.corrupt_fragments,
                    r.ru.late_fragments,
                    r.ru.parts_sent,
                    r.ru.incomplete_parts
                );
                if let Some(fault) = &r.trigger_fault {
                    say!("  {:<10} FAILED ({}): {fault}", cfg.rus[i].name, fault.what.key());
                }
                if !r.orphan_fragments.is_empty() {
                    let per_fed: Vec<String> =
                        r.orphan_fragments.iter().map(|(fed, n)| format!("FED {fed}: {n}")).collect();
                    say!(
                        "  {:<10} orphan fragments (sent for events after the run's last): {}",
                        cfg.rus[i].name,
                        per_fed.join(", ")
                    );
                }
            }
            Err(e) => say!("  {:<10} {failed}: {e}", cfg.rus[i].name),
        }
    }
    for (i, b) in outcome.bus.iter().enumerate() {
        match b {
            Ok(b) if cfg.is_orbit_mode() => {
                say!(
                    "  {:<10} {:>10} orbits ({} with events, {} events) in {:>6} files, {:>6} incomplete  {}",
                    cfg.bus[i].name,
                    b.events_published,
                    b.orbits_written,
                    b.orbit_events,
                    b.files_published,
                    b.counters.incomplete_events,
                    b.run_dir.display()
                );
                if !b.blocks_left_out.is_empty() {
                    say!(
                        "  {:<10} blocks left out of their orbits (each orbit counted incomplete): {}",
                        cfg.bus[i].name,
                        blocks_left_out_words(&b.blocks_left_out)
                    );
                }
            }
            Ok(b) => say!(
                "  {:<10} {:>10} events in {:>6} files, {:>6} incomplete, {:>6} with a fragment error  {}",
                cfg.bus[i].name,
                b.events_published,
                b.files_published,
                b.counters.incomplete_events,
                b.counters.error_events,
                b.run_dir.display()
            ),
            Err(e) => say!("  {:<10} {failed}: {e}", cfg.bus[i].name),
        }
        // Push: what ageing shipped incomplete and what came too late, per BU.
        if let Ok(b) = b
            && cfg.is_push()
        {
            say!(
                "  {:<10} push: {} events aged (shipped incomplete), {} late super-fragments dropped, \
                 {} events past the run's last event dropped unbuilt",
                cfg.bus[i].name,
                b.counters.aged_events,
                b.counters.late_parts,
                b.counters.events_past_run_end
            );
        }
    }
    if let Some(Ok(r)) = outcome.rus.first()
        && cfg.is_push()
    {
        for x in &r.excluded {
            say!(
                "  {:<10} push: excluded after its loss from event {}; it was given {} events before",
                cfg.bus.get(usize::from(x.bu)).map_or("?", |b| b.name.as_str()),
                x.from_event,
                x.events_given
            );
        }
    }
    for (i, e) in outcome.emulators.iter().enumerate() {
        if let Err(e) = e {
            say!("  emulator {i} {failed}: {e}");
        }
    }
    for (i, e) in outcome.dth_emulators.iter().enumerate() {
        if let Err(e) = e {
            say!("  DTH emulator {i} {failed}: {e}");
        }
    }
    if outcome.problem_count > 0 {
        say!("  {} problems reported; the first ones:", outcome.problem_count);
        for p in outcome.problems.iter().take(10) {
            say!("    {p}");
        }
    }
    let gb = p.fragment_bytes as f64 / 1e9;
    say!(
        "  {:.3} GB of fragments, {:.2} GB/s, {:.1} kHz of {} built, over the run's {:.1} s (its drain included)",
        gb,
        gb / outcome.seconds.max(1e-9),
        c.built as f64 / outcome.seconds.max(1e-9) / 1e3,
        cfg.unit_noun(),
        outcome.seconds
    );
    if p.started {
        say!("{}", trigger_line(trigger, cfg));
        if let Some(o) = &trigger.overload {
            say!("  machine: {}", o.sentence());
        }
        if let Some(bottleneck) = &trigger.bottleneck {
            say!("  {bottleneck}");
        }
    } else {
        // No rate nor bottleneck to speak of: what kept it from starting is the story.
        say!(
            "  trigger: it never started (it starts once every stream of every RU has connected){}",
            if outcome.clean() { "" } else { "; a unit failed first, as said above" }
        );
    }
    let lost: u64 = c.lost.values().sum();
    let reasons: Vec<String> = c.lost.iter().map(|(k, v)| format!("{v} {k}")).collect();
    // Orbit mode: the protocol's units, triggered and built, are orbits.
    let unit = if cfg.is_orbit_mode() { "orbits" } else { "events" };
    say!(
        "conservation: {}triggered {} = built {} + lost {}{}  {}",
        if cfg.is_orbit_mode() { "orbits " } else { "" },
        c.triggered,
        c.built,
        lost,
        if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
        if c.holds { "holds" } else { "DOES NOT HOLD" }
    );
    say!("{}", events_line(unit, &c, &outcome.fed_errors));
    // What some front end sent past the triggered count: no trigger made it an event or an
    // orbit, so it is in no count above; said, not dropped silently.
    let sent = if cfg.is_orbit_mode() {
        outcome.dth_emulators.iter().flatten().flat_map(|e| &e.streams).map(|s| s.orbits).max()
    } else {
        outcome.emulators.iter().flatten().flat_map(|e| &e.streams).map(|s| s.events).max()
    };
    let sent_past = sent.map_or(0, |n| n.saturating_sub(c.triggered));
    if sent_past > 0 {
        say!(
            "front ends: some sent up to {} {unit}, {sent_past} past the {} triggered: no trigger made them {unit}, \
             their fragments were discarded",
            sent.unwrap_or(0),
            c.triggered
        );
    }
    let incomplete_ok = incomplete_rule.allows(c.built_incomplete);
    if let Some(line) = incomplete_line_if_any(c.built_incomplete, incomplete_rule, cfg.unit_noun()) {
        say!("{line}");
    }
    let chain = farm.map(|f| summarize_farm(cfg, outcome, &f.outcome, &f.streams, &f.dirs));
    let cut_short = cut.then(|| {
        let not_built = c.lost.get("CUT_SHORT").copied().unwrap_or(0);
        let processed =
            chain.as_ref().map(|(j, _)| (j["processed_by_fus"].as_u64(), j["processed_in_storage"].as_u64()));
        let farm_part = match processed {
            Some((Some(fus), Some(storage))) => {
                format!(", {fus} of them processed by the FUs and {storage} in storage")
            }
            Some((Some(fus), None)) => format!(", {fus} of them processed by the FUs"),
            _ => String::new(),
        };
        format!(
            "cut short: a second Ctrl-C (or SIGINT/SIGTERM) ended the run without draining it: {not_built} triggered \
             events were not built (lost as CUT_SHORT); {} events are in published BU files{farm_part}. Every \
             published file is whole; files being written were left unpublished in open/, and FU claims not \
             finished return to the pool",
            c.built
        )
    });
    if let Some(line) = &cut_short {
        say!("{line}");
    }
    let mut summary = json!({
        "run": cfg.run.number,
        "seconds": outcome.seconds,
        "triggered": c.triggered,
        "built": c.built,
        "built_complete": c.built_complete,
        "built_incomplete": c.built_incomplete,
        "fed_errors": outcome.fed_errors,
        "incomplete_check": incomplete_rule.to_json(c.built_incomplete),
        "lost": c.lost,
        "conservation_holds": c.holds,
        "front_ends_sent_past_triggered": sent_past,
        "protocol": if cfg.is_push() { "push" } else { "pull" },
        "per_bu": cfg.bus.iter().zip(&outcome.bus).map(|(s, b)| json!({
            "name": s.name,
            "events": b.as_ref().map_or(0, |b| b.events_published),
            "push_aged_events": b.as_ref().ok().filter(|_| cfg.is_push()).map(|b| b.counters.aged_events),
            "push_late_parts": b.as_ref().ok().filter(|_| cfg.is_push()).map(|b| b.counters.late_parts),
            "push_events_past_run_end": b.as_ref().ok().filter(|_| cfg.is_push()).map(|b| b.counters.events_past_run_end),
            "files": b.as_ref().ok().map(|b| b.files_published),
            "incomplete": b.as_ref().ok().map(|b| b.counters.incomplete_events),
            "orbit_blocks_left_out": b.as_ref().ok().filter(|_| cfg.is_orbit_mode()).map(|b| &b.blocks_left_out),
            "run_dir": b.as_ref().ok().map(|b| b.run_dir.display().to_string()),
            "error": b.as_ref().err().map(ToString::to_string),
        })).collect::<Vec<_>>(),
        "per_ru": cfg.rus.iter().zip(&outcome.rus).map(|(s, r)| json!({
            "name": s.name,
            "fragments": r.as_ref().map_or(0, |r| r.ru.fragments),
            "corrupt_fragments": r.as_ref().map_or(0, |r| r.ru.corrupt_fragments),
            "trigger_fault": r.as_ref().ok().and_then(|r| r.trigger_fault.as_ref()).map(|f| json!({"key": f.what.key(), "what": f.to_string()})),
            "orphan_fragments": r.as_ref().map_or(Vec::new(), |r| r.orphan_fragments.iter().map(|(fed, n)| json!({"fed": fed, "fragments": n})).collect()),
            "error": r.as_ref().err().map(ToString::to_string),
        })).collect::<Vec<_>>(),
        "fragment_bytes": p.fragment_bytes,
        "trigger": trigger,
        "problems": outcome.problem_count,
        "first_problems": outcome.problems.iter().take(20).collect::<Vec<_>>(),
    });
    if let Some((chain, _)) = &chain {
        summary["chain"] = chain.clone();
    }
    if let Some(line) = cut_short {
        summary["cut_short"] = json!(line);
    }
    let path = output.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    say!("summary: {}", path.display());
    Ok(if !outcome.clean() {
        Some("a unit did not end cleanly")
    } else if !c.holds {
        Some("conservation does not hold")
    } else if !chain.is_none_or(|(_, ok)| ok) {
        Some("the run did not prove that storage holds every built event")
    } else if !incomplete_ok {
        Some("more events were incomplete than allowed")
    } else {
        None
    })
}

/// The summary's line of the trigger: the rate asked for and got, and the dead time per reason.
/// In orbit mode the rates are of orbits (the LHC's orbit rate is what is asked for), and the L1
/// rate at which each orbit's events are drawn is named apart.
fn trigger_line(t: &TriggerSummary, cfg: &SystemConfig) -> String {
    let orbits = cfg.is_orbit_mode();
    let what = if orbits { "orbits " } else { "" };
    let l1 = match cfg.trigger.rate_hz.filter(|_| orbits) {
        Some(l1) => format!("; the events in them drawn at an L1 rate of {:.1} kHz", l1 / 1e3),
        None => String::new(),
    };
    let Some(requested) = t.requested_hz else {
        return format!(
            "  trigger: {what}free running, {:.1} kHz{l1} (dead time is defined for a paced trigger only)",
            t.achieved_hz / 1e3
        );
    };
    // Reasons that round to 0.0 % say nothing.
    let reasons: Vec<String> = t
        .dead_by_reason
        .iter()
        .filter(|(_, v)| **v >= 0.0005)
        .map(|(k, v)| format!("{k} {:.1} %", 100.0 * v))
        .collect();
    format!(
        "  trigger: {what}{:.1} kHz asked for{}, {:.1} kHz got ({:.0} %) while it ran{l1}; dead time {:.1} %{}{}",
        requested / 1e3,
        if orbits { " (the LHC orbit rate)" } else { "" },
        t.achieved_hz / 1e3,
        100.0 * t.achieved_hz / requested.max(1e-9),
        100.0 * t.dead_fraction,
        if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
        // Much dead time beside most of the rate got reads as a contradiction: say what each is.
        if t.dead_fraction > 0.05 && t.achieved_hz >= 0.9 * requested {
            "; dead time is the share of that time some front end was more than 10 ms behind the trigger, \
             which it then caught up: the rate got stays high"
        } else {
            ""
        }
    )
}

/// Prints the filter farm's part of the summary, ending with the chain's conservation; returns
/// it as JSON, and whether it holds and every FU and merger ended cleanly.
/// " of N orbits" (and how many were bad) for the report of an FU or reader that read orbit
/// files; nothing for one that read event files.
fn orbits_of(report: &serde_json::Value) -> String {
    match (report["orbits"].as_u64().unwrap_or(0), report["bad_orbits"].as_u64().unwrap_or(0)) {
        (0, _) => String::new(),
        (orbits, 0) => format!(" of {orbits} orbits"),
        (orbits, bad) => format!(" of {orbits} orbits ({bad} bad)"),
    }
}

fn summarize_farm(
    cfg: &SystemConfig,
    outcome: &Outcome,
    farm: &FarmOutcome,
    streams: &[String],
    dirs: &FarmDirs,
) -> (serde_json::Value, bool) {
    if let Some(tallies) = &farm.read_through_brokers {
        return summarize_readers(cfg.is_orbit_mode(), outcome, farm, tallies);
    }
    let mut clean = farm.merger_error.is_none();
    for (name, r) in &farm.fus {
        match r {
            Ok(report) => {
                say!(
                    "  {name:<10} {:>10} events{} from {:>6} files, {:>6} set aside, {:>4} claims of dead FUs taken back",
                    report["events"].as_u64().unwrap_or(0),
                    orbits_of(report),
                    report["files"].as_u64().unwrap_or(0),
                    report["error_events"].as_u64().unwrap_or(0),
                    report["returned_claims"].as_u64().unwrap_or(0)
                );
                for reason in report["reasons"].as_array().into_iter().flatten().take(3) {
                    say!("    set aside: {}", reason.as_str().unwrap_or_default());
                }
            }
            Err(e) => {
                clean = false;
                say!("  {name:<10} {}: {e}", if farm.cut_short { "cut short" } else { "FAILED" });
            }
        }
    }
    for (name, why) in &farm.replaced {
        say!("  {name} ended with {why}; started again, its published work counted from the ledger");
    }
    // Every incarnation's published work, the killed ones' included, is in the ledgers.
    let (mut fu_events, mut fu_orbits) = (0, 0);
    for dir in &dirs.fu {
        let run_dir = dir.join(names::run_dir_name(cfg.run.number));
        match ledger_events(&run_dir).and_then(|events| Ok((events, ledger_orbits(&run_dir)?))) {
            Ok((events, orbits)) => (fu_events, fu_orbits) = (fu_events + events, fu_orbits + orbits),
            Err(e) => {
                clean = false;
                say!("  ledger of {}: {e}", dir.display());
            }
        }
    }
    let orbit_mode = cfg.is_orbit_mode();
    let built_events = outcome.built_events(orbit_mode);
    clean &= orbits_processed(orbit_mode, outcome, fu_orbits, "FUs");
    if let Some(e) = &farm.merger_error {
        say!("  mergers {}: {e}", if farm.cut_short { "cut short" } else { "FAILED" });
    }
    if !cfg.fu.merge {
        // `tessera merge` merges the run later: only what the FUs processed can be checked now.
        let holds = built_events == fu_events;
        say!(
            "chain: built {built_events} = processed {fu_events} by the FUs  {}; storage is left to `tessera merge`",
            if holds { "holds" } else { "DOES NOT HOLD" }
        );
        let json = json!({"holds": holds, "built": built_events, "processed_by_fus": fu_events, "merged": false});
        return (json, holds && clean);
    }
    let bu_run_dirs: Vec<PathBuf> =
        outcome.bus.iter().filter_map(|b| b.as_ref().ok().map(|b| b.run_dir.clone())).collect();
    let storage = storage_run_dir(dirs, cfg.run.number);
    let check = check_chain(&bu_run_dirs, &storage, cfg.run.number, streams);
    let (built, processed) = check.totals();
    let accepted: Vec<String> = check.accepted.iter().map(|(s, n)| format!("{s} {n}")).collect();
    say!("  storage: {} files, {:.1} MB in {}", check.files, check.bytes as f64 / 1e6, storage.display());
    say!("  accepted: {}", accepted.join(", "));
    for p in check.problems.iter().take(10) {
        say!("  chain problem: {p}");
    }
    let holds = check.holds() && built == built_events && built == fu_events;
    say!(
        "chain: built {} = processed {} by the FUs = processed {} in storage, over {} lumi sections  {}",
        built_events,
        fu_events,
        processed,
        check.per_ls.len(),
        chain_verdict(holds, outcome.cut_short || farm.cut_short)
    );
    let json = json!({
        "holds": holds,
        "built": built,
        "processed_by_fus": fu_events,
        "processed_in_storage": processed,
        "orbits_written": orbit_mode.then(|| outcome.orbits_written()),
        "orbits_processed_by_fus": orbit_mode.then_some(fu_orbits),
        "per_lumi_section": check.per_ls.iter().map(|(ls, (b, p))| json!({"ls": ls, "built": b, "processed": p})).collect::<Vec<_>>(),
        "accepted": check.accepted,
        "storage": storage.display().to_string(),
        "files": check.files,
        "bytes": check.bytes,
        "problems": check.problems,
        "fus": farm.fus.iter().map(|(n, r)| json!({"name": n, "report": r.as_ref().ok(), "error": r.as_ref().err().map(ToString::to_string)})).collect::<Vec<_>>(),
        "fus_started_again": farm.replaced.iter().map(|(n, why)| json!({"name": n, "ended": why})).collect::<Vec<_>>(),
        "merger_error": farm.merger_error,
    });
    (json, holds && clean)
}

/// Orbit mode: the protocol counts orbits and the farm's conservation is in events, so the
/// orbits the BUs wrote (those with events) must all have been processed by the farm's `who`:
/// says so on a line of its own and returns whether it holds (always outside orbit mode).
fn orbits_processed(orbit_mode: bool, outcome: &Outcome, processed: u64, who: &str) -> bool {
    if !orbit_mode {
        return true;
    }
    let holds = outcome.orbits_written() == processed;
    say!(
        "orbits: written {} by the BUs = processed {processed} by the {who}  {}",
        outcome.orbits_written(),
        if holds { "holds" } else { "DOES NOT HOLD" }
    );
    holds
}

/// How a chain check ends its line: it holds, it could not be proven because the run was cut
/// short, or it does not hold.
fn chain_verdict(holds: bool, cut_short: bool) -> &'static str {
    match (holds, cut_short) {
        (true, _) => "holds",
        (false, true) => "not proven: the run was cut short",
        (false, false) => "DOES NOT HOLD",
    }
}

/// The chain of a run read by readers (`fu.process: reader`): every built event is in a file a
/// reader deleted, as the BUs' brokers counted them; in orbit mode also every orbit written read.
fn summarize_readers(
    orbit_mode: bool,
    outcome: &Outcome,
    farm: &FarmOutcome,
    tallies: &[BrokerTally],
) -> (serde_json::Value, bool) {
    let cut = outcome.cut_short || farm.cut_short;
    let mut clean = true;
    let mut read_orbits = 0;
    for (name, r) in &farm.fus {
        match r {
            Ok(report) => {
                let deviations = report["deviations"].as_array().cloned().unwrap_or_default();
                say!(
                    "  {name:<14} {:>10} events{} from {:>6} files, ended in lumi section {}, {} deviations",
                    report["events"].as_u64().unwrap_or(0),
                    orbits_of(report),
                    report["files"].as_u64().unwrap_or(0),
                    report["last_ls"].as_u64().unwrap_or(0),
                    deviations.len()
                );
                for deviation in deviations.iter().take(3) {
                    say!("    DEVIATION: {}", deviation.as_str().unwrap_or_default());
                }
                clean &= deviations.is_empty();
                read_orbits += report["orbits"].as_u64().unwrap_or(0);
            }
            Err(e) => {
                clean = false;
                say!("  {name:<14} {}: {e}", if cut { "cut short" } else { "FAILED" });
            }
        }
    }
    for (name, why) in &farm.replaced {
        say!("  {name} ended with {why}; started again");
    }
    let sum = |f: fn(&BrokerTally) -> u64| tallies.iter().map(f).sum::<u64>();
    let (granted, deleted, events, returned, out) = (
        sum(|t| t.files_granted),
        sum(|t| t.files_deleted),
        sum(|t| t.events_deleted),
        sum(|t| t.claims_returned),
        sum(|t| t.files_out),
    );
    say!(
        "  brokers: {granted} files granted, {deleted} deleted by their readers, {returned} taken back after a lease, {out} still out"
    );
    clean &= orbits_processed(orbit_mode, outcome, read_orbits, "readers");
    let built = outcome.built_events(orbit_mode);
    let holds = built == events && out == 0;
    say!(
        "chain: built {built} = processed {events} by the readers (the files they deleted, as the BUs' brokers counted them)  {}",
        chain_verdict(holds, cut)
    );
    let json = json!({
        "holds": holds,
        "built": built,
        "processed_by_readers": events,
        "orbits_written": orbit_mode.then(|| outcome.orbits_written()),
        "orbits_processed_by_readers": orbit_mode.then_some(read_orbits),
        "files_granted": granted,
        "files_deleted": deleted,
        "claims_returned": returned,
        "files_out": out,
        "readers": farm.fus.iter().map(|(n, r)| json!({"name": n, "report": r.as_ref().ok(), "error": r.as_ref().err().map(ToString::to_string)})).collect::<Vec<_>>(),
    });
    (json, holds && clean)
}
