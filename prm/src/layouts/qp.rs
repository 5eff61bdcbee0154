//! Queue pairs: the QP context, address path, CREATE/DESTROY/QUERY_QP and the state transitions.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_qpc_bits`: rdma-core mlx5_ifc.h:3611.
    struct qpc[0x740] {
        STATE: 0x0, 0x4;
        LAG_TX_PORT_AFFINITY: 0x4, 0x4;
        /// Service type ([`crate::qp::st`]; RC = 0).
        ST: 0x8, 0x8;
        ISOLATE_VL_TC: 0x12, 0x1;
        /// Path migration state; Linux creates QPs with MIGRATED (3) ([`crate::qp::pm`], Linux
        /// ib/qp.c `create_kernel_qp`).
        PM_STATE: 0x13, 0x2;
        REQ_E2E_CREDIT_MODE: 0x16, 0x2;
        OFFLOAD_TYPE: 0x18, 0x4;
        END_PADDING_MODE: 0x1c, 0x2;
        WQ_SIGNATURE: 0x20, 0x1;
        BLOCK_LB_MC: 0x21, 0x1;
        ATOMIC_LIKE_WRITE_EN: 0x22, 0x1;
        LATENCY_SENSITIVE: 0x23, 0x1;
        DRAIN_SIGERR: 0x25, 0x1;
        PD: 0x28, 0x18;
        /// IB path MTU enum (256 = 1 .. 4096 = 5: rdma-core verbs.h `enum ibv_mtu`, Linux
        /// include/rdma/ib_verbs.h `enum ib_mtu`; ib/qp.c `__mlx5_ib_modify_qp` copies it).
        MTU: 0x40, 0x3;
        LOG_MSG_MAX: 0x43, 0x5;
        /// log2(number of RQ WQEs) (Linux ib/qp.c `create_kernel_qp`).
        LOG_RQ_SIZE: 0x49, 0x4;
        /// log2(RQ WQE size) - 4, i.e. stride = 16 << log_rq_stride (Linux ib/qp.c
        /// `create_kernel_qp`).
        LOG_RQ_STRIDE: 0x4d, 0x3;
        NO_SQ: 0x50, 0x1;
        /// log2 of the number of 64-byte send WQEBBs, not of WQEs or bytes (Linux ib/qp.c
        /// `calc_sq_size`).
        LOG_SQ_SIZE: 0x51, 0x4;
        TS_FORMAT: 0x58, 0x2;
        DATA_IN_ORDER: 0x5a, 0x1;
        RLKY: 0x5b, 0x1;
        ULP_STATELESS_OFFLOAD_MODE: 0x5c, 0x4;
        COUNTER_SET_ID: 0x60, 0x8;
        /// UAR whose BlueFlame register rings this QP's send doorbell (Linux ib/qp.c
        /// `_create_kernel_qp`).
        UAR_PAGE: 0x68, 0x18;
        USER_INDEX: 0x88, 0x18;
        /// RELATIVE to 4 KiB: `page_shift - 12` (Linux ib/qp.c `_create_kernel_qp`).
        LOG_PAGE_SIZE: 0xa3, 0x5;
        REMOTE_QPN: 0xa8, 0x18;
        PRIMARY_ADDRESS_PATH: 0xc0, crate::ads::BITS;
        SECONDARY_ADDRESS_PATH: 0x220, crate::ads::BITS;
        LOG_ACK_REQ_FREQ: 0x380, 0x4;
        LOG_SRA_MAX: 0x388, 0x3;
        RETRY_COUNT: 0x38d, 0x3;
        RNR_RETRY: 0x390, 0x3;
        FRE: 0x394, 0x1;
        CUR_RNR_RETRY: 0x395, 0x3;
        CUR_RETRY_COUNT: 0x398, 0x3;
        NEXT_SEND_PSN: 0x3c8, 0x18;
        CQN_SND: 0x3e8, 0x18;
        DETH_SQPN: 0x408, 0x18;
        LAST_ACKED_PSN: 0x448, 0x18;
        SSN: 0x468, 0x18;
        LOG_RRA_MAX: 0x488, 0x3;
        ATOMIC_MODE: 0x48c, 0x4;
        RRE: 0x490, 0x1;
        RWE: 0x491, 0x1;
        RAE: 0x492, 0x1;
        /// Quantized in units of page_size/64; 0 for page-aligned buffers (Linux ib/mem.c
        /// `__mlx5_umem_find_best_quantized_pgoff`).
        PAGE_OFFSET: 0x494, 0x6;
        CD_SLAVE_RECEIVE: 0x49d, 0x1;
        CD_SLAVE_SEND: 0x49e, 0x1;
        CD_MASTER: 0x49f, 0x1;
        MIN_RNR_NAK: 0x4a3, 0x5;
        NEXT_RCV_PSN: 0x4a8, 0x18;
        XRCD: 0x4c8, 0x18;
        CQN_RCV: 0x4e8, 0x18;
        /// Bus address of the QP doorbell record (two big-endian dwords: RQ counter, SQ counter).
        DBR_ADDR: 0x500, 0x40;
        Q_KEY: 0x540, 0x20;
        RQ_TYPE: 0x565, 0x3;
        SRQN_RMPN_XRQN: 0x568, 0x18;
        RMSN: 0x588, 0x18;
        HW_SQ_WQEBB_COUNTER: 0x5a0, 0x10;
        SW_SQ_WQEBB_COUNTER: 0x5b0, 0x10;
        HW_RQ_COUNTER: 0x5c0, 0x20;
        SW_RQ_COUNTER: 0x5e0, 0x20;
        CGS: 0x62f, 0x1;
        CS_REQ: 0x630, 0x8;
        CS_RES: 0x638, 0x8;
        DC_ACCESS_KEY: 0x640, 0x40;
        DBR_UMEM_VALID: 0x683, 0x1;
        DBR_UMEM_ID: 0x720, 0x20;
    }

    /// `mlx5_ifc_ads_bits`: rdma-core mlx5_ifc.h:3559.
    struct ads[0x160] {
        FL: 0x0, 0x1;
        FREE_AR: 0x1, 0x1;
        PKEY_INDEX: 0x10, 0x10;
        GRH: 0x28, 0x1;
        MLID: 0x29, 0x7;
        RLID: 0x30, 0x10;
        ACK_TIMEOUT: 0x40, 0x5;
        /// SGID index of a GID programmed with SET_ROCE_ADDRESS (Linux ib/qp.c `mlx5_set_path`).
        SRC_ADDR_INDEX: 0x48, 0x8;
        STAT_RATE: 0x54, 0x4;
        HOP_LIMIT: 0x58, 0x8;
        TCLASS: 0x64, 0x8;
        FLOW_LABEL: 0x6c, 0x14;
        /// 16-byte remote GID / IP (byte array).
        RGID_RIP: 0x80, 0x80;
        F_DSCP: 0x104, 0x1;
        F_ECN: 0x105, 0x1;
        F_ETH_PRIO: 0x107, 0x1;
        ECN: 0x108, 0x2;
        DSCP: 0x10a, 0x6;
        UDP_SPORT: 0x110, 0x10;
        DEI_CFI: 0x120, 0x1;
        ETH_PRIO: 0x121, 0x3;
        SL: 0x124, 0x4;
        VHCA_PORT_NUM: 0x128, 0x8;
        /// First 2 bytes of the 6-byte remote MAC; Linux copies all 6 bytes starting here
        /// (ib/qp.c `mlx5_set_path`).
        RMAC_47_32: 0x130, 0x10;
        RMAC_31_0: 0x140, 0x20;
    }

    /// `mlx5_ifc_create_qp_in_bits`: rdma-core mlx5_ifc.h:3799.
    /// Input of [`crate::opcode::CREATE_QP`] (0x500).
    struct create_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
        WQ_UMEM_ID: 0x840, 0x20;
        WQ_UMEM_VALID: 0x860, 0x1;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_create_qp_out_bits`: rdma-core mlx5_ifc.h:3787.
    /// Output of [`crate::opcode::CREATE_QP`] (0x500).
    struct create_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        QPN: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_qp_in_bits`: rdma-core mlx5_ifc.h:3824.
    /// Input of [`crate::opcode::DESTROY_QP`] (0x501).
    struct destroy_qp_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        QPN: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_qp_out_bits`: Linux mlx5_ifc.h:8723 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_QP`] (0x501).
    struct destroy_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_qp_in_bits`: rdma-core mlx5_ifc.h:4027.
    /// Input of [`crate::opcode::QUERY_QP`] (0x50b).
    struct query_qp_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_qp_out_bits`: rdma-core mlx5_ifc.h:4008.
    /// Output of [`crate::opcode::QUERY_QP`] (0x50b).
    struct query_qp_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_rst2init_qp_in_bits`: rdma-core mlx5_ifc.h:3952.
    /// Input of [`crate::opcode::RST2INIT_QP`] (0x502).
    struct rst2init_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
    }

    /// `mlx5_ifc_rst2init_qp_out_bits`: rdma-core mlx5_ifc.h:3943.
    /// Output of [`crate::opcode::RST2INIT_QP`] (0x502).
    struct rst2init_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_init2init_qp_in_bits`: rdma-core mlx5_ifc.h:3857.
    /// Input of [`crate::opcode::INIT2INIT_QP`] (0x50e).
    struct init2init_qp_in[0xe80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPC_EXT: 0x40, 0x1;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
        OPT_PARAM_MASK_95_32: 0x840, 0x40;
        QPC_DATA_EXT: 0x880, 0x600; // struct qpc_ext, not declared
    }

    /// `mlx5_ifc_init2init_qp_out_bits`: rdma-core mlx5_ifc.h:3848.
    /// Output of [`crate::opcode::INIT2INIT_QP`] (0x50e).
    struct init2init_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_init2rtr_qp_in_bits`: rdma-core mlx5_ifc.h:3892.
    /// Input of [`crate::opcode::INIT2RTR_QP`] (0x503).
    struct init2rtr_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
    }

    /// `mlx5_ifc_init2rtr_qp_out_bits`: rdma-core mlx5_ifc.h:3883.
    /// Output of [`crate::opcode::INIT2RTR_QP`] (0x503).
    struct init2rtr_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_rtr2rts_qp_in_bits`: rdma-core mlx5_ifc.h:3922.
    /// Input of [`crate::opcode::RTR2RTS_QP`] (0x504).
    struct rtr2rts_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
    }

    /// `mlx5_ifc_rtr2rts_qp_out_bits`: rdma-core mlx5_ifc.h:3913.
    /// Output of [`crate::opcode::RTR2RTS_QP`] (0x504).
    struct rtr2rts_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_rts2rts_qp_in_bits`: rdma-core mlx5_ifc.h:3982.
    /// Input of [`crate::opcode::RTS2RTS_QP`] (0x505).
    struct rts2rts_qp_in[0xe80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPC_EXT: 0x40, 0x1;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
        OPT_PARAM_MASK_95_32: 0x840, 0x40;
        QPC_DATA_EXT: 0x880, 0x600; // struct qpc_ext, not declared
    }

    /// `mlx5_ifc_rts2rts_qp_out_bits`: rdma-core mlx5_ifc.h:3973.
    /// Output of [`crate::opcode::RTS2RTS_QP`] (0x505).
    struct rts2rts_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_sqerr2rts_qp_in_bits`: Linux mlx5_ifc.h:5077 (not in rdma-core).
    /// Input of [`crate::opcode::SQERR2RTS_QP`] (0x506).
    struct sqerr2rts_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
    }

    /// `mlx5_ifc_sqerr2rts_qp_out_bits`: Linux mlx5_ifc.h:5068 (not in rdma-core).
    /// Output of [`crate::opcode::SQERR2RTS_QP`] (0x506).
    struct sqerr2rts_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_sqd2rts_qp_in_bits`: Linux mlx5_ifc.h:5107 (not in rdma-core).
    /// Input of [`crate::opcode::SQD_RTS_QP`] (0x50c).
    struct sqd2rts_qp_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
        OPT_PARAM_MASK: 0x80, 0x20;
        QPC: 0xc0, crate::qpc::BITS;
    }

    /// `mlx5_ifc_sqd2rts_qp_out_bits`: Linux mlx5_ifc.h:5098 (not in rdma-core).
    /// Output of [`crate::opcode::SQD_RTS_QP`] (0x50c).
    struct sqd2rts_qp_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_qp_2err_in_bits`: Linux mlx5_ifc.h:7682 (not in rdma-core).
    /// Input of [`crate::opcode::QP_2ERR`] (0x507).
    struct qp_2err_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
    }

    /// `mlx5_ifc_qp_2err_out_bits`: Linux mlx5_ifc.h:7673 (not in rdma-core).
    /// Output of [`crate::opcode::QP_2ERR`] (0x507).
    struct qp_2err_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_qp_2rst_in_bits`: Linux mlx5_ifc.h:7660 (not in rdma-core).
    /// Input of [`crate::opcode::QP_2RST`] (0x50a).
    struct qp_2rst_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        QPN: 0x48, 0x18;
    }

    /// `mlx5_ifc_qp_2rst_out_bits`: Linux mlx5_ifc.h:7651 (not in rdma-core).
    /// Output of [`crate::opcode::QP_2RST`] (0x50a).
    struct qp_2rst_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }
}
