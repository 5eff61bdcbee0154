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

/// ChaCha double rounds per block of a [`Stream`]: 4, i.e. ChaCha8 (Bernstein, "ChaCha, a
/// variant of Salsa20", 2008; the round function and block layout are RFC 8439 section 2.3's,
/// with the original 64-bit block counter and 64-bit nonce in words 12 to 15). Eight rounds
/// keep a wide margin over the best published attacks, which reach seven (Aumasson, "Too
/// Much Crypto", 2019, proposes ChaCha8 as enough); whoever does not know the key cannot tell
/// the words from random, as with [`Rng`]'s keyed function.
const STREAM_DOUBLE_ROUNDS: usize = 4;

/// Blocks a [`Stream`] produces under one key before it takes a new one from [`Rng`] (which
/// folds the clock into its own key, or reads the HAL's hardware source).
const STREAM_REKEY_BLOCKS: u64 = 16;

/// Words of a ChaCha block.
const BLOCK_WORDS: usize = 16;

/// The ChaCha block of `key` with words 12 to 15 `iv`, after `double_rounds` double rounds
/// (RFC 8439 section 2.3: "expand 32-byte k", the key, then `iv`; column then diagonal
/// quarter rounds; the input added back).
#[inline(always)]
fn chacha_block(key: &[u32; 8], iv: [u32; 4], double_rounds: usize) -> [u32; BLOCK_WORDS] {
    #[inline(always)]
    fn qr(x: &mut [u32; BLOCK_WORDS], a: usize, b: usize, c: usize, d: usize) {
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(16);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(12);
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(8);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(7);
    }
    let input = [
        0x6170_7865,
        0x3320_646e,
        0x7962_2d32,
        0x6b20_6574,
        key[0],
        key[1],
        key[2],
        key[3],
        key[4],
        key[5],
        key[6],
        key[7],
        iv[0],
        iv[1],
        iv[2],
        iv[3],
    ];
    let mut x = input;
    for _ in 0..double_rounds {
        qr(&mut x, 0, 4, 8, 12);
        qr(&mut x, 1, 5, 9, 13);
        qr(&mut x, 2, 6, 10, 14);
        qr(&mut x, 3, 7, 11, 15);
        qr(&mut x, 0, 5, 10, 15);
        qr(&mut x, 1, 6, 11, 12);
        qr(&mut x, 2, 7, 8, 13);
        qr(&mut x, 3, 4, 9, 14);
    }
    for (w, i) in x.iter_mut().zip(input) {
        *w = w.wrapping_add(i);
    }
    x
}

/// 32-bit random words for a caller that already holds a lock (the mkey cache's
/// registrations, under the UMR lock): the words of ChaCha8 blocks ([`STREAM_DOUBLE_ROUNDS`])
/// under a key drawn from [`Rng`], a new key every [`STREAM_REKEY_BLOCKS`] blocks. One block
/// serves 16 draws, about half of what 32 bits of [`Rng::next`] cost; no atomics (the
/// owner's lock orders the draws). Each word is handed out once.
pub(crate) struct Stream {
    key: [u32; 8],
    /// Blocks made under all keys so far (the block counter, words 12 and 13).
    blocks: u64,
    buf: [u32; BLOCK_WORDS],
    /// The next unused word of `buf` (`BLOCK_WORDS`: none left).
    at: usize,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            key: [0; 8],
            blocks: 0,
            buf: [0; BLOCK_WORDS],
            at: BLOCK_WORDS,
        }
    }
}

impl Stream {
    /// The next 32 random bits (a new block, and first a new key from `rng` when due, once
    /// the block's words are used up).
    #[inline(always)]
    pub(crate) fn next32<H: Hal>(&mut self, rng: &Rng, hal: &H) -> u32 {
        if self.at >= BLOCK_WORDS {
            self.refill(rng, hal);
        }
        let v = self.buf.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        v
    }

    #[inline(never)]
    fn refill<H: Hal>(&mut self, rng: &Rng, hal: &H) {
        if self.blocks.is_multiple_of(STREAM_REKEY_BLOCKS) {
            for pair in self.key.chunks_exact_mut(2) {
                let v = rng.next(hal);
                pair[0] = v as u32;
                pair[1] = (v >> 32) as u32;
            }
        }
        let b = self.blocks;
        self.buf = chacha_block(
            &self.key,
            [b as u32, (b >> 32) as u32, 0, 0],
            STREAM_DOUBLE_ROUNDS,
        );
        self.blocks = b.wrapping_add(1);
        self.at = 0;
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

    /// The block function against RFC 8439 section 2.3.2's test vector (ChaCha20: 10 double
    /// rounds; key 00 01 .. 1f, block count 1, nonce 00 00 00 09 00 00 00 4a 00 00 00 00, as
    /// little-endian words), so the round function and layout are ChaCha's; the stream's
    /// blocks are the same function at 4 double rounds.
    #[test]
    fn chacha_block_matches_rfc8439() {
        let mut key = [0u32; 8];
        for (i, w) in key.iter_mut().enumerate() {
            let b = (4 * i) as u32;
            *w = u32::from_le_bytes([b as u8, (b + 1) as u8, (b + 2) as u8, (b + 3) as u8]);
        }
        let got = chacha_block(&key, [1, 0x0900_0000, 0x4a00_0000, 0], 10);
        let want: [u32; 16] = [
            0xe4e7_f110,
            0x1559_3bd1,
            0x1fdd_0f50,
            0xc471_20a3,
            0xc7f4_d1c7,
            0x0368_c033,
            0x9aaa_2204,
            0x4e6c_d4c3,
            0x4664_82d2,
            0x09aa_9f07,
            0x05d7_c214,
            0xa202_8bd9,
            0xd19c_12b5,
            0xb94e_16de,
            0xe883_d0cb,
            0x4e3c_50a2,
        ];
        assert_eq!(got, want);
        assert_ne!(
            chacha_block(&key, [1, 0x0900_0000, 0x4a00_0000, 0], 4),
            want
        );
    }

    /// A [`Stream`] hands out the words of ChaCha8 blocks 0, 1, ... in order, each once,
    /// under a key of four [`Rng`] draws, and takes four new draws as its key every
    /// [`STREAM_REKEY_BLOCKS`] blocks (the counter goes on).
    #[test]
    fn stream_is_chacha8_blocks_under_rng_keys() {
        let hal = crate::test_hal::TestHal(crate::test_hal::SimHal::new());
        let r = Rng::new(&hal);
        let (k0, k1) = (r.k0.load(Ordering::Relaxed), r.k1.load(Ordering::Relaxed));
        let key_at = |n: u64| {
            let mut k = [0u32; 8];
            for (i, pair) in k.chunks_exact_mut(2).enumerate() {
                let v = siphash13(k0, k1, n + i as u64);
                pair[0] = v as u32;
                pair[1] = (v >> 32) as u32;
            }
            k
        };
        let mut s = Stream::default();
        for blk in 0..STREAM_REKEY_BLOCKS + 2 {
            let key = key_at(4 * (blk / STREAM_REKEY_BLOCKS));
            let want = chacha_block(&key, [blk as u32, 0, 0, 0], STREAM_DOUBLE_ROUNDS);
            for (i, w) in want.iter().enumerate() {
                assert_eq!(s.next32(&r, &hal), *w, "block {blk}, word {i}");
            }
        }
        assert_eq!(r.n.load(Ordering::Relaxed), 8, "two keys of four draws");
    }
}
