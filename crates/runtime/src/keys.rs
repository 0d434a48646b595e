//! `key-by`: key expressions, and the stable key hash that decides a record's key group.
//!
//! A `key-by` node is not a task: the planner turns it into the hash exchange of its output
//! edges. The sending subtask evaluates the keys, hashes them into key groups and routes each row
//! to the subtask that owns its group; a keyed operator downstream evaluates the same
//! [`KeySelector`] to address its state.
//!
//! The hash is part of weir's on-disk format (key groups decide where state lives), so it is
//! spelled out here rather than borrowed from a hasher whose output may change between
//! versions: per value a fixed mix (xxh3 for strings), combined across key columns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use weir_state::key_groups::key_group_for_hash;

use crate::api::OperatorError;
use crate::expr::Expr;

/// Compiled key expressions of a keyed stream.
#[derive(Debug)]
pub struct KeySelector {
    keys: Vec<Expr>,
    names: Vec<String>,
    key_groups: u32,
}

impl KeySelector {
    pub fn new(keys: Vec<Expr>, names: Vec<String>, key_groups: u32) -> Self {
        Self {
            keys,
            names,
            key_groups,
        }
    }

    /// Output names of the key columns (for operators that emit them).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn exprs(&self) -> &[Expr] {
        &self.keys
    }

    pub fn key_groups(&self) -> u32 {
        self.key_groups
    }

    /// The key columns of `batch`.
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, OperatorError> {
        self.keys
            .iter()
            .map(|k| k.evaluate(batch).map_err(OperatorError::from))
            .collect()
    }

    /// The key group of every row of `batch`, into `groups` (cleared first).
    pub fn key_groups_of(
        &self,
        batch: &RecordBatch,
        hashes: &mut Vec<u64>,
        groups: &mut Vec<u32>,
    ) -> Result<(), OperatorError> {
        let columns = self.evaluate(batch)?;
        hash_columns(&columns, batch.num_rows(), hashes)?;
        groups.clear();
        groups.extend(
            hashes
                .iter()
                .map(|h| key_group_for_hash(*h, self.key_groups)),
        );
        Ok(())
    }
}

const SEED: u64 = 0x243f_6a88_85a3_08d3;
const NULL_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// MurmurHash3's 64-bit finaliser: a bijective mix with full avalanche.
#[inline]
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[inline]
fn combine(h: u64, v: u64) -> u64 {
    fmix64(h.rotate_left(27) ^ v)
}

/// Hashes the rows of `columns` (all of length `rows`) into `out`. Equal keys hash equally
/// whatever the batch they arrive in; `-0.0` equals `0.0` and all NaNs are one key.
pub fn hash_columns(
    columns: &[ArrayRef],
    rows: usize,
    out: &mut Vec<u64>,
) -> Result<(), OperatorError> {
    out.clear();
    out.resize(rows, SEED);
    for col in columns {
        match col.data_type() {
            DataType::Int64 => {
                mix_values(out, col.as_primitive::<Int64Type>(), |v| fmix64(v as u64))
            }
            DataType::Timestamp(_, _) => {
                mix_values(out, col.as_primitive::<TimestampMillisecondType>(), |v| {
                    fmix64(v as u64)
                })
            }
            DataType::Float64 => mix_values(out, col.as_primitive::<Float64Type>(), |v| {
                let v = if v == 0.0 { 0.0 } else { v };
                let bits = if v.is_nan() {
                    f64::NAN.to_bits()
                } else {
                    v.to_bits()
                };
                fmix64(bits)
            }),
            DataType::Utf8 => {
                let a = col.as_string::<i32>();
                for (i, h) in out.iter_mut().enumerate() {
                    let v = if a.is_null(i) {
                        NULL_HASH
                    } else {
                        xxhash_rust::xxh3::xxh3_64(a.value(i).as_bytes())
                    };
                    *h = combine(*h, v);
                }
            }
            DataType::Boolean => {
                let a = col.as_boolean();
                for (i, h) in out.iter_mut().enumerate() {
                    let v = if a.is_null(i) {
                        NULL_HASH
                    } else {
                        fmix64(u64::from(a.value(i)) + 1)
                    };
                    *h = combine(*h, v);
                }
            }
            DataType::Null => {
                for h in out.iter_mut() {
                    *h = combine(*h, NULL_HASH);
                }
            }
            other => {
                return Err(OperatorError::Internal(format!(
                    "cannot hash keys of type {other}"
                )));
            }
        }
    }
    Ok(())
}

fn mix_values<T: arrow_array::ArrowPrimitiveType>(
    out: &mut [u64],
    a: &arrow_array::PrimitiveArray<T>,
    f: impl Fn(T::Native) -> u64,
) {
    let values = a.values();
    if a.null_count() == 0 {
        for (h, v) in out.iter_mut().zip(values.iter()) {
            *h = combine(*h, f(*v));
        }
    } else {
        for (i, (h, v)) in out.iter_mut().zip(values.iter()).enumerate() {
            let x = if a.is_null(i) { NULL_HASH } else { f(*v) };
            *h = combine(*h, x);
        }
    }
}

/// Shared handle to a key selector.
pub type KeySelectorRef = Arc<KeySelector>;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array, StringArray};

    #[test]
    fn equal_keys_hash_equally_across_batches() {
        let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), Some(2), None, Some(1)]));
        let s: ArrayRef = Arc::new(StringArray::from(vec![
            Some("x"),
            Some("y"),
            None,
            Some("x"),
        ]));
        let mut h = Vec::new();
        hash_columns(&[a, s], 4, &mut h).unwrap();
        assert_eq!(h[0], h[3]);
        assert_ne!(h[0], h[1]);
        assert_ne!(h[1], h[2]);

        let b: ArrayRef = Arc::new(Int64Array::from(vec![Some(1)]));
        let t: ArrayRef = Arc::new(StringArray::from(vec![Some("x")]));
        let mut h2 = Vec::new();
        hash_columns(&[b, t], 1, &mut h2).unwrap();
        assert_eq!(h2[0], h[0], "the same key in another batch");
    }

    #[test]
    fn negative_zero_and_nans_are_one_key_each() {
        let f: ArrayRef = Arc::new(Float64Array::from(vec![0.0, -0.0, f64::NAN, -f64::NAN]));
        let mut h = Vec::new();
        hash_columns(&[f], 4, &mut h).unwrap();
        assert_eq!(h[0], h[1]);
        assert_eq!(h[2], h[3]);
    }

    #[test]
    fn the_hash_is_stable_across_versions() {
        // Key groups decide where state lives in checkpoints: this value must never change.
        let a: ArrayRef = Arc::new(Int64Array::from(vec![1000]));
        let mut h = Vec::new();
        hash_columns(&[a], 1, &mut h).unwrap();
        assert_eq!(h[0], 4_920_197_302_219_213_060);
        assert_eq!(key_group_for_hash(h[0], 128), 100);
    }
}
