//! `top-n` without `fire-at`: the first `n` rows per key by an order, kept up to date for
//! good and emitted as an updating stream (Flink's `Rank` and `Deduplicate` over an unbounded
//! partition).
//!
//! Each batch changes the first rows of the keys it holds; the operator emits, per key, the
//! change of those rows ([`crate::changelog`]):
//! - **without a rank column**, the change of their set: a row that enters is `+I`, a row
//!   that leaves is `-D`, and a row that merely moves up or down emits nothing (Flink without
//!   the rank number). With `n: 1` and no ties (deduplication, "the latest row per key") a key
//!   has at most one row, so the stream is keyed by the partition's columns and a replaced row
//!   is `-U` of the old row and `+U` of the new one.
//! - **with a rank column** (`rank-column`, SQL's rank selected), the change per rank: without
//!   ties each rank holds one row, so the stream is keyed by the partition's columns and the
//!   rank, and a rank whose row changes (a new row entered above it) is `-U`/`+U`, as Flink's
//!   Top-N with the rank number emits; with ties (`RANK()`), rows with their ranks as a set.
//!
//! Rows order by their memcomparable sort key, then by arrival: of rows equal in the order,
//! the one that came first ranks first (`ROW_NUMBER`), or with `tie-break: latest` the one
//! that came last (a deduplication keeping the last row). `with-ties` (`RANK`) also keeps every
//! row tied with the `n`-th. What a key keeps depends on its input:
//! - **append-only** input: only the first rows (the `n` best, and their ties), since a row
//!   that fell out can never come back; `n: 1` keeps one row per key. Each batch is first
//!   narrowed to its own best rows per key, as the windowed `top-n` does, so a key costs one
//!   state update per batch.
//! - **updating** input: every live row of the key (so that when a first row is taken back,
//!   the next one moves up), in an ordered map from (sort key, arrival number) to the row. A
//!   `-U`/`-D` takes back the first-ranked live row equal to it; one that matches no live row
//!   is a malformed changelog, and fails the job.
//!
//! Per key and batch that the batch changes, the key's first rows are compared before and
//! after: O(`n`) work and copies per changed key and batch, whatever the number of rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_select::take::take_record_batch;
use weir_state::{KeyedStateBackend, NO_NAMESPACE, ValueId};

use super::keyed::{KeyEncoder, RowCodec, SortKeyEncoder};
use super::top_n::Keep;
use crate::api::{Operator, OperatorError};
use crate::changelog::{self, ChangelogMode, RowKind};
use crate::expr::Expr;

/// An append-only input's key: its first rows, (sort key, encoded row) in order.
type Best = Vec<(Vec<u8>, Vec<u8>)>;

/// An updating input's key: its live rows, by sort key and then arrival number (8 bytes,
/// big-endian, appended to the sort key; with `tie-break: latest` the number's complement,
/// so that the last of equal rows comes first), to the encoded row.
type Live = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key's rows of one append-only batch: its first row there, and its best rows there (sort
/// key, row number), best first.
type Candidates<'b> = (usize, Vec<(&'b [u8], usize)>);

/// A change to emit: its kind, the encoded row and its rank (0 without a rank column).
type Change = (RowKind, Vec<u8>, i64);

/// What a running top-n is, shared by its subtasks.
pub struct RunningTopNDef {
    pub order: Vec<(Expr, bool)>,
    pub keep: Keep,
    /// The input's data columns (without [`changelog::OP`]): what a kept row holds.
    pub input: SchemaRef,
    /// Whether the input is an updating stream (see the module's text).
    pub updating_input: bool,
    /// Input column indices to emit, in order.
    pub columns: Vec<usize>,
    /// Whether the output has a rank column (after `columns`).
    pub rank: bool,
    /// The output: the emitted columns, the rank and the row kind.
    pub schema: SchemaRef,
}

impl RunningTopNDef {
    /// Whether a key's changes are told per rank, each rank holding one row that is replaced
    /// in place (`-U`/`+U`): without ties, with one row per key or with a rank column.
    fn positional(keep: Keep, rank: bool) -> bool {
        !keep.with_ties && (keep.n == 1 || rank)
    }

