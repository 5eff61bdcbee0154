//! Queue pairs: CREATE_QP / DESTROY_QP / QUERY_QP and the state-transition commands
//! RST2INIT .. 2RST, with what every service type shares (the rings, states and
//! transitions, the doorbell record, the CQ binding). What one service type has of its own
//! is in its module: [`rc`] and [`ud`] (UD, and the GSI QP: `qpc.st` QP1).
//!
//! Buffer layout (Linux drivers/infiniband/hw/mlx5/qp.c:1277 `_create_kernel_qp`): one buffer
//! described by `pas[]`, the RQ first (`2^log_rq_size` WQEs of `16 << log_rq_stride` bytes),
//! the SQ right after it (`2^log_sq_size` 64-byte basic blocks). The doorbell record holds the
//! RQ producer counter (`dbrec[0]`) and the SQ producer counter in WQEBBs (`dbrec[1]`).
//!
//! Transitions follow the Linux `optab` (drivers/infiniband/hw/mlx5/qp.c `__mlx5_ib_modify_qp`):
//! RST→INIT (RST2INIT), INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS, SQER→RTS, SQD→RTS, and 2ERR /
//! 2RST from any state. A transition issued from another state fails with BAD_QP_STATE. Each
//! transition reads the fields the IB spec makes mandatory for it (ibv_modify_qp(3) "Required
//! attributes", rdma-core libibverbs/man/ibv_modify_qp.3) from the qpc, and the optional ones only
//! when their `opt_param_mask` bit is set; bits outside the Linux `opt_mask` table for that
//! transition and service type (qp.c `opt_mask[][][MLX5_QP_ST_*]`, [`rc`], [`ud`]) are
//! refused with BAD_PARAM.

use std::collections::VecDeque;

use mlx5_prm::{
    ads, cmd_hca_cap, cmd_status, create_qp_in, create_qp_out, destroy_qp_in, opcode, qp,
    qp_2rst_in, qp_db, qpc, query_qp_in, query_qp_out, rst2init_qp_in, Field,
};

use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, CmdError, CmdResult};
use crate::datapath::Dp;
use crate::objects::mr::{PagedBuffer, PasError};
use crate::objects::Objects;

/// Syndromes of the QP commands (the model's own; range 0x5203_xxxx, see [`crate::objects::mr::syndrome`]).
pub mod syndrome {
    /// Input shorter than the command's fixed layout.
    pub const INPUT_TOO_SHORT: u32 = 0x5203_0001;
    /// `qpc.st` is none of RC, UD and QP1.
    pub const UNSUPPORTED_ST: u32 = 0x5203_0003;
    /// `qpc.pd` names no protection domain.
    pub const BAD_PD: u32 = 0x5203_0004;
    /// `qpc.uar_page` names no UAR.
    pub const BAD_UAR: u32 = 0x5203_0005;
    /// `cqn_snd` names no CQ.
    pub const BAD_CQN_SND: u32 = 0x5203_0006;
    /// `cqn_rcv` names no CQ.
    pub const BAD_CQN_RCV: u32 = 0x5203_0007;
    /// `log_sq_size` / `log_rq_size` above `log_max_qp_sz`.
    pub const SIZE_ABOVE_CAP: u32 = 0x5203_0008;
    /// RQ stride above `max_wqe_sz_rq`.
    pub const RQ_STRIDE_ABOVE_CAP: u32 = 0x5203_0009;
    /// `rq_type` other than a regular or a zero-length RQ (SRQ not modelled).
    pub const UNSUPPORTED_RQ_TYPE: u32 = 0x5203_000a;
    /// Fewer `pas[]` entries than the buffer needs.
    pub const PAS_TOO_FEW: u32 = 0x5203_000b;
    /// Misaligned `pas[]` entry or page size out of range.
    pub const PAS_BAD: u32 = 0x5203_000c;
    /// `dbr_addr` not 8-byte aligned.
    pub const DBR_MISALIGNED: u32 = 0x5203_000d;
    /// `1 << log_max_qp` QPs already exist.
    pub const TOO_MANY_QPS: u32 = 0x5203_000e;
    /// The QPN names no QP.
    pub const UNKNOWN_QP: u32 = 0x5203_000f;
    /// The transition is not legal from the QP's current state.
    pub const BAD_STATE: u32 = 0x5203_0010;
    /// `opt_param_mask` has a bit the transition does not allow.
    pub const BAD_OPT_PARAM: u32 = 0x5203_0011;
    /// `mtu` is not one of 256..4096 (1..=5).
    pub const BAD_MTU: u32 = 0x5203_0012;
    /// `remote_qpn` is 0 or 1 (the special QPs), which an RC QP cannot connect to.
    pub const BAD_REMOTE_QPN: u32 = 0x5203_0013;
    /// `src_addr_index` names no programmed RoCE GID.
    pub const BAD_SGID_INDEX: u32 = 0x5203_0014;
    /// `vhca_port_num` is not port 1 (the model has one port).
    pub const BAD_PORT: u32 = 0x5203_0015;
    /// `pkey_index` outside the RoCE P_Key table (one entry).
    pub const BAD_PKEY_INDEX: u32 = 0x5203_0016;
    /// Remote GID or MAC all zero: no address path.
    pub const NO_ADDRESS_PATH: u32 = 0x5203_0017;
    /// `log_msg_max` above `cmd_hca_cap.log_max_msg`.
    pub const MSG_SIZE_ABOVE_CAP: u32 = 0x5203_0018;
    /// `log_rra_max` / `log_sra_max` above the device's read/atomic limits.
    pub const RA_ABOVE_CAP: u32 = 0x5203_0019;
    /// `pm_state` other than MIGRATED at creation (path migration is not modelled).
    pub const BAD_PM_STATE: u32 = 0x5203_001a;
    /// umem-backed queues are not modelled.
    pub const UMEM_UNSUPPORTED: u32 = 0x5203_001b;
    /// The send queue would start at an offset that is not a multiple of 64 bytes (the
    /// receive queue is smaller than one basic block).
    pub const SQ_MISALIGNED: u32 = 0x5203_001e;
    /// The opcode is not a QP transition this handler knows.
    pub const BAD_OPCODE: u32 = 0x5203_001d;
    /// `counter_set_id` names neither set 0 nor an allocated Q counter set (model choice,
    /// crate::objects::counter).
    pub const BAD_COUNTER_SET: u32 = 0x5203_0030;
    /// A QP of service type QP1 (the GSI QP) already exists: one per port (Linux
    /// drivers/infiniband/hw/mlx5/gsi.c creates one hardware QP1 per port).
    pub const GSI_EXISTS: u32 = 0x5203_0031;
}

