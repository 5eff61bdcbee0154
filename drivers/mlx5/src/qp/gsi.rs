//! The GSI QP: the datagram QP the wire reaches as QPN 1, where Communication Management
//! and the other General Services MADs arrive and leave from (IBTA §3.5.3.1, §13.5.1).
//!
//! It is a hardware QP1 (`qpc.st` QP1, Linux drivers/infiniband/hw/mlx5/qp.c `to_mlx5_st`
//! for `MLX5_IB_QPT_HW_GSI`), one per port (Linux hw/mlx5/gsi.c `mlx5_ib_create_gsi` keeps
//! it in `devr.ports[].gsi`), sending its own MADs: Linux sends from separate UD QPs with
//! `deth_sqpn` only when the device has `set_deth_sqpn` (gsi.c `get_tx_qp`: with no TX QPs,
//! `gsi->rx_qp`). Its transitions and WQEs are UD's ([`super::ud`]), with the Q_Key
//! 0x80010000 (`IB_QP1_QKEY`, what core/mad.c `ib_mad_port_start` gives it), send PSN 0
//! (`IB_MAD_SEND_Q_PSN`), and path MTU 256 with 2^8-byte messages (ib/qp.c
//! `__mlx5_ib_modify_qp` for `is_sqp`).

use super::*;

/// The GSI QP's Q_Key (Linux include/rdma/ib_verbs.h `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// The QPN the wire names the GSI QP by, whatever its number on the device (IBTA §3.5.3.1).
pub const GSI_QPN: u32 = 1;

/// Claims the context's GSI QP, refused with [`InvalidInput::GsiExists`] while it has one.
pub(super) fn claim<H: Hal>(ctx: &CtxInner<H>) -> Result<()> {
    if ctx.gsi_open.swap(true, Ordering::AcqRel) {
        return Err(InvalidInput::GsiExists.into());
    }
    Ok(())
}

/// Gives the context's GSI QP back (it was never made, or the device destroyed it).
pub(super) fn release<H: Hal>(ctx: &CtxInner<H>) {
    ctx.gsi_open.store(false, Ordering::Release);
}