    /// The output's changelog mode: `key` (the partition's columns, by their output names,
    /// when they are all emitted) and the rank column, if any, identify a row when changes
    /// are told per rank.
    pub fn output_mode(
        keep: Keep,
        rank: Option<&str>,
        updating_input: bool,
        key: Option<Vec<String>>,
    ) -> ChangelogMode {
        if Self::positional(keep, rank.is_some()) {
            let mut kinds = vec![RowKind::UpdateBefore, RowKind::UpdateAfter];
            if updating_input {
                kinds.push(RowKind::Delete);
            }
            let key = key.map(|mut k| {
                k.extend(rank.map(str::to_string));
                k
            });
            ChangelogMode::updating(&kinds, key)
        } else {
            ChangelogMode::updating(&[RowKind::Delete], None)
        }
    }
}

/// What a key keeps, as the input's mode needs it.
enum Kept {
    Best(ValueId<Best>),
    Live(ValueId<Live>),
}

pub struct RunningTopN {
    def: Arc<RunningTopNDef>,
    keys: KeyEncoder,
    rows: RowCodec,
    sort: SortKeyEncoder,
    state: KeyedStateBackend,
    kept: Kept,
    /// The input's data column indices (all but the row kind).
    data: Vec<usize>,
}

impl RunningTopN {
    pub fn new(
        def: Arc<RunningTopNDef>,
        keys: KeyEncoder,
        mut state: KeyedStateBackend,
    ) -> Result<Self, OperatorError> {
        let kept = if def.updating_input {
            Kept::Live(state.value_state("live")?)
        } else {
            Kept::Best(state.value_state("best")?)
        };
        Ok(Self {
            rows: RowCodec::new(def.input.clone())?,
            sort: SortKeyEncoder::new(def.order.clone())?,
            data: (0..def.input.fields().len()).collect(),
            def,
            keys,
            state,
            kept,
        })
    }
}

/// A key's first rows: (sort key, encoded row), in rank order.
type Firsts<'a> = Vec<(&'a [u8], &'a [u8])>;

/// The changes between a key's first rows `before` and `after`. Told per rank
/// ([`RunningTopNDef::positional`]): a rank whose row differs is `-U` of the old and `+U` of
/// the new, a rank newly filled `+I`, one emptied `-D`. Otherwise as multisets of rows (with
/// their ranks, when emitted): a row that left is `-D`, one that entered `+I`.
fn diff(def: &RunningTopNDef, before: &Firsts<'_>, after: &Firsts<'_>, out: &mut Vec<Change>) {
    let (before, after) = (ranked(def, before), ranked(def, after));
    if RunningTopNDef::positional(def.keep, def.rank) {
        for i in 0..before.len().max(after.len()) {
            match (before.get(i), after.get(i)) {
                (None, Some(&(r, a))) => out.push((RowKind::Insert, a.to_vec(), r)),
                (Some(&(rb, b)), Some(&(ra, a))) if b != a => {
                    out.push((RowKind::UpdateBefore, b.to_vec(), rb));
                    out.push((RowKind::UpdateAfter, a.to_vec(), ra));
                }
                (Some(&(r, b)), None) => out.push((RowKind::Delete, b.to_vec(), r)),
                _ => {}
            }
        }
        return;
    }
    let mut count: HashMap<(i64, &[u8]), i64> = HashMap::with_capacity(before.len());
    for b in &before {
        *count.entry(*b).or_default() += 1;
    }
    for a in &after {
        *count.entry(*a).or_default() -= 1;
    }
    // Left: the copies of `before` not in `after` (count > 0), each taken once.
    for b in &before {
        if let Some(c) = count.get_mut(b)
            && *c > 0
        {
            *c -= 1;
            out.push((RowKind::Delete, b.1.to_vec(), b.0));
        }
    }
    for a in &after {
        if let Some(c) = count.get_mut(a)
            && *c < 0
        {
            *c += 1;
            out.push((RowKind::Insert, a.1.to_vec(), a.0));
        }
    }
}

/// A key's first rows with their ranks (0 without a rank column).
fn ranked<'a>(def: &RunningTopNDef, rows: &Firsts<'a>) -> Vec<(i64, &'a [u8])> {
    let ranks = if def.rank {
        let sorts: Vec<&[u8]> = rows.iter().map(|(s, _)| *s).collect();
        def.keep.ranks(&sorts)
    } else {
        vec![0; rows.len()]
    };
    ranks
        .into_iter()
        .zip(rows.iter().map(|(_, r)| *r))
        .collect()
}

/// A key's rows as [`Firsts`].
fn firsts(rows: &[(Vec<u8>, Vec<u8>)]) -> Firsts<'_> {
    rows.iter()
        .map(|(s, r)| (s.as_slice(), r.as_slice()))
        .collect()
}