/// The largest QPN.
const QPN_MASK: u32 = 0xff_ffff;
/// QPNs below this are never handed out: 0 and 1 are the special QPs (SMI / GSI).
const FIRST_QPN: u32 = 0x10;
/// RoCE port number (the model has one port).
pub const PORT_NUM: u32 = 1;
/// How many GID table entries the model searches for a local destination.
pub const GID_TABLE_SEARCH: u32 = 256;

/// The service types the model implements (`qpc.st`). What differs per type lives in one
/// module each ([`rc`], [`ud`]); the QP commands reach it through `ServiceType::ops`, the one
/// place that dispatches on the type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
    /// The port's GSI QP (`MLX5_QP_ST_QP1`, Linux drivers/infiniband/hw/mlx5/qp.c
    /// `to_mlx5_st` for `MLX5_IB_QPT_HW_GSI`): a UD QP that the wire reaches as QPN 1.
    Gsi,
}

impl ServiceType {
    /// The type `qpc.st` names, if the model implements it.
    fn of_st(st: u32) -> Option<ServiceType> {
        match st {
            s if s == qp::st::RC as u32 => Some(ServiceType::Rc),
            s if s == qp::st::UD as u32 => Some(ServiceType::Ud),
            s if s == qp::st::QP1 as u32 => Some(ServiceType::Gsi),
            _ => None,
        }
    }

    /// The type's entry points.
    fn ops(self) -> &'static TypeOps {
        match self {
            ServiceType::Rc => &rc::OPS,
            ServiceType::Ud => &ud::OPS,
            ServiceType::Gsi => &ud::GSI_OPS,
        }
    }

    /// Whether the type is a datagram one (UD or GSI: [`crate::datapath::ud`]).
    pub fn is_datagram(self) -> bool {
        matches!(self, ServiceType::Ud | ServiceType::Gsi)
    }
}

/// One modify command as the service type sees it.
struct Transition<'a> {
    opcode: u16,
    /// The command's QP context.
    ctx: &'a [u8],
    /// Its primary address path.
    path: AddressPath,
    /// `opt_param_mask`.
    mask: u32,
}

/// The route and source GID a QP connects with (INIT2RTR).
type Connect = (Route, [u8; 16]);

