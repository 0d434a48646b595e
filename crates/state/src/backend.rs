//! The keyed state backend of one operator subtask, and typed views of its states.
//!
//! An operator registers its states once (`value_state`, `list_state`, `map_state`,
//! `aggregating_state`), keeps the typed ids, and reads or writes through short-lived views:
//! `backend.value(&id).modify(key, ns, init, |v| ...)`. Every access names the record's key
//! (group and bytes) and a namespace (a window, or none). The heap backend keeps every value in
//! memory; the RocksDB backend keeps the same tables as bounded write-back caches over one
//! column family per state (see [`crate::table`] and [`crate::store`]). Operators cannot tell
//! them apart, except by speed and by how much state fits.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;

use crate::Clock;
use crate::codec::{MapKey, NotU8, StateValue};
use crate::error::StateError;
use crate::heap::{Slot, SlotRef};
use crate::key_groups::KeyGroupRange;
use crate::keys::KeyRef;
use crate::snapshot::{Staged, new_lineage};
use crate::store::{KeyWrite, RocksConfig, Store, StoreCounters};
use crate::table::{Relayout, Table};
use crate::timers::{HeapTimers, RocksTimers, TimerService, Timers};

/// A value that can be encoded without knowing its type (for snapshots of heap tables).
pub(crate) trait EncodeValue {
    fn encode_value(&self, out: &mut Vec<u8>);
}

impl<T: StateValue> EncodeValue for T {
    fn encode_value(&self, out: &mut Vec<u8>) {
        self.encode(out);
    }
}

/// A registered table, type-erased.
pub(crate) trait AnyTable: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn live(&self) -> usize;
    fn flush(&mut self, store: Option<&Store>) -> Result<(), StateError>;
    /// The writes a flush would make, leaving the cache dirty (see [`Table::dirty_writes`]).
    fn pending_writes(&mut self) -> Vec<KeyWrite>;
    fn name(&self) -> &str;
    fn ttl(&self) -> Option<i64>;
    /// Encodes the live value of `slot` at `now` into `out` (emptied first): `Some(true)` if
    /// there is one, `Some(false)` if the table knows there is none, `None` if it does not
    /// know (a RocksDB table that has not cached the slot). Reads the table only, not the
    /// store (queries, [`crate::query`]).
    fn encode_live(&self, slot: SlotRef<'_>, now: i64, out: &mut Vec<u8>) -> Option<bool>;
    /// Calls `f` with every live entry at `now`: its slot, write time and value.
    fn visit_live<'a>(&'a self, now: i64, f: &mut dyn FnMut(&'a Slot, i64, &'a dyn EncodeValue));
}

impl<T: StateValue> AnyTable for Table<T> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn live(&self) -> usize {
        self.live_entries().count()
    }
    fn flush(&mut self, store: Option<&Store>) -> Result<(), StateError> {
        Table::flush(self, store)
    }
    fn pending_writes(&mut self) -> Vec<KeyWrite> {
        self.dirty_writes(false)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn ttl(&self) -> Option<i64> {
        Table::ttl(self)
    }
    fn encode_live(&self, slot: SlotRef<'_>, now: i64, out: &mut Vec<u8>) -> Option<bool> {
        out.clear();
        let value = self.live_value(slot, now)?;
        if let Some(v) = value {
            v.encode(out);
        }
        Some(value.is_some())
    }
    fn visit_live<'a>(&'a self, now: i64, f: &mut dyn FnMut(&'a Slot, i64, &'a dyn EncodeValue)) {
        for (slot, written, value) in self.live_at(now) {
            f(slot, written, value);
        }
    }
}

pub(crate) struct Registered {
    type_id: TypeId,
    pub(crate) table: Box<dyn AnyTable>,
}

