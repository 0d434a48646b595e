//! `top-n`: the first `n` rows per key and time by an order, emitted when the watermark reaches
//! that time.
//!
//! Rows are grouped per key and `fire-at` time (the namespace), each group holding at most `n`
//! rows (or, with ties, every row tied with the `n`-th) sorted by their memcomparable sort key.
//! A row that cannot enter is rejected before it is copied, so a group costs at most `n` rows
//! of state however many arrive; within a batch, each group's rows are first narrowed to the
//! batch's own best `n`, so state sees one update per group and batch. With `n: 1` and ties
//! this is "the maximum per window joined back to its rows" (Nexmark q5, q7); with `n: 1` and
//! tie-breakers, "the winner" (q4, q9).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_schema::SchemaRef;
use arrow_select::take::take_record_batch;
use hashbrown::HashMap;
use hashbrown::hash_map::Entry;
use weir_state::codec::put_ordered_i64;
use weir_state::{KeyedStateBackend, TimeDomain, ValueId};

use super::keyed::{KeyEncoder, RowCodec, SortKeyEncoder};
use crate::api::Operator;
use crate::api::time::event_times;
use crate::api::{OperatorError, SubtaskMetrics};
use crate::expr::Expr;

/// A group's rows: (sort key, encoded row), in order.
type Group = Vec<(Vec<u8>, Vec<u8>)>;

/// What a top-n is, shared by its subtasks.
pub struct TopNDef {
    pub order: Vec<(Expr, bool)>,
    pub n: usize,
    pub with_ties: bool,
    pub fire_at: Expr,
    pub input: SchemaRef,
    /// Input column indices to emit, in order.
    pub columns: Vec<usize>,
    pub schema: SchemaRef,
}

pub struct TopN {
    def: Arc<TopNDef>,
    keys: KeyEncoder,
    rows: RowCodec,
    sort: SortKeyEncoder,
    state: KeyedStateBackend,
    groups: ValueId<Group>,
    watermark: i64,
    metrics: Arc<SubtaskMetrics>,
}

impl TopN {
    pub fn new(
        def: Arc<TopNDef>,
        keys: KeyEncoder,
        mut state: KeyedStateBackend,
        metrics: Arc<SubtaskMetrics>,
    ) -> Result<Self, OperatorError> {
        let groups = state.value_state("groups")?;
        Ok(Self {
            rows: RowCodec::new(def.input.clone())?,
            sort: SortKeyEncoder::new(def.order.clone())?,
            def,
            keys,
            state,
            groups,
            watermark: i64::MIN,
            metrics,
        })
    }
}

/// Whether a row with `sort` would enter `group` (rows by sort key, in order).
pub(super) fn admits<K: AsRef<[u8]>, R>(
    group: &[(K, R)],
    sort: &[u8],
    n: usize,
    with_ties: bool,
) -> bool {
    match group.get(n.saturating_sub(1)) {
        None => true,
        Some((last, _)) if with_ties => sort <= last.as_ref(),
        Some((last, _)) => sort < last.as_ref(),
    }
}

/// Inserts after rows with an equal key (earlier arrivals rank first), then trims.
pub(super) fn insert<K: AsRef<[u8]> + Clone, R>(
    group: &mut Vec<(K, R)>,
    sort: K,
    row: R,
    n: usize,
    with_ties: bool,
) {
    let at = group.partition_point(|(k, _)| k.as_ref() <= sort.as_ref());
    group.insert(at, (sort, row));
    if group.len() > n {
        if with_ties {
            let cutoff = group[n - 1].0.clone();
            group.retain(|(k, _)| k.as_ref() <= cutoff.as_ref());
        } else {
            group.truncate(n);
        }
    }
}

/// A group's best rows within one batch: sort keys and row numbers, in order.
struct Candidates<'b> {
    /// The group's first row in the batch (its key), and its time.
    first: usize,
    fire: i64,
    rows: Vec<(&'b [u8], usize)>,
}

impl Operator for TopN {
    fn keyed_state(&mut self) -> Option<&mut KeyedStateBackend> {
        Some(&mut self.state)
    }

    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let _ = out;
        let keys = self.keys.encode(&batch)?;
        let sort = self.sort.encode(&batch)?;
        let fire = event_times(&self.def.fire_at.evaluate(&batch)?)?;
        let (n, ties) = (self.def.n, self.def.with_ties);

