//! The router: the REST API under `/api/v1`, `/metrics`, and the dashboard's files.
//!
//! [`router`] is a plain function of the host and the access rule, so tests drive it with
//! `tower::ServiceExt::oneshot` without a socket. Every route of the API is described by the
//! OpenAPI document served at `/api/v1/openapi.json`, generated from the types the handlers
//! answer with ([`crate::openapi`]), and shown by the viewer at `/api/v1/docs`.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{
    ConnectInfo, FromRef, FromRequest, FromRequestParts, Path, Query, RawQuery, Request, State,
};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{self, Access};
use crate::error::ApiError;
use crate::error::ErrorBody;
use crate::fleet::Fleet;
use crate::host::{Host, SubmitOptions};
use crate::job::HostedJob;
use crate::redact::Secrets;
use crate::view::{
    CheckpointDetail, Drained, DrainedJob, ExceptionList, JobDetail, JobList, JobOverview, LogPage,
    LogParams, LookupParams, RescaleRequest, RestartRequest, SavepointAccepted, SavepointList,
    SavepointRequest, SnapshotList, SnapshotMetadata, SpecParams, TailSubtask, TailView,
    Validation,
};
use crate::{assets, prometheus};

/// How a submitted job file is named in messages.
const SUBMITTED: &str = "job.yaml";

pub use crate::limits::MAX_BODY;

/// How long a client has to send a request's whole body, once its headers are in (the
/// headers have their own limit: [`crate::Timeouts`]).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the handlers are given: the host, and the fleet it is one server of, if any (each
/// handler takes the part it needs as its `State`).
#[derive(Clone)]
struct AppState {
    host: Arc<Host>,
    fleet: Option<Arc<Fleet>>,
}

impl FromRef<AppState> for Arc<Host> {
    fn from_ref(state: &AppState) -> Self {
        state.host.clone()
    }
}

impl FromRef<AppState> for Option<Arc<Fleet>> {
    fn from_ref(state: &AppState) -> Self {
        state.fleet.clone()
    }
}

/// The whole HTTP surface of `weir serve` (outside a fleet), with the default
/// [`BODY_TIMEOUT`].
pub fn router(host: Arc<Host>, access: Access) -> Router {
    router_with(host, None, access, BODY_TIMEOUT)
}

/// [`router`] for the host of a server that is one of `fleet`, if any, giving clients
/// `body_timeout` to send a request's body.
pub fn router_with(
    host: Arc<Host>,
    fleet: Option<Arc<Fleet>>,
    access: Access,
    body_timeout: Duration,
) -> Router {
    let state = AppState { host, fleet };
    let protected = Router::new()
        .route("/api/v1/jobs", get(list_jobs).post(submit))
        .route("/api/v1/jobs/validate", post(validate))
        .route("/api/v1/jobs/{id}", get(job_detail))
        .route("/api/v1/jobs/{id}/spec", get(job_spec))
        .route("/api/v1/jobs/{id}/cancel", post(cancel))
        .route("/api/v1/jobs/{id}/stop", post(stop))
        .route("/api/v1/jobs/{id}/restart", post(restart))
        .route("/api/v1/jobs/{id}/rescale", post(rescale))
        .route(
            "/api/v1/jobs/{id}/savepoints",
            get(list_savepoints).post(trigger_savepoint),
        )
        .route("/api/v1/jobs/{id}/savepoints/{request}", get(savepoint))
        .route("/api/v1/jobs/{id}/checkpoints", get(checkpoints))
        .route(
            "/api/v1/jobs/{id}/checkpoints/{checkpoint}",
            get(checkpoint),
        )
        .route("/api/v1/jobs/{id}/exceptions", get(exceptions))
        .route("/api/v1/jobs/{id}/logs", get(logs))
        .route("/api/v1/jobs/{id}/snapshots", get(snapshots))
        .route("/api/v1/jobs/{id}/nodes/{node}/tail", get(tail))
        .route(
            "/api/v1/jobs/{id}/state/{operator}/{state}",
            get(state_lookup),
        )
        .route("/api/v1/scheduler", get(scheduler))
        .route("/api/v1/fleet", get(fleet_view))
        .route("/api/v1/fleet/drain", post(drain))
        .route("/metrics", get(metrics))
        // Inside the token check: a request is authorised here before it is forwarded.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            to_owner,
        ))
        .route_layer(axum::middleware::from_fn_with_state(access, auth::require));
    Router::new()
        .merge(protected)
        .route("/api/v1/openapi.json", get(openapi))
        .route("/api/v1/docs", get(|| assets::serve("docs.html")))
        .route("/", get(|| assets::serve("index.html")))
        .route(
            "/{file}",
            get(|Path(file): Path<String>| assets::serve_owned(file)),
        )
        .fallback(not_found)
        .with_state(state)
        // Inside the size limit: the body read within the deadline is already bounded.
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| read_body_within(body_timeout, request, next),
        ))
        .layer(RequestBodyLimitLayer::new(MAX_BODY))
        .layer(TraceLayer::new_for_http())
}

