//! The HCA: all device state, command dispatch and the HCA lifecycle (ENABLE/INIT/TEARDOWN/
//! DISABLE), ISSI, capabilities, ACCESS_REGISTER, QUERY_ADAPTER, NOP, SET_DRIVER_VERSION.
//! Object commands live with their objects: [`crate::pages`], [`crate::uar`], [`crate::pd`],
//! [`crate::eq`], [`crate::vport`] (control plane) and [`crate::mr`], [`crate::cq`],
//! [`crate::qp`] (data plane).
//!
//! Dispatch checks, in this order: known opcode (BAD_OP), input and output lengths against the
//! command's `_in`/`_out` layouts (BAD_INP_LEN / BAD_OUTP_LEN; where the rdma-core and Linux
//! headers differ in size, anything between the two is accepted), the reserved command header
//! (`uid` and the dword before `op_mod`) and `op_mod` (BAD_PARAM), then the lifecycle state
//! (BAD_SYS_STATE) and boot pages (NO_RES), then the handler.

use std::sync::Arc;

use crate::caps::{Caps, SetCapError, CAP_PAGE_BYTES};
use crate::cmd::{CmdError, CmdResult};
use crate::eq::EqTable;
use crate::faults::Faults;
use crate::init_seg::HealthState;
use crate::memory::GuestMemory;
use crate::pages::{PageStage, Pages};
use crate::pci::Intx;
use crate::pd::{PdTable, TdTable};
use crate::trace::Trace;
use crate::uar::UarTable;
use crate::vport::Vport;
use crate::{cq, mr, qp, wire};
use mlx5_prm::*;

