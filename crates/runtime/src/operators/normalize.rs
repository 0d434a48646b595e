//! The changelog normaliser: an upsert stream in, a retract stream out (Flink's
//! `ChangelogNormalize`).
//!
//! A source of `format: upsert-json` says only each key's new row (`+U`) and, for a delete, the
//! key (`-D`, the other columns null); the operators that take changes back need the old row.
//! The planner puts this operator right after such a source, reading it partitioned by the
//! upsert key, and it keeps each key's last row in keyed state:
//! - a new row for a key with none is `+I`;
//! - a new row for a key with one is `-U` of the old row and `+U` of the new, or nothing when
//!   they are equal (a record written twice, a replay after a restore);
//! - a delete of a key with a row is `-D` of that row; of a key with none it is counted as
//!   skipped and dropped (a compacted topic read from its middle, a delete written twice), as
//!   Flink drops it.
//!
//! State: one encoded row per live key. The output is keyed by the upsert key, so sinks that
//! apply changes by that key write each key's row in place.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use weir_state::{KeyedStateBackend, NO_NAMESPACE, ValueId};

use super::keyed::{KeyEncoder, RowCodec};
use crate::api::{Operator, OperatorError, SubtaskMetrics};
use crate::changelog::{self, RowKind};

/// What a normaliser is, shared by its subtasks.
pub struct NormalizeDef {
    /// The data columns (without [`changelog::OP`]), in and out.
    pub data: SchemaRef,
    /// The output: the data columns and the row kind, keyed by the upsert key.
    pub schema: SchemaRef,
}

pub struct Normalize {
    def: Arc<NormalizeDef>,
    keys: KeyEncoder,
    rows: RowCodec,
    state: KeyedStateBackend,
    last: ValueId<Vec<u8>>,
    metrics: Arc<SubtaskMetrics>,
    columns: Vec<usize>,
}

impl Normalize {
    pub fn new(
        def: Arc<NormalizeDef>,
        keys: KeyEncoder,
        mut state: KeyedStateBackend,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        Ok(Self {
            last: state.value_state("last")?,
            rows: RowCodec::new(def.data.clone())?,
            columns: (0..def.data.fields().len()).collect(),
            def,
            keys,
            state,
            metrics,
        })
    }
}

