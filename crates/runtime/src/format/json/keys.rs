//! A small precompiled key → index table for the declared fields of one JSON object.
//!
//! Keys are hashed from a few sampled bytes (length, first, second, middle and last byte) with a
//! multiplier chosen at build time so that, in the common case, every declared key lands in its
//! own bucket: a lookup is then one multiply, one bucket read and one slice comparison, and an
//! undeclared key usually stops at the next empty bucket. Should sampling not tell two declared
//! keys apart, the table hashes whole keys instead; collisions that remain are resolved by
//! linear probing, so lookups are always correct.

use weir_state::keys::short_eq;

/// Maps the declared keys of an object to their index in declaration order.
#[derive(Debug, Clone)]
pub(crate) struct KeyTable {
    /// The declared keys; a key's index is its position here.
    keys: Box<[Box<[u8]>]>,
    /// `index + 1` of the key in each bucket, 0 for an empty bucket. At most half full, so
    /// probing always reaches an empty bucket.
    buckets: Box<[u32]>,
    /// Odd multiplier of the multiplicative hash, picked so declared keys rarely collide.
    multiplier: u64,
    /// `64 - log2(buckets.len())`: the hash is the top bits of the product.
    shift: u32,
    /// Hash whole keys because sampled bytes could not tell two declared keys apart.
    whole: bool,
}

/// How many multipliers to try per table size before settling for the fewest collisions.
const ATTEMPTS: usize = 32;

impl KeyTable {
    /// Builds the table. Keys must be distinct (they come from an `IndexMap`).
    pub(crate) fn new<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let keys: Box<[Box<[u8]>]> = keys.into_iter().map(|k| k.as_bytes().into()).collect();
        let mut sampled: Vec<u64> = keys.iter().map(|k| sample(k)).collect();
        sampled.sort_unstable();
        let whole = sampled.windows(2).any(|w| w[0] == w[1]);

        let min_bits = bits_for(keys.len() * 2);
        let mut rng = 0x9E37_79B9_7F4A_7C15_u64;
        let mut best: Option<(usize, u64, u32)> = None;
        'search: for bits in min_bits..=min_bits + 3 {
            for _ in 0..ATTEMPTS {
                let multiplier = splitmix(&mut rng) | 1;
                let collisions = count_collisions(&keys, multiplier, bits, whole);
                if best.is_none_or(|(c, _, _)| collisions < c) {
                    best = Some((collisions, multiplier, bits));
                }
                if collisions == 0 {
                    break 'search;
                }
            }
        }
        let (_, multiplier, bits) = best.unwrap_or((0, 1, min_bits));
        let mut table = KeyTable {
            buckets: vec![0; 1 << bits].into_boxed_slice(),
            keys,
            multiplier,
            shift: 64 - bits,
            whole,
        };
        let mask = table.buckets.len() - 1;
        for index in 0..table.keys.len() {
            let mut bucket = table.bucket(&table.keys[index]);
            while table.buckets[bucket] != 0 {
                bucket = (bucket + 1) & mask;
            }
            table.buckets[bucket] = index as u32 + 1;
        }
        table
    }

    /// The index of `key` among the declared keys, if it is one.
    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<usize> {
        let mask = self.buckets.len() - 1;
        let mut bucket = self.bucket(key);
        loop {
            let entry = self.buckets[bucket] as usize;
            let index = entry.checked_sub(1)?;
            if short_eq(&self.keys[index], key) {
                return Some(index);
            }
            bucket = (bucket + 1) & mask;
        }
    }

    /// As [`KeyTable::get`], comparing with the key at `expected` first: objects of one file
    /// mostly list their keys in one order, so a decoder that expects the key after the last
    /// one it found skips the hash most of the time.
    #[inline]
    pub(crate) fn get_expecting(&self, key: &[u8], expected: usize) -> Option<usize> {
        match self.keys.get(expected) {
            Some(candidate) if short_eq(candidate, key) => Some(expected),
            _ => self.get(key),
        }
    }

    #[inline]
    fn bucket(&self, key: &[u8]) -> usize {
        let h = if self.whole { whole(key) } else { sample(key) };
        (h.wrapping_mul(self.multiplier) >> self.shift) as usize
    }
}

/// log2 of the smallest power of two ≥ `n`, at least 1 (so `shift` stays below 64).
fn bits_for(n: usize) -> u32 {
    n.next_power_of_two().trailing_zeros().max(1)
}

/// Length and four sampled bytes packed into one word.
#[inline]
fn sample(key: &[u8]) -> u64 {
    match key {
        [] => 0,
        [first, ..] => {
            let n = key.len();
            let second = key.get(1).copied().unwrap_or(0);
            (n as u64)
                | (u64::from(*first) << 16)
                | (u64::from(second) << 24)
                | (u64::from(key[n / 2]) << 32)
                | (u64::from(key[n - 1]) << 40)
        }
    }
}

/// FNV-1a over the whole key.
fn whole(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn count_collisions(keys: &[Box<[u8]>], multiplier: u64, bits: u32, whole_keys: bool) -> usize {
    let mut used = vec![false; 1 << bits];
    let mut collisions = 0;
    for key in keys {
        let h = if whole_keys { whole(key) } else { sample(key) };
        let bucket = (h.wrapping_mul(multiplier) >> (64 - bits)) as usize;
        if std::mem::replace(&mut used[bucket], true) {
            collisions += 1;
        }
    }
    collisions
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_declared_key_and_no_other() {
        let declared = [
            "auction", "bidder", "price", "channel", "url", "dateTime", "extra", "", "a", "ab",
        ];
        let table = KeyTable::new(declared);
        for (i, k) in declared.iter().enumerate() {
            assert_eq!(table.get(k.as_bytes()), Some(i), "{k}");
        }
        for k in [
            "type", "auctio", "auctionx", "b", "bidded", "Price", "dateTim",
        ] {
            assert_eq!(table.get(k.as_bytes()), None, "{k}");
        }
    }

    #[test]
    fn keys_that_sampling_cannot_separate_still_resolve() {
        // Same length, first, second, middle and last byte.
        let declared = ["abXcdYe", "abZcdWe", "abQcdRe"];
        let table = KeyTable::new(declared);
        assert!(table.whole);
        for (i, k) in declared.iter().enumerate() {
            assert_eq!(table.get(k.as_bytes()), Some(i));
        }
        assert_eq!(table.get(b"abXcdWe"), None);
    }

    #[test]
    fn many_keys_resolve() {
        let declared: Vec<String> = (0..500).map(|i| format!("field_{i}")).collect();
        let table = KeyTable::new(declared.iter().map(String::as_str));
        for (i, k) in declared.iter().enumerate() {
            assert_eq!(table.get(k.as_bytes()), Some(i));
        }
        assert_eq!(table.get(b"field_500"), None);
    }

    #[test]
    fn an_expected_key_is_confirmed_and_a_wrong_guess_still_resolves() {
        let declared = ["auction", "bidder", "price"];
        let table = KeyTable::new(declared);
        for (i, k) in declared.iter().enumerate() {
            for expected in 0..5 {
                assert_eq!(table.get_expecting(k.as_bytes(), expected), Some(i), "{k}");
            }
        }
        assert_eq!(table.get_expecting(b"bidde", 1), None);
        assert_eq!(table.get_expecting(b"type", 0), None);
    }

    #[test]
    fn empty_table_finds_nothing() {
        let table = KeyTable::new([]);
        assert_eq!(table.get(b"x"), None);
        assert_eq!(table.get(b""), None);
    }
}