/// Syndromes: one distinct, stable value per check, so a failure in a trace or a driver log
/// points at one line of the model. Firmware syndromes are opaque numbers; these are the
/// model's own. The control plane (this crate's engineer A) uses `0x51xx_xxxx`; the data plane
/// (mr/cq/qp/datapath) uses `0x52xx_xxxx`.
///
/// | value        | status          | check                                                     |
/// |--------------|-----------------|-----------------------------------------------------------|
/// | 0x5100_0001  | BAD_OP          | opcode not implemented                                    |
/// | 0x5100_0002  | BAD_INP_LEN     | input shorter than the command's `_in` layout             |
/// | 0x5100_0003  | BAD_INP_LEN     | input longer than the command's `_in` layout              |
/// | 0x5100_0004  | BAD_OUTP_LEN    | output shorter than the command's `_out` layout           |
/// | 0x5100_0005  | BAD_PARAM       | `uid` set (no user contexts)                              |
/// | 0x5100_0006  | BAD_PARAM       | reserved header bits (0x20..0x30) set                     |
/// | 0x5100_0007  | BAD_PARAM       | op_mod set where the command defines none                 |
/// | 0x5100_0008  | BAD_SYS_STATE   | command not allowed before ENABLE_HCA / after DISABLE_HCA |
/// | 0x5100_0009  | BAD_SYS_STATE   | object command before INIT_HCA or after TEARDOWN_HCA      |
/// | 0x5100_000a  | BAD_SYS_STATE   | command not allowed once INIT_HCA is done                 |
/// | 0x5100_000b  | NO_RES          | boot pages not given yet                                  |
/// | 0x5101_0001  | BAD_PARAM       | ENABLE/DISABLE_HCA: function_id / embedded_cpu set        |
/// | 0x5101_0002  | BAD_SYS_STATE   | ENABLE_HCA on an enabled function                         |
/// | 0x5101_0003  | BAD_PARAM       | SET_ISSI: unsupported ISSI                                |
/// | 0x5101_0004  | NO_RES          | INIT_HCA: boot/init pages not all given                   |
/// | 0x5101_0005  | BAD_PARAM       | INIT_HCA: sw_owner_id / reserved input set                |
/// | 0x5101_0006  | BAD_PARAM       | TEARDOWN_HCA: unsupported profile                         |
/// | 0x5101_0007  | BAD_SYS_STATE   | DISABLE_HCA while initialized (TEARDOWN_HCA first)        |
/// | 0x5102_0001  | BAD_PARAM       | QUERY/MANAGE_PAGES: op_mod out of range                   |
/// | 0x5102_0002  | BAD_PARAM       | QUERY/MANAGE_PAGES: function_id / embedded_cpu set        |
/// | 0x5102_0003  | BAD_INP_LEN     | MANAGE_PAGES GIVE: input shorter than input_num_entries   |
/// | 0x5102_0004  | BAD_PARAM       | MANAGE_PAGES GIVE: more pages than the device asked for   |
/// | 0x5102_0005  | BAD_PARAM       | MANAGE_PAGES GIVE: page not 4 KiB aligned                 |
/// | 0x5102_0006  | BAD_PARAM       | MANAGE_PAGES GIVE: page already owned / listed twice      |
/// | 0x5102_0007  | BAD_PARAM       | MANAGE_PAGES GIVE: page outside guest memory              |
/// | 0x5102_0008  | BAD_OUTP_LEN    | MANAGE_PAGES TAKE: output too short for the entries       |
/// | 0x5103_0001  | BAD_PARAM       | QUERY/SET_HCA_CAP: cap type not supported                 |
/// | 0x5103_0002  | BAD_PARAM       | QUERY/SET_HCA_CAP: other_function / function_id set       |
/// | 0x5103_0003  | BAD_PARAM       | SET_HCA_CAP: op_mod bit 0 set                             |
/// | 0x5103_0004  | BAD_PARAM       | SET_HCA_CAP: read-only field changed                      |
/// | 0x5103_0005  | BAD_PARAM       | SET_HCA_CAP: settable field above MAX / invalid           |
/// | 0x5104_0001  | BAD_PARAM       | ACCESS_REGISTER: register not supported                   |
/// | 0x5104_0002  | BAD_PARAM       | ACCESS_REGISTER: op_mod not 0 (write) or 1 (read)         |
/// | 0x5104_0003  | BAD_INP_LEN     | ACCESS_REGISTER: register data shorter than the register  |
/// | 0x5104_0004  | BAD_PARAM       | ACCESS_REGISTER: argument set                             |
/// | 0x5104_0005  | BAD_OUTP_LEN    | ACCESS_REGISTER: output shorter than the register         |
/// | 0x5105_0001  | LIM_ERR         | ALLOC_UAR: no free UAR                                    |
/// | 0x5105_0002  | BAD_RES         | DEALLOC_UAR: unknown UAR                                  |
/// | 0x5105_0003  | RES_BUSY        | DEALLOC_UAR: an EQ still uses the UAR                     |
/// | 0x5105_0004  | RES_BUSY        | DEALLOC_UAR: a CQ still uses the UAR                      |
/// | 0x5105_0005  | RES_BUSY        | DEALLOC_UAR: a QP still uses the UAR                      |
/// | 0x5106_0001  | LIM_ERR         | ALLOC_PD: log_max_pd PDs in use                           |
/// | 0x5106_0002  | BAD_RES         | DEALLOC_PD: unknown PD                                    |
/// | 0x5106_0003  | LIM_ERR         | ALLOC_TRANSPORT_DOMAIN: all in use                        |
/// | 0x5106_0004  | BAD_RES         | DEALLOC_TRANSPORT_DOMAIN: unknown TD                      |
/// | 0x5106_0005  | RES_BUSY        | DEALLOC_PD: an mkey still belongs to the PD               |
/// | 0x5106_0006  | RES_BUSY        | DEALLOC_PD: a QP still belongs to the PD                  |
/// | 0x5107_0001  | LIM_ERR         | CREATE_EQ: log_max_eq EQs in use                          |
/// | 0x5107_0002  | BAD_PARAM       | CREATE_EQ: log_eq_size above log_max_eq_sz                |
/// | 0x5107_0003  | BAD_RES         | CREATE_EQ: uar_page is not an allocated UAR               |
/// | 0x5107_0004  | BAD_INP_LEN     | CREATE_EQ: fewer pas entries than the buffer needs        |
/// | 0x5107_0005  | BAD_PARAM       | CREATE_EQ: pas entry not aligned to the page size         |
/// | 0x5107_0006  | BAD_PARAM       | CREATE_EQ: pas entry outside guest memory                 |
/// | 0x5107_0007  | BAD_PARAM       | CREATE_EQ: reserved eqc field set (status/st/ec/oi)       |
/// | 0x5107_0008  | BAD_RES         | DESTROY/QUERY_EQ: unknown EQ                              |
/// | 0x5107_0009  | BAD_PARAM       | CREATE_EQ: log_page_size / page_offset out of range       |
/// | 0x5107_000a  | RES_BUSY        | DESTROY_EQ: a CQ still sends its events to the EQ         |
/// | 0x5108_0001  | BAD_PARAM       | vport commands: other_vport / vport_number set            |
/// | 0x5108_0002  | BAD_PARAM       | QUERY_VPORT_STATE: op_mod not VNIC (0) or UPLINK (2)       |
/// | 0x5108_0003  | BAD_PARAM       | MODIFY_NIC_VPORT_CONTEXT: field_select bit not supported  |
/// | 0x5108_0004  | IX_ERR          | QUERY/SET_ROCE_ADDRESS: index beyond the GID table        |
/// | 0x5108_0005  | BAD_PARAM       | SET_ROCE_ADDRESS: bad roce_version / roce_l3_type         |
/// | 0x5108_0006  | BAD_PARAM       | QUERY/SET_ROCE_ADDRESS: vhca_port_num not 0 (or 1 with vHCA ports) |
/// | 0x5108_0007  | BAD_PARAM       | MODIFY_NIC_VPORT_CONTEXT: mtu out of range                |
/// | 0x5108_0008  | BAD_PARAM       | QUERY_VPORT_COUNTER: port_num not 0/1; QUERY_Q_COUNTER: counter_set_id not 0 nor allocated |
/// | 0x5110_0001  | LIM_ERR         | ALLOC_Q_COUNTER: max_qp_cnt sets in use (set 0 included) |
/// | 0x5110_0002  | BAD_RES         | DEALLOC_Q_COUNTER: set 0 or a set not allocated          |
/// | 0x5110_0003  | RES_BUSY        | DEALLOC_Q_COUNTER: a QP is still attached to the set     |
/// | 0x5110_0004  | BAD_PARAM       | QUERY_Q_COUNTER: aggregate set                           |
///
/// Releasing an object another object still names fails with RES_BUSY, which Linux turns into
/// -EBUSY (drivers/net/ethernet/mellanox/mlx5/core/cmd.c `cmd_status_to_err`; rdma-core
/// providers/mlx5/mlx5_vfio.c has the same mapping). Linux relies on that refusal: when a
/// process dies, drivers/infiniband/core/rdma_core.c `uverbs_destroy_ufile_hw` destroys its
/// objects in no particular order and retries the ones whose destroy failed
/// (`cleanup_retryable`; devx `devx_obj_cleanup` passes the firmware status through
/// `ib_is_destroy_retryable`), so a CQ is only destroyed after its QPs, a PD after its QPs and
/// mkeys, an EQ after its CQs and a UAR after the queues that ring through it. Transport
/// domains are named only by TIS/TIR contexts (`tisc.transport_domain`), which the model does
/// not implement, so DEALLOC_TRANSPORT_DOMAIN has nothing to be busy with.
pub mod syndrome {
    pub const BAD_OPCODE: u32 = 0x5100_0001;
    pub const INLEN_SHORT: u32 = 0x5100_0002;
    pub const INLEN_LONG: u32 = 0x5100_0003;
    pub const OUTLEN_SHORT: u32 = 0x5100_0004;
    pub const UID_SET: u32 = 0x5100_0005;
    pub const HEADER_RESERVED: u32 = 0x5100_0006;
    pub const OP_MOD_SET: u32 = 0x5100_0007;
    pub const NOT_ENABLED: u32 = 0x5100_0008;
    pub const NOT_INITIALIZED: u32 = 0x5100_0009;
    pub const ALREADY_INITIALIZED: u32 = 0x5100_000a;
    pub const NO_BOOT_PAGES: u32 = 0x5100_000b;
    pub const FUNCTION_ID: u32 = 0x5101_0001;
    pub const ALREADY_ENABLED: u32 = 0x5101_0002;
    pub const BAD_ISSI: u32 = 0x5101_0003;
    pub const INIT_NO_PAGES: u32 = 0x5101_0004;
    pub const INIT_RESERVED: u32 = 0x5101_0005;
    pub const TEARDOWN_PROFILE: u32 = 0x5101_0006;
    pub const DISABLE_WHILE_INIT: u32 = 0x5101_0007;
    pub const PAGES_OP_MOD: u32 = 0x5102_0001;
    pub const PAGES_FUNCTION: u32 = 0x5102_0002;
    pub const PAGES_INLEN: u32 = 0x5102_0003;
    pub const PAGES_TOO_MANY: u32 = 0x5102_0004;
    pub const PAGES_UNALIGNED: u32 = 0x5102_0005;
    pub const PAGES_DUPLICATE: u32 = 0x5102_0006;
    pub const PAGES_OUTSIDE: u32 = 0x5102_0007;
    pub const PAGES_OUTLEN: u32 = 0x5102_0008;
    pub const CAP_TYPE: u32 = 0x5103_0001;
    pub const CAP_FUNCTION: u32 = 0x5103_0002;
    pub const CAP_SET_OP_MOD: u32 = 0x5103_0003;
    pub const CAP_READ_ONLY: u32 = 0x5103_0004;
    pub const CAP_ABOVE_MAX: u32 = 0x5103_0005;
    pub const REG_UNSUPPORTED: u32 = 0x5104_0001;
    pub const REG_OP_MOD: u32 = 0x5104_0002;
    pub const REG_INLEN: u32 = 0x5104_0003;
    pub const REG_ARGUMENT: u32 = 0x5104_0004;
    pub const REG_OUTLEN: u32 = 0x5104_0005;
    pub const UAR_EXHAUSTED: u32 = 0x5105_0001;
    pub const UAR_UNKNOWN: u32 = 0x5105_0002;
    pub const UAR_BUSY: u32 = 0x5105_0003;
    pub const UAR_BUSY_CQ: u32 = 0x5105_0004;
    pub const UAR_BUSY_QP: u32 = 0x5105_0005;
    pub const PD_EXHAUSTED: u32 = 0x5106_0001;
    pub const PD_UNKNOWN: u32 = 0x5106_0002;
    pub const TD_EXHAUSTED: u32 = 0x5106_0003;
    pub const TD_UNKNOWN: u32 = 0x5106_0004;
    pub const PD_BUSY_MKEY: u32 = 0x5106_0005;
    pub const PD_BUSY_QP: u32 = 0x5106_0006;
    pub const EQ_EXHAUSTED: u32 = 0x5107_0001;
    pub const EQ_TOO_BIG: u32 = 0x5107_0002;
    pub const EQ_BAD_UAR: u32 = 0x5107_0003;
    pub const EQ_PAS_SHORT: u32 = 0x5107_0004;
    pub const EQ_PAS_UNALIGNED: u32 = 0x5107_0005;
    pub const EQ_PAS_OUTSIDE: u32 = 0x5107_0006;
    pub const EQ_RESERVED: u32 = 0x5107_0007;
    pub const EQ_UNKNOWN: u32 = 0x5107_0008;
    pub const EQ_PAGE_GEOMETRY: u32 = 0x5107_0009;
    pub const EQ_BUSY: u32 = 0x5107_000a;
    pub const VPORT_OTHER: u32 = 0x5108_0001;
    pub const VPORT_STATE_OP_MOD: u32 = 0x5108_0002;
    pub const VPORT_FIELD_SELECT: u32 = 0x5108_0003;
    pub const GID_INDEX: u32 = 0x5108_0004;
    pub const GID_TYPE: u32 = 0x5108_0005;
    pub const GID_PORT: u32 = 0x5108_0006;
    pub const VPORT_MTU: u32 = 0x5108_0007;
    pub const VPORT_COUNTER_SET: u32 = 0x5108_0008;
    pub const Q_COUNTER_LIMIT: u32 = 0x5110_0001;
    pub const Q_COUNTER_UNKNOWN: u32 = 0x5110_0002;
    pub const Q_COUNTER_BUSY: u32 = 0x5110_0003;
    pub const Q_COUNTER_AGGREGATE: u32 = 0x5110_0004;
}

