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
//! The crate also runs systems: the whole system in one process ([`system`], [`trigger`], with
//! the machine's load from [`host_load`]) and
//! its supervision to the run's end ([`local_run`]), the system file turned into units
//! ([`plan`]), a run across hosts ([`controller`], [`placement`]), the filter farm behind the
//! BUs ([`farm`]) and the chain's proof ([`chain`]), and the rules that end a run ([`stop`],
//! [`incomplete`]). Its modules import one way down, each
//! only modules before it in this list (crates/cli/tests/modules.rs checks it; the crate root,
//! which declares them and re-exports what the server's users need, is left out):
//!
//! Modules, bottom up: host_load, capacity, exposition, process, report, push_loss, run, client, figures, units, heartbeat, metrics, api, server, agent, stop, placement, controller, system, trigger, plan, incomplete, farm, chain, local_run

#![warn(missing_docs)]

pub mod agent;
mod api;
pub mod capacity;
pub mod chain;
pub mod client;
pub mod controller;
mod exposition;
pub mod farm;
mod figures;
mod heartbeat;
pub mod host_load;
pub mod incomplete;
pub mod local_run;
mod metrics;
pub mod placement;
pub mod plan;
mod process;
pub mod push_loss;
pub mod report;
mod run;
mod server;
pub mod stop;
pub mod system;
pub mod trigger;
mod units;

pub use api::{
    Action, ActionRefused, DASHBOARD, MaskAction, MaskRefused, Served, UnitSource, mask_at, openapi, tell_unit,
};
pub use heartbeat::HeartbeatWatch;
pub use metrics::{metrics_from_views, metrics_page, metrics_text};
pub use process::{GIT_HASH, VERSION};
pub use run::{RunState, RunStatus, RunView};
pub use server::{
    ControlConfig, ControlError, ControlServer, MAX_CONNECTIONS, REQUEST_HEAD_TIMEOUT, STALL_TIMEOUT, Serving, serve,
};
pub use units::{
    ConservationView, FedErrorsView, SubStateView, Unit, UnitKind, UnitView, conservation, conservation_from_views,
    holds, start_wait, unit_views,
};
