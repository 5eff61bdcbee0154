//! Constants for memory keys, queue pairs, events and event queues.
//!
//! Sources: Linux headers and functions of the OFED 24.07 tree (wjz304/mlnx-ofed-kernel
//! @2c0186b9c664), cited per item; the QP enums are Linux include/linux/mlx5/qp.h.

/// mkey access modes, split over `mkc.access_mode_1_0` (low 2 bits) and `mkc.access_mode_4_2`
/// (high 3 bits) (`MLX5_MKC_ACCESS_MODE_*`, Linux include/linux/mlx5/mlx5_ifc.h:4280-4285;
/// ib/mr.c `mlx5_ib_get_dm_mr` splits them).
pub mod mkc_access_mode {
    /// `MLX5_MKC_ACCESS_MODE_PA`: physical addresses, no translation.
    pub const PA: u8 = 0x0;
    /// `MLX5_MKC_ACCESS_MODE_MTT`: 8-byte page entries.
    pub const MTT: u8 = 0x1;
    /// `MLX5_MKC_ACCESS_MODE_KLMS`: 16-byte {bcount, key, va} entries.
    pub const KLMS: u8 = 0x2;
    /// `MLX5_MKC_ACCESS_MODE_KSM`: 16-byte {reserved, key, va} entries.
    pub const KSM: u8 = 0x3;
    /// `MLX5_MKC_ACCESS_MODE_SW_ICM`.
    pub const SW_ICM: u8 = 0x4;
    /// `MLX5_MKC_ACCESS_MODE_MEMIC`.
    pub const MEMIC: u8 = 0x5;

    /// Value for `mkc.access_mode_1_0` (`mode & 0x3`, Linux ib/mr.c:1372).
    pub const fn bits_1_0(mode: u8) -> u32 {
        (mode & 0x3) as u32
    }
    /// Value for `mkc.access_mode_4_2` (`mode >> 2`).
    pub const fn bits_4_2(mode: u8) -> u32 {
        ((mode >> 2) & 0x7) as u32
    }
}

/// mkey numbering and translation-entry formats.
pub mod mkey {
    /// The lkey/rkey from CREATE_MKEY's 24-bit `mkey_index` and the 8-bit variant written to
    /// `mkc.mkey_7_0`: `index << 8 | variant` (Linux core/mr.c:52 `mlx5_core_create_mkey`).
    pub const fn from_index(mkey_index: u32, variant: u8) -> u32 {
        (mkey_index << 8) | variant as u32
    }
    /// The `mkey_index` that DESTROY_MKEY / QUERY_MKEY take: `mkey >> 8`
    /// (Linux include/linux/mlx5/driver.h:1339).
    pub const fn index(mkey: u32) -> u32 {
        mkey >> 8
    }
    /// Size of one MTT entry: an 8-byte big-endian page address (Linux `struct mlx5_mtt`,
    /// include/linux/mlx5/qp.h:489).
    pub const MTT_ENTRY_SIZE: usize = 8;
    /// Size of one KLM / KSM entry (Linux `struct mlx5_klm` / `mlx5_ksm`, qp.h:493 / 499).
    pub const KLM_ENTRY_SIZE: usize = 16;
    /// Bytes per translation octoword (`translations_octword_size` unit).
    pub const OCTOWORD_SIZE: usize = 16;
    /// Low bit of an MTT entry: READ allowed when `create_mkey_in.pg_access` = 1 (Linux ib/mr.c
    /// `reg_create`).
    pub const MTT_READ: u64 = 1 << 0;
    /// Bit 1 of an MTT entry: WRITE allowed when `create_mkey_in.pg_access` = 1.
    pub const MTT_WRITE: u64 = 1 << 1;
    /// `MLX5_IB_MTT_PRESENT` = READ | WRITE (Linux ib/mlx5_ib.h:683).
    pub const MTT_PRESENT: u64 = MTT_READ | MTT_WRITE;

