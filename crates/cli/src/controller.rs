//! `tessera agent`, and `tessera run` across hosts: the controller (`tessera_control::controller`)
//! started from the command line, and the run's summary it prints, ending with the conservation
//! checks, from the ends the units print (`tessera_control::report`).

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_control::agent::{Agent, AgentConfig};
use tessera_control::controller::{Controller, Fault, drive, report};
use tessera_control::placement::Role;
use tessera_control::push_loss;
use tessera_control::{RunState, Served, UnitSource, UnitView};

use crate::options::{ControlArgs, count_interrupts, serve_control};
use tessera_control::farm::fu_args;
use tessera_control::incomplete::{IncompleteRule, incomplete_line_if_any};
use tessera_control::report::{BuEnd, BuFigures, Ended, RuEnd, blocks_left_out_words};
use tessera_control::stop::{OperatorStop, stop_action};

/// The options of `tessera agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Address to serve on, `HOST:PORT` with a host name or an IP address (the host as the
    /// system file names it and `controller.agent_port`).
    #[arg(long, value_parser = crate::options::socket_address)]
    pub listen: SocketAddr,
    /// The token every request must bring (`Authorization: Bearer TOKEN`); the controller
    /// reads the same variable. Without it, the agent uses the token in `agent.token` of its
    /// work directory, made at its first start (random, readable by its user alone).
    #[arg(long, env = "TESSERA_AGENT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where the processes' directories (system file, log, standard output) go (default: a
    /// directory named after the port under the system's temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// `tessera agent`: serves until Ctrl-C or SIGTERM, then ends its processes.
pub fn agent(args: &AgentArgs) -> Result<ExitCode> {
    let work_dir = args
        .work_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tessera-agent-{}", args.listen.port())));
    let program = std::env::current_exe().context("finding this program, which the agent runs")?;
    let ended = count_interrupts()?;
    let token = match args.token.clone().filter(|t| !t.trim().is_empty()) {
        Some(token) => token,
        None => {
            let (token, path) = agent_token_file(&work_dir)?;
            tracing::info!(
                "agent: no --token nor TESSERA_AGENT_TOKEN: using the token in {} (readable by this user alone); \
                 give it to the controller: TESSERA_AGENT_TOKEN=$(cat {})",
                path.display(),
                path.display()
            );
            token
        }
    };
    let config = AgentConfig { listen: args.listen, token, work_dir: work_dir.clone(), program };
    let agent = Agent::start(config).context("--listen")?;
    tracing::info!(
        address = %agent.local_addr(),
        "agent: serving on http://{}/api/v1/processes; processes under {}",
        agent.local_addr(),
        work_dir.display()
    );
    while ended.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = agent.running();
    drop(agent);
    tracing::info!("agent: stopped; {running} processes that still ran were ended");
    Ok(ExitCode::SUCCESS)
}

/// Where an agent without a token keeps the one it made.
pub const AGENT_TOKEN_FILE: &str = "agent.token";

/// The agent's token from `agent.token` in `work_dir`, made at the first start: 32 random bytes
/// in hex, in a file of mode 0600. A file that others may read is refused, not used. Returns the
/// token and the file.
fn agent_token_file(work_dir: &Path) -> Result<(String, PathBuf)> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = work_dir.join(AGENT_TOKEN_FILE);
    std::fs::create_dir_all(work_dir).with_context(|| format!("creating {}", work_dir.display()))?;
    match std::fs::metadata(&path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!("{}: mode {mode:o} lets others read the agent's token; make it 600 (chmod 600)", path.display());
            }
            let token = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let token = token.trim().to_owned();
            if token.is_empty() {
                bail!("{}: empty; remove it to have a new token made, or give --token", path.display());
            }
            Ok((token, path))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut random = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut random))
                .context("reading /dev/urandom for the agent's token")?;
            let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            file.write_all(format!("{token}\n").as_bytes()).with_context(|| format!("writing {}", path.display()))?;
            Ok((token, path))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// `tessera run` on agents. `cfg` has the command line applied; `token` is the agents'.
