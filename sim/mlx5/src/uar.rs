//! User Access Regions: ALLOC_UAR / DEALLOC_UAR and the doorbell registers in each UAR page.
//!
//! UAR index n is the 4 KiB page at BAR0 + n * 4096 (facts trap 14; datapath facts
//! "uar_and_blueflame": rdma-core mlx5_vfio.c:1327, Linux uar.c:78). Indexes start at
//! [`FIRST_UAR`] because pages 0..2 hold the initialization segment (`struct mlx5_init_seg` is
//! 8208 bytes, Linux device.h:576). Offsets inside a page (Linux doorbell.h:36-37, eq.c:37,
//! lib/eq.h:70): 0x20 CQ arm doorbell (64-bit), 0x40 EQ doorbell with re-arm, 0x48 EQ doorbell
//! without arm (32-bit), 0x800.. the DB/BlueFlame registers, `1 << log_bf_reg_size` bytes each
//! (two alternating halves).
//!
//! Values reach the handlers as the written bytes read big-endian: a 64-bit doorbell is the
//! two big-endian dwords software stored, high dword first. A 64-bit register written as two
//! 32-bit halves (lower address first, as a 32-bit host does) is delivered once both arrived.

use std::collections::{BTreeMap, BTreeSet};

use crate::cmd::CmdResult;
use crate::hca::{fail, get, put, syndrome, Hca};
use mlx5_prm::{alloc_uar_out, cmd_status, dealloc_uar_in};

/// First UAR index ALLOC_UAR hands out (pages 0..2 are the initialization segment).
pub const FIRST_UAR: u32 = 3;
/// Most UARs allocated at once (a model limit, well inside the 8192 pages of the 32 MiB BAR0).
pub const MAX_UARS: u32 = 1024;
/// Size of a UAR page.
pub const UAR_PAGE_SIZE: u64 = 4096;
/// CQ arm doorbell (`MLX5_CQ_DOORBELL`, Linux doorbell.h:37).
pub const CQ_DOORBELL: u32 = 0x20;
/// EQ doorbell, update CI and arm (`MLX5_EQ_DOORBEL_OFFSET`, Linux eq.c:37).
pub const EQ_DOORBELL_ARM: u32 = 0x40;
/// EQ doorbell, update CI only (doorbell + 2 dwords, Linux lib/eq.h:70).
pub const EQ_DOORBELL_NO_ARM: u32 = 0x48;
/// First DB/BlueFlame register (`MLX5_BF_OFFSET`, Linux doorbell.h:36).
pub const BF_OFFSET: u32 = 0x800;

/// Allocated UARs and half-written 64-bit doorbells.
#[derive(Debug, Default)]
pub struct UarTable {
    used: BTreeSet<u32>,
    /// (page, 8-byte aligned offset) -> first 4 bytes of a 64-bit register written in halves.
    halves: BTreeMap<(u32, u32), [u8; 4]>,
}

impl UarTable {
    /// True if `index` is allocated.
    pub fn contains(&self, index: u32) -> bool {
        self.used.contains(&index)
    }

    /// Number of allocated UARs.
    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// True if none is allocated.
    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }

    fn alloc(&mut self) -> Option<u32> {
        if self.used.len() as u32 >= MAX_UARS {
            return None;
        }
        let idx = (FIRST_UAR..FIRST_UAR + MAX_UARS).find(|i| !self.used.contains(i))?;
        self.used.insert(idx);
        Some(idx)
    }

    fn free(&mut self, index: u32) -> bool {
        self.halves.retain(|(p, _), _| *p != index);
        self.used.remove(&index)
    }
}

/// ALLOC_UAR (0x802).
pub(crate) fn cmd_alloc_uar(hca: &mut Hca, _input: &[u8], out: &mut [u8]) -> CmdResult {
    let Some(idx) = hca.uars.alloc() else {
        return fail(cmd_status::LIM_ERR, syndrome::UAR_EXHAUSTED);
    };
    put(out, alloc_uar_out::UAR, idx);
    Ok(())
}

