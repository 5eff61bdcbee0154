//! Constants for HCA bring-up: capability types and op_mods, page management, teardown,
//! and the ACCESS_REGISTER registers used at boot.
//!
//! Each item cites its source header or function; Linux means the OFED 24.07 kernel
//! tree wjz304/mlnx-ofed-kernel @2c0186b9c664, rdma-core means linux-rdma/rdma-core @691953d8d502.

/// QUERY_HCA_CAP / SET_HCA_CAP op_mods and capability types.
pub mod hca_cap {
    /// `HCA_CAP_OPMOD_GET_MAX`: cap_mode bit of QUERY_HCA_CAP op_mod (Linux device.h:1231).
    pub const OPMOD_GET_MAX: u16 = 0;
    /// `HCA_CAP_OPMOD_GET_CUR` (Linux device.h:1232).
    pub const OPMOD_GET_CUR: u16 = 1;

    /// QUERY_HCA_CAP op_mod: `(cap_type << 1) | (cap_mode & 1)` (Linux core/main.c:535,
    /// rdma-core mlx5_vfio.c:1725).
    pub const fn query_op_mod(cap_type: u16, cap_mode: u16) -> u16 {
        (cap_type << 1) | (cap_mode & 1)
    }

    /// SET_HCA_CAP op_mod: `cap_type << 1` (Linux core/main.c:611). Pass an unshifted
    /// [`cap_type`] / [`set_op_mod_linux`] value, never a [`set_op_mod_rdma_core`] one
    /// (those are already shifted; Linux core/main.c `set_caps` shifts).
    pub const fn set_op_mod(cap_type: u16) -> u16 {
        cap_type << 1
    }

