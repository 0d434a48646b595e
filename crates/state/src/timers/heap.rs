//! The heap backend's timers: a `BTreeMap` per domain, ordered as timers fire, and the holds
//! in an ordered multiset beside them.

use std::collections::BTreeMap;

use super::{TimeDomain, Timer};
use crate::keys::KeyRef;

/// Timers of one domain.
#[derive(Debug, Default)]
struct Queue {
    /// Timer → its hold, if any.
    timers: BTreeMap<Timer, Option<i64>>,
}

/// The timers of one operator subtask in memory (the heap backend).
#[derive(Debug, Default)]
pub struct HeapTimers {
    event: Queue,
    processing: Queue,
    /// Hold time → number of pending timers holding it (an ordered multiset).
    holds: BTreeMap<i64, u64>,
}

impl HeapTimers {
    pub fn new() -> Self {
        Self::default()
    }

    fn queue(&mut self, domain: TimeDomain) -> &mut Queue {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    fn add_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold {
            *self.holds.entry(h).or_insert(0) += 1;
        }
    }

    fn release_hold(&mut self, hold: Option<i64>) {
        if let Some(h) = hold
            && let Some(n) = self.holds.get_mut(&h)
        {
            *n -= 1;
            if *n == 0 {
                self.holds.remove(&h);
            }
        }
    }

    /// Sets a timer. Setting the same (domain, time, key, namespace) again replaces its hold;
    /// it still fires once.
    pub fn set(
        &mut self,
        domain: TimeDomain,
        time: i64,
        key: KeyRef<'_>,
        namespace: &[u8],
        hold: Option<i64>,
    ) {
        let timer = Timer {
            time,
            key_group: key.group,
            key: key.bytes.into(),
            namespace: namespace.into(),
        };
        let previous = self.queue(domain).timers.insert(timer, hold);
        if let Some(previous) = previous {
            self.release_hold(previous);
        }
        self.add_hold(hold);
    }

    /// Deletes a timer; returns whether it was pending.
    pub fn delete(
        &mut self,
        domain: TimeDomain,
        time: i64,
        key: KeyRef<'_>,
        namespace: &[u8],
    ) -> bool {
        let timer = Timer {
            time,
            key_group: key.group,
            key: key.bytes.into(),
            namespace: namespace.into(),
        };
        match self.queue(domain).timers.remove(&timer) {
            Some(hold) => {
                self.release_hold(hold);
                true
            }
            None => false,
        }
    }

    /// Removes and returns the earliest timer with time ≤ `up_to`, if any.
    pub fn pop_due(&mut self, domain: TimeDomain, up_to: i64) -> Option<Timer> {
        let queue = self.queue(domain);
        let entry = queue.timers.first_entry()?;
        if entry.key().time > up_to {
            return None;
        }
        let (timer, hold) = entry.remove_entry();
        self.release_hold(hold);
        Some(timer)
    }

    /// The earliest pending time in `domain`.
    pub fn next_time(&self, domain: TimeDomain) -> Option<i64> {
        let queue = match domain {
            TimeDomain::EventTime => &self.event,
            TimeDomain::ProcessingTime => &self.processing,
        };
        queue.timers.first_key_value().map(|(t, _)| t.time)
    }

    /// The least hold of all pending timers.
    pub fn min_hold(&self) -> Option<i64> {
        self.holds.first_key_value().map(|(h, _)| *h)
    }

    /// The operator's output watermark for an input watermark: held back by pending holds.
    pub fn output_watermark(&self, input: i64) -> i64 {
        self.min_hold()
            .map_or(input, |h| input.min(h.saturating_sub(1)))
    }

