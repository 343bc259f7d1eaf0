//! The `/metrics` page: the units' figures, the run's conservation, the run's, the process's and
//! the build's, in the OpenMetrics text format.

use crate::exposition::{self, Kind, label};
use crate::figures::FAMILIES;
use crate::process;
use crate::run::{self, RunView};
use crate::units::{Unit, UnitView, conservation_from_views, unit_views};
use tessera_runtime::state::UnitState;
use tessera_runtime::stats::{SubState, Throttle};

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
