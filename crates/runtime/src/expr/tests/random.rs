//! Seeded randomized check: random arithmetic / comparison / logic expressions over random
//! columns (NULLs, zeros, extremes, -0.0, NaN, inf) evaluated by the vectorised engine and by a
//! naive per-row reference written from the SQL rules. A batch must fail exactly when some row
//! fails in the reference, and otherwise agree value for value.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, Float64Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use super::Expr;

/// splitmix64: small, seedable, good enough to spread test cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Int,
    Float,
    Bool,
}

#[derive(Debug, Clone, Copy)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Debug, Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A generated expression: rendered to SQL, and evaluated row by row by [`Gen::eval`].
#[derive(Debug)]
enum Gen {
    /// Column index: 0 and 1 are INT (`a`, `b`), 2 is FLOAT (`x`).
    Col(usize),
    Int(i64),
    /// A decimal literal `mantissa / 10^scale`.
    Decimal(i64, u32),
    Arith(Arith, Box<Gen>, Box<Gen>),
    Neg(Box<Gen>),
    Cmp(Cmp, Box<Gen>, Box<Gen>),
    And(Box<Gen>, Box<Gen>),
    Or(Box<Gen>, Box<Gen>),
    Not(Box<Gen>),
}

/// A reference value; `Err(())` is a row that fails (overflow, division by zero).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Int(Option<i64>),
    Float(Option<f64>),
    Bool(Option<bool>),
}

type Row = (Option<i64>, Option<i64>, Option<f64>);

impl Gen {
    fn ty(&self) -> Ty {
        match self {
            Gen::Col(2) | Gen::Decimal(..) => Ty::Float,
            Gen::Col(_) | Gen::Int(_) => Ty::Int,
            Gen::Arith(_, l, r) => {
                if l.ty() == Ty::Int && r.ty() == Ty::Int {
                    Ty::Int
                } else {
                    Ty::Float
                }
            }
            Gen::Neg(e) => e.ty(),
            Gen::Cmp(..) | Gen::And(..) | Gen::Or(..) | Gen::Not(_) => Ty::Bool,
        }
    }

    fn sql(&self) -> String {
        match self {
            Gen::Col(i) => ["a", "b", "x"][*i].to_owned(),
            Gen::Int(v) => v.to_string(),
            Gen::Decimal(m, s) => {
                let divisor = 10_i64.pow(*s);
                format!(
                    "{}.{:0width$}",
                    m / divisor,
                    m % divisor,
                    width = *s as usize
                )
            }
            Gen::Arith(op, l, r) => {
                let op = match op {
                    Arith::Add => "+",
                    Arith::Sub => "-",
                    Arith::Mul => "*",
                    Arith::Div => "/",
                    Arith::Rem => "%",
                };
                format!("({} {op} {})", l.sql(), r.sql())
            }
            Gen::Neg(e) => format!("(-{})", e.sql()),
            Gen::Cmp(op, l, r) => {
                let op = match op {
                    Cmp::Eq => "=",
                    Cmp::Ne => "<>",
                    Cmp::Lt => "<",
                    Cmp::Le => "<=",
                    Cmp::Gt => ">",
                    Cmp::Ge => ">=",
                };
                format!("({} {op} {})", l.sql(), r.sql())
            }
            Gen::And(l, r) => format!("({} AND {})", l.sql(), r.sql()),
            Gen::Or(l, r) => format!("({} OR {})", l.sql(), r.sql()),
            Gen::Not(e) => format!("(NOT {})", e.sql()),
        }
    }

