//! The regular join over changes: an inner join of updating inputs, and LEFT, RIGHT and FULL
//! OUTER joins of any inputs (Flink's `StreamingJoinOperator`).
//!
//! Each side keeps, per join key, the multiset of its live rows: row → (copies, matches), where
//! `matches` counts the other side's live rows the row pairs with (key equal and condition
//! true). A side whose unmatched rows are kept (the left of a LEFT join) needs that count to
//! know when a row goes from matched to unmatched and back:
//!
//! - a row added on one side pairs with the other side's matches (`+I` each); an outer row
//!   without any is emitted padded with nulls (`+I`). When it is the first match of an outer
//!   row of the other side, that row's padded version is taken back first (`-D`);
//! - a row taken back (`-U`, `-D`) takes back its pairs (`-D` each), or its padded version;
//!   an outer row of the other side that loses its last match comes back padded (`+I`).
//!
//! The output is a retract stream of `+I` and `-D` with no key: a pair's row changes when
//! either side's does, so no column identifies "the" row a change replaces. Taking back a row
//! the join never received is a data error, as for the running aggregate.
//!
//! The append-only inner join ([`super::join::Join`]) stays as it is: it stores no counts and
//! never takes a row back.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, new_null_array};
use arrow_schema::SchemaRef;
use arrow_select::interleave::interleave;
use hashbrown::HashMap;
use weir_state::{KeyedStateBackend, MapId, NO_NAMESPACE};

use super::join::{JoinDef, pairs_meeting};
use super::keyed::{KeyEncoder, RowCodec};
use crate::api::{Operator, OperatorError};
use crate::changelog::{self, RowKind};

/// Which sides' unmatched rows the output keeps, padded with nulls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outer {
    pub left: bool,
    pub right: bool,
}

impl Outer {
    fn of(self, side: usize) -> bool {
        if side == 0 { self.left } else { self.right }
    }
}

pub struct UpdatingJoin {
    def: Arc<JoinDef>,
    outer: Outer,
    keys: [KeyEncoder; 2],
    rows: [RowCodec; 2],
    state: KeyedStateBackend,
    /// Per side: row → (live copies, live rows of the other side it pairs with).
    sides: [MapId<Vec<u8>, (i64, i64)>; 2],
    condition_reads: Vec<bool>,
    /// The output's schema: the projection's columns and the kind.
    schema: SchemaRef,
}

/// The other side's live rows for the keys of one batch, each once.
#[derive(Default)]
struct Found {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// Per distinct row: its live copies and matches, and a batch row of its key.
    counts: Vec<(i64, i64)>,
    key_row: Vec<usize>,
    /// Whether its matches changed (it is written back).
    changed: Vec<bool>,
}

impl Found {
    fn distinct(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, &e)| &self.bytes[s..e])
    }

    fn row(&self, j: usize) -> &[u8] {
        let start = if j == 0 { 0 } else { self.ends[j - 1] };
        &self.bytes[start..self.ends[j]]
    }
}

/// Where a joined row's side comes from: the batch's row, the other side's stored row, or
/// nulls (the padding of an outer join).
#[derive(Clone, Copy)]
enum Source {
    Batch(u32),
    Stored(u32),
    Null,
}

/// The output rows of one batch, in order: their kinds and, per side, where each comes from.
#[derive(Default)]
struct Emitted {
    kinds: Vec<RowKind>,
    sides: [Vec<Source>; 2],
}

impl Emitted {
    /// `copies` times the row of `this` (the batch's side `side`) and `other`.
    fn push(&mut self, kind: RowKind, side: usize, this: Source, other: Source, copies: i64) {
        for _ in 0..copies.max(0) {
            self.kinds.push(kind);
            self.sides[side].push(this);
            self.sides[1 - side].push(other);
        }
    }
}

impl UpdatingJoin {
    pub fn new(
        def: Arc<JoinDef>,
        outer: Outer,
        keys: [KeyEncoder; 2],
        schema: SchemaRef,
        mut state: KeyedStateBackend,
    ) -> Result<Self, OperatorError> {
        let sides = [state.map_state("left")?, state.map_state("right")?];
        Ok(Self {
            rows: [
                RowCodec::new(def.inputs[0].clone())?,
                RowCodec::new(def.inputs[1].clone())?,
            ],
            condition_reads: def.condition_reads(),
            def,
            outer,
            keys,
            state,
            sides,
            schema,
        })
    }

