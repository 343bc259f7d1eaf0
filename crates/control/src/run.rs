//! The run as a whole, as the dashboard, `GET /api/v1/run` and the `tessera_run_*` metrics show
//! it: its number and state, how long it has run, the trigger rate asked for and the one
//! achieved, the dead time and what caused it, and how far the mergers have got. Whoever runs
//! the run ([`RunStatus::update`], once a second) fills it; the server only reads it.

use crate::exposition::{Family, Kind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Where the run is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum RunState {
    /// The units are being started and configured; no trigger yet.
    #[default]
    Configuring,
    /// The trigger runs and events are built.
    Running,
    /// The trigger has stopped (its limit, a stop, or the front ends' end): the events in
    /// flight are being built and the lumi sections closed.
    Draining,
    /// The builder has ended; the filter farm and the mergers finish the last lumi sections.
    Merging,
    /// The run ended cleanly: every unit, FU and merger finished.
    Ended,
    /// The run ended early on a failure (a unit failed, a host stopped answering, a time-out).
    Aborted,
}

impl RunState {
    /// Every state, in the order of a run's life.
    pub const ALL: [RunState; 6] = [
        RunState::Configuring,
        RunState::Running,
        RunState::Draining,
        RunState::Merging,
        RunState::Ended,
        RunState::Aborted,
    ];

    /// Its name, as the API and the metrics give it.
    pub fn name(self) -> &'static str {
        match self {
            RunState::Configuring => "Configuring",
            RunState::Running => "Running",
            RunState::Draining => "Draining",
            RunState::Merging => "Merging",
            RunState::Ended => "Ended",
            RunState::Aborted => "Aborted",
        }
    }
}

/// The run as `GET /api/v1/run` shows it. Rates are of the trigger (events triggered at the
/// EVM), in Hz; fractions are of wall time, from 0 to 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    /// The run number.
    pub run: u32,
    /// Where the run is in its life.
    pub state: RunState,
    /// Seconds since the trigger started (0 while configuring), frozen at the run's end.
    pub elapsed_s: f64,
    /// The trigger rate the system file asks for; `None` when the front ends run free (as fast
    /// as the event builder takes their data).
    pub requested_rate_hz: Option<f64>,
    /// The trigger rate over the last second.
    pub achieved_rate_hz: f64,
    /// The trigger rate over the whole run: events triggered over `elapsed_s`.
    pub mean_rate_hz: f64,
    /// The share of the last second during which the trigger was held back (dead time).
    pub dead_time_fraction: f64,
    /// The share of the last second during which the trigger was held back, by reason key (a
    /// [`tessera_runtime::stats::Throttle`] key such as `RU_BUFFERS_FULL`, or `RU_INPUT`,
    /// `FRONT_END_SLOW`, `MACHINE_OVERLOADED` and `WAITING_FOR_FED_<id>` of [`crate::trigger`]);
    /// reasons of the same second share it, so that they add up to `dead_time_fraction`.
    pub dead_time_by_reason: BTreeMap<String, f64>,
    /// Why the trigger is short of the requested rate over the run so far, in one sentence,
    /// while it is below nine tenths of it; `None` otherwise. The runtime's trigger account
    /// (`crate::trigger`) writes it, the same sentence as the run's summary.
    pub bottleneck: Option<String>,
    /// Lumi sections every BU has closed (end-of-lumi record written; the fewest any BU has):
    /// what the mergers can merge.
    pub lumi_sections_built: u64,
    /// Lumi sections the mergers have finished (the final files of every stream written).
    pub lumi_sections_merged: u64,
    /// Whether a stop was asked for (`POST /api/v1/stop`, Ctrl-C) and is being carried out.
    pub stop_requested: bool,
    /// Whether the run has started: the trigger starts once every stream of every RU has
    /// connected (`elapsed_s` counts from then).
    #[serde(default)]
    pub started: bool,
    /// The FEDs whose streams have not connected yet, over all RUs.
    #[serde(default)]
    pub streams_missing: Vec<u16>,
    /// When the run has built nothing for a while with events in flight (or has not started):
    /// what each unit holds and waits for, in a line; `None` otherwise.
    #[serde(default)]
    pub waiting: Option<String>,
    /// The machine over the last second when it was overloaded (its cores busy, more threads
    /// ready to run than they run), in a few words; `None` otherwise.
    #[serde(default)]
    pub machine_overloaded: Option<String>,
}

/// The run's view, shared between whoever runs the run (writes it) and the control server
/// (reads it).
#[derive(Debug, Default)]
pub struct RunStatus(Mutex<RunView>);

impl RunStatus {
    /// The status of run `run`, configuring, nothing measured yet.
    pub fn new(run: u32) -> Self {
        RunStatus(Mutex::new(RunView { run, ..RunView::default() }))
    }