/// Shorthand for a failed command.
pub(crate) const fn fail(status: u8, syndrome: u32) -> CmdResult {
    Err(CmdError::new(status, syndrome))
}

/// Reads a field the dispatch length check guarantees to be inside `buf`.
pub(crate) fn get(buf: &[u8], f: Field) -> u32 {
    f.get(buf).unwrap_or(0)
}

/// Writes a field the dispatch length check guarantees to be inside `buf`.
pub(crate) fn put(buf: &mut [u8], f: Field, v: u32) {
    let _ = f.set(buf, v);
}

/// The HCA's life (facts boot_sequence and teardown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Power-on, or after DISABLE_HCA: only ENABLE_HCA is accepted.
    Disabled,
    /// ENABLE_HCA done: bring-up commands (ISSI, pages, caps, registers, INIT_HCA).
    Enabled,
    /// INIT_HCA done: object commands.
    Initialized,
    /// TEARDOWN_HCA done: page reclaim and DISABLE_HCA.
    TornDown,
}

const S_DISABLED: u8 = 1;
const S_ENABLED: u8 = 2;
const S_INIT: u8 = 4;
const S_TORN: u8 = 8;
const S_UP: u8 = S_ENABLED | S_INIT | S_TORN;

impl Lifecycle {
    fn bit(self) -> u8 {
        match self {
            Lifecycle::Disabled => S_DISABLED,
            Lifecycle::Enabled => S_ENABLED,
            Lifecycle::Initialized => S_INIT,
            Lifecycle::TornDown => S_TORN,
        }
    }
}

/// Per-HCA configuration.
#[derive(Clone, Debug)]
pub struct HcaConfig {
    /// The port's permanent MAC address (NIC vport context `permanent_address`).
    pub mac: [u8; 6],
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig {
            // Locally administered unicast address.
            mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
        }
    }
}

/// All device state.
pub struct Hca {
    /// Guest memory (every DMA goes through it).
    pub mem: Arc<dyn GuestMemory>,
    /// Memory keys (data plane).
    pub mkeys: mr::MkeyTable,
    /// Completion queues (data plane).
    pub cqs: cq::CqTable,
    /// Queue pairs (data plane).
    pub qps: qp::QpTable,
    /// The port and the wire (data plane).
    pub port: wire::Port,
    /// Fault switches. Prefer [`Hca::update_faults`], which applies side effects at once.
    pub faults: Faults,
    pub(crate) caps: Caps,
    pub(crate) pages: Pages,
    pub(crate) uars: UarTable,
    pub(crate) pds: PdTable,
    pub(crate) tds: TdTable,
    pub(crate) eqs: EqTable,
    pub(crate) vport: Vport,
    /// Queue counter sets (ALLOC_Q_COUNTER).
    pub(crate) qcounters: crate::counter::QCounterTable,
    pub(crate) intx: Intx,
    pub(crate) health: Arc<HealthState>,
    pub(crate) trace: Trace,
    state: Lifecycle,
    issi: u16,
    host_endianness: u8,
    driver_version: Option<String>,
    config: HcaConfig,
    /// The buffer a send WQE is fetched into, kept between doorbells (zeroing 1 KiB per WQE
    /// showed in the profile). Only the bytes fetched for the current WQE are ever read.
    pub(crate) wqe_buf: Option<Box<[u8; crate::wqe::MAX_WQE_BYTES]>>,
    /// A doorbell started this event; the port's clock is not read for it yet (`rcpath::clock`).
    pub(crate) clock_due: bool,
}

/// `supported_issi_dw0`: ISSI 0 and 1 (Linux main.c:1073 checks bit 1, then bit 0).
pub const SUPPORTED_ISSI: u32 = 0b11;
/// `query_adapter_param_block.ieee_vendor_id`: Mellanox's IEEE OUI 00-02-C9.
pub const IEEE_VENDOR_ID: u32 = 0x00_02c9;
/// `query_adapter_param_block.vsd_contd_psid`: the board id this model reports.
pub const PSID: &[u8; 16] = b"MLX5SIM_CX5_0001";

