//! The RC (reliable connected) service type: what of a QP is RC's and not every type's. The
//! shared plumbing (work queues, states and transitions, doorbells, CQ binding) is the rest
//! of [`super`]; another service type (UD, GSI, raw Ethernet) is a module beside this one.
//!
//! Here: RC's QPC fields at CREATE_QP and at each transition, the checks a connection needs
//! before its first command, and the UMR-based WQE segments of the connected types' BIND_MW
//! and LOCAL_INV (rdma-core providers/mlx5/qp.c `_mlx5_post_send` builds them in its
//! `IBV_QPT_RC` and `IBV_QPT_UC` branches only), with the completion opcode saved for them.

use super::*;
use crate::wc::WcOpcode;
use mlx5_prm::mkc;

/// CREATE_QP: the service type and the migration state (Linux ib/qp.c `create_qp_common`:
/// `qpc.st` from the QP type, `pm_state` MIGRATED).
pub(super) fn create_qpc(c: &mut CmdBuf) {
    c.set(cqpc(qpc::ST), qp::st::RC.into())
        .set(cqpc(qpc::PM_STATE), qp::pm::MIGRATED.into());
}

/// RST2INIT: responder access (`rre`, `rwe`, `rae` with `atomic_mode`) and the ack request
/// frequency (Linux ib/qp.c `__mlx5_ib_modify_qp`, `to_mlx5_access_flags`).
pub(super) fn init_qpc(c: &mut CmdBuf, access: Access, atomic_mode: u32) {
    let x = mqpc;
    c.set(x(qpc::RRE), access.contains(Access::REMOTE_READ) as u32)
        .set(x(qpc::RWE), access.contains(Access::REMOTE_WRITE) as u32)
        .set(x(qpc::RAE), access.contains(Access::REMOTE_ATOMIC) as u32)
        .set(x(qpc::ATOMIC_MODE), atomic_mode)
        .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ);
}

/// INIT2RTR: the connection toward `remote` (MTU, largest message, remote QPN and PSN,
/// responder resources `2^rra`, RNR timer) and its RoCE v2 path (Linux ib/qp.c
/// `mlx5_set_path`: remote MAC and GID, UDP source port `sport`, DSCP and traffic class, hop
/// limit, source GID index).
pub(super) fn rtr_qpc(
    c: &mut CmdBuf,
    remote: &QpEndpoint,
    o: &ConnectOptions,
    log_msg: u32,
    rra: u32,
    sport: u16,
) {
    let (x, p) = (mqpc, mpath);
    c.set(x(qpc::MTU), o.mtu as u32)
        .set(x(qpc::LOG_MSG_MAX), log_msg)
        .set(x(qpc::REMOTE_QPN), remote.qpn & 0xff_ffff)
        .set(x(qpc::NEXT_RCV_PSN), remote.psn & 0xff_ffff)
        .set(x(qpc::LOG_RRA_MAX), rra)
        .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ)
        .set(x(qpc::MIN_RNR_NAK), o.min_rnr_timer.into())
        .bytes(
            p(mlx5_prm::Field::new(ads::RMAC_47_32.offset, 48)),
            &remote.mac,
        )
        .set(p(ads::UDP_SPORT), sport.into())
        .set(p(ads::ETH_PRIO), 0)
        .set(p(ads::DSCP), (o.traffic_class >> 2).into())
        .set(p(ads::SRC_ADDR_INDEX), o.sgid_index.into())
        .set(p(ads::HOP_LIMIT), o.hop_limit.into())
        .set(p(ads::TCLASS), o.traffic_class.into())
        .set(p(ads::STAT_RATE), 0)
        .bytes(p(ads::RGID_RIP), &remote.gid);
}

/// RTR2RTS: the send PSN `psn`, retry and RNR retry counts, initiator resources `2^sra` and
/// the ack timeout (Linux ib/qp.c `__mlx5_ib_modify_qp`).
pub(super) fn rts_qpc(c: &mut CmdBuf, o: &ConnectOptions, psn: u32, sra: u32) {
    let (x, p) = (mqpc, mpath);
    c.set(x(qpc::NEXT_SEND_PSN), psn)
        .set(x(qpc::RETRY_COUNT), (o.retry_cnt & 7).into())
        .set(x(qpc::RNR_RETRY), (o.rnr_retry & 7).into())
        .set(x(qpc::LOG_SRA_MAX), sra)
        .set(x(qpc::LOG_ACK_REQ_FREQ), ACK_REQ_FREQ)
        .set(p(ads::ACK_TIMEOUT), (o.timeout & 0x1f).into());
}

