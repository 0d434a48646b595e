//! `top-n`: the first rows per key by an order, emitted when the watermark reaches a time, or
//! kept up to date as an updating stream.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::TransformNode;

#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TopNSpec {
    /// A `key-by` node.
    pub from: String,
    /// Sort expressions, each optionally followed by `ASC` or `DESC` (`price DESC`).
    #[schemars(length(min = 1))]
    pub order_by: Vec<String>,
    /// How many rows per key (and time, with `fire-at`).
    #[serde(default = "default_one")]
    #[schemars(range(min = 1))]
    pub n: u32,
    /// Also keep rows tied with the `n`-th (so `n: 1` keeps every row equal to the best).
    #[serde(default)]
    pub with_ties: bool,
    /// A TIMESTAMP expression: rows are grouped per key and this time, and emitted in rank order
    /// once the watermark reaches it (an append-only output; the input must be append-only).
    /// Without it, a running top-n: each key's first rows are kept for good and every change
    /// to them is emitted as an updating stream (`+I` for a row that enters, `-D` for one that
    /// leaves; with `n: 1` and no ties, `-U`/`+U` when the row is replaced), over an
    /// append-only or an updating input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_at: Option<String>,
    /// Input columns to emit, in order (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub columns: Option<Vec<String>>,
    /// A column to add after the emitted ones holding each row's rank (a BIGINT from 1):
    /// its position, or with `with-ties` one more than the number of rows ranked strictly
    /// before it (SQL's `ROW_NUMBER()` and `RANK()`). A running top-n then emits every row
    /// whose rank changes: without ties as an update of its rank's row (`-U`/`+U`, keyed by
    /// the key and the rank), with ties as `-D` and `+I`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_column: Option<String>,
    /// Of rows equal in the order, which ranks first: `earliest` (the first to arrive, as
    /// SQL's `ROW_NUMBER()` numbers them) or `latest` (the last to arrive: a deduplication
    /// that keeps each key's last row, as Flink's does for `ORDER BY` a time `DESC`).
    #[serde(default, skip_serializing_if = "TieBreak::is_earliest")]
    pub tie_break: TieBreak,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub parallelism: Option<u32>,
}

impl TransformNode for TopNSpec {
    fn inputs(&self) -> Vec<(String, &str)> {
        vec![("from".into(), self.from.as_str())]
    }

    fn parallelism(&self) -> Option<u32> {
        self.parallelism
    }
}

/// Which of rows equal in the order ranks first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TieBreak {
    /// The first to arrive.
    #[default]
    Earliest,
    /// The last to arrive.
    Latest,
}

impl TieBreak {
    fn is_earliest(&self) -> bool {
        *self == TieBreak::Earliest
    }
}

fn default_one() -> u32 {
    1
}
