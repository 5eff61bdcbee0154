//! Command opcodes (`MLX5_CMD_OP_*`), named without the prefix.
//!
//! Values read from Linux (OFED 24.07 tree wjz304/mlnx-ofed-kernel
//! include/linux/mlx5/mlx5_ifc.h @2c0186b9c664), rdma-core
//! (providers/mlx5/mlx5_ifc.h @691953d8d502) and DPDK
//! (drivers/common/mlx5/mlx5_prm.h @38f72e500b3b); each constant names the header
//! lines it was read from. No value conflicts between the three sources.
//!
//! Names that start with a digit in C are spelled with DPDK's alias: `MLX5_CMD_OP_2ERR_QP` is
//! [`QP_2ERR`] and `MLX5_CMD_OP_2RST_QP` is [`QP_2RST`]. Aliases with the same value
//! (`ACCESS_REG`/`ACCESS_REGISTER`, `SQD_RTS_QP`/`SQD2RTS_QP`, `ALLOC_FLOW_COUNTER`/
//! `CREATE_FLOW_COUNTER`, `SYNC_STEERING`/`GENERAL_START`, `GENERATE_WQE`/`MAX`) are all kept.
//! `MLX5_CMD_OP_MOD_UPDATE_HEADER_MODIFY_ARGUMENT` (= 1) is an op_mod, not an opcode, and is
//! not listed.

