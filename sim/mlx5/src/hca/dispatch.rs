//! Command dispatch: the command table and the checks every command passes before its handler.

use crate::control::caps::Caps;
use crate::control::pages::PageStage;
use crate::control::result::CmdResult;
use crate::control::syndrome;
use crate::control::Control;
use crate::datapath::Dp;
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::eq::EqTable;
use crate::objects::Objects;
use crate::objects::{cq, eq, flow, mr, pd, qp, rq, sq, tir, tis, uar, vport};
use crate::wire::Port;
use mlx5_prm::*;
use std::sync::Arc;

use super::{Hca, Lifecycle, S_DISABLED, S_ENABLED, S_INIT, S_TORN, S_UP};
use crate::control::result::{fail, get};

impl Hca {
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
        if spec.boot_pages && !self.control.pages.boot_satisfied() {
            return fail(cmd_status::NO_RES_ERR, syndrome::NO_BOOT_PAGES);
        }
        match spec.handler {
            Handler::Plain(h) => h(self, input, output),
            Handler::Objects(h) => h(&self.control.caps, &mut self.objects, input, output),
            Handler::Queues(h) => h(
                &self.control.caps,
                &mut self.objects,
                &mut self.events.eqs,
                &mut self.events.intx,
                &self.mem,
                input,
                output,
            ),
            Handler::Port(h) => h(
                &self.control.caps,
                &mut self.objects,
                &mut self.port,
                input,
                output,
            ),
            Handler::Pages(h) => h(
                &mut self.control,
                self.state.page_stage(),
                &self.mem,
                input,
                output,
            ),
            Handler::Modify(h) => h(&mut self.dp(), opcode, input, output),
        }
    }
}

type PlainHandler = fn(&mut Hca, &[u8], &mut [u8]) -> CmdResult;
/// An object command: the capabilities it checks against and the object tables, nothing else.
type ObjectsHandler = fn(&Caps, &mut Objects, &[u8], &mut [u8]) -> CmdResult;
/// A queue command (EQ, CQ, UAR release): the capabilities, the object tables, the EQs, the
/// INTx line they raise and guest memory (the queues' buffers).
type QueuesHandler = fn(
    &Caps,
    &mut Objects,
    &mut EqTable,
    &mut Intx,
    &Arc<dyn GuestMemory>,
    &[u8],
    &mut [u8],
) -> CmdResult;
/// A port command (vport state, counters, the GID table): the capabilities, the object tables
/// and the port.
type PortHandler = fn(&Caps, &mut Objects, &mut Port, &[u8], &mut [u8]) -> CmdResult;
/// A firmware page command: the control plane, the lifecycle's page stage and guest memory.
type PagesHandler =
    fn(&mut Control, PageStage, &Arc<dyn GuestMemory>, &[u8], &mut [u8]) -> CmdResult;
