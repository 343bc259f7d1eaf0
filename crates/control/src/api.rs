//! What the control server serves ([`Served`]: the units, the run, the actions and the
//! configuration) and its handlers with their OpenAPI operations ([`utoipa`]): the router and
//! the document served at `/api/v1/openapi.json` come from the same list of handlers.

use crate::exposition;
use crate::metrics::metrics_page;
use crate::run::{RunStatus, RunView};
use crate::units::{ConservationView, Unit, UnitView, conservation_from_views, unit_views};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The live dashboard, served at `/`: it reads `/api/v1/units`, `/api/v1/conservation` and
/// `/api/v1/run` every second, and its Stop button posts `/api/v1/stop`.
pub const DASHBOARD: &str = include_str!("../dashboard.html");

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

/// Masking a FED (`POST /api/v1/feds/{fed}/mask`): what it did, in a sentence (`Ok`), or why
/// it could not (`Err`). It may wait for another process (a controller asks the RU's agent), so
/// the server runs it off its reactor.
pub type MaskAction = Arc<dyn Fn(u16) -> Result<String, MaskRefused> + Send + Sync>;

/// Why a FED could not be masked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskRefused {
    /// No RU of this run (or of this process) reads the FED.
    #[error("no RU of this {0} reads FED {1}")]
    NotRead(&'static str, u16),
    /// The trigger FED cannot be masked: without it there is no event.
    #[error("FED {0} is the trigger: without it there is no event; stop the run instead")]
    Trigger(u16),
    /// The RU could not be told (its process or host does not answer, too many masks wait).
    #[error("{0}")]
    NotTold(String),
}

/// Masks `fed` at the RU that reads it, of `rus` (each RU's name and FEDs; `scope` says what
/// they are: the `run`, this `process`), telling it through `tell` (given the RU's index): what
/// it did, said and logged, or why it could not. The trigger FED cannot be masked.
pub fn mask_at(
    fed: u16,
    scope: &'static str,
    rus: &[(String, Vec<u16>)],
    tell: impl FnOnce(usize) -> Result<(), String>,
) -> Result<String, MaskRefused> {
    if fed == tessera_formats::tcds::TCDS_FED_ID {
        return Err(MaskRefused::Trigger(fed));
    }
    let i = rus.iter().position(|(_, feds)| feds.contains(&fed)).ok_or(MaskRefused::NotRead(scope, fed))?;
    tell(i).map_err(MaskRefused::NotTold)?;
    let name = &rus[i].0;
    tracing::warn!(unit = %name, fed, "FED {fed} masked by an operator: its events go on without it");
    Ok(format!("FED {fed} masked at {name}: its events go on without it"))
}

/// Tells an RU of this process, `name`, through its `control`, to mask `fed` (see [`mask_at`]).
pub fn tell_unit(control: &tessera_runtime::ru_node::Control, name: &str, fed: u16) -> Result<(), String> {
    if control.mask_fed(fed) { Ok(()) } else { Err(format!("{name} has too many masks waiting")) }
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
    /// What `POST /api/v1/feds/{fed}/mask` does: mask the FED for the rest of the run (none:
    /// refused).
    pub mask: Option<MaskAction>,
    /// The system configuration, as YAML, for `GET /api/v1/config` (none: 404).
    pub system: Option<String>,
    /// The run as a whole, for `GET /api/v1/run` and the `tessera_run_*` metrics (none: 404,
    /// and no samples): what runs a whole run (`tessera run`, a controller) has one.
    pub run: Option<Arc<RunStatus>>,
}

impl Served {
    /// Units of this process, with no action and no configuration.
    pub fn live(units: Vec<Unit>) -> Self {
        Served {
            units: UnitSource::Live(Arc::new(units)),
            stop: None,
            enable: None,
            mask: None,
            system: None,
            run: None,
        }
    }
}

/// What the handlers read: what a control server serves, with its token and OpenAPI document.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) units: UnitSource,
    pub(crate) token: Option<Arc<str>>,
    pub(crate) stop: Option<Action>,
    pub(crate) enable: Option<Action>,
    pub(crate) mask: Option<MaskAction>,
    pub(crate) system: Option<Arc<str>>,
    pub(crate) run: Option<Arc<RunStatus>>,
    /// The OpenAPI document of the routes, generated from the handlers.
    pub(crate) openapi: Arc<str>,
}

