//! Constants of NIC flow steering: table types, miss actions, entry actions, destination
//! types, match criteria and the SET_FLOW_TABLE_ENTRY / SET_FLOW_TABLE_ROOT op_mods.
//!
//! Each item cites its source header or function; Linux means the OFED 24.07 kernel tree
//! wjz304/mlnx-ofed-kernel @2c0186b9c664, rdma-core linux-rdma/rdma-core @691953d8d502. Layouts:
//! [`crate::flow_table_context`], [`crate::flow_context`], [`crate::dest_format_struct`],
//! [`crate::fte_match_param`].

/// `table_type` of the flow table commands (Linux mlx5_ifc.h:9499, `MLX5_FLOW_TABLE_TYPE_*`;
/// Linux core/fs_core.h `FS_FT_NIC_RX` = 0 is the same number).
pub mod flow_table_type {
    /// `MLX5_FLOW_TABLE_TYPE_NIC_RX`: receive steering of the function's own traffic (mlx5e's
    /// tables, Linux core/en_fs.c).
    pub const NIC_RX: u8 = 0x0;
    /// `MLX5_FLOW_TABLE_TYPE_NIC_TX`.
    pub const NIC_TX: u8 = 0x1;
    /// `MLX5_FLOW_TABLE_TYPE_ESW_EGRESS_ACL`.
    pub const ESW_EGRESS_ACL: u8 = 0x2;
    /// `MLX5_FLOW_TABLE_TYPE_ESW_INGRESS_ACL`.
    pub const ESW_INGRESS_ACL: u8 = 0x3;
    /// `MLX5_FLOW_TABLE_TYPE_FDB`: the e-switch's forwarding database.
    pub const FDB: u8 = 0x4;
    /// `MLX5_FLOW_TABLE_TYPE_SNIFFER_RX`.
    pub const SNIFFER_RX: u8 = 0x5;
    /// `MLX5_FLOW_TABLE_TYPE_SNIFFER_TX`.
    pub const SNIFFER_TX: u8 = 0x6;
}

/// `flow_table_context.table_miss_action` (`enum mlx5_flow_table_miss_action`, Linux
/// mlx5_ifc.h:2167).
pub mod flow_table_miss_action {
    /// `MLX5_FLOW_TABLE_MISS_ACTION_DEF`: the default of the table type.
    pub const DEF: u8 = 0;
    /// `MLX5_FLOW_TABLE_MISS_ACTION_FWD`: go on to `flow_table_context.table_miss_id`.
    pub const FWD: u8 = 1;
    /// `MLX5_FLOW_TABLE_MISS_ACTION_SWITCH_DOMAIN`.
    pub const SWITCH_DOMAIN: u8 = 2;
}

/// `flow_context.action` bits (Linux mlx5_ifc.h:3708, rdma-core mlx5_ifc.h:4467,
/// `MLX5_FLOW_CONTEXT_ACTION_*`).
pub mod flow_context_action {
    /// `MLX5_FLOW_CONTEXT_ACTION_ALLOW`.
    pub const ALLOW: u16 = 0x1;
    /// `MLX5_FLOW_CONTEXT_ACTION_DROP`: the packet is dropped.
    pub const DROP: u16 = 0x2;
    /// `MLX5_FLOW_CONTEXT_ACTION_FWD_DEST`: to every entry of `flow_context.destination`.
    pub const FWD_DEST: u16 = 0x4;
    /// `MLX5_FLOW_CONTEXT_ACTION_COUNT`: count in the flow counters listed after the
    /// destinations.
    pub const COUNT: u16 = 0x8;
    /// `MLX5_FLOW_CONTEXT_ACTION_PACKET_REFORMAT`.
    pub const PACKET_REFORMAT: u16 = 0x10;
    /// `MLX5_FLOW_CONTEXT_ACTION_DECAP`.
    pub const DECAP: u16 = 0x20;
    /// `MLX5_FLOW_CONTEXT_ACTION_MOD_HDR`.
    pub const MOD_HDR: u16 = 0x40;
    /// `MLX5_FLOW_CONTEXT_ACTION_VLAN_POP`.
    pub const VLAN_POP: u16 = 0x80;
    /// `MLX5_FLOW_CONTEXT_ACTION_VLAN_PUSH`.
    pub const VLAN_PUSH: u16 = 0x100;
}

