//! `map`: computes output columns from SQL expressions; also projection and renaming.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::api::Operator;
use crate::api::OperatorError;
use crate::expr::Expr;

pub struct Map {
    columns: Arc<[Expr]>,
    schema: SchemaRef,
    /// The input's row-kind column, copied as the output's last (an updating stream).
    op: Option<usize>,
}

impl Map {
    /// `schema` has one field per expression, in order, typed as the expression (the planner
    /// builds both together), then the row kind if [`Map::carrying_kinds`] says where it is.
    pub fn new(columns: Arc<[Expr]>, schema: SchemaRef) -> Self {
        Self {
            columns,
            schema,
            op: None,
        }
    }

    /// Copies input column `op`, the row kind of an updating input, as the last output column.
    pub fn carrying_kinds(mut self, op: Option<usize>) -> Self {
        self.op = op;
        self
    }
}

impl Operator for Map {
    fn process_batch(
        &mut self,
        _input: usize,
        batch: RecordBatch,
        out: &mut Vec<RecordBatch>,
    ) -> Result<(), OperatorError> {
        let mut arrays = self
            .columns
            .iter()
            .map(|e| e.evaluate(&batch))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(op) = self.op {
            arrays.push(batch.column(op).clone());
        }
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        out.push(RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays,
            &options,
        )?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::testing::{Harness, Random};

    /// A source `src` of `{k: int, v: int, w: int, s: string, t: timestamp}` rows (never read:
    /// the harness feeds the operator) and the map `op` over it with `columns` (YAML lines).
    fn job(columns: &str) -> String {
        format!(
            "name: map-test\nsources:\n  src: {{kind: jsonl, path: unused.jsonl, \
             schema: {{k: int, v: int, w: int, s: string, t: timestamp}}}}\n\
             transforms:\n  op:\n    kind: map\n    from: src\n    columns:\n{columns}\
             sinks:\n  out: {{kind: blackhole, from: op}}\n"
        )
    }

    /// A value in `-10..10` (zero included, for divisions), NULL about one time in six.
    fn small(random: &mut Random) -> Option<i64> {
        (random.below(6) != 0).then(|| random.below(20) as i64 - 10)
    }

    #[derive(Clone, Debug)]
    struct Row {
        k: i64,
        v: Option<i64>,
        w: Option<i64>,
        s: Option<&'static str>,
        t: Option<i64>,
    }

    fn rows(random: &mut Random, first: i64, n: usize) -> Vec<Row> {
        const STRINGS: [&str; 5] = ["ab", "Ab", "", "xyz", "a-1"];
        (0..n as i64)
            .map(|i| Row {
                k: first + i,
                v: small(random),
                w: small(random),
                s: (random.below(7) != 0).then(|| STRINGS[random.below(5) as usize]),
                t: (random.below(9) != 0).then(|| 1_700_000_000_000 + random.below(100_000) as i64),
            })
            .collect()
    }

    fn as_json(rows: &[Row]) -> Vec<Value> {
        rows.iter()
            .map(|r| json!({"k": r.k, "v": r.v, "w": r.w, "s": r.s, "t": r.t}))
            .collect()
    }

    /// Columns of every family (arithmetic with NULLs, a guarded division, `%` of negatives,
    /// `greatest` and `coalesce` that skip NULLs, strings, a NULL test, timestamp arithmetic)
    /// over batches of 0 to 50 rows: one output row per input row, in order, each equal to the
    /// columns computed row by row in plain Rust.
    #[test]
    fn computes_each_column_of_each_row_as_a_row_by_row_evaluation() {
        let mut h = Harness::new(
            &job("      id: k\n      \
                  total: v + w\n      \
                  ratio: CASE WHEN w = 0 THEN NULL ELSE v / w END\n      \
                  rem: v % 7\n      \
                  big: greatest(v, w)\n      \
                  w0: coalesce(w, 0)\n      \
                  up: upper(s)\n      \
                  missing: s IS NULL\n      \
                  later: t + INTERVAL '2' SECOND\n"),
            "op",
        );
        let mut random = Random(0xa409_3822_299f_31d0);
        let mut fed = Vec::new();
        let mut got = Vec::new();
        for _ in 0..30 {
            let n = random.below(51) as usize;
            let batch = rows(&mut random, fed.len() as i64, n);
            h.push(0, &as_json(&batch));
            got.extend(h.take());
            fed.extend(batch);
        }
        let expected: Vec<Value> = fed
            .iter()
            .map(|r| {
                let both = r.v.zip(r.w);
                // `/` and `%` truncate toward zero, as Rust's do.
                let ratio = both.and_then(|(v, w)| (w != 0).then(|| v / w));
                let big = match both {
                    Some((v, w)) => Some(v.max(w)),
                    None => r.v.or(r.w),
                };
                json!({
                    "id": r.k,
                    "total": both.map(|(v, w)| v + w),
                    "ratio": ratio,
                    "rem": r.v.map(|v| v % 7),
                    "big": big,
                    "w0": r.w.unwrap_or(0),
                    "up": r.s.map(str::to_uppercase),
                    "missing": r.s.is_none(),
                    "later": r.t.map(|t| t + 2000),
                })
            })
            .collect();
        assert!(fed.len() > 500, "{} rows", fed.len());
        assert_eq!(got, expected);
    }

    /// Columns that read nothing of the row (a constant) or one column under a new name: as
    /// many output rows as input rows, batches of none included, each `{one: 1, name: s}`.
    #[test]
    fn a_constant_column_has_one_value_per_input_row() {
        let mut h = Harness::new(&job("      one: '1'\n      name: s\n"), "op");
        let mut random = Random(0x082e_fa98_ec4e_6c89);
        let mut fed = 0;
        for _ in 0..30 {
            let n = random.below(20) as usize;
            let batch = rows(&mut random, fed, n);
            fed += n as i64;
            h.push(0, &as_json(&batch));
            let expected: Vec<Value> = batch
                .iter()
                .map(|r| json!({"one": 1, "name": r.s}))
                .collect();
            assert_eq!(h.take(), expected);
        }
        assert!(fed > 100);
    }
}
