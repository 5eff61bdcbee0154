//! Command-interface constants: the command queue, the C views of a queue entry and a mailbox
//! block, delivery and command statuses, the initialization segment and the health buffer.
//!
//! Bit layouts of the same objects: [`crate::cmd_queue_entry`], [`crate::cmd_if_box`],
//! [`crate::initial_seg`], [`crate::health_buffer`], [`crate::mbox_in`], [`crate::mbox_out`].
//! Each item cites its source header or function; Linux means the OFED 24.07 kernel
//! tree wjz304/mlnx-ofed-kernel @2c0186b9c664, rdma-core means linux-rdma/rdma-core @691953d8d502.

/// Command queue parameters.
pub mod cmdq {
    /// `MLX5_MAX_COMMANDS` (Linux include/linux/mlx5/device.h:173).
    pub const MAX_COMMANDS: usize = 32;
    /// `MLX5_CMD_DATA_BLOCK_SIZE`: data bytes per mailbox block (Linux device.h:174).
    pub const DATA_BLOCK_SIZE: usize = 512;
    /// `MLX5_PCI_CMD_XPORT`: `cmd_layout.type` (Linux device.h:175).
    pub const PCI_CMD_XPORT: u8 = 7;
    /// `CMD_IF_REV`: required `cmdif_rev_fw_sub >> 16` (Linux core/cmd.c:71).
    pub const CMD_IF_REV: u16 = 5;
    /// `CMD_OWNER_SW`: `status_own` bit 0 clear (Linux include/linux/mlx5/driver.h:74).
    pub const OWNER_SW: u8 = 0x0;
    /// `CMD_OWNER_HW`: `status_own` bit 0 set (Linux driver.h:75).
    pub const OWNER_HW: u8 = 0x1;
    /// `sizeof(struct mlx5_cmd_layout)`; the PRM `cmd_queue_entry` is 512 bits.
    pub const ENTRY_SIZE: usize = 64;
    /// Bytes of command input and output carried inline in the entry (`in[4]`, `out[4]`);
    /// the rest goes to mailbox blocks.
    pub const INLINE_SIZE: usize = 16;
    /// `sizeof(struct mlx5_cmd_prot_block)` (Linux device.h:803).
    pub const MAILBOX_BLOCK_SIZE: usize = 576;
    /// Mailbox block alignment: Linux allocates blocks from a dma_pool aligned to
    /// `roundup_pow_of_two(576)` = 1024 (core/cmd.c:2391), matching the PRM's
    /// `cmd_if_box.next_pointer_31_10`; rdma-core vfio uses one 4 KiB page per block.
    pub const MAILBOX_BLOCK_ALIGN: usize = 1024;
    /// The queue is one 4 KiB-aligned page holding all entries.
    pub const QUEUE_PAGE_SIZE: usize = 4096;

    /// Mailbox blocks needed for a command input or output of `len` bytes:
    /// `DIV_ROUND_UP(len - min(16, len), 512)` (Linux core/cmd.c:218).
    pub const fn num_blocks(len: usize) -> usize {
        let rest = len.saturating_sub(INLINE_SIZE);
        rest.div_ceil(DATA_BLOCK_SIZE)
    }

    /// `~XOR` of `bytes` — the entry signature is `!xor8(entry[0..64])`, a block's `sig` is
    /// `!xor8(block[0..575])` and its `ctrl_sig` `!xor8(block[512..574])` (rsvd0 .. token);
    /// only needed when the checksum is enabled (Linux core/cmd.c:255, 256, 273; Linux disables
    /// it and clears `cmd_hca_cap.cmdif_checksum`, rdma-core vfio never writes signatures).
    pub const fn signature(bytes: &[u8]) -> u8 {
        let mut x = 0u8;
        let mut i = 0;
        while i < bytes.len() {
            x ^= bytes[i];
            i += 1;
        }
        !x
    }
}

