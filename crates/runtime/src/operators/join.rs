//! `join` and `interval-join`: every pair of rows with equal keys that meets a condition.
//!
//! Each side's rows wait in map state per key, ordered by (retain-until, arrival), so rows whose
//! time is up leave state in one ordered range removal when the watermark passes them. A row
//! arriving on one side is first matched against the other side's rows, then stored if it can
//! still match later. Matching works a batch at a time: each key of the batch is looked up once
//! and each stored row it finds is decoded once, however many of the batch's rows pair with it
//! (a hot key's); the condition is evaluated over the pairs with only the columns it reads, and
//! only the pairs it keeps are built whole. Without `*-until` a side is kept for good: a regular
//! join. An interval join is a join whose condition and retention follow from its bounds.
//!
//! # Cleanup
//! Rows leave state by time, with one timer per key group and distinct retain-until time, not
//! one per key: a join keyed by a nearly unique key (a window's bounds and a price, Flink's
//! Nexmark q7) would otherwise set and fire a timer per row. Each side keeps an index, a list
//! of keys per (key group, time) stored under the group's *cleanup key* (no key bytes, in
//! states of their own), holding each key at the earliest time one of its rows expires. When
//! the timer of a (group, time) fires, each key in its list drops its expired rows and, if
//! rows remain, is listed again at the next one's time. A key whose earliest time moves earlier
//! is listed at the new time and stays listed at the old one, where it finds nothing to drop
//! (or what the other listing left): each firing takes its keys once.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array, new_null_array};
use arrow_schema::{Field, Schema, SchemaRef};
use arrow_select::filter::{FilterBuilder, filter_record_batch};
use arrow_select::take::take;
use hashbrown::HashMap;
use weir_state::{KeyRef, KeyedStateBackend, ListId, MapId, NO_NAMESPACE, TimeDomain};

use super::keyed::{KeyEncoder, RowCodec};
use crate::api::Operator;
use crate::api::OperatorError;
use crate::api::time::event_times;
use crate::expr::Expr;

/// The key under which a key group's cleanup index and timers live: no key's bytes (the
/// index is in states of its own, so no row's key can meet it there).
const CLEANUP_KEY: &[u8] = &[];

/// The namespace tag of a cleanup timer: this plus the side. A key's own timer (weir before
/// the cleanup keys, in a restored checkpoint) has the side alone.
const CLEANUP_TIMER: u8 = 2;

/// The schema of joined rows: left columns as `left_as.name`, right ones as `right_as.name`,
/// then `extra`.
pub fn joined_schema(
    left: &Schema,
    left_as: &str,
    right: &Schema,
    right_as: &str,
    extra: &[Field],
) -> SchemaRef {
    let prefixed = |s: &Schema, alias: &str| -> Vec<Field> {
        s.fields()
            .iter()
            .map(|f| Field::new(format!("{alias}.{}", f.name()), f.data_type().clone(), true))
            .collect()
    };
    let mut fields = prefixed(left, left_as);
    fields.extend(prefixed(right, right_as));
    fields.extend(extra.iter().cloned());
    Arc::new(Schema::new(fields))
}

/// Output columns of a join: expressions over joined rows, with their schema.
pub struct Projection {
    pub exprs: Vec<Expr>,
    pub schema: SchemaRef,
}