    /// `translations_octword_size` for `npages` MTT entries: `(npages + 1) / 2`
    /// (Linux ib/mr.c:1174 `get_octo_len`). The MTT array is padded to an even count.
    pub const fn mtt_octowords(npages: u32) -> u32 {
        npages.div_ceil(2)
    }
    /// KLM offsets: be32 `bcount`, be32 `key`, be64 `va`.
    pub const KLM_BCOUNT: usize = 0;
    /// KLM / KSM `key` offset.
    pub const KLM_KEY: usize = 4;
    /// KLM / KSM `va` offset.
    pub const KLM_VA: usize = 8;
}

/// `mlx5_ifc_klm_bits`: rdma-core providers/mlx5/mlx5_ifc.h (next to
/// `MLX5_MKC_ACCESS_MODE_KLMS`), DPDK drivers/common/mlx5/mlx5_prm.h; Linux's `struct mlx5_klm`
/// (include/linux/mlx5/qp.h) is the same 16 bytes. One entry of a KLMS key's translation (one
/// octoword each). Declared here rather than with the checked layouts: the Linux mlx5_ifc.h
/// the layout check reads has no `mlx5_ifc_klm_bits`.
pub mod klm {
    use crate::Field;
    /// Size in bits.
    pub const BITS: u32 = 0x80;
    /// Size in bytes.
    pub const BYTES: usize = 16;
    /// `byte_count[0x20]`: bytes this entry maps (at most `MLX5_MAX_KLM_BYTE_COUNT` = 2^31,
    /// DPDK mlx5_prm.h).
    pub const BYTE_COUNT: Field = Field::new(0x0, 0x20);
    /// `mkey[0x20]`: the key the bytes are translated through.
    pub const MKEY: Field = Field::new(0x20, 0x20);
    /// `address[0x40]`: where in that key's address space they start.
    pub const ADDRESS: Field = Field::new(0x40, 0x40);
    /// `MLX5_MAX_KLM_BYTE_COUNT` (DPDK drivers/common/mlx5/mlx5_prm.h).
    pub const MAX_BYTE_COUNT: u64 = 0x8000_0000;
}

/// Queue pair enums (Linux include/linux/mlx5/qp.h @2c0186b9c664).
pub mod qp {
    /// QP states (`enum mlx5_qp_state`); `qpc.state` and the transition commands.
    pub mod state {
        /// `MLX5_QP_STATE_RST`.
        pub const RST: u8 = 0;
        /// `MLX5_QP_STATE_INIT`.
        pub const INIT: u8 = 1;
        /// `MLX5_QP_STATE_RTR`.
        pub const RTR: u8 = 2;
        /// `MLX5_QP_STATE_RTS`.
        pub const RTS: u8 = 3;
        /// `MLX5_QP_STATE_SQER`.
        pub const SQER: u8 = 4;
        /// `MLX5_QP_STATE_SQD`.
        pub const SQD: u8 = 5;
        /// `MLX5_QP_STATE_ERR`.
        pub const ERR: u8 = 6;
        /// `MLX5_QP_STATE_SQ_DRAINING`.
        pub const SQ_DRAINING: u8 = 7;
        /// `MLX5_QP_STATE_SUSPENDED`.
        pub const SUSPENDED: u8 = 9;
    }

    /// Service types for `qpc.st` (`MLX5_QP_ST_*`).
    pub mod st {
        /// `MLX5_QP_ST_RC`.
        pub const RC: u8 = 0x0;
        /// `MLX5_QP_ST_UC`.
        pub const UC: u8 = 0x1;
        /// `MLX5_QP_ST_UD`.
        pub const UD: u8 = 0x2;
        /// `MLX5_QP_ST_XRC`.
        pub const XRC: u8 = 0x3;
        /// `MLX5_QP_ST_MLX`.
        pub const MLX: u8 = 0x4;
        /// `MLX5_QP_ST_DCI`.
        pub const DCI: u8 = 0x5;
        /// `MLX5_QP_ST_DCT`.
        pub const DCT: u8 = 0x6;
        /// `MLX5_QP_ST_QP0`.
        pub const QP0: u8 = 0x7;
        /// `MLX5_QP_ST_QP1`.
        pub const QP1: u8 = 0x8;
        /// `MLX5_QP_ST_RAW_ETHERTYPE`.
        pub const RAW_ETHERTYPE: u8 = 0x9;
        /// `MLX5_QP_ST_RAW_IPV6`.
        pub const RAW_IPV6: u8 = 0xa;
        /// `MLX5_QP_ST_REG_UMR`.
        pub const REG_UMR: u8 = 0xc;
        /// `MLX5_QP_ST_SW_CNAK`.
        pub const SW_CNAK: u8 = 0x10;
    }