    /// Capability types (`MLX5_CAP_*`, unshifted; Linux include/linux/mlx5/device.h @2c0186b9c664).
    pub mod cap_type {
        /// `MLX5_CAP_GENERAL` (device.h:1239).
        pub const GENERAL: u16 = 0x0;
        /// `MLX5_CAP_ETHERNET_OFFLOADS` (device.h:1240).
        pub const ETHERNET_OFFLOADS: u16 = 0x1;
        /// `MLX5_CAP_ODP` (device.h:1241).
        pub const ODP: u16 = 0x2;
        /// `MLX5_CAP_ATOMIC` (device.h:1242).
        pub const ATOMIC: u16 = 0x3;
        /// `MLX5_CAP_ROCE` (device.h:1243).
        pub const ROCE: u16 = 0x4;
        /// `MLX5_CAP_IPOIB_OFFLOADS` (device.h:1244).
        pub const IPOIB_OFFLOADS: u16 = 0x5;
        /// `MLX5_CAP_IPOIB_ENHANCED_OFFLOADS` (device.h:1245).
        pub const IPOIB_ENHANCED_OFFLOADS: u16 = 0x6;
        /// `MLX5_CAP_FLOW_TABLE` (device.h:1246).
        pub const FLOW_TABLE: u16 = 0x7;
        /// `MLX5_CAP_ESWITCH_FLOW_TABLE` (device.h:1247).
        pub const ESWITCH_FLOW_TABLE: u16 = 0x8;
        /// `MLX5_CAP_ESWITCH` (device.h:1248).
        pub const ESWITCH: u16 = 0x9;
        /// `MLX5_CAP_QOS` (device.h:1249).
        pub const QOS: u16 = 0xc;
        /// `MLX5_CAP_DEBUG` (device.h:1250).
        pub const DEBUG: u16 = 0xd;
        /// `MLX5_CAP_NVMF` (device.h:1251).
        pub const NVMF: u16 = 0xe;
        /// `MLX5_CAP_DEV_MEM` (device.h:1252).
        pub const DEV_MEM: u16 = 0xf;
        /// `MLX5_CAP_RESERVED_16` (device.h:1253).
        pub const RESERVED_16: u16 = 0x10;
        /// `MLX5_CAP_TLS` (device.h:1254).
        pub const TLS: u16 = 0x11;
        /// `MLX5_CAP_VDPA_EMULATION` (device.h:1255).
        pub const VDPA_EMULATION: u16 = 0x13;
        /// `MLX5_CAP_DEV_EVENT` (device.h:1256).
        pub const DEV_EVENT: u16 = 0x14;
        /// `MLX5_CAP_IPSEC` (device.h:1257).
        pub const IPSEC: u16 = 0x15;
        /// `MLX5_CAP_CRYPTO` (device.h:1258).
        pub const CRYPTO: u16 = 0x1a;
        /// `MLX5_CAP_MACSEC` (device.h:1259).
        pub const MACSEC: u16 = 0x1f;
        /// `MLX5_CAP_GENERAL_2` (device.h:1260).
        pub const GENERAL_2: u16 = 0x20;
        /// `MLX5_CAP_PORT_SELECTION` (device.h:1261).
        pub const PORT_SELECTION: u16 = 0x25;
        /// `MLX5_CAP_ADV_VIRTUALIZATION` (device.h:1262).
        pub const ADV_VIRTUALIZATION: u16 = 0x26;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u16)] = &[
            ("MLX5_CAP_GENERAL", GENERAL),
            ("MLX5_CAP_ETHERNET_OFFLOADS", ETHERNET_OFFLOADS),
            ("MLX5_CAP_ODP", ODP),
            ("MLX5_CAP_ATOMIC", ATOMIC),
            ("MLX5_CAP_ROCE", ROCE),
            ("MLX5_CAP_IPOIB_OFFLOADS", IPOIB_OFFLOADS),
            ("MLX5_CAP_IPOIB_ENHANCED_OFFLOADS", IPOIB_ENHANCED_OFFLOADS),
            ("MLX5_CAP_FLOW_TABLE", FLOW_TABLE),
            ("MLX5_CAP_ESWITCH_FLOW_TABLE", ESWITCH_FLOW_TABLE),
            ("MLX5_CAP_ESWITCH", ESWITCH),
            ("MLX5_CAP_QOS", QOS),
            ("MLX5_CAP_DEBUG", DEBUG),
            ("MLX5_CAP_NVMF", NVMF),
            ("MLX5_CAP_DEV_MEM", DEV_MEM),
            ("MLX5_CAP_RESERVED_16", RESERVED_16),
            ("MLX5_CAP_TLS", TLS),
            ("MLX5_CAP_VDPA_EMULATION", VDPA_EMULATION),
            ("MLX5_CAP_DEV_EVENT", DEV_EVENT),
            ("MLX5_CAP_IPSEC", IPSEC),
            ("MLX5_CAP_CRYPTO", CRYPTO),
            ("MLX5_CAP_MACSEC", MACSEC),
            ("MLX5_CAP_GENERAL_2", GENERAL_2),
            ("MLX5_CAP_PORT_SELECTION", PORT_SELECTION),
            ("MLX5_CAP_ADV_VIRTUALIZATION", ADV_VIRTUALIZATION),
        ];
    }

    /// Linux `MLX5_SET_HCA_CAP_OP_MOD_*`: UNSHIFTED cap types; the driver shifts them with
    /// [`set_op_mod`] (Linux include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod set_op_mod_linux {
        /// `MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE` (mlx5_ifc.h:67).
        pub const GENERAL_DEVICE: u16 = 0x0;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ETHERNET_OFFLOADS` (mlx5_ifc.h:68).
        pub const ETHERNET_OFFLOADS: u16 = 0x1;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ODP` (mlx5_ifc.h:69).
        pub const ODP: u16 = 0x2;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ATOMIC` (mlx5_ifc.h:70).
        pub const ATOMIC: u16 = 0x3;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ROCE` (mlx5_ifc.h:71).
        pub const ROCE: u16 = 0x4;
        /// `MLX5_SET_HCA_CAP_OP_MOD_IPSEC` (mlx5_ifc.h:72).
        pub const IPSEC: u16 = 0x15;
        /// `MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE2` (mlx5_ifc.h:73).
        pub const GENERAL_DEVICE2: u16 = 0x20;
        /// `MLX5_SET_HCA_CAP_OP_MOD_PORT_SELECTION` (mlx5_ifc.h:74).
        pub const PORT_SELECTION: u16 = 0x25;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u16)] = &[
            ("MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE", GENERAL_DEVICE),
            (
                "MLX5_SET_HCA_CAP_OP_MOD_ETHERNET_OFFLOADS",
                ETHERNET_OFFLOADS,
            ),
            ("MLX5_SET_HCA_CAP_OP_MOD_ODP", ODP),
            ("MLX5_SET_HCA_CAP_OP_MOD_ATOMIC", ATOMIC),
            ("MLX5_SET_HCA_CAP_OP_MOD_ROCE", ROCE),
            ("MLX5_SET_HCA_CAP_OP_MOD_IPSEC", IPSEC),
            ("MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE2", GENERAL_DEVICE2),
            ("MLX5_SET_HCA_CAP_OP_MOD_PORT_SELECTION", PORT_SELECTION),
        ];
    }

    /// rdma-core `MLX5_SET_HCA_CAP_OP_MOD_*`: PRE-SHIFTED (`x << 1`), ready for the op_mod field as
    /// is. Same wire values as the Linux set after shifting (rdma-core providers/mlx5/mlx5_ifc.h
    /// @691953d8d502).
    pub mod set_op_mod_rdma_core {
        /// `MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE` (mlx5_ifc.h:1576).
        pub const GENERAL_DEVICE: u16 = 0x0;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ROCE` (mlx5_ifc.h:1577).
        pub const ROCE: u16 = 0x8;
        /// `MLX5_SET_HCA_CAP_OP_MOD_NIC_FLOW_TABLE` (mlx5_ifc.h:1578).
        pub const NIC_FLOW_TABLE: u16 = 0xe;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ESW_FLOW_TABLE` (mlx5_ifc.h:1579).
        pub const ESW_FLOW_TABLE: u16 = 0x10;
        /// `MLX5_SET_HCA_CAP_OP_MOD_QOS` (mlx5_ifc.h:1580).
        pub const QOS: u16 = 0x18;
        /// `MLX5_SET_HCA_CAP_OP_MOD_ESW` (mlx5_ifc.h:1581).
        pub const ESW: u16 = 0x12;
        /// `MLX5_SET_HCA_CAP_OP_MOD_DEVICE_MEMORY` (mlx5_ifc.h:1582).
        pub const DEVICE_MEMORY: u16 = 0x1e;
        /// `MLX5_SET_HCA_CAP_OP_MOD_CRYPTO` (mlx5_ifc.h:1583).
        pub const CRYPTO: u16 = 0x34;
        /// `MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE_CAP_2` (mlx5_ifc.h:1584).
        pub const GENERAL_DEVICE_CAP_2: u16 = 0x40;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u16)] = &[
            ("MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE", GENERAL_DEVICE),
            ("MLX5_SET_HCA_CAP_OP_MOD_ROCE", ROCE),
            ("MLX5_SET_HCA_CAP_OP_MOD_NIC_FLOW_TABLE", NIC_FLOW_TABLE),
            ("MLX5_SET_HCA_CAP_OP_MOD_ESW_FLOW_TABLE", ESW_FLOW_TABLE),
            ("MLX5_SET_HCA_CAP_OP_MOD_QOS", QOS),
            ("MLX5_SET_HCA_CAP_OP_MOD_ESW", ESW),
            ("MLX5_SET_HCA_CAP_OP_MOD_DEVICE_MEMORY", DEVICE_MEMORY),
            ("MLX5_SET_HCA_CAP_OP_MOD_CRYPTO", CRYPTO),
            (
                "MLX5_SET_HCA_CAP_OP_MOD_GENERAL_DEVICE_CAP_2",
                GENERAL_DEVICE_CAP_2,
            ),
        ];
    }

    /// `cmd_hca_cap.port_type` (Linux include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod port_type {
        /// `MLX5_CAP_PORT_TYPE_IB` (mlx5_ifc.h:1526).
        pub const IB: u8 = 0x0;
        /// `MLX5_CAP_PORT_TYPE_ETH` (mlx5_ifc.h:1527).
        pub const ETH: u8 = 0x1;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_CAP_PORT_TYPE_IB", IB),
            ("MLX5_CAP_PORT_TYPE_ETH", ETH),
        ];
    }
}

