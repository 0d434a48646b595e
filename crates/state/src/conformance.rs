//! One test suite, run against every backend: the heap, RocksDB with a cache that holds
//! everything, and RocksDB with a cache so small that almost every access goes to the store.
//! Each test is checked against a naive model (plain maps and a sorted list of timers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::key_groups::KeyGroupRange;
use crate::store::{Compression, RocksConfig};
use crate::{KeyRef, KeyedStateBackend, StateOptions, StoreCounters, TimeDomain};

/// A seeded xorshift, so the suite needs no extra crates.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// How to make a backend for a test.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Heap,
    Rocks { cache_entries: usize },
}

const KINDS: [Kind; 3] = [
    Kind::Heap,
    Kind::Rocks {
        cache_entries: 1_000_000,
    },
    Kind::Rocks { cache_entries: 3 },
];

fn config(dir: &std::path::Path, cache_entries: usize) -> RocksConfig {
    RocksConfig {
        path: dir.join("db"),
        block_cache: RocksConfig::shared_block_cache(8 << 20),
        write_buffer: 4 << 20,
        compression: Compression::Lz4,
        cache_entries,
    }
}

fn make(kind: Kind, dir: &std::path::Path) -> KeyedStateBackend {
    let range = KeyGroupRange::of_subtask(0, 128, 1);
    match kind {
        Kind::Heap => KeyedStateBackend::heap(128, range),
        Kind::Rocks { cache_entries } => {
            KeyedStateBackend::rocksdb(128, range, config(dir, cache_entries)).unwrap()
        }
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

#[test]
fn value_list_and_map_states_match_a_model_on_random_operations() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let mut b = make(kind, dir.path());
        let values = b.value_state::<i64>("v").unwrap();
        let lists = b.list_state::<String>("l").unwrap();
        let maps = b.map_state::<i64, String>("m").unwrap();
        let mut mv: BTreeMap<(u64, u64), i64> = BTreeMap::new();
        let mut ml: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
        let mut mm: BTreeMap<(u64, u64), BTreeMap<i64, String>> = BTreeMap::new();
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        for step in 0..20_000u64 {
            let (k, n) = (rng.below(12), rng.below(3));
            let kb = key(k);
            let kr = KeyRef::new((k % 5) as u32, &kb);
            let ns = n.to_be_bytes();
            match rng.below(9) {
                0 => {
                    b.value(&values).put(kr, &ns, step as i64).unwrap();
                    mv.insert((k, n), step as i64);
                }
                1 => {
                    b.value(&values).modify(kr, &ns, || 0, |v| *v += 1).unwrap();
                    *mv.entry((k, n)).or_insert(0) += 1;
                }
                2 => assert_eq!(
                    b.value(&values).remove(kr, &ns).unwrap(),
                    mv.remove(&(k, n)),
                    "{kind:?}"
                ),
                3 => {
                    b.list(&lists).add(kr, &ns, format!("x{step}")).unwrap();
                    ml.entry((k, n)).or_default().push(format!("x{step}"));
                }
                4 => assert_eq!(
                    b.list(&lists).take(kr, &ns).unwrap(),
                    ml.remove(&(k, n)).unwrap_or_default(),
                    "{kind:?}"
                ),
                5 => {
                    let uk = rng.below(6) as i64;
                    let model = mm.entry((k, n)).or_default();
                    if step % 2 == 0 {
                        b.map(&maps).put(kr, &ns, uk, format!("y{step}")).unwrap();
                    } else {
                        let first = b
                            .map(&maps)
                            .put_after_first_key(kr, &ns, uk, format!("y{step}"))
                            .unwrap();
                        assert_eq!(first, model.keys().next().copied(), "{kind:?}");
                    }
                    model.insert(uk, format!("y{step}"));
                }
                6 => {
                    let uk = rng.below(6) as i64;
                    let expected = mm.get_mut(&(k, n)).and_then(|m| m.remove(&uk));
                    if mm.get(&(k, n)).is_some_and(BTreeMap::is_empty) {
                        mm.remove(&(k, n));
                    }
                    assert_eq!(
                        b.map(&maps).remove(kr, &ns, &uk).unwrap(),
                        expected,
                        "{kind:?}"
                    );
                }
                7 => {
                    let up_to = rng.below(6) as i64;
                    let taken = b.map(&maps).take_up_to(kr, &ns, &up_to).unwrap();
                    let mut expected = Vec::new();
                    if let Some(m) = mm.get_mut(&(k, n)) {
                        while let Some(e) = m.first_entry() {
                            if *e.key() > up_to {
                                break;
                            }
                            expected.push(e.remove_entry());
                        }
                        if m.is_empty() {
                            mm.remove(&(k, n));
                        }
                    }
                    assert_eq!(taken, expected, "{kind:?}");
                }
                _ => {
                    // Reads of everything of this key and namespace.
                    assert_eq!(
                        b.value(&values).get(kr, &ns).unwrap(),
                        mv.get(&(k, n)).copied(),
                        "{kind:?}"
                    );
                    let list = b.list(&lists).with(kr, &ns, |l| l.to_vec()).unwrap();
                    assert_eq!(
                        list,
                        ml.get(&(k, n)).cloned().unwrap_or_default(),
                        "{kind:?}"
                    );
                    let map: Vec<(i64, String)> = b
                        .map(&maps)
                        .with(kr, &ns, |it| it.map(|(a, v)| (*a, v.clone())).collect())
                        .unwrap();
                    let expected: Vec<(i64, String)> = mm
                        .get(&(k, n))
                        .map(|m| m.clone().into_iter().collect())
                        .unwrap_or_default();
                    assert_eq!(map, expected, "{kind:?}");
                }
            }
        }
    }
}