/// Byte offsets in `struct mlx5_cmd_layout`, one 64-byte command queue entry
/// (Linux include/linux/mlx5/device.h:533).
pub mod cmd_layout {
    /// u8 `type` = [`super::cmdq::PCI_CMD_XPORT`].
    pub const TYPE: usize = 0;
    /// be32 `inlen` (rdma-core `ilen`): total input length.
    pub const INLEN: usize = 4;
    /// be64 `in_ptr` (rdma-core `iptr`): bus address of the first input mailbox block.
    pub const IN_PTR: usize = 8;
    /// be32 `in[4]`: first 16 bytes of input.
    pub const IN: usize = 16;
    /// be32 `out[4]`: first 16 bytes of output.
    pub const OUT: usize = 32;
    /// be64 `out_ptr` (rdma-core `optr`): bus address of the first output mailbox block.
    pub const OUT_PTR: usize = 48;
    /// be32 `outlen` (rdma-core `olen`): total output length.
    pub const OUTLEN: usize = 56;
    /// u8 `token`.
    pub const TOKEN: usize = 60;
    /// u8 `sig`.
    pub const SIG: usize = 61;
    /// u8 `status_own`: bit 0 ownership (1 = HW), bits 7:1 delivery status.
    pub const STATUS_OWN: usize = 63;
    /// Size of the entry.
    pub const SIZE: usize = 64;

    /// Delivery status from `status_own` (`status_own >> 1`, Linux core/cmd.c:1761).
    pub const fn delivery_status(status_own: u8) -> u8 {
        status_own >> 1
    }
}

/// Byte offsets in `struct mlx5_cmd_prot_block`, one 576-byte mailbox block
/// (Linux include/linux/mlx5/device.h:803). A block has no ownership or status byte; those
/// live in the queue entry.
pub mod cmd_prot_block {
    /// u8 `data[512]`.
    pub const DATA: usize = 0;
    /// u8 `rsvd0[48]` (start of the `ctrl_sig` coverage).
    pub const RSVD0: usize = 512;
    /// be64 `next`: bus address of the next block, 0 for the last.
    pub const NEXT: usize = 560;
    /// be32 `block_num`: index in the chain, 0 first.
    pub const BLOCK_NUM: usize = 568;
    /// u8 `token`: the command's token.
    pub const TOKEN: usize = 573;
    /// u8 `ctrl_sig`.
    pub const CTRL_SIG: usize = 574;
    /// u8 `sig`.
    pub const SIG: usize = 575;
    /// Size of a block.
    pub const SIZE: usize = 576;
}

/// Delivery status, `status_own >> 1` of a completed queue entry (Linux
/// drivers/net/ethernet/mellanox/mlx5/core/cmd.c @2c0186b9c664). Checked before the command status
/// in the output.
pub mod delivery_status {
    /// `MLX5_CMD_DELIVERY_STAT_OK` — no errors (cmd.c:80).
    pub const OK: u8 = 0x0;
    /// `MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR` — signature error (cmd.c:81).
    pub const SIGNAT_ERR: u8 = 0x1;
    /// `MLX5_CMD_DELIVERY_STAT_TOK_ERR` — token error (cmd.c:82).
    pub const TOK_ERR: u8 = 0x2;
    /// `MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR` — bad block number (cmd.c:83).
    pub const BAD_BLK_NUM_ERR: u8 = 0x3;
    /// `MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR` — output pointer not aligned to block size
    /// (cmd.c:84).
    pub const OUT_PTR_ALIGN_ERR: u8 = 0x4;
    /// `MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR` — input pointer not aligned to block size
    /// (cmd.c:85).
    pub const IN_PTR_ALIGN_ERR: u8 = 0x5;
    /// `MLX5_CMD_DELIVERY_STAT_FW_ERR` — firmware internal error (cmd.c:86).
    pub const FW_ERR: u8 = 0x6;
    /// `MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR` — command input length error (cmd.c:87).
    pub const IN_LENGTH_ERR: u8 = 0x7;
    /// `MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR` — command output length error (cmd.c:88).
    pub const OUT_LENGTH_ERR: u8 = 0x8;
    /// `MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR` — reserved fields not cleared (cmd.c:89).
    pub const RES_FLD_NOT_CLR_ERR: u8 = 0x9;
    /// `MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR` — bad command descriptor type (cmd.c:90).
    pub const CMD_DESCR_ERR: u8 = 0x10;
    /// `(C name, value)` for every constant above.
    pub const ALL: &[(&str, u8)] = &[
        ("MLX5_CMD_DELIVERY_STAT_OK", OK),
        ("MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR", SIGNAT_ERR),
        ("MLX5_CMD_DELIVERY_STAT_TOK_ERR", TOK_ERR),
        ("MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR", BAD_BLK_NUM_ERR),
        (
            "MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR",
            OUT_PTR_ALIGN_ERR,
        ),
        ("MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR", IN_PTR_ALIGN_ERR),
        ("MLX5_CMD_DELIVERY_STAT_FW_ERR", FW_ERR),
        ("MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR", IN_LENGTH_ERR),
        ("MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR", OUT_LENGTH_ERR),
        (
            "MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR",
            RES_FLD_NOT_CLR_ERR,
        ),
        ("MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR", CMD_DESCR_ERR),
    ];

