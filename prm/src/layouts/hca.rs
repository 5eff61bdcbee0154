//! HCA bring-up and teardown commands: ENABLE/DISABLE/INIT/TEARDOWN_HCA, ISSI, pages, NOP,
//! ACCESS_REGISTER.
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_enable_hca_in_bits`: rdma-core mlx5_ifc.h:4675.
    /// Input of [`crate::opcode::ENABLE_HCA`] (0x104).
    struct enable_hca_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        FUNCTION_ID: 0x50, 0x10;
    }

    /// `mlx5_ifc_enable_hca_out_bits`: rdma-core mlx5_ifc.h:4688.
    /// Output of [`crate::opcode::ENABLE_HCA`] (0x104).
    struct enable_hca_out[0x60] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_disable_hca_in_bits`: Linux mlx5_ifc.h:8441 (not in rdma-core).
    /// Input of [`crate::opcode::DISABLE_HCA`] (0x105).
    struct disable_hca_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        EMBEDDED_CPU_FUNCTION: 0x40, 0x1;
        FUNCTION_ID: 0x50, 0x10;
    }

    /// `mlx5_ifc_disable_hca_out_bits`: Linux mlx5_ifc.h:8432 (not in rdma-core).
    /// Output of [`crate::opcode::DISABLE_HCA`] (0x105).
    struct disable_hca_out[0x60] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_init_hca_in_bits`: rdma-core mlx5_ifc.h:4841.
    /// Input of [`crate::opcode::INIT_HCA`] (0x102).
    struct init_hca_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_init_hca_out_bits`: rdma-core mlx5_ifc.h:4832.
    /// Output of [`crate::opcode::INIT_HCA`] (0x102).
    struct init_hca_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_teardown_hca_in_bits`: rdma-core mlx5_ifc.h:4819.
    /// Input of [`crate::opcode::TEARDOWN_HCA`] (0x103).
    struct teardown_hca_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        PROFILE: 0x50, 0x10;
    }

    /// `mlx5_ifc_teardown_hca_out_bits`: rdma-core mlx5_ifc.h:4803.
    /// Output of [`crate::opcode::TEARDOWN_HCA`] (0x103).
    struct teardown_hca_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        STATE: 0x7f, 0x1;
    }

    /// `mlx5_ifc_query_issi_in_bits`: rdma-core mlx5_ifc.h:4712.
    /// Input of [`crate::opcode::QUERY_ISSI`] (0x10a).
    struct query_issi_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_query_issi_out_bits`: rdma-core mlx5_ifc.h:4697.
    /// Output of [`crate::opcode::QUERY_ISSI`] (0x10a).
    struct query_issi_out[0x380] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        CURRENT_ISSI: 0x50, 0x10;
        SUPPORTED_ISSI_DW0: 0x360, 0x20;
    }

    /// `mlx5_ifc_set_issi_in_bits`: rdma-core mlx5_ifc.h:4731.
    /// Input of [`crate::opcode::SET_ISSI`] (0x10b).
    struct set_issi_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        CURRENT_ISSI: 0x50, 0x10;
    }

    /// `mlx5_ifc_set_issi_out_bits`: rdma-core mlx5_ifc.h:4722.
    /// Output of [`crate::opcode::SET_ISSI`] (0x10b).
    struct set_issi_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_query_pages_in_bits`: rdma-core mlx5_ifc.h:4757.
    /// Input of [`crate::opcode::QUERY_PAGES`] (0x107).
    struct query_pages_in[0x80] {
        OPCODE: 0x0, 0x10;
        /// [`crate::pages::query`]: 1 BOOT, 2 INIT, 3 REGULAR.
        OP_MOD: 0x30, 0x10;
        FUNCTION_ID: 0x50, 0x10;
    }

    /// `mlx5_ifc_query_pages_out_bits`: rdma-core mlx5_ifc.h:4744.
    /// Output of [`crate::opcode::QUERY_PAGES`] (0x107).
    struct query_pages_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        EMBEDDED_CPU_FUNCTION: 0x40, 0x1;
        FUNCTION_ID: 0x50, 0x10;
        /// Signed: negative means the device returns pages (Linux core/pagealloc.c
        /// `req_pages_handler`).
        NUM_PAGES: 0x60, 0x20;
    }

    /// `mlx5_ifc_manage_pages_in_bits`: rdma-core mlx5_ifc.h:4783.
    /// Input of [`crate::opcode::MANAGE_PAGES`] (0x108).
    struct manage_pages_in[0x80] {
        OPCODE: 0x0, 0x10;
        /// [`crate::pages::manage`]: 0 CANT_GIVE, 1 GIVE, 2 TAKE (Linux core/pagealloc.c `MLX5_PAGES_*`).
        OP_MOD: 0x30, 0x10;
        EMBEDDED_CPU_FUNCTION: 0x40, 0x1;
        FUNCTION_ID: 0x50, 0x10;
        INPUT_NUM_ENTRIES: 0x60, 0x20;
        /// 8-byte big-endian bus addresses of 4 KiB pages; inlen = 16 + 8 * npages (Linux
        /// core/pagealloc.c `give_pages`).
        PAS: 0x80, 0x0, [0x40];
    }

    /// `mlx5_ifc_manage_pages_out_bits`: rdma-core mlx5_ifc.h:4770.
    /// Output of [`crate::opcode::MANAGE_PAGES`] (0x108).
    struct manage_pages_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        OUTPUT_NUM_ENTRIES: 0x40, 0x20;
        /// For TAKE: `output_num_entries` reclaimed page addresses.
        PAS: 0x80, 0x0, [0x40];
    }

    /// `mlx5_ifc_nop_in_bits`: Linux mlx5_ifc.h:7748 (not in rdma-core).
    /// Input of [`crate::opcode::NOP`] (0x80d).
    struct nop_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_nop_out_bits`: Linux mlx5_ifc.h:7739 (not in rdma-core).
    /// Output of [`crate::opcode::NOP`] (0x80d).
    struct nop_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }

    /// `mlx5_ifc_access_register_in_bits`: rdma-core mlx5_ifc.h:4862.
    /// Input of [`crate::opcode::ACCESS_REG`] (0x805).
    struct access_register_in[0x80] {
        OPCODE: 0x0, 0x10;
        /// 0 = write, 1 = read (rdma-core mlx5_vfio.c `mlx5_vfio_access_reg` writes `!write`).
        OP_MOD: 0x30, 0x10;
        REGISTER_ID: 0x50, 0x10;
        ARGUMENT: 0x60, 0x20;
        REGISTER_DATA: 0x80, 0x0, [0x20];
    }

    /// `mlx5_ifc_access_register_out_bits`: rdma-core mlx5_ifc.h:4851.
    /// Output of [`crate::opcode::ACCESS_REG`] (0x805).
    struct access_register_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        REGISTER_DATA: 0x80, 0x0, [0x20];
    }

    /// `mlx5_ifc_register_host_endianness_bits`: Linux mlx5_ifc.h:11044 (not in rdma-core).
    struct register_host_endianness[0x80] {
        HE: 0x0, 0x1;
    }

    /// `mlx5_ifc_query_special_contexts_in_bits`: Linux mlx5_ifc.h:5782 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_SPECIAL_CONTEXTS`] (0x203).
    struct query_special_contexts_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_query_special_contexts_out_bits`: Linux mlx5_ifc.h:5763 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_SPECIAL_CONTEXTS`] (0x203).
    struct query_special_contexts_out[0x100] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        DUMP_FILL_MKEY: 0x40, 0x20;
        RESD_LKEY: 0x60, 0x20;
        NULL_MKEY: 0x80, 0x20;
        TERMINATE_SCATTER_LIST_MKEY: 0xa0, 0x20;
        REPEATED_MKEY: 0xc0, 0x20;
    }

    /// `mlx5_ifc_query_adapter_in_bits`: Linux mlx5_ifc.h:7641 (not in rdma-core).
    /// Input of [`crate::opcode::QUERY_ADAPTER`] (0x101).
    struct query_adapter_in[0x80] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_query_adapter_out_bits`: Linux mlx5_ifc.h:7630 (not in rdma-core).
    /// Output of [`crate::opcode::QUERY_ADAPTER`] (0x101).
    struct query_adapter_out[0x880] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        QUERY_ADAPTER_STRUCT: 0x80, crate::query_adapter_param_block::BITS;
    }

    /// `mlx5_ifc_query_adapter_param_block_bits`: Linux mlx5_ifc.h:4641 (not in rdma-core).
    struct query_adapter_param_block[0x800] {
        /// IEEE OUI of the vendor (Linux mlx5_query_board_id / vendor id readers).
        IEEE_VENDOR_ID: 0xc8, 0x18;
        VSD_VENDOR_ID: 0xf0, 0x10;
        /// Vendor-specific data, 208 bytes.
        VSD: 0x100, 0x680, [0x8];
        /// Board PSID (ASCII, 16 bytes), what Linux reports as the board id.
        VSD_CONTD_PSID: 0x780, 0x80, [0x8];
    }

    /// `mlx5_ifc_set_driver_version_in_bits`: Linux mlx5_ifc.h:6294 (not in rdma-core).
    /// Input of [`crate::opcode::SET_DRIVER_VERSION`] (0x10d).
    struct set_driver_version_in[0x280] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        /// ASCII driver version string, 64 bytes.
        DRIVER_VERSION: 0x80, 0x200, [0x8];
    }

    /// `mlx5_ifc_set_driver_version_out_bits`: Linux mlx5_ifc.h:6286 (not in rdma-core).
    /// Output of [`crate::opcode::SET_DRIVER_VERSION`] (0x10d).
    struct set_driver_version_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }
}