/// Typed id of a value state.
pub struct ValueId<V>(usize, PhantomData<fn() -> V>);
/// Typed id of a list state.
pub struct ListId<V>(usize, PhantomData<fn() -> V>);
/// Typed id of a map state.
pub struct MapId<K, V>(usize, PhantomData<fn() -> (K, V)>);
/// Typed id of an aggregating state.
pub struct AggregatingId<A: Aggregator>(ValueId<A::Acc>);

impl<A: Aggregator> Clone for AggregatingId<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: Aggregator> Copy for AggregatingId<A> {}
impl<A: Aggregator> std::fmt::Debug for AggregatingId<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AggregatingId({})", (self.0).0)
    }
}

/// How an aggregating state folds inputs into an accumulator (Flink's `AggregateFunction`).
pub trait Aggregator: Send + Sync + 'static {
    /// What is kept per key and namespace.
    type Acc: StateValue;
    /// One input, borrowed for the call.
    type Input<'a>;
    /// What reading the state gives.
    type Output;
    type Error;

    fn create(&self) -> Self::Acc;
    fn add(&self, acc: &mut Self::Acc, input: Self::Input<'_>) -> Result<(), Self::Error>;
    /// Folds `other` into `acc` (merging windows, say).
    fn merge(&self, acc: &mut Self::Acc, other: &Self::Acc) -> Result<(), Self::Error>;
    fn result(&self, acc: &Self::Acc) -> Self::Output;
}

macro_rules! copy_id {
    ($($t:ident<$($p:ident),*>),*) => {$(
        impl<$($p),*> Clone for $t<$($p),*> { fn clone(&self) -> Self { *self } }
        impl<$($p),*> Copy for $t<$($p),*> {}
        impl<$($p),*> std::fmt::Debug for $t<$($p),*> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($t), self.0)
            }
        }
    )*};
}
copy_id!(ValueId<V>, ListId<V>, MapId<K, V>);

/// Options of one state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateOptions {
    /// Entries not written for this long (ms, processing time) read as absent and are removed
    /// in the background.
    pub ttl_ms: Option<i64>,
}

/// Keyed state and timers of one operator subtask.
pub struct KeyedStateBackend {
    pub(crate) tables: Vec<Registered>,
    pub(crate) names: HashMap<String, usize>,
    pub(crate) timers: Timers,
    /// The RocksDB store, for the RocksDB backend.
    pub(crate) store: Option<Store>,
    /// Entries per state cache (RocksDB).
    cache_entries: usize,
    /// Default options for states registered without their own.
    defaults: StateOptions,
    pub(crate) clock: Clock,
    /// Whether any state has a TTL (only then do accesses read the clock).
    has_ttl: bool,
    /// Whether the store started empty (not reopened or restored): then a registered state's
    /// table knows every key it has (none), without a pass over its column family.
    fresh: bool,
    /// The key groups this subtask owns.
    pub(crate) range: KeyGroupRange,
    pub(crate) key_groups: u32,
    /// Entries a heap restore read for states not registered yet, by state name: registering
    /// the state decodes them into its table. Those of a state never registered stay here
    /// (and go into this backend's snapshots) until the backend is dropped.
    pub(crate) staged: HashMap<String, Staged>,
    /// Names this backend's snapshots: fresh for every backend made, reopened or restored
    /// (see [`crate::snapshot::KeyedSnapshot::lineage`]).
    pub(crate) lineage: u64,
}

impl std::fmt::Debug for KeyedStateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedStateBackend")
            .field("states", &self.names.keys().collect::<Vec<_>>())
            .field("range", &self.range)
            .field("store", &self.store)
            .finish()
    }
}

/// Wall-clock epoch milliseconds.
pub fn system_clock() -> Clock {
    Arc::new(crate::clock::now_ms)
}