/// What a service type does in the QP commands.
struct TypeOps {
    /// The `opt_param_mask` bits a transition (by opcode) allows.
    allowed_optpar: fn(u16) -> u32,
    /// Checks the type's fields a transition reads from the context (primary path, optional
    /// fields mask) before anything changes; the route and source GID the QP connects with.
    check: fn(&Dp<'_>, &Transition) -> Result<Connect, CmdError>,
    /// Writes the type's fields a transition sets into the QP (the checks passed).
    apply: fn(&mut Qp, &Transition, Connect),
    /// The QP moved from one state to another (by QPN): the type's transport follows.
    on_transition: fn(&mut Dp<'_>, u32, u8, u8),
}

pub mod rc;
pub mod ud;
pub(crate) mod wr;

/// Where a connected QP's packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Not connected yet (before INIT2RTR).
    None,
    /// The remote GID is one of this HCA's: loop back.
    Local,
    /// Out through the port's link.
    Remote,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AddressPath {
    pub rgid: [u8; 16],
    pub rmac: [u8; 6],
    pub src_addr_index: u32,
    pub ack_timeout: u32,
    pub pkey_index: u32,
    pub port: u32,
}

/// One queue pair.
#[derive(Debug)]
pub struct Qp {
    /// QP number.
    pub qpn: u32,
    /// Service type (`qpc.st`).
    pub st: ServiceType,
    /// `qp::state` value.
    pub state: u8,
    /// Protection domain.
    pub pd: u32,
    /// UAR whose doorbell register rings the SQ.
    pub uar: u32,
    /// Send CQ.
    pub cqn_snd: u32,
    /// Receive CQ.
    pub cqn_rcv: u32,
    pub(crate) user_index: u32,
    pub(crate) buf: PagedBuffer,
    /// log2 of RQ WQEs (None: no RQ).
    pub(crate) rq_log_size: Option<u32>,
    /// log2 of the RQ stride in bytes.
    pub(crate) rq_stride_shift: u32,
    /// log2 of SQ WQEBBs (None: no SQ).
    pub(crate) sq_log_size: Option<u32>,
    /// Byte offset of the SQ in the buffer.
    pub(crate) sq_offset: u64,
    pub(crate) dbr_addr: u64,
    // Connection (INIT2RTR / RTR2RTS).
    pub(crate) remote_qpn: u32,
    pub(crate) mtu: u32,
    pub(crate) log_msg_max: u32,
    pub(crate) path: AddressPath,
    pub(crate) route: Route,
    pub(crate) sgid: [u8; 16],
    pub(crate) rre: bool,
    pub(crate) rwe: bool,
    pub(crate) rae: bool,
    /// `qpc.atomic_mode`: which atomic sizes the responder executes (0: none).
    pub(crate) atomic_mode: u32,
    pub(crate) min_rnr_nak: u32,
    pub(crate) retry_count: u32,
    pub(crate) rnr_retry: u32,
    pub(crate) log_rra_max: u32,
    pub(crate) log_sra_max: u32,
    /// `qpc.q_key` (UD / GSI): the Q_Key received datagrams must carry, and the one a send
    /// WQE's Q_Key with the top bit set stands for ([`crate::datapath::ud`]).
    pub(crate) qkey: u32,
    // Requester runtime.
    /// Next PSN to send.
    pub(crate) npsn: u32,
    /// SQ WQEBB counter of the next WQE to execute.
    pub(crate) sq_next: u16,
    /// Send WQEs taken from the SQ and not completed yet, in SQ order.
    pub(crate) wrs: VecDeque<wr::WrSlot>,
    /// The next work request handle.
    pub(crate) next_wr: u64,
    /// A local error waits for earlier WQEs to complete: take nothing more from the SQ.
    pub(crate) sq_blocked: bool,
    // Responder runtime.
    /// The first expected PSN (`next_rcv_psn`).
    pub(crate) epsn: u32,
    /// RQ WQEs consumed.
    pub(crate) rq_ci: u32,
    /// The RC transport (from RTR).
    pub(crate) rc: Option<Box<crate::datapath::rc::RcState>>,
    /// Communication-established event already posted.
    pub(crate) comm_est: bool,
    pub(crate) qpc: [u8; qpc::BYTES],
    /// `qpc.fre` (fast registration enable): the QP may post UMR WQEs ([`crate::datapath::umr`]).
    pub(crate) fre: bool,
    /// `qpc.counter_set_id`: the Q counter set the QP counts into besides the port's set 0
    /// (0: none). Named on RST2INIT / INIT2RTR / RTS2RTS (optpar `COUNTER_SET_ID`), cleared
    /// by the move to RESET ([`crate::objects::counter`]).
    pub(crate) counter_set: u8,
    /// The region of guest memory the SQ or the RQ was last read from
    /// ([`crate::memory::ViewSlot`]).
    pub(crate) sq_view: crate::memory::ViewSlot,
    /// The stretch of the buffer the SQ was last fetched from ([`crate::memory::RingWindow`];
    /// the buffer never changes for the QP's life).
    pub(crate) sq_win: crate::memory::RingWindow,
    /// The region of guest memory holding the doorbell record, as last read.
    pub(crate) dbr_view: crate::memory::ViewSlot,
}

impl Qp {
    /// A QP in RESET with only a send queue of `2^log_sq` basic blocks at `sq_offset` of
    /// `buf` (for tests of the ring's accessors).
    #[cfg(test)]
    pub(crate) fn with_ring(buf: PagedBuffer, sq_offset: u64, log_sq: u32) -> Qp {
        Qp::in_reset(1, buf, Some(log_sq), sq_offset)
    }

    /// QP `qpn` in RESET over `buf`, its send queue (if any) of `2^sq_log_size` basic blocks
    /// at `sq_offset`: no receive queue, PD, UAR, CQs or doorbell record, every transport
    /// field at its value before the first modify, and an all-zero saved context. CREATE_QP
    /// fills in what its command carries.
    fn in_reset(qpn: u32, buf: PagedBuffer, sq_log_size: Option<u32>, sq_offset: u64) -> Qp {
        Qp {
            qpn,
            st: ServiceType::Rc,
            state: qp::state::RST,
            pd: 0,
            uar: 0,
            cqn_snd: 0,
            cqn_rcv: 0,
            user_index: 0,
            buf,
            rq_log_size: None,
            rq_stride_shift: 0,
            sq_log_size,
            sq_offset,
            dbr_addr: 0,
            remote_qpn: 0,
            mtu: 0,
            log_msg_max: 0,
            path: AddressPath::default(),
            route: Route::None,
            sgid: [0; 16],
            rre: false,
            rwe: false,
            rae: false,
            atomic_mode: 0,
            min_rnr_nak: 0,
            retry_count: 0,
            rnr_retry: 0,
            log_rra_max: 0,
            log_sra_max: 0,
            qkey: 0,
            npsn: 0,
            sq_next: 0,
            wrs: VecDeque::new(),
            next_wr: 0,
            sq_blocked: false,
            epsn: 0,
            rq_ci: 0,
            rc: None,
            comm_est: false,
            qpc: [0; qpc::BYTES],
            fre: false,
            counter_set: 0,
            sq_view: Default::default(),
            sq_win: Default::default(),
            dbr_view: Default::default(),
        }
    }

    /// Number of SQ WQEBBs (0 without an SQ).
    pub(crate) fn sq_size(&self) -> u32 {
        self.sq_log_size.map_or(0, |l| 1 << l)
    }

    /// Copies one qpc field from a command's context into the saved context (QUERY_QP).
    fn keep(&mut self, ctx: &[u8], f: Field) {
        let _ = f.set(&mut self.qpc, get(ctx, f));
    }

    /// Resets runtime state (creation and 2RST).
    fn reset_runtime(&mut self) {
        self.npsn = 0;
        self.sq_next = 0;
        self.wrs.clear();
        self.next_wr = 0;
        self.sq_blocked = false;
        self.epsn = 0;
        self.rq_ci = 0;
        self.rc = None;
        self.comm_est = false;
        self.route = Route::None;
    }

    /// The qpc as QUERY_QP reports it.
    fn query_context(&self) -> [u8; qpc::BYTES] {
        let mut c = self.qpc;
        let _ = qpc::STATE.set(&mut c, self.state as u32);
        let (npsn, epsn, acked) = match &self.rc {
            Some(rc) => (
                rc.qp.requester.next_psn(),
                rc.qp.responder.expected_psn(),
                rc.qp.requester.unacked_psn().wrapping_sub(1) & QPN_MASK,
            ),
            None => (self.npsn, self.epsn, self.npsn.wrapping_sub(1) & QPN_MASK),
        };
        let _ = qpc::NEXT_SEND_PSN.set(&mut c, npsn);
        let _ = qpc::NEXT_RCV_PSN.set(&mut c, epsn);
        let _ = qpc::HW_SQ_WQEBB_COUNTER.set(&mut c, self.sq_next as u32);
        let _ = qpc::HW_RQ_COUNTER.set(&mut c, self.rq_ci);
        let _ = qpc::CUR_RNR_RETRY.set(&mut c, self.rnr_retry.min(7));
        let _ = qpc::CUR_RETRY_COUNT.set(&mut c, self.retry_count.min(7));
        let _ = qpc::LAST_ACKED_PSN.set(&mut c, acked);
        c
    }
}

/// The QP table: the QPNs in ascending order beside their QPs, so a lookup is a binary search
/// over a few contiguous `u32`s (a datapath doorbell looks its QP up about three times; a
/// `BTreeMap` node walk cost about twice as much) and iteration goes in QPN order, as before.
#[derive(Default)]
pub struct QpTable {
    /// Ascending, no duplicates; `qps[i]` is QP `keys[i]`.
    keys: Vec<u32>,
    qps: Vec<Qp>,
    next: u32,
    /// Where the last lookup found its QP: a doorbell looks the same QP up several times in a
    /// row, and the hint answers those with one compare (a hint past the end, or naming
    /// another QP, only costs that compare).
    hint: std::sync::atomic::AtomicUsize,
    /// The port's GSI QP (service type QP1), which the wire reaches as QPN 1.
    gsi: Option<u32>,
}

impl QpTable {
    #[inline(always)]
    fn find(&self, qpn: u32) -> Option<usize> {
        use std::sync::atomic::Ordering::Relaxed;
        let h = self.hint.load(Relaxed);
        if self.keys.get(h) == Some(&qpn) {
            return Some(h);
        }
        self.find_slow(qpn)
    }

    fn find_slow(&self, qpn: u32) -> Option<usize> {
        // A table of one or two QPs (a UMR QP, a data QP) is scanned.
        let i = if self.keys.len() <= 2 {
            self.keys.iter().position(|&k| k == qpn)
        } else {
            self.keys.binary_search(&qpn).ok()
        }?;
        self.hint.store(i, std::sync::atomic::Ordering::Relaxed);
        Some(i)
    }

    /// Every QP, in QPN order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Qp> {
        self.qps.iter()
    }

    /// Whether QP `qpn` exists.
    pub fn contains(&self, qpn: u32) -> bool {
        self.find(qpn).is_some()
    }
    /// The QP with this number.
    #[inline]
    pub fn get(&self, qpn: u32) -> Option<&Qp> {
        self.find(qpn).map(|i| &self.qps[i])
    }
    /// The QP with this number, mutably.
    #[inline]
    pub fn get_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.find(qpn).map(|i| &mut self.qps[i])
    }
    /// Number of QPs.
    pub fn len(&self) -> usize {
        self.qps.len()
    }
    /// Whether there is no QP.
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }
    /// Drops every QP (HCA teardown).
    pub fn clear(&mut self) {
        self.keys.clear();
        self.qps.clear();
        self.gsi = None;
    }
    /// QPNs of every QP, ascending (for timer scans).
    pub(crate) fn qpns(&self) -> Vec<u32> {
        self.keys.clone()
    }
    /// The QP state, if the QP exists.
    pub fn state(&self, qpn: u32) -> Option<u8> {
        self.get(qpn).map(|q| q.state)
    }
    /// The port's GSI QP (`qpc.st` QP1), if one exists: where packets to QPN 1 go.
    pub fn gsi(&self) -> Option<u32> {
        self.gsi
    }

    /// Whether some QP belongs to protection domain `pd`: DEALLOC_PD is busy.
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.qps.iter().any(|q| q.pd == pd)
    }
    /// Whether some QP rings its doorbell through UAR `uar` (`uar_page`): DEALLOC_UAR is busy.
    pub fn uses_uar(&self, uar: u32) -> bool {
        self.qps.iter().any(|q| q.uar == uar)
    }

    /// Adds QP `qpn` (a number [`QpTable::alloc_qpn`] gave: not in the table).
    fn insert(&mut self, qpn: u32, q: Qp) {
        if q.st == ServiceType::Gsi {
            self.gsi = Some(qpn);
        }
        match self.keys.binary_search(&qpn) {
            Ok(i) => self.qps[i] = q,
            Err(i) => {
                self.keys.insert(i, qpn);
                self.qps.insert(i, q);
            }
        }
    }

    /// Takes QP `qpn` out of the table.
    fn remove(&mut self, qpn: u32) -> Option<Qp> {
        let i = self.keys.binary_search(&qpn).ok()?;
        if self.gsi == Some(qpn) {
            self.gsi = None;
        }
        self.keys.remove(i);
        Some(self.qps.remove(i))
    }

    /// The next CREATE_QP takes the first free QPN from `qpn` on, as once the 24-bit QPN space
    /// has wrapped (for tests of a reused QPN).
    pub fn set_next_qpn(&mut self, qpn: u32) {
        self.next = qpn.wrapping_sub(1) & QPN_MASK;
    }

    /// The next QPN from the allocation cursor that no QP holds (callers also skip the SQ and
    /// RQ numbers: [`Objects::alloc_queue_number`]).
    pub(crate) fn alloc_qpn(&mut self) -> u32 {
        loop {
            self.next = (self.next + 1) & QPN_MASK;
            if self.next >= FIRST_QPN && !self.contains(self.next) {
                return self.next;
            }
        }
    }
}