    /// The C name of a delivery status.
    pub fn name(v: u8) -> Option<&'static str> {
        ALL.iter().find(|(_, x)| *x == v).map(|(n, _)| *n)
    }
}

/// Command status: byte 0 of the command output (`mbox_out.status`), with the syndrome in output
/// dword 1 (Linux include/linux/mlx5/device.h @2c0186b9c664; rdma-core
/// providers/mlx5/mlx5_ifc.h:145-160 has the same names and values).
pub mod cmd_status {
    /// `MLX5_CMD_STAT_OK` — OK (device.h:1483).
    pub const OK: u8 = 0x0;
    /// `MLX5_CMD_STAT_INT_ERR` — internal error (device.h:1484).
    pub const INT_ERR: u8 = 0x1;
    /// `MLX5_CMD_STAT_BAD_OP_ERR` — bad operation (device.h:1485).
    pub const BAD_OP_ERR: u8 = 0x2;
    /// `MLX5_CMD_STAT_BAD_PARAM_ERR` — bad parameter (device.h:1486).
    pub const BAD_PARAM_ERR: u8 = 0x3;
    /// `MLX5_CMD_STAT_BAD_SYS_STATE_ERR` — bad system state (device.h:1487).
    pub const BAD_SYS_STATE_ERR: u8 = 0x4;
    /// `MLX5_CMD_STAT_BAD_RES_ERR` — bad resource (device.h:1488).
    pub const BAD_RES_ERR: u8 = 0x5;
    /// `MLX5_CMD_STAT_RES_BUSY` — resource busy (device.h:1489).
    pub const RES_BUSY: u8 = 0x6;
    /// `MLX5_CMD_STAT_LIM_ERR` — limits exceeded (device.h:1490).
    pub const LIM_ERR: u8 = 0x8;
    /// `MLX5_CMD_STAT_BAD_RES_STATE_ERR` — bad resource state (device.h:1491).
    pub const BAD_RES_STATE_ERR: u8 = 0x9;
    /// `MLX5_CMD_STAT_IX_ERR` — bad index (device.h:1492).
    pub const IX_ERR: u8 = 0xa;
    /// `MLX5_CMD_STAT_NO_RES_ERR` — no resources (device.h:1493).
    pub const NO_RES_ERR: u8 = 0xf;
    /// `MLX5_CMD_STAT_BAD_INP_LEN_ERR` — bad input length (device.h:1494).
    pub const BAD_INP_LEN_ERR: u8 = 0x50;
    /// `MLX5_CMD_STAT_BAD_OUTP_LEN_ERR` — bad output length (device.h:1495).
    pub const BAD_OUTP_LEN_ERR: u8 = 0x51;
    /// `MLX5_CMD_STAT_BAD_QP_STATE_ERR` — bad QP state (device.h:1496).
    pub const BAD_QP_STATE_ERR: u8 = 0x10;
    /// `MLX5_CMD_STAT_BAD_PKT_ERR` — bad packet (discarded) (device.h:1497).
    pub const BAD_PKT_ERR: u8 = 0x30;
    /// `MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR` — bad size too many outstanding CQEs (device.h:1498).
    pub const BAD_SIZE_OUTS_CQES_ERR: u8 = 0x40;
    /// `(C name, value)` for every constant above.
    pub const ALL: &[(&str, u8)] = &[
        ("MLX5_CMD_STAT_OK", OK),
        ("MLX5_CMD_STAT_INT_ERR", INT_ERR),
        ("MLX5_CMD_STAT_BAD_OP_ERR", BAD_OP_ERR),
        ("MLX5_CMD_STAT_BAD_PARAM_ERR", BAD_PARAM_ERR),
        ("MLX5_CMD_STAT_BAD_SYS_STATE_ERR", BAD_SYS_STATE_ERR),
        ("MLX5_CMD_STAT_BAD_RES_ERR", BAD_RES_ERR),
        ("MLX5_CMD_STAT_RES_BUSY", RES_BUSY),
        ("MLX5_CMD_STAT_LIM_ERR", LIM_ERR),
        ("MLX5_CMD_STAT_BAD_RES_STATE_ERR", BAD_RES_STATE_ERR),
        ("MLX5_CMD_STAT_IX_ERR", IX_ERR),
        ("MLX5_CMD_STAT_NO_RES_ERR", NO_RES_ERR),
        ("MLX5_CMD_STAT_BAD_INP_LEN_ERR", BAD_INP_LEN_ERR),
        ("MLX5_CMD_STAT_BAD_OUTP_LEN_ERR", BAD_OUTP_LEN_ERR),
        ("MLX5_CMD_STAT_BAD_QP_STATE_ERR", BAD_QP_STATE_ERR),
        ("MLX5_CMD_STAT_BAD_PKT_ERR", BAD_PKT_ERR),
        (
            "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR",
            BAD_SIZE_OUTS_CQES_ERR,
        ),
    ];