/// `dest_format_struct.destination_type`: the PRM encoding (`MLX5_IFC_FLOW_DESTINATION_TYPE_*`,
/// Linux mlx5_ifc.h:2158). Linux's `enum mlx5_flow_destination_type` (include/linux/mlx5/fs.h)
/// is a software enum with other numbers; core/fs_cmd.c `mlx5_cmd_set_fte` maps it to these.
pub mod flow_destination_type {
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_VPORT`.
    pub const VPORT: u8 = 0x0;
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_FLOW_TABLE`: `destination_id` is a table id (of a
    /// deeper level).
    pub const FLOW_TABLE: u8 = 0x1;
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_TIR`: `destination_id` is a TIR number.
    pub const TIR: u8 = 0x2;
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_FLOW_SAMPLER`.
    pub const FLOW_SAMPLER: u8 = 0x6;
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_UPLINK`.
    pub const UPLINK: u8 = 0x8;
    /// `MLX5_IFC_FLOW_DESTINATION_TYPE_TABLE_TYPE`.
    pub const TABLE_TYPE: u8 = 0xa;
}

/// `create_flow_group_in.match_criteria_enable` bits: which parts of [`crate::fte_match_param`]
/// a group matches on (Linux include/linux/mlx5/device.h:1169, `MLX5_MATCH_*`).
pub mod match_criteria_enable {
    /// `MLX5_MATCH_OUTER_HEADERS`: `outer_headers` (mlx5e's L2 and TTC tables use only this;
    /// Linux core/en_fs.c `mlx5e_create_l2_table_groups`).
    pub const OUTER_HEADERS: u8 = 1 << 0;
    /// `MLX5_MATCH_MISC_PARAMETERS`: `misc_parameters`.
    pub const MISC_PARAMETERS: u8 = 1 << 1;
    /// `MLX5_MATCH_INNER_HEADERS`: `inner_headers`.
    pub const INNER_HEADERS: u8 = 1 << 2;
    /// `MLX5_MATCH_MISC_PARAMETERS_2`.
    pub const MISC_PARAMETERS_2: u8 = 1 << 3;
    /// `MLX5_MATCH_MISC_PARAMETERS_3`.
    pub const MISC_PARAMETERS_3: u8 = 1 << 4;
    /// `MLX5_MATCH_MISC_PARAMETERS_4`.
    pub const MISC_PARAMETERS_4: u8 = 1 << 5;
    /// `MLX5_MATCH_MISC_PARAMETERS_5`.
    pub const MISC_PARAMETERS_5: u8 = 1 << 6;
}

/// SET_FLOW_TABLE_ENTRY op_mod and `modify_enable_mask` (Linux core/fs_cmd.c
/// `mlx5_cmd_create_fte`, `mlx5_cmd_update_fte`).
pub mod set_fte {
    /// op_mod 0: create the entry at `flow_index`.
    pub const OP_MOD_CREATE: u16 = 0;
    /// op_mod 1: modify the existing entry's fields named in `modify_enable_mask`.
    pub const OP_MOD_MODIFY: u16 = 1;
    /// Bit numbers of `modify_enable_mask` (`MLX5_SET_FTE_MODIFY_ENABLE_MASK_*`, Linux
    /// mlx5_ifc.h:5264; Linux core/fs_core.c `del_sw_hw_rule` sets `BIT(n)`).
    pub mod modify_enable_mask {
        /// `MLX5_SET_FTE_MODIFY_ENABLE_MASK_ACTION`.
        pub const ACTION: u8 = 0x0;
        /// `MLX5_SET_FTE_MODIFY_ENABLE_MASK_FLOW_TAG`.
        pub const FLOW_TAG: u8 = 0x1;
        /// `MLX5_SET_FTE_MODIFY_ENABLE_MASK_DESTINATION_LIST`.
        pub const DESTINATION_LIST: u8 = 0x2;
        /// `MLX5_SET_FTE_MODIFY_ENABLE_MASK_FLOW_COUNTERS`.
        pub const FLOW_COUNTERS: u8 = 0x3;
    }
}

/// SET_FLOW_TABLE_ROOT op_mod (Linux core/fs_cmd.c `mlx5_cmd_update_root_ft`).
pub mod set_flow_table_root {
    /// op_mod 0: `table_id` becomes the root of `table_type`.
    pub const OP_MOD_CONNECT: u16 = 0;
    /// op_mod 1: the table type has no root any more (`disconnect`).
    pub const OP_MOD_DISCONNECT: u16 = 1;
}
