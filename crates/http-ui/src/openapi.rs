//! The API's OpenAPI 3.1 document, generated from the types the handlers answer with.
//!
//! The schemas are schemars' derives on the views ([`crate::view`] and the types of the
//! runtime, checkpoint and scheduler crates they hold), generated with the *serialize*
//! contract: serde's own attributes decide the names (kebab-case), which keys are always sent
//! (`required`: every field not skipped when empty, `Option`s included, as `null`) and which may
//! be `null`. Every object is closed (`unevaluatedProperties: false`), so an answer with a key
//! its type does not declare fails validation. A field added to a view is documented by that
//! alone; what is written by hand here is only what a type cannot say: each route's summary,
//! its parameters and the statuses it answers with. `tests/it/serve_openapi.rs` drives every
//! route and validates each answer against this document, so the table cannot drift from the
//! handlers either.
//!
//! The document is built once, on first request, and kept ([`document`]).

use std::sync::OnceLock;

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::error::ErrorBody;
use crate::view::{
    CheckpointDetail, CheckpointsView, Drained, ExceptionList, JobDetail, JobList, JobOverview,
    LogPage, LogParams, LookupParams, RescaleRequest, RestartRequest, SavepointAccepted,
    SavepointList, SavepointRequest, SnapshotList, SpecParams, TailView, Validation,
};

/// The document as served at `/api/v1/openapi.json`, built on first use.
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| build().to_string())
}

/// Where the components' schemas live in the document, as `$ref`s name them.
const SCHEMAS: &str = "#/components/schemas/";

/// What an override is (`weir_runtime::spec::load::Override`): a key path of non-empty
/// parts, `=`, a value. Stricter than the server where it does not matter (no blank around a
/// part); a key the job does not have, or a value it cannot take, is the job file's problem.
const OVERRIDE_PATTERN: &str = r"^[^.=\s]+(\.[^.=\s]+)*=";

/// Builds the document (see the module docs).
pub fn build() -> Value {
    let mut doc = Builder::new();
    routes(&mut doc);
    doc.finish()
}

/// One operation: a method on a path.
struct Op {
    method: &'static str,
    path: &'static str,
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: &'static str,
    parameters: Vec<Value>,
    body: Option<Value>,
    /// Status and response object, in the order written.
    responses: Vec<(u16, Value)>,
    /// Served without a token (the document, its viewer): no 401.
    open: bool,
}

impl Op {
    fn new(method: &'static str, path: &'static str, id: &'static str, tag: &'static str) -> Op {
        Op {
            method,
            path,
            id,
            tag,
            summary: "",
            description: "",
            parameters: Vec::new(),
            body: None,
            responses: Vec::new(),
            open: false,
        }
    }

    fn says(mut self, summary: &'static str, description: &'static str) -> Op {
        self.summary = summary;
        self.description = description;
        self
    }

    fn param(mut self, parameter: Value) -> Op {
        self.parameters.push(parameter);
        self
    }

    fn params(mut self, parameters: Vec<Value>) -> Op {
        self.parameters.extend(parameters);
        self
    }

    fn body(mut self, body: Value) -> Op {
        self.body = Some(body);
        self
    }

    fn answers(mut self, status: u16, response: Value) -> Op {
        self.responses.push((status, response));
        self
    }

    fn open(mut self) -> Op {
        self.open = true;
        self
    }
}

struct Builder {
    /// Schemas of what the server sends: the serialize contract.
    answers: SchemaGenerator,
    /// Schemas of what it reads (request bodies, query strings): the deserialize contract.
    requests: SchemaGenerator,
    paths: Map<String, Value>,
}

impl Builder {
    fn new() -> Builder {
        let settings = SchemaSettings::draft2020_12().with(|s| {
            s.definitions_path = SCHEMAS.into();
            s.meta_schema = None;
        });
        Builder {
            answers: settings.clone().for_serialize().into_generator(),
            requests: settings.for_deserialize().into_generator(),
            paths: Map::new(),
        }
    }