impl Hca {
    /// A powered-on, disabled HCA.
    pub fn new(mem: Arc<dyn GuestMemory>, intx: Intx, health: Arc<HealthState>) -> Hca {
        Self::with_config(mem, intx, health, HcaConfig::default())
    }

    /// A powered-on, disabled HCA with `config`.
    pub fn with_config(
        mem: Arc<dyn GuestMemory>,
        intx: Intx,
        health: Arc<HealthState>,
        config: HcaConfig,
    ) -> Hca {
        Hca {
            mem,
            mkeys: Default::default(),
            cqs: Default::default(),
            qps: Default::default(),
            port: Default::default(),
            faults: Faults::default(),
            caps: Caps::connectx5(),
            pages: Pages::new(),
            uars: UarTable::default(),
            pds: PdTable::default(),
            tds: TdTable::default(),
            eqs: EqTable::default(),
            vport: Vport::new(config.mac),
            qcounters: Default::default(),
            intx,
            health,
            trace: Trace::from_env(),
            state: Lifecycle::Disabled,
            issi: 0,
            host_endianness: 0,
            driver_version: None,
            config,
            wqe_buf: None,
            clock_due: false,
        }
    }

    /// Device reset (FLR / proxy DEVICE_RESET): back to power-on. Guest memory, INTx, the
    /// wire, the trace and the non-fatal fault switches survive; the fatal health state does
    /// not.
    pub fn reset(&mut self) {
        self.faults.fatal_health = None;
        self.health.clear();
        self.power_on();
    }

    /// Everything back to power-on except what belongs to the machine around the device
    /// (memory, INTx line, wire, trace, fault switches).
    fn power_on(&mut self) {
        let mut fresh = Hca::with_config(
            self.mem.clone(),
            self.intx.clone(),
            self.health.clone(),
            self.config.clone(),
        );
        fresh.faults = std::mem::take(&mut self.faults);
        fresh.trace = std::mem::take(&mut self.trace);
        // The link to the peer survives a reset; packets in flight do not.
        fresh.port = std::mem::take(&mut self.port);
        fresh.port.reset_state();
        self.intx.lower();
        *self = fresh;
    }

    // ---------------------------------------------------------------------------------------
    // The interface the data plane uses.
    // ---------------------------------------------------------------------------------------

    /// True if `pdn` is an allocated PD.
    pub fn pd_exists(&self, pdn: u32) -> bool {
        self.pds.contains(pdn)
    }

    /// True if `tdn` is an allocated transport domain.
    pub fn td_exists(&self, tdn: u32) -> bool {
        self.tds.contains(tdn)
    }

    /// True if `index` is an allocated UAR.
    pub fn uar_exists(&self, index: u32) -> bool {
        self.uars.contains(index)
    }

    /// EQ `eqn`, as the device holds it.
    pub fn eq(&self, eqn: u8) -> Option<&crate::eq::Eq> {
        self.eqs.get(eqn)
    }

    /// True if `eqn` is an existing EQ.
    pub fn eq_exists(&self, eqn: u32) -> bool {
        u8::try_from(eqn).is_ok_and(|n| self.eqs.get(n).is_some())
    }

    /// INIT_HCA done and not torn down.
    pub fn initialized(&self) -> bool {
        self.state == Lifecycle::Initialized
    }

    /// The lifecycle state.
    pub fn lifecycle(&self) -> Lifecycle {
        self.state
    }

    /// A field of the CURRENT general capabilities (`cmd_hca_cap`).
    pub fn cap(&self, field: Field) -> u32 {
        self.caps.general(field)
    }

    /// A field of the CURRENT capabilities of `cap_type` (0 if the type is not answered).
    pub fn cap_of(&self, cap_type: u16, field: Field) -> u32 {
        self.caps
            .page(cap_type)
            .and_then(|p| field.get(&p.cur[..]).ok())
            .unwrap_or(0)
    }

    /// Firmware pages the device owns and the CANT_GIVE answers it got.
    pub fn pages(&self) -> &Pages {
        &self.pages
    }

    /// Every range of guest memory the device holds now, with what holds it: firmware pages,
    /// the pages of live MTT mkeys, CQ / QP buffers and doorbell records, EQ buffers. Memory
    /// inside one of them must not be freed (tests check the driver against it).
    pub fn dma_in_use(&self) -> Vec<(u64, u64, String)> {
        let mut v = Vec::new();
        for a in self.pages.owned_pages() {
            v.push((a, 4096, "firmware page".to_string()));
        }
        for k in self.mkeys.iter() {
            for (a, l) in k.dma_ranges().unwrap_or_default() {
                v.push((a, l, format!("mkey {:#x}", k.key())));
            }
        }
        for c in self.cqs.iter() {
            for (a, l) in c.dma_ranges() {
                v.push((a, l, format!("CQ {:#x}", c.cqn)));
            }
        }
        for q in self.qps.iter() {
            for (a, l) in q.buf.ranges() {
                v.push((a, l, format!("QP {:#x} buffer", q.qpn)));
            }
            v.push((q.dbr_addr, 8, format!("QP {:#x} doorbell record", q.qpn)));
        }
        for (eqn, a, l) in self.eqs.dma_ranges() {
            v.push((a, l, format!("EQ {eqn}")));
        }
        v
    }

    /// The capability pages, to model a device with other capabilities (tests).
    pub fn caps_mut(&mut self) -> &mut Caps {
        &mut self.caps
    }

    /// The GID at `index` of the RoCE address table, if one is set.
    pub fn roce_gid(&self, index: u32) -> Option<[u8; 16]> {
        self.vport.gid(index)
    }

    /// The full RoCE address entry (`roce_addr_layout`, 32 bytes) at `index`, if set.
    pub fn roce_address(&self, index: u32) -> Option<[u8; 32]> {
        self.vport.address(index)
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.vport.mac()
    }

    /// NIC vport `roce_en` (MODIFY_NIC_VPORT_CONTEXT, facts trap 20).
    pub fn roce_enabled(&self) -> bool {
        self.vport.roce_en()
    }

