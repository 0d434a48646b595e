//! Secrets in a job's YAML are masked before the API hands anything about the job back, as
//! Flink's REST API masks the values of sensitive configuration keys: anybody allowed to read a
//! job may not be allowed to log in to its database.
//!
//! Secrets are masked **by value**. [`Secrets::of`] reads the job's parsed tree (aliases
//! expanded) and collects the value of every key whose name contains `password`, `secret`,
//! `token` or `credential` (so `secret-access-key`), and the password inside every connection
//! string, libpq style (`password=...`) or URL style (`postgres://user:...@host`). Every
//! occurrence of those values is then masked wherever it appears: a YAML alias copying a secret
//! into `description`, the same password in another field, an error message or a log line
//! quoting it. Checking keys alone is not enough: `secret-access-key: &k ...` then
//! `description: *k` puts the secret under a key that is not sensitive.
//!
//! Where masking applies: the text of `GET /spec` ([`redact`]), every per-job answer of the API
//! (the job list and detail, exceptions, savepoints, checkpoints) and the errors of requests
//! about a job, and the server's log lines ([`MaskedStderr`], through the [`registry`] of every
//! hosted job's secrets).
//!
//! The text of `/spec` keeps its comments and layout: each scalar that holds a secret is
//! replaced where it is written (its span, from the loader's YAML pass) by a quoted scalar of
//! its masked value, so a secret spelt otherwise than its value (escapes in a double-quoted
//! scalar, a folded block) is masked too; any other occurrence (a comment) is masked as it is.
//! The masked text is then parsed again and checked, and withheld whole if a secret is left.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock, RwLock, Weak};

use serde_json::{Map, Value};
use weir_runtime::spec::load::Override;
use weir_runtime::spec::yaml::{self, ScalarSpan};

use crate::error::ApiError;

/// Every property name the API's answers define, sorted: the names of the OpenAPI document's
/// schemas' properties. Written out rather than read from the document at run time, so that
/// masking depends on nothing above it; a test checks it against the document
/// (`the_api_key_list_is_every_property_of_the_openapi_document`), so a field added to a view
/// must be added here too.
const API_KEYS: [&str; 191] = [
    "acked-after-ms",
    "acks",
    "acquire-p50-us",
    "acquire-p99-us",
    "age-ms",
    "alignment-ms",
    "alive",
    "as-of",
    "at",
    "attempt",
    "backpressure",
    "backpressure-ms",
    "barriers",
    "broken",
    "buckets",
    "busy",
    "bytes",
    "bytes-read",
    "capacity",
    "category",
    "chain",
    "changes",
    "checkpoint",
    "checkpointing",
    "coalesced",
    "column",
    "completed",
    "completed-at",
    "control-messages",
    "count",
    "delay",
    "description",
    "draining",
    "dropped",
    "duration-ms",
    "edges",
    "elapsed-us",
    "enabled",
    "end",
    "ended-at",
    "entries",
    "epoch",
    "error",
    "events",
    "events-history",
    "events-per-second",
    "exceptions",
    "failed",
    "file",
    "files",
    "finished",
    "fired",
    "format",
    "freshness",
    "from",
    "gap-bytes",
    "heartbeat-age-ms",
    "high-us",
    "history",
    "id",
    "idle",
    "in-progress",
    "in-use",
    "info",
    "input-watermarks",
    "interval-ms",
    "interval-us",
    "job",
    "jobs",
    "key",
    "key-columns",
    "key-groups",
    "key_groups",
    "keyed",
    "kind",
    "lag",
    "late-dropped",
    "latest",
    "latest-snapshot",
    "lease-ttl-ms",
    "leases",
    "length",
    "level",
    "line",
    "lines",
    "location",
    "longest-run-actions",
    "longest-run-us",
    "low-us",
    "margin-us",
    "max-size",
    "max-staleness-ms",
    "max-us",
    "message",
    "metadata",
    "mode",
    "moved",
    "name",
    "node",
    "nodes",
    "offset",
    "opened",
    "opening",
    "operator",
    "operator-state",
    "p50-us",
    "p99-us",
    "panicked",
    "parallelism",
    "partition",
    "partitioning",
    "partitions",
    "path",
    "pipelines",
    "pools",
    "port",
    "position",
    "precision",
    "problems",
    "progress",
    "queryable",
    "ranges",
    "rate-in",
    "rate-out",
    "read-your-writes",
    "reason",
    "records-in",
    "records-out",
    "requested-at",
    "requests",
    "restarts",
    "restore",
    "restored-from",
    "role",
    "rows",
    "rows-per-subtask",
    "run",
    "running",
    "sample-interval-ms",
    "savepoints",
    "scheduler",
    "seeks-performed",
    "seeks-skipped",
    "seq",
    "server",
    "servers",
    "size",
    "skew",
    "skewed",
    "skipped",
    "sleeps",
    "snapshot",
    "snapshot-id",
    "snapshots",
    "spin-us",
    "start",
    "started-at",
    "state",
    "state-bytes",
    "state-keys",
    "states",
    "status",
    "stop",
    "submitted-at",
    "subtask",
    "subtasks",
    "subtasks-finished",
    "sum-us",
    "target",
    "this",
    "threads",
    "throughput",
    "timeouts",
    "to",
    "topic",
    "triggered-at",
    "truncated",
    "ttl_ms",
    "unanswered",
    "url",
    "valid",
    "value",
    "version",
    "waiters",
    "watch-ms",
    "watching",
    "watermark",
    "watermark-delay-ms",
    "watermark-lag-ms",
    "window",
    "xxh3",
];

