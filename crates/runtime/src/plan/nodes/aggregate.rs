//! `aggregate`: a running aggregate per key over a `key-by` node, emitted as an updating
//! stream keyed by the key columns (the key columns, then one column per aggregate call).
//! Over an updating input its accumulators take rows back, and it aggregates in one phase.
//! Its `mini-batch`, or else the job's, makes it emit once per mini-batch.

use std::sync::Arc;

use super::Explained;
use super::{Compiled, Planned, Planner, QueryShape, Reads, columns_of_calls};
use crate::changelog::ChangelogMode;
use crate::operators::accumulators::Accumulators;
use crate::operators::aggregate::{AggCall, Aggregate, MiniBatch};
use crate::operators::keyed::KeyEncoder;
use crate::query::StateShape;
use crate::spec::AggregateSpec;
use crate::spec::JobSpec;

pub(super) fn plan(p: &mut Planner<'_, '_>, a: &AggregateSpec) -> Option<Compiled> {
    let keys = match p.input_compiled(0)? {
        Compiled::KeyBy { keys, .. } => keys.clone(),
        _ => {
            let (_, name, kind) = p.input_def(0)?;
            let message = format!(
                "an aggregate reads a `key-by` node, and `{name}` is a {kind}; add a key-by between them"
            );
            p.problem("from", message);
            return None;
        }
    };
    let schema = p.input.clone();
    let mut calls = Vec::new();
    let mut names = Vec::new();
    for (name, sql) in &a.aggregates {
        let key = format!(
            "aggregates/{}",
            crate::spec::positions::escape_segment(name)
        );
        if keys.names().contains(name) {
            p.problem_at_key(
                &key,
                format!("`{name}` is already a key column; choose another name"),
            );
        }
        match AggCall::compile(sql, &schema) {
            Ok(c) => {
                calls.push(c);
                names.push(name.clone());
            }
            Err(message) => p.problem(&key, message),
        }
    }
    let updating = !ChangelogMode::of(&schema).is_append();
    let out = Aggregate::output_schema(&keys, &names, &calls, updating);
    let read = columns_of_calls(&calls);
    let schema = out.clone();
    let aggs = Arc::new(Accumulators { calls });
    // The local phase only adds: over an updating input, one phase.
    let local = if updating {
        None
    } else {
        p.local_phase(&keys, &aggs, None)
    };
    // The global phase of two phases addresses its state by the same keys over the partials.
    let encoded = local.as_ref().map_or(&keys, |l| &l.partial_keys).clone();
    let partials = local.is_some();
    let mini_batch = a.mini_batch.or(p.mini_batch).map(|m| MiniBatch {
        size: m.size as usize,
        interval: m.interval.0,
    });
    let mut planned = Planned::keyed(
        out,
        Arc::new(move |_, state| {
            Ok(Box::new(
                Aggregate::new(
                    KeyEncoder::new(encoded.clone())?,
                    aggs.clone(),
                    schema.clone(),
                    state,
                    updating,
                )?
                .merging_partials(partials)
                .with_mini_batch(mini_batch),
            ))
        }),
    );
    planned.local = local;
    planned.reads = Some(Reads::only(vec![read]));
    planned.state_ttl = a.state_ttl;
    planned.query_shape = Some(QueryShape {
        kind: "aggregate",
        values: names,
        keys,
        states: &[("accumulators", StateShape::Accumulators)],
    });
    Some(Compiled::Operator(planned))
}

/// What `weir explain` says the node keeps, what fires it and how it batches.
pub(super) fn explain(a: &AggregateSpec, job: &JobSpec) -> Explained {
    let mini_batch = match (&a.mini_batch, &job.mini_batch) {
        (Some(m), _) => Some((m, "")),
        (None, Some(m)) => Some((m, ", the job's")),
        (None, None) => None,
    };
    Explained {
        state: Some(
            "accumulators per key, kept until the key is idle for state.ttl (an updating \
             stream: per key and batch, +I for a new key, -U and +U for a change, -D when its \
             last row is taken back)"
                .into(),
        ),
        timers: None,
        mini_batch: mini_batch.map(|(m, whose)| {
            format!(
                "every {} or {} input rows{whose}, and before each checkpoint barrier: one \
                 update per key per mini-batch; holds one entry per key touched, at most {}",
                m.interval, m.size, m.size
            )
        }),
    }
}
