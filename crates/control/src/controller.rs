//! The controller of a system across hosts: `tessera run SYSTEM.yaml` with
//! `controller.agent_port` places every unit as a process on its host through that host's
//! `tessera agent` ([`Controller::new`]), in the order a run needs: the filter farm (FUs and
//! mergers), the BUs, the RUs, the EVM, and last the trigger (the front-end emulators)
//! ([`drive`]). It watches every unit through the agents once a second: a unit that fails, a
//! process that ends before its time, a unit whose loop heartbeat stops moving (a stalled unit,
//! not only a dead one) and a host whose agent stops answering are each a [`Fault`] with the unit
//! and the reason within `controller.heartbeat_timeout_s`, and end the run. A run that ends by its
//! limit (or a stop) stops the trigger at the EVM, which drains it. The run's summary is the
//! CLI's, from the ends the units print ([`crate::report`]).

use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_config::SystemConfig;
use tessera_runtime::link::{LinkKey, LinkKeyError};

use crate::agent::{ProcessView, StartRequest};
use crate::client::{self, ClientError};
use crate::placement::{FuArgs, Placed, Role, placement};
use crate::stop::{DRAIN_TIMEOUT, OperatorStop};
use crate::units::{StuckWatch, start_wait};
use crate::{HeartbeatWatch, RunState, RunStatus, UnitView};

/// Why the controller could not place, start or watch a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// `controller.agent_port` is not set.
    #[error("controller.agent_port is not set")]
    NoAgentPort,
    /// The output directory is not an absolute path.
    #[error(
        "run.output: a run across hosts needs an absolute output directory that is the same path on every host (give --output /path)"
    )]
    RelativeOutput,
    /// The FUs' menu could not be found.
    #[error("fu.menu {}", path.display())]
    Menu {
        /// The menu as the system file names it.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A host's name does not resolve.
    #[error("host {host}: cannot resolve it to reach its agent")]
    Unresolved {
        /// The host.
        host: String,
    },
    /// The run's link key could not be made.
    #[error(transparent)]
    LinkKey(#[from] LinkKeyError),
    /// A call to a host's agent failed.
    #[error("host {host}: agent {error}")]
    Agent {
        /// The host.
        host: String,
        /// Why.
        error: ClientError,
    },
    /// An agent answered with an error.
    #[error("HTTP {status}: {body}")]
    Answer {
        /// Its HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// An agent refused to do something.
    #[error("{doing}: HTTP {status}: {body}")]
    Refused {
        /// What was asked, of whom.
        doing: String,
        /// Its HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// An agent's process list could not be read.
    #[error("unreadable process list: {0}")]
    ProcessList(serde_json::Error),
    /// A start request could not be written.
    #[error("writing a start request: {0}")]
    Request(serde_json::Error),
    /// The thread asking an agent panicked.
    #[error("polling panicked")]
    Panicked,
    /// Some agents cannot run the run.
    #[error("the run cannot be configured:\n  {}", problems.join("\n  "))]
    NotConfigurable {
        /// What each said, by host.
        problems: Vec<String>,
    },
    /// Faults ended a step of the start.
    #[error("{what}: {faults}")]
    Faults {
        /// The step.
        what: String,
        /// The faults, one after the other.
        faults: String,
    },
    /// A step of the start did not end in time.
    #[error("{what}: not done after {timeout:?} (controller.start_timeout_s)")]
    NotDone {
        /// The step.
        what: String,
        /// Its bound.
        timeout: Duration,
    },
    /// The operator stopped the run twice.
    #[error("interrupted twice: the run is aborted")]
    InterruptedTwice,
    /// The run did not end within its bound after the operator's stop.
    #[error(
        "the run did not end within {stop_timeout_s} s of the operator's stop (controller.stop_timeout_s): it is aborted"
    )]
    NotStopped {
        /// `controller.stop_timeout_s`.
        stop_timeout_s: u64,
    },
    /// The builder did not drain after the trigger's end.
    #[error("the builder did not drain within {timeout:?} of the trigger's end")]
    NotDrained {
        /// The bound.
        timeout: Duration,
    },
    /// The filter farm did not finish after the builder's end.
    #[error("the filter farm did not finish within {timeout:?} of the builder's end")]
    FarmNotDone {
        /// The bound.
        timeout: Duration,
    },
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
pub struct Fault {
    /// The unit (or units) it ended.
    pub unit: String,
    /// Their host.
    pub host: String,
    /// Its stable key (`PROCESS_ENDED`, `UNIT_FAILED`, `UNIT_STALLED`, `HOST_UNREACHABLE`, `CONTROLLER`).
    pub key: &'static str,
    /// What happened.
    pub why: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} on {}: {}", self.key, self.unit, self.host, self.why)
    }
}

