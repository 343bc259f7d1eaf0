//! Tessera's monitoring and control plane: the live figures and states of the units of a
//! process, as Prometheus metrics (`GET /metrics`) and as JSON (`GET /api/v1/units`), the run's
//! conservation as the figures stand (`GET /api/v1/conservation`), the system configuration the
//! process runs (`GET /api/v1/config`), the run as a whole (`GET /api/v1/run`: its state, the
//! trigger rate asked for and achieved, dead time, the mergers' progress; see [`RunStatus`]), and
//! the run's stop (`POST /api/v1/stop`), served over HTTP by [`ControlServer`]. `/metrics` also
//! carries the process's own figures (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`) and `tessera_build_info`.
//!
//! The server binds loopback unless told otherwise; any other address needs a token, which every
//! request must then bring as `Authorization: Bearer <token>` (guarantee 5 of the design).
//! Metric names follow Prometheus conventions: `tessera_` prefix, base units, `_total` on
//! counters, one label `unit` (the unit's name in the system file) and `kind` (`ru`, `evm`,
//! `bu`). Per-FED error counts (`tessera_fed_errors_total`) are written only for the FEDs and
//! reasons that have a count, so that an RU with hundreds of FEDs does not fill the page with
//! zeros: a series that is absent is 0.
//!
//! The crate also runs systems: the whole system in one process ([`system`], [`trigger`]), the
//! system file turned into units ([`plan`]), a run across hosts ([`controller`],
//! [`placement`]), the filter farm behind the BUs ([`farm`]) and the chain's proof ([`chain`]),
//! and the rules that end a run ([`stop`], [`incomplete`]). Its modules import one way down, each only modules before it in this list
//! (crates/cli/tests/modules.rs checks it; the crate root, which declares them and holds the
//! server, is left out):
//!
//! Modules, bottom up: exposition, process, report, run, client, agent, api, stop, placement, controller, system, trigger, plan, incomplete, farm, chain

#![warn(missing_docs)]

pub mod agent;
mod api;
pub mod chain;
pub mod client;
pub mod controller;
mod exposition;
pub mod farm;
pub mod incomplete;
pub mod placement;
pub mod plan;
mod process;
pub mod report;
mod run;
pub mod stop;
pub mod system;
pub mod trigger;

pub use process::{GIT_HASH, VERSION};
pub use run::{RunState, RunStatus, RunView};

pub use api::openapi;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use exposition::Kind;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use tessera_runtime::state::UnitState;
use tessera_runtime::stats::{FedError, SubState, Throttle, UnitStats};
use tokio::sync::oneshot;
use utoipa::ToSchema;

/// The live dashboard, served at `/`: it reads `/api/v1/units`, `/api/v1/conservation` and
/// `/api/v1/run` every second, and its Stop button posts `/api/v1/stop`.
pub const DASHBOARD: &str = include_str!("../dashboard.html");

/// What kind of unit a figure belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    /// A readout unit.
    Ru,
    /// The readout unit that also hosts the event manager.
    Evm,
    /// A builder unit.
    Bu,
}

impl UnitKind {
    fn label(self) -> &'static str {
        match self {
            UnitKind::Ru => "ru",
            UnitKind::Evm => "evm",
            UnitKind::Bu => "bu",
        }
    }
}

/// One unit whose figures are served.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Its name in the system file.
    pub name: String,
    /// What it is.
    pub kind: UnitKind,
    /// Its live figures.
    pub stats: Arc<UnitStats>,
}