/// The first rows of `live`: `n`, and with ties every row whose sort key equals the `n`-th's.
fn first_rows(live: &Live, keep: Keep) -> Firsts<'_> {
    let n = keep.n;
    let mut out = Vec::with_capacity(n.min(live.len()));
    let mut nth: Option<&[u8]> = None;
    for (k, row) in live {
        let sort = &k[..k.len() - 8];
        match nth {
            None if out.len() < n => {
                out.push((sort, row.as_slice()));
                if out.len() == n {
                    nth = Some(sort);
                }
            }
            Some(last) if keep.with_ties && sort == last => out.push((sort, row.as_slice())),
            _ => break,
        }
    }
    out
}

/// The entries of `live` with exactly the sort key `sort`, from the range of its arrival
/// numbers (sort keys are self-delimiting, so no other key lies in it; the length is checked
/// all the same).
fn tied<'l>(
    live: &'l Live,
    sort: &[u8],
) -> impl DoubleEndedIterator<Item = (&'l Vec<u8>, &'l Vec<u8>)> {
    let mut lo = sort.to_vec();
    lo.extend_from_slice(&[0; 8]);
    let mut hi = sort.to_vec();
    hi.extend_from_slice(&[0xff; 8]);
    live.range(lo..=hi)
        .filter(move |(k, _)| k.len() == sort.len() + 8)
}

/// An arrival number as it is stored after the sort key: big-endian, complemented with
/// `latest` so that later arrivals come first.
fn arrival(seq: u64, latest: bool) -> [u8; 8] {
    if latest { !seq } else { seq }.to_be_bytes()
}

/// Adds `row` as the last arrival among the live rows with its sort key.
fn add_live(live: &mut Live, sort: &[u8], row: &[u8], latest: bool) {
    let mut equal = tied(live, sort);
    let last = if latest {
        equal.next()
    } else {
        equal.next_back()
    };
    let next = last.map_or(0, |(k, _)| {
        let mut stored = [0u8; 8];
        stored.copy_from_slice(&k[k.len() - 8..]);
        u64::from_be_bytes(arrival(u64::from_be_bytes(stored), latest)) + 1
    });
    drop(equal);
    let mut key = sort.to_vec();
    key.extend_from_slice(&arrival(next, latest));
    live.insert(key, row.to_vec());
}

/// Takes back the first-ranked live row equal to `row`; says whether there was one.
fn take_live(live: &mut Live, sort: &[u8], row: &[u8]) -> bool {
    let found = tied(live, sort)
        .find(|(_, r)| r.as_slice() == row)
        .map(|(k, _)| k.clone());
    found.is_some_and(|k| live.remove(&k).is_some())
}

impl Operator for RunningTopN {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let changes = match self.kept {
            Kept::Best(_) => self.add_appended(&batch)?,
            Kept::Live(_) => self.apply_changes(&batch)?,
        };
        if changes.is_empty() {
            return Ok(());
        }
        let decoded = self
            .rows
            .decode(changes.iter().map(|(_, r, _)| r.as_slice()))?;
        let mut columns = decoded.project(&self.def.columns)?.columns().to_vec();
        if self.def.rank {
            columns.push(Arc::new(Int64Array::from_iter_values(
                changes.iter().map(|(_, _, rank)| *rank),
            )));
        }
        columns.push(changelog::op_array(changes.iter().map(|(k, _, _)| *k)));
        out.push(RecordBatch::try_new(self.def.schema.clone(), columns)?);
        Ok(())
    }
}

