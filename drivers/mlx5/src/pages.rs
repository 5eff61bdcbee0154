//! Firmware pages: the 4 KiB pages the HCA borrows from host memory (QUERY_PAGES tells how
//! many, MANAGE_PAGES gives or takes them; page-request EQEs ask for more or return some).
//!
//! Sources: Linux core/pagealloc.c (`mlx5_satisfy_startup_pages`, `give_pages`,
//! `reclaim_pages`, `mlx5_reclaim_startup_pages`), rdma-core mlx5_vfio.c
//! (`mlx5_vfio_give_pages`, `mlx5_vfio_reclaim_pages`); layouts Linux mlx5_ifc.h
//! `mlx5_ifc_manage_pages_in_bits`, `mlx5_ifc_manage_pages_out_bits`.

use alloc::collections::BTreeMap;

use mlx5_prm::{manage_pages_in, manage_pages_out, opcode, pages, query_pages_in, query_pages_out};

use crate::cmd::{get, CmdBuf};
use crate::error::{Error, Result};
use crate::hal::{DmaMem, Hal};
use crate::hca::Device;

/// Pages per MANAGE_PAGES command (keeps mailbox chains short; Linux caps a command at what
/// fits its mailbox too).
const PAGES_PER_CMD: u32 = 512;

/// Most firmware pages the driver lets the device hold: 2^20 pages, 4 GiB (driver choice).
/// Linux pagealloc.c `give_pages` has no limit of its own: it allocates what the device asks
/// and, when allocation fails, answers MANAGE_PAGES CANT_GIVE (`page_notify_fail`). A device
/// that asks for i32::MAX pages (8 TiB) would have the driver allocate until the platform
/// runs dry; above this limit the driver answers CANT_GIVE at once instead.
pub const MAX_FW_PAGES: u32 = 1 << 20;

/// The pages the device holds, by bus address.
pub(crate) struct FwPages<H: Hal> {
    pub(crate) given: BTreeMap<u64, DmaMem<H::Dma>>,
    /// Pages of a MANAGE_PAGES GIVE whose reply was garbled or never came: the device may
    /// hold them. They are never freed while it may (quarantined); a TAKE that returns one
    /// frees it, and after a clean teardown whose reclaim got every known page back they are
    /// free again.
    pub(crate) maybe_given: BTreeMap<u64, DmaMem<H::Dma>>,
}

impl<H: Hal> FwPages<H> {
    pub(crate) fn new() -> Self {
        FwPages {
            given: BTreeMap::new(),
            maybe_given: BTreeMap::new(),
        }
    }

    /// `(pages, bytes)` set aside in `maybe_given`.
    pub(crate) fn quarantined(&self) -> (usize, usize) {
        let n = self.maybe_given.len();
        (n, n.saturating_mul(pages::ADAPTER_PAGE_SIZE))
    }

    /// After a successful TEARDOWN_HCA whose reclaim got every known page back and a TAKE
    /// that returned nothing more: the device holds no page, so neither the quarantined ones.
    pub(crate) fn release_quarantine(&mut self) {
        self.maybe_given.clear();
    }

    /// Never free what the device may still write (a dead or unknown device).
    pub(crate) fn leak_all(&mut self) {
        core::mem::forget(core::mem::take(&mut self.given));
        core::mem::forget(core::mem::take(&mut self.maybe_given));
    }
}