    /// The SQL rules, one row at a time.
    fn eval(&self, row: Row) -> Result<Val, ()> {
        Ok(match self {
            Gen::Col(0) => Val::Int(row.0),
            Gen::Col(1) => Val::Int(row.1),
            Gen::Col(_) => Val::Float(row.2),
            Gen::Int(v) => Val::Int(Some(*v)),
            Gen::Decimal(m, s) => Val::Float(Some(decimal_value(*m, *s))),
            Gen::Arith(op, l, r) => {
                // INT * decimal literal is exact (arith::ScaledMulOp).
                if let (Arith::Mul, Some((int, (m, s)))) = (op, scaled_operands(l, r)) {
                    let Val::Int(x) = int.eval(row)? else {
                        unreachable!("typed as INT")
                    };
                    return Ok(Val::Float(x.map(|x| match x.checked_mul(m) {
                        Some(p) => p as f64 / 10_i64.pow(s) as f64,
                        None => x as f64 * decimal_value(m, s),
                    })));
                }
                match (l.eval(row)?, r.eval(row)?) {
                    (Val::Int(a), Val::Int(b)) => match (a, b) {
                        (Some(a), Some(b)) => Val::Int(Some(int_arith(*op, a, b)?)),
                        _ => Val::Int(None),
                    },
                    (a, b) => match (as_float(a), as_float(b)) {
                        (Some(a), Some(b)) => Val::Float(Some(float_arith(*op, a, b))),
                        _ => Val::Float(None),
                    },
                }
            }
            Gen::Neg(e) => match e.eval(row)? {
                Val::Int(Some(v)) => Val::Int(Some(v.checked_neg().ok_or(())?)),
                Val::Float(v) => Val::Float(v.map(|v| -v)),
                other => other,
            },
            Gen::Cmp(op, l, r) => {
                let (a, b) = (l.eval(row)?, r.eval(row)?);
                let ordering = match (a, b) {
                    (Val::Int(Some(a)), Val::Int(Some(b))) => Some(a.cmp(&b)),
                    (Val::Int(_), Val::Int(_)) => None,
                    (a, b) => match (as_float(a), as_float(b)) {
                        (Some(a), Some(b)) => Some(sql_float(a).total_cmp(&sql_float(b))),
                        _ => None,
                    },
                };
                Val::Bool(ordering.map(|o| match op {
                    Cmp::Eq => o.is_eq(),
                    Cmp::Ne => o.is_ne(),
                    Cmp::Lt => o.is_lt(),
                    Cmp::Le => o.is_le(),
                    Cmp::Gt => o.is_gt(),
                    Cmp::Ge => o.is_ge(),
                }))
            }
            // The right side is only evaluated (and can only fail) where the left leaves the
            // answer open.
            Gen::And(l, r) => match as_bool(l.eval(row)?) {
                Some(false) => Val::Bool(Some(false)),
                left => Val::Bool(match (left, as_bool(r.eval(row)?)) {
                    (_, Some(false)) => Some(false),
                    (Some(true), right) => right,
                    _ => None,
                }),
            },
            Gen::Or(l, r) => match as_bool(l.eval(row)?) {
                Some(true) => Val::Bool(Some(true)),
                left => Val::Bool(match (left, as_bool(r.eval(row)?)) {
                    (_, Some(true)) => Some(true),
                    (Some(false), right) => right,
                    _ => None,
                }),
            },
            Gen::Not(e) => Val::Bool(as_bool(e.eval(row)?).map(|b| !b)),
        })
    }
}

/// `(int_operand, decimal)` when a multiplication has an INT side and a decimal literal side
/// (`0.5`, or `(-0.5)`, which the compiler reads as one negative literal).
fn scaled_operands<'a>(l: &'a Gen, r: &'a Gen) -> Option<(&'a Gen, (i64, u32))> {
    match (decimal_literal(l), decimal_literal(r)) {
        (None, Some(decimal)) if l.ty() == Ty::Int => Some((l, decimal)),
        (Some(decimal), None) if r.ty() == Ty::Int => Some((r, decimal)),
        _ => None,
    }
}

fn decimal_literal(g: &Gen) -> Option<(i64, u32)> {
    match g {
        Gen::Decimal(m, s) => Some((*m, *s)),
        Gen::Neg(inner) => match inner.as_ref() {
            Gen::Decimal(m, s) => Some((-*m, *s)),
            _ => None,
        },
        _ => None,
    }
}

fn decimal_value(m: i64, s: u32) -> f64 {
    let magnitude: f64 = Gen::Decimal(m.abs(), s)
        .sql()
        .parse()
        .expect("decimal literals parse");
    if m < 0 { -magnitude } else { magnitude }
}