    /// The C name of a command status.
    pub fn name(v: u8) -> Option<&'static str> {
        ALL.iter().find(|(_, x)| *x == v).map(|(n, _)| *n)
    }
}

/// Initialization segment at BAR0 offset 0: byte offsets of `struct mlx5_init_seg`
/// (Linux include/linux/mlx5/device.h:576; 8208 bytes). All registers are big-endian 32-bit.
pub mod init_seg {
    /// `fw_rev`: major = `& 0xffff`, minor = `>> 16` (Linux driver.h:1127, 1132).
    pub const FW_REV: usize = 0x0;
    /// `cmdif_rev_fw_sub`: cmdif revision = `>> 16` (must be 5), fw subminor = `& 0xffff`.
    pub const CMDIF_REV_FW_SUB: usize = 0x4;
    /// `cmdq_addr_h`: upper 32 bits of the command queue bus address (write first).
    pub const CMDQ_ADDR_H: usize = 0x10;
    /// `cmdq_addr_l_sz`: lower 32 bits of the 4 KiB-aligned queue address (write second); on
    /// read, bits 7:4 = log_cmdq_size, bits 3:0 = log_cmdq_stride, bits 10:8 = nic_interface.
    pub const CMDQ_ADDR_L_SZ: usize = 0x14;
    /// `cmd_dbell`: write `1 << slot` (big-endian) to ring a command.
    pub const CMD_DBELL: usize = 0x18;
    /// `initializing`: bit 31 set while firmware initializes.
    pub const INITIALIZING: usize = 0x1fc;
    /// `health`: the 64-byte health buffer ([`super::health`]).
    pub const HEALTH: usize = 0x200;
    /// `cmd_exec_to`: command timeout, encoded as in [`timeout_ms`].
    pub const CMD_EXEC_TO: usize = 0xff8;
    /// `cmd_q_init_to`: firmware-init timeout, encoded as in [`timeout_ms`].
    pub const CMD_Q_INIT_TO: usize = 0xffc;
    /// `internal_timer_h`: free-running HCA clock, high word.
    pub const INTERNAL_TIMER_H: usize = 0x1000;
    /// `internal_timer_l`.
    pub const INTERNAL_TIMER_L: usize = 0x1004;
    /// `health_counter`: low 24 bits increment while firmware is alive.
    pub const HEALTH_COUNTER: usize = 0x1010;
    /// `real_time_h`.
    pub const REAL_TIME_H: usize = 0x1040;
    /// `real_time_l`.
    pub const REAL_TIME_L: usize = 0x1044;
    /// `ieee1588_clk` (be64).
    pub const IEEE1588_CLK: usize = 0x2000;
    /// `ieee1588_clk_type`.
    pub const IEEE1588_CLK_TYPE: usize = 0x2008;
    /// `clr_intx` in the C struct; the PRM bits put `clear_int` at dword 0x100c instead
    /// (unresolved, legacy INTx only; Linux mlx5_ifc.h `mlx5_ifc_initial_seg_bits`).
    pub const CLR_INTX: usize = 0x200c;
    /// `sizeof(struct mlx5_init_seg)`.
    pub const SIZE: usize = 8208;

