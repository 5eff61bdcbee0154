//! Event queues: the EQ context, CREATE/DESTROY/QUERY_EQ, the EQE and its event payloads.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_eqc_bits`: rdma-core mlx5_ifc.h:4991.
    struct eqc[0x200] {
        STATUS: 0x0, 0x4;
        EC: 0xd, 0x1;
        OI: 0xe, 0x1;
        ST: 0x14, 0x4;
        /// Quantized in units of page_size/64; 0 for page-aligned buffers (Linux ib/mem.c
        /// `__mlx5_umem_find_best_quantized_pgoff`).
        PAGE_OFFSET: 0x54, 0x6;
        LOG_EQ_SIZE: 0x63, 0x5;
        /// UAR index whose page holds this EQ's doorbell (+0x40).
        UAR_PAGE: 0x68, 0x18;
        /// MSI-X vector index. rdma-core: 8 bits at 0xb8; Linux: 12 bits at 0xb4 (same low bits;
        /// see [`crate::linux_layout::eqc`]; both `mlx5_ifc_eqc_bits`).
        INTR: 0xb8, 0x8;
        /// RELATIVE to 4 KiB: `page_shift - 12` (Linux core/eq.c `create_map_eq`).
        LOG_PAGE_SIZE: 0xc3, 0x5;
        CONSUMER_COUNTER: 0x148, 0x18;
        PRODUCER_COUNTER: 0x168, 0x18;
    }

    /// `mlx5_ifc_create_eq_in_bits`: rdma-core mlx5_ifc.h:5042.
    /// Input of [`crate::opcode::CREATE_EQ`] (0x301).
    struct create_eq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        EQ_CONTEXT_ENTRY: 0x80, crate::eqc::BITS;
        /// 4 big-endian 64-bit words; event type t sets bit t % 64 of word t / 64
        /// (Linux core/eq.c `create_async_eqs` writes `mask[0] = 1 << t`).
        EVENT_BITMASK: 0x2c0, 0x100, [0x40];
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_create_eq_out_bits`: rdma-core mlx5_ifc.h:5030.
    /// Output of [`crate::opcode::CREATE_EQ`] (0x301).
    struct create_eq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        /// EQ number (8 bits).
        EQ_NUMBER: 0x58, 0x8;
    }

    /// `mlx5_ifc_destroy_eq_in_bits`: rdma-core mlx5_ifc.h:5071.
    /// Input of [`crate::opcode::DESTROY_EQ`] (0x302).
    struct destroy_eq_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        EQ_NUMBER: 0x58, 0x8;
    }

    /// `mlx5_ifc_destroy_eq_out_bits`: rdma-core mlx5_ifc.h:5062.
    /// Output of [`crate::opcode::DESTROY_EQ`] (0x302).
    struct destroy_eq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_eq_in_bits`: Linux mlx5_ifc.h:7102 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_EQ`] (0x303).
    struct query_eq_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        EQ_NUMBER: 0x58, 0x8;
    }

    /// `mlx5_ifc_query_eq_out_bits`: Linux mlx5_ifc.h:7083 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_EQ`] (0x303).
    struct query_eq_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        EQ_CONTEXT_ENTRY: 0x80, crate::eqc::BITS;
        EVENT_BITMASK: 0x2c0, 0x40;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_eqe_bits`: Linux mlx5_ifc.h:11100 (not in rdma-core).
    struct eqe[0x200] {
        EVENT_TYPE: 0x8, 0x8;
        EVENT_SUB_TYPE: 0x18, 0x8;
        EVENT_DATA: 0x100, crate::event_auto::BITS;
        SIGNATURE: 0x1f0, 0x8;
        /// EQEs must be initialised with owner = 1 before CREATE_EQ (Linux core/eq.c
        /// `init_eq_buf`).
        OWNER: 0x1ff, 0x1;
    }

    /// `mlx5_ifc_event_auto_bits`: Linux mlx5_ifc.h:4959 (not in rdma-core).
    union event_auto[0xe0] {
        COMP_EVENT: 0x0, crate::comp_event::BITS;
        DCT_EVENTS: 0x0, 0xe0; // struct dct_events, not declared
        QP_EVENTS: 0x0, crate::qp_events::BITS;
        WQE_ASSOCIATED_PAGE_FAULT_EVENT: 0x0, 0xe0; // struct, not declared
        RDMA_PAGE_FAULT_EVENT: 0x0, 0xe0; // struct rdma_page_fault_event, not declared
        CQ_ERROR: 0x0, crate::cq_error::BITS;
        DROPPED_PACKET_LOGGED: 0x0, 0xe0; // struct dropped_packet_logged, not declared
        PORT_STATE_CHANGE_EVENT: 0x0, crate::port_state_change_event::BITS;
        GPIO_EVENT: 0x0, 0xe0; // struct gpio_event, not declared
        DB_BF_CONGESTION_EVENT: 0x0, 0xc0; // struct db_bf_congestion_event, not declared
        STALL_VL_EVENT: 0x0, 0xc0; // struct stall_vl_event, not declared
        CMD_INTER_COMP_EVENT: 0x0, crate::cmd_inter_comp_event::BITS;
    }

    /// `mlx5_ifc_comp_event_bits`: Linux mlx5_ifc.h:3418 (not in rdma-core).
    struct comp_event[0xe0] {
        CQ_NUMBER: 0xc8, 0x18;
    }

    /// `mlx5_ifc_cq_error_bits`: Linux mlx5_ifc.h:3352 (not in rdma-core).
    struct cq_error[0xe0] {
        CQN: 0x8, 0x18;
        SYNDROME: 0x58, 0x8;
    }

    /// `mlx5_ifc_qp_events_bits`: Linux mlx5_ifc.h:3401 (not in rdma-core).
    struct qp_events[0xe0] {
        TYPE: 0xa0, 0x8;
        QPN_RQN_SQN: 0xc8, 0x18;
    }

    /// `mlx5_ifc_pages_req_event_bits`: Linux mlx5_ifc.h:11091 (not in rdma-core).
    struct pages_req_event[0xe0] {
        FUNCTION_ID: 0x10, 0x10;
        /// Signed: > 0 give pages, < 0 the device returns pages.
        NUM_PAGES: 0x20, 0x20;
    }

    /// `mlx5_ifc_cmd_inter_comp_event_bits`: Linux mlx5_ifc.h:3264 (not in rdma-core).
    struct cmd_inter_comp_event[0xe0] {
        COMMAND_COMPLETION_VECTOR: 0x0, 0x20;
    }

    /// `mlx5_ifc_port_state_change_event_bits`: Linux mlx5_ifc.h:3298 (not in rdma-core).
    struct port_state_change_event[0xe0] {
        PORT_NUM: 0x40, 0x4;
    }
}
