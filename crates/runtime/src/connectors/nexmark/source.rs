//! The Nexmark generator as a parallel source with ports `person`, `auction` and `bid`.
//!
//! Subtask `i` of `p` emits the events numbered `i, i + p, i + 2p, ...` (its *split*): every
//! subtask's event time advances at the same pace, so their watermarks stay together. Only the
//! kinds some operator reads are built into batches; the others are skipped without being
//! materialised.
//!
//! A checkpoint records each split's position. A restore at another parallelism hands the old
//! splits out round-robin: a subtask with several reads from the one whose next event comes
//! first, so its output stays in event-time order; a subtask with none has nothing to emit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_schema::SchemaRef;
use futures::future::BoxFuture;

use super::spec::NexmarkSourceSpec;
use super::{Generator, GeneratorConfig, Kinds, Split, auction_schema, bid_schema, person_schema};
use crate::api::{OperatorError, Source, SourceEvent, SubtaskMetrics};

/// Port names in port order.
pub const PORTS: [&str; 3] = ["person", "auction", "bid"];

/// The schema of each port, in port order.
pub fn port_schemas() -> Vec<(String, SchemaRef)> {
    vec![
        (PORTS[0].to_string(), person_schema()),
        (PORTS[1].to_string(), auction_schema()),
        (PORTS[2].to_string(), bid_schema()),
    ]
}

/// The generator configuration a source spec describes.
pub fn generator_config(spec: &NexmarkSourceSpec) -> GeneratorConfig {
    GeneratorConfig {
        seed: spec.seed,
        base_time_ms: spec.base_time,
        inter_event_delay_ns: u64::try_from(spec.inter_event_delay.0.as_nanos())
            .unwrap_or(u64::MAX),
        num_active_people: spec.active_people,
        num_in_flight_auctions: spec.in_flight_auctions,
        ..GeneratorConfig::default()
    }
}

pub struct NexmarkSource {
    /// Usually one; several after a restore at a lower parallelism, none at a higher one.
    splits: Vec<Split>,
    want: Kinds,
    batch_size: usize,
    /// Events per second for this subtask, if rate-limited.
    rate: Option<f64>,
    /// When this subtask emitted its first event in this run, and how many since.
    started: Option<Instant>,
    emitted: u64,
    metrics: Arc<SubtaskMetrics>,
}

impl NexmarkSource {
    /// `want[port]` says which ports are read downstream.
    pub fn new(
        splits: Vec<Split>,
        spec: &NexmarkSourceSpec,
        parallelism: usize,
        want: &[bool],
        batch_size: usize,
        metrics: Arc<SubtaskMetrics>,
    ) -> Self {
        let at = |i: usize| want.get(i).copied().unwrap_or(false);
        // Progress is where the splits are, restored positions included: a job resumed from
        // a snapshot (on another server, or after a restart) shows how far its input is, not
        // how much of it this run read.
        let at_start: u64 = splits.iter().map(Split::position).sum();
        metrics
            .progress
            .store(at_start, std::sync::atomic::Ordering::Relaxed);
        Self {
            splits,
            want: Kinds {
                person: at(0),
                auction: at(1),
                bid: at(2),
            },
            batch_size: batch_size.max(1),
            rate: spec.rate.map(|r| r as f64 / parallelism as f64),
            started: None,
            emitted: 0,
            metrics,
        }
    }

    /// How many events may go out now, waiting until at least one may.
    async fn allowance(&mut self) -> usize {
        let Some(rate) = self.rate else {
            return self.batch_size;
        };
        let started = *self.started.get_or_insert_with(Instant::now);
        loop {
            let due = (started.elapsed().as_secs_f64() * rate) as u64;
            if due > self.emitted {
                return ((due - self.emitted) as usize).min(self.batch_size);
            }
            let next = Duration::from_secs_f64((self.emitted + 1) as f64 / rate);
            tokio::time::sleep_until((started + next).into()).await;
        }
    }
}