/// A metric family: name, type, help, and how to read it from a unit's figures (a figure a
/// kind of unit does not keep reads 0).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    read: fn(&UnitStats) -> f64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "tessera_fragments_total",
        kind: "counter",
        help: "FED fragments received.",
        read: |s| s.fragments.get() as f64,
    },
    Family {
        name: "tessera_fragment_bytes_total",
        kind: "counter",
        help: "Bytes of FED fragments received, header to trailer.",
        read: |s| s.fragment_bytes.get() as f64,
    },
    Family {
        name: "tessera_corrupt_fragments_total",
        kind: "counter",
        help: "Fragments that failed a check and were passed on flagged.",
        read: |s| s.corrupt_fragments.get() as f64,
    },
    Family {
        name: "tessera_broken_streams_total",
        kind: "counter",
        help: "FEROL streams that could not be read on.",
        read: |s| s.broken_streams.get() as f64,
    },
    Family {
        name: "tessera_events_buffered",
        kind: "gauge",
        help: "Events whose fragments an RU holds.",
        read: |s| s.events_buffered.get() as f64,
    },
    Family {
        name: "tessera_receive_chunks_used",
        kind: "gauge",
        help: "Receive chunks of an RU holding fragments.",
        read: |s| s.chunks_used.get() as f64,
    },
    Family {
        name: "tessera_receive_chunks",
        kind: "gauge",
        help: "Receive chunks of an RU in all.",
        read: |s| s.chunks_total.get() as f64,
    },
    Family {
        name: "tessera_events_triggered_total",
        kind: "counter",
        help: "Events triggered (EVM).",
        read: |s| s.triggered.get() as f64,
    },
    Family {
        name: "tessera_events_committed_total",
        kind: "counter",
        help: "Events committed (EVM).",
        read: |s| s.committed.get() as f64,
    },
    Family {
        name: "tessera_events_reassigned_total",
        kind: "counter",
        help: "Events reassigned after a BU was lost (EVM).",
        read: |s| s.reassigned.get() as f64,
    },
    Family {
        name: "tessera_events_lost_lumi_section_closed_total",
        kind: "counter",
        help: "Events lost because they came after their lumi section had closed (EVM, LUMI_SECTION_CLOSED).",
        read: |s| s.lost_lumi_closed.get() as f64,
    },
    Family {
        name: "tessera_events_built_total",
        kind: "counter",
        help: "Events built (BU).",
        read: |s| s.events_built.get() as f64,
    },
    Family {
        name: "tessera_events_incomplete_total",
        kind: "counter",
        help: "Events built with a part missing (BU).",
        read: |s| s.incomplete_events.get() as f64,
    },
    Family {
        name: "tessera_events_published_total",
        kind: "counter",
        help: "Events published in raw files (BU).",
        read: |s| s.events_published.get() as f64,
    },
    Family {
        name: "tessera_files_published_total",
        kind: "counter",
        help: "Raw files published (BU).",
        read: |s| s.files_published.get() as f64,
    },
    Family {
        name: "tessera_published_bytes_total",
        kind: "counter",
        help: "Bytes of raw files published (BU).",
        read: |s| s.bytes_published.get() as f64,
    },
    Family {
        name: "tessera_store_bytes",
        kind: "gauge",
        help: "Bytes of received data a BU holds until written.",
        read: |s| s.store_bytes.get() as f64,
    },
    Family {
        name: "tessera_events_in_flight",
        kind: "gauge",
        help: "Events a BU holds, from request to publication.",
        read: |s| s.events_in_flight.get() as f64,
    },
    Family {
        name: "tessera_ramdisk_used_ratio",
        kind: "gauge",
        help: "How full the file system of a BU's run directory is.",
        read: |s| s.ramdisk_used_percent.get() as f64 / 100.0,
    },
    Family {
        name: "tessera_fu_processes",
        kind: "gauge",
        help: "FU processes behind a BU whose resource summaries are live.",
        read: |s| s.fu_processes.get() as f64,
    },
    Family {
        name: "tessera_fu_free_slots",
        kind: "gauge",
        help: "Free processing slots of the FUs behind a BU.",
        read: |s| s.fu_free_slots.get() as f64,
    },
    Family {
        name: "tessera_fu_queued_lumi_sections",
        kind: "gauge",
        help: "Lumi sections the FUs behind a BU lag behind, at the most lagging one.",
        read: |s| s.fu_queued_lumi_sections.get() as f64,
    },
    Family {
        name: "tessera_fu_output_bytes_per_second",
        kind: "gauge",
        help: "Bytes per second the FUs behind a BU write into their outputs.",
        read: |s| s.fu_output_bytes_per_s.get() as f64,
    },
    Family {
        name: "tessera_fu_cpu_seconds_total",
        kind: "counter",
        help: "CPU time of the FU processes behind a BU, each as it last said in its resource summary.",
        read: |s| s.fu_cpu_ms.get() as f64 / 1e3,
    },
    Family {
        name: "tessera_lumi_section",
        kind: "gauge",
        help: "The highest lumi section a BU has written a file of.",
        read: |s| s.lumi_section.get() as f64,
    },
    Family {
        name: "tessera_lumi_sections_closed_total",
        kind: "counter",
        help: "Lumi sections a BU has closed (end-of-lumi record written).",
        read: |s| s.lumi_sections_closed.get() as f64,
    },
    Family {
        name: "tessera_last_closed_lumi_section",
        kind: "gauge",
        help: "The highest lumi section a BU has closed.",
        read: |s| s.last_closed_lumi_section.get() as f64,
    },
    Family {
        name: "tessera_last_closed_lumi_section_events",
        kind: "gauge",
        help: "Events a BU published in the highest lumi section it has closed.",
        read: |s| s.last_closed_lumi_section_events.get() as f64,
    },
    Family {
        name: "tessera_data_messages_total",
        kind: "counter",
        help: "Data messages sent or received.",
        read: |s| s.data_messages.get() as f64,
    },
    Family {
        name: "tessera_control_messages_total",
        kind: "counter",
        help: "Control messages sent.",
        read: |s| s.control_messages.get() as f64,
    },
    Family {
        name: "tessera_links_refused_total",
        kind: "counter",
        help: "Protocol connections refused before their peer reached the unit (no valid link opening in time).",
        read: |s| s.links_refused.get() as f64,
    },
    Family {
        name: "tessera_loop_cpu_seconds_total",
        kind: "counter",
        help: "CPU time of the unit's loop thread.",
        read: |s| s.loop_cpu_ns.get() as f64 / 1e9,
    },
    Family {
        name: "tessera_loop_heartbeats_total",
        kind: "counter",
        help: "Beats of the unit's loop; a count that stops moving means a stalled unit.",
        read: |s| s.heartbeats.get() as f64,
    },
    Family {
        name: "tessera_problems_total",
        kind: "counter",
        help: "Problems the unit reported.",
        read: |s| s.problem_count() as f64,
    },
    Family {
        name: "tessera_unit_failed",
        kind: "gauge",
        help: "1 if the unit ended by an error.",
        read: |s| f64::from(u8::from(s.failed())),
    },
];

