//! What the CM state machine drives here ([`CmTransport`]): MADs go out through the GSI
//! service, and QP moves go to the RC QP of the id that owns the QP number, with the
//! attributes librdmacm's `ucma_modify_qp_rtr` / `ucma_modify_qp_rts` take from the kernel
//! (cm.c `cm_init_qp_init_attr`, `cm_init_qp_rtr_attr`, `cm_init_qp_rts_attr`).

use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::{ConnectOptions, Mtu, QpEndpoint, QueuePair};
use rdma_cm::conn::{CmTransport, Peer, QpStep, RtrAttrs, RtsAttrs};
use rdma_cm::MAD_LEN;

use crate::gsi::{ipv4_of_gid, Gsi};
use crate::id::Id;
use crate::types::{MoveError, Neighbours};

/// The GSI service, the ids' QPs and the neighbour table, for one call into the CM.
pub(crate) struct Link<'a, H: Hal> {
    pub(crate) gsi: &'a mut Gsi<H>,
    pub(crate) ids: &'a mut Vec<Id<H>>,
    pub(crate) nb: &'a mut dyn Neighbours,
    pub(crate) now: u64,
    pub(crate) sgid_index: u8,
}

impl<H: Hal> CmTransport for Link<'_, H> {
    type QpError = MoveError;

    fn send_mad(&mut self, to: &Peer, mad: &[u8; MAD_LEN]) {
        self.gsi.send(self.now, to, mad, self.nb);
    }

    fn modify_qp(&mut self, qpn: u32, step: QpStep) -> Result<(), MoveError> {
        let id = self
            .ids
            .iter_mut()
            .find(|i| i.qp.as_ref().is_some_and(|q| q.qpn() == qpn))
            .ok_or(MoveError::NoQp(qpn))?;
        let access = id.access;
        let qp = id.qp.as_mut().ok_or(MoveError::NoQp(qpn))?;
        move_qp(qp, step, access, self.sgid_index, self.nb)
    }
}

/// The driver's path MTU of an `enum ib_mtu` value.
fn mtu(v: u8) -> Result<Mtu, MoveError> {
    Ok(match v {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        v => return Err(MoveError::PathMtu(v)),
    })
}

/// One step of `qp`. The P_Key of INIT is the default one's, index 0 (RoCE has no other:
/// the REQ carries 0xffff).
fn move_qp<H: Hal>(
    qp: &mut QueuePair<H>,
    step: QpStep,
    access: Access,
    sgid_index: u8,
    nb: &mut dyn Neighbours,
) -> Result<(), MoveError> {
    match step {
        // Already in INIT since `rdma_create_qp` (librdmacm `ucma_modify_qp_rtr` moves it
        // only when it is not).
        QpStep::Init { .. } if qp.state() == mlx5_prm::qp::state::INIT => Ok(()),
        QpStep::Init { .. } => qp.to_init(access).map_err(MoveError::Verbs),
        QpStep::Rtr(a) => rtr(qp, &a, access, sgid_index, nb),
        QpStep::Rts(a) => qp.to_rts(&rts_options(&a)).map_err(MoveError::Verbs),
        QpStep::Err => qp.to_err().map_err(MoveError::Verbs),
    }
}

/// INIT → RTR toward the peer of `a`, through the MAC its neighbour entry holds (cma.c
/// `cma_modify_qp_rtr` resolves the destination MAC with the route; a minimum RNR timer of 0
/// as cm.c `cm_init_qp_rtr_attr` sets it).
fn rtr<H: Hal>(
    qp: &mut QueuePair<H>,
    a: &RtrAttrs,
    access: Access,
    sgid_index: u8,
    nb: &mut dyn Neighbours,
) -> Result<(), MoveError> {
    let ip = ipv4_of_gid(&a.remote_gid).ok_or(MoveError::NoNeighbour([0; 4]))?;
    let mac = nb.lookup(ip).ok_or(MoveError::NoNeighbour(ip))?;
    let remote = QpEndpoint {
        qpn: a.dest_qpn,
        psn: a.rq_psn,
        gid: a.remote_gid,
        mac,
    };
    let o = ConnectOptions {
        mtu: mtu(a.path_mtu)?,
        sgid_index,
        hop_limit: a.hop_limit,
        traffic_class: a.traffic_class,
        min_rnr_timer: 0,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        access,
        flow_label: a.flow_label,
        ..ConnectOptions::default()
    };
    qp.to_rtr(&remote, &o).map_err(MoveError::Verbs)
}

/// RTR → RTS options: the PSN the peer chose, the path's ACK timeout, the retry counts and
/// the initiator depth the exchange settled.
fn rts_options(a: &RtsAttrs) -> ConnectOptions {
    ConnectOptions {
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        max_rd_atomic: a.max_rd_atomic,
        sq_psn: Some(a.sq_psn),
        ..ConnectOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_mtu_values_map_and_others_are_refused() {
        assert_eq!(mtu(3), Ok(Mtu::Mtu1024));
        assert_eq!(mtu(5), Ok(Mtu::Mtu4096));
        assert_eq!(mtu(0), Err(MoveError::PathMtu(0)));
        assert_eq!(mtu(6), Err(MoveError::PathMtu(6)));
    }
}
