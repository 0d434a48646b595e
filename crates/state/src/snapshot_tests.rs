//! Snapshots and restores, checked against a naive model: every combination of source backend,
//! format and target backend, at the same and at other parallelisms; incremental native
//! snapshots; corrupt files; TTLs and filters after a restore.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::heap::SlotRef;
use crate::key_groups::KeyGroupRange;
use crate::snapshot::{Sink, logical};
use crate::store::{Compression, RocksConfig};
use crate::timers::Timer;
use crate::{
    AggregatingId, Aggregator, KeyRef, KeyedStateBackend, ListId, MapId, RestoreSource,
    SnapshotFormat, StateError, StateOptions, StoreCounters, TimeDomain, ValueId,
};

const GROUPS: u32 = 128;
/// Keys of the random tests: several per key group.
const KEYS: u64 = 400;
const NAMESPACES: u8 = 3;

/// A seeded xorshift.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn group(k: u64) -> u32 {
    (k.wrapping_mul(0x9e37_79b9) % u64::from(GROUPS)) as u32
}

/// Keys of different lengths, so orders by length and by bytes differ.
fn key(k: u64) -> Vec<u8> {
    format!("k{}", k * 7).into_bytes()
}

fn config(path: PathBuf, cache_entries: usize) -> RocksConfig {
    RocksConfig {
        path,
        block_cache: RocksConfig::shared_block_cache(8 << 20),
        write_buffer: 4 << 20,
        compression: Compression::Lz4,
        cache_entries,
    }
}

/// A kind of backend.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Heap,
    Rocks { cache_entries: usize },
}

const ROCKS: Kind = Kind::Rocks {
    cache_entries: 1_000_000,
};
/// A cache so small that almost every access reads RocksDB.
const ROCKS_TINY: Kind = Kind::Rocks { cache_entries: 3 };

fn make(kind: Kind, dir: &Path, range: KeyGroupRange) -> KeyedStateBackend {
    match kind {
        Kind::Heap => KeyedStateBackend::heap(GROUPS, range),
        Kind::Rocks { cache_entries } => {
            KeyedStateBackend::rocksdb(GROUPS, range, config(dir.join("db"), cache_entries))
                .unwrap()
        }
    }
}

fn restore(
    kind: Kind,
    dir: &Path,
    range: KeyGroupRange,
    sources: &[RestoreSource],
) -> Result<KeyedStateBackend, StateError> {
    match kind {
        Kind::Heap => KeyedStateBackend::restore_heap(GROUPS, range, sources),
        Kind::Rocks { cache_entries } => KeyedStateBackend::restore_rocksdb(
            GROUPS,
            range,
            config(dir.join("db"), cache_entries),
            sources,
        ),
    }
}

/// Counts and sums i64 inputs.
struct CountSum;
impl Aggregator for CountSum {
    type Acc = (i64, i64);
    type Input<'a> = i64;
    type Output = (i64, i64);
    type Error = std::convert::Infallible;
    fn create(&self) -> (i64, i64) {
        (0, 0)
    }
    fn add(&self, acc: &mut (i64, i64), x: i64) -> Result<(), Self::Error> {
        acc.0 += 1;
        acc.1 += x;
        Ok(())
    }
    fn merge(&self, acc: &mut (i64, i64), o: &(i64, i64)) -> Result<(), Self::Error> {
        acc.0 += o.0;
        acc.1 += o.1;
        Ok(())
    }
    fn result(&self, acc: &(i64, i64)) -> (i64, i64) {
        *acc
    }
}

struct Ids {
    v: ValueId<i64>,
    l: ListId<String>,
    m: MapId<i64, String>,
    a: AggregatingId<CountSum>,
}

fn register(b: &mut KeyedStateBackend) -> Ids {
    Ids {
        v: b.value_state("v").unwrap(),
        l: b.list_state("l").unwrap(),
        m: b.map_state("m").unwrap(),
        a: b.aggregating_state("a").unwrap(),
    }
}

/// (key number, namespace).
type At = (u64, u8);
/// (domain, time, key group, key, namespace).
type TimerAt = (u8, i64, u32, Vec<u8>, Vec<u8>);

/// The naive model: plain maps, and timers in a map scanned for the earliest.
#[derive(Default)]
struct Model {
    values: BTreeMap<At, i64>,
    lists: BTreeMap<At, Vec<String>>,
    maps: BTreeMap<At, BTreeMap<i64, String>>,
    aggs: BTreeMap<At, (i64, i64)>,
    timers: BTreeMap<TimerAt, Option<i64>>,
}

fn domain(d: u8) -> TimeDomain {
    if d == 0 {
        TimeDomain::EventTime
    } else {
        TimeDomain::ProcessingTime
    }
}

impl Model {
    fn timers_in(&self, range: KeyGroupRange, d: u8) -> Vec<TimerAt> {
        self.timers
            .keys()
            .filter(|t| t.0 == d && range.contains(t.2))
            .cloned()
            .collect()
    }

    fn min_hold(&self, range: KeyGroupRange) -> Option<i64> {
        self.timers
            .iter()
            .filter(|(t, _)| range.contains(t.2))
            .filter_map(|(_, h)| *h)
            .min()
    }

    /// Entries of all four states in `range`.
    fn entries_in(&self, range: KeyGroupRange) -> usize {
        let n = |k: &At| usize::from(range.contains(group(k.0)));
        self.values.keys().map(n).sum::<usize>()
            + self.lists.keys().map(n).sum::<usize>()
            + self.maps.keys().map(n).sum::<usize>()
            + self.aggs.keys().map(n).sum::<usize>()
    }
}