fn int_arith(op: Arith, a: i64, b: i64) -> Result<i64, ()> {
    match op {
        Arith::Add => a.checked_add(b).ok_or(()),
        Arith::Sub => a.checked_sub(b).ok_or(()),
        Arith::Mul => a.checked_mul(b).ok_or(()),
        Arith::Div => a.checked_div(b).ok_or(()),
        // MIN % -1 is 0, not an overflow.
        Arith::Rem if b == 0 => Err(()),
        Arith::Rem => Ok(a.wrapping_rem(b)),
    }
}

fn float_arith(op: Arith, a: f64, b: f64) -> f64 {
    match op {
        Arith::Add => a + b,
        Arith::Sub => a - b,
        Arith::Mul => a * b,
        Arith::Div => a / b,
        Arith::Rem => a % b,
    }
}

fn as_float(v: Val) -> Option<f64> {
    match v {
        Val::Int(v) => v.map(|v| v as f64),
        Val::Float(v) => v,
        Val::Bool(_) => unreachable!("not numeric"),
    }
}

fn as_bool(v: Val) -> Option<bool> {
    match v {
        Val::Bool(v) => v,
        _ => unreachable!("not a BOOL"),
    }
}

/// SQL float order: -0.0 = 0.0, NaN equal to itself and above everything.
fn sql_float(x: f64) -> f64 {
    if x.is_nan() { f64::NAN } else { x + 0.0 }
}

fn gen_expr(rng: &mut Rng, ty: Ty, depth: u32) -> Gen {
    let leaf = depth == 0 || rng.percent(25);
    match ty {
        Ty::Int if leaf => {
            if rng.percent(60) {
                Gen::Col(rng.below(2) as usize)
            } else {
                Gen::Int(rng.pick(&[0, 1, 2, 3, 7, 10, 1_000, 4_611_686_018_427_387_904]))
            }
        }
        Ty::Int => {
            if rng.percent(10) {
                Gen::Neg(Box::new(gen_expr(rng, Ty::Int, depth - 1)))
            } else {
                let op = rng.pick(&[Arith::Add, Arith::Sub, Arith::Mul, Arith::Div, Arith::Rem]);
                Gen::Arith(
                    op,
                    Box::new(gen_expr(rng, Ty::Int, depth - 1)),
                    Box::new(gen_expr(rng, Ty::Int, depth - 1)),
                )
            }
        }
        Ty::Float if leaf => {
            if rng.percent(50) {
                Gen::Col(2)
            } else {
                Gen::Decimal(rng.below(3_000) as i64, 1 + rng.below(3) as u32)
            }
        }
        Ty::Float => {
            if rng.percent(10) {
                return Gen::Neg(Box::new(gen_expr(rng, Ty::Float, depth - 1)));
            }
            let (lt, rt) = rng.pick(&[
                (Ty::Float, Ty::Float),
                (Ty::Int, Ty::Float),
                (Ty::Float, Ty::Int),
            ]);
            let op = rng.pick(&[Arith::Add, Arith::Sub, Arith::Mul, Arith::Div, Arith::Rem]);
            Gen::Arith(
                op,
                Box::new(gen_expr(rng, lt, depth - 1)),
                Box::new(gen_expr(rng, rt, depth - 1)),
            )
        }
        Ty::Bool => match rng.below(if depth == 0 { 1 } else { 4 }) {
            0 => {
                let (lt, rt) = rng.pick(&[
                    (Ty::Int, Ty::Int),
                    (Ty::Float, Ty::Float),
                    (Ty::Int, Ty::Float),
                ]);
                let op = rng.pick(&[Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge]);
                let depth = depth.saturating_sub(1);
                Gen::Cmp(
                    op,
                    Box::new(gen_expr(rng, lt, depth)),
                    Box::new(gen_expr(rng, rt, depth)),
                )
            }
            1 => Gen::And(
                Box::new(gen_expr(rng, Ty::Bool, depth - 1)),
                Box::new(gen_expr(rng, Ty::Bool, depth - 1)),
            ),
            2 => Gen::Or(
                Box::new(gen_expr(rng, Ty::Bool, depth - 1)),
                Box::new(gen_expr(rng, Ty::Bool, depth - 1)),
            ),
            _ => Gen::Not(Box::new(gen_expr(rng, Ty::Bool, depth - 1))),
        },
    }
}

