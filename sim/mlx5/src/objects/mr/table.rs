use super::{Mkey, FIRST_INDEX};

/// Key indices per page of [`KeyMap`].
const PAGE_SLOTS: usize = 256;

/// One page of [`KeyMap`]: the keys of `PAGE_SLOTS` consecutive indices, and how many there
/// are (a page with none is freed).
#[derive(Debug)]
struct KeyPage {
    used: usize,
    slots: [Option<Box<Mkey>>; PAGE_SLOTS],
}

/// The source of [`KeyMap`] generations: each is handed out once in the process.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Live keys by index, and the table's generation: a number that changes with every access
/// that may change a key (every `&mut` one), taken from a process-wide counter, so no two
/// states of any key tables ever share one. A translation made under a generation is still
/// the one [`MkeyTable::resolve`] would make while the table has that generation (what the
/// data path's translation caches rely on).
///
/// Indexed directly, in two levels: page `index / PAGE_SLOTS` (allocated while it holds a
/// key), slot `index % PAGE_SLOTS` (every data-path key check and every UMR looks a key up:
/// two loads and two compares, where a hash map probed a group). The firmware hands out
/// indices in sequence, so live keys sit in few pages; a page is freed with its last key.
#[derive(Debug)]
pub(crate) struct KeyMap {
    pages: Vec<Option<Box<KeyPage>>>,
    len: usize,
    generation: u64,
    /// Boxes of destroyed keys (each holding a [`vacant`] key), for the next keys created:
    /// as a hash map keeps its capacity, the table keeps the room of the keys it held (up to
    /// [`SPARE_BOXES`]), so creating a key after one was destroyed allocates nothing.
    // The boxes themselves are what is kept (their allocations), not the keys.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Mkey>>,
}

/// Most boxes [`KeyMap`] keeps for reuse.
const SPARE_BOXES: usize = 4096;

/// What a kept box holds: a key that owns no allocation.
fn vacant() -> Mkey {
    Mkey {
        index: 0,
        variant: 0,
        pd: 0,
        qpn: 0,
        access: super::Access(0),
        start: 0,
        len: 0,
        free: true,
        umr_en: false,
        en_rinval: false,
        xlt_octowords: 0,
        translation: super::Translation::Pa,
        mkc: [0; mlx5_prm::mkc::BYTES],
    }
}

impl Default for KeyMap {
    fn default() -> KeyMap {
        KeyMap {
            pages: Vec::new(),
            len: 0,
            generation: next_generation(),
            spare: Vec::new(),
        }
    }
}

impl KeyMap {
    fn touch(&mut self) {
        self.generation = next_generation();
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no key.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key of index `index`.
    #[inline]
    pub(crate) fn get(&self, index: &u32) -> Option<&Mkey> {
        let i = *index as usize;
        let page = self.pages.get(i / PAGE_SLOTS)?.as_deref()?;
        page.slots[i % PAGE_SLOTS].as_deref()
    }

    /// Whether a key of index `index` exists.
    pub(crate) fn contains_key(&self, index: &u32) -> bool {
        self.get(index).is_some()
    }

    /// Every key, in index order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Mkey> {
        self.pages
            .iter()
            .flatten()
            .flat_map(|p| p.slots.iter().flatten().map(|m| &**m))
    }

    /// Adds key `m` at `index`, returning the one it replaces.
    pub(crate) fn insert(&mut self, index: u32, m: Mkey) -> Option<Mkey> {
        self.touch();
        let i = index as usize;
        if self.pages.len() <= i / PAGE_SLOTS {
            self.pages.resize_with(i / PAGE_SLOTS + 1, || None);
        }
        let page = self.pages[i / PAGE_SLOTS].get_or_insert_with(|| {
            Box::new(KeyPage {
                used: 0,
                slots: std::array::from_fn(|_| None),
            })
        });
        let slot = &mut page.slots[i % PAGE_SLOTS];
        if let Some(b) = slot {
            return Some(std::mem::replace(&mut **b, m));
        }
        *slot = Some(match self.spare.pop() {
            Some(mut b) => {
                *b = m;
                b
            }
            None => Box::new(m),
        });
        page.used += 1;
        self.len += 1;
        None
    }

    /// Removes the key of index `index`.
    pub(crate) fn remove(&mut self, index: &u32) -> Option<Mkey> {
        self.touch();
        let i = *index as usize;
        let slot = self.pages.get_mut(i / PAGE_SLOTS)?;
        let page = slot.as_mut()?;
        let mut b = page.slots[i % PAGE_SLOTS].take()?;
        page.used -= 1;
        self.len -= 1;
        if page.used == 0 {
            *slot = None;
        }
        let old = std::mem::replace(&mut *b, vacant());
        if self.spare.len() < SPARE_BOXES {
            self.spare.push(b);
        }
        Some(old)
    }

    /// The key of index `index`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, index: &u32) -> Option<&mut Mkey> {
        self.touch();
        let i = *index as usize;
        let page = self.pages.get_mut(i / PAGE_SLOTS)?.as_deref_mut()?;
        page.slots[i % PAGE_SLOTS].as_deref_mut()
    }

    /// Every key, to change, in index order.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Mkey> {
        self.touch();
        self.pages
            .iter_mut()
            .flatten()
            .flat_map(|p| p.slots.iter_mut().flatten().map(|m| &mut **m))
    }

    /// Drops every key.
    pub(crate) fn clear(&mut self) {
        self.touch();
        self.pages.clear();
        self.spare.clear();
        self.len = 0;
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
