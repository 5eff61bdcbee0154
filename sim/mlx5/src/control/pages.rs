//! Firmware pages: the 4 KiB pages of host memory the device borrows (QUERY_PAGES,
//! MANAGE_PAGES, PAGE_REQUEST events).
//!
//! The device demands [`BOOT_PAGES`] before anything but the bring-up commands, [`INIT_PAGES`]
//! more before INIT_HCA, and [`REGULAR_PAGES`] more once initialized (asked for with a
//! PAGE_REQUEST event when an EQ subscribes to it, or found by QUERY_PAGES op_mod REGULAR).
//! Every page it owns must be 4 KiB aligned and inside guest memory; the device writes a tag
//! into the first bytes of each page it receives (the page is its memory now).
//!
//! Sources: op_mods and the signed `num_pages` (Linux pagealloc.c:46-48 `req_pages_handler`,
//! mlx5_ifc.h:6131-6133 enum); reclaim returns `output_num_entries` addresses in
//! `manage_pages_out.pas` (Linux pagealloc.c reclaim_pages, rdma-core mlx5_vfio.c:401).

use std::collections::BTreeSet;

use crate::memory::GuestMemory;
use mlx5_prm::pages::ADAPTER_PAGE_SIZE;

/// Pages needed before QUERY_HCA_CAP / SET_HCA_CAP / ACCESS_REGISTER / INIT_HCA.
pub const BOOT_PAGES: u32 = 16;
/// Further pages needed before INIT_HCA.
pub const INIT_PAGES: u32 = 32;
/// Further pages wanted once the HCA is initialized.
pub const REGULAR_PAGES: u32 = 64;
/// Most pages the device ever holds (bounds the bookkeeping against a runaway driver).
pub const MAX_PAGES: u64 = 1 << 16;
/// Tag written at the start of every page the device takes ("MLX5SIM" + 0x01).
pub const PAGE_TAG: [u8; 8] = *b"MLX5SIM\x01";

/// Where the HCA is in its life, as far as pages care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageStage {
    /// Enabled, not initialized: boot + init pages.
    PreInit,
    /// Initialized: boot + init + regular (+ surprise requests).
    Initialized,
    /// Torn down (or disabled): the device needs nothing and returns everything.
    Released,
}

/// Why MANAGE_PAGES refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// GIVE of more pages than the device asked for.
    TooMany,
    /// A page address is not 4 KiB aligned.
    Unaligned(u64),
    /// A page address is already owned by the device, or listed twice.
    Duplicate(u64),
    /// A page lies (partly) outside guest memory.
    OutsideMemory(u64),
}

/// The pages the device owns and the demand it has announced.
#[derive(Debug, Default)]
pub struct Pages {
    owned: BTreeSet<u64>,
    /// Change of the regular demand by surprise page requests (negative = give back).
    surprise: i64,
    /// Net pages requested by PAGE_REQUEST events and not yet given (or taken, if negative).
    announced: i64,
    /// MANAGE_PAGES CANT_GIVE commands received.
    cant_give: u64,
}

impl Pages {
    /// Power-on: no pages.
    pub fn new() -> Pages {
        Pages::default()
    }

    /// MANAGE_PAGES CANT_GIVE commands received (kept across resets: a statistic).
    pub fn cant_give_count(&self) -> u64 {
        self.cant_give
    }