/// QUERY_PAGES / MANAGE_PAGES op_mods and page-request decoding.
pub mod pages {
    /// `MLX5_ADAPTER_PAGE_SHIFT`: firmware pages, and the base of relative `log_page_size`
    /// fields, are 4 KiB (Linux core/eq.c `create_map_eq`, ib/cq.c `create_cq_user`).
    pub const ADAPTER_PAGE_SHIFT: u32 = 12;
    /// `MLX5_ADAPTER_PAGE_SIZE`.
    pub const ADAPTER_PAGE_SIZE: usize = 1 << ADAPTER_PAGE_SHIFT;

    /// QUERY_PAGES op_mod (`MLX5_QUERY_PAGES_IN_OP_MOD_*`, Linux include/linux/mlx5/mlx5_ifc.h
    /// @2c0186b9c664).
    pub mod query {
        /// `MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES` (mlx5_ifc.h:6131).
        pub const BOOT_PAGES: u16 = 0x1;
        /// `MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES` (mlx5_ifc.h:6132).
        pub const INIT_PAGES: u16 = 0x2;
        /// `MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES` (mlx5_ifc.h:6133).
        pub const REGULAR_PAGES: u16 = 0x3;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u16)] = &[
            ("MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES", BOOT_PAGES),
            ("MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES", INIT_PAGES),
            ("MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES", REGULAR_PAGES),
        ];
    }

    /// MANAGE_PAGES op_mod (Linux drivers/net/ethernet/mellanox/mlx5/core/pagealloc.c
    /// @2c0186b9c664).
    pub mod manage {
        /// `MLX5_PAGES_CANT_GIVE` (pagealloc.c:46).
        pub const CANT_GIVE: u16 = 0x0;
        /// `MLX5_PAGES_GIVE` (pagealloc.c:47).
        pub const GIVE: u16 = 0x1;
        /// `MLX5_PAGES_TAKE` (pagealloc.c:48).
        pub const TAKE: u16 = 0x2;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u16)] = &[
            ("MLX5_PAGES_CANT_GIVE", CANT_GIVE),
            ("MLX5_PAGES_GIVE", GIVE),
            ("MLX5_PAGES_TAKE", TAKE),
        ];
    }

    /// Page-request EQE `ec_function` bit 15: request for the embedded-CPU function
    /// (Linux core/pagealloc.c:729).
    pub const EC_FUNCTION_MASK: u16 = 0x8000;
    /// Page-request EQE `ec_function` bit 14: release all pages (Linux core/pagealloc.c:730).
    pub const RELEASE_ALL_PAGES_MASK: u16 = 0x4000;
}