type ModifyHandler = fn(&mut Dp<'_>, u16, &[u8], &mut [u8]) -> CmdResult;

#[derive(Clone, Copy)]
enum Handler {
    Plain(PlainHandler),
    Objects(ObjectsHandler),
    Queues(QueuesHandler),
    Port(PortHandler),
    Pages(PagesHandler),
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

const fn fixed(inb: usize, outb: usize, states: u8, handler: Handler) -> Spec {
    Spec {
        in_min: inb,
        in_max: Some(inb),
        out_min: outb,
        op_mod_any: false,
        states,
        boot_pages: false,
        handler,
    }
}

const fn var(inb: usize, outb: usize, states: u8, handler: Handler) -> Spec {
    Spec {
        in_max: None,
        ..fixed(inb, outb, states, handler)
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

/// Sizes of the Linux mlx5_ifc.h structs that differ from rdma-core's (see [`spec`]).
const LINUX_INIT_HCA_IN: usize = 32;
const LINUX_MODIFY_QP_IN: usize = 272;
const LINUX_QUERY_QP_OUT: usize = 464;

/// The command table. Lengths are the `_in`/`_out` layouts' sizes (rdma-core mlx5_ifc.h, or
/// Linux mlx5_ifc.h where rdma-core lacks the struct); where the Linux struct differs in size
/// (init_hca_in 32 bytes, init2init/rts2rts_qp_in 272 vs 464, query_qp_out 464 vs 272) both
/// sizes are accepted.
/// The table is one match per command family (the functions below); no opcode is in two.
fn spec(opcode: u16) -> Option<Spec> {
    boot_specs(opcode)
        .or_else(|| hca_specs(opcode))
        .or_else(|| domain_specs(opcode))
        .or_else(|| vport_specs(opcode))
        .or_else(|| flow_specs(opcode))
        .or_else(|| eq_mkey_cq_specs(opcode))
        .or_else(|| qp_specs(opcode))
        .or_else(|| tis_sq_specs(opcode))
        .or_else(|| rq_tir_specs(opcode))
}

/// [`spec`]: Bring-up: enabling the function, the ISSI, firmware pages, capabilities and registers.
fn boot_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::ENABLE_HCA => fixed(
            enable_hca_in::BYTES,
            enable_hca_out::BYTES,
            S_DISABLED,
            Handler::Plain(Hca::enable_hca),
        ),
        opcode::DISABLE_HCA => fixed(
            disable_hca_in::BYTES,
            disable_hca_out::BYTES,
            S_ENABLED | S_TORN,
            Handler::Plain(Hca::disable_hca),
        ),
        opcode::QUERY_ISSI => fixed(
            query_issi_in::BYTES,
            query_issi_out::BYTES,
            S_UP,
            Handler::Plain(Hca::query_issi),
        ),
        opcode::SET_ISSI => fixed(
            set_issi_in::BYTES,
            set_issi_out::BYTES,
            S_ENABLED,
            Handler::Plain(Hca::set_issi),
        ),
        opcode::QUERY_PAGES => fixed(
            query_pages_in::BYTES,
            query_pages_out::BYTES,
            S_UP,
            Handler::Pages(crate::control::pages::cmd_query_pages),
        )
        .op_mod(),
        opcode::MANAGE_PAGES => var(
            manage_pages_in::BYTES,
            manage_pages_out::BYTES,
            S_UP,
            Handler::Pages(crate::control::pages::cmd_manage_pages),
        )
        .op_mod(),
        opcode::QUERY_HCA_CAP => fixed(
            query_hca_cap_in::BYTES,
            query_hca_cap_out::BYTES,
            S_ENABLED | S_INIT,
            Handler::Plain(Hca::query_hca_cap),
        )
        .op_mod()
        .boot(),
        opcode::SET_HCA_CAP => fixed(
            set_hca_cap_in::BYTES,
            set_hca_cap_out::BYTES,
            S_ENABLED,
            Handler::Plain(Hca::set_hca_cap),
        )
        .op_mod()
        .boot(),
        opcode::ACCESS_REGISTER => var(
            access_register_in::BYTES,
            access_register_out::BYTES,
            S_ENABLED | S_INIT,
            Handler::Plain(Hca::access_register),
        )
        .op_mod()
        .boot(),
        _ => return None,
    })
}

/// [`spec`]: The HCA as a whole: init, teardown, the adapter query, the driver version, NOP.
fn hca_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::INIT_HCA => fixed(
            init_hca_in::BYTES,
            init_hca_out::BYTES,
            S_ENABLED,
            Handler::Plain(Hca::init_hca),
        )
        .max_in(LINUX_INIT_HCA_IN),
        opcode::TEARDOWN_HCA => fixed(
            teardown_hca_in::BYTES,
            teardown_hca_out::BYTES,
            S_INIT,
            Handler::Plain(Hca::teardown_hca),
        ),
        opcode::QUERY_ADAPTER => fixed(
            query_adapter_in::BYTES,
            query_adapter_out::BYTES,
            S_ENABLED | S_INIT,
            Handler::Plain(Hca::query_adapter),
        )
        .boot(),
        opcode::SET_DRIVER_VERSION => fixed(
            set_driver_version_in::BYTES,
            set_driver_version_out::BYTES,
            S_ENABLED | S_INIT,
            Handler::Plain(Hca::set_driver_version),
        )
        .boot(),
        opcode::NOP => fixed(
            nop_in::BYTES,
            nop_out::BYTES,
            S_UP,
            Handler::Plain(Hca::nop),
        ),
        _ => return None,
    })
}

