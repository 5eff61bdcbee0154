//! The GSI service: QP 1 with its CQ and a region of MAD buffers; MADs in (who sent them,
//! from the GRH area and the completion) and out (a UD SEND to the peer's QP 1).
//!
//! As Linux's MAD layer runs it on RoCE (`drivers/infiniband/core/mad.c`, `agent.c`;
//! `hw/mlx5/gsi.c`): receives with room for any datagram (the GRH area and 4096 bytes), of
//! which those of exactly one 256-byte MAD are handed on, posted at start and again as each
//! completes; sends to QPN 1 with the well-known Q_Key (`IB_QP1_QKEY`,
//! `include/rdma/ib_mad.h`), through an address handle to the peer's IPv4-mapped GID and the
//! MAC its neighbour entry holds (cm.c `cm_create_response_msg_ah` →
//! `ib_init_ah_attr_from_wc` → `rdma_addr_find_l2_eth_by_grh`). A MAD to a peer whose MAC is
//! not known yet waits here while an ARP request asks (bounded, then dropped: the CM
//! retries).

use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::{
    AddressHandle, AhAttr, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QueuePair,
    SendData, SendFlags, SendOp, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion, GRH_BYTES,
};
use mlx5_prm::qp::state as qp_state;
use rdma_cm::conn::Peer;
use rdma_cm::mad::QP1_QKEY;
use rdma_cm::MAD_LEN;

use crate::arp::{Arp, ArpWait};
use crate::types::Neighbours;

/// Bytes of one receive: the GRH area and a MAD.
pub const RECV_BYTES: usize = GRH_BYTES + MAD_LEN;

/// Room of each receive buffer, and their stride in the region: the GRH area and the
/// largest datagram a RoCE port carries (path MTU 4096, `include/rdma/ib_verbs.h`
/// `IB_MTU_4096`). A datagram longer than a MAD then completes and is dropped here by its
/// length; in a receive of only [`RECV_BYTES`] it would fail the receive as a local length
/// error, which takes the QP to ERR (the model does so, as for RC), and QP 1 would stop.
const RECV_STRIDE: usize = GRH_BYTES + 4096;

/// Hop limit of the MADs we send: the IPv4 TTL Linux gives RoCE v2 packets of a route with
/// the default TTL (`ib_init_ah_attr_from_wc` takes the route's, 64 in every capture).
const HOP_LIMIT: u8 = 64;

/// Work request ids of sends carry this bit; receives are their buffer's index.
const SEND_TAG: u64 = 1 << 32;

/// Most MADs waiting for a MAC at once; more are dropped.
const PENDING_MAX: usize = 32;

/// What the GSI service counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsiCounters {
    /// MADs received.
    pub received: u64,
    /// MADs posted for sending.
    pub sent: u64,
    /// Receives that completed in error, were not one MAD long (shorter or longer than
    /// 256 bytes), or came without an IPv4 GRH.
    pub bad_receives: u64,
    /// Sends that completed in error.
    pub send_errors: u64,
    /// Times QP 1 was brought back to RTS: from SQE after a send that failed, from ERR
    /// after a receive that failed.
    pub restarts: u64,
    /// MADs dropped: no send buffer free, no room to wait for a MAC, the MAC never came, a
    /// peer GID that is not IPv4-mapped, or the driver refused the send.
    pub dropped: u64,
}

/// A MAD waiting for its peer's MAC.
struct Pending {
    wait: ArpWait,
    to: Peer,
    mad: [u8; MAD_LEN],
}

/// QP 1 and its buffers.
pub(crate) struct Gsi<H: Hal> {
    qp: QueuePair<H>,
    cq: CompletionQueue<H>,
    mr: MemoryRegion<H>,
    pd: ProtectionDomain<H>,
    sgid_index: u8,
    recv_slots: usize,
    send_slots: usize,
    send_free: Vec<usize>,
    pending: Vec<Pending>,
    /// How long a MAD waits for a MAC.
    resolve_ns: u64,
    pub(crate) counters: GsiCounters,
}

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), else `None`.
pub(crate) fn ipv4_of_gid(gid: &[u8; 16]) -> Option<[u8; 4]> {
    let mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    mapped.then(|| [gid[12], gid[13], gid[14], gid[15]])
}