/// (time, key, namespace, hold) of the naive timer model.
type ModelTimer = (i64, u64, u8, Option<i64>);

#[test]
fn timers_and_holds_match_a_sorted_list_and_survive_close_and_reopen() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let mut b = make(kind, dir.path());
        let mut model: Vec<ModelTimer> = Vec::new();
        let mut rng = Rng(0x7777_0000_1111_2222);
        let mut watermark = 0i64;
        for step in 0..6_000u64 {
            let t = watermark + rng.below(300) as i64;
            let k = rng.below(8);
            let ns = rng.below(3) as u8;
            let kb = key(k);
            let kr = KeyRef::new((k % 4) as u32, &kb);
            let position =
                |m: &Vec<ModelTimer>| m.iter().position(|x| x.0 == t && x.1 == k && x.2 == ns);
            match rng.below(10) {
                0..=4 => {
                    let hold = (rng.below(2) == 0).then(|| t - rng.below(100) as i64);
                    b.timers()
                        .set(TimeDomain::EventTime, t, kr, &[ns], hold)
                        .unwrap();
                    match position(&model) {
                        Some(i) => model[i].3 = hold,
                        None => model.push((t, k, ns, hold)),
                    }
                }
                5..=6 => {
                    b.timers()
                        .delete(TimeDomain::EventTime, t, kr, &[ns])
                        .unwrap();
                    if let Some(i) = position(&model) {
                        model.remove(i);
                    }
                }
                _ => {
                    watermark += rng.below(80) as i64;
                    let mut fired = Vec::new();
                    while let Some(timer) = b
                        .timers()
                        .pop_due(TimeDomain::EventTime, watermark)
                        .unwrap()
                    {
                        fired.push(timer.time);
                    }
                    let mut due: Vec<i64> = model
                        .iter()
                        .filter(|x| x.0 <= watermark)
                        .map(|x| x.0)
                        .collect();
                    due.sort();
                    model.retain(|x| x.0 > watermark);
                    assert_eq!(fired, due, "{kind:?} step {step}: fired in time order");
                }
            }
            let naive = model.iter().filter_map(|x| x.3).min();
            assert_eq!(b.timers().min_hold(), naive, "{kind:?} step {step}");
        }
        if let Kind::Rocks { cache_entries } = kind {
            b.close_keeping_files().unwrap();
            drop(b);
            let mut reopened = KeyedStateBackend::reopen_rocksdb(
                128,
                KeyGroupRange::of_subtask(0, 128, 1),
                config(dir.path(), cache_entries),
            )
            .unwrap();
            assert_eq!(
                reopened.timers().min_hold(),
                model.iter().filter_map(|x| x.3).min(),
                "holds rebuilt on reopen"
            );
            assert_eq!(
                reopened.timers().len(TimeDomain::EventTime).unwrap(),
                model.len()
            );
            let mut fired = Vec::new();
            while let Some(timer) = reopened
                .timers()
                .pop_due(TimeDomain::EventTime, i64::MAX)
                .unwrap()
            {
                fired.push(timer.time);
            }
            let mut expected: Vec<i64> = model.iter().map(|x| x.0).collect();
            expected.sort();
            assert_eq!(fired, expected);
        }
    }
}