/// `MLX5_CMD_OP_QUERY_HCA_CAP` (Linux mlx5_ifc.h:118, rdma-core mlx5_ifc.h:44, DPDK
/// mlx5_prm.h:1250).
pub const QUERY_HCA_CAP: u16 = 0x100;
/// `MLX5_CMD_OP_QUERY_ADAPTER` (Linux mlx5_ifc.h:119).
pub const QUERY_ADAPTER: u16 = 0x101;
/// `MLX5_CMD_OP_INIT_HCA` (Linux mlx5_ifc.h:120, rdma-core mlx5_ifc.h:45).
pub const INIT_HCA: u16 = 0x102;
/// `MLX5_CMD_OP_TEARDOWN_HCA` (Linux mlx5_ifc.h:121, rdma-core mlx5_ifc.h:46).
pub const TEARDOWN_HCA: u16 = 0x103;
/// `MLX5_CMD_OP_ENABLE_HCA` (Linux mlx5_ifc.h:122, rdma-core mlx5_ifc.h:47).
pub const ENABLE_HCA: u16 = 0x104;
/// `MLX5_CMD_OP_DISABLE_HCA` (Linux mlx5_ifc.h:123).
pub const DISABLE_HCA: u16 = 0x105;
/// `MLX5_CMD_OP_QUERY_PAGES` (Linux mlx5_ifc.h:124, rdma-core mlx5_ifc.h:48).
pub const QUERY_PAGES: u16 = 0x107;
/// `MLX5_CMD_OP_MANAGE_PAGES` (Linux mlx5_ifc.h:125, rdma-core mlx5_ifc.h:49).
pub const MANAGE_PAGES: u16 = 0x108;
/// `MLX5_CMD_OP_SET_HCA_CAP` (Linux mlx5_ifc.h:126, rdma-core mlx5_ifc.h:50).
pub const SET_HCA_CAP: u16 = 0x109;
/// `MLX5_CMD_OP_QUERY_ISSI` (Linux mlx5_ifc.h:127, rdma-core mlx5_ifc.h:51).
pub const QUERY_ISSI: u16 = 0x10a;
/// `MLX5_CMD_OP_SET_ISSI` (Linux mlx5_ifc.h:128, rdma-core mlx5_ifc.h:52).
pub const SET_ISSI: u16 = 0x10b;
/// `MLX5_CMD_OP_SET_DRIVER_VERSION` (Linux mlx5_ifc.h:129).
pub const SET_DRIVER_VERSION: u16 = 0x10d;
/// `MLX5_CMD_OP_QUERY_SF_PARTITION` (Linux mlx5_ifc.h:130).
pub const QUERY_SF_PARTITION: u16 = 0x111;
/// `MLX5_CMD_OP_ALLOC_SF` (Linux mlx5_ifc.h:131).
pub const ALLOC_SF: u16 = 0x113;
/// `MLX5_CMD_OP_DEALLOC_SF` (Linux mlx5_ifc.h:132).
pub const DEALLOC_SF: u16 = 0x114;
/// `MLX5_CMD_OP_SUSPEND_VHCA` (Linux mlx5_ifc.h:133).
pub const SUSPEND_VHCA: u16 = 0x115;
/// `MLX5_CMD_OP_RESUME_VHCA` (Linux mlx5_ifc.h:134).
pub const RESUME_VHCA: u16 = 0x116;
/// `MLX5_CMD_OP_QUERY_VHCA_MIGRATION_STATE` (Linux mlx5_ifc.h:135).
pub const QUERY_VHCA_MIGRATION_STATE: u16 = 0x117;
/// `MLX5_CMD_OP_SAVE_VHCA_STATE` (Linux mlx5_ifc.h:136).
pub const SAVE_VHCA_STATE: u16 = 0x118;
/// `MLX5_CMD_OP_LOAD_VHCA_STATE` (Linux mlx5_ifc.h:137).
pub const LOAD_VHCA_STATE: u16 = 0x119;
/// `MLX5_CMD_OP_CREATE_MKEY` (Linux mlx5_ifc.h:138, rdma-core mlx5_ifc.h:53, DPDK mlx5_prm.h:1251).
pub const CREATE_MKEY: u16 = 0x200;
/// `MLX5_CMD_OP_QUERY_MKEY` (Linux mlx5_ifc.h:139).
pub const QUERY_MKEY: u16 = 0x201;
/// `MLX5_CMD_OP_DESTROY_MKEY` (Linux mlx5_ifc.h:140, rdma-core mlx5_ifc.h:54).
pub const DESTROY_MKEY: u16 = 0x202;
/// `MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS` (Linux mlx5_ifc.h:141).
pub const QUERY_SPECIAL_CONTEXTS: u16 = 0x203;
/// `MLX5_CMD_OP_PAGE_FAULT_RESUME` (Linux mlx5_ifc.h:142).
pub const PAGE_FAULT_RESUME: u16 = 0x204;
/// `MLX5_CMD_OP_ALLOC_MEMIC` (Linux mlx5_ifc.h:143).
pub const ALLOC_MEMIC: u16 = 0x205;
/// `MLX5_CMD_OP_DEALLOC_MEMIC` (Linux mlx5_ifc.h:144).
pub const DEALLOC_MEMIC: u16 = 0x206;
/// `MLX5_CMD_OP_MODIFY_MEMIC` (Linux mlx5_ifc.h:145).
pub const MODIFY_MEMIC: u16 = 0x207;
/// `MLX5_CMD_OP_CREATE_EQ` (Linux mlx5_ifc.h:146, rdma-core mlx5_ifc.h:55).
pub const CREATE_EQ: u16 = 0x301;
/// `MLX5_CMD_OP_DESTROY_EQ` (Linux mlx5_ifc.h:147, rdma-core mlx5_ifc.h:56).
pub const DESTROY_EQ: u16 = 0x302;
/// `MLX5_CMD_OP_QUERY_EQ` (Linux mlx5_ifc.h:148).
pub const QUERY_EQ: u16 = 0x303;
/// `MLX5_CMD_OP_GEN_EQE` (Linux mlx5_ifc.h:149).
pub const GEN_EQE: u16 = 0x304;
/// `MLX5_CMD_OP_CREATE_CQ` (Linux mlx5_ifc.h:150, rdma-core mlx5_ifc.h:57, DPDK mlx5_prm.h:1252).
pub const CREATE_CQ: u16 = 0x400;
/// `MLX5_CMD_OP_DESTROY_CQ` (Linux mlx5_ifc.h:151, rdma-core mlx5_ifc.h:58).
pub const DESTROY_CQ: u16 = 0x401;
/// `MLX5_CMD_OP_QUERY_CQ` (Linux mlx5_ifc.h:152, DPDK mlx5_prm.h:1253).
pub const QUERY_CQ: u16 = 0x402;
/// `MLX5_CMD_OP_MODIFY_CQ` (Linux mlx5_ifc.h:153).
pub const MODIFY_CQ: u16 = 0x403;
/// `MLX5_CMD_OP_CREATE_QP` (Linux mlx5_ifc.h:154, rdma-core mlx5_ifc.h:59, DPDK mlx5_prm.h:1254).
pub const CREATE_QP: u16 = 0x500;
/// `MLX5_CMD_OP_DESTROY_QP` (Linux mlx5_ifc.h:155, rdma-core mlx5_ifc.h:60).
pub const DESTROY_QP: u16 = 0x501;
/// `MLX5_CMD_OP_RST2INIT_QP` (Linux mlx5_ifc.h:156, rdma-core mlx5_ifc.h:61, DPDK mlx5_prm.h:1255).
pub const RST2INIT_QP: u16 = 0x502;
/// `MLX5_CMD_OP_INIT2RTR_QP` (Linux mlx5_ifc.h:157, rdma-core mlx5_ifc.h:62, DPDK mlx5_prm.h:1256).
pub const INIT2RTR_QP: u16 = 0x503;
/// `MLX5_CMD_OP_RTR2RTS_QP` (Linux mlx5_ifc.h:158, rdma-core mlx5_ifc.h:63, DPDK mlx5_prm.h:1257).
pub const RTR2RTS_QP: u16 = 0x504;
/// `MLX5_CMD_OP_RTS2RTS_QP` (Linux mlx5_ifc.h:159, rdma-core mlx5_ifc.h:64, DPDK mlx5_prm.h:1258).
pub const RTS2RTS_QP: u16 = 0x505;
/// `MLX5_CMD_OP_SQERR2RTS_QP` (Linux mlx5_ifc.h:160, rdma-core mlx5_ifc.h:65, DPDK
/// mlx5_prm.h:1259).
pub const SQERR2RTS_QP: u16 = 0x506;
/// `MLX5_CMD_OP_2ERR_QP` / `MLX5_CMD_OP_QP_2ERR` (Linux mlx5_ifc.h:161, rdma-core mlx5_ifc.h:66,
/// DPDK mlx5_prm.h:1260).
pub const QP_2ERR: u16 = 0x507;
/// `MLX5_CMD_OP_2RST_QP` / `MLX5_CMD_OP_QP_2RST` (Linux mlx5_ifc.h:162, rdma-core mlx5_ifc.h:67,
/// DPDK mlx5_prm.h:1261).
pub const QP_2RST: u16 = 0x50a;
/// `MLX5_CMD_OP_QUERY_QP` (Linux mlx5_ifc.h:163, rdma-core mlx5_ifc.h:68, DPDK mlx5_prm.h:1262).
pub const QUERY_QP: u16 = 0x50b;
/// `MLX5_CMD_OP_SQD2RTS_QP` (DPDK mlx5_prm.h:1263).
pub const SQD2RTS_QP: u16 = 0x50c;
/// `MLX5_CMD_OP_SQD_RTS_QP` (Linux mlx5_ifc.h:164, rdma-core mlx5_ifc.h:69).
pub const SQD_RTS_QP: u16 = 0x50c;
/// `MLX5_CMD_OP_MAD_IFC` (Linux mlx5_ifc.h:234).
pub const MAD_IFC: u16 = 0x50d;
/// `MLX5_CMD_OP_INIT2INIT_QP` (Linux mlx5_ifc.h:165, rdma-core mlx5_ifc.h:70, DPDK
/// mlx5_prm.h:1264).
pub const INIT2INIT_QP: u16 = 0x50e;
/// `MLX5_CMD_OP_SUSPEND_QP` (DPDK mlx5_prm.h:1265).
pub const SUSPEND_QP: u16 = 0x50f;
/// `MLX5_CMD_OP_RESUME_QP` (DPDK mlx5_prm.h:1266).
pub const RESUME_QP: u16 = 0x510;
/// `MLX5_CMD_OP_CREATE_PSV` (Linux mlx5_ifc.h:166, rdma-core mlx5_ifc.h:71).
pub const CREATE_PSV: u16 = 0x600;
/// `MLX5_CMD_OP_DESTROY_PSV` (Linux mlx5_ifc.h:167, rdma-core mlx5_ifc.h:72).
pub const DESTROY_PSV: u16 = 0x601;
/// `MLX5_CMD_OP_CREATE_SRQ` (Linux mlx5_ifc.h:168, rdma-core mlx5_ifc.h:73).
pub const CREATE_SRQ: u16 = 0x700;
/// `MLX5_CMD_OP_DESTROY_SRQ` (Linux mlx5_ifc.h:169, rdma-core mlx5_ifc.h:74).
pub const DESTROY_SRQ: u16 = 0x701;
/// `MLX5_CMD_OP_QUERY_SRQ` (Linux mlx5_ifc.h:170).
pub const QUERY_SRQ: u16 = 0x702;
/// `MLX5_CMD_OP_ARM_RQ` (Linux mlx5_ifc.h:171).
pub const ARM_RQ: u16 = 0x703;
/// `MLX5_CMD_OP_CREATE_XRC_SRQ` (Linux mlx5_ifc.h:172, rdma-core mlx5_ifc.h:75).
pub const CREATE_XRC_SRQ: u16 = 0x705;
/// `MLX5_CMD_OP_DESTROY_XRC_SRQ` (Linux mlx5_ifc.h:173, rdma-core mlx5_ifc.h:76).
pub const DESTROY_XRC_SRQ: u16 = 0x706;
/// `MLX5_CMD_OP_QUERY_XRC_SRQ` (Linux mlx5_ifc.h:174).
pub const QUERY_XRC_SRQ: u16 = 0x707;
/// `MLX5_CMD_OP_ARM_XRC_SRQ` (Linux mlx5_ifc.h:175).
pub const ARM_XRC_SRQ: u16 = 0x708;
/// `MLX5_CMD_OP_CREATE_DCT` (Linux mlx5_ifc.h:176, rdma-core mlx5_ifc.h:77).
pub const CREATE_DCT: u16 = 0x710;
/// `MLX5_CMD_OP_DESTROY_DCT` (Linux mlx5_ifc.h:177, rdma-core mlx5_ifc.h:78).
pub const DESTROY_DCT: u16 = 0x711;
/// `MLX5_CMD_OP_DRAIN_DCT` (Linux mlx5_ifc.h:178).
pub const DRAIN_DCT: u16 = 0x712;
/// `MLX5_CMD_OP_QUERY_DCT` (Linux mlx5_ifc.h:179, rdma-core mlx5_ifc.h:79).
pub const QUERY_DCT: u16 = 0x713;
/// `MLX5_CMD_OP_ARM_DCT_FOR_KEY_VIOLATION` (Linux mlx5_ifc.h:180).
pub const ARM_DCT_FOR_KEY_VIOLATION: u16 = 0x714;
/// `MLX5_CMD_OP_SET_DC_CNAK_TRACE` (Linux mlx5_ifc.h:181).
pub const SET_DC_CNAK_TRACE: u16 = 0x715;
/// `MLX5_CMD_OP_CREATE_XRQ` (Linux mlx5_ifc.h:182, rdma-core mlx5_ifc.h:80).
pub const CREATE_XRQ: u16 = 0x717;
/// `MLX5_CMD_OP_DESTROY_XRQ` (Linux mlx5_ifc.h:183, rdma-core mlx5_ifc.h:81).
pub const DESTROY_XRQ: u16 = 0x718;
/// `MLX5_CMD_OP_QUERY_XRQ` (Linux mlx5_ifc.h:184).
pub const QUERY_XRQ: u16 = 0x719;
/// `MLX5_CMD_OP_ARM_XRQ` (Linux mlx5_ifc.h:185).
pub const ARM_XRQ: u16 = 0x71a;
/// `MLX5_CMD_OP_CREATE_NVMF_BACKEND_CTRL` (Linux mlx5_ifc.h:186).
pub const CREATE_NVMF_BACKEND_CTRL: u16 = 0x720;
/// `MLX5_CMD_OP_DESTROY_NVMF_BACKEND_CTRL` (Linux mlx5_ifc.h:187).
pub const DESTROY_NVMF_BACKEND_CTRL: u16 = 0x721;
/// `MLX5_CMD_OP_QUERY_NVMF_BACKEND_CTRL` (Linux mlx5_ifc.h:188).
pub const QUERY_NVMF_BACKEND_CTRL: u16 = 0x722;
/// `MLX5_CMD_OP_ATTACH_NVMF_NAMESPACE` (Linux mlx5_ifc.h:189).
pub const ATTACH_NVMF_NAMESPACE: u16 = 0x723;
/// `MLX5_CMD_OP_DETACH_NVMF_NAMESPACE` (Linux mlx5_ifc.h:190).
pub const DETACH_NVMF_NAMESPACE: u16 = 0x724;
/// `MLX5_CMD_OP_QUERY_XRQ_DC_PARAMS_ENTRY` (Linux mlx5_ifc.h:191).
pub const QUERY_XRQ_DC_PARAMS_ENTRY: u16 = 0x725;
/// `MLX5_CMD_OP_SET_XRQ_DC_PARAMS_ENTRY` (Linux mlx5_ifc.h:192).
pub const SET_XRQ_DC_PARAMS_ENTRY: u16 = 0x726;
/// `MLX5_CMD_OP_QUERY_XRQ_ERROR_PARAMS` (Linux mlx5_ifc.h:193).
pub const QUERY_XRQ_ERROR_PARAMS: u16 = 0x727;
/// `MLX5_CMD_OP_QUERY_NVMF_NAMESPACE_CONTEXT` (Linux mlx5_ifc.h:194).
pub const QUERY_NVMF_NAMESPACE_CONTEXT: u16 = 0x728;
/// `MLX5_CMD_OP_RELEASE_XRQ_ERROR` (Linux mlx5_ifc.h:195).
pub const RELEASE_XRQ_ERROR: u16 = 0x729;
/// `MLX5_CMD_OP_MODIFY_XRQ` (Linux mlx5_ifc.h:196).
pub const MODIFY_XRQ: u16 = 0x72a;
/// `MLX5_CMD_OP_QUERY_ESW_FUNCTIONS` (Linux mlx5_ifc.h:197, rdma-core mlx5_ifc.h:82).
pub const QUERY_ESW_FUNCTIONS: u16 = 0x740;
/// `MLX5_CMD_OP_QUERY_VPORT_STATE` (Linux mlx5_ifc.h:198).
pub const QUERY_VPORT_STATE: u16 = 0x750;
/// `MLX5_CMD_OP_MODIFY_VPORT_STATE` (Linux mlx5_ifc.h:199).
pub const MODIFY_VPORT_STATE: u16 = 0x751;
/// `MLX5_CMD_OP_QUERY_ESW_VPORT_CONTEXT` (Linux mlx5_ifc.h:200, rdma-core mlx5_ifc.h:83, DPDK
/// mlx5_prm.h:1267).
pub const QUERY_ESW_VPORT_CONTEXT: u16 = 0x752;
/// `MLX5_CMD_OP_MODIFY_ESW_VPORT_CONTEXT` (Linux mlx5_ifc.h:201).
pub const MODIFY_ESW_VPORT_CONTEXT: u16 = 0x753;
/// `MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT` (Linux mlx5_ifc.h:202, rdma-core mlx5_ifc.h:84, DPDK
/// mlx5_prm.h:1268).
pub const QUERY_NIC_VPORT_CONTEXT: u16 = 0x754;
/// `MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT` (Linux mlx5_ifc.h:203, rdma-core mlx5_ifc.h:85).
pub const MODIFY_NIC_VPORT_CONTEXT: u16 = 0x755;
/// `MLX5_CMD_OP_QUERY_ROCE_ADDRESS` (Linux mlx5_ifc.h:204, rdma-core mlx5_ifc.h:86).
pub const QUERY_ROCE_ADDRESS: u16 = 0x760;
/// `MLX5_CMD_OP_SET_ROCE_ADDRESS` (Linux mlx5_ifc.h:205).
pub const SET_ROCE_ADDRESS: u16 = 0x761;
/// `MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT` (Linux mlx5_ifc.h:206).
pub const QUERY_HCA_VPORT_CONTEXT: u16 = 0x762;
/// `MLX5_CMD_OP_MODIFY_HCA_VPORT_CONTEXT` (Linux mlx5_ifc.h:207).
pub const MODIFY_HCA_VPORT_CONTEXT: u16 = 0x763;
/// `MLX5_CMD_OP_QUERY_HCA_VPORT_GID` (Linux mlx5_ifc.h:208).
pub const QUERY_HCA_VPORT_GID: u16 = 0x764;
/// `MLX5_CMD_OP_QUERY_HCA_VPORT_PKEY` (Linux mlx5_ifc.h:209).
pub const QUERY_HCA_VPORT_PKEY: u16 = 0x765;
/// `MLX5_CMD_OP_QUERY_VNIC_ENV` (Linux mlx5_ifc.h:210).
pub const QUERY_VNIC_ENV: u16 = 0x76f;
/// `MLX5_CMD_OP_QUERY_VPORT_COUNTER` (Linux mlx5_ifc.h:211).
pub const QUERY_VPORT_COUNTER: u16 = 0x770;
/// `MLX5_CMD_OP_ALLOC_Q_COUNTER` (Linux mlx5_ifc.h:212, rdma-core mlx5_ifc.h:87, DPDK
/// mlx5_prm.h:1269).
pub const ALLOC_Q_COUNTER: u16 = 0x771;
/// `MLX5_CMD_OP_DEALLOC_Q_COUNTER` (Linux mlx5_ifc.h:213, rdma-core mlx5_ifc.h:88).
pub const DEALLOC_Q_COUNTER: u16 = 0x772;
/// `MLX5_CMD_OP_QUERY_Q_COUNTER` (Linux mlx5_ifc.h:214, DPDK mlx5_prm.h:1270).
pub const QUERY_Q_COUNTER: u16 = 0x773;
/// `MLX5_CMD_OP_SET_MONITOR_COUNTER` (Linux mlx5_ifc.h:215).
pub const SET_MONITOR_COUNTER: u16 = 0x774;
/// `MLX5_CMD_OP_ARM_MONITOR_COUNTER` (Linux mlx5_ifc.h:216).
pub const ARM_MONITOR_COUNTER: u16 = 0x775;
/// `MLX5_CMD_OP_SET_PP_RATE_LIMIT` (Linux mlx5_ifc.h:217).
pub const SET_PP_RATE_LIMIT: u16 = 0x780;
/// `MLX5_CMD_OP_QUERY_RATE_LIMIT` (Linux mlx5_ifc.h:218).
pub const QUERY_RATE_LIMIT: u16 = 0x781;
/// `MLX5_CMD_OP_CREATE_SCHEDULING_ELEMENT` (Linux mlx5_ifc.h:219, rdma-core mlx5_ifc.h:89).
pub const CREATE_SCHEDULING_ELEMENT: u16 = 0x782;
/// `MLX5_CMD_OP_DESTROY_SCHEDULING_ELEMENT` (Linux mlx5_ifc.h:220, rdma-core mlx5_ifc.h:90).
pub const DESTROY_SCHEDULING_ELEMENT: u16 = 0x783;
/// `MLX5_CMD_OP_QUERY_SCHEDULING_ELEMENT` (Linux mlx5_ifc.h:221).
pub const QUERY_SCHEDULING_ELEMENT: u16 = 0x784;
/// `MLX5_CMD_OP_MODIFY_SCHEDULING_ELEMENT` (Linux mlx5_ifc.h:222).
pub const MODIFY_SCHEDULING_ELEMENT: u16 = 0x785;
/// `MLX5_CMD_OP_CREATE_QOS_PARA_VPORT` (Linux mlx5_ifc.h:223).
pub const CREATE_QOS_PARA_VPORT: u16 = 0x786;
/// `MLX5_CMD_OP_DESTROY_QOS_PARA_VPORT` (Linux mlx5_ifc.h:224).
pub const DESTROY_QOS_PARA_VPORT: u16 = 0x787;
/// `MLX5_CMD_OP_ALLOC_PD` (Linux mlx5_ifc.h:225, rdma-core mlx5_ifc.h:91, DPDK mlx5_prm.h:1271).
pub const ALLOC_PD: u16 = 0x800;
/// `MLX5_CMD_OP_DEALLOC_PD` (Linux mlx5_ifc.h:226, rdma-core mlx5_ifc.h:92, DPDK mlx5_prm.h:1272).
pub const DEALLOC_PD: u16 = 0x801;
/// `MLX5_CMD_OP_ALLOC_UAR` (Linux mlx5_ifc.h:227, rdma-core mlx5_ifc.h:93).
pub const ALLOC_UAR: u16 = 0x802;
/// `MLX5_CMD_OP_DEALLOC_UAR` (Linux mlx5_ifc.h:228, rdma-core mlx5_ifc.h:94).
pub const DEALLOC_UAR: u16 = 0x803;
/// `MLX5_CMD_OP_CONFIG_INT_MODERATION` (Linux mlx5_ifc.h:229).
pub const CONFIG_INT_MODERATION: u16 = 0x804;
/// `MLX5_CMD_OP_ACCESS_REG` (Linux mlx5_ifc.h:230, rdma-core mlx5_ifc.h:95).
pub const ACCESS_REG: u16 = 0x805;
/// `MLX5_CMD_OP_ACCESS_REGISTER` (DPDK mlx5_prm.h:1273).
pub const ACCESS_REGISTER: u16 = 0x805;
/// `MLX5_CMD_OP_ATTACH_TO_MCG` (Linux mlx5_ifc.h:231, rdma-core mlx5_ifc.h:96).
pub const ATTACH_TO_MCG: u16 = 0x806;
/// `MLX5_CMD_OP_DETACH_FROM_MCG` (Linux mlx5_ifc.h:232, rdma-core mlx5_ifc.h:97).
pub const DETACH_FROM_MCG: u16 = 0x807;
/// `MLX5_CMD_OP_GET_DROPPED_PACKET_LOG` (Linux mlx5_ifc.h:233).
pub const GET_DROPPED_PACKET_LOG: u16 = 0x80a;
/// `MLX5_CMD_OP_QUERY_MAD_DEMUX` (Linux mlx5_ifc.h:235).
pub const QUERY_MAD_DEMUX: u16 = 0x80b;
/// `MLX5_CMD_OP_SET_MAD_DEMUX` (Linux mlx5_ifc.h:236).
pub const SET_MAD_DEMUX: u16 = 0x80c;
/// `MLX5_CMD_OP_NOP` (Linux mlx5_ifc.h:237).
pub const NOP: u16 = 0x80d;
/// `MLX5_CMD_OP_ALLOC_XRCD` (Linux mlx5_ifc.h:238, rdma-core mlx5_ifc.h:98).
pub const ALLOC_XRCD: u16 = 0x80e;
/// `MLX5_CMD_OP_DEALLOC_XRCD` (Linux mlx5_ifc.h:239, rdma-core mlx5_ifc.h:99).
pub const DEALLOC_XRCD: u16 = 0x80f;
/// `MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN` (Linux mlx5_ifc.h:240, rdma-core mlx5_ifc.h:100, DPDK
/// mlx5_prm.h:1274).
pub const ALLOC_TRANSPORT_DOMAIN: u16 = 0x816;
/// `MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN` (Linux mlx5_ifc.h:241, rdma-core mlx5_ifc.h:101).
pub const DEALLOC_TRANSPORT_DOMAIN: u16 = 0x817;
/// `MLX5_CMD_OP_QUERY_DIAGNOSTIC_PARAMS` (Linux mlx5_ifc.h:242).
pub const QUERY_DIAGNOSTIC_PARAMS: u16 = 0x819;
/// `MLX5_CMD_OP_SET_DIAGNOSTIC_PARAMS` (Linux mlx5_ifc.h:243).
pub const SET_DIAGNOSTIC_PARAMS: u16 = 0x820;
/// `MLX5_CMD_OP_QUERY_DIAGNOSTIC_COUNTERS` (Linux mlx5_ifc.h:244).
pub const QUERY_DIAGNOSTIC_COUNTERS: u16 = 0x821;
/// `MLX5_CMD_OP_QUERY_CONG_STATUS` (Linux mlx5_ifc.h:245).
pub const QUERY_CONG_STATUS: u16 = 0x822;
/// `MLX5_CMD_OP_MODIFY_CONG_STATUS` (Linux mlx5_ifc.h:246).
pub const MODIFY_CONG_STATUS: u16 = 0x823;
/// `MLX5_CMD_OP_QUERY_CONG_PARAMS` (Linux mlx5_ifc.h:247).
pub const QUERY_CONG_PARAMS: u16 = 0x824;
/// `MLX5_CMD_OP_MODIFY_CONG_PARAMS` (Linux mlx5_ifc.h:248).
pub const MODIFY_CONG_PARAMS: u16 = 0x825;
/// `MLX5_CMD_OP_QUERY_CONG_STATISTICS` (Linux mlx5_ifc.h:249).
pub const QUERY_CONG_STATISTICS: u16 = 0x826;
/// `MLX5_CMD_OP_ADD_VXLAN_UDP_DPORT` (Linux mlx5_ifc.h:250, rdma-core mlx5_ifc.h:102).
pub const ADD_VXLAN_UDP_DPORT: u16 = 0x827;
/// `MLX5_CMD_OP_DELETE_VXLAN_UDP_DPORT` (Linux mlx5_ifc.h:251, rdma-core mlx5_ifc.h:103).
pub const DELETE_VXLAN_UDP_DPORT: u16 = 0x828;
/// `MLX5_CMD_OP_SET_L2_TABLE_ENTRY` (Linux mlx5_ifc.h:252, rdma-core mlx5_ifc.h:104).
pub const SET_L2_TABLE_ENTRY: u16 = 0x829;
/// `MLX5_CMD_OP_QUERY_L2_TABLE_ENTRY` (Linux mlx5_ifc.h:253).
pub const QUERY_L2_TABLE_ENTRY: u16 = 0x82a;
/// `MLX5_CMD_OP_DELETE_L2_TABLE_ENTRY` (Linux mlx5_ifc.h:254, rdma-core mlx5_ifc.h:105).
pub const DELETE_L2_TABLE_ENTRY: u16 = 0x82b;
/// `MLX5_CMD_OP_SET_WOL_ROL` (Linux mlx5_ifc.h:255).
pub const SET_WOL_ROL: u16 = 0x830;
/// `MLX5_CMD_OP_QUERY_WOL_ROL` (Linux mlx5_ifc.h:256).
pub const QUERY_WOL_ROL: u16 = 0x831;
/// `MLX5_CMD_OP_CREATE_LAG` (Linux mlx5_ifc.h:257).
pub const CREATE_LAG: u16 = 0x840;
/// `MLX5_CMD_OP_MODIFY_LAG` (Linux mlx5_ifc.h:258).
pub const MODIFY_LAG: u16 = 0x841;
/// `MLX5_CMD_OP_QUERY_LAG` (Linux mlx5_ifc.h:259, rdma-core mlx5_ifc.h:106, DPDK mlx5_prm.h:1275).
pub const QUERY_LAG: u16 = 0x842;
/// `MLX5_CMD_OP_DESTROY_LAG` (Linux mlx5_ifc.h:260).
pub const DESTROY_LAG: u16 = 0x843;
/// `MLX5_CMD_OP_CREATE_VPORT_LAG` (Linux mlx5_ifc.h:261).
pub const CREATE_VPORT_LAG: u16 = 0x844;
/// `MLX5_CMD_OP_DESTROY_VPORT_LAG` (Linux mlx5_ifc.h:262).
pub const DESTROY_VPORT_LAG: u16 = 0x845;
/// `MLX5_CMD_OP_CREATE_TIR` (Linux mlx5_ifc.h:263, rdma-core mlx5_ifc.h:107, DPDK mlx5_prm.h:1276).
pub const CREATE_TIR: u16 = 0x900;
/// `MLX5_CMD_OP_MODIFY_TIR` (Linux mlx5_ifc.h:264, DPDK mlx5_prm.h:1277).
pub const MODIFY_TIR: u16 = 0x901;
/// `MLX5_CMD_OP_DESTROY_TIR` (Linux mlx5_ifc.h:265, rdma-core mlx5_ifc.h:108).
pub const DESTROY_TIR: u16 = 0x902;
/// `MLX5_CMD_OP_QUERY_TIR` (Linux mlx5_ifc.h:266).
pub const QUERY_TIR: u16 = 0x903;
/// `MLX5_CMD_OP_CREATE_SQ` (Linux mlx5_ifc.h:267, rdma-core mlx5_ifc.h:109, DPDK mlx5_prm.h:1278).
pub const CREATE_SQ: u16 = 0x904;
/// `MLX5_CMD_OP_MODIFY_SQ` (Linux mlx5_ifc.h:268, rdma-core mlx5_ifc.h:110, DPDK mlx5_prm.h:1279).
pub const MODIFY_SQ: u16 = 0x905;
/// `MLX5_CMD_OP_DESTROY_SQ` (Linux mlx5_ifc.h:269, rdma-core mlx5_ifc.h:111).
pub const DESTROY_SQ: u16 = 0x906;
/// `MLX5_CMD_OP_QUERY_SQ` (Linux mlx5_ifc.h:270, DPDK mlx5_prm.h:1280).
pub const QUERY_SQ: u16 = 0x907;
/// `MLX5_CMD_OP_CREATE_RQ` (Linux mlx5_ifc.h:271, rdma-core mlx5_ifc.h:112, DPDK mlx5_prm.h:1281).
pub const CREATE_RQ: u16 = 0x908;
/// `MLX5_CMD_OP_MODIFY_RQ` (Linux mlx5_ifc.h:272, DPDK mlx5_prm.h:1282).
pub const MODIFY_RQ: u16 = 0x909;
/// `MLX5_CMD_OP_DESTROY_RQ` (Linux mlx5_ifc.h:274, rdma-core mlx5_ifc.h:113).
pub const DESTROY_RQ: u16 = 0x90a;
/// `MLX5_CMD_OP_QUERY_RQ` (Linux mlx5_ifc.h:275, DPDK mlx5_prm.h:1283).
pub const QUERY_RQ: u16 = 0x90b;
/// `MLX5_CMD_OP_CREATE_RMP` (Linux mlx5_ifc.h:276, rdma-core mlx5_ifc.h:114, DPDK mlx5_prm.h:1284).
pub const CREATE_RMP: u16 = 0x90c;
/// `MLX5_CMD_OP_MODIFY_RMP` (Linux mlx5_ifc.h:277, DPDK mlx5_prm.h:1285).
pub const MODIFY_RMP: u16 = 0x90d;
/// `MLX5_CMD_OP_DESTROY_RMP` (Linux mlx5_ifc.h:278, rdma-core mlx5_ifc.h:115, DPDK
/// mlx5_prm.h:1286).
pub const DESTROY_RMP: u16 = 0x90e;
/// `MLX5_CMD_OP_QUERY_RMP` (Linux mlx5_ifc.h:279, DPDK mlx5_prm.h:1287).
pub const QUERY_RMP: u16 = 0x90f;
/// `MLX5_CMD_OP_SET_DELAY_DROP_PARAMS` (Linux mlx5_ifc.h:273).
pub const SET_DELAY_DROP_PARAMS: u16 = 0x910;
/// `MLX5_CMD_OP_CREATE_TIS` (Linux mlx5_ifc.h:280, rdma-core mlx5_ifc.h:116, DPDK mlx5_prm.h:1288).
pub const CREATE_TIS: u16 = 0x912;
/// `MLX5_CMD_OP_MODIFY_TIS` (Linux mlx5_ifc.h:281, rdma-core mlx5_ifc.h:117).
pub const MODIFY_TIS: u16 = 0x913;
/// `MLX5_CMD_OP_DESTROY_TIS` (Linux mlx5_ifc.h:282, rdma-core mlx5_ifc.h:118).
pub const DESTROY_TIS: u16 = 0x914;
/// `MLX5_CMD_OP_QUERY_TIS` (Linux mlx5_ifc.h:283, rdma-core mlx5_ifc.h:119, DPDK mlx5_prm.h:1289).
pub const QUERY_TIS: u16 = 0x915;
/// `MLX5_CMD_OP_CREATE_RQT` (Linux mlx5_ifc.h:284, rdma-core mlx5_ifc.h:120, DPDK mlx5_prm.h:1290).
pub const CREATE_RQT: u16 = 0x916;
/// `MLX5_CMD_OP_MODIFY_RQT` (Linux mlx5_ifc.h:285, DPDK mlx5_prm.h:1291).
pub const MODIFY_RQT: u16 = 0x917;
/// `MLX5_CMD_OP_DESTROY_RQT` (Linux mlx5_ifc.h:286, rdma-core mlx5_ifc.h:121).
pub const DESTROY_RQT: u16 = 0x918;
/// `MLX5_CMD_OP_QUERY_RQT` (Linux mlx5_ifc.h:287).
pub const QUERY_RQT: u16 = 0x919;
/// `MLX5_CMD_OP_SET_FLOW_TABLE_ROOT` (Linux mlx5_ifc.h:288).
pub const SET_FLOW_TABLE_ROOT: u16 = 0x92f;
/// `MLX5_CMD_OP_CREATE_FLOW_TABLE` (Linux mlx5_ifc.h:289, rdma-core mlx5_ifc.h:122, DPDK
/// mlx5_prm.h:1292).
pub const CREATE_FLOW_TABLE: u16 = 0x930;
/// `MLX5_CMD_OP_DESTROY_FLOW_TABLE` (Linux mlx5_ifc.h:290, rdma-core mlx5_ifc.h:123).
pub const DESTROY_FLOW_TABLE: u16 = 0x931;
/// `MLX5_CMD_OP_QUERY_FLOW_TABLE` (Linux mlx5_ifc.h:291, rdma-core mlx5_ifc.h:124, DPDK
/// mlx5_prm.h:1293).
pub const QUERY_FLOW_TABLE: u16 = 0x932;
/// `MLX5_CMD_OP_CREATE_FLOW_GROUP` (Linux mlx5_ifc.h:292, rdma-core mlx5_ifc.h:125, DPDK
/// mlx5_prm.h:1294).
pub const CREATE_FLOW_GROUP: u16 = 0x933;
/// `MLX5_CMD_OP_DESTROY_FLOW_GROUP` (Linux mlx5_ifc.h:293, rdma-core mlx5_ifc.h:126).
pub const DESTROY_FLOW_GROUP: u16 = 0x934;
/// `MLX5_CMD_OP_QUERY_FLOW_GROUP` (Linux mlx5_ifc.h:294).
pub const QUERY_FLOW_GROUP: u16 = 0x935;
/// `MLX5_CMD_OP_SET_FLOW_TABLE_ENTRY` (Linux mlx5_ifc.h:295, rdma-core mlx5_ifc.h:127, DPDK
/// mlx5_prm.h:1295).
pub const SET_FLOW_TABLE_ENTRY: u16 = 0x936;
/// `MLX5_CMD_OP_QUERY_FLOW_TABLE_ENTRY` (Linux mlx5_ifc.h:296).
pub const QUERY_FLOW_TABLE_ENTRY: u16 = 0x937;
/// `MLX5_CMD_OP_DELETE_FLOW_TABLE_ENTRY` (Linux mlx5_ifc.h:297, rdma-core mlx5_ifc.h:128).
pub const DELETE_FLOW_TABLE_ENTRY: u16 = 0x938;
/// `MLX5_CMD_OP_ALLOC_FLOW_COUNTER` (Linux mlx5_ifc.h:298, DPDK mlx5_prm.h:1299).
pub const ALLOC_FLOW_COUNTER: u16 = 0x939;
/// `MLX5_CMD_OP_CREATE_FLOW_COUNTER` (rdma-core mlx5_ifc.h:129).
pub const CREATE_FLOW_COUNTER: u16 = 0x939;
/// `MLX5_CMD_OP_DEALLOC_FLOW_COUNTER` (Linux mlx5_ifc.h:299, rdma-core mlx5_ifc.h:130).
pub const DEALLOC_FLOW_COUNTER: u16 = 0x93a;
/// `MLX5_CMD_OP_QUERY_FLOW_COUNTER` (Linux mlx5_ifc.h:300, DPDK mlx5_prm.h:1300).
pub const QUERY_FLOW_COUNTER: u16 = 0x93b;
/// `MLX5_CMD_OP_MODIFY_FLOW_TABLE` (Linux mlx5_ifc.h:301, DPDK mlx5_prm.h:1296).
pub const MODIFY_FLOW_TABLE: u16 = 0x93c;
/// `MLX5_CMD_OP_ALLOC_PACKET_REFORMAT_CONTEXT` (Linux mlx5_ifc.h:302, rdma-core mlx5_ifc.h:131,
/// DPDK mlx5_prm.h:1297).
pub const ALLOC_PACKET_REFORMAT_CONTEXT: u16 = 0x93d;
/// `MLX5_CMD_OP_DEALLOC_PACKET_REFORMAT_CONTEXT` (Linux mlx5_ifc.h:303, rdma-core mlx5_ifc.h:132,
/// DPDK mlx5_prm.h:1298).
pub const DEALLOC_PACKET_REFORMAT_CONTEXT: u16 = 0x93e;
/// `MLX5_CMD_OP_QUERY_PACKET_REFORMAT_CONTEXT` (Linux mlx5_ifc.h:304).
pub const QUERY_PACKET_REFORMAT_CONTEXT: u16 = 0x93f;
/// `MLX5_CMD_OP_ALLOC_MODIFY_HEADER_CONTEXT` (Linux mlx5_ifc.h:305, rdma-core mlx5_ifc.h:133).
pub const ALLOC_MODIFY_HEADER_CONTEXT: u16 = 0x940;
/// `MLX5_CMD_OP_DEALLOC_MODIFY_HEADER_CONTEXT` (Linux mlx5_ifc.h:306, rdma-core mlx5_ifc.h:134).
pub const DEALLOC_MODIFY_HEADER_CONTEXT: u16 = 0x941;
/// `MLX5_CMD_OP_QUERY_MODIFY_HEADER_CONTEXT` (Linux mlx5_ifc.h:307).
pub const QUERY_MODIFY_HEADER_CONTEXT: u16 = 0x942;
/// `MLX5_CMD_OP_FPGA_CREATE_QP` (Linux mlx5_ifc.h:308).
pub const FPGA_CREATE_QP: u16 = 0x960;
/// `MLX5_CMD_OP_FPGA_MODIFY_QP` (Linux mlx5_ifc.h:309).
pub const FPGA_MODIFY_QP: u16 = 0x961;
/// `MLX5_CMD_OP_FPGA_QUERY_QP` (Linux mlx5_ifc.h:310).
pub const FPGA_QUERY_QP: u16 = 0x962;
/// `MLX5_CMD_OP_FPGA_DESTROY_QP` (Linux mlx5_ifc.h:311).
pub const FPGA_DESTROY_QP: u16 = 0x963;
/// `MLX5_CMD_OP_FPGA_QUERY_QP_COUNTERS` (Linux mlx5_ifc.h:312).
pub const FPGA_QUERY_QP_COUNTERS: u16 = 0x964;
/// `MLX5_CMD_OP_CREATE_GENERAL_OBJECT` (Linux mlx5_ifc.h:313, rdma-core mlx5_ifc.h:135, DPDK
/// mlx5_prm.h:1301).
pub const CREATE_GENERAL_OBJECT: u16 = 0xa00;
/// `MLX5_CMD_OP_MODIFY_GENERAL_OBJECT` (Linux mlx5_ifc.h:314, rdma-core mlx5_ifc.h:136, DPDK
/// mlx5_prm.h:1302).
pub const MODIFY_GENERAL_OBJECT: u16 = 0xa01;
/// `MLX5_CMD_OP_QUERY_GENERAL_OBJECT` (Linux mlx5_ifc.h:315, rdma-core mlx5_ifc.h:137, DPDK
/// mlx5_prm.h:1303).
pub const QUERY_GENERAL_OBJECT: u16 = 0xa02;
/// `MLX5_CMD_OP_DESTROY_GENERAL_OBJECT` (Linux mlx5_ifc.h:316, rdma-core mlx5_ifc.h:138).
pub const DESTROY_GENERAL_OBJECT: u16 = 0xa03;
/// `MLX5_CMD_OP_CREATE_UCTX` (Linux mlx5_ifc.h:317).
pub const CREATE_UCTX: u16 = 0xa04;
/// `MLX5_CMD_OP_DESTROY_UCTX` (Linux mlx5_ifc.h:318).
pub const DESTROY_UCTX: u16 = 0xa06;
/// `MLX5_CMD_OP_CREATE_UMEM` (Linux mlx5_ifc.h:319, rdma-core mlx5_ifc.h:139).
pub const CREATE_UMEM: u16 = 0xa08;
/// `MLX5_CMD_OP_DESTROY_UMEM` (Linux mlx5_ifc.h:320, rdma-core mlx5_ifc.h:140).
pub const DESTROY_UMEM: u16 = 0xa0a;
/// `MLX5_CMD_OP_GENERAL_START` (Linux mlx5_ifc.h:331). Range delimiter.
pub const GENERAL_START: u16 = 0xb00;
/// `MLX5_CMD_OP_SYNC_STEERING` (Linux mlx5_ifc.h:321, rdma-core mlx5_ifc.h:141).
pub const SYNC_STEERING: u16 = 0xb00;
/// `MLX5_CMD_OP_ACCESS_REGISTER_USER` (DPDK mlx5_prm.h:1308).
pub const ACCESS_REGISTER_USER: u16 = 0xb0c;
/// `MLX5_CMD_OP_QUERY_VHCA_STATE` (Linux mlx5_ifc.h:322).
pub const QUERY_VHCA_STATE: u16 = 0xb0d;
/// `MLX5_CMD_OP_MODIFY_VHCA_STATE` (Linux mlx5_ifc.h:323).
pub const MODIFY_VHCA_STATE: u16 = 0xb0e;
/// `MLX5_CMD_OP_SYNC_CRYPTO` (Linux mlx5_ifc.h:324).
pub const SYNC_CRYPTO: u16 = 0xb12;
/// `MLX5_CMD_OP_QUERY_MATCH_SAMPLE_INFO` (DPDK mlx5_prm.h:1309).
pub const QUERY_MATCH_SAMPLE_INFO: u16 = 0xb13;
/// `MLX5_CMD_OP_ALLOW_OTHER_VHCA_ACCESS` (Linux mlx5_ifc.h:325, DPDK mlx5_prm.h:1310).
pub const ALLOW_OTHER_VHCA_ACCESS: u16 = 0xb16;
/// `MLX5_CMD_OP_GENERATE_WQE` (DPDK mlx5_prm.h:1311).
pub const GENERATE_WQE: u16 = 0xb17;
/// `MLX5_CMD_OP_MAX` (Linux mlx5_ifc.h:326). Enum terminator in Linux, not an opcode.
pub const MAX: u16 = 0xb17;
/// `MLX5_CMD_OP_GENERAL_END` (Linux mlx5_ifc.h:332). Range delimiter.
pub const GENERAL_END: u16 = 0xd00;