impl Projection {
    pub fn apply(&self, joined: &RecordBatch) -> Result<RecordBatch, OperatorError> {
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(joined).map_err(OperatorError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let options =
            arrow_array::RecordBatchOptions::new().with_row_count(Some(joined.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &options,
        )?)
    }
}

/// What a join is, shared by its subtasks.
pub struct JoinDef {
    /// Per side: the schema of the rows kept (the input's columns in `keep`).
    pub inputs: [SchemaRef; 2],
    /// Per side: the input columns the condition and output read; only these are stored.
    pub keep: [Vec<usize>; 2],
    /// Per side: when a stored row can no longer match (`None`: never).
    pub until: [Option<Expr>; 2],
    /// The kept left columns, then the kept right ones (no extra columns).
    pub joined: SchemaRef,
    pub condition: Option<Expr>,
    pub projection: Projection,
}

impl JoinDef {
    /// Per joined column: whether the condition reads it.
    pub(super) fn condition_reads(&self) -> Vec<bool> {
        let reads = self
            .condition
            .as_ref()
            .map(Expr::columns)
            .unwrap_or_default();
        (0..self.joined.fields().len())
            .map(|c| reads.contains(&c))
            .collect()
    }
}

pub struct Join {
    def: Arc<JoinDef>,
    keys: [KeyEncoder; 2],
    rows: [RowCodec; 2],
    state: KeyedStateBackend,
    /// Per side: (retain-until, arrival number) → encoded row.
    sides: [MapId<(i64, i64), Vec<u8>>; 2],
    /// Per side: the keys whose earliest row expires at a time, per key group (the cleanup
    /// key of the group, the time as namespace): see the module's docs.
    expiring: [ListId<Vec<u8>>; 2],
    arrivals: i64,
    watermark: i64,
    /// Per joined column: whether the condition reads it (the pairs' condition is evaluated
    /// over these columns alone).
    condition_reads: Vec<bool>,
}

impl Join {
    pub fn new(
        def: Arc<JoinDef>,
        keys: [KeyEncoder; 2],
        mut state: KeyedStateBackend,
    ) -> Result<Self, OperatorError> {
        let sides = [state.map_state("left")?, state.map_state("right")?];
        let expiring = [
            state.list_state("left-expiring")?,
            state.list_state("right-expiring")?,
        ];
        let condition_reads = def.condition_reads();
        Ok(Self {
            rows: [
                RowCodec::new(def.inputs[0].clone())?,
                RowCodec::new(def.inputs[1].clone())?,
            ],
            def,
            keys,
            state,
            sides,
            expiring,
            arrivals: 0,
            watermark: i64::MIN,
            condition_reads,
        })
    }

    /// Lists each key of `expiring` (key group, time, key) at the time its earliest row
    /// expires, and sets one timer per key group and time.
    fn list_expiring(
        &mut self,
        side: usize,
        mut expiring: Vec<(u32, i64, Vec<u8>)>,
    ) -> Result<(), OperatorError> {
        expiring.sort_unstable_by_key(|&(group, until, _)| (group, until));
        let mut rest = expiring.as_mut_slice();
        while let Some(&(group, until, _)) = rest.first() {
            let n = rest
                .iter()
                .take_while(|e| (e.0, e.1) == (group, until))
                .count();
            let (run, tail) = rest.split_at_mut(n);
            rest = tail;
            let cleanup = KeyRef::new(group, CLEANUP_KEY);
            self.state.list(&self.expiring[side]).update(
                cleanup,
                &until.to_be_bytes(),
                |list| list.extend(run.iter_mut().map(|e| std::mem::take(&mut e.2))),
            )?;
            self.state.timers().set(
                TimeDomain::EventTime,
                until,
                cleanup,
                &[CLEANUP_TIMER + side as u8],
                None,
            )?;
        }
        Ok(())
    }

    /// Drops `key`'s rows of `side` that expired by `watermark`; returns when its next row
    /// expires, if one is left.
    fn expire(
        &mut self,
        side: usize,
        key: KeyRef<'_>,
        watermark: i64,
    ) -> Result<Option<i64>, OperatorError> {
        let mut side_state = self.state.map(&self.sides[side]);
        side_state.take_while(key, NO_NAMESPACE, |(until, _)| *until <= watermark)?;
        Ok(side_state
            .first_key(key, NO_NAMESPACE)?
            .map(|(until, _)| until))
    }

