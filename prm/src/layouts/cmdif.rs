//! Command interface and initialization segment (BAR0).
//!
//! Declarations in mlx5_ifc.h names; `NAME: offset, width;` in bits from the MSB of the
//! first big-endian dword (see [`crate::prm_struct`]). Reserved fields are omitted.

crate::prm_struct! {
    /// `mlx5_ifc_initial_seg_bits`: Linux mlx5_ifc.h:11271 (not in rdma-core).
    struct initial_seg[0x20060] {
        FW_REV_MINOR: 0x0, 0x10;
        FW_REV_MAJOR: 0x10, 0x10;
        /// Must be 5 ([`crate::cmdq::CMD_IF_REV`]).
        CMD_INTERFACE_REV: 0x20, 0x10;
        FW_REV_SUBMINOR: 0x30, 0x10;
        CMDQ_PHY_ADDR_63_32: 0x80, 0x20;
        CMDQ_PHY_ADDR_31_12: 0xa0, 0x14;
        NIC_INTERFACE: 0xb6, 0x2;
        LOG_CMDQ_SIZE: 0xb8, 0x4;
        LOG_CMDQ_STRIDE: 0xbc, 0x4;
        COMMAND_DOORBELL_VECTOR: 0xc0, 0x20;
        /// Bit 31 of the dword at 0x1fc: 1 while firmware is initializing; poll until 0.
        INITIALIZING: 0xfe0, 0x1;
        NIC_INTERFACE_SUPPORTED: 0xfe5, 0x3;
        EMBEDDED_CPU: 0xfe8, 0x1;
        HEALTH_BUFFER: 0x1000, crate::health_buffer::BITS;
        NO_DRAM_NIC_OFFSET: 0x1200, 0x20;
        /// PRM puts clear_int at dword 0x100c; the C `mlx5_init_seg` has `clr_intx` at 0x200c.
        /// Unresolved; legacy INTx only (Linux device.h `mlx5_init_seg`,
        /// `mlx5_ifc_initial_seg_bits`).
        CLEAR_INT: 0x807f, 0x1;
        HEALTH_SYNDROME: 0x8080, 0x8;
        /// Increments while firmware is alive; 3 unchanged polls = dead.
        HEALTH_COUNTER: 0x8088, 0x18;
    }

    /// `mlx5_ifc_health_buffer_bits`: Linux mlx5_ifc.h:4975 (not in rdma-core).
    struct health_buffer[0x200] {
        ASSERT_EXISTPTR: 0x100, 0x20;
        ASSERT_CALLRA: 0x120, 0x20;
        TIME: 0x160, 0x20;
        FW_VERSION: 0x180, 0x20;
        HW_ID: 0x1a0, 0x20;
        RFR: 0x1c0, 0x1;
        VALID: 0x1c4, 0x1;
        SEVERITY: 0x1c5, 0x3;
        IRISC_INDEX: 0x1e0, 0x8;
        SYND: 0x1e8, 0x8;
        EXT_SYND: 0x1f0, 0x10;
    }

    /// `mlx5_ifc_cmd_queue_entry_bits`: Linux mlx5_ifc.h:11120 (not in rdma-core).
    struct cmd_queue_entry[0x200] {
        /// 7 = PCI command transport ([`crate::cmdq::PCI_CMD_XPORT`]).
        TYPE: 0x0, 0x8;
        INPUT_LENGTH: 0x20, 0x20;
        INPUT_MAILBOX_POINTER_63_32: 0x40, 0x20;
        /// Mailbox pointer bits 31..9: the pointer's low 9 bits are not representable.
        INPUT_MAILBOX_POINTER_31_9: 0x60, 0x17;
        COMMAND_INPUT_INLINE_DATA: 0x80, 0x80;
        COMMAND_OUTPUT_INLINE_DATA: 0x100, 0x80;
        OUTPUT_MAILBOX_POINTER_63_32: 0x180, 0x20;
        /// Mailbox pointer bits 31..9: the pointer's low 9 bits are not representable.
        OUTPUT_MAILBOX_POINTER_31_9: 0x1a0, 0x17;
        OUTPUT_LENGTH: 0x1c0, 0x20;
        /// Non-zero token, also copied into every mailbox block (Linux core/cmd.c `alloc_token`).
        TOKEN: 0x1e0, 0x8;
        SIGNATURE: 0x1e8, 0x8;
        /// Delivery status (`status_own >> 1`), [`crate::delivery_status`] (Linux core/cmd.c
        /// `mlx5_cmd_comp_handler`).
        STATUS: 0x1f8, 0x7;
        /// 1 = owned by hardware; software sets it when posting and polls for 0.
        OWNERSHIP: 0x1ff, 0x1;
    }

    /// `mlx5_ifc_cmd_if_box_bits`: Linux mlx5_ifc.h:11168 (not in rdma-core).
    struct cmd_if_box[0x1200] {
        MAILBOX_DATA: 0x0, 0x1000;
        NEXT_POINTER_63_32: 0x1180, 0x20;
        /// Bits 31..10 of the next block's address: the PRM layout implies 1 KiB-aligned blocks
        /// (the Linux dma_pool aligns its 576-byte blocks to 1024).
        NEXT_POINTER_31_10: 0x11a0, 0x16;
        BLOCK_NUMBER: 0x11c0, 0x20;
        /// The command's token (same as the queue entry's) (Linux core/cmd.c `mlx5_copy_to_msg`).
        TOKEN: 0x11e8, 0x8;
        CTRL_SIGNATURE: 0x11f0, 0x8;
        SIGNATURE: 0x11f8, 0x8;
    }

    /// `mlx5_ifc_cmd_in_bits`: Linux mlx5_ifc.h:11158 (not in rdma-core).
    struct cmd_in[0x40] {
        OPCODE: 0x0, 0x10;
        OP_MOD: 0x30, 0x10;
        COMMAND: 0x40, 0x0, [0x20];
    }

    /// `mlx5_ifc_cmd_out_bits`: Linux mlx5_ifc.h:11149 (not in rdma-core).
    struct cmd_out[0x60] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
        COMMAND_OUTPUT: 0x40, 0x20;
    }

    /// `mlx5_ifc_mbox_in_bits`: rdma-core mlx5_ifc.h:4665.
    struct mbox_in[0x80] {
        OPCODE: 0x0, 0x10;
        UID: 0x10, 0x10;
        OP_MOD: 0x30, 0x10;
    }

    /// `mlx5_ifc_mbox_out_bits`: rdma-core mlx5_ifc.h:4656.
    struct mbox_out[0x80] {
        STATUS: 0x0, 0x8;
        SYNDROME: 0x20, 0x20;
    }
}