    /// Bus addresses of the pages the device owns.
    pub fn owned_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.owned.iter().copied()
    }

    /// Number of pages the device owns.
    pub fn owned(&self) -> usize {
        self.owned.len()
    }

    /// True if the device owns `addr`.
    pub fn owns(&self, addr: u64) -> bool {
        self.owned.contains(&addr)
    }

    /// The boot pages are all there.
    pub fn boot_satisfied(&self) -> bool {
        self.owned.len() as u64 >= u64::from(BOOT_PAGES)
    }

    /// The boot and init pages are all there.
    pub fn init_satisfied(&self) -> bool {
        self.owned.len() as u64 >= u64::from(BOOT_PAGES + INIT_PAGES)
    }

    /// Total pages the device wants to hold in `stage`.
    pub fn target(&self, stage: PageStage) -> u64 {
        match stage {
            PageStage::PreInit => u64::from(BOOT_PAGES + INIT_PAGES),
            PageStage::Initialized => {
                let t = i64::from(BOOT_PAGES + INIT_PAGES + REGULAR_PAGES) + self.surprise;
                t.clamp(0, MAX_PAGES as i64) as u64
            }
            PageStage::Released => 0,
        }
    }

    /// What the device asks for in `stage`: [`Pages::target`] before it is bounded by
    /// [`MAX_PAGES`]. Only a surprise request (fault injection) can push it past the bound: a
    /// device asking for more than it will take (up to i32::MAX pages), which a driver must
    /// refuse rather than try to allocate. GIVE still takes at most up to the target.
    fn demand(&self, stage: PageStage) -> i64 {
        match stage {
            PageStage::Initialized => {
                (i64::from(BOOT_PAGES + INIT_PAGES + REGULAR_PAGES) + self.surprise).max(0)
            }
            _ => self.target(stage) as i64,
        }
    }

    /// QUERY_PAGES `num_pages` for `op_mod` (1 boot, 2 init, 3 regular): positive = pages
    /// wanted, negative = pages the device wants to return.
    pub fn query(&self, op_mod: u16, stage: PageStage) -> i32 {
        let owned = self.owned.len() as i64;
        let boot = i64::from(BOOT_PAGES);
        let init = i64::from(INIT_PAGES);
        let v = match op_mod {
            mlx5_prm::pages::query::BOOT_PAGES => (boot - owned).max(0),
            mlx5_prm::pages::query::INIT_PAGES => (init - (owned - boot).max(0)).max(0),
            _ => match stage {
                PageStage::PreInit => 0,
                _ => self.demand(stage) - owned,
            },
        };
        v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
    }

    /// MANAGE_PAGES GIVE: takes ownership of `addrs` (all or nothing).
    pub fn give(
        &mut self,
        addrs: &[u64],
        stage: PageStage,
        mem: &dyn GuestMemory,
    ) -> Result<(), PageError> {
        let room = self.target(stage).saturating_sub(self.owned.len() as u64);
        if addrs.len() as u64 > room {
            return Err(PageError::TooMany);
        }
        let mut seen = BTreeSet::new();
        for &a in addrs {
            if a % ADAPTER_PAGE_SIZE as u64 != 0 {
                return Err(PageError::Unaligned(a));
            }
            if self.owned.contains(&a) || !seen.insert(a) {
                return Err(PageError::Duplicate(a));
            }
            let mut last = [0u8; 1];
            if mem.read(a, &mut [0u8; 8]).is_err()
                || mem
                    .read(a + ADAPTER_PAGE_SIZE as u64 - 1, &mut last)
                    .is_err()
            {
                return Err(PageError::OutsideMemory(a));
            }
        }
        for &a in addrs {
            // The page is the device's now; mark it (checked above that it is reachable).
            let _ = mem.write(a, &PAGE_TAG);
            self.owned.insert(a);
        }
        if self.announced > 0 {
            self.announced = (self.announced - addrs.len() as i64).max(0);
        }
        Ok(())
    }

    /// MANAGE_PAGES TAKE: returns up to `n` pages the device can spare in `stage`.
    pub fn take(&mut self, n: u32, stage: PageStage) -> Vec<u64> {
        let spare = (self.owned.len() as u64).saturating_sub(self.target(stage));
        let count = spare.min(u64::from(n)) as usize;
        let out: Vec<u64> = self.owned.iter().rev().take(count).copied().collect();
        for a in &out {
            self.owned.remove(a);
        }
        if self.announced < 0 {
            self.announced = (self.announced + out.len() as i64).min(0);
        }
        out
    }

    /// A surprise request: the regular demand changes by `delta` pages.
    pub fn surprise(&mut self, delta: i32) {
        self.surprise += i64::from(delta);
    }

    /// Pages to ask for (or return, if negative) with a PAGE_REQUEST event now: the part of
    /// the outstanding demand no event has announced yet. Marks it announced.
    pub fn unannounced(&mut self, stage: PageStage) -> Option<i32> {
        if stage != PageStage::Initialized {
            return None;
        }
        let outstanding = self.demand(stage) - self.owned.len() as i64;
        let delta = outstanding - self.announced;
        if delta == 0 {
            return None;
        }
        self.announced += delta;
        Some(delta.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
    }

    /// Forgets every page (device reset / DISABLE_HCA).
    pub fn forget_all(&mut self) {
        *self = Pages {
            cant_give: self.cant_give,
            ..Pages::default()
        };
    }
}

// -------------------------------------------------------------------------------------------
// Commands
// -------------------------------------------------------------------------------------------

use crate::control::result::CmdResult;
use crate::control::result::{fail, get, put};
use crate::control::syndrome;
use crate::control::Control;
use mlx5_prm::{cmd_status, manage_pages_in, manage_pages_out, query_pages_in, query_pages_out};
use std::sync::Arc;

fn check_function(input: &[u8]) -> CmdResult {
    // embedded_cpu_function (bit 0x40) and function_id: only this PF (function 0) exists.
    if get(input, query_pages_in::FUNCTION_ID) != 0
        || get(input, mlx5_prm::Field::new(0x40, 1)) != 0
    {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_FUNCTION);
    }
    Ok(())
}

/// QUERY_PAGES (0x107): op_mod 1 boot, 2 init, 3 regular.
pub(crate) fn cmd_query_pages(
    control: &mut Control,
    stage: PageStage,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    let op_mod = get(input, query_pages_in::OP_MOD) as u16;
    if !(mlx5_prm::pages::query::BOOT_PAGES..=mlx5_prm::pages::query::REGULAR_PAGES)
        .contains(&op_mod)
    {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_OP_MOD);
    }
    check_function(input)?;
    let n = control.pages.query(op_mod, stage);
    put(out, query_pages_out::FUNCTION_ID, 0);
    put(out, query_pages_out::NUM_PAGES, n as u32);
    Ok(())
}