/// Reads the `ads` fields at `path` (a nested field of the qpc).
fn read_path(ctx: &[u8], path: Field) -> AddressPath {
    let f = |x: Field| get(ctx, x.within(path));
    let mut rgid = [0u8; 16];
    let _ = ads::RGID_RIP.within(path).read_bytes(ctx, &mut rgid);
    // Linux copies the 6-byte MAC starting at rmac_47_32 (ib/qp.c `mlx5_set_path`).
    let mut rmac = [0u8; 6];
    let at = ads::RMAC_47_32.within(path).byte_offset();
    if let Some(m) = ctx.get(at..at + 6) {
        rmac.copy_from_slice(m);
    }
    AddressPath {
        rgid,
        rmac,
        src_addr_index: f(ads::SRC_ADDR_INDEX),
        ack_timeout: f(ads::ACK_TIMEOUT),
        pkey_index: f(ads::PKEY_INDEX),
        port: f(ads::VHCA_PORT_NUM),
    }
}

/// CREATE_QP (opcode 0x500): an RC, UD or GSI QP in RESET.
pub(crate) fn create_qp(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let ctx = create_qp_in::QPC
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    if get(input, create_qp_in::WQ_UMEM_VALID) != 0 || get(ctx, qpc::DBR_UMEM_VALID) != 0 {
        return Err(bad_param(syndrome::UMEM_UNSUPPORTED));
    }
    let st = ServiceType::of_st(get(ctx, qpc::ST)).ok_or(bad_param(syndrome::UNSUPPORTED_ST))?;
    if st == ServiceType::Gsi && objects.qps.gsi().is_some() {
        return Err(err(cmd_status::RES_BUSY, syndrome::GSI_EXISTS));
    }
    if get(ctx, qpc::PM_STATE) != qp::pm::MIGRATED as u32 {
        return Err(bad_param(syndrome::BAD_PM_STATE));
    }
    let pd = get(ctx, qpc::PD);
    if !objects.pds.contains(pd) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_PD));
    }
    let uar = get(ctx, qpc::UAR_PAGE);
    if !objects.uars.contains(uar) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_UAR));
    }
    let no_sq = get(ctx, qpc::NO_SQ) != 0;
    let rq_type = get(ctx, qpc::RQ_TYPE) as u8;
    let has_rq = match rq_type {
        qp::rq_type::NON_ZERO_RQ => true,
        qp::rq_type::ZERO_LEN_RQ => false,
        _ => return Err(bad_param(syndrome::UNSUPPORTED_RQ_TYPE)),
    };
    let cqn_snd = get(ctx, qpc::CQN_SND);
    let cqn_rcv = get(ctx, qpc::CQN_RCV);
    if !no_sq && !objects.cqs.contains(cqn_snd) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_CQN_SND));
    }
    if has_rq && !objects.cqs.contains(cqn_rcv) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_CQN_RCV));
    }
    let log_max_sz = caps.general(cmd_hca_cap::LOG_MAX_QP_SZ);
    let log_sq = get(ctx, qpc::LOG_SQ_SIZE);
    let log_rq = get(ctx, qpc::LOG_RQ_SIZE);
    let rq_stride_shift = get(ctx, qpc::LOG_RQ_STRIDE) + 4; // Linux ib/qp.c `create_kernel_qp`
    if (!no_sq && log_sq > log_max_sz) || (has_rq && log_rq > log_max_sz) {
        return Err(bad_param(syndrome::SIZE_ABOVE_CAP));
    }
    if has_rq && (1u32 << rq_stride_shift) > caps.general(cmd_hca_cap::MAX_WQE_SZ_RQ) {
        return Err(bad_param(syndrome::RQ_STRIDE_ABOVE_CAP));
    }
    let rq_bytes = if has_rq {
        (1u64 << log_rq) << rq_stride_shift
    } else {
        0
    };
    let sq_bytes = if no_sq {
        0
    } else {
        (mlx5_prm::wqe::SEND_WQE_BB as u64) << log_sq
    };
    // Model choice: the send queue must start on a 64-byte basic block. Every driver makes
    // the receive queue at least one basic block (Linux ib/qp.c set_rq_size:
    // `max(wq_size, MLX5_SEND_WQE_BB)`; rdma-core verbs.c mlx5_calc_rq_size), so no source
    // shows firmware taking an SQ at offset 16 or 32; the model refuses it.
    if !no_sq && !rq_bytes.is_multiple_of(mlx5_prm::wqe::SEND_WQE_BB as u64) {
        return Err(bad_param(syndrome::SQ_MISALIGNED));
    }
    let dbr_addr = qpc::DBR_ADDR.get64(ctx).unwrap_or(0);
    if !dbr_addr.is_multiple_of(8) {
        return Err(bad_param(syndrome::DBR_MISALIGNED));
    }
    let buf = PagedBuffer::new(
        &input[create_qp_in::BYTES..],
        get(ctx, qpc::LOG_PAGE_SIZE),
        get(ctx, qpc::PAGE_OFFSET),
        rq_bytes + sq_bytes,
    )
    .map_err(|e| match e {
        PasError::TooFewPages => bad_param(syndrome::PAS_TOO_FEW),
        _ => bad_param(syndrome::PAS_BAD),
    })?;
    let log_max_qp = caps.general(cmd_hca_cap::LOG_MAX_QP).min(24);
    if objects.qps.len() as u64 >= 1u64 << log_max_qp {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_QPS));
    }
    let qpn = objects.alloc_queue_number();
    let mut saved = [0u8; qpc::BYTES];
    saved.copy_from_slice(&ctx[..qpc::BYTES]);
    let mut q = Qp {
        pd,
        uar,
        cqn_snd,
        cqn_rcv,
        user_index: get(ctx, qpc::USER_INDEX),
        rq_log_size: has_rq.then_some(log_rq),
        rq_stride_shift,
        dbr_addr,
        qpc: saved,
        fre: get(ctx, qpc::FRE) != 0,
        st,
        ..Qp::in_reset(qpn, buf, (!no_sq).then_some(log_sq), rq_bytes)
    };
    q.reset_runtime();
    if !no_sq {
        objects.cqs.attach(cqn_snd);
    }
    if has_rq {
        objects.cqs.attach(cqn_rcv);
    }
    objects.qps.insert(qpn, q);
    let _ = create_qp_out::QPN.set(output, qpn);
    Ok(())
}