    /// Continues the arrival numbering of a restored run past every old subtask's, so a new
    /// row never takes the place of a restored one.
    pub fn restored(mut self, restore: Option<&crate::api::SubtaskRestore>) -> Self {
        if let Some(r) = restore {
            self.arrivals = r
                .own_states()
                .filter_map(|v| v.get("arrivals")?.as_i64())
                .max()
                .unwrap_or(0);
        }
        self
    }
}

/// The other side's rows matched by one batch, each stored row copied once however many of
/// the batch's rows it pairs with: a key that comes back in the batch (a hot auction's bids)
/// reuses the rows its first probe found, without another state lookup.
#[derive(Default)]
struct Matches {
    /// The distinct matched rows back to back, as stored.
    bytes: Vec<u8>,
    /// Where each distinct row ends in `bytes`.
    ends: Vec<usize>,
    /// Per pair: the batch row and the distinct row it pairs with.
    this_rows: Vec<u32>,
    other_rows: Vec<u32>,
}

impl Matches {
    /// Distinct rows added so far: the index the next one gets.
    fn distinct_len(&self) -> u32 {
        self.ends.len() as u32
    }

    /// Adds a distinct stored row.
    fn add_row(&mut self, row: &[u8]) {
        self.bytes.extend_from_slice(row);
        self.ends.push(self.bytes.len());
    }

    /// Pairs batch row `this` with distinct rows `other`.
    fn pair(&mut self, this: u32, other: Range<u32>) {
        for o in other {
            self.this_rows.push(this);
            self.other_rows.push(o);
        }
    }

    fn distinct(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(s, &e)| &self.bytes[s..e])
    }
}

impl Join {
    /// The joined rows of `matches` (`side`'s rows from `batch`) that meet the condition: it is
    /// evaluated over only the columns it reads, so pairs it drops are never built whole.
    /// `None` when no pair is left.
    fn join_matches(
        &self,
        side: usize,
        batch: &RecordBatch,
        matches: Matches,
    ) -> Result<Option<RecordBatch>, OperatorError> {
        if matches.this_rows.is_empty() {
            return Ok(None);
        }
        let def = &self.def;
        let other = self.rows[1 - side].decode(matches.distinct())?;
        let this_index = UInt32Array::from(matches.this_rows);
        let other_index = UInt32Array::from(matches.other_rows);
        // Per joined side (left, right): its rows and which of them each pair takes.
        let (sides, index) = if side == 0 {
            ([batch, &other], [this_index, other_index])
        } else {
            ([&other, batch], [other_index, this_index])
        };
        let Some(index) = pairs_meeting(def, &self.condition_reads, sides, index)? else {
            return Ok(None);
        };
        let column = |c: usize| joined_column(def, sides, &index, c);
        let columns = (0..def.joined.fields().len())
            .map(column)
            .collect::<Result<Vec<_>, _>>()?;
        let joined = joined_batch(def, columns, index[0].len())?;
        Ok(Some(def.projection.apply(&joined)?))
    }
}

/// The joined column `c` of the pairs `index` selects: column `c` of the left rows, or
/// `c - left width` of the right (a join's joined schema has no extra columns).
fn joined_column(
    def: &JoinDef,
    sides: [&RecordBatch; 2],
    index: &[UInt32Array; 2],
    c: usize,
) -> Result<ArrayRef, OperatorError> {
    let left_width = def.inputs[0].fields().len();
    let s = usize::from(c >= left_width);
    Ok(take(
        sides[s].column(c - s * left_width).as_ref(),
        &index[s],
        None,
    )?)
}

/// Joined rows of `columns`, `rows` of them (a batch may have no columns).
pub(super) fn joined_batch(
    def: &JoinDef,
    columns: Vec<ArrayRef>,
    rows: usize,
) -> Result<RecordBatch, OperatorError> {
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows));
    Ok(RecordBatch::try_new_with_options(
        def.joined.clone(),
        columns,
        &options,
    )?)
}

