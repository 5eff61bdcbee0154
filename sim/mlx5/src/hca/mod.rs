//! The HCA: all device state, command dispatch and the HCA lifecycle (ENABLE/INIT/TEARDOWN/
//! DISABLE), ISSI, capabilities, ACCESS_REGISTER, QUERY_ADAPTER, NOP, SET_DRIVER_VERSION.
//! Object commands live with their objects: [`crate::control::pages`], [`crate::objects::uar`], [`crate::objects::pd`],
//! [`crate::objects::eq`], [`crate::objects::vport`] (control plane) and [`crate::objects::mr`], [`crate::objects::cq`],
//! [`crate::objects::qp`] (data plane).
//!
//! Dispatch checks, in this order: known opcode (BAD_OP), input and output lengths against the
//! command's `_in`/`_out` layouts (BAD_INP_LEN / BAD_OUTP_LEN; where the rdma-core and Linux
//! headers differ in size, anything between the two is accepted), the reserved command header
//! (`uid` and the dword before `op_mod`) and `op_mod` (BAD_PARAM), then the lifecycle state
//! (BAD_SYS_STATE) and boot pages (NO_RES), then the handler.

use std::sync::Arc;

use crate::control::caps::Caps;
use crate::control::faults::Faults;
use crate::control::pages::{PageStage, Pages};
use crate::control::result::put;
use crate::control::trace::Trace;
use crate::control::Control;
use crate::datapath::{Doorbells, Dp};
use crate::events::{Events, Sink};
use crate::front::init_seg::HealthState;
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::Objects;
use crate::wire;
use mlx5_prm::*;

mod commands;
mod dispatch;

/// The HCA's life (Linux core/main.c `mlx5_function_setup`, `mlx5_function_teardown`).
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
    /// The firmware page stage of this state.
    pub(crate) fn page_stage(self) -> PageStage {
        match self {
            Lifecycle::Enabled => PageStage::PreInit,
            Lifecycle::Initialized => PageStage::Initialized,
            _ => PageStage::Released,
        }
    }

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

