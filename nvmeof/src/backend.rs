//! The block backend under a namespace, and a thin RAM disk.
//!
//! The core checks every range against [`Backend::size`] before it calls the backend or hands
//! the transport a [`Local::Disk`](crate::exec::Local::Disk): a backend sees only ranges inside
//! itself.
//!
//! A RAM disk is thin ([`ChunkMap`]): its memory is not zeroed at start (64 GiB would hold the
//! appliance's boot for as long as the memset takes). A chunk never written reads as zeros;
//! the first touch of a chunk, by a write or by a read, zeroes it before any byte moves, and
//! Write Zeroes (or deallocation) of whole chunks makes them unwritten again. So the disk
//! serves no byte of what its memory held before, and needs no memory zeroed in advance.

use alloc::vec;
use alloc::vec::Vec;

/// log2 of [`CHUNK`].
pub const CHUNK_SHIFT: u32 = 20;
/// Bytes of a chunk of a thin disk: what its first touch zeroes (1 MiB: about 0.1 ms of
/// memset at 10 GB/s) and what Write Zeroes must cover whole to make unwritten again. One
/// command moves at most [`MAX_TRANSFER`](crate::MAX_TRANSFER), 1 MiB too, so it touches at
/// most two chunks.
pub const CHUNK: u64 = 1 << CHUNK_SHIFT;

/// Why a backend operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendError {
    /// The range is not inside the disk (a core bug if it ever shows).
    OutOfRange,
    /// The medium failed the operation.
    Io,
    /// The device under the disk failed (its driver's error stays with the backend).
    Device,
}

/// A disk: bytes addressed by offset. Logical blocks are the core's business.
pub trait Backend {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Copies `out.len()` bytes at `offset` into `out`.
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError>;
    /// Stores `data` at `offset`; done when it returns (RAM: the bytes are there).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError>;
    /// Zeroes `len` bytes at `offset`.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError>;
    /// Deallocates `len` bytes at `offset`. What they read afterwards is the backend's choice
    /// (the namespace reports nothing in DLFEAT). The default zeroes them.
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.write_zeroes(offset, len)
    }
    /// Makes everything written durable (RAM: nothing to do).
    fn flush(&mut self) -> Result<(), BackendError>;
    /// Readies `len` bytes at `offset` for a transfer straight into or out of the disk's
    /// memory ([`Local::Disk`](crate::exec::Local::Disk)): the core calls it before it hands
    /// the range to the transport, which then moves the bytes without the backend. A thin
    /// disk zeroes the chunks there that were never written. The default: nothing to do.
    fn prepare(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        let _ = (offset, len);
        Ok(())
    }
}

/// Which chunks ([`CHUNK`] bytes; the last one may be shorter) of a thin disk of `size`
/// bytes were written: one bit each (8 KiB for 64 GiB). The disk keeps it beside its memory
/// and asks it before every access; the map never touches the memory itself, its callers
/// zero what it names. A range past the disk's end is refused ([`BackendError::OutOfRange`])
/// before any bit changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkMap {
    words: Vec<u64>,
    size: u64,
}

impl ChunkMap {
    /// A disk of `size` bytes, nothing written.
    pub fn new(size: u64) -> Self {
        let words = size.div_ceil(CHUNK).div_ceil(64);
        ChunkMap {
            words: vec![0; words as usize],
            size,
        }
    }