/// Random operations on keys of `range`, applied to the backend and to the model alike.
fn run_ops(
    b: &mut KeyedStateBackend,
    ids: &Ids,
    model: &mut Model,
    rng: &mut Rng,
    range: KeyGroupRange,
    steps: usize,
) {
    let keys: Vec<u64> = (0..KEYS).filter(|k| range.contains(group(*k))).collect();
    let mut clock = 1_000i64;
    for step in 0..steps {
        let k = keys[rng.below(keys.len() as u64) as usize];
        let n = rng.below(u64::from(NAMESPACES)) as u8;
        let (kb, ns) = (key(k), [n]);
        let kr = KeyRef::new(group(k), &kb);
        let at = (k, n);
        match rng.below(15) {
            0 => {
                b.value(&ids.v).put(kr, &ns, step as i64).unwrap();
                model.values.insert(at, step as i64);
            }
            1 => {
                b.value(&ids.v).modify(kr, &ns, || 0, |v| *v += 1).unwrap();
                *model.values.entry(at).or_insert(0) += 1;
            }
            2 => assert_eq!(
                b.value(&ids.v).remove(kr, &ns).unwrap(),
                model.values.remove(&at)
            ),
            3 => {
                b.list(&ids.l).add(kr, &ns, format!("x{step}")).unwrap();
                model.lists.entry(at).or_default().push(format!("x{step}"));
            }
            4 => assert_eq!(
                b.list(&ids.l).take(kr, &ns).unwrap(),
                model.lists.remove(&at).unwrap_or_default()
            ),
            5 => {
                let uk = rng.below(5) as i64;
                b.map(&ids.m).put(kr, &ns, uk, format!("y{step}")).unwrap();
                model
                    .maps
                    .entry(at)
                    .or_default()
                    .insert(uk, format!("y{step}"));
            }
            6 => {
                let uk = rng.below(5) as i64;
                let expected = model.maps.get_mut(&at).and_then(|m| m.remove(&uk));
                if model.maps.get(&at).is_some_and(BTreeMap::is_empty) {
                    model.maps.remove(&at);
                }
                assert_eq!(b.map(&ids.m).remove(kr, &ns, &uk).unwrap(), expected);
            }
            7 => {
                let x = rng.below(100) as i64;
                b.aggregating(&ids.a, &CountSum)
                    .add(kr, &ns, x)
                    .unwrap()
                    .unwrap();
                let acc = model.aggs.entry(at).or_insert((0, 0));
                acc.0 += 1;
                acc.1 += x;
            }
            8 => assert_eq!(
                b.aggregating(&ids.a, &CountSum).take(kr, &ns).unwrap(),
                model.aggs.remove(&at)
            ),
            9..=10 => {
                let d = rng.below(2) as u8;
                let t = clock + rng.below(2_000) as i64;
                let hold = (rng.below(2) == 0).then(|| t - rng.below(500) as i64);
                b.timers().set(domain(d), t, kr, &ns, hold).unwrap();
                model
                    .timers
                    .insert((d, t, kr.group, kb.clone(), ns.to_vec()), hold);
            }
            11 => {
                // Delete a pending timer of this key, if any, or a made-up one.
                let pending = model
                    .timers
                    .keys()
                    .find(|t| t.2 == kr.group && t.3 == kb)
                    .cloned();
                let t = pending.unwrap_or((0, clock + 7, kr.group, kb.clone(), ns.to_vec()));
                b.timers()
                    .delete(domain(t.0), t.1, KeyRef::new(t.2, &t.3), &t.4)
                    .unwrap();
                model.timers.remove(&t);
            }
            _ => {
                // Fire one due timer (not all: RocksDB keeps the rest of what it read in
                // memory, which a snapshot must not lose).
                clock += rng.below(40) as i64;
                let d = rng.below(2) as u8;
                let fired = b.timers().pop_due(domain(d), clock).unwrap();
                let earliest = model
                    .timers
                    .keys()
                    .filter(|t| t.0 == d && t.1 <= clock && range.contains(t.2))
                    .map(|t| t.1)
                    .min();
                match fired {
                    None => assert_eq!(earliest, None, "a due timer did not fire"),
                    Some(f) => {
                        assert_eq!(Some(f.time), earliest, "fired the earliest");
                        let t = (d, f.time, f.key_group, f.key.to_vec(), f.namespace.to_vec());
                        assert!(model.timers.remove(&t).is_some(), "fired a pending timer");
                    }
                }
            }
        }
    }
}