/// TEARDOWN_HCA profiles and result.
pub mod teardown {
    /// `teardown_hca_in.profile` (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`, Linux
    /// include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod profile {
        /// `MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE` (mlx5_ifc.h:5050).
        pub const GRACEFUL_CLOSE: u8 = 0x0;
        /// `MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE` (mlx5_ifc.h:5051).
        pub const FORCE_CLOSE: u8 = 0x1;
        /// `MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN` (mlx5_ifc.h:5052).
        pub const PREPARE_FAST_TEARDOWN: u8 = 0x2;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            (
                "MLX5_TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE",
                GRACEFUL_CLOSE,
            ),
            ("MLX5_TEARDOWN_HCA_IN_PROFILE_FORCE_CLOSE", FORCE_CLOSE),
            (
                "MLX5_TEARDOWN_HCA_IN_PROFILE_PREPARE_FAST_TEARDOWN",
                PREPARE_FAST_TEARDOWN,
            ),
        ];
    }

    /// `teardown_hca_out.state` (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`, Linux
    /// include/linux/mlx5/mlx5_ifc.h @2c0186b9c664).
    pub mod force_state {
        /// `MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS` (mlx5_ifc.h:5034).
        pub const SUCCESS: u8 = 0x0;
        /// `MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL` (mlx5_ifc.h:5035).
        pub const FAIL: u8 = 0x1;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_SUCCESS", SUCCESS),
            ("MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_FAIL", FAIL),
        ];
    }
}

/// ACCESS_REGISTER (opcode 0x805) constants.
pub mod access_reg {
    /// `access_register_in.op_mod` for a write (rdma-core writes `!write`; mlx5_vfio.c:1701).
    pub const OP_MOD_WRITE: u16 = 0;
    /// `access_register_in.op_mod` for a read.
    pub const OP_MOD_READ: u16 = 1;
    /// `MLX5_REG_HOST_ENDIANNESS` register id (Linux include/linux/mlx5/driver.h:136); the
    /// payload is [`crate::register_host_endianness`] (16 bytes).
    pub const REG_HOST_ENDIANNESS: u16 = 0x7004;
    /// `MLX5_SET_HOST_ENDIANNESS` for a little-endian host: `he` byte = 0 (Linux device.h:42).
    pub const HOST_ENDIANNESS_LITTLE: u8 = 0;
    /// `MLX5_SET_HOST_ENDIANNESS` for a big-endian host: `he` byte = 0x80 (Linux device.h:44).
    pub const HOST_ENDIANNESS_BIG: u8 = 0x80;
}