/// DESTROY_QP (opcode 0x501). Legal in any state; outstanding work is dropped without
/// completions.
pub(crate) fn destroy_qp(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let qpn = get(input, destroy_qp_in::QPN);
    let q = objects
        .qps
        .remove(qpn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_QP))?;
    if q.sq_log_size.is_some() {
        objects.cqs.detach(q.cqn_snd);
    }
    if q.rq_log_size.is_some() {
        objects.cqs.detach(q.cqn_rcv);
    }
    // Windows (and keys) bound to this QP name no QP from now on (crate::objects::mw::qp_destroyed).
    crate::objects::mw::qp_destroyed(objects, qpn);
    Ok(())
}

/// QUERY_QP (opcode 0x50b): the qpc with the current state, PSNs and counters.
pub(crate) fn query_qp(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let qpn = get(input, query_qp_in::QPN);
    let q = objects
        .qps
        .get(qpn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_QP))?;
    let _ = query_qp_out::QPC.write_bytes(output, &q.query_context());
    let room = output.len().saturating_sub(query_qp_out::BYTES) / 8;
    for (i, a) in q.buf.pas().iter().take(room).enumerate() {
        let at = query_qp_out::BYTES + i * 8;
        output[at..at + 8].copy_from_slice(&a.to_be_bytes());
    }
    Ok(())
}

