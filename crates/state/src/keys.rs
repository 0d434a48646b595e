//! How a record's key and namespace address state.

use crate::codec::{get_ordered_i64, ordered_i64};

/// A record's key as state sees it: its key group and its encoded bytes (the runtime encodes
/// key columns with an order-preserving row format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyRef<'a> {
    pub group: u32,
    pub bytes: &'a [u8],
}

impl<'a> KeyRef<'a> {
    pub fn new(group: u32, bytes: &'a [u8]) -> Self {
        Self { group, bytes }
    }
}

/// `a == b` without a call to `memcmp` for short slices: slice equality calls it whatever
/// the length, and at the lengths keys mostly have (an encoded integer key is 9 bytes, a
/// window namespace 16, a JSON object's keys a few) that call is most of the comparison's cost
/// (q6's join: 8% of its samples in the heap table's lookups). Up to 16 bytes, two overlapping
/// loads from each end cover every byte. Used by the heap table's lookups and by the JSON
/// decoder's key table.
#[inline]
pub fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=8 => ends::<4>(a) == ends::<4>(b),
        9..=16 => ends::<8>(a) == ends::<8>(b),
        _ => a == b,
    }
}

/// The first and the last `N` bytes (they overlap when `len < 2 * N`); `None` if `len < N`.
#[inline]
fn ends<const N: usize>(s: &[u8]) -> Option<(&[u8; N], &[u8; N])> {
    Some((s.first_chunk::<N>()?, s.last_chunk::<N>()?))
}

/// The empty namespace, for state that is not scoped (say, per key only).
pub const NO_NAMESPACE: &[u8] = &[];

/// A time window `[start, end)` in epoch milliseconds, the usual namespace of windowed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    pub fn new(start: i64, end: i64) -> Self {
        Self { start, end }
    }

    /// The last instant inside the window: its results are complete once the watermark
    /// reaches it.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Windows that overlap or touch belong to one session.
    pub fn touches(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    pub fn cover(&self, other: &Window) -> Window {
        Window::new(self.start.min(other.start), self.end.max(other.end))
    }

    /// 16 bytes, ordered like the windows (by start, then end).
    pub fn to_namespace(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..8].copy_from_slice(&ordered_i64(self.start));
        a[8..].copy_from_slice(&ordered_i64(self.end));
        a
    }

    pub fn from_namespace(mut ns: &[u8]) -> Result<Window, String> {
        let start = get_ordered_i64(&mut ns)?;
        let end = get_ordered_i64(&mut ns)?;
        Ok(Window::new(start, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to 40 (each branch and both ends of each), equal and with one byte
    /// changed at every place, against slice equality; and slices of different lengths.
    #[test]
    fn short_eq_agrees_with_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            let copy = a.to_vec();
            assert!(short_eq(a, &copy), "equal, {n} bytes");
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 1 << (at % 8);
                assert_eq!(
                    short_eq(a, &b),
                    a == b.as_slice(),
                    "{n} bytes, byte {at} changed"
                );
                assert!(!short_eq(a, &b));
            }
            if n > 0 {
                assert!(!short_eq(a, &base[..n - 1]), "{n} bytes against {}", n - 1);
            }
        }
    }

    /// The JSON decoder's case (it compares object keys with it): words of letters.
    #[test]
    fn short_key_comparison_checks_every_byte() {
        let words: Vec<Vec<u8>> = (0..=20)
            .map(|n| (0..n).map(|i| b'a' + i as u8).collect())
            .collect();
        for word in &words {
            assert!(short_eq(word, &word.clone()));
            for i in 0..word.len() {
                let mut other = word.clone();
                other[i] = b'Z';
                assert!(!short_eq(word, &other), "{word:?} differs at {i}");
            }
        }
    }

    #[test]
    fn windows_round_trip_through_namespaces_and_sort_by_start() {
        let a = Window::new(-10_000, 0);
        let b = Window::new(2_000, 12_000);
        assert_eq!(Window::from_namespace(&a.to_namespace()).unwrap(), a);
        assert!(a.to_namespace() < b.to_namespace());
    }

    #[test]
    fn touching_windows_merge_into_one_session() {
        let a = Window::new(0, 10_000);
        assert!(
            a.touches(&Window::new(10_000, 20_000)),
            "exactly the gap apart"
        );
        assert!(!a.touches(&Window::new(10_001, 20_001)));
        assert_eq!(a.cover(&Window::new(5, 20_000)), Window::new(0, 20_000));
    }
}