pub fn run_on_agents(
    cfg: SystemConfig,
    token: Option<String>,
    control: &ControlArgs,
    incomplete_rule: &IncompleteRule,
) -> Result<ExitCode> {
    let mut c = Controller::new(cfg, token, fu_args)?;
    let run = c.cfg().run.number;
    tracing::info!(
        run,
        "tessera run {run} across {} hosts through their agents: {} RUs, {} BUs, {} processes; output in {}",
        c.host_count(),
        c.cfg().rus.len(),
        c.cfg().bus.len(),
        c.placed().len(),
        c.output().display()
    );
    c.check_agents()?;
    let interrupts = count_interrupts()?;
    // The controller's own control server: the dashboard, metrics and API of every unit on every
    // host, as last gathered, and the run's stop.
    // As a first Ctrl-C: stop the trigger at the EVM and drain.
    let stop = stop_action(interrupts.clone());
    let mirror = c.views();
    let views: Arc<dyn Fn() -> Vec<UnitView> + Send + Sync> =
        Arc::new(move || mirror.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let served = Served {
        units: UnitSource::Views(views),
        stop: Some(stop),
        enable: None,
        mask: Some(c.mask_action()),
        system: Some(c.system_text().to_owned()),
        run: Some(c.status().clone()),
    };
    let _control = serve_control(control, served)?;
    let started = Instant::now();
    let operator = OperatorStop::new(interrupts.clone(), Duration::from_secs(c.cfg().controller.stop_timeout_s));
    let outcome = drive(&mut c, &operator);
    let faults = match outcome {
        Ok(faults) => faults,
        Err(e) => {
            tracing::error!(run, "run {run}: {e}");
            vec![Fault { unit: "-".into(), host: "-".into(), key: "CONTROLLER", why: e.to_string() }]
        }
    };
    if !faults.is_empty() {
        for f in &faults {
            tracing::error!(unit = %f.unit, host = %f.host, reason = f.key, "FAULT {f}");
        }
        tracing::error!(run, "run {run}: ending every process on every host that answers");
        // What the processes said last, before they go.
        c.poll();
        c.abort();
    }
    let output = c.output().to_owned();
    let ok = summarize(&c, &output, &faults, started.elapsed().as_secs_f64(), incomplete_rule)?;
    c.status().update(|v| v.state = if ok && faults.is_empty() { RunState::Ended } else { RunState::Aborted });
    Ok(if ok && faults.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Prints the run's summary with its conservation checks and the incomplete events against
/// `incomplete_rule`, and writes `summary-runNNNNNN.json` into the output directory (or the
/// current one, if the output is not visible here). True if they hold.
fn summarize(
    c: &Controller,
    output: &Path,
    faults: &[Fault],
    seconds: f64,
    incomplete_rule: &IncompleteRule,
) -> Result<bool> {
    let cfg = c.cfg();
    let hosts = c.host_count();
    say!("run {} ended after {seconds:.1} s across {hosts} host{}", cfg.run.number, if hosts == 1 { "" } else { "s" });
    let mut clean = faults.is_empty();
    let mut reports = BTreeMap::new();
    for p in c.placed() {
        let view = c.view(p);
        let exit = view.and_then(|v| v.exit);
        let r = report(view);
        let line = match (&r, exit) {
            (Some(r), _) if let Some(why) = failure(p.role, r) => {
                clean = false;
                format!("FAILED: {why}")
            }
            // Push: a lost BU started again to close its lumi sections.
            (Some(r), _) if c.bus_lost().contains(&p.name) => match BuEnd::read(r).as_ref().and_then(BuEnd::figures) {
                Some(f) => format!(
                    "LOST under push, excluded by RU 0, started again to close its lumi sections: {} events \
                     published in the run, {} lost (BU_LOST, in its end-of-lumi records)",
                    f.published_in_run, f.lost_events
                ),
                None => summary_line(p.role, r, cfg.is_orbit_mode()),
            },
            (Some(r), _) => summary_line(p.role, r, cfg.is_orbit_mode()),
            (None, Some(exit)) if exit.success() => {
                view.and_then(|v| v.stdout.as_deref()).and_then(|s| s.lines().last()).unwrap_or("ended").to_owned()
            }
            (None, Some(_)) if matches!(p.role, Role::Trigger(_)) && c.stopping() => {
                "stopped with the run (the RU closed its streams)".to_owned()
            }
            // Push: a lost BU is part of the run's account (BU_LOST), not its failure.
            (None, Some(exit)) if c.bus_lost().contains(&p.name) => {
                format!(
                    "LOST under push (ended with {exit}): excluded by RU 0; its events not published are lost (BU_LOST)"
                )
            }
            (None, Some(exit)) => {
                clean = false;
                format!("FAILED with {exit}: {}", view.and_then(|v| v.log_tail.last()).map_or("", String::as_str))
            }
            (None, None) => {
                clean = false;
                match c.last_units().get(&p.name) {
                    Some(u) => format!("ended by the controller; last seen {}", u["state"].as_str().unwrap_or("?")),
                    None => "ended by the controller".to_owned(),
                }
            }
        };
        let again = match c.restarts().get(&p.name) {
            Some(1) => " (started again once after a crash)".to_owned(),
            Some(n) => format!(" (started again {n} times after crashes)"),
            None => String::new(),
        };
        say!("  {:<12} {:<16} {line}{again}", p.name, p.host);
        if let Some(r) = r {
            reports.insert(p.name.clone(), r);
        }
    }
    let evm = &cfg.rus[0].name;
    let leader = reports.get(evm).and_then(RuEnd::read).and_then(|e| e.figures().cloned());
    let evm_report = leader.as_ref().and_then(|f| f.evm);
    let triggered = leader.as_ref().and_then(|f| f.triggered.or(f.evm.map(|e| e.triggered))).unwrap_or(0);
    let lost_closed = evm_report.map_or(0, |e| e.lost_lumi_closed);
    let restarted: Vec<&str> =
        cfg.bus.iter().map(|b| b.name.as_str()).filter(|b| c.restarts().contains_key(*b)).collect();
    let bu_ends: Vec<BuFigures> =
        cfg.bus.iter().filter_map(|b| BuEnd::read(reports.get(&b.name)?)?.figures().cloned()).collect();
    let figures_of = |name: &str| BuEnd::read(reports.get(name)?)?.figures().cloned();
    // Each BU's report counts what every incarnation of it published (its ledger), so a BU
    // started again counts its predecessors' files too; the chain's check below proves them in
    // storage. Push: a lost BU published what it built before it died. Started again, it says so itself
    // (its ledger counts every incarnation's files, those its readers deleted too) and closes
    // its lumi sections counting what it lost; one not started again is read in its run
    // directory's index documents (here, where the hosts share the run's output; on a host not
    // visible here its count is unknown).
    let run_output = cfg.run.output.clone().unwrap_or_default();
    let lost_bus: Vec<(u16, &str)> = cfg
        .bus
        .iter()
        .enumerate()
        .filter(|(_, b)| c.bus_lost().contains(&b.name))
        .map(|(i, b)| (i as u16, b.name.as_str()))
        .collect();
    let lost_published: BTreeMap<u16, Option<u64>> = lost_bus
        .iter()
        .map(|&(i, name)| {
            let published = match figures_of(name) {
                Some(f) => Some(f.published_in_run),
                None => push_loss::published_in(&cfg.bu_directory(usize::from(i), &run_output), cfg.run.number),
            };
            (i, published)
        })
        .collect();
    let kept = cfg.bus.iter().filter(|b| !c.bus_lost().contains(&b.name)).filter_map(|b| figures_of(&b.name));
    let mut built: u64 = kept.map(|b| b.published_in_run).sum();
    built += lost_published.values().flatten().sum::<u64>();
    let excluded = leader.as_ref().map(|f| f.excluded.clone()).unwrap_or_default();
    let bu_lost = push_loss::events_lost(&excluded, |bu| lost_published.get(&bu).copied().flatten().unwrap_or(0));
    let lost_known = lost_published.values().all(Option::is_some);
    // A lost BU started again counted its loss in its end-of-lumi records: the same figure.
    let records_disagree: Vec<String> = lost_bus
        .iter()
        .filter_map(|&(i, name)| {
            let f = figures_of(name)?;
            let given = excluded.iter().find(|x| x.bu == i)?.events_given;
            let lost = given.saturating_sub(f.published_in_run);
            (f.lost_events != lost)
                .then(|| format!("{name}'s end-of-lumi records count {} lost, not {lost}", f.lost_events))
        })
        .collect();
    let lost = lost_closed + bu_lost;
    let holds = leader.is_some() && lost_known && records_disagree.is_empty() && triggered == built + lost;
    if leader.is_some() {
        let mut reasons = Vec::new();
        if lost_closed > 0 {
            reasons.push(format!("{lost_closed} LUMI_SECTION_CLOSED"));
        }
        if bu_lost > 0 {
            reasons.push(format!("{bu_lost} {}", push_loss::BU_LOST));
        }
        say!(
            "conservation: {}triggered {triggered} = built {built} + lost {lost}{}  {}",
            if cfg.is_orbit_mode() { "orbits " } else { "" },
            if reasons.is_empty() { String::new() } else { format!(" ({})", reasons.join(", ")) },
            if holds {
                "holds".to_owned()
            } else if !lost_known {
                "NOT PROVEN: a lost BU's run directory cannot be read here".to_owned()
            } else if !records_disagree.is_empty() {
                format!("DOES NOT HOLD: {}", records_disagree.join("; "))
            } else {
                "DOES NOT HOLD".to_owned()
            }
        );
    } else {
        // The EVM never reported its end: the run was cut short, and what was in flight is
        // not accounted for. Say so, with the figures as the units last showed them.
        let (seen_triggered, seen_built) = c.progress();
        say!(
            "conservation: NOT PROVEN: the run was ended before the EVM's report; last seen triggered {seen_triggered}, built {seen_built} ({} in flight)",
            seen_triggered.saturating_sub(seen_built)
        );
    }
    // Each BU counts the incomplete events it published; one started again counts only its
    // last incarnation's, so the figure is then a lower bound, and said so.
    let incomplete: u64 = bu_ends.iter().map(|b| b.incomplete_events).sum();
    let at_least = if restarted.is_empty() { "" } else { "at least " };
    say!(
        "{}: {built} built, {} complete, {at_least}{incomplete} incomplete",
        cfg.unit_noun(),
        built.saturating_sub(incomplete)
    );
    let incomplete_ok = incomplete_rule.allows(incomplete);
    if let Some(line) = incomplete_line_if_any(incomplete, incomplete_rule, cfg.unit_noun()) {
        say!("{line}");
    }
    let mut chain = Value::Null;
    let mut chain_holds = true;
    if cfg.fu.enabled && leader.is_none() {
        chain_holds = false;
        say!("chain: NOT PROVEN: the run was ended before the builder's end");
    } else if cfg.fu.enabled {
        // Readers: the events of the files they deleted, as each BU's broker counted them.
        // FUs: per BU, the ledger its FUs' output directory holds: every incarnation's
        // published work, a killed FU's included. Each FU reads it when the BU's files are all
        // processed; the ledger only grows, so the largest reading is the last and complete one.
        let readers = cfg.fu.read_by_readers();
        let by_brokers: u64 = bu_ends.iter().filter_map(|b| Some(b.broker?.events_deleted)).sum();
        let processed: u64 = if readers {
            by_brokers
        } else {
            (0..cfg.bus.len())
                .map(|i| {
                    c.placed()
                        .iter()
                        .filter(|p| p.role == Role::Fu(i))
                        .filter_map(|p| reports.get(&p.name)?["ledger_events"].as_u64())
                        .max()
                        .unwrap_or(0)
                })
                .sum()
        };
        let merged = c.placed().iter().find(|p| p.role == Role::Merger).map(|p| {
            let view = c.view(p);
            (
                view.and_then(|v| v.exit).is_some_and(|e| e.success()),
                view.and_then(|v| v.stdout.clone()).unwrap_or_default(),
            )
        });
        // The farm counts events: in orbit mode, those of the orbits the BUs published.
        let built = if cfg.is_orbit_mode() { bu_ends.iter().map(|b| b.events_in_run).sum() } else { built };
        chain_holds = built == processed && merged.as_ref().is_none_or(|(ok, _)| *ok);
        let storage = match &merged {
            Some((true, _)) => format!(" = processed {built} in storage (tessera merge)"),
            Some((false, _)) => " ≠ storage (tessera merge did not prove it)".to_owned(),
            None if readers => String::new(),
            None => "; storage is left to `tessera merge`".to_owned(),
        };
        let by =
            if readers { "the readers (the files they deleted, as the BUs' brokers counted them)" } else { "the FUs" };
        say!(
            "chain: built {built} = processed {processed} by {by}{storage}  {}",
            if chain_holds { "holds" } else { "DOES NOT HOLD" }
        );
        chain = json!({ "holds": chain_holds, "built": built, "processed_by_fus": processed,
            "merged": merged.map(|(ok, out)| json!({"holds": ok, "said": out.trim()})) });
    }
    for f in faults {
        say!("fault: {f}");
    }
    let summary = json!({
        "run": cfg.run.number,
        "seconds": seconds,
        "hosts": c.hosts().map(|(h, agent, last_error)| json!({"host": h, "agent": agent.to_string(), "last_error": last_error})).collect::<Vec<_>>(),
        "triggered": triggered,
        "built": built,
        "lost": { "LUMI_SECTION_CLOSED": lost_closed, push_loss::BU_LOST: bu_lost },
        "bus_lost": c.bus_lost(),
        "excluded": excluded.iter().map(|x| json!({"bu": x.bu, "from_event": x.from_event, "events_given": x.events_given})).collect::<Vec<_>>(),
        "conservation_holds": holds,
        "built_complete": built.saturating_sub(incomplete),
        "built_incomplete": incomplete,
        "incomplete_check": incomplete_rule.to_json(incomplete),
        "chain": chain,
        "faults": faults.iter().map(|f| json!({"unit": f.unit, "host": f.host, "reason": f.key, "why": f.why})).collect::<Vec<_>>(),
        "restarts": c.restarts(),
        "reports": reports,
        // What each unit last showed (state, problems, figures): for a run that ended early.
        "units_last_seen": c.last_units(),
    });
    let dir = if output.is_dir() { output.to_owned() } else { PathBuf::from(".") };
    let path = dir.join(format!("summary-run{:06}.json", cfg.run.number));
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    say!("summary: {}", path.display());
    Ok(clean && holds && chain_holds && incomplete_ok)
}

/// Why a unit's end says it failed: its error, or (the EVM) the trigger fault that broke its
/// stream before the stop, though it drained the run.
fn failure(role: Role, r: &Value) -> Option<String> {
    match role {
        Role::Ru(_) => match RuEnd::read(r)?.outcome {
            Ended::Failed { error } => Some(error),
            Ended::Figures(f) => f.trigger_fault.map(|t| t.error),
        },
        Role::Bu(_) => match BuEnd::read(r)?.outcome {
            Ended::Failed { error } => Some(error),
            Ended::Figures(_) => None,
        },
        Role::Fu(_) | Role::Merger | Role::Trigger(_) => None,
    }
}

/// One line of a unit's or FU's report (`orbit_mode`: a BU's units are orbits).
fn summary_line(role: Role, r: &Value, orbit_mode: bool) -> String {
    match role {
        Role::Bu(_) => match BuEnd::read(r).as_ref().and_then(BuEnd::figures) {
            // Orbit mode: the protocol's units are orbits, and the events are in them.
            // Every incarnation's publications: one started again counts its predecessors' too.
            Some(b) if orbit_mode => format!(
                "{:>10} orbits ({} events) in {:>6} files, {:>6} incomplete{}",
                b.published_in_run,
                b.events_in_run,
                b.files_in_run,
                b.incomplete_events,
                if b.blocks_left_out.is_empty() {
                    String::new()
                } else {
                    format!(" (blocks left out: {})", blocks_left_out_words(&b.blocks_left_out))
                }
            ),
            Some(b) => format!(
                "{:>10} events in {:>6} files, {:>6} incomplete, {:>6} with a fragment error",
                b.published_in_run, b.files_in_run, b.incomplete_events, b.error_events
            ),
            None => r.to_string(),
        },
        Role::Ru(_) => match RuEnd::read(r) {
            Some(RuEnd { problems, outcome: Ended::Figures(f), .. }) => {
                let evm = f.evm.map(|e| format!("; triggered {}, committed {}", e.triggered, e.committed));
                // What its front ends sent past the trigger's last event: no event's, but counted.
                let past: u64 = f.orphan_fragments.iter().map(|o| o.fragments).sum();
                let past = (past > 0).then(|| format!("; {past} fragments of events after the run's last, discarded"));
                format!(
                    "{:>10} fragments, {:>6} corrupt, {:>6} late, {:>6} problems{}{}",
                    f.fragments,
                    f.corrupt_fragments,
                    f.late_fragments,
                    problems,
                    evm.unwrap_or_default(),
                    past.unwrap_or_default()
                )
            }
            _ => r.to_string(),
        },
        Role::Fu(_) => {
            let n = |k: &str| r[k].as_u64().unwrap_or(0);
            format!("{:>10} events from {:>6} files, {:>6} set aside", n("events"), n("files"), n("error_events"))
        }
        Role::Merger | Role::Trigger(_) => r.to_string(),
    }
}
