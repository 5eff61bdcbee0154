//! Ethernet and flow-table capability pages: `per_protocol_networking_offload_caps`
//! (QUERY_HCA_CAP type [`crate::hca_cap::cap_type::ETHERNET_OFFLOADS`]) and `flow_table_nic_cap`
//! ([`crate::hca_cap::cap_type::FLOW_TABLE`]) with its per-table-type properties, as Linux
//! core/fw.c `mlx5_query_hca_caps` reads them when `cmd_hca_cap.eth_net_offloads` /
//! `nic_flow_table` are set.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted. Fields after
//! `@linux` are Linux mlx5_ifc.h's where rdma-core's header leaves the bits reserved; Linux
//! names that alias a range rdma-core splits (`outer_first_mpls_over_udp[0x4]`,
//! `identified_miss_table_mode`) are left out.

crate::prm_struct! {
    /// `mlx5_ifc_per_protocol_networking_offload_caps_bits`: Linux mlx5_ifc.h:1136 (not in
    /// rdma-core).
    struct per_protocol_networking_offload_caps[0x800] {
        /// Checksum offload; Linux core/dev.c `mlx5_eth_supported` refuses a device without it
        /// (also without `vlan_cap`, `max_lso_cap`, `rss_ind_tbl_cap`).
        CSUM_CAP: 0x0, 0x1;
        VLAN_CAP: 0x1, 0x1;
        /// LRO (Linux core/en_main.c `mlx5e_build_nic_netdev` offers it only with this bit).
        LRO_CAP: 0x2, 0x1;
        LRO_PSH_FLAG: 0x3, 0x1;
        LRO_TIME_STAMP: 0x4, 0x1;
        WQE_VLAN_INSERT: 0x7, 0x1;
        SELF_LB_EN_MODIFIABLE: 0x8, 0x1;
        /// log2 of the largest LSO message.
        MAX_LSO_CAP: 0xb, 0x5;
        MULTI_PKT_SEND_WQE: 0x10, 0x2;
        /// [`crate::cap_inline_mode`]: where the SQ's minimum inline mode comes from (Linux
        /// core/vport.c `mlx5_query_min_inline`); a ConnectX-5 reports `VPORT_CONTEXT`.
        WQE_INLINE_MODE: 0x12, 0x2;
        /// log2 of the largest RQ table (RSS indirection).
        RSS_IND_TBL_CAP: 0x14, 0x4;
        REG_UMR_SQ: 0x18, 0x1;
        /// `rqc.scatter_fcs` supported.
        SCATTER_FCS: 0x19, 0x1;
        ENHANCED_MULTI_PKT_SEND_WQE: 0x1a, 0x1;
        TUNNEL_LSO_CONST_OUT_IP_ID: 0x1b, 0x1;
        TUNNEL_LRO_GRE: 0x1c, 0x1;
        TUNNEL_LRO_VXLAN: 0x1d, 0x1;
        TUNNEL_STATELESS_GRE: 0x1e, 0x1;
        TUNNEL_STATELESS_VXLAN: 0x1f, 0x1;
        SWP: 0x20, 0x1;
        SWP_CSUM: 0x21, 0x1;
        SWP_LSO: 0x22, 0x1;
        /// CQEs carry the full checksum of the packet (Linux core/en_main.c `mlx5e_open_rq`).
        CQE_CHECKSUM_FULL: 0x23, 0x1;
        TUNNEL_STATELESS_GENEVE_TX: 0x24, 0x1;
        TUNNEL_STATELESS_MPLS_OVER_UDP: 0x25, 0x1;
        TUNNEL_STATELESS_MPLS_OVER_GRE: 0x26, 0x1;
        TUNNEL_STATELESS_VXLAN_GPE: 0x27, 0x1;
        TUNNEL_STATELESS_IPV4_OVER_VXLAN: 0x28, 0x1;
        TUNNEL_STATELESS_IP_OVER_IP: 0x29, 0x1;
        INSERT_TRAILER: 0x2a, 0x1;
        TUNNEL_STATELESS_IP_OVER_IP_RX: 0x2c, 0x1;
        TUNNEL_STATELESS_IP_OVER_IP_TX: 0x2d, 0x1;
        MAX_VXLAN_UDP_PORTS: 0x30, 0x8;
        MAX_GENEVE_OPT_LEN: 0x3e, 0x1;
        TUNNEL_STATELESS_GENEVE_RX: 0x3f, 0x1;
        LRO_MIN_MSS_SIZE: 0x50, 0x10;
        LRO_TIMER_SUPPORTED_PERIODS: 0x180, 0x80, [0x20];
    }

    /// `mlx5_ifc_flow_table_nic_cap_bits`: rdma-core mlx5_ifc.h:1331; the fields after
    /// `@linux` are Linux mlx5_ifc.h:846.
    struct flow_table_nic_cap[0x8000] {
        NIC_RX_MULTI_PATH_TIRS: 0x0, 0x1;
        NIC_RX_MULTI_PATH_TIRS_FTS: 0x1, 0x1;
        ALLOW_SNIFFER_AND_NIC_RX_SHARED_TIR: 0x2, 0x1;
        NIC_RX_FLOW_TAG_MULTIPATH_EN: 0x4, 0x1;
        NIC_RECEIVE_MAX_STEERING_DEPTH: 0x18, 0x8;
        ENCAP_GENERAL_HEADER: 0x20, 0x1;
        LOG_MAX_PACKET_REFORMAT_CONTEXT: 0x2b, 0x5;
        MAX_ENCAP_HEADER_SIZE: 0x36, 0xa;
        /// What NIC_RX tables support (`MLX5_CAP_FLOWTABLE_NIC_RX`, Linux
        /// include/linux/mlx5/device.h); Linux core/fs_core.c `mlx5_fs_core_init` builds the NIC_RX
        /// namespace only with `ft_support`.
        FLOW_TABLE_PROPERTIES_NIC_RECEIVE: 0x200, crate::flow_table_prop_layout::BITS;
        FLOW_TABLE_PROPERTIES_NIC_RECEIVE_RDMA: 0x400, crate::flow_table_prop_layout::BITS;
        FLOW_TABLE_PROPERTIES_NIC_RECEIVE_SNIFFER: 0x600, crate::flow_table_prop_layout::BITS;
        /// What NIC_TX tables support.
        FLOW_TABLE_PROPERTIES_NIC_TRANSMIT: 0x800, crate::flow_table_prop_layout::BITS;
        FLOW_TABLE_PROPERTIES_NIC_TRANSMIT_RDMA: 0xa00, crate::flow_table_prop_layout::BITS;
        FLOW_TABLE_PROPERTIES_NIC_TRANSMIT_SNIFFER: 0xc00, crate::flow_table_prop_layout::BITS;
        HEADER_MODIFY_NIC_RECEIVE: 0x1000, 0x400;
        FT_FIELD_SUPPORT_2_NIC_RECEIVE: 0x1400, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_RECEIVE: 0x1480, 0x80;
        FT_FIELD_SUPPORT_2_NIC_RECEIVE_RDMA: 0x1500, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_RECEIVE_RDMA: 0x1580, 0x80;
        FT_FIELD_SUPPORT_2_NIC_RECEIVE_SNIFFER: 0x1600, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_RECEIVE_SNIFFER: 0x1680, 0x80;
        FT_FIELD_SUPPORT_2_NIC_TRANSMIT: 0x1700, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_TRANSMIT: 0x1780, 0x80;
        FT_FIELD_SUPPORT_2_NIC_TRANSMIT_RDMA: 0x1800, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_TRANSMIT_RDMA: 0x1880, 0x80;
        FT_FIELD_SUPPORT_2_NIC_TRANSMIT_SNIFFER: 0x1900, 0x80;
        FT_FIELD_BITMASK_SUPPORT_2_NIC_TRANSMIT_SNIFFER: 0x1980, 0x80;
        HEADER_MODIFY_NIC_TRANSMIT: 0x1c00, 0x400;
        SW_STEERING_NIC_RX_ACTION_DROP_ICM_ADDRESS: 0x2000, 0x40;
        SW_STEERING_NIC_TX_ACTION_DROP_ICM_ADDRESS: 0x2040, 0x40;
        SW_STEERING_NIC_TX_ACTION_ALLOW_ICM_ADDRESS: 0x2080, 0x40;
        @linux
        SW_OWNER_REFORMAT_SUPPORTED: 0x7, 0x1;
    }

    /// `mlx5_ifc_flow_table_prop_layout_bits`: rdma-core mlx5_ifc.h:770; the fields after
    /// `@linux` are Linux mlx5_ifc.h:441.
    struct flow_table_prop_layout[0x200] {
        /// Flow tables of this type exist.
        FT_SUPPORT: 0x0, 0x1;
        FLOW_TAG: 0x1, 0x1;
        FLOW_COUNTER: 0x2, 0x1;
        /// SET_FLOW_TABLE_ENTRY op_mod 1 (modify) works (Linux core/fs_cmd.c
        /// `mlx5_cmd_update_fte`).
        FLOW_MODIFY_EN: 0x3, 0x1;
        /// SET_FLOW_TABLE_ROOT may replace an existing root.
        MODIFY_ROOT: 0x4, 0x1;
        IDENTIFIED_MISS_TABLE: 0x5, 0x1;
        FLOW_TABLE_MODIFY: 0x6, 0x1;
        REFORMAT: 0x7, 0x1;
        DECAP: 0x8, 0x1;
        RESET_ROOT_TO_DEFAULT: 0x9, 0x1;
        POP_VLAN: 0xa, 0x1;
        PUSH_VLAN: 0xb, 0x1;
        FPGA_VENDOR_ACCELERATION: 0xc, 0x1;
        POP_VLAN_2: 0xd, 0x1;
        PUSH_VLAN_2: 0xe, 0x1;
        REFORMAT_AND_VLAN_ACTION: 0xf, 0x1;
        MODIFY_AND_VLAN_ACTION: 0x10, 0x1;
        SW_OWNER: 0x11, 0x1;
        REFORMAT_L3_TUNNEL_TO_L2: 0x12, 0x1;
        REFORMAT_L2_TO_L3_TUNNEL: 0x13, 0x1;
        REFORMAT_AND_MODIFY_ACTION: 0x14, 0x1;
        SW_OWNER_V2: 0x1e, 0x1;
        /// log2 of the most entries in one table (`flow_table_context.log_size` limit).
        LOG_MAX_FT_SIZE: 0x22, 0x6;
        LOG_MAX_MODIFY_HEADER_CONTEXT: 0x28, 0x8;
        MAX_MODIFY_HEADER_ACTIONS: 0x30, 0x8;
        /// Deepest `flow_table_context.level` (Linux core/fs_core.c `init_root_tree_recursive`).
        MAX_FT_LEVEL: 0x38, 0x8;
        METADATA_REG_B_WIDTH: 0x50, 0x8;
        METADATA_REG_A_WIDTH: 0x58, 0x8;
        /// log2 of the most tables.
        LOG_MAX_FT_NUM: 0x78, 0x8;
        LOG_MAX_FLOW_COUNTER: 0x90, 0x8;
        /// log2 of the most destinations of one entry.
        LOG_MAX_DESTINATION: 0x98, 0x8;
        /// log2 of the most entries over all tables.
        LOG_MAX_FLOW: 0xb8, 0x8;
        /// Which [`crate::fte_match_param`] fields can be matched (Linux core/lib/fs_ttc.c reads
        /// `ft_field_support.outer_ip_version`).
        FT_FIELD_SUPPORT: 0x100, crate::flow_table_fields_supported::BITS;
        FT_FIELD_BITMASK_SUPPORT: 0x180, crate::flow_table_fields_supported::BITS;
        @linux
        IGNORE_FLOW_LEVEL: 0x15, 0x1;
        TABLE_MISS_ACTION_DOMAIN: 0x17, 0x1;
        TERMINATION_TABLE: 0x18, 0x1;
        REFORMAT_AND_FWD_TO_TABLE: 0x19, 0x1;
        IPSEC_ENCRYPT: 0x1c, 0x1;
        IPSEC_DECRYPT: 0x1d, 0x1;
        TERMINATION_TABLE_RAW_TRAFFIC: 0x20, 0x1;
        REFORMAT_ADD_ESP_TRASPORT: 0x40, 0x1;
        REFORMAT_L2_TO_L3_ESP_TUNNEL: 0x41, 0x1;
        REFORMAT_ADD_ESP_TRANSPORT_OVER_UDP: 0x42, 0x1;
        REFORMAT_DEL_ESP_TRASPORT: 0x43, 0x1;
        REFORMAT_L3_ESP_TUNNEL_TO_L2: 0x44, 0x1;
        REFORMAT_DEL_ESP_TRANSPORT_OVER_UDP: 0x45, 0x1;
        EXECUTE_ASO: 0x46, 0x1;
        REFORMAT_INSERT: 0x62, 0x1;
        REFORMAT_REMOVE: 0x63, 0x1;
        MACSEC_ENCRYPT: 0x64, 0x1;
        MACSEC_DECRYPT: 0x65, 0x1;
        REFORMAT_ADD_MACSEC: 0x68, 0x1;
        REFORMAT_REMOVE_MACSEC: 0x69, 0x1;
    }

    /// `mlx5_ifc_flow_table_fields_supported_bits`: rdma-core mlx5_ifc.h:406; the fields after
    /// `@linux` are Linux mlx5_ifc.h:344.
    struct flow_table_fields_supported[0x80] {
        OUTER_DMAC: 0x0, 0x1;
        OUTER_SMAC: 0x1, 0x1;
        OUTER_ETHER_TYPE: 0x2, 0x1;
        OUTER_IP_VERSION: 0x3, 0x1;
        OUTER_FIRST_PRIO: 0x4, 0x1;
        OUTER_FIRST_CFI: 0x5, 0x1;
        OUTER_FIRST_VID: 0x6, 0x1;
        OUTER_IPV4_TTL: 0x7, 0x1;
        OUTER_SECOND_PRIO: 0x8, 0x1;
        OUTER_SECOND_CFI: 0x9, 0x1;
        OUTER_SECOND_VID: 0xa, 0x1;
        OUTER_IPV6_FLOW_LABEL: 0xb, 0x1;
        OUTER_SIP: 0xc, 0x1;
        OUTER_DIP: 0xd, 0x1;
        OUTER_FRAG: 0xe, 0x1;
        OUTER_IP_PROTOCOL: 0xf, 0x1;
        OUTER_IP_ECN: 0x10, 0x1;
        OUTER_IP_DSCP: 0x11, 0x1;
        OUTER_UDP_SPORT: 0x12, 0x1;
        OUTER_UDP_DPORT: 0x13, 0x1;
        OUTER_TCP_SPORT: 0x14, 0x1;
        OUTER_TCP_DPORT: 0x15, 0x1;
        OUTER_TCP_FLAGS: 0x16, 0x1;
        OUTER_GRE_PROTOCOL: 0x17, 0x1;
        OUTER_GRE_KEY: 0x18, 0x1;
        OUTER_VXLAN_VNI: 0x19, 0x1;
        OUTER_GENEVE_VNI: 0x1a, 0x1;
        OUTER_GENEVE_OAM: 0x1b, 0x1;
        OUTER_GENEVE_PROTOCOL_TYPE: 0x1c, 0x1;
        OUTER_GENEVE_OPT_LEN: 0x1d, 0x1;
        SOURCE_VHCA_PORT: 0x1e, 0x1;
        SOURCE_ESWITCH_PORT: 0x1f, 0x1;
        INNER_DMAC: 0x20, 0x1;
        INNER_SMAC: 0x21, 0x1;
        INNER_ETHER_TYPE: 0x22, 0x1;
        INNER_IP_VERSION: 0x23, 0x1;
        INNER_FIRST_PRIO: 0x24, 0x1;
        INNER_FIRST_CFI: 0x25, 0x1;
        INNER_FIRST_VID: 0x26, 0x1;
        INNER_IPV4_TTL: 0x27, 0x1;
        INNER_SECOND_PRIO: 0x28, 0x1;
        INNER_SECOND_CFI: 0x29, 0x1;
        INNER_SECOND_VID: 0x2a, 0x1;
        INNER_IPV6_FLOW_LABEL: 0x2b, 0x1;
        INNER_SIP: 0x2c, 0x1;
        INNER_DIP: 0x2d, 0x1;
        INNER_FRAG: 0x2e, 0x1;
        INNER_IP_PROTOCOL: 0x2f, 0x1;
        INNER_IP_ECN: 0x30, 0x1;
        INNER_IP_DSCP: 0x31, 0x1;
        INNER_UDP_SPORT: 0x32, 0x1;
        INNER_UDP_DPORT: 0x33, 0x1;
        INNER_TCP_SPORT: 0x34, 0x1;
        INNER_TCP_DPORT: 0x35, 0x1;
        INNER_TCP_FLAGS: 0x36, 0x1;
        METADATA_REG_B: 0x3e, 0x1;
        METADATA_REG_A: 0x3f, 0x1;
        GENEVE_TLV_OPTION_0_DATA: 0x40, 0x1;
        GENEVE_TLV_OPTION_0_EXIST: 0x41, 0x1;
        OUTER_FIRST_MPLS_OVER_UDP_TTL: 0x45, 0x1;
        OUTER_FIRST_MPLS_OVER_UDP_S_BOS: 0x46, 0x1;
        OUTER_FIRST_MPLS_OVER_UDP_EXP: 0x47, 0x1;
        OUTER_FIRST_MPLS_OVER_UDP_LABEL: 0x48, 0x1;
        OUTER_FIRST_MPLS_OVER_GRE_TTL: 0x49, 0x1;
        OUTER_FIRST_MPLS_OVER_GRE_S_BOS: 0x4a, 0x1;
        OUTER_FIRST_MPLS_OVER_GRE_EXP: 0x4b, 0x1;
        OUTER_FIRST_MPLS_OVER_GRE_LABEL: 0x4c, 0x1;
        INNER_FIRST_MPLS_TTL: 0x4d, 0x1;
        INNER_FIRST_MPLS_S_BOS: 0x4e, 0x1;
        INNER_FIRST_MPLS_EXP: 0x4f, 0x1;
        INNER_FIRST_MPLS_LABEL: 0x50, 0x1;
        OUTER_FIRST_MPLS_TTL: 0x51, 0x1;
        OUTER_FIRST_MPLS_S_BOS: 0x52, 0x1;
        OUTER_FIRST_MPLS_EXP: 0x53, 0x1;
        OUTER_FIRST_MPLS_LABEL: 0x54, 0x1;
        OUTER_EMD_TAG: 0x55, 0x1;
        INNER_ESP_SPI: 0x56, 0x1;
        OUTER_ESP_SPI: 0x57, 0x1;
        INNER_IPV6_HOP_LIMIT: 0x58, 0x1;
        OUTER_IPV6_HOP_LIMIT: 0x59, 0x1;
        BTH_DST_QP: 0x5a, 0x1;
        INNER_FIRST_SVLAN: 0x5b, 0x1;
        INNER_SECOND_SVLAN: 0x5c, 0x1;
        OUTER_FIRST_SVLAN: 0x5d, 0x1;
        OUTER_SECOND_SVLAN: 0x5e, 0x1;
        SOURCE_SQN: 0x5f, 0x1;
        @linux
        METADATA_REG_C_7: 0x78, 0x1;
        METADATA_REG_C_6: 0x79, 0x1;
        METADATA_REG_C_5: 0x7a, 0x1;
        METADATA_REG_C_4: 0x7b, 0x1;
        METADATA_REG_C_3: 0x7c, 0x1;
        METADATA_REG_C_2: 0x7d, 0x1;
        METADATA_REG_C_1: 0x7e, 0x1;
        METADATA_REG_C_0: 0x7f, 0x1;
    }

}
