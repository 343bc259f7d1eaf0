//! The controller of a system across hosts, and the agent it drives.
//!
//! `tessera run SYSTEM.yaml` with `controller.agent_port` places every unit as a process on its
//! host through that host's `tessera agent`, in the order a run needs: the filter farm (FUs and
//! mergers), the BUs, the RUs, the EVM, and last the trigger (the front-end emulators). It
//! watches every unit through the agents once a second: a unit that fails, a process that ends
//! before its time, a unit whose loop heartbeat stops moving (a stalled unit, not only a dead
//! one) and a host whose agent stops answering are each reported with the unit and the reason
//! within `controller.heartbeat_timeout_s`, and end the run. A run that ends by its limit (or
//! Ctrl-C) stops the trigger at the EVM, which drains it; the run's summary ends with the
//! conservation checks, from the reports the units print as they end.

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_control::agent::{Agent, AgentConfig, ProcessView, StartRequest};
use tessera_control::{Action, HeartbeatWatch, RunState, RunStatus, Served, UnitSource, UnitView, client};
use tessera_runtime::link::LinkKey;

use crate::farm::fu_args;
use crate::options::{ControlArgs, count_interrupts, serve_control};
use tessera_control::incomplete::{IncompleteRule, incomplete_line};
use tessera_control::report::{BuEnd, BuFigures, Ended, RuEnd};
use tessera_control::stop::{DRAIN_TIMEOUT, OperatorStop};

/// The options of `tessera agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Address to serve on, `HOST:PORT` with a host name or an IP address (the host as the
    /// system file names it and `controller.agent_port`).
    #[arg(long, value_parser = crate::socket_address)]
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

/// What a placed process is in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// An FU process of BU i.
    Fu(usize),
    /// The mergers.
    Merger,
    /// BU i.
    Bu(usize),
    /// RU i (0 is the EVM's).
    Ru(usize),
    /// The front-end emulator of RU i.
    Trigger(usize),
}

impl Role {
    /// Whether it is an event-builder unit with a control server.
    fn is_unit(self) -> bool {
        matches!(self, Role::Bu(_) | Role::Ru(_))
    }

    /// Whether a crashed process of this role can be started again without loss: a BU (the
    /// protocol reassigns its events and its restart recovers its files), an FU (its claims
    /// go back to the pool) and the mergers (each step is idempotent). An RU or the EVM holds
    /// the only copy of its fragments: its crash ends the run.
    fn restartable(self) -> bool {
        matches!(self, Role::Bu(_) | Role::Fu(_) | Role::Merger)
    }
}

/// One process of the run, on one host.
#[derive(Debug, Clone)]
struct Placed {
    name: String,
    host: String,
    role: Role,
    args: Vec<String>,
}

/// A host's agent as the controller sees it.
struct Host {
    agent: SocketAddr,
    last_answer: Instant,
    last_error: Option<String>,
    /// The processes as last seen.
    seen: BTreeMap<String, ProcessView>,
}

/// Something that ends the run: which unit, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fault {
    unit: String,
    host: String,
    key: &'static str,
    why: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} on {}: {}", self.key, self.unit, self.host, self.why)
    }
}

struct Controller {
    cfg: SystemConfig,
    system_text: String,
    token: Option<String>,
    hosts: BTreeMap<String, Host>,
    placed: Vec<Placed>,
    beats: HeartbeatWatch,
    /// Since when a running unit's control server has not answered its agent.
    silent: BTreeMap<String, Instant>,
    /// Units seen configuring (their loop not yet running), since when.
    configuring: BTreeMap<String, Instant>,
    /// Whether the run has been asked to stop (front ends may then end).
    stopping: bool,
    /// Every unit's view as last seen, by unit name (a unit that stops answering keeps its last).
    last_units: BTreeMap<String, Value>,
    /// The units' views, with their hosts, for the controller's own control server.
    mirror: Arc<Mutex<Vec<UnitView>>>,
    /// How many times each process was started again after a crash.
    restarts: BTreeMap<String, u32>,
    /// The run as a whole, for the controller's dashboard and `/api/v1/run`. The front ends run
    /// as processes of their own here, so it has no dead time.
    status: Arc<RunStatus>,
    /// The run's link key, made for this run and handed to each of its units through its agent.
    link_key: LinkKey,
}