/// MANAGE_PAGES (0x108): op_mod 0 CANT_GIVE, 1 GIVE, 2 TAKE.
pub(crate) fn cmd_manage_pages(
    control: &mut Control,
    stage: PageStage,
    mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    out: &mut [u8],
) -> CmdResult {
    use mlx5_prm::pages::manage;
    let op_mod = get(input, manage_pages_in::OP_MOD) as u16;
    if op_mod > manage::TAKE {
        return fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_OP_MOD);
    }
    check_function(input)?;
    let n = get(input, manage_pages_in::INPUT_NUM_ENTRIES);
    match op_mod {
        manage::CANT_GIVE => {
            control.pages.cant_give += 1;
            control.trace.note(format_args!(
                "MANAGE_PAGES CANT_GIVE: the driver has no pages for us"
            ));
            Ok(())
        }
        manage::GIVE => {
            let pas = manage_pages_in::PAS;
            let need = pas.bytes_with(n as usize);
            if input.len() < need {
                return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::PAGES_INLEN);
            }
            let addrs: Vec<u64> = (0..n as usize)
                .map(|i| pas.elem(i as u32).get64(input).unwrap_or(0))
                .collect();
            match control.pages.give(&addrs, stage, &**mem) {
                Ok(()) => Ok(()),
                Err(PageError::TooMany) => {
                    fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_TOO_MANY)
                }
                Err(PageError::Unaligned(_)) => {
                    fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_UNALIGNED)
                }
                Err(PageError::Duplicate(_)) => {
                    fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_DUPLICATE)
                }
                Err(PageError::OutsideMemory(_)) => {
                    fail(cmd_status::BAD_PARAM_ERR, syndrome::PAGES_OUTSIDE)
                }
            }
        }
        _ => {
            let pas = manage_pages_out::PAS;
            let room = out.len().saturating_sub(pas.byte_offset()) / 8;
            if (n as usize) > room {
                return fail(cmd_status::BAD_OUTP_LEN_ERR, syndrome::PAGES_OUTLEN);
            }
            let taken = control.pages.take(n, stage);
            for (i, a) in taken.iter().enumerate() {
                let _ = pas.elem(i as u32).set64(out, *a);
            }
            put(
                out,
                manage_pages_out::OUTPUT_NUM_ENTRIES,
                taken.len() as u32,
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RegionMemory;

    fn pages(mem: &RegionMemory, n: usize) -> Vec<u64> {
        (0..n).map(|_| mem.alloc(4096, 4096).unwrap()).collect()
    }

    #[test]
    fn demand_and_ownership() {
        let mem = RegionMemory::new();
        let mut p = Pages::new();
        assert_eq!(p.query(1, PageStage::PreInit), BOOT_PAGES as i32);
        let boot = pages(&mem, BOOT_PAGES as usize);
        p.give(&boot, PageStage::PreInit, &mem).unwrap();
        assert_eq!(p.query(1, PageStage::PreInit), 0);
        assert_eq!(p.query(2, PageStage::PreInit), INIT_PAGES as i32);
        assert!(p.boot_satisfied() && !p.init_satisfied());
        // Duplicates, misalignment, memory outside the regions, too many.
        assert_eq!(
            p.give(&[boot[0]], PageStage::PreInit, &mem),
            Err(PageError::Duplicate(boot[0]))
        );
        assert_eq!(
            p.give(&[boot[0] + 8], PageStage::PreInit, &mem),
            Err(PageError::Unaligned(boot[0] + 8))
        );
        assert_eq!(
            p.give(&[0x1000], PageStage::PreInit, &mem),
            Err(PageError::OutsideMemory(0x1000))
        );
        let many = pages(&mem, INIT_PAGES as usize + 1);
        assert_eq!(
            p.give(&many, PageStage::PreInit, &mem),
            Err(PageError::TooMany)
        );
        p.give(&many[..INIT_PAGES as usize], PageStage::PreInit, &mem)
            .unwrap();
        assert!(p.init_satisfied());
        // The tag landed in the page.
        let mut tag = [0u8; 8];
        mem.read(boot[3], &mut tag).unwrap();
        assert_eq!(tag, PAGE_TAG);
        // Nothing to spare before teardown; everything after.
        assert!(p.take(10, PageStage::PreInit).is_empty());
        assert_eq!(p.query(3, PageStage::Initialized), REGULAR_PAGES as i32);
        assert_eq!(
            p.unannounced(PageStage::Initialized),
            Some(REGULAR_PAGES as i32)
        );
        assert_eq!(p.unannounced(PageStage::Initialized), None);
        let got = p.take(1000, PageStage::Released);
        assert_eq!(got.len(), (BOOT_PAGES + INIT_PAGES) as usize);
        assert_eq!(p.owned(), 0);
    }
}