/// Escapes a label value for the OpenMetrics text format (its encoder writes values as given).
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The units' figures in the OpenMetrics text format.
pub fn metrics_text(units: &[Unit]) -> String {
    metrics_from_views(&unit_views(units))
}

/// The whole `/metrics` page: the units' figures ([`metrics_from_views`]), the run's
/// conservation so far (`tessera_conservation_holds`, where the EVM's figures are), the run's
/// (`tessera_run_*`, with a `run`), the process's and the build's.
pub fn metrics_page(units: &[UnitView], run: Option<&RunView>) -> String {
    let mut families = unit_families(units);
    let conservation = conservation_from_views(units);
    let mut holds = exposition::Family::new(
        "tessera_conservation_holds",
        Kind::Gauge,
        "1 while every event published or lost was triggered (written where the EVM's figures are).",
    );
    if conservation.evm_here {
        holds.sample(&[], f64::from(u8::from(conservation.holds_so_far)));
    }
    families.push(holds);
    run::run_metrics(&mut families, run);
    process::process_metrics(&mut families);
    exposition::encode(families)
}

/// The OpenMetrics text of units as their views show them: the same text for units of this
/// process and for units that a controller gathers from other hosts.
pub fn metrics_from_views(units: &[UnitView]) -> String {
    exposition::encode(unit_families(units))
}