/// The transition an opcode performs: (legal current states, new state), for every service
/// type (Linux drivers/infiniband/hw/mlx5/qp.c `optab`); which optional fields it takes is
/// the type's ([`TypeOps::allowed_optpar`]).
fn transition(op: u16) -> Option<(&'static [u8], u8)> {
    use qp::state::*;
    Some(match op {
        opcode::RST2INIT_QP => (&[RST], INIT),
        opcode::INIT2INIT_QP => (&[INIT], INIT),
        opcode::INIT2RTR_QP => (&[INIT], RTR),
        opcode::RTR2RTS_QP => (&[RTR], RTS),
        opcode::RTS2RTS_QP => (&[RTS], RTS),
        opcode::SQERR2RTS_QP => (&[SQER], RTS),
        opcode::SQD_RTS_QP => (&[SQD], RTS),
        opcode::QP_2ERR => (&[RST, INIT, RTR, RTS, SQER, SQD, ERR], ERR),
        opcode::QP_2RST => (&[RST, INIT, RTR, RTS, SQER, SQD, ERR], RST),
        _ => return None,
    })
}

/// RST2INIT_QP .. 2RST_QP, selected by `opcode`.
pub fn modify_qp(hca: &mut Dp<'_>, opcode: u16, input: &[u8], _output: &mut [u8]) -> CmdResult {
    let (from, to) = transition(opcode).ok_or(err(cmd_status::BAD_OP_ERR, syndrome::BAD_OPCODE))?;
    let short = matches!(opcode, opcode::QP_2ERR | opcode::QP_2RST);
    // Every modify input has the QPN at 0x48, the mask at 0x80 and the qpc at 0xc0.
    let qpn = get(input, qp_2rst_in::QPN);
    let (cur, st) = hca
        .objects
        .qps
        .get(qpn)
        .map(|q| (q.state, q.st))
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_QP))?;
    let ops = st.ops();
    if !from.contains(&cur) {
        return Err(err(cmd_status::BAD_QP_STATE_ERR, syndrome::BAD_STATE));
    }
    if short {
        if to == qp::state::ERR {
            crate::datapath::enter_error(hca, qpn);
        } else if let Some(q) = hca.objects.qps.get_mut(qpn) {
            q.state = qp::state::RST;
            q.reset_runtime();
            // Detached from its Q counter set until a transition names one again.
            q.counter_set = 0;
            let _ = qpc::COUNTER_SET_ID.set(&mut q.qpc, 0);
            (ops.on_transition)(hca, qpn, cur, qp::state::RST);
        }
        return Ok(());
    }
    let mask = get(input, rst2init_qp_in::OPT_PARAM_MASK);
    if mask & !(ops.allowed_optpar)(opcode) != 0 {
        return Err(bad_param(syndrome::BAD_OPT_PARAM));
    }
    let ctx = rst2init_qp_in::QPC
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    let pri = qpc::PRIMARY_ADDRESS_PATH;
    let path = read_path(ctx, pri);
    let opt = |bit: u32| mask & bit != 0;

    // Validate everything before changing anything.
    // The Q counter set: written on RST2INIT and INIT2RTR (Linux qp.c `__mlx5_ib_modify_qp`),
    // and on RTS2RTS with its optpar bit.
    let names_counter_set = matches!(opcode, opcode::RST2INIT_QP | opcode::INIT2RTR_QP)
        || (opcode == opcode::RTS2RTS_QP && opt(qp::optpar::COUNTER_SET_ID));
    let counter_set = get(ctx, qpc::COUNTER_SET_ID) as u8;
    if names_counter_set && !hca.objects.qcounters.exists(counter_set) {
        return Err(bad_param(syndrome::BAD_COUNTER_SET));
    }
    let t = Transition {
        opcode,
        ctx,
        path,
        mask,
    };
    let connect = (ops.check)(hca, &t)?;

    let q = hca
        .objects
        .qps
        .get_mut(qpn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_QP))?;
    (ops.apply)(q, &t, connect);
    if names_counter_set {
        q.counter_set = counter_set;
        q.keep(ctx, qpc::COUNTER_SET_ID);
    }
    q.state = to;
    (ops.on_transition)(hca, qpn, cur, to);
    // Work posted before RTS runs now (the SQ doorbell may have rung earlier).
    if to == qp::state::RTS {
        crate::datapath::kick(hca, qpn);
    }
    Ok(())
}