fn gen_int(rng: &mut Rng) -> Option<i64> {
    match rng.below(20) {
        0..=2 => None,
        3..=12 => Some(rng.below(41) as i64 - 20),
        13 | 14 => Some(0),
        15 => Some(rng.pick(&[i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1])),
        16 => Some(rng.pick(&[1, -1])),
        _ => Some((rng.next() >> 20) as i64 * rng.pick(&[1, -1])),
    }
}

fn gen_float(rng: &mut Rng) -> Option<f64> {
    match rng.below(20) {
        0..=2 => None,
        3 => Some(rng.pick(&[-0.0, 0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY])),
        _ => Some((rng.below(161) as f64 - 80.0) / 4.0),
    }
}

fn gen_batch(rng: &mut Rng, rows: usize) -> (RecordBatch, Vec<Row>) {
    let data: Vec<Row> = (0..rows)
        .map(|_| (gen_int(rng), gen_int(rng), gen_float(rng)))
        .collect();
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
        Field::new("x", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(data.iter().map(|r| r.0).collect::<Int64Array>()),
            Arc::new(data.iter().map(|r| r.1).collect::<Int64Array>()),
            Arc::new(data.iter().map(|r| r.2).collect::<Float64Array>()),
        ],
    )
    .expect("columns match the schema");
    (batch, data)
}

fn same_float(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
        (a, b) => a.is_none() && b.is_none(),
    }
}

#[test]
fn randomized_arithmetic_comparison_and_logic_match_a_per_row_reference() {
    let mut rng = Rng(0x5EED_2024);
    let (mut failures, mut successes) = (0, 0);
    for round in 0..3_000 {
        let (batch, rows) = gen_batch(&mut rng, 1 + (round % 40));
        let ty = rng.pick(&[Ty::Int, Ty::Float, Ty::Bool]);
        let depth = 1 + rng.below(4) as u32;
        let generated = gen_expr(&mut rng, ty, depth);
        let sql = generated.sql();
        let expr = Expr::compile(&sql, batch.schema().as_ref())
            .unwrap_or_else(|e| panic!("`{sql}` should compile: {e}"));
        let expected: Result<Vec<Val>, ()> = rows.iter().map(|row| generated.eval(*row)).collect();
        let actual = expr.evaluate(&batch);
        let (expected, actual) = match (expected, actual) {
            (Err(()), Err(_)) => {
                failures += 1;
                continue;
            }
            (Err(()), Ok(actual)) => panic!("`{sql}` should fail on {rows:?}, got {actual:?}"),
            (Ok(_), Err(e)) => panic!("`{sql}` failed on {rows:?}: {e}"),
            (Ok(expected), Ok(actual)) => (expected, actual),
        };
        successes += 1;
        for (row, want) in expected.iter().enumerate() {
            let ok = match want {
                Val::Int(v) => {
                    actual.data_type() == &DataType::Int64
                        && actual.as_primitive::<Int64Type>().is_valid(row) == v.is_some()
                        && v.is_none_or(|v| actual.as_primitive::<Int64Type>().value(row) == v)
                }
                Val::Float(v) => {
                    actual.data_type() == &DataType::Float64 && {
                        let values = actual.as_primitive::<Float64Type>();
                        same_float(values.is_valid(row).then(|| values.value(row)), *v)
                    }
                }
                Val::Bool(v) => {
                    actual.data_type() == &DataType::Boolean && {
                        let values = actual.as_boolean();
                        values.is_valid(row).then(|| values.value(row)) == *v
                    }
                }
            };
            assert!(
                ok,
                "`{sql}` row {row} {:?}: expected {want:?}, got {actual:?}",
                rows[row]
            );
        }
    }
    // Both outcomes were exercised.
    assert!(
        failures > 100 && successes > 1_000,
        "{failures} failures, {successes} successes"
    );
}