    /// A JSON answer of type `T`.
    fn json<T: JsonSchema>(&mut self, description: &str) -> Value {
        let schema = self.answers.subschema_for::<T>();
        json!({
            "description": description,
            "content": { "application/json": { "schema": schema } },
        })
    }

    /// An error answer: an [`ErrorBody`].
    fn error(&mut self, description: &str) -> Value {
        self.json::<ErrorBody>(description)
    }

    /// The 404 of a route whose only lookup is the job's.
    fn no_job(&mut self) -> Value {
        self.error("No such job.")
    }

    /// A JSON request body of type `T`.
    fn json_body<T: JsonSchema>(&mut self, description: &str, required: bool) -> Value {
        let schema = self.requests.subschema_for::<T>();
        json!({
            "description": description,
            "required": required,
            "content": { "application/json": { "schema": schema } },
        })
    }

    /// The query parameters `T` reads, one per field, with the field's description.
    fn query<T: JsonSchema>(&self) -> Vec<Value> {
        let settings = SchemaSettings::draft2020_12().with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        });
        let schema: Value = settings
            .for_deserialize()
            .into_generator()
            .into_root_schema_for::<T>()
            .into();
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return Vec::new();
        };
        properties
            .iter()
            .map(|(name, property)| {
                let mut property = property.clone();
                bound_integers(&mut property);
                let description = property
                    .as_object_mut()
                    .and_then(|p| p.remove("description"))
                    .unwrap_or(Value::Null);
                // A query string has no null: an `Option` is a parameter left out.
                if let Some(types) = property.get_mut("type").and_then(Value::as_array_mut) {
                    types.retain(|t| t != "null");
                    if let [only] = types.as_slice() {
                        let only = only.clone();
                        property["type"] = only;
                    }
                }
                let mut parameter = json!({
                    "name": name,
                    "in": "query",
                    "required": required.contains(&name.as_str()),
                    "schema": property,
                });
                if let Value::String(d) = description {
                    parameter["description"] = Value::String(d);
                }
                parameter
            })
            .collect()
    }

    fn add(&mut self, op: Op) {
        let mut responses = Map::new();
        let mut all = op.responses;
        if !op.open {
            all.push((
                401,
                self.error(
                    "The server was started with a token (as it must be off loopback) and the \
                     request does not carry it as `Authorization: Bearer <token>`.",
                ),
            ));
        }
        if op.method == "post" {
            all.push((
                405,
                self.error(
                    "This server only shows a job (`weir run --listen`): it changes nothing.",
                ),
            ));
            all.push((
                408,
                self.error("The request's body did not arrive in time (the connection is closed)."),
            ));
            all.push((
                413,
                json!({
                    "description": format!(
                        "The request's body is larger than {} bytes.",
                        crate::limits::MAX_BODY
                    ),
                    "content": { "text/plain": { "schema": { "type": "string" } } },
                }),
            ));
        }
        if !op.open {
            all.push((
                500,
                self.error("A bug or an unexpected failure of the server (it is logged)."),
            ));
        }
        all.sort_by_key(|(status, _)| *status);
        for (status, mut response) in all {
            if let Some(header) = header_of(status) {
                response["headers"] = header;
            }
            responses.insert(status.to_string(), response);
        }
        let mut operation = json!({
            "operationId": op.id,
            "tags": [op.tag],
            "summary": op.summary,
            "description": op.description,
            "responses": responses,
        });
        if !op.parameters.is_empty() {
            operation["parameters"] = Value::Array(op.parameters);
        }
        if let Some(body) = op.body {
            operation["requestBody"] = body;
        }
        if op.open {
            operation["security"] = json!([]);
        }
        let item = self
            .paths
            .entry(op.path.to_string())
            .or_insert_with(|| json!({}));
        item[op.method] = operation;
    }

    fn finish(mut self) -> Value {
        let mut schemas = self.answers.take_definitions(true);
        for (name, schema) in self.requests.take_definitions(true) {
            // A type read and sent would have one schema per contract; none is both today.
            debug_assert!(!schemas.contains_key(&name), "{name} is read and sent");
            schemas.insert(name, schema);
        }
        // Paths refer to these (their own schemas are strings and numbers).
        for schema in schemas.values_mut() {
            close_objects(schema, false);
            bound_integers(schema);
        }
        let paths = self.paths;
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "weir",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "The REST API of `weir serve` (and, read-only, of `weir run --listen`): \
                    submit, inspect, stop and restart jobs; their savepoints, checkpoints, logs, \
                    exceptions, output and queryable state; the shared checkpoint scheduler. \
                    JSON in and out, keys in kebab-case; a job is submitted as its YAML file. \
                    Every error answer is `{\"error\": \"...\"}`, with the file's `problems` for \
                    a job file that has some.",
            },
            "tags": [
                { "name": "jobs", "description": "Submitting, inspecting and controlling jobs." },
                { "name": "snapshots", "description": "Savepoints, checkpoints and the snapshots a job can restart from." },
                { "name": "observe", "description": "What a job logs, emits and fails with." },
                { "name": "state", "description": "Lookups of a running job's queryable state." },
                { "name": "server", "description": "The server itself: its scheduler, metrics and this document." },
            ],
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {
                    "bearer": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "The token `weir serve` was started with (`--token` or \
                            WEIR_TOKEN), required off loopback. A server on loopback started \
                            without one needs none.",
                    },
                },
            },
            // A token, or none on a server started without one.
            "security": [{ "bearer": [] }, {}],
        })
    }
}

