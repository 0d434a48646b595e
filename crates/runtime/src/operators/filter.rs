//! `filter`: keeps the rows for which a SQL condition is true (NULL counts as false).

use std::sync::Arc;

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_select::filter::filter_record_batch;

use crate::api::Operator;
use crate::api::OperatorError;
use crate::expr::Expr;

pub struct Filter {
    predicate: Arc<Expr>,
}

impl Filter {
    /// `predicate` must be a compiled BOOL expression (the planner checks).
    pub fn new(predicate: Arc<Expr>) -> Self {
        Self { predicate }
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
            out.push(batch);
        } else if kept > 0 {
            out.push(filter_record_batch(&batch, mask)?);
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
}