/// Every state read of every key (in the range or not) equals the model's (nothing outside
/// `range`); timer counts and holds equal.
fn check_states(
    b: &mut KeyedStateBackend,
    ids: &Ids,
    model: &Model,
    range: KeyGroupRange,
    ctx: &str,
) {
    for k in 0..KEYS {
        let kb = key(k);
        let kr = KeyRef::new(group(k), &kb);
        let inside = range.contains(kr.group);
        for n in 0..NAMESPACES {
            let (ns, at) = ([n], (k, n));
            let v = b.value(&ids.v).get(kr, &ns).unwrap();
            assert_eq!(
                v,
                model.values.get(&at).copied().filter(|_| inside),
                "{ctx}: value {at:?}"
            );
            let l = b.list(&ids.l).with(kr, &ns, |l| l.to_vec()).unwrap();
            let expected = model.lists.get(&at).filter(|_| inside).cloned();
            assert_eq!(l, expected.unwrap_or_default(), "{ctx}: list {at:?}");
            let m: Vec<(i64, String)> = b
                .map(&ids.m)
                .with(kr, &ns, |it| it.map(|(a, v)| (*a, v.clone())).collect())
                .unwrap();
            let expected: Vec<(i64, String)> = model
                .maps
                .get(&at)
                .filter(|_| inside)
                .map(|m| m.clone().into_iter().collect())
                .unwrap_or_default();
            assert_eq!(m, expected, "{ctx}: map {at:?}");
            let a = b.aggregating(&ids.a, &CountSum).get(kr, &ns).unwrap();
            assert_eq!(
                a,
                model.aggs.get(&at).copied().filter(|_| inside),
                "{ctx}: aggregate {at:?}"
            );
        }
    }
    for d in 0..2 {
        assert_eq!(
            b.timers().len(domain(d)).unwrap(),
            model.timers_in(range, d).len(),
            "{ctx}: pending timers of domain {d}"
        );
    }
    assert_eq!(b.timers().min_hold(), model.min_hold(range), "{ctx}: hold");
    assert_eq!(
        b.timers().output_watermark(10_000),
        model.min_hold(range).map_or(10_000, |h| 10_000.min(h - 1)),
        "{ctx}: output watermark"
    );
}

/// Fires every timer: in time order, exactly the model's timers of `range`.
fn drain_timers(b: &mut KeyedStateBackend, model: &Model, range: KeyGroupRange, ctx: &str) {
    for d in 0..2 {
        let mut fired = Vec::new();
        while let Some(t) = b.timers().pop_due(domain(d), i64::MAX).unwrap() {
            fired.push((d, t.time, t.key_group, t.key.to_vec(), t.namespace.to_vec()));
        }
        assert!(
            fired.windows(2).all(|w| w[0].1 <= w[1].1),
            "{ctx}: fired in time order"
        );
        fired.sort();
        assert_eq!(
            fired,
            model.timers_in(range, d),
            "{ctx}: timers of domain {d}"
        );
    }
    assert_eq!(b.timers().min_hold(), None, "{ctx}: no hold once all fired");
}

/// A source: the backend that takes the snapshot, and in which format.
#[derive(Clone, Copy, Debug)]
struct Source(Kind, SnapshotFormat);

const SOURCES: [Source; 3] = [
    Source(Kind::Heap, SnapshotFormat::Logical),
    Source(ROCKS, SnapshotFormat::Logical),
    Source(ROCKS, SnapshotFormat::RocksNative),
];
const TARGETS: [Kind; 3] = [Kind::Heap, ROCKS, ROCKS_TINY];

/// The natural format of a backend's checkpoints.
fn native_format(kind: Kind) -> SnapshotFormat {
    match kind {
        Kind::Heap => SnapshotFormat::Logical,
        Kind::Rocks { .. } => SnapshotFormat::RocksNative,
    }
}

