//! The keyed state backend of one operator subtask, and typed views of its states.
//!
//! An operator registers its states once (`value_state`, `list_state`, `map_state`), keeps the
//! typed ids, and reads or writes through short-lived views: `backend.value(&id).update(key, ns,
//! |v| ...)`. Every access names the record's key (group and bytes) and a namespace (a window,
//! or none). Views dispatch over the backend kind; the heap backend keeps Rust values in hash
//! maps, and other backends plug in as further arms without changing operators.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;

use crate::codec::{MapKey, StateValue};
use crate::error::StateError;
use crate::heap::{ListTable, MapTable, SlotRef, ValueTable};
use crate::key_groups::KeyGroupRange;
use crate::keys::KeyRef;
use crate::timers::TimerService;

/// A registered table, type-erased.
trait Table: Send {
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn len(&self) -> usize;
}

impl<V: Send + 'static> Table for ValueTable<V> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

impl<V: Send + 'static> Table for ListTable<V> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn len(&self) -> usize {
        self.map.iter().map(|(_, v)| v.len()).sum()
    }
}

impl<K: Send + 'static, V: Send + 'static> Table for MapTable<K, V> {
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn len(&self) -> usize {
        self.map.iter().map(|(_, v)| v.len()).sum()
    }
}

struct Registered {
    type_id: TypeId,
    table: Box<dyn Table>,
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

/// Keyed state and timers of one operator subtask.
pub struct KeyedStateBackend {
    tables: Vec<Registered>,
    names: HashMap<String, usize>,
    timers: TimerService,
    /// The key groups this subtask owns.
    range: KeyGroupRange,
    key_groups: u32,
}

impl std::fmt::Debug for KeyedStateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedStateBackend")
            .field("states", &self.names.keys().collect::<Vec<_>>())
            .field("range", &self.range)
            .finish()
    }
}

impl KeyedStateBackend {
    /// A heap backend for the key groups `range` of `key_groups`.
    pub fn heap(key_groups: u32, range: KeyGroupRange) -> Self {
        Self {
            tables: Vec::new(),
            names: HashMap::new(),
            timers: TimerService::new(),
            range,
            key_groups,
        }
    }

    pub fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    pub fn key_groups(&self) -> u32 {
        self.key_groups
    }

    fn register<T: Table + Default + 'static>(&mut self, name: &str) -> Result<usize, StateError> {
        if let Some(&i) = self.names.get(name) {
            return if self.tables[i].type_id == TypeId::of::<T>() {
                Ok(i)
            } else {
                Err(StateError::Conflict(name.to_string()))
            };
        }
        self.tables.push(Registered {
            type_id: TypeId::of::<T>(),
            table: Box::new(T::default()),
        });
        self.names.insert(name.to_string(), self.tables.len() - 1);
        Ok(self.tables.len() - 1)
    }

    /// Registers (or finds) the value state `name`.
    pub fn value_state<V: StateValue>(&mut self, name: &str) -> Result<ValueId<V>, StateError> {
        Ok(ValueId(self.register::<ValueTable<V>>(name)?, PhantomData))
    }

    /// Registers (or finds) the list state `name`.
    pub fn list_state<V: StateValue>(&mut self, name: &str) -> Result<ListId<V>, StateError> {
        Ok(ListId(self.register::<ListTable<V>>(name)?, PhantomData))
    }

    /// Registers (or finds) the aggregating state `name`.
    pub fn aggregating_state<A: Aggregator>(
        &mut self,
        name: &str,
    ) -> Result<AggregatingId<A>, StateError> {
        Ok(AggregatingId(self.value_state(name)?))
    }

    /// Registers (or finds) the map state `name`.
    pub fn map_state<K: MapKey, V: StateValue>(
        &mut self,
        name: &str,
    ) -> Result<MapId<K, V>, StateError> {
        Ok(MapId(self.register::<MapTable<K, V>>(name)?, PhantomData))
    }

    fn table<T: 'static>(&mut self, index: usize) -> &mut T {
        self.tables[index]
            .table
            .as_any_mut()
            .downcast_mut::<T>()
            .expect("an id is only made by registering a table of its type")
    }

    pub fn value<V: StateValue>(&mut self, id: &ValueId<V>) -> ValueState<'_, V> {
        ValueState(ValueInner::Heap(self.table::<ValueTable<V>>(id.0)))
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

    pub fn list<V: StateValue>(&mut self, id: &ListId<V>) -> ListState<'_, V> {
        ListState(ListInner::Heap(self.table::<ListTable<V>>(id.0)))
    }

    pub fn map<K: MapKey, V: StateValue>(&mut self, id: &MapId<K, V>) -> MapState<'_, K, V> {
        MapState(MapInner::Heap(self.table::<MapTable<K, V>>(id.0)))
    }

    pub fn timers(&mut self) -> &mut TimerService {
        &mut self.timers
    }

    /// Entries over all states (values, list elements, map entries).
    pub fn entries(&self) -> usize {
        self.tables.iter().map(|t| t.table.len()).sum()
    }
}

