//! Resizing a CQ (MODIFY_CQ with op_mod RESIZE) and copying the CQEs not polled yet.

use core::ptr;

use mlx5_prm::{cmd_hca_cap, cq_db, cq_modify, cqc, cqe, modify_cq_in, modify_cq_out, opcode};

use crate::cmd::CmdBuf;
use crate::error::{Error, InvalidInput, Result};
use crate::hal::{DmaMem, Hal};

use super::decode::Cqe;
use super::{alloc_ring, ring_size, CompletionQueue};

impl<H: Hal> CompletionQueue<H> {
    /// Resizes the CQ to at least `entries` entries (`ibv_resize_cq`), keeping the completions
    /// not polled yet. As Linux ib/cq.c `mlx5_ib_resize_cq` (kernel CQs) and rdma-core
    /// verbs.c `mlx5_resize_cq`: a new buffer, MODIFY_CQ with op_mod RESIZE and the log size,
    /// page offset and page size in `resize_field_select`; the device then writes a RESIZE
    /// CQE in the old buffer and continues in the new one; the driver copies the CQEs before
    /// the RESIZE CQE into the new buffer (`copy_resize_cqes`, rdma-core cq.c
    /// `mlx5_cq_resize_copy_cqes`). The old buffer is freed only after that.
    pub fn resize(&mut self, entries: u32) -> Result<()> {
        let ctx = self.shared.ctx.clone();
        ctx.check_alive()?;
        let caps = &ctx.caps;
        if cmd_hca_cap::CQ_RESIZE.get(&caps.general_cur).unwrap_or(0) == 0 {
            return Err(Error::Unsupported);
        }
        let (cnt, size) = ring_size(caps.log_max_cq_sz, entries)?;
        if cnt == self.cqe_cnt {
            return Ok(());
        }
        // Linux: BAD_SIZE_OUTS_CQES from the firmware when the completions not polled yet do
        // not fit; refused here first.
        let outstanding = self.outstanding();
        if outstanding >= cnt {
            return Err(InvalidInput::CqTooSmall {
                requested: entries,
                outstanding,
            }
            .into());
        }
        let hal = &ctx.hal;
        let nbuf = alloc_ring(hal, cnt, size)?;
        hal.dma_wmb();
        let mut c = CmdBuf::new(
            opcode::MODIFY_CQ,
            cq_modify::OPMOD_RESIZE,
            modify_cq_in::PAS.bytes_with(1),
        );
        let x = |f: mlx5_prm::Field| f.within(modify_cq_in::CQ_CONTEXT);
        c.set(modify_cq_in::CQN, self.shared.cqn)
            .set(
                modify_cq_in::MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT,
                cq_modify::MASK_LOG_SIZE | cq_modify::MASK_PG_OFFSET | cq_modify::MASK_PG_SIZE,
            )
            .set(x(cqc::CQE_SZ), cqe::stride::CQE_STRIDE_64.into())
            .set(x(cqc::LOG_CQ_SIZE), cnt.trailing_zeros())
            .set(x(cqc::LOG_PAGE_SIZE), size.trailing_zeros() - 12)
            .set(x(cqc::PAGE_OFFSET), 0)
            .put64(modify_cq_in::PAS.byte_offset(), nbuf.bus());
        let mut out = [0u8; modify_cq_out::BYTES];
        if let Err(e) = ctx.exec(&c, &mut out) {
            // A garbled or missing reply: the device may have switched to the new buffer.
            ctx.release_after(&e, [nbuf]);
            return Err(e);
        }
        // The device switched: copy what it wrote before the RESIZE CQE.
        let copied = self.copy_resize_cqes(&nbuf, cnt);
        let old = self.shared.buf.lock().replace(nbuf);
        let nptr = self
            .shared
            .buf
            .lock()
            .as_ref()
            .map_or(ptr::null(), |b| b.ptr() as *const u8);
        self.buf = nptr;
        self.cqe_cnt = cnt;
        match copied {
            Ok(()) => {
                // The RESIZE CQE is consumed: tell the device.
                hal.dma_wmb();
                // SAFETY: dword 0 of the 64-byte doorbell record `shared` owns.
                unsafe {
                    ptr::write_volatile(
                        (self.db as *mut u32).add(cq_db::SET_CI),
                        (self.ci & 0xff_ffff).to_be(),
                    )
                };
                // The device writes only the new buffer now.
                drop(old);
                Ok(())
            }
            Err(e) => {
                // No RESIZE CQE: the device may still write the old buffer.
                ctx.with_dev(|d| {
                    d.hold(old);
                    Ok(())
                })?;
                Err(e)
            }
        }
    }

    /// CQEs the device handed over and software has not polled yet.
    fn outstanding(&self) -> u32 {
        let mut n = 0;
        while n < self.cqe_cnt {
            let i = self.ci.wrapping_add(n);
            // SAFETY: the index is masked to the ring; the op_own byte of that CQE.
            let op_own = unsafe {
                Cqe(self.buf.add((i & (self.cqe_cnt - 1)) as usize * cqe::SIZE))
                    .u8(cqe::offset::OP_OWN)
            };
            if !cqe::is_sw_owned(op_own, i, self.cqe_cnt) {
                break;
            }
            n += 1;
        }
        n
    }

    /// Copies the CQEs from the consumer index up to the RESIZE CQE into `nbuf` (`cnt`
    /// entries), each at its index + 1 with the new ring's owner bit, then moves the consumer
    /// index one on (rdma-core cq.c `mlx5_cq_resize_copy_cqes`, Linux ib/cq.c
    /// `copy_resize_cqes`): the device continues after the RESIZE CQE's index.
    fn copy_resize_cqes(&mut self, nbuf: &DmaMem<H::Dma>, cnt: u32) -> Result<()> {
        let hal = &self.shared.ctx.hal;
        let bad = Error::BadFirmwareReply {
            opcode: opcode::MODIFY_CQ,
        };
        let mut i = self.ci;
        for _ in 0..=self.cqe_cnt {
            let src = Cqe(
                // SAFETY: masked to the ring.
                unsafe { self.buf.add((i & (self.cqe_cnt - 1)) as usize * cqe::SIZE) },
            );
            // SAFETY: the op_own byte of a CQE of the ring.
            let op_own = unsafe { src.u8(cqe::offset::OP_OWN) };
            if !cqe::is_sw_owned(op_own, i, self.cqe_cnt) {
                return Err(bad);
            }
            hal.dma_rmb();
            if cqe::opcode(op_own) == cqe::opcode::RESIZE_CQ {
                // The copies sit one index further on: the consumer index steps over the
                // RESIZE CQE's slot (`++cq->cons_index`).
                self.ci = self.ci.wrapping_add(1);
                return Ok(());
            }
            let j = i.wrapping_add(1);
            let mut bytes = [0u8; cqe::SIZE];
            for (k, b) in bytes.iter_mut().enumerate() {
                // SAFETY: k < 64: inside the CQE.
                *b = unsafe { src.u8(k) };
            }
            let own = ((j & cnt) != 0) as u8;
            let o = cqe::offset::OP_OWN;
            bytes[o] = (bytes[o] & !cqe::OWNER_MASK) | own;
            nbuf.write((j & (cnt - 1)) as usize * cqe::SIZE, &bytes)?;
            i = j;
        }
        Err(bad)
    }
}
