use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::{Mkey, FIRST_INDEX};

/// Hashes a key index for [`KeyMap`]: one multiplication (Fibonacci hashing; indices are
/// small sequential numbers, which SipHash would spend ~100 instructions on per lookup, and
/// every data-path key check is one lookup).
#[derive(Default, Clone, Copy)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0 ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The map under [`KeyMap`].
pub(crate) type KeyHashMap = HashMap<u32, Mkey, BuildHasherDefault<IndexHasher>>;

/// The source of [`KeyMap`] generations: each is handed out once in the process.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Live keys by index, and the table's generation: a number that changes with every access
/// that may change a key (every `&mut` one), taken from a process-wide counter, so no two
/// states of any key tables ever share one. A translation made under a generation is still
/// the one [`MkeyTable::resolve`] would make while the table has that generation (what the
/// data path's translation caches rely on). Reads go through `Deref`.
#[derive(Debug)]
pub(crate) struct KeyMap {
    map: KeyHashMap,
    generation: u64,
}

impl Default for KeyMap {
    fn default() -> KeyMap {
        KeyMap {
            map: KeyHashMap::default(),
            generation: next_generation(),
        }
    }
}

impl std::ops::Deref for KeyMap {
    type Target = KeyHashMap;
    fn deref(&self) -> &KeyHashMap {
        &self.map
    }
}

impl KeyMap {
    fn touch(&mut self) {
        self.generation = next_generation();
    }
    pub(crate) fn insert(&mut self, index: u32, m: Mkey) -> Option<Mkey> {
        self.touch();
        self.map.insert(index, m)
    }
    pub(crate) fn remove(&mut self, index: &u32) -> Option<Mkey> {
        self.touch();
        self.map.remove(index)
    }
    pub(crate) fn get_mut(&mut self, index: &u32) -> Option<&mut Mkey> {
        self.touch();
        self.map.get_mut(index)
    }
    pub(crate) fn values_mut(&mut self) -> std::collections::hash_map::ValuesMut<'_, u32, Mkey> {
        self.touch();
        self.map.values_mut()
    }
    pub(crate) fn clear(&mut self) {
        self.touch();
        self.map.clear();
    }
}

/// The mkey table.
#[derive(Default)]
pub struct MkeyTable {
    pub(crate) keys: KeyMap,
    /// Next index to try; indices are not reused until the 24-bit space wraps, so a stale key
    /// fails as unknown instead of silently hitting a new region.
    next: u32,
}

impl MkeyTable {
    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key exists.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Every live key.
    pub fn iter(&self) -> impl Iterator<Item = &Mkey> {
        self.keys.values()
    }

    /// The key with this index, if any.
    pub fn by_index(&self, index: u32) -> Option<&Mkey> {
        self.keys.get(&index)
    }

    /// The table's generation ([`KeyMap`]): equal for two reads only if no key could have
    /// changed in between.
    pub(crate) fn generation(&self) -> u64 {
        self.keys.generation
    }

    /// Drops every key (HCA teardown).
    pub fn clear(&mut self) {
        self.keys.clear();
    }

    /// Whether some key belongs to protection domain `pd` (`mkc.pd`): DEALLOC_PD is busy.
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.keys.values().any(|k| k.pd == pd)
    }

    pub(super) fn alloc_index(&mut self, limit: u32) -> Option<u32> {
        let space = limit.max(FIRST_INDEX + 1);
        for _ in 0..space {
            if self.next < FIRST_INDEX || self.next >= space {
                self.next = FIRST_INDEX;
            }
            let i = self.next;
            self.next += 1;
            if !self.keys.contains_key(&i) {
                return Some(i);
            }
        }
        None
    }
}
