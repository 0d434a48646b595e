//! Each hosted job's own log: the warnings and errors (and, while someone asks, the `info`
//! lines) its tasks write through `tracing`, kept in a bounded buffer per job for the API and
//! the dashboard's Logs tab. The lines still go to stderr as before; this is a second reader.
//!
//! The host runs each job inside a span carrying the job's [`JobLog::key`] (field
//! [`FIELD`]); the runtime spawns its supervisor, attempts and tasks in that span, so every
//! event a job's task emits has it among its ancestors. [`JobLogLayer`] looks the key up in
//! the event's span scope and appends the line to that job's buffer; an event outside any
//! job's span costs one walk up an empty scope.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use weir_state::clock::now_ms;

/// The span field that names a job's log.
pub const FIELD: &str = "weir_log";

/// Lines kept per job, oldest dropped first.
pub const LINES: usize = 500;

/// Longest line kept, in bytes (a longer one is cut, and says so).
pub const LINE_BYTES: usize = 4096;

/// How long a request for `info` lines keeps them being captured.
pub const INFO_FOR_MS: i64 = 60_000;

/// One captured log line.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct LogLine {
    /// Counted from 1 per job: a client asks for lines after the last it has.
    pub seq: u64,
    /// Epoch ms.
    pub at: i64,
    /// `error`, `warn` or `info`.
    pub level: &'static str,
    /// Where it was written (the module path).
    pub target: String,
    /// The message, then its fields as `key=value`, secrets masked.
    pub message: String,
}

/// One job's buffer.
#[derive(Debug)]
pub struct JobLog {
    key: u64,
    lines: Mutex<VecDeque<LogLine>>,
    next_seq: AtomicU64,
    /// Until when (epoch ms) `info` lines are captured too; 0: warnings and errors only.
    info_until: AtomicI64,
    /// Lines dropped because the buffer was full.
    dropped: AtomicU64,
}