    /// Host endianness register `he` bit (0 = little-endian host).
    pub fn host_endianness(&self) -> u8 {
        self.host_endianness
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The fault switches, to clear one-shot data-plane faults.
    pub fn faults_mut(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// A field of the CURRENT atomic capabilities (`atomic_caps`).
    pub fn atomic_cap(&self, field: Field) -> u32 {
        self.cap_of(hca_cap::cap_type::ATOMIC, field)
    }

    /// Changes the fault switches and applies their side effects at once (fatal health
    /// reaches the health buffer, page requests are posted if they can be).
    pub fn update_faults(&mut self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.faults);
        self.apply_faults();
    }

    /// The driver version string from SET_DRIVER_VERSION.
    pub fn driver_version(&self) -> Option<&str> {
        self.driver_version.as_deref()
    }

    /// Writes one EQE into EQ `eqn` (owner bit per the EQ's producer counter) and raises INTx
    /// if the EQ is armed. False if the EQ does not exist or is full (nothing written).
    pub fn post_eqe(&mut self, eqn: u32, event_type: u8, sub_type: u8, data: &[u8]) -> bool {
        crate::eq::post_eqe(self, eqn, event_type, sub_type, data)
    }

    /// Posts an event to every EQ whose event_bitmask asked for `event_type`. An EQ that is
    /// full is an async EQ overrun: fatal health (ASYNCHRONOUS_EQ_BUF_OVERRUN).
    pub fn post_async_event(&mut self, event_type: u8, sub_type: u8, data: &[u8]) {
        crate::eq::post_async_event(self, event_type, sub_type, data)
    }

    /// Port state change event (PORT_CHANGE, sub-type ACTIVE or DOWN, port 1).
    pub fn port_event(&mut self, active: bool) {
        let sub = if active {
            event::port_change::ACTIVE
        } else {
            event::port_change::DOWN
        };
        // port_state_change_event.port_num: 4 bits at bit 0x40 of the event data (Linux
        // mlx5_eqe_port_state.port >> 4, device.h:632).
        let mut data = [0u8; 28];
        put(&mut data, port_state_change_event::PORT_NUM, 1);
        self.post_async_event(event::PORT_CHANGE, sub, &data);
    }

    /// A trace note.
    pub fn trace(&mut self, args: std::fmt::Arguments<'_>) {
        self.trace.note(args);
    }

    /// A trace note (the name the data plane uses).
    pub fn trace_note(&mut self, args: std::fmt::Arguments<'_>) {
        self.trace.note(args);
    }

    /// The trace settings (level, prefix, capture).
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.trace
    }