/// `p_old` subtasks of `source` run random operations and snapshot; the state is restored
/// into `p_new` subtasks of `target`, each checked against the model for its groups; the
/// first then carries on, snapshots and is restored again.
fn rescale(source: Source, p_old: usize, target: Kind, p_new: usize, seed: u64) {
    let ctx = format!("{source:?} x{p_old} -> {target:?} x{p_new}");
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let mut model = Model::default();
    let mut sources = Vec::new();
    for i in 0..p_old {
        let range = KeyGroupRange::of_subtask(i, GROUPS, p_old);
        let dir = tmp.path().join(format!("old-{i}"));
        let mut b = make(source.0, &dir, range);
        let ids = register(&mut b);
        run_ops(&mut b, &ids, &mut model, &mut rng, range, 1_500);
        let snapshot = b.snapshot(&dir.join("snap"), source.1).unwrap();
        assert_eq!(snapshot.range, range);
        assert_eq!(snapshot.states.len(), 4, "{ctx}: {:?}", snapshot.states);
        b.close().unwrap();
        sources.push(snapshot);
    }
    let listed = |s: &crate::KeyedSnapshot| {
        let mut names: Vec<String> = std::fs::read_dir(&s.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    for s in &sources {
        let files: Vec<String> = s.files.iter().map(|f| f.name.clone()).collect();
        assert_eq!(listed(s), files, "{ctx}: the snapshot lists its directory");
    }
    let snapshots = sources;
    let sources: Vec<RestoreSource> = snapshots.iter().map(|s| s.source()).collect();
    let mut restored = Vec::new();
    for j in 0..p_new {
        let range = KeyGroupRange::of_subtask(j, GROUPS, p_new);
        let dir = tmp.path().join(format!("new-{j}"));
        let mut b = restore(target, &dir, range, &sources).unwrap();
        let ids = register(&mut b);
        let ctx = format!("{ctx}, subtask {j}");
        check_states(&mut b, &ids, &model, range, &ctx);
        match target {
            Kind::Heap => assert_eq!(b.entries(), model.entries_in(range), "{ctx}"),
            Kind::Rocks { .. } => {
                let stored = b.stored_entries("v")
                    + b.stored_entries("l")
                    + b.stored_entries("m")
                    + b.stored_entries("a");
                assert_eq!(stored, model.entries_in(range), "{ctx}: stored entries");
            }
        }
        restored.push((b, ids, range, dir));
    }
    for s in &snapshots {
        let files: Vec<String> = s.files.iter().map(|f| f.name.clone()).collect();
        assert_eq!(
            listed(s),
            files,
            "{ctx}: restores leave the snapshot as it was"
        );
    }
    // The first carries on: more operations, another snapshot, another restore.
    let (mut b, ids, range, dir) = restored.remove(0);
    run_ops(&mut b, &ids, &mut model, &mut rng, range, 1_000);
    let again = b
        .snapshot(&dir.join("snap"), native_format(target))
        .unwrap();
    b.close().unwrap();
    let mut b = restore(target, &tmp.path().join("again"), range, &[again.source()]).unwrap();
    let ids = register(&mut b);
    let ctx2 = format!("{ctx}, restored again");
    check_states(&mut b, &ids, &model, range, &ctx2);
    drain_timers(&mut b, &model, range, &ctx2);
    b.close().unwrap();
    for (mut b, _, range, _) in restored {
        drain_timers(&mut b, &model, range, &ctx);
        b.close().unwrap();
    }
}

#[test]
fn every_source_format_and_target_restores_the_model_at_the_same_parallelism() {
    let mut seed = 1;
    // A source whose cache holds almost nothing as well: its state is all in RocksDB.
    let tiny = Source(ROCKS_TINY, SnapshotFormat::RocksNative);
    for source in SOURCES.into_iter().chain([tiny]) {
        for target in TARGETS {
            rescale(source, 1, target, 1, seed);
            seed += 1;
        }
    }
}

#[test]
fn one_subtask_restored_as_two_gives_each_exactly_its_groups() {
    let mut seed = 100;
    for source in SOURCES {
        for target in [Kind::Heap, ROCKS] {
            rescale(source, 1, target, 2, seed);
            seed += 1;
        }
    }
}

#[test]
fn three_subtasks_restored_as_one_and_as_two() {
    let mut seed = 200;
    for source in SOURCES {
        for target in [Kind::Heap, ROCKS] {
            rescale(source, 3, target, 1, seed);
            rescale(source, 3, target, 2, seed + 1);
            seed += 2;
        }
    }
}

#[test]
fn two_subtasks_restored_as_three() {
    for (i, source) in SOURCES.into_iter().enumerate() {
        rescale(source, 2, ROCKS, 3, 300 + i as u64);
    }
}

/// The SST files of a snapshot: name → size.
fn ssts(s: &crate::KeyedSnapshot) -> BTreeMap<String, u64> {
    s.files
        .iter()
        .filter(|f| f.shared)
        .map(|f| (f.name.clone(), f.size))
        .collect()
}

#[test]
fn native_snapshots_are_incremental_unchanged_files_keep_their_names_and_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let mut b = make(Kind::Rocks { cache_entries: 100 }, tmp.path(), range);
    let v = b.value_state::<String>("v").unwrap();
    for k in 0..20_000u64 {
        let kb = key(k);
        b.value(&v)
            .put(KeyRef::new(group(k), &kb), b"", format!("value {k}"))
            .unwrap();
    }
    let first = b
        .snapshot(&tmp.path().join("chk-1"), SnapshotFormat::RocksNative)
        .unwrap();
    for k in 0..10u64 {
        let kb = key(k);
        b.value(&v)
            .put(KeyRef::new(group(k), &kb), b"", "changed".into())
            .unwrap();
    }
    let second = b
        .snapshot(&tmp.path().join("chk-2"), SnapshotFormat::RocksNative)
        .unwrap();
    let (a, c) = (ssts(&first), ssts(&second));
    assert!(
        !a.is_empty(),
        "the first snapshot has SST files: {:?}",
        first.files
    );
    for (name, size) in &a {
        assert_eq!(c.get(name), Some(size), "{name} is in both, unchanged");
    }
    let new: Vec<_> = c.keys().filter(|n| !a.contains_key(*n)).collect();
    assert!(
        !new.is_empty(),
        "the change is in new SST files: {:?}",
        second.files
    );
    let small: Vec<_> = first.files.iter().filter(|f| !f.shared).collect();
    assert!(
        small.iter().any(|f| f.name == "CURRENT")
            && small.iter().any(|f| f.name.starts_with("MANIFEST")),
        "CURRENT and MANIFEST are listed, not shared: {small:?}"
    );
    assert_eq!(first.lineage, second.lineage, "one backend, one lineage");
    // Each snapshot restores to its own contents.
    for (snap, expected) in [(&first, "value 3"), (&second, "changed")] {
        let dir = tmp
            .path()
            .join(format!("restored-{}", snap.dir.display().to_string().len()));
        let mut r = restore(ROCKS, &dir, range, &[snap.source()]).unwrap();
        assert_ne!(
            r.lineage, first.lineage,
            "a restored backend starts a lineage"
        );
        let v = r.value_state::<String>("v").unwrap();
        let kb = key(3);
        assert_eq!(
            r.value(&v)
                .get(KeyRef::new(group(3), &kb), b"")
                .unwrap()
                .as_deref(),
            Some(expected)
        );
        r.close().unwrap();
    }
}

/// A small logical snapshot of a heap backend: its directory and its file's bytes.
fn small_logical_snapshot(tmp: &Path) -> (crate::KeyedSnapshot, Vec<u8>) {
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let mut b = KeyedStateBackend::heap(GROUPS, range);
    let ids = register(&mut b);
    let mut rng = Rng(77);
    run_ops(&mut b, &ids, &mut Model::default(), &mut rng, range, 60);
    let snap = b
        .snapshot(&tmp.join("snap"), SnapshotFormat::Logical)
        .unwrap();
    let bytes = std::fs::read(snap.dir.join(&snap.files[0].name)).unwrap();
    (snap, bytes)
}

/// Restores from `bytes` written over the snapshot's file, into a heap and (when `rocks`) a
/// RocksDB backend; both must fail, naming the file, and leave no working directory.
fn restore_fails(
    tmp: &Path,
    snap: &crate::KeyedSnapshot,
    bytes: Option<&[u8]>,
    rocks: bool,
) -> String {
    let file = snap.dir.join(&snap.files[0].name);
    match bytes {
        Some(b) => std::fs::write(&file, b).unwrap(),
        None => {
            let _ = std::fs::remove_file(&file);
        }
    }
    let range = snap.range;
    let message = match KeyedStateBackend::restore_heap(GROUPS, range, &[snap.source()]) {
        Ok(_) => panic!("restoring a damaged file succeeded"),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains(&file.display().to_string()),
        "the error names the file: {message}"
    );
    if rocks {
        let dir = tmp.join("target");
        match restore(ROCKS, &dir, range, &[snap.source()]) {
            Ok(_) => panic!("restoring a damaged file into RocksDB succeeded"),
            Err(e) => assert!(e.to_string().contains(&file.display().to_string()), "{e}"),
        }
        assert!(
            !dir.join("db").exists(),
            "a failed restore leaves no working directory"
        );
    }
    message
}

/// Counts what a reader hands over.
#[derive(Default)]
struct CountingSink(usize);

impl Sink for CountingSink {
    fn state(&mut self, _meta: &crate::StateMeta, _origin: &Path) -> Result<usize, StateError> {
        Ok(0)
    }
    fn entry(&mut self, _: usize, _: SlotRef<'_>, _: i64, _: &[u8]) -> Result<(), StateError> {
        self.0 += 1;
        Ok(())
    }
    fn timer(&mut self, _: TimeDomain, _: Timer, _: Option<i64>) -> Result<(), StateError> {
        self.0 += 1;
        Ok(())
    }
}

#[test]
fn damaged_logical_files_fail_with_the_path_and_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let (snap, good) = small_logical_snapshot(tmp.path());
    assert!(
        good.len() > 200,
        "a file with something in it: {} bytes",
        good.len()
    );

    let m = restore_fails(tmp.path(), &snap, Some(&good[..good.len() / 2]), true);
    assert!(m.contains("truncated"), "{m}");
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    let m = restore_fails(tmp.path(), &snap, Some(&flipped), true);
    assert!(m.contains("checksum mismatch"), "{m}");
    let mut magic = good.clone();
    magic[0] = b'X';
    let m = restore_fails(tmp.path(), &snap, Some(&magic), true);
    assert!(m.contains("bad magic"), "{m}");
    restore_fails(tmp.path(), &snap, None, true);

    // Every truncation and every flipped bit of every byte: an error, never a panic (read
    // from memory: thousands of files).
    let read = |bytes: &[u8]| {
        let path = Path::new("memory.wks");
        let mut reader = logical::Reader::new(path, std::io::Cursor::new(bytes))?;
        reader.check(GROUPS, snap.range)?;
        reader.read(snap.range, &mut CountingSink::default())
    };
    read(&good).unwrap();
    for len in 0..good.len() {
        assert!(read(&good[..len]).is_err(), "cut to {len} bytes");
    }
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut bad = good.clone();
            bad[i] ^= 1 << bit;
            match read(&bad) {
                Err(StateError::Snapshot { path, .. }) => assert_eq!(path, Path::new("memory.wks")),
                other => panic!("bit {bit} of byte {i} flipped: {other:?}"),
            }
        }
    }
    // The undamaged file still restores.
    std::fs::write(snap.dir.join(&snap.files[0].name), &good).unwrap();
    assert!(KeyedStateBackend::restore_heap(GROUPS, snap.range, &[snap.source()]).is_ok());
}