    /// Bit of `initializing` that is set while firmware initializes (Linux core/main.c:367).
    pub const INITIALIZING_BIT: u32 = 31;
    /// `MLX5_FW_RESET_SUPPORTED_OFFSET`: bit of `initializing` (Linux device.h:569).
    pub const FW_RESET_SUPPORTED_BIT: u32 = 30;
    /// Mask of the live counter in `health_counter` (rdma-core mlx5_vfio.c:2159).
    pub const HEALTH_COUNTER_MASK: u32 = 0xff_ffff;
    /// `MAX_MISSES`: unchanged `health_counter` polls before declaring the device dead
    /// (Linux core/health.c:49).
    pub const HEALTH_MAX_MISSES: u32 = 3;

    /// `log_cmdq_size` from a `cmdq_addr_l_sz` read (bits 7:4; Linux core/cmd.c:2407).
    pub const fn log_cmdq_size(cmdq_addr_l_sz: u32) -> u32 {
        (cmdq_addr_l_sz >> 4) & 0xf
    }
    /// `log_cmdq_stride` from a `cmdq_addr_l_sz` read (bits 3:0; Linux core/cmd.c:2408).
    pub const fn log_cmdq_stride(cmdq_addr_l_sz: u32) -> u32 {
        cmdq_addr_l_sz & 0xf
    }
    /// NIC interface state from `cmdq_addr_l_sz` (bits 10:8; Linux core/health.c:72).
    pub const fn nic_interface(cmdq_addr_l_sz: u32) -> u32 {
        (cmdq_addr_l_sz >> 8) & 7
    }
    /// Value to write to `cmdq_addr_l_sz` to request a NIC interface state
    /// (`(cur & 0xFFFFF000) | state << 8`, Linux core/health.c:80).
    pub const fn with_nic_interface(cmdq_addr_l_sz: u32, state: u32) -> u32 {
        (cmdq_addr_l_sz & 0xFFFF_F000) | (state << 8)
    }
    /// Timeout in ms from `cmd_exec_to` / `cmd_q_init_to`; `None` when the register is 0
    /// (then the Linux defaults in [`super::timeouts`] apply). `value[19:0]` counts units chosen
    /// by `value[31:29] & 3`: 0 = ms, 1 = s, 2 = min, 3 = h (Linux core/lib/tout.c:72, 79).
    pub const fn timeout_ms(value: u32) -> Option<u64> {
        if value == 0 {
            return None;
        }
        let count = (value & 0xfffff) as u64;
        let mul: u64 = match (value >> 29) & 3 {
            0 => 1,
            1 => 1000,
            2 => 60_000,
            _ => 3_600_000,
        };
        Some(count * mul)
    }

    /// NIC interface states (`MLX5_INITIAL_SEG_NIC_INTERFACE_*`, Linux
    /// include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod nic_interface {
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER` (mlx5_ifc.h:11244).
        pub const FULL_DRIVER: u8 = 0x0;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED` (mlx5_ifc.h:11245).
        pub const DISABLED: u8 = 0x1;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC` (mlx5_ifc.h:11246).
        pub const NO_DRAM_NIC: u8 = 0x2;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_SW_RESET` (mlx5_ifc.h:11247).
        pub const SW_RESET: u8 = 0x7;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_FULL_DRIVER` (mlx5_ifc.h:11251).
        pub const SUPPORTED_FULL_DRIVER: u8 = 0x0;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_DISABLED` (mlx5_ifc.h:11252).
        pub const SUPPORTED_DISABLED: u8 = 0x1;
        /// `MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_NO_DRAM_NIC` (mlx5_ifc.h:11253).
        pub const SUPPORTED_NO_DRAM_NIC: u8 = 0x2;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_INITIAL_SEG_NIC_INTERFACE_FULL_DRIVER", FULL_DRIVER),
            ("MLX5_INITIAL_SEG_NIC_INTERFACE_DISABLED", DISABLED),
            ("MLX5_INITIAL_SEG_NIC_INTERFACE_NO_DRAM_NIC", NO_DRAM_NIC),
            ("MLX5_INITIAL_SEG_NIC_INTERFACE_SW_RESET", SW_RESET),
            (
                "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_FULL_DRIVER",
                SUPPORTED_FULL_DRIVER,
            ),
            (
                "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_DISABLED",
                SUPPORTED_DISABLED,
            ),
            (
                "MLX5_INITIAL_SEG_NIC_INTERFACE_SUPPORTED_NO_DRAM_NIC",
                SUPPORTED_NO_DRAM_NIC,
            ),
        ];
    }
}

