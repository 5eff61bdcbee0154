//! A translation's page addresses, held in place for small regions.

use alloc::vec::Vec;

/// Entries held without a heap allocation ([`Entries`]): a small region's one or two pages.
const INLINE_ENTRIES: usize = 2;

/// A translation's page addresses: up to `INLINE_ENTRIES` (2) in place (a small region's
/// registration allocates nothing for them), more in a `Vec`. Reads as a `[u64]`.
#[derive(Clone)]
pub struct Entries(Repr);

#[derive(Clone)]
enum Repr {
    Inline { n: u8, e: [u64; INLINE_ENTRIES] },
    Heap(Vec<u64>),
}

impl Entries {
    /// Room for `n` entries.
    pub fn with_capacity(n: usize) -> Entries {
        if n <= INLINE_ENTRIES {
            Entries(Repr::Inline {
                n: 0,
                e: [0; INLINE_ENTRIES],
            })
        } else {
            Entries(Repr::Heap(Vec::with_capacity(n)))
        }
    }

    /// One entry, in place.
    #[inline]
    pub fn one(x: u64) -> Entries {
        Entries(Repr::Inline { n: 1, e: [x, 0] })
    }

    /// Makes this the one entry `x` (in place; a heap list is dropped).
    #[inline]
    pub fn set_one(&mut self, x: u64) {
        match &mut self.0 {
            Repr::Inline { n, e } => {
                *n = 1;
                e[0] = x;
            }
            Repr::Heap(_) => *self = Entries::one(x),
        }
    }

    /// Appends `x` (moving to the heap past `INLINE_ENTRIES` (2)).
    pub fn push(&mut self, x: u64) {
        match &mut self.0 {
            Repr::Inline { n, e } => {
                if let Some(d) = e.get_mut(*n as usize) {
                    *d = x;
                    *n += 1;
                } else {
                    let mut v = Vec::with_capacity(INLINE_ENTRIES * 2);
                    v.extend_from_slice(e);
                    v.push(x);
                    self.0 = Repr::Heap(v);
                }
            }
            Repr::Heap(v) => v.push(x),
        }
    }
}

impl Default for Entries {
    fn default() -> Entries {
        Entries::with_capacity(0)
    }
}

impl core::ops::Deref for Entries {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        match &self.0 {
            Repr::Inline { n, e } => e.get(..*n as usize).unwrap_or(&[]),
            Repr::Heap(v) => v,
        }
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = &'a u64;
    type IntoIter = core::slice::Iter<'a, u64>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<u64>> for Entries {
    fn from(v: Vec<u64>) -> Entries {
        if v.len() <= INLINE_ENTRIES {
            v.into_iter().collect()
        } else {
            Entries(Repr::Heap(v))
        }
    }
}

impl FromIterator<u64> for Entries {
    fn from_iter<I: IntoIterator<Item = u64>>(it: I) -> Entries {
        let it = it.into_iter();
        let mut e = Entries::with_capacity(it.size_hint().0);
        for x in it {
            e.push(x);
        }
        e
    }
}

impl core::fmt::Debug for Entries {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Entries {
    fn eq(&self, o: &Entries) -> bool {
        **self == **o
    }
}

impl Eq for Entries {}

impl PartialEq<Vec<u64>> for Entries {
    fn eq(&self, o: &Vec<u64>) -> bool {
        **self == **o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Entries` holds one or two pages in place and moves to the heap with the third,
    /// keeping order; it reads, compares and clones as the list it holds.
    #[test]
    fn entries_inline_then_heap() {
        let mut e = Entries::with_capacity(0);
        assert!(e.is_empty());
        for (i, x) in [0x1000u64, 0x3000, 0x2000, 0x9000].into_iter().enumerate() {
            e.push(x);
            assert_eq!(e.len(), i + 1);
            assert_eq!(matches!(e.0, Repr::Inline { .. }), i < INLINE_ENTRIES);
        }
        assert_eq!(e, alloc::vec![0x1000, 0x3000, 0x2000, 0x9000]);
        assert_eq!(e.clone(), e);
        let one: Entries = alloc::vec![7u64].into();
        assert!(matches!(one.0, Repr::Inline { n: 1, .. }));
        assert_eq!(&one[..], &[7]);
        assert_eq!(Entries::one(7), one);
        let mut m: Entries = (0..5u64).collect();
        m.set_one(9);
        assert_eq!(
            (&m[..], matches!(m.0, Repr::Inline { n: 1, .. })),
            (&[9][..], true)
        );
        let mut two: Entries = alloc::vec![1u64, 2].into();
        two.set_one(3);
        assert_eq!(&two[..], &[3]);
        assert!(matches!(Entries::one(7).0, Repr::Inline { n: 1, .. }));
        let many: Entries = (0..5u64).collect();
        assert_eq!(many.iter().sum::<u64>(), 10);
        assert_ne!(many, Entries::default());
    }
}