/// All device state, in parts: guest memory, the control plane (`control::Control`), the
/// object tables (`objects::Objects`), the event sink (`events::Events`), the data path's
/// scratch (`datapath::Doorbells`) and the port; and the lifecycle, which this module keeps. Dispatch and
/// the doorbell entry points hand each function the parts it uses.
pub struct Hca {
    /// Guest memory (every DMA goes through it). Memory and the control plane are visible
    /// to the crate for the command queue engine (`control::cmd`); the other parts are
    /// reached through [`Hca::dp`], dispatch and the accessors.
    pub(crate) mem: Arc<dyn GuestMemory>,
    pub(crate) control: Control,
    objects: Objects,
    events: Events,
    doorbells: Doorbells,
    /// The port and the wire.
    port: wire::Port,
    state: Lifecycle,
    issi: u16,
    driver_version: Option<String>,
    config: HcaConfig,
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
            control: Control::new(health),
            objects: Objects::new(config.mac),
            events: Events::new(intx),
            doorbells: Doorbells::default(),
            port: Default::default(),
            state: Lifecycle::Disabled,
            issi: 0,
            driver_version: None,
            config,
        }
    }

    /// Device reset (FLR / proxy DEVICE_RESET): back to power-on. Guest memory, INTx, the
    /// wire, the trace and the non-fatal fault switches survive; the fatal health state does
    /// not.
    pub fn reset(&mut self) {
        self.control.faults.fatal_health = None;
        self.control.health.clear();
        self.power_on();
    }

    /// Everything back to power-on except what belongs to the machine around the device
    /// (memory, INTx line, wire, trace, fault switches).
    fn power_on(&mut self) {
        let mut fresh = Hca::with_config(
            self.mem.clone(),
            self.events.intx.clone(),
            self.control.health.clone(),
            self.config.clone(),
        );
        fresh.control.faults = std::mem::take(&mut self.control.faults);
        fresh.control.trace = std::mem::take(&mut self.control.trace);
        // The link to the peer survives a reset; packets in flight do not.
        fresh.port = std::mem::take(&mut self.port);
        fresh.port.reset_state();
        self.events.intx.lower();
        *self = fresh;
    }

    /// Guest memory, as the device reaches it.
    pub fn memory(&self) -> &Arc<dyn GuestMemory> {
        &self.mem
    }

    /// Attaches the device to other guest memory (the front end's, when it changes).
    pub(crate) fn set_memory(&mut self, mem: Arc<dyn GuestMemory>) {
        self.mem = mem;
    }

    /// The memory keys.
    pub fn mkeys(&self) -> &crate::objects::mr::MkeyTable {
        &self.objects.mkeys
    }

    /// The completion queues.
    pub fn cqs(&self) -> &crate::objects::cq::CqTable {
        &self.objects.cqs
    }

    /// The queue pairs.
    pub fn qps(&self) -> &crate::objects::qp::QpTable {
        &self.objects.qps
    }

    /// The queue pairs, to choose the next QPN (tests).
    pub fn qps_mut(&mut self) -> &mut crate::objects::qp::QpTable {
        &mut self.objects.qps
    }

    /// The port and the wire.
    pub fn port(&self) -> &wire::Port {
        &self.port
    }

    /// The port and the wire, to attach a link or set its faults, pcap tap or clock.
    pub fn port_mut(&mut self) -> &mut wire::Port {
        &mut self.port
    }

    /// The parts the data path uses, borrowed apart (one doorbell, one poll of the wire,
    /// one QP transition).
    pub fn dp(&mut self) -> Dp<'_> {
        Dp {
            mem: &self.mem,
            control: &mut self.control,
            objects: &mut self.objects,
            events: &mut self.events,
            doorbells: &mut self.doorbells,
            port: &mut self.port,
        }
    }

    /// The event sink, borrowed apart from the object tables and the port.
    pub(crate) fn sink(&mut self) -> Sink<'_> {
        Sink {
            events: &mut self.events,
            control: &mut self.control,
            mem: &self.mem,
        }
    }

    /// The INTx line the EQs raise (the front end's, when it changes).
    pub(crate) fn set_intx(&mut self, intx: Intx) {
        self.events.intx = intx;
    }

    // ---------------------------------------------------------------------------------------
    // The interface the data plane uses.
    // ---------------------------------------------------------------------------------------

    /// True if `pdn` is an allocated PD.
    pub fn pd_exists(&self, pdn: u32) -> bool {
        self.objects.pds.contains(pdn)
    }

    /// True if `tdn` is an allocated transport domain.
    pub fn td_exists(&self, tdn: u32) -> bool {
        self.objects.tds.contains(tdn)
    }

    /// True if `index` is an allocated UAR.
    pub fn uar_exists(&self, index: u32) -> bool {
        self.objects.uars.contains(index)
    }

    /// EQ `eqn`, as the device holds it.
    pub fn eq(&self, eqn: u8) -> Option<&crate::objects::eq::Eq> {
        self.events.eqs.get(eqn)
    }

    /// True if `eqn` is an existing EQ.
    pub fn eq_exists(&self, eqn: u32) -> bool {
        u8::try_from(eqn).is_ok_and(|n| self.events.eqs.get(n).is_some())
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
        self.control.caps.general(field)
    }

    /// A field of the CURRENT capabilities of `cap_type` (0 if the type is not answered).
    pub fn cap_of(&self, cap_type: u16, field: Field) -> u32 {
        self.control.cap_of(cap_type, field)
    }

    /// Firmware pages the device owns and the CANT_GIVE answers it got.
    pub fn pages(&self) -> &Pages {
        &self.control.pages
    }

    /// Every range of guest memory the device holds now, with what holds it: firmware pages,
    /// the pages of live MTT mkeys, CQ / QP / SQ / RQ buffers and doorbell records, EQ buffers. Memory
    /// inside one of them must not be freed (tests check the driver against it).
    pub fn dma_in_use(&self) -> Vec<(u64, u64, String)> {
        let mut v = Vec::new();
        for a in self.control.pages.owned_pages() {
            v.push((a, 4096, "firmware page".to_string()));
        }
        for k in self.objects.mkeys.iter() {
            for (a, l) in k.dma_ranges().unwrap_or_default() {
                v.push((a, l, format!("mkey {:#x}", k.key())));
            }
        }
        for c in self.objects.cqs.iter() {
            for (a, l) in c.dma_ranges() {
                v.push((a, l, format!("CQ {:#x}", c.cqn)));
            }
        }
        for q in self.objects.qps.iter() {
            for (a, l) in q.buf.ranges() {
                v.push((a, l, format!("QP {:#x} buffer", q.qpn)));
            }
            v.push((q.dbr_addr, 8, format!("QP {:#x} doorbell record", q.qpn)));
        }
        for q in self.objects.sqs.iter() {
            for (a, l) in q.wq.dma_ranges() {
                v.push((a, l, format!("SQ {:#x}", q.sqn)));
            }
        }
        for q in self.objects.rqs.iter() {
            for (a, l) in q.wq.dma_ranges() {
                v.push((a, l, format!("RQ {:#x}", q.rqn)));
            }
        }
        for (eqn, a, l) in self.events.eqs.dma_ranges() {
            v.push((a, l, format!("EQ {eqn}")));
        }
        v
    }

    /// BlueFlame checking so far: (64-byte blocks compared with the WQE in memory, copies
    /// found stale or torn).
    pub fn blueflame_stats(&self) -> (u64, u64) {
        (
            self.objects.uars.bf_blocks_checked(),
            self.objects.uars.bf_mismatches(),
        )
    }

    /// The RC transport's event counters of QP `qpn` (requester, responder), or `None` when it
    /// is not an RC QP with a transport: what the port's counter set sums, per QP (tests and
    /// tools look at how many packets each half sent, executed and acknowledged).
    pub fn rc_counters(
        &self,
        qpn: u32,
    ) -> Option<(
        crate::roce::requester::ReqCounters,
        crate::roce::responder::RespCounters,
    )> {
        Some(self.objects.qps.get(qpn)?.rc.as_ref()?.counters())
    }

    /// The capability pages, to model a device with other capabilities (tests).
    pub fn caps_mut(&mut self) -> &mut Caps {
        &mut self.control.caps
    }

    /// The GID at `index` of the RoCE address table, if one is set.
    pub fn roce_gid(&self, index: u32) -> Option<[u8; 16]> {
        self.objects.vport.gid(index)
    }

    /// The full RoCE address entry (`roce_addr_layout`, 32 bytes) at `index`, if set.
    pub fn roce_address(&self, index: u32) -> Option<[u8; 32]> {
        self.objects.vport.address(index)
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.objects.vport.mac()
    }

    /// NIC vport `roce_en` (MODIFY_NIC_VPORT_CONTEXT, Linux core/vport.c
    /// `mlx5_nic_vport_update_roce_state`).
    pub fn roce_enabled(&self) -> bool {
        self.objects.vport.roce_en()
    }

    /// Host endianness register `he` bit (0 = little-endian host).
    pub fn host_endianness(&self) -> u8 {
        self.control.host_endianness
    }

    /// The fault switches.
    pub fn faults(&self) -> &Faults {
        &self.control.faults
    }

    /// The fault switches, to clear one-shot data-plane faults.
    pub fn faults_mut(&mut self) -> &mut Faults {
        &mut self.control.faults
    }

    /// A field of the CURRENT atomic capabilities (`atomic_caps`).
    pub fn atomic_cap(&self, field: Field) -> u32 {
        self.cap_of(hca_cap::cap_type::ATOMIC, field)
    }

    /// Changes the fault switches and applies their side effects at once (fatal health
    /// reaches the health buffer, page requests are posted if they can be).
    pub fn update_faults(&mut self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.control.faults);
        self.apply_faults();
    }

    /// The driver version string from SET_DRIVER_VERSION.
    pub fn driver_version(&self) -> Option<&str> {
        self.driver_version.as_deref()
    }

    /// Writes one EQE into EQ `eqn` (owner bit per the EQ's producer counter) and raises INTx
    /// if the EQ is armed. False if the EQ does not exist or is full (nothing written).
    pub fn post_eqe(&mut self, eqn: u32, event_type: u8, sub_type: u8, data: &[u8]) -> bool {
        self.sink().post_eqe(eqn, event_type, sub_type, data)
    }

    /// Posts an event to every EQ whose event_bitmask asked for `event_type`. An EQ that is
    /// full is an async EQ overrun: fatal health (ASYNCHRONOUS_EQ_BUF_OVERRUN).
    pub fn post_async_event(&mut self, event_type: u8, sub_type: u8, data: &[u8]) {
        self.sink().post_async_event(event_type, sub_type, data)
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
        self.control.trace.note(args);
    }

    /// A trace note (the name the data plane uses).
    pub fn trace_note(&mut self, args: std::fmt::Arguments<'_>) {
        self.control.trace.note(args);
    }

    /// The trace settings (level, prefix, capture).
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.control.trace
    }

    pub(crate) fn trace_delivery(&mut self, slot: u32, status: u8, why: &str) {
        self.control.trace.delivery(slot, status, why);
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
        self.control
            .trace
            .command(slot, opcode, op_mod, status, syndrome, input, output);
    }

    // ---------------------------------------------------------------------------------------
    // Health, faults and page demand.
    // ---------------------------------------------------------------------------------------

    /// Firmware is dead (fatal health): no command completes.
    pub fn dead(&self) -> bool {
        self.control.dead()
    }

    /// Declares a fatal firmware error with health syndrome `synd`.
    pub fn set_fatal(&mut self, synd: u8) {
        self.update_faults(|f| f.fatal_health = Some(synd));
    }

    fn apply_faults(&mut self) {
        if let Some(synd) = self.control.faults.fatal_health {
            if self.control.health.fatal().is_none() {
                // Tell subscribed EQs first (the last thing dying firmware does), then the
                // health buffer reports the syndrome with rfr set and the counter freezes.
                self.control.faults.fatal_health = None;
                self.post_async_event(event::INTERNAL_ERROR, 0, &[]);
                self.control.faults.fatal_health = Some(synd);
                self.control.health.set_fatal(synd, 0);
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
        if !self.events.eqs.subscribed(event::PAGE_REQUEST) {
            return;
        }
        if let Some(n) = self.control.faults.page_request.take() {
            self.trace(format_args!("fault page-request {n}"));
            self.control.pages.surprise(n);
        }
        if let Some(n) = self.control.pages.unannounced(PageStage::Initialized) {
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
}
