//! Port counters, kept as a ConnectX port keeps them, and their PRM homes.
//!
//! One [`PortCounters`] per port: atomics, so the data path bumps them while a command handler
//! (`QUERY_VPORT_COUNTER`: vport.rs; `QUERY_Q_COUNTER`: crate::objects::counter; `ACCESS_REG PPCNT`
//! not yet) reads a [`CounterSnapshot`]. The link layer ([`crate::link::FramePort`]) keeps the frame,
//! byte, drop and link-error counters; the datapath adds the RC transport's per-QP counters to
//! the transport ones ([`Counter::DuplicateRequest`] and below; crate::datapath::rc `with_rc`), and
//! also to the Q counter set the QP is attached to (`qpc.counter_set_id`; each allocated set is
//! a [`PortCounters`] of its own, crate::objects::counter `add_for_qp`). Q counter set 0 is the port's.
//!
//! Counted nowhere yet (they read 0): [`Counter::RxWriteRequests`],
//! [`Counter::RxReadRequests`], [`Counter::RxAtomicRequests`] and
//! [`Counter::ImpliedNakSeqErr`]: the transport keeps no such per-QP tally.
//!
//! # Mapping to the PRM
//!
//! Every [`Counter`] names its closest PRM counter in [`Counter::prm`]; the three PRM sets are
//! (layouts: Linux include/linux/mlx5/mlx5_ifc.h):
//!
//! - **`QUERY_VPORT_COUNTER`** (`mlx5_ifc_query_vport_counter_out_bits`, a `traffic_counter`
//!   {packets, octets} pair per class, 64-bit). RoCE traffic is the "ib" class on an Ethernet
//!   port: Linux mlx5 en_stats.c names `received_ib_unicast` "rx_vport_rdma_unicast_packets/
//!   bytes" and mlx5_ib ib_virt.c `mlx5_ib_get_vf_stats` reports it as the RDMA rx/tx
//!   packets/bytes; non-RoCE frames are the "eth" classes (unicast/multicast/broadcast).
//! - **`QUERY_Q_COUNTER`** (`mlx5_ifc_query_q_counter_out_bits`, 32-bit each), the RoCE
//!   transport counters Linux drivers/infiniband/hw/mlx5/counters.c exposes (`basic_q_cnts`,
//!   `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`): `rx_write_requests`,
//!   `rx_read_requests`, `rx_atomic_requests`, `out_of_buffer`, `out_of_sequence`,
//!   `duplicate_request`, `rnr_nak_retry_err`, `packet_seq_err`, `implied_nak_seq_err`,
//!   `local_ack_timeout_err`, `req_transport_retries_exceeded`, `req_rnr_retries_exceeded`.
//!   Their byte offsets in the output are [`Counter::q_counter_offset`].
//! - **`PPCNT`**, Ethernet extended group (`eth_extended_cntrs_grp_data_layout`):
//!   `rx_icrc_encapsulated`, the ICRC error count counters.c `ext_ppcnt_cnts` reads.
//!
//! Counters with no PRM home (drops by reason, link framing errors, fault-injector tallies,
//! retransmitted packets) are model-only; [`Counter::prm`] says so.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a counter lives in the PRM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrmHome {
    /// A `QUERY_VPORT_COUNTER` traffic counter: `class` (e.g. `received_ib_unicast`) and
    /// `packets` or `octets`.
    Vport {
        /// The `traffic_counter` member of `query_vport_counter_out`.
        class: &'static str,
        /// `"packets"` or `"octets"`.
        field: &'static str,
    },
    /// A `query_q_counter_out` field.
    QCounter(&'static str),
    /// A PPCNT Ethernet extended counter.
    Ppcnt(&'static str),
    /// No PRM counter; the nearest one, if any, and why it is not the same.
    ModelOnly(&'static str),
}

macro_rules! counters {
    ($( $(#[$doc:meta])* $v:ident = $name:literal, $home:expr; )*) => {
        /// One port counter.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(usize)]
        pub enum Counter {
            $( $(#[$doc])* $v, )*
        }

        impl Counter {
            /// Every counter, in declaration order.
            pub const ALL: &'static [Counter] = &[$(Counter::$v),*];

            /// The model's name of the counter (snake case; the PRM name where there is one).
            pub fn name(self) -> &'static str {
                match self { $(Counter::$v => $name,)* }
            }

            /// The counter's PRM home.
            pub fn prm(self) -> PrmHome {
                match self { $(Counter::$v => $home,)* }
            }
        }
    };
}

use PrmHome::{ModelOnly, Ppcnt, QCounter, Vport};

counters! {
    // ---- link level: every frame on the wire --------------------------------------------
    /// Frames put on the link (after fault injection: what the peer is sent).
    TxFrames = "tx_frames", ModelOnly("sum of the transmitted_* classes of QUERY_VPORT_COUNTER");
    /// Bytes of [`Counter::TxFrames`] (Ethernet header to ICRC, no FCS).
    TxBytes = "tx_bytes", ModelOnly("sum of the transmitted_*.octets of QUERY_VPORT_COUNTER");
    /// Frames taken off the link, before any check.
    RxFrames = "rx_frames", ModelOnly("sum of the received_* classes of QUERY_VPORT_COUNTER");
    /// Bytes of [`Counter::RxFrames`].
    RxBytes = "rx_bytes", ModelOnly("sum of the received_*.octets of QUERY_VPORT_COUNTER");

    // ---- RoCE traffic (QUERY_VPORT_COUNTER "ib" classes) --------------------------------
    /// RoCE frames sent to a unicast MAC.
    TxRoceUnicastFrames = "tx_roce_unicast_frames",
        Vport { class: "transmitted_ib_unicast", field: "packets" };
    /// Bytes of [`Counter::TxRoceUnicastFrames`].
    TxRoceUnicastBytes = "tx_roce_unicast_bytes",
        Vport { class: "transmitted_ib_unicast", field: "octets" };
    /// RoCE frames sent to a group MAC.
    TxRoceMulticastFrames = "tx_roce_multicast_frames",
        Vport { class: "transmitted_ib_multicast", field: "packets" };
    /// Bytes of [`Counter::TxRoceMulticastFrames`].
    TxRoceMulticastBytes = "tx_roce_multicast_bytes",
        Vport { class: "transmitted_ib_multicast", field: "octets" };
    /// Ethernet frames an SQ sent to a unicast MAC (datapath/eth/tx.rs).
    TxEthUnicastFrames = "tx_eth_unicast_frames",
        Vport { class: "transmitted_eth_unicast", field: "packets" };
    /// Bytes of [`Counter::TxEthUnicastFrames`] (no FCS).
    TxEthUnicastBytes = "tx_eth_unicast_bytes",
        Vport { class: "transmitted_eth_unicast", field: "octets" };
    /// Ethernet frames an SQ sent to a multicast MAC.
    TxEthMulticastFrames = "tx_eth_multicast_frames",
        Vport { class: "transmitted_eth_multicast", field: "packets" };
    /// Bytes of [`Counter::TxEthMulticastFrames`].
    TxEthMulticastBytes = "tx_eth_multicast_bytes",
        Vport { class: "transmitted_eth_multicast", field: "octets" };
    /// Ethernet frames an SQ sent to the broadcast MAC.
    TxEthBroadcastFrames = "tx_eth_broadcast_frames",
        Vport { class: "transmitted_eth_broadcast", field: "packets" };
    /// Bytes of [`Counter::TxEthBroadcastFrames`].
    TxEthBroadcastBytes = "tx_eth_broadcast_bytes",
        Vport { class: "transmitted_eth_broadcast", field: "octets" };
    /// RoCE frames that passed every receive check (to a unicast MAC).
    RxRoceUnicastFrames = "rx_roce_unicast_frames",
        Vport { class: "received_ib_unicast", field: "packets" };
    /// Bytes of [`Counter::RxRoceUnicastFrames`].
    RxRoceUnicastBytes = "rx_roce_unicast_bytes",
        Vport { class: "received_ib_unicast", field: "octets" };
    /// RoCE frames that passed every receive check (to a group MAC).
    RxRoceMulticastFrames = "rx_roce_multicast_frames",
        Vport { class: "received_ib_multicast", field: "packets" };
    /// Bytes of [`Counter::RxRoceMulticastFrames`].
    RxRoceMulticastBytes = "rx_roce_multicast_bytes",
        Vport { class: "received_ib_multicast", field: "octets" };

    // ---- receive drops, by reason ----------------------------------------------------------
    /// RoCE frames whose ICRC is wrong (IBTA A17.4.1; dropped silently).
    RxIcrcErrors = "rx_icrc_encapsulated", Ppcnt("rx_icrc_encapsulated");
    /// Frames to a unicast MAC that is not the port's (the MAC filter drops them).
    RxDropWrongDstMac = "rx_drop_wrong_dst_mac",
        ModelOnly("hardware filters these before counting them at all");
    /// Frames that are not RoCEv2 (ARP, IPv6 ND, TCP, UDP to another port, ...) on a frame
    /// port with no Ethernet receiver ([`crate::link::FramePort::recv`]; the HCA's port hands
    /// them to its Ethernet receive path instead). Also counted in the "eth" classes below.
    RxDropNotRoce = "rx_drop_not_roce",
        ModelOnly("nearest: rx_steer_missed_packets (no steering rule takes them)");
    /// Frames that claim to be RoCEv2 but do not decode (truncated, bad IPv4 checksum, bad
    /// lengths, unknown opcode, ...: [`super::DecodeError`]).
    RxDropMalformed = "rx_drop_malformed", ModelOnly("nearest: received_errors of QUERY_VPORT_COUNTER");
    /// RoCE frames to an IP address that is not one of the port's RoCE v2 GIDs (the GID table
    /// programmed with SET_ROCE_ADDRESS; rxe_recv.c `rxe_chk_dgid`).
    RxDropWrongDstIp = "rx_drop_wrong_dst_ip",
        ModelOnly("no PRM counter; rxe_recv.c rxe_rcv drops these uncounted, before RXE_CNT_RCVD_PKTS");
    /// RoCE frames with a non-zero, wrong UDP checksum (Linux net/ipv4/udp.c
    /// `udp_queue_rcv_one_skb` verifies it before rxe's `encap_rcv`).
    RxDropUdpChecksum = "rx_drop_udp_checksum", ModelOnly("no PRM counter");
    /// RoCE frames with BTH TVer != 0 (rxe_recv.c `hdr_check`).
    RxDropBadTver = "rx_drop_bad_tver", ModelOnly("no PRM counter");
    /// RoCE frames to QP 0, which RoCE does not have (rxe_recv.c `hdr_check`).
    RxDropQp0 = "rx_drop_qp0", ModelOnly("no PRM counter");
    /// UD datagrams whose BTH P_Key does not match the receiving QP's P_Key table entry
    /// (datapath/ud/recv.rs; IBTA §10.9.3).
    RxDropPkey = "rx_drop_pkey", ModelOnly("nearest: hca_vport_context.pkey_violation_counter");
    /// UD datagrams whose DETH Q_Key is not the receiving QP's (datapath/ud/recv.rs; IBTA
    /// §10.2.4).
    RxDropQkey = "rx_drop_qkey", ModelOnly("nearest: hca_vport_context.qkey_violation_counter");
    /// UD datagrams whose payload is longer than the receiving QP's path MTU (`qpc.mtu`;
    /// datapath/ud/recv.rs): a length error, dropped as Linux rxe_resp.c `check_length` and
    /// `rxe_responder` (RESPST_ERR_LENGTH, class D for UD) drop them.
    RxDropUdLength = "rx_drop_ud_length", ModelOnly("no PRM counter");
    /// Ethernet frames steered to an RQ that had no receive WQE posted (datapath/eth/rx.rs),
    /// and UD datagrams that found no receive WQE (datapath/ud/recv.rs).
    OutOfBuffer = "out_of_buffer", QCounter("out_of_buffer");
    /// Non-RoCE frames to a unicast MAC the vport took (the port's, or any when promiscuous).
    RxEthUnicastFrames = "rx_eth_unicast_frames",
        Vport { class: "received_eth_unicast", field: "packets" };
    /// Bytes of [`Counter::RxEthUnicastFrames`] (no FCS).
    RxEthUnicastBytes = "rx_eth_unicast_bytes",
        Vport { class: "received_eth_unicast", field: "octets" };
    /// Non-RoCE frames to a multicast MAC.
    RxEthMulticastFrames = "rx_eth_multicast_frames",
        Vport { class: "received_eth_multicast", field: "packets" };
    /// Bytes of [`Counter::RxEthMulticastFrames`].
    RxEthMulticastBytes = "rx_eth_multicast_bytes",
        Vport { class: "received_eth_multicast", field: "octets" };
    /// Non-RoCE frames to the broadcast MAC.
    RxEthBroadcastFrames = "rx_eth_broadcast_frames",
        Vport { class: "received_eth_broadcast", field: "packets" };
    /// Bytes of [`Counter::RxEthBroadcastFrames`].
    RxEthBroadcastBytes = "rx_eth_broadcast_bytes",
        Vport { class: "received_eth_broadcast", field: "octets" };

    // ---- Ethernet receive drops (crate::datapath::steer), by reason ----------------------
    /// Ethernet frames longer than the vport's MTU allows (`nic_vport_context.mtu`, which
    /// counts the FCS the link does not carry).
    RxDropOversize = "rx_oversize_pkts_phy",
        ModelOnly("nearest: PPCNT IEEE 802.3 a_frame_too_long_errors (Linux en_stats.c rx_oversize_pkts_phy); PPCNT is not answered");
    /// Ethernet frames with an 802.1Q/802.1ad tag: the vport has no VLAN list (model choice).
    RxDropVlanTagged = "rx_drop_vlan_tagged",
        ModelOnly("no PRM counter: the vport has no VLAN list (allowed_list_type VLAN is refused)");
    /// IEEE 802.3 frames (a length, not an EtherType, below 0x0600): the model steers
    /// Ethernet II only.
    RxDropNotEthernetII = "rx_drop_not_ethernet_ii", ModelOnly("model choice: no PRM counter");
    /// Ethernet frames to a MAC neither in the vport's unicast / multicast address list nor
    /// taken by a promiscuous mode (the eswitch forwards to a vport only the addresses of its
    /// lists: Linux eswitch.c `esw_apply_vport_addr_list`).
    RxDropVportFilter = "rx_drop_vport_filter",
        ModelOnly("no PRM counter for this function: frames no e-switch rule forwards never reach the vport (the port's PPCNT RFC 2863 if_in_discards, en_stats.c rx_discards_phy, is the nearest)");
    /// Ethernet frames that passed the vport filter while no NIC_RX root flow table is set.
    RxDropNoRootTable = "rx_drop_no_root_table",
        ModelOnly("nearest: nic_receive_steering_discard of QUERY_VNIC_ENV (not answered)");
    /// Ethernet frames no flow table entry took (a table missed with the default miss
    /// action): "packets that completed RX flow steering but were discarded due to a
    /// mismatch in flow table" (Linux Documentation/networking/device_drivers/ethernet/
    /// mellanox/mlx5/devlink.rst, `nic_receive_steering_discard`; en_stats.c names it
    /// rx_steer_missed_packets).
    RxSteerMissed = "rx_steer_missed_packets",
        ModelOnly("nic_receive_steering_discard of QUERY_VNIC_ENV, which the model does not answer");
    /// Ethernet frames a flow table entry with the DROP action took.
    RxDropSteeringRule = "rx_drop_steering_rule",
        ModelOnly("no PRM counter without a flow counter on the rule (flow counters not modelled)");
    /// Ethernet frames steering forwarded to a TIR whose RQ is not in RDY (RST or ERR, as
    /// between Linux en_main.c `mlx5e_modify_rq_state` calls) or is gone: dropped by the RQ.
    RxDropRqNotReady = "rx_drop_rq_not_ready",
        ModelOnly("no PRM counter: the RQ takes no WQE, so out_of_buffer does not count it");

    // ---- link (stream framing) errors --------------------------------------------------
    /// The peer sent a frame length of 0 (connection dropped).
    LinkZeroLength = "link_zero_length", ModelOnly("link framing error: no PRM counter");
    /// The peer sent a frame length above the link's maximum (connection dropped).
    LinkOversized = "link_oversized", ModelOnly("link framing error: no PRM counter");
    /// The peer closed the connection in the middle of a frame (connection dropped).
    LinkTruncated = "link_truncated", ModelOnly("link framing error: no PRM counter");
    /// Socket errors (connection dropped).
    LinkIoErrors = "link_io_errors", ModelOnly("no PRM counter");
    /// The peer closed the connection at a frame boundary.
    LinkClosed = "link_closed", ModelOnly("no PRM counter");
    /// Frames not sent because the link was down or its send backlog full.
    TxDropLink = "tx_drop_link", ModelOnly("nearest: transmit_errors of QUERY_VPORT_COUNTER");
    /// Capture (pcap) write errors; the frame still travels.
    PcapErrors = "pcap_errors", ModelOnly("model only");

    // ---- fault injector (what it did) ----------------------------------------------------
    /// Frames the fault injector dropped.
    FaultDropped = "fault_dropped", ModelOnly("fault injection");
    /// Extra copies the fault injector sent.
    FaultDuplicated = "fault_duplicated", ModelOnly("fault injection");
    /// Frames the fault injector held back and sent later.
    FaultReordered = "fault_reordered", ModelOnly("fault injection");
    /// Frames the fault injector corrupted (one byte).
    FaultCorrupted = "fault_corrupted", ModelOnly("fault injection");

    // ---- RC transport: bumped by the transport ------------------------------------------
    /// Responder: RDMA WRITE requests received.
    RxWriteRequests = "rx_write_requests", QCounter("rx_write_requests");
    /// Responder: RDMA READ requests received.
    RxReadRequests = "rx_read_requests", QCounter("rx_read_requests");
    /// Responder: atomic requests received.
    RxAtomicRequests = "rx_atomic_requests", QCounter("rx_atomic_requests");
    /// Responder: duplicate requests received (PSN before the expected one; IBTA 9.7.5.1.1).
    DuplicateRequest = "duplicate_request", QCounter("duplicate_request");
    /// Responder: out-of-sequence requests received (PSN after the expected one; each one
    /// that made, or would have made, a PSN sequence error NAK).
    OutOfSequence = "out_of_sequence", QCounter("out_of_sequence");
    /// Responder: RNR NAKs sent (no receive WQE for a SEND).
    RnrNakSent = "rnr_nak_sent",
        ModelOnly("nearest: out_of_buffer (drops for lack of a receive WQE, the RNR condition)");
    /// Requester: RNR NAKs received (retry limit not exceeded).
    RnrNakReceived = "rnr_nak_retry_err", QCounter("rnr_nak_retry_err");
    /// Requester: PSN sequence error NAKs received.
    PacketSeqErr = "packet_seq_err", QCounter("packet_seq_err");
    /// Requester: implied NAK sequence errors (a response skipped over an outstanding READ or
    /// atomic).
    ImpliedNakSeqErr = "implied_nak_seq_err", QCounter("implied_nak_seq_err");
    /// Requester: local ACK timeouts (retransmit timer expiries).
    LocalAckTimeout = "local_ack_timeout_err", QCounter("local_ack_timeout_err");
    /// Requester: packets sent again (go-back-N from the first unacknowledged PSN).
    Retransmits = "retransmits",
        ModelOnly("nearest: roce_adp_retrans (adaptive retransmission, not on a ConnectX-5)");
    /// Requester: QPs that ran out of `retry_count` (RETRY_EXC_ERR completions).
    RetriesExceeded = "req_transport_retries_exceeded", QCounter("req_transport_retries_exceeded");
    /// Requester: QPs that ran out of `rnr_retry` (RNR_RETRY_EXC_ERR completions).
    RnrRetriesExceeded = "req_rnr_retries_exceeded", QCounter("req_rnr_retries_exceeded");
}

/// Number of counters.
pub const NUM_COUNTERS: usize = Counter::ALL.len();

impl Counter {
    /// The vport's `received_eth_*` (`rx`) or `transmitted_eth_*` class of an Ethernet frame
    /// to `dst`: broadcast, multicast (I/G bit) or unicast, as (packets, octets)
    /// (QUERY_VPORT_COUNTER, Linux mlx5_ifc.h `query_vport_counter_out`).
    pub fn eth_class(dst: &[u8; 6], rx: bool) -> (Counter, Counter) {
        use Counter::*;
        match (dst, rx) {
            ([0xff, 0xff, 0xff, 0xff, 0xff, 0xff], true) => {
                (RxEthBroadcastFrames, RxEthBroadcastBytes)
            }
            ([0xff, 0xff, 0xff, 0xff, 0xff, 0xff], false) => {
                (TxEthBroadcastFrames, TxEthBroadcastBytes)
            }
            (d, true) if d[0] & 1 != 0 => (RxEthMulticastFrames, RxEthMulticastBytes),
            (d, false) if d[0] & 1 != 0 => (TxEthMulticastFrames, TxEthMulticastBytes),
            (_, true) => (RxEthUnicastFrames, RxEthUnicastBytes),
            (_, false) => (TxEthUnicastFrames, TxEthUnicastBytes),
        }
    }

    /// Byte offset of the counter's 32-bit big-endian field in `query_q_counter_out`, for the
    /// `QCounter` ones (Linux include/linux/mlx5/mlx5_ifc.h `mlx5_ifc_query_q_counter_out_bits`:
    /// each counter a 32-bit field followed by 32 reserved bits, from `rx_write_requests` at
    /// bit 0x80; the extended error counters from `req_rnr_retries_exceeded` at 0x380 are packed).
    pub fn q_counter_offset(self) -> Option<usize> {
        let name = match self.prm() {
            QCounter(n) => n,
            _ => return None,
        };
        Some(match name {
            "rx_write_requests" => 0x10,
            "rx_read_requests" => 0x18,
            "rx_atomic_requests" => 0x20,
            "rx_dct_connect" => 0x28,
            "out_of_buffer" => 0x30,
            "out_of_sequence" => 0x38,
            "duplicate_request" => 0x40,
            "rnr_nak_retry_err" => 0x48,
            "packet_seq_err" => 0x50,
            "implied_nak_seq_err" => 0x58,
            "local_ack_timeout_err" => 0x60,
            "req_rnr_retries_exceeded" => 0x70,
            "req_transport_retries_exceeded" => 0xb4,
            _ => return None,
        })
    }
}

impl fmt::Display for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A port's live counters (shared with `Arc`; every method takes `&self`).
#[derive(Debug)]
pub struct PortCounters {
    v: [AtomicU64; NUM_COUNTERS],
}

impl Default for PortCounters {
    fn default() -> Self {
        PortCounters {
            v: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl PortCounters {
    /// All zero.
    pub fn new() -> PortCounters {
        PortCounters::default()
    }
    /// Adds one.
    pub fn bump(&self, c: Counter) {
        self.add(c, 1);
    }
    /// Adds `n` (wrapping, as hardware counters do).
    pub fn add(&self, c: Counter, n: u64) {
        self.v[c as usize].fetch_add(n, Ordering::Relaxed);
    }
    /// The current value.
    pub fn get(&self, c: Counter) -> u64 {
        self.v[c as usize].load(Ordering::Relaxed)
    }
    /// Every counter at once (each read atomically; the set is not one instant).
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot(std::array::from_fn(|i| self.v[i].load(Ordering::Relaxed)))
    }
    /// Sets every counter to 0 (`QUERY_*_COUNTER` with `clear` set).
    /// Sets one counter back to 0 (the `clear` bit of a query).
    pub fn reset(&self, c: Counter) {
        self.v[c as usize].store(0, Ordering::Relaxed);
    }

    /// Sets every counter back to 0.
    pub fn clear(&self) {
        for a in &self.v {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// A copy of every counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSnapshot(pub [u64; NUM_COUNTERS]);

impl CounterSnapshot {
    /// One counter's value.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
    /// The non-zero counters, by name (for logs and test failure messages).
    pub fn nonzero(&self) -> Vec<(&'static str, u64)> {
        Counter::ALL
            .iter()
            .filter(|c| self.get(**c) != 0)
            .map(|c| (c.name(), self.get(*c)))
            .collect()
    }
    /// Frames dropped on receive, all reasons together.
    pub fn rx_dropped(&self) -> u64 {
        [
            Counter::RxIcrcErrors,
            Counter::RxDropWrongDstMac,
            Counter::RxDropNotRoce,
            Counter::RxDropMalformed,
            Counter::RxDropWrongDstIp,
            Counter::RxDropUdpChecksum,
            Counter::RxDropBadTver,
            Counter::RxDropQp0,
            Counter::RxDropOversize,
            Counter::RxDropVlanTagged,
            Counter::RxDropNotEthernetII,
            Counter::RxDropVportFilter,
            Counter::RxDropNoRootTable,
            Counter::RxSteerMissed,
            Counter::RxDropSteeringRule,
            Counter::RxDropRqNotReady,
        ]
        .iter()
        .map(|c| self.get(*c))
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_unique_and_offsets_inside_the_output() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), NUM_COUNTERS);
        let mut offs = Vec::new();
        for c in Counter::ALL {
            match (c.prm(), c.q_counter_offset()) {
                (QCounter(n), Some(o)) => {
                    // query_q_counter_out is 0x100 bytes; fields are 4-byte aligned.
                    assert!(o + 4 <= 0x100 && o % 4 == 0, "{n}");
                    offs.push(o);
                }
                (QCounter(n), None) => panic!("{n} has no offset"),
                (_, Some(_)) => panic!("{c} is not a q counter"),
                _ => {}
            }
        }
        let n = offs.len();
        offs.sort();
        offs.dedup();
        assert_eq!(offs.len(), n, "two counters share an offset");
    }

    /// Each destination MAC falls in one vport class, each class has its packets and octets
    /// at the same PRM home.
    #[test]
    fn eth_classes_by_destination() {
        use Counter::*;
        let uc = [0x02, 0, 0, 0, 0, 1];
        let mc = [0x33, 0x33, 0, 0, 0, 1];
        let bc = [0xff; 6];
        assert_eq!(
            Counter::eth_class(&uc, true),
            (RxEthUnicastFrames, RxEthUnicastBytes)
        );
        assert_eq!(
            Counter::eth_class(&mc, true),
            (RxEthMulticastFrames, RxEthMulticastBytes)
        );
        assert_eq!(
            Counter::eth_class(&bc, true),
            (RxEthBroadcastFrames, RxEthBroadcastBytes)
        );
        assert_eq!(
            Counter::eth_class(&uc, false),
            (TxEthUnicastFrames, TxEthUnicastBytes)
        );
        assert_eq!(
            Counter::eth_class(&mc, false),
            (TxEthMulticastFrames, TxEthMulticastBytes)
        );
        assert_eq!(
            Counter::eth_class(&bc, false),
            (TxEthBroadcastFrames, TxEthBroadcastBytes)
        );
        for d in [uc, mc, bc] {
            for rx in [true, false] {
                let (p, o) = Counter::eth_class(&d, rx);
                match (p.prm(), o.prm()) {
                    (
                        Vport {
                            class: a,
                            field: "packets",
                        },
                        Vport {
                            class: b,
                            field: "octets",
                        },
                    ) => {
                        assert_eq!(a, b)
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn bump_snapshot_clear() {
        let c = PortCounters::new();
        c.bump(Counter::DuplicateRequest);
        c.add(Counter::RxBytes, 100);
        let s = c.snapshot();
        assert_eq!(s.get(Counter::DuplicateRequest), 1);
        assert_eq!(s.get(Counter::RxBytes), 100);
        assert_eq!(
            s.nonzero(),
            vec![("rx_bytes", 100), ("duplicate_request", 1)]
        );
        c.clear();
        assert_eq!(c.snapshot().nonzero(), vec![]);
    }
}