/// `(C name, value)` for every opcode name in the reference (aliases included).
pub const ALL: &[(&str, u16)] = &[
    ("MLX5_CMD_OP_QUERY_HCA_CAP", QUERY_HCA_CAP),
    ("MLX5_CMD_OP_QUERY_ADAPTER", QUERY_ADAPTER),
    ("MLX5_CMD_OP_INIT_HCA", INIT_HCA),
    ("MLX5_CMD_OP_TEARDOWN_HCA", TEARDOWN_HCA),
    ("MLX5_CMD_OP_ENABLE_HCA", ENABLE_HCA),
    ("MLX5_CMD_OP_DISABLE_HCA", DISABLE_HCA),
    ("MLX5_CMD_OP_QUERY_PAGES", QUERY_PAGES),
    ("MLX5_CMD_OP_MANAGE_PAGES", MANAGE_PAGES),
    ("MLX5_CMD_OP_SET_HCA_CAP", SET_HCA_CAP),
    ("MLX5_CMD_OP_QUERY_ISSI", QUERY_ISSI),
    ("MLX5_CMD_OP_SET_ISSI", SET_ISSI),
    ("MLX5_CMD_OP_SET_DRIVER_VERSION", SET_DRIVER_VERSION),
    ("MLX5_CMD_OP_QUERY_SF_PARTITION", QUERY_SF_PARTITION),
    ("MLX5_CMD_OP_ALLOC_SF", ALLOC_SF),
    ("MLX5_CMD_OP_DEALLOC_SF", DEALLOC_SF),
    ("MLX5_CMD_OP_SUSPEND_VHCA", SUSPEND_VHCA),
    ("MLX5_CMD_OP_RESUME_VHCA", RESUME_VHCA),
    (
        "MLX5_CMD_OP_QUERY_VHCA_MIGRATION_STATE",
        QUERY_VHCA_MIGRATION_STATE,
    ),
    ("MLX5_CMD_OP_SAVE_VHCA_STATE", SAVE_VHCA_STATE),
    ("MLX5_CMD_OP_LOAD_VHCA_STATE", LOAD_VHCA_STATE),
    ("MLX5_CMD_OP_CREATE_MKEY", CREATE_MKEY),
    ("MLX5_CMD_OP_QUERY_MKEY", QUERY_MKEY),
    ("MLX5_CMD_OP_DESTROY_MKEY", DESTROY_MKEY),
    ("MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS", QUERY_SPECIAL_CONTEXTS),
    ("MLX5_CMD_OP_PAGE_FAULT_RESUME", PAGE_FAULT_RESUME),
    ("MLX5_CMD_OP_ALLOC_MEMIC", ALLOC_MEMIC),
    ("MLX5_CMD_OP_DEALLOC_MEMIC", DEALLOC_MEMIC),
    ("MLX5_CMD_OP_MODIFY_MEMIC", MODIFY_MEMIC),
    ("MLX5_CMD_OP_CREATE_EQ", CREATE_EQ),
    ("MLX5_CMD_OP_DESTROY_EQ", DESTROY_EQ),
    ("MLX5_CMD_OP_QUERY_EQ", QUERY_EQ),
    ("MLX5_CMD_OP_GEN_EQE", GEN_EQE),
    ("MLX5_CMD_OP_CREATE_CQ", CREATE_CQ),
    ("MLX5_CMD_OP_DESTROY_CQ", DESTROY_CQ),
    ("MLX5_CMD_OP_QUERY_CQ", QUERY_CQ),
    ("MLX5_CMD_OP_MODIFY_CQ", MODIFY_CQ),
    ("MLX5_CMD_OP_CREATE_QP", CREATE_QP),
    ("MLX5_CMD_OP_DESTROY_QP", DESTROY_QP),
    ("MLX5_CMD_OP_RST2INIT_QP", RST2INIT_QP),
    ("MLX5_CMD_OP_INIT2RTR_QP", INIT2RTR_QP),
    ("MLX5_CMD_OP_RTR2RTS_QP", RTR2RTS_QP),
    ("MLX5_CMD_OP_RTS2RTS_QP", RTS2RTS_QP),
    ("MLX5_CMD_OP_SQERR2RTS_QP", SQERR2RTS_QP),
    ("MLX5_CMD_OP_2ERR_QP", QP_2ERR),
    ("MLX5_CMD_OP_QP_2ERR", QP_2ERR),
    ("MLX5_CMD_OP_2RST_QP", QP_2RST),
    ("MLX5_CMD_OP_QP_2RST", QP_2RST),
    ("MLX5_CMD_OP_QUERY_QP", QUERY_QP),
    ("MLX5_CMD_OP_SQD2RTS_QP", SQD2RTS_QP),
    ("MLX5_CMD_OP_SQD_RTS_QP", SQD_RTS_QP),
    ("MLX5_CMD_OP_MAD_IFC", MAD_IFC),
    ("MLX5_CMD_OP_INIT2INIT_QP", INIT2INIT_QP),
    ("MLX5_CMD_OP_SUSPEND_QP", SUSPEND_QP),
    ("MLX5_CMD_OP_RESUME_QP", RESUME_QP),
    ("MLX5_CMD_OP_CREATE_PSV", CREATE_PSV),
    ("MLX5_CMD_OP_DESTROY_PSV", DESTROY_PSV),
    ("MLX5_CMD_OP_CREATE_SRQ", CREATE_SRQ),
    ("MLX5_CMD_OP_DESTROY_SRQ", DESTROY_SRQ),
    ("MLX5_CMD_OP_QUERY_SRQ", QUERY_SRQ),
    ("MLX5_CMD_OP_ARM_RQ", ARM_RQ),
    ("MLX5_CMD_OP_CREATE_XRC_SRQ", CREATE_XRC_SRQ),
    ("MLX5_CMD_OP_DESTROY_XRC_SRQ", DESTROY_XRC_SRQ),
    ("MLX5_CMD_OP_QUERY_XRC_SRQ", QUERY_XRC_SRQ),
    ("MLX5_CMD_OP_ARM_XRC_SRQ", ARM_XRC_SRQ),
    ("MLX5_CMD_OP_CREATE_DCT", CREATE_DCT),
    ("MLX5_CMD_OP_DESTROY_DCT", DESTROY_DCT),
    ("MLX5_CMD_OP_DRAIN_DCT", DRAIN_DCT),
    ("MLX5_CMD_OP_QUERY_DCT", QUERY_DCT),
    (
        "MLX5_CMD_OP_ARM_DCT_FOR_KEY_VIOLATION",
        ARM_DCT_FOR_KEY_VIOLATION,
    ),
    ("MLX5_CMD_OP_SET_DC_CNAK_TRACE", SET_DC_CNAK_TRACE),
    ("MLX5_CMD_OP_CREATE_XRQ", CREATE_XRQ),
    ("MLX5_CMD_OP_DESTROY_XRQ", DESTROY_XRQ),
    ("MLX5_CMD_OP_QUERY_XRQ", QUERY_XRQ),
    ("MLX5_CMD_OP_ARM_XRQ", ARM_XRQ),
    (
        "MLX5_CMD_OP_CREATE_NVMF_BACKEND_CTRL",
        CREATE_NVMF_BACKEND_CTRL,
    ),
    (
        "MLX5_CMD_OP_DESTROY_NVMF_BACKEND_CTRL",
        DESTROY_NVMF_BACKEND_CTRL,
    ),
    (
        "MLX5_CMD_OP_QUERY_NVMF_BACKEND_CTRL",
        QUERY_NVMF_BACKEND_CTRL,
    ),
    ("MLX5_CMD_OP_ATTACH_NVMF_NAMESPACE", ATTACH_NVMF_NAMESPACE),
    ("MLX5_CMD_OP_DETACH_NVMF_NAMESPACE", DETACH_NVMF_NAMESPACE),
    (
        "MLX5_CMD_OP_QUERY_XRQ_DC_PARAMS_ENTRY",
        QUERY_XRQ_DC_PARAMS_ENTRY,
    ),
    (
        "MLX5_CMD_OP_SET_XRQ_DC_PARAMS_ENTRY",
        SET_XRQ_DC_PARAMS_ENTRY,
    ),
    ("MLX5_CMD_OP_QUERY_XRQ_ERROR_PARAMS", QUERY_XRQ_ERROR_PARAMS),
    (
        "MLX5_CMD_OP_QUERY_NVMF_NAMESPACE_CONTEXT",
        QUERY_NVMF_NAMESPACE_CONTEXT,
    ),
    ("MLX5_CMD_OP_RELEASE_XRQ_ERROR", RELEASE_XRQ_ERROR),
    ("MLX5_CMD_OP_MODIFY_XRQ", MODIFY_XRQ),
    ("MLX5_CMD_OP_QUERY_ESW_FUNCTIONS", QUERY_ESW_FUNCTIONS),
    ("MLX5_CMD_OP_QUERY_VPORT_STATE", QUERY_VPORT_STATE),
    ("MLX5_CMD_OP_MODIFY_VPORT_STATE", MODIFY_VPORT_STATE),
    (
        "MLX5_CMD_OP_QUERY_ESW_VPORT_CONTEXT",
        QUERY_ESW_VPORT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_MODIFY_ESW_VPORT_CONTEXT",
        MODIFY_ESW_VPORT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT",
        QUERY_NIC_VPORT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT",
        MODIFY_NIC_VPORT_CONTEXT,
    ),
    ("MLX5_CMD_OP_QUERY_ROCE_ADDRESS", QUERY_ROCE_ADDRESS),
    ("MLX5_CMD_OP_SET_ROCE_ADDRESS", SET_ROCE_ADDRESS),
    (
        "MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT",
        QUERY_HCA_VPORT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_MODIFY_HCA_VPORT_CONTEXT",
        MODIFY_HCA_VPORT_CONTEXT,
    ),
    ("MLX5_CMD_OP_QUERY_HCA_VPORT_GID", QUERY_HCA_VPORT_GID),
    ("MLX5_CMD_OP_QUERY_HCA_VPORT_PKEY", QUERY_HCA_VPORT_PKEY),
    ("MLX5_CMD_OP_QUERY_VNIC_ENV", QUERY_VNIC_ENV),
    ("MLX5_CMD_OP_QUERY_VPORT_COUNTER", QUERY_VPORT_COUNTER),
    ("MLX5_CMD_OP_ALLOC_Q_COUNTER", ALLOC_Q_COUNTER),
    ("MLX5_CMD_OP_DEALLOC_Q_COUNTER", DEALLOC_Q_COUNTER),
    ("MLX5_CMD_OP_QUERY_Q_COUNTER", QUERY_Q_COUNTER),
    ("MLX5_CMD_OP_SET_MONITOR_COUNTER", SET_MONITOR_COUNTER),
    ("MLX5_CMD_OP_ARM_MONITOR_COUNTER", ARM_MONITOR_COUNTER),
    ("MLX5_CMD_OP_SET_PP_RATE_LIMIT", SET_PP_RATE_LIMIT),
    ("MLX5_CMD_OP_QUERY_RATE_LIMIT", QUERY_RATE_LIMIT),
    (
        "MLX5_CMD_OP_CREATE_SCHEDULING_ELEMENT",
        CREATE_SCHEDULING_ELEMENT,
    ),
    (
        "MLX5_CMD_OP_DESTROY_SCHEDULING_ELEMENT",
        DESTROY_SCHEDULING_ELEMENT,
    ),
    (
        "MLX5_CMD_OP_QUERY_SCHEDULING_ELEMENT",
        QUERY_SCHEDULING_ELEMENT,
    ),
    (
        "MLX5_CMD_OP_MODIFY_SCHEDULING_ELEMENT",
        MODIFY_SCHEDULING_ELEMENT,
    ),
    ("MLX5_CMD_OP_CREATE_QOS_PARA_VPORT", CREATE_QOS_PARA_VPORT),
    ("MLX5_CMD_OP_DESTROY_QOS_PARA_VPORT", DESTROY_QOS_PARA_VPORT),
    ("MLX5_CMD_OP_ALLOC_PD", ALLOC_PD),
    ("MLX5_CMD_OP_DEALLOC_PD", DEALLOC_PD),
    ("MLX5_CMD_OP_ALLOC_UAR", ALLOC_UAR),
    ("MLX5_CMD_OP_DEALLOC_UAR", DEALLOC_UAR),
    ("MLX5_CMD_OP_CONFIG_INT_MODERATION", CONFIG_INT_MODERATION),
    ("MLX5_CMD_OP_ACCESS_REG", ACCESS_REG),
    ("MLX5_CMD_OP_ACCESS_REGISTER", ACCESS_REGISTER),
    ("MLX5_CMD_OP_ATTACH_TO_MCG", ATTACH_TO_MCG),
    ("MLX5_CMD_OP_DETACH_FROM_MCG", DETACH_FROM_MCG),
    ("MLX5_CMD_OP_GET_DROPPED_PACKET_LOG", GET_DROPPED_PACKET_LOG),
    ("MLX5_CMD_OP_QUERY_MAD_DEMUX", QUERY_MAD_DEMUX),
    ("MLX5_CMD_OP_SET_MAD_DEMUX", SET_MAD_DEMUX),
    ("MLX5_CMD_OP_NOP", NOP),
    ("MLX5_CMD_OP_ALLOC_XRCD", ALLOC_XRCD),
    ("MLX5_CMD_OP_DEALLOC_XRCD", DEALLOC_XRCD),
    ("MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN", ALLOC_TRANSPORT_DOMAIN),
    (
        "MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN",
        DEALLOC_TRANSPORT_DOMAIN,
    ),
    (
        "MLX5_CMD_OP_QUERY_DIAGNOSTIC_PARAMS",
        QUERY_DIAGNOSTIC_PARAMS,
    ),
    ("MLX5_CMD_OP_SET_DIAGNOSTIC_PARAMS", SET_DIAGNOSTIC_PARAMS),
    (
        "MLX5_CMD_OP_QUERY_DIAGNOSTIC_COUNTERS",
        QUERY_DIAGNOSTIC_COUNTERS,
    ),
    ("MLX5_CMD_OP_QUERY_CONG_STATUS", QUERY_CONG_STATUS),
    ("MLX5_CMD_OP_MODIFY_CONG_STATUS", MODIFY_CONG_STATUS),
    ("MLX5_CMD_OP_QUERY_CONG_PARAMS", QUERY_CONG_PARAMS),
    ("MLX5_CMD_OP_MODIFY_CONG_PARAMS", MODIFY_CONG_PARAMS),
    ("MLX5_CMD_OP_QUERY_CONG_STATISTICS", QUERY_CONG_STATISTICS),
    ("MLX5_CMD_OP_ADD_VXLAN_UDP_DPORT", ADD_VXLAN_UDP_DPORT),
    ("MLX5_CMD_OP_DELETE_VXLAN_UDP_DPORT", DELETE_VXLAN_UDP_DPORT),
    ("MLX5_CMD_OP_SET_L2_TABLE_ENTRY", SET_L2_TABLE_ENTRY),
    ("MLX5_CMD_OP_QUERY_L2_TABLE_ENTRY", QUERY_L2_TABLE_ENTRY),
    ("MLX5_CMD_OP_DELETE_L2_TABLE_ENTRY", DELETE_L2_TABLE_ENTRY),
    ("MLX5_CMD_OP_SET_WOL_ROL", SET_WOL_ROL),
    ("MLX5_CMD_OP_QUERY_WOL_ROL", QUERY_WOL_ROL),
    ("MLX5_CMD_OP_CREATE_LAG", CREATE_LAG),
    ("MLX5_CMD_OP_MODIFY_LAG", MODIFY_LAG),
    ("MLX5_CMD_OP_QUERY_LAG", QUERY_LAG),
    ("MLX5_CMD_OP_DESTROY_LAG", DESTROY_LAG),
    ("MLX5_CMD_OP_CREATE_VPORT_LAG", CREATE_VPORT_LAG),
    ("MLX5_CMD_OP_DESTROY_VPORT_LAG", DESTROY_VPORT_LAG),
    ("MLX5_CMD_OP_CREATE_TIR", CREATE_TIR),
    ("MLX5_CMD_OP_MODIFY_TIR", MODIFY_TIR),
    ("MLX5_CMD_OP_DESTROY_TIR", DESTROY_TIR),
    ("MLX5_CMD_OP_QUERY_TIR", QUERY_TIR),
    ("MLX5_CMD_OP_CREATE_SQ", CREATE_SQ),
    ("MLX5_CMD_OP_MODIFY_SQ", MODIFY_SQ),
    ("MLX5_CMD_OP_DESTROY_SQ", DESTROY_SQ),
    ("MLX5_CMD_OP_QUERY_SQ", QUERY_SQ),
    ("MLX5_CMD_OP_CREATE_RQ", CREATE_RQ),
    ("MLX5_CMD_OP_MODIFY_RQ", MODIFY_RQ),
    ("MLX5_CMD_OP_DESTROY_RQ", DESTROY_RQ),
    ("MLX5_CMD_OP_QUERY_RQ", QUERY_RQ),
    ("MLX5_CMD_OP_CREATE_RMP", CREATE_RMP),
    ("MLX5_CMD_OP_MODIFY_RMP", MODIFY_RMP),
    ("MLX5_CMD_OP_DESTROY_RMP", DESTROY_RMP),
    ("MLX5_CMD_OP_QUERY_RMP", QUERY_RMP),
    ("MLX5_CMD_OP_SET_DELAY_DROP_PARAMS", SET_DELAY_DROP_PARAMS),
    ("MLX5_CMD_OP_CREATE_TIS", CREATE_TIS),
    ("MLX5_CMD_OP_MODIFY_TIS", MODIFY_TIS),
    ("MLX5_CMD_OP_DESTROY_TIS", DESTROY_TIS),
    ("MLX5_CMD_OP_QUERY_TIS", QUERY_TIS),
    ("MLX5_CMD_OP_CREATE_RQT", CREATE_RQT),
    ("MLX5_CMD_OP_MODIFY_RQT", MODIFY_RQT),
    ("MLX5_CMD_OP_DESTROY_RQT", DESTROY_RQT),
    ("MLX5_CMD_OP_QUERY_RQT", QUERY_RQT),
    ("MLX5_CMD_OP_SET_FLOW_TABLE_ROOT", SET_FLOW_TABLE_ROOT),
    ("MLX5_CMD_OP_CREATE_FLOW_TABLE", CREATE_FLOW_TABLE),
    ("MLX5_CMD_OP_DESTROY_FLOW_TABLE", DESTROY_FLOW_TABLE),
    ("MLX5_CMD_OP_QUERY_FLOW_TABLE", QUERY_FLOW_TABLE),
    ("MLX5_CMD_OP_CREATE_FLOW_GROUP", CREATE_FLOW_GROUP),
    ("MLX5_CMD_OP_DESTROY_FLOW_GROUP", DESTROY_FLOW_GROUP),
    ("MLX5_CMD_OP_QUERY_FLOW_GROUP", QUERY_FLOW_GROUP),
    ("MLX5_CMD_OP_SET_FLOW_TABLE_ENTRY", SET_FLOW_TABLE_ENTRY),
    ("MLX5_CMD_OP_QUERY_FLOW_TABLE_ENTRY", QUERY_FLOW_TABLE_ENTRY),
    (
        "MLX5_CMD_OP_DELETE_FLOW_TABLE_ENTRY",
        DELETE_FLOW_TABLE_ENTRY,
    ),
    ("MLX5_CMD_OP_ALLOC_FLOW_COUNTER", ALLOC_FLOW_COUNTER),
    ("MLX5_CMD_OP_CREATE_FLOW_COUNTER", CREATE_FLOW_COUNTER),
    ("MLX5_CMD_OP_DEALLOC_FLOW_COUNTER", DEALLOC_FLOW_COUNTER),
    ("MLX5_CMD_OP_QUERY_FLOW_COUNTER", QUERY_FLOW_COUNTER),
    ("MLX5_CMD_OP_MODIFY_FLOW_TABLE", MODIFY_FLOW_TABLE),
    (
        "MLX5_CMD_OP_ALLOC_PACKET_REFORMAT_CONTEXT",
        ALLOC_PACKET_REFORMAT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_DEALLOC_PACKET_REFORMAT_CONTEXT",
        DEALLOC_PACKET_REFORMAT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_QUERY_PACKET_REFORMAT_CONTEXT",
        QUERY_PACKET_REFORMAT_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_ALLOC_MODIFY_HEADER_CONTEXT",
        ALLOC_MODIFY_HEADER_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_DEALLOC_MODIFY_HEADER_CONTEXT",
        DEALLOC_MODIFY_HEADER_CONTEXT,
    ),
    (
        "MLX5_CMD_OP_QUERY_MODIFY_HEADER_CONTEXT",
        QUERY_MODIFY_HEADER_CONTEXT,
    ),
    ("MLX5_CMD_OP_FPGA_CREATE_QP", FPGA_CREATE_QP),
    ("MLX5_CMD_OP_FPGA_MODIFY_QP", FPGA_MODIFY_QP),
    ("MLX5_CMD_OP_FPGA_QUERY_QP", FPGA_QUERY_QP),
    ("MLX5_CMD_OP_FPGA_DESTROY_QP", FPGA_DESTROY_QP),
    ("MLX5_CMD_OP_FPGA_QUERY_QP_COUNTERS", FPGA_QUERY_QP_COUNTERS),
    ("MLX5_CMD_OP_CREATE_GENERAL_OBJECT", CREATE_GENERAL_OBJECT),
    ("MLX5_CMD_OP_MODIFY_GENERAL_OBJECT", MODIFY_GENERAL_OBJECT),
    ("MLX5_CMD_OP_QUERY_GENERAL_OBJECT", QUERY_GENERAL_OBJECT),
    ("MLX5_CMD_OP_DESTROY_GENERAL_OBJECT", DESTROY_GENERAL_OBJECT),
    ("MLX5_CMD_OP_CREATE_UCTX", CREATE_UCTX),
    ("MLX5_CMD_OP_DESTROY_UCTX", DESTROY_UCTX),
    ("MLX5_CMD_OP_CREATE_UMEM", CREATE_UMEM),
    ("MLX5_CMD_OP_DESTROY_UMEM", DESTROY_UMEM),
    ("MLX5_CMD_OP_GENERAL_START", GENERAL_START),
    ("MLX5_CMD_OP_SYNC_STEERING", SYNC_STEERING),
    ("MLX5_CMD_OP_ACCESS_REGISTER_USER", ACCESS_REGISTER_USER),
    ("MLX5_CMD_OP_QUERY_VHCA_STATE", QUERY_VHCA_STATE),
    ("MLX5_CMD_OP_MODIFY_VHCA_STATE", MODIFY_VHCA_STATE),
    ("MLX5_CMD_OP_SYNC_CRYPTO", SYNC_CRYPTO),
    (
        "MLX5_CMD_OP_QUERY_MATCH_SAMPLE_INFO",
        QUERY_MATCH_SAMPLE_INFO,
    ),
    (
        "MLX5_CMD_OP_ALLOW_OTHER_VHCA_ACCESS",
        ALLOW_OTHER_VHCA_ACCESS,
    ),
    ("MLX5_CMD_OP_GENERATE_WQE", GENERATE_WQE),
    ("MLX5_CMD_OP_MAX", MAX),
    ("MLX5_CMD_OP_GENERAL_END", GENERAL_END),
];

/// The C name of an opcode (the first listed when several names share the value).
pub fn name(op: u16) -> Option<&'static str> {
    ALL.iter().find(|(_, v)| *v == op).map(|(n, _)| *n)
}