/// Refuses every request that could change something (anything but `GET` and `HEAD`): the
/// layer of a read-only server (`weir run --listen`).
pub async fn refuse_changes(request: Request, next: Next) -> Response {
    use axum::http::Method;
    if request.method() == Method::GET || request.method() == Method::HEAD {
        return next.run(request).await;
    }
    ApiError::ReadOnly(
        "this server only shows the job of a `weir run`: host jobs with `weir serve` to submit, \
         stop or restart them"
            .into(),
    )
    .into_response()
}

/// Reads the request's whole body before any handler runs, within `deadline` from the end of
/// its headers; a client that has not sent it by then gets 408 and the connection is closed.
/// A deadline for the whole body, not for the gap between two of its pieces (tower-http's
/// `RequestBodyTimeoutLayer`): a client sending one byte every few seconds is cut off too.
/// Bodies are small (at most [`MAX_BODY`]) and every handler reads them whole anyway.
async fn read_body_within(deadline: Duration, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(deadline, Bytes::from_request(Request::new(body), &())).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        // Too large (413) or broken off by the client (400).
        Ok(Err(rejection)) => rejection.into_response(),
        Err(_elapsed) => {
            tracing::debug!(uri = %parts.uri, ?deadline, "request body not sent in time");
            (
                StatusCode::REQUEST_TIMEOUT,
                [(header::CONNECTION, "close")],
                Json(ErrorBody::new(format!(
                    "the request's body did not arrive within {deadline:?}"
                ))),
            )
                .into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route; the API is described at /api/v1/openapi.json".into())
}

async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

/// A view of type `T` as JSON, with its job's secrets masked in every string: what the
/// document says the route answers is `T`, masking changes no shape.
pub(crate) struct Masked<T>(serde_json::Value, PhantomData<T>);

impl<T> IntoResponse for Masked<T> {
    fn into_response(self) -> Response {
        Json(self.0).into_response()
    }
}

/// `view` as JSON with `job`'s secrets masked in every string ([`crate::redact`]): a
/// description, an operator's expression or an error message may quote one.
fn masked<T: Serialize>(job: &HostedJob, view: T) -> Result<Masked<T>, ApiError> {
    let mut value = serde_json::to_value(view)
        .map_err(|e| ApiError::Internal(format!("writing job {} as JSON: {e}", job.id)))?;
    job.secrets.mask_json(&mut value);
    Ok(Masked(value, PhantomData))
}

/// A query string read into `T`, refused with a JSON 400 ([`ApiError::BadRequest`]) like
/// every other bad request (axum's own `Query` answers in plain text).
pub(crate) struct ApiQuery<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(t)| ApiQuery(t))
            .map_err(|e| ApiError::BadRequest(e.body_text()))
    }
}

