//! The work queue an Ethernet SQ or RQ is built on (`struct mlx5_ifc_wq_bits`, Linux
//! include/linux/mlx5/mlx5_ifc.h, embedded in `sqc` and `rqc`): its buffer, doorbell record and
//! the checks CREATE_SQ and CREATE_RQ share.
//!
//! What Linux sets (drivers/net/ethernet/mellanox/mlx5/core/en_main.c `mlx5e_create_sq` /
//! `mlx5e_create_rq`, en/params.c `mlx5e_build_sq_param_common` / `mlx5e_build_rq_param`):
//! `wq_type` CYCLIC, `pd`, `uar_page` (SQ only), `log_wq_stride` (64-byte basic blocks for an
//! SQ; the data segments of one receive WQE for an RQ), `log_wq_sz`, `log_wq_pg_sz` (page shift
//! less 12), `dbr_addr`, `end_padding_mode` (RQ) and the page list `pas`. The doorbell record's
//! dword 0 is the RQ's producer counter and dword 1 the SQ's (en_main.c `wq->db =
//! &wq->db[MLX5_SND_DBR]`, include/linux/mlx5/qp.h `MLX5_RCV_DBR` 0, `MLX5_SND_DBR` 1).
//!
//! The model refuses what it does not implement rather than ignore it: striding and linked-list
//! WQs, WQ signatures, header-data split, hairpin, SHAMPO, umem-backed buffers and the
//! low-watermark event.

use mlx5_prm::{cmd_hca_cap, cmd_status, wq, wq_end_pad_mode, wq_type, Field};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, CmdError};
use crate::memory::{DmaError, GuestMemory};
use crate::objects::mr::{PagedBuffer, PasError};
use crate::objects::Objects;

/// log2 of the send WQE basic block (`MLX5_SEND_WQE_BB`, 64 bytes): an SQ's stride.
pub const LOG_SQ_STRIDE: u32 = 6;
/// log2 of the smallest receive WQE: one 16-byte data segment.
pub const LOG_MIN_RQ_STRIDE: u32 = 4;

/// Which queue a work queue context belongs to (what differs in its checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqKind {
    Send,
    Receive,
}

/// The syndromes of the work queue checks (shared by CREATE_SQ and CREATE_RQ; range
/// 0x5214_xxxx, see [`crate::control::syndrome`]).
pub mod syndrome {
    /// `wq_type` is not CYCLIC (linked-list and striding WQs are not modelled).
    pub const WQ_TYPE: u32 = 0x5214_0001;
    /// `wq_signature`, `cd_slave`, header-data split, hairpin, striding or SHAMPO field set.
    pub const UNSUPPORTED_FIELD: u32 = 0x5214_0002;
    /// `end_padding_mode` not NONE or ALIGN (ALIGN on an RQ only).
    pub const END_PADDING: u32 = 0x5214_0003;
    /// `pd` names no protection domain.
    pub const BAD_PD: u32 = 0x5214_0004;
    /// An SQ's `uar_page` names no UAR.
    pub const BAD_UAR: u32 = 0x5214_0005;
    /// `log_wq_stride` not 6 (SQ) or outside 4..=log2(max_wqe_sz_rq) (RQ).
    pub const STRIDE: u32 = 0x5214_0006;
    /// `log_wq_sz` above `cmd_hca_cap.log_max_wq_sz`.
    pub const SIZE: u32 = 0x5214_0007;
    /// `dbr_addr` not 8-byte aligned.
    pub const DBR_MISALIGNED: u32 = 0x5214_0008;
    /// Fewer `pas` entries than the buffer needs.
    pub const PAS_TOO_FEW: u32 = 0x5214_0009;
    /// A `pas` entry not aligned to the page size, or the page size out of range.
    pub const PAS_BAD: u32 = 0x5214_000a;
    /// `dbr_umem_valid` / `wq_umem_valid` set (umem-backed queues are not modelled).
    pub const UMEM: u32 = 0x5214_000b;
    /// `lwm` set (the limit event is not modelled).
    pub const LWM: u32 = 0x5214_000c;
}

/// A work queue: the ring in guest memory and its doorbell record.
#[derive(Debug)]
pub struct Wq {
    /// Protection domain the WQEs' keys must belong to.
    pub pd: u32,
    /// UAR page whose doorbell register rings it (an SQ's; 0 for an RQ).
    pub uar: u32,
    /// Bus address of the doorbell record.
    pub dbr_addr: u64,
    /// log2 of the number of WQEs (RQ) or basic blocks (SQ).
    pub log_sz: u32,
    /// log2 of the stride in bytes.
    pub log_stride: u32,
    /// `end_padding_mode`.
    pub end_padding: u32,
    pub(crate) buf: PagedBuffer,
}

impl Wq {
    /// The guest memory the WQ uses: its ring's pages and its doorbell record.
    pub fn dma_ranges(&self) -> Vec<(u64, u64)> {
        let mut v = self.buf.ranges();
        v.push((self.dbr_addr, 8));
        v
    }

    /// Number of strides in the ring.
    pub fn size(&self) -> u32 {
        1 << self.log_sz
    }

    /// Stride `counter` (wrapping in the ring), `buf.len()` bytes from its start.
    pub(crate) fn read(
        &self,
        mem: &dyn GuestMemory,
        counter: u32,
        at: u64,
        buf: &mut [u8],
    ) -> Result<(), DmaError> {
        let off = ((counter & (self.size() - 1)) as u64) << self.log_stride;
        self.buf.read(mem, off + at, buf)
    }