impl RunningTopN {
    /// An append-only batch: each key's best rows of the batch offered to its kept rows.
    fn add_appended(&mut self, batch: &RecordBatch) -> Result<Vec<Change>, OperatorError> {
        let Kept::Best(best) = &self.kept else {
            return Ok(Vec::new());
        };
        let keys = self.keys.encode(batch)?;
        let sort = self.sort.encode(batch)?;
        let keep = self.def.keep;

        // Per key, in order of first appearance: its first row in the batch and its best rows
        // of the batch (sort key, row number), best first. A row behind them stays out once
        // the kept rows join in.
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut groups: Vec<Candidates<'_>> = Vec::new();
        for i in 0..batch.num_rows() {
            let slot = *index.entry(keys.rows.row(i).data()).or_insert_with(|| {
                groups.push((i, Vec::new()));
                groups.len() - 1
            });
            let candidates = &mut groups[slot].1;
            let s = sort.row(i).data();
            if keep.admits(candidates, s) {
                keep.insert(candidates, s, i);
            }
        }

        // Encode the candidates' rows only: batch row `i` is encoded row `position[i]`.
        let mut taken: Vec<u32> = groups
            .iter()
            .flat_map(|(_, c)| c.iter().map(|&(_, i)| i as u32))
            .collect();
        taken.sort_unstable();
        let mut position = vec![usize::MAX; batch.num_rows()];
        for (at, &i) in taken.iter().enumerate() {
            position[i as usize] = at;
        }
        let taken = UInt32Array::from(taken);
        let rows = if taken.len() == batch.num_rows() {
            self.rows.encode(batch)?
        } else {
            self.rows.encode(&take_record_batch(batch, &taken)?)?
        };

        let mut changes = Vec::new();
        let def = &self.def;
        for (first, candidates) in &mut groups {
            self.state
                .value(best)
                .modify(keys.key(*first), NO_NAMESPACE, Vec::new, |kept| {
                    // Candidates come best first: if the best stays out, so do the rest.
                    if !candidates
                        .first()
                        .is_some_and(|(s, _)| keep.admits(kept, s))
                    {
                        return;
                    }
                    let before: Best = kept.clone();
                    keep.offer(kept, candidates, |i| rows.row(position[i]).data().to_vec());
                    diff(def, &firsts(&before), &firsts(kept), &mut changes);
                })?;
        }
        Ok(changes)
    }

    /// An updating batch: each key's rows added and taken back, in order.
    fn apply_changes(&mut self, batch: &RecordBatch) -> Result<Vec<Change>, OperatorError> {
        let Kept::Live(live) = &self.kept else {
            return Ok(Vec::new());
        };
        let keys = self.keys.encode(batch)?;
        let sort = self.sort.encode(batch)?;
        let rows = self.rows.encode(&batch.project(&self.data)?)?;
        let ops = changelog::kinds(batch);
        let def = &self.def;
        let keep = def.keep;

        // Per key, in order of first appearance: its rows of the batch, in order.
        let mut index: HashMap<&[u8], usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in 0..batch.num_rows() {
            let slot = *index.entry(keys.rows.row(i).data()).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[slot].push(i);
        }

        let mut changes = Vec::new();
        for group in &groups {
            let key = keys.key(group[0]);
            let missing = self.state.value(live).update(key, NO_NAMESPACE, |slot| {
                let map = slot.get_or_insert_with(BTreeMap::new);
                let before: Vec<(Vec<u8>, Vec<u8>)> = first_rows(map, keep)
                    .into_iter()
                    .map(|(s, r)| (s.to_vec(), r.to_vec()))
                    .collect();
                let mut missing = None;
                for &i in group {
                    let kind = ops.map_or(RowKind::Insert, |o| changelog::kind_at(o, i));
                    let (s, row) = (sort.row(i).data(), rows.row(i).data());
                    if kind.is_addition() {
                        add_live(map, s, row, keep.latest);
                    } else if !take_live(map, s, row) {
                        missing = Some(i);
                        break;
                    }
                }
                diff(def, &firsts(&before), &first_rows(map, keep), &mut changes);
                if map.is_empty() {
                    *slot = None;
                }
                missing
            })?;
            if let Some(i) = missing {
                return Err(OperatorError::Data(format!(
                    "a row was taken back that the top-n never received (row {i} of a batch, \
                     key {}): its input changelog is not well formed",
                    self.keys.describe(key.bytes)
                )));
            }
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value, json};

    use super::*;
    use crate::testing::{Harness, Random, canonical};

    /// What a running top-n under test keeps and emits.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        n: usize,
        ties: bool,
        /// A rank column `rank`.
        rank: bool,
        /// `tie-break: latest`.
        latest: bool,
    }

