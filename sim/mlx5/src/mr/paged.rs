use mlx5_prm::pages;

use super::{page_ranges, MAX_MTT_PAGE_SHIFT};
use crate::memory::{DmaError, GuestMemory};

/// Why a `pas[]` description was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasError {
    /// `log_page_size` makes a page larger than 2^31 bytes (outside the 5-bit field's sane use).
    BadPageSize,
    /// Fewer `pas[]` entries than the buffer needs.
    TooFewPages,
    /// A page address is not aligned to the page size.
    Misaligned,
}

/// A queue buffer described by page addresses (`pas[]` of CREATE_CQ / CREATE_QP), with the
/// `log_page_size` RELATIVE to 4 KiB (Linux ib/qp.c `_create_kernel_qp`) and a quantized
/// `page_offset` in units of `page_size / 64` (Linux ib/mem.c
/// `__mlx5_umem_find_best_quantized_pgoff`).
#[derive(Clone, Debug, Default)]
pub struct PagedBuffer {
    pages: Vec<u64>,
    page_shift: u32,
    /// Byte offset of the buffer start inside the first page.
    offset: u64,
    /// Buffer length in bytes.
    len: u64,
}

impl PagedBuffer {
    /// Parses `npas` 8-byte big-endian page addresses from `pas` (the bytes after the command's
    /// fixed part) for a buffer of `len` bytes.
    pub fn new(
        pas: &[u8],
        log_page_size_rel: u32,
        page_offset: u32,
        len: u64,
    ) -> Result<PagedBuffer, PasError> {
        let page_shift = log_page_size_rel + pages::ADAPTER_PAGE_SHIFT;
        if page_shift > MAX_MTT_PAGE_SHIFT {
            return Err(PasError::BadPageSize);
        }
        let page = 1u64 << page_shift;
        let offset = page_offset as u64 * (page / 64);
        let needed = (offset + len).div_ceil(page) as usize;
        if pas.len() / 8 < needed {
            return Err(PasError::TooFewPages);
        }
        let mut pages = Vec::with_capacity(needed);
        for c in pas.chunks_exact(8).take(needed) {
            let a = u64::from_be_bytes(c.try_into().unwrap_or([0; 8]));
            if a & (page - 1) != 0 {
                return Err(PasError::Misaligned);
            }
            pages.push(a);
        }
        Ok(PagedBuffer {
            pages,
            page_shift,
            offset,
            len,
        })
    }

    /// Buffer length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// log2 of the page size.
    pub fn page_shift(&self) -> u32 {
        self.page_shift
    }

    /// The bus ranges `(addr, len)` the buffer's bytes occupy.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        page_ranges(&self.pages, self.page_shift, self.offset, self.len)
    }

    /// Page addresses, for QUERY commands.
    pub fn pas(&self) -> &[u64] {
        &self.pages
    }

    /// Calls `f(bus, buf_offset, len)` for the pieces of `[off, off + len)` (inside the buffer).
    fn pieces<E>(
        &self,
        off: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, usize) -> Result<(), E>,
        oob: E,
    ) -> Result<(), E> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.len) {
            return Err(oob);
        }
        let page = 1u64 << self.page_shift;
        let mut pos = self.offset + off;
        let mut done = 0usize;
        while done < len {
            let idx = (pos >> self.page_shift) as usize;
            let in_page = pos & (page - 1);
            let n = ((page - in_page) as usize).min(len - done);
            f(self.pages[idx] + in_page, done, n)?;
            pos += n as u64;
            done += n;
        }
        Ok(())
    }

    /// The stretch of the buffer around byte `off` that is contiguous in bus space (its pages
    /// follow one another): `(first offset, end offset, bus address of the first)`, the
    /// offsets clipped to the buffer. `None` when `off` is not inside the buffer. Walks the
    /// neighbouring pages (a queue resolves this only when its cached window fails).
    pub(crate) fn contiguous_at(&self, off: u64) -> Option<(u64, u64, u64)> {
        if off >= self.len {
            return None;
        }
        let shift = self.page_shift;
        let page = 1u64 << shift;
        let i = (self.offset.checked_add(off)? >> shift) as usize;
        self.pages.get(i)?;
        let follows = |j: usize| self.pages[j].checked_add(page) == Some(self.pages[j + 1]);
        let mut a = i;
        while a > 0 && follows(a - 1) {
            a -= 1;
        }
        let mut b = i;
        while b + 1 < self.pages.len() && follows(b) {
            b += 1;
        }
        let lo_pos = ((a as u64) << shift).max(self.offset);
        let hi_pos = ((b as u64 + 1) << shift).min(self.offset + self.len);
        let bus = self.pages[a] + (lo_pos - ((a as u64) << shift));
        Some((lo_pos - self.offset, hi_pos - self.offset, bus))
    }

    /// The bus address of `[off, off + len)` when that range is inside the buffer and inside
    /// one of its pages (so one bus range holds it), else `None`.
    pub(crate) fn bus_in_page(&self, off: u64, len: usize) -> Option<u64> {
        let end = off.checked_add(len as u64).filter(|&e| e <= self.len)?;
        let page = 1u64 << self.page_shift;
        let pos = self.offset.checked_add(off)?;
        let in_page = pos & (page - 1);
        if in_page + (end - off) > page {
            return None;
        }
        let base = *self.pages.get((pos >> self.page_shift) as usize)?;
        Some(base + in_page)
    }

    /// Reads `buf.len()` bytes at byte offset `off` of the buffer.
    pub fn read(&self, mem: &dyn GuestMemory, off: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let oob = DmaError {
            addr: off,
            len: buf.len(),
        };
        self.pieces(
            off,
            buf.len(),
            |bus, at, n| mem.read(bus, &mut buf[at..at + n]),
            oob,
        )
    }

    /// Writes `buf` at byte offset `off` of the buffer.
    pub fn write(&self, mem: &dyn GuestMemory, off: u64, buf: &[u8]) -> Result<(), DmaError> {
        let oob = DmaError {
            addr: off,
            len: buf.len(),
        };
        self.pieces(
            off,
            buf.len(),
            |bus, at, n| mem.write(bus, &buf[at..at + n]),
            oob,
        )
    }
}
