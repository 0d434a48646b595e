//! Assigning records to event-time windows.

use weir_state::Window;

use crate::spec::WindowSpec;

/// The most windows one record may fall into (a sliding window's size over its slide): each is
/// state and a timer per key, so `size: 1000d, slide: 1ms` would mean 86 million per record.
pub const MAX_WINDOWS_PER_RECORD: i64 = 10_000;

/// The windows of a window spec, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Windowing {
    Tumbling { size: i64 },
    Sliding { size: i64, slide: i64 },
    Session { gap: i64 },
}

impl Windowing {
    /// Checks the spec: sizes positive, a sliding window a whole number of slides.
    pub fn from_spec(spec: &WindowSpec) -> Result<Windowing, String> {
        let ms = |d: &crate::spec::HumanDuration| d.as_millis_i64();
        let w = match spec {
            WindowSpec::Tumbling { size } => Windowing::Tumbling { size: ms(size) },
            WindowSpec::Sliding { size, slide } => Windowing::Sliding {
                size: ms(size),
                slide: ms(slide),
            },
            WindowSpec::Session { gap } => Windowing::Session { gap: ms(gap) },
        };
        match w {
            Windowing::Tumbling { size } | Windowing::Sliding { size, .. } if size <= 0 => {
                Err("a window's size must be at least 1ms".into())
            }
            Windowing::Sliding { slide, .. } if slide <= 0 => {
                Err("a window's slide must be at least 1ms".into())
            }
            Windowing::Sliding { size, slide } if size % slide != 0 => Err(format!(
                "a sliding window's size must be a multiple of its slide ({size} ms is not a multiple of {slide} ms)"
            )),
            Windowing::Sliding { size, slide } if size / slide > MAX_WINDOWS_PER_RECORD => {
                Err(format!(
                    "a sliding window of {size} ms sliding by {slide} ms puts every record into \
                     {} windows; at most {MAX_WINDOWS_PER_RECORD} are allowed (slide by at least \
                     {} ms)",
                    size / slide,
                    (size + MAX_WINDOWS_PER_RECORD - 1) / MAX_WINDOWS_PER_RECORD
                ))
            }
            Windowing::Session { gap } if gap <= 0 => {
                Err("a session gap must be at least 1ms".into())
            }
            w => Ok(w),
        }
    }

    /// The windows holding time `t` (for sessions: the record's own window `[t, t + gap)`),
    /// in order of start.
    ///
    /// Window bounds saturate at the ends of time instead of wrapping: the last window before
    /// `i64::MAX` ends at `i64::MAX`, the first after `i64::MIN` starts there, so a window never
    /// ends before it starts and a sliding window's loop always ends.
    pub fn assign(&self, t: i64, out: &mut Vec<Window>) {
        out.clear();
        match *self {
            Windowing::Tumbling { size } => {
                let start = t.saturating_sub(t.rem_euclid(size));
                out.push(Window::new(start, start.saturating_add(size)));
            }
            Windowing::Sliding { size, slide } => {
                let last = t.saturating_sub(t.rem_euclid(slide));
                let first = last.saturating_sub(size - slide);
                let mut start = first;
                for _ in 0..size / slide {
                    let window = Window::new(start, start.saturating_add(size));
                    let holds = window.end > t || window.end == i64::MAX;
                    if holds && out.last() != Some(&window) {
                        out.push(window);
                    }
                    match start.checked_add(slide) {
                        Some(next) if next <= last => start = next,
                        _ => break,
                    }
                }
            }
            Windowing::Session { gap } => out.push(Window::new(t, t.saturating_add(gap))),
        }
    }

    pub fn is_session(&self) -> bool {
        matches!(self, Windowing::Session { .. })
    }