    /// A job over rows `{id, k, v}` whose node `top` is a running top-n per `k` by `v DESC`:
    /// over the rows as they come (append-only), or over a running aggregate's updates of
    /// them (`updating`; the harness feeds the top-n, so the aggregate only gives the input
    /// its schema), on the heap or in RocksDB under `dir`.
    fn job(c: Case, updating: bool, dir: Option<&std::path::Path>) -> String {
        let Case { n, ties, .. } = c;
        let mut options = format!("n: {n}, with-ties: {ties}");
        if c.rank {
            options.push_str(", rank-column: rank");
        }
        if c.latest {
            options.push_str(", tie-break: latest");
        }
        let state = match dir {
            Some(d) => format!("state: {{backend: rocksdb, path: {}}}\n", d.display()),
            None => String::new(),
        };
        let input = if updating {
            "  by-id: {kind: key-by, from: s, keys: [id, k]}\n  \
             rows: {kind: aggregate, from: by-id, aggregates: {v: max(v)}}\n  \
             by-k: {kind: key-by, from: rows, keys: [k]}\n"
        } else {
            "  by-k: {kind: key-by, from: s, keys: [k]}\n"
        };
        format!(
            "name: running-top-n\n{state}sources:\n  \
             s: {{kind: jsonl, path: unused.jsonl, schema: {{id: int, k: int, v: int}}}}\n\
             transforms:\n{input}  \
             top: {{kind: top-n, from: by-k, order-by: [v DESC], {options}}}\n\
             sinks:\n  out: {{kind: blackhole, from: top}}\n"
        )
    }

    /// A row `{id, k, v}` of the input.
    type Row = (i64, i64, i64);

    fn as_json(row: &Row) -> Value {
        json!({"id": row.0, "k": row.1, "v": row.2})
    }