    pub(crate) fn trace_delivery(&mut self, slot: u32, status: u8, why: &str) {
        self.trace.delivery(slot, status, why);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn trace_command(
        &mut self,
        slot: u32,
        opcode: u16,
        op_mod: u16,
        status: u8,
        syndrome: u32,
        input: &[u8],
        output: &[u8],
    ) {
        self.trace
            .command(slot, opcode, op_mod, status, syndrome, input, output);
    }

    // ---------------------------------------------------------------------------------------
    // Health, faults and page demand.
    // ---------------------------------------------------------------------------------------

    /// Firmware is dead (fatal health): no command completes.
    pub fn dead(&self) -> bool {
        self.faults.fatal_health.is_some()
    }

    /// Declares a fatal firmware error with health syndrome `synd`.
    pub fn set_fatal(&mut self, synd: u8) {
        self.update_faults(|f| f.fatal_health = Some(synd));
    }

    fn apply_faults(&mut self) {
        if let Some(synd) = self.faults.fatal_health {
            if self.health.fatal().is_none() {
                // Tell subscribed EQs first (the last thing dying firmware does), then the
                // health buffer reports the syndrome with rfr set and the counter freezes.
                self.faults.fatal_health = None;
                self.post_async_event(event::INTERNAL_ERROR, 0, &[]);
                self.faults.fatal_health = Some(synd);
                self.health.set_fatal(synd, 0);
                self.trace(format_args!(
                    "fatal health syndrome {synd:#x}: firmware stops"
                ));
            }
        }
        self.deliver_page_requests();
    }

    /// Posts PAGE_REQUEST events for demand no event has announced yet (regular pages after
    /// INIT_HCA, surprise requests), once an EQ subscribed to them exists.
    pub(crate) fn deliver_page_requests(&mut self) {
        if self.dead() || self.state != Lifecycle::Initialized {
            return;
        }
        if !self.eqs.subscribed(event::PAGE_REQUEST) {
            return;
        }
        if let Some(n) = self.faults.page_request.take() {
            self.trace(format_args!("fault page-request {n}"));
            self.pages.surprise(n);
        }
        if let Some(n) = self.pages.unannounced(PageStage::Initialized) {
            // mlx5_eqe_page_req: ec_function be16, func_id be16 (0: this PF), num_pages be32
            // signed (Linux device.h:658, pagealloc.c:750).
            let mut data = [0u8; 28];
            data[4..8].copy_from_slice(&n.to_be_bytes());
            self.post_async_event(event::PAGE_REQUEST, 0, &data);
        }
    }

    /// Called by the command engine after every command.
    pub(crate) fn after_command(&mut self) {
        self.apply_faults();
    }

    // ---------------------------------------------------------------------------------------
    // Dispatch.
    // ---------------------------------------------------------------------------------------

    /// Runs one command: `input` is the whole input (inlen bytes), `output` a zeroed buffer of
    /// outlen bytes whose header the caller fills from the result.
    pub fn dispatch(&mut self, input: &[u8], output: &mut [u8]) -> CmdResult {
        let opcode = get(input, mbox_in::OPCODE) as u16;
        let op_mod = get(input, mbox_in::OP_MOD) as u16;
        let Some(spec) = spec(opcode) else {
            return fail(cmd_status::BAD_OP_ERR, syndrome::BAD_OPCODE);
        };
        if input.len() < spec.in_min {
            return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::INLEN_SHORT);
        }
        if spec.in_max.is_some_and(|m| input.len() > m) {
            return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::INLEN_LONG);
        }
        if output.len() < spec.out_min {
            return fail(cmd_status::BAD_OUTP_LEN_ERR, syndrome::OUTLEN_SHORT);
        }
        if get(input, mbox_in::UID) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::UID_SET);
        }
        if get(input, Field::new(0x20, 0x10)) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::HEADER_RESERVED);
        }
        if !spec.op_mod_any && op_mod != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::OP_MOD_SET);
        }
        if spec.states & self.state.bit() == 0 {
            let syn = match self.state {
                Lifecycle::Disabled => syndrome::NOT_ENABLED,
                Lifecycle::Initialized => syndrome::ALREADY_INITIALIZED,
                _ if spec.states == S_DISABLED => syndrome::ALREADY_ENABLED,
                _ => syndrome::NOT_INITIALIZED,
            };
            return fail(cmd_status::BAD_SYS_STATE_ERR, syn);
        }
        if spec.boot_pages && !self.pages.boot_satisfied() {
            return fail(cmd_status::NO_RES_ERR, syndrome::NO_BOOT_PAGES);
        }
        match spec.handler {
            Handler::Plain(h) => h(self, input, output),
            Handler::Modify(h) => h(self, opcode, input, output),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Lifecycle commands.
    // ---------------------------------------------------------------------------------------

    fn enable_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        // enable_hca_in: embedded_cpu_function (bit 0x40, Linux) and function_id: 0 = this PF.
        if get(input, Field::new(0x40, 0x10)) != 0 || get(input, enable_hca_in::FUNCTION_ID) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::FUNCTION_ID);
        }
        self.state = Lifecycle::Enabled;
        Ok(())
    }

    fn disable_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        if get(input, Field::new(0x40, 0x10)) != 0 || get(input, disable_hca_in::FUNCTION_ID) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::FUNCTION_ID);
        }
        // Back to power-on; pages the driver did not reclaim are forgotten.
        self.power_on();
        Ok(())
    }

    fn query_issi(&mut self, _input: &[u8], out: &mut [u8]) -> CmdResult {
        put(out, query_issi_out::CURRENT_ISSI, self.issi.into());
        put(out, query_issi_out::SUPPORTED_ISSI_DW0, SUPPORTED_ISSI);
        Ok(())
    }

    fn set_issi(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        let issi = get(input, set_issi_in::CURRENT_ISSI);
        if issi >= 32 || SUPPORTED_ISSI & (1 << issi) == 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::BAD_ISSI);
        }
        self.issi = issi as u16;
        Ok(())
    }

    fn init_hca(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        // Linux's init_hca_in carries sw_owner_id (only with cap sw_owner_id, not advertised)
        // and sw_vhca_id: everything past the header must be zero.
        if input[8..].iter().any(|&b| b != 0) {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::INIT_RESERVED);
        }
        if !self.pages.init_satisfied() {
            return fail(cmd_status::NO_RES_ERR, syndrome::INIT_NO_PAGES);
        }
        self.state = Lifecycle::Initialized;
        Ok(())
    }

    fn teardown_hca(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        use mlx5_prm::teardown::{force_state, profile};
        let p = get(input, teardown_hca_in::PROFILE) as u8;
        match p {
            profile::GRACEFUL_CLOSE => {}
            // Advertised by cmd_hca_cap.force_teardown.
            profile::FORCE_CLOSE => put(out, teardown_hca_out::STATE, force_state::SUCCESS.into()),
            // PREPARE_FAST_TEARDOWN needs cap fast_teardown (not advertised; its position is
            // disputed, facts trap 23).
            _ => return fail(cmd_status::BAD_PARAM_ERR, syndrome::TEARDOWN_PROFILE),
        }
        // Every object goes; the driver now reclaims all pages and disables the function.
        self.mkeys = Default::default();
        self.cqs = Default::default();
        self.qps = Default::default();
        self.uars = UarTable::default();
        self.pds = PdTable::default();
        self.tds = TdTable::default();
        self.eqs = EqTable::default();
        self.vport = Vport::new(self.config.mac);
        self.intx.lower();
        self.state = Lifecycle::TornDown;
        Ok(())
    }

    // ---------------------------------------------------------------------------------------
    // Capabilities, registers, adapter.
    // ---------------------------------------------------------------------------------------

    fn query_hca_cap(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        if get(input, query_hca_cap_in::OTHER_FUNCTION) != 0
            || get(input, query_hca_cap_in::FUNCTION_ID) != 0
        {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_FUNCTION);
        }
        let op_mod = get(input, query_hca_cap_in::OP_MOD) as u16;
        let Some(page) = self.caps.page(op_mod >> 1) else {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_TYPE);
        };
        let src = if op_mod & 1 == hca_cap::OPMOD_GET_CUR {
            &page.cur
        } else {
            &page.max
        };
        let at = query_hca_cap_out::CAPABILITY.byte_offset();
        out[at..at + CAP_PAGE_BYTES].copy_from_slice(&src[..]);
        Ok(())
    }

    fn set_hca_cap(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        if get(input, set_hca_cap_in::OTHER_FUNCTION) != 0
            || get(input, set_hca_cap_in::FUNCTION_ID) != 0
        {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_FUNCTION);
        }
        let op_mod = get(input, set_hca_cap_in::OP_MOD) as u16;
        if op_mod & 1 != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_SET_OP_MOD);
        }
        let at = set_hca_cap_in::CAPABILITY.byte_offset();
        match self.caps.set(op_mod >> 1, &input[at..at + CAP_PAGE_BYTES]) {
            Ok(()) => Ok(()),
            Err(SetCapError::UnsupportedType) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_TYPE)
            }
            Err(SetCapError::ReadOnlyChanged) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_READ_ONLY)
            }
            Err(SetCapError::AboveMax(_)) => {
                fail(cmd_status::BAD_PARAM_ERR, syndrome::CAP_ABOVE_MAX)
            }
        }
    }

    fn access_register(&mut self, input: &[u8], out: &mut [u8]) -> CmdResult {
        let op_mod = get(input, access_register_in::OP_MOD) as u16;
        if op_mod != access_reg::OP_MOD_WRITE && op_mod != access_reg::OP_MOD_READ {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_OP_MOD);
        }
        let id = get(input, access_register_in::REGISTER_ID) as u16;
        if id != access_reg::REG_HOST_ENDIANNESS {
            // PCAM/MCAM/QCAM/DTOR and the rest are not advertised (cmd_hca_cap pcam_reg,
            // mcam_reg, qcam_reg = 0; cmd_q_init_to = 0), so Linux never asks for them.
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_UNSUPPORTED);
        }
        if get(input, access_register_in::ARGUMENT) != 0 {
            return fail(cmd_status::BAD_PARAM_ERR, syndrome::REG_ARGUMENT);
        }
        let data_at = access_register_in::REGISTER_DATA.offset as usize / 8;
        let len = register_host_endianness::BYTES;
        if out.len() < data_at + len {
            return fail(cmd_status::BAD_OUTP_LEN_ERR, syndrome::REG_OUTLEN);
        }
        if op_mod == access_reg::OP_MOD_WRITE {
            let Some(data) = input.get(data_at..data_at + len) else {
                return fail(cmd_status::BAD_INP_LEN_ERR, syndrome::REG_INLEN);
            };
            // he: bit 0 of the register (byte 0 bit 7): 0 little-endian host, 0x80 big
            // (Linux device.h:42-44).
            self.host_endianness = data[0] & access_reg::HOST_ENDIANNESS_BIG;
        }
        // The register's contents come back in the output (Linux mlx5_core_access_reg copies
        // register_data out for reads and writes alike).
        out[data_at] = self.host_endianness;
        Ok(())
    }

    fn query_adapter(&mut self, _input: &[u8], out: &mut [u8]) -> CmdResult {
        let at = query_adapter_out::QUERY_ADAPTER_STRUCT.byte_offset();
        let blk = &mut out[at..at + query_adapter_param_block::BYTES];
        put(
            blk,
            query_adapter_param_block::IEEE_VENDOR_ID,
            IEEE_VENDOR_ID,
        );
        put(
            blk,
            query_adapter_param_block::VSD_VENDOR_ID,
            crate::device::VENDOR_ID.into(),
        );
        let psid = query_adapter_param_block::VSD_CONTD_PSID.as_field();
        let p = psid.byte_offset();
        blk[p..p + PSID.len()].copy_from_slice(PSID);
        Ok(())
    }

    fn set_driver_version(&mut self, input: &[u8], _out: &mut [u8]) -> CmdResult {
        let f = set_driver_version_in::DRIVER_VERSION.as_field();
        let bytes = &input[f.byte_offset()..f.byte_offset() + f.byte_len()];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        self.driver_version = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        Ok(())
    }

    fn nop(&mut self, _input: &[u8], _out: &mut [u8]) -> CmdResult {
        Ok(())
    }
}

