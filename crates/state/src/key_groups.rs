//! Key groups: the unit in which keyed state is partitioned, stored and rescaled.
//!
//! The mapping is Apache Flink's: a key's group is its hash modulo the number of groups, and a
//! subtask of an operator with parallelism `p` owns the contiguous range of groups
//! `[ceil(i * G / p), ceil((i + 1) * G / p))`. Contiguous ranges are what let a restore at a
//! different parallelism read each new subtask's state as a few ranges instead of filtering
//! every key. The hash itself must never change between versions: checkpoints depend on it.

/// The key group of a key whose 64-bit hash is `hash`.
#[inline]
pub fn key_group_for_hash(hash: u64, key_groups: u32) -> u32 {
    debug_assert!(key_groups > 0);
    // Mix the high bits in: the low bits of some hashes (small integers) are poorly spread.
    let mixed = hash ^ (hash >> 32);
    (mixed % u64::from(key_groups)) as u32
}

/// The subtask (of `parallelism`) that owns `key_group`.
#[inline]
pub fn subtask_for_key_group(key_group: u32, key_groups: u32, parallelism: usize) -> usize {
    debug_assert!(key_group < key_groups);
    (u64::from(key_group) * parallelism as u64 / u64::from(key_groups)) as usize
}

/// A contiguous, half-open range of key groups `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroupRange {
    pub start: u32,
    pub end: u32,
}

impl KeyGroupRange {
    /// The groups owned by `subtask` of `parallelism`: exactly those for which
    /// [`subtask_for_key_group`] returns `subtask`.
    pub fn of_subtask(subtask: usize, key_groups: u32, parallelism: usize) -> Self {
        let g = u64::from(key_groups);
        let p = parallelism as u64;
        let i = subtask as u64;
        let start = (i * g).div_ceil(p);
        let end = ((i + 1) * g).div_ceil(p);
        Self {
            start: start as u32,
            end: end as u32,
        }
    }

    pub fn contains(&self, key_group: u32) -> bool {
        self.start <= key_group && key_group < self.end
    }

    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start >= self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_belongs_to_exactly_the_subtask_whose_range_holds_it() {
        for key_groups in [1u32, 7, 128, 1000] {
            for parallelism in 1..=9usize {
                let mut covered = 0;
                for s in 0..parallelism {
                    let r = KeyGroupRange::of_subtask(s, key_groups, parallelism);
                    covered += r.len();
                    for g in r.start..r.end {
                        assert_eq!(subtask_for_key_group(g, key_groups, parallelism), s);
                    }
                }
                assert_eq!(covered, key_groups, "ranges partition the groups");
            }
        }
    }

    #[test]
    fn groups_stay_within_bounds() {
        for h in [0u64, 1, u64::MAX, 0x8000_0000_0000_0000, 12345] {
            assert!(key_group_for_hash(h, 128) < 128);
        }
    }
}
