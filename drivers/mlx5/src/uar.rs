//! User access regions: 4 KiB doorbell pages of BAR0 (UAR index n = BAR0 page n; rdma-core
//! mlx5_vfio.c `uar2iova`). ALLOC_UAR / DEALLOC_UAR.

use mlx5_prm::{alloc_uar_in, alloc_uar_out, dealloc_uar_in, dealloc_uar_out, opcode, uar};

use crate::cmd::{get, CmdBuf};
use crate::error::{Error, Result};
use crate::hal::Hal;
use crate::hca::Device;

/// An allocated UAR page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uar {
    /// The UAR index (`alloc_uar_out.uar`), what contexts' `uar_page` fields take.
    pub index: u32,
    /// Its byte offset in BAR0 (checked against the BAR length).
    pub offset: usize,
}

impl<H: Hal> Device<H> {
    /// ALLOC_UAR; refuses an index whose page lies outside BAR0.
    pub(crate) fn alloc_uar(&mut self, hal: &H) -> Result<Uar> {
        let c = CmdBuf::new(opcode::ALLOC_UAR, 0, alloc_uar_in::BYTES);
        let mut out = [0u8; alloc_uar_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        let index = get(&out, alloc_uar_out::UAR);
        let offset = (index as usize).checked_mul(uar::PAGE_SIZE).filter(|o| {
            o.checked_add(uar::PAGE_SIZE)
                .is_some_and(|e| e <= hal.bar0_len())
        });
        match offset {
            Some(offset) => Ok(Uar { index, offset }),
            None => {
                let _ = self.dealloc_uar(hal, index);
                Err(Error::BadFirmwareReply {
                    opcode: opcode::ALLOC_UAR,
                })
            }
        }
    }

    /// DEALLOC_UAR.
    pub(crate) fn dealloc_uar(&mut self, hal: &H, index: u32) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DEALLOC_UAR, 0, dealloc_uar_in::BYTES);
        c.set(dealloc_uar_in::UAR, index);
        let mut out = [0u8; dealloc_uar_out::BYTES];
        self.exec(hal, &c, &mut out)
    }
}