/// The units' metric families.
fn unit_families(units: &[UnitView]) -> Vec<exposition::Family> {
    let mut families = Vec::new();
    let host = |u: &UnitView| u.host.as_deref().map(label);
    // The labels naming a unit, then `more`.
    let who = |u: &UnitView, more: &[(&'static str, String)]| {
        let mut labels = vec![("unit", label(&u.name)), ("kind", u.kind.label().to_owned())];
        labels.extend(host(u).map(|h| ("host", h)));
        labels.extend(more.iter().cloned());
        labels
    };
    let add = |family: &mut exposition::Family, labels: Vec<(&'static str, String)>, value: f64| {
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        family.sample(&labels, value);
    };
    let live = || units.iter().filter(|u| !u.stale);
    for spec in FAMILIES {
        let kind = if spec.kind == "counter" { Kind::Counter } else { Kind::Gauge };
        let mut family = exposition::Family::new(spec.name, kind, spec.help);
        for u in live() {
            let value = u.figures.get(spec.name.trim_start_matches("tessera_")).copied().unwrap_or(0.0);
            add(&mut family, who(u, &[]), value);
        }
        families.push(family);
    }
    let mut family = exposition::Family::new("tessera_unit_state", Kind::Gauge, "1 for the state the unit is in.");
    for u in live() {
        for state in UnitState::ALL {
            let on = f64::from(u8::from(u.state == state.name()));
            add(&mut family, who(u, &[("state", state.name().to_owned())]), on);
        }
    }
    families.push(family);
    let mut family =
        exposition::Family::new("tessera_throttled", Kind::Gauge, "1 while the unit holds back for this reason.");
    for u in live() {
        for reason in Throttle::REASONS {
            let on = f64::from(u8::from(u.throttle == reason.key()));
            add(&mut family, who(u, &[("reason", reason.key().to_owned())]), on);
        }
    }
    families.push(family);
    let help = format!(
        "1 while the unit is in this sub-state (its cause seen within the last {} s).",
        tessera_runtime::stats::SUB_STATE_HOLD.as_secs()
    );
    let mut family = exposition::Family::new("tessera_sub_state", Kind::Gauge, &help);
    for u in live() {
        for sub_state in SubState::ALL {
            let on = f64::from(u8::from(u.sub_states.iter().any(|s| s.key == sub_state.key())));
            add(&mut family, who(u, &[("reason", sub_state.key().to_owned())]), on);
        }
    }
    families.push(family);
    let mut family = exposition::Family::new(
        "tessera_fed_errors_total",
        Kind::Counter,
        "Fragments of a FED in error, by reason (only FEDs and reasons with a count are written).",
    );
    for u in live() {
        for f in &u.fed_errors {
            for (reason, n) in f.errors.iter().filter(|(_, n)| **n > 0) {
                add(&mut family, who(u, &[("fed", f.fed.to_string()), ("reason", label(reason))]), *n as f64);
            }
        }
    }
    families.push(family);
    let mut family = exposition::Family::new(
        "tessera_unit_reachable",
        Kind::Gauge,
        "0 while the unit's host does not answer (its figures are then left out).",
    );
    for u in units {
        add(&mut family, who(u, &[]), f64::from(u8::from(!u.stale)));
    }
    families.push(family);
    families
}

/// A sub-state as the API shows it: its stable key and what it means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubStateView {
    /// The stable key (a [`Throttle`] or [`SubState`] key).
    pub key: String,
    /// What it means, in one sentence.
    pub sentence: String,
}

/// One FED's error counts as the API shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FedErrorsView {
    /// The FED.
    pub fed: u16,
    /// Fragments in error by reason key (every reason, 0 included).
    pub errors: std::collections::BTreeMap<String, u64>,
}

/// One unit as `GET /api/v1/units` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UnitView {
    /// Its name.
    pub name: String,
    /// What it is.
    pub kind: UnitKind,
    /// The host it runs on, when a controller gathers units from several hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// True when its host no longer answers: the view is the last one seen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// Its state (`Halted`, `Configuring`, `Ready`, `Enabled`, `Draining`, `Failed`).
    pub state: String,
    /// Why it holds back, or "" when it does not.
    pub throttle: String,
    /// Its sub-states with their sentences: why it holds back (as `throttle`), then the
    /// [`SubState`]s whose cause was seen within the last [`SUB_STATE_HOLD`] (empty when all is
    /// well).
    ///
    /// [`SUB_STATE_HOLD`]: tessera_runtime::stats::SUB_STATE_HOLD
    pub sub_states: Vec<SubStateView>,
    /// Error counts of the FEDs that have any (RU), in the RU's order.
    pub fed_errors: Vec<FedErrorsView>,
    /// Whether it ended by an error.
    pub failed: bool,
    /// Every figure of [`metrics_text`], by metric name without the `tessera_` prefix.
    pub figures: std::collections::BTreeMap<String, f64>,
    /// The first problems it reported.
    pub problems: Vec<String>,
}