    /// Path-migration states for `qpc.pm_state` (`MLX5_QP_PM_*`).
    pub mod pm {
        /// `MLX5_QP_PM_MIGRATED`: what Linux sets at creation (ib/qp.c `create_kernel_qp`).
        pub const MIGRATED: u8 = 0x3;
        /// `MLX5_QP_PM_ARMED`.
        pub const ARMED: u8 = 0x0;
        /// `MLX5_QP_PM_REARM`.
        pub const REARM: u8 = 0x1;
    }

    /// `qpc.rq_type` values.
    pub mod rq_type {
        /// `MLX5_NON_ZERO_RQ`: the QP has its own receive queue.
        pub const NON_ZERO_RQ: u8 = 0x0;
        /// `MLX5_SRQ_RQ`.
        pub const SRQ_RQ: u8 = 0x1;
        /// `MLX5_CRQ_RQ`.
        pub const CRQ_RQ: u8 = 0x2;
        /// `MLX5_ZERO_LEN_RQ`: no receive queue.
        pub const ZERO_LEN_RQ: u8 = 0x3;
    }

    /// `opt_param_mask` bits of the modify-QP commands (`enum mlx5_qp_optpar`).
    pub mod optpar {
        /// `MLX5_QP_OPTPAR_ALT_ADDR_PATH`.
        pub const ALT_ADDR_PATH: u32 = 1 << 0;
        /// `MLX5_QP_OPTPAR_RRE`.
        pub const RRE: u32 = 1 << 1;
        /// `MLX5_QP_OPTPAR_RAE`.
        pub const RAE: u32 = 1 << 2;
        /// `MLX5_QP_OPTPAR_RWE`.
        pub const RWE: u32 = 1 << 3;
        /// `MLX5_QP_OPTPAR_PKEY_INDEX`.
        pub const PKEY_INDEX: u32 = 1 << 4;
        /// `MLX5_QP_OPTPAR_Q_KEY`.
        pub const Q_KEY: u32 = 1 << 5;
        /// `MLX5_QP_OPTPAR_RNR_TIMEOUT`.
        pub const RNR_TIMEOUT: u32 = 1 << 6;
        /// `MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH`.
        pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
        /// `MLX5_QP_OPTPAR_SRA_MAX`.
        pub const SRA_MAX: u32 = 1 << 8;
        /// `MLX5_QP_OPTPAR_RRA_MAX`.
        pub const RRA_MAX: u32 = 1 << 9;
        /// `MLX5_QP_OPTPAR_PM_STATE`.
        pub const PM_STATE: u32 = 1 << 10;
        /// `MLX5_QP_OPTPAR_RETRY_COUNT`.
        pub const RETRY_COUNT: u32 = 1 << 12;
        /// `MLX5_QP_OPTPAR_RNR_RETRY`.
        pub const RNR_RETRY: u32 = 1 << 13;
        /// `MLX5_QP_OPTPAR_ACK_TIMEOUT`.
        pub const ACK_TIMEOUT: u32 = 1 << 14;
        /// `MLX5_QP_OPTPAR_LAG_TX_AFF`.
        pub const LAG_TX_AFF: u32 = 1 << 15;
        /// `MLX5_QP_OPTPAR_PRI_PORT`.
        pub const PRI_PORT: u32 = 1 << 16;
        /// `MLX5_QP_OPTPAR_PRIMARY_ADDR_PATH_DSCP`.
        pub const PRIMARY_ADDR_PATH_DSCP: u32 = 1 << 17;
        /// `MLX5_QP_OPTPAR_RMPN_XRQN`.
        pub const RMPN_XRQN: u32 = 1 << 18;
        /// `MLX5_QP_OPTPAR_CQN_RCV`.
        pub const CQN_RCV: u32 = 1 << 19;
        /// `MLX5_QP_OPTPAR_DC_HS`.
        pub const DC_HS: u32 = 1 << 20;
        /// `MLX5_QP_OPTPAR_DC_KEY`.
        pub const DC_KEY: u32 = 1 << 21;
        /// `MLX5_QP_OPTPAR_OFFLOAD_TYPE`.
        pub const OFFLOAD_TYPE: u32 = 1 << 24;
        /// `MLX5_QP_OPTPAR_COUNTER_SET_ID`.
        pub const COUNTER_SET_ID: u32 = 1 << 25;
    }
}