/// The controller of one run across hosts: where every process of the run goes, what its
/// agents last said of them, and the faults that end the run.
pub struct Controller {
    cfg: SystemConfig,
    output: PathBuf,
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
    /// Push: the BUs whose process ended before the run's end (never started again).
    bus_lost: std::collections::BTreeSet<String>,
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

    fn call(
        &self,
        host: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<client::Answer, ControllerError> {
        let agent = self.hosts[host].agent;
        client::call(agent, method, path, self.token.as_deref(), body, self.call_timeout())
            .map_err(|error| ControllerError::Agent { host: host.to_owned(), error })
    }

    /// Before anything starts: every host's agent answers and takes the token.
    pub fn check_agents(&self) -> Result<(), ControllerError> {
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
                    "{e}; start `tessera agent --listen {agent}` on {host} (with the same TESSERA_AGENT_TOKEN)"
                )),
            }
        }
        if !problems.is_empty() {
            return Err(ControllerError::NotConfigurable { problems });
        }
        Ok(())
    }

    fn start(&self, p: &Placed) -> Result<(), ControllerError> {
        // Every unit of the run, a restarted BU too, gets the run's one link key.
        let request = StartRequest {
            name: p.name.clone(),
            args: p.args.clone(),
            system: Some(self.system_text.clone()),
            link_key: p.role.is_unit().then(|| self.link_key.clone()),
        };
        let body = serde_json::to_string(&request).map_err(ControllerError::Request)?;
        let a = self.call(&p.host, "POST", "/api/v1/processes", Some(&body))?;
        if !a.ok() {
            return Err(ControllerError::Refused {
                doing: format!("host {}: cannot start {}", p.host, p.name),
                status: a.status,
                body: a.body.trim().to_owned(),
            });
        }
        tracing::info!(unit = %p.name, host = %p.host, "started {} on {}: tessera {}", p.name, p.host, p.args.join(" "));
        Ok(())
    }

    /// Asks every agent for its processes; returns the faults seen.
    pub fn poll(&mut self) -> Vec<Fault> {
        let mut faults = Vec::new();
        let now = Instant::now();
        // Every host at once: an unreachable one costs one time-out, not one per host.
        let this: &Controller = self;
        let answers: Vec<(String, Result<Vec<ProcessView>, ControllerError>)> = std::thread::scope(|scope| {
            let asks: Vec<_> = this
                .hosts
                .keys()
                .map(|host| {
                    let ask = scope.spawn(move || {
                        let a = this.call(host, "GET", "/api/v1/processes", None)?;
                        if !a.ok() {
                            return Err(ControllerError::Answer { status: a.status, body: a.body.trim().to_owned() });
                        }
                        serde_json::from_str::<Vec<ProcessView>>(&a.body).map_err(ControllerError::ProcessList)
                    });
                    (host.clone(), ask)
                })
                .collect();
            asks.into_iter().map(|(host, ask)| (host, ask.join().unwrap_or(Err(ControllerError::Panicked)))).collect()
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
                    h.last_error = Some(e.to_string());
                    let silent = now.duration_since(h.last_answer);
                    if silent > self.heartbeat_timeout() {
                        let units: Vec<&str> =
                            self.placed.iter().filter(|p| p.host == host).map(|p| p.name.as_str()).collect();
                        faults.push(Fault {
                            unit: units.join(", "),
                            host: host.clone(),
                            key: "HOST_UNREACHABLE",
                            why: format!("its agent has not answered for {:.1} s: {e}", silent.as_secs_f64()),
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
                    if matches!(p.role, Role::Bu(_)) && self.cfg.is_push() && self.bus_lost.insert(p.name.clone()) {
                        // Push has no event manager to give a lost BU's events to another:
                        // RU 0 excludes it, the run goes on, and its events are counted lost.
                        // Started again, it takes no event: it publishes its whole files and
                        // closes its lumi sections with what it lost, so its readers see the run end.
                        let again = restarts < self.cfg.controller.max_restarts;
                        tracing::warn!(
                            unit = %p.name,
                            host = %p.host,
                            "{fault}; under push RU 0 excludes it and the run goes on without it; the events it was \
                             given and did not publish are lost ({}){}",
                            crate::push_loss::BU_LOST,
                            if again {
                                "; it is started again to close its lumi sections, counting them"
                            } else {
                                ""
                            }
                        );
                        if again {
                            crashed.push((p.clone(), fault));
                        }
                    } else if p.role.restartable() && restarts < self.cfg.controller.max_restarts {
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
                faults.push(Fault { why: format!("{}; starting it again failed: {e}", why.why), ..why });
            }
        }
        self.update_mirror();
        faults
    }

    /// Starts a crashed BU, FU or merger again: a BU with `--restart` (it discards its partial
    /// files and lets the EVM say which complete ones to publish) and enabled at once; an FU or
    /// the mergers as they were (they take up where their predecessor stopped).
    fn restart(&mut self, p: &Placed, why: &Fault) -> Result<(), ControllerError> {
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
        self.figure_f64(unit, key) as u64
    }

    /// A figure as the unit last showed it, unrounded (0 if not shown).
    fn figure_f64(&self, unit: &str, key: &str) -> f64 {
        self.last_units.get(unit).and_then(|u| u["figures"][key].as_f64()).unwrap_or(0.0)
    }

    /// The trigger's clock, read from the EVM's figures (its host's clock): how long ago it
    /// began as this host's clock has it, at most `poll` (one look late, the most a clock
    /// between hosts may move it); and the seconds from its beginning to its latest event.
    fn trigger_clock(&self, evm: &str, poll: Duration) -> (Duration, f64) {
        let began = self.figure_f64(evm, "trigger_began_timestamp_seconds");
        let latest = self.figure_f64(evm, "trigger_latest_timestamp_seconds");
        let now = std::time::SystemTime::UNIX_EPOCH.elapsed().map_or(0.0, |d| d.as_secs_f64());
        let ago = if began > 0.0 { (now - began).clamp(0.0, poll.as_secs_f64()) } else { 0.0 };
        (Duration::from_secs_f64(ago), if began > 0.0 { (latest - began).max(0.0) } else { 0.0 })
    }

    /// Events triggered and published, as the units last showed them.
    pub fn progress(&self) -> (u64, u64) {
        let triggered = self.figure(&self.cfg.rus[0].name, "events_triggered_total");
        let built = self.cfg.bus.iter().map(|b| self.figure(&b.name, "events_published_total")).sum();
        (triggered, built)
    }

    /// What `p`'s agent last said of it.
    pub fn view(&self, p: &Placed) -> Option<&ProcessView> {
        self.hosts[&p.host].seen.get(&p.name)
    }

    fn ended(&self, p: &Placed) -> bool {
        self.view(p).is_some_and(|v| v.exit.is_some())
    }

    /// Waits until `wanted` holds for the units' views, polling; fails on a fault or time-out.
    fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        wanted: impl Fn(&Controller) -> bool,
    ) -> Result<(), ControllerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let faults = self.poll();
            if !faults.is_empty() {
                let faults = faults.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                return Err(ControllerError::Faults { what: what.to_owned(), faults });
            }
            if wanted(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ControllerError::NotDone { what: what.to_owned(), timeout });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Ends every process on every agent that answers.
    pub fn abort(&self) {
        for host in self.hosts.keys() {
            if let Err(e) = self.call(host, "DELETE", "/api/v1/processes", None) {
                tracing::warn!(host = %host, "host {host}: could not end its processes: {e}");
            }
        }
    }

    fn unit_state(&self, name: &str) -> Option<String> {
        self.last_units.get(name).and_then(|u| u["state"].as_str().map(str::to_owned))
    }
}

impl Controller {
    /// The controller of a run of `cfg` (the command line applied) on the agents at
    /// `controller.agent_port` of every host, `token` theirs; FUs are started with `fu_args`.
    pub fn new(mut cfg: SystemConfig, token: Option<String>, fu_args: FuArgs) -> Result<Self, ControllerError> {
        let port = cfg.controller.agent_port.ok_or(ControllerError::NoAgentPort)?;
        let output = cfg.run.output.clone().filter(|o| o.is_absolute()).ok_or(ControllerError::RelativeOutput)?;
        // The menu is read by FUs and mergers started elsewhere: name it by its absolute path.
        if let Some(menu) = &cfg.fu.menu {
            let absolute =
                std::fs::canonicalize(menu).map_err(|source| ControllerError::Menu { path: menu.clone(), source })?;
            cfg.fu.menu = Some(absolute);
        }
        let heartbeat_timeout = Duration::from_secs_f64(cfg.controller.heartbeat_timeout_s);
        let mut hosts = BTreeMap::new();
        let placed = placement(&cfg, &output, fu_args);
        for p in &placed {
            if !hosts.contains_key(&p.host) {
                let agent = (p.host.as_str(), port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| ControllerError::Unresolved { host: p.host.clone() })?;
                hosts.insert(
                    p.host.clone(),
                    Host { agent, last_answer: Instant::now(), last_error: None, seen: BTreeMap::new() },
                );
            }
        }
        let run = cfg.run.number;
        Ok(Controller {
            system_text: cfg.to_yaml(),
            cfg,
            output,
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
            bus_lost: std::collections::BTreeSet::new(),
            status: Arc::new(RunStatus::new(run)),
            link_key: LinkKey::generate()?,
        })
    }

    /// The system it runs, with the command line applied.
    pub fn cfg(&self) -> &SystemConfig {
        &self.cfg
    }

    /// The system file it hands to every process.
    pub fn system_text(&self) -> &str {
        &self.system_text
    }

    /// The run's output directory, the same path on every host.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// Every process of the run, in the order they start.
    pub fn placed(&self) -> &[Placed] {
        &self.placed
    }

    /// Every host: its name, its agent's address and why it last did not answer, if it did not.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, SocketAddr, Option<&str>)> {
        self.hosts.iter().map(|(name, h)| (name.as_str(), h.agent, h.last_error.as_deref()))
    }

    /// How many hosts the run spans.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the run has been asked to stop (front ends may then end).
    pub fn stopping(&self) -> bool {
        self.stopping
    }

    /// Every unit's view as last seen, by unit name.
    pub fn last_units(&self) -> &BTreeMap<String, Value> {
        &self.last_units
    }

    /// How many times each process was started again after a crash.
    pub fn restarts(&self) -> &BTreeMap<String, u32> {
        &self.restarts
    }

    /// Push: the BUs lost during the run, by name (their events are counted `BU_LOST`).
    pub fn bus_lost(&self) -> &std::collections::BTreeSet<String> {
        &self.bus_lost
    }

    /// Masking a FED across hosts: the RU that reads it is told through its host's agent
    /// (`POST /api/v1/processes/{ru}/feds/{fed}/mask`), which passes it on to the RU's process.
    pub fn mask_action(&self) -> crate::api::MaskAction {
        // Each RU's name and FEDs, its host's agent, and the run's token.
        let (rus, agents): (Vec<(String, Vec<u16>)>, Vec<SocketAddr>) = self
            .placed
            .iter()
            .filter_map(|p| match p.role {
                Role::Ru(i) => Some(((p.name.clone(), self.cfg.rus[i].feds.clone()), self.hosts[&p.host].agent)),
                _ => None,
            })
            .unzip();
        let (token, timeout) = (self.token.clone(), self.call_timeout());
        Arc::new(move |fed| {
            crate::api::mask_at(fed, "run", &rus, |i| {
                let (name, agent) = (&rus[i].0, agents[i]);
                let path = format!("/api/v1/processes/{name}/feds/{fed}/mask");
                let answer = client::call(agent, "POST", &path, token.as_deref(), None, timeout)
                    .map_err(|e| format!("{name}'s agent at {agent}: {e}"))?;
                if answer.status / 100 != 2 {
                    return Err(format!("{name}: {} {}", answer.status, answer.body.trim()));
                }
                Ok(())
            })
        })
    }

    /// The units' views with their hosts, as the controller's own control server serves them.
    pub fn views(&self) -> Arc<Mutex<Vec<UnitView>>> {
        self.mirror.clone()
    }

    /// The run as a whole, for the dashboard and `/api/v1/run`.
    pub fn status(&self) -> &Arc<RunStatus> {
        &self.status
    }
}

/// Starts the run in order, watches it until every process has ended, and stops it on its
/// limit or Ctrl-C. Returns the faults that ended it early, if any.
pub fn drive(c: &mut Controller, operator: &OperatorStop) -> Result<Vec<Fault>, ControllerError> {
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
    tracing::info!(
        "every unit is configured (Ready), {}: enabling the BUs, the RUs, then the EVM",
        c.cfg.transport.words("of each host's UCX_TLS, else UCX's own choice")
    );
    // Enable in the same order: whoever receives is taking data before whoever sends.
    for p in &units {
        let a = c.call(&p.host, "POST", &format!("/api/v1/processes/{}/enable", p.name), None)?;
        if !a.ok() {
            return Err(ControllerError::Refused {
                doing: format!("enabling {} on {}", p.name, p.host),
                status: a.status,
                body: a.body.trim().to_owned(),
            });
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
    // When every stream of every RU had connected and the trigger started (the EVM says it):
    // the run's seconds count from then.
    let mut started: Option<Instant> = None;
    let mut stuck = StuckWatch::default();
    let poll = Duration::from_secs(1);
    loop {
        // The poll, or less to stop at the run's time limit.
        let left = c
            .cfg
            .run
            .seconds
            .zip(started)
            .filter(|_| !c.stopping)
            .map(|(s, t)| Duration::from_secs_f64(s).saturating_sub(t.elapsed()));
        std::thread::sleep(left.map_or(poll, |l| poll.min(l)));
        let faults = c.poll();
        if !faults.is_empty() {
            return Ok(faults);
        }
        if started.is_none() && c.figure(&evm.name, "run_started") == 1 {
            // When the trigger began, not when this look saw it.
            let now = Instant::now();
            started = Some(now.checked_sub(c.trigger_clock(&evm.name, poll).0).unwrap_or(now));
            stuck.started();
            tracing::info!(
                run = c.cfg.run.number,
                "the run starts: every stream of every RU has connected, {:.1} s after the units were enabled",
                enabled.elapsed().as_secs_f64()
            );
        }
        let views = c.views().lock().unwrap_or_else(|e| e.into_inner()).clone();
        if !c.ended(&evm) {
            let (triggered, built) = c.progress();
            let dt = last.0.elapsed().as_secs_f64().max(1e-3);
            let rate_hz = (triggered.saturating_sub(last.1)) as f64 / dt;
            let requested_hz = c.cfg.unit_rate_hz();
            let missing: Vec<u16> = views.iter().flat_map(|u| u.streams_missing.iter().copied()).collect();
            let waits = start_wait(started.is_some(), &missing).map_or(String::new(), |w| format!("  {w}"));
            tracing::info!(
                triggered,
                built,
                "{:7.1} s  {}triggered {triggered:>10}  built {built:>10}  {:>8.1} kHz{}{waits}",
                started.map_or(0.0, |t| t.elapsed().as_secs_f64()),
                if c.cfg.is_orbit_mode() { "orbits " } else { "" },
                rate_hz / 1e3,
                requested_hz.map_or(String::new(), |r| format!(" of {:.1} kHz", r / 1e3))
            );
            // Nothing built for a while, with events in flight or before the start: say which
            // units hold what, and wait for whom.
            let waiting = stuck.look(triggered, built, started.is_some(), || views.clone());
            if let Some(said) = waiting.as_ref().and_then(|w| w.say.as_ref()) {
                tracing::warn!(run = c.cfg.run.number, "{said}");
            }
            last = (Instant::now(), triggered);
            let elapsed_s = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
            let stopping = c.stopping;
            c.status.update(|v| {
                v.state = match (stopping, started.is_some()) {
                    (true, _) => RunState::Draining,
                    (false, true) => RunState::Running,
                    (false, false) => RunState::Configuring,
                };
                v.started = started.is_some();
                v.streams_missing = missing;
                v.waiting = waiting.map(|w| w.holds);
                v.elapsed_s = elapsed_s;
                v.requested_rate_hz = requested_hz;
                v.achieved_rate_hz = rate_hz;
                // Over the trigger's own time, once it has one: not its drain.
                let trigger_s = c.trigger_clock(&evm.name, poll).1;
                v.mean_rate_hz = triggered as f64 / if trigger_s > 0.0 { trigger_s } else { elapsed_s.max(1e-3) };
                v.lumi_sections_built =
                    c.cfg.bus.iter().map(|b| c.figure(&b.name, "lumi_sections_closed_total")).min().unwrap_or(0);
                v.stop_requested = stopping;
            });
        } else {
            c.status.update(|v| v.state = RunState::Merging);
        }
        let time_up = c.cfg.run.seconds.is_some_and(|s| started.is_some_and(|t| t.elapsed().as_secs_f64() >= s));
        let asked = operator.stops();
        if operator.cut() {
            if asked > 1 {
                return Err(ControllerError::InterruptedTwice);
            }
            return Err(ControllerError::NotStopped { stop_timeout_s: c.cfg.controller.stop_timeout_s });
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
            return Err(ControllerError::NotDrained { timeout: DRAIN_TIMEOUT });
        }
        let farm_deadline = Duration::from_secs(c.cfg.fu.drain_timeout_s) + start_timeout;
        if builder_ended_at.is_some_and(|t| t.elapsed() > farm_deadline) {
            return Err(ControllerError::FarmNotDone { timeout: farm_deadline });
        }
    }
}

/// The last JSON line a process printed.
pub fn report(view: Option<&ProcessView>) -> Option<Value> {
    view?.stdout.as_deref()?.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok())
}
