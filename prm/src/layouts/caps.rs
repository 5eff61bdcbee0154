//! HCA capabilities: QUERY_HCA_CAP / SET_HCA_CAP and the capability pages.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_query_hca_cap_in_bits`: rdma-core mlx5_ifc.h:1553.
    /// Input of [`crate::opcode::QUERY_HCA_CAP`] (0x100).
    struct query_hca_cap_in[0x80] {
        OPCODE: 0x0, 0x10;
        /// `cap_type << 1 | cap_mode` (0 = MAX, 1 = CUR); see [`crate::hca_cap::query_op_mod`].
        OP_MOD: 0x30, 0x10;
        OTHER_FUNCTION: 0x40, 0x1;
        FUNCTION_ID: 0x50, 0x10;
    }

    /// `mlx5_ifc_query_hca_cap_out_bits`: rdma-core mlx5_ifc.h:1542.
    /// Output of [`crate::opcode::QUERY_HCA_CAP`] (0x100).
    struct query_hca_cap_out[0x8080] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        /// Starts at byte 0x10; the output is 4112 bytes, so it arrives through mailboxes
        /// (rdma-core `mlx5_ifc_query_hca_cap_out_bits`).
        CAPABILITY: 0x80, crate::hca_cap_union::BITS;
    }

    /// `mlx5_ifc_set_hca_cap_in_bits`: rdma-core mlx5_ifc.h:4931.
    /// Input of [`crate::opcode::SET_HCA_CAP`] (0x109).
    struct set_hca_cap_in[0x8080] {
        OPCODE: 0x0, 0x10;
        /// `cap_type << 1` (Linux constants are unshifted, rdma-core's pre-shifted; do not shift
        /// twice; Linux core/main.c `set_caps`, rdma-core `mlx5_ifc.h`
        /// `MLX5_SET_HCA_CAP_OP_MOD_*`).
        OP_MOD: 0x30, 0x10;
        OTHER_FUNCTION: 0x40, 0x1;
        FUNCTION_ID: 0x50, 0x10;
        CAPABILITY: 0x80, crate::hca_cap_union::BITS;
    }

    /// `mlx5_ifc_set_hca_cap_out_bits`: rdma-core mlx5_ifc.h:4922.
    /// Output of [`crate::opcode::SET_HCA_CAP`] (0x109).
    struct set_hca_cap_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_hca_cap_union_bits`: rdma-core mlx5_ifc.h:1527.
    union hca_cap_union[0x8000] {
        ATOMIC_CAPS: 0x0, crate::atomic_caps::BITS;
        CMD_HCA_CAP: 0x0, crate::cmd_hca_cap::BITS;
        FLOW_TABLE_NIC_CAP: 0x0, crate::flow_table_nic_cap::BITS;
        FLOW_TABLE_ESWITCH_CAP: 0x0, 0x8000; // struct flow_table_eswitch_cap, not declared
        E_SWITCH_CAP: 0x0, 0x800; // struct e_switch_cap, not declared
        DEVICE_MEM_CAP: 0x0, 0x800; // struct device_mem_cap, not declared
        ODP_CAP: 0x0, crate::odp_cap::BITS;
        ROCE_CAPS: 0x0, crate::roce_cap::BITS;
        QOS_CAPS: 0x0, 0x800; // struct qos_cap, not declared
        CMD_HCA_CAP_2: 0x0, crate::cmd_hca_cap_2::BITS;
        CRYPTO_CAPS: 0x0, 0x800; // struct crypto_caps, not declared
        @linux
        /// Linux mlx5_ifc.h:3690 (the union's member rdma-core lacks): the
        /// [`crate::hca_cap::cap_type::ETHERNET_OFFLOADS`] page.
        PER_PROTOCOL_NETWORKING_OFFLOAD_CAPS:
            0x0, crate::per_protocol_networking_offload_caps::BITS;
    }

    /// `mlx5_ifc_cmd_hca_cap_bits`: rdma-core mlx5_ifc.h:849.
    /// `fast_teardown` is deliberately not declared here: rdma-core puts it at 0x111, Linux (OFED
    /// 24.07) at 0xfb with 0x111 reserved (both `mlx5_ifc_cmd_hca_cap_bits`). Use
    /// [`crate::linux_layout::cmd_hca_cap::FAST_TEARDOWN`] (the Linux position) after checking.
    struct cmd_hca_cap[0x800] {
        ACCESS_OTHER_HCA_ROCE: 0x0, 0x1;
        VHCA_RESOURCE_MANAGER: 0x1f, 0x1;
        HCA_CAP_2: 0x20, 0x1;
        VHCA_ID: 0x30, 0x10;
        QP_DATA_IN_ORDER: 0x62, 0x1;
        LOG_DMA_MMO_MAX_SIZE: 0x6b, 0x5;
        LOG_MAX_SRQ_SZ: 0x80, 0x8;
        LOG_MAX_QP_SZ: 0x88, 0x8;
        ISOLATE_VL_TC_NEW: 0x93, 0x1;
        PRIO_TAG_REQUIRED: 0x98, 0x1;
        LOG_MAX_QP: 0x9b, 0x5;
        LOG_MAX_SRQ: 0xab, 0x5;
        LOG_MAX_CQ_SZ: 0xc8, 0x8;
        LOG_MAX_CQ: 0xdb, 0x5;
        LOG_MAX_EQ_SZ: 0xe0, 0x8;
        RELAXED_ORDERING_WRITE: 0xe8, 0x1;
        LOG_MAX_MKEY: 0xea, 0x6;
        TUNNELED_ATOMIC: 0xf0, 0x1;
        AS_NOTIFY: 0xf1, 0x1;
        M_PCI_PORT: 0xf2, 0x1;
        M_VHCA_MK: 0xf3, 0x1;
        CMD_ON_BEHALF: 0xf4, 0x1;
        DEVICE_EMULATION_MANAGER: 0xf5, 0x1;
        TERMINATE_SCATTER_LIST_MKEY: 0xf6, 0x1;
        REPEATED_MKEY: 0xf7, 0x1;
        DUMP_FILL_MKEY: 0xf8, 0x1;
        LOG_MAX_EQ: 0xfc, 0x4;
        MAX_INDIRECTION: 0x100, 0x8;
        FIXED_BUFFER_SIZE: 0x108, 0x1;
        LOG_MAX_MRW_SZ: 0x109, 0x7;
        FORCE_TEARDOWN: 0x110, 0x1;
        LOG_MAX_BSF_LIST_SIZE: 0x112, 0x6;
        UMR_EXTENDED_TRANSLATION_OFFSET: 0x118, 0x1;
        NULL_MKEY: 0x119, 0x1;
        LOG_MAX_KLM_LIST_SIZE: 0x11a, 0x6;
        QPC_EXTENSION: 0x122, 0x1;
        LOG_MAX_RA_REQ_DC: 0x12a, 0x6;
        LOG_MAX_RA_RES_DC: 0x13a, 0x6;
        SIG_CRC64_XP10: 0x147, 0x1;
        SIG_CRC32C: 0x148, 0x1;
        LOG_MAX_RA_REQ_QP: 0x14a, 0x6;
        RTS2RTS_QP_UDP_SPORT: 0x151, 0x1;
        RTS2RTS_LAG_TX_PORT_AFFINITY: 0x152, 0x1;
        DMA_MMO_SQ: 0x153, 0x1;
        LOG_MAX_RA_RES_QP: 0x15a, 0x6;
        END_PAD: 0x160, 0x1;
        CC_QUERY_ALLOWED: 0x161, 0x1;
        CC_MODIFY_ALLOWED: 0x162, 0x1;
        START_PAD: 0x163, 0x1;
        CACHE_LINE_128BYTE: 0x164, 0x1;
        GID_TABLE_SIZE_RO: 0x165, 0x1;
        PKEY_TABLE_SIZE_RO: 0x166, 0x1;
        RNR_NAK_Q_COUNTERS: 0x168, 0x1;
        RTS2RTS_QP_COUNTERS_SET_ID: 0x169, 0x1;
        RTS2RTS_QP_DSCP: 0x16a, 0x1;
        QCAM_REG: 0x16f, 0x1;
        GID_TABLE_SIZE: 0x170, 0x10;
        OUT_OF_SEQ_CNT: 0x180, 0x1;
        VPORT_COUNTERS: 0x181, 0x1;
        RETRANSMISSION_Q_COUNTERS: 0x182, 0x1;
        DEBUG: 0x183, 0x1;
        MODIFY_RQ_COUNTERS_SET_ID: 0x184, 0x1;
        RQ_DELAY_DROP: 0x185, 0x1;
        MAX_QP_CNT: 0x186, 0xa;
        PKEY_TABLE_SIZE: 0x190, 0x10;
        VPORT_GROUP_MANAGER: 0x1a0, 0x1;
        VHCA_GROUP_MANAGER: 0x1a1, 0x1;
        IB_VIRT: 0x1a2, 0x1;
        ETH_VIRT: 0x1a3, 0x1;
        VNIC_ENV_QUEUE_COUNTERS: 0x1a4, 0x1;
        ETS: 0x1a5, 0x1;
        NIC_FLOW_TABLE: 0x1a6, 0x1;
        ESWITCH_MANAGER: 0x1a7, 0x1;
        DEVICE_MEMORY: 0x1a8, 0x1;
        MCAM_REG: 0x1a9, 0x1;
        PCAM_REG: 0x1aa, 0x1;
        LOCAL_CA_ACK_DELAY: 0x1ab, 0x5;
        PORT_MODULE_EVENT: 0x1b0, 0x1;
        ENHANCED_RETRANSMISSION_Q_COUNTERS: 0x1b1, 0x1;
        /// Linux calls it `ports_check`.
        PORT_CHECKS: 0x1b2, 0x1;
        PULSE_GEN_CONTROL: 0x1b3, 0x1;
        DISABLE_LINK_UP_BY_INIT_HCA: 0x1b4, 0x1;
        BEACON_LED: 0x1b5, 0x1;
        PORT_TYPE: 0x1b6, 0x2;
        NUM_PORTS: 0x1b8, 0x8;
        PPS: 0x1c1, 0x1;
        PPS_MODIFY: 0x1c2, 0x1;
        LOG_MAX_MSG: 0x1c3, 0x5;
        MULTI_PATH_XRC_RDMA: 0x1c8, 0x1;
        MULTI_PATH_DC_RDMA: 0x1c9, 0x1;
        MULTI_PATH_RC_RDMA: 0x1ca, 0x1;
        TRAFFIC_FAST_CONTROL: 0x1cb, 0x1;
        MAX_TC: 0x1cc, 0x4;
        TEMP_WARN_EVENT: 0x1d0, 0x1;
        DCBX: 0x1d1, 0x1;
        GENERAL_NOTIFICATION_EVENT: 0x1d2, 0x1;
        MULTI_PRIO_SQ: 0x1d3, 0x1;
        AFU_OWNER: 0x1d4, 0x1;
        FPGA: 0x1d5, 0x1;
        ROL_S: 0x1d6, 0x1;
        ROL_G: 0x1d7, 0x1;
        IB_PORT_SNIFFER: 0x1d8, 0x1;
        WOL_S: 0x1d9, 0x1;
        WOL_G: 0x1da, 0x1;
        WOL_A: 0x1db, 0x1;
        WOL_B: 0x1dc, 0x1;
        WOL_M: 0x1dd, 0x1;
        WOL_U: 0x1de, 0x1;
        WOL_P: 0x1df, 0x1;
        STAT_RATE_SUPPORT: 0x1e0, 0x10;
        SIG_BLOCK_4048: 0x1f0, 0x1;
        CQE_VERSION: 0x1fc, 0x4;
        COMPACT_ADDRESS_VECTOR: 0x200, 0x1;
        /// Multi-packet (striding) RQs, `wq_type` `CYCLIC_STRIDING_RQ`; Linux calls it
        /// `striding_rq` (core/en_main.c `mlx5e_check_fragmented_striding_rq_cap`).
        ETH_STRIDING_WQ: 0x201, 0x1;
        IPOIB_ENHANCED_OFFLOADS: 0x203, 0x1;
        IPOIB_BASIC_OFFLOADS: 0x204, 0x1;
        IB_STRIDING_WQ: 0x205, 0x1;
        REPEATED_BLOCK_DISABLED: 0x206, 0x1;
        UMR_MODIFY_ENTITY_SIZE_DISABLED: 0x207, 0x1;
        UMR_MODIFY_ATOMIC_DISABLED: 0x208, 0x1;
        UMR_INDIRECT_MKEY_DISABLED: 0x209, 0x1;
        UMR_FENCE: 0x20a, 0x2;
        DC_REQ_SCTR_DATA_CQE: 0x20c, 0x1;
        DC_CONNECT_QP: 0x20d, 0x1;
        DC_CNAK_TRACE: 0x20e, 0x1;
        DRAIN_SIGERR: 0x20f, 0x1;
        CMDIF_CHECKSUM: 0x210, 0x2;
        SIGERR_CQE: 0x212, 0x1;
        WQ_SIGNATURE: 0x214, 0x1;
        SCTR_DATA_CQE: 0x215, 0x1;
        SHO: 0x217, 0x1;
        TPH: 0x218, 0x1;
        RF: 0x219, 0x1;
        DCT: 0x21a, 0x1;
        QOS: 0x21b, 0x1;
        ETH_NET_OFFLOADS: 0x21c, 0x1;
        ROCE: 0x21d, 0x1;
        ATOMIC: 0x21e, 0x1;
        EXTENDED_RETRY_COUNT: 0x21f, 0x1;
        CQ_OI: 0x220, 0x1;
        CQ_RESIZE: 0x221, 0x1;
        CQ_MODERATION: 0x222, 0x1;
        CQ_PERIOD_MODE_MODIFY: 0x223, 0x1;
        CQ_INVALIDATE: 0x224, 0x1;
        CQ_EQ_REMAP: 0x226, 0x1;
        PG: 0x227, 0x1;
        BLOCK_LB_MC: 0x228, 0x1;
        EXPONENTIAL_BACKOFF: 0x229, 0x1;
        SCQE_BREAK_MODERATION: 0x22a, 0x1;
        CQ_PERIOD_START_FROM_CQE: 0x22b, 0x1;
        CD: 0x22c, 0x1;
        ATM: 0x22d, 0x1;
        APM: 0x22e, 0x1;
        VECTOR_CALC: 0x22f, 0x1;
        /// Linux calls it `umr_ptr_rlky`.
        UMR_PTR_RLKEY: 0x230, 0x1;
        IMAICL: 0x231, 0x1;
        QP_PACKET_BASED: 0x232, 0x1;
        IPOIB_ENHANCED_PKEY_CHANGE: 0x234, 0x1;
        INITIATOR_SRC_DCT_IN_CQE: 0x235, 0x1;
        QKV: 0x236, 0x1;
        PKV: 0x237, 0x1;
        SET_DETH_SQPN: 0x238, 0x1;
        RTS2RTS_PRIMARY_SL: 0x239, 0x1;
        INITIATOR_SRC_DCT: 0x23a, 0x1;
        DC_V2: 0x23b, 0x1;
        XRC: 0x23c, 0x1;
        UD: 0x23d, 0x1;
        UC: 0x23e, 0x1;
        RC: 0x23f, 0x1;
        UAR_4K: 0x240, 0x1;
        FL_RC_QP_WHEN_ROCE_DISABLED: 0x248, 0x1;
        UAR_SZ: 0x24a, 0x6;
        UMEM_UID_0: 0x252, 0x1;
        LOG_MAX_DC_CNAK_QPS: 0x253, 0x5;
        LOG_PG_SZ: 0x258, 0x8;
        BF: 0x260, 0x1;
        DRIVER_VERSION: 0x261, 0x1;
        PAD_TX_ETH_PACKET: 0x262, 0x1;
        QUERY_DRIVER_VERSION: 0x263, 0x1;
        MAX_QP_RETRY_FREQ: 0x264, 0x1;
        QP_BY_NAME: 0x265, 0x1;
        MKEY_BY_NAME: 0x266, 0x1;
        SUSPEND_QP_UC: 0x268, 0x1;
        SUSPEND_QP_UD: 0x269, 0x1;
        SUSPEND_QP_RC: 0x26a, 0x1;
        LOG_BF_REG_SIZE: 0x26b, 0x5;
        LAG_DCT: 0x276, 0x2;
        LAG_TX_PORT_AFFINITY: 0x278, 0x1;
        LAG_MASTER: 0x27b, 0x1;
        NUM_LAG_PORTS: 0x27c, 0x4;
        NUM_OF_DIAGNOSTIC_COUNTERS: 0x280, 0x10;
        MAX_WQE_SZ_SQ: 0x290, 0x10;
        MAX_WQE_SZ_RQ: 0x2b0, 0x10;
        MAX_FLOW_COUNTER_31_16: 0x2c0, 0x10;
        MAX_WQE_SZ_SQ_DC: 0x2d0, 0x10;
        MAX_QP_MCG: 0x2e7, 0x19;
        MLNX_TAG_ETHERTYPE: 0x300, 0x10;
        LOG_MAX_MCG: 0x318, 0x8;
        LOG_MAX_TRANSPORT_DOMAIN: 0x323, 0x5;
        LOG_MAX_PD: 0x32b, 0x5;
        DP_ORDERING_OOO_ALL_UD: 0x330, 0x1;
        DP_ORDERING_OOO_ALL_UC: 0x331, 0x1;
        DP_ORDERING_OOO_ALL_XRC: 0x332, 0x1;
        DP_ORDERING_OOO_ALL_DC: 0x333, 0x1;
        DP_ORDERING_OOO_ALL_RC: 0x334, 0x1;
        LOG_MAX_XRCD: 0x33b, 0x5;
        NIC_RECEIVE_STEERING_DISCARD: 0x340, 0x1;
        RECEIVE_DISCARD_VPORT_DOWN: 0x341, 0x1;
        TRANSMIT_DISCARD_VPORT_DOWN: 0x342, 0x1;
        EQ_OVERRUN_COUNT: 0x343, 0x1;
        NIC_RECEIVE_STEERING_DEPTH: 0x344, 0x1;
        INVALID_COMMAND_COUNT: 0x345, 0x1;
        QUOTA_EXCEEDED_COUNT: 0x346, 0x1;
        LOG_MAX_FLOW_COUNTER_BULK: 0x348, 0x8;
        MAX_FLOW_COUNTER_15_0: 0x350, 0x10;
        MODIFY_TIS: 0x360, 0x1;
        LOG_MAX_RQ: 0x363, 0x5;
        LOG_MAX_SQ: 0x36b, 0x5;
        LOG_MAX_TIR: 0x373, 0x5;
        LOG_MAX_TIS: 0x37b, 0x5;
        BASIC_CYCLIC_RCV_WQE: 0x380, 0x1;
        LOG_MAX_RMP: 0x383, 0x5;
        LOG_MAX_RQT: 0x38b, 0x5;
        LOG_MAX_RQT_SIZE: 0x393, 0x5;
        LOG_MAX_TIS_PER_SQ: 0x39b, 0x5;
        EXT_STRIDE_NUM_RANGE: 0x3a0, 0x1;
        LOG_MAX_STRIDE_SZ_RQ: 0x3a3, 0x5;
        LOG_MIN_STRIDE_SZ_RQ: 0x3ab, 0x5;
        LOG_MAX_STRIDE_SZ_SQ: 0x3b3, 0x5;
        LOG_MIN_STRIDE_SZ_SQ: 0x3bb, 0x5;
        HAIRPIN: 0x3c0, 0x1;
        LOG_MAX_HAIRPIN_QUEUES: 0x3c3, 0x5;
        LOG_MAX_HAIRPIN_WQ_DATA_SZ: 0x3cb, 0x5;
        LOG_MAX_HAIRPIN_NUM_PACKETS: 0x3d3, 0x5;
        LOG_MAX_WQ_SZ: 0x3db, 0x5;
        NIC_VPORT_CHANGE_EVENT: 0x3e0, 0x1;
        DISABLE_LOCAL_LB_UC: 0x3e1, 0x1;
        DISABLE_LOCAL_LB_MC: 0x3e2, 0x1;
        LOG_MIN_HAIRPIN_WQ_DATA_SZ: 0x3e3, 0x5;
        LOG_MAX_VLAN_LIST: 0x3eb, 0x5;
        AES_XTS_SINGLE_BLOCK_LE_TWEAK: 0x3f1, 0x1;
        AES_XTS_MULTI_BLOCK_BE_TWEAK: 0x3f2, 0x1;
        LOG_MAX_CURRENT_MC_LIST: 0x3f3, 0x5;
        LOG_MAX_CURRENT_UC_LIST: 0x3fb, 0x5;
        GENERAL_OBJ_TYPES: 0x400, 0x40;
        SQ_TS_FORMAT: 0x440, 0x2;
        RQ_TS_FORMAT: 0x442, 0x2;
        STEERING_FORMAT_VERSION: 0x444, 0x4;
        CREATE_QP_START_HINT: 0x448, 0x18;
        CRYPTO: 0x469, 0x1;
        MAX_NUM_EQS: 0x470, 0x10;
        SIGERR_DOMAIN_AND_SIG_TYPE: 0x480, 0x1;
        LOG_MAX_L2_TABLE: 0x483, 0x5;
        LOG_UAR_PAGE_SZ: 0x490, 0x10;
        DEVICE_FREQUENCY_MHZ: 0x4c0, 0x20;
        DEVICE_FREQUENCY_KHZ: 0x4e0, 0x20;
        CAPI: 0x500, 0x1;
        CREATE_PEC: 0x501, 0x1;
        NVMF_TARGET_OFFLOAD: 0x502, 0x1;
        CAPI_INVALIDATE: 0x503, 0x1;
        LOG_MAX_PASID: 0x51b, 0x5;
        NUM_OF_UARS_PER_PAGE: 0x520, 0x20;
        FLEX_PARSER_PROTOCOLS: 0x540, 0x20;
        FLEX_PARSER_HEADER_MODIFY: 0x570, 0x1;
        LOG_MAX_GUARANTEED_CONNECTIONS: 0x573, 0x5;
        LOG_MAX_DCT_CONNECTIONS: 0x57b, 0x5;
        LOG_MAX_ATOMIC_SIZE_QP: 0x580, 0x8;
        LOG_MAX_ATOMIC_SIZE_DC: 0x598, 0x8;
        MINI_CQE_RESP_STRIDE_INDEX: 0x5bc, 0x1;
        CQE_128_ALWAYS: 0x5bd, 0x1;
        CQE_COMPRESSION_128B: 0x5be, 0x1;
        CQE_COMPRESSION: 0x5bf, 0x1;
        CQE_COMPRESSION_TIMEOUT: 0x5c0, 0x10;
        CQE_COMPRESSION_MAX_NUM: 0x5d0, 0x10;
        FLEX_PARSER_ID_GTPU_DW_0: 0x5e8, 0x4;
        LOG_MAX_TM_OFFLOADED_OP_SIZE: 0x5ec, 0x4;
        TAG_MATCHING: 0x5f0, 0x1;
        RNDV_OFFLOAD_RC: 0x5f1, 0x1;
        RNDV_OFFLOAD_DC: 0x5f2, 0x1;
        LOG_TAG_MATCHING_LIST_SZ: 0x5f3, 0x5;
        LOG_MAX_XRQ: 0x5fb, 0x5;
        AFFILIATE_NIC_VPORT_CRITERIA: 0x600, 0x8;
        NATIVE_PORT_NUM: 0x608, 0x8;
        NUM_VHCA_PORTS: 0x610, 0x8;
        FLEX_PARSER_ID_GTPU_TEID: 0x618, 0x4;
        TRUSTED_VNIC_VHCA: 0x61d, 0x1;
        SW_OWNER_ID: 0x61e, 0x1;
        RESERVE_NOT_TO_USE: 0x61f, 0x1;
        SF: 0x680, 0x1;
        FLEX_PARSER_ID_GENEVE_OPT_0: 0x6c4, 0x4;
        FLEX_PARSER_ID_ICMP_DW1: 0x6c8, 0x4;
        FLEX_PARSER_ID_ICMP_DW0: 0x6cc, 0x4;
        FLEX_PARSER_ID_ICMPV6_DW1: 0x6d0, 0x4;
        FLEX_PARSER_ID_ICMPV6_DW0: 0x6d4, 0x4;
        FLEX_PARSER_ID_OUTER_FIRST_MPLS_OVER_GRE: 0x6d8, 0x4;
        FLEX_PARSER_ID_OUTER_FIRST_MPLS_OVER_UDP_LABEL: 0x6dc, 0x4;
        FLEX_PARSER_ID_GTPU_DW_2: 0x700, 0x4;
        FLEX_PARSER_ID_GTPU_FIRST_EXT_DW_0: 0x704, 0x4;
        DMA_MMO_QP: 0x748, 0x1;
        LOG_MAX_NUM_HEADER_MODIFY_ARGUMENT: 0x763, 0x5;
        LOG_HEADER_MODIFY_ARGUMENT_GRANULARITY: 0x76c, 0x4;
        LOG_HEADER_MODIFY_ARGUMENT_MAX_ALLOC: 0x773, 0x5;
        MATCH_DEFINER_FORMAT_SUPPORTED: 0x7c0, 0x40;
        @linux
        // Linux mlx5_ifc.h:1579 `mlx5_ifc_cmd_hca_cap_bits`: bits mlx5e reads that rdma-core
        // leaves reserved.
        UPLINK_FOLLOW: 0xb1, 0x1;
        /// The SQ's timestamp CQEs may go to another CQ (`sqc.ts_cqe_to_dest_cqn`; Linux
        /// core/en_main.c `mlx5e_create_sq`).
        TS_CQE_TO_DEST_CQN: 0xb2, 0x1;
        NIC_CAP_REG: 0x251, 0x1;
        ENHANCED_CQE_COMPRESSION: 0x5b0, 0x1;
    }

    /// `mlx5_ifc_cmd_hca_cap_2_bits`: rdma-core mlx5_ifc.h:1493.
    struct cmd_hca_cap_2[0x800] {
        LOG_RESERVED_QPN_GRANULARITY: 0x93, 0x5;
    }

    /// `mlx5_ifc_roce_cap_bits`: rdma-core mlx5_ifc.h:224.
    struct roce_cap[0x800] {
        SW_R_ROCE_SRC_UDP_PORT: 0x4, 0x1;
        FL_RC_QP_WHEN_ROCE_DISABLED: 0x5, 0x1;
        FL_RC_QP_WHEN_ROCE_ENABLED: 0x6, 0x1;
        QP_TS_FORMAT: 0x1e, 0x2;
    }

    /// `mlx5_ifc_atomic_caps_bits`: rdma-core mlx5_ifc.h:195.
    struct atomic_caps[0x800] {
        ATOMIC_REQ_8B_ENDIANNESS_MODE = "atomic_req_8B_endianness_mode": 0x40, 0x2;
        SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1 = "supported_atomic_req_8B_endianness_mode_1": 0x46, 0x1;
        ATOMIC_OPERATIONS: 0x90, 0x10;
        ATOMIC_SIZE_QP: 0xb0, 0x10;
        ATOMIC_SIZE_DC: 0xd0, 0x10;
        FETCH_ADD_PCI_ATOMIC: 0x280, 0x10;
        SWAP_PCI_ATOMIC: 0x290, 0x10;
        COMPARE_SWAP_PCI_ATOMIC: 0x2a0, 0x10;
    }

    /// `mlx5_ifc_odp_cap_bits`: rdma-core mlx5_ifc.h:1432.
    struct odp_cap[0x800] {
        SIG: 0x40, 0x1;
        RC_ODP_CAPS: 0x80, crate::odp_per_transport_service_cap::BITS;
        UC_ODP_CAPS: 0xa0, crate::odp_per_transport_service_cap::BITS;
        UD_ODP_CAPS: 0xc0, crate::odp_per_transport_service_cap::BITS;
        XRC_ODP_CAPS: 0xe0, crate::odp_per_transport_service_cap::BITS;
        DC_ODP_CAPS: 0x100, crate::odp_per_transport_service_cap::BITS;
    }

    /// `mlx5_ifc_odp_per_transport_service_cap_bits`: rdma-core mlx5_ifc.h:1422.
    struct odp_per_transport_service_cap[0x20] {
        SEND: 0x0, 0x1;
        RECEIVE: 0x1, 0x1;
        WRITE: 0x2, 0x1;
        READ: 0x3, 0x1;
        ATOMIC: 0x4, 0x1;
        SRQ_RECEIVE: 0x5, 0x1;
    }
}