#[test]
fn a_missing_native_checkpoint_fails_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let mut b = make(ROCKS, &tmp.path().join("src"), range);
    register(&mut b);
    let snap = b
        .snapshot(&tmp.path().join("snap"), SnapshotFormat::RocksNative)
        .unwrap();
    std::fs::remove_file(snap.dir.join("CURRENT")).unwrap();
    for target in [Kind::Heap, ROCKS] {
        let dir = tmp.path().join("target");
        match restore(target, &dir, range, &[snap.source()]) {
            Ok(_) => panic!("restored without CURRENT"),
            Err(e) => assert!(
                e.to_string().contains(&snap.dir.display().to_string()),
                "{e}"
            ),
        }
        assert!(!dir.join("db").exists());
    }
}

#[test]
fn snapshots_refuse_what_they_cannot_do() {
    let tmp = tempfile::tempdir().unwrap();
    let mut heap = KeyedStateBackend::heap(GROUPS, KeyGroupRange::of_subtask(0, GROUPS, 1));
    assert!(matches!(
        heap.snapshot(&tmp.path().join("a"), SnapshotFormat::RocksNative),
        Err(StateError::Invalid(_))
    ));
    std::fs::create_dir(tmp.path().join("exists")).unwrap();
    assert!(matches!(
        heap.snapshot(&tmp.path().join("exists"), SnapshotFormat::Logical),
        Err(StateError::Invalid(_))
    ));
    // Another number of key groups is refused, naming the snapshot.
    let snap = heap
        .snapshot(&tmp.path().join("b"), SnapshotFormat::Logical)
        .unwrap();
    let e = KeyedStateBackend::restore_heap(
        256,
        KeyGroupRange::of_subtask(0, 256, 1),
        &[snap.source()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("key groups"), "{e}");
}

/// A clock the test moves.
fn test_clock(start: i64) -> (Arc<AtomicI64>, crate::Clock) {
    let now = Arc::new(AtomicI64::new(start));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::Relaxed))
    };
    (now, clock)
}

