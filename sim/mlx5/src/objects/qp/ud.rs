//! The UD service type (`qpc.st` = UD) and the GSI QP (`qpc.st` = QP1): what of a QP's
//! commands only they have. A UD QP has no address path of its own (each send WQE carries
//! one, [`crate::datapath::ud`]); its transitions take the port, the P_Key index (checked
//! against the P_Key table), the Q_Key, the path MTU and message size limit, and the first
//! send PSN. The GSI QP is a UD QP the wire reaches as QPN 1 (one per port,
//! [`super::QpTable::gsi`]).
//!
//! Required fields per transition: ibv_modify_qp(3) "Required attributes" for UD (rdma-core
//! libibverbs/man/ibv_modify_qp.3: RESET→INIT `IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY`,
//! RTR→RTS `IBV_QP_SQ_PSN`). Optional fields: Linux drivers/infiniband/hw/mlx5/qp.c
//! `opt_mask[..][..][MLX5_QP_ST_UD]`. Linux has no `opt_mask` entry for `MLX5_QP_ST_QP1`, so
//! it sends the GSI QP's transitions with no optional field, and the model allows none.
//! The path MTU and message size: Linux qp.c `__mlx5_ib_modify_qp` writes `mtu` and
//! `log_msg_max` in every UD transition (4096 and 2^12 for UD, 256 and 2^8 for the GSI QP);
//! the model requires a valid MTU from INIT2RTR on, as for RC.

use mlx5_prm::{ads, opcode, qp, qpc};

use super::{check_port_pkey, check_shared, Connect, Qp, Route, Transition, TypeOps, PORT_NUM};
use crate::control::result::{get, CmdError};
use crate::datapath::Dp;

/// UD's entry points for the QP commands ([`super::ServiceType::ops`]).
pub(super) const OPS: TypeOps = TypeOps {
    allowed_optpar,
    check,
    apply,
    on_transition,
};

/// The GSI QP's: UD's, with no optional field in any transition.
pub(super) const GSI_OPS: TypeOps = TypeOps {
    allowed_optpar: |_| 0,
    check,
    apply,
    on_transition,
};

/// The `opt_param_mask` bits transition `op` allows a UD QP (Linux
/// drivers/infiniband/hw/mlx5/qp.c `opt_mask[..][..][MLX5_QP_ST_UD]`). RTS2RTS there also
/// allows `SRQN` and `CQN_RCV`, which the model does not implement (no SRQ, no CQ change):
/// refused. RTS2RTS also takes `COUNTER_SET_ID`, as for RC: qp.c `__mlx5_ib_qp_set_counter`
/// writes that RTS2RTS itself (outside `opt_mask`) for any QP an rdma counter binds.
fn allowed_optpar(op: u16) -> u32 {
    use qp::optpar::*;
    match op {
        opcode::INIT2INIT_QP => PKEY_INDEX | Q_KEY | PRI_PORT,
        opcode::INIT2RTR_QP => PKEY_INDEX | Q_KEY,
        opcode::RTS2RTS_QP => Q_KEY | COUNTER_SET_ID,
        opcode::RTR2RTS_QP | opcode::SQERR2RTS_QP => Q_KEY,
        _ => 0,
    }
}

/// Checks the UD fields transition `t` reads, before anything changes.
fn check(hca: &Dp<'_>, t: &Transition) -> Result<Connect, CmdError> {
    check_shared(hca, t)?;
    if t.opcode == opcode::INIT2RTR_QP && t.mask & qp::optpar::PKEY_INDEX != 0 {
        check_port_pkey(PORT_NUM, t.path.pkey_index)?;
    }
    Ok((Route::None, [0; 16]))
}

/// Writes the UD fields transition `t` sets into QP `q` (the checks passed).
fn apply(q: &mut Qp, t: &Transition, _: Connect) {
    let (ctx, path) = (t.ctx, t.path);
    let opt = |bit: u32| t.mask & bit != 0;
    let pri = qpc::PRIMARY_ADDRESS_PATH;
    let takes_qkey = t.opcode == opcode::RST2INIT_QP || opt(qp::optpar::Q_KEY);
    let takes_pkey = t.opcode == opcode::RST2INIT_QP || opt(qp::optpar::PKEY_INDEX);
    if takes_pkey {
        q.path.pkey_index = path.pkey_index;
        q.keep(ctx, ads::PKEY_INDEX.within(pri));
    }
    if t.opcode == opcode::RST2INIT_QP || opt(qp::optpar::PRI_PORT) {
        q.path.port = path.port;
        q.keep(ctx, ads::VHCA_PORT_NUM.within(pri));
    }
    if takes_qkey {
        q.qkey = get(ctx, qpc::Q_KEY);
        q.keep(ctx, qpc::Q_KEY);
    }
    match t.opcode {
        opcode::INIT2RTR_QP => {
            q.mtu = get(ctx, qpc::MTU);
            q.log_msg_max = get(ctx, qpc::LOG_MSG_MAX);
            q.keep(ctx, qpc::MTU);
            q.keep(ctx, qpc::LOG_MSG_MAX);
        }
        opcode::RTR2RTS_QP => {
            q.npsn = get(ctx, qpc::NEXT_SEND_PSN);
            q.keep(ctx, qpc::NEXT_SEND_PSN);
        }
        _ => {}
    }
}

/// A UD QP has no transport state to follow its transitions: its send queue runs at each
/// doorbell and its receives as datagrams arrive ([`crate::datapath::ud`]).
fn on_transition(_: &mut Dp<'_>, _: u32, _: u8, _: u8) {}
