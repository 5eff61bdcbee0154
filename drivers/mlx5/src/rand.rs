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

/// Draws between two foldings of the clock into the key (one clock read per this many
/// draws instead of one per draw).
const REKEY_EVERY: u64 = 64;

/// SipHash-1-3 of a counter under a secret key.
pub(crate) struct Rng {
    k0: AtomicU64,
    k1: AtomicU64,
    n: AtomicU64,
    /// The unused high half of the last 64-bit output [`Rng::next32`] split, with bit 32 set
    /// (0: none). Taken by a swap, so no half is ever handed out twice.
    spare: AtomicU64,
}

/// SipHash-1-3 of the 8-byte little-endian message `m` under key `(k0, k1)`: the `siphasher`
/// crate (no_std). Fed through `Hasher::write_u64` on a fresh hasher, it inlines to the
/// rounds of that one block and of the length block, as fast as the hand-rolled rounds it
/// replaces (the one-shot `hash(&[u8])` was not inlined: about 30 instructions more per
/// draw); the same outputs (checked against them when it replaced them).
#[inline(always)]
fn siphash13(k0: u64, k1: u64, m: u64) -> u64 {
    use core::hash::Hasher;
    let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    h.write_u64(m);
    h.finish()
}

impl Rng {
    pub(crate) fn new<H: Hal>(hal: &H) -> Rng {
        let r = Rng {
            k0: AtomicU64::new(0),
            k1: AtomicU64::new(0),
            n: AtomicU64::new(0),
            spare: AtomicU64::new(0),
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

    /// 32 random bits: the two halves of one [`Rng::next`] output serve two calls (a small
    /// registration needs 32 bits; one keyed-function evaluation costs about 120
    /// instructions). Each half is used once; the halves of a pseudorandom output are as
    /// independent of each other as two outputs are (whoever does not know the key cannot
    /// tell any of its bits from random), so what one call's bits reveal (a key's variant and
    /// index) tells nothing of the other's.
    pub(crate) fn next32<H: Hal>(&self, hal: &H) -> u32 {
        let s = self.spare.swap(0, Ordering::Relaxed);
        if s != 0 {
            return s as u32;
        }
        let v = self.next(hal);
        self.spare.store((v >> 32) | 1 << 32, Ordering::Relaxed);
        v as u32
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

    /// [`Rng::next32`] hands out the low then the high half of one 64-bit output, each once,
    /// and only then evaluates the function again.
    #[test]
    fn next32_splits_one_output_into_two_unused_halves() {
        let hal = crate::test_hal::TestHal(crate::test_hal::SimHal::new());
        let r = Rng::new(&hal);
        let (k0, k1) = (r.k0.load(Ordering::Relaxed), r.k1.load(Ordering::Relaxed));
        for n in 0..8u64 {
            let v = siphash13(k0, k1, n);
            assert_eq!(r.next32(&hal), v as u32, "draw {n}, low half");
            assert_eq!(r.next32(&hal), (v >> 32) as u32, "draw {n}, high half");
        }
        assert_eq!(
            r.n.load(Ordering::Relaxed),
            8,
            "one evaluation per two halves"
        );
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
}