#[test]
fn state_survives_flush_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, 128, 1);
    let mut b = KeyedStateBackend::rocksdb(128, range, config(dir.path(), 4)).unwrap();
    let v = b.value_state::<String>("v").unwrap();
    for k in 0..50u64 {
        let kb = key(k);
        b.value(&v)
            .put(KeyRef::new(1, &kb), b"", format!("value {k}"))
            .unwrap();
    }
    b.close_keeping_files().unwrap();
    drop(b);
    let mut b = KeyedStateBackend::reopen_rocksdb(128, range, config(dir.path(), 4)).unwrap();
    let v = b.value_state::<String>("v").unwrap();
    for k in 0..50u64 {
        let kb = key(k);
        assert_eq!(
            b.value(&v).get(KeyRef::new(1, &kb), b"").unwrap(),
            Some(format!("value {k}"))
        );
    }
}

#[test]
fn setting_and_deleting_a_timer_never_scans_however_many_are_pending() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = make(
        Kind::Rocks {
            cache_entries: 1000,
        },
        dir.path(),
    );
    let counters = b.store_counters().unwrap();
    let mut cost_at = Vec::new();
    let mut pending = 0u64;
    for target in [1_000u64, 100_000] {
        while pending < target {
            let kb = key(pending);
            b.timers()
                .set(
                    TimeDomain::EventTime,
                    1_000_000 + pending as i64,
                    KeyRef::new(0, &kb),
                    b"",
                    None,
                )
                .unwrap();
            pending += 1;
        }
        b.flush().unwrap();
        let reads = StoreCounters::get(&counters.point_reads);
        let steps = StoreCounters::get(&counters.iterator_steps);
        for i in 0..1_000u64 {
            let kb = key(10_000_000 + i);
            let kr = KeyRef::new(3, &kb);
            b.timers()
                .set(TimeDomain::EventTime, 5 + i as i64 % 7, kr, b"", None)
                .unwrap();
            b.timers()
                .delete(TimeDomain::EventTime, 5 + i as i64 % 7, kr, b"")
                .unwrap();
        }
        b.flush().unwrap();
        cost_at.push((
            StoreCounters::get(&counters.point_reads) - reads,
            StoreCounters::get(&counters.iterator_steps) - steps,
        ));
    }
    for (reads, steps) in &cost_at {
        assert_eq!(*steps, 0, "no iterator step per set/delete: {cost_at:?}");
        // The only reads are the written-timers filter's rare false positives, each confirmed
        // by one point read: a handful per thousand operations at most, whatever is pending.
        assert!(
            *reads <= 10,
            "point reads per 1,000 set/delete pairs: {cost_at:?}"
        );
    }
    // Firing reads exactly the due timers: one step each, not the pending ones behind them.
    let steps = StoreCounters::get(&counters.iterator_steps);
    let kb = key(0);
    b.timers()
        .set(TimeDomain::EventTime, 10, KeyRef::new(0, &kb), b"", None)
        .unwrap();
    assert!(
        b.timers()
            .pop_due(TimeDomain::EventTime, 10)
            .unwrap()
            .is_some()
    );
    assert!(
        b.timers()
            .pop_due(TimeDomain::EventTime, 10)
            .unwrap()
            .is_none()
    );
    assert!(StoreCounters::get(&counters.iterator_steps) - steps <= 1);
}

