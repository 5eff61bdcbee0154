use mlx5_prm::mkey;

use super::{Access, KeyUser, KlmEntry, Mkey, MkeyTable, MrFault, Translation, ANY_QPN};
use crate::memory::{DmaError, GuestMemory};

/// A checked range of a key, ready to be split into bus-contiguous pieces.
pub struct Resolved<'a> {
    mkey: &'a Mkey,
    va: u64,
    len: u64,
    /// The bus pieces of an indirect key's range, found through its inner keys.
    indirect: Vec<(u64, u64)>,
}

impl<'a> Resolved<'a> {
    /// Calls `f(bus_addr, len)` for each bus-contiguous piece of the range, in order.
    /// Adjacent MTT pages that are also adjacent on the bus are merged into one piece.
    pub fn for_each_piece<E>(
        &self,
        mut f: impl FnMut(u64, usize) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.len == 0 {
            return Ok(());
        }
        match &self.mkey.translation {
            Translation::Pa => f(self.va, self.len as usize),
            Translation::Klm { .. } => {
                for &(a, l) in &self.indirect {
                    f(a, l as usize)?;
                }
                Ok(())
            }
            Translation::Mtt {
                page_shift,
                entries,
            } => {
                let page = 1u64 << page_shift;
                let base = self.mkey.start & !(page - 1);
                let off = self.va - base; // resolve() proved va >= start >= base
                                          // The first and last pages of the range (resolve() proved both are entries):
                                          // the first may start inside its page, every later one starts at its start.
                let first = (off >> page_shift) as usize;
                let last = ((off + (self.len - 1)) >> page_shift) as usize;
                let in_page = off & (page - 1);
                // The current run of bus-adjacent pages: (bus start, len).
                let mut s = entries[first].addr() + in_page;
                let mut l = (page - in_page).min(self.len);
                let mut left = self.len - l;
                // Every page but the last is whole; the last holds what is left.
                if last > first {
                    for e in &entries[first + 1..last] {
                        let bus = e.addr();
                        if s + l == bus {
                            l += page;
                        } else {
                            f(s, l as usize)?;
                            (s, l) = (bus, page);
                        }
                        left -= page;
                    }
                    let bus = entries[last].addr();
                    if s + l == bus {
                        l += left;
                    } else {
                        f(s, l as usize)?;
                        (s, l) = (bus, left);
                    }
                }
                f(s, l as usize)
            }
        }
    }

    /// The pieces as a vector (tests and diagnostics; the data path uses
    /// [`for_each_piece`](Self::for_each_piece)).
    pub fn pieces(&self) -> Vec<(u64, usize)> {
        let mut v = Vec::new();
        let _ = self.for_each_piece(|a, l| {
            v.push((a, l));
            Ok::<(), ()>(())
        });
        v
    }

    /// Reads the range into `buf` (whose length must equal the range's).
    pub fn read(&self, mem: &dyn GuestMemory, buf: &mut [u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_piece(|bus, n| {
            mem.read(bus, &mut buf[done..done + n])?;
            done += n;
            Ok(())
        })
    }

    /// Writes `buf` (whose length must equal the range's) to the range.
    pub fn write(&self, mem: &dyn GuestMemory, buf: &[u8]) -> Result<(), DmaError> {
        let mut done = 0usize;
        self.for_each_piece(|bus, n| {
            mem.write(bus, &buf[done..done + n])?;
            done += n;
            Ok(())
        })
    }
}

/// The bus ranges of `len` bytes starting `offset` bytes into `pages` (each `1 << shift`).
pub fn page_ranges(pages: &[u64], shift: u32, offset: u64, len: u64) -> Vec<(u64, u64)> {
    let ps = 1u64 << shift;
    let mut v = Vec::new();
    let (mut at, end) = (offset, offset.saturating_add(len));
    for (i, &p) in pages.iter().enumerate() {
        let page_lo = (i as u64) << shift;
        let page_hi = page_lo + ps;
        let lo = at.max(page_lo);
        let hi = end.min(page_hi);
        if lo < hi {
            v.push((p + (lo - page_lo), hi - lo));
            at = hi;
        }
        if at >= end {
            break;
        }
    }
    v
}

impl MkeyTable {
    /// Checks that `key` may be used by `user` for `need` on `va..va+len`, and returns the range
    /// ready to copy. Nothing is read or written.
    pub fn resolve(
        &self,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
        user: KeyUser,
    ) -> Result<Resolved<'_>, MrFault> {
        let m = self
            .keys
            .get(&mkey::index(key))
            .ok_or(MrFault::UnknownKey)?;
        if m.variant != (key & 0xff) as u8 {
            return Err(MrFault::VariantMismatch);
        }
        if m.free {
            return Err(MrFault::Free);
        }
        if m.pd != user.pd {
            return Err(MrFault::PdMismatch);
        }
        if m.qpn != ANY_QPN && m.qpn != user.qpn {
            return Err(MrFault::QpMismatch);
        }
        if !m.access.contains(need) {
            return Err(MrFault::AccessDenied);
        }
        // Bounds in 128 bits: neither the request nor the key can wrap.
        let (va_w, end_w) = (va as u128, va as u128 + len as u128);
        let (start_w, key_end_w) = (m.start as u128, m.start as u128 + m.len);
        if va_w < start_w || end_w > key_end_w || end_w > 1u128 << 64 {
            return Err(MrFault::OutOfBounds);
        }
        let mut indirect = Vec::new();
        if let Translation::Klm { entries } = &m.translation {
            if len > 0 {
                indirect = self.resolve_klm(m, entries, va, len, need, user)?;
            }
        }
        if let Translation::Mtt {
            page_shift,
            entries,
        } = &m.translation
        {
            if len > 0 {
                let base = m.start & !((1u64 << page_shift) - 1);
                let first = ((va - base) >> page_shift) as usize;
                let last = ((va - base + len - 1) >> page_shift) as usize;
                let pages = entries.get(first..=last).ok_or(MrFault::OutOfBounds)?;
                // Every page must carry the enables `need` asks for: the enable bits all pages
                // share (an AND over them) must include those (the same as asking each page for
                // its read and write enables, in one pass without a branch per page).
                let want = need.reads() as u64 | (need.writes() as u64) << 1;
                if pages.iter().fold(!0u64, |all, e| all & e.0) & want != want {
                    return Err(MrFault::PageAccessDenied);
                }
            }
        }
        Ok(Resolved {
            mkey: m,
            va,
            len,
            indirect,
        })
    }

