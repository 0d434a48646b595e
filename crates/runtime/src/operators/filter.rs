//! `filter`: keeps the rows for which a SQL condition is true (NULL counts as false).

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_schema::SchemaRef;
use arrow_select::filter::filter_record_batch;

use crate::changelog::{self, RowKind};

use crate::api::Operator;
use crate::api::OperatorError;
use crate::expr::Expr;

pub struct Filter {
    predicate: Arc<Expr>,
    /// Over an updating input with updates (`-U`/`+U` pairs): the output's schema, whose kinds
    /// include `+I` and `-D` (see [`Filter::updating`]).
    updates: Option<SchemaRef>,
}

impl Filter {
    /// `predicate` must be a compiled BOOL expression (the planner checks).
    pub fn new(predicate: Arc<Expr>) -> Self {
        Self {
            predicate,
            updates: None,
        }
    }

    /// A filter over a stream of updates, whose output is `schema`. An update is a `-U` and
    /// its `+U`, next to each other in one batch; when the condition keeps one half and drops
    /// the other (a `HAVING` whose aggregate crosses its bound), the half kept says what
    /// happened to the filtered table: a kept `-U` becomes `-D` (the row left it), a kept `+U`
    /// becomes `+I` (the row came into it). So every `-U` of the output is still followed by
    /// its `+U`, which sinks that write only new versions, or drop `-U`s, rely on.
    pub fn updating(predicate: Arc<Expr>, schema: SchemaRef) -> Self {
        Self {
            predicate,
            updates: Some(schema),
        }
    }

    /// The batch `filtered` (the rows `mask` keeps of `batch`) with the kinds of updates split
    /// by the mask rewritten, in the output's schema.
    fn split_updates(
        batch: &RecordBatch,
        mask: &BooleanArray,
        filtered: RecordBatch,
        schema: &SchemaRef,
    ) -> Result<RecordBatch, OperatorError> {
        let (Some(ops), Some(op)) = (changelog::kinds(batch), changelog::op_column(schema)) else {
            return Ok(filtered);
        };
        let keeps = |i: usize| mask.is_valid(i) && mask.value(i);
        let mut kinds = Vec::with_capacity(filtered.num_rows());
        let mut i = 0;
        while i < batch.num_rows() {
            let kind = changelog::kind_at(ops, i);
            let paired = kind == RowKind::UpdateBefore
                && i + 1 < batch.num_rows()
                && changelog::kind_at(ops, i + 1) == RowKind::UpdateAfter;
            if paired {
                match (keeps(i), keeps(i + 1)) {
                    (true, true) => kinds.extend([RowKind::UpdateBefore, RowKind::UpdateAfter]),
                    (true, false) => kinds.push(RowKind::Delete),
                    (false, true) => kinds.push(RowKind::Insert),
                    (false, false) => {}
                }
                i += 2;
            } else {
                if keeps(i) {
                    kinds.push(kind);
                }
                i += 1;
            }
        }
        let mut columns = filtered.columns().to_vec();
        columns[op] = changelog::op_array(kinds);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

impl Operator for Filter {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let mask = self.predicate.evaluate(&batch)?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| OperatorError::Internal("filter predicate is not BOOL".into()))?;
        let kept = mask.true_count();
        if kept == batch.num_rows() && mask.null_count() == 0 {
            out.push(match &self.updates {
                Some(schema) => RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?,
                None => batch,
            });
        } else if kept > 0 {
            let filtered = filter_record_batch(&batch, mask)?;
            out.push(match &self.updates {
                Some(schema) => Self::split_updates(&batch, mask, filtered, schema)?,
                None => filtered,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{Harness, Random};

    /// A source `src` of `{k: int, v: int, w: int, s: string}` rows (never read: the harness
    /// feeds the operator) and the filter `op` over it with the condition `predicate`.
    fn job(predicate: &str) -> String {
        format!(
            "name: filter-test\nsources:\n  src: {{kind: jsonl, path: unused.jsonl, \
             schema: {{k: int, v: int, w: int, s: string}}}}\n\
             transforms:\n  op:\n    kind: filter\n    from: src\n    where: {predicate}\n\
             sinks:\n  out: {{kind: blackhole, from: op}}\n"
        )
    }

    /// A value in `-20..20`, NULL about one time in six.
    fn small(random: &mut Random) -> Option<i64> {
        (random.below(6) != 0).then(|| random.below(40) as i64 - 20)
    }

    #[derive(Clone, Debug)]
    struct Row {
        k: i64,
        v: Option<i64>,
        w: Option<i64>,
        s: Option<&'static str>,
    }

    impl Row {
        fn json(&self) -> Value {
            json!({"k": self.k, "v": self.v, "w": self.w, "s": self.s})
        }
    }

    /// `n` rows numbered from `first`, with NULLs in every nullable column now and then.
    fn rows(random: &mut Random, first: i64, n: usize) -> Vec<Row> {
        const STRINGS: [&str; 6] = ["a", "ab", "ba", "", "A", "a%"];
        (0..n as i64)
            .map(|i| Row {
                k: first + i,
                v: small(random),
                w: small(random),
                s: (random.below(7) != 0).then(|| STRINGS[random.below(6) as usize]),
            })
            .collect()
    }

    /// SQL's three-valued AND and OR.
    fn and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
        match (a, b) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        }
    }

    fn or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
        match (a, b) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        }
    }