/// The units' figures, the run's, the process's and the build's in the OpenMetrics text format.
#[utoipa::path(get, path = "/metrics", responses(
    (status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String),
    (status = 401, description = "Token missing or wrong"),
))]
async fn metrics(State(shared): State<Shared>) -> impl IntoResponse {
    let run = shared.run.as_ref().map(|r| r.view());
    ([(header::CONTENT_TYPE, exposition::CONTENT_TYPE)], metrics_page(&shared.units.views(), run.as_ref()))
}

/// The live dashboard (HTML; it reads /api/v1/units every second; on a guarded address give ?token=).
#[utoipa::path(get, path = "/", responses(
    (status = 200, description = "The page", content_type = "text/html", body = String),
    (status = 401, description = "Token missing or wrong"),
))]
async fn dashboard() -> axum::response::Html<&'static str> {
    axum::response::Html(DASHBOARD)
}

/// Whether the server answers; asked without the token too (for probes).
#[utoipa::path(get, path = "/api/v1/health", responses(
    (status = 200, description = "ok", content_type = "text/plain", body = String),
))]
async fn health() -> &'static str {
    "ok\n"
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", responses(
    (status = 200, description = "OpenAPI 3", content_type = "application/json", body = Object),
))]
async fn openapi_json(State(shared): State<Shared>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], shared.openapi.to_string())
}

/// What an action said it does (`POST /api/v1/stop`, `/api/v1/enable`).
#[derive(Debug, Serialize, ToSchema)]
struct Said {
    /// What it does, in a few words.
    result: String,
}

/// Why a request could not be served.
#[derive(Debug, Serialize, ToSchema)]
struct Refusal {
    /// Why, in one sentence.
    error: String,
}

/// `status` with a [`Refusal`] saying `why`.
fn refuse(status: StatusCode, why: impl Into<String>) -> Response {
    (status, axum::Json(Refusal { error: why.into() })).into_response()
}

fn act(action: Option<&Action>, cannot: &str) -> Response {
    match action.map(|act| act()) {
        Some(Ok(said)) => (StatusCode::ACCEPTED, axum::Json(Said { result: said })).into_response(),
        Some(Err(why)) => refuse(StatusCode::CONFLICT, why.to_string()),
        None => refuse(StatusCode::CONFLICT, cannot),
    }
}

/// Stop the run: trigger off, drain, end of run (tessera run, or the EVM's process).
#[utoipa::path(post, path = "/api/v1/stop", responses(
    (status = 202, description = "What it does", body = Said),
    (status = 409, description = "This process cannot stop the run (an RU's or a BU's)", body = Refusal),
    (status = 401, description = "Token missing or wrong"),
))]
async fn stop_run(State(shared): State<Shared>) -> Response {
    act(shared.stop.as_ref(), "this process cannot stop a run")
}

/// Enable the units of this process that wait in Ready (started with --wait-for-enable): they
/// start taking data. Repeating it changes nothing.
#[utoipa::path(post, path = "/api/v1/enable", responses(
    (status = 202, description = "What it did: enabled, or enabled already", body = Said),
    (status = 409, description = "This process has no unit to enable (a controller's)", body = Refusal),
    (status = 401, description = "Token missing or wrong"),
))]
async fn enable_run(State(shared): State<Shared>) -> Response {
    act(shared.enable.as_ref(), "this process has no unit to enable")
}

/// Mask a FED for the rest of the run, as an operator does with a front end that is silent for
/// good: the events that wait for it, and all later ones, go on without it, flagged incomplete
/// and counted against it (`MASKED`, `MISSING`). The trigger FED cannot be masked.
#[utoipa::path(post, path = "/api/v1/feds/{fed}/mask",
    params(("fed" = u16, Path, description = "The FED to mask")),
    responses(
        (status = 202, description = "Which RU takes it", body = Said),
        (status = 404, description = "No RU of this run (or process) reads the FED", body = Refusal),
        (status = 409, description = "The trigger FED, or this process cannot mask", body = Refusal),
        (status = 502, description = "The RU's process or host could not be told", body = Refusal),
        (status = 401, description = "Token missing or wrong"),
    ))]