async fn list_jobs(
    State(host): State<Arc<Host>>,
    State(fleet): State<Option<Arc<Fleet>>>,
    headers: axum::http::HeaderMap,
) -> Result<Masked<JobList>, ApiError> {
    // In a fleet, the other servers' jobs too (each list masked by its own server), asked
    // first: an ended job of the catalog that no server keeps any more (its server restarted
    // since) is then kept here, so that the list is every job of the catalog. A list asked
    // for by another server is this server's alone.
    let here = fleet.as_ref().map(|f| f.url().to_owned());
    let fleet = fleet.filter(|_| !crate::fleet::forward::was_forwarded(&headers));
    let mut others = Vec::new();
    let mut unanswered = Vec::new();
    if let Some(fleet) = &fleet {
        (others, unanswered) = fleet
            .other_servers_jobs(headers.get(header::AUTHORIZATION))
            .await;
        if unanswered.is_empty() {
            let mut kept: std::collections::HashSet<u64> = others
                .iter()
                .filter_map(|j| j["id"].as_str().and_then(crate::host::parse_id))
                .collect();
            kept.extend(host.jobs().iter().map(|j| j.id));
            if let Err(e) = fleet.adopt_unkept(&host, &kept).await {
                unanswered.push(format!("the fleet's catalog: {e}"));
            }
        }
    }
    let jobs = host.jobs();
    let list = JobList {
        jobs: jobs
            .iter()
            .map(|j| JobOverview {
                server: here.clone(),
                ..j.overview()
            })
            .collect(),
        unanswered: Vec::new(),
    };
    let mut value = serde_json::to_value(list)
        .map_err(|e| ApiError::Internal(format!("writing the jobs list as JSON: {e}")))?;
    // Each job's overview masked with that job's secrets.
    if let Some(overviews) = value.get_mut("jobs").and_then(|v| v.as_array_mut()) {
        for (job, overview) in jobs.iter().zip(overviews) {
            job.secrets.mask_json(overview);
        }
    }
    if fleet.is_some() {
        if let Some(list) = value.get_mut("jobs").and_then(|v| v.as_array_mut()) {
            // Once each: an ended job kept by two servers (one took it from the catalog while
            // the other did not answer) is listed as this server has it, or as the first
            // other server does.
            let mut listed: std::collections::HashSet<String> = list
                .iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect();
            for job in others {
                let new = job["id"]
                    .as_str()
                    .is_none_or(|id| listed.insert(id.to_owned()));
                if new {
                    list.push(job);
                }
            }
        }
        if !unanswered.is_empty() {
            value["unanswered"] = serde_json::Value::from(unanswered);
        }
    }
    Ok(Masked(value, PhantomData))
}

fn text(body: &Bytes) -> Result<&str, ApiError> {
    std::str::from_utf8(body)
        .map_err(|e| ApiError::BadRequest(format!("the job file is not UTF-8: {e}")))
}

/// The query of a submit: `set=key.path=value` (repeatable), `parallelism=N`, `from=SNAPSHOT`.
fn submit_options(query: Option<&str>) -> Result<SubmitOptions, ApiError> {
    let mut options = SubmitOptions::default();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "set" => options.overrides.push(value.into_owned()),
            "parallelism" => {
                let p = crate::host::parse_id(&value)
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "`parallelism={value}`: a parallelism is a whole number of at least 1"
                        ))
                    })?;
                options.parallelism = Some(p);
            }
            "from" => options.from = Some(value.into_owned()),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown submit option `{other}`: use `set`, `parallelism` or `from`"
                )));
            }
        }
    }
    Ok(options)
}

