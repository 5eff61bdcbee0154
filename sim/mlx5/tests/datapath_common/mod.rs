//! Data-path test helpers on top of the raw command driver (`tests/raw`): PD, RoCE address,
//! mkeys, CQs and QPs built from raw PRM commands, and raw WQEs written into the queues.
//! Include with `#[path = "raw/mod.rs"] mod raw;` and `#[path = "datapath_common/mod.rs"] mod dp;`.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mlx5_prm::*;
use mlx5_sim::InProcHca;

use super::raw::{cap_bytes, input, set, Device, Done, Raw};

/// Mkey access bits for [`Env::mkey`].
pub const LR: u8 = 1;
pub const LW: u8 = 2;
pub const RR: u8 = 4;
pub const RW: u8 = 8;
pub const A: u8 = 16;
pub const ALL: u8 = LR | LW | RR | RW | A;

/// Async events the test EQ subscribes to (the same EQ also takes completion events).
pub const ASYNC_EVENTS: &[u8] = &[
    event::CQ_ERROR,
    event::COMM_EST,
    event::WQ_CATAS_ERROR,
    event::WQ_INVAL_REQ_ERROR,
    event::WQ_ACCESS_ERROR,
];

/// How long a test waits for something asynchronous (never asserted on as a duration).
pub const PATIENCE: Duration = Duration::from_secs(20);

/// One HCA set up for data-path tests (the in-process HCA by default; any [`Device`]).
pub struct Env<D: Device = InProcHca> {
    pub raw: Raw<D>,
    pub uar: u32,
    pub eqn: u32,
    pub eq_buf: u64,
    pub eq_log: u32,
    pub eq_ci: u32,
    pub pd: u32,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// A CQ as software sees it.
#[derive(Debug)]
pub struct Cq {
    pub cqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log_size: u32,
    pub ci: u32,
}

/// A QP as software sees it.
#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log_sq: u32,
    pub log_rq: u32,
    pub rq_stride: usize,
    pub sq_offset: u64,
    /// SQ producer counter in WQEBBs.
    pub sq_pi: u16,
    /// RQ producer counter.
    pub rq_pi: u16,
    pub uar: u32,
    /// BlueFlame register half to use next (toggles like rdma-core).
    pub bf_half: u32,
}

/// A 16-byte data segment.
pub fn dseg(len: u32, lkey: u32, addr: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&len.to_be_bytes());
    s[4..8].copy_from_slice(&lkey.to_be_bytes());
    s[8..16].copy_from_slice(&addr.to_be_bytes());
    s
}

/// A 16-byte raddr segment.
pub fn raddr_seg(raddr: u64, rkey: u32) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&raddr.to_be_bytes());
    s[8..12].copy_from_slice(&rkey.to_be_bytes());
    s
}

/// A 16-byte atomic segment.
pub fn atomic_seg(swap_add: u64, compare: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&swap_add.to_be_bytes());
    s[8..16].copy_from_slice(&compare.to_be_bytes());
    s
}

/// An inline segment carrying `data`, padded to 16 bytes.
pub fn inline_seg(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(data.len() as u32 | wqe::INLINE_SEG).to_be_bytes());
    v.extend_from_slice(data);
    while v.len() % 16 != 0 {
        v.push(0);
    }
    v
}

/// A 48-byte datagram segment (`struct mlx5_wqe_av` as Linux ah.c `create_ib_ah` and wr.c
/// `set_datagram_seg` fill it) to QPN `dqpn` at `gid` / `mac`, Q_Key `qkey`, source GID
/// index 0, UDP source port 0xc123, hop limit 64.
pub fn av_seg(dqpn: u32, qkey: u32, gid: [u8; 16], mac: [u8; 6]) -> [u8; 48] {
    let mut s = [0u8; 48];
    s[0..4].copy_from_slice(&qkey.to_be_bytes());
    s[8..12].copy_from_slice(&(dqpn | wqe::EXTENDED_UD_AV).to_be_bytes());
    s[14..16].copy_from_slice(&0xc123u16.to_be_bytes());
    s[20..26].copy_from_slice(&mac);
    s[27] = 64;
    s[28..32].copy_from_slice(&(1u32 << 30).to_be_bytes());
    s[32..48].copy_from_slice(&gid);
    s
}