/// The checks every service type's transitions share, made first: the port and P_Key index
/// of RST2INIT and (with their optional bits) INIT2INIT, the path MTU and message size limit
/// of INIT2RTR.
fn check_shared(hca: &Dp<'_>, t: &Transition) -> CmdResult {
    let (ctx, path) = (t.ctx, &t.path);
    let opt = |bit: u32| t.mask & bit != 0;
    match t.opcode {
        opcode::RST2INIT_QP => check_port_pkey(path.port, path.pkey_index)?,
        opcode::INIT2INIT_QP => {
            if opt(qp::optpar::PRI_PORT) {
                check_port_pkey(path.port, 0)?;
            }
            if opt(qp::optpar::PKEY_INDEX) {
                check_port_pkey(PORT_NUM, path.pkey_index)?;
            }
        }
        opcode::INIT2RTR_QP => {
            if !(1..=5).contains(&get(ctx, qpc::MTU)) {
                return Err(bad_param(syndrome::BAD_MTU));
            }
            if get(ctx, qpc::LOG_MSG_MAX) > hca.cap(cmd_hca_cap::LOG_MAX_MSG) {
                return Err(bad_param(syndrome::MSG_SIZE_ABOVE_CAP));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Port must be [`PORT_NUM`]; the RoCE P_Key table has one entry.
fn check_port_pkey(port: u32, pkey_index: u32) -> CmdResult {
    if port != PORT_NUM {
        return Err(bad_param(syndrome::BAD_PORT));
    }
    if pkey_index != 0 {
        return Err(bad_param(syndrome::BAD_PKEY_INDEX));
    }
    Ok(())
}

/// Reads the doorbell record's (RQ producer, SQ producer) counters.
pub(crate) fn read_dbr(
    mem: &dyn crate::memory::GuestMemory,
    dbr: u64,
) -> Result<(u16, u16), crate::memory::DmaError> {
    // Both counters in one access (the record's two dwords are adjacent).
    let mut b = [0u8; 8];
    mem.read(dbr, &mut b)?;
    Ok(dbr_counters(&b))
}

/// [`read_dbr`] through `view`, the QP's view of the record's region
/// ([`crate::memory::ViewSlot`]): the same bytes, and the same error when they are not guest
/// memory. `now` is the memory's version read for this access or its doorbell
/// ([`crate::memory::ViewSlot::read_at`]).
#[inline]
pub(crate) fn read_dbr_in<M: std::ops::Deref<Target = dyn crate::memory::GuestMemory> + ?Sized>(
    view: &mut crate::memory::ViewSlot,
    now: u64,
    mem: &M,
    dbr: u64,
) -> Result<(u16, u16), crate::memory::DmaError> {
    let mut b = [0u8; 8];
    view.read_at(now, mem, dbr, &mut b)?;
    Ok(dbr_counters(&b))
}

/// The (RQ, SQ) producer counters of a doorbell record's 8 bytes.
fn dbr_counters(b: &[u8; 8]) -> (u16, u16) {
    let at = |i: usize| crate::be::be32(b, 4 * i);
    (at(qp_db::RCV_DBR) as u16, at(qp_db::SND_DBR) as u16)
}
