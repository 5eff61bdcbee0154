//! Random numbers for mkey variants and initial PSNs (ReDMArk mitigations): the HAL's hardware
//! source when it has one, else a keyed pseudorandom function of a draw counter.
//!
//! Without a hardware source, draw `n` is SipHash-1-3 of `n` under a 128-bit key (Aumasson,
//! Bernstein: "SipHash: a fast short-input PRF"; the 1-3 variant is what Rust's std hashes
//! with): whoever does not know the key cannot tell the outputs from random, so seeing
//! earlier keys (or variants) does not tell the next one. The key is seeded once from the
//! clock and the generator's own address, and every [`REKEY_EVERY`] draws the clock is
//! folded into it again (fresh timing entropy, as the previous design mixed the clock into
//! every draw, at one clock read per draw).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::hal::Hal;
use rand_chacha::rand_core::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// Draws between two foldings of the clock into the key (one clock read per this many
/// draws instead of one per draw).
const REKEY_EVERY: u64 = 64;

/// SipHash-1-3 of a counter under a secret key.
pub(crate) struct Rng {
    k0: AtomicU64,
    k1: AtomicU64,
    n: AtomicU64,
}

/// SipHash-1-3 of the 8-byte little-endian message `m` under key `(k0, k1)`: the `siphasher`
/// crate (no_std), fed through `Hasher::write_u64` on a fresh hasher: the rounds of that one
/// block and of the length block; the same outputs as the hand-rolled rounds it replaced
/// (checked against them when it replaced them).
#[inline]
fn siphash13(k0: u64, k1: u64, m: u64) -> u64 {
    use core::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    // `write_u64`, not the one-shot `hash(&[u8])`: about 30 instructions fewer per draw.
    h.write_u64(m);
    h.finish()
}

impl Rng {
    pub(crate) fn new<H: Hal>(hal: &H) -> Rng {
        let r = Rng {
            k0: AtomicU64::new(0),
            k1: AtomicU64::new(0),
            n: AtomicU64::new(0),
        };
        let (k0, k1) = match (hal.random_u64(), hal.random_u64()) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                let t = hal.now().as_nanos() as u64;
                // The stack address adds what ASLR randomized (none in a unikernel).
                let at = &r as *const Rng as u64;
                (
                    siphash13(t, at, 0x6a09_e667_f3bc_c908),
                    siphash13(at, t, 0xbb67_ae85_84ca_a73b),
                )
            }
        };
        r.k0.store(k0, Ordering::Relaxed);
        r.k1.store(k1, Ordering::Relaxed);
        r
    }

    /// 64 random bits: the HAL's source if it has one, else the next output of the keyed
    /// function.
    pub(crate) fn next<H: Hal>(&self, hal: &H) -> u64 {
        if let Some(v) = hal.random_u64() {
            return v;
        }
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        let k0 = self.k0.load(Ordering::Relaxed);
        let k1 = self.k1.load(Ordering::Relaxed);
        if n % REKEY_EVERY == REKEY_EVERY - 1 {
            self.rekey(hal, k0, k1, n);
        }
        siphash13(k0, k1, n)
    }

    /// Fresh entropy: the clock, through the function, into the key (a racing draw sees the
    /// old or the new key; either is secret).
    #[cold]
    fn rekey<H: Hal>(&self, hal: &H, k0: u64, k1: u64, n: u64) {
        let t = hal.now().as_nanos() as u64;
        self.k1
            .store(siphash13(k0, k1, t ^ n.rotate_left(32)), Ordering::Relaxed);
    }
}

/// Words a [`Stream`] hands out under one key before it takes a new one from [`Rng`] (which
/// folds the clock into its own key, or reads the HAL's hardware source): 16 ChaCha blocks.
const STREAM_REKEY_WORDS: u32 = 256;

/// 32-bit random words for a caller that already holds a lock (the mkey cache's
/// registrations, under the UMR lock): a ChaCha8 stream (`rand_chacha::ChaCha8Rng`; eight
/// rounds keep a wide margin over the best published attacks, which reach seven: Aumasson,
/// "Too Much Crypto", 2019) keyed by four [`Rng`] draws, rekeyed every
/// [`STREAM_REKEY_WORDS`] words. Whoever does not know the key cannot tell the words from
/// random, as with [`Rng`]'s keyed function; a word costs a fraction of an [`Rng::next`]
/// draw, and takes no atomics (the owner's lock orders the draws). Each word is handed out
/// once.
pub(crate) struct Stream {
    chacha: ChaCha8Rng,
    /// Words left under the current key (0: take a new key first).
    left: u32,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            chacha: ChaCha8Rng::from_seed([0; 32]),
            left: 0,
        }
    }
}

