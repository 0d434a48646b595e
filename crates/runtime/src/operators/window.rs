//! Assigning records to event-time windows.

use weir_state::Window;

use crate::spec::WindowSpec;

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
            Windowing::Session { gap } if gap <= 0 => {
                Err("a session gap must be at least 1ms".into())
            }
            w => Ok(w),
        }
    }

    /// The windows holding time `t` (for sessions: the record's own window `[t, t + gap)`),
    /// in order of start.
    pub fn assign(&self, t: i64, out: &mut Vec<Window>) {
        out.clear();
        match *self {
            Windowing::Tumbling { size } => {
                let start = t - t.rem_euclid(size);
                out.push(Window::new(start, start + size));
            }
            Windowing::Sliding { size, slide } => {
                let last = t - t.rem_euclid(slide);
                let mut start = last - size + slide;
                while start <= last {
                    out.push(Window::new(start, start + size));
                    start += slide;
                }
            }
            Windowing::Session { gap } => out.push(Window::new(t, t.saturating_add(gap))),
        }
    }

    pub fn is_session(&self) -> bool {
        matches!(self, Windowing::Session { .. })
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
