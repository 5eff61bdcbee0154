//! Completion queues: the CQ context and CREATE/DESTROY/QUERY/MODIFY_CQ.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_cqc_bits`: Linux mlx5_ifc.h:4577 (not in rdma-core).
    struct cqc[0x200] {
        STATUS: 0x0, 0x4;
        DBR_UMEM_VALID: 0x6, 0x1;
        APU_CQ: 0x7, 0x1;
        /// 0 = 64-byte CQE, 1 = 128-byte, 2 = 128-byte padded ([`crate::cqe::stride`]) (Linux
        /// include/linux/mlx5/cq.h `CQE_STRIDE_*`).
        CQE_SZ: 0x8, 0x3;
        CC: 0xb, 0x1;
        SCQE_BREAK_MODERATION_EN: 0xd, 0x1;
        OI: 0xe, 0x1;
        CQ_PERIOD_MODE: 0xf, 0x2;
        CQE_COMP_EN: 0x11, 0x1;
        MINI_CQE_RES_FORMAT: 0x12, 0x2;
        ST: 0x14, 0x4;
        CQE_COMPRESSION_LAYOUT: 0x1e, 0x2;
        /// Quantized in units of page_size/64; 0 for page-aligned buffers (Linux ib/mem.c
        /// `__mlx5_umem_find_best_quantized_pgoff`).
        PAGE_OFFSET: 0x54, 0x6;
        /// log2(number of CQEs) (Linux ib/cq.c `mlx5_ib_create_cq`).
        LOG_CQ_SIZE: 0x63, 0x5;
        /// UAR index (Linux ib/cq.c `mlx5_ib_create_cq`).
        UAR_PAGE: 0x68, 0x18;
        CQ_PERIOD: 0x84, 0xc;
        CQ_MAX_COUNT: 0x90, 0x10;
        /// EQ number that receives this CQ's completion events (Linux ib/cq.c `mlx5_ib_create_cq`).
        C_EQN_OR_APU_ELEMENT: 0xa0, 0x20;
        /// RELATIVE to 4 KiB: `page_shift - 12`; 0 = 4 KiB (Linux ib/cq.c `create_cq_user`).
        LOG_PAGE_SIZE: 0xc3, 0x5;
        LAST_NOTIFIED_INDEX: 0x108, 0x18;
        LAST_SOLICIT_INDEX: 0x128, 0x18;
        CONSUMER_COUNTER: 0x148, 0x18;
        PRODUCER_COUNTER: 0x168, 0x18;
        /// Bus address of the CQ doorbell record (Linux ib/cq.c `mlx5_ib_create_cq`).
        DBR_ADDR: 0x1c0, 0x40;
    }

    /// `mlx5_ifc_create_cq_in_bits`: Linux mlx5_ifc.h:9680 (not in rdma-core).
    /// Input of [`crate::opcode::CREATE_CQ`] (0x400).
    struct create_cq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CQ_CONTEXT: 0x80, crate::cqc::BITS;
        CQ_UMEM_VALID: 0x2e0, 0x1;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_create_cq_out_bits`: rdma-core mlx5_ifc.h:5221.
    /// Output of [`crate::opcode::CREATE_CQ`] (0x400).
    struct create_cq_out[0x80] {
        CQN: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_cq_in_bits`: rdma-core mlx5_ifc.h:5230.
    /// Input of [`crate::opcode::DESTROY_CQ`] (0x401).
    struct destroy_cq_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        CQN: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_cq_out_bits`: Linux mlx5_ifc.h:8897 (not in rdma-core).
    /// Output of [`crate::opcode::DESTROY_CQ`] (0x401).
    struct destroy_cq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_cq_in_bits`: Linux mlx5_ifc.h:7514 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_CQ`] (0x402).
    struct query_cq_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        CQN: 0x48, 0x18;
    }

    /// `mlx5_ifc_query_cq_out_bits`: Linux mlx5_ifc.h:7499 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_CQ`] (0x402).
    struct query_cq_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        CQ_CONTEXT: 0x80, crate::cqc::BITS;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_modify_cq_in_bits`: rdma-core mlx5_ifc.h:8116.
    /// Input of [`crate::opcode::MODIFY_CQ`] (0x403); op_mod [`crate::cq_modify::OPMOD_RESIZE`]
    /// resizes (Linux ib/cq.c `mlx5_ib_resize_cq`).
    struct modify_cq_in[0x880] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        CQN: 0x48, 0x18;
        /// The union `modify_field_select` / `resize_field_select`: for a resize, the
        /// [`crate::cq_modify`] `MASK_*` bits.
        MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT: 0x60, 0x20;
        CQ_CONTEXT: 0x80, crate::cqc::BITS;
        CQ_UMEM_VALID: 0x2e0, 0x1;
        PAS: 0x880, 0x0, [0x40];
    }

    /// `mlx5_ifc_modify_cq_out_bits`: rdma-core mlx5_ifc.h:8102.
    /// Output of [`crate::opcode::MODIFY_CQ`] (0x403).
    struct modify_cq_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_cqe_error_syndrome_bits`: Linux mlx5_ifc.h:5923 (not in rdma-core).
    struct cqe_error_syndrome[0x20] {
        HW_ERROR_SYNDROME: 0x0, 0x8;
        HW_SYNDROME_TYPE: 0x8, 0x4;
        VENDOR_ERROR_SYNDROME: 0x10, 0x8;
        SYNDROME: 0x18, 0x8;
    }
}
