//! The hash map under every state table: (key group, key, namespace) → value.
//!
//! Values stay as Rust values (no serialization on access); a lookup borrows the key and
//! namespace bytes without allocating (hashbrown's `Equivalent`), and only inserting a new
//! (key, namespace) longer than a slot holds in itself allocates.

use std::hash::{Hash, Hasher};

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::{DefaultHashBuilder, Equivalent, HashTable};

use smallvec::SmallVec;

use crate::keys::{KeyRef, short_eq};

/// Key and namespace bytes a [`Slot`] holds in itself, without an allocation: enough for an
/// encoded integer key (9 bytes) with a window namespace (16).
const INLINE: usize = 32;

/// An owned (key group, key, namespace). The key and the namespace lie side by side, inside
/// the slot (so inside the hash table's bucket) when short, as most keys are: a lookup then
/// compares bytes of the bucket it loads anyway instead of following a pointer to them (in
/// q11, the lookup's `memcmp` fell from 14% to 4% of the samples; the bucket's own first
/// touch remains).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) group: u32,
    key_len: usize,
    bytes: SmallVec<[u8; INLINE]>,
}

impl Slot {
    pub(crate) fn key(&self) -> &[u8] {
        self.as_ref().key
    }

    pub(crate) fn ns(&self) -> &[u8] {
        self.as_ref().ns
    }

    pub(crate) fn as_ref(&self) -> SlotRef<'_> {
        let (key, ns) = self.bytes.split_at(self.key_len);
        SlotRef {
            group: self.group,
            key,
            ns,
        }
    }
}

/// A borrowed (key group, key, namespace), hashing exactly like [`Slot`].
#[derive(Clone, Copy)]
pub(crate) struct SlotRef<'a> {
    pub(crate) group: u32,
    pub(crate) key: &'a [u8],
    pub(crate) ns: &'a [u8],
}

impl Hash for SlotRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.group);
        self.key.hash(state);
        self.ns.hash(state);
    }
}

impl Equivalent<Slot> for SlotRef<'_> {
    fn equivalent(&self, s: &Slot) -> bool {
        let s = s.as_ref();
        self.group == s.group && short_eq(self.key, s.key) && short_eq(self.ns, s.ns)
    }
}

impl<'a> SlotRef<'a> {
    pub(crate) fn new(key: KeyRef<'a>, ns: &'a [u8]) -> Self {
        Self {
            group: key.group,
            key: key.bytes,
            ns,
        }
    }

    pub(crate) fn to_owned(self) -> Slot {
        let mut bytes = SmallVec::with_capacity(self.key.len() + self.ns.len());
        bytes.extend_from_slice(self.key);
        bytes.extend_from_slice(self.ns);
        Slot {
            group: self.group,
            key_len: self.key.len(),
            bytes,
        }
    }
}

/// A hash table from (key group, key, namespace) to `V`, looked up by borrowed bytes: one
/// probe per access, an allocation only when a new slot with a long key is inserted.
pub(crate) struct SlotMap<V> {
    table: HashTable<(Slot, V)>,
    hasher: DefaultHashBuilder,
}

impl<V> Default for SlotMap<V> {
    fn default() -> Self {
        Self {
            table: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
        }
    }
}

impl<V> std::fmt::Debug for SlotMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotMap({} slots)", self.table.len())
    }
}

impl<V> SlotMap<V> {
    fn hash(&self, slot: SlotRef<'_>) -> u64 {
        self.hasher.hash_one(slot)
    }

    pub(crate) fn get(&self, slot: SlotRef<'_>) -> Option<&V> {
        self.table
            .find(self.hash(slot), |(k, _)| slot.equivalent(k))
            .map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, slot: SlotRef<'_>) -> Option<&mut V> {
        let h = self.hash(slot);
        self.table
            .find_mut(h, |(k, _)| slot.equivalent(k))
            .map(|(_, v)| v)
    }

    /// Like [`Self::get_or_insert_with`], also saying whether the slot was inserted.
    pub(crate) fn get_or_insert_flagged(
        &mut self,
        slot: SlotRef<'_>,
        default: impl FnOnce() -> V,
    ) -> (&mut V, bool) {
        let h = self.hash(slot);
        let hasher = &self.hasher;
        match self.table.entry(
            h,
            |(k, _)| slot.equivalent(k),
            |(k, _)| hasher.hash_one(k.as_ref()),
        ) {
            Entry::Occupied(e) => (&mut e.into_mut().1, false),
            Entry::Vacant(e) => (
                &mut e.insert((slot.to_owned(), default())).into_mut().1,
                true,
            ),
        }
    }

    pub(crate) fn insert(&mut self, slot: SlotRef<'_>, value: V) {
        let h = self.hash(slot);
        let hasher = &self.hasher;
        match self.table.entry(
            h,
            |(k, _)| slot.equivalent(k),
            |(k, _)| hasher.hash_one(k.as_ref()),
        ) {
            Entry::Occupied(mut e) => e.get_mut().1 = value,
            Entry::Vacant(e) => {
                e.insert((slot.to_owned(), value));
            }
        }
    }

    pub(crate) fn remove(&mut self, slot: SlotRef<'_>) -> Option<V> {
        let h = self.hash(slot);
        self.table
            .find_entry(h, |(k, _)| slot.equivalent(k))
            .ok()
            .map(|e| e.remove().0.1)
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    pub(crate) fn clear(&mut self) {
        self.table.clear();
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Slot, &mut V) -> bool) {
        self.table.retain(|(k, v)| keep(k, v));
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Slot, &mut V)> {
        self.table.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Slot, &V)> {
        self.table.iter().map(|(k, v)| (k, v))
    }
}
