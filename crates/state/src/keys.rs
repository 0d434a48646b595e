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