    /// Chunks written (zeroed on their first touch and not made unwritten since).
    pub fn written(&self) -> u64 {
        self.words.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Whether chunk `c` was written (false past the disk's end).
    #[inline]
    pub fn is_written(&self, c: u64) -> bool {
        self.words
            .get((c >> 6) as usize)
            .is_some_and(|w| w & (1 << (c & 63)) != 0)
    }

    /// Chunk `c`'s bytes: start and end.
    fn bounds(&self, c: u64) -> (u64, u64) {
        let start = c << CHUNK_SHIFT;
        (start, (start + CHUNK).min(self.size))
    }

    /// Before `len` bytes at `offset` are written or read in place: each chunk there never
    /// written is zeroed whole by `zero(start, len)`, then marked written. A range inside
    /// one written chunk (most commands') costs a bit test; the range check is the slow
    /// path's (only a range the caller did not check and that ends inside the last chunk,
    /// written, gets past it, and then nothing is done).
    #[inline]
    pub fn touch(
        &mut self,
        offset: u64,
        len: u64,
        zero: impl FnMut(u64, u64) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let c = offset >> CHUNK_SHIFT;
        if offset.wrapping_add(len).wrapping_sub(1) >> CHUNK_SHIFT == c && self.is_written(c) {
            return Ok(());
        }
        self.touch_chunks(offset, len, zero)
    }

    /// [`ChunkMap::touch`] of a range over several chunks or one unwritten.
    #[inline(never)]
    fn touch_chunks(
        &mut self,
        offset: u64,
        len: u64,
        mut zero: impl FnMut(u64, u64) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => {}
            _ => return Err(BackendError::OutOfRange),
        }
        if len == 0 {
            return Ok(());
        }
        let (first, last) = (offset >> CHUNK_SHIFT, (offset + len - 1) >> CHUNK_SHIFT);
        for c in first..=last {
            if !self.is_written(c) {
                let (start, end) = self.bounds(c);
                zero(start, end - start)?;
                self.words[(c >> 6) as usize] |= 1 << (c & 63);
            }
        }
        Ok(())
    }

    /// Zeroes the bytes of `out`, read from the disk's memory at `offset`, that lie in chunks
    /// never written: what a copy out of the disk returns there.
    pub fn hide_unwritten(&self, offset: u64, out: &mut [u8]) {
        let mut at = 0usize;
        while at < out.len() {
            let pos = offset.saturating_add(at as u64);
            let c = pos >> CHUNK_SHIFT;
            // To the chunk's end (past the disk's: nothing there is written).
            let n = ((c + 1) << CHUNK_SHIFT).wrapping_sub(pos);
            let n = usize::try_from(n).map_or(out.len() - at, |n| n.min(out.len() - at));
            if !self.is_written(c) {
                out[at..at + n].fill(0);
            }
            at += n;
        }
    }

    /// Makes the chunks wholly inside `len` bytes at `offset` unwritten (they read as zeros
    /// again; their memory is left as it is) and returns the rest of the range: at most a
    /// part of one chunk at each end, `(offset, len)`, and only where that chunk is written
    /// (an unwritten one reads as zeros already). Write Zeroes zeroes those parts.
    pub fn unmap(
        &mut self,
        offset: u64,
        len: u64,
    ) -> Result<[Option<(u64, u64)>; 2], BackendError> {
        let mut parts = [None, None];
        let end = match offset.checked_add(len) {
            Some(end) if end <= self.size => end,
            _ => return Err(BackendError::OutOfRange),
        };
        if len == 0 {
            return Ok(parts);
        }
        let (first, last) = (offset >> CHUNK_SHIFT, (end - 1) >> CHUNK_SHIFT);
        for c in first..=last {
            let (start, stop) = self.bounds(c);
            if offset <= start && stop <= end {
                self.words[(c >> 6) as usize] &= !(1 << (c & 63));
            } else if self.is_written(c) {
                let (a, b) = (offset.max(start), end.min(stop));
                parts[usize::from(c != first)] = Some((a, b - a));
            }
        }
        Ok(parts)
    }
}

/// A thin disk in memory: any byte storage (a `Vec<u8>` in tests; the identity-mapped huge
/// pages of the appliance, one memory region for the transport, whose bus address it
/// carries), whatever it holds at start ([`ChunkMap`]).
pub struct RamDisk<M> {
    mem: M,
    bus_addr: u64,
    map: ChunkMap,
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> RamDisk<M> {
    /// A disk over `mem`, which the device sees at `bus_addr` (0 where nothing DMAs). Nothing
    /// of what `mem` holds is ever served: it all reads as zeros until written.
    pub fn new(mem: M, bus_addr: u64) -> Self {
        let map = ChunkMap::new(mem.as_ref().len() as u64);
        RamDisk { mem, bus_addr, map }
    }

    /// The device's address of byte 0: a [`Local::Disk`](crate::exec::Local::Disk) at
    /// `offset` is `bus_addr() + offset`.
    pub fn bus_addr(&self) -> u64 {
        self.bus_addr
    }

    /// The memory as it is: the bytes of a chunk never touched are what `mem` held, not what
    /// the disk serves (zeros). What a transfer of [`Backend::prepare`]'d range moves.
    pub fn bytes(&self) -> &[u8] {
        self.mem.as_ref()
    }

    /// The memory, writable (what an RDMA READ into the disk does, in tests).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.as_mut()
    }

    /// Which chunks were written.
    pub fn chunks(&self) -> &ChunkMap {
        &self.map
    }