    /// A condition mixing arithmetic, NULL tests, OR, AND and LIKE over nullable columns,
    /// batches of 0 to 40 rows: the output is, in order, exactly the rows for which a row-by-row
    /// three-valued evaluation of the condition is true (NULL and false both drop the row).
    #[test]
    fn keeps_in_order_exactly_the_rows_whose_condition_is_true() {
        let mut h = Harness::new(
            &job("v % 3 <> 1 AND (w IS NULL OR w > v) AND s LIKE 'a%'"),
            "op",
        );
        let mut random = Random(0x243f_6a88_85a3_08d3);
        let mut fed = Vec::new();
        let mut got = Vec::new();
        for _ in 0..40 {
            let n = random.below(41) as usize;
            let batch = rows(&mut random, fed.len() as i64, n);
            h.push(0, &batch.iter().map(Row::json).collect::<Vec<_>>());
            got.extend(h.take());
            fed.extend(batch);
        }
        let condition = |r: &Row| {
            // `%` truncates toward zero in SQL as in Rust: -4 % 3 is -1.
            let rem = r.v.map(|v| v % 3 != 1);
            let w = or(Some(r.w.is_none()), r.w.zip(r.v).map(|(w, v)| w > v));
            let like = r.s.map(|s| s.starts_with('a'));
            and(and(rem, w), like)
        };
        let expected: Vec<Value> = fed
            .iter()
            .filter(|r| condition(r) == Some(true))
            .map(Row::json)
            .collect();
        assert!(
            expected.len() > 20 && expected.len() < fed.len() / 2,
            "{} of {} rows kept: the condition should keep some and drop most",
            expected.len(),
            fed.len()
        );
        assert_eq!(got, expected);
    }

    /// A condition and its negation over the same rows: each non-NULL row passes exactly one of
    /// them and a row whose condition is NULL passes neither; a batch that passes whole comes
    /// out whole and one that fails whole emits nothing.
    #[test]
    fn a_null_condition_drops_the_row_under_the_condition_and_its_negation() {
        let mut random = Random(0x1319_8a2e_0370_7344);
        let fed = rows(&mut random, 0, 500);
        let fed_json: Vec<Value> = fed.iter().map(Row::json).collect();
        let mut outputs = Vec::new();
        for predicate in ["v > w", "NOT (v > w)"] {
            let mut h = Harness::new(&job(predicate), "op");
            let mut got = Vec::new();
            for chunk in fed_json.chunks(64) {
                h.push(0, chunk);
                got.extend(h.take());
            }
            outputs.push(got);
        }
        let pick = |want: bool| -> Vec<Value> {
            fed.iter()
                .filter(|r| r.v.zip(r.w).map(|(v, w)| v > w) == Some(want))
                .map(Row::json)
                .collect()
        };
        assert_eq!(outputs[0], pick(true));
        assert_eq!(outputs[1], pick(false));
        let nulls = fed
            .iter()
            .filter(|r| r.v.is_none() || r.w.is_none())
            .count();
        assert!(nulls > 50, "{nulls} rows with a NULL operand");
        assert_eq!(outputs[0].len() + outputs[1].len() + nulls, fed.len());

        // Whole batches: every row passes (NULLs in columns the condition does not read), then
        // none does.
        let mut h = Harness::new(&job("k >= 0"), "op");
        let all: Vec<Value> = fed_json[..100].to_vec();
        h.push(0, &all);
        assert_eq!(h.take(), all);
        let none: Vec<Value> = fed
            .iter()
            .map(|r| json!({"k": -1 - r.k, "v": r.v, "w": r.w, "s": r.s}))
            .collect();
        h.push(0, &none);
        assert_eq!(h.take(), Vec::<Value>::new());
    }