    /// The doorbell record's counter of this kind (dword 0 for an RQ, 1 for an SQ).
    pub(crate) fn producer(&self, mem: &dyn GuestMemory, kind: WqKind) -> Result<u16, DmaError> {
        let (rq, sq) = crate::objects::qp::read_dbr(mem, self.dbr_addr)?;
        Ok(match kind {
            WqKind::Send => sq,
            WqKind::Receive => rq,
        })
    }

    /// Writes the context QUERY_SQ / QUERY_RQ report to `out` (the output's `sqc` / `rqc`):
    /// `saved` (the context as created) with the queue's current `state` and, in its `wq`
    /// (`wq_at` bytes in), the hardware WQE counter. Both contexts have `state` and `wq` at
    /// the same places (Linux mlx5_ifc.h `sqc` / `rqc`).
    pub(crate) fn query_into(
        &self,
        saved: &[u8],
        (state_field, state): (Field, u8),
        (wq_at, hw_counter): (usize, u32),
        out: &mut [u8],
    ) {
        let Some(dst) = out.get_mut(..saved.len()) else {
            return;
        };
        dst.copy_from_slice(saved);
        let _ = state_field.set(dst, state.into());
        let _ = wq::HW_COUNTER.set(&mut dst[wq_at..], hw_counter);
    }
}

/// Fields that must be zero: what the model does not implement.
const UNSUPPORTED: &[Field] = &[
    wq::WQ_SIGNATURE,
    wq::CD_SLAVE,
    wq::HDS_SKIP_FIRST_SGE,
    wq::LOG2_HDS_BUF_SIZE,
    wq::LOG_HAIRPIN_NUM_PACKETS,
    wq::LOG_HAIRPIN_DATA_SZ,
    wq::LOG_WQE_NUM_OF_STRIDES,
    wq::TWO_BYTE_SHIFT_EN,
    wq::LOG_WQE_STRIDE_SIZE,
    wq::HEADERS_MKEY,
    wq::SHAMPO_ENABLE,
    wq::LOG_RESERVATION_SIZE,
    wq::LOG_MAX_NUM_OF_PACKETS_PER_RESERVATION,
    wq::LOG_HEADERS_ENTRY_SIZE,
    wq::LOG_HEADERS_BUFFER_ENTRY_NUM,
];

/// Checks the `wq` context `ctx` of a CREATE_SQ / CREATE_RQ whose page list is `pas` and
/// builds the work queue. Nothing changes on failure.
pub(crate) fn create(
    caps: &Caps,
    objects: &Objects,
    ctx: &[u8],
    pas: &[u8],
    kind: WqKind,
) -> Result<Wq, CmdError> {
    if get(ctx, wq::WQ_TYPE) != wq_type::CYCLIC as u32 {
        return Err(bad_param(syndrome::WQ_TYPE));
    }
    if UNSUPPORTED.iter().any(|&f| get(ctx, f) != 0) {
        return Err(bad_param(syndrome::UNSUPPORTED_FIELD));
    }
    if get(ctx, wq::DBR_UMEM_VALID) != 0 || get(ctx, wq::WQ_UMEM_VALID) != 0 {
        return Err(bad_param(syndrome::UMEM));
    }
    if get(ctx, wq::LWM) != 0 {
        return Err(bad_param(syndrome::LWM));
    }
    // End padding (the device pads a scattered packet to the end of the cache line) is for
    // receive queues; Linux sets ALIGN on its RQs (en/params.c `rq_end_pad_mode`) when the
    // device reports `end_pad`.
    let end_padding = get(ctx, wq::END_PADDING_MODE);
    let pad_ok = match kind {
        WqKind::Send => end_padding == 0,
        WqKind::Receive => {
            end_padding == 0
                || (end_padding == wq_end_pad_mode::ALIGN as u32
                    && caps.general(cmd_hca_cap::END_PAD) != 0)
        }
    };
    if !pad_ok {
        return Err(bad_param(syndrome::END_PADDING));
    }
    let pd = get(ctx, wq::PD);
    if !objects.pds.contains(pd) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_PD));
    }
    let uar = match kind {
        WqKind::Send => {
            let u = get(ctx, wq::UAR_PAGE);
            if !objects.uars.contains(u) {
                return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_UAR));
            }
            u
        }
        WqKind::Receive => 0,
    };
    let log_stride = get(ctx, wq::LOG_WQ_STRIDE);
    let stride_ok = match kind {
        WqKind::Send => log_stride == LOG_SQ_STRIDE,
        WqKind::Receive => {
            (LOG_MIN_RQ_STRIDE..32).contains(&log_stride)
                && (1u32 << log_stride) <= caps.general(cmd_hca_cap::MAX_WQE_SZ_RQ)
        }
    };
    if !stride_ok {
        return Err(bad_param(syndrome::STRIDE));
    }
    let log_sz = get(ctx, wq::LOG_WQ_SZ);
    if log_sz > caps.general(cmd_hca_cap::LOG_MAX_WQ_SZ) {
        return Err(bad_param(syndrome::SIZE));
    }
    let dbr_addr = wq::DBR_ADDR.get64(ctx).unwrap_or(0);
    if !dbr_addr.is_multiple_of(8) {
        return Err(bad_param(syndrome::DBR_MISALIGNED));
    }
    let buf = PagedBuffer::new(
        pas,
        get(ctx, wq::LOG_WQ_PG_SZ),
        get(ctx, wq::PAGE_OFFSET),
        (1u64 << log_sz) << log_stride,
    )
    .map_err(|e| match e {
        PasError::TooFewPages => bad_param(syndrome::PAS_TOO_FEW),
        _ => bad_param(syndrome::PAS_BAD),
    })?;
    Ok(Wq {
        pd,
        uar,
        dbr_addr,
        log_sz,
        log_stride,
        end_padding,
        buf,
    })
}