impl KeyedStateBackend {
    /// A heap backend for the key groups `range` of `key_groups`.
    pub fn heap(key_groups: u32, range: KeyGroupRange) -> Self {
        Self {
            tables: Vec::new(),
            names: HashMap::new(),
            timers: Timers::Heap(HeapTimers::new()),
            store: None,
            cache_entries: usize::MAX,
            defaults: StateOptions::default(),
            clock: system_clock(),
            has_ttl: false,
            fresh: true,
            range,
            key_groups,
            staged: HashMap::new(),
            lineage: new_lineage(),
        }
    }

    /// A RocksDB backend in a fresh database at `config.path`.
    pub fn rocksdb(
        key_groups: u32,
        range: KeyGroupRange,
        config: RocksConfig,
    ) -> Result<Self, StateError> {
        let cache_entries = config.cache_entries;
        let store = Store::open(config, true)?;
        store.record_layout(key_groups, range)?;
        Ok(Self {
            tables: Vec::new(),
            names: HashMap::new(),
            timers: Timers::Rocks(RocksTimers::new()),
            store: Some(store),
            cache_entries,
            defaults: StateOptions::default(),
            clock: system_clock(),
            has_ttl: false,
            fresh: true,
            range,
            key_groups,
            staged: HashMap::new(),
            lineage: new_lineage(),
        })
    }

    /// Reopens the RocksDB database at `config.path` as it was left by
    /// [`Self::close_keeping_files`]: its states and timers, with the watermark holds rebuilt in
    /// one pass.
    pub fn reopen_rocksdb(
        key_groups: u32,
        range: KeyGroupRange,
        config: RocksConfig,
    ) -> Result<Self, StateError> {
        let cache_entries = config.cache_entries;
        let store = Store::open(config, false)?;
        store.record_layout(key_groups, range)?;
        let timers = RocksTimers::rebuild(&store)?;
        Ok(Self::with_store(
            key_groups,
            range,
            cache_entries,
            store,
            timers,
        ))
    }

    /// A RocksDB backend over a store that already holds state (reopened or restored).
    pub(crate) fn with_store(
        key_groups: u32,
        range: KeyGroupRange,
        cache_entries: usize,
        store: Store,
        timers: RocksTimers,
    ) -> Self {
        Self {
            tables: Vec::new(),
            names: HashMap::new(),
            timers: Timers::Rocks(timers),
            store: Some(store),
            cache_entries,
            defaults: StateOptions::default(),
            clock: system_clock(),
            has_ttl: false,
            fresh: false,
            range,
            key_groups,
            staged: HashMap::new(),
            lineage: new_lineage(),
        }
    }

    /// Uses `clock` (epoch ms) for TTL instead of the wall clock (tests inject one).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Options for states registered without their own (a job-wide TTL, say).
    pub fn with_defaults(mut self, defaults: StateOptions) -> Self {
        self.defaults = defaults;
        self
    }

    pub fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    pub fn key_groups(&self) -> u32 {
        self.key_groups
    }

    /// Whether state lives in RocksDB.
    pub fn is_rocksdb(&self) -> bool {
        self.store.is_some()
    }

    /// RocksDB work counters (RocksDB backend).
    pub fn store_counters(&self) -> Option<Arc<StoreCounters>> {
        self.store.as_ref().map(Store::counters)
    }

    fn register<T: StateValue>(
        &mut self,
        name: &str,
        options: Option<StateOptions>,
    ) -> Result<usize, StateError> {
        if let Some(&i) = self.names.get(name) {
            return if self.tables[i].type_id == TypeId::of::<Table<T>>() {
                Ok(i)
            } else {
                Err(StateError::Conflict(name.to_string()))
            };
        }
        let ttl = options.unwrap_or(self.defaults).ttl_ms;
        let mut table = Table::<T>::new(name, self.cache_entries, ttl);
        if let Some(store) = self.store.as_mut() {
            store.ensure_state(name)?;
            if !self.fresh {
                // The values may have been written with another TTL setting (a restored
                // snapshot's): bring them to this one, and learn the keys on the way.
                let relayout = match (store.recorded_state(name)?, ttl) {
                    (Some(Some(_)), None) => Relayout::Strip,
                    (Some(None), Some(_)) => Relayout::Stamp((self.clock)()),
                    _ => Relayout::Keep,
                };
                table.load_stored(store, relayout)?;
            }
            store.set_state_ttl(name, ttl.map(|t| (t, self.clock.clone())))?;
        } else if let Some(staged) = self.staged.get(name) {
            table.restore_staged(staged, (self.clock)())?;
            self.staged.remove(name);
        }
        self.has_ttl |= ttl.is_some();
        self.tables.push(Registered {
            type_id: TypeId::of::<Table<T>>(),
            table: Box::new(table),
        });
        self.names.insert(name.to_string(), self.tables.len() - 1);
        Ok(self.tables.len() - 1)
    }