enum ValueInner<'a, V> {
    Heap(&'a mut ValueTable<V>),
}

/// A view of one value state.
pub struct ValueState<'a, V>(ValueInner<'a, V>);

impl<V: StateValue> ValueState<'_, V> {
    /// A copy of the value of (key, namespace).
    pub fn get(&self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<V>, StateError> {
        self.with(key, ns, |v| v.cloned())
    }

    /// Reads the value without copying it.
    pub fn with<R>(
        &self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(Option<&V>) -> R,
    ) -> Result<R, StateError> {
        match &self.0 {
            ValueInner::Heap(t) => Ok(f(t.map.get(SlotRef::new(key, ns)))),
        }
    }

    /// Read-modify-write: `f` sees the value (or `None`) and may change or clear it.
    pub fn update<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut Option<V>) -> R,
    ) -> Result<R, StateError> {
        match &mut self.0 {
            ValueInner::Heap(t) => {
                let slot = SlotRef::new(key, ns);
                match t.map.remove_entry(slot) {
                    Some((owned, value)) => {
                        let mut current = Some(value);
                        let r = f(&mut current);
                        if let Some(new) = current {
                            t.map.insert_owned(owned, new);
                        }
                        Ok(r)
                    }
                    None => {
                        let mut current = None;
                        let r = f(&mut current);
                        if let Some(new) = current {
                            t.map.insert(slot, new);
                        }
                        Ok(r)
                    }
                }
            }
        }
    }

    /// Changes the value in place, inserting `init()` first if absent.
    pub fn modify<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<R, StateError> {
        match &mut self.0 {
            ValueInner::Heap(t) => Ok(f(t.map.get_or_insert_with(SlotRef::new(key, ns), init))),
        }
    }

    /// Like [`Self::modify`], also saying whether the value was created by `init`.
    pub fn modify_or_init<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        init: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<(R, bool), StateError> {
        match &mut self.0 {
            ValueInner::Heap(t) => {
                let (v, created) = t.map.get_or_insert_flagged(SlotRef::new(key, ns), init);
                Ok((f(v), created))
            }
        }
    }

    pub fn put(&mut self, key: KeyRef<'_>, ns: &[u8], value: V) -> Result<(), StateError> {
        match &mut self.0 {
            ValueInner::Heap(t) => {
                t.map.insert(SlotRef::new(key, ns), value);
                Ok(())
            }
        }
    }

    /// Removes and returns the value.
    pub fn remove(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<V>, StateError> {
        match &mut self.0 {
            ValueInner::Heap(t) => Ok(t.map.remove(SlotRef::new(key, ns))),
        }
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

    /// Folds another accumulator into the one of (key, namespace).
    pub fn merge(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        other: &A::Acc,
    ) -> Result<Result<(), A::Error>, StateError> {
        let agg = self.aggregator;
        self.values
            .modify(key, ns, || agg.create(), |acc| agg.merge(acc, other))
    }

    /// The current result, if (key, namespace) has an accumulator.
    pub fn get(&self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<A::Output>, StateError> {
        let agg = self.aggregator;
        self.values.with(key, ns, |acc| acc.map(|a| agg.result(a)))
    }

    /// The accumulator itself (to merge elsewhere or move).
    pub fn accumulator(&self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<A::Acc>, StateError> {
        self.values.get(key, ns)
    }

    /// Removes the accumulator, returning its result.
    pub fn take(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<A::Output>, StateError> {
        let agg = self.aggregator;
        Ok(self.values.remove(key, ns)?.map(|a| agg.result(&a)))
    }
}

enum ListInner<'a, V> {
    Heap(&'a mut ListTable<V>),
}

/// A view of one list state.
pub struct ListState<'a, V>(ListInner<'a, V>);

impl<V: StateValue> ListState<'_, V> {
    pub fn add(&mut self, key: KeyRef<'_>, ns: &[u8], value: V) -> Result<(), StateError> {
        match &mut self.0 {
            ListInner::Heap(t) => {
                t.map
                    .get_or_insert_with(SlotRef::new(key, ns), Vec::new)
                    .push(value);
                Ok(())
            }
        }
    }

    /// Reads the list without copying it (empty if absent).
    pub fn with<R>(
        &self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&[V]) -> R,
    ) -> Result<R, StateError> {
        match &self.0 {
            ListInner::Heap(t) => Ok(f(t
                .map
                .get(SlotRef::new(key, ns))
                .map_or(&[][..], Vec::as_slice))),
        }
    }

    /// Removes and returns the list.
    pub fn take(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<Vec<V>, StateError> {
        match &mut self.0 {
            ListInner::Heap(t) => Ok(t.map.remove(SlotRef::new(key, ns)).unwrap_or_default()),
        }
    }

    /// Changes the list in place (an empty list afterwards removes it).
    pub fn update<R>(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut Vec<V>) -> R,
    ) -> Result<R, StateError> {
        match &mut self.0 {
            ListInner::Heap(t) => {
                let slot = SlotRef::new(key, ns);
                let list = t.map.get_or_insert_with(slot, Vec::new);
                let r = f(list);
                if list.is_empty() {
                    t.map.remove(slot);
                }
                Ok(r)
            }
        }
    }
}

enum MapInner<'a, K, V> {
    Heap(&'a mut MapTable<K, V>),
}

/// A view of one map state: per (key, namespace), an ordered map from user keys to values.
pub struct MapState<'a, K, V>(MapInner<'a, K, V>);