/// What a connect to `remote` with `o` needs, checked before the first command: the remote
/// end, the source GID index, both rd_atomic depths, and atomics on the device when remote
/// atomic access is asked for.
pub(super) fn check_connect(
    caps: &crate::caps::Caps,
    remote: &QpEndpoint,
    o: &ConnectOptions,
) -> Result<()> {
    check_remote(remote)?;
    check_sgid_index(caps, o.sgid_index)?;
    log_rd_atomic(o.max_dest_rd_atomic, caps.log_max_ra_res_qp)?;
    log_rd_atomic(o.max_rd_atomic, caps.log_max_ra_req_qp)?;
    if o.access.contains(Access::REMOTE_ATOMIC) && atomic_mode(caps).is_none() {
        return Err(Error::Unsupported);
    }
    Ok(())
}

/// `qpc.log_ack_req_freq` as Linux sets it on every transition (ib/qp.c
/// `__mlx5_ib_modify_qp`: `MLX5_IB_ACK_REQ_FREQ` = 8).
pub(super) const ACK_REQ_FREQ: u32 = 8;

/// `log_sra_max` / `log_rra_max` for `n` outstanding RDMA READs / atomics: rounded up to a
/// power of two, as Linux does since commit 78ed28e08e74 ("RDMA/mlx5: Round
/// max_rd_atomic/max_dest_rd_atomic up instead of down": `fls(n - 1)`); 0 stays 0. A request
/// above the device's `2^log_max` is refused (Linux ib/qp.c `validate_rd_atomic`, "invalid
/// max_rd_atomic value"), never capped.
pub(super) fn log_rd_atomic(n: u8, log_max: u8) -> Result<u32> {
    let max = 1u32 << (log_max as u32).min(31);
    if n as u32 > max {
        return Err(InvalidInput::RdAtomic { requested: n, max }.into());
    }
    Ok(ilog2_ceil(n as u32))
}

/// Linux ib/qp.c mlx5_set_path: "sgid_index (%u) too large" against the port's GID table.
pub(super) fn check_sgid_index(caps: &crate::caps::Caps, index: u8) -> Result<()> {
    if index as u32 >= caps.gid_table_len() {
        return Err(InvalidInput::GidIndex.into());
    }
    Ok(())
}

/// The remote end of a connection, checked before any command: an RC QP connects to neither
/// special QP (0 is SMI, 1 is GSI) nor to a QPN wider than 24 bits, and needs a GID and a
/// MAC to address its packets (the model refuses such a path too, as `NO_ADDRESS_PATH`).
pub(super) fn check_remote(remote: &QpEndpoint) -> Result<()> {
    if remote.qpn < 2 || remote.qpn > 0xff_ffff {
        return Err(InvalidInput::RemoteQpn(remote.qpn).into());
    }
    if remote.gid == [0; 16] || remote.mac == [0; 6] {
        return Err(InvalidInput::RemoteAddress.into());
    }
    Ok(())
}

/// `atomic_caps.atomic_operations` bits (Linux include/linux/mlx5/driver.h
/// `MLX5_ATOMIC_OPS_*`).
pub(super) mod atomic_ops {
    pub const CMP_SWAP: u16 = 1 << 0;
    pub const FETCH_ADD: u16 = 1 << 1;
    pub const EXTENDED_CMP_SWAP: u16 = 1 << 2;
    pub const EXTENDED_FETCH_ADD: u16 = 1 << 3;
}

/// `qpc.atomic_mode` values (Linux include/linux/mlx5/driver.h `MLX5_ATOMIC_MODE_*`):
/// IB-compliant 8-byte atomics, and "up to 8 bytes" (larger sizes are `log2(bytes)`).
pub(super) mod atomic_mode_val {
    pub const IB_COMP: u32 = 1;
    pub const UP_TO_8B: u32 = 3;
}

/// The `atomic_mode` a QP with remote atomic access gets, from the device's atomic caps, or
/// `None` when it has none (Linux ib/qp.c `get_atomic_mode` and `atomic_size_to_mode`).
pub(super) fn atomic_mode(caps: &crate::caps::Caps) -> Option<u32> {
    use atomic_ops::*;
    if !caps.atomic {
        return None;
    }
    let ops = caps.atomic_operations;
    let mut mode = None;
    if ops & (EXTENDED_CMP_SWAP | EXTENDED_FETCH_ADD) != 0 {
        // atomic_size_to_mode: sizes up to 256 bytes; below 16 bytes the 8-byte mode.
        let sizes = caps.atomic_size_qp & 0x1ff;
        if sizes != 0 {
            let log = 15 - sizes.leading_zeros();
            mode = Some(if log > 3 {
                log
            } else {
                atomic_mode_val::UP_TO_8B
            });
        }
    }
    if mode.is_none() && ops & CMP_SWAP != 0 && ops & FETCH_ADD != 0 {
        mode = Some(atomic_mode_val::IB_COMP);
    }
    mode
}

