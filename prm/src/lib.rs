//! mlx5 PRM declarations shared by the driver and the emulated HCA.
//!
//! # Layouts
//!
//! Every `mlx5_ifc_<name>_bits` structure the project uses is a module named `<name>`
//! ([`mkc`], [`create_mkey_in`], [`qpc`], ...) holding one constant per field, named after the
//! mlx5_ifc.h field in upper case (`mkc::ACCESS_MODE_1_0`, `create_qp_in::QPC`), plus `BITS`,
//! `BYTES`, `IS_UNION` and `FIELDS` (the mlx5_ifc.h names). A field is a [`Field`]
//! `(offset, width)` in bits counted from the most significant bit of the first big-endian
//! dword, as `MLX5_SET` / `MLX5_GET` count them; array fields (`pas[]`, `event_bitmask[4]`)
//! are [`Array`]s. Nested structs are one field of the nested width; address a member with
//! [`Field::within`] or by taking the nested bytes:
//!
//! ```
//! use mlx5_prm::*;
//! let mut inb = [0u8; create_qp_in::BYTES];
//! create_qp_in::OPCODE.set(&mut inb, opcode::CREATE_QP.into()).unwrap();
//! qpc::LOG_SQ_SIZE.within(create_qp_in::QPC).set(&mut inb, 6).unwrap();
//! // or: work on the nested context as its own buffer
//! let ctx = create_qp_in::QPC.bytes_mut(&mut inb).unwrap();
//! qpc::ST.set(ctx, qp::st::RC.into()).unwrap();
//! assert_eq!(&inb[0..2], &[0x05, 0x00]);
//! ```
//!
//! Only non-reserved fields are declared. Layouts come from rdma-core's
//! `providers/mlx5/mlx5_ifc.h` (linux-rdma/rdma-core @691953d8d502) and, for structs rdma-core
//! lacks, from Linux `include/linux/mlx5/mlx5_ifc.h` (OFED 24.07 tree
//! wjz304/mlnx-ofed-kernel @2c0186b9c664); each
//! module's doc names the header line. Where the two headers disagree the rdma-core position is
//! declared and the Linux one is in [`linux_layout`]. Where rdma-core's header leaves bits
//! reserved that Linux names (rdma-core's `sqc` has only `state`), the Linux fields are declared
//! after `@linux` in the same module and listed in its `LINUX_FIELDS` (see [`prm_struct`]):
//! `sqc::CQN` reads like `sqc::STATE`, but only `FIELDS` goes to the layout check.
//!
//! # Constants
//!
//! [`opcode`], [`cmd_status`], [`delivery_status`], [`cmdq`], [`cmd_layout`],
//! [`cmd_prot_block`], [`init_seg`], [`health`], [`timeouts`], [`hca_cap`], [`pages`],
//! [`teardown`], [`access_reg`], [`mkc_access_mode`], [`mkey`], [`qp`], [`event`], [`eq`],
//! [`cqe`], [`cq_db`], [`wqe`], [`qp_db`], [`uar`]; for Ethernet [`wq_type`], [`sqc_state`],
//! [`rqc_state`], [`tirc_disp_type`], [`inline_mode`], [`cap_inline_mode`] and their
//! neighbours; for steering [`flow_table_type`], [`flow_context_action`],
//! [`flow_destination_type`], [`match_criteria_enable`]; for the Ethernet data path
//! [`eth_seg`] and [`eth_cqe`]; each value cites the header it was read from.
//!
//! Citations name the primary source as repo/path and function or struct: "Linux" is the OFED
//! 24.07 kernel tree wjz304/mlnx-ofed-kernel @2c0186b9c664 (upstream paths; `core/` is
//! drivers/net/ethernet/mellanox/mlx5/core, `ib/` drivers/infiniband/hw/mlx5), "rdma-core" is
//! linux-rdma/rdma-core @691953d8d502 (`mlx5_vfio.c`, `qp.c`, ... under providers/mlx5). Each
//! pitfall (absolute vs. relative `log_page_size`, mkey numbering, pre-shifted op_mods, ...) is
//! documented where its field is declared, with the function that shows it.
//!
//! # Checking
//!
//! `cargo run -q -p mlx5-prm --bin prm-layout-dump | python3 ../shared/checks/prm_layout_check.py -`
//! compares every declared layout with the reference headers; `tests/layout_checker.rs` runs it
//! as part of `cargo test -p mlx5-prm` when the reference data is present.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

