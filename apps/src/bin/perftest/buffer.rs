//! The one region's layout (perftest's `alloc_ctx` halves, then slots) and the known pattern.

use super::*;

pub(crate) const SEED: u8 = 0x3c;
/// This side's cycle buffer (perftest: the page size) and cache line (check_sys_data).
pub(crate) const CYCLE_BUFFER: u64 = 4096;
pub(crate) const CACHE_LINE: u64 = 64;
/// The most a SEND receiver's slots take (512 + 1 receives of 64 KiB fit; larger messages
/// share slots, as perftest's own receives all land on one address above half the cycle
/// buffer, `ctx_set_recv_wqes`).
pub(crate) const RECV_SLOT_AREA: u64 = 40 << 20;
/// perftest_resources.h `INC`: `size` rounded up to whole cache lines (at least one).
pub(crate) fn inc(size: u64) -> u64 {
    size.div_ceil(CACHE_LINE).max(1) * CACHE_LINE
}

/// The one region, laid out as perftest's (`alloc_ctx`: two halves of
/// `INC(BUFF_SIZE(size, cycle_buffer))`): `[0, half)` is what this side sends or WRITEs from;
/// `[half, 2 half)` is what it announces (`vaddr`), the peer's target; after them, slots for
/// READ destinations, atomic results and receives.
///
/// A SEND tool's receiver gets a slot per receive it keeps posted, and one more
/// (`rx_depth + 1`, [`rdma_checks::recv_ring::RecvRing::exclusive`]), so it can check each
/// message while perftest's `rx_depth` receives stay posted; up to [`RECV_SLOT_AREA`] bytes.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) half: u64,
    pub(crate) slot_area: u64,
}

impl Layout {
    pub(crate) fn new(max_size: u64, verb: Verb, rx_depth: u64) -> Layout {
        let half = inc(max_size.max(CYCLE_BUFFER));
        // WRITE uses no slots.
        let slot_area = match verb {
            Verb::Write => CYCLE_BUFFER,
            Verb::Send => rx_depth
                .saturating_add(1)
                .saturating_mul(inc(max_size))
                .clamp(CYCLE_BUFFER, RECV_SLOT_AREA),
            Verb::Read | Verb::Atomic => (64 * inc(max_size)).clamp(CYCLE_BUFFER, 16 << 20),
        };
        Layout { half, slot_area }
    }
    pub(crate) fn target(&self) -> u64 {
        self.half
    }
    pub(crate) fn len(&self) -> u64 {
        2 * self.half + self.slot_area
    }
    /// How many slots of `size` bytes there are (at most 64).
    pub(crate) fn nslots(&self, size: u64) -> u64 {
        (self.slot_area / inc(size)).clamp(1, 64)
    }
    /// Where the receive slots start.
    pub(crate) fn recv_base(&self) -> u64 {
        2 * self.half
    }
    /// How many receive slots of `size` bytes there are for `rx_depth` receives: one per
    /// receive and one more when they fit, fewer (shared) when they do not.
    pub(crate) fn recv_slots(&self, size: u64, rx_depth: u64) -> u64 {
        (self.slot_area / inc(size)).clamp(1, rx_depth.saturating_add(1))
    }
    /// Offset of slot `k` (modulo the slot count) for `size`-byte messages.
    pub(crate) fn slot(&self, size: u64, k: u64) -> u64 {
        2 * self.half + (k % self.nslots(size)) * inc(size)
    }
}

/// The known pattern has a prime period, so a 64 KiB window of it at any phase is one
/// slice of [`PAT`] (this side's CPU is slow at per-byte work, so fills and checks copy and
/// compare slices).
pub(crate) const PERIOD: usize = 4093;
pub(crate) const CHUNK: usize = 65536;

/// Byte `i` of the known pattern (odd, so never perftest's ib_write_lat zeros).
pub(crate) const fn pat_of(i: usize) -> u8 {
    let j = (i % PERIOD) as u64;
    let x = j.wrapping_mul(31) ^ ((SEED as u64) << 3) ^ (j << 9);
    ((x ^ (x >> 8) ^ (x >> 16)) as u8) | 1
}

pub(crate) static PAT: [u8; CHUNK + PERIOD] = {
    let mut a = [0u8; CHUNK + PERIOD];
    let mut i = 0;
    while i < a.len() {
        a[i] = pat_of(i);
        i += 1;
    }
    a
};

/// The pattern of `[off, off + n)`, `n` at most [`CHUNK`].
pub(crate) fn pat(off: u64, n: usize) -> &'static [u8] {
    let s = (off % PERIOD as u64) as usize;
    &PAT[s..s + n]
}

/// Writes the known pattern over `[off, off + len)`.
pub(crate) fn fill<H: Hal>(mr: &MemoryRegion<H>, off: u64, len: u64) -> Result<(), Error<'static>> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(CHUNK as u64);
        mr.write(at, pat(at, n as usize))
            .map_err(|e| Error::Verbs("write", e))?;
        at += n;
    }
    Ok(())
}

pub(crate) fn read<H: Hal>(
    mr: &MemoryRegion<H>,
    off: u64,
    len: u64,
) -> Result<Vec<u8>, Error<'static>> {
    let mut v = alloc::vec![0u8; len as usize];
    mr.read(off, &mut v).map_err(|e| Error::Verbs("read", e))?;
    Ok(v)
}

/// Walks `[off, off + len)` in chunks: `f(offset, byte)` for each byte.
pub(crate) fn scan<H: Hal>(
    mr: &MemoryRegion<H>,
    off: u64,
    len: u64,
    mut f: impl FnMut(u64, u8),
) -> Result<(), Error<'static>> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(65536);
        let b = read(mr, at, n)?;
        for (i, x) in b.into_iter().enumerate() {
            f(at + i as u64, x);
        }
        at += n;
    }
    Ok(())
}

/// The first byte of `[off, off + len)` that is not the pattern.
pub(crate) fn first_changed<H: Hal>(
    mr: &MemoryRegion<H>,
    off: u64,
    len: u64,
) -> Result<Option<u64>, Error<'static>> {
    let mut at = off;
    let end = off + len;
    while at < end {
        let n = (end - at).min(CHUNK as u64);
        let b = read(mr, at, n)?;
        let p = pat(at, n as usize);
        if b != p {
            let i = b.iter().zip(p).position(|(x, y)| x != y).unwrap_or(0);
            return Ok(Some(at + i as u64));
        }
        at += n;
    }
    Ok(None)
}

pub(crate) fn pattern_u64(off: u64) -> u64 {
    // The driver puts the device in host-endian atomic mode: the word is in CPU byte order.
    u64::from_ne_bytes(pat(off, 8).try_into().unwrap_or([0; 8]))
}
