//! Counters the driver reads as Linux reads them: Q counter sets (ALLOC_Q_COUNTER,
//! DEALLOC_Q_COUNTER, QUERY_Q_COUNTER) and the vport's traffic counters (QUERY_VPORT_COUNTER).
//!
//! Linux mlx5_ib allocates one Q counter set per port at start (drivers/infiniband/hw/mlx5/
//! counters.c `mlx5_ib_alloc_counters` → `mlx5_cmd_alloc_q_counter`, reading
//! `alloc_q_counter_out.counter_set_id`), and one per `rdma_counter` a QP is bound to
//! (`mlx5_ib_counter_bind_qp`); a QP counts into the set its QPC names: qp.c
//! `__mlx5_ib_modify_qp` writes `qpc.counter_set_id` on RST2INIT and INIT2RTR, and
//! `__mlx5_ib_qp_set_counter` moves an RTS QP to another set with RTS2RTS and the
//! `MLX5_QP_OPTPAR_COUNTER_SET_ID` optional parameter (only with the
//! `rts2rts_qp_counters_set_id` capability). A set is read with QUERY_Q_COUNTER
//! (`mlx5_ib_query_q_counters`: the 32-bit fields of `query_q_counter_out`), released with
//! DEALLOC_Q_COUNTER. Sets exist only when `cmd_hca_cap.max_qp_cnt` is non-zero
//! (counters.c `mlx5_ib_counters_init`).
//!
//! Here: [`Context::alloc_counter_set`](crate::Context::alloc_counter_set) gives a [`CounterSet`] (released when dropped, after
//! every QP attached to it: the QPs hold it), [`QueuePair::set_counter_set`](crate::qp::QueuePair::set_counter_set) attaches a QP,
//! [`CounterSet::query`] reads (and optionally clears) it, and
//! [`Context::query_vport_counters`](crate::Context::query_vport_counters) reads the port's traffic counters (Linux core/vport.c
//! `mlx5_core_query_vport_counter`; ib_virt.c / en_stats.c read the "ib" classes as the RDMA
//! traffic of an Ethernet port).

use alloc::sync::Arc;

use mlx5_prm::{
    alloc_q_counter_in, alloc_q_counter_out, cmd_hca_cap, dealloc_q_counter_in,
    dealloc_q_counter_out, opcode, query_q_counter_in, query_q_counter_out,
    query_vport_counter_out, Field,
};

use crate::cmd::{get, CmdBuf};
use crate::context::CtxInner;
use crate::error::{Error, Result};
use crate::hal::Hal;

/// The RoCE transport counters of one Q counter set (`query_q_counter_out`, Linux
/// include/linux/mlx5/mlx5_ifc.h; the names are the PRM's, which Linux's rdma statistics
/// keep: counters.c `basic_q_cnts`, `out_of_seq_q_cnts`, `retrans_q_cnts`,
/// `extended_err_cnts`). Each is a 32-bit counter that wraps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QCounters {
    /// RDMA WRITE requests received.
    pub rx_write_requests: u32,
    /// RDMA READ requests received.
    pub rx_read_requests: u32,
    /// Atomic requests received.
    pub rx_atomic_requests: u32,
    /// Packets dropped for lack of a receive WQE.
    pub out_of_buffer: u32,
    /// Out-of-sequence requests received (responder; cap `out_of_seq_cnt`).
    pub out_of_sequence: u32,
    /// Duplicate requests received (responder; cap `retransmission_q_counters`).
    pub duplicate_request: u32,
    /// RNR NAKs received with the retry limit not exceeded (requester).
    pub rnr_nak_retry_err: u32,
    /// PSN sequence error NAKs received (requester).
    pub packet_seq_err: u32,
    /// Implied NAK sequence errors (requester).
    pub implied_nak_seq_err: u32,
    /// Local ACK timeouts: the retransmit timer expired (requester).
    pub local_ack_timeout_err: u32,
    /// QPs that ran out of `rnr_retry`.
    pub req_rnr_retries_exceeded: u32,
    /// QPs that ran out of `retry_count`.
    pub req_transport_retries_exceeded: u32,
    /// Adaptive retransmissions (cap `roce_accl`; not on a ConnectX-5, reads 0 there).
    pub roce_adp_retrans: u32,
}