/// Health buffer, 64 bytes at init segment 0x200 (Linux `struct health_buffer`,
/// include/linux/mlx5/device.h:552). Byte offsets relative to the buffer.
///
/// rdma-core vfio's C view differs only in the reserved/unused words (`assert_var[5]`, no
/// `time`, `rfr` as a be32): `fw_ver`, `hw_id`, `irisc_index`, `synd`, `ext_synd` agree and the
/// rfr bit is the MSB of byte 0x38 in both.
pub mod health {
    /// be32 `assert_var[6]`.
    pub const ASSERT_VAR: usize = 0x0;
    /// be32 `assert_exit_ptr`.
    pub const ASSERT_EXIT_PTR: usize = 0x20;
    /// be32 `assert_callra`.
    pub const ASSERT_CALLRA: usize = 0x24;
    /// be32 `time`.
    pub const TIME: usize = 0x2c;
    /// be32 `fw_ver`: reads 0xffffffff when the PCI link is gone (Linux core/health.c:91).
    pub const FW_VER: usize = 0x30;
    /// be32 `hw_id`.
    pub const HW_ID: usize = 0x34;
    /// u8 `rfr_severity`: bit 7 = rfr, bit 3 = severity valid, bits 2:0 = severity.
    pub const RFR_SEVERITY: usize = 0x38;
    /// u8 `irisc_index`.
    pub const IRISC_INDEX: usize = 0x3c;
    /// u8 `synd`: health syndrome, 0 = healthy.
    pub const SYND: usize = 0x3d;
    /// be16 `ext_synd`.
    pub const EXT_SYND: usize = 0x3e;
    /// Size of the buffer.
    pub const SIZE: usize = 64;

    /// `MLX5_RFR_BIT_OFFSET` (Linux device.h:549).
    pub const RFR_BIT_OFFSET: u32 = 7;
    /// Severity-valid bit in `rfr_severity`.
    pub const SEVERITY_VALID_MASK: u8 = 0x8;
    /// Severity bits in `rfr_severity`.
    pub const SEVERITY_MASK: u8 = 0x7;

    /// Linux treats the device as failed when `rfr && synd != 0` (core/health.c:110).
    pub const fn is_fatal(rfr_severity: u8, synd: u8) -> bool {
        (rfr_severity >> RFR_BIT_OFFSET) != 0 && synd != 0
    }