type PlainHandler = fn(&mut Hca, &[u8], &mut [u8]) -> CmdResult;
type ModifyHandler = fn(&mut Hca, u16, &[u8], &mut [u8]) -> CmdResult;

#[derive(Clone, Copy)]
enum Handler {
    Plain(PlainHandler),
    Modify(ModifyHandler),
}

/// What dispatch checks before calling a handler.
#[derive(Clone, Copy)]
struct Spec {
    in_min: usize,
    /// `None`: variable length (the handler checks it against its entry counts).
    in_max: Option<usize>,
    out_min: usize,
    /// The command defines op_mod (the handler checks it); otherwise it must be 0.
    op_mod_any: bool,
    /// Lifecycle states (S_* bits) the command is accepted in.
    states: u8,
    /// Needs the boot pages.
    boot_pages: bool,
    handler: Handler,
}

const fn fixed(inb: usize, outb: usize, states: u8, h: PlainHandler) -> Spec {
    Spec {
        in_min: inb,
        in_max: Some(inb),
        out_min: outb,
        op_mod_any: false,
        states,
        boot_pages: false,
        handler: Handler::Plain(h),
    }
}

const fn var(inb: usize, outb: usize, states: u8, h: PlainHandler) -> Spec {
    Spec {
        in_max: None,
        ..fixed(inb, outb, states, h)
    }
}

const fn modify(in_min: usize, in_max: usize, outb: usize) -> Spec {
    Spec {
        in_min,
        in_max: Some(in_max),
        out_min: outb,
        op_mod_any: false,
        states: S_INIT,
        boot_pages: false,
        handler: Handler::Modify(qp::modify_qp),
    }
}

impl Spec {
    const fn op_mod(mut self) -> Spec {
        self.op_mod_any = true;
        self
    }
    const fn boot(mut self) -> Spec {
        self.boot_pages = true;
        self
    }
    const fn max_in(mut self, m: usize) -> Spec {
        self.in_max = Some(m);
        self
    }
}