/// [`crate::wq::SqSlot`] `wc_op` of a bind.
pub(crate) const WC_OP_BIND: u8 = 1;
/// [`crate::wq::SqSlot`] `wc_op` of a local invalidate.
pub(crate) const WC_OP_LOCAL_INV: u8 = 2;

/// The completion opcode of a UMR WQE from its saved `wc_op`.
pub(crate) fn wc_opcode(op: u8) -> WcOpcode {
    match op {
        WC_OP_BIND => WcOpcode::BindMw,
        WC_OP_LOCAL_INV => WcOpcode::LocalInv,
        _ => WcOpcode::Unknown,
    }
}

/// 16-byte units of a LOCAL_INV WQE: ctrl, UMR ctrl (48), mkey context (64).
pub(crate) const LOCAL_INV_DS: u32 =
    ((wqe::ctrl_seg::SIZE + wqe::umr_ctrl_seg::SIZE + mkc::BYTES) / wqe::SEND_WQE_DS) as u32;
/// The UMR ctrl segment: `flags`, `klm_octowords`, `mkey_mask`.
pub(crate) fn umr_ctrl(flags: u8, octowords: u16, mask: u64) -> [u8; wqe::umr_ctrl_seg::SIZE] {
    let mut b = [0u8; wqe::umr_ctrl_seg::SIZE];
    b[wqe::umr_ctrl_seg::FLAGS] = flags;
    let at = wqe::umr_ctrl_seg::KLM_OCTOWORDS;
    b[at..at + 2].copy_from_slice(&octowords.to_be_bytes());
    let at = wqe::umr_ctrl_seg::MKEY_MASK;
    b[at..at + 8].copy_from_slice(&mask.to_be_bytes());
    b
}

/// The UMR ctrl segment and mkey context of LOCAL_INV of a window whose key is `rkey`
/// (rdma-core qp.c IBV_WR_LOCAL_INV: `set_bind_wr(qp, IBV_MW_TYPE_2, 0, {}, ...)`).
pub(crate) fn local_inv_body(rkey: u32) -> [u8; wqe::umr_ctrl_seg::SIZE + mkc::BYTES] {
    use wqe::umr_ctrl_seg::{mask as mk, *};
    let mut b = [0u8; SIZE + mkc::BYTES];
    b[..SIZE].copy_from_slice(&umr_ctrl(
        FLAG_INLINE | FLAG_TRANSLATION_OFFSET_EN | FLAG_CHECK_QPN,
        0,
        mk::FREE | mk::KEY | mk::QPN,
    ));
    let seg = &mut b[SIZE..];
    let _ = mkc::FREE.set(seg, 1);
    let _ = mkc::QPN.set(seg, 0xff_ffff);
    let _ = mkc::MKEY_7_0.set(seg, rkey & 0xff);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LOCAL_INV's segments as rdma-core qp.c `set_umr_control_seg` / `set_umr_mkey_seg`
    /// write them for an empty type 2 bind (flags INLINE | TRANSLATION_OFFSET | CHECK_QPN =
    /// 0x98, mask FREE | MKEY | QPN, no KLM, mkey context free with qpn 0xffffff), with the
    /// window's variant kept.
    #[test]
    fn local_inv_segments_are_rdma_cores() {
        let b = local_inv_body(0x1234_56ab);
        assert_eq!(b[wqe::umr_ctrl_seg::FLAGS], 0x98);
        let at = wqe::umr_ctrl_seg::KLM_OCTOWORDS;
        assert_eq!(&b[at..at + 2], &[0, 0]);
        let at = wqe::umr_ctrl_seg::MKEY_MASK;
        assert_eq!(
            u64::from_be_bytes(b[at..at + 8].try_into().unwrap()),
            (1 << 29) | (1 << 14) | (1 << 13)
        );
        let seg = &b[wqe::umr_ctrl_seg::SIZE..];
        // `mlx5_wqe_mkey_context_seg`: free (byte 0, bit 6), qpn_mkey = 0xffffff << 8 | variant.
        assert_eq!(seg[0], 1 << 6);
        assert_eq!(&seg[4..8], &[0xff, 0xff, 0xff, 0xab]);
        assert_eq!(LOCAL_INV_DS, 8);
        assert_eq!(wc_opcode(WC_OP_BIND), WcOpcode::BindMw);
        assert_eq!(wc_opcode(WC_OP_LOCAL_INV), WcOpcode::LocalInv);
        assert_eq!(wc_opcode(0), WcOpcode::Unknown);
    }
}