async fn submit(
    State(host): State<Arc<Host>>,
    State(fleet): State<Option<Arc<Fleet>>>,
    RawQuery(query): RawQuery,
    headers: axum::http::HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let text = text(&body)?;
    let options = submit_options(query.as_deref())?;
    if let Some(fleet) = fleet
        && !crate::fleet::forward::was_forwarded(&headers)
    {
        // Checked here first (a bad file is refused by whichever server got it), then run
        // where the fleet has the most room.
        let mut overrides = options.overrides.clone();
        if let Some(p) = options.parallelism {
            overrides.push(format!("parallelism={p}"));
        }
        let parsed = crate::overrides::parse(&overrides)?;
        let plan = Host::check_isolated(SUBMITTED, text, &parsed, host.config())
            .await
            .map_err(|e| Secrets::of(text).mask_error(e))?;
        let unavailable = |e: crate::fleet::db::DbError| ApiError::Unavailable(e.to_string());
        let target = match &plan.spec.placement {
            Some(placement) => Some(
                fleet
                    .server(&placement.server)
                    .await
                    .map_err(unavailable)?
                    .ok_or_else(|| {
                        ApiError::Conflict(format!(
                            "`placement.server` is {}, which is no live server of the fleet taking jobs (GET /api/v1/fleet lists them)",
                            placement.server
                        ))
                    })?,
            ),
            None if fleet.is_draining() => {
                return Err(ApiError::Unavailable(
                    "this server is draining: submit to another server of the fleet".into(),
                ));
            }
            None => fleet.place(false).await.map_err(unavailable)?,
        };
        if let Some(target) = target.filter(|t| t.id != fleet.me()) {
            let mut request = Request::new(Body::from(body.clone()));
            *request.method_mut() = axum::http::Method::POST;
            *request.uri_mut() = uri;
            *request.headers_mut() = headers;
            return Ok(fleet.forwarder.forward(&target.url, request).await);
        }
    }
    let job = host
        .submit_with(SUBMITTED, text, options)
        .await
        .map_err(|e| Secrets::of(text).mask_error(e))?;
    let location = format!("/api/v1/jobs/{}", job.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        masked(&job, job.overview())?,
    )
        .into_response())
}

async fn validate(
    State(host): State<Arc<Host>>,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Result<Json<Validation>, ApiError> {
    let text = text(&body)?;
    let options = submit_options(query.as_deref())?;
    let mut overrides = options.overrides;
    if let Some(p) = options.parallelism {
        overrides.push(format!("parallelism={p}"));
    }
    let overrides = crate::overrides::parse(&overrides)?;
    let plan = Host::check_isolated(SUBMITTED, text, &overrides, host.config())
        .await
        .map_err(|e| Secrets::of(text).mask_error(e))?;
    Ok(Json(Validation {
        valid: true,
        name: plan.name().to_string(),
        nodes: plan.nodes.len(),
        checkpointing: plan.spec.checkpoint.enabled(),
    }))
}

async fn job_detail(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Masked<JobDetail>, ApiError> {
    let job = host.job(&id)?;
    let every = u64::try_from(host.config().sample_every.as_millis()).unwrap_or(u64::MAX);
    masked(&job, job.detail(every))
}

async fn job_spec(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<SpecParams>,
) -> Result<Response, ApiError> {
    let job = host.job(&id)?;
    let text = match params.view.as_deref() {
        None | Some("submitted") => crate::redact::redact(&job.text).into_owned(),
        Some("effective") => {
            let plan = job.plan();
            let yaml = serde_json::to_value(&plan.spec)
                .map(|spec| weir_runtime::spec::yaml::to_string(&spec))
                .map_err(|e| ApiError::Internal(format!("writing job {} as YAML: {e}", job.id)))?;
            let mut text = String::from(
                "# The job as it runs: overrides applied, every default filled in, secrets masked.\n",
            );
            for o in &job.definition().overrides {
                text.push_str(&format!("# override: {o}\n"));
            }
            text.push_str(&crate::redact::redact(&yaml));
            job.secrets.mask(&text).into_owned()
        }
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`view={other}`: use `submitted` or `effective`"
            )));
        }
    };
    Ok(([(header::CONTENT_TYPE, "application/yaml")], text).into_response())
}

async fn logs(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    ApiQuery(params): ApiQuery<LogParams>,
) -> Result<Masked<LogPage>, ApiError> {
    let job = host.job(&id)?;
    if params.info == Some(true) {
        job.log.want_info();
    }
    let (lines, dropped) = job.log.lines_after(params.after.unwrap_or(0));
    masked(
        &job,
        LogPage {
            lines,
            dropped,
            info: job.log.info_wanted(),
            capacity: crate::logs::LINES,
        },
    )
}