/// Asynchronous event types (`MLX5_EVENT_TYPE_*`, Linux include/linux/mlx5/device.h @2c0186b9c664);
/// `eqe.event_type`. `MLX5_EVENT_TYPE_MAX` (0x100, an enum bound) is omitted.
pub mod event {
    /// `MLX5_EVENT_TYPE_NOTIFY_ANY` (device.h:323).
    pub const NOTIFY_ANY: u8 = 0x0;
    /// `MLX5_EVENT_TYPE_COMP` (device.h:325).
    pub const COMP: u8 = 0x0;
    /// `MLX5_EVENT_TYPE_PATH_MIG` (device.h:327).
    pub const PATH_MIG: u8 = 0x1;
    /// `MLX5_EVENT_TYPE_COMM_EST` (device.h:328).
    pub const COMM_EST: u8 = 0x2;
    /// `MLX5_EVENT_TYPE_SQ_DRAINED` (device.h:329).
    pub const SQ_DRAINED: u8 = 0x3;
    /// `MLX5_EVENT_TYPE_SRQ_LAST_WQE` (device.h:330).
    pub const SRQ_LAST_WQE: u8 = 0x13;
    /// `MLX5_EVENT_TYPE_SRQ_RQ_LIMIT` (device.h:331).
    pub const SRQ_RQ_LIMIT: u8 = 0x14;
    /// `MLX5_EVENT_TYPE_CQ_ERROR` (device.h:333).
    pub const CQ_ERROR: u8 = 0x4;
    /// `MLX5_EVENT_TYPE_WQ_CATAS_ERROR` (device.h:334).
    pub const WQ_CATAS_ERROR: u8 = 0x5;
    /// `MLX5_EVENT_TYPE_PATH_MIG_FAILED` (device.h:335).
    pub const PATH_MIG_FAILED: u8 = 0x7;
    /// `MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR` (device.h:336).
    pub const WQ_INVAL_REQ_ERROR: u8 = 0x10;
    /// `MLX5_EVENT_TYPE_WQ_ACCESS_ERROR` (device.h:337).
    pub const WQ_ACCESS_ERROR: u8 = 0x11;
    /// `MLX5_EVENT_TYPE_SRQ_CATAS_ERROR` (device.h:338).
    pub const SRQ_CATAS_ERROR: u8 = 0x12;
    /// `MLX5_EVENT_TYPE_OBJECT_CHANGE` (device.h:339).
    pub const OBJECT_CHANGE: u8 = 0x27;
    /// `MLX5_EVENT_TYPE_INTERNAL_ERROR` (device.h:341).
    pub const INTERNAL_ERROR: u8 = 0x8;
    /// `MLX5_EVENT_TYPE_PORT_CHANGE` (device.h:342).
    pub const PORT_CHANGE: u8 = 0x9;
    /// `MLX5_EVENT_TYPE_GPIO_EVENT` (device.h:343).
    pub const GPIO_EVENT: u8 = 0x15;
    /// `MLX5_EVENT_TYPE_PORT_MODULE_EVENT` (device.h:344).
    pub const PORT_MODULE_EVENT: u8 = 0x16;
    /// `MLX5_EVENT_TYPE_TEMP_WARN_EVENT` (device.h:345).
    pub const TEMP_WARN_EVENT: u8 = 0x17;
    /// `MLX5_EVENT_TYPE_XRQ_ERROR` (device.h:346).
    pub const XRQ_ERROR: u8 = 0x18;
    /// `MLX5_EVENT_TYPE_REMOTE_CONFIG` (device.h:347).
    pub const REMOTE_CONFIG: u8 = 0x19;
    /// `MLX5_EVENT_TYPE_GENERAL_EVENT` (device.h:348).
    pub const GENERAL_EVENT: u8 = 0x22;
    /// `MLX5_EVENT_TYPE_MONITOR_COUNTER` (device.h:349).
    pub const MONITOR_COUNTER: u8 = 0x24;
    /// `MLX5_EVENT_TYPE_PPS_EVENT` (device.h:350).
    pub const PPS_EVENT: u8 = 0x25;
    /// `MLX5_EVENT_TYPE_DB_BF_CONGESTION` (device.h:352).
    pub const DB_BF_CONGESTION: u8 = 0x1a;
    /// `MLX5_EVENT_TYPE_STALL_EVENT` (device.h:353).
    pub const STALL_EVENT: u8 = 0x1b;
    /// `MLX5_EVENT_TYPE_CMD` (device.h:355).
    pub const CMD: u8 = 0xa;
    /// `MLX5_EVENT_TYPE_PAGE_REQUEST` (device.h:356).
    pub const PAGE_REQUEST: u8 = 0xb;
    /// `MLX5_EVENT_TYPE_PAGE_FAULT` (device.h:358).
    pub const PAGE_FAULT: u8 = 0xc;
    /// `MLX5_EVENT_TYPE_NIC_VPORT_CHANGE` (device.h:359).
    pub const NIC_VPORT_CHANGE: u8 = 0xd;
    /// `MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED` (device.h:361).
    pub const ESW_FUNCTIONS_CHANGED: u8 = 0xe;
    /// `MLX5_EVENT_TYPE_VHCA_STATE_CHANGE` (device.h:362).
    pub const VHCA_STATE_CHANGE: u8 = 0xf;
    /// `MLX5_EVENT_TYPE_DCT_DRAINED` (device.h:364).
    pub const DCT_DRAINED: u8 = 0x1c;
    /// `MLX5_EVENT_TYPE_DCT_KEY_VIOLATION` (device.h:365).
    pub const DCT_KEY_VIOLATION: u8 = 0x1d;
    /// `MLX5_EVENT_TYPE_FPGA_ERROR` (device.h:367).
    pub const FPGA_ERROR: u8 = 0x20;
    /// `MLX5_EVENT_TYPE_FPGA_QP_ERROR` (device.h:368).
    pub const FPGA_QP_ERROR: u8 = 0x21;
    /// `MLX5_EVENT_TYPE_DEVICE_TRACER` (device.h:370).
    pub const DEVICE_TRACER: u8 = 0x26;
    /// `(C name, value)` for every constant above.
    pub const ALL: &[(&str, u8)] = &[
        ("MLX5_EVENT_TYPE_NOTIFY_ANY", NOTIFY_ANY),
        ("MLX5_EVENT_TYPE_COMP", COMP),
        ("MLX5_EVENT_TYPE_PATH_MIG", PATH_MIG),
        ("MLX5_EVENT_TYPE_COMM_EST", COMM_EST),
        ("MLX5_EVENT_TYPE_SQ_DRAINED", SQ_DRAINED),
        ("MLX5_EVENT_TYPE_SRQ_LAST_WQE", SRQ_LAST_WQE),
        ("MLX5_EVENT_TYPE_SRQ_RQ_LIMIT", SRQ_RQ_LIMIT),
        ("MLX5_EVENT_TYPE_CQ_ERROR", CQ_ERROR),
        ("MLX5_EVENT_TYPE_WQ_CATAS_ERROR", WQ_CATAS_ERROR),
        ("MLX5_EVENT_TYPE_PATH_MIG_FAILED", PATH_MIG_FAILED),
        ("MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR", WQ_INVAL_REQ_ERROR),
        ("MLX5_EVENT_TYPE_WQ_ACCESS_ERROR", WQ_ACCESS_ERROR),
        ("MLX5_EVENT_TYPE_SRQ_CATAS_ERROR", SRQ_CATAS_ERROR),
        ("MLX5_EVENT_TYPE_OBJECT_CHANGE", OBJECT_CHANGE),
        ("MLX5_EVENT_TYPE_INTERNAL_ERROR", INTERNAL_ERROR),
        ("MLX5_EVENT_TYPE_PORT_CHANGE", PORT_CHANGE),
        ("MLX5_EVENT_TYPE_GPIO_EVENT", GPIO_EVENT),
        ("MLX5_EVENT_TYPE_PORT_MODULE_EVENT", PORT_MODULE_EVENT),
        ("MLX5_EVENT_TYPE_TEMP_WARN_EVENT", TEMP_WARN_EVENT),
        ("MLX5_EVENT_TYPE_XRQ_ERROR", XRQ_ERROR),
        ("MLX5_EVENT_TYPE_REMOTE_CONFIG", REMOTE_CONFIG),
        ("MLX5_EVENT_TYPE_GENERAL_EVENT", GENERAL_EVENT),
        ("MLX5_EVENT_TYPE_MONITOR_COUNTER", MONITOR_COUNTER),
        ("MLX5_EVENT_TYPE_PPS_EVENT", PPS_EVENT),
        ("MLX5_EVENT_TYPE_DB_BF_CONGESTION", DB_BF_CONGESTION),
        ("MLX5_EVENT_TYPE_STALL_EVENT", STALL_EVENT),
        ("MLX5_EVENT_TYPE_CMD", CMD),
        ("MLX5_EVENT_TYPE_PAGE_REQUEST", PAGE_REQUEST),
        ("MLX5_EVENT_TYPE_PAGE_FAULT", PAGE_FAULT),
        ("MLX5_EVENT_TYPE_NIC_VPORT_CHANGE", NIC_VPORT_CHANGE),
        (
            "MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED",
            ESW_FUNCTIONS_CHANGED,
        ),
        ("MLX5_EVENT_TYPE_VHCA_STATE_CHANGE", VHCA_STATE_CHANGE),
        ("MLX5_EVENT_TYPE_DCT_DRAINED", DCT_DRAINED),
        ("MLX5_EVENT_TYPE_DCT_KEY_VIOLATION", DCT_KEY_VIOLATION),
        ("MLX5_EVENT_TYPE_FPGA_ERROR", FPGA_ERROR),
        ("MLX5_EVENT_TYPE_FPGA_QP_ERROR", FPGA_QP_ERROR),
        ("MLX5_EVENT_TYPE_DEVICE_TRACER", DEVICE_TRACER),
    ];