impl<K: MapKey, V: StateValue> MapState<'_, K, V> {
    pub fn get(&self, key: KeyRef<'_>, ns: &[u8], user_key: &K) -> Result<Option<V>, StateError> {
        match &self.0 {
            MapInner::Heap(t) => Ok(t
                .map
                .get(SlotRef::new(key, ns))
                .and_then(|m| m.get(user_key))
                .cloned()),
        }
    }

    pub fn put(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: K,
        value: V,
    ) -> Result<(), StateError> {
        match &mut self.0 {
            MapInner::Heap(t) => {
                t.map
                    .get_or_insert_with(SlotRef::new(key, ns), BTreeMap::new)
                    .insert(user_key, value);
                Ok(())
            }
        }
    }

    pub fn remove(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        user_key: &K,
    ) -> Result<Option<V>, StateError> {
        match &mut self.0 {
            MapInner::Heap(t) => {
                let slot = SlotRef::new(key, ns);
                let Some(m) = t.map.get_mut(slot) else {
                    return Ok(None);
                };
                let v = m.remove(user_key);
                if m.is_empty() {
                    t.map.remove(slot);
                }
                Ok(v)
            }
        }
    }

    /// Reads the entries in user-key order without copying them.
    pub fn with<R>(
        &self,
        key: KeyRef<'_>,
        ns: &[u8],
        f: impl FnOnce(&mut dyn Iterator<Item = (&K, &V)>) -> R,
    ) -> Result<R, StateError> {
        match &self.0 {
            MapInner::Heap(t) => {
                let empty = BTreeMap::new();
                let m = t.map.get(SlotRef::new(key, ns)).unwrap_or(&empty);
                Ok(f(&mut m.iter()))
            }
        }
    }

    /// Removes and returns the entries whose user key is at most `up_to`, in order.
    pub fn take_up_to(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        up_to: &K,
    ) -> Result<Vec<(K, V)>, StateError> {
        match &mut self.0 {
            MapInner::Heap(t) => {
                let slot = SlotRef::new(key, ns);
                let Some(m) = t.map.get_mut(slot) else {
                    return Ok(Vec::new());
                };
                let mut taken = Vec::new();
                while let Some(entry) = m.first_entry() {
                    if entry.key() > up_to {
                        break;
                    }
                    taken.push(entry.remove_entry());
                }
                if m.is_empty() {
                    t.map.remove(slot);
                }
                Ok(taken)
            }
        }
    }

    /// The smallest user key of (key, namespace), if any.
    pub fn first_key(&self, key: KeyRef<'_>, ns: &[u8]) -> Result<Option<K>, StateError> {
        match &self.0 {
            MapInner::Heap(t) => Ok(t
                .map
                .get(SlotRef::new(key, ns))
                .and_then(|m| m.first_key_value())
                .map(|(k, _)| k.clone())),
        }
    }

    /// Removes and returns the leading entries (in user-key order) for which `pred` holds.
    pub fn take_while(
        &mut self,
        key: KeyRef<'_>,
        ns: &[u8],
        mut pred: impl FnMut(&K) -> bool,
    ) -> Result<Vec<(K, V)>, StateError> {
        match &mut self.0 {
            MapInner::Heap(t) => {
                let slot = SlotRef::new(key, ns);
                let Some(m) = t.map.get_mut(slot) else {
                    return Ok(Vec::new());
                };
                let mut taken = Vec::new();
                while let Some(entry) = m.first_entry() {
                    if !pred(entry.key()) {
                        break;
                    }
                    taken.push(entry.remove_entry());
                }
                if m.is_empty() {
                    t.map.remove(slot);
                }
                Ok(taken)
            }
        }
    }

    /// Removes every entry of (key, namespace).
    pub fn clear(&mut self, key: KeyRef<'_>, ns: &[u8]) -> Result<(), StateError> {
        match &mut self.0 {
            MapInner::Heap(t) => {
                t.map.remove(SlotRef::new(key, ns));
                Ok(())
            }
        }
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