    /// Health syndromes, PRM names (`MLX5_INITIAL_SEG_HEALTH_SYNDROME_*`, Linux
    /// include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod syndrome {
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR` (mlx5_ifc.h:11257).
        pub const FW_INTERNAL_ERR: u8 = 0x1;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_DEAD_IRISC` (mlx5_ifc.h:11258).
        pub const DEAD_IRISC: u8 = 0x7;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR` (mlx5_ifc.h:11259).
        pub const HW_FATAL_ERR: u8 = 0x8;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_CRC_ERR` (mlx5_ifc.h:11260).
        pub const FW_CRC_ERR: u8 = 0x9;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_FETCH_PCI_ERR` (mlx5_ifc.h:11261).
        pub const ICM_FETCH_PCI_ERR: u8 = 0xa;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PAGE_ERR` (mlx5_ifc.h:11262).
        pub const ICM_PAGE_ERR: u8 = 0xb;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ASYNCHRONOUS_EQ_BUF_OVERRUN` (mlx5_ifc.h:11263).
        pub const ASYNCHRONOUS_EQ_BUF_OVERRUN: u8 = 0xc;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_IN_ERR` (mlx5_ifc.h:11264).
        pub const EQ_IN_ERR: u8 = 0xd;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_INV` (mlx5_ifc.h:11265).
        pub const EQ_INV: u8 = 0xe;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_FFSER_ERR` (mlx5_ifc.h:11266).
        pub const FFSER_ERR: u8 = 0xf;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_HIGH_TEMP_ERR` (mlx5_ifc.h:11267).
        pub const HIGH_TEMP_ERR: u8 = 0x10;
        /// `MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PCI_POISONED_ERR` (mlx5_ifc.h:11268).
        pub const ICM_PCI_POISONED_ERR: u8 = 0x12;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_INTERNAL_ERR",
                FW_INTERNAL_ERR,
            ),
            ("MLX5_INITIAL_SEG_HEALTH_SYNDROME_DEAD_IRISC", DEAD_IRISC),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_HW_FATAL_ERR",
                HW_FATAL_ERR,
            ),
            ("MLX5_INITIAL_SEG_HEALTH_SYNDROME_FW_CRC_ERR", FW_CRC_ERR),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_FETCH_PCI_ERR",
                ICM_FETCH_PCI_ERR,
            ),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PAGE_ERR",
                ICM_PAGE_ERR,
            ),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ASYNCHRONOUS_EQ_BUF_OVERRUN",
                ASYNCHRONOUS_EQ_BUF_OVERRUN,
            ),
            ("MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_IN_ERR", EQ_IN_ERR),
            ("MLX5_INITIAL_SEG_HEALTH_SYNDROME_EQ_INV", EQ_INV),
            ("MLX5_INITIAL_SEG_HEALTH_SYNDROME_FFSER_ERR", FFSER_ERR),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_HIGH_TEMP_ERR",
                HIGH_TEMP_ERR,
            ),
            (
                "MLX5_INITIAL_SEG_HEALTH_SYNDROME_ICM_PCI_POISONED_ERR",
                ICM_PCI_POISONED_ERR,
            ),
        ];
    }

    /// Health syndromes, rdma-core vfio names (`MLX5_HEALTH_SYNDR_*`, rdma-core
    /// providers/mlx5/mlx5_vfio.c @691953d8d502).
    pub mod syndr {
        /// `MLX5_HEALTH_SYNDR_FW_ERR` — firmware internal error (mlx5_vfio.c:2060).
        pub const FW_ERR: u8 = 0x1;
        /// `MLX5_HEALTH_SYNDR_IRISC_ERR` — irisc not responding (mlx5_vfio.c:2061).
        pub const IRISC_ERR: u8 = 0x7;
        /// `MLX5_HEALTH_SYNDR_HW_UNRECOVERABLE_ERR` — unrecoverable hardware error
        /// (mlx5_vfio.c:2062).
        pub const HW_UNRECOVERABLE_ERR: u8 = 0x8;
        /// `MLX5_HEALTH_SYNDR_CRC_ERR` — firmware CRC error (mlx5_vfio.c:2063).
        pub const CRC_ERR: u8 = 0x9;
        /// `MLX5_HEALTH_SYNDR_FETCH_PCI_ERR` — ICM fetch PCI error (mlx5_vfio.c:2064).
        pub const FETCH_PCI_ERR: u8 = 0xa;
        /// `MLX5_HEALTH_SYNDR_HW_FTL_ERR` — HW fatal error (mlx5_vfio.c:2065).
        pub const HW_FTL_ERR: u8 = 0xb;
        /// `MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR` — async EQ buffer overrun (mlx5_vfio.c:2066).
        pub const ASYNC_EQ_OVERRUN_ERR: u8 = 0xc;
        /// `MLX5_HEALTH_SYNDR_EQ_ERR` — EQ error (mlx5_vfio.c:2067).
        pub const EQ_ERR: u8 = 0xd;
        /// `MLX5_HEALTH_SYNDR_EQ_INV` — Invalid EQ referenced (mlx5_vfio.c:2068).
        pub const EQ_INV: u8 = 0xe;
        /// `MLX5_HEALTH_SYNDR_FFSER_ERR` — FFSER error (mlx5_vfio.c:2069).
        pub const FFSER_ERR: u8 = 0xf;
        /// `MLX5_HEALTH_SYNDR_HIGH_TEMP` — High temperature (mlx5_vfio.c:2070).
        pub const HIGH_TEMP: u8 = 0x10;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_HEALTH_SYNDR_FW_ERR", FW_ERR),
            ("MLX5_HEALTH_SYNDR_IRISC_ERR", IRISC_ERR),
            (
                "MLX5_HEALTH_SYNDR_HW_UNRECOVERABLE_ERR",
                HW_UNRECOVERABLE_ERR,
            ),
            ("MLX5_HEALTH_SYNDR_CRC_ERR", CRC_ERR),
            ("MLX5_HEALTH_SYNDR_FETCH_PCI_ERR", FETCH_PCI_ERR),
            ("MLX5_HEALTH_SYNDR_HW_FTL_ERR", HW_FTL_ERR),
            (
                "MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR",
                ASYNC_EQ_OVERRUN_ERR,
            ),
            ("MLX5_HEALTH_SYNDR_EQ_ERR", EQ_ERR),
            ("MLX5_HEALTH_SYNDR_EQ_INV", EQ_INV),
            ("MLX5_HEALTH_SYNDR_FFSER_ERR", FFSER_ERR),
            ("MLX5_HEALTH_SYNDR_HIGH_TEMP", HIGH_TEMP),
        ];
    }

    /// Linux health sensor results (`MLX5_SENSOR_*`, Linux
    /// drivers/net/ethernet/mellanox/mlx5/core/health.c @2c0186b9c664).
    pub mod sensor {
        /// `MLX5_SENSOR_NO_ERR` (health.c:57).
        pub const NO_ERR: u8 = 0x0;
        /// `MLX5_SENSOR_PCI_COMM_ERR` (health.c:58).
        pub const PCI_COMM_ERR: u8 = 0x1;
        /// `MLX5_SENSOR_PCI_ERR` (health.c:59).
        pub const PCI_ERR: u8 = 0x2;
        /// `MLX5_SENSOR_NIC_DISABLED` (health.c:60).
        pub const NIC_DISABLED: u8 = 0x3;
        /// `MLX5_SENSOR_NIC_SW_RESET` (health.c:61).
        pub const NIC_SW_RESET: u8 = 0x4;
        /// `MLX5_SENSOR_FW_SYND_RFR` (health.c:62).
        pub const FW_SYND_RFR: u8 = 0x5;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_SENSOR_NO_ERR", NO_ERR),
            ("MLX5_SENSOR_PCI_COMM_ERR", PCI_COMM_ERR),
            ("MLX5_SENSOR_PCI_ERR", PCI_ERR),
            ("MLX5_SENSOR_NIC_DISABLED", NIC_DISABLED),
            ("MLX5_SENSOR_NIC_SW_RESET", NIC_SW_RESET),
            ("MLX5_SENSOR_FW_SYND_RFR", FW_SYND_RFR),
        ];
    }
}

/// Linux default timeouts in ms (Linux drivers/net/ethernet/mellanox/mlx5/core/lib/tout.c:11).
pub mod timeouts {
    /// `FW_PRE_INIT_TIMEOUT`: waiting for `initializing` to clear the first time.
    pub const FW_PRE_INIT_TIMEOUT_MS: u64 = 120_000;
    /// `FW_PRE_INIT_WAIT`: poll period for `initializing`.
    pub const FW_PRE_INIT_WAIT_MS: u64 = 2;
    /// `FW_INIT`: second wait for `initializing` after enabling the command queue.
    pub const FW_INIT_MS: u64 = 2000;
    /// `CMD`: command execution.
    pub const CMD_MS: u64 = 60_000;
    /// `HEALTH_POLL_INTERVAL`.
    pub const HEALTH_POLL_INTERVAL_MS: u64 = 2000;
    /// `TEARDOWN`: fast-teardown NIC-interface poll.
    pub const TEARDOWN_MS: u64 = 3000;
    /// `RECLAIM_PAGES`.
    pub const RECLAIM_PAGES_MS: u64 = 5000;
    /// `FW_RESET`.
    pub const FW_RESET_MS: u64 = 60_000;
}
