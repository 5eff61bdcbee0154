//! Recently destroyed keys, kept from coming back at once.

/// A recently destroyed key that must not come back at once (ReDMArk: keys are not recycled
/// right after dereg).
pub(crate) const QUARANTINE: usize = 256;

/// Buckets of [`RecentKeys`]' counting filter (2^[`BUCKET_BITS`]).
const RECENT_BUCKETS: usize = 1 << BUCKET_BITS;

/// Bits of a bucket number.
const BUCKET_BITS: u32 = 13;

/// A bucket count that stays: a bucket that reached it answers "maybe" (scan the ring)
/// for good, so a count never reaches 0 while a key of its bucket is held (no false "not
/// recent"). 255 keys in one bucket take the same key destroyed about 255 times in a row.
const STICKY: u8 = u8::MAX;

/// The last [`QUARANTINE`] destroyed keys, oldest first out, with a counting filter of two
/// probes in front of them (a counting Bloom filter, Fan et al., "Summary cache", 2000):
/// `contains` is two bucket reads for a key that is not there (nearly every key asked
/// about), and a scan of the ring only when both its buckets are in use (with 256 keys in
/// 8192 buckets, about 1 key in 250 that is not there; with 4096 buckets it was 1 in 70,
/// a scan of ~800 instructions that cost a cached registration ~11 on average). Same
/// answers as a scan of the ring every time (`recent_keys_filter_matches_a_scan`). The
/// counts are bytes (8 KiB, as the 4096 two-byte counts were): a count that reaches
/// [`STICKY`] stays there.
pub(crate) struct RecentKeys {
    ring: [u32; QUARANTINE],
    /// Entries in `ring` (the first `len` slots until it fills, then all of them).
    len: usize,
    /// The slot the next key goes to (the oldest key once the ring is full).
    next: usize,
    /// How many probes of the keys of `ring` fall in each bucket (at most 2 *
    /// [`QUARANTINE`]).
    counts: [u8; RECENT_BUCKETS],
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
    #[inline(always)]
    fn bucket(key: u32) -> usize {
        // Fibonacci hashing: the top BUCKET_BITS bits of key * 2^32 / phi.
        (key.wrapping_mul(0x9e37_79b9) >> (32 - BUCKET_BITS)) as usize
    }

    /// The second probe: the top BUCKET_BITS bits of another odd multiplier's product (MurmurHash3's
    /// `fmix32` constant).
    #[inline(always)]
    fn bucket2(key: u32) -> usize {
        (key.wrapping_mul(0x85eb_ca6b) >> (32 - BUCKET_BITS)) as usize
    }

    /// Whether `key` is one of the last [`QUARANTINE`] keys pushed.
    #[inline(always)]
    pub(crate) fn contains(&self, key: u32) -> bool {
        self.count(Self::bucket(key)) != 0 && self.count(Self::bucket2(key)) != 0 && self.scan(key)
    }

    /// Bucket `i`'s count (every bucket number is below [`RECENT_BUCKETS`], the counts'
    /// length).
    #[inline(always)]
    fn count(&self, i: usize) -> u8 {
        self.counts[i]
    }

    /// The ring scan behind two buckets in use.
    #[inline(never)]
    fn scan(&self, key: u32) -> bool {
        self.ring[..self.len].contains(&key)
    }

    /// Records `key`, forgetting the oldest key once [`QUARANTINE`] are held.
    pub(crate) fn push(&mut self, key: u32) {
        if self.len == QUARANTINE {
            let old = self.ring[self.next];
            for i in [Self::bucket(old), Self::bucket2(old)] {
                let b = &mut self.counts[i];
                // A saturated count stays (it no longer knows how many keys it counts).
                if *b != STICKY {
                    *b -= 1;
                }
            }
        } else {
            self.len += 1;
        }
        self.ring[self.next] = key;
        for i in [Self::bucket(key), Self::bucket2(key)] {
            let b = &mut self.counts[i];
            if *b != STICKY {
                *b += 1;
            }
        }
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

    /// With the quarantine full of keys (index << 8 | variant, as mkeys are), a key that is
    /// not there reaches the ring scan rarely: both of its buckets in use about 1 time in
    /// (8192 / 512)^2 = 256; asserted below 1 in 150 over 100,000 keys that are not there
    /// (4096 buckets gave 1 in 64).
    #[test]
    fn absent_keys_rarely_reach_the_scan() {
        let mut r = RecentKeys::default();
        let mut x = 0x9e37_79b9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for _ in 0..QUARANTINE {
            let k = next();
            r.push((k & 0x00ff_ff00) | (k >> 24));
        }
        let (mut absent, mut scanned) = (0u32, 0u32);
        for _ in 0..100_000 {
            let k = next() & 0x00ff_ffff;
            if r.ring.contains(&k) {
                continue;
            }
            absent += 1;
            scanned += (r.count(RecentKeys::bucket(k)) != 0 && r.count(RecentKeys::bucket2(k)) != 0)
                as u32;
        }
        assert!(absent > 99_000);
        assert!(
            scanned * 150 < absent,
            "{scanned} of {absent} absent keys scanned"
        );
    }

    /// A bucket that saturates stays saturated: one key destroyed 300 times in a row fills
    /// its buckets past [`STICKY`], and the answers still follow the ring exactly while it
    /// leaves (recent while one copy is among the last [`QUARANTINE`], not after).
    #[test]
    fn saturated_buckets_stay_and_answers_stay_exact() {
        let mut r = RecentKeys::default();
        let k = 0x1234_5601;
        for _ in 0..300 {
            r.push(k);
        }
        assert_eq!(r.count(RecentKeys::bucket(k)), STICKY);
        assert_eq!(r.count(RecentKeys::bucket2(k)), STICKY);
        let others: Vec<u32> = (1..QUARANTINE as u32).map(|i| (i << 8) | 0x77).collect();
        for &o in &others {
            r.push(o);
            assert!(r.contains(k), "a copy of {k:#x} is still held");
        }
        r.push(0xffff_ff00);
        assert!(!r.contains(k), "{k:#x} left the quarantine");
        assert_eq!(r.count(RecentKeys::bucket(k)), STICKY, "still saturated");
        assert!(others.iter().all(|&o| r.contains(o)));
    }
}