    /// Registers (or finds) the value state `name`.
    pub fn value_state<V: StateValue>(&mut self, name: &str) -> Result<ValueId<V>, StateError> {
        Ok(ValueId(self.register::<V>(name, None)?, PhantomData))
    }

    /// Registers (or finds) the value state `name` with its own options.
    pub fn value_state_with<V: StateValue>(
        &mut self,
        name: &str,
        options: StateOptions,
    ) -> Result<ValueId<V>, StateError> {
        Ok(ValueId(
            self.register::<V>(name, Some(options))?,
            PhantomData,
        ))
    }

    /// Registers (or finds) the list state `name`.
    pub fn list_state<V: StateValue + NotU8>(
        &mut self,
        name: &str,
    ) -> Result<ListId<V>, StateError> {
        Ok(ListId(self.register::<Vec<V>>(name, None)?, PhantomData))
    }

    /// Registers (or finds) the map state `name`.
    pub fn map_state<K: MapKey, V: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<MapId<K, V>, StateError> {
        Ok(MapId(
            self.register::<BTreeMap<K, V>>(name, None)?,
            PhantomData,
        ))
    }

    /// Registers (or finds) the aggregating state `name`.
    pub fn aggregating_state<A: Aggregator>(
        &mut self,
        name: &str,
    ) -> Result<AggregatingId<A>, StateError> {
        Ok(AggregatingId(self.value_state(name)?))
    }

    fn view<T: 'static>(&mut self, index: usize) -> View<'_, T> {
        let table = self.tables[index]
            .table
            .as_any_mut()
            .downcast_mut::<T>()
            .expect("an id is only made by registering a table of its type");
        View {
            table,
            store: self.store.as_ref(),
            now: if self.has_ttl { (self.clock)() } else { 0 },
        }
    }

