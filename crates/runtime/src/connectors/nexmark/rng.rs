//! A tiny SplitMix64 generator, seeded afresh for every event from `(seed, n)`.
//!
//! SplitMix64's output function is a bijective 64-bit mixer, so distinct event numbers start
//! from distinct, well-scattered states; each event draws only a couple of dozen numbers.

/// SplitMix64's increment (the golden ratio in 64-bit fixed point).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser (Stafford's variant 13): a bijective, well-avalanching mix of 64 bits.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A stream for one purpose, from an already mixed key (see [`mix64`]) and a number.
    #[inline]
    pub(crate) fn new(key: u64, n: u64) -> Self {
        Rng {
            state: mix64(n ^ key),
        }
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix64(self.state)
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift, without rejection: the bias is at most
    /// `bound / 2^64`). Returns 0 when `bound` is 0.
    #[inline]
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// Uniform in `0..bound` as a `usize`, for indexing.
    #[inline]
    pub(crate) fn index(&mut self, bound: usize) -> usize {
        self.below(bound as u64) as usize
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