/// Snapshots of the job that exist in its checkpoint storage now (retention removes old
/// ones), newest first: what a restart can start from.
async fn snapshots(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Masked<SnapshotList>, ApiError> {
    let job = host.job(&id)?;
    let snapshots = crate::host::list_snapshots(&job.plan(), &host.config().endpoints).await?;
    masked(&job, SnapshotList { snapshots })
}

/// How long one tail request keeps a node's subtasks recording their output.
const TAIL_WATCH_MS: i64 = 5_000;

/// The last rows a node emitted (a sink: received), per subtask. Asking starts the recording
/// for the next few seconds, so the first answer may be empty; a page polling every second
/// keeps it on, and it stops by itself when nobody asks.
async fn tail(
    State(host): State<Arc<Host>>,
    Path((id, node)): Path<(String, String)>,
) -> Result<Masked<TailView>, ApiError> {
    let job = host.job(&id)?;
    let metrics = job.lock().metrics.clone();
    let Some(n) = metrics.nodes.iter().find(|n| n.name == node) else {
        return Err(ApiError::NotFound(format!("job {id} has no node `{node}`")));
    };
    let live = job.state().is_live();
    let mut subtasks = Vec::with_capacity(n.subtasks.len());
    let mut encoder = weir_runtime::format::json::JsonEncoder::new();
    // A source's columns that nothing reads are not decoded (projection pushdown): not shown.
    let plan = job.plan();
    let planned = plan.nodes.iter().find(|p| p.name == node);
    for (k, t) in n.subtasks.iter().enumerate() {
        if live {
            t.tail.watch(TAIL_WATCH_MS);
        }
        let mut rows = Vec::new();
        for batch in t.tail.rows() {
            let batch = match planned {
                Some(p) => p.without_unread(batch),
                None => batch,
            };
            let mut out = Vec::new();
            encoder
                .encode(&batch, &mut out)
                .map_err(|e| ApiError::Internal(format!("encoding rows of `{node}`: {e}")))?;
            for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let row: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
                    .map_err(|e| ApiError::Internal(format!("encoding rows of `{node}`: {e}")))?;
                rows.push(row);
            }
        }
        subtasks.push(TailSubtask { subtask: k, rows });
    }
    masked(
        &job,
        TailView {
            node,
            watching: live,
            watch_ms: TAIL_WATCH_MS,
            rows_per_subtask: weir_runtime::api::TAIL_ROWS,
            subtasks,
        },
    )
}

async fn cancel(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Masked<JobOverview>), ApiError> {
    let job = host.job(&id)?;
    host.cancel(&job).map_err(|e| job.secrets.mask_error(e))?;
    Ok((StatusCode::ACCEPTED, masked(&job, job.overview())?))
}

/// An optional JSON body: empty means all defaults.
fn json_or_default<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("bad JSON body: {e}")))
}

fn savepoint_accepted(id: &str, request: u64) -> Response {
    (
        StatusCode::ACCEPTED,
        [(
            header::LOCATION,
            format!("/api/v1/jobs/{id}/savepoints/{request}"),
        )],
        Json(SavepointAccepted {
            id: request,
            status: "in-progress",
        }),
    )
        .into_response()
}

async fn trigger_savepoint(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: SavepointRequest = json_or_default(&body)?;
    let job = host.job(&id)?;
    let request = host
        .savepoint(&job, request.stop)
        .map_err(|e| job.secrets.mask_error(e))?;
    Ok(savepoint_accepted(&id, request))
}

async fn stop(State(host): State<Arc<Host>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let job = host.job(&id)?;
    let request = host
        .savepoint(&job, true)
        .map_err(|e| job.secrets.mask_error(e))?;
    Ok(savepoint_accepted(&id, request))
}