#[test]
fn write_times_survive_every_combination_and_compaction_drops_expired_restored_entries() {
    let ttl = StateOptions { ttl_ms: Some(100) };
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let (ka, kb) = (key(1), key(2));
    let (a, b_key) = (KeyRef::new(group(1), &ka), KeyRef::new(group(2), &kb));
    for source in SOURCES {
        for target in TARGETS {
            let ctx = format!("{source:?} -> {target:?}");
            let tmp = tempfile::tempdir().unwrap();
            let (now, clock) = test_clock(1_000);
            let mut b = make(source.0, &tmp.path().join("src"), range).with_clock(clock.clone());
            let v = b.value_state_with::<i64>("v", ttl).unwrap();
            let forever = b.value_state::<i64>("forever").unwrap();
            b.value(&v).put(a, b"", 1).unwrap();
            b.value(&forever).put(a, b"", 1).unwrap();
            now.store(1_050, Ordering::Relaxed);
            b.value(&v).put(b_key, b"", 2).unwrap();
            now.store(1_060, Ordering::Relaxed);
            let snap = b.snapshot(&tmp.path().join("snap"), source.1).unwrap();
            assert!(snap.states.contains(&crate::StateMeta {
                name: "v".into(),
                ttl_ms: Some(100)
            }));
            b.close().unwrap();

            let mut r = restore(target, &tmp.path().join("dst"), range, &[snap.source()])
                .unwrap()
                .with_clock(clock.clone());
            let v = r.value_state_with::<i64>("v", ttl).unwrap();
            let forever = r.value_state::<i64>("forever").unwrap();
            now.store(1_099, Ordering::Relaxed);
            assert_eq!(r.value(&v).get(a, b"").unwrap(), Some(1), "{ctx}");
            now.store(1_100, Ordering::Relaxed);
            assert_eq!(
                r.value(&v).get(a, b"").unwrap(),
                None,
                "{ctx}: expires when it would have"
            );
            assert_eq!(r.value(&v).get(b_key, b"").unwrap(), Some(2), "{ctx}");
            now.store(1_150, Ordering::Relaxed);
            assert_eq!(r.value(&v).get(b_key, b"").unwrap(), None, "{ctx}");
            assert_eq!(r.value(&forever).get(a, b"").unwrap(), Some(1), "{ctx}");
            if let Kind::Rocks { .. } = target {
                assert_eq!(r.stored_entries("v"), 2, "{ctx}: nothing compacted yet");
                r.compact().unwrap();
                assert_eq!(
                    r.stored_entries("v"),
                    0,
                    "{ctx}: compaction dropped the expired"
                );
                assert_eq!(r.stored_entries("forever"), 1, "{ctx}");
            }
            r.close().unwrap();
        }
    }
}

#[test]
fn a_state_that_gains_or_loses_its_ttl_on_restore_keeps_its_values() {
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let ka = key(1);
    let a = KeyRef::new(group(1), &ka);
    for source in SOURCES {
        for target in TARGETS {
            let ctx = format!("{source:?} -> {target:?}");
            let tmp = tempfile::tempdir().unwrap();
            let (now, clock) = test_clock(1_000);
            let mut b = make(source.0, &tmp.path().join("src"), range).with_clock(clock.clone());
            let gains = b.value_state::<String>("gains").unwrap();
            let loses = b
                .value_state_with::<String>("loses", StateOptions { ttl_ms: Some(100) })
                .unwrap();
            b.value(&gains).put(a, b"", "g".into()).unwrap();
            b.value(&loses).put(a, b"", "l".into()).unwrap();
            let snap = b.snapshot(&tmp.path().join("snap"), source.1).unwrap();
            b.close().unwrap();

            now.store(2_000, Ordering::Relaxed);
            let mut r = restore(target, &tmp.path().join("dst"), range, &[snap.source()])
                .unwrap()
                .with_clock(clock.clone());
            let gains = r
                .value_state_with::<String>("gains", StateOptions { ttl_ms: Some(100) })
                .unwrap();
            let loses = r.value_state::<String>("loses").unwrap();
            assert_eq!(
                r.value(&loses).get(a, b"").unwrap().as_deref(),
                Some("l"),
                "{ctx}"
            );
            now.store(2_099, Ordering::Relaxed);
            assert_eq!(
                r.value(&gains).get(a, b"").unwrap().as_deref(),
                Some("g"),
                "{ctx}: a gained TTL counts from the registration"
            );
            now.store(2_100, Ordering::Relaxed);
            assert_eq!(r.value(&gains).get(a, b"").unwrap(), None, "{ctx}");
            // And once more through a snapshot of the restored backend.
            let again = r
                .snapshot(&tmp.path().join("again"), native_format(target))
                .unwrap();
            r.close().unwrap();
            let mut r = restore(target, &tmp.path().join("dst2"), range, &[again.source()])
                .unwrap()
                .with_clock(clock.clone());
            let loses = r.value_state::<String>("loses").unwrap();
            assert_eq!(
                r.value(&loses).get(a, b"").unwrap().as_deref(),
                Some("l"),
                "{ctx}"
            );
            r.close().unwrap();
        }
    }
}