    /// Changes the view with `change`.
    pub fn update(&self, change: impl FnOnce(&mut RunView)) {
        change(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// The view as it stands.
    pub fn view(&self) -> RunView {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// A gauge of the run: name, help, and how to read it from the view (`None`: no sample).
struct RunGauge {
    name: &'static str,
    help: &'static str,
    read: fn(&RunView) -> Option<f64>,
}

const RUN_GAUGES: &[RunGauge] = &[
    RunGauge {
        name: "tessera_run_elapsed_seconds",
        help: "Seconds since the trigger started.",
        read: |v| Some(v.elapsed_s),
    },
    RunGauge {
        name: "tessera_trigger_rate_requested_hz",
        help: "The trigger rate the system asks for (absent when the front ends run free).",
        read: |v| v.requested_rate_hz,
    },
    RunGauge {
        name: "tessera_trigger_rate_hz",
        help: "The trigger rate over the last second.",
        read: |v| Some(v.achieved_rate_hz),
    },
    RunGauge {
        name: "tessera_trigger_rate_mean_hz",
        help: "The trigger rate over the run.",
        read: |v| Some(v.mean_rate_hz),
    },
    RunGauge {
        name: "tessera_dead_time_ratio",
        help: "The share of the last second during which the trigger was held back.",
        read: |v| Some(v.dead_time_fraction),
    },
    RunGauge {
        name: "tessera_lumi_sections_built",
        help: "Lumi sections every BU has closed (the fewest any BU has): what the mergers can merge.",
        read: |v| Some(v.lumi_sections_built as f64),
    },
    RunGauge {
        name: "tessera_lumi_sections_merged",
        help: "Lumi sections the mergers have finished (every stream's final file written).",
        read: |v| Some(v.lumi_sections_merged as f64),
    },
];

/// The run's metric families: their help and type always, their samples when there is a run.
pub(crate) fn run_metrics(families: &mut Vec<Family>, run: Option<&RunView>) {
    let run_number = run.map(|v| v.run.to_string()).unwrap_or_default();
    let mut info = Family::new("tessera_run_info", Kind::Gauge, "1 for the run and the state it is in.");
    if let Some(v) = run {
        for state in RunState::ALL {
            info.sample(&[("run", &run_number), ("state", state.name())], f64::from(u8::from(v.state == state)));
        }
    }
    families.push(info);
    for gauge in RUN_GAUGES {
        let mut family = Family::new(gauge.name, Kind::Gauge, gauge.help);
        if let Some(v) = run
            && let Some(value) = (gauge.read)(v)
        {
            family.sample(&[("run", &run_number)], value);
        }
        families.push(family);
    }
    let mut by_reason = Family::new(
        "tessera_dead_time_by_reason_ratio",
        Kind::Gauge,
        "The share of the last second during which the trigger was held back for this reason.",
    );
    if let Some(v) = run {
        for (reason, share) in &v.dead_time_by_reason {
            by_reason.sample(&[("run", &run_number), ("reason", &crate::exposition::label(reason))], *share);
        }
    }
    families.push(by_reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(requested: Option<f64>, achieved: f64) -> RunView {
        RunView {
            run: 7,
            state: RunState::Running,
            requested_rate_hz: requested,
            achieved_rate_hz: achieved,
            ..RunView::default()
        }
    }

    #[test]
    fn the_view_reads_back_as_written_in_json_with_the_state_by_name() {
        let mut view = running(Some(100.0), 80.0);
        view.dead_time_by_reason.insert("NOT_ENOUGH_FUS".into(), 0.2);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["state"], "Running");
        assert_eq!(serde_json::from_value::<RunView>(json).unwrap(), view);
        assert_eq!(serde_json::to_value(running(None, 1.0)).unwrap()["requested_rate_hz"], serde_json::Value::Null);
    }

    #[test]
    fn run_metrics_have_their_families_always_and_samples_with_a_run() {
        let page = |run: Option<&RunView>| {
            let mut families = Vec::new();
            run_metrics(&mut families, run);
            crate::exposition::encode(families)
        };
        let none = page(None);
        assert!(none.contains("# TYPE tessera_trigger_rate_hz gauge"), "{none}");
        assert!(!none.lines().any(|l| !l.starts_with('#')), "{none}");
        let mut view = running(None, 80.0);
        view.dead_time_by_reason.insert("NOT_ENOUGH_FUS".into(), 0.25);
        view.lumi_sections_merged = 3;
        let text = page(Some(&view));
        assert!(text.contains("tessera_run_info{run=\"7\",state=\"Running\"} 1\n"), "{text}");
        assert!(text.contains("tessera_run_info{run=\"7\",state=\"Ended\"} 0\n"), "{text}");
        assert!(text.contains("tessera_trigger_rate_hz{run=\"7\"} 80\n"), "{text}");
        assert!(!text.contains("tessera_trigger_rate_requested_hz{"), "free running: {text}");
        assert!(text.contains("tessera_dead_time_by_reason_ratio{run=\"7\",reason=\"NOT_ENOUGH_FUS\"} 0.25\n"));
        assert!(text.contains("tessera_lumi_sections_merged{run=\"7\"} 3\n"), "{text}");
    }
}