/// The units as JSON values. They are read last to first: BUs come after the EVM in every list
/// of units, and an event is triggered before it is published, so that views read in this order
/// never show more published than triggered in a run that is right.
pub fn unit_views(units: &[Unit]) -> Vec<UnitView> {
    let mut views: Vec<UnitView> = units
        .iter()
        .rev()
        .map(|u| UnitView {
            name: u.name.clone(),
            kind: u.kind,
            host: None,
            stale: false,
            state: u.stats.state().name().to_owned(),
            throttle: u.stats.throttle().key().to_owned(),
            sub_states: sub_states(&u.stats),
            fed_errors: u
                .stats
                .fed_errors
                .with_errors()
                .into_iter()
                .map(|(fed, counts)| FedErrorsView {
                    fed,
                    errors: FedError::ALL.iter().map(|r| r.key().to_owned()).zip(counts).collect(),
                })
                .collect(),
            failed: u.stats.failed(),
            figures: FAMILIES
                .iter()
                .map(|f| (f.name.trim_start_matches("tessera_").to_owned(), (f.read)(&u.stats)))
                .collect(),
            problems: u.stats.problems().0,
        })
        .collect();
    views.reverse();
    views
}

/// A unit's sub-states: why it holds back, then the others seen lately.
fn sub_states(stats: &UnitStats) -> Vec<SubStateView> {
    let throttle = stats.throttle();
    let holds_back = (throttle != Throttle::None)
        .then(|| SubStateView { key: throttle.key().into(), sentence: throttle.sentence().into() });
    holds_back
        .into_iter()
        .chain(
            stats.sub_states().into_iter().map(|s| SubStateView { key: s.key().into(), sentence: s.sentence().into() }),
        )
        .collect()
}

/// The run's conservation as the figures of this process's units stand: every event triggered
/// is published, counted lost, or still in flight. It only truly holds at the end of the run,
/// when nothing is in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ConservationView {
    /// Whether this process has the EVM, which counts the events triggered: without it the
    /// figures say nothing of the run.
    pub evm_here: bool,
    /// Events triggered (EVM).
    pub triggered: u64,
    /// Events published in BU files (the BUs of this process).
    pub published: u64,
    /// Events lost, by reason key (EVM).
    pub lost: std::collections::BTreeMap<&'static str, u64>,
    /// Events triggered and neither published nor lost yet: `triggered - published - lost`.
    pub in_flight: u64,
    /// Whether published + lost <= triggered: nothing was published or lost that was not
    /// triggered.
    pub holds_so_far: bool,
    /// What the figures say, in one sentence.
    pub sentence: String,
}

/// The conservation of the run as the figures of `units` stand.
pub fn conservation(units: &[Unit]) -> ConservationView {
    conservation_from_views(&unit_views(units))
}

/// The conservation of the run as the views of its units stand (see [`unit_views`] for the
/// order in which a process's figures are read).
pub fn conservation_from_views(units: &[UnitView]) -> ConservationView {
    let figure = |u: &UnitView, name: &str| u.figures.get(name).copied().unwrap_or(0.0) as u64;
    let published: u64 =
        units.iter().filter(|u| u.kind == UnitKind::Bu).map(|u| figure(u, "events_published_total")).sum();
    let evm = units.iter().find(|u| u.kind == UnitKind::Evm);
    let closed = evm.map_or(0, |u| figure(u, "events_lost_lumi_section_closed_total"));
    let triggered = evm.map_or(0, |u| figure(u, "events_triggered_total"));
    let lost: std::collections::BTreeMap<&'static str, u64> =
        [("LUMI_SECTION_CLOSED", closed)].into_iter().filter(|(_, n)| *n > 0).collect();
    let accounted = published + closed;
    let holds_so_far = accounted <= triggered;
    let in_flight = triggered.saturating_sub(accounted);
    let sentence = if evm.is_none() {
        "This process has no EVM: the run's conservation is checked where the EVM runs.".to_owned()
    } else if !holds_so_far {
        format!("Does not hold: {accounted} events published or lost, only {triggered} triggered.")
    } else if in_flight > 0 {
        format!("Holds so far: {in_flight} events in flight; it holds for the run once none is left at its end.")
    } else {
        "Holds: every event triggered is published or counted lost.".to_owned()
    };
    ConservationView { evm_here: evm.is_some(), triggered, published, lost, in_flight, holds_so_far, sentence }
}