/// The headers an answer with `status` carries, if any.
fn header_of(status: u16) -> Option<Value> {
    match status {
        201 | 202 => Some(json!({
            "Location": {
                "description": "Where to follow what was created or requested.",
                "schema": { "type": "string" },
            },
        })),
        429 | 503 => Some(json!({
            "Retry-After": {
                "description": "Seconds to wait before trying again (429 of a rate limit, 503).",
                "schema": { "type": "integer", "minimum": 1 },
            },
        })),
        _ => None,
    }
}

/// Marks every object schema closed (`unevaluatedProperties: false`) unless it already says
/// what other keys may be: an answer's keys are exactly its type's fields. Objects in an
/// `allOf`, `anyOf` or `oneOf` beside properties of their own are left open (they see only
/// part of the instance); `unevaluatedProperties` on the outer one, unlike
/// `additionalProperties`, sees the properties its combinators evaluated.
fn close_objects(schema: &mut Value, part_of_object: bool) {
    let Some(object) = schema.as_object_mut() else {
        if let Some(items) = schema.as_array_mut() {
            for item in items {
                close_objects(item, part_of_object);
            }
        }
        return;
    };
    let has_properties = object.contains_key("properties");
    if has_properties
        && !part_of_object
        && !object.contains_key("additionalProperties")
        && !object.contains_key("unevaluatedProperties")
    {
        object.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
    for (key, value) in object.iter_mut() {
        match key.as_str() {
            "allOf" | "anyOf" | "oneOf" => {
                close_objects(value, part_of_object || has_properties);
            }
            // Maps of subschemas.
            "properties" | "$defs" | "patternProperties" => {
                if let Some(map) = value.as_object_mut() {
                    for member in map.values_mut() {
                        close_objects(member, false);
                    }
                }
            }
            // A subschema, or an array of them.
            "items" | "additionalProperties" | "prefixItems" => close_objects(value, false),
            _ => {}
        }
    }
}

/// Gives every integer schema the range of its Rust type, from the `format` schemars writes
/// (`uint64`: 0 to 2^64-1), where it states none of its own: a number beyond it is refused
/// by the server (it does not fit), so the document must say so.
fn bound_integers(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            let range = match object.get("format").and_then(Value::as_str) {
                Some("uint8") => Some((json!(0), json!(u8::MAX))),
                Some("uint16") => Some((json!(0), json!(u16::MAX))),
                Some("uint32") => Some((json!(0), json!(u32::MAX))),
                Some("uint64") => Some((json!(0), json!(u64::MAX))),
                Some("uint") => Some((json!(0), json!(usize::MAX))),
                Some("int8") => Some((json!(i8::MIN), json!(i8::MAX))),
                Some("int16") => Some((json!(i16::MIN), json!(i16::MAX))),
                Some("int32") => Some((json!(i32::MIN), json!(i32::MAX))),
                Some("int64") => Some((json!(i64::MIN), json!(i64::MAX))),
                Some("int") => Some((json!(isize::MIN), json!(isize::MAX))),
                _ => None,
            };
            if let Some((min, max)) = range {
                object.entry("minimum").or_insert(min);
                object.entry("maximum").or_insert(max);
            }
            for value in object.values_mut() {
                bound_integers(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// Every route of [`crate::api::router_with`] but the dashboard's files.
fn routes(doc: &mut Builder) {
    let id = || path_param("id", "The job's id (a number, as the jobs list gives it).");

    // Jobs.
    let op = Op::new("get", "/api/v1/jobs", "listJobs", "jobs")
        .says(
            "List the hosted jobs",
            "Every job this server hosts, with its state and headline figures.",
        )
        .answers(200, doc.json::<JobList>("The jobs."));
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs", "submitJob", "jobs")
        .says(
            "Submit a job",
            "Checks the job file and starts it. Problems come back all at once with their line, \
             column and key (400) and nothing starts.",
        )
        .params(submit_params())
        .body(job_file())
        .answers(
            201,
            doc.json::<JobOverview>("Started: the job, at `Location`."),
        )
        .answers(
            400,
            doc.error("The job file has problems (each in `problems`), or the query is bad."),
        )
        .answers(
            409,
            doc.error("A running copy of this checkpointed job would share its checkpoints."),
        )
        .answers(
            422,
            doc.error(
                "The job could not start (its snapshot is unusable, its files cannot be created).",
            ),
        )
        .answers(
            429,
            doc.error("The server runs as many jobs at once as it may."),
        );
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs/validate", "validateJob", "jobs")
        .says(
            "Check a job file",
            "Plans the job as a submit would, without starting it.",
        )
        .params(submit_params())
        .body(job_file())
        .answers(200, doc.json::<Validation>("The file is valid."))
        .answers(
            400,
            doc.error("The job file has problems (each in `problems`), or the query is bad."),
        );
    doc.add(op);
    let op = Op::new("get", "/api/v1/jobs/{id}", "getJob", "jobs")
        .says(
            "A job in detail",
            "Its DAG (nodes with counts, rates, backpressure, watermarks, partitions, subtasks; \
             edges), history, pools and latest restore.",
        )
        .param(id())
        .answers(200, doc.json::<JobDetail>("The job."))
        .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new("get", "/api/v1/jobs/{id}/spec", "getJobSpec", "jobs")
        .says(
            "A job's file",
            "As submitted (secrets masked), or as it runs: overrides applied, every default \
             filled in.",
        )
        .param(id())
        .params(doc.query::<SpecParams>())
        .answers(
            200,
            json!({
                "description": "The job file: YAML text, a mapping once parsed (the \
                    `submitted` view keeps the file's comments and layout).",
                "content": { "application/yaml": { "schema": { "type": "object" } } },
            }),
        )
        .answers(
            400,
            doc.error("`view` is neither `submitted` nor `effective`."),
        )
        .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs/{id}/cancel", "cancelJob", "jobs")
        .says(
            "Cancel a job",
            "Its sources end and what is in flight drains; no savepoint is taken.",
        )
        .param(id())
        .answers(202, doc.json::<JobOverview>("Cancelling."))
        .answers(404, doc.no_job())
        .answers(409, doc.error("The job has already ended."));
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs/{id}/stop", "stopJob", "jobs")
        .says(
            "Stop a job with a savepoint",
            "Poll the savepoint request (`Location`); the job ends `stopped` once it is complete.",
        )
        .param(id())
        .answers(202, doc.json::<SavepointAccepted>("Requested."))
        .answers(404, doc.no_job())
        .answers(
            409,
            doc.error("The job does not checkpoint, or is not running."),
        )
        .answers(
            429,
            doc.error("Too many savepoints are in flight for this job."),
        );
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs/{id}/restart", "restartJob", "jobs")
        .says(
            "Restart a job",
            "A new run of the job, from a snapshot (`latest` by default) or from nothing.",
        )
        .param(id())
        .body(doc.json_body::<RestartRequest>("Where to restart from (optional).", false))
        .answers(202, doc.json::<JobOverview>("Restarted."))
        .answers(
            400,
            doc.error("The body, or the snapshot it names, is malformed."),
        )
        .answers(404, doc.error("No such job, or no such snapshot."))
        .answers(
            409,
            doc.error(
                "The job is still running, or its checkpoints are used by another running job.",
            ),
        )
        .answers(
            422,
            doc.error("The job could not start from that snapshot."),
        )
        .answers(
            429,
            doc.error("The server runs as many jobs at once as it may."),
        );
    doc.add(op);
    let op = Op::new("post", "/api/v1/jobs/{id}/rescale", "rescaleJob", "jobs")
        .says("Rescale a job", "Stops it with a savepoint and restarts it from that savepoint with the new parallelism.")
        .param(id())
        .body(doc.json_body::<RescaleRequest>("The new parallelism.", true))
        .answers(200, doc.json::<JobOverview>("Rescaled and running."))
        .answers(400, doc.error("The body is malformed or the parallelism is out of range."))
        .answers(404, doc.no_job())
        .answers(409, doc.error("The job is not running, or does not checkpoint."))
        .answers(422, doc.error("The job could not start again."))
        .answers(429, doc.error("The server runs as many jobs at once as it may."))
        .answers(503, doc.error("The savepoint did not complete: the job runs on as it was."));
    doc.add(op);

    // Snapshots.
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/savepoints",
        "listSavepoints",
        "snapshots",
    )
    .says("A job's savepoint requests", "")
    .param(id())
    .answers(200, doc.json::<SavepointList>("The requests."))
    .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new(
        "post",
        "/api/v1/jobs/{id}/savepoints",
        "triggerSavepoint",
        "snapshots",
    )
    .says(
        "Take a savepoint",
        "Poll the request (`Location`) until it is no longer `in-progress`.",
    )
    .param(id())
    .body(doc.json_body::<SavepointRequest>("Whether to stop the job after it (optional).", false))
    .answers(202, doc.json::<SavepointAccepted>("Requested."))
    .answers(400, doc.error("The body is malformed."))
    .answers(404, doc.no_job())
    .answers(
        409,
        doc.error("The job does not checkpoint, or is not running."),
    )
    .answers(
        429,
        doc.error("Too many savepoints are in flight for this job."),
    );
    doc.add(op);
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/savepoints/{request}",
        "getSavepoint",
        "snapshots",
    )
    .says("A savepoint request", "")
    .param(id())
    .param(path_param(
        "request",
        "The request's id, as the trigger answered it.",
    ))
    .answers(
        200,
        doc.json::<crate::job::SavepointStatus>("The request and how it ended."),
    )
    .answers(404, doc.error("No such job or request."));
    doc.add(op);
    let op = Op::new("get", "/api/v1/jobs/{id}/checkpoints", "getCheckpoints", "snapshots")
        .says("A job's checkpoints", "Counters of the current run, the latest completed snapshot, the history and the scheduler's view of the trigger.")
        .param(id())
        .answers(200, doc.json::<CheckpointsView>("The checkpoints."))
        .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/checkpoints/{checkpoint}",
        "getCheckpoint",
        "snapshots",
    )
    .says(
        "One snapshot in detail",
        "Its record, each subtask's acknowledgement and the metadata it stored.",
    )
    .param(id())
    .param(path_param("checkpoint", "The snapshot's id (of any kind)."))
    .answers(200, doc.json::<CheckpointDetail>("The snapshot."))
    .answers(404, doc.error("No such job or snapshot."));
    doc.add(op);
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/snapshots",
        "listSnapshots",
        "snapshots",
    )
    .says(
        "The snapshots a job can restart from",
        "Those whose metadata is in the job's checkpoint storage now, newest first.",
    )
    .param(id())
    .answers(200, doc.json::<SnapshotList>("The snapshots."))
    .answers(
        400,
        doc.error("The job's checkpoint storage is not one this server may reach."),
    )
    .answers(404, doc.no_job())
    .answers(
        503,
        doc.error("The checkpoint storage could not be listed: retry."),
    );
    doc.add(op);

    // Observe.
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/exceptions",
        "listExceptions",
        "observe",
    )
    .says(
        "A job's exceptions",
        "Failures, restarts, failed savepoints and resumes, newest first.",
    )
    .param(id())
    .answers(200, doc.json::<ExceptionList>("The exceptions."))
    .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new("get", "/api/v1/jobs/{id}/logs", "getLogs", "observe")
        .says("A job's log lines", "The `warn` and `error` lines its tasks wrote (and `info` when asked for), secrets masked.")
        .param(id())
        .params(doc.query::<LogParams>())
        .answers(200, doc.json::<LogPage>("The lines."))
        .answers(400, doc.error("The query is malformed."))
        .answers(404, doc.no_job());
    doc.add(op);
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/nodes/{node}/tail",
        "tailNode",
        "observe",
    )
    .says(
        "The last rows a node emitted",
        "Asking starts the recording for the next few seconds, so the first answer may be \
             empty; polling keeps it on.",
    )
    .param(id())
    .param(path_param("node", "The node's name."))
    .answers(200, doc.json::<TailView>("The rows, per subtask."))
    .answers(404, doc.error("No such job or node."));
    doc.add(op);

    // State.
    let op = Op::new(
        "get",
        "/api/v1/jobs/{id}/state/{operator}/{state}",
        "lookupState",
        "state",
    )
    .says(
        "Look up queryable state",
        "By `key`, or every key starting with `prefix`, of a running job's queryable state. \
             Rate-limited per client (token, else address).",
    )
    .param(id())
    .param(path_param("operator", "The keyed operator's name."))
    .param(path_param(
        "state",
        "The queryable state's name (as the job file declares it).",
    ))
    .params(doc.query::<LookupParams>())
    .answers(
        200,
        doc.json::<weir_runtime::query::LookupAnswer>("The entries found."),
    )
    .answers(
        400,
        doc.error("The key does not parse, or the query is malformed."),
    )
    .answers(404, doc.error("No such job, operator, state or key."))
    .answers(409, doc.error("The job is not running."))
    .answers(
        429,
        doc.error("Too many lookups from this client: retry after `Retry-After` seconds."),
    )
    .answers(
        503,
        doc.error("The operator cannot answer now (its queue is full, a subtask restarts): retry."),
    )
    .answers(
        504,
        doc.error("The operator did not answer in time: retry, or use the direct path."),
    );
    doc.add(op);

    // Server.
    let op = Op::new("get", "/api/v1/scheduler", "getScheduler", "server")
        .says(
            "The checkpoint scheduler's metrics",
            "One shared scheduler triggers every job's checkpoints.",
        )
        .answers(
            200,
            doc.json::<weir_scheduler::SchedulerMetrics>("The metrics."),
        );
    doc.add(op);
    let op = Op::new("get", "/api/v1/fleet", "getFleet", "server")
        .says(
            "The fleet's servers and jobs",
            "Every server of the fleet this server belongs to (with its heartbeat and load) and every job of the fleet (with the server running it and its lease epoch).",
        )
        .answers(200, doc.json::<crate::fleet::FleetView>("The fleet."))
        .answers(404, doc.error("This server is not part of a fleet."))
        .answers(503, doc.error("The fleet's catalog cannot be read."));
    doc.add(op);
    let op = Op::new("post", "/api/v1/fleet/drain", "drainServer", "server")
        .says(
            "Drain this server",
            "Stops taking jobs, then moves each of its jobs to the least loaded other server of the fleet: a savepoint that stops it here, and a run there from that savepoint.",
        )
        .answers(200, doc.json::<Drained>("What moved where."))
        .answers(404, doc.error("This server is not part of a fleet."));
    doc.add(op);
    let op = Op::new("get", "/metrics", "getMetrics", "server")
        .says("Metrics for Prometheus", "Every job's and the scheduler's metrics in the Prometheus text format.")
        .answers(
            200,
            json!({
                "description": "The metrics.",
                "content": { (crate::prometheus::CONTENT_TYPE): { "schema": { "type": "string" } } },
            }),
        );
    doc.add(op);
    let op = Op::new("get", "/api/v1/openapi.json", "getOpenApi", "server")
        .says(
            "This document",
            "Generated from the types the handlers answer with. No token needed.",
        )
        .answers(
            200,
            json!({
                "description": "The OpenAPI document.",
                "content": { "application/json": { "schema": { "type": "object" } } },
            }),
        )
        .open();
    doc.add(op);
    let op = Op::new("get", "/api/v1/docs", "getDocs", "server")
        .says("This document in a viewer", "Swagger UI, served by this server. No token needed to load it; \"Authorize\" takes the token for the calls it makes.")
        .answers(
            200,
            json!({
                "description": "The viewer's page.",
                "content": { "text/html": { "schema": { "type": "string" } } },
            }),
        )
        .open();
    doc.add(op);
}