/// Whether `key` is one of the API's own field names ([`API_KEYS`]).
fn is_api_key(key: &str) -> bool {
    API_KEYS.binary_search(&key).is_ok()
}

/// What a masked value reads as.
pub const MASK: &str = "******";

/// The secret values of one job, longest first (so that a secret containing another is masked
/// whole).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// The secrets of a job file (see the module docs). A text that does not parse as YAML has
    /// none that can be found; [`redact`] withholds such a text whole.
    pub fn of(text: &str) -> Self {
        // The loader's own pass: a file it refuses (an alias bomb, deep nesting) was refused
        // before any of its values was shown.
        match yaml::parse(text) {
            Ok(document) => Self::in_value(&document.value),
            Err(_) => Secrets::default(),
        }
    }

    /// The secrets of a job file and of the `--set` overrides applied to it: an override is
    /// read as the file would hold its value (`--set checkpoint.storage.secret-access-key=...`
    /// is a secret, as is the password of `--set sinks.db.connection=...`).
    pub fn of_job(text: &str, overrides: &[Override]) -> Self {
        let mut secrets = Self::of(text);
        for o in overrides {
            let tree = o.path.iter().rev().fold(o.value.clone(), |value, key| {
                Value::Object(Map::from_iter([(key.clone(), value)]))
            });
            secrets.values.extend(Self::in_value(&tree).values);
        }
        secrets.normalise();
        secrets
    }

    /// These secrets and `values` (what a job's `${VAR}` references read from the server's
    /// environment: the job file holds only the references).
    pub fn with(mut self, values: &[String]) -> Self {
        self.values.extend(
            values
                .iter()
                .filter(|v| !v.is_empty() && v.as_str() != MASK)
                .cloned(),
        );
        self.normalise();
        self
    }

    /// These secrets and those the job's connectors declare ([`Hosted::secrets`]): values
    /// the key names do not give away (a Kafka client property, a NATS credential), read from
    /// the plan's spec after `${VAR}` references were filled in.
    ///
    /// [`Hosted::secrets`]: weir_runtime::api::connector::Hosted::secrets
    pub fn with_connectors(mut self, spec: &weir_runtime::spec::JobSpec) -> Self {
        use weir_runtime::api::connector::Secret;
        let sources = spec.sources.values().map(|s| s.hosted().secrets());
        let sinks = spec.sinks.values().map(|s| s.hosted().secrets());
        for secret in sources.chain(sinks).flatten() {
            match secret {
                Secret::Value(v) => self.values.push(v),
                Secret::Connection(c) => self.values.extend(connection_string_passwords(&c)),
            }
        }
        self.normalise();
        self
    }

    fn in_value(value: &Value) -> Self {
        let mut values = Vec::new();
        collect(value, false, &mut values);
        let mut secrets = Secrets { values };
        secrets.normalise();
        secrets
    }

    /// Values without the line breaks a block scalar ends with (`password: |` gives
    /// `hunter2` and a line break; `hunter2` is the secret, wherever it appears); no empty or
    /// already masked values, no duplicates, longest first.
    fn normalise(&mut self) {
        for v in &mut self.values {
            v.truncate(v.trim_end_matches(['\n', '\r']).len());
        }
        self.values.retain(|v| !v.is_empty() && v != MASK);
        self.values
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.values.dedup();
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every occurrence of every secret replaced by [`MASK`].
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.values {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        out
    }

    /// `text` with every scalar that holds a secret written anew with its masked value: a flow
    /// scalar as a double-quoted one (a JSON string is one), keeping its anchor and tag, a
    /// block scalar as its lines; every other occurrence of a secret (a comment) is masked as
    /// it is.
    fn mask_text(&self, text: &str, scalars: &[ScalarSpan]) -> String {
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for scalar in scalars {
            let Some(written) = text.get(scalar.bytes.clone()) else {
                continue;
            };
            if scalar.bytes.start < copied {
                continue;
            }
            let Cow::Owned(masked) = self.mask(&scalar.text) else {
                continue;
            };
            out.push_str(&self.mask(&text[copied..scalar.bytes.start]));
            let line_start = text[..scalar.bytes.start].rfind('\n').map_or(0, |n| n + 1);
            let indent = &text[line_start..scalar.bytes.start];
            if scalar.block && indent.bytes().all(|b| b == b' ') {
                // Its lines written anew at its indentation, under its own `|` or `>` line (a
                // quoted scalar in its place would need that line rewritten too); the line
                // breaks after it are kept as written, so its chomping means the same.
                out.push_str(
                    &masked
                        .trim_end_matches('\n')
                        .replace('\n', &format!("\n{indent}")),
                );
                out.push_str(&written[written.trim_end().len()..]);
            } else if scalar.block {
                out.push_str(&self.mask(written));
            } else {
                match serde_json::to_string(&masked) {
                    Ok(quoted) => out.push_str(&quoted),
                    Err(_) => out.push_str(&self.mask(written)),
                }
                out.push_str(&written[written.trim_end().len()..]);
            }
            copied = scalar.bytes.end;
        }
        out.push_str(&self.mask(&text[copied..]));
        out
    }

    /// Masks every string of a JSON document in place (keys included).
    pub fn mask_json(&self, value: &mut serde_json::Value) {
        if self.is_empty() {
            return;
        }
        match value {
            serde_json::Value::String(s) => {
                if let Cow::Owned(masked) = self.mask(s) {
                    *s = masked;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(|v| self.mask_json(v)),
            serde_json::Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut v) in entries {
                    self.mask_json(&mut v);
                    // The API's own field names are never the user's (a secret `test` must
                    // not turn `latest` into `la******`); keys the user named are masked.
                    let key = if is_api_key(&key) {
                        key
                    } else {
                        self.mask(&key).into_owned()
                    };
                    map.insert(key, v);
                }
            }
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }

    /// An API error with the secrets masked in its message and in every problem's message.
    pub fn mask_error(&self, error: ApiError) -> ApiError {
        use ApiError as E;
        if self.is_empty() {
            return error;
        }
        let m = |s: String| self.mask(&s).into_owned();
        match error {
            E::Invalid {
                message,
                mut problems,
            } => {
                for p in &mut problems {
                    p.message = m(std::mem::take(&mut p.message));
                }
                E::Invalid {
                    message: m(message),
                    problems,
                }
            }
            E::BadRequest(s) => E::BadRequest(m(s)),
            E::NotFound(s) => E::NotFound(m(s)),
            E::Conflict(s) => E::Conflict(m(s)),
            E::TooMany(s) => E::TooMany(m(s)),
            E::Start(s) => E::Start(m(s)),
            E::ReadOnly(s) => E::ReadOnly(m(s)),
            E::RateLimited {
                message,
                retry_after,
            } => E::RateLimited {
                message: m(message),
                retry_after,
            },
            E::Unavailable(s) => E::Unavailable(m(s)),
            E::Timeout(s) => E::Timeout(m(s)),
            E::Internal(s) => E::Internal(m(s)),
        }
    }

    /// Whether a parsed tree still holds a secret: in a scalar or a key, or as the unmasked
    /// value of a sensitive key.
    fn left_in(&self, value: &Value) -> bool {
        let again = Secrets::in_value(value);
        if !again.is_empty() {
            return true;
        }
        let mut scalars = Vec::new();
        collect(value, true, &mut scalars);
        scalars
            .iter()
            .any(|s| self.values.iter().any(|secret| s.contains(secret.as_str())))
    }
}

/// `text` with its secrets masked (see the module docs). A text that does not parse as YAML
/// (a job's text always does: it was accepted) is withheld whole rather than returned unmasked.
pub fn redact(text: &str) -> Cow<'_, str> {
    const WITHHELD: &str = "# withheld: the job's YAML could not be re-read to mask its secrets\n";
    let Ok(document) = yaml::parse_with_spans(text) else {
        return Cow::Borrowed(WITHHELD);
    };
    let secrets = Secrets::in_value(&document.value);
    if secrets.is_empty() {
        return Cow::Borrowed(text);
    }
    let masked = secrets.mask_text(text, &document.scalars);
    match yaml::parse(&masked) {
        Ok(back)
            if !secrets.left_in(&back.value)
                && !secrets.values.iter().any(|s| masked.contains(s.as_str())) =>
        {
            Cow::Owned(masked)
        }
        _ => Cow::Borrowed(
            "# withheld: the job's YAML could not be re-written with its secrets masked\n",
        ),
    }
}