    pub fn value<V: StateValue>(&mut self, id: &ValueId<V>) -> ValueState<'_, V> {
        ValueState(self.view::<Table<V>>(id.0))
    }

    pub fn aggregating<'a, A: Aggregator>(
        &'a mut self,
        id: &AggregatingId<A>,
        aggregator: &'a A,
    ) -> AggregatingState<'a, A> {
        AggregatingState {
            values: self.value(&id.0),
            aggregator,
        }
    }

    pub fn list<V: StateValue + NotU8>(&mut self, id: &ListId<V>) -> ListState<'_, V> {
        ListState(self.view::<Table<Vec<V>>>(id.0))
    }

    pub fn map<K: MapKey, V: StateValue>(&mut self, id: &MapId<K, V>) -> MapState<'_, K, V> {
        MapState(self.view::<Table<BTreeMap<K, V>>>(id.0))
    }

    pub fn timers(&mut self) -> TimerService<'_> {
        TimerService::new(&mut self.timers, self.store.as_ref())
    }

    /// Entries in memory over all states (values, lists, maps), for metrics.
    pub fn entries(&self) -> usize {
        self.tables.iter().map(|t| t.table.live()).sum()
    }

    /// How much state the subtask holds, for metrics: keys (entries) and, on RocksDB, bytes,
    /// as RocksDB estimates them (live data, files and memtables; cached writes not yet
    /// written through add to the keys only). The heap backend counts entries, not bytes.
    pub fn size_estimate(&self) -> (u64, Option<u64>) {
        let cached = self.entries() as u64;
        match self.store.as_ref().map(|s| s.estimate()) {
            Some(Ok((keys, bytes))) => (keys.max(cached), Some(bytes)),
            Some(Err(_)) | None => (cached, None),
        }
    }

    /// Writes every cached change (states and timers) to the store (RocksDB backend).
    pub fn flush(&mut self) -> Result<(), StateError> {
        let store = self.store.as_ref();
        for t in &mut self.tables {
            t.table.flush(store)?;
        }
        if let (Some(store), Timers::Rocks(t)) = (store, &mut self.timers) {
            t.flush(store)?;
        }
        Ok(())
    }

    /// Entries of state `name` stored in RocksDB (after a flush), for tests.
    #[cfg(test)]
    pub(crate) fn stored_entries(&self, name: &str) -> usize {
        self.store
            .as_ref()
            .and_then(|s| s.range(name, &[], &[0xff; 4], usize::MAX).ok())
            .map_or(0, |r| r.len())
    }

    /// Compacts the store now (RocksDB), running TTL compaction filters.
    pub fn compact(&mut self) -> Result<(), StateError> {
        self.flush()?;
        if let Some(store) = &self.store {
            store.compact_all()?;
        }
        Ok(())
    }

    /// Flushes and closes the store, removing its working directory.
    pub fn close(&mut self) -> Result<(), StateError> {
        if let Some(mut store) = self.store.take() {
            store.close()?;
        }
        Ok(())
    }

    /// Flushes and closes the store, keeping its directory (to reopen it).
    pub fn close_keeping_files(&mut self) -> Result<(), StateError> {
        self.flush()?;
        if let (Some(store), Timers::Rocks(t)) = (self.store.as_ref(), &mut self.timers) {
            // Due timers already read from RocksDB would otherwise be lost.
            t.persist(store)?;
        }
        if let Some(mut store) = self.store.take() {
            store.close_keeping_files()?;
        }
        Ok(())
    }
}

/// A table with what its operations need.
struct View<'a, T> {
    table: &'a mut T,
    store: Option<&'a Store>,
    now: i64,
}

/// A view of one value state.
pub struct ValueState<'a, V>(View<'a, Table<V>>);

impl<V: StateValue> ValueState<'_, V> {
    /// A copy of the value of (key, namespace).
    pub fn get(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<V>, StateError> {
        self.with(key, ns, |v| v.cloned())
    }

    /// Reads the value without copying it.
    pub fn with<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(Option<&V>) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        Ok(f(v.table.peek(v.store, SlotRef::new(key, ns), v.now)?))
    }

    /// Read-modify-write: `f` sees the value (or `None`) and may change or clear it.
    pub fn update<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut Option<V>) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        v.table.update(v.store, SlotRef::new(key, ns), v.now, f)
    }

    /// Changes the value in place, inserting `init()` first if absent.
    pub fn modify<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<R, StateError> {
        Ok(self.modify_or_init(key, ns, init, f)?.0)
    }

    /// Like [`Self::modify`], also saying whether the value was created by `init`.
    pub fn modify_or_init<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<(R, bool), StateError> {
        let v = &mut self.0;
        v.table
            .modify(v.store, SlotRef::new(key, ns), v.now, init, f)
    }

    pub fn put(&mut self, key: KeyRef<'_>, ns: &[u8], value: V) -> Result<(), StateError> {
        let v = &mut self.0;
        v.table.put(v.store, SlotRef::new(key, ns), value, v.now)
    }

    /// Removes and returns the value.
    pub fn remove(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<V>, StateError> {
        let v = &mut self.0;
        v.table.remove(v.store, SlotRef::new(key, ns), v.now)
    }
}