impl Stream {
    /// The next 32 random bits (first a new key from `rng`, when due).
    #[inline]
    pub(crate) fn next32<H: Hal>(&mut self, rng: &Rng, hal: &H) -> u32 {
        if self.left == 0 {
            self.rekey(rng, hal);
        }
        self.left -= 1;
        self.chacha.next_u32()
    }

    #[inline(never)]
    fn rekey<H: Hal>(&mut self, rng: &Rng, hal: &H) {
        self.chacha = ChaCha8Rng::from_seed(stream_seed(rng, hal));
        self.left = STREAM_REKEY_WORDS;
    }
}

/// A ChaCha key of four [`Rng`] draws, each draw's eight bytes little-endian, in order.
fn stream_seed<H: Hal>(rng: &Rng, hal: &H) -> [u8; 32] {
    let mut seed = [0u8; 32];
    for part in seed.chunks_exact_mut(8) {
        part.copy_from_slice(&rng.next(hal).to_le_bytes());
    }
    seed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message encoding and key order against core's reference SipHash (2-4, the only
    /// schedule core exposes, `core::hash::SipHasher`): the crate's 2-4 hasher fed the way
    /// [`siphash13`] feeds its 1-3 one (the counter's 8 little-endian bytes, `k0` then `k1`)
    /// gives core's value; then the 1-3 outputs of distinct counters are distinct, differ
    /// from the 2-4 ones and depend on each key half.
    #[test]
    fn siphash_matches_core_and_the_schedule_is_1_3() {
        #[allow(deprecated)]
        use core::hash::{Hasher, SipHasher};
        let (k0, k1) = (0x0706_0504_0302_0100u64, 0x0f0e_0d0c_0b0a_0908u64);
        for m in [0u64, 0x0706_0504_0302_0100, u64::MAX, 0x1234_5678_9abc_def0] {
            #[allow(deprecated)]
            let mut h = SipHasher::new_with_keys(k0, k1);
            h.write(&m.to_le_bytes());
            let ours24 = siphasher::sip::SipHasher24::new_with_keys(k0, k1).hash(&m.to_le_bytes());
            assert_eq!(ours24, h.finish(), "m = {m:#x}");
            assert_ne!(siphash13(k0, k1, m), ours24, "1-3 is not 2-4");
            assert_ne!(siphash13(k0 ^ 1, k1, m), siphash13(k0, k1, m));
            assert_ne!(siphash13(k0, k1 ^ 1, m), siphash13(k0, k1, m));
        }
        // Distinct counters give distinct outputs.
        let outs: alloc::vec::Vec<u64> = (0..64).map(|n| siphash13(k0, k1, n)).collect();
        for (i, a) in outs.iter().enumerate() {
            assert!(outs[i + 1..].iter().all(|b| b != a));
        }
    }

    /// A HAL without a random source (the test HAL with nothing scripted): draw `n` is
    /// SipHash-1-3 of `n` under the generator's key (seeded from the clock and the
    /// generator's address).
    #[test]
    fn draws_are_the_keyed_function_of_the_counter() {
        let hal = crate::test_hal::TestHal(crate::test_hal::SimHal::new());
        let r = Rng::new(&hal);
        let (k0, k1) = (r.k0.load(Ordering::Relaxed), r.k1.load(Ordering::Relaxed));
        for n in 0..REKEY_EVERY - 1 {
            assert_eq!(r.next(&hal), siphash13(k0, k1, n), "draw {n}");
        }
    }

    /// A [`Stream`] hands out the words of ChaCha8 (`rand_chacha`) under a key of four
    /// [`Rng`] draws, each once and in order, and takes four new draws as its key every
    /// [`STREAM_REKEY_WORDS`] words.
    #[test]
    fn stream_is_chacha8_under_rng_keys() {
        let hal = crate::test_hal::TestHal(crate::test_hal::SimHal::new());
        let r = Rng::new(&hal);
        let (k0, k1) = (r.k0.load(Ordering::Relaxed), r.k1.load(Ordering::Relaxed));
        let seed_at = |n: u64| {
            let mut seed = [0u8; 32];
            for (i, part) in seed.chunks_exact_mut(8).enumerate() {
                part.copy_from_slice(&siphash13(k0, k1, n + i as u64).to_le_bytes());
            }
            seed
        };
        let mut s = Stream::default();
        let mut want = ChaCha8Rng::from_seed(seed_at(0));
        for i in 0..2 * STREAM_REKEY_WORDS + 3 {
            if i > 0 && i % STREAM_REKEY_WORDS == 0 {
                want = ChaCha8Rng::from_seed(seed_at(4 * u64::from(i / STREAM_REKEY_WORDS)));
            }
            let w = s.next32(&r, &hal);
            assert_eq!(w, want.next_u32(), "word {i}");
        }
        assert_eq!(r.n.load(Ordering::Relaxed), 12, "three keys of four draws");
    }
}
