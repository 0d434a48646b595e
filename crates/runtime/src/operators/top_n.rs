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

use arrow_array::{Int64Array, RecordBatch, UInt32Array};
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
    pub keep: Keep,
    pub fire_at: Expr,
    pub input: SchemaRef,
    /// Input column indices to emit, in order.
    pub columns: Vec<usize>,
    /// Whether the output ends with each row's rank (`rank-column`).
    pub rank: bool,
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

/// What a group keeps: `n` rows, or with ties also every row tied with the `n`-th; of rows
/// equal in the order the earliest to arrive ranks first, or with `latest` the last.
#[derive(Clone, Copy, Debug)]
pub struct Keep {
    pub n: usize,
    pub with_ties: bool,
    pub latest: bool,
}

impl Keep {
    /// Whether a row with `sort`, arriving now, would enter `group` (rows by sort key, in
    /// rank order).
    pub(crate) fn admits<K: AsRef<[u8]>, R>(&self, group: &[(K, R)], sort: &[u8]) -> bool {
        match group.get(self.n.saturating_sub(1)) {
            None => true,
            // A tie of the n-th stays; the latest of equal rows goes before them.
            Some((last, _)) if self.with_ties || self.latest => sort <= last.as_ref(),
            Some((last, _)) => sort < last.as_ref(),
        }
    }

    /// Inserts a row arriving now among rows with an equal key (after them, or before them
    /// with `latest`), then trims.
    pub(crate) fn insert<K: AsRef<[u8]> + Clone, R>(
        &self,
        group: &mut Vec<(K, R)>,
        sort: K,
        row: R,
    ) {
        let at = if self.latest {
            group.partition_point(|(k, _)| k.as_ref() < sort.as_ref())
        } else {
            group.partition_point(|(k, _)| k.as_ref() <= sort.as_ref())
        };
        group.insert(at, (sort, row));
        let n = self.n;
        if group.len() > n {
            if self.with_ties {
                let cutoff = group[n - 1].0.clone();
                group.retain(|(k, _)| k.as_ref() <= cutoff.as_ref());
            } else {
                group.truncate(n);
            }
        }
    }

    /// Offers a batch's candidates (sort key, row number) to `group` in the order they arrived,
    /// so that equal rows rank as they would one by one; `row` copies a row out of the batch,
    /// only for one that enters.
    pub(crate) fn offer<R>(
        &self,
        group: &mut Vec<(Vec<u8>, R)>,
        candidates: &mut [(&[u8], usize)],
        row: impl Fn(usize) -> R,
    ) {
        candidates.sort_unstable_by_key(|&(_, i)| i);
        for &mut (sort, i) in candidates {
            if self.admits(group, sort) {
                self.insert(group, sort.to_vec(), row(i));
            }
        }
    }

    /// The ranks of a group's rows, in order: positions from 1, or with ties one more than
    /// the number of rows strictly before (`RANK()`).
    pub(crate) fn ranks<K: AsRef<[u8]>>(&self, sorts: &[K]) -> Vec<i64> {
        let mut ranks = Vec::with_capacity(sorts.len());
        for (i, s) in sorts.iter().enumerate() {
            let tied = self.with_ties && i > 0 && sorts[i - 1].as_ref() == s.as_ref();
            ranks.push(if tied { ranks[i - 1] } else { i as i64 + 1 });
        }
        ranks
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
        let keep = self.def.keep;

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
            if keep.admits(candidates, sort_key) {
                keep.insert(candidates, sort_key, i);
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
        for group in &mut groups {
            ns.clear();
            put_ordered_i64(&mut ns, group.fire);
            let key = keys.key(group.first);
            let (_, created) =
                self.state
                    .value(&self.groups)
                    .modify_or_init(key, &ns, Vec::new, |stored| {
                        keep.offer(stored, &mut group.rows, row)
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
        let mut ranks: Vec<i64> = Vec::new();
        while let Some(timer) = self
            .state
            .timers()
            .pop_due(TimeDomain::EventTime, watermark)?
        {
            let group = self
                .state
                .value(&self.groups)
                .remove(timer.key(), &timer.namespace)?
                .unwrap_or_default();
            if self.def.rank {
                let sorts: Vec<&[u8]> = group.iter().map(|(s, _)| s.as_slice()).collect();
                ranks.extend(self.def.keep.ranks(&sorts));
            }
            ready.extend(group.into_iter().map(|(_, row)| row));
            if ready.len() >= 4096 {
                out.push(self.project(&ready, &ranks)?);
                ready.clear();
                ranks.clear();
            }
        }
        if !ready.is_empty() {
            out.push(self.project(&ready, &ranks)?);
        }
        Ok(watermark)
    }
}

impl TopN {
    /// The emitted columns of `rows`, and their `ranks` when the output has a rank column.
    fn project(&self, rows: &[Vec<u8>], ranks: &[i64]) -> Result<RecordBatch, OperatorError> {
        let batch = self.rows.decode(rows.iter().map(Vec::as_slice))?;
        let mut columns = batch.project(&self.def.columns)?.columns().to_vec();
        if self.def.rank {
            columns.push(Arc::new(Int64Array::from(ranks.to_vec())));
        }
        Ok(RecordBatch::try_new(self.def.schema.clone(), columns)?)
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
        let keep = |n, with_ties| Keep {
            n,
            with_ties,
            latest: false,
        };
        let offer = |keep: Keep, ks: &[u8]| {
            let sorts: Vec<[u8; 1]> = ks.iter().map(|&k| [k]).collect();
            let mut candidates: Vec<(&[u8], usize)> =
                sorts.iter().enumerate().map(|(i, s)| (&s[..], i)).collect();
            let mut g: Group = Vec::new();
            keep.offer(&mut g, &mut candidates, |_| vec![]);
            g
        };
        let g = offer(keep(2, false), &[5, 3, 3, 9, 1, 3]);
        assert_eq!(keys(&g), vec![1, 3]);
        let g = offer(keep(1, true), &[5, 3, 3, 9, 3, 1]);
        assert_eq!(keys(&g), vec![1], "a new best drops the old ties");
        let g = offer(keep(1, true), &[5, 3, 3, 9, 3]);
        assert_eq!(keys(&g), vec![3, 3, 3]);
        assert_eq!(keep(1, true).ranks(&[[1], [3], [3], [4]]), vec![1, 2, 2, 4]);
        assert_eq!(
            keep(1, false).ranks(&[[1], [3], [3], [4]]),
            vec![1, 2, 3, 4]
        );
    }

    #[test]
    fn equal_keys_rank_by_arrival_earliest_or_latest_first() {
        let arrivals = [(2u8, 1u8), (2, 2), (1, 3), (2, 4)];
        for (latest, n, expected) in [
            (false, 10, vec![3, 1, 2, 4]),
            (true, 10, vec![3, 4, 2, 1]),
            (false, 2, vec![3, 1]),
            (true, 2, vec![3, 4]),
        ] {
            let keep = Keep {
                n,
                with_ties: false,
                latest,
            };
            let sorts: Vec<[u8; 1]> = arrivals.iter().map(|&(k, _)| [k]).collect();
            let mut candidates: Vec<(&[u8], usize)> =
                sorts.iter().enumerate().map(|(i, s)| (&s[..], i)).collect();
            let mut g: Group = Vec::new();
            keep.offer(&mut g, &mut candidates, |i| vec![arrivals[i].1]);
            let rows: Vec<u8> = g.iter().map(|(_, r)| r[0]).collect();
            assert_eq!(rows, expected, "latest {latest}, n {n}");
        }
    }
}