    /// Whether a window aggregate keeps these windows as slices: sliding windows covering more
    /// than one slide, without allowed lateness.
    ///
    /// A record falls into `size / slide` sliding windows, so kept whole every record updates
    /// that many accumulators (and, with two phases, crosses the exchange as that many partials).
    /// Cut into slices of one slide each (Flink's window slicing), a record updates the one
    /// slice holding it, and a window is the merge of the slices it covers, read once when it
    /// fires. Allowed lateness keeps whole windows: a late record there re-emits every window it
    /// updates, which slices would have to rebuild one by one.
    pub fn sliced(&self, lateness: i64) -> bool {
        matches!(*self, Windowing::Sliding { size, slide } if size > slide) && lateness == 0
    }

    /// The slice holding time `t`: `[t - t mod slide, + slide)` for sliding windows, the window
    /// itself for tumbling ones, `None` for sessions. Every time in a slice falls into the same
    /// windows, so the slice's windows are `assign(slice.start)`.
    pub fn slice(&self, t: i64) -> Option<Window> {
        let step = match *self {
            Windowing::Sliding { slide, .. } => slide,
            Windowing::Tumbling { size } => size,
            Windowing::Session { .. } => return None,
        };
        let start = t.saturating_sub(t.rem_euclid(step));
        Some(Window::new(start, start.saturating_add(step)))
    }

    /// The window with the latest end among those holding `slice` (the one starting with it):
    /// the slice is needed until that window fires, and a record in it is late exactly when
    /// that window is.
    pub fn last_window_of(&self, slice: &Window) -> Window {
        match *self {
            Windowing::Sliding { size, .. } | Windowing::Tumbling { size } => {
                Window::new(slice.start, slice.start.saturating_add(size))
            }
            Windowing::Session { .. } => *slice,
        }
    }