/// A view of one aggregating state: an accumulator per (key, namespace), folded in place.
pub struct AggregatingState<'a, A: Aggregator> {
    values: ValueState<'a, A::Acc>,
    aggregator: &'a A,
}

impl<A: Aggregator> AggregatingState<'_, A> {
    /// Folds `input` into the accumulator of (key, namespace); says whether the accumulator was
    /// created by this call (the first input of a window, say).
    pub fn add(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        input: A::Input<'_>,
    ) -> Result<Result<bool, A::Error>, StateError> {
        let agg = self.aggregator;
        let (result, created) =
            self.values
                .modify_or_init(key, ns, || agg.create(), |acc| agg.add(acc, input))?;
        Ok(result.map(|()| created))
    }

    /// Folds another accumulator into the one of (key, namespace); says, like
    /// [`add`](Self::add), whether the accumulator was created by this call.
    pub fn merge(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        other: &A::Acc,
    ) -> Result<Result<bool, A::Error>, StateError> {
        let agg = self.aggregator;
        let (result, created) =
            self.values
                .modify_or_init(key, ns, || agg.create(), |acc| agg.merge(acc, other))?;
        Ok(result.map(|()| created))
    }

    /// The current result, if (key, namespace) has an accumulator.
    pub fn get(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<A::Output>, StateError> {
        let agg = self.aggregator;
        self.values.with(key, ns, |acc| acc.map(|a| agg.result(a)))
    }

    /// The accumulator itself (to merge elsewhere or move).
    pub fn accumulator(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
    ) -> Result<Option<A::Acc>, StateError> {
        self.values.get(key, ns)
    }

    /// Calls `f` with the accumulator of (key, namespace), if any, without copying it.
    pub fn with_accumulator<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(Option<&A::Acc>) -> R,
    ) -> Result<R, StateError> {
        self.values.with(key, ns, f)
    }

    /// Removes the accumulator, returning it.
    pub fn take_accumulator(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
    ) -> Result<Option<A::Acc>, StateError> {
        self.values.remove(key, ns)
    }

    /// Removes the accumulator, returning its result.
    pub fn take(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<A::Output>, StateError> {
        let agg = self.aggregator;
        Ok(self.values.remove(key, ns)?.map(|a| agg.result(&a)))
    }
}

/// A view of one list state.
pub struct ListState<'a, V>(View<'a, Table<Vec<V>>>);

impl<V: StateValue + NotU8> ListState<'_, V> {
    pub fn add(&mut self, key: KeyRef<'_>, ns: &[u8], value: V) -> Result<(), StateError> {
        self.update(key, ns, |list| list.push(value))
    }

    /// Reads the list without copying it (empty if absent).
    pub fn with<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&[V]) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        Ok(f(v
            .table
            .peek(v.store, SlotRef::new(key, ns), v.now)?
            .map_or(&[][..], Vec::as_slice)))
    }

    /// Removes and returns the list.
    pub fn take(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Vec<V>, StateError> {
        let v = &mut self.0;
        Ok(v.table
            .remove(v.store, SlotRef::new(key, ns), v.now)?
            .unwrap_or_default())
    }

    /// Changes the list in place (an empty list afterwards removes it).
    pub fn update<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut Vec<V>) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        let slot = SlotRef::new(key, ns);
        v.table
            .modify_collection(v.store, slot, v.now, Vec::new, Vec::is_empty, f)
    }
}

/// A view of one map state: per (key, namespace), an ordered map from user keys to values.
pub struct MapState<'a, K, V>(View<'a, Table<BTreeMap<K, V>>>);

