//! NIC flow steering: flow tables, groups and entries (match parameters, destinations),
//! CREATE/DESTROY_FLOW_TABLE, CREATE/DESTROY_FLOW_GROUP, SET/DELETE_FLOW_TABLE_ENTRY and
//! SET_FLOW_TABLE_ROOT, as Linux core/fs_cmd.c issues them.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted. Fields after
//! `@linux` are Linux mlx5_ifc.h's where rdma-core's header leaves the bits reserved.

crate::prm_struct! {
    /// `mlx5_ifc_flow_table_context_bits`: rdma-core mlx5_ifc.h:239.
    struct flow_table_context[0x140] {
        REFORMAT_EN: 0x0, 0x1;
        DECAP_EN: 0x1, 0x1;
        SW_OWNER: 0x2, 0x1;
        TERMINATION_TABLE: 0x3, 0x1;
        /// [`crate::flow_table_miss_action`]: what a packet matching no entry does (`DEF`: the
        /// namespace's default, for NIC_RX the next priority / drop).
        TABLE_MISS_ACTION: 0x4, 0x4;
        /// Depth of the table in its namespace; a rule may forward only to a deeper table (Linux
        /// core/fs_cmd.c `mlx5_cmd_create_flow_table`).
        LEVEL: 0x8, 0x8;
        /// log2(number of flow entries) (Linux core/fs_cmd.c `mlx5_cmd_create_flow_table`).
        LOG_SIZE: 0x18, 0x8;
        /// The table a miss goes to when `table_miss_action` = `FWD`.
        TABLE_MISS_ID: 0x28, 0x18;
        LAG_MASTER_NEXT_TABLE_ID: 0x48, 0x18;
        SW_OWNER_ICM_ROOT_1: 0xc0, 0x40;
        SW_OWNER_ICM_ROOT_0: 0x100, 0x40;
    }

    /// `mlx5_ifc_create_flow_table_in_bits`: rdma-core mlx5_ifc.h:262.
    /// Input of [`crate::opcode::CREATE_FLOW_TABLE`] (0x930).
    struct create_flow_table_in[0x200] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        /// [`crate::flow_table_type`]; `NIC_RX` for the receive steering mlx5e builds.
        TABLE_TYPE: 0x80, 0x8;
        FLOW_TABLE_CONTEXT: 0xc0, crate::flow_table_context::BITS;
    }

    /// `mlx5_ifc_create_flow_table_out_bits`: rdma-core mlx5_ifc.h:283.
    /// Output of [`crate::opcode::CREATE_FLOW_TABLE`] (0x930).
    struct create_flow_table_out[0x80] {
        STATUS: 0x0, 0x8;
        ICM_ADDRESS_63_40: 0x8, 0x18;
        SYNDROME: 0x20, 0x20;
        ICM_ADDRESS_39_32: 0x40, 0x8;
        /// The new table's id (24 bits).
        TABLE_ID: 0x48, 0x18;
        ICM_ADDRESS_31_0: 0x60, 0x20;
    }

    /// `mlx5_ifc_destroy_flow_table_in_bits`: rdma-core mlx5_ifc.h:295; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8798.
    /// Input of [`crate::opcode::DESTROY_FLOW_TABLE`] (0x931).
    struct destroy_flow_table_in[0x200] {
        OPCODE: 0x0, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_ID: 0xa8, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_flow_table_out_bits`: Linux mlx5_ifc.h:8789 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_FLOW_TABLE`] (0x931).
    struct destroy_flow_table_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_fte_match_param_bits`: Linux mlx5_ifc.h:2203 (not in rdma-core).
    struct fte_match_param[0x1000] {
        /// Enabled by [`crate::match_criteria_enable::OUTER_HEADERS`].
        OUTER_HEADERS: 0x0, crate::fte_match_set_lyr_2_4::BITS;
        /// Enabled by [`crate::match_criteria_enable::MISC_PARAMETERS`].
        MISC_PARAMETERS: 0x200, crate::fte_match_set_misc::BITS;
        INNER_HEADERS: 0x400, crate::fte_match_set_lyr_2_4::BITS;
        /// `fte_match_set_misc2` (Linux mlx5_ifc.h:660), not declared field by field.
        MISC_PARAMETERS_2: 0x600, 0x200;
        /// `fte_match_set_misc3` (Linux mlx5_ifc.h:696), not declared field by field.
        MISC_PARAMETERS_3: 0x800, 0x200;
        /// `fte_match_set_misc4`, not declared field by field.
        MISC_PARAMETERS_4: 0xa00, 0x200;
        /// `fte_match_set_misc5`, not declared field by field.
        MISC_PARAMETERS_5: 0xc00, 0x200;
    }

    /// `mlx5_ifc_fte_match_set_lyr_2_4_bits`: Linux mlx5_ifc.h:547 (not in rdma-core).
    struct fte_match_set_lyr_2_4[0x200] {
        SMAC_47_16: 0x0, 0x20;
        SMAC_15_0: 0x20, 0x10;
        /// Outer ethertype (after any VLAN tags).
        ETHERTYPE: 0x30, 0x10;
        /// Destination MAC bytes 0..4; with `dmac_15_0` the 6 bytes in wire order (Linux
        /// core/en_fs.c `mlx5e_add_l2_flow_rule` copies the address to `dmac_47_16`).
        DMAC_47_16: 0x40, 0x20;
        DMAC_15_0: 0x60, 0x10;
        FIRST_PRIO: 0x70, 0x3;
        FIRST_CFI: 0x73, 0x1;
        FIRST_VID: 0x74, 0xc;
        /// IPv4 protocol / IPv6 next header.
        IP_PROTOCOL: 0x80, 0x8;
        IP_DSCP: 0x88, 0x6;
        IP_ECN: 0x8e, 0x2;
        CVLAN_TAG: 0x90, 0x1;
        SVLAN_TAG: 0x91, 0x1;
        FRAG: 0x92, 0x1;
        /// 4 or 6 (Linux core/lib/fs_ttc.c matches it when `ft_field_support.outer_ip_version`).
        IP_VERSION: 0x93, 0x4;
        TCP_FLAGS: 0x97, 0x9;
        TCP_SPORT: 0xa0, 0x10;
        TCP_DPORT: 0xb0, 0x10;
        L4_TYPE: 0xc0, 0x2;
        IPV4_IHL: 0xd0, 0x4;
        TTL_HOPLIMIT: 0xd8, 0x8;
        UDP_SPORT: 0xe0, 0x10;
        UDP_DPORT: 0xf0, 0x10;
        /// IPv6 address, or an IPv4 address in the last 32 bits (`ipv4_layout`).
        SRC_IPV4_SRC_IPV6: 0x100, 0x80;
        /// IPv6 address, or an IPv4 address in the last 32 bits (`ipv4_layout`).
        DST_IPV4_DST_IPV6: 0x180, 0x80;
    }

    /// `mlx5_ifc_fte_match_set_misc_bits`: Linux mlx5_ifc.h:597 (not in rdma-core).
    struct fte_match_set_misc[0x200] {
        GRE_C_PRESENT: 0x0, 0x1;
        GRE_K_PRESENT: 0x2, 0x1;
        GRE_S_PRESENT: 0x3, 0x1;
        SOURCE_VHCA_PORT: 0x4, 0x4;
        SOURCE_SQN: 0x8, 0x18;
        SOURCE_ESWITCH_OWNER_VHCA_ID: 0x20, 0x10;
        SOURCE_PORT: 0x30, 0x10;
        OUTER_SECOND_PRIO: 0x40, 0x3;
        OUTER_SECOND_CFI: 0x43, 0x1;
        OUTER_SECOND_VID: 0x44, 0xc;
        INNER_SECOND_PRIO: 0x50, 0x3;
        INNER_SECOND_CFI: 0x53, 0x1;
        INNER_SECOND_VID: 0x54, 0xc;
        OUTER_SECOND_CVLAN_TAG: 0x60, 0x1;
        INNER_SECOND_CVLAN_TAG: 0x61, 0x1;
        OUTER_SECOND_SVLAN_TAG: 0x62, 0x1;
        INNER_SECOND_SVLAN_TAG: 0x63, 0x1;
        OUTER_EMD_TAG: 0x64, 0x1;
        GRE_PROTOCOL: 0x70, 0x10;
        GRE_KEY: 0x80, 0x20;
        VXLAN_VNI: 0xa0, 0x18;
        BTH_OPCODE: 0xb8, 0x8;
        GENEVE_VNI: 0xc0, 0x18;
        GENEVE_TLV_OPTION_0_EXIST: 0xde, 0x1;
        GENEVE_OAM: 0xdf, 0x1;
        OUTER_IPV6_FLOW_LABEL: 0xec, 0x14;
        INNER_IPV6_FLOW_LABEL: 0x10c, 0x14;
        GENEVE_OPT_LEN: 0x12a, 0x6;
        GENEVE_PROTOCOL_TYPE: 0x130, 0x10;
        BTH_DST_QP: 0x148, 0x18;
        INNER_ESP_SPI: 0x160, 0x20;
        OUTER_ESP_SPI: 0x180, 0x20;
        OUTER_EMD_TAG_DATA: 0x1c0, 0x30, [0x8];
    }

    /// `mlx5_ifc_create_flow_group_in_bits`: rdma-core mlx5_ifc.h:4316; the fields after
    /// `@linux` are Linux mlx5_ifc.h:9566.
    /// Input of [`crate::opcode::CREATE_FLOW_GROUP`] (0x933).
    struct create_flow_group_in[0x2000] {
        OPCODE: 0x0, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_ID: 0xa8, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
        GROUP_TYPE: 0x8c, 0x4;
        SOURCE_ESWITCH_OWNER_VHCA_ID_VALID: 0xc0, 0x1;
        /// First entry index of the group (Linux core/en_fs.c `mlx5e_create_l2_table_groups`).
        START_FLOW_INDEX: 0xe0, 0x20;
        /// Last entry index of the group, inclusive.
        END_FLOW_INDEX: 0x120, 0x20;
        MATCH_DEFINER_ID: 0x150, 0x10;
        /// [`crate::match_criteria_enable`] bits: which parts of `match_criteria` the group's
        /// entries match on.
        MATCH_CRITERIA_ENABLE: 0x1f8, 0x8;
        /// The mask: bits set here are compared with each entry's `match_value`.
        MATCH_CRITERIA: 0x200, crate::fte_match_param::BITS;
    }

    /// `mlx5_ifc_create_flow_group_out_bits`: rdma-core mlx5_ifc.h:4337.
    /// Output of [`crate::opcode::CREATE_FLOW_GROUP`] (0x933).
    struct create_flow_group_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        GROUP_ID: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_flow_group_in_bits`: rdma-core mlx5_ifc.h:4349; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8829.
    /// Input of [`crate::opcode::DESTROY_FLOW_GROUP`] (0x934).
    struct destroy_flow_group_in[0x200] {
        OPCODE: 0x0, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_ID: 0xa8, 0x18;
        GROUP_ID: 0xc0, 0x20;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_flow_group_out_bits`: Linux mlx5_ifc.h:8820 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_FLOW_GROUP`] (0x934).
    struct destroy_flow_group_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_flow_context_bits`: rdma-core mlx5_ifc.h:4401; the fields after
    /// `@linux` are Linux mlx5_ifc.h:3775.
    struct flow_context[0x1800] {
        GROUP_ID: 0x20, 0x20;
        FLOW_TAG: 0x48, 0x18;
        /// [`crate::flow_context_action`] bits (`FWD_DEST`, `DROP`, ...).
        ACTION: 0x70, 0x10;
        EXTENDED_DESTINATION: 0x80, 0x1;
        /// Number of `destination` entries (with `FWD_DEST`).
        DESTINATION_LIST_SIZE: 0x88, 0x18;
        FLOW_COUNTER_LIST_SIZE: 0xa8, 0x18;
        /// The destinations: [`crate::dest_format_struct`] entries of 64 bits (Linux core/fs_cmd.c
        /// `mlx5_cmd_set_fte` steps by `MLX5_ST_SZ_BYTES(dest_format_struct)` unless
        /// `extended_destination`, then by `extended_dest_format`, 128 bits).
        DESTINATION: 0x1800, 0x0, [0x40];
        @linux
        PUSH_VLAN: 0x0, 0x20;
        UPLINK_HAIRPIN_EN: 0x81, 0x1;
        FLOW_SOURCE: 0x82, 0x2;
        ENCRYPT_DECRYPT_TYPE: 0x84, 0x4;
        PACKET_REFORMAT_ID: 0xc0, 0x20;
        MODIFY_HEADER_ID: 0xe0, 0x20;
        PUSH_VLAN_2: 0x100, 0x20;
        ENCRYPT_DECRYPT_OBJ_ID: 0x120, 0x20;
        /// The values compared under the group's `match_criteria` mask.
        MATCH_VALUE: 0x200, crate::fte_match_param::BITS;
        EXECUTE_ASO: 0x1200, 0x100, [0x40];
    }

    /// `mlx5_ifc_dest_format_struct_bits`: Linux mlx5_ifc.h:2173 (not in rdma-core).
    struct dest_format_struct[0x40] {
        /// [`crate::flow_destination_type`] (the PRM values, not Linux fs.h's software enum).
        DESTINATION_TYPE: 0x0, 0x8;
        /// TIR number, flow table id, vport number, ... as `destination_type` says.
        DESTINATION_ID: 0x8, 0x18;
        DESTINATION_ESWITCH_OWNER_VHCA_ID_VALID: 0x20, 0x1;
        PACKET_REFORMAT: 0x21, 0x1;
        DESTINATION_TABLE_TYPE: 0x28, 0x8;
        DESTINATION_ESWITCH_OWNER_VHCA_ID: 0x30, 0x10;
    }

    /// `mlx5_ifc_set_fte_in_bits`: rdma-core mlx5_ifc.h:4424; the fields after
    /// `@linux` are Linux mlx5_ifc.h:5281.
    /// Input of [`crate::opcode::SET_FLOW_TABLE_ENTRY`] (0x936).
    struct set_fte_in[0x1a00] {
        OPCODE: 0x0, 0x10;
        /// 0 = create the entry; 1 = modify it (fields in `modify_enable_mask`) (Linux
        /// core/fs_cmd.c `mlx5_cmd_create_fte` / `mlx5_cmd_update_fte`).
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_ID: 0xa8, 0x18;
        /// Entry index, inside one group's `start_flow_index..=end_flow_index`.
        FLOW_INDEX: 0x100, 0x20;
        /// The entry; its `destination` list follows at the end of the input.
        FLOW_CONTEXT: 0x200, crate::flow_context::BITS;
        @linux
        IGNORE_FLOW_LEVEL: 0xc0, 0x1;
        MODIFY_ENABLE_MASK: 0xd8, 0x8;
    }

    /// `mlx5_ifc_set_fte_out_bits`: rdma-core mlx5_ifc.h:4450.
    /// Output of [`crate::opcode::SET_FLOW_TABLE_ENTRY`] (0x936).
    struct set_fte_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_delete_fte_in_bits`: rdma-core mlx5_ifc.h:5196; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8974.
    /// Input of [`crate::opcode::DELETE_FLOW_TABLE_ENTRY`] (0x938).
    struct delete_fte_in[0x200] {
        OPCODE: 0x0, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_ID: 0xa8, 0x18;
        FLOW_INDEX: 0x100, 0x20;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_delete_fte_out_bits`: Linux mlx5_ifc.h:8965 (not in rdma-core).
    /// Output of [`crate::opcode::DELETE_FLOW_TABLE_ENTRY`] (0x938).
    struct delete_fte_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_set_flow_table_root_in_bits`: Linux mlx5_ifc.h:11729 (not in rdma-core).
    /// Input of [`crate::opcode::SET_FLOW_TABLE_ROOT`] (0x92f).
    struct set_flow_table_root_in[0x200] {
        OPCODE: 0x0, 0x10;
        /// 0 = make `table_id` the root of `table_type`; 1 = disconnect the root (Linux
        /// core/fs_cmd.c `mlx5_cmd_update_root_ft`).
        OP_MOD: 0x30, 0x10;
        OTHER_VPORT: 0x40, 0x1;
        VPORT_NUMBER: 0x50, 0x10;
        TABLE_TYPE: 0x80, 0x8;
        TABLE_OF_OTHER_VPORT: 0x8f, 0x1;
        TABLE_VPORT_NUMBER: 0x90, 0x10;
        TABLE_ID: 0xa8, 0x18;
        UNDERLAY_QPN: 0xc8, 0x18;
        TABLE_ESWITCH_OWNER_VHCA_ID_VALID: 0xe0, 0x1;
        TABLE_ESWITCH_OWNER_VHCA_ID: 0xf0, 0x10;
    }

    /// `mlx5_ifc_set_flow_table_root_out_bits`: Linux mlx5_ifc.h:11720 (not in rdma-core).
    /// Output of [`crate::opcode::SET_FLOW_TABLE_ROOT`] (0x92f).
    struct set_flow_table_root_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

}
