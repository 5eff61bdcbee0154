//! The RC service type (`qpc.st` = RC): what of a QP's commands only RC has. The optional
//! fields each transition allows (Linux drivers/infiniband/hw/mlx5/qp.c
//! `opt_mask[..][..][MLX5_QP_ST_RC]`), the checks of the RC fields of the QP context (path
//! MTU, remote QPN, the address path and the source GID, the read / atomic depths), how a
//! transition writes them into the QP, and the binding to the RC transport
//! ([`crate::datapath::rc`]), built at RTR, updated at RTS and dropped at RESET.

use mlx5_prm::{ads, cmd_hca_cap, opcode, qp, qpc};

use super::{
    check_port_pkey, check_shared, Connect, Qp, Route, Transition, TypeOps, GID_TABLE_SEARCH,
    PORT_NUM,
};
use crate::control::result::{bad_param, get, CmdError};
use crate::datapath::Dp;

use super::syndrome;

/// RC's entry points for the QP commands ([`super::ServiceType::ops`]).
pub(super) const OPS: TypeOps = TypeOps {
    allowed_optpar,
    check,
    apply,
    on_transition,
};

/// The `opt_param_mask` bits transition `op` allows (Linux drivers/infiniband/hw/mlx5/qp.c
/// `opt_mask[..][..][MLX5_QP_ST_RC]`); 0 for the transitions without a context.
fn allowed_optpar(op: u16) -> u32 {
    use qp::optpar::*;
    match op {
        opcode::INIT2INIT_QP => RRE | RAE | RWE | PKEY_INDEX | PRI_PORT | LAG_TX_AFF,
        opcode::INIT2RTR_QP => ALT_ADDR_PATH | RRE | RAE | RWE | PKEY_INDEX | LAG_TX_AFF,
        opcode::RTR2RTS_QP => {
            ALT_ADDR_PATH | RRE | RAE | RWE | PM_STATE | RNR_TIMEOUT | OFFLOAD_TYPE
        }
        opcode::RTS2RTS_QP => {
            RRE | RAE
                | RWE
                | RNR_TIMEOUT
                | PM_STATE
                | ALT_ADDR_PATH
                | OFFLOAD_TYPE
                | RMPN_XRQN
                // Linux qp.c `__mlx5_ib_qp_set_counter` (cap `rts2rts_qp_counters_set_id`).
                | COUNTER_SET_ID
        }
        opcode::SQERR2RTS_QP | opcode::SQD_RTS_QP => RNR_TIMEOUT | RWE | RAE | RRE,
        _ => 0,
    }
}

/// Checks the RC fields transition `opcode` reads from the context `ctx` (primary path
/// `path`, optional fields `mask`), before anything changes; returns the route and source GID
/// the QP connects with (INIT2RTR; none for the other transitions).
fn check(hca: &Dp<'_>, t: &Transition) -> Result<Connect, CmdError> {
    let (opcode, ctx, path) = (t.opcode, t.ctx, &t.path);
    let opt = |bit: u32| t.mask & bit != 0;
    check_shared(hca, t)?;
    match opcode {
        opcode::INIT2RTR_QP => {
            if get(ctx, qpc::REMOTE_QPN) < 2 {
                return Err(bad_param(syndrome::BAD_REMOTE_QPN));
            }
            if path.rgid == [0; 16] || path.rmac == [0; 6] {
                return Err(bad_param(syndrome::NO_ADDRESS_PATH));
            }
            if hca.roce_gid(path.src_addr_index).is_none() {
                return Err(bad_param(syndrome::BAD_SGID_INDEX));
            }
            check_port_pkey(path.port, 0)?;
            if opt(qp::optpar::PKEY_INDEX) {
                check_port_pkey(PORT_NUM, path.pkey_index)?;
            }
            if get(ctx, qpc::LOG_RRA_MAX) > hca.cap(cmd_hca_cap::LOG_MAX_RA_RES_QP) {
                return Err(bad_param(syndrome::RA_ABOVE_CAP));
            }
        }
        opcode::RTR2RTS_QP
            if get(ctx, qpc::LOG_SRA_MAX) > hca.cap(cmd_hca_cap::LOG_MAX_RA_REQ_QP) =>
        {
            return Err(bad_param(syndrome::RA_ABOVE_CAP));
        }
        _ => {}
    }

    // Route and source GID for INIT2RTR.
    Ok(if opcode == opcode::INIT2RTR_QP {
        let sgid = hca.roce_gid(path.src_addr_index).unwrap_or([0; 16]);
        let local = (0..GID_TABLE_SEARCH).any(|i| hca.roce_gid(i) == Some(path.rgid));
        (if local { Route::Local } else { Route::Remote }, sgid)
    } else {
        (Route::None, [0; 16])
    })
}