/// Watches units' loop heartbeats ([`UnitStats::heartbeats`]): a unit whose count has not
/// moved for longer than the time-out is stalled, alive or not.
#[derive(Debug)]
pub struct HeartbeatWatch {
    timeout: std::time::Duration,
    /// By unit: the count last seen and when it last moved.
    last: std::collections::BTreeMap<String, (u64, std::time::Instant)>,
}

impl HeartbeatWatch {
    /// A watch that calls a unit stalled after `timeout` without a beat.
    pub fn new(timeout: std::time::Duration) -> Self {
        HeartbeatWatch { timeout, last: std::collections::BTreeMap::new() }
    }

    /// Takes `unit`'s count seen at `now`; how long it has not moved if that is longer than
    /// the time-out (it is stalled), else `None`. Only units whose loop runs should be shown:
    /// a unit that has ended beats no more.
    pub fn check(&mut self, unit: &str, count: u64, now: std::time::Instant) -> Option<std::time::Duration> {
        let (last, moved) = self.last.entry(unit.to_owned()).or_insert((count, now));
        if *last != count {
            (*last, *moved) = (count, now);
            return None;
        }
        let still = now.duration_since(*moved);
        (still > self.timeout).then_some(still)
    }

    /// Forgets `unit`'s count: its loop is not running (a restarted unit still configuring);
    /// watching starts again at its next count.
    pub fn forget(&mut self, unit: &str) {
        self.last.remove(unit);
    }

    /// Whether `unit` has been seen beating at least once.
    pub fn knows(&self, unit: &str) -> bool {
        self.last.contains_key(unit)
    }
}

/// Where and how the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlConfig {
    /// Address to bind; port 0 takes any free port.
    pub listen: SocketAddr,
    /// The token every request must bring; required unless `listen` is a loopback address.
    pub token: Option<String>,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A non-loopback address without a token.
    #[error("{0}: a control address other than loopback needs a token")]
    TokenRequired(SocketAddr),
    /// An agent without a token, on any address.
    #[error("{0}: an agent needs a token on every address, loopback included (it starts processes as its user)")]
    AgentToken(SocketAddr),
    /// The OpenAPI document could not be written as JSON.
    #[error("cannot write the OpenAPI document: {0}")]
    OpenApi(String),
    /// Binding failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// The HTTP server of a process's units; it stops when dropped.
#[derive(Debug)]
pub struct ControlServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// A run-control action (`POST /api/v1/stop`, `POST /api/v1/enable`): what it did, in a
/// sentence (`Ok`), or why this process cannot do it (`Err`).
pub type Action = Arc<dyn Fn() -> Result<String, ActionRefused> + Send + Sync>;

/// Why a process cannot carry out a run-control action (answered with 409 and this sentence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ActionRefused {
    /// An RU's process was asked to stop the run: only the EVM stops the trigger.
    #[error("an RU does not stop the run: ask the EVM's process")]
    RuCannotStop,
    /// A BU's process was asked to stop the run: only the EVM stops the trigger.
    #[error("a BU does not stop the run: ask the EVM's process")]
    BuCannotStop,
}

/// Where the served units' views come from.
#[derive(Clone)]
pub enum UnitSource {
    /// Units of this process, read live.
    Live(Arc<Vec<Unit>>),
    /// Views gathered elsewhere (a controller's, from its agents), read when asked.
    Views(Arc<dyn Fn() -> Vec<UnitView> + Send + Sync>),
}

impl UnitSource {
    fn views(&self) -> Vec<UnitView> {
        match self {
            UnitSource::Live(units) => unit_views(units),
            UnitSource::Views(views) => views(),
        }
    }
}

/// What a control server serves.
#[derive(Clone)]
pub struct Served {
    /// The units.
    pub units: UnitSource,
    /// What `POST /api/v1/stop` does: stop the trigger and drain (none: refused).
    pub stop: Option<Action>,
    /// What `POST /api/v1/enable` does: let units held in Ready take data (none: refused).
    pub enable: Option<Action>,
    /// The system configuration, as YAML, for `GET /api/v1/config` (none: 404).
    pub system: Option<String>,
    /// The run as a whole, for `GET /api/v1/run` and the `tessera_run_*` metrics (none: 404,
    /// and no samples): what runs a whole run (`tessera run`, a controller) has one.
    pub run: Option<Arc<RunStatus>>,
}