    /// The slices window `w` covers, in order of start: `size / slide` for a sliding window
    /// (fewer where time saturates), the window itself otherwise.
    pub fn slices_of(&self, w: &Window, out: &mut Vec<Window>) {
        out.clear();
        let Windowing::Sliding { slide, .. } = *self else {
            out.push(*w);
            return;
        };
        let mut start = w.start;
        while start < w.end {
            let end = start.saturating_add(slide).min(w.end);
            out.push(Window::new(start, end));
            match start.checked_add(slide) {
                Some(next) => start = next,
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumbling_windows_align_to_the_epoch_for_negative_times_too() {
        let mut out = Vec::new();
        Windowing::Tumbling { size: 10 }.assign(25, &mut out);
        assert_eq!(out, vec![Window::new(20, 30)]);
        Windowing::Tumbling { size: 10 }.assign(-1, &mut out);
        assert_eq!(out, vec![Window::new(-10, 0)]);
    }

    #[test]
    fn a_record_is_in_size_over_slide_sliding_windows() {
        let mut out = Vec::new();
        let w = Windowing::Sliding {
            size: 10_000,
            slide: 2_000,
        };
        w.assign(4_000, &mut out);
        assert_eq!(out.len(), 5);
        assert_eq!(out[0], Window::new(-4_000, 6_000));
        assert_eq!(out[4], Window::new(4_000, 14_000));
        for win in &out {
            assert!(win.start <= 4_000 && 4_000 < win.end);
        }
    }

    #[test]
    fn windows_at_the_ends_of_time_saturate_instead_of_wrapping() {
        let mut out = Vec::new();
        Windowing::Tumbling { size: 7 }.assign(i64::MAX - 1, &mut out);
        assert_eq!(out.len(), 1);
        assert!(out[0].start < i64::MAX && out[0].end == i64::MAX, "{out:?}");
        Windowing::Tumbling { size: 7 }.assign(i64::MIN, &mut out);
        assert_eq!(out.len(), 1);
        assert!(out[0].start == i64::MIN && out[0].end > i64::MIN, "{out:?}");
        for t in [i64::MAX, i64::MAX - 3, i64::MIN, i64::MIN + 2] {
            Windowing::Sliding { size: 10, slide: 2 }.assign(t, &mut out);
            assert!(!out.is_empty() && out.len() <= 5, "t = {t}: {out:?}");
            for w in &out {
                assert!(
                    w.start <= t && t < w.end || w.end == i64::MAX,
                    "t = {t}: {w:?}"
                );
                assert!(w.start < w.end, "t = {t}: {w:?}");
            }
        }
    }

    #[test]
    fn sliding_windows_agree_with_a_naive_scan_of_every_start() {
        // Every start s with s % slide == 0 and s <= t < s + size, found by brute force.
        for (size, slide) in [(10, 2), (6, 3), (5, 5), (12, 1)] {
            let w = Windowing::Sliding { size, slide };
            for t in -30..30 {
                let mut out = Vec::new();
                w.assign(t, &mut out);
                let naive: Vec<Window> = (-100..100)
                    .filter(|s: &i64| s.rem_euclid(slide) == 0 && *s <= t && t < s + size)
                    .map(|s| Window::new(s, s + size))
                    .collect();
                assert_eq!(out, naive, "size {size}, slide {slide}, t {t}");
            }
        }
    }

    #[test]
    fn a_windows_slices_hold_exactly_the_times_the_window_holds() {
        // For every t: t's slice is among the slices of each window holding t, and the slices of
        // a window partition it. Brute force over a range of times, against `assign`.
        for (size, slide) in [(10, 2), (6, 3), (12, 1), (4, 4)] {
            let w = Windowing::Sliding { size, slide };
            let mut windows = Vec::new();
            let mut slices = Vec::new();
            for t in -30..30 {
                let slice = w.slice(t).unwrap();
                assert!(slice.start <= t && t < slice.end, "slice {slice:?} of {t}");
                w.assign(t, &mut windows);
                assert_eq!(windows.last(), Some(&w.last_window_of(&slice)), "t {t}");
                let mut of_slice = Vec::new();
                w.assign(slice.start, &mut of_slice);
                assert_eq!(
                    windows, of_slice,
                    "every time of a slice is in the same windows"
                );
                for win in &windows {
                    w.slices_of(win, &mut slices);
                    assert_eq!(slices.len() as i64, size / slide);
                    assert!(slices.contains(&slice), "{win:?} lacks {slice:?}");
                    assert_eq!(slices[0].start, win.start);
                    assert_eq!(slices.last().map(|s| s.end), Some(win.end));
                    assert!(slices.windows(2).all(|p| p[0].end == p[1].start));
                }
            }
        }
        assert!(Windowing::Sliding { size: 10, slide: 2 }.sliced(0));
        assert!(!Windowing::Sliding { size: 10, slide: 2 }.sliced(5));
        assert!(!Windowing::Sliding { size: 4, slide: 4 }.sliced(0));
        assert!(!Windowing::Tumbling { size: 4 }.sliced(0));
    }

    #[test]
    fn slices_at_the_ends_of_time_stay_inside_their_window() {
        let w = Windowing::Sliding { size: 10, slide: 2 };
        let mut out = Vec::new();
        for t in [i64::MAX, i64::MAX - 3, i64::MIN, i64::MIN + 2] {
            let slice = w.slice(t).unwrap();
            assert!(slice.start <= slice.end, "{slice:?}");
            let last = w.last_window_of(&slice);
            w.slices_of(&last, &mut out);
            assert!(!out.is_empty() && out.len() <= 5, "t = {t}: {out:?}");
            assert!(
                out.iter()
                    .all(|s| s.start >= last.start && s.end <= last.end)
            );
        }
    }

    #[test]
    fn too_many_windows_per_record_are_refused() {
        use crate::spec::HumanDuration;
        let spec = WindowSpec::Sliding {
            size: HumanDuration::from_millis(1000 * 86_400_000),
            slide: HumanDuration::from_millis(1),
        };
        let message = Windowing::from_spec(&spec).unwrap_err();
        assert!(message.contains("at most 10000"), "{message}");
    }

    #[test]
    fn specs_are_checked() {
        use crate::spec::HumanDuration;
        let d = |ms| HumanDuration::from_millis(ms);
        let bad = WindowSpec::Sliding {
            size: d(10_000),
            slide: d(3_000),
        };
        assert!(
            Windowing::from_spec(&bad)
                .unwrap_err()
                .contains("multiple of its slide")
        );
        assert!(Windowing::from_spec(&WindowSpec::Tumbling { size: d(0) }).is_err());
    }
}