    /// The C name of an event type (the first listed when names share a value).
    pub fn name(v: u8) -> Option<&'static str> {
        ALL.iter().find(|(_, x)| *x == v).map(|(n, _)| *n)
    }

    /// `create_eq_in.event_bitmask` word index and bit for event type `t`: bit `t % 64` of the
    /// big-endian 64-bit word `t / 64` (Linux core/eq.c `create_map_eq`).
    pub const fn bitmask_word_bit(t: u8) -> (u32, u64) {
        ((t / 64) as u32, 1u64 << (t % 64))
    }

    /// `PORT_CHANGE` sub-types in `eqe.event_sub_type` (`MLX5_PORT_CHANGE_SUBTYPE_*`,
    /// Linux include/linux/mlx5/device.h @2c0186b9c664).
    pub mod port_change {
        /// `MLX5_PORT_CHANGE_SUBTYPE_DOWN` (device.h:399).
        pub const DOWN: u8 = 0x1;
        /// `MLX5_PORT_CHANGE_SUBTYPE_ACTIVE` (device.h:400).
        pub const ACTIVE: u8 = 0x4;
        /// `MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED` (device.h:401).
        pub const INITIALIZED: u8 = 0x5;
        /// `MLX5_PORT_CHANGE_SUBTYPE_LID` (device.h:402).
        pub const LID: u8 = 0x6;
        /// `MLX5_PORT_CHANGE_SUBTYPE_PKEY` (device.h:403).
        pub const PKEY: u8 = 0x7;
        /// `MLX5_PORT_CHANGE_SUBTYPE_GUID` (device.h:404).
        pub const GUID: u8 = 0x8;
        /// `MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG` (device.h:405).
        pub const CLIENT_REREG: u8 = 0x9;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_PORT_CHANGE_SUBTYPE_DOWN", DOWN),
            ("MLX5_PORT_CHANGE_SUBTYPE_ACTIVE", ACTIVE),
            ("MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED", INITIALIZED),
            ("MLX5_PORT_CHANGE_SUBTYPE_LID", LID),
            ("MLX5_PORT_CHANGE_SUBTYPE_PKEY", PKEY),
            ("MLX5_PORT_CHANGE_SUBTYPE_GUID", GUID),
            ("MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG", CLIENT_REREG),
        ];
    }
}