impl<H: Hal> Device<H> {
    /// QUERY_PAGES with op_mod boot (1), init (2) or regular (3): `(function_id, num_pages)`,
    /// num_pages signed (negative: the device has pages to return).
    pub(crate) fn query_pages(&mut self, hal: &H, op_mod: u16) -> Result<(u16, i32)> {
        let c = CmdBuf::new(opcode::QUERY_PAGES, op_mod, query_pages_in::BYTES);
        let mut out = [0u8; query_pages_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok((
            get(&out, query_pages_out::FUNCTION_ID) as u16,
            get(&out, query_pages_out::NUM_PAGES) as i32,
        ))
    }

    /// QUERY_PAGES then give or take what it says (`mlx5_satisfy_startup_pages`).
    pub(crate) fn satisfy_pages(&mut self, hal: &H, op_mod: u16) -> Result<()> {
        let (func, n) = self.query_pages(hal, op_mod)?;
        if n > 0 {
            self.give_pages(hal, func, n as u32, false)
        } else if n < 0 {
            self.reclaim_pages(hal, func, n.unsigned_abs(), false)
                .map(|_| ())
        } else {
            Ok(())
        }
    }

    /// MANAGE_PAGES CANT_GIVE for `func` (Linux pagealloc.c `page_notify_fail`); its own
    /// failure changes nothing for the caller, which reports why it could not give.
    fn cant_give(&mut self, hal: &H, func: u16, nested: bool) {
        let mut c = CmdBuf::new(opcode::MANAGE_PAGES, pages::manage::CANT_GIVE, 16);
        c.set(manage_pages_in::FUNCTION_ID, func.into());
        let mut out = [0u8; manage_pages_out::BYTES];
        let _ = self.exec_with(hal, &c, &mut out, nested);
    }

    /// MANAGE_PAGES GIVE: `n` fresh 4 KiB pages. When the allocator fails, or the device
    /// would hold more than [`MAX_FW_PAGES`], tells the device with CANT_GIVE (Linux
    /// pagealloc.c `give_pages` / `page_notify_fail`) and returns the error. The pages of a
    /// GIVE whose reply was garbled or never came are quarantined, never freed.
    pub(crate) fn give_pages(&mut self, hal: &H, func: u16, n: u32, nested: bool) -> Result<()> {
        let held = self.pages.given.len() + self.pages.maybe_given.len();
        if (n as usize).saturating_add(held) > MAX_FW_PAGES as usize {
            self.cant_give(hal, func, nested);
            return Err(Error::PageRequestTooLarge {
                requested: n,
                held: held.min(u32::MAX as usize) as u32,
                max: MAX_FW_PAGES,
            });
        }
        let mut left = n;
        while left > 0 {
            let k = left.min(PAGES_PER_CMD);
            let mut batch = alloc::vec::Vec::with_capacity(k as usize);
            for _ in 0..k {
                match DmaMem::alloc(hal, pages::ADAPTER_PAGE_SIZE, pages::ADAPTER_PAGE_SIZE) {
                    Ok(p) => batch.push(p),
                    Err(e) => {
                        self.cant_give(hal, func, nested);
                        return Err(e);
                    }
                }
            }
            let mut c = CmdBuf::new(
                opcode::MANAGE_PAGES,
                pages::manage::GIVE,
                manage_pages_in::PAS.bytes_with(k as usize),
            );
            c.set(manage_pages_in::FUNCTION_ID, func.into())
                .set(manage_pages_in::INPUT_NUM_ENTRIES, k);
            for (i, p) in batch.iter().enumerate() {
                c.put64(manage_pages_in::PAS.byte_offset() + 8 * i, p.bus());
            }
            let mut out = [0u8; manage_pages_out::BYTES];
            if let Err(e) = self.exec_with(hal, &c, &mut out, nested) {
                if e.device_may_hold() {
                    // The device may have taken them: set aside until it gives them back.
                    for p in batch {
                        self.pages.maybe_given.insert(p.bus(), p);
                    }
                }
                return Err(e);
            }
            for p in batch {
                self.pages.given.insert(p.bus(), p);
            }
            left -= k;
        }
        Ok(())
    }

    /// MANAGE_PAGES TAKE: asks for `n` pages back and frees the ones returned. A returned
    /// address the driver never gave, or more entries than asked for, is refused.
    pub(crate) fn reclaim_pages(
        &mut self,
        hal: &H,
        func: u16,
        n: u32,
        nested: bool,
    ) -> Result<u32> {
        let mut got = 0;
        let mut left = n;
        while left > 0 {
            let k = left.min(PAGES_PER_CMD);
            let mut c = CmdBuf::new(
                opcode::MANAGE_PAGES,
                pages::manage::TAKE,
                manage_pages_in::BYTES,
            );
            c.set(manage_pages_in::FUNCTION_ID, func.into())
                .set(manage_pages_in::INPUT_NUM_ENTRIES, k);
            let mut out = alloc::vec![0u8; manage_pages_out::PAS.bytes_with(k as usize)];
            self.exec_with(hal, &c, &mut out, nested)?;
            let m = get(&out, manage_pages_out::OUTPUT_NUM_ENTRIES);
            if m > k {
                return Err(Error::BadFirmwareReply {
                    opcode: opcode::MANAGE_PAGES,
                });
            }
            for i in 0..m as usize {
                let at = manage_pages_out::PAS.byte_offset() + 8 * i;
                let mut b = [0u8; 8];
                b.copy_from_slice(&out[at..at + 8]);
                let addr = u64::from_be_bytes(b);
                if self.pages.given.remove(&addr).is_none()
                    && self.pages.maybe_given.remove(&addr).is_none()
                {
                    return Err(Error::BadFirmwareReply {
                        opcode: opcode::MANAGE_PAGES,
                    });
                }
            }
            got += m;
            if m == 0 {
                break;
            }
            left -= m;
        }
        Ok(got)
    }

    /// Takes back every page the device holds (Linux `mlx5_reclaim_startup_pages`), after
    /// TEARDOWN_HCA. Pages the device refuses to return stay allocated (leaked rather than
    /// freed under the device). Quarantined pages (`maybe_given`) are asked for too, and the
    /// ones returned are freed; the rest stay quarantined: after a clean teardown the caller
    /// frees them ([`FwPages::release_quarantine`]), otherwise they are leaked.
    pub(crate) fn reclaim_all_pages(&mut self, hal: &H) -> Result<()> {
        loop {
            let want = self.pages.given.len() + self.pages.maybe_given.len();
            if want == 0 {
                return Ok(());
            }
            let n = want.min(u32::MAX as usize) as u32;
            if self.reclaim_pages(hal, 0, n, false)? == 0 {
                if self.pages.given.is_empty() {
                    return Ok(());
                }
                self.pages.leak_all();
                return Err(Error::BadFirmwareReply {
                    opcode: opcode::MANAGE_PAGES,
                });
            }
        }
    }

    /// Pages the device currently holds.
    pub(crate) fn pages_given(&self) -> usize {
        self.pages.given.len()
    }
}