/// The command table. Lengths are the `_in`/`_out` layouts' sizes (rdma-core mlx5_ifc.h, or
/// Linux mlx5_ifc.h where rdma-core lacks the struct); where the Linux struct differs in size
/// (init_hca_in 32 bytes, init2init/rts2rts_qp_in 272 vs 464, query_qp_out 464 vs 272) both
/// sizes are accepted.
fn spec(opcode: u16) -> Option<Spec> {
    use crate::{eq, pd, uar, vport};
    const LINUX_INIT_HCA_IN: usize = 32;
    const LINUX_MODIFY_QP_IN: usize = 272;
    const LINUX_QUERY_QP_OUT: usize = 464;
    let s = match opcode {
        opcode::ENABLE_HCA => fixed(
            enable_hca_in::BYTES,
            enable_hca_out::BYTES,
            S_DISABLED,
            Hca::enable_hca,
        ),
        opcode::DISABLE_HCA => fixed(
            disable_hca_in::BYTES,
            disable_hca_out::BYTES,
            S_ENABLED | S_TORN,
            Hca::disable_hca,
        ),
        opcode::QUERY_ISSI => fixed(
            query_issi_in::BYTES,
            query_issi_out::BYTES,
            S_UP,
            Hca::query_issi,
        ),
        opcode::SET_ISSI => fixed(
            set_issi_in::BYTES,
            set_issi_out::BYTES,
            S_ENABLED,
            Hca::set_issi,
        ),
        opcode::QUERY_PAGES => fixed(
            query_pages_in::BYTES,
            query_pages_out::BYTES,
            S_UP,
            crate::pages::cmd_query_pages,
        )
        .op_mod(),
        opcode::MANAGE_PAGES => var(
            manage_pages_in::BYTES,
            manage_pages_out::BYTES,
            S_UP,
            crate::pages::cmd_manage_pages,
        )
        .op_mod(),
        opcode::QUERY_HCA_CAP => fixed(
            query_hca_cap_in::BYTES,
            query_hca_cap_out::BYTES,
            S_ENABLED | S_INIT,
            Hca::query_hca_cap,
        )
        .op_mod()
        .boot(),
        opcode::SET_HCA_CAP => fixed(
            set_hca_cap_in::BYTES,
            set_hca_cap_out::BYTES,
            S_ENABLED,
            Hca::set_hca_cap,
        )
        .op_mod()
        .boot(),
        opcode::ACCESS_REGISTER => var(
            access_register_in::BYTES,
            access_register_out::BYTES,
            S_ENABLED | S_INIT,
            Hca::access_register,
        )
        .op_mod()
        .boot(),
        opcode::INIT_HCA => fixed(
            init_hca_in::BYTES,
            init_hca_out::BYTES,
            S_ENABLED,
            Hca::init_hca,
        )
        .max_in(LINUX_INIT_HCA_IN),
        opcode::TEARDOWN_HCA => fixed(
            teardown_hca_in::BYTES,
            teardown_hca_out::BYTES,
            S_INIT,
            Hca::teardown_hca,
        ),
        opcode::QUERY_ADAPTER => fixed(
            query_adapter_in::BYTES,
            query_adapter_out::BYTES,
            S_ENABLED | S_INIT,
            Hca::query_adapter,
        )
        .boot(),
        opcode::SET_DRIVER_VERSION => fixed(
            set_driver_version_in::BYTES,
            set_driver_version_out::BYTES,
            S_ENABLED | S_INIT,
            Hca::set_driver_version,
        )
        .boot(),
        opcode::NOP => fixed(nop_in::BYTES, nop_out::BYTES, S_UP, Hca::nop),
        opcode::ALLOC_UAR => fixed(
            alloc_uar_in::BYTES,
            alloc_uar_out::BYTES,
            S_INIT,
            uar::cmd_alloc_uar,
        ),
        opcode::DEALLOC_UAR => fixed(
            dealloc_uar_in::BYTES,
            dealloc_uar_out::BYTES,
            S_INIT,
            uar::cmd_dealloc_uar,
        ),
        opcode::ALLOC_PD => fixed(
            alloc_pd_in::BYTES,
            alloc_pd_out::BYTES,
            S_INIT,
            pd::cmd_alloc_pd,
        ),
        opcode::DEALLOC_PD => fixed(
            dealloc_pd_in::BYTES,
            dealloc_pd_out::BYTES,
            S_INIT,
            pd::cmd_dealloc_pd,
        ),
        opcode::ALLOC_TRANSPORT_DOMAIN => fixed(
            alloc_transport_domain_in::BYTES,
            alloc_transport_domain_out::BYTES,
            S_INIT,
            pd::cmd_alloc_td,
        ),
        opcode::DEALLOC_TRANSPORT_DOMAIN => fixed(
            dealloc_transport_domain_in::BYTES,
            dealloc_transport_domain_out::BYTES,
            S_INIT,
            pd::cmd_dealloc_td,
        ),
        opcode::QUERY_VPORT_STATE => fixed(
            query_vport_state_in::BYTES,
            query_vport_state_out::BYTES,
            S_INIT,
            vport::cmd_query_vport_state,
        )
        .op_mod(),
        opcode::QUERY_VPORT_COUNTER => fixed(
            query_vport_counter_in::BYTES,
            query_vport_counter_out::BYTES,
            S_INIT,
            vport::cmd_query_vport_counter,
        ),
        opcode::QUERY_Q_COUNTER => fixed(
            query_q_counter_in::BYTES,
            query_q_counter_out::BYTES,
            S_INIT,
            crate::counter::cmd_query_q_counter,
        ),
        opcode::ALLOC_Q_COUNTER => fixed(
            alloc_q_counter_in::BYTES,
            alloc_q_counter_out::BYTES,
            S_INIT,
            crate::counter::cmd_alloc_q_counter,
        ),
        opcode::DEALLOC_Q_COUNTER => fixed(
            dealloc_q_counter_in::BYTES,
            dealloc_q_counter_out::BYTES,
            S_INIT,
            crate::counter::cmd_dealloc_q_counter,
        ),
        opcode::QUERY_NIC_VPORT_CONTEXT => fixed(
            query_nic_vport_context_in::BYTES,
            query_nic_vport_context_out::BYTES,
            S_INIT,
            vport::cmd_query_nic_vport_context,
        ),
        opcode::MODIFY_NIC_VPORT_CONTEXT => var(
            modify_nic_vport_context_in::BYTES,
            modify_nic_vport_context_out::BYTES,
            S_INIT,
            vport::cmd_modify_nic_vport_context,
        ),
        opcode::QUERY_ROCE_ADDRESS => fixed(
            query_roce_address_in::BYTES,
            query_roce_address_out::BYTES,
            S_INIT,
            vport::cmd_query_roce_address,
        ),
        opcode::SET_ROCE_ADDRESS => fixed(
            set_roce_address_in::BYTES,
            set_roce_address_out::BYTES,
            S_INIT,
            vport::cmd_set_roce_address,
        ),
        opcode::CREATE_EQ => var(
            create_eq_in::BYTES,
            create_eq_out::BYTES,
            S_INIT,
            eq::cmd_create_eq,
        ),
        opcode::DESTROY_EQ => fixed(
            destroy_eq_in::BYTES,
            destroy_eq_out::BYTES,
            S_INIT,
            eq::cmd_destroy_eq,
        ),
        opcode::QUERY_EQ => fixed(
            query_eq_in::BYTES,
            query_eq_out::BYTES,
            S_INIT,
            eq::cmd_query_eq,
        ),
        // Data plane (engineer B).
        opcode::CREATE_MKEY => var(
            create_mkey_in::BYTES,
            create_mkey_out::BYTES,
            S_INIT,
            mr::create_mkey,
        ),
        opcode::DESTROY_MKEY => fixed(
            destroy_mkey_in::BYTES,
            destroy_mkey_out::BYTES,
            S_INIT,
            mr::destroy_mkey,
        ),
        opcode::QUERY_MKEY => fixed(
            query_mkey_in::BYTES,
            query_mkey_out::BYTES,
            S_INIT,
            mr::query_mkey,
        ),
        opcode::CREATE_CQ => var(
            create_cq_in::BYTES,
            create_cq_out::BYTES,
            S_INIT,
            cq::create_cq,
        ),
        opcode::DESTROY_CQ => fixed(
            destroy_cq_in::BYTES,
            destroy_cq_out::BYTES,
            S_INIT,
            cq::destroy_cq,
        ),
        opcode::QUERY_CQ => fixed(
            query_cq_in::BYTES,
            query_cq_out::BYTES,
            S_INIT,
            cq::query_cq,
        ),
        opcode::MODIFY_CQ => var(
            modify_cq_in::BYTES,
            modify_cq_out::BYTES,
            S_INIT,
            cq::modify_cq,
        )
        .op_mod(),
        opcode::CREATE_QP => var(
            create_qp_in::BYTES,
            create_qp_out::BYTES,
            S_INIT,
            qp::create_qp,
        ),
        opcode::DESTROY_QP => fixed(
            destroy_qp_in::BYTES,
            destroy_qp_out::BYTES,
            S_INIT,
            qp::destroy_qp,
        ),
        opcode::QUERY_QP => fixed(
            query_qp_in::BYTES,
            query_qp_out::BYTES.min(LINUX_QUERY_QP_OUT),
            S_INIT,
            qp::query_qp,
        ),
        opcode::RST2INIT_QP => modify(
            rst2init_qp_in::BYTES,
            rst2init_qp_in::BYTES,
            rst2init_qp_out::BYTES,
        ),
        opcode::INIT2INIT_QP => modify(
            LINUX_MODIFY_QP_IN.min(init2init_qp_in::BYTES),
            LINUX_MODIFY_QP_IN.max(init2init_qp_in::BYTES),
            init2init_qp_out::BYTES,
        ),
        opcode::INIT2RTR_QP => modify(
            init2rtr_qp_in::BYTES,
            init2rtr_qp_in::BYTES,
            init2rtr_qp_out::BYTES,
        ),
        opcode::RTR2RTS_QP => modify(
            rtr2rts_qp_in::BYTES,
            rtr2rts_qp_in::BYTES,
            rtr2rts_qp_out::BYTES,
        ),
        opcode::RTS2RTS_QP => modify(
            LINUX_MODIFY_QP_IN.min(rts2rts_qp_in::BYTES),
            LINUX_MODIFY_QP_IN.max(rts2rts_qp_in::BYTES),
            rts2rts_qp_out::BYTES,
        ),
        opcode::SQERR2RTS_QP => modify(
            sqerr2rts_qp_in::BYTES,
            sqerr2rts_qp_in::BYTES,
            sqerr2rts_qp_out::BYTES,
        ),
        opcode::SQD_RTS_QP => modify(
            sqd2rts_qp_in::BYTES,
            sqd2rts_qp_in::BYTES,
            sqd2rts_qp_out::BYTES,
        ),
        opcode::QP_2ERR => modify(qp_2err_in::BYTES, qp_2err_in::BYTES, qp_2err_out::BYTES),
        opcode::QP_2RST => modify(qp_2rst_in::BYTES, qp_2rst_in::BYTES, qp_2rst_out::BYTES),
        _ => return None,
    };
    Some(s)
}