async fn list_savepoints(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Masked<SavepointList>, ApiError> {
    let job = host.job(&id)?;
    let savepoints = job.lock().savepoints.values().cloned().collect();
    masked(&job, SavepointList { savepoints })
}

async fn savepoint(
    State(host): State<Arc<Host>>,
    Path((id, request)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = host.job(&id)?;
    let status = crate::host::parse_id(&request)
        .and_then(|r| job.lock().savepoints.get(&r).cloned())
        .ok_or_else(|| {
            ApiError::NotFound(format!("job {id} has no savepoint request `{request}`"))
        })?;
    Ok(masked(&job, status)?.into_response())
}

async fn restart(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: RestartRequest = json_or_default(&body)?;
    let job = host.job(&id)?;
    host.restart(&job, request.from.as_deref())
        .await
        .map_err(|e| job.secrets.mask_error(e))?;
    Ok((StatusCode::ACCEPTED, masked(&job, job.overview())?).into_response())
}

async fn rescale(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: RescaleRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "bad JSON body: {e} (expected {{\"parallelism\": N}})"
        ))
    })?;
    let job = host.job(&id)?;
    host.rescale(&job, request.parallelism)
        .await
        .map_err(|e| job.secrets.mask_error(e))?;
    Ok((StatusCode::OK, masked(&job, job.overview())?).into_response())
}

async fn checkpoints(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Masked<crate::view::CheckpointsView>, ApiError> {
    let job = host.job(&id)?;
    masked(&job, job.checkpoints(&host.scheduler().metrics()))
}

async fn checkpoint(
    State(host): State<Arc<Host>>,
    Path((id, checkpoint)): Path<(String, String)>,
) -> Result<Masked<CheckpointDetail>, ApiError> {
    let job = host.job(&id)?;
    let record = crate::host::parse_id(&checkpoint)
        .and_then(|c| job.checkpoint(c))
        .ok_or_else(|| ApiError::NotFound(format!("job {id} has no checkpoint `{checkpoint}`")))?;
    let view = crate::view::CheckpointView::from(&record);
    // The location was written by this server's coordinator, not given by a client.
    let metadata = match &view.location {
        Some(location) => {
            match weir_runtime::exec::restore::snapshot_at(std::path::Path::new(location)) {
                Ok(snapshot) => match snapshot.metadata().await {
                    Ok(m) => Some(SnapshotMetadata::Read(m)),
                    Err(e) => Some(SnapshotMetadata::Unreadable {
                        error: e.to_string(),
                    }),
                },
                Err(e) => Some(SnapshotMetadata::Unreadable {
                    error: e.to_string(),
                }),
            }
        }
        None => None,
    };
    masked(
        &job,
        CheckpointDetail {
            checkpoint: view,
            acks: record.acks,
            metadata,
        },
    )
}

async fn exceptions(
    State(host): State<Arc<Host>>,
    Path(id): Path<String>,
) -> Result<Masked<ExceptionList>, ApiError> {
    let job = host.job(&id)?;
    let exceptions = job.lock().exceptions.iter().rev().cloned().collect();
    masked(&job, ExceptionList { exceptions })
}

/// Who a rate limit counts a request against: its bearer token if it has one (clients sharing
/// a token share a budget), else its address.
fn client_of(request: &Request) -> String {
    if let Some(auth) = request.headers().get(header::AUTHORIZATION) {
        return format!("token:{}", String::from_utf8_lossy(auth.as_bytes()));
    }
    match request
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
    {
        Some(ConnectInfo(addr)) => format!("addr:{}", addr.ip()),
        // In-process callers (tests) have no address.
        None => "local".to_string(),
    }
}

async fn state_lookup(
    State(host): State<Arc<Host>>,
    Path((id, operator, state)): Path<(String, String, String)>,
    ApiQuery(params): ApiQuery<LookupParams>,
    request: Request,
) -> Result<Json<weir_runtime::query::LookupAnswer>, ApiError> {
    if let Err(wait) = host.lookups().take(&client_of(&request)) {
        let retry_after = wait.as_secs_f64().ceil().max(1.0) as u64;
        return Err(ApiError::RateLimited {
            message: format!(
                "too many state lookups from this client (at most {}/s, bursts of {}); retry after {retry_after} s",
                host.config().lookup_rate,
                host.config().lookup_burst
            ),
            retry_after,
        });
    }
    let job = host.job(&id)?;
    let queries = job.queries().ok_or_else(|| {
        ApiError::Conflict(format!(
            "job {id} is {}: only a running job's state can be looked up",
            job.state().name()
        ))
    })?;
    let path = match params.path.as_deref() {
        None => None,
        Some("direct") => Some(weir_runtime::spec::QueryPath::Direct),
        Some("ordered") => Some(weir_runtime::spec::QueryPath::Ordered),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "`path` is `direct` or `ordered`, not `{other}`"
            )));
        }
    };
    let lookup = weir_runtime::query::LookupRequest {
        key: params.key,
        prefix: params.prefix,
        limit: params.limit,
        path,
    };
    use weir_runtime::query::QueryError;
    queries
        .lookup(&operator, &state, &lookup)
        .await
        .map(Json)
        .map_err(|e| match e {
            QueryError::NotFound(m) => ApiError::NotFound(format!("job {id}: {m}")),
            QueryError::BadRequest(m) => ApiError::BadRequest(m),
            QueryError::Busy(m) | QueryError::Unavailable(m) => ApiError::Unavailable(m),
            QueryError::Timeout(m) => ApiError::Timeout(m),
            QueryError::Internal(m) => ApiError::Internal(m),
        })
}