impl QCounters {
    fn parse(out: &[u8]) -> QCounters {
        use query_q_counter_out as o;
        QCounters {
            rx_write_requests: get(out, o::RX_WRITE_REQUESTS),
            rx_read_requests: get(out, o::RX_READ_REQUESTS),
            rx_atomic_requests: get(out, o::RX_ATOMIC_REQUESTS),
            out_of_buffer: get(out, o::OUT_OF_BUFFER),
            out_of_sequence: get(out, o::OUT_OF_SEQUENCE),
            duplicate_request: get(out, o::DUPLICATE_REQUEST),
            rnr_nak_retry_err: get(out, o::RNR_NAK_RETRY_ERR),
            packet_seq_err: get(out, o::PACKET_SEQ_ERR),
            implied_nak_seq_err: get(out, o::IMPLIED_NAK_SEQ_ERR),
            local_ack_timeout_err: get(out, o::LOCAL_ACK_TIMEOUT_ERR),
            req_rnr_retries_exceeded: get(out, o::REQ_RNR_RETRIES_EXCEEDED),
            req_transport_retries_exceeded: get(out, o::REQ_TRANSPORT_RETRIES_EXCEEDED),
            roce_adp_retrans: get(out, o::ROCE_ADP_RETRANS),
        }
    }
}

/// One class of `query_vport_counter_out`: a `traffic_counter` (Linux mlx5_ifc.h
/// `mlx5_ifc_traffic_counter_bits`: 64-bit `packets`, then 64-bit `octets`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficCounter {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub octets: u64,
}

/// The vport's traffic counters (`query_vport_counter_out`). On an Ethernet port RoCE
/// traffic is the "ib" classes (Linux en_stats.c names `received_ib_unicast`
/// "rx_vport_rdma_unicast_*"), everything else the "eth" classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VportCounters {
    /// `received_errors`.
    pub received_errors: TrafficCounter,
    /// `transmit_errors`.
    pub transmit_errors: TrafficCounter,
    /// `received_ib_unicast`: RoCE received.
    pub received_ib_unicast: TrafficCounter,
    /// `transmitted_ib_unicast`: RoCE sent.
    pub transmitted_ib_unicast: TrafficCounter,
    /// `received_ib_multicast`.
    pub received_ib_multicast: TrafficCounter,
    /// `transmitted_ib_multicast`.
    pub transmitted_ib_multicast: TrafficCounter,
    /// `received_eth_broadcast`.
    pub received_eth_broadcast: TrafficCounter,
    /// `transmitted_eth_broadcast`.
    pub transmitted_eth_broadcast: TrafficCounter,
    /// `received_eth_unicast`.
    pub received_eth_unicast: TrafficCounter,
    /// `transmitted_eth_unicast`.
    pub transmitted_eth_unicast: TrafficCounter,
    /// `received_eth_multicast`.
    pub received_eth_multicast: TrafficCounter,
    /// `transmitted_eth_multicast`.
    pub transmitted_eth_multicast: TrafficCounter,
    /// `local_loopback`.
    pub local_loopback: TrafficCounter,
}

fn traffic(out: &[u8], f: Field) -> TrafficCounter {
    let at = f.byte_offset();
    let word = |o: usize| {
        let mut b = [0u8; 8];
        if let Some(s) = out.get(at + o..at + o + 8) {
            b.copy_from_slice(s);
        }
        u64::from_be_bytes(b)
    };
    TrafficCounter {
        packets: word(0),
        octets: word(8),
    }
}