/// [`spec`]: UARs, protection domains and transport domains.
fn domain_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::ALLOC_UAR => fixed(
            alloc_uar_in::BYTES,
            alloc_uar_out::BYTES,
            S_INIT,
            Handler::Objects(uar::cmd_alloc_uar),
        ),
        opcode::DEALLOC_UAR => fixed(
            dealloc_uar_in::BYTES,
            dealloc_uar_out::BYTES,
            S_INIT,
            Handler::Queues(uar::cmd_dealloc_uar),
        ),
        opcode::ALLOC_PD => fixed(
            alloc_pd_in::BYTES,
            alloc_pd_out::BYTES,
            S_INIT,
            Handler::Objects(pd::cmd_alloc_pd),
        ),
        opcode::DEALLOC_PD => fixed(
            dealloc_pd_in::BYTES,
            dealloc_pd_out::BYTES,
            S_INIT,
            Handler::Objects(pd::cmd_dealloc_pd),
        ),
        opcode::ALLOC_TRANSPORT_DOMAIN => fixed(
            alloc_transport_domain_in::BYTES,
            alloc_transport_domain_out::BYTES,
            S_INIT,
            Handler::Objects(pd::cmd_alloc_td),
        ),
        opcode::DEALLOC_TRANSPORT_DOMAIN => fixed(
            dealloc_transport_domain_in::BYTES,
            dealloc_transport_domain_out::BYTES,
            S_INIT,
            Handler::Objects(pd::cmd_dealloc_td),
        ),
        _ => return None,
    })
}

/// [`spec`]: The port: vport state and context, counters, the RoCE address (GID) table.
fn vport_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::QUERY_VPORT_STATE => fixed(
            query_vport_state_in::BYTES,
            query_vport_state_out::BYTES,
            S_INIT,
            Handler::Objects(vport::cmd_query_vport_state),
        )
        .op_mod(),
        opcode::QUERY_VPORT_COUNTER => fixed(
            query_vport_counter_in::BYTES,
            query_vport_counter_out::BYTES,
            S_INIT,
            Handler::Port(vport::cmd_query_vport_counter),
        ),
        opcode::QUERY_Q_COUNTER => fixed(
            query_q_counter_in::BYTES,
            query_q_counter_out::BYTES,
            S_INIT,
            Handler::Port(crate::objects::counter::cmd_query_q_counter),
        ),
        opcode::ALLOC_Q_COUNTER => fixed(
            alloc_q_counter_in::BYTES,
            alloc_q_counter_out::BYTES,
            S_INIT,
            Handler::Objects(crate::objects::counter::cmd_alloc_q_counter),
        ),
        opcode::DEALLOC_Q_COUNTER => fixed(
            dealloc_q_counter_in::BYTES,
            dealloc_q_counter_out::BYTES,
            S_INIT,
            Handler::Objects(crate::objects::counter::cmd_dealloc_q_counter),
        ),
        opcode::QUERY_NIC_VPORT_CONTEXT => fixed(
            query_nic_vport_context_in::BYTES,
            query_nic_vport_context_out::BYTES,
            S_INIT,
            Handler::Objects(vport::cmd_query_nic_vport_context),
        ),
        opcode::MODIFY_NIC_VPORT_CONTEXT => var(
            modify_nic_vport_context_in::BYTES,
            modify_nic_vport_context_out::BYTES,
            S_INIT,
            Handler::Objects(vport::cmd_modify_nic_vport_context),
        ),
        opcode::QUERY_ROCE_ADDRESS => fixed(
            query_roce_address_in::BYTES,
            query_roce_address_out::BYTES,
            S_INIT,
            Handler::Objects(vport::cmd_query_roce_address),
        ),
        opcode::SET_ROCE_ADDRESS => fixed(
            set_roce_address_in::BYTES,
            set_roce_address_out::BYTES,
            S_INIT,
            Handler::Port(vport::cmd_set_roce_address),
        ),
        _ => return None,
    })
}