impl Source for NexmarkSource {
    fn next(&mut self) -> BoxFuture<'_, Result<SourceEvent, OperatorError>> {
        Box::pin(async move {
            self.splits.retain(|s| !s.is_done());
            if self.splits.is_empty() {
                return Ok(SourceEvent::End);
            }
            // Waiting happens before any state changes: dropping this future loses nothing.
            let n = self.allowance().await;
            let want = self.want;
            let Some(split) = self.splits.iter_mut().min_by_key(|s| s.next_event()) else {
                return Ok(SourceEvent::End);
            };
            let batch = split.next_batch(n, want);
            self.emitted += batch.events;
            SubtaskMetrics::add(&self.metrics.events, batch.events);
            SubtaskMetrics::add(&self.metrics.progress, batch.events);
            let mut out = Vec::with_capacity(3);
            for (port, b) in [batch.person, batch.auction, batch.bid]
                .into_iter()
                .enumerate()
            {
                if let Some(b) = b {
                    out.push((port, b));
                }
            }
            Ok(SourceEvent::Batches(out))
        })
    }

    fn watermark_bound(&self) -> Option<i64> {
        // Nothing earlier than a split's next event can come from it any more. Asked even of
        // one split: splits that finished earlier may have run ahead of it (a split emits a
        // whole batch at a time), and the largest event time seen includes theirs.
        self.splits
            .iter()
            .filter(|s| !s.is_done())
            .map(|s| s.generator().event_time(s.next_event()).saturating_sub(1))
            .min()
    }

    fn snapshot(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        let splits: Vec<SplitState> = self
            .splits
            .iter()
            .map(|s| SplitState {
                index: s.index(),
                of: s.of(),
                position: s.position(),
            })
            .collect();
        Ok(Some(serde_json::json!({ "splits": splits })))
    }
}

/// A split's checkpointed position: split `index` of `of`, `position` events emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitState {
    pub index: u64,
    pub of: u64,
    pub position: u64,
}

#[derive(serde::Deserialize)]
struct SourceState {
    splits: Vec<SplitState>,
}

/// The splits subtask `subtask` of `parallelism` takes from the old subtasks' states: all of
/// them in (parallelism, index) order, dealt out round-robin.
pub fn assign_splits(
    states: impl Iterator<Item = serde_json::Value>,
    subtask: usize,
    parallelism: usize,
) -> Result<Vec<SplitState>, String> {
    let mut all = Vec::new();
    for state in states {
        let s: SourceState = serde_json::from_value(state)
            .map_err(|e| format!("a Nexmark source position is not valid: {e}"))?;
        all.extend(s.splits);
    }
    all.sort_by_key(|s| (s.of, s.index));
    all.dedup_by_key(|s| (s.of, s.index));
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % parallelism == subtask)
        .map(|(_, s)| s)
        .collect())
}

/// Makes the subtasks of a Nexmark source; they share one generator (and its text buffer).
pub struct NexmarkSourceFactory {
    spec: NexmarkSourceSpec,
    generator: Arc<Generator>,
}

impl NexmarkSourceFactory {
    /// Fails with a message when the spec's generator settings are inconsistent.
    pub fn new(spec: &NexmarkSourceSpec) -> Result<Self, String> {
        let generator = Generator::try_new(generator_config(spec)).map_err(|e| e.to_string())?;
        Ok(Self {
            generator: Arc::new(generator),
            spec: spec.clone(),
        })
    }
}

impl crate::api::SourceFactory for NexmarkSourceFactory {
    fn prepare(&self, _parallelism: usize) -> Result<Option<u64>, OperatorError> {
        Ok(self.spec.events)
    }

    fn create(&self, ctx: &crate::api::SubtaskContext) -> Result<Box<dyn Source>, OperatorError> {
        let splits = match &ctx.restore {
            Some(restore) if restore.own_states().next().is_some() => {
                let states = restore.own_states().cloned();
                assign_splits(states, ctx.subtask, ctx.parallelism)
                    .map_err(OperatorError::Data)?
                    .into_iter()
                    .map(|s| {
                        let of = usize::try_from(s.of).unwrap_or(usize::MAX);
                        let index = usize::try_from(s.index).unwrap_or(usize::MAX);
                        if of == 0 || index >= of {
                            return Err(OperatorError::Data(format!(
                                "a restored Nexmark split is {index} of {of}"
                            )));
                        }
                        let mut split =
                            Split::new(self.generator.clone(), index, of, self.spec.events);
                        split.seek(s.position);
                        Ok(split)
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            _ => vec![Split::new(
                self.generator.clone(),
                ctx.subtask,
                ctx.parallelism,
                self.spec.events,
            )],
        };
        Ok(Box::new(NexmarkSource::new(
            splits,
            &self.spec,
            ctx.parallelism,
            &ctx.want,
            ctx.batch_size,
            ctx.metrics.clone(),
        )))
    }
}