/// Event queue constants.
pub mod eq {
    /// Size of an EQE.
    pub const EQE_SIZE: usize = 64;
    /// Byte offset of the event payload (`eqe.event_data`) in an EQE.
    pub const EQE_DATA_OFFSET: usize = 32;
    /// `MLX5_EQE_OWNER_INIT_VAL`: every EQE's owner byte before CREATE_EQ (Linux core/eq.c:27,
    /// `init_eq_buf`). EQE `ci` is valid iff `(owner & 1) == ((ci >> log2(nent)) & 1)`.
    pub const EQE_OWNER_INIT_VAL: u8 = 0x1;
    /// `MLX5_EQ_DOORBEL_OFFSET`: EQ doorbell in the UAR page: write
    /// `(ci & 0xffffff) | eqn << 24` (big-endian) here to update the CI and re-arm
    /// (Linux core/eq.c:37, core/lib/eq.h:70-71).
    pub const DOORBELL_OFFSET: usize = 0x40;
    /// Doorbell + 2 dwords: update the CI without arming.
    pub const DOORBELL_NO_ARM_OFFSET: usize = 0x48;
    /// `MLX5_NUM_SPARE_EQE`: spare entries; `log_eq_size = order_base_2(nent + 0x80)` and the CI
    /// must be written at least every 0x80 entries (Linux include/linux/mlx5/eq.h:9).
    pub const NUM_SPARE_EQE: u32 = 0x80;
    /// `MLX5_NUM_CMD_EQE` (Linux eq.h:7).
    pub const NUM_CMD_EQE: u32 = 32;
    /// `MLX5_NUM_ASYNC_EQE` (Linux include/linux/mlx5/eq.h).
    pub const NUM_ASYNC_EQE: u32 = 0x1000;