/// A whole send WQE: ctrl segment (ds computed) + `segs`.
pub fn send_wqe(opcode: u8, idx: u16, qpn: u32, fm_ce_se: u8, imm: u32, segs: &[&[u8]]) -> Vec<u8> {
    let body: usize = segs.iter().map(|s| s.len()).sum();
    let ds = (16 + body) / 16;
    let mut w = vec![0u8; 16];
    w[0..4].copy_from_slice(&wqe::opmod_idx_opcode(0, idx, opcode).to_be_bytes());
    w[4..8].copy_from_slice(&wqe::qpn_ds(qpn, ds as u8).to_be_bytes());
    w[11] = fm_ce_se;
    w[12..16].copy_from_slice(&imm.to_be_bytes());
    for s in segs {
        w.extend_from_slice(s);
    }
    w
}

/// A parsed CQE.
#[derive(Clone, Copy, Debug)]
pub struct Cqe(pub [u8; 64]);

impl Cqe {
    pub fn opcode(&self) -> u8 {
        self.0[63] >> 4
    }
    pub fn solicited(&self) -> bool {
        self.0[63] & 2 != 0
    }
    fn be32(&self, at: usize) -> u32 {
        u32::from_be_bytes(self.0[at..at + 4].try_into().unwrap())
    }
    pub fn byte_cnt(&self) -> u32 {
        self.be32(44)
    }
    pub fn imm(&self) -> u32 {
        self.be32(36)
    }
    pub fn qpn(&self) -> u32 {
        self.be32(56) & 0xff_ffff
    }
    pub fn wqe_opcode(&self) -> u8 {
        (self.be32(56) >> 24) as u8
    }
    pub fn wqe_counter(&self) -> u16 {
        u16::from_be_bytes([self.0[60], self.0[61]])
    }
    pub fn syndrome(&self) -> u8 {
        self.0[55]
    }
    pub fn vendor_syndrome(&self) -> u8 {
        self.0[54]
    }
    pub fn remote_qpn(&self) -> u32 {
        self.be32(24) & 0xff_ffff
    }
    pub fn user_index(&self) -> u32 {
        self.be32(32) & 0xff_ffff
    }
    pub fn is_error(&self) -> bool {
        matches!(self.opcode(), cqe::opcode::REQ_ERR | cqe::opcode::RESP_ERR)
    }
}

/// One RC QP on each of two HCAs, connected to each other across their wire, with their CQs
/// ([`wire_pair`]).
pub struct WirePair {
    pub a: Qp,
    pub b: Qp,
    pub a_scq: Cq,
    pub a_rcq: Cq,
    pub b_scq: Cq,
    pub b_rcq: Cq,
}

/// QP `a` on `ea` and `b` on `eb`, each with a send and a receive CQ of 2^`log` entries, a
/// send queue of 2^`log` and a receive queue of 32 WQEs, connected to each other (min RNR
/// timer 1, retry 7, RNR retry 7, `ack_timeout`).
pub fn wire_pair<D: Device>(
    ea: &mut Env<D>,
    eb: &mut Env<D>,
    log: u32,
    ack_timeout: u32,
) -> WirePair {
    let (a_scq, a_rcq) = (ea.cq(log), ea.cq(log));
    let (b_scq, b_rcq) = (eb.cq(log), eb.cq(log));
    let a = ea.qp(&a_scq, &a_rcq, log, 5);
    let b = eb.qp(&b_scq, &b_rcq, log, 5);
    ea.connect_with(&a, b.qpn, eb.gid, eb.mac, 1, 7, 7, ack_timeout);
    eb.connect_with(&b, a.qpn, ea.gid, ea.mac, 1, 7, 7, ack_timeout);
    WirePair {
        a,
        b,
        a_scq,
        a_rcq,
        b_scq,
        b_rcq,
    }
}

/// Fills the mkey context at `m` in CREATE_MKEY input `i` with what every test key shares:
/// the rights of `access` (LR, LW, RR, RW, A), `qpn` 0xffffff (any QP), `variant`, `pd` and
/// the range `[start, start + len)`.
pub fn set_mkc_key(i: &mut [u8], m: Field, access: u8, variant: u8, pd: u32, start: u64, len: u64) {
    set(i, mkc::LR.within(m), (access & LR != 0) as u32);
    set(i, mkc::LW.within(m), (access & LW != 0) as u32);
    set(i, mkc::RR.within(m), (access & RR != 0) as u32);
    set(i, mkc::RW.within(m), (access & RW != 0) as u32);
    set(i, mkc::A.within(m), (access & A != 0) as u32);
    set(i, mkc::QPN.within(m), 0xff_ffff);
    set(i, mkc::MKEY_7_0.within(m), variant.into());
    set(i, mkc::PD.within(m), pd);
    mkc::START_ADDR.within(m).set64(i, start).unwrap();
    mkc::LEN.within(m).set64(i, len).unwrap();
}

