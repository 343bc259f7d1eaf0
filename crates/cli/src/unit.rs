//! `tessera evm|ru|bu` (one unit of a system per process, so that the same binary spans hosts,
//! as a controller starts them) and `tessera ferol --system`: one unit of the system file, in
//! this process.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_config::SystemConfig;
use tessera_control::plan::{
    Admission, bind, bind_ferol, bu_node, bu_peers, dth_emulator, emulator, require_ports, resolve, ru_node, ru_peers,
};
use tessera_control::report::{BuEnd, RuEnd};
use tessera_control::stop::OperatorStop;
use tessera_control::{Action, ActionRefused, ControlServer, MaskAction, Served, Unit, UnitKind, mask_at, tell_unit};
use tessera_emu::sender::{Limits, SenderConfig};
use tessera_evb::types::FIRST_EPOCH;
use tessera_runtime::bu_node::BuNode;
use tessera_runtime::link::{LINK_KEY_ENV, LinkKey};
use tessera_runtime::ru_node::RuNode;
use tessera_runtime::stats::UnitStats;

use crate::options::{ControlArgs, SystemArgs, count_interrupts, load, serve_control};
use tessera_control::farm::{start_broker, wait_drained};

/// The options of `tessera evm|ru|bu` for a process that a controller drives.
#[derive(clap::Args, Debug, Clone)]
pub struct UnitArgs {
    /// Print the unit's end as one JSON object (for a controller) instead of a sentence.
    #[arg(long)]
    pub json: bool,
    /// Once configured (ports bound, peers reached, memory allocated), stay in Ready and take
    /// no data until `POST /api/v1/enable` on the control server.
    #[arg(long)]
    pub wait_for_enable: bool,
}

/// Serves the control server of a unit process: its unit, `stop`, an enable that lets it take
/// data if it is held in Ready (with `--wait-for-enable`, held from now on), and for an RU the
/// masking of its FEDs (`feds`; none for a BU).
fn serve_unit(
    control_args: &ControlArgs,
    unit_args: &UnitArgs,
    control: &tessera_runtime::ru_node::Control,
    unit: Unit,
    stop: Action,
    feds: Option<Vec<u16>>,
    cfg: &SystemConfig,
) -> Result<ControlServer> {
    if unit_args.wait_for_enable {
        control.hold_in_ready();
    }
    let held = control.clone();
    let enable: Action =
        Arc::new(move || Ok(if held.enable() { "enabled".to_owned() } else { "enabled already".to_owned() }));
    let mask = feds.map(|feds| {
        let (control, rus) = (control.clone(), [(unit.name.clone(), feds)]);
        let mask: MaskAction =
            Arc::new(move |fed| mask_at(fed, "process", &rus, |_| tell_unit(&control, &rus[0].0, fed)));
        mask
    });
    let served = Served {
        stop: Some(stop),
        enable: Some(enable),
        mask,
        system: Some(cfg.to_yaml()),
        ..Served::live(vec![unit])
    };
    serve_control(control_args, served)
}

/// Says a unit's problems in its log as they come, so that whoever follows one unit of many
/// (`kubectl logs`, `journalctl`) sees a BU held back by its disk or a lost peer when it
/// happens, not only at the end of the run.
struct ProblemLog {
    unit: String,
    /// How many of the unit's kept problems are said.
    said: usize,
}

impl ProblemLog {
    fn new(unit: &str) -> Self {
        ProblemLog { unit: unit.to_owned(), said: 0 }
    }

    /// Says the problems kept since the last call.
    fn say_new(&mut self, stats: &UnitStats) {
        let new = stats.problems_from(self.said);
        for p in &new {
            tracing::warn!(unit = %self.unit, "{}: {p}", self.unit);
        }
        self.said += new.len();
    }

    /// At the unit's end: says the rest, and how many were counted but not kept. Gives how many
    /// there were in all.
    fn end(mut self, stats: &UnitStats) -> u64 {
        self.say_new(stats);
        let count = stats.problem_count();
        if count > self.said as u64 {
            tracing::warn!(unit = %self.unit, "{}: {} more problems, counted but not kept", self.unit, count - self.said as u64);
        }
        count
    }
}