impl<K: MapKey, V: StateValue> MapState<'_, K, V> {
    pub fn get(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: &K,
    ) -> Result<Option<V>, StateError> {
        let v = &mut self.0;
        Ok(v.table
            .peek(v.store, SlotRef::new(key, ns), v.now)?
            .and_then(|m| m.get(user_key))
            .cloned())
    }

    pub fn put(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: K,
        value: V,
    ) -> Result<(), StateError> {
        let v = &mut self.0;
        v.table
            .modify(v.store, SlotRef::new(key, ns), v.now, BTreeMap::new, |m| {
                m.insert(user_key, value);
            })
            .map(|_| ())
    }

    /// Puts `user_key → value` and returns the smallest user key the map held before: what
    /// [`first_key`](Self::first_key) then [`put`](Self::put) would give, with one lookup of
    /// (key, namespace) instead of two.
    pub fn put_after_first_key(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: K,
        value: V,
    ) -> Result<Option<K>, StateError> {
        let v = &mut self.0;
        v.table
            .modify(v.store, SlotRef::new(key, ns), v.now, BTreeMap::new, |m| {
                let first = m.first_key_value().map(|(k, _)| k.clone());
                m.insert(user_key, value);
                first
            })
            .map(|(first, _)| first)
    }

    /// Changes the map of (key, namespace) in place (an empty map afterwards removes it).
    fn change<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut BTreeMap<K, V>) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        let slot = SlotRef::new(key, ns);
        if v.table.peek(v.store, slot, v.now)?.is_none() {
            return Ok(f(&mut BTreeMap::new()));
        }
        v.table
            .modify_collection(v.store, slot, v.now, BTreeMap::new, BTreeMap::is_empty, f)
    }

    pub fn remove(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: &K,
    ) -> Result<Option<V>, StateError> {
        self.change(key, ns, |m| m.remove(user_key))
    }

    /// Reads the entries in user-key order without copying them.
    pub fn with<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut dyn Iterator<Item = (&K, &V)>) -> R,
    ) -> Result<R, StateError> {
        let v = &mut self.0;
        let empty = BTreeMap::new();
        let m = v
            .table
            .peek(v.store, SlotRef::new(key, ns), v.now)?
            .unwrap_or(&empty);
        Ok(f(&mut m.iter()))
    }

    /// The smallest user key of (key, namespace), if any.
    pub fn first_key(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<K>, StateError> {
        let v = &mut self.0;
        Ok(v.table
            .peek(v.store, SlotRef::new(key, ns), v.now)?
            .and_then(|m| m.first_key_value())
            .map(|(k, _)| k.clone()))
    }

    /// Removes and returns the entries whose user key is at most `up_to`, in order.
    pub fn take_up_to(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        up_to: &K,
    ) -> Result<Vec<(K, V)>, StateError> {
        self.take_while(key, ns, |k| k <= up_to)
    }

    /// Removes and returns the leading entries (in user-key order) for which `pred` holds.
    pub fn take_while(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        mut pred: impl FnMut(&K) -> bool,
    ) -> Result<Vec<(K, V)>, StateError> {
        self.change(key, ns, |m| {
            let mut taken = Vec::new();
            while let Some(entry) = m.first_entry() {
                if !pred(entry.key()) {
                    break;
                }
                taken.push(entry.remove_entry());
            }
            taken
        })
    }

    /// Removes every entry of (key, namespace).
    pub fn clear(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<(), StateError> {
        let v = &mut self.0;
        v.table
            .remove(v.store, SlotRef::new(key, ns), v.now)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> KeyedStateBackend {
        KeyedStateBackend::heap(128, KeyGroupRange::of_subtask(0, 128, 1))
    }

    #[test]
    fn values_are_scoped_by_key_and_namespace() {
        let mut b = backend();
        let id = b.value_state::<i64>("sum").unwrap();
        let (k1, k2) = (KeyRef::new(3, b"a"), KeyRef::new(3, b"b"));
        b.value(&id).put(k1, b"w1", 5).unwrap();
        b.value(&id).modify(k1, b"w1", || 0, |v| *v += 2).unwrap();
        b.value(&id).modify(k2, b"w1", || 100, |v| *v += 1).unwrap();
        assert_eq!(b.value(&id).get(k1, b"w1").unwrap(), Some(7));
        assert_eq!(b.value(&id).get(k1, b"w2").unwrap(), None);
        assert_eq!(b.value(&id).get(k2, b"w1").unwrap(), Some(101));
        b.value(&id).update(k1, b"w1", |v| *v = None).unwrap();
        assert_eq!(b.value(&id).get(k1, b"w1").unwrap(), None);
        assert_eq!(b.entries(), 1);
    }

    /// Averages i64 inputs.
    struct Mean;
    impl Aggregator for Mean {
        type Acc = (i64, i64);
        type Input<'a> = i64;
        type Output = f64;
        type Error = std::convert::Infallible;
        fn create(&self) -> (i64, i64) {
            (0, 0)
        }
        fn add(&self, acc: &mut (i64, i64), x: i64) -> Result<(), Self::Error> {
            acc.0 += x;
            acc.1 += 1;
            Ok(())
        }
        fn merge(&self, acc: &mut (i64, i64), other: &(i64, i64)) -> Result<(), Self::Error> {
            acc.0 += other.0;
            acc.1 += other.1;
            Ok(())
        }
        fn result(&self, acc: &(i64, i64)) -> f64 {
            acc.0 as f64 / acc.1 as f64
        }
    }

    #[test]
    fn aggregating_state_folds_in_place_and_merges() {
        let mut b = backend();
        let id = b.aggregating_state::<Mean>("mean").unwrap();
        let k = KeyRef::new(1, b"k");
        let mut s = b.aggregating(&id, &Mean);
        assert!(
            s.add(k, b"w1", 4).unwrap().unwrap(),
            "the first input creates"
        );
        assert!(!s.add(k, b"w1", 8).unwrap().unwrap());
        s.add(k, b"w2", 30).unwrap().unwrap();
        assert_eq!(s.get(k, b"w1").unwrap(), Some(6.0));
        let other = s.accumulator(k, b"w2").unwrap().unwrap();
        s.merge(k, b"w1", &other).unwrap().unwrap();
        assert_eq!(s.take(k, b"w1").unwrap(), Some(14.0));
        assert_eq!(s.get(k, b"w1").unwrap(), None);
    }

    #[test]
    fn registering_a_name_twice_with_another_type_is_refused() {
        let mut b = backend();
        b.value_state::<i64>("x").unwrap();
        assert!(
            b.value_state::<i64>("x").is_ok(),
            "same type: the same state"
        );
        assert!(matches!(
            b.value_state::<String>("x"),
            Err(StateError::Conflict(_))
        ));
        assert!(matches!(
            b.list_state::<i64>("x"),
            Err(StateError::Conflict(_))
        ));
    }

    #[test]
    fn lists_and_maps_keep_order_and_vanish_when_empty() {
        let mut b = backend();
        let l = b.list_state::<String>("l").unwrap();
        let m = b.map_state::<i64, String>("m").unwrap();
        let k = KeyRef::new(0, b"k");
        b.list(&l).add(k, b"", "x".into()).unwrap();
        b.list(&l).add(k, b"", "y".into()).unwrap();
        assert_eq!(
            b.list(&l).with(k, b"", |v| v.to_vec()).unwrap(),
            vec!["x", "y"]
        );
        for t in [30, 10, 20] {
            b.map(&m).put(k, b"", t, format!("t{t}")).unwrap();
        }
        let taken = b.map(&m).take_up_to(k, b"", &20).unwrap();
        assert_eq!(
            taken,
            vec![(10, "t10".to_string()), (20, "t20".to_string())]
        );
        assert_eq!(b.map(&m).with(k, b"", |it| it.count()).unwrap(), 1);
        assert_eq!(b.list(&l).take(k, b"").unwrap().len(), 2);
        b.map(&m).clear(k, b"").unwrap();
        assert_eq!(b.entries(), 0);
    }
}