        // First the batch's own best rows per group (key and time), groups in order of first
        // appearance. A row outside the first `n` of its group within the batch (or, with
        // ties, behind the `n`-th) stays outside once the stored rows join in, so only these
        // candidates are encoded and offered to state: one state update per group and batch
        // instead of one per row (q9's hot auction has thousands of joined bids in a batch
        // and keeps one). Rows equal in sort key keep their arrival order, so the groups end
        // up as with one update per row.
        let mut late = 0u64;
        let mut index: HashMap<(&[u8], i64), usize> = HashMap::new();
        let mut groups: Vec<Candidates<'_>> = Vec::new();
        for (i, f) in fire.iter().enumerate() {
            let Some(f) = *f else {
                late += 1;
                continue;
            };
            if f <= self.watermark {
                late += 1;
                continue;
            }
            let slot = match index.entry((keys.rows.row(i).data(), f)) {
                Entry::Occupied(e) => *e.get(),
                Entry::Vacant(e) => {
                    groups.push(Candidates {
                        first: i,
                        fire: f,
                        rows: Vec::new(),
                    });
                    *e.insert(groups.len() - 1)
                }
            };
            let candidates = &mut groups[slot].rows;
            let sort_key = sort.row(i).data();
            if admits(candidates, sort_key, n, ties) {
                insert(candidates, sort_key, i, n, ties);
            }
        }
        if late > 0 {
            self.metrics.late_dropped.fetch_add(late, Ordering::Relaxed);
        }
        if groups.is_empty() {
            return Ok(());
        }

        // Encode the candidates' rows only, in batch order: batch row `i` is encoded row
        // `position[i]`.
        let mut taken: Vec<u32> = groups
            .iter()
            .flat_map(|g| g.rows.iter().map(|&(_, i)| i as u32))
            .collect();
        taken.sort_unstable();
        let mut position = vec![usize::MAX; batch.num_rows()];
        for (at, &i) in taken.iter().enumerate() {
            position[i as usize] = at;
        }
        let taken = UInt32Array::from(taken);
        let rows = if taken.len() == batch.num_rows() {
            self.rows.encode(&batch)?
        } else {
            self.rows.encode(&take_record_batch(&batch, &taken)?)?
        };
        let row = |i: usize| rows.row(position[i]).data().to_vec();

        let mut ns = Vec::with_capacity(8);
        for group in &groups {
            ns.clear();
            put_ordered_i64(&mut ns, group.fire);
            let key = keys.key(group.first);
            let (_, created) =
                self.state
                    .value(&self.groups)
                    .modify_or_init(key, &ns, Vec::new, |stored| {
                        for &(sort_key, i) in &group.rows {
                            // Candidates come best first: once one stays out, so do the rest.
                            if !admits(stored, sort_key, n, ties) {
                                break;
                            }
                            insert(stored, sort_key.to_vec(), row(i), n, ties);
                        }
                    })?;
            if created {
                self.state
                    .timers()
                    .set(TimeDomain::EventTime, group.fire, key, &ns, None)?;
            }
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: i64,
        out: &mut Vec<RecordBatch>,
    ) -> Result<i64, OperatorError> {
        self.watermark = watermark;
        let mut ready: Vec<Vec<u8>> = Vec::new();
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let group = self
                .state
                .value(&self.groups)
                .remove(timer.key(), &timer.namespace)?;
            ready.extend(group.into_iter().flatten().map(|(_, row)| row));
            if ready.len() >= 4096 {
                out.push(self.project(&ready)?);
                ready.clear();
            }
        }
        if !ready.is_empty() {
            out.push(self.project(&ready)?);
        }
        Ok(watermark)
    }
}

impl TopN {
    fn project(&self, rows: &[Vec<u8>]) -> Result<RecordBatch, OperatorError> {
        let batch = self.rows.decode(rows.iter().map(Vec::as_slice))?;
        Ok(batch
            .project(&self.def.columns)?
            .with_schema(self.def.schema.clone())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(group: &Group) -> Vec<u8> {
        group.iter().map(|(k, _)| k[0]).collect()
    }

    #[test]
    fn groups_keep_n_rows_or_every_tie_of_the_nth() {
        let mut g: Group = Vec::new();
        for k in [5u8, 3, 3, 9, 1, 3] {
            if admits(&g, &[k], 2, false) {
                insert(&mut g, vec![k], vec![], 2, false);
            }
        }
        assert_eq!(keys(&g), vec![1, 3]);
        let mut g: Group = Vec::new();
        for k in [5u8, 3, 3, 9, 3, 1] {
            if admits(&g, &[k], 1, true) {
                insert(&mut g, vec![k], vec![], 1, true);
            }
        }
        assert_eq!(keys(&g), vec![1], "a new best drops the old ties");
        let mut g: Group = Vec::new();
        for k in [5u8, 3, 3, 9, 3] {
            if admits(&g, &[k], 1, true) {
                insert(&mut g, vec![k], vec![], 1, true);
            }
        }
        assert_eq!(keys(&g), vec![3, 3, 3]);
    }

    #[test]
    fn equal_keys_keep_arrival_order() {
        let mut g: Group = Vec::new();
        for (k, r) in [(2u8, 1u8), (2, 2), (1, 3), (2, 4)] {
            insert(&mut g, vec![k], vec![r], 10, false);
        }
        let rows: Vec<u8> = g.iter().map(|(_, r)| r[0]).collect();
        assert_eq!(rows, vec![3, 1, 2, 4]);
    }
}
