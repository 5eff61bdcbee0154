//! Random numbers for mkey variants and initial PSNs (ReDMArk mitigations): the HAL's hardware
//! source when it has one, else SplitMix64 seeded from the clock and mixed with every draw.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::hal::Hal;

/// A SplitMix64 stream (Steele, Lea, Flood: "Fast splittable pseudorandom number generators").
pub(crate) struct Rng {
    state: AtomicU64,
}

impl Rng {
    pub(crate) fn new<H: Hal>(hal: &H) -> Rng {
        let seed = hal
            .random_u64()
            .unwrap_or_else(|| hal.now().as_nanos() as u64 ^ 0x6a09_e667_f3bc_c908);
        Rng {
            state: AtomicU64::new(seed),
        }
    }

    /// 64 random bits: the HAL's source if it has one, else the next SplitMix64 output.
    pub(crate) fn next<H: Hal>(&self, hal: &H) -> u64 {
        if let Some(v) = hal.random_u64() {
            return v;
        }
        let s = self
            .state
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s ^ (hal.now().as_nanos() as u64).rotate_left(32);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