impl Controller {
    /// How long a unit or a host may stay silent (`controller.heartbeat_timeout_s`).
    fn heartbeat_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.cfg.controller.heartbeat_timeout_s)
    }

    /// How long one call to an agent may take.
    fn call_timeout(&self) -> Duration {
        self.heartbeat_timeout().clamp(Duration::from_millis(500), Duration::from_secs(3))
    }

    fn call(&self, host: &str, method: &str, path: &str, body: Option<&str>) -> Result<client::Answer> {
        let agent = self.hosts[host].agent;
        client::call(agent, method, path, self.token.as_deref(), body, self.call_timeout())
            .map_err(|e| anyhow::anyhow!("host {host}: agent {e}"))
    }

    /// Before anything starts: every host's agent answers and takes the token.
    fn check_agents(&self) -> Result<()> {
        let mut problems = Vec::new();
        for host in self.hosts.keys().cloned().collect::<Vec<_>>() {
            let agent = self.hosts[&host].agent;
            match self.call(&host, "GET", "/api/v1/health", None) {
                Ok(a) if a.ok() => {
                    tracing::info!(host = %host, "host {host}: agent {agent} answers: {}", a.body.trim());
                }
                Ok(a) if a.status == 401 => problems.push(format!(
                    "host {host}: agent {agent} refuses the token (set TESSERA_AGENT_TOKEN to the agent's)"
                )),
                Ok(a) => problems.push(format!(
                    "host {host}: {agent} answers HTTP {} ({}): is it a tessera agent of this version?",
                    a.status,
                    a.body.trim()
                )),
                Err(e) => problems.push(format!(
                    "{e:#}; start `tessera agent --listen {agent}` on {host} (with the same TESSERA_AGENT_TOKEN)"
                )),
            }
        }
        if !problems.is_empty() {
            bail!("the run cannot be configured:\n  {}", problems.join("\n  "));
        }
        Ok(())
    }

    fn start(&self, p: &Placed) -> Result<()> {
        // Every unit of the run, a restarted BU too, gets the run's one link key.
        let request = StartRequest {
            name: p.name.clone(),
            args: p.args.clone(),
            system: Some(self.system_text.clone()),
            link_key: p.role.is_unit().then(|| self.link_key.clone()),
        };
        let body = serde_json::to_string(&request)?;
        let a = self.call(&p.host, "POST", "/api/v1/processes", Some(&body))?;
        if !a.ok() {
            bail!("host {}: cannot start {}: HTTP {}: {}", p.host, p.name, a.status, a.body.trim());
        }
        tracing::info!(unit = %p.name, host = %p.host, "started {} on {}: tessera {}", p.name, p.host, p.args.join(" "));
        Ok(())
    }

    /// Asks every agent for its processes; returns the faults seen.
    fn poll(&mut self) -> Vec<Fault> {
        let mut faults = Vec::new();
        let now = Instant::now();
        // Every host at once: an unreachable one costs one time-out, not one per host.
        let this: &Controller = self;
        let answers: Vec<(String, Result<Vec<ProcessView>>)> = std::thread::scope(|scope| {
            let asks: Vec<_> = this
                .hosts
                .keys()
                .map(|host| {
                    let ask = scope.spawn(move || {
                        let a = this.call(host, "GET", "/api/v1/processes", None)?;
                        if !a.ok() {
                            bail!("HTTP {}: {}", a.status, a.body.trim());
                        }
                        serde_json::from_str::<Vec<ProcessView>>(&a.body).context("unreadable process list")
                    });
                    (host.clone(), ask)
                })
                .collect();
            asks.into_iter()
                .map(|(host, ask)| (host, ask.join().unwrap_or_else(|_| Err(anyhow::anyhow!("polling panicked")))))
                .collect()
        });
        for (host, answer) in answers {
            let h = self.hosts.get_mut(&host).expect("known host");
            match answer {
                Ok(list) => {
                    h.last_answer = now;
                    h.last_error = None;
                    h.seen = list.into_iter().map(|p| (p.name.clone(), p)).collect();
                }
                Err(e) => {
                    h.last_error = Some(format!("{e:#}"));
                    let silent = now.duration_since(h.last_answer);
                    if silent > self.heartbeat_timeout() {
                        let units: Vec<&str> =
                            self.placed.iter().filter(|p| p.host == host).map(|p| p.name.as_str()).collect();
                        faults.push(Fault {
                            unit: units.join(", "),
                            host: host.clone(),
                            key: "HOST_UNREACHABLE",
                            why: format!("its agent has not answered for {:.1} s: {e:#}", silent.as_secs_f64()),
                        });
                    }
                }
            }
        }
        let mut crashed = Vec::new();
        for p in &self.placed {
            let host = &self.hosts[&p.host];
            if host.last_error.is_some() {
                // What was seen of its host is old: its units are judged once it answers again.
                continue;
            }
            let Some(view) = host.seen.get(&p.name) else { continue };
            if let Some(exit) = view.exit {
                // Front ends end when the builder stops taking their streams.
                let expected_end = exit.success() || (matches!(p.role, Role::Trigger(_)) && self.stopping);
                if !expected_end {
                    let last = view.log_tail.last().cloned().unwrap_or_default();
                    let fault = Fault {
                        unit: p.name.clone(),
                        host: p.host.clone(),
                        key: "PROCESS_ENDED",
                        why: format!("ended with {exit}: {last}"),
                    };
                    let restarts = self.restarts.get(&p.name).copied().unwrap_or(0);
                    if p.role.restartable() && restarts < self.cfg.controller.max_restarts {
                        crashed.push((p.clone(), fault));
                    } else {
                        faults.push(fault);
                    }
                }
                continue;
            }
            if !p.role.is_unit() {
                continue;
            }
            match (&view.units, &view.units_error) {
                (Some(units), _) => {
                    self.silent.remove(&p.name);
                    for unit in units.as_array().into_iter().flatten() {
                        let name = unit["name"].as_str().unwrap_or(&p.name).to_owned();
                        self.last_units.insert(name.clone(), unit.clone());
                        if unit["state"] == "Failed" {
                            let why = unit["problems"]
                                .as_array()
                                .and_then(|ps| ps.last())
                                .and_then(Value::as_str)
                                .unwrap_or("no problem reported")
                                .to_owned();
                            faults.push(Fault { unit: name.clone(), host: p.host.clone(), key: "UNIT_FAILED", why });
                        }
                        // A unit whose loop has ended (Halted: its process finishes other work,
                        // such as serving its files to FUs) has no heartbeat to watch.
                        if unit["state"] == "Halted" || unit["state"] == "Failed" {
                            continue;
                        }
                        // Nor does one still configuring (a restarted BU reopens its files): that
                        // is bounded by the start time-out.
                        if unit["state"] == "Configuring" {
                            self.beats.forget(&name);
                            let since = *self.configuring.entry(name.clone()).or_insert(now);
                            let limit = Duration::from_secs(self.cfg.controller.start_timeout_s);
                            if now.duration_since(since) > limit {
                                faults.push(Fault {
                                    unit: name,
                                    host: p.host.clone(),
                                    key: "UNIT_STALLED",
                                    why: format!("still configuring after {:.1} s", limit.as_secs_f64()),
                                });
                            }
                            continue;
                        }
                        self.configuring.remove(&name);
                        let count = unit["figures"]["loop_heartbeats_total"].as_f64().unwrap_or(0.0) as u64;
                        if let Some(still) = self.beats.check(&name, count, now) {
                            faults.push(Fault {
                                unit: name,
                                host: p.host.clone(),
                                key: "UNIT_STALLED",
                                why: format!("its loop heartbeat has not moved for {:.1} s", still.as_secs_f64()),
                            });
                        }
                    }
                }
                (None, Some(e)) => {
                    let since = *self.silent.entry(p.name.clone()).or_insert(now);
                    // A unit starts its control server only once configured: give it the start time.
                    let started = self.beats.knows(&p.name);
                    let patience = if started {
                        self.heartbeat_timeout()
                    } else {
                        Duration::from_secs(self.cfg.controller.start_timeout_s)
                    };
                    if now.duration_since(since) > patience {
                        faults.push(Fault {
                            unit: p.name.clone(),
                            host: p.host.clone(),
                            key: "UNIT_STALLED",
                            why: format!(
                                "its control server has not answered for {:.1} s: {e}",
                                now.duration_since(since).as_secs_f64()
                            ),
                        });
                    }
                }
                (None, None) => {}
            }
        }
        for (p, why) in crashed {
            if let Err(e) = self.restart(&p, &why) {
                faults.push(Fault { why: format!("{}; starting it again failed: {e:#}", why.why), ..why });
            }
        }
        self.update_mirror();
        faults
    }

    /// Starts a crashed BU, FU or merger again: a BU with `--restart` (it discards its partial
    /// files and lets the EVM say which complete ones to publish) and enabled at once; an FU or
    /// the mergers as they were (they take up where their predecessor stopped).
    fn restart(&mut self, p: &Placed, why: &Fault) -> Result<()> {
        let n = self.restarts.entry(p.name.clone()).or_insert(0);
        *n += 1;
        tracing::warn!(
            unit = %p.name,
            host = %p.host,
            "{why}; starting it again ({} of at most {})",
            n,
            self.cfg.controller.max_restarts
        );
        let mut again = p.clone();
        if matches!(p.role, Role::Bu(_)) {
            again.args.retain(|a| a != "--wait-for-enable");
            again.args.push("--restart".into());
        }
        self.start(&again)?;
        // Its end is no longer the news: the next poll shows the new process.
        self.hosts.get_mut(&p.host).expect("known host").seen.remove(&p.name);
        Ok(())
    }

    /// Refreshes the views the controller serves: each unit as last seen, with its host, and
    /// marked stale while its host does not answer.
    fn update_mirror(&self) {
        // In the system file's order: the RUs (the EVM's first), then the BUs.
        let rank = |p: &&Placed| match p.role {
            Role::Ru(i) => i,
            Role::Bu(i) => self.cfg.rus.len() + i,
            _ => usize::MAX,
        };
        let mut units: Vec<&Placed> = self.placed.iter().filter(|p| p.role.is_unit()).collect();
        units.sort_by_key(rank);
        let views: Vec<UnitView> = units
            .into_iter()
            .filter_map(|p| {
                let mut view: UnitView = serde_json::from_value(self.last_units.get(&p.name)?.clone()).ok()?;
                view.host = Some(p.host.clone());
                view.stale = self.hosts[&p.host].last_error.is_some();
                Some(view)
            })
            .collect();
        *self.mirror.lock().unwrap_or_else(|e| e.into_inner()) = views;
    }

    /// A figure of a unit as last seen (0 if never).
    fn figure(&self, unit: &str, key: &str) -> u64 {
        self.last_units.get(unit).and_then(|u| u["figures"][key].as_f64()).unwrap_or(0.0) as u64
    }

    /// Events triggered and published, as the units last showed them.
    fn progress(&self) -> (u64, u64) {
        let triggered = self.figure(&self.cfg.rus[0].name, "events_triggered_total");
        let built = self.cfg.bus.iter().map(|b| self.figure(&b.name, "events_published_total")).sum();
        (triggered, built)
    }

    fn view(&self, p: &Placed) -> Option<&ProcessView> {
        self.hosts[&p.host].seen.get(&p.name)
    }

    fn ended(&self, p: &Placed) -> bool {
        self.view(p).is_some_and(|v| v.exit.is_some())
    }

    /// Waits until `wanted` holds for the units' views, polling; fails on a fault or time-out.
    fn wait_for(&mut self, what: &str, timeout: Duration, wanted: impl Fn(&Controller) -> bool) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let faults = self.poll();
            if !faults.is_empty() {
                bail!("{what}: {}", faults.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "));
            }
            if wanted(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{what}: not done after {timeout:?} (controller.start_timeout_s)");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Ends every process on every agent that answers.
    fn abort(&self) {
        for host in self.hosts.keys() {
            if let Err(e) = self.call(host, "DELETE", "/api/v1/processes", None) {
                tracing::warn!(host = %host, "host {host}: could not end its processes: {e:#}");
            }
        }
    }

    fn unit_state(&self, name: &str) -> Option<String> {
        self.last_units.get(name).and_then(|u| u["state"].as_str().map(str::to_owned))
    }
}

/// Every process of the run, in the order they start.
fn placement(cfg: &SystemConfig, output: &Path) -> Vec<Placed> {
    let mut placed = Vec::new();
    let unit_args = |command: &str, name: Option<&str>| {
        let mut args = vec![command.to_owned(), "--system".to_owned(), "{system}".to_owned()];
        if let Some(name) = name {
            args.extend(["--name".to_owned(), name.to_owned()]);
        }
        args.extend(
            ["--control", "127.0.0.1:0", "--control-file", "{control_file}", "--json", "--wait-for-enable"]
                .into_iter()
                .map(str::to_owned),
        );
        args
    };
    let readers = cfg.fu.read_by_readers();
    if cfg.fu.enabled {
        for (i, bu) in cfg.bus.iter().enumerate() {
            let fu_host = bu.fu_host().to_owned();
            let broker = (fu_host != bu.host).then(|| format!("{}:{}", bu.host, bu.broker_port.unwrap_or(0)));
            for k in 0..cfg.fu.processes_per_bu {
                let args = if readers {
                    // Through the BU's broker (a port, by `require_ports`), reading the files
                    // where the reader's host sees the BU's directory.
                    let broker = format!("{}:{}", bu.host, bu.broker_port.unwrap_or(0));
                    let bu_dir = cfg.bu_directory(i, output).display().to_string();
                    let run = cfg.run.number.to_string();
                    ["reader", "--broker", &broker, "--bu-dir", &bu_dir, "--run", &run].map(str::to_owned).to_vec()
                } else {
                    fu_args(cfg, i, output, broker.clone())
                };
                let kind = if readers { "reader" } else { "fu" };
                placed.push(Placed {
                    name: format!("{}-{kind}{k}", bu.name),
                    host: fu_host.clone(),
                    role: Role::Fu(i),
                    args,
                });
            }
        }
        if cfg.fu.merge && !readers {
            let host = cfg.controller.merger_host.clone().unwrap_or_else(|| cfg.bus[0].fu_host().to_owned());
            let args = ["merge", "--system", "{system}", "--output"].into_iter().map(str::to_owned);
            placed.push(Placed {
                name: "mergers".into(),
                host,
                role: Role::Merger,
                args: args.chain([output.display().to_string()]).collect(),
            });
        }
    }
    for (i, bu) in cfg.bus.iter().enumerate() {
        placed.push(Placed {
            name: bu.name.clone(),
            host: bu.host.clone(),
            role: Role::Bu(i),
            args: unit_args("bu", Some(&bu.name)),
        });
    }
    for (i, ru) in cfg.rus.iter().enumerate().skip(1) {
        placed.push(Placed {
            name: ru.name.clone(),
            host: ru.host.clone(),
            role: Role::Ru(i),
            args: unit_args("ru", Some(&ru.name)),
        });
    }
    placed.push(Placed {
        name: cfg.rus[0].name.clone(),
        host: cfg.rus[0].host.clone(),
        role: Role::Ru(0),
        args: unit_args("evm", None),
    });
    for (i, ru) in cfg.rus.iter().enumerate().filter(|(_, r)| r.emulated) {
        let args = ["ferol", "--system", "{system}", "--ru", &ru.name, "--until-stopped"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        placed.push(Placed {
            name: format!("trigger-{}", ru.name),
            host: ru.host.clone(),
            role: Role::Trigger(i),
            args,
        });
    }
    placed
}

/// `tessera run` on agents. `cfg` has the command line applied; `token` is the agents'.
pub fn run_on_agents(
    mut cfg: SystemConfig,
    token: Option<String>,
    control: &ControlArgs,
    incomplete_rule: &IncompleteRule,
) -> Result<ExitCode> {
    let port = cfg.controller.agent_port.context("controller.agent_port is not set")?;
    let output = cfg.run.output.clone().filter(|o| o.is_absolute()).with_context(|| {
        "run.output: a run across hosts needs an absolute output directory that is the same path on every host (give --output /path)"
    })?;
    // The menu is read by FUs and mergers started elsewhere: name it by its absolute path.
    if let Some(menu) = &cfg.fu.menu {
        cfg.fu.menu = Some(std::fs::canonicalize(menu).with_context(|| format!("fu.menu {}", menu.display()))?);
    }
    let heartbeat_timeout = Duration::from_secs_f64(cfg.controller.heartbeat_timeout_s);
    let mut hosts = BTreeMap::new();
    let placed = placement(&cfg, &output);
    for p in &placed {
        if !hosts.contains_key(&p.host) {
            let agent = (p.host.as_str(), port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .with_context(|| format!("host {}: cannot resolve it to reach its agent", p.host))?;
            hosts.insert(
                p.host.clone(),
                Host { agent, last_answer: Instant::now(), last_error: None, seen: BTreeMap::new() },
            );
        }
    }
    let run = cfg.run.number;
    let mut c = Controller {
        system_text: cfg.to_yaml(),
        cfg,
        token,
        hosts,
        placed,
        beats: HeartbeatWatch::new(heartbeat_timeout),
        silent: BTreeMap::new(),
        configuring: BTreeMap::new(),
        stopping: false,
        last_units: BTreeMap::new(),
        mirror: Arc::default(),
        restarts: BTreeMap::new(),
        status: Arc::new(RunStatus::new(run)),
        link_key: LinkKey::generate()?,
    };
    tracing::info!(
        run,
        "tessera run {run} across {} hosts through their agents: {} RUs, {} BUs, {} processes; output in {}",
        c.hosts.len(),
        c.cfg.rus.len(),
        c.cfg.bus.len(),
        c.placed.len(),
        output.display()
    );
    c.check_agents()?;
    let interrupts = count_interrupts()?;
    // The controller's own control server: the dashboard, metrics and API of every unit on every
    // host, as last gathered, and the run's stop.
    let asked = interrupts.clone();
    let stop: Action = Arc::new(move || {
        // As a first Ctrl-C: stop the trigger at the EVM and drain.
        Ok(match asked.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => "stopping the trigger; draining".to_owned(),
            Err(_) => "already stopping".to_owned(),
        })
    });
    let mirror = c.mirror.clone();
    let views: Arc<dyn Fn() -> Vec<UnitView> + Send + Sync> =
        Arc::new(move || mirror.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let served = Served {
        units: UnitSource::Views(views),
        stop: Some(stop),
        enable: None,
        system: Some(c.system_text.clone()),
        run: Some(c.status.clone()),
    };
    let _control = serve_control(control, served)?;
    let started = Instant::now();
    let operator = OperatorStop::new(interrupts.clone(), Duration::from_secs(c.cfg.controller.stop_timeout_s));
    let outcome = drive(&mut c, &operator);
    let faults = match outcome {
        Ok(faults) => faults,
        Err(e) => {
            tracing::error!(run, "run {run}: {e:#}");
            vec![Fault { unit: "-".into(), host: "-".into(), key: "CONTROLLER", why: format!("{e:#}") }]
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
    let ok = summarize(&c, &output, &faults, started.elapsed().as_secs_f64(), incomplete_rule)?;
    c.status.update(|v| v.state = if ok && faults.is_empty() { RunState::Ended } else { RunState::Aborted });
    Ok(if ok && faults.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Starts the run in order, watches it until every process has ended, and stops it on its
/// limit or Ctrl-C. Returns the faults that ended it early, if any.
fn drive(c: &mut Controller, operator: &OperatorStop) -> Result<Vec<Fault>> {
    let start_timeout = Duration::from_secs(c.cfg.controller.start_timeout_s);
    let placed = c.placed.clone();
    // The farm first, so that it is there when the first files appear; then the builder, from
    // the BUs to the EVM, each group configured before the next; the trigger last.
    for p in placed.iter().filter(|p| matches!(p.role, Role::Fu(_) | Role::Merger)) {
        c.start(p)?;
    }
    for group in [
        placed.iter().filter(|p| matches!(p.role, Role::Bu(_))).collect::<Vec<_>>(),
        placed.iter().filter(|p| matches!(p.role, Role::Ru(i) if i > 0)).collect(),
        placed.iter().filter(|p| p.role == Role::Ru(0)).collect(),
    ] {
        for p in &group {
            c.start(p)?;
        }
        let names: Vec<String> = group.iter().map(|p| p.name.clone()).collect();
        c.wait_for(&format!("starting {}", names.join(", ")), start_timeout, |c| {
            names.iter().all(|n| c.unit_state(n).is_some())
        })?;
    }
    // Configure: every unit binds its ports, reaches its peers and takes its memory, and waits
    // in Ready. A unit that cannot fails here, before any unit takes data.
    let units: Vec<&Placed> = placed.iter().filter(|p| p.role.is_unit()).collect();
    c.wait_for("configuring the units", start_timeout, |c| {
        units.iter().all(|p| c.unit_state(&p.name).as_deref() == Some("Ready"))
    })?;
    tracing::info!("every unit is configured (Ready): enabling the BUs, the RUs, then the EVM");
    // Enable in the same order: whoever receives is taking data before whoever sends.
    for p in &units {
        let a = c.call(&p.host, "POST", &format!("/api/v1/processes/{}/enable", p.name), None)?;
        if !a.ok() {
            bail!("enabling {} on {}: HTTP {}: {}", p.name, p.host, a.status, a.body.trim());
        }
    }
    c.wait_for("enabling the units", start_timeout, |c| {
        units.iter().all(|p| c.unit_state(&p.name).as_deref() == Some("Enabled"))
    })?;
    tracing::info!("every unit is enabled: starting the trigger");
    for p in placed.iter().filter(|p| matches!(p.role, Role::Trigger(_))) {
        c.start(p)?;
    }
    let enabled = Instant::now();
    let evm = placed.iter().find(|p| p.role == Role::Ru(0)).expect("an EVM").clone();
    let mut last = (Instant::now(), 0u64);
    let (mut stopped_at, mut builder_ended_at): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let faults = c.poll();
        if !faults.is_empty() {
            return Ok(faults);
        }
        if !c.ended(&evm) {
            let (triggered, built) = c.progress();
            let dt = last.0.elapsed().as_secs_f64().max(1e-3);
            let rate_hz = (triggered.saturating_sub(last.1)) as f64 / dt;
            let requested_hz = c.cfg.trigger.paced_rate_hz();
            tracing::info!(
                triggered,
                built,
                "{:7.1} s  triggered {triggered:>10}  built {built:>10}  {:>8.1} kHz{}",
                enabled.elapsed().as_secs_f64(),
                rate_hz / 1e3,
                requested_hz.map_or(String::new(), |r| format!(" of {:.1} kHz", r / 1e3))
            );
            last = (Instant::now(), triggered);
            let elapsed_s = enabled.elapsed().as_secs_f64();
            let stopping = c.stopping;
            c.status.update(|v| {
                v.state = if stopping { RunState::Draining } else { RunState::Running };
                v.elapsed_s = elapsed_s;
                v.requested_rate_hz = requested_hz;
                v.achieved_rate_hz = rate_hz;
                v.mean_rate_hz = triggered as f64 / elapsed_s.max(1e-3);
                v.stop_requested = stopping;
            });
        } else {
            c.status.update(|v| v.state = RunState::Merging);
        }
        let time_up = c.cfg.run.seconds.is_some_and(|s| enabled.elapsed().as_secs_f64() >= s);
        let asked = operator.stops();
        if operator.cut() {
            if asked > 1 {
                bail!("interrupted twice: the run is aborted");
            }
            bail!(
                "the run did not end within {} s of the operator's stop (controller.stop_timeout_s): it is aborted",
                c.cfg.controller.stop_timeout_s
            );
        }
        if !c.stopping && (time_up || asked > 0) && !c.ended(&evm) {
            c.stopping = true;
            let a = c.call(&evm.host, "POST", &format!("/api/v1/processes/{}/stop", evm.name), None)?;
            tracing::info!(
                run = c.cfg.run.number,
                "stopping: the EVM stops the trigger and drains ({})",
                a.body.trim()
            );
        }
        let triggers_ended = placed.iter().filter(|p| matches!(p.role, Role::Trigger(_))).all(|p| c.ended(p));
        if c.stopping || triggers_ended {
            stopped_at.get_or_insert_with(Instant::now);
        }
        let builder_ended = placed.iter().filter(|p| p.role.is_unit()).all(|p| c.ended(p));
        if builder_ended {
            builder_ended_at.get_or_insert_with(Instant::now);
            c.stopping = true;
            // Front ends still sending after the EVM's stop have nobody to send to.
            for p in placed.iter().filter(|p| matches!(p.role, Role::Trigger(_)) && !c.ended(p)) {
                let _ = c.call(&p.host, "POST", &format!("/api/v1/processes/{}/signal?signal=KILL", p.name), None);
            }
        }
        if placed.iter().all(|p| c.ended(p)) {
            return Ok(Vec::new());
        }
        // Every wait after the trigger's end is bounded.
        if !builder_ended && stopped_at.is_some_and(|t| t.elapsed() > DRAIN_TIMEOUT) {
            bail!("the builder did not drain within {DRAIN_TIMEOUT:?} of the trigger's end");
        }
        let farm_deadline = Duration::from_secs(c.cfg.fu.drain_timeout_s) + start_timeout;
        if builder_ended_at.is_some_and(|t| t.elapsed() > farm_deadline) {
            bail!("the filter farm did not finish within {farm_deadline:?} of the builder's end");
        }
    }
}

/// The last JSON line a process printed.
fn report(view: Option<&ProcessView>) -> Option<Value> {
    view?.stdout.as_deref()?.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok())
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
    let cfg = &c.cfg;
    let hosts = c.hosts.len();
    println!(
        "run {} ended after {seconds:.1} s across {hosts} host{}",
        cfg.run.number,
        if hosts == 1 { "" } else { "s" }
    );
    let mut clean = faults.is_empty();
    let mut reports = BTreeMap::new();
    for p in &c.placed {
        let view = c.view(p);
        let exit = view.and_then(|v| v.exit);
        let r = report(view);
        let line = match (&r, exit) {
            (Some(r), _) if let Some(why) = failure(p.role, r) => {
                clean = false;
                format!("FAILED: {why}")
            }
            (Some(r), _) => summary_line(p.role, r),
            (None, Some(exit)) if exit.success() => {
                view.and_then(|v| v.stdout.as_deref()).and_then(|s| s.lines().last()).unwrap_or("ended").to_owned()
            }
            (None, Some(_)) if matches!(p.role, Role::Trigger(_)) && c.stopping => {
                "stopped with the run (the RU closed its streams)".to_owned()
            }
            (None, Some(exit)) => {
                clean = false;
                format!("FAILED with {exit}: {}", view.and_then(|v| v.log_tail.last()).map_or("", String::as_str))
            }
            (None, None) => {
                clean = false;
                match c.last_units.get(&p.name) {
                    Some(u) => format!("ended by the controller; last seen {}", u["state"].as_str().unwrap_or("?")),
                    None => "ended by the controller".to_owned(),
                }
            }
        };
        let again = match c.restarts.get(&p.name) {
            Some(1) => " (started again once after a crash)".to_owned(),
            Some(n) => format!(" (started again {n} times after crashes)"),
            None => String::new(),
        };
        println!("  {:<12} {:<16} {line}{again}", p.name, p.host);
        if let Some(r) = r {
            reports.insert(p.name.clone(), r);
        }
    }
    let evm = &cfg.rus[0].name;
    let evm_report = reports.get(evm).and_then(RuEnd::read).and_then(|e| e.evm());
    let triggered = evm_report.map_or(0, |e| e.triggered);
    let lost_closed = evm_report.map_or(0, |e| e.lost_lumi_closed);
    let restarted: Vec<&str> =
        cfg.bus.iter().map(|b| b.name.as_str()).filter(|b| c.restarts.contains_key(*b)).collect();
    let bu_ends: Vec<BuFigures> =
        cfg.bus.iter().filter_map(|b| BuEnd::read(reports.get(&b.name)?)?.figures().cloned()).collect();
    // A BU's report counts what its last incarnation published. When one was started again,
    // the events built are those the EVM committed (each is published exactly once: before its
    // crash, by its restart, or by another BU); the chain's check below proves them in storage.
    let built: u64 = if restarted.is_empty() {
        bu_ends.iter().map(|b| b.events_published).sum()
    } else {
        println!("  {} started again: events built are those the EVM committed to the BUs", restarted.join(", "));
        evm_report.map_or(0, |e| e.committed)
    };
    let holds = evm_report.is_some() && triggered == built + lost_closed;
    if evm_report.is_some() {
        println!(
            "conservation: triggered {triggered} = built {built} + lost {lost_closed}{}  {}",
            if lost_closed > 0 { " (LUMI_SECTION_CLOSED)" } else { "" },
            if holds { "holds" } else { "DOES NOT HOLD" }
        );
    } else {
        // The EVM never reported its end: the run was cut short, and what was in flight is
        // not accounted for. Say so, with the figures as the units last showed them.
        let (seen_triggered, seen_built) = c.progress();
        println!(
            "conservation: NOT PROVEN: the run was ended before the EVM's report; last seen triggered {seen_triggered}, built {seen_built} ({} in flight)",
            seen_triggered.saturating_sub(seen_built)
        );
    }
    // Each BU counts the incomplete events it published; one started again counts only its
    // last incarnation's, so the figure is then a lower bound, and said so.
    let incomplete: u64 = bu_ends.iter().map(|b| b.incomplete_events).sum();
    let at_least = if restarted.is_empty() { "" } else { "at least " };
    println!("events: {built} built, {} complete, {at_least}{incomplete} incomplete", built.saturating_sub(incomplete));
    let incomplete_ok = incomplete_rule.allows(incomplete);
    println!("{}", incomplete_line(incomplete, incomplete_rule));
    let mut chain = Value::Null;
    let mut chain_holds = true;
    if cfg.fu.enabled && evm_report.is_none() {
        chain_holds = false;
        println!("chain: NOT PROVEN: the run was ended before the builder's end");
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
                    c.placed
                        .iter()
                        .filter(|p| p.role == Role::Fu(i))
                        .filter_map(|p| reports.get(&p.name)?["ledger_events"].as_u64())
                        .max()
                        .unwrap_or(0)
                })
                .sum()
        };
        let merged = c.placed.iter().find(|p| p.role == Role::Merger).map(|p| {
            let view = c.view(p);
            (
                view.and_then(|v| v.exit).is_some_and(|e| e.success()),
                view.and_then(|v| v.stdout.clone()).unwrap_or_default(),
            )
        });
        chain_holds = built == processed && merged.as_ref().is_none_or(|(ok, _)| *ok);
        let storage = match &merged {
            Some((true, _)) => format!(" = processed {built} in storage (tessera merge)"),
            Some((false, _)) => " ≠ storage (tessera merge did not prove it)".to_owned(),
            None if readers => String::new(),
            None => "; storage is left to `tessera merge`".to_owned(),
        };
        let by =
            if readers { "the readers (the files they deleted, as the BUs' brokers counted them)" } else { "the FUs" };
        println!(
            "chain: built {built} = processed {processed} by {by}{storage}  {}",
            if chain_holds { "holds" } else { "DOES NOT HOLD" }
        );
        chain = json!({ "holds": chain_holds, "built": built, "processed_by_fus": processed,
            "merged": merged.map(|(ok, out)| json!({"holds": ok, "said": out.trim()})) });
    }
    for f in faults {
        println!("fault: {f}");
    }
    let summary = json!({
        "run": cfg.run.number,
        "seconds": seconds,
        "hosts": c.hosts.iter().map(|(h, a)| json!({"host": h, "agent": a.agent.to_string(), "last_error": a.last_error})).collect::<Vec<_>>(),
        "triggered": triggered,
        "built": built,
        "lost": { "LUMI_SECTION_CLOSED": lost_closed },
        "conservation_holds": holds,
        "built_complete": built.saturating_sub(incomplete),
        "built_incomplete": incomplete,
        "incomplete_check": incomplete_rule.to_json(incomplete),
        "chain": chain,
        "faults": faults.iter().map(|f| json!({"unit": f.unit, "host": f.host, "reason": f.key, "why": f.why})).collect::<Vec<_>>(),
        "restarts": c.restarts,
        "reports": reports,
        // What each unit last showed (state, problems, figures): for a run that ended early.
        "units_last_seen": c.last_units,
    });
    let dir = if output.is_dir() { output.to_owned() } else { PathBuf::from(".") };
    let path = dir.join(format!("summary-run{:06}.json", cfg.run.number));
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!("summary: {}", path.display());
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

/// One line of a unit's or FU's report.
fn summary_line(role: Role, r: &Value) -> String {
    match role {
        Role::Bu(_) => match BuEnd::read(r).as_ref().and_then(BuEnd::figures) {
            Some(b) => format!(
                "{:>10} events in {:>6} files, {:>6} incomplete, {:>6} with a fragment error",
                b.events_published, b.files_published, b.incomplete_events, b.error_events
            ),
            None => r.to_string(),
        },
        Role::Ru(_) => match RuEnd::read(r) {
            Some(RuEnd { problems, outcome: Ended::Figures(f), .. }) => {
                let evm = f.evm.map(|e| format!("; triggered {}, committed {}", e.triggered, e.committed));
                format!(
                    "{:>10} fragments, {:>6} corrupt, {:>6} late, {:>6} problems{}",
                    f.fragments,
                    f.corrupt_fragments,
                    f.late_fragments,
                    problems,
                    evm.unwrap_or_default()
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
