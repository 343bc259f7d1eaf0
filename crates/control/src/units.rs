//! The units whose figures a process serves, and their views: one unit as `GET /api/v1/units`
//! shows it, and the run's conservation as the figures stand (`GET /api/v1/conservation`).

use crate::figures::FAMILIES;
// Named in the views' documentation, which is also their OpenAPI description.
#[cfg(doc)]
use crate::metrics_text;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
#[cfg(doc)]
use tessera_runtime::stats::SubState;
use tessera_runtime::stats::{FED_SILENT_AFTER, FedError, Throttle, UnitStats};
use utoipa::ToSchema;

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
    /// The value of the `kind` label of its metrics.
    pub(crate) fn label(self) -> &'static str {
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
    /// The FEDs whose streams have not connected yet (RU): the run starts once none is left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams_missing: Vec<u16>,
    /// The FED the RU's oldest waiting event waits for, once it has waited a second or more
    /// (`FED_SILENT_AFTER`; the figure `fed_wait_seconds` says how long, short waits included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for_fed: Option<u16>,
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
            streams_missing: u.stats.streams_missing(),
            waiting_for_fed: u.stats.waiting().filter(|&(_, waited)| waited >= FED_SILENT_AFTER).map(|(fed, _)| fed),
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

/// A run that builds nothing for this long, with events in flight or before its start, says what
/// each unit holds and waits for ([`holds`]), and says it again as often while it lasts.
pub const WAITING_SAID_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// What a run that has not started waits for, in a few words: the streams of the FEDs not yet
/// connected, or (once all are) the start itself; `None` once it has started.
pub fn start_wait(started: bool, streams_missing: &[u16]) -> Option<String> {
    match (started, streams_missing) {
        (true, _) => None,
        (false, []) => Some("waiting for the run to start".to_owned()),
        (false, feds) => Some(format!("waiting for the streams of FEDs {}", tessera_config::format_fed_list(feds))),
    }
}

/// Watches a run for building nothing ([`WAITING_SAID_AFTER`] without a new event, with events
/// in flight or before its start), for whoever runs it to say what holds it.
#[derive(Debug)]
pub struct StuckWatch {
    /// Events built when that figure last grew (or the run started), and when.
    moved: (u64, std::time::Instant),
    /// When it was last said.
    said: Option<std::time::Instant>,
}

/// A run that builds nothing ([`StuckWatch::look`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Stuck {
    /// What each unit holds and waits for ([`holds`]).
    pub holds: String,
    /// The line to say now, if it is time: the first, then one every [`WAITING_SAID_AFTER`].
    pub say: Option<String>,
}

impl Default for StuckWatch {
    fn default() -> Self {
        StuckWatch { moved: (0, std::time::Instant::now()), said: None }
    }
}

impl StuckWatch {
    /// The run started: nothing was built yet, and that counts from now.
    pub fn started(&mut self) {
        self.moved.1 = std::time::Instant::now();
    }

    /// Looks at the run's figures: when it has built nothing for [`WAITING_SAID_AFTER`] with
    /// events in flight (`triggered` past `built`) or before its start, what the units (`views`,
    /// read only then) hold.
    pub fn look(
        &mut self,
        triggered: u64,
        built: u64,
        started: bool,
        views: impl FnOnce() -> Vec<UnitView>,
    ) -> Option<Stuck> {
        let stuck = built == self.moved.0 && (triggered > built || !started);
        if !stuck {
            self.moved = (built, std::time::Instant::now());
            return None;
        }
        let idle = self.moved.1.elapsed();
        if idle < WAITING_SAID_AFTER {
            return None;
        }
        let holds = holds(&views());
        let due = self.said.is_none_or(|t| t.elapsed() >= WAITING_SAID_AFTER);
        let say = due.then(|| {
            self.said = Some(std::time::Instant::now());
            format!(
                "nothing built for {:.0} s ({} events in flight): {holds}",
                idle.as_secs_f64(),
                triggered.saturating_sub(built)
            )
        });
        Some(Stuck { holds, say })
    }
}

/// What each unit holds and waits for, in one line, for a run that builds nothing: the EVM
/// waiting for streams before it starts the run, the FEDs an RU's events wait for, what holds a
/// unit back, and how much it holds. Units with nothing to say are left out.
pub fn holds(units: &[UnitView]) -> String {
    let figure = |u: &UnitView, name: &str| u.figures.get(name).copied().unwrap_or(0.0);
    let mut said = Vec::new();
    for u in units {
        let mut parts = Vec::new();
        if u.kind == UnitKind::Evm && figure(u, "run_started") == 0.0 {
            parts.push("the run has not started: it waits for every stream of every RU".to_owned());
        }
        if !u.streams_missing.is_empty() {
            let feds = tessera_config::format_fed_list(&u.streams_missing);
            parts.push(format!("the streams of FEDs {feds} have not connected"));
        }
        if let Some(fed) = u.waiting_for_fed {
            parts.push(format!("its oldest event waits for FED {fed} ({:.1} s)", figure(u, "fed_wait_seconds")));
        }
        if !u.throttle.is_empty() {
            parts.push(u.throttle.clone());
        }
        // What the figures above say already is not said again.
        let said_above = ["STREAMS_MISSING", "FED_SILENT"];
        for s in u.sub_states.iter().filter(|s| s.key != u.throttle && !said_above.contains(&s.key.as_str())) {
            parts.push(s.key.clone());
        }
        if parts.is_empty() {
            continue;
        }
        let held = match u.kind {
            UnitKind::Ru | UnitKind::Evm => format!("{} events held", figure(u, "events_buffered")),
            UnitKind::Bu => format!(
                "{} events held, {:.1} MB received and not written",
                figure(u, "events_in_flight"),
                figure(u, "store_bytes") / 1e6
            ),
        };
        said.push(format!("{}: {}; {held}", u.name, parts.join(", ")));
    }
    if said.is_empty() { "no unit says it holds back".to_owned() } else { said.join("; ") }
}