/// Says in an RU's log what it waits for, [`WAIT_FIRST_SAID_AFTER`] after it starts and then
/// every [`WAIT_SAID_EVERY`] while it lasts: the streams that have not connected, and a FED its
/// oldest event has waited that long for. A unit of many started by hand shows there why its run
/// does not start, or does not move.
struct WaitLog {
    unit: String,
    /// When it may say something next.
    next_at: std::time::Instant,
}

/// How long after its start an RU first says which streams it waits for: front ends started
/// with it have connected by then.
const WAIT_FIRST_SAID_AFTER: Duration = Duration::from_secs(2);

/// How often an RU says what it waits for.
const WAIT_SAID_EVERY: Duration = Duration::from_secs(10);

impl WaitLog {
    fn new(unit: &str) -> Self {
        WaitLog { unit: unit.to_owned(), next_at: std::time::Instant::now() + WAIT_FIRST_SAID_AFTER }
    }

    fn say(&mut self, stats: &UnitStats) {
        if std::time::Instant::now() < self.next_at {
            return;
        }
        let missing = stats.streams_missing();
        let line = if !missing.is_empty() {
            format!("waiting for the streams of FEDs {} to connect", tessera_config::format_fed_list(&missing))
        } else if let Some((fed, waited)) = stats.waiting().filter(|&(_, w)| w >= WAIT_SAID_EVERY) {
            format!(
                "its oldest event has waited {:.0} s for FED {fed}, whose stream brings nothing",
                waited.as_secs_f64()
            )
        } else {
            return;
        };
        self.next_at = std::time::Instant::now() + WAIT_SAID_EVERY;
        tracing::warn!(unit = %self.unit, "{}: {line}", self.unit);
    }
}

/// The run's time limit as the EVM process keeps it: its seconds count from the trigger's start.
struct RunClock {
    seconds: f64,
    started: Option<std::time::Instant>,
}

impl RunClock {
    /// Whether the run's seconds have passed, given whether the trigger has started yet.
    fn is_up(&mut self, trigger_started: bool) -> bool {
        if trigger_started && self.started.is_none() {
            self.started = Some(std::time::Instant::now());
        }
        self.started.is_some_and(|t| t.elapsed().as_secs_f64() >= self.seconds)
    }
}

/// Which unit a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The EVM with RU 0.
    Evm,
    /// Another RU.
    Ru,
    /// A BU.
    Bu,
}

/// The run's link key, as run control hands it to a unit process: 64 hex digits in
/// [`LINK_KEY_ENV`], never on the command line (where `ps` shows it).
fn link_key_from_env() -> Result<LinkKey> {
    let hex = std::env::var(LINK_KEY_ENV).map_err(|_| {
        anyhow::anyhow!(
            "{LINK_KEY_ENV} is not set: a unit needs its run's link key, which proves to the other units that it \
             belongs to the run. The controller (`tessera control`) makes one per run and its agents hand it to the \
             units they start; to start the units of a run by hand, make one (`openssl rand -hex 32`) and give the \
             same value to every unit of the run"
        )
    })?;
    LinkKey::from_hex(&hex).context(LINK_KEY_ENV)
}