    /// The joined rows `emitted` describes, projected, with their kinds.
    fn output(
        &self,
        side: usize,
        batch: &RecordBatch,
        stored: &RecordBatch,
        emitted: Emitted,
    ) -> Result<RecordBatch, OperatorError> {
        let def = &self.def;
        let rows = emitted.kinds.len();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(def.joined.fields().len());
        for (s, from) in emitted.sides.iter().enumerate() {
            // The side's rows come from the batch or the stored rows (whichever is side `s`),
            // or are one null row.
            let rows_of = if s == side { batch } else { stored };
            let index: Vec<(usize, usize)> = from
                .iter()
                .map(|f| match f {
                    Source::Batch(r) | Source::Stored(r) => (0, *r as usize),
                    Source::Null => (1, 0),
                })
                .collect();
            for (c, field) in def.inputs[s].fields().iter().enumerate() {
                let null = new_null_array(field.data_type(), 1);
                let sources: [&dyn Array; 2] = [rows_of.column(c).as_ref(), null.as_ref()];
                columns.push(interleave(&sources, &index)?);
            }
        }
        let joined = super::join::joined_batch(def, columns, rows)?;
        let projected = def.projection.apply(&joined)?;
        let mut columns = projected.columns().to_vec();
        columns.push(changelog::op_array(emitted.kinds));
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

impl Operator for UpdatingJoin {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let side = input.min(1);
        let other = 1 - side;
        let keys = self.keys[side].encode(&batch)?;
        let ops = changelog::kinds(&batch).cloned();
        let batch = batch.project(&self.def.keep[side])?;
        let rows = self.rows[side].encode(&batch)?;
        let n = batch.num_rows();

        // The other side's live rows of each key of the batch, each key looked up once (the
        // other side does not change while this batch is processed).
        let mut found = Found::default();
        let mut probed: HashMap<&[u8], Range<u32>> = HashMap::new();
        let (mut this_index, mut other_index) = (Vec::new(), Vec::new());
        for row in 0..n {
            let key = keys.key(row);
            let range = match probed.get(key.bytes) {
                Some(r) => r.clone(),
                None => {
                    let start = found.ends.len() as u32;
                    self.state
                        .map(&self.sides[other])
                        .with(key, NO_NAMESPACE, |entries| {
                            for (r, counts) in entries {
                                found.bytes.extend_from_slice(r);
                                found.ends.push(found.bytes.len());
                                found.counts.push(*counts);
                                found.key_row.push(row);
                                found.changed.push(false);
                            }
                        })?;
                    let range = start..found.ends.len() as u32;
                    probed.insert(key.bytes, range.clone());
                    range
                }
            };
            for j in range {
                this_index.push(row as u32);
                other_index.push(j);
            }
        }
        let stored = self.rows[other].decode(found.distinct())?;

        // Each batch row's matches: the pairs that meet the condition, in batch-row order.
        let index = if side == 0 {
            [
                UInt32Array::from(this_index),
                UInt32Array::from(other_index),
            ]
        } else {
            [
                UInt32Array::from(other_index),
                UInt32Array::from(this_index),
            ]
        };
        let sides = if side == 0 {
            [&batch, &stored]
        } else {
            [&stored, &batch]
        };
        let mut matches: Vec<Vec<u32>> = vec![Vec::new(); n];
        if let Some([l, r]) = pairs_meeting(&self.def, &self.condition_reads, sides, index)? {
            let (this, that) = if side == 0 { (l, r) } else { (r, l) };
            for (t, o) in this.values().iter().zip(that.values()) {
                matches[*t as usize].push(*o);
            }
        }

        // Each row in order: its pairs, its padded version, and the other side's padded
        // versions it replaces or brings back.
        let mut emitted = Emitted::default();
        let (this_outer, other_outer) = (self.outer.of(side), self.outer.of(other));
        for (row, matched) in matches.iter().enumerate() {
            let kind = ops
                .as_ref()
                .map_or(RowKind::Insert, |o| changelog::kind_at(o, row));
            let key = keys.key(row);
            // The row as its side's map key, copied once for the lookup and the write.
            let bytes = rows.row(row).data().to_vec();
            let weight: i64 = matched.iter().map(|&j| found.counts[j as usize].0).sum();
            let mut own = self.state.map(&self.sides[side]);
            let (copies, _) = own.get(key, NO_NAMESPACE, &bytes)?.unwrap_or((0, 0));
            let this = Source::Batch(row as u32);
            if kind.is_addition() {
                own.put(key, NO_NAMESPACE, bytes, (copies + 1, weight))?;
                if matched.is_empty() {
                    if this_outer {
                        emitted.push(RowKind::Insert, side, this, Source::Null, 1);
                    }
                    continue;
                }
                for &j in matched {
                    let (c, m) = &mut found.counts[j as usize];
                    if other_outer && *m == 0 {
                        emitted.push(RowKind::Delete, other, Source::Stored(j), Source::Null, *c);
                    }
                    emitted.push(RowKind::Insert, side, this, Source::Stored(j), *c);
                    *m += 1;
                    found.changed[j as usize] = true;
                }
            } else {
                if copies == 0 {
                    return Err(OperatorError::Data(format!(
                        "a join received a {} of a row it never received on its {} side \
                         (key {}): the input's changelog is not well formed",
                        kind.short(),
                        if side == 0 { "left" } else { "right" },
                        self.keys[side].describe(key.bytes),
                    )));
                }
                if copies == 1 {
                    own.remove(key, NO_NAMESPACE, &bytes)?;
                } else {
                    own.put(key, NO_NAMESPACE, bytes, (copies - 1, weight))?;
                }
                if matched.is_empty() {
                    if this_outer {
                        emitted.push(RowKind::Delete, side, this, Source::Null, 1);
                    }
                    continue;
                }
                for &j in matched {
                    let (c, m) = &mut found.counts[j as usize];
                    emitted.push(RowKind::Delete, side, this, Source::Stored(j), *c);
                    *m -= 1;
                    found.changed[j as usize] = true;
                    if other_outer && *m == 0 {
                        emitted.push(RowKind::Insert, other, Source::Stored(j), Source::Null, *c);
                    }
                }
            }
        }
        // The other side's rows whose matches changed, written back (only an outer side reads
        // them).
        if other_outer {
            let mut theirs = self.state.map(&self.sides[other]);
            for j in (0..found.ends.len()).filter(|&j| found.changed[j]) {
                let key = keys.key(found.key_row[j]);
                theirs.put(key, NO_NAMESPACE, found.row(j).to_vec(), found.counts[j])?;
            }
        }
        if !emitted.kinds.is_empty() {
            out.push(self.output(side, &batch, &stored, emitted)?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::testing::{Harness, Random, canonical};

    /// A join `op` of `mode` over two keyed streams of `{k, id, v}` rows. An updating side
    /// reads a running aggregate (only for its schema: the harness feeds the join itself).
    fn job(mode: &str, updating: [bool; 2], state: &str) -> String {
        let side = |name: &str, updating: bool| {
            if updating {
                format!(
                    "  {name}agg: {{kind: aggregate, from: {name}id, aggregates: {{v: max(v)}}}}\n  \
                     {name}id: {{kind: key-by, from: {name}, keys: [k, id]}}\n  \
                     {name}k: {{kind: key-by, from: {name}agg, keys: [k]}}\n"
                )
            } else {
                format!("  {name}k: {{kind: key-by, from: {name}, keys: [k]}}\n")
            }
        };
        format!(
            "name: updating-join-test\n{state}sources:\n  \
             l: {{kind: jsonl, path: unused.jsonl, schema: {{k: int, id: int, v: int}}}}\n  \
             r: {{kind: jsonl, path: unused.jsonl, schema: {{k: int, id: int, v: int}}}}\n\
             transforms:\n{}{}  \
             op:\n    kind: join\n    mode: {mode}\n    left: lk\n    right: rk\n    \
             where: l.v <> r.v\n    \
             columns: {{lk: l.k, lid: l.id, lv: l.v, rk: r.k, rid: r.id, rv: r.v}}\n\
             sinks:\n  out: {{kind: file, path: unused.jsonl, format: changelog-json, from: op}}\n",
            side("l", updating[0]),
            side("r", updating[1]),
        )
    }

    type Row = (i64, i64, i64);

    /// The joined rows of the live rows of each side (with their copies), as the output's
    /// rows: pairs with equal `k` and unequal `v`, and the unmatched rows of an outer side.
    fn naive(live: &[Vec<Row>; 2], outer: [bool; 2]) -> BTreeMap<String, i64> {
        let mut table = BTreeMap::new();
        let out = |l: Option<&Row>, r: Option<&Row>| {
            canonical(&json!({
                "lk": l.map(|x| x.0), "lid": l.map(|x| x.1), "lv": l.map(|x| x.2),
                "rk": r.map(|x| x.0), "rid": r.map(|x| x.1), "rv": r.map(|x| x.2),
            }))
        };
        let pairs = |a: &Row, b: &Row| a.0 == b.0 && a.2 != b.2;
        for l in &live[0] {
            let mut matched = false;
            for r in live[1].iter().filter(|r| pairs(l, r)) {
                matched = true;
                *table.entry(out(Some(l), Some(r))).or_default() += 1;
            }
            if !matched && outer[0] {
                *table.entry(out(Some(l), None)).or_default() += 1;
            }
        }
        for r in &live[1] {
            if outer[1] && !live[0].iter().any(|l| pairs(l, r)) {
                *table.entry(out(None, Some(r))).or_default() += 1;
            }
        }
        table
    }

    /// Random changes on both sides (rows added, some of them twice, updated and deleted;
    /// few keys, so that keys empty and come back), through each join mode, with restores:
    /// after every batch the table the output changelog builds is the naive join of the two
    /// sides' live rows, and no `-D` takes back a row the output does not hold.
    #[test]
    fn a_join_of_random_changes_keeps_the_table_of_a_naive_join() {
        let modes = [
            ("inner", [false, false]),
            ("left", [true, false]),
            ("right", [false, true]),
            ("full", [true, true]),
        ];
        let mut seed = 0x0dd1_5ea5_e000_0001u64;
        for backend in ["heap", "rocksdb"] {
            let dir = tempfile::tempdir().unwrap();
            let state = match backend {
                "rocksdb" => format!(
                    "state: {{backend: rocksdb, path: {}}}\n",
                    dir.path().display()
                ),
                _ => String::new(),
            };
            for (mode, outer) in modes {
                for updating in [[true, true], [false, true], [false, false]] {
                    if mode == "inner" && updating == [false, false] {
                        continue; // the append-only join
                    }
                    seed += 1;
                    let what = format!("{backend} {mode} join, updating inputs {updating:?}");
                    run(&job(mode, updating, &state), outer, updating, seed, &what);
                }
            }
        }
    }

    fn run(job: &str, outer: [bool; 2], updating: [bool; 2], seed: u64, what: &str) {
        let mut h = Harness::new(job, "op");
        let mut random = Random(seed);
        let mut live: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
        let mut table: BTreeMap<String, i64> = BTreeMap::new();
        let (mut taken_back, mut padded) = (0, 0);
        for step in 0..150 {
            let side = random.below(2) as usize;
            let mut rows: Vec<Value> = Vec::new();
            for _ in 0..1 + random.below(6) {
                let new = |random: &mut Random| -> Row {
                    (
                        random.below(4) as i64,
                        random.below(5) as i64,
                        random.below(3) as i64,
                    )
                };
                let change = if updating[side] && !live[side].is_empty() {
                    random.below(3)
                } else {
                    0
                };
                let at = random.below(live[side].len().max(1) as u64) as usize;
                let row = |r: &Row, op: &str| json!({"k": r.0, "id": r.1, "v": r.2, "__op": op});
                match change {
                    1 => {
                        let old = live[side].remove(at);
                        rows.push(row(&old, "-D"));
                    }
                    2 => {
                        let old = live[side][at];
                        let mut new = new(&mut random);
                        new.0 = old.0;
                        live[side][at] = new;
                        rows.push(row(&old, "-U"));
                        rows.push(row(&new, "+U"));
                    }
                    _ => {
                        let r = new(&mut random);
                        live[side].push(r);
                        rows.push(row(&r, "+I"));
                    }
                }
            }
            h.push(side, &rows);
            for mut out in h.take() {
                let op = out
                    .as_object_mut()
                    .and_then(|o| o.remove("__op"))
                    .unwrap_or_default();
                if out.get("lk").is_some_and(Value::is_null)
                    || out.get("rk").is_some_and(Value::is_null)
                {
                    padded += 1;
                }
                let n = table.entry(canonical(&out)).or_default();
                match op.as_str() {
                    Some("+I") => *n += 1,
                    Some("-D") => {
                        assert!(*n > 0, "{what}, step {step}: -D of a row not held: {out}");
                        *n -= 1;
                        taken_back += 1;
                    }
                    other => panic!("{what}: a join emits +I and -D, not {other:?}"),
                }
            }
            table.retain(|_, n| *n != 0);
            assert_eq!(table, naive(&live, outer), "{what}, step {step}");
            if step % 50 == 49 {
                h.restart();
            }
        }
        // Over append-only inputs only an outer join's padded rows are taken back.
        let least = if updating == [false, false] { 1 } else { 20 };
        let any_outer = outer.iter().any(|o| *o);
        assert!(!any_outer || padded > 5, "{what}: {padded} padded rows");
        assert!(taken_back >= least, "{what}: {taken_back} rows taken back");
    }

    /// Taking back a row the join never received is a data error naming the key.
    #[test]
    fn a_delete_of_a_row_never_received_is_a_data_error() {
        let mut h = Harness::new(&job("left", [true, true], ""), "op");
        h.push(0, &[json!({"k": 1, "id": 1, "v": 1, "__op": "+I"})]);
        let batch = crate::testing::batch(
            &h.input_schema(0),
            &[json!({"k": 1, "id": 2, "v": 1, "__op": "-D"})],
        );
        let e = h.try_push(0, batch).unwrap_err();
        assert!(matches!(e, crate::api::OperatorError::Data(_)), "{e}");
        assert!(
            e.to_string()
                .contains("-D of a row it never received on its left side (key 1)"),
            "{e}"
        );
    }
}