impl JobLog {
    /// A new, empty log, registered so that the layer finds it by its key.
    pub fn new() -> Arc<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let log = Arc::new(JobLog {
            key: NEXT.fetch_add(1, Ordering::Relaxed),
            lines: Mutex::new(VecDeque::new()),
            next_seq: AtomicU64::new(1),
            info_until: AtomicI64::new(0),
            dropped: AtomicU64::new(0),
        });
        registry()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(log.key, Arc::downgrade(&log));
        log
    }

    /// The value of [`FIELD`] in the job's span.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The span a job's runs go in.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!("job", weir_log = self.key)
    }

    /// Captures `info` lines too for the next [`INFO_FOR_MS`].
    pub fn want_info(&self) {
        self.info_until
            .store(now_ms().saturating_add(INFO_FOR_MS), Ordering::Relaxed);
    }

    /// Whether `info` lines are captured now.
    pub fn info_wanted(&self) -> bool {
        self.info_until.load(Ordering::Relaxed) >= now_ms()
    }

    /// Lines after `after` (a `seq`), oldest first, and how many were dropped in all.
    pub fn lines_after(&self, after: u64) -> (Vec<LogLine>, u64) {
        let lines = self.lock();
        let out = lines.iter().filter(|l| l.seq > after).cloned().collect();
        (out, self.dropped.load(Ordering::Relaxed))
    }

    fn push(&self, level: &'static str, target: &str, message: String) {
        let mut lines = self.lock();
        if lines.len() == LINES {
            lines.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        lines.push_back(LogLine {
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            at: now_ms(),
            level,
            target: target.to_owned(),
            message,
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<LogLine>> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for JobLog {
    fn drop(&mut self) {
        registry()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// Every live job log by key. Weak: a log lives as long as its job.
fn registry() -> &'static Mutex<HashMap<u64, Weak<JobLog>>> {
    static LOGS: OnceLock<Mutex<HashMap<u64, Weak<JobLog>>>> = OnceLock::new();
    LOGS.get_or_init(Default::default)
}

/// The log a job's span names, found in the registry once when the span is made and kept in
/// its extensions: an event then reaches its log without the registry's lock.
struct LogRef(Weak<JobLog>);

/// The `tracing` layer that copies each job's lines into its [`JobLog`]. Add it beside the
/// stderr layer; give it no filter of its own coarser than `info` (it filters per job).
#[derive(Default)]
pub struct JobLogLayer;

impl<S> Layer<S> for JobLogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().fields().field(FIELD).is_none() {
            return;
        }
        let mut visitor = KeyVisitor(None);
        attrs.record(&mut visitor);
        let Some(key) = visitor.0 else { return };
        let log = registry()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let (Some(log), Some(span)) = (log, ctx.span(id)) {
            span.extensions_mut().insert(LogRef(log));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let level = *event.metadata().level();
        if level > Level::INFO {
            return;
        }
        let Some(scope) = ctx.event_scope(event) else {
            return;
        };
        let Some(log) = scope
            .from_root()
            .find_map(|span| span.extensions().get::<LogRef>().map(|l| l.0.clone()))
            .and_then(|weak| weak.upgrade())
        else {
            return;
        };
        if level == Level::INFO && !log.info_wanted() {
            return;
        }
        let mut text = MessageVisitor::default();
        event.record(&mut text);
        let mut message = text.message;
        if !text.fields.is_empty() {
            if !message.is_empty() {
                message.push(' ');
            }
            message.push_str(&text.fields);
        }
        if message.len() > LINE_BYTES {
            let mut cut = LINE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" … (cut)");
        }
        // Secrets of any hosted job a line may quote (a connection string in an error).
        let message = crate::redact::registry().mask(&message).into_owned();
        let level = match level {
            Level::ERROR => "error",
            Level::WARN => "warn",
            _ => "info",
        };
        log.push(level, event.metadata().target(), message);
    }
}

struct KeyVisitor(Option<u64>);

impl Visit for KeyVisitor {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == FIELD {
            self.0 = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == FIELD {
            self.0 = u64::try_from(value).ok();
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
}

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.field(field, format_args!("{value}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }
}

impl MessageVisitor {
    fn field(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        if !self.fields.is_empty() {
            self.fields.push(' ');
        }
        let _ = write!(self.fields, "{}={value}", field.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn lines_go_to_the_log_of_the_job_whose_span_they_are_in() {
        let subscriber = tracing_subscriber::registry().with(JobLogLayer);
        let (a, b) = (JobLog::new(), JobLog::new());
        tracing::subscriber::with_default(subscriber, || {
            let span = a.span();
            let _in_a = span.enter();
            let task = tracing::info_span!("task", task = "t");
            let _in_task = task.enter();
            tracing::warn!(records = 3, "slow sink");
            tracing::info!("not wanted");
            a.want_info();
            tracing::info!("wanted now");
            drop(_in_task);
            drop(_in_a);
            let _in_b = b.span().entered();
            tracing::error!(error = "boom", "failed");
            drop(_in_b);
            tracing::warn!("outside every job");
        });
        let (lines_a, _) = a.lines_after(0);
        let messages: Vec<_> = lines_a.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(messages, ["slow sink records=3", "wanted now"]);
        assert_eq!(lines_a[0].level, "warn");
        let (lines_b, _) = b.lines_after(0);
        assert_eq!(lines_b.len(), 1);
        assert_eq!(lines_b[0].message, "failed error=boom");
        assert_eq!(lines_b[0].level, "error");
        assert!(a.lines_after(lines_a[0].seq).0.len() == 1);
    }

    #[test]
    fn the_buffer_keeps_the_newest_lines_and_counts_what_it_dropped() {
        let subscriber = tracing_subscriber::registry().with(JobLogLayer);
        let log = JobLog::new();
        tracing::subscriber::with_default(subscriber, || {
            let _in = log.span().entered();
            for i in 0..LINES + 7 {
                tracing::warn!("line {i}");
            }
        });
        let (lines, dropped) = log.lines_after(0);
        assert_eq!(lines.len(), LINES);
        assert_eq!(dropped, 7);
        assert_eq!(lines[0].message, "line 7");
        assert_eq!(lines[LINES - 1].message, format!("line {}", LINES + 6));
    }
}