async fn mask_fed(State(shared): State<Shared>, axum::extract::Path(fed): axum::extract::Path<u16>) -> Response {
    let Some(mask) = shared.mask.clone() else {
        return refuse(StatusCode::CONFLICT, "this process cannot mask FEDs");
    };
    match tokio::task::spawn_blocking(move || mask(fed)).await {
        Ok(Ok(said)) => (StatusCode::ACCEPTED, axum::Json(Said { result: said })).into_response(),
        Ok(Err(why @ MaskRefused::NotRead(..))) => refuse(StatusCode::NOT_FOUND, why.to_string()),
        Ok(Err(why @ MaskRefused::Trigger(_))) => refuse(StatusCode::CONFLICT, why.to_string()),
        Ok(Err(why @ MaskRefused::NotTold(_))) => refuse(StatusCode::BAD_GATEWAY, why.to_string()),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The units, their states and figures.
#[utoipa::path(get, path = "/api/v1/units", responses(
    (status = 200, description = "One entry per unit", body = Vec<UnitView>),
    (status = 401, description = "Token missing or wrong"),
))]
async fn units_json(State(shared): State<Shared>) -> axum::Json<Vec<UnitView>> {
    axum::Json(shared.units.views())
}

/// The run's conservation as the figures stand: triggered = published + lost + in flight.
#[utoipa::path(get, path = "/api/v1/conservation", responses(
    (status = 200, description = "The figures and what they say", body = ConservationView),
    (status = 401, description = "Token missing or wrong"),
))]
async fn conservation_json(State(shared): State<Shared>) -> axum::Json<ConservationView> {
    axum::Json(conservation_from_views(&shared.units.views()))
}

/// The system configuration the process runs, as YAML (what tessera run --print-config prints).
#[utoipa::path(get, path = "/api/v1/config", responses(
    (status = 200, description = "The system file, every key written out", content_type = "application/yaml", body = String),
    (status = 404, description = "The process was started without a system configuration", body = Refusal),
    (status = 401, description = "Token missing or wrong"),
))]
async fn system_config(State(shared): State<Shared>) -> Response {
    match &shared.system {
        Some(yaml) => ([(header::CONTENT_TYPE, "application/yaml; charset=utf-8")], yaml.to_string()).into_response(),
        None => refuse(StatusCode::NOT_FOUND, "this process was started without a system configuration"),
    }
}

/// The run as a whole: its number and state, elapsed time, the trigger rate requested and
/// achieved, dead time by reason, the bottleneck when short of the requested rate, and the
/// mergers' progress.
#[utoipa::path(get, path = "/api/v1/run", responses(
    (status = 200, description = "The run", body = RunView),
    (status = 404, description = "This process does not run a whole run (a unit's process or an agent)", body = Refusal),
    (status = 401, description = "Token missing or wrong"),
))]
async fn run_json(State(shared): State<Shared>) -> Response {
    match &shared.run {
        Some(run) => axum::Json(run.view()).into_response(),
        None => {
            refuse(StatusCode::NOT_FOUND, "this process runs units, not a whole run: ask the process that runs the run")
        }
    }
}

/// What every tessera process that runs units serves.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tessera unit control",
        version = "1",
        description = "What every tessera process that runs units serves: their live figures, states and sub-states, the run's conservation as the figures stand, the system configuration it runs, the run as a whole (state, trigger rates, dead time, the mergers' progress), the run's stop, and the masking of a FED. Loopback by default; on any other address every request brings Authorization: Bearer <token>."
    ),
    modifiers(&BearerToken),
    security((), ("token" = [])),
)]
struct ApiDoc;

/// The `token` security scheme: `Authorization: Bearer <token>`.
struct BearerToken;

impl utoipa::Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("token", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// Every route of the control server with its OpenAPI operation: the router and the document
/// come from the same handlers, so that neither has a route the other lacks.
pub(crate) fn api_router() -> OpenApiRouter<Shared> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(dashboard))
        .routes(routes!(metrics))
        .routes(routes!(units_json))
        .routes(routes!(conservation_json))
        .routes(routes!(system_config))
        .routes(routes!(run_json))
        .routes(routes!(health))
        .routes(routes!(stop_run))
        .routes(routes!(enable_run))
        .routes(routes!(mask_fed))
        .routes(routes!(openapi_json))
}

/// The OpenAPI document of the control server, generated from its handlers; served at
/// `/api/v1/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_router().split_for_parts().1
}