    pub fn len(&self, domain: TimeDomain) -> usize {
        match domain {
            TimeDomain::EventTime => self.event.timers.len(),
            TimeDomain::ProcessingTime => self.processing.timers.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.event.timers.is_empty() && self.processing.timers.is_empty()
    }

    /// Every pending timer with its domain and hold (for snapshots).
    pub fn iter(&self) -> impl Iterator<Item = (TimeDomain, &Timer, Option<i64>)> {
        self.event
            .timers
            .iter()
            .map(|(t, h)| (TimeDomain::EventTime, t, *h))
            .chain(
                self.processing
                    .timers
                    .iter()
                    .map(|(t, h)| (TimeDomain::ProcessingTime, t, *h)),
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift, so the model test needs no extra crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// (time, key group, key, namespace, hold).
    type ModelTimer = (i64, u32, Vec<u8>, Vec<u8>, Option<i64>);

    /// The naive model: a list of timers, sorted before each firing.
    #[derive(Default)]
    struct Model {
        timers: Vec<ModelTimer>,
    }

    impl Model {
        fn position(&self, t: i64, g: u32, k: &[u8], ns: &[u8]) -> Option<usize> {
            self.timers
                .iter()
                .position(|x| x.0 == t && x.1 == g && x.2 == k && x.3 == ns)
        }
        fn min_hold(&self) -> Option<i64> {
            self.timers.iter().filter_map(|x| x.4).min()
        }
    }

    #[test]
    fn timers_match_a_sorted_list_model_on_random_operations() {
        for seed in 1..=8u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut service = HeapTimers::new();
            let mut model = Model::default();
            let mut watermark = 0i64;
            for _ in 0..4000 {
                let t = watermark + rng.below(200) as i64;
                let g = rng.below(4) as u32;
                let k = vec![rng.below(6) as u8];
                let ns = vec![rng.below(3) as u8];
                match rng.below(10) {
                    0..=4 => {
                        let hold = (rng.below(2) == 0).then(|| t - rng.below(50) as i64);
                        service.set(TimeDomain::EventTime, t, KeyRef::new(g, &k), &ns, hold);
                        match model.position(t, g, &k, &ns) {
                            Some(i) => model.timers[i].4 = hold,
                            None => model.timers.push((t, g, k, ns, hold)),
                        }
                    }
                    5..=6 => {
                        let deleted =
                            service.delete(TimeDomain::EventTime, t, KeyRef::new(g, &k), &ns);
                        let pos = model.position(t, g, &k, &ns);
                        assert_eq!(deleted, pos.is_some());
                        if let Some(i) = pos {
                            model.timers.remove(i);
                        }
                    }
                    _ => {
                        watermark += rng.below(60) as i64;
                        model.timers.sort();
                        let mut fired = Vec::new();
                        while let Some(timer) = service.pop_due(TimeDomain::EventTime, watermark) {
                            fired.push((
                                timer.time,
                                timer.key_group,
                                timer.key.to_vec(),
                                timer.namespace.to_vec(),
                            ));
                        }
                        let due: Vec<_> = model
                            .timers
                            .iter()
                            .filter(|x| x.0 <= watermark)
                            .map(|x| (x.0, x.1, x.2.clone(), x.3.clone()))
                            .collect();
                        model.timers.retain(|x| x.0 > watermark);
                        assert_eq!(
                            fired, due,
                            "seed {seed}: fired in (time, group, key, namespace) order"
                        );
                    }
                }
                assert_eq!(service.min_hold(), model.min_hold(), "seed {seed}");
                assert_eq!(service.len(TimeDomain::EventTime), model.timers.len());
            }
        }
    }

    #[test]
    fn holds_keep_the_output_watermark_back_until_their_timer_goes() {
        let mut s = HeapTimers::new();
        let key = KeyRef::new(0, b"k");
        s.set(TimeDomain::EventTime, 100, key, b"", Some(40));
        assert_eq!(s.output_watermark(90), 39);
        s.set(TimeDomain::EventTime, 100, key, b"", Some(60));
        assert_eq!(
            s.output_watermark(90),
            59,
            "setting again replaces the hold"
        );
        assert!(s.pop_due(TimeDomain::EventTime, 100).is_some());
        assert_eq!(s.output_watermark(90), 90);
    }

    #[test]
    fn domains_are_separate() {
        let mut s = HeapTimers::new();
        let key = KeyRef::new(1, b"k");
        s.set(TimeDomain::ProcessingTime, 5, key, b"", None);
        assert!(s.pop_due(TimeDomain::EventTime, i64::MAX).is_none());
        assert_eq!(s.next_time(TimeDomain::ProcessingTime), Some(5));
        assert!(s.pop_due(TimeDomain::ProcessingTime, 5).is_some());
    }
}