impl Operator for Normalize {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let keys = self.keys.encode(&batch)?;
        let rows = self.rows.encode(&batch.project(&self.columns)?)?;
        let ops = changelog::kinds(&batch);
        let mut changes: Vec<(RowKind, Vec<u8>)> = Vec::new();
        let mut unknown_deletes = 0u64;
        for i in 0..batch.num_rows() {
            let kind = ops.map_or(RowKind::UpdateAfter, |ops| changelog::kind_at(ops, i));
            let row = rows.row(i).data();
            self.state
                .value(&self.last)
                .update(keys.key(i), NO_NAMESPACE, |last| {
                    if kind.is_addition() {
                        match last {
                            None => changes.push((RowKind::Insert, row.to_vec())),
                            Some(old) if old.as_slice() == row => return,
                            Some(old) => {
                                changes.push((RowKind::UpdateBefore, std::mem::take(old)));
                                changes.push((RowKind::UpdateAfter, row.to_vec()));
                            }
                        }
                        *last = Some(row.to_vec());
                    } else {
                        match last.take() {
                            Some(old) => changes.push((RowKind::Delete, old)),
                            None => unknown_deletes += 1,
                        }
                    }
                })?;
        }
        if unknown_deletes > 0 {
            SubtaskMetrics::add(&self.metrics.skipped, unknown_deletes);
        }
        if changes.is_empty() {
            return Ok(());
        }
        let decoded = self
            .rows
            .decode(changes.iter().map(|(_, r)| r.as_slice()))?;
        let mut columns = decoded.columns().to_vec();
        columns.push(changelog::op_array(changes.iter().map(|(k, _)| *k)));
        out.push(RecordBatch::try_new(self.def.schema.clone(), columns)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::testing::{Harness, Random};

    /// A Kafka source of `upsert-json` keyed by `id` (planning it reaches no broker) and the
    /// normaliser the planner puts after it.
    fn job(state: &str) -> String {
        format!(
            "name: normalize-test\n{state}sources:\n  \
             src:\n    kind: kafka\n    bootstrap-servers: 127.0.0.1:9\n    topic: t\n    \
             format: upsert-json\n    key: [id]\n    schema: {{id: int, v: int, s: string}}\n\
             sinks:\n  out: {{kind: file, path: unused.jsonl, format: changelog-json, from: src}}\n"
        )
    }

    /// Applies an output changelog to a table of live rows by `id`, failing on anything a
    /// well-formed retract stream keyed by `id` cannot say.
    fn apply(table: &mut BTreeMap<i64, Value>, pending_before: &mut Option<Value>, row: &Value) {
        let mut data = row.clone();
        let op = data
            .as_object_mut()
            .and_then(|o| o.remove("__op"))
            .expect("a kind");
        let id = data["id"].as_i64().expect("an id");
        match op.as_str().expect("a short kind") {
            "+I" => {
                assert!(pending_before.is_none(), "+I after an unanswered -U");
                assert!(table.insert(id, data).is_none(), "+I of live key {id}");
            }
            "-U" => {
                assert!(pending_before.is_none(), "two -U in a row");
                assert_eq!(table.remove(&id).as_ref(), Some(&data), "-U of no live row");
                *pending_before = Some(json!(id));
            }
            "+U" => {
                assert_eq!(pending_before.take(), Some(json!(id)), "+U without its -U");
                assert!(table.insert(id, data).is_none());
            }
            "-D" => {
                assert!(pending_before.is_none(), "-D after an unanswered -U");
                assert_eq!(table.remove(&id).as_ref(), Some(&data), "-D of no live row");
            }
            other => panic!("unknown kind {other}"),
        }
    }

    /// Random upserts and deletes (keys reused after deletion, deletes of keys never seen,
    /// values written twice), in batches of random sizes with restarts between them: the table
    /// the output builds is the naive table of the latest value per key, at every step.
    #[test]
    fn random_upserts_build_the_table_of_the_last_value_per_key() {
        for state in ["", "state: {backend: rocksdb}\n"] {
            for seed in 1..=6u64 {
                let mut rng = Random(seed * 7919);
                let mut h = Harness::new(&job(state), "src.normalize");
                let mut naive: BTreeMap<i64, Value> = BTreeMap::new();
                let mut built: BTreeMap<i64, Value> = BTreeMap::new();
                let mut pending = None;
                for _ in 0..40 {
                    let n = 1 + rng.below(12) as usize;
                    let mut rows = Vec::with_capacity(n);
                    for _ in 0..n {
                        let id = rng.below(10) as i64;
                        if rng.below(4) == 0 {
                            rows.push(json!({"id": id, "v": null, "s": null, "__op": "-D"}));
                            naive.remove(&id);
                        } else {
                            // Few values: the same row written again must say nothing.
                            let v = rng.below(3) as i64;
                            let row = json!({"id": id, "v": v, "s": format!("s{v}")});
                            let mut change = row.clone();
                            change["__op"] = json!("+U");
                            rows.push(change);
                            naive.insert(id, row);
                        }
                    }
                    h.push(0, &rows);
                    for row in h.take() {
                        apply(&mut built, &mut pending, &row);
                    }
                    assert_eq!(built, naive, "seed {seed}, state {state:?}");
                    if rng.below(5) == 0 {
                        h.restart();
                    }
                }
            }
        }
    }

    #[test]
    fn an_unchanged_row_and_a_delete_of_an_unknown_key_say_nothing() {
        let mut h = Harness::new(&job(""), "src.normalize");
        h.push(0, &[json!({"id": 1, "v": null, "s": null, "__op": "-D"})]);
        assert!(h.take().is_empty());
        let row = json!({"id": 1, "v": 5, "s": "a", "__op": "+U"});
        h.push(0, std::slice::from_ref(&row));
        assert_eq!(
            h.take(),
            vec![json!({"id": 1, "v": 5, "s": "a", "__op": "+I"})]
        );
        h.push(0, &[row]);
        assert!(h.take().is_empty());
    }
}