#[test]
fn expired_state_reads_as_absent_and_is_removed() {
    for kind in KINDS {
        let dir = tempfile::tempdir().unwrap();
        let now = Arc::new(AtomicI64::new(1_000));
        let clock = {
            let now = now.clone();
            Arc::new(move || now.load(Ordering::Relaxed))
        };
        let mut b = make(kind, dir.path()).with_clock(clock);
        let v = b
            .value_state_with::<i64>("v", StateOptions { ttl_ms: Some(100) })
            .unwrap();
        let forever = b.value_state::<i64>("forever").unwrap();
        let (ka, kb) = (key(1), key(2));
        let (a, bk) = (KeyRef::new(0, &ka), KeyRef::new(0, &kb));
        b.value(&v).put(a, b"", 1).unwrap();
        b.value(&forever).put(a, b"", 1).unwrap();
        now.store(1_050, Ordering::Relaxed);
        b.value(&v).put(bk, b"", 2).unwrap();
        now.store(1_099, Ordering::Relaxed);
        assert_eq!(
            b.value(&v).get(a, b"").unwrap(),
            Some(1),
            "{kind:?}: not yet expired"
        );
        now.store(1_100, Ordering::Relaxed);
        assert_eq!(
            b.value(&v).get(a, b"").unwrap(),
            None,
            "{kind:?}: expired after 100 ms"
        );
        assert_eq!(
            b.value(&v).get(bk, b"").unwrap(),
            Some(2),
            "{kind:?}: written later, still live"
        );
        b.value(&v).modify(a, b"", || 10, |x| *x += 1).unwrap();
        assert_eq!(
            b.value(&v).get(a, b"").unwrap(),
            Some(11),
            "{kind:?}: an expired value is absent to modify too"
        );
        assert_eq!(
            b.value(&forever).get(a, b"").unwrap(),
            Some(1),
            "{kind:?}: only states with a TTL expire"
        );
    }
}

#[test]
fn expired_heap_entries_are_swept_without_being_read() {
    let now = Arc::new(AtomicI64::new(0));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::Relaxed))
    };
    let mut b =
        KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1)).with_clock(clock);
    let v = b
        .value_state_with::<i64>("v", StateOptions { ttl_ms: Some(10) })
        .unwrap();
    for k in 0..500u64 {
        let kb = key(k);
        b.value(&v).put(KeyRef::new(0, &kb), b"", 1).unwrap();
    }
    assert_eq!(b.entries(), 500);
    now.store(100, Ordering::Relaxed);
    // Writes to other keys trigger the incremental sweep; the 500 old keys are never read.
    for k in 1_000..3_000u64 {
        let kb = key(k);
        b.value(&v).put(KeyRef::new(0, &kb), b"", 1).unwrap();
    }
    assert!(
        b.entries() <= 2_000,
        "expired entries were removed: {}",
        b.entries()
    );
}

#[test]
fn rocksdb_compaction_drops_expired_entries_nobody_reads() {
    let dir = tempfile::tempdir().unwrap();
    let now = Arc::new(AtomicI64::new(1_000));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::Relaxed))
    };
    let mut b = make(Kind::Rocks { cache_entries: 100 }, dir.path()).with_clock(clock);
    let v = b
        .value_state_with::<i64>("v", StateOptions { ttl_ms: Some(100) })
        .unwrap();
    for k in 0..50u64 {
        let kb = key(k);
        b.value(&v).put(KeyRef::new(0, &kb), b"", 1).unwrap();
    }
    b.flush().unwrap();
    assert_eq!(b.stored_entries("v"), 50);
    b.compact().unwrap();
    assert_eq!(b.stored_entries("v"), 50, "live entries survive compaction");
    now.store(5_000, Ordering::Relaxed);
    b.compact().unwrap();
    assert_eq!(
        b.stored_entries("v"),
        0,
        "the compaction filter removed the expired entries"
    );
}
