//! Recently destroyed keys, kept from coming back at once.

/// A recently destroyed key that must not come back at once (ReDMArk: keys are not recycled
/// right after dereg).
pub(crate) const QUARANTINE: usize = 256;

/// Buckets of [`RecentKeys`]' counting filter.
const RECENT_BUCKETS: usize = 4096;

/// The last [`QUARANTINE`] destroyed keys, oldest first out, with a counting filter of two
/// probes in front of them (a counting Bloom filter, Fan et al., "Summary cache", 2000):
/// `contains` is two bucket reads for a key that is not there (nearly every key asked
/// about), and a scan of the ring only when both its buckets are in use (with 256 keys in
/// 4096 buckets, about 1 key in 70 that is not there; one probe: 1 in 16). Same answers as
/// a scan of the ring every time (`recent_keys_filter_matches_a_scan`).
pub(crate) struct RecentKeys {
    ring: [u32; QUARANTINE],
    /// Entries in `ring` (the first `len` slots until it fills, then all of them).
    len: usize,
    /// The slot the next key goes to (the oldest key once the ring is full).
    next: usize,
    /// How many probes of the keys of `ring` fall in each bucket (at most 2 *
    /// [`QUARANTINE`]).
    counts: [u16; RECENT_BUCKETS],
}

impl Default for RecentKeys {
    fn default() -> Self {
        RecentKeys {
            ring: [0; QUARANTINE],
            len: 0,
            next: 0,
            counts: [0; RECENT_BUCKETS],
        }
    }
}

impl RecentKeys {
    #[inline]
    fn bucket(key: u32) -> usize {
        // Fibonacci hashing: the top 12 bits of key * 2^32 / phi.
        (key.wrapping_mul(0x9e37_79b9) >> 20) as usize
    }

    /// The second probe: the top 12 bits of another odd multiplier's product (MurmurHash3's
    /// `fmix32` constant).
    #[inline]
    fn bucket2(key: u32) -> usize {
        (key.wrapping_mul(0x85eb_ca6b) >> 20) as usize
    }

    /// Whether `key` is one of the last [`QUARANTINE`] keys pushed.
    #[inline]
    pub(crate) fn contains(&self, key: u32) -> bool {
        self.counts[Self::bucket(key)] != 0
            && self.counts[Self::bucket2(key)] != 0
            && self.scan(key)
    }

    /// The ring scan behind two buckets in use: eight keys compared per step without an
    /// early exit, which the compiler turns into vector compares (about a sixth of the
    /// instructions of `contains`, which stops at the first match and compares one key at a
    /// time; a scan is ~1 in 70 lookups of a key that is not there).
    #[inline(never)]
    fn scan(&self, key: u32) -> bool {
        let ring = &self.ring[..self.len];
        let chunks = ring.chunks_exact(8);
        let tail = chunks.remainder().contains(&key);
        chunks.fold(tail, |hit, c| c.iter().fold(hit, |h, &k| h | (k == key)))
    }

    /// Records `key`, forgetting the oldest key once [`QUARANTINE`] are held.
    pub(crate) fn push(&mut self, key: u32) {
        if self.len == QUARANTINE {
            let old = self.ring[self.next];
            for i in [Self::bucket(old), Self::bucket2(old)] {
                let b = &mut self.counts[i];
                *b = b.saturating_sub(1);
            }
        } else {
            self.len += 1;
        }
        self.ring[self.next] = key;
        self.counts[Self::bucket(key)] += 1;
        self.counts[Self::bucket2(key)] += 1;
        self.next = (self.next + 1) % QUARANTINE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// The counting filter answers as a scan of the last QUARANTINE keys does, across
    /// wrap-around and with keys that share buckets.
    #[test]
    fn recent_keys_filter_matches_a_scan() {
        let mut r = RecentKeys::default();
        let mut all = Vec::new();
        let mut x = 0x1234_5678u32;
        for i in 0..3000u32 {
            // Every third key repeats an older one; the others are pseudo-random.
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let k = if i % 3 == 0 && !all.is_empty() {
                all[(x as usize) % all.len()]
            } else {
                x >> 4
            };
            r.push(k);
            all.push(k);
            let window = &all[all.len().saturating_sub(QUARANTINE)..];
            for probe in [k, k ^ 1, x, all[(x as usize >> 7) % all.len()]] {
                assert_eq!(r.contains(probe), window.contains(&probe), "key {probe:#x}");
            }
        }
    }

    /// The scan answers as `contains` does for every ring length (whole chunks of eight and
    /// a remainder), for keys at the first, a middle and the last slot, and for absent keys.
    #[test]
    fn scan_matches_contains_at_every_length() {
        let mut r = RecentKeys::default();
        for n in 0..QUARANTINE as u32 + 20 {
            r.push(0x100 + n);
            let held = &r.ring[..r.len];
            for probe in [
                0x100,
                0x100 + n,
                0x100 + n / 2,
                0x100 + n + 1,
                0,
                0xffff_ffff,
            ] {
                assert_eq!(
                    r.scan(probe),
                    held.contains(&probe),
                    "n {n}, key {probe:#x}"
                );
            }
        }
    }
}