impl<H: Hal> Gsi<H> {
    /// QP 1 in RTS with `recv_slots` receives posted and `send_slots` send buffers.
    pub(crate) fn new(
        ctx: &mlx5::Context<H>,
        sgid_index: u8,
        recv_slots: usize,
        send_slots: usize,
        resolve_ns: u64,
    ) -> mlx5::Result<Self> {
        let pd = ctx.alloc_pd()?;
        let entries = u32::try_from(recv_slots + send_slots).unwrap_or(u32::MAX);
        let cq = ctx.create_cq(entries)?;
        let caps = QpCaps {
            max_send_wr: send_slots as u32,
            max_recv_wr: recv_slots as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_gsi_qp(&cq, &cq, &caps)?;
        let len = recv_slots * RECV_STRIDE + send_slots * MAD_LEN;
        let mr = pd.alloc_mr(len, Access::LOCAL_WRITE)?;
        let mut gsi = Gsi {
            qp,
            cq,
            mr,
            pd,
            sgid_index,
            recv_slots,
            send_slots,
            send_free: (0..send_slots).rev().collect(),
            pending: Vec::new(),
            resolve_ns,
            counters: GsiCounters::default(),
        };
        for i in 0..recv_slots {
            gsi.post_recv(i)?;
        }
        Ok(gsi)
    }

    fn post_recv(&mut self, slot: usize) -> mlx5::Result<()> {
        let sge = self.mr.sge((slot * RECV_STRIDE) as u64, RECV_STRIDE as u32);
        self.qp.post_recv(&[mlx5::RecvWr {
            wr_id: slot as u64,
            sges: &[sge],
        }])
    }

    fn send_offset(&self, slot: usize) -> u64 {
        (self.recv_slots * RECV_STRIDE + slot * MAD_LEN) as u64
    }

    /// The next MAD received, with its sender; send completions on the way free their
    /// buffers. `Ok(None)` when the CQ is empty.
    pub(crate) fn recv(&mut self) -> mlx5::Result<Option<(Peer, [u8; MAD_LEN])>> {
        let mut wc = [WorkCompletion::default()];
        while self.cq.poll(&mut wc)? == 1 {
            let w = wc[0];
            if w.wr_id & SEND_TAG != 0 {
                self.send_free.push((w.wr_id & !SEND_TAG) as usize);
                if w.status != WcStatus::Success {
                    self.counters.send_errors += 1;
                    // A failed send stops QP 1's send queue (SQE): back to RTS, as Linux's
                    // MAD layer does (core/mad.c `ib_mad_send_error`); the MAD is lost, the
                    // CM's retries send it again.
                    if w.status != WcStatus::WrFlushErr && self.qp.query_state()? == qp_state::SQER
                    {
                        self.qp.recover_send_queue()?;
                        self.counters.restarts += 1;
                    }
                }
                continue;
            }
            if w.status != WcStatus::Success {
                self.counters.bad_receives += 1;
                // A failed receive puts QP 1 in ERR (no datagram can fail for its length: the
                // buffers take the largest); otherwise this is a flush left from before a
                // restart, whose buffer is posted again already.
                if self.qp.query_state()? == qp_state::ERR {
                    self.restart()?;
                }
                continue;
            }
            let slot = w.wr_id as usize;
            let got = self.take(&w, slot);
            // The buffer goes back at once: the MAD is copied out.
            self.post_recv(slot)?;
            match got {
                Some(m) => {
                    self.counters.received += 1;
                    return Ok(Some(m));
                }
                None => self.counters.bad_receives += 1,
            }
        }
        Ok(None)
    }

    /// Brings QP 1 back from ERR: through RESET to RTS as at start (what is outstanding is
    /// gone: its completions with the reset, its MADs lost, which the CM's retries cover),
    /// every receive posted again, every send buffer free.
    fn restart(&mut self) -> mlx5::Result<()> {
        self.counters.restarts += 1;
        self.qp.to_reset()?;
        self.qp.activate_datagram()?;
        self.send_free = (0..self.send_slots).rev().collect();
        for i in 0..self.recv_slots {
            self.post_recv(i)?;
        }
        Ok(())
    }

    /// The sender and MAD of a receive completion: the sender's IPv4 address from the GRH
    /// area ([`mlx5::grh_ipv4_source`]; Linux core/verbs.c `ib_init_ah_attr_from_wc` for
    /// `RDMA_NETWORK_IPV4`), its QP from the completion.
    fn take(&self, w: &WorkCompletion, slot: usize) -> Option<(Peer, [u8; MAD_LEN])> {
        if w.status != WcStatus::Success || w.opcode != WcOpcode::Recv {
            return None;
        }
        // A MAD is 256 bytes (`ib_mad.h` `IB_MGMT_MAD_SIZE`): a shorter datagram is not one
        // (handed on, it would read as a MAD padded with zeros), nor is a longer one.
        if w.byte_len as usize != RECV_BYTES {
            return None;
        }
        let mut buf = [0u8; RECV_BYTES];
        self.mr.read((slot * RECV_STRIDE) as u64, &mut buf).ok()?;
        let src = mlx5::grh_ipv4_source(&buf[..GRH_BYTES])?;
        let mut mad = [0u8; MAD_LEN];
        mad.copy_from_slice(&buf[GRH_BYTES..]);
        let peer = Peer {
            gid: mlx5::hca::ipv4_mapped_gid(src),
            qpn: w.src_qp,
        };
        Some((peer, mad))
    }

    /// Sends `mad` to `to`'s QP, now if its MAC is known, else once an ARP reply tells it
    /// (asked for here, again every second, for at most the resolve timeout).
    pub(crate) fn send(
        &mut self,
        now: u64,
        to: &Peer,
        mad: &[u8; MAD_LEN],
        nb: &mut dyn Neighbours,
    ) {
        let Some(ip) = ipv4_of_gid(&to.gid) else {
            self.counters.dropped += 1;
            return;
        };
        let mut wait = ArpWait::new(now, ip, self.resolve_ns);
        match wait.check(now, nb) {
            Arp::Known(mac) => self.post(to, mac, mad),
            Arp::Waiting if self.pending.len() < PENDING_MAX => self.pending.push(Pending {
                wait,
                to: *to,
                mad: *mad,
            }),
            _ => self.counters.dropped += 1,
        }
    }

    /// Sends the waiting MADs whose MAC is known now, asks again for the others, drops those
    /// whose time is up.
    pub(crate) fn flush_pending(&mut self, now: u64, nb: &mut dyn Neighbours) {
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i].wait.check(now, nb) {
                Arp::Known(mac) => {
                    let p = self.pending.swap_remove(i);
                    self.post(&p.to, mac, &p.mad);
                }
                Arp::Expired => {
                    self.pending.swap_remove(i);
                    self.counters.dropped += 1;
                }
                Arp::Waiting => i += 1,
            }
        }
    }

    /// An address handle toward `gid` through `mac` from our GID.
    pub(crate) fn ah(&self, gid: [u8; 16], mac: [u8; 6]) -> mlx5::Result<AddressHandle> {
        self.pd.create_ah(&AhAttr {
            dgid: gid,
            dmac: mac,
            sgid_index: self.sgid_index,
            hop_limit: HOP_LIMIT,
            traffic_class: 0,
            flow_label: 0,
        })
    }

    /// One UD SEND of `mad` to `to` through `mac` (a MAD class's Q_Key, QP 1's, cm.c
    /// `cm_alloc_msg`: `IB_QP1_QKEY` to remote QPN 1).
    fn post(&mut self, to: &Peer, mac: [u8; 6], mad: &[u8; MAD_LEN]) {
        let Some(slot) = self.send_free.pop() else {
            self.counters.dropped += 1;
            return;
        };
        let off = self.send_offset(slot);
        let r = self.mr.write(off, mad).and_then(|()| {
            let ah = self.ah(to.gid, mac)?;
            let sge = [self.mr.sge(off, MAD_LEN as u32)];
            let wr = SendWr {
                wr_id: SEND_TAG | slot as u64,
                op: SendOp::Send { imm: None },
                data: SendData::Sges(&sge),
                flags: SendFlags::SIGNALED,
            };
            let dest = UdDest {
                ah: &ah,
                remote_qpn: to.qpn,
                remote_qkey: QP1_QKEY,
            };
            self.qp.post_ud_send(&wr, &dest)
        });
        match r {
            Ok(()) => self.counters.sent += 1,
            Err(_) => {
                self.send_free.push(slot);
                self.counters.dropped += 1;
            }
        }
    }

    /// The GSI QP's number (1).
    pub(crate) fn qpn(&self) -> u32 {
        self.qp.qpn()
    }
}