/// Writes the RC fields transition `opcode` sets from the context `ctx` into QP `q` (the
/// checks passed).
fn apply(q: &mut Qp, t: &Transition, (route, sgid): Connect) {
    let (opcode, ctx, path) = (t.opcode, t.ctx, t.path);
    let opt = |bit: u32| t.mask & bit != 0;
    let pri = qpc::PRIMARY_ADDRESS_PATH;
    match opcode {
        opcode::RST2INIT_QP => {
            q.path.pkey_index = path.pkey_index;
            q.path.port = path.port;
            q.keep(ctx, ads::PKEY_INDEX.within(pri));
            q.keep(ctx, ads::VHCA_PORT_NUM.within(pri));
            q.set_access(ctx);
        }
        opcode::INIT2INIT_QP => {
            if opt(qp::optpar::RRE | qp::optpar::RWE | qp::optpar::RAE) {
                q.set_access(ctx);
            }
            if opt(qp::optpar::PKEY_INDEX) {
                q.path.pkey_index = path.pkey_index;
                q.keep(ctx, ads::PKEY_INDEX.within(pri));
            }
        }
        opcode::INIT2RTR_QP => {
            q.mtu = get(ctx, qpc::MTU);
            q.log_msg_max = get(ctx, qpc::LOG_MSG_MAX);
            q.remote_qpn = get(ctx, qpc::REMOTE_QPN);
            q.epsn = get(ctx, qpc::NEXT_RCV_PSN);
            q.log_rra_max = get(ctx, qpc::LOG_RRA_MAX);
            q.min_rnr_nak = get(ctx, qpc::MIN_RNR_NAK);
            let (pkey, timeout) = (q.path.pkey_index, q.path.ack_timeout);
            q.path = path;
            q.path.ack_timeout = timeout;
            if !opt(qp::optpar::PKEY_INDEX) {
                q.path.pkey_index = pkey;
            }
            q.route = route;
            q.sgid = sgid;
            for f in [
                qpc::MTU,
                qpc::LOG_MSG_MAX,
                qpc::REMOTE_QPN,
                qpc::NEXT_RCV_PSN,
                qpc::LOG_RRA_MAX,
                qpc::MIN_RNR_NAK,
                qpc::LOG_ACK_REQ_FREQ,
            ] {
                q.keep(ctx, f);
            }
            // The whole primary path, except ack_timeout (set by RTR2RTS) and the P_Key index
            // (only with its optpar bit).
            let mut p = [0u8; ads::BYTES];
            let _ = pri.read_bytes(ctx, &mut p);
            let _ = ads::ACK_TIMEOUT.set(&mut p, q.path.ack_timeout);
            let _ = ads::PKEY_INDEX.set(&mut p, q.path.pkey_index);
            let _ = pri.write_bytes(&mut q.qpc, &p);
            if opt(qp::optpar::RRE | qp::optpar::RWE | qp::optpar::RAE) {
                q.set_access(ctx);
            }
        }
        _ => {
            // RTR2RTS, RTS2RTS, SQERR2RTS, SQD2RTS.
            if opcode == opcode::RTR2RTS_QP {
                q.npsn = get(ctx, qpc::NEXT_SEND_PSN);
                q.retry_count = get(ctx, qpc::RETRY_COUNT);
                q.rnr_retry = get(ctx, qpc::RNR_RETRY);
                q.log_sra_max = get(ctx, qpc::LOG_SRA_MAX);
                q.path.ack_timeout = path.ack_timeout;
                for f in [
                    qpc::NEXT_SEND_PSN,
                    qpc::RETRY_COUNT,
                    qpc::RNR_RETRY,
                    qpc::LOG_SRA_MAX,
                    ads::ACK_TIMEOUT.within(pri),
                ] {
                    q.keep(ctx, f);
                }
            }
            if opt(qp::optpar::RRE | qp::optpar::RWE | qp::optpar::RAE) {
                q.set_access(ctx);
            }
            if opt(qp::optpar::RNR_TIMEOUT) {
                q.min_rnr_nak = get(ctx, qpc::MIN_RNR_NAK);
                q.keep(ctx, qpc::MIN_RNR_NAK);
            }
        }
    }
}

/// The QP moved from state `from` to `to`: its RC transport follows
/// ([`crate::datapath::rc::on_transition`]).
fn on_transition(hca: &mut Dp<'_>, qpn: u32, from: u8, to: u8) {
    crate::datapath::rc::on_transition(hca, qpn, from, to);
}

impl Qp {
    /// Takes the remote access enables (`rre`, `rwe`, `rae`, `atomic_mode`).
    fn set_access(&mut self, ctx: &[u8]) {
        self.rre = get(ctx, qpc::RRE) != 0;
        self.rwe = get(ctx, qpc::RWE) != 0;
        self.rae = get(ctx, qpc::RAE) != 0;
        self.atomic_mode = get(ctx, qpc::ATOMIC_MODE);
        for f in [qpc::RRE, qpc::RWE, qpc::RAE, qpc::ATOMIC_MODE] {
            self.keep(ctx, f);
        }
    }
}