    /// The EQ doorbell value (`(ci & 0xffffff) | eqn << 24`).
    pub const fn doorbell_value(eqn: u8, ci: u32) -> u32 {
        (ci & 0xff_ffff) | ((eqn as u32) << 24)
    }

    /// EQ states in `eqc.st` (`MLX5_EQ_STATE_*`, Linux drivers/net/ethernet/mellanox/mlx5/core/eq.c
    /// @2c0186b9c664).
    pub mod state {
        /// `MLX5_EQ_STATE_ARMED` (eq.c:31).
        pub const ARMED: u8 = 0x9;
        /// `MLX5_EQ_STATE_FIRED` (eq.c:32).
        pub const FIRED: u8 = 0xa;
        /// `MLX5_EQ_STATE_ALWAYS_ARMED` (eq.c:33).
        pub const ALWAYS_ARMED: u8 = 0xb;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_EQ_STATE_ARMED", ARMED),
            ("MLX5_EQ_STATE_FIRED", FIRED),
            ("MLX5_EQ_STATE_ALWAYS_ARMED", ALWAYS_ARMED),
        ];
    }
}

/// MODIFY_CQ op_mod and `resize_field_select` bits (Linux include/linux/mlx5/cq.h).
pub mod cq_modify {
    /// `MLX5_CQ_OPMOD_RESIZE`: MODIFY_CQ resizes the CQ onto the buffer in `pas[]`.
    pub const OPMOD_RESIZE: u16 = 1;
    /// `MLX5_MODIFY_CQ_MASK_LOG_SIZE`.
    pub const MASK_LOG_SIZE: u32 = 1 << 0;
    /// `MLX5_MODIFY_CQ_MASK_PG_OFFSET`.
    pub const MASK_PG_OFFSET: u32 = 1 << 1;
    /// `MLX5_MODIFY_CQ_MASK_PG_SIZE`.
    pub const MASK_PG_SIZE: u32 = 1 << 2;
}