/// A path parameter (every one is a string in the path).
fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "path",
        "required": true,
        "description": description,
        "schema": { "type": "string" },
    })
}

/// The query of a submit or a validation, read by hand (`set` repeats).
fn submit_params() -> Vec<Value> {
    vec![
        json!({
            "name": "set",
            "in": "query",
            "required": false,
            "description": "An override, `key.path=value` (repeatable): as `weir run --set`.",
            "schema": {
                "type": "array",
                "items": { "type": "string", "pattern": OVERRIDE_PATTERN },
            },
            "style": "form",
            "explode": true,
        }),
        json!({
            "name": "parallelism",
            "in": "query",
            "required": false,
            "description": "The job's parallelism, instead of the file's (the server's limits \
                may allow less than 1024).",
            "schema": { "type": "integer", "minimum": 1, "maximum": 1024 },
        }),
        json!({
            "name": "from",
            "in": "query",
            "required": false,
            "description": "A snapshot of this job to start from: `latest`, `none`, `sp-<id>`, \
                `chk-<id>` or `final-<id>`.",
            "schema": { "type": "string", "pattern": crate::host::SNAPSHOT_PATTERN },
        }),
    ]
}

/// A job file as a request body.
fn job_file() -> Value {
    json!({
        "description": "The job file (YAML, UTF-8).",
        "required": true,
        "content": { "application/yaml": { "schema": { "type": "string" } } },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_reference_resolves_and_every_object_is_closed() {
        let doc = build();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let name = reference
                .split('"')
                .next()
                .and_then(|r| r.strip_prefix(SCHEMAS))
                .expect("a reference into the components");
            assert!(
                schemas.contains_key(name),
                "{name} is referenced but not defined"
            );
        }
        let overview = &schemas["JobOverview"];
        assert_eq!(overview["unevaluatedProperties"], false, "{overview}");
        let required = overview["required"].as_array().expect("required");
        assert!(
            required.contains(&json!("ended-at")),
            "an Option is sent as null, so it is required: {overview}"
        );
    }
}