/// DEALLOC_UAR (0x803).
pub(crate) fn cmd_dealloc_uar(hca: &mut Hca, input: &[u8], _out: &mut [u8]) -> CmdResult {
    let idx = get(input, dealloc_uar_in::UAR);
    if !hca.uars.contains(idx) {
        return fail(cmd_status::BAD_RES_ERR, syndrome::UAR_UNKNOWN);
    }
    // Refused while an EQ, CQ or QP context names the page (`uar_page`): see `hca::syndrome`.
    if hca.eqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY);
    }
    if hca.cqs.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_CQ);
    }
    if hca.qps.uses_uar(idx) {
        return fail(cmd_status::RES_BUSY, syndrome::UAR_BUSY_QP);
    }
    hca.uars.free(idx);
    Ok(())
}

/// A BAR0 write that landed in UAR page `page` at `offset` (bytes in address order).
pub fn bar_write(hca: &mut Hca, page: u32, offset: u32, bytes: &[u8]) {
    if !hca.uars.contains(page) {
        hca.trace(format_args!(
            "write to unallocated UAR page {page} offset {offset:#x}: ignored"
        ));
        return;
    }
    let len = bytes.len() as u32;
    match (offset, len) {
        (EQ_DOORBELL_ARM | EQ_DOORBELL_NO_ARM, 4 | 8) => {
            let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            crate::eq::doorbell(hca, page, v, offset == EQ_DOORBELL_ARM);
        }
        _ if register64(offset) => {
            if let Some(v) = combine(hca, page, offset, bytes) {
                let reg = offset & !7;
                if reg == CQ_DOORBELL {
                    crate::cq::arm_doorbell(hca, v);
                } else {
                    crate::datapath::sq_doorbell(hca, page, reg, v);
                }
            }
        }
        _ => hca.trace(format_args!(
            "UAR {page}: {len}-byte write at {offset:#x}: not a doorbell register, ignored"
        )),
    }
}

/// True for offsets of 64-bit doorbell registers: the CQ doorbell and the DB/BF area.
fn register64(offset: u32) -> bool {
    let reg = offset & !7;
    reg == CQ_DOORBELL || (BF_OFFSET..UAR_PAGE_SIZE as u32).contains(&reg)
}

/// Assembles a 64-bit register value from one 8-byte or two 4-byte writes.
fn combine(hca: &mut Hca, page: u32, offset: u32, bytes: &[u8]) -> Option<u64> {
    let reg = offset & !7;
    match (offset & 7, bytes.len()) {
        (0, 8) => {
            hca.uars.halves.remove(&(page, reg));
            Some(u64::from_be_bytes(bytes.try_into().ok()?))
        }
        (0, 4) => {
            hca.uars
                .halves
                .insert((page, reg), [bytes[0], bytes[1], bytes[2], bytes[3]]);
            None
        }
        (4, 4) => {
            let Some(hi) = hca.uars.halves.remove(&(page, reg)) else {
                hca.trace(format_args!(
                    "UAR {page}: low half of the register at {reg:#x} without its high half: ignored"
                ));
                return None;
            };
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&hi);
            b[4..].copy_from_slice(bytes);
            Some(u64::from_be_bytes(b))
        }
        _ => {
            hca.trace(format_args!(
                "UAR {page}: {}-byte write at {offset:#x} does not fit a 64-bit register: ignored",
                bytes.len()
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::init_seg::HealthState;
    use crate::memory::RegionMemory;
    use crate::pci::Intx;
    use std::sync::Arc;

    #[test]
    fn halves_combine_high_dword_first() {
        let mut hca = Hca::new(
            Arc::new(RegionMemory::new()),
            Intx::new(),
            Arc::new(HealthState::new()),
        );
        let page = hca.uars.alloc().unwrap();
        assert_eq!(page, FIRST_UAR);
        let v = 0x1122_3344_5566_7788u64;
        assert_eq!(combine(&mut hca, page, 0x800, &v.to_be_bytes()), Some(v));
        assert_eq!(
            combine(&mut hca, page, 0x20, &[0x11, 0x22, 0x33, 0x44]),
            None
        );
        assert_eq!(
            combine(&mut hca, page, 0x24, &[0x55, 0x66, 0x77, 0x88]),
            Some(v)
        );
        // A low half alone, and a write straddling two registers, are dropped.
        assert_eq!(combine(&mut hca, page, 0x24, &[0; 4]), None);
        assert_eq!(combine(&mut hca, page, 0x804, &[0; 8]), None);
        assert!(register64(0x20) && register64(0x900) && register64(0xff8));
        assert!(!register64(0x40) && !register64(0x28) && !register64(0x1000));
    }
}