/// [`spec`]: NIC receive flow tables, groups and entries.
fn flow_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::CREATE_FLOW_TABLE => fixed(
            create_flow_table_in::BYTES,
            create_flow_table_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_create_flow_table),
        ),
        opcode::DESTROY_FLOW_TABLE => fixed(
            destroy_flow_table_in::BYTES,
            destroy_flow_table_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_destroy_flow_table),
        ),
        opcode::CREATE_FLOW_GROUP => fixed(
            create_flow_group_in::BYTES,
            create_flow_group_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_create_flow_group),
        ),
        opcode::DESTROY_FLOW_GROUP => fixed(
            destroy_flow_group_in::BYTES,
            destroy_flow_group_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_destroy_flow_group),
        ),
        // The destination list follows the fixed part (Linux fs_cmd.c `mlx5_cmd_set_fte`).
        opcode::SET_FLOW_TABLE_ENTRY => var(
            set_fte_in::BYTES,
            set_fte_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_set_fte),
        )
        .op_mod(),
        opcode::DELETE_FLOW_TABLE_ENTRY => fixed(
            delete_fte_in::BYTES,
            delete_fte_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_delete_fte),
        ),
        opcode::SET_FLOW_TABLE_ROOT => fixed(
            set_flow_table_root_in::BYTES,
            set_flow_table_root_out::BYTES,
            S_INIT,
            Handler::Objects(flow::cmd_set_flow_table_root),
        )
        .op_mod(),
        _ => return None,
    })
}

/// [`spec`]: Event queues, memory keys and completion queues.
fn eq_mkey_cq_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::CREATE_EQ => var(
            create_eq_in::BYTES,
            create_eq_out::BYTES,
            S_INIT,
            Handler::Queues(eq::cmd_create_eq),
        ),
        opcode::DESTROY_EQ => fixed(
            destroy_eq_in::BYTES,
            destroy_eq_out::BYTES,
            S_INIT,
            Handler::Queues(eq::cmd_destroy_eq),
        ),
        opcode::QUERY_EQ => fixed(
            query_eq_in::BYTES,
            query_eq_out::BYTES,
            S_INIT,
            Handler::Queues(eq::cmd_query_eq),
        ),
        // Data plane (engineer B).
        opcode::CREATE_MKEY => var(
            create_mkey_in::BYTES,
            create_mkey_out::BYTES,
            S_INIT,
            Handler::Objects(mr::create_mkey),
        ),
        opcode::DESTROY_MKEY => fixed(
            destroy_mkey_in::BYTES,
            destroy_mkey_out::BYTES,
            S_INIT,
            Handler::Objects(mr::destroy_mkey),
        ),
        opcode::QUERY_MKEY => fixed(
            query_mkey_in::BYTES,
            query_mkey_out::BYTES,
            S_INIT,
            Handler::Objects(mr::query_mkey),
        ),
        opcode::CREATE_CQ => var(
            create_cq_in::BYTES,
            create_cq_out::BYTES,
            S_INIT,
            Handler::Queues(cq::create_cq),
        ),
        opcode::DESTROY_CQ => fixed(
            destroy_cq_in::BYTES,
            destroy_cq_out::BYTES,
            S_INIT,
            Handler::Queues(cq::destroy_cq),
        ),
        opcode::QUERY_CQ => fixed(
            query_cq_in::BYTES,
            query_cq_out::BYTES,
            S_INIT,
            Handler::Queues(cq::query_cq),
        ),
        opcode::MODIFY_CQ => var(
            modify_cq_in::BYTES,
            modify_cq_out::BYTES,
            S_INIT,
            Handler::Queues(cq::modify_cq),
        )
        .op_mod(),
        _ => return None,
    })
}

/// [`spec`]: Queue pairs: create, destroy, query and every state transition.
fn qp_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::CREATE_QP => var(
            create_qp_in::BYTES,
            create_qp_out::BYTES,
            S_INIT,
            Handler::Objects(qp::create_qp),
        ),
        opcode::DESTROY_QP => fixed(
            destroy_qp_in::BYTES,
            destroy_qp_out::BYTES,
            S_INIT,
            Handler::Objects(qp::destroy_qp),
        ),
        opcode::QUERY_QP => fixed(
            query_qp_in::BYTES,
            query_qp_out::BYTES.min(LINUX_QUERY_QP_OUT),
            S_INIT,
            Handler::Objects(qp::query_qp),
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
        // Ethernet queues (objects/tis.rs, sq.rs, rq.rs, tir.rs).
        opcode::QP_2ERR => modify(qp_2err_in::BYTES, qp_2err_in::BYTES, qp_2err_out::BYTES),
        opcode::QP_2RST => modify(qp_2rst_in::BYTES, qp_2rst_in::BYTES, qp_2rst_out::BYTES),
        _ => return None,
    })
}

