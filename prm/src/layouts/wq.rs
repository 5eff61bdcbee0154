//! Ethernet work queues and their objects: the WQ, SQ, RQ, TIS and TIR contexts and
//! CREATE/MODIFY/QUERY/DESTROY_{TIS,SQ,RQ,TIR}.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted. Fields after
//! `@linux` are Linux mlx5_ifc.h's where rdma-core's header leaves the bits reserved.

crate::prm_struct! {
    /// `mlx5_ifc_wq_bits`: Linux mlx5_ifc.h:2245 (not in rdma-core).
    struct wq[0x600] {
        /// [`crate::wq_type`]; mlx5e's SQ and non-striding RQ are `CYCLIC` (Linux core/en_main.c
        /// `mlx5e_create_sq`, core/en/params.c `mlx5e_build_rq_param`).
        WQ_TYPE: 0x0, 0x4;
        WQ_SIGNATURE: 0x4, 0x1;
        /// [`crate::wq_end_pad_mode`] (Linux core/en/params.c `rq_end_pad_mode`).
        END_PADDING_MODE: 0x5, 0x2;
        CD_SLAVE: 0x7, 0x1;
        HDS_SKIP_FIRST_SGE: 0x20, 0x1;
        LOG2_HDS_BUF_SIZE: 0x21, 0x3;
        PAGE_OFFSET: 0x2b, 0x5;
        LWM: 0x30, 0x10;
        /// Protection domain of the WQ's data (Linux core/en/params.c
        /// `mlx5e_build_sq_param_common`).
        PD: 0x48, 0x18;
        /// UAR index whose doorbell rings this SQ (Linux core/en_main.c `mlx5e_create_sq`: the
        /// bfreg index).
        UAR_PAGE: 0x68, 0x18;
        /// Bus address of the WQ's doorbell record (Linux core/en_main.c `mlx5e_create_sq` /
        /// `mlx5e_create_rq`).
        DBR_ADDR: 0x80, 0x40;
        HW_COUNTER: 0xc0, 0x20;
        SW_COUNTER: 0xe0, 0x20;
        /// log2(bytes per WQE stride): `ilog2(MLX5_SEND_WQE_BB)` = 6 for an SQ (Linux
        /// core/en/params.c `mlx5e_build_sq_param_common`), log2 of the receive WQE size for an RQ
        /// (`mlx5e_get_rqwq_log_stride`).
        LOG_WQ_STRIDE: 0x10c, 0x4;
        /// RELATIVE to 4 KiB: `page_shift - MLX5_ADAPTER_PAGE_SHIFT` (Linux core/en_main.c
        /// `mlx5e_create_sq`).
        LOG_WQ_PG_SZ: 0x113, 0x5;
        /// log2(number of WQE strides) (Linux core/en/params.c `mlx5e_build_sq_param`).
        LOG_WQ_SZ: 0x11b, 0x5;
        DBR_UMEM_VALID: 0x120, 0x1;
        WQ_UMEM_VALID: 0x121, 0x1;
        LOG_HAIRPIN_NUM_PACKETS: 0x123, 0x5;
        LOG_HAIRPIN_DATA_SZ: 0x12b, 0x5;
        LOG_WQE_NUM_OF_STRIDES: 0x134, 0x4;
        TWO_BYTE_SHIFT_EN: 0x138, 0x1;
        LOG_WQE_STRIDE_SIZE: 0x13d, 0x3;
        HEADERS_MKEY: 0x1c0, 0x20;
        SHAMPO_ENABLE: 0x1e0, 0x1;
        LOG_RESERVATION_SIZE: 0x1e5, 0x3;
        LOG_MAX_NUM_OF_PACKETS_PER_RESERVATION: 0x1ed, 0x3;
        LOG_HEADERS_ENTRY_SIZE: 0x1f6, 0x2;
        LOG_HEADERS_BUFFER_ENTRY_NUM: 0x1fc, 0x4;
        /// Physical addresses of the WQ buffer's pages (`cmd_pas`, 64 bits each; Linux
        /// core/en_main.c `mlx5e_create_sq` fills them with `mlx5_fill_page_frag_array`).
        PAS: 0x600, 0x0, [0x40];
    }

    /// `mlx5_ifc_sqc_bits`: rdma-core mlx5_ifc.h:4554; the fields after
    /// `@linux` are Linux mlx5_ifc.h:4040.
    struct sqc[0x780] {
        /// [`crate::sqc_state`]; created in `RST`, moved to `RDY` by MODIFY_SQ (Linux
        /// core/en_main.c `mlx5e_create_sq`, `mlx5e_modify_sq`).
        STATE: 0x8, 0x4;
        QOS_QUEUE_GROUP_ID: 0x110, 0x10;
        @linux
        RLKY: 0x0, 0x1;
        CD_MASTER: 0x1, 0x1;
        FRE: 0x2, 0x1;
        /// Flush the SQ's WQEs with error CQEs in the ERR state (set by Linux core/en_main.c
        /// `mlx5e_create_sq`).
        FLUSH_IN_ERROR_EN: 0x3, 0x1;
        ALLOW_MULTI_PKT_SEND_WQE: 0x4, 0x1;
        /// [`crate::inline_mode`]; written only when the device reports `wqe_inline_mode` =
        /// `VPORT_CONTEXT` (Linux core/en_main.c `mlx5e_create_sq`).
        MIN_WQE_INLINE_MODE: 0x5, 0x3;
        REG_UMR: 0xc, 0x1;
        ALLOW_SWP: 0xd, 0x1;
        HAIRPIN: 0xe, 0x1;
        TS_FORMAT: 0x1a, 0x2;
        USER_INDEX: 0x28, 0x18;
        /// Completion queue of the SQ's send completions.
        CQN: 0x48, 0x18;
        HAIRPIN_PEER_RQ: 0x68, 0x18;
        HAIRPIN_PEER_VHCA: 0x90, 0x10;
        TS_CQE_TO_DEST_CQN: 0xc8, 0x18;
        PACKET_PACING_RATE_LIMIT_INDEX: 0xf0, 0x10;
        /// Number of TISes listed (1; Linux core/en_main.c `mlx5e_create_sq`).
        TIS_LST_SZ: 0x100, 0x10;
        /// The (first) TIS the SQ's frames go out through.
        TIS_NUM_0: 0x168, 0x18;
        /// The SQ's work queue ([`crate::wq`]).
        WQ: 0x180, crate::wq::BITS;
    }

    /// `mlx5_ifc_rqc_bits`: Linux mlx5_ifc.h:4160 (not in rdma-core).
    struct rqc[0x780] {
        RLKY: 0x0, 0x1;
        DELAY_DROP_EN: 0x1, 0x1;
        /// Keep the FCS in received frames (Linux core/en/params.c `mlx5e_build_rq_param`).
        SCATTER_FCS: 0x2, 0x1;
        /// VLAN strip disable (Linux core/en/params.c `mlx5e_build_rq_param`).
        VSD: 0x3, 0x1;
        /// [`crate::rqc_mem_rq_type`]: `MEMORY_RQ_INLINE` = the WQ below holds the buffers.
        MEM_RQ_TYPE: 0x4, 0x4;
        /// [`crate::rqc_state`]; created in `RST`, moved to `RDY` by MODIFY_RQ (Linux
        /// core/en_main.c `mlx5e_create_rq`, `mlx5e_modify_rq_state`).
        STATE: 0x8, 0x4;
        FLUSH_IN_ERROR_EN: 0xd, 0x1;
        HAIRPIN: 0xe, 0x1;
        TS_FORMAT: 0x1a, 0x2;
        USER_INDEX: 0x28, 0x18;
        /// Completion queue of the RQ's receive completions.
        CQN: 0x48, 0x18;
        /// Q counter (ALLOC_Q_COUNTER) that counts this RQ's drops, e.g. `out_of_buffer` (Linux
        /// core/en_main.c `mlx5e_create_rq`).
        COUNTER_SET_ID: 0x60, 0x8;
        RMPN: 0x88, 0x18;
        HAIRPIN_PEER_SQ: 0xa8, 0x18;
        HAIRPIN_PEER_VHCA: 0xd0, 0x10;
        SHAMPO_NO_MATCH_ALIGNMENT_GRANULARITY: 0x126, 0x2;
        SHAMPO_MATCH_CRITERIA_TYPE: 0x12e, 0x2;
        RESERVATION_TIMEOUT: 0x130, 0x10;
        /// The RQ's work queue ([`crate::wq`]).
        WQ: 0x180, crate::wq::BITS;
    }

    /// `mlx5_ifc_tisc_bits`: rdma-core mlx5_ifc.h:4064.
    struct tisc[0x500] {
        STRICT_LAG_TX_PORT_AFFINITY: 0x0, 0x1;
        TLS_EN: 0x1, 0x1;
        LAG_TX_PORT_AFFINITY: 0x4, 0x4;
        /// Traffic class `<< 1` (Linux core/en_common.c `mlx5e_create_tises`).
        PRIO: 0xc, 0x4;
        /// Transport domain (ALLOC_TRANSPORT_DOMAIN) of the TIS (Linux core/en_common.c
        /// `mlx5e_create_tis`).
        TRANSPORT_DOMAIN: 0x128, 0x18;
        UNDERLAY_QPN: 0x148, 0x18;
        PD: 0x168, 0x18;
    }

    /// `mlx5_ifc_tirc_bits`: Linux mlx5_ifc.h:3952 (not in rdma-core).
    struct tirc[0x780] {
        /// [`crate::tirc_disp_type`]: `DIRECT` delivers to `inline_rqn` (Linux core/en/tir.c
        /// `mlx5e_tir_builder_build_inline`).
        DISP_TYPE: 0x20, 0x4;
        TLS_EN: 0x24, 0x1;
        LRO_TIMEOUT_PERIOD_USECS: 0x84, 0x10;
        PACKET_MERGE_MASK: 0x94, 0x4;
        LRO_MAX_IP_PAYLOAD_SIZE: 0x98, 0x8;
        /// The RQ a `DIRECT` TIR delivers to.
        INLINE_RQN: 0xe8, 0x18;
        RX_HASH_SYMMETRIC: 0x100, 0x1;
        TUNNELED_OFFLOAD_EN: 0x102, 0x1;
        INDIRECT_TABLE: 0x108, 0x18;
        /// [`crate::rx_hash_fn`]; `NONE` for a direct TIR (Linux core/en/tir.c
        /// `mlx5e_tir_builder_build_inline`).
        RX_HASH_FN: 0x120, 0x4;
        /// [`crate::tirc_self_lb_block`] bits: drop the function's own unicast / multicast
        /// loopback.
        SELF_LB_BLOCK: 0x126, 0x2;
        /// Transport domain of the TIR; self-loopback blocking works per domain.
        TRANSPORT_DOMAIN: 0x128, 0x18;
        RX_HASH_TOEPLITZ_KEY: 0x140, 0x140, [0x20];
        RX_HASH_FIELD_SELECTOR_OUTER: 0x280, crate::rx_hash_field_select::BITS;
        RX_HASH_FIELD_SELECTOR_INNER: 0x2a0, crate::rx_hash_field_select::BITS;
    }

    /// `mlx5_ifc_rx_hash_field_select_bits`: Linux mlx5_ifc.h:2229 (not in rdma-core).
    struct rx_hash_field_select[0x20] {
        L3_PROT_TYPE: 0x0, 0x1;
        L4_PROT_TYPE: 0x1, 0x1;
        SELECTED_FIELDS: 0x2, 0x1e;
    }

    /// `mlx5_ifc_create_tis_in_bits`: Linux mlx5_ifc.h:9200 (not in rdma-core).
    /// Input of [`crate::opcode::CREATE_TIS`] (0x912).
    struct create_tis_in[0x600] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CTX: 0x100, crate::tisc::BITS;
    }

    /// `mlx5_ifc_create_tis_out_bits`: rdma-core mlx5_ifc.h:5347; the fields after
    /// `@linux` are Linux mlx5_ifc.h:9188.
    /// Output of [`crate::opcode::CREATE_TIS`] (0x912).
    struct create_tis_out[0x80] {
        TISN: 0x48, 0x18;
        @linux
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_modify_tis_bitmask_bits`: rdma-core mlx5_ifc.h:4171.
    struct modify_tis_bitmask[0x40] {
        LAG_TX_PORT_AFFINITY: 0x3d, 0x1;
        STRICT_LAG_TX_PORT_AFFINITY: 0x3e, 0x1;
        PRIO: 0x3f, 0x1;
    }

    /// `mlx5_ifc_modify_tis_in_bits`: rdma-core mlx5_ifc.h:4180.
    /// Input of [`crate::opcode::MODIFY_TIS`] (0x913).
    struct modify_tis_in[0x600] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        TISN: 0x48, 0x18;
        BITMASK: 0x80, crate::modify_tis_bitmask::BITS;
        CTX: 0x100, crate::tisc::BITS;
    }

    /// `mlx5_ifc_modify_tis_out_bits`: rdma-core mlx5_ifc.h:4162.
    /// Output of [`crate::opcode::MODIFY_TIS`] (0x913).
    struct modify_tis_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_tis_in_bits`: rdma-core mlx5_ifc.h:4099.
    /// Input of [`crate::opcode::QUERY_TIS`] (0x915).
    struct query_tis_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        TISN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_tis_out_bits`: rdma-core mlx5_ifc.h:4088.
    /// Output of [`crate::opcode::QUERY_TIS`] (0x915).
    struct query_tis_out[0x580] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        TIS_CONTEXT: 0x80, crate::tisc::BITS;
    }

    /// `mlx5_ifc_destroy_tis_in_bits`: rdma-core mlx5_ifc.h:5356; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8532.
    /// Input of [`crate::opcode::DESTROY_TIS`] (0x914).
    struct destroy_tis_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        TISN: 0x48, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_tis_out_bits`: Linux mlx5_ifc.h:8523 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_TIS`] (0x914).
    struct destroy_tis_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_create_sq_in_bits`: Linux mlx5_ifc.h:9276 (not in rdma-core).
    /// Input of [`crate::opcode::CREATE_SQ`] (0x904).
    struct create_sq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CTX: 0x100, crate::sqc::BITS;
    }

    /// `mlx5_ifc_create_sq_out_bits`: rdma-core mlx5_ifc.h:5284; the fields after
    /// `@linux` are Linux mlx5_ifc.h:9264.
    /// Output of [`crate::opcode::CREATE_SQ`] (0x904).
    struct create_sq_out[0x80] {
        SQN: 0x48, 0x18;
        @linux
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_modify_sq_in_bits`: rdma-core mlx5_ifc.h:4580; the fields after
    /// `@linux` are Linux mlx5_ifc.h:7868.
    /// Input of [`crate::opcode::MODIFY_SQ`] (0x905).
    struct modify_sq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        /// The SQ's current state ([`crate::sqc_state`]); the new one is `ctx.state` (Linux
        /// core/en_main.c `mlx5e_modify_sq`).
        SQ_STATE: 0x40, 0x4;
        SQN: 0x48, 0x18;
        /// Which optional `ctx` fields to change (Linux core/en_main.c `mlx5e_modify_sq`: bit 0
        /// `packet_pacing_rate_limit_index`, bit 2 `qos_queue_group_id`); 0 for a state change.
        MODIFY_BITMASK: 0x80, 0x40;
        SQ_CONTEXT: 0x100, crate::sqc::BITS;
        @linux
        /// Linux's name of `sq_context`.
        CTX: 0x100, crate::sqc::BITS;
    }

    /// `mlx5_ifc_modify_sq_out_bits`: rdma-core mlx5_ifc.h:4571.
    /// Output of [`crate::opcode::MODIFY_SQ`] (0x905).
    struct modify_sq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_sq_in_bits`: Linux mlx5_ifc.h:5750 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_SQ`] (0x907).
    struct query_sq_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        SQN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_sq_out_bits`: Linux mlx5_ifc.h:5739 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_SQ`] (0x907).
    struct query_sq_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        SQ_CONTEXT: 0x100, crate::sqc::BITS;
    }

    /// `mlx5_ifc_destroy_sq_in_bits`: rdma-core mlx5_ifc.h:5293; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8598.
    /// Input of [`crate::opcode::DESTROY_SQ`] (0x906).
    struct destroy_sq_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        SQN: 0x48, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_sq_out_bits`: Linux mlx5_ifc.h:8589 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_SQ`] (0x906).
    struct destroy_sq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_create_rq_in_bits`: Linux mlx5_ifc.h:9354 (not in rdma-core).
    /// Input of [`crate::opcode::CREATE_RQ`] (0x908).
    struct create_rq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CTX: 0x100, crate::rqc::BITS;
    }

    /// `mlx5_ifc_create_rq_out_bits`: rdma-core mlx5_ifc.h:5305; the fields after
    /// `@linux` are Linux mlx5_ifc.h:9342.
    /// Output of [`crate::opcode::CREATE_RQ`] (0x908).
    struct create_rq_out[0x80] {
        RQN: 0x48, 0x18;
        @linux
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_modify_rq_in_bits`: Linux mlx5_ifc.h:7975 (not in rdma-core).
    /// Input of [`crate::opcode::MODIFY_RQ`] (0x909).
    struct modify_rq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        /// The RQ's current state ([`crate::rqc_state`]); the new one is `ctx.state` (Linux
        /// core/en_main.c `mlx5e_modify_rq_state`).
        RQ_STATE: 0x40, 0x4;
        RQN: 0x48, 0x18;
        /// [`crate::modify_rq_bitmask`]; 0 for a state change.
        MODIFY_BITMASK: 0x80, 0x40;
        CTX: 0x100, crate::rqc::BITS;
    }

    /// `mlx5_ifc_modify_rq_out_bits`: Linux mlx5_ifc.h:7960 (not in rdma-core).
    /// Output of [`crate::opcode::MODIFY_RQ`] (0x909).
    struct modify_rq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_rq_in_bits`: Linux mlx5_ifc.h:5861 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_RQ`] (0x90b).
    struct query_rq_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        RQN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_rq_out_bits`: Linux mlx5_ifc.h:5850 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_RQ`] (0x90b).
    struct query_rq_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        RQ_CONTEXT: 0x100, crate::rqc::BITS;
    }

    /// `mlx5_ifc_destroy_rq_in_bits`: rdma-core mlx5_ifc.h:5314; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8666.
    /// Input of [`crate::opcode::DESTROY_RQ`] (0x90a).
    struct destroy_rq_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        RQN: 0x48, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_rq_out_bits`: Linux mlx5_ifc.h:8657 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_RQ`] (0x90a).
    struct destroy_rq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_create_tir_in_bits`: Linux mlx5_ifc.h:9224 (not in rdma-core).
    /// Input of [`crate::opcode::CREATE_TIR`] (0x900).
    struct create_tir_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CTX: 0x100, crate::tirc::BITS;
    }

    /// `mlx5_ifc_create_tir_out_bits`: rdma-core mlx5_ifc.h:3763.
    /// Output of [`crate::opcode::CREATE_TIR`] (0x900).
    struct create_tir_out[0x80] {
        STATUS: 0x0, 0x8;
        ICM_ADDRESS_63_40: 0x8, 0x18;
        SYNDROME: 0x20, 0x20;
        ICM_ADDRESS_39_32: 0x40, 0x8;
        TIRN: 0x48, 0x18;
        ICM_ADDRESS_31_0: 0x60, 0x20;
    }

    /// `mlx5_ifc_modify_tir_bitmask_bits`: Linux mlx5_ifc.h:7820 (not in rdma-core).
    struct modify_tir_bitmask[0x40] {
        SELF_LB_EN: 0x3b, 0x1;
        HASH: 0x3d, 0x1;
        PACKET_MERGE: 0x3f, 0x1;
    }

    /// `mlx5_ifc_modify_tir_in_bits`: Linux mlx5_ifc.h:7840 (not in rdma-core).
    /// Input of [`crate::opcode::MODIFY_TIR`] (0x901).
    struct modify_tir_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        TIRN: 0x48, 0x18;
        BITMASK: 0x80, crate::modify_tir_bitmask::BITS;
        CTX: 0x100, crate::tirc::BITS;
    }

    /// `mlx5_ifc_modify_tir_out_bits`: Linux mlx5_ifc.h:7831 (not in rdma-core).
    /// Output of [`crate::opcode::MODIFY_TIR`] (0x901).
    struct modify_tir_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_tir_in_bits`: Linux mlx5_ifc.h:5698 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_TIR`] (0x903).
    struct query_tir_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        TIRN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_tir_out_bits`: Linux mlx5_ifc.h:5687 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_TIR`] (0x903).
    struct query_tir_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        TIR_CONTEXT: 0x100, crate::tirc::BITS;
    }

    /// `mlx5_ifc_destroy_tir_in_bits`: rdma-core mlx5_ifc.h:3775; the fields after
    /// `@linux` are Linux mlx5_ifc.h:8554.
    /// Input of [`crate::opcode::DESTROY_TIR`] (0x902).
    struct destroy_tir_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        TIRN: 0x48, 0x18;
        @linux
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_destroy_tir_out_bits`: Linux mlx5_ifc.h:8545 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_TIR`] (0x902).
    struct destroy_tir_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

}