impl Served {
    /// Units of this process, with no action and no configuration.
    pub fn live(units: Vec<Unit>) -> Self {
        Served { units: UnitSource::Live(Arc::new(units)), stop: None, enable: None, system: None, run: None }
    }
}

#[derive(Clone)]
struct Shared {
    units: UnitSource,
    token: Option<Arc<str>>,
    stop: Option<Action>,
    enable: Option<Action>,
    system: Option<Arc<str>>,
    run: Option<Arc<RunStatus>>,
    /// The OpenAPI document of the routes, generated from the handlers.
    openapi: Arc<str>,
}

impl ControlServer {
    /// Binds `config.listen` and serves what `served` says on a thread of its own.
    pub fn start(config: &ControlConfig, served: Served) -> Result<ControlServer, ControlError> {
        token_required(config.listen, config.token.as_deref())?;
        let shared = Shared {
            units: served.units,
            token: config.token.as_deref().map(Arc::from),
            stop: served.stop,
            enable: served.enable,
            system: served.system.map(Arc::from),
            run: served.run,
            openapi: Arc::from(""),
        };
        let (router, api) = api::api_router().split_for_parts();
        let openapi = api.to_pretty_json().map_err(|e| ControlError::OpenApi(e.to_string()))?;
        let shared = Shared { openapi: Arc::from(openapi), ..shared };
        let app = router.layer(middleware::from_fn_with_state(shared.clone(), require_token)).with_state(shared);
        let (addr, stop, thread) = serve(config.listen, app)?;
        Ok(ControlServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// Writes the address the server listens on into `path` (written whole, then renamed), for
    /// a supervisor that started this process with port 0.
    pub fn write_address(&self, path: &std::path::Path) -> std::io::Result<()> {
        let partial = path.with_extension("partial");
        std::fs::write(&partial, format!("{}\n", self.addr))?;
        std::fs::rename(partial, path)
    }

    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A non-loopback address needs a token (guarantee 5 of the design).
pub(crate) fn token_required(listen: SocketAddr, token: Option<&str>) -> Result<(), ControlError> {
    if !listen.ip().is_loopback() && token.is_none_or(str::is_empty) {
        return Err(ControlError::TokenRequired(listen));
    }
    Ok(())
}

/// Binds `listen` and serves `app` on a thread of its own, until the sender is used or dropped.
pub(crate) fn serve(
    listen: SocketAddr,
    app: Router,
) -> Result<(SocketAddr, oneshot::Sender<()>, JoinHandle<()>), ControlError> {
    let listener = std::net::TcpListener::bind(listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| ControlError::Bind { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| ControlError::Bind { addr: listen, source })?;
    let (stop, stopped) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            // Blocking calls (an agent asking its units) get threads of their own.
            let runtime =
                match tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(16).build() {
                    Ok(rt) => rt,
                    Err(e) => return eprintln!("control server: cannot start its runtime: {e}"),
                };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
                if let Err(e) = serve.await {
                    eprintln!("control server: {e}");
                }
            });
        })
        .map_err(|source| ControlError::Bind { addr, source })?;
    Ok((addr, stop, thread))
}

/// The refusal of a request that does not bring `token`, or `None` if it may go on.
pub(crate) fn check_token(token: Option<&str>, request: &Request) -> Option<Response> {
    if let Some(token) = token {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        // A browser opening the dashboard cannot send a header: the page takes `?token=`.
        let in_query = request.uri().path() == "/"
            && request.uri().query().is_some_and(|q| q.split('&').any(|kv| kv.strip_prefix("token=") == Some(token)));
        if given != Some(token) && !in_query {
            return Some(
                (StatusCode::UNAUTHORIZED, "a token is required: Authorization: Bearer <token>\n").into_response(),
            );
        }
    }
    None
}

async fn require_token(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    match check_token(shared.token.as_deref(), &request) {
        Some(refusal) => refusal,
        None => next.run(request).await,
    }
}