mod field;
#[macro_use]
mod macros;

mod cmdif_defs;
mod datapath_defs;
mod eth_datapath_defs;
mod eth_defs;
mod flow_defs;
mod hca_defs;
mod object_defs;
pub mod opcode;

mod layouts {
    pub mod caps;
    pub mod cmdif;
    pub mod cq;
    pub mod eq;
    pub mod eth_caps;
    pub mod flow;
    pub mod hca;
    pub mod mkey;
    pub mod qp;
    pub mod resources;
    pub mod vport;
    pub mod wq;
}

pub use cmdif_defs::*;
pub use datapath_defs::*;
pub use eth_datapath_defs::*;
pub use eth_defs::*;
pub use field::{get, get64, set, set64, Array, Error, Field, Result};
pub use flow_defs::*;
pub use hca_defs::*;
#[doc(hidden)]
pub use macros::__ascii_lower;
pub use object_defs::*;

pub use layouts::caps::*;
pub use layouts::cmdif::*;
pub use layouts::cq::*;
pub use layouts::eq::*;
pub use layouts::eth_caps::*;
pub use layouts::flow::*;
pub use layouts::hca::*;
pub use layouts::mkey::*;
pub use layouts::qp::*;
pub use layouts::resources::*;
pub use layouts::vport::*;
pub use layouts::wq::*;

/// Linux (OFED 24.07) positions of fields where its mlx5_ifc.h disagrees with rdma-core's.
/// Not part of [`ALL_STRUCTS`] (the reference checker validates the rdma-core layout).
pub mod linux_layout {
    /// `mlx5_ifc_cmd_hca_cap_bits` differences.
    pub mod cmd_hca_cap {
        use crate::Field;
        /// `fast_teardown` at 0xfb in Linux; rdma-core has it at 0x111, where Linux has a
        /// reserved bit (named `hard_coded_1` in a newer kernel). We trust the Linux position
        /// (an inference; `mlx5_ifc_cmd_hca_cap_bits` in Linux and rdma-core `mlx5_ifc.h`).
        pub const FAST_TEARDOWN: Field = Field::new(0xfb, 0x1);
        /// rdma-core's position of `fast_teardown`, for comparison only.
        pub const FAST_TEARDOWN_RDMA_CORE: Field = Field::new(0x111, 0x1);
        /// `relaxed_ordering_read_pci_enabled[0x1]` at 0xe9 (Linux mlx5_ifc.h; rdma-core leaves
        /// the bit reserved): the device may issue relaxed-ordering reads when the PCIe
        /// function has RO enabled (Linux ib/mr.c `set_mkc_access_pd_addr_fields`).
        pub const RELAXED_ORDERING_READ_PCI_ENABLED: Field = Field::new(0xe9, 0x1);
        /// `relaxed_ordering_read[0x1]` at 0x32a (Linux mlx5_ifc.h: `reserved_at_328[0x2]`,
        /// then this bit, then `log_max_pd`; rdma-core has `reserved_at_328[0x3]`): relaxed-
        /// ordering reads regardless of the PCIe setting.
        pub const RELAXED_ORDERING_READ: Field = Field::new(0x32a, 0x1);
    }
    /// `mlx5_ifc_mkc_bits` differences.
    pub mod mkc {
        use crate::Field;
        /// `log_page_size[0x6]` at 0x1da in Linux (rdma-core: 5 bits at 0x1db; both end at
        /// 0x1df, so values < 32 encode identically). Absolute log2 (Linux ib/mr.c `reg_create`).
        pub const LOG_PAGE_SIZE: Field = Field::new(0x1da, 0x6);
    }
    /// `mlx5_ifc_eqc_bits` differences.
    pub mod eqc {
        use crate::Field;
        /// `intr[0xc]` at 0xb4 in Linux (rdma-core: 8 bits at 0xb8; same low bits; Linux
        /// include/linux/mlx5/mlx5_ifc.h and rdma-core `mlx5_ifc.h` `mlx5_ifc_eqc_bits`).
        pub const INTR: Field = Field::new(0xb4, 0xc);
    }
    /// `mlx5_ifc_roce_cap_bits` fields rdma-core's header leaves reserved (Linux mlx5_ifc.h:1195).
    pub mod roce_cap {
        use crate::Field;
        /// `l3_type[0x4]`: bitmask, `MLX5_ROCE_L3_TYPE_IPV4_CAP` = 1 << 1, `_IPV6_CAP` = 1 << 2
        /// (Linux device.h:424-425).
        pub const L3_TYPE: Field = Field::new(0x8c, 0x4);
        /// `roce_version[0x8]`: bitmask, `MLX5_ROCE_VERSION_1_CAP` = 1 << 0, `_2_CAP` = 1 << 2
        /// (Linux device.h:414-415).
        pub const ROCE_VERSION: Field = Field::new(0x98, 0x8);
        /// `r_roce_dest_udp_port[0x10]`.
        pub const R_ROCE_DEST_UDP_PORT: Field = Field::new(0xb0, 0x10);
        /// `r_roce_max_src_udp_port[0x10]`.
        pub const R_ROCE_MAX_SRC_UDP_PORT: Field = Field::new(0xc0, 0x10);
        /// `r_roce_min_src_udp_port[0x10]`.
        pub const R_ROCE_MIN_SRC_UDP_PORT: Field = Field::new(0xd0, 0x10);
        /// `roce_address_table_size[0x10]`: GID table entries (what Linux mlx5_ib uses for RoCE).
        pub const ROCE_ADDRESS_TABLE_SIZE: Field = Field::new(0xf0, 0x10);
    }
    /// `mlx5_ifc_nic_vport_context_bits` fields rdma-core's header leaves reserved (Linux
    /// mlx5_ifc.h:4226), now declared after `@linux` in [`crate::nic_vport_context`]; these
    /// names stay for their users.
    pub mod nic_vport_context {
        use crate::{mac_address_layout, nic_vport_context as ctx, Field};
        /// `mtu[0x10]`.
        pub const MTU: Field = ctx::MTU;
        /// `permanent_address.mac_addr_47_32`.
        pub const PERMANENT_ADDRESS_MAC_47_32: Field =
            mac_address_layout::MAC_ADDR_47_32.within(ctx::PERMANENT_ADDRESS);
        /// `permanent_address.mac_addr_31_0`.
        pub const PERMANENT_ADDRESS_MAC_31_0: Field =
            mac_address_layout::MAC_ADDR_31_0.within(ctx::PERMANENT_ADDRESS);
    }
    /// `mlx5_ifc_query_nic_vport_context_in_bits` fields rdma-core's header leaves reserved
    /// (Linux mlx5_ifc.h:6161), now declared after `@linux` in
    /// [`crate::query_nic_vport_context_in`]; these names stay for their users.
    pub mod query_nic_vport_context_in {
        pub use crate::query_nic_vport_context_in::{ALLOWED_LIST_TYPE, OTHER_VPORT, VPORT_NUMBER};
    }
}