    /// The naive top-n: per key, the live rows in arrival order (reversed with `latest`),
    /// sorted stably by `v` descending; the first `n`, and with `ties` every row equal in `v`
    /// to the `n`-th; with `rank`, each with its position from 1 (with ties, one more than the
    /// rows of a greater `v`).
    fn naive(live: &BTreeMap<i64, Vec<Row>>, c: Case) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for rows in live.values() {
            let mut sorted = rows.clone();
            if c.latest {
                sorted.reverse();
            }
            sorted.sort_by_key(|r| std::cmp::Reverse(r.2));
            let nth = sorted.get(c.n - 1).map(|r| r.2);
            for (i, r) in sorted.iter().enumerate() {
                if i < c.n || (c.ties && Some(r.2) == nth) {
                    let mut row = as_json(r);
                    if c.rank {
                        let before = sorted.iter().filter(|o| o.2 > r.2).count();
                        row["rank"] = json!(if c.ties { before + 1 } else { i + 1 });
                    }
                    *out.entry(canonical(&row)).or_default() += 1;
                }
            }
        }
        out
    }

    /// Folds an output changelog into `table` (rows → copies), checking that it is well
    /// formed: a `-U`/`-D` takes back a live row, and a `-U` is followed by its `+U`, of the
    /// same key and rank.
    fn fold(table: &mut BTreeMap<String, i64>, rows: &[Value]) {
        for (at, row) in rows.iter().enumerate() {
            let mut row = row.clone();
            let op = row
                .as_object_mut()
                .and_then(|o| o.remove(changelog::OP))
                .and_then(|o| RowKind::from_short(o.as_str()?))
                .unwrap_or_else(|| panic!("a row without its kind: {row}"));
            let text = canonical(&row);
            if op.is_addition() {
                *table.entry(text).or_default() += 1;
                continue;
            }
            let copies = table.entry(text.clone()).or_default();
            assert!(
                *copies > 0,
                "{} of a row that is not live: {text}",
                op.short()
            );
            *copies -= 1;
            if *copies == 0 {
                table.remove(&text);
            }
            if op == RowKind::UpdateBefore {
                let next = rows.get(at + 1);
                assert_eq!(
                    next.map(|r| r[changelog::OP].clone()),
                    Some(json!(RowKind::UpdateAfter.short())),
                    "-U without its +U"
                );
                let id = |r: &Value| (r["k"].clone(), r.get("rank").cloned());
                assert_eq!(next.map(id), Some(id(&row)), "a +U of another key or rank");
            }
        }
    }

    /// Random rows in random batches, through the harness with a restart every few batches,
    /// for each `n`, ties and backend: after every batch, the table the output changelog
    /// builds is the naive top-n of the input so far. Few keys, ids and values, so that rows
    /// tie, repeat exactly, and (over updates) keys empty and come back.
    #[test]
    fn a_running_top_n_keeps_the_table_of_a_naive_sort_over_random_inputs_and_restarts() {
        let mut cases = Vec::new();
        for (n, ties) in [(1, false), (1, true), (3, false), (3, true)] {
            for (rank, latest) in [(false, false), (true, false), (false, true), (true, true)] {
                cases.push(Case {
                    n,
                    ties,
                    rank,
                    latest,
                });
            }
        }
        for updating in [false, true] {
            for &c in &cases {
                for rocksdb in [false, true] {
                    let dir = tempfile::tempdir().unwrap();
                    let at = format!("{c:?}, updating {updating}, rocksdb {rocksdb}");
                    let mut h =
                        Harness::new(&job(c, updating, rocksdb.then_some(dir.path())), "top");
                    check(&mut h, c, updating, &at);
                }
            }
        }
    }

    fn check(h: &mut Harness, c: Case, updating: bool, at: &str) {
        let Case { n, ties, .. } = c;
        let mut random = Random(0x7095_5eed_0000_0001 ^ (n as u64) << 8 ^ u64::from(ties));
        // Which of equal live rows a `-U`/`-D` takes back: the first ranked.
        let taken = |rows: &[Row], old: &Row| {
            if c.latest {
                rows.iter().rposition(|r| r == old)
            } else {
                rows.iter().position(|r| r == old)
            }
            .unwrap()
        };
        // Per key, the live rows in arrival order.
        let mut live: BTreeMap<i64, Vec<Row>> = BTreeMap::new();
        let mut table = BTreeMap::new();
        let (mut emitted, mut taken_back) = (0, 0);
        for batch in 0..150i64 {
            let mut rows: Vec<Value> = Vec::new();
            for _ in 0..1 + random.below(12) {
                // Values rise slowly, so that new rows keep displacing old ones.
                let new_row = |random: &mut Random| -> Row {
                    (
                        random.below(4) as i64,
                        random.below(4) as i64,
                        random.below(6) as i64 + batch / 5,
                    )
                };
                let count: usize = live.values().map(Vec::len).sum();
                let pick = |random: &mut Random| -> Option<(i64, usize)> {
                    if count == 0 {
                        return None;
                    }
                    let mut i = random.below(count as u64) as usize;
                    live.iter().find_map(|(k, rows)| {
                        if i < rows.len() {
                            Some((*k, i))
                        } else {
                            i -= rows.len();
                            None
                        }
                    })
                };
                let choice = if updating { random.below(3) } else { 0 };
                match (choice, pick(&mut random)) {
                    (1, Some((k, i))) => {
                        // An update: the old row out (its earliest copy), a new one in.
                        let old = live[&k][i];
                        let first = taken(&live[&k], &old);
                        live.get_mut(&k).unwrap().remove(first);
                        let mut new = new_row(&mut random);
                        new.0 = old.0;
                        live.entry(new.1).or_default().push(new);
                        let mut before = as_json(&old);
                        before[changelog::OP] = json!(RowKind::UpdateBefore as i8);
                        let mut after = as_json(&new);
                        after[changelog::OP] = json!(RowKind::UpdateAfter as i8);
                        rows.extend([before, after]);
                    }
                    (2, Some((k, i))) => {
                        let old = live[&k][i];
                        let first = taken(&live[&k], &old);
                        live.get_mut(&k).unwrap().remove(first);
                        let mut row = as_json(&old);
                        row[changelog::OP] = json!(RowKind::Delete as i8);
                        rows.push(row);
                    }
                    _ => {
                        let new = new_row(&mut random);
                        live.entry(new.1).or_default().push(new);
                        let mut row = as_json(&new);
                        if updating {
                            row[changelog::OP] = json!(RowKind::Insert as i8);
                        }
                        rows.push(row);
                    }
                }
            }
            h.push(0, &rows);
            if batch % 7 == 3 {
                h.restart();
            }
            let out = h.take();
            emitted += out.len();
            taken_back += out
                .iter()
                .filter(|r| r[changelog::OP] != json!(RowKind::Insert.short()))
                .filter(|r| r[changelog::OP] != json!(RowKind::UpdateAfter.short()))
                .count();
            fold(&mut table, &out);
            assert_eq!(table, naive(&live, c), "{at}, after batch {batch}");
        }
        assert!(emitted > 100, "{at}: {emitted} changes");
        if updating || n > 1 || ties {
            assert!(taken_back > 10, "{at}: {taken_back} rows taken back");
        }
    }

    #[test]
    #[should_panic(expected = "a row was taken back that the top-n never received")]
    fn taking_back_a_row_never_received_is_a_clear_error() {
        let case = Case {
            n: 2,
            ties: false,
            rank: false,
            latest: false,
        };
        let mut h = Harness::new(&job(case, true, None), "top");
        let row = |v: i64, kind: RowKind| json!({"id": 1, "k": 1, "v": v, "__op": kind as i8});
        h.push(0, &[row(1, RowKind::Insert)]);
        h.push(0, &[row(2, RowKind::Delete)]);
    }
}