#[test]
fn ttl_compaction_works_on_a_reopened_database() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let (now, clock) = test_clock(1_000);
    let ttl = StateOptions { ttl_ms: Some(100) };
    let mut b = make(ROCKS, tmp.path(), range).with_clock(clock.clone());
    let v = b.value_state_with::<i64>("v", ttl).unwrap();
    for k in 0..50u64 {
        let kb = key(k);
        b.value(&v).put(KeyRef::new(group(k), &kb), b"", 1).unwrap();
    }
    b.close_keeping_files().unwrap();
    drop(b);
    let mut b =
        KeyedStateBackend::reopen_rocksdb(GROUPS, range, config(tmp.path().join("db"), 1000))
            .unwrap()
            .with_clock(clock);
    b.value_state_with::<i64>("v", ttl).unwrap();
    b.compact().unwrap();
    assert_eq!(b.stored_entries("v"), 50);
    now.store(5_000, Ordering::Relaxed);
    b.compact().unwrap();
    assert_eq!(
        b.stored_entries("v"),
        0,
        "the reopened column family has the TTL filter"
    );
}

#[test]
fn a_restored_rocksdb_reads_nothing_for_keys_and_timers_it_never_had() {
    for source in [
        Source(Kind::Heap, SnapshotFormat::Logical),
        Source(ROCKS, SnapshotFormat::RocksNative),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
        let mut b = make(source.0, &tmp.path().join("src"), range);
        let v = b.value_state::<i64>("v").unwrap();
        for k in 0..2_000u64 {
            let kb = key(k);
            let kr = KeyRef::new(group(k), &kb);
            b.value(&v).put(kr, b"", k as i64).unwrap();
            b.timers()
                .set(TimeDomain::EventTime, 10_000 + k as i64, kr, b"", None)
                .unwrap();
        }
        let snap = b.snapshot(&tmp.path().join("snap"), source.1).unwrap();
        b.close().unwrap();
        let mut r = restore(
            Kind::Rocks { cache_entries: 100 },
            &tmp.path().join("dst"),
            range,
            &[snap.source()],
        )
        .unwrap();
        let v = r.value_state::<i64>("v").unwrap();
        let counters = r.store_counters().unwrap();
        let reads = StoreCounters::get(&counters.point_reads);
        for k in 1_000_000..1_002_000u64 {
            let kb = key(k);
            let kr = KeyRef::new(group(k), &kb);
            assert_eq!(r.value(&v).get(kr, b"").unwrap(), None);
            r.timers()
                .set(TimeDomain::EventTime, 5 + k as i64 % 7, kr, b"", None)
                .unwrap();
            r.timers()
                .delete(TimeDomain::EventTime, 5 + k as i64 % 7, kr, b"")
                .unwrap();
        }
        let new_key_reads = StoreCounters::get(&counters.point_reads) - reads;
        assert!(
            new_key_reads <= 10,
            "{source:?}: {new_key_reads} point reads for 2,000 new keys and timers"
        );
        // Keys it had are still found.
        let kb = key(1_234);
        assert_eq!(
            r.value(&v)
                .get(KeyRef::new(group(1_234), &kb), b"")
                .unwrap(),
            Some(1_234)
        );
        assert_eq!(r.timers().len(TimeDomain::EventTime).unwrap(), 2_000);
        r.close().unwrap();
    }
}

#[test]
fn restored_states_wait_for_registration_and_survive_snapshots_until_then() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let ka = key(1);
    let a = KeyRef::new(group(1), &ka);
    let mut b = KeyedStateBackend::heap(GROUPS, range);
    let x = b.value_state::<String>("x").unwrap();
    let y = b.value_state::<i64>("y").unwrap();
    b.value(&x).put(a, b"", "kept".into()).unwrap();
    b.value(&y).put(a, b"", 7).unwrap();
    let first = b
        .snapshot(&tmp.path().join("1"), SnapshotFormat::Logical)
        .unwrap();
    for target in TARGETS {
        let ctx = format!("{target:?}");
        // Restored, only `y` registered, snapshotted, restored again: `x` is still there.
        let mut r = restore(target, &tmp.path().join("r1"), range, &[first.source()]).unwrap();
        let y = r.value_state::<i64>("y").unwrap();
        assert_eq!(r.value(&y).get(a, b"").unwrap(), Some(7), "{ctx}");
        let second = r
            .snapshot(&tmp.path().join(format!("2-{ctx}")), native_format(target))
            .unwrap();
        let mut names: Vec<_> = second.states.iter().map(|s| s.name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            ["x", "y"],
            "{ctx}: the unregistered state is in the snapshot"
        );
        r.close().unwrap();
        let mut r = restore(target, &tmp.path().join("r2"), range, &[second.source()]).unwrap();
        // Registered with the wrong type: an error naming the state; the right type works.
        match r.value_state::<(i64, i64)>("x") {
            Err(StateError::Codec { state, .. }) => assert_eq!(state, "x", "{ctx}"),
            other => {
                // RocksDB decodes lazily: the first read fails instead.
                let id = other.unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert!(
                    matches!(r.value(&id).get(a, b""), Err(StateError::Codec { .. })),
                    "{ctx}"
                );
                r.close().unwrap();
                continue;
            }
        }
        let x = r.value_state::<String>("x").unwrap();
        assert_eq!(
            r.value(&x).get(a, b"").unwrap().as_deref(),
            Some("kept"),
            "{ctx}"
        );
        r.close().unwrap();
    }
}