/// `tessera evm|ru|bu`: one unit of the system, in this process.
pub fn unit(
    role: Role,
    system: &Path,
    name: Option<&str>,
    args: &SystemArgs,
    control_args: &ControlArgs,
    restart: bool,
    unit_args: &UnitArgs,
) -> Result<ExitCode> {
    let json = unit_args.json;
    let cfg = load(Some(system), args)?;
    match (role, name) {
        (Role::Ru, Some(n)) if !cfg.rus.iter().any(|r| r.name == n) => bail!("no RU named {n} in {}", system.display()),
        (Role::Bu, Some(n)) if !cfg.bus.iter().any(|b| b.name == n) => bail!("no BU named {n} in {}", system.display()),
        _ => {}
    }
    require_ports(&cfg, system)?;
    let link_key = link_key_from_env()?;
    let output = cfg.run.output.clone().unwrap_or_else(|| PathBuf::from("."));
    let evm = resolve(&cfg.rus[0].host, cfg.evm.port, "evm.port")?;
    let find_ru = |name: &str| cfg.rus.iter().position(|r| r.name == name);
    let interrupts = count_interrupts()?;
    match role {
        Role::Evm | Role::Ru => {
            let i = match (role, name) {
                (Role::Evm, _) => 0,
                (_, Some(n)) => match find_ru(n) {
                    Some(0) => bail!("{n} is the EVM's RU: run it with `tessera evm`"),
                    Some(i) => i,
                    None => bail!("no RU named {n} in {}", system.display()),
                },
                (_, None) => bail!("--name: which RU of {} to run", system.display()),
            };
            let ru = &cfg.rus[i];
            let ferol = bind_ferol(&ru.host, ru.ferol_port, &format!("{} FEROL port", ru.name), ru.feds.len())?;
            let control = if i == 0 {
                bind(&ru.host, cfg.evm.port, "the EVM's port")?
            } else {
                bind(&ru.host, ru.control_port, &format!("{} control port", ru.name))?
            };
            let (bu_data, ru_control) = if i == 0 {
                let rus = cfg.rus[1..]
                    .iter()
                    .map(|r| resolve(&r.host, r.control_port, &format!("{} control port", r.name)))
                    .collect::<Result<Vec<_>, _>>()?;
                (Vec::new(), rus)
            } else {
                let bus = cfg
                    .bus
                    .iter()
                    .map(|b| resolve(&b.host, b.data_port, &format!("{} data port", b.name)))
                    .collect::<Result<Vec<_>, _>>()?;
                (bus, Vec::new())
            };
            let node = RuNode::new(ru_node(
                &cfg,
                i,
                ferol,
                control,
                bu_data,
                ru_control,
                Admission { link_key: &link_key, allowed_peers: ru_peers(&cfg, i)? },
            ))?;
            let control = node.control();
            let stats = node.stats();
            let kind = if i == 0 { UnitKind::Evm } else { UnitKind::Ru };
            let stop: Action = if i == 0 {
                let evm = control.clone();
                Arc::new(move || {
                    evm.stop_trigger();
                    Ok("the EVM stops the trigger; the run drains".to_owned())
                })
            } else {
                Arc::new(|| Err(ActionRefused::RuCannotStop))
            };
            let unit = Unit { name: ru.name.clone(), kind, stats: stats.clone() };
            let _control = serve_unit(control_args, unit_args, &control, unit, stop, Some(ru.feds.clone()), &cfg)?;
            tracing::info!(
                unit = %ru.name,
                run = cfg.run.number,
                "{}: {} FEDs {:?}, run {}",
                ru.name,
                if i == 0 { "EVM and RU 0," } else { "RU," },
                ru.feds,
                cfg.run.number
            );
            let handle = std::thread::spawn(move || node.run());
            let operator = OperatorStop::new(interrupts.clone(), Duration::from_secs(cfg.controller.stop_timeout_s));
            let mut asked = 0;
            let mut problems = ProblemLog::new(&ru.name);
            let mut waits = WaitLog::new(&ru.name);
            // By hand, the EVM keeps the run's seconds itself, from the trigger's start (a
            // controller keeps them for the units it drives).
            let mut time_limit = (i == 0 && !unit_args.wait_for_enable && cfg.run.events.is_none())
                .then_some(cfg.run.seconds)
                .flatten()
                .map(|seconds| RunClock { seconds, started: None });
            while !handle.is_finished() {
                std::thread::sleep(Duration::from_millis(100));
                problems.say_new(&stats);
                waits.say(&stats);
                if time_limit.as_mut().is_some_and(|clock| clock.is_up(stats.run_started.get() == 1)) {
                    time_limit = None;
                    tracing::info!(
                        unit = %ru.name,
                        "{}: the run's {} s are up: stopping the trigger and draining",
                        ru.name,
                        cfg.run.seconds.unwrap_or_default()
                    );
                    control.stop_trigger();
                }
                let n = interrupts.load(Ordering::SeqCst);
                if n > asked {
                    asked = n;
                    if n == 1 && i == 0 {
                        tracing::info!(
                            unit = %ru.name,
                            "{}: stopping the trigger and draining, at most {} s (Ctrl-C again aborts)",
                            ru.name,
                            cfg.controller.stop_timeout_s
                        );
                        control.stop_trigger();
                    } else {
                        control.abort();
                    }
                }
                if operator.cut() {
                    control.abort();
                }
            }
            let result = handle.join().map_err(|_| anyhow::anyhow!("the unit panicked"))?;
            let count = problems.end(&stats);
            // A trigger stream that broke fails the run, though the EVM drained it.
            let failed = result.as_ref().map_or(true, |r| r.trigger_fault.is_some());
            if json {
                say!("{}", RuEnd::of(&ru.name, &result, count));
                return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
            }
            match result {
                Ok(r) => {
                    if let Some(fault) = &r.trigger_fault {
                        tracing::error!(unit = %ru.name, "{}: {fault}", ru.name);
                    }
                    say!(
                        "{}: {} fragments ({} corrupt), {} super-fragments sent, {} problems{}",
                        ru.name,
                        r.ru.fragments,
                        r.ru.corrupt_fragments,
                        r.ru.parts_sent,
                        count,
                        match (r.evm, r.triggered) {
                            (Some(e), _) => format!("; triggered {}, committed {}", e.triggered, e.committed),
                            // Push: nothing is committed; RU 0 says what it triggered and excluded.
                            (None, Some(t)) => format!("; triggered {t} (push), {} BUs excluded", r.excluded.len()),
                            (None, None) => String::new(),
                        }
                    );
                    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
                }
                Err(e) => {
                    tracing::error!(unit = %ru.name, "{}: {e}", ru.name);
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Role::Bu => {
            let name = name.context("--name: which BU to run")?;
            let i = cfg
                .bus
                .iter()
                .position(|b| b.name == name)
                .with_context(|| format!("no BU named {name} in {}", system.display()))?;
            let bu = &cfg.bus[i];
            let data = bind(&bu.host, bu.data_port, &format!("{} data port", bu.name))?;
            let broker = start_broker(&cfg, i, &output, false)?;
            let node = BuNode::new(bu_node(
                &cfg,
                i,
                &output,
                data,
                evm,
                restart,
                Admission { link_key: &link_key, allowed_peers: bu_peers(&cfg)? },
            ))?;
            let control = node.control();
            let stop: Action = Arc::new(|| Err(ActionRefused::BuCannotStop));
            let stats = node.stats();
            let unit = Unit { name: bu.name.clone(), kind: UnitKind::Bu, stats: stats.clone() };
            let _control = serve_unit(control_args, unit_args, &control, unit, stop, None, &cfg)?;
            tracing::info!(
                unit = %bu.name,
                run = cfg.run.number,
                "{}: BU {i}, run {}, files under {}",
                bu.name,
                cfg.run.number,
                cfg.bu_directory(i, &output).display()
            );
            let handle = std::thread::spawn(move || node.run());
            let mut problems = ProblemLog::new(&bu.name);
            while !handle.is_finished() {
                std::thread::sleep(Duration::from_millis(100));
                problems.say_new(&stats);
                if interrupts.load(Ordering::SeqCst) > 0 {
                    control.abort();
                }
            }
            let result = handle.join().map_err(|_| anyhow::anyhow!("the unit panicked"))?;
            problems.end(&stats);
            if broker.is_some() && result.is_ok() && interrupts.load(Ordering::SeqCst) == 0 {
                // Remote FUs finish their last files through the broker.
                let drain = Duration::from_secs(cfg.fu.drain_timeout_s);
                tracing::info!(
                    unit = %bu.name,
                    "{}: serving the file broker until FUs have processed every file (at most {drain:?})",
                    bu.name
                );
                let stale_after = Duration::from_secs(cfg.fu.resource_summary_stale_s);
                let asked = || interrupts.load(Ordering::SeqCst) > 0;
                if !wait_drained(&cfg.bu_directory(i, &output), cfg.run.number, stale_after, drain, &asked) {
                    tracing::warn!(unit = %bu.name, "{}: files are left unprocessed after {drain:?}", bu.name);
                }
            }
            let tally = broker.as_ref().map(tessera_fu::broker::Broker::tally);
            drop(broker);
            if json {
                say!("{}", BuEnd::of(&bu.name, &result, tally));
                return Ok(if result.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE });
            }
            match result {
                Ok(r) => {
                    let noun = cfg.unit_noun();
                    say!(
                        "{}: {} {noun} published in {} files (incarnation {}), {}",
                        bu.name,
                        r.events_published,
                        r.files_published,
                        r.epoch,
                        r.run_dir.display()
                    );
                    if r.epoch > FIRST_EPOCH {
                        // Started again: what the run's incarnations published together.
                        say!(
                            "{}: every incarnation together: {} {noun} ({} events) published in {} files",
                            bu.name,
                            r.published_in_run,
                            r.events_in_run,
                            r.files_in_run
                        );
                    }
                    if r.counters.lost_events > 0 || (cfg.is_push() && r.epoch > FIRST_EPOCH) {
                        // Push, started again after its loss: it closed its lumi sections.
                        say!(
                            "{}: lost under push and excluded: {} {noun} published in the run, {} given it and \
                             never published, counted lost (BU_LOST) in its end-of-lumi records",
                            bu.name,
                            r.published_in_run,
                            r.counters.lost_events
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    tracing::error!(unit = %bu.name, "{}: {e}", bu.name);
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

/// `tessera ferol --system FILE --ru NAME`: the emulator of one RU's FEDs as the system file
/// describes them (in orbit mode its DTHs). Its streams end at the run's event limit, at `--seconds` if given, or else
/// when the RU closes them: the file's `run.seconds` count from the run's start, which only the
/// EVM sees (it stops the trigger then), so front ends that kept their own clock would end at
/// different events, and the trigger's stream before the EVM's stop.
pub fn ferol_for(system: &Path, ru_name: &str, args: &SystemArgs) -> Result<FrontEnds> {
    let cfg = load(Some(system), args)?;
    let i = cfg
        .rus
        .iter()
        .position(|r| r.name == ru_name)
        .with_context(|| format!("no RU named {ru_name} in {}", system.display()))?;
    let to = resolve(&cfg.rus[i].host, cfg.rus[i].ferol_port, &format!("{} FEROL port", ru_name))?;
    if cfg.is_orbit_mode() {
        // The RU's DTHs: orbits as `tessera run` sends them, its run.orbits or --seconds their
        // limit; with neither, the RU's close ends them, as it does the FEROL streams below.
        let mut d = dth_emulator(&cfg, i, to)?;
        d.orbits = cfg.run.orbits;
        d.seconds = args.seconds;
        if d.orbits.is_none() && d.seconds.is_none() {
            d.stop = Some(tessera_emu::sender::StopLine::new());
        }
        return Ok(FrontEnds::Dth(d));
    }
    let mut s = emulator(&cfg, i, to)?;
    s.limits = Limits { events: cfg.run.events, seconds: args.seconds };
    if s.limits.events.is_none() && s.limits.seconds.is_none() {
        // A stop line nobody draws: the streams run until the RU or a signal ends them.
        s.stop = Some(tessera_emu::sender::StopLine::new());
    }
    Ok(FrontEnds::Ferol(s))
}

/// The front ends of one RU of a system file: FEROLs in event mode, DTHs in orbit mode.
pub enum FrontEnds {
    /// FEROL streams of FED fragments.
    Ferol(SenderConfig),
    /// DTH streams of orbit blocks.
    Dth(tessera_emu::dth::DthSenderConfig),
}