prm_registry! {
    // cmdif
    initial_seg, health_buffer, cmd_queue_entry, cmd_if_box, cmd_in, cmd_out, mbox_in, mbox_out,
    // hca
    enable_hca_in, enable_hca_out, disable_hca_in, disable_hca_out, init_hca_in, init_hca_out,
    teardown_hca_in, teardown_hca_out, query_issi_in, query_issi_out, set_issi_in, set_issi_out,
    query_pages_in, query_pages_out, manage_pages_in, manage_pages_out, nop_in, nop_out,
    access_register_in, access_register_out, register_host_endianness,
    query_special_contexts_in, query_special_contexts_out,
    query_adapter_in, query_adapter_out, query_adapter_param_block, set_driver_version_in,
    set_driver_version_out,
    // caps
    query_hca_cap_in, query_hca_cap_out, set_hca_cap_in, set_hca_cap_out, hca_cap_union,
    cmd_hca_cap, cmd_hca_cap_2, roce_cap, atomic_caps, odp_cap, odp_per_transport_service_cap,
    // resources
    alloc_pd_in, alloc_pd_out, dealloc_pd_in, dealloc_pd_out, alloc_uar_in, alloc_uar_out,
    dealloc_uar_in, dealloc_uar_out, alloc_transport_domain_in, alloc_transport_domain_out,
    dealloc_transport_domain_in, dealloc_transport_domain_out,
    // mkey
    mkc, create_mkey_in, create_mkey_out, destroy_mkey_in, destroy_mkey_out, query_mkey_in,
    query_mkey_out, mtt,
    // cq
    cqc, create_cq_in, create_cq_out, destroy_cq_in, destroy_cq_out, query_cq_in, query_cq_out,
    modify_cq_in, modify_cq_out, cqe_error_syndrome,
    // eq
    eqc, create_eq_in, create_eq_out, destroy_eq_in, destroy_eq_out, query_eq_in, query_eq_out,
    eqe, event_auto, comp_event, cq_error, qp_events, pages_req_event, cmd_inter_comp_event,
    port_state_change_event,
    // qp
    qpc, ads, create_qp_in, create_qp_out, destroy_qp_in, destroy_qp_out, query_qp_in,
    query_qp_out, rst2init_qp_in, rst2init_qp_out, init2init_qp_in, init2init_qp_out,
    init2rtr_qp_in, init2rtr_qp_out, rtr2rts_qp_in, rtr2rts_qp_out, rts2rts_qp_in,
    rts2rts_qp_out, sqerr2rts_qp_in, sqerr2rts_qp_out, sqd2rts_qp_in, sqd2rts_qp_out,
    qp_2err_in, qp_2err_out, qp_2rst_in, qp_2rst_out,
    // vport
    nic_vport_context, query_nic_vport_context_in, query_nic_vport_context_out,
    modify_nic_vport_context_in, modify_nic_vport_context_out, modify_nic_vport_field_select,
    query_vport_state_in, query_vport_state_out, roce_addr_layout, query_roce_address_in,
    query_roce_address_out, set_roce_address_in, set_roce_address_out, query_vport_counter_in,
    query_vport_counter_out, query_q_counter_in, query_q_counter_out, alloc_q_counter_in,
    alloc_q_counter_out, dealloc_q_counter_in, dealloc_q_counter_out,
    // wq
    wq, sqc, rqc, tisc, tirc, rx_hash_field_select, create_tis_in, create_tis_out,
    modify_tis_bitmask, modify_tis_in, modify_tis_out, query_tis_in, query_tis_out,
    destroy_tis_in, destroy_tis_out, create_sq_in, create_sq_out, modify_sq_in, modify_sq_out,
    query_sq_in, query_sq_out, destroy_sq_in, destroy_sq_out, create_rq_in, create_rq_out,
    modify_rq_in, modify_rq_out, query_rq_in, query_rq_out, destroy_rq_in, destroy_rq_out,
    create_tir_in, create_tir_out, modify_tir_bitmask, modify_tir_in, modify_tir_out,
    query_tir_in, query_tir_out, destroy_tir_in, destroy_tir_out,
    // flow
    flow_table_context, create_flow_table_in, create_flow_table_out, destroy_flow_table_in,
    destroy_flow_table_out, fte_match_param, fte_match_set_lyr_2_4, fte_match_set_misc,
    create_flow_group_in, create_flow_group_out, destroy_flow_group_in, destroy_flow_group_out,
    flow_context, dest_format_struct, set_fte_in, set_fte_out, delete_fte_in, delete_fte_out,
    set_flow_table_root_in, set_flow_table_root_out,
    // eth_caps (+ mac_address_layout from vport)
    per_protocol_networking_offload_caps, flow_table_nic_cap, flow_table_prop_layout,
    flow_table_fields_supported, mac_address_layout,
}