/// [`spec`]: The Ethernet send side: transport interface sends and send queues.
fn tis_sq_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::CREATE_TIS => fixed(
            create_tis_in::BYTES,
            create_tis_out::BYTES,
            S_INIT,
            Handler::Objects(tis::cmd_create_tis),
        ),
        opcode::MODIFY_TIS => fixed(
            modify_tis_in::BYTES,
            modify_tis_out::BYTES,
            S_INIT,
            Handler::Objects(tis::cmd_modify_tis),
        ),
        opcode::QUERY_TIS => fixed(
            query_tis_in::BYTES,
            query_tis_out::BYTES,
            S_INIT,
            Handler::Objects(tis::cmd_query_tis),
        ),
        opcode::DESTROY_TIS => fixed(
            destroy_tis_in::BYTES,
            destroy_tis_out::BYTES,
            S_INIT,
            Handler::Objects(tis::cmd_destroy_tis),
        ),
        opcode::CREATE_SQ => var(
            create_sq_in::BYTES,
            create_sq_out::BYTES,
            S_INIT,
            Handler::Objects(sq::cmd_create_sq),
        ),
        opcode::MODIFY_SQ => fixed(
            modify_sq_in::BYTES,
            modify_sq_out::BYTES,
            S_INIT,
            Handler::Objects(sq::cmd_modify_sq),
        ),
        opcode::QUERY_SQ => fixed(
            query_sq_in::BYTES,
            query_sq_out::BYTES,
            S_INIT,
            Handler::Objects(sq::cmd_query_sq),
        ),
        opcode::DESTROY_SQ => fixed(
            destroy_sq_in::BYTES,
            destroy_sq_out::BYTES,
            S_INIT,
            Handler::Objects(sq::cmd_destroy_sq),
        ),
        _ => return None,
    })
}

/// [`spec`]: The Ethernet receive side: receive queues and transport interface receives.
fn rq_tir_specs(opcode: u16) -> Option<Spec> {
    Some(match opcode {
        opcode::CREATE_RQ => var(
            create_rq_in::BYTES,
            create_rq_out::BYTES,
            S_INIT,
            Handler::Objects(rq::cmd_create_rq),
        ),
        opcode::MODIFY_RQ => fixed(
            modify_rq_in::BYTES,
            modify_rq_out::BYTES,
            S_INIT,
            Handler::Objects(rq::cmd_modify_rq),
        ),
        opcode::QUERY_RQ => fixed(
            query_rq_in::BYTES,
            query_rq_out::BYTES,
            S_INIT,
            Handler::Objects(rq::cmd_query_rq),
        ),
        opcode::DESTROY_RQ => fixed(
            destroy_rq_in::BYTES,
            destroy_rq_out::BYTES,
            S_INIT,
            Handler::Objects(rq::cmd_destroy_rq),
        ),
        opcode::CREATE_TIR => fixed(
            create_tir_in::BYTES,
            create_tir_out::BYTES,
            S_INIT,
            Handler::Objects(tir::cmd_create_tir),
        ),
        opcode::MODIFY_TIR => fixed(
            modify_tir_in::BYTES,
            modify_tir_out::BYTES,
            S_INIT,
            Handler::Objects(tir::cmd_modify_tir),
        ),
        opcode::QUERY_TIR => fixed(
            query_tir_in::BYTES,
            query_tir_out::BYTES,
            S_INIT,
            Handler::Objects(tir::cmd_query_tir),
        ),
        opcode::DESTROY_TIR => fixed(
            destroy_tir_in::BYTES,
            destroy_tir_out::BYTES,
            S_INIT,
            Handler::Objects(tir::cmd_destroy_tir),
        ),
        _ => return None,
    })
}