/// In a fleet, a request about a job that runs on another server is forwarded there
/// ([`crate::fleet::forward`]); everything else is answered here.
async fn to_owner(
    State(host): State<Arc<Host>>,
    State(fleet): State<Option<Arc<Fleet>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(fleet) = fleet else {
        return next.run(request).await;
    };
    if crate::fleet::forward::was_forwarded(request.headers()) {
        return next.run(request).await;
    }
    let Some(id) = job_in_path(request.uri().path()) else {
        return next.run(request).await;
    };
    if host.job(&id.to_string()).is_ok() {
        return next.run(request).await;
    }
    let unavailable = |e: crate::fleet::db::DbError| {
        ApiError::Unavailable(format!(
            "job {id} is not on this server, and the fleet's catalog cannot say where it is: {e}"
        ))
        .into_response()
    };
    match fleet.owner_url(id).await {
        Ok(Some(url)) if url != fleet.url() => fleet.forwarder.forward(&url, request).await,
        Ok(Some(_)) => next.run(request).await,
        // No lease: the job ended. The server that keeps it answers, or this one, from the
        // catalog: any server answers for any job of the fleet.
        Ok(None) => match fleet
            .find_ended(&host, id, request.headers().get(header::AUTHORIZATION))
            .await
        {
            Ok(Some(url)) => fleet.forwarder.forward(&url, request).await,
            Ok(None) => next.run(request).await,
            Err(e) => unavailable(e),
        },
        Err(e) => unavailable(e),
    }
}

/// The job a `/api/v1/jobs/{id}/...` path is about.
fn job_in_path(path: &str) -> Option<u64> {
    let rest = path.strip_prefix("/api/v1/jobs/")?;
    let id = rest.split('/').next()?;
    crate::host::parse_id(id)
}

async fn fleet_view(
    State(fleet): State<Option<Arc<Fleet>>>,
) -> Result<Json<crate::fleet::FleetView>, ApiError> {
    let fleet = fleet.ok_or_else(not_in_fleet)?;
    fleet
        .view()
        .await
        .map(Json)
        .map_err(|e| ApiError::Unavailable(e.to_string()))
}

fn not_in_fleet() -> ApiError {
    ApiError::NotFound(
        "this server is not part of a fleet (start it with --catalog postgres://... --advertise URL)"
            .into(),
    )
}

async fn drain(
    State(host): State<Arc<Host>>,
    State(fleet): State<Option<Arc<Fleet>>>,
) -> Result<Json<Drained>, ApiError> {
    let fleet = fleet.ok_or_else(not_in_fleet)?;
    let server = fleet.url().to_owned();
    let moved = fleet.drain(&host).await;
    Ok(Json(Drained {
        server,
        moved: moved
            .into_iter()
            .map(|(id, to)| DrainedJob {
                id: id.to_string(),
                to,
            })
            .collect(),
    }))
}

async fn scheduler(State(host): State<Arc<Host>>) -> Json<weir_scheduler::SchedulerMetrics> {
    Json(host.scheduler().metrics())
}

async fn metrics(State(host): State<Arc<Host>>) -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)],
        prometheus::render(host),
    )
        .into_response()
}