/// Looks a layout up by its mlx5_ifc.h name: `(total bits, fields)`.
pub fn find_struct(name: &str) -> Option<(u32, &'static [(&'static str, Field)])> {
    ALL_STRUCTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, b, f)| (*b, *f))
}

/// Looks a field up by struct and field name (mlx5_ifc.h spelling).
pub fn find_field(struct_name: &str, field_name: &str) -> Option<Field> {
    let (_, fields) = find_struct(struct_name)?;
    fields
        .iter()
        .find(|(n, _)| *n == field_name)
        .map(|(_, f)| *f)
}

/// Writes the layout dump the reference checker reads:
/// `{"structs": {"mkc": {"bits": 512, "fields": {"free": [1, 1], ...}}, ...}}`.
pub fn write_layout_json(out: &mut dyn core::fmt::Write) -> core::fmt::Result {
    out.write_str("{\"structs\": {")?;
    for (i, (name, bits, fields)) in ALL_STRUCTS.iter().enumerate() {
        if i > 0 {
            out.write_str(",")?;
        }
        write!(out, "\n  \"{name}\": {{\"bits\": {bits}, \"fields\": {{")?;
        for (j, (fname, f)) in fields.iter().enumerate() {
            if j > 0 {
                out.write_str(", ")?;
            }
            write!(out, "\"{fname}\": [{}, {}]", f.offset, f.width)?;
        }
        out.write_str("}}")?;
    }
    out.write_str("\n}}\n")
}

#[cfg(test)]
mod eth_tests;
#[cfg(test)]
mod tests;