    fn range(&self, offset: u64, len: u64) -> Result<core::ops::Range<usize>, BackendError> {
        let size = self.mem.as_ref().len() as u64;
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(offset as usize..end as usize),
            _ => Err(BackendError::OutOfRange),
        }
    }

    /// [`ChunkMap::touch`] over the memory.
    #[inline]
    fn touch(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        let mem = &mut self.mem;
        self.map.touch(offset, len, |at, n| {
            mem.as_mut()[at as usize..(at + n) as usize].fill(0);
            Ok(())
        })
    }
}

impl<M: AsRef<[u8]> + AsMut<[u8]>> Backend for RamDisk<M> {
    fn size(&self) -> u64 {
        self.mem.as_ref().len() as u64
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let r = self.range(offset, out.len() as u64)?;
        out.copy_from_slice(&self.mem.as_ref()[r]);
        self.map.hide_unwritten(offset, out);
        Ok(())
    }

    // inline: the core bench's in-capsule write, 899 instructions inlined, 929 not.
    #[inline]
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let r = self.range(offset, data.len() as u64)?;
        self.touch(offset, data.len() as u64)?;
        self.mem.as_mut()[r].copy_from_slice(data);
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        for (at, n) in self.map.unmap(offset, len)?.into_iter().flatten() {
            self.mem.as_mut()[at as usize..(at + n) as usize].fill(0);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    #[inline]
    fn prepare(&mut self, offset: u64, len: u64) -> Result<(), BackendError> {
        self.touch(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = CHUNK;
    /// What the memory held before the disk: never to be served.
    const OLD: u8 = 0xee;

    /// A disk of three chunks and a short fourth (4 KiB) over memory full of [`OLD`].
    fn disk() -> RamDisk<Vec<u8>> {
        RamDisk::new(vec![OLD; (3 * MIB + 4096) as usize], 0)
    }

    fn read(d: &RamDisk<Vec<u8>>, offset: u64, len: u64) -> Vec<u8> {
        let mut out = vec![0x55; len as usize];
        d.read(offset, &mut out).unwrap();
        out
    }

    fn zeros(b: &[u8]) -> bool {
        b.iter().all(|&x| x == 0)
    }

    #[test]
    fn a_disk_never_written_reads_as_zeros_whatever_its_memory_held() {
        let d = disk();
        assert!(zeros(&read(&d, 0, d.size())));
        assert!(zeros(&read(&d, MIB - 100, 200)));
        // Reading touched nothing: the memory is as it was.
        assert!(d.bytes().iter().all(|&b| b == OLD));
        assert_eq!(d.chunks().written(), 0);
    }

    #[test]
    fn the_first_write_into_a_chunk_zeroes_the_rest_of_it_first() {
        let mut d = disk();
        d.write(MIB + 4096, &[0x5a; 512]).unwrap();
        assert_eq!(d.chunks().written(), 1);
        assert!(d.chunks().is_written(1));
        let c = read(&d, MIB, MIB);
        assert!(zeros(&c[..4096]) && zeros(&c[4096 + 512..]));
        assert!(c[4096..4096 + 512].iter().all(|&b| b == 0x5a));
        // The memory of chunk 1 itself is zeroed around the data; the others are untouched.
        assert!(zeros(&d.bytes()[MIB as usize..(MIB + 4096) as usize]));
        assert!(d.bytes()[..MIB as usize].iter().all(|&b| b == OLD));
        assert!(d.bytes()[2 * MIB as usize..].iter().all(|&b| b == OLD));
        // A second write into the chunk zeroes nothing: the first one's bytes stay.
        d.write(MIB, &[0xa5; 512]).unwrap();
        let c = read(&d, MIB, 8192);
        assert!(c[..512].iter().all(|&b| b == 0xa5));
        assert!(c[4096..4096 + 512].iter().all(|&b| b == 0x5a));
    }

    #[test]
    fn prepare_zeroes_each_chunk_of_a_transfer_once_before_it_moves() {
        let mut d = disk();
        // Across the boundary of chunks 0 and 1: both are zeroed.
        d.prepare(MIB - 512, 1024).unwrap();
        assert_eq!(d.chunks().written(), 2);
        assert!(zeros(&d.bytes()[..2 * MIB as usize]));
        // The transfer (an RDMA READ into the memory) lands; preparing again keeps it.
        d.bytes_mut()[(MIB - 512) as usize..(MIB + 512) as usize].fill(0x77);
        d.prepare(MIB - 512, 1024).unwrap();
        d.prepare(0, 4096).unwrap();
        assert!(read(&d, MIB - 512, 1024).iter().all(|&b| b == 0x77));
        // The short last chunk is zeroed up to the disk's end, not past it.
        d.prepare(3 * MIB, 4096).unwrap();
        assert!(zeros(&d.bytes()[3 * MIB as usize..]));
        assert_eq!(d.chunks().written(), 3);
    }

    #[test]
    fn write_zeroes_makes_whole_chunks_unwritten_and_zeroes_the_rest() {
        let mut d = disk();
        for c in 0..3 {
            d.write(c * MIB, &vec![0x11; MIB as usize]).unwrap();
        }
        // From 512 bytes into chunk 0 to 512 bytes into chunk 2: chunk 1 whole.
        d.write_zeroes(512, 2 * MIB).unwrap();
        assert_eq!(d.chunks().written(), 2);
        assert!(!d.chunks().is_written(1));
        // Chunk 1's memory keeps its bytes, but they are not served.
        assert!(d.bytes()[MIB as usize..2 * MIB as usize]
            .iter()
            .all(|&b| b == 0x11));
        let all = read(&d, 0, 3 * MIB);
        assert!(all[..512].iter().all(|&b| b == 0x11));
        assert!(zeros(&all[512..(2 * MIB + 512) as usize]));
        assert!(all[(2 * MIB + 512) as usize..].iter().all(|&b| b == 0x11));
        // Written again, chunk 1 is zeroed first: nothing of before comes back.
        d.write(MIB + 8, &[0x22; 8]).unwrap();
        let c = read(&d, MIB, MIB);
        assert!(zeros(&c[..8]) && zeros(&c[16..]));
        assert!(c[8..16].iter().all(|&b| b == 0x22));
        // Deallocation (RamDisk's default: write zeroes) of everything, the short last chunk
        // counted whole.
        d.deallocate(0, d.size()).unwrap();
        assert_eq!(d.chunks().written(), 0);
        assert!(zeros(&read(&d, 0, d.size())));
    }

    #[test]
    fn unmap_names_only_the_parts_of_written_chunks() {
        let mut m = ChunkMap::new(3 * MIB + 4096);
        let nothing = |_: u64, _: u64| Ok(());
        // Nothing written: nothing to zero.
        assert_eq!(m.unmap(100, 2 * MIB), Ok([None, None]));
        m.touch(0, 3 * MIB + 4096, nothing).unwrap();
        assert_eq!(m.written(), 4);
        // Inside one chunk: one part.
        assert_eq!(m.unmap(MIB + 10, 20), Ok([Some((MIB + 10, 20)), None]));
        // Over a boundary: a part of each.
        assert_eq!(
            m.unmap(MIB - 10, 30),
            Ok([Some((MIB - 10, 10)), Some((MIB, 20))])
        );
        assert_eq!(m.written(), 4);
        // The short last chunk and the whole of chunk 2.
        assert_eq!(m.unmap(2 * MIB, MIB + 4096), Ok([None, None]));
        assert_eq!(m.written(), 2);
        assert_eq!(m.unmap(0, 0), Ok([None, None]));
        // Past the end: refused, nothing changed.
        assert_eq!(m.unmap(3 * MIB, 8192), Err(BackendError::OutOfRange));
        assert_eq!(m.unmap(u64::MAX, 2), Err(BackendError::OutOfRange));
        assert_eq!(m.written(), 2);
        let mut out = [0x55u8; 64];
        m.hide_unwritten(u64::MAX - 8, &mut out);
        assert!(out.iter().all(|&b| b == 0));
    }

    #[test]
    fn ranges_outside_the_disk_are_refused_and_touch_nothing() {
        let mut d = disk();
        let size = d.size();
        assert_eq!(
            d.write(size - 256, &[1; 512]),
            Err(BackendError::OutOfRange)
        );
        assert_eq!(d.prepare(size - 256, 512), Err(BackendError::OutOfRange));
        assert_eq!(d.prepare(u64::MAX - 8, 16), Err(BackendError::OutOfRange));
        assert_eq!(d.write_zeroes(size, 1), Err(BackendError::OutOfRange));
        let mut out = [0u8; 16];
        assert_eq!(d.read(size - 8, &mut out), Err(BackendError::OutOfRange));
        assert_eq!(d.chunks().written(), 0);
        assert!(d.bytes().iter().all(|&b| b == OLD));
        // Empty ranges, at the end too.
        d.prepare(size, 0).unwrap();
        d.write(size, &[]).unwrap();
        assert_eq!(d.chunks().written(), 0);
    }
}
