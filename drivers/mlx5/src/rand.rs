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
}

/// One SipRound on `(v0, v1, v2, v3)`.
macro_rules! sip_round {
    ($v0:ident, $v1:ident, $v2:ident, $v3:ident) => {
        $v0 = $v0.wrapping_add($v1);
        $v1 = $v1.rotate_left(13) ^ $v0;
        $v0 = $v0.rotate_left(32);
        $v2 = $v2.wrapping_add($v3);
        $v3 = $v3.rotate_left(16) ^ $v2;
        $v0 = $v0.wrapping_add($v3);
        $v3 = $v3.rotate_left(21) ^ $v0;
        $v2 = $v2.wrapping_add($v1);
        $v1 = $v1.rotate_left(17) ^ $v2;
        $v2 = $v2.rotate_left(32);
    };
}

/// SipHash-`C`-`D` of the 8-byte little-endian message `m` under key `(k0, k1)` (the
/// reference algorithm: `C` compression rounds per 8-byte block, then the length block
/// `8 << 56`, then `D` finalization rounds).
#[inline(always)]
fn siphash<const C: usize, const D: usize>(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v0 = k0 ^ 0x736f_6d65_7073_6575;
    let mut v1 = k1 ^ 0x646f_7261_6e64_6f6d;
    let mut v2 = k0 ^ 0x6c79_6765_6e65_7261;
    let mut v3 = k1 ^ 0x7465_6462_7974_6573;
    v3 ^= m;
    for _ in 0..C {
        sip_round!(v0, v1, v2, v3);
    }
    v0 ^= m;
    let b = 8u64 << 56;
    v3 ^= b;
    for _ in 0..C {
        sip_round!(v0, v1, v2, v3);
    }
    v0 ^= b;
    v2 ^= 0xff;
    for _ in 0..D {
        sip_round!(v0, v1, v2, v3);
    }
    v0 ^ v1 ^ v2 ^ v3
}

/// SipHash-1-3.
#[inline(always)]
fn siphash13(k0: u64, k1: u64, m: u64) -> u64 {
    siphash::<1, 3>(k0, k1, m)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The round function against core's SipHash-2-4 (`core::hash::SipHasher`, the same
    /// rounds in the 2-4 schedule) for an 8-byte message; then distinct counters give
    /// distinct 1-3 outputs.
    #[test]
    fn siphash_matches_core() {
        #[allow(deprecated)]
        use core::hash::{Hasher, SipHasher};
        // SipHash-2-4 is what core exposes: the same rounds in the 2-4 schedule.
        let siphash24 = siphash::<2, 4>;
        let (k0, k1) = (0x0706_0504_0302_0100u64, 0x0f0e_0d0c_0b0a_0908u64);
        for m in [0u64, 0x0706_0504_0302_0100, u64::MAX, 0x1234_5678_9abc_def0] {
            #[allow(deprecated)]
            let mut h = SipHasher::new_with_keys(k0, k1);
            h.write(&m.to_le_bytes());
            assert_eq!(siphash24(k0, k1, m), h.finish(), "m = {m:#x}");
        }
        // Distinct counters give distinct outputs (a sanity check of the 1-3 schedule).
        let outs: alloc::vec::Vec<u64> = (0..64).map(|n| siphash13(k0, k1, n)).collect();
        for (i, a) in outs.iter().enumerate() {
            assert!(outs[i + 1..].iter().all(|b| b != a));
        }
    }
}