/// Collects secrets: the scalars under sensitive keys, and the passwords of connection strings.
/// With `every`, collects every scalar and key instead (to check a masked tree). Recursive: the
/// tree is at most [`weir_runtime::spec::positions::MAX_DEPTH`] deep, as the YAML pass refuses
/// deeper ones.
fn collect(value: &Value, every: bool, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if every {
                    out.push(key.clone());
                }
                if !every && is_sensitive(key) {
                    scalars(v, out);
                } else {
                    collect(v, every, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, every, out)),
        Value::String(s) if every => out.push(s.clone()),
        Value::String(s) => out.extend(connection_string_passwords(s)),
        Value::Bool(_) | Value::Number(_) if every => {
            out.extend(scalar_text(value));
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Every scalar under a sensitive key, as text.
fn scalars(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.iter().for_each(|(_, v)| scalars(v, out)),
        Value::Array(items) => items.iter().for_each(|v| scalars(v, out)),
        other => out.extend(scalar_text(other)),
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The secrets of every job this process hosts, for masking its log lines. A process-wide
/// registry because logging is process-wide: the log writer cannot be handed a host. Jobs
/// register their secrets when created and hold them; the registry holds them weakly, so a
/// job forgotten by its host takes its secrets with it.
#[derive(Debug, Default)]
pub struct Registry {
    jobs: RwLock<Vec<Weak<Secrets>>>,
}

/// The process's [`Registry`].
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

impl Registry {
    /// Masks `secrets` in log lines for as long as the returned handle lives.
    pub fn register(&self, secrets: Secrets) -> Arc<Secrets> {
        let secrets = Arc::new(secrets);
        if secrets.is_empty() {
            return secrets;
        }
        let mut jobs = self
            .jobs
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        jobs.retain(|w| w.strong_count() > 0);
        jobs.push(Arc::downgrade(&secrets));
        secrets
    }

    /// `text` with the secrets of every registered job masked.
    pub fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let jobs = self
            .jobs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Cow::Borrowed(text);
        for secrets in jobs.iter().filter_map(Weak::upgrade) {
            if let Cow::Owned(masked) = secrets.mask(&out) {
                out = Cow::Owned(masked);
            }
        }
        out
    }
}

/// Standard error with the [`registry`]'s secrets masked: a `tracing_subscriber` writer
/// (`.with_writer(MaskedStderr::default)`). The formatter writes each event in one call, so a
/// secret is never split between two writes.
#[derive(Debug, Default)]
pub struct MaskedStderr;

impl std::io::Write for MaskedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => {
                let masked = registry().mask(text);
                std::io::stderr().write_all(masked.as_bytes())?;
            }
            Err(_) => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn is_sensitive(key: &str) -> bool {
    weir_runtime::api::connector::names_a_secret(key)
}

/// The passwords of a connection string: each as written (quotes included) and, if quoted,
/// as its value.
fn connection_string_passwords(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(range) = url_password(s) {
        out.push(s[range].to_owned());
    }
    for range in keyword_passwords(s) {
        let written = &s[range];
        if let Some(inner) = written
            .strip_prefix('\'')
            .map(|w| w.strip_suffix('\'').unwrap_or(w))
        {
            out.push(inner.replace("\\'", "'").replace("\\\\", "\\"));
        }
        out.push(written.to_owned());
    }
    out
}

/// `s` with the passwords of a connection string masked, or `None` if it has none.
#[cfg(test)]
fn mask_connection_string(s: &str) -> Option<String> {
    let mut ranges: Vec<_> = url_password(s).into_iter().collect();
    ranges.extend(keyword_passwords(s));
    if ranges.is_empty() {
        return None;
    }
    ranges.sort_by_key(|r| std::cmp::Reverse(r.start));
    let mut masked = s.to_owned();
    for range in ranges {
        masked.replace_range(range, MASK);
    }
    Some(masked)
}

/// Where the password of `scheme://user:password@host...` is.
fn url_password(s: &str) -> Option<std::ops::Range<usize>> {
    let authority_start = s.find("://")? + 3;
    let rest = &s[authority_start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_len].rfind('@')?;
    let colon = rest[..at].find(':')?;
    let password = authority_start + colon + 1..authority_start + at;
    (!password.is_empty()).then_some(password)
}

/// Where the values of libpq's `password=value` or `password = 'quoted value'` are, every
/// time it appears.
fn keyword_passwords(s: &str) -> Vec<std::ops::Range<usize>> {
    let lower = s.to_ascii_lowercase();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key_end = from + found + "password".len();
        let starts_word =
            from + found == 0 || lower.as_bytes()[from + found - 1].is_ascii_whitespace();
        let after_key = skip_spaces(s, key_end);
        if !starts_word || !s[after_key..].starts_with('=') {
            from = key_end;
            continue;
        }
        let value_start = skip_spaces(s, after_key + 1);
        let value_end = value_end(s, value_start);
        if value_end > value_start {
            out.push(value_start..value_end);
        }
        from = value_end.max(after_key + 1);
    }
    out
}

fn skip_spaces(s: &str, at: usize) -> usize {
    at + s[at..].len() - s[at..].trim_start().len()
}

/// Where a libpq value starting at `start` ends: after its closing quote (backslash escapes
/// the next character), or at the next whitespace.
fn value_end(s: &str, start: usize) -> usize {
    let bytes = s.as_bytes();
    if bytes.get(start) != Some(&b'\'') {
        return s[start..]
            .find(char::is_whitespace)
            .map_or(s.len(), |n| start + n);
    }
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_a_connector_declares_are_masked_though_no_key_names_them() {
        let text = "name: j\nsources:\n  nexmark: {kind: nexmark, events: 10}\n\
                    sinks:\n  out:\n    kind: kafka\n    from: nexmark.bid\n    \
                    bootstrap-servers: 127.0.0.1:9092\n    topic: t\n    \
                    properties: {ssl.key.pem: PRIVATE-KEY-BYTES}\n";
        let loaded = weir_runtime::spec::load::parse_str("job.yaml", text, &[]).unwrap();
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let by_names = Secrets::of(text);
        assert_eq!(by_names.mask("PRIVATE-KEY-BYTES"), "PRIVATE-KEY-BYTES");
        let secrets = by_names.with_connectors(&loaded.spec);
        assert_eq!(
            secrets.mask("key: PRIVATE-KEY-BYTES."),
            format!("key: {MASK}.")
        );
    }

    #[test]
    fn a_text_without_secrets_comes_back_as_written() {
        let text = "# a comment\nname: q1\nsinks:\n  out: {kind: stdout}\n";
        assert!(matches!(redact(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn sensitive_keys_are_masked_wherever_they_are() {
        let text = "name: j\ncheckpoint:\n  storage:\n    url: s3://b/p\n    access-key-id: AKIA\n    \
                    secret-access-key: hunter2\nsinks:\n  - {Password: p1, api-token: t1}\n";
        let out = redact(text);
        for secret in ["hunter2", "p1", "t1"] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        assert!(out.contains("AKIA"), "a key id is not a secret:\n{out}");
        assert!(out.contains("s3://b/p"));
        let back = yaml::parse(&out).expect("still YAML").value;
        assert_eq!(back["checkpoint"]["storage"]["secret-access-key"], MASK);
    }

    #[test]
    fn connection_string_passwords_are_masked() {
        let cases = [
            (
                "host=db user=u password=hunter2 dbname=d",
                "host=db user=u password=****** dbname=d",
            ),
            (
                "password = 'hunter 2\\' x' host=db",
                "password = ****** host=db",
            ),
            (
                "postgres://u:hunter2@db:5432/d?sslmode=off",
                "postgres://u:******@db:5432/d?sslmode=off",
            ),
            ("PASSWORD=x", "PASSWORD=******"),
        ];
        for (given, want) in cases {
            assert_eq!(
                mask_connection_string(given).as_deref(),
                Some(want),
                "{given}"
            );
        }
        for untouched in [
            "host=db user=u dbname=d",
            "postgres://u@db/d",
            "passwordless=1",
            "my-password-file=/x",
        ] {
            assert_eq!(mask_connection_string(untouched), None, "{untouched}");
        }
        let text = "sinks:\n  out:\n    kind: postgres\n    connection: host=db password=hunter2\n";
        let out = redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(out.contains("host=db password=******"), "{out}");
    }

    #[test]
    fn a_secret_copied_by_an_alias_is_masked_where_it_lands_and_comments_survive() {
        let text = "# the job\nname: j\ncheckpoint:\n  storage:\n    url: s3://b/p\n    \
                    secret-access-key: &k hunter2 # rotate monthly\ndescription: *k\n";
        let out = redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(
            out.contains("# the job") && out.contains("# rotate monthly"),
            "{out}"
        );
        let back = yaml::parse(&out).expect("still YAML").value;
        assert_eq!(back["description"], MASK, "{out}");
    }

    #[test]
    fn a_secret_repeated_in_flow_style_quoted_or_inside_other_text_is_masked() {
        let text = "name: j\ndescription: \"reach us with 'hunter2' or s3cr3t!\"\n\
                    sinks:\n  - {kind: postgres, connection: 'host=db password=s3cr3t!', table: t}\n\
                    extra: [\"hunter2\", 'hunter2']\nsources:\n  a: {password: \"hunter2\"}\n";
        let out = redact(text);
        for secret in ["hunter2", "s3cr3t!"] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        assert!(out.contains("reach us with"), "{out}");
        assert!(out.contains("host=db password=******"), "{out}");
    }

    #[test]
    fn a_secret_spelt_with_escapes_is_masked_where_it_is_written() {
        // `\x68` is `h`: the value is hunter2, the text never says so literally.
        let text = "name: j # comment\npassword: \"\\x68unter2\"\ndescription: hunter2 again\n";
        let out = redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        assert!(!out.contains("\\x68unter2"), "{out}");
        assert!(out.contains("name: j # comment"), "comments survive: {out}");
        let back = yaml::parse(&out).expect("still YAML").value;
        assert_eq!(back["password"], MASK);
        assert_eq!(back["description"], format!("{MASK} again"));
    }

    #[test]
    fn secrets_are_masked_by_value_in_messages_and_json() {
        let secrets = Secrets::of(
            "name: j\nsinks:\n  o: {connection: \"postgres://u:pa55word@db/d\"}\napi-token: tok-123\n",
        );
        assert_eq!(
            secrets.mask("connecting with pa55word failed; token tok-123"),
            format!("connecting with {MASK} failed; token {MASK}")
        );
        assert!(matches!(secrets.mask("nothing here"), Cow::Borrowed(_)));
        let mut json = serde_json::json!({
            "description": "uses tok-123",
            "nodes": [{"error": "pa55word rejected"}],
            "tok-123": 1,
        });
        secrets.mask_json(&mut json);
        let text = json.to_string();
        assert!(
            !text.contains("tok-123") && !text.contains("pa55word"),
            "{text}"
        );
        let e = secrets.mask_error(ApiError::Start("login as u/pa55word".into()));
        assert_eq!(e.to_string(), format!("login as u/{MASK}"));
    }

    #[test]
    fn the_apis_own_field_names_are_never_masked_the_users_are() {
        // A short secret inside an API field name (`latest`, `status`) must leave the field
        // readable; a map key the user named (a node called after the secret) is masked.
        let secrets = Secrets::of("name: j\nsecret-access-key: test\n");
        let mut json = serde_json::json!({
            "latest": {"status": "test run", "bytes": 3},
            "my-test-node": 1,
        });
        secrets.mask_json(&mut json);
        assert_eq!(
            json,
            serde_json::json!({
                "latest": {"status": format!("{MASK} run"), "bytes": 3},
                format!("my-{MASK}-node"): 1,
            })
        );
    }

    #[test]
    fn the_api_key_list_is_every_property_of_the_openapi_document() {
        let doc = crate::openapi::build();
        let mut defined = std::collections::BTreeSet::new();
        let mut stack = vec![&doc];
        while let Some(v) = stack.pop() {
            match v {
                Value::Object(map) => {
                    if let Some(Value::Object(properties)) = map.get("properties") {
                        defined.extend(properties.keys().map(String::as_str));
                    }
                    stack.extend(map.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        assert!(
            API_KEYS.windows(2).all(|w| w[0] < w[1]),
            "API_KEYS is sorted, each name once (it is searched by bisection)"
        );
        let listed: std::collections::BTreeSet<&str> = API_KEYS.into_iter().collect();
        let missing: Vec<_> = defined.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&defined).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "API_KEYS must list exactly the document's property names: add {missing:?}, \
             remove {stale:?}"
        );
    }

    #[test]
    fn log_lines_are_masked_while_the_job_that_registered_them_is_kept() {
        let registry = Registry::default();
        let kept = registry.register(Secrets::of("password: zebra-77\n"));
        assert_eq!(registry.mask("failed: zebra-77"), format!("failed: {MASK}"));
        drop(kept);
        assert_eq!(registry.mask("failed: zebra-77"), "failed: zebra-77");
    }

    #[test]
    fn secrets_given_by_overrides_are_secrets_too() {
        let set = |s: &str| s.parse::<Override>().expect("an override");
        let secrets = Secrets::of_job(
            "name: j\npassword: in-the-file\n",
            &[
                set("checkpoint.storage.secret-access-key=from-set-1"),
                set("sinks.db.connection=host=db password=from-set-2"),
                set("sinks.db.table=not-a-secret"),
            ],
        );
        assert_eq!(
            secrets.mask("in-the-file from-set-1 from-set-2 not-a-secret"),
            format!("{MASK} {MASK} {MASK} not-a-secret")
        );
    }

    #[test]
    fn comments_and_layout_survive_masking_of_block_and_plain_scalars() {
        let text = "# job: j\nname: j # the name\nsinks:\n  db:\n    password: hunter2 # rotate\n    \
                    notes: |\n      ask for hunter2\n      at the desk\n    kind: postgres\n# end\n";
        let out = redact(text);
        assert!(!out.contains("hunter2"), "{out}");
        for kept in [
            "# job: j",
            "# the name",
            "# rotate",
            "# end",
            "    kind: postgres\n",
        ] {
            assert!(out.contains(kept), "{kept:?} lost:\n{out}");
        }
        let back = yaml::parse(&out).expect("still YAML").value;
        assert_eq!(back["sinks"]["db"]["password"], MASK);
        assert_eq!(
            back["sinks"]["db"]["notes"],
            format!("ask for {MASK}\nat the desk\n")
        );
        assert_eq!(back["sinks"]["db"]["kind"], "postgres");
    }

    #[test]
    fn a_secret_written_as_a_block_scalar_is_masked_with_the_layout_kept() {
        let text = "sinks:\n  db:\n    password: |\n      hunter2\n    kind: postgres # pg\n    \
                    token: >-\n      two\n      words\n    table: t\ndescription: hunter2 rotates\n";
        let out = redact(text);
        assert!(!out.starts_with("# withheld"), "{out}");
        assert!(!out.contains("hunter2") && !out.contains("words"), "{out}");
        assert!(out.contains("    kind: postgres # pg\n"), "{out}");
        let back = yaml::parse(&out).expect("still YAML").value;
        assert_eq!(back["sinks"]["db"]["password"], format!("{MASK}\n"));
        assert_eq!(back["sinks"]["db"]["token"], MASK);
        assert_eq!(back["sinks"]["db"]["table"], "t");
        assert_eq!(back["description"], format!("{MASK} rotates"));
    }

    #[test]
    fn a_text_that_is_not_yaml_is_withheld() {
        assert!(redact("a: [unclosed").starts_with("# withheld"));
    }
}
