//! Deterministic mutations of seed inputs, for the smoke test: the same seed number gives the
//! same inputs on every machine, so a failure reproduces from its number alone.
//!
//! Each mutant is one seed changed by one to four stacked edits, as libFuzzer's and AFL's
//! "havoc" stages stack theirs: bit flips, bytes set to values at the edges of their types,
//! small additions, deletions, truncations, repeated chunks, splices with another seed,
//! inserted fragments of the target's syntax, and numbers replaced by extreme ones.

/// SplitMix64: a small, well-mixed generator (no dependency for a test's dice).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Byte values at the edges of what parsers expect.
const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'\n', b'\r', b'\t', b' ', b'"', b'\'', b'\\', b'-', b'+', b'.', b'0',
    b'9', b'e', b'{', b'}', b'[', b']', b':', b',', b'&', b'*', b'!', b'#', b'%', b'|', b'>',
];

/// Numbers that overflow, underflow or divide.
const EXTREME_NUMBERS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"18446744073709551616",
    b"4294967296",
    b"1e309",
    b"-0.0",
    b"NaN",
];

/// Mutant `index` of `seeds` (not empty): deterministic in `seed`, `index` and the inputs, at
/// most `max_len` bytes (libFuzzer's `-max_len` in `scripts/fuzz.sh`).
pub fn mutant(
    seeds: &[Vec<u8>],
    tokens: &[&[u8]],
    seed: u64,
    index: u64,
    max_len: usize,
) -> Vec<u8> {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xa076_1d64_78bd_642f));
    let mut data = rng.pick(seeds).clone();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        edit(&mut data, seeds, tokens, &mut rng);
        data.truncate(max_len);
    }
    data
}

/// One edit of `data`.
fn edit(data: &mut Vec<u8>, seeds: &[Vec<u8>], tokens: &[&[u8]], rng: &mut Rng) {
    let len = data.len();
    // An index into `data`, or its end.
    let at = |rng: &mut Rng| rng.below(len + 1);
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(INTERESTING);
        }
        2 if len > 0 => {
            let i = rng.below(len);
            let delta = 1 + rng.below(16) as u8;
            data[i] = if rng.below(2) == 0 {
                data[i].wrapping_add(delta)
            } else {
                data[i].wrapping_sub(delta)
            };
        }
        3 if len > 0 => {
            // Delete a range, mostly short.
            let from = rng.below(len);
            let most = if rng.below(4) == 0 { len } else { 16 };
            let n = 1 + rng.below((len - from).min(most));
            data.drain(from..from + n);
        }
        4 => {
            let keep = at(rng);
            data.truncate(keep);
        }
        5 if len > 0 => {
            // Repeat a chunk: deep nesting, long chains, many keys.
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(64));
            let chunk = data[from..from + n].to_vec();
            let most = if rng.below(4) == 0 { 256 } else { 8 };
            let times = 1 + rng.below(most);
            let to = at(rng);
            let repeated: Vec<u8> = chunk.iter().copied().cycle().take(n * times).collect();
            data.splice(to..to, repeated);
        }
        6 => {
            // Splice: this input's head, another seed's tail.
            let other = rng.pick(seeds);
            let cut = at(rng);
            let from = rng.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        7 if !tokens.is_empty() => {
            let token = *rng.pick(tokens);
            let to = at(rng);
            data.splice(to..to, token.iter().copied());
        }
        8 => {
            // Replace the number at (or after) a random place by an extreme one.
            let start = at(rng);
            match data[start..].iter().position(u8::is_ascii_digit) {
                Some(offset) => {
                    let from = start + offset;
                    let end = data[from..]
                        .iter()
                        .position(|b| !b.is_ascii_digit())
                        .map_or(data.len(), |n| from + n);
                    let number = *rng.pick(EXTREME_NUMBERS);
                    data.splice(from..end, number.iter().copied());
                }
                None => {
                    let number: &&[u8] = rng.pick(EXTREME_NUMBERS);
                    data.extend_from_slice(number);
                }
            }
        }
        _ => {
            // Insert a random byte.
            let to = at(rng);
            let byte = rng.next_u64() as u8;
            data.insert(to, byte);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutants_are_deterministic_bounded_and_varied() {
        let seeds = vec![
            b"name: job\nparallelism: 2\n".to_vec(),
            b"{\"i\": 1}".to_vec(),
        ];
        let tokens: &[&[u8]] = &[b"&a ", b"*a"];
        let a: Vec<Vec<u8>> = (0..500).map(|i| mutant(&seeds, tokens, 7, i, 64)).collect();
        let b: Vec<Vec<u8>> = (0..500).map(|i| mutant(&seeds, tokens, 7, i, 64)).collect();
        assert_eq!(a, b, "the same seed gives the same mutants");
        assert!(a.iter().all(|m| m.len() <= 64));
        let distinct: std::collections::BTreeSet<&Vec<u8>> = a.iter().collect();
        assert!(distinct.len() > 400, "only {} distinct", distinct.len());
        let unchanged = a.iter().filter(|m| seeds.contains(m)).count();
        assert!(unchanged < 25, "{unchanged} mutants equal a seed");
        let other: Vec<Vec<u8>> = (0..500).map(|i| mutant(&seeds, tokens, 8, i, 64)).collect();
        assert_ne!(a, other, "another seed, other mutants");
    }
}