impl VportCounters {
    pub(crate) fn parse(out: &[u8]) -> VportCounters {
        use query_vport_counter_out as o;
        VportCounters {
            received_errors: traffic(out, o::RECEIVED_ERRORS),
            transmit_errors: traffic(out, o::TRANSMIT_ERRORS),
            received_ib_unicast: traffic(out, o::RECEIVED_IB_UNICAST),
            transmitted_ib_unicast: traffic(out, o::TRANSMITTED_IB_UNICAST),
            received_ib_multicast: traffic(out, o::RECEIVED_IB_MULTICAST),
            transmitted_ib_multicast: traffic(out, o::TRANSMITTED_IB_MULTICAST),
            received_eth_broadcast: traffic(out, o::RECEIVED_ETH_BROADCAST),
            transmitted_eth_broadcast: traffic(out, o::TRANSMITTED_ETH_BROADCAST),
            received_eth_unicast: traffic(out, o::RECEIVED_ETH_UNICAST),
            transmitted_eth_unicast: traffic(out, o::TRANSMITTED_ETH_UNICAST),
            received_eth_multicast: traffic(out, o::RECEIVED_ETH_MULTICAST),
            transmitted_eth_multicast: traffic(out, o::TRANSMITTED_ETH_MULTICAST),
            local_loopback: traffic(out, o::LOCAL_LOOPBACK),
        }
    }
}

/// An allocated Q counter set, shared by its [`CounterSet`] handle and the QPs attached to it.
pub(crate) struct CounterSetInner<H: Hal> {
    pub(crate) ctx: Arc<CtxInner<H>>,
    /// `counter_set_id` (8 bits in every layout that carries it).
    pub(crate) id: u8,
}

impl<H: Hal> CounterSetInner<H> {
    /// ALLOC_Q_COUNTER (see [`crate::Context::alloc_counter_set`]).
    pub(crate) fn alloc(ctx: &Arc<CtxInner<H>>) -> Result<CounterSetInner<H>> {
        if get(&ctx.caps.general_cur, cmd_hca_cap::MAX_QP_CNT) == 0 {
            return Err(Error::Unsupported);
        }
        let c = CmdBuf::new(opcode::ALLOC_Q_COUNTER, 0, alloc_q_counter_in::BYTES);
        let mut out = [0u8; alloc_q_counter_out::BYTES];
        ctx.exec(&c, &mut out)?;
        let id = get(&out, alloc_q_counter_out::COUNTER_SET_ID) as u8;
        if id == 0 {
            return Err(Error::BadFirmwareReply {
                opcode: opcode::ALLOC_Q_COUNTER,
            });
        }
        Ok(CounterSetInner {
            ctx: ctx.clone(),
            id,
        })
    }

    /// QUERY_Q_COUNTER (see [`CounterSet::query`]).
    pub(crate) fn query(&self, clear: bool) -> Result<QCounters> {
        let mut c = CmdBuf::new(opcode::QUERY_Q_COUNTER, 0, query_q_counter_in::BYTES);
        c.set(query_q_counter_in::COUNTER_SET_ID, self.id.into())
            .set(query_q_counter_in::CLEAR, clear.into());
        let mut out = [0u8; query_q_counter_out::BYTES];
        self.ctx.exec(&c, &mut out)?;
        Ok(QCounters::parse(&out))
    }
}

impl<H: Hal> Drop for CounterSetInner<H> {
    fn drop(&mut self) {
        // No DMA memory is involved: a failed DEALLOC only leaves the set allocated.
        let mut c = CmdBuf::new(opcode::DEALLOC_Q_COUNTER, 0, dealloc_q_counter_in::BYTES);
        c.set(dealloc_q_counter_in::COUNTER_SET_ID, self.id.into());
        let mut out = [0u8; dealloc_q_counter_out::BYTES];
        let _ = self.ctx.exec(&c, &mut out);
    }
}

/// A Q counter set: the transport counters of the QPs attached to it
/// ([`QueuePair::set_counter_set`](crate::qp::QueuePair::set_counter_set)). Dropping the handle releases the set once no QP holds it
/// (DEALLOC_Q_COUNTER).
pub struct CounterSet<H: Hal> {
    pub(crate) inner: Arc<CounterSetInner<H>>,
}

impl<H: Hal> CounterSet<H> {
    /// The set's `counter_set_id`.
    pub fn id(&self) -> u8 {
        self.inner.id
    }

    /// QUERY_Q_COUNTER of this set; `clear` zeroes the counters after the read (the
    /// `clear` bit of `query_q_counter_in`).
    pub fn query(&self, clear: bool) -> Result<QCounters> {
        self.inner.query(clear)
    }
}
