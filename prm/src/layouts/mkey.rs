//! Memory keys: the mkey context and CREATE/DESTROY/QUERY_MKEY.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_mkc_bits`: rdma-core mlx5_ifc.h:1592.
    struct mkc[0x200] {
        FREE: 0x1, 0x1;
        /// High 3 bits of the access mode (`mode >> 2`) (Linux ib/mr.c `mlx5_ib_get_dm_mr`).
        ACCESS_MODE_4_2: 0x3, 0x3;
        RELAXED_ORDERING_WRITE: 0xd, 0x1;
        SMALL_FENCE_ON_RDMA_READ_RESPONSE: 0xf, 0x1;
        UMR_EN: 0x10, 0x1;
        A: 0x11, 0x1;
        RW: 0x12, 0x1;
        RR: 0x13, 0x1;
        LW: 0x14, 0x1;
        LR: 0x15, 0x1;
        /// Low 2 bits of the access mode ([`crate::mkc_access_mode`]); Linux writes `mode & 0x3`
        /// (ib/mr.c `mlx5_ib_get_dm_mr`).
        ACCESS_MODE_1_0: 0x16, 0x2;
        QPN: 0x20, 0x18;
        /// Software-chosen 8-bit key variant: lkey/rkey = `mkey_index << 8 | mkey_7_0` (Linux
        /// core/mr.c `mlx5_core_create_mkey`).
        MKEY_7_0: 0x38, 0x8;
        LENGTH64: 0x60, 0x1;
        BSF_EN: 0x61, 0x1;
        SYNC_UMR: 0x62, 0x1;
        EXPECTED_SIGERR_COUNT: 0x65, 0x1;
        EN_RINVAL: 0x67, 0x1;
        PD: 0x68, 0x18;
        START_ADDR: 0x80, 0x40;
        LEN: 0xc0, 0x40;
        BSF_OCTWORD_SIZE: 0x100, 0x20;
        /// Number of 16-byte octowords of translation entries: `(npages + 1) / 2` for MTT,
        /// one per entry for KLM/KSM (Linux ib/mr.c `get_octo_len`, `get_mkc_octo_size`).
        TRANSLATIONS_OCTWORD_SIZE: 0x1a0, 0x20;
        RELAXED_ORDERING_READ: 0x1d9, 0x1;
        /// ABSOLUTE log2 of the translation page size (12 = 4 KiB), unlike the cqc/qpc/eqc
        /// `log_page_size`, which are relative to 4 KiB (Linux ib/mr.c `reg_create`). rdma-core
        /// declares 5 bits at 0x1db; Linux declares 6 bits at 0x1da (see
        /// [`crate::linux_layout::mkc`]); both end at bit 0x1df.
        LOG_PAGE_SIZE: 0x1db, 0x5;
        CRYPTO_EN: 0x1e3, 0x2;
    }

    /// `mlx5_ifc_create_mkey_in_bits`: rdma-core mlx5_ifc.h:1656.
    /// Input of [`crate::opcode::CREATE_MKEY`] (0x200).
    struct create_mkey_in[0x880] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        /// 1 = the low MTT bits carry READ/WRITE access (MTT_PRESENT = 3); rdma-core vfio always
        /// sets it, Linux only with cap `pg` (ib/mr.c `reg_create`).
        PG_ACCESS: 0x60, 0x1;
        MKEY_UMEM_VALID: 0x61, 0x1;
        MEMORY_KEY_MKEY_ENTRY: 0x80, crate::mkc::BITS;
        /// Same value as `mkc.translations_octword_size` (Linux ib/mr.c `reg_create`).
        TRANSLATIONS_OCTWORD_ACTUAL_SIZE: 0x300, 0x20;
        /// Translation entries. Declared with 32-bit elements in the header; an MTT entry is one
        /// 8-byte big-endian page address (use `.with_elem_width(64)`), a KLM/KSM entry is 16 bytes
        /// (Linux ib/mem.c `mlx5_ib_populate_pas`; include/linux/mlx5/qp.h `mlx5_klm`, `mlx5_ksm`).
        KLM_PAS_MTT: 0x880, 0x0, [0x20];
    }

    /// `mlx5_ifc_create_mkey_out_bits`: rdma-core mlx5_ifc.h:1644.
    /// Output of [`crate::opcode::CREATE_MKEY`] (0x200).
    struct create_mkey_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        /// 24-bit mkey index; the usable key is `mkey_index << 8 | mkc.mkey_7_0` (Linux
        /// `mlx5_core_create_mkey`).
        MKEY_INDEX: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_mkey_in_bits`: rdma-core mlx5_ifc.h:1689.
    /// Input of [`crate::opcode::DESTROY_MKEY`] (0x202).
    struct destroy_mkey_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
        /// `mkey >> 8` (Linux include/linux/mlx5/driver.h `mlx5_mkey_to_idx`).
        MKEY_INDEX: 0x48, 0x18;
    }

    /// `mlx5_ifc_destroy_mkey_out_bits`: rdma-core mlx5_ifc.h:1680.
    /// Output of [`crate::opcode::DESTROY_MKEY`] (0x202).
    struct destroy_mkey_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_mkey_in_bits`: Linux mlx5_ifc.h:6194 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_MKEY`] (0x201).
    struct query_mkey_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        /// `mkey >> 8` (Linux include/linux/mlx5/driver.h `mlx5_mkey_to_idx`).
        MKEY_INDEX: 0x48, 0x18;
        PG_ACCESS: 0x60, 0x1;
    }

    /// `mlx5_ifc_query_mkey_out_bits`: Linux mlx5_ifc.h:6177 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_MKEY`] (0x201).
    struct query_mkey_out[0x980] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        MEMORY_KEY_MKEY_ENTRY: 0x80, crate::mkc::BITS;
        BSF0_KLM0_PAS_MTT0_1: 0x880, 0x80;
        BSF1_KLM1_PAS_MTT2_3: 0x900, 0x80;
    }

    /// `mlx5_ifc_mtt_bits`: rdma-core mlx5_ifc.h:5128.
    struct mtt[0x40] {
        PTAG_63_32: 0x0, 0x20;
        PTAG_31_8: 0x20, 0x18;
        WR_EN: 0x3e, 0x1;
        RD_EN: 0x3f, 0x1;
    }
}