/// A qpc field inside a modify-QP input.
pub fn qpc_field(f: Field) -> Field {
    f.within(rst2init_qp_in::QPC)
}

/// An address-path field inside a modify-QP input.
pub fn path_field(f: Field) -> Field {
    f.within(qpc::PRIMARY_ADDRESS_PATH)
        .within(rst2init_qp_in::QPC)
}

impl Env {
    /// [`qpc_field`] (here so `Env::qpc_field` needs no type annotation).
    pub fn qpc_field(f: Field) -> Field {
        qpc_field(f)
    }

    /// [`path_field`] (here so `Env::path_field` needs no type annotation).
    pub fn path_field(f: Field) -> Field {
        path_field(f)
    }
}

impl<D: Device> Env<D> {
    /// Brings the HCA up, allocates a UAR, an EQ (async events + completions), a PD, enables
    /// RoCE and programs GID index 0 as `::ffff:10.0.0.<gid_last>` (RoCE v2, IPv4).
    pub fn new(dev: D, gid_last: u8) -> Env<D> {
        Self::with_atomic_mode(dev, gid_last, None)
    }

    /// [`Env::new`], setting `atomic_caps.atomic_req_8B_endianness_mode` before INIT_HCA (as
    /// Linux `handle_hca_cap_atomic` does) when `atomic_mode` is given.
    pub fn with_atomic_mode(dev: D, gid_last: u8, atomic_mode: Option<u32>) -> Env<D> {
        let mut raw = Raw::new(dev);
        match atomic_mode {
            None => raw.bring_up(),
            Some(mode) => raw.bring_up_with(|raw| {
                let d = raw.query_cap(hca_cap::cap_type::ATOMIC, true);
                d.ok();
                let mut cap = cap_bytes(&d);
                atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
                    .set(&mut cap, mode)
                    .unwrap();
                raw.set_cap(hca_cap::cap_type::ATOMIC, &cap).ok();
            }),
        }
        let uar = raw.alloc_uar();
        let eq_log = 7;
        let (eqn, eq_buf) = raw.create_eq(uar, eq_log, ASYNC_EVENTS);
        let mut env = Env {
            raw,
            uar,
            eqn,
            eq_buf,
            eq_log,
            eq_ci: 0,
            pd: 0,
            gid: [0; 16],
            mac: [0; 6],
        };
        env.pd = env.alloc_pd();
        // roce_en (rdma-core mlx5_vfio.c `mlx5_vfio_nic_vport_update_roce_state`).
        let mut m = input(
            opcode::MODIFY_NIC_VPORT_CONTEXT,
            0,
            modify_nic_vport_context_in::BYTES,
        );
        set(
            &mut m,
            modify_nic_vport_field_select::ROCE_EN
                .within(modify_nic_vport_context_in::FIELD_SELECT),
            1,
        );
        set(
            &mut m,
            nic_vport_context::ROCE_EN.within(modify_nic_vport_context_in::NIC_VPORT_CONTEXT),
            1,
        );
        env.raw.exec(&m, 16).ok();
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..16].copy_from_slice(&[10, 0, 0, gid_last]);
        env.set_gid(0, gid);
        env.gid = gid;
        env.mac = env.query_mac();
        env
    }

    /// The port's permanent MAC (QUERY_NIC_VPORT_CONTEXT `permanent_address`).
    pub fn query_mac(&mut self) -> [u8; 6] {
        let d = self.raw.exec(
            &input(
                opcode::QUERY_NIC_VPORT_CONTEXT,
                0,
                query_nic_vport_context_in::BYTES,
            ),
            query_nic_vport_context_out::BYTES,
        );
        d.ok();
        let ctx = query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        let hi = d.get(linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32.within(ctx));
        let lo = d.get(linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_31_0.within(ctx));
        let mut mac = [0u8; 6];
        mac[..2].copy_from_slice(&(hi as u16).to_be_bytes());
        mac[2..].copy_from_slice(&lo.to_be_bytes());
        mac
    }

    /// SET_ROCE_ADDRESS `index` = `gid` (RoCE v2, IPv4-mapped).
    pub fn set_gid(&mut self, index: u32, gid: [u8; 16]) {
        let mut s = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
        set(&mut s, set_roce_address_in::ROCE_ADDRESS_INDEX, index);
        set(&mut s, set_roce_address_in::VHCA_PORT_NUM, 0); // num_vhca_ports = 0 (Linux core/lib/gid.c)
        let a = set_roce_address_in::ROCE_ADDRESS;
        roce_addr_layout::SOURCE_L3_ADDRESS
            .within(a)
            .write_bytes(&mut s, &gid)
            .unwrap();
        set(&mut s, roce_addr_layout::ROCE_VERSION.within(a), 2);
        set(&mut s, roce_addr_layout::ROCE_L3_TYPE.within(a), 0);
        self.raw.exec(&s, 16).ok();
    }

    pub fn dev(&self) -> &D {
        &self.raw.dev
    }

    pub fn alloc_pd(&mut self) -> u32 {
        let d = self.raw.exec(&input(opcode::ALLOC_PD, 0, 16), 16);
        d.ok();
        d.get(alloc_pd_out::PD)
    }

    /// Allocates `len` bytes of DMA memory (page aligned).
    pub fn alloc(&self, len: usize) -> u64 {
        self.raw.dev.alloc(len.max(1), 4096)
    }

    pub fn write(&self, addr: u64, data: &[u8]) {
        self.raw.mem().write(addr, data).unwrap();
    }

    pub fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.raw.mem().read(addr, &mut v).unwrap();
        v
    }

    /// The CREATE_MKEY input for an MTT key over `[addr, addr + len)` (4 KiB pages, identity
    /// IOVA = bus address) with `access` bits and `variant`.
    pub fn mkey_input(&self, pd: u32, addr: u64, len: u64, access: u8, variant: u8) -> Vec<u8> {
        let first = addr & !0xfff;
        let npages = if len == 0 {
            0
        } else {
            (((addr + len + 0xfff) & !0xfff) - first) / 4096
        };
        let octo = mkey::mtt_octowords(npages as u32);
        let mut i = input(
            opcode::CREATE_MKEY,
            0,
            create_mkey_in::BYTES + 16 * octo as usize,
        );
        let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
        set(&mut i, create_mkey_in::PG_ACCESS, 1);
        set(
            &mut i,
            mkc::ACCESS_MODE_1_0.within(m),
            mkc_access_mode::MTT.into(),
        );
        set_mkc_key(&mut i, m, access, variant, pd, addr, len);
        set(&mut i, mkc::TRANSLATIONS_OCTWORD_SIZE.within(m), octo);
        set(&mut i, mkc::LOG_PAGE_SIZE.within(m), 12);
        set(
            &mut i,
            create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
            octo,
        );
        for p in 0..npages {
            let e = (first + p * 4096) | mkey::MTT_PRESENT;
            let at = create_mkey_in::BYTES + 8 * p as usize;
            i[at..at + 8].copy_from_slice(&e.to_be_bytes());
        }
        i
    }

    /// Creates an MTT mkey; returns the usable key (`index << 8 | variant`).
    pub fn mkey(&mut self, addr: u64, len: u64, access: u8) -> u32 {
        self.mkey_in_pd(self.pd, addr, len, access)
    }

    pub fn mkey_in_pd(&mut self, pd: u32, addr: u64, len: u64, access: u8) -> u32 {
        let variant = 0x42;
        let i = self.mkey_input(pd, addr, len, access, variant);
        let d = self.raw.exec(&i, 16);
        d.ok();
        mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), variant)
    }

    pub fn destroy_mkey(&mut self, key: u32) -> Done {
        let mut i = input(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
        set(&mut i, destroy_mkey_in::MKEY_INDEX, mkey::index(key));
        self.raw.exec(&i, 16)
    }

    /// The CREATE_CQ input for `2^log_size` 64-byte CQEs at `buf` (page aligned), DB record at
    /// `dbr`.
    pub fn cq_input(&self, log_size: u32, buf: u64, dbr: u64) -> Vec<u8> {
        let npages = ((64u64 << log_size) as usize).div_ceil(4096);
        let mut i = input(opcode::CREATE_CQ, 0, create_cq_in::PAS.bytes_with(npages));
        let c = create_cq_in::CQ_CONTEXT;
        set(&mut i, cqc::LOG_CQ_SIZE.within(c), log_size);
        set(&mut i, cqc::UAR_PAGE.within(c), self.uar);
        set(&mut i, cqc::C_EQN_OR_APU_ELEMENT.within(c), self.eqn);
        set(&mut i, cqc::LOG_PAGE_SIZE.within(c), 0);
        cqc::DBR_ADDR.within(c).set64(&mut i, dbr).unwrap();
        for p in 0..npages {
            create_cq_in::PAS
                .elem(p as u32)
                .set64(&mut i, buf + p as u64 * 4096)
                .unwrap();
        }
        i
    }

    /// Creates a CQ of `2^log_size` entries (CQEs initialised to op_own 0xf0, as rdma-core
    /// cq.c `mlx5_alloc_cq_buf` does).
    pub fn cq(&mut self, log_size: u32) -> Cq {
        let bytes = (64usize << log_size).max(4096);
        let buf = self.alloc(bytes);
        for k in 0..(1u64 << log_size) {
            self.write(buf + k * 64 + 63, &[cqe::OP_OWN_INIT]);
        }
        let dbr = self.alloc(64);
        let i = self.cq_input(log_size, buf, dbr);
        let d = self.raw.exec(&i, 16);
        d.ok();
        Cq {
            cqn: d.get(create_cq_out::CQN),
            buf,
            dbr,
            log_size,
            ci: 0,
        }
    }

    /// The CREATE_QP input for an RC QP.
    #[allow(clippy::too_many_arguments)]
    pub fn qp_input(
        &self,
        pd: u32,
        scq: u32,
        rcq: u32,
        log_sq: u32,
        log_rq: u32,
        log_rq_stride: u32,
        buf: u64,
        dbr: u64,
    ) -> Vec<u8> {
        let bytes = (1usize << log_rq << (log_rq_stride + 4)) + (64usize << log_sq);
        let npages = bytes.div_ceil(4096);
        let mut i = input(opcode::CREATE_QP, 0, create_qp_in::PAS.bytes_with(npages));
        let c = create_qp_in::QPC;
        set(&mut i, qpc::ST.within(c), qp::st::RC.into());
        set(&mut i, qpc::PM_STATE.within(c), qp::pm::MIGRATED.into());
        set(&mut i, qpc::PD.within(c), pd);
        set(&mut i, qpc::UAR_PAGE.within(c), self.uar);
        set(&mut i, qpc::LOG_SQ_SIZE.within(c), log_sq);
        set(&mut i, qpc::LOG_RQ_SIZE.within(c), log_rq);
        set(&mut i, qpc::LOG_RQ_STRIDE.within(c), log_rq_stride);
        set(&mut i, qpc::CQN_SND.within(c), scq);
        set(&mut i, qpc::CQN_RCV.within(c), rcq);
        set(&mut i, qpc::USER_INDEX.within(c), 0x77);
        qpc::DBR_ADDR.within(c).set64(&mut i, dbr).unwrap();
        for p in 0..npages {
            create_qp_in::PAS
                .elem(p as u32)
                .set64(&mut i, buf + p as u64 * 4096)
                .unwrap();
        }
        i
    }

    /// Creates an RC QP: SQ of `2^log_sq` WQEBBs, RQ of `2^log_rq` WQEs of 64 bytes.
    pub fn qp(&mut self, scq: &Cq, rcq: &Cq, log_sq: u32, log_rq: u32) -> Qp {
        self.qp_in_pd(self.pd, scq, rcq, log_sq, log_rq)
    }

    /// [`Env::qp`] in protection domain `pd`.
    pub fn qp_in_pd(&mut self, pd: u32, scq: &Cq, rcq: &Cq, log_sq: u32, log_rq: u32) -> Qp {
        let st = qp::st::RC;
        let q = self.qp_of_type(st, pd, scq, rcq, log_sq, log_rq);
        q.unwrap_or_else(|d| panic!("CREATE_QP: {:#x} {:#x}", d.status(), d.syndrome()))
    }

    /// [`Env::qp_in_pd`] with service type `st` (`qpc.st`), or the failed command.
    pub fn qp_of_type(
        &mut self,
        st: u8,
        pd: u32,
        scq: &Cq,
        rcq: &Cq,
        log_sq: u32,
        log_rq: u32,
    ) -> std::result::Result<Qp, Done> {
        let stride_log = 2; // 16 << 2 = 64 bytes: up to 4 scatter entries
        let bytes = (1usize << log_rq << (stride_log + 4)) + (64usize << log_sq);
        let buf = self.alloc(bytes.max(4096));
        let dbr = self.alloc(64);
        let mut i = self.qp_input(pd, scq.cqn, rcq.cqn, log_sq, log_rq, stride_log, buf, dbr);
        set(&mut i, qpc::ST.within(create_qp_in::QPC), st.into());
        let d = self.raw.exec(&i, 16);
        if d.status() != cmd_status::OK {
            return Err(d);
        }
        Ok(Qp {
            qpn: d.get(create_qp_out::QPN),
            buf,
            dbr,
            log_sq,
            log_rq,
            rq_stride: 16 << stride_log,
            sq_offset: (1u64 << log_rq) << (stride_log + 4),
            sq_pi: 0,
            rq_pi: 0,
            uar: self.uar,
            bf_half: 0,
        })
    }

    /// A modify-QP input (RST2INIT / INIT2INIT / INIT2RTR / RTR2RTS / RTS2RTS layout).
    pub fn modify_input(&self, op: u16, qpn: u32, mask: u32) -> Vec<u8> {
        let mut i = input(op, 0, rst2init_qp_in::BYTES);
        set(&mut i, rst2init_qp_in::QPN, qpn);
        set(&mut i, rst2init_qp_in::OPT_PARAM_MASK, mask);
        i
    }

    /// RST2INIT with port 1, P_Key index 0 and remote read/write/atomic enabled.
    pub fn rst2init_input(&self, qpn: u32) -> Vec<u8> {
        let mut i = self.modify_input(opcode::RST2INIT_QP, qpn, 0);
        set(&mut i, path_field(ads::VHCA_PORT_NUM), 1);
        set(&mut i, qpc_field(qpc::RRE), 1);
        set(&mut i, qpc_field(qpc::RWE), 1);
        set(&mut i, qpc_field(qpc::RAE), 1);
        // rae goes with an atomic mode (Linux ib/qp.c set_qpc_atomic_flags): IB_COMP = 1.
        set(&mut i, qpc_field(qpc::ATOMIC_MODE), 1);
        i
    }

    /// INIT2RTR to `remote_qpn` at `rgid` / `rmac`, MTU 1024, rq PSN `rq_psn`.
    pub fn init2rtr_input(
        &self,
        qpn: u32,
        remote_qpn: u32,
        rgid: [u8; 16],
        rmac: [u8; 6],
        rq_psn: u32,
        min_rnr: u32,
    ) -> Vec<u8> {
        let mut i = self.modify_input(opcode::INIT2RTR_QP, qpn, 0);
        set(&mut i, qpc_field(qpc::MTU), 3);
        set(&mut i, qpc_field(qpc::LOG_MSG_MAX), 30);
        set(&mut i, qpc_field(qpc::REMOTE_QPN), remote_qpn);
        set(&mut i, qpc_field(qpc::NEXT_RCV_PSN), rq_psn);
        set(&mut i, qpc_field(qpc::LOG_RRA_MAX), 2);
        set(&mut i, qpc_field(qpc::MIN_RNR_NAK), min_rnr);
        ads::RGID_RIP
            .within(qpc::PRIMARY_ADDRESS_PATH)
            .within(rst2init_qp_in::QPC)
            .write_bytes(&mut i, &rgid)
            .unwrap();
        let at = ads::RMAC_47_32
            .within(qpc::PRIMARY_ADDRESS_PATH)
            .within(rst2init_qp_in::QPC)
            .byte_offset();
        i[at..at + 6].copy_from_slice(&rmac);
        set(&mut i, path_field(ads::SRC_ADDR_INDEX), 0);
        set(&mut i, path_field(ads::HOP_LIMIT), 64);
        set(&mut i, path_field(ads::VHCA_PORT_NUM), 1);
        i
    }

    /// RTR2RTS with sq PSN `sq_psn`, `retry`, `rnr_retry`, `timeout`.
    pub fn rtr2rts_input(
        &self,
        qpn: u32,
        sq_psn: u32,
        retry: u32,
        rnr_retry: u32,
        timeout: u32,
    ) -> Vec<u8> {
        let mut i = self.modify_input(opcode::RTR2RTS_QP, qpn, 0);
        set(&mut i, qpc_field(qpc::NEXT_SEND_PSN), sq_psn);
        set(&mut i, qpc_field(qpc::RETRY_COUNT), retry);
        set(&mut i, qpc_field(qpc::RNR_RETRY), rnr_retry);
        set(&mut i, qpc_field(qpc::LOG_SRA_MAX), 2);
        set(&mut i, path_field(ads::ACK_TIMEOUT), timeout);
        i
    }

    /// RST → INIT → RTR → RTS of a UD or GSI QP as Linux moves one (qp.c
    /// `__mlx5_ib_modify_qp`): port 1, P_Key index 0, Q_Key `qkey`, MTU `mtu` and message
    /// size `2^log_msg_max`, first send PSN 0x10.
    pub fn bring_up_datagram(&mut self, qpn: u32, qkey: u32, mtu: u32, log_msg_max: u32) {
        let mut i = self.modify_input(opcode::RST2INIT_QP, qpn, 0);
        set(&mut i, path_field(ads::VHCA_PORT_NUM), 1);
        set(&mut i, qpc_field(qpc::Q_KEY), qkey);
        self.raw.exec(&i, 16).ok();
        let mut i = self.modify_input(opcode::INIT2RTR_QP, qpn, 0);
        set(&mut i, qpc_field(qpc::MTU), mtu);
        set(&mut i, qpc_field(qpc::LOG_MSG_MAX), log_msg_max);
        self.raw.exec(&i, 16).ok();
        let mut i = self.modify_input(opcode::RTR2RTS_QP, qpn, 0);
        set(&mut i, qpc_field(qpc::NEXT_SEND_PSN), 0x10);
        self.raw.exec(&i, 16).ok();
    }

    /// RST → INIT → RTR → RTS towards `remote_qpn` at `rgid`.
    #[allow(clippy::too_many_arguments)]
    pub fn connect_with(
        &mut self,
        qp: &Qp,
        remote_qpn: u32,
        rgid: [u8; 16],
        rmac: [u8; 6],
        min_rnr: u32,
        retry: u32,
        rnr_retry: u32,
        timeout: u32,
    ) {
        let i = self.rst2init_input(qp.qpn);
        self.raw.exec(&i, 16).ok();
        let i = self.init2rtr_input(qp.qpn, remote_qpn, rgid, rmac, 0x100, min_rnr);
        self.raw.exec(&i, 16).ok();
        let i = self.rtr2rts_input(qp.qpn, 0x100, retry, rnr_retry, timeout);
        self.raw.exec(&i, 16).ok();
    }

    /// Connects `qp` to `remote_qpn` on this HCA (loopback: the remote GID is our own).
    pub fn connect_local(&mut self, qp: &Qp, remote_qpn: u32) {
        let (gid, mac) = (self.gid, self.mac);
        self.connect_with(qp, remote_qpn, gid, mac, 1, 7, 7, 14);
    }

    pub fn query_qp(&mut self, qpn: u32) -> Done {
        let mut i = input(opcode::QUERY_QP, 0, query_qp_in::BYTES);
        set(&mut i, query_qp_in::QPN, qpn);
        self.raw.exec(&i, query_qp_out::BYTES)
    }

    pub fn qp_state(&mut self, qpn: u32) -> u32 {
        let d = self.query_qp(qpn);
        d.ok();
        d.get(qpc::STATE.within(query_qp_out::QPC))
    }

    pub fn modify_simple(&mut self, op: u16, qpn: u32) -> Done {
        let mut i = input(op, 0, qp_2rst_in::BYTES);
        set(&mut i, qp_2rst_in::QPN, qpn);
        self.raw.exec(&i, 16)
    }

    /// Writes a send WQE at the SQ producer position (wrapping) and advances the counter;
    /// does not ring.
    pub fn write_send(&self, qp: &mut Qp, w: &[u8]) {
        let ring = 64usize << qp.log_sq;
        let at = (qp.sq_pi as usize % (1 << qp.log_sq)) * 64;
        let first = w.len().min(ring - at);
        self.write(qp.buf + qp.sq_offset + at as u64, &w[..first]);
        if first < w.len() {
            self.write(qp.buf + qp.sq_offset, &w[first..]);
        }
        qp.sq_pi = qp.sq_pi.wrapping_add(w.len().div_ceil(64) as u16);
    }

    /// Updates the SQ doorbell record and rings the doorbell with the first 8 bytes of `last`
    /// (the last WQE posted), through the next BlueFlame half like rdma-core.
    pub fn ring_sq(&self, qp: &mut Qp, last: &[u8]) {
        self.write(qp.dbr + 4, &(qp.sq_pi as u32).to_be_bytes());
        let bf_half = 1u64 << 9 >> 1; // log_bf_reg_size 9: halves of 256 bytes
        let off = u64::from(qp.uar) * 4096 + 0x800 + bf_half * qp.bf_half as u64;
        qp.bf_half ^= 1;
        let v = u64::from_le_bytes(last[0..8].try_into().unwrap());
        self.raw.dev.write64(off, v);
        self.raw.dev.settle();
    }

    /// Posts one send WQE and rings.
    pub fn post_send(
        &self,
        qp: &mut Qp,
        opcode: u8,
        fm_ce_se: u8,
        imm: u32,
        segs: &[&[u8]],
    ) -> u16 {
        let idx = qp.sq_pi;
        let w = send_wqe(opcode, idx, qp.qpn, fm_ce_se, imm, segs);
        self.write_send(qp, &w);
        self.ring_sq(qp, &w);
        idx
    }

    /// Posts one receive WQE with `sges` (terminated with MLX5_INVALID_LKEY when short).
    pub fn post_recv(&self, qp: &mut Qp, sges: &[(u32, u32, u64)]) {
        let slot = (qp.rq_pi as usize % (1 << qp.log_rq)) * qp.rq_stride;
        let mut w = vec![0u8; qp.rq_stride];
        for (k, &(len, lkey, addr)) in sges.iter().enumerate() {
            w[k * 16..k * 16 + 16].copy_from_slice(&dseg(len, lkey, addr));
        }
        if sges.len() * 16 < qp.rq_stride {
            let k = sges.len();
            w[k * 16..k * 16 + 16].copy_from_slice(&dseg(0, wqe::INVALID_LKEY, 0));
        }
        self.write(qp.buf + slot as u64, &w);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        self.write(qp.dbr, &(qp.rq_pi as u32).to_be_bytes());
    }

    /// The next software-owned CQE, consumed (the consumer index is written to the DB record).
    pub fn poll_cq(&self, cq: &mut Cq) -> Option<Cqe> {
        let n = 1u32 << cq.log_size;
        let at = cq.buf + ((cq.ci & (n - 1)) as u64) * 64;
        let b = self.read(at, 64);
        if !cqe::is_sw_owned(b[63], cq.ci, n) {
            return None;
        }
        cq.ci = cq.ci.wrapping_add(1);
        self.write(cq.dbr, &(cq.ci & 0xff_ffff).to_be_bytes());
        Some(Cqe(b.try_into().unwrap()))
    }

    /// Polls until a CQE arrives, calling `poll` on the HCAs given (wire, timers).
    pub fn wait_cq(&self, cq: &mut Cq, others: &[&D]) -> Cqe {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(c) = self.poll_cq(cq) {
                return c;
            }
            self.raw.dev.poll();
            for o in others {
                o.poll();
            }
            assert!(Instant::now() < deadline, "no CQE on CQ {:#x}", cq.cqn);
            std::thread::yield_now();
        }
    }

    /// The next EQE (software-owned by the owner-bit rule), consumed.
    pub fn poll_eq(&mut self) -> Option<[u8; 64]> {
        let n = 1u32 << self.eq_log;
        let e = self.raw.eqe(self.eq_buf, (self.eq_ci & (n - 1)) as u64);
        let owner = e[63] & 1;
        if owner != ((self.eq_ci >> self.eq_log) & 1) as u8 {
            return None;
        }
        self.eq_ci += 1;
        Some(e)
    }

    /// Every pending EQE as (event type, 28 bytes of event data).
    pub fn drain_eq(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(e) = self.poll_eq() {
            v.push((e[1], e[32..60].to_vec()));
        }
        v
    }
}