#[test]
fn a_restored_working_directory_is_removed_on_close_and_the_snapshot_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let mut b = make(ROCKS, &tmp.path().join("src"), range);
    let v = b.value_state::<i64>("v").unwrap();
    let kb = key(5);
    b.value(&v).put(KeyRef::new(group(5), &kb), b"", 5).unwrap();
    let snap = b
        .snapshot(&tmp.path().join("snap"), SnapshotFormat::RocksNative)
        .unwrap();
    b.close().unwrap();
    for round in 0..2 {
        let dir = tmp.path().join("dst");
        let mut r = restore(ROCKS, &dir, range, &[snap.source()]).unwrap();
        let v = r.value_state::<i64>("v").unwrap();
        r.value(&v)
            .put(KeyRef::new(group(5), &kb), b"", 99)
            .unwrap();
        r.compact().unwrap();
        assert!(dir.join("db").exists());
        r.close().unwrap();
        assert!(!dir.join("db").exists(), "round {round}: removed on close");
        for f in &snap.files {
            let meta = std::fs::metadata(snap.dir.join(&f.name)).unwrap();
            assert_eq!(meta.len(), f.size, "round {round}: {} untouched", f.name);
        }
    }
    // Still the snapshot's value, not the restored backends' writes.
    let mut r = restore(Kind::Heap, tmp.path(), range, &[snap.source()]).unwrap();
    let v = r.value_state::<i64>("v").unwrap();
    assert_eq!(
        r.value(&v).get(KeyRef::new(group(5), &kb), b"").unwrap(),
        Some(5)
    );
}

#[test]
fn no_sources_make_an_empty_backend() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(1, GROUPS, 2);
    for target in TARGETS {
        let mut b = restore(target, tmp.path(), range, &[]).unwrap();
        let ids = register(&mut b);
        check_states(
            &mut b,
            &ids,
            &Model::default(),
            range,
            &format!("{target:?}"),
        );
        b.close().unwrap();
    }
}

/// A native snapshot puts what is only in memory beside RocksDB's files, not into them: the
/// database stays as the caches left it, and a restore (exact or rescaled) still sees
/// everything, deletions of stored entries included.
#[test]
fn native_snapshots_leave_cached_writes_out_of_rocksdb_and_restore_them_from_the_overlay() {
    let tmp = tempfile::tempdir().unwrap();
    let range = KeyGroupRange::of_subtask(0, GROUPS, 1);
    let mut b = make(ROCKS, &tmp.path().join("db"), range);
    let v = b.value_state::<String>("v").unwrap();
    let put = |b: &mut KeyedStateBackend, k: u64, value: &str| {
        let kb = key(k);
        b.value(&v)
            .put(KeyRef::new(group(k), &kb), b"", value.into())
            .unwrap();
    };
    // Keys 0..100 reach RocksDB; then 0..10 are deleted and 100..200 written, in the cache.
    for k in 0..100 {
        put(&mut b, k, "stored");
    }
    b.flush().unwrap();
    assert_eq!(b.stored_entries("v"), 100);
    for k in 0..10 {
        let kb = key(k);
        b.value(&v).remove(KeyRef::new(group(k), &kb), b"").unwrap();
    }
    for k in 100..200 {
        put(&mut b, k, "cached");
    }
    let k7 = key(7);
    b.timers()
        .set(
            TimeDomain::EventTime,
            42,
            KeyRef::new(group(7), &k7),
            b"",
            None,
        )
        .unwrap();
    let snap = b
        .snapshot(&tmp.path().join("chk-1"), SnapshotFormat::RocksNative)
        .unwrap();
    assert_eq!(
        b.stored_entries("v"),
        100,
        "the snapshot wrote nothing into RocksDB"
    );
    assert!(
        snap.files
            .iter()
            .any(|f| f.name == "weir-overlay" && !f.shared),
        "{:?}",
        snap.files
    );
    b.close().unwrap();
    let expected = |k: u64| match k {
        0..10 => None,
        10..100 => Some("stored"),
        100..200 => Some("cached"),
        _ => None,
    };
    // Exactly its range (files linked, overlay applied), and rescaled to two (read, merged).
    let layouts = [
        vec![range],
        vec![
            KeyGroupRange::of_subtask(0, GROUPS, 2),
            KeyGroupRange::of_subtask(1, GROUPS, 2),
        ],
    ];
    for (n, ranges) in layouts.iter().enumerate() {
        for (i, r) in ranges.iter().enumerate() {
            let dir = tmp.path().join(format!("restored-{n}-{i}"));
            let mut back = restore(ROCKS, &dir, *r, &[snap.source()]).unwrap();
            let v = back.value_state::<String>("v").unwrap();
            for k in 0..200 {
                let kb = key(k);
                let got = back.value(&v).get(KeyRef::new(group(k), &kb), b"").unwrap();
                let want = expected(k).filter(|_| r.contains(group(k)));
                assert_eq!(got.as_deref(), want, "key {k} in {r:?}");
            }
            let due = back.timers().pop_due(TimeDomain::EventTime, 100).unwrap();
            assert_eq!(
                due.map(|t| t.time),
                r.contains(group(7)).then_some(42),
                "the timer in {r:?}"
            );
            back.close().unwrap();
        }
    }
}