/// The pairs of `index` (per side, the row of `sides[s]` each pair takes) that meet the join's
/// condition, which is evaluated over only the columns it reads (`condition_reads`), so pairs
/// it drops are never built whole; `None` when none is left. A pair whose condition is null is
/// dropped, as SQL's WHERE does.
pub(super) fn pairs_meeting(
    def: &JoinDef,
    condition_reads: &[bool],
    sides: [&RecordBatch; 2],
    mut index: [UInt32Array; 2],
) -> Result<Option<[UInt32Array; 2]>, OperatorError> {
    let pairs = index[0].len();
    if pairs == 0 {
        return Ok(None);
    }
    let Some(condition) = &def.condition else {
        return Ok(Some(index));
    };
    let narrow = condition_reads
        .iter()
        .enumerate()
        .map(|(c, &read)| {
            if read {
                joined_column(def, sides, &index, c)
            } else {
                Ok(new_null_array(def.joined.field(c).data_type(), pairs))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mask = condition.evaluate(&joined_batch(def, narrow, pairs)?)?;
    let mask = mask
        .as_boolean_opt()
        .ok_or_else(|| OperatorError::Internal("join condition is not BOOL".into()))?;
    let kept = mask.true_count();
    if kept == 0 {
        return Ok(None);
    }
    if kept < pairs {
        let keep = FilterBuilder::new(mask).build();
        for i in &mut index {
            *i = keep.filter(i)?.as_primitive::<UInt32Type>().clone();
        }
    }
    Ok(Some(index))
}

/// Keeps the rows of `joined` where `condition` holds.
pub fn filter(joined: RecordBatch, condition: Option<&Expr>) -> Result<RecordBatch, OperatorError> {
    let Some(c) = condition else {
        return Ok(joined);
    };
    let mask = c.evaluate(&joined)?;
    let mask = mask
        .as_any()
        .downcast_ref::<arrow_array::BooleanArray>()
        .ok_or_else(|| OperatorError::Internal("join condition is not BOOL".into()))?;
    Ok(filter_record_batch(&joined, mask)?)
}

impl Operator for Join {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn snapshot_state(&mut self) -> Result<Option<serde_json::Value>, OperatorError> {
        Ok(Some(serde_json::json!({ "arrivals": self.arrivals })))
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
        let until = match &self.def.until[side] {
            Some(e) => Some(event_times(&e.evaluate(&batch)?)?),
            None => None,
        };
        let batch = batch.project(&self.def.keep[side])?;
        let rows = self.rows[side].encode(&batch)?;
        let mut matches = Matches::default();
        // The other side does not change while this batch is processed, so a key's matches
        // are looked up once per batch: key → its distinct rows in `matches`.
        let mut probed: HashMap<&[u8], Range<u32>> = HashMap::new();
        // (key group, time, key): keys whose earliest row is now one of this batch's.
        let mut expiring: Vec<(u32, i64, Vec<u8>)> = Vec::new();
        for row in 0..batch.num_rows() {
            let key = keys.key(row);
            let found = match probed.get(key.bytes) {
                Some(found) => found.clone(),
                None => {
                    let start = matches.distinct_len();
                    self.state
                        .map(&self.sides[other])
                        .with(key, NO_NAMESPACE, |entries| {
                            for (_, r) in entries {
                                matches.add_row(r);
                            }
                        })?;
                    let found = start..matches.distinct_len();
                    probed.insert(key.bytes, found.clone());
                    found
                }
            };
            matches.pair(row as u32, found);
            let keep_until = match &until {
                None => i64::MAX,
                Some(u) => match u[row] {
                    Some(t) => t,
                    None => continue,
                },
            };
            if keep_until <= self.watermark {
                // It could only match rows that are already gone.
                continue;
            }
            self.arrivals += 1;
            let earliest = self.state.map(&self.sides[side]).put_after_first_key(
                key,
                NO_NAMESPACE,
                (keep_until, self.arrivals),
                rows.row(row).data().to_vec(),
            )?;
            // A key is listed at the earliest time one of its rows expires; rows arriving in
            // time order never move it, so they cost no listing.
            match earliest {
                Some((t, _)) if t <= keep_until => {}
                _ if keep_until == i64::MAX => {}
                _ => expiring.push((key.group, keep_until, key.bytes.to_vec())),
            }
        }
        if !expiring.is_empty() {
            self.list_expiring(side, expiring)?;
        }
        if let Some(joined) = self.join_matches(side, &batch, matches)? {
            out.push(joined);
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        _out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        self.watermark = watermark;
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let tag = timer.namespace.first().copied().unwrap_or(0);
            if tag < CLEANUP_TIMER {
                // A key's own timer, set by a version of weir before the cleanup keys (a
                // restored checkpoint): the key is listed again, as any other.
                let side = usize::from(tag).min(1);
                if let Some(next) = self.expire(side, timer.key(), watermark)? {
                    let again = vec![(timer.key_group, next, timer.key.to_vec())];
                    self.list_expiring(side, again)?;
                }
                continue;
            }
            let side = usize::from(tag - CLEANUP_TIMER).min(1);
            let cleanup = KeyRef::new(timer.key_group, CLEANUP_KEY);
            let mut keys = self
                .state
                .list(&self.expiring[side])
                .take(cleanup, &timer.time.to_be_bytes())?;
            keys.sort_unstable();
            keys.dedup();
            let mut again = Vec::new();
            for key in keys {
                if let Some(next) =
                    self.expire(side, KeyRef::new(timer.key_group, &key), watermark)?
                {
                    again.push((timer.key_group, next, key));
                }
            }
            if !again.is_empty() {
                self.list_expiring(side, again)?;
            }
        }
        Ok(watermark)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use crate::testing::{Harness, Random, canonical};

    /// Two sources `l` and `r` of `schema` (never read: the harness feeds the operator), each
    /// keyed by `keys`, and the join `op` of them with the rest of its keys in `body` (YAML
    /// lines).
    fn job(schema: &str, keys: &str, body: &str) -> String {
        format!(
            "name: join-test\nsources:\n  \
             l: {{kind: jsonl, path: unused.jsonl, schema: {schema}}}\n  \
             r: {{kind: jsonl, path: unused.jsonl, schema: {schema}}}\n\
             transforms:\n  \
             lk: {{kind: key-by, from: l, keys: {keys}}}\n  \
             rk: {{kind: key-by, from: r, keys: {keys}}}\n  \
             op:\n    kind: join\n    left: lk\n    right: rk\n{body}\
             sinks:\n  out: {{kind: blackhole, from: op}}\n"
        )
    }

    /// A checkpoint and a failure, then what the executor does on restore and the harness
    /// leaves to its caller: the restored watermark replayed into the operator, which must
    /// emit nothing.
    fn restart(h: &mut Harness, watermark: Option<i64>) {
        assert_eq!(
            h.take(),
            Vec::<Value>::new(),
            "output left before a restart"
        );
        h.restart();
        if let Some(w) = watermark {
            h.watermark(w);
            assert_eq!(h.take(), Vec::<Value>::new(), "replaying watermark {w}");
        }
    }

    /// `got` and `expected` hold the same rows as many times each, in any order.
    fn assert_same_rows(got: Vec<Value>, expected: Vec<Value>, what: &str) {
        let (n_got, n_expected) = (got.len(), expected.len());
        let mut diff: BTreeMap<String, i64> = BTreeMap::new();
        for r in &got {
            *diff.entry(canonical(r)).or_default() += 1;
        }
        for r in &expected {
            *diff.entry(canonical(r)).or_default() -= 1;
        }
        diff.retain(|_, n| *n != 0);
        let extra: Vec<_> = diff.iter().filter(|(_, n)| **n > 0).take(5).collect();
        let missing: Vec<_> = diff.iter().filter(|(_, n)| **n < 0).take(5).collect();
        assert!(
            diff.is_empty(),
            "{what}: {n_got} rows, {n_expected} expected; extra (first 5, with counts): \
             {extra:?}; missing: {missing:?}"
        );
    }

    #[derive(Clone, Debug)]
    struct Row {
        k: i64,
        s: &'static str,
        v: i64,
    }

    /// A regular join keyed by an INT and a STRING, with the default columns, fed batches of
    /// random sides and sizes and restored twice: each batch emits at once exactly its pairs
    /// with every row the other side has had so far (kept for good), computed by a nested
    /// loop. Rows stored after a restore must not take the place of restored ones of the same
    /// key.
    #[test]
    fn each_batch_emits_its_pairs_with_every_earlier_row_of_the_other_side() {
        let mut h = Harness::new(&job("{k: int, s: string, v: int}", "[k, s]", ""), "op");
        let mut random = Random(0x9216_d5d9_8979_fb1b);
        let mut sides: [Vec<Row>; 2] = [Vec::new(), Vec::new()];
        let mut serial = 0;
        let mut pairs = 0;
        for step in 0..60 {
            let side = random.below(2) as usize;
            let n = 1 + random.below(12) as usize;
            let batch: Vec<Row> = (0..n)
                .map(|_| {
                    serial += 1;
                    Row {
                        k: random.below(3) as i64,
                        s: ["x", "y", "xy"][random.below(3) as usize],
                        v: serial,
                    }
                })
                .collect();
            let rows: Vec<Value> = batch
                .iter()
                .map(|r| json!({"k": r.k, "s": r.s, "v": r.v}))
                .collect();
            h.push(side, &rows);
            let mut expected = Vec::new();
            for new in &batch {
                for old in sides[1 - side]
                    .iter()
                    .filter(|o| (o.k, o.s) == (new.k, new.s))
                {
                    let (l, r) = if side == 0 { (new, old) } else { (old, new) };
                    expected.push(json!({
                        "l.k": l.k, "l.s": l.s, "l.v": l.v,
                        "r.k": r.k, "r.s": r.s, "r.v": r.v,
                    }));
                }
            }
            pairs += expected.len();
            assert_same_rows(h.take(), expected, &format!("step {step}"));
            sides[side].extend(batch);
            if step == 20 || step == 40 {
                restart(&mut h, None);
            }
        }
        h.finish();
        assert_eq!(h.take(), Vec::<Value>::new());
        assert!(pairs > 1000, "{pairs} pairs");
    }

    /// A join whose sides leave state when the watermark passes their `u` (a bounded join), or
    /// whose right side is kept for good, with a condition, rows arriving out of `u` order (so
    /// a key is listed again at an earlier time), rows whose `u` is NULL or already passed
    /// (they probe but are never stored), and a restore mid-stream: each batch emits exactly
    /// its pairs with the other side's earlier rows that are still alive (their `u` after the
    /// watermark).
    #[test]
    fn rows_pair_only_until_the_watermark_passes_their_until() {
        #[derive(Clone, Debug)]
        struct Timed {
            k: i64,
            u: Option<i64>,
            v: i64,
            id: i64,
        }
        for (right_until, seed) in [
            (true, 0x3707_3449_a409_3822u64),
            (false, 0x4528_21e6_38d0_1377),
        ] {
            let body = format!(
                "    where: l.v <> r.v\n    left-until: u\n{}    \
                 columns: {{k: l.k, lid: l.id, rid: r.id}}\n",
                if right_until {
                    "    right-until: u\n"
                } else {
                    ""
                }
            );
            let mut h = Harness::new(
                &job("{k: int, u: timestamp, v: int, id: int}", "[k]", &body),
                "op",
            );
            let until = [true, right_until];
            let mut random = Random(seed);
            let mut sides: [Vec<Timed>; 2] = [Vec::new(), Vec::new()];
            let mut watermark = None;
            let mut serial = 0;
            let (mut pairs, mut expired) = (0, 0);
            for step in 0..120 {
                let now = watermark.unwrap_or(0);
                match random.below(4) {
                    side @ (0 | 1) => {
                        let side = side as usize;
                        let batch: Vec<Timed> = (0..1 + random.below(8))
                            .map(|_| {
                                serial += 1;
                                Timed {
                                    k: random.below(4) as i64,
                                    u: (random.below(8) != 0)
                                        .then(|| now + random.below(40) as i64 - 10),
                                    v: random.below(3) as i64,
                                    id: serial,
                                }
                            })
                            .collect();
                        let rows: Vec<Value> = batch
                            .iter()
                            .map(|r| json!({"k": r.k, "u": r.u, "v": r.v, "id": r.id}))
                            .collect();
                        h.push(side, &rows);
                        // Alive: kept for good, or stored (its `u` was after the watermark
                        // when it came) and not yet passed by the watermark.
                        let alive = |r: &Timed| {
                            !until[1 - side] || r.u.is_some_and(|u| watermark.is_none_or(|w| u > w))
                        };
                        let mut expected = Vec::new();
                        for new in &batch {
                            for old in &sides[1 - side] {
                                if old.k != new.k || old.v == new.v {
                                    continue;
                                }
                                if !alive(old) {
                                    expired += 1;
                                    continue;
                                }
                                let (l, r) = if side == 0 { (new, old) } else { (old, new) };
                                expected.push(json!({"k": l.k, "lid": l.id, "rid": r.id}));
                            }
                        }
                        pairs += expected.len();
                        assert_same_rows(
                            h.take(),
                            expected,
                            &format!("right-until {right_until}, step {step}"),
                        );
                        sides[side].extend(batch);
                    }
                    _ => {
                        let w = now + random.below(12) as i64;
                        h.watermark(w);
                        watermark = Some(w);
                        assert_eq!(h.take(), Vec::<Value>::new(), "a watermark emits nothing");
                    }
                }
                if step == 60 {
                    restart(&mut h, watermark);
                }
            }
            assert!(pairs > 100, "{pairs} pairs");
            assert!(expired > 100, "{expired} pairs of expired rows");
            // Once the watermark passes every `u`, the bounded sides hold nothing, and no
            // cleanup is left pending.
            h.watermark(watermark.unwrap_or(0) + 1_000);
            let (entries, timers) = h.held();
            assert_eq!(timers, 0, "right-until {right_until}: no timer left");
            if right_until {
                assert_eq!(entries, 0, "every row and listing gone");
            }
        }
    }

    /// Rows of many keys that expire at a few times (a join on a window's bounds and a price,
    /// Flink's Nexmark q7) cost a timer per key group and time, not one per key, and each
    /// leaves state when the watermark passes its time, across a restore.
    #[test]
    fn rows_of_many_keys_expiring_together_share_their_timers() {
        let mut h = Harness::new(
            &job(
                "{k: int, u: timestamp}",
                "[k]",
                "    left-until: u
    right-until: u
    columns: {k: l.k}
",
            ),
            "op",
        );
        let keys = 3_000;
        let rows: Vec<Value> = (0..keys)
            .map(|k| json!({"k": k, "u": if k % 3 == 0 { 200 } else { 100 }}))
            .collect();
        for chunk in rows.chunks(500) {
            h.push(0, chunk);
        }
        let (entries, timers) = h.held();
        // At most one timer per key group (128) and time (2).
        assert!(timers <= 256, "{timers} timers for {keys} keys");
        assert!(entries >= keys as usize, "{entries} entries");
        restart(&mut h, None);
        h.watermark(100);
        let (after_100, _) = h.held();
        assert!(
            after_100 < entries,
            "the rows at 100 left: {after_100} of {entries}"
        );
        // A key of the right side at 150 matches the left rows still alive (u = 200).
        h.push(1, &[json!({"k": 3, "u": 150}), json!({"k": 4, "u": 150})]);
        assert_eq!(
            h.take(),
            vec![json!({"k": 3})],
            "only the left row alive pairs"
        );
        h.watermark(200);
        assert_eq!(h.held(), (0, 0), "everything left at 200");
    }
}