    /// The bus pieces of `[va, va + len)` of the indirect key `m` (whose own checks passed):
    /// each KLM entry touched sends its part to the inner key, which must exist, carry the
    /// variant named in the entry, not be free, belong to the same PD, be usable by the QP,
    /// be direct, and grant the LOCAL right matching the access (read or write; atomics both)
    /// over `[klm.address, klm.address + byte_count)`. Remote rights are checked on the
    /// indirect key only: Linux uses `pd->local_dma_lkey`-style local keys inside remotely
    /// accessible KLM keys (ib/mr.c `mlx5_ib_sg_to_klms`); requiring the local right and the
    /// same PD of the inner key is a model choice.
    fn resolve_klm(
        &self,
        m: &Mkey,
        entries: &[KlmEntry],
        va: u64,
        len: u64,
        need: Access,
        user: KeyUser,
    ) -> Result<Vec<(u64, u64)>, MrFault> {
        let mut inner_need = Access::default();
        if need.reads() {
            inner_need = inner_need.union(Access::LOCAL_READ);
        }
        if need.writes() {
            inner_need = inner_need.union(Access::LOCAL_WRITE);
        }
        let mut off = va - m.start; // resolve() proved va >= start
        let mut left = len;
        // First entry holding `off`: entries are sorted by `off`.
        let mut i = entries.partition_point(|e| e.off + e.bcount <= off);
        let mut out: Vec<(u64, u64)> = Vec::new();
        while left > 0 {
            let e = entries.get(i).ok_or(MrFault::OutOfBounds)?;
            let within = off - e.off;
            let n = (e.bcount - within).min(left);
            let inner = self
                .keys
                .get(&mkey::index(e.key))
                .ok_or(MrFault::UnknownKey)?;
            if matches!(inner.translation, Translation::Klm { .. }) {
                return Err(MrFault::Indirection);
            }
            let inner_va = e.va.checked_add(within).ok_or(MrFault::OutOfBounds)?;
            let inner_user = KeyUser {
                pd: m.pd,
                qpn: user.qpn,
            };
            let r = self.resolve(e.key, inner_va, n, inner_need, inner_user)?;
            r.for_each_piece(|a, l| {
                match out.last_mut() {
                    Some((s, pl)) if *s + *pl == a => *pl += l as u64,
                    _ => out.push((a, l as u64)),
                }
                Ok::<(), MrFault>(())
            })?;
            off += n;
            left -= n;
            i += 1;
        }
        Ok(out)
    }

    /// [`resolve`](Self::resolve) for any QP of protection domain `pd`, returning the bus
    /// pieces. The data path uses `resolve` directly to avoid the allocation.
    pub fn translate(
        &self,
        key: u32,
        va: u64,
        len: u64,
        need: Access,
        pd: u32,
    ) -> Result<Vec<(u64, usize)>, MrFault> {
        let user = KeyUser { pd, qpn: ANY_QPN };
        let m = self.keys.get(&mkey::index(key));
        // A key bound to one QP cannot be checked without that QP: use its own binding.
        let user = match m {
            Some(m) if m.qpn != ANY_QPN => KeyUser { qpn: m.qpn, ..user },
            _ => user,
        };
        Ok(self.resolve(key, va, len, need, user)?.pieces())
    }
}