    /// A running count per key (an updating stream of `-U`/`+U` pairs) filtered by a bound
    /// the counts cross both ways: the output is a well-formed changelog (every `-U` followed
    /// by its `+U`, no `-D` of a row not live) whose table is the naive table of the counts the
    /// condition keeps.
    #[test]
    fn updates_split_by_the_condition_become_inserts_and_deletes() {
        let job = "name: filter-updates\nsources:\n  src: {kind: jsonl, path: unused.jsonl, \
                   schema: {k: int, v: int}}\n\
                   transforms:\n  byk: {kind: key-by, from: src, keys: [k]}\n  \
                   agg: {kind: aggregate, from: byk, aggregates: {n: count(*)}}\n  \
                   op: {kind: filter, from: agg, where: n % 3 <> 0}\n\
                   sinks:\n  out: {kind: file, path: unused.jsonl, format: changelog-json, from: op}\n";
        let mut h = Harness::new(job, "op");
        let mut counts = std::collections::BTreeMap::<i64, i64>::new();
        let mut table = std::collections::BTreeMap::<i64, i64>::new();
        let mut random = Random(99);
        for _ in 0..200 {
            let mut rows = Vec::new();
            for _ in 0..1 + random.below(6) {
                let k = random.below(4) as i64;
                let n = counts.entry(k).or_default();
                if *n == 0 || random.below(3) > 0 {
                    if *n > 0 {
                        rows.push(json!({"k": k, "n": *n, "__op": "-U"}));
                    }
                    *n += 1;
                    let kind = if *n == 1 { "+I" } else { "+U" };
                    rows.push(json!({"k": k, "n": *n, "__op": kind}));
                } else {
                    // Taken back down: the count moves the other way across the bound.
                    rows.push(json!({"k": k, "n": *n, "__op": "-U"}));
                    *n -= 1;
                    if *n == 0 {
                        let last = rows.len() - 1;
                        rows[last]["__op"] = json!("-D");
                    } else {
                        rows.push(json!({"k": k, "n": *n, "__op": "+U"}));
                    }
                }
            }
            h.push(0, &rows);
            let out = h.take();
            let mut i = 0;
            while i < out.len() {
                let (k, n) = (out[i]["k"].as_i64().unwrap(), out[i]["n"].as_i64().unwrap());
                match out[i]["__op"].as_str().unwrap() {
                    "+I" => assert!(table.insert(k, n).is_none(), "+I of a live key"),
                    "-D" => assert_eq!(table.remove(&k), Some(n), "-D of no live row"),
                    "-U" => {
                        assert_eq!(table.remove(&k), Some(n), "-U of no live row");
                        assert_eq!(out.get(i + 1).map(|r| &r["__op"]), Some(&json!("+U")));
                        assert_eq!(out[i + 1]["k"], json!(k), "-U and +U of one key");
                    }
                    "+U" => {
                        assert!(i > 0 && out[i - 1]["__op"] == json!("-U"), "+U without -U");
                        assert!(table.insert(k, n).is_none());
                    }
                    other => panic!("kind {other}"),
                }
                i += 1;
            }
            let naive: std::collections::BTreeMap<i64, i64> = counts
                .iter()
                .filter(|(_, n)| **n > 0 && **n % 3 != 0)
                .map(|(k, n)| (*k, *n))
                .collect();
            assert_eq!(table, naive);
        }
    }
}
