//! The capability pages (QUERY_HCA_CAP / SET_HCA_CAP): a ConnectX-5 Ethernet (RoCE) function.
//!
//! Each capability type has a MAX page (what the device supports) and a CUR page (what is in
//! effect). The driver reads both and may change the *settable* fields of CUR with SET_HCA_CAP
//! before INIT_HCA. Field meanings: rdma-core providers/mlx5/mlx5_ifc.h `cmd_hca_cap`,
//! `roce_cap`, `atomic_caps`, `odp_cap`, `cmd_hca_cap_2` (layouts in `mlx5_prm`); the Linux-only
//! roce_cap fields come from `mlx5_prm::linux_layout::roce_cap` (Linux mlx5_ifc.h:1195).
//!
//! The numbers are small enough to keep the model's tables bounded (2^12 QPs/CQs, 2^16 mkeys).

use mlx5_prm::hca_cap::cap_type;
use mlx5_prm::{
    atomic_caps, cmd_hca_cap, flow_table_fields_supported as ffs, flow_table_nic_cap,
    flow_table_prop_layout as ftp, linux_layout, roce_cap, Field,
};

/// Bytes of one capability page (`hca_cap_union`, rdma-core mlx5_ifc.h:1527).
pub const CAP_PAGE_BYTES: usize = mlx5_prm::hca_cap_union::BYTES;

/// `MLX5_CMD_HCA_CAP_CMDIF_CHECKSUM_*` (Linux include/linux/mlx5/mlx5_ifc.h:1520-1522).
pub mod cmdif_checksum {
    /// `..._DISABLED`.
    pub const DISABLED: u32 = 0x0;
    /// `..._INITIAL_STATE`: supported, not enforced (the power-on CUR value here).
    pub const INITIAL_STATE: u32 = 0x1;
    /// `..._ENABLED`: the device verifies entry and mailbox signatures.
    pub const ENABLED: u32 = 0x3;
}

/// `MLX5_ATOMIC_OPS_CMP_SWAP` | `MLX5_ATOMIC_OPS_FETCH_ADD` (Linux include/linux/mlx5/driver.h:181-182).
pub const ATOMIC_OPS_CMP_SWAP_FETCH_ADD: u32 = (1 << 0) | (1 << 1);
/// `MLX5_ATOMIC_CAPS_ATOMIC_SIZE_QP_8_BYTES` (Linux mlx5_ifc.h:1363).
pub const ATOMIC_SIZE_QP_8_BYTES: u32 = 0x8;
/// `MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS` (Linux core/main.c:105).
pub const ATOMIC_REQ_MODE_HOST_ENDIANNESS: u32 = 0x1;
/// `MLX5_ROCE_VERSION_2_CAP` = 1 << `MLX5_ROCE_VERSION_2` (Linux device.h:410, 415).
pub const ROCE_VERSION_2_CAP: u32 = 1 << 2;
/// `MLX5_ROCE_L3_TYPE_IPV4_CAP | MLX5_ROCE_L3_TYPE_IPV6_CAP` (Linux device.h:424-425).
pub const ROCE_L3_TYPE_IPV4_IPV6_CAP: u32 = (1 << 1) | (1 << 2);
/// RoCE v2 UDP destination port (IANA 4791; rdma-core / Linux ROCE_V2_UDP_DPORT).
pub const ROCE_V2_UDP_DPORT: u32 = 4791;

/// Log2 of the QP table size (`log_max_qp`).
pub const LOG_MAX_QP: u32 = 12;
/// Log2 of the CQ table size (`log_max_cq`).
pub const LOG_MAX_CQ: u32 = 12;
/// Log2 of the mkey table size (`log_max_mkey`).
pub const LOG_MAX_MKEY: u32 = 16;
/// Log2 of the number of EQs (`log_max_eq`).
pub const LOG_MAX_EQ: u32 = 5;
/// Log2 of the largest EQ in entries (`log_max_eq_sz`).
pub const LOG_MAX_EQ_SZ: u32 = 22;
/// Log2 of the number of PDs (`log_max_pd`).
pub const LOG_MAX_PD: u32 = 16;
/// Log2 of the number of transport domains (`log_max_transport_domain`).
pub const LOG_MAX_TRANSPORT_DOMAIN: u32 = 8;
/// Log2 of the BlueFlame register size (`log_bf_reg_size`): 512 bytes (4 from 0x800, like a ConnectX-5), two 256-byte halves.
pub const LOG_BF_REG_SIZE: u32 = 9;
/// Log2 of the largest memory region (`log_max_mrw_sz`): 2^48 bytes, 256 TiB. Model choice:
/// no public source gives a ConnectX-5's value (Linux reports `max_mr_size = ~0ull` whatever
/// the cap says, ib/main.c `mlx5_ib_query_device`); 48 bits is the x86-64 virtual address
/// width a region is registered from, and keeps the limit one a driver can hit and must
/// check (64 would make the cap meaningless).
pub const LOG_MAX_MRW_SZ: u32 = 48;
/// RoCE GID table entries (`roce_cap.roce_address_table_size`).
pub const ROCE_ADDRESS_TABLE_SIZE: u32 = 64;
/// `cmd_hca_cap.max_qp_cnt`: counter sets the device holds at once, set 0 included. Model
/// choice: no public source gives a ConnectX-5's number; 64 keeps a limit a test can reach
/// (ids are 8 bits wide, so never more than 256).
pub const MAX_QP_CNT: u32 = 64;

/// `flow_table_properties_nic_receive.max_ft_level`: the deepest flow table level. Model
/// choice (a ConnectX-5's number is not public): deep enough for every priority of Linux
/// fs_core.c's NIC RX namespace tree (`root_fs`; fs_core.c `init_root_tree_recursive` leaves
/// out a priority whose `min_ft_level` exceeds this, and the last, the anchor's, must exist).
pub const FT_MAX_LEVEL: u32 = 64;
/// `flow_table_properties_nic_receive.log_max_ft_size`: entries per table, log2. Model choice:
/// 2^16 (Linux fs_ft_pool.c takes table sizes up to this from its pools of 1, 128, 64K, ...).
pub const FT_LOG_MAX_SIZE: u32 = 16;
/// `flow_table_properties_nic_receive.log_max_ft_num`: tables, log2. Model choice.
pub const FT_LOG_MAX_NUM: u32 = 10;
/// `flow_table_properties_nic_receive.log_max_destination`: destinations per entry, log2.
/// Model choice.
pub const FT_LOG_MAX_DESTINATION: u32 = 4;

/// `log_max_current_uc_list` and `log_max_current_mc_list` (see `Caps::connectx5`).
pub const LOG_MAX_CURRENT_ADDRESS_LIST: u32 = 7;

/// The `flow_table_nic_cap` page: NIC_RX flow tables only (objects/flow/), with the limits
/// above; entries may be modified (SET_FLOW_TABLE_ENTRY op_mod 1) and the root reset
/// (SET_FLOW_TABLE_ROOT op_mod 1); no MODIFY_FLOW_TABLE (`flow_table_modify`), no flow
/// counters, reformat, header modification or VLAN actions. `ft_field_support` (and the
/// bitmask support: the model compares under any mask) names the outer header fields the
/// model matches on (objects/flow/group.rs `SUPPORTED_OUTER`; Linux core/lib/fs_ttc.c reads
/// `outer_ip_version` to match IP versions instead of EtherTypes).
fn flow_table_nic() -> CapPage {
    let mut p = CapPage::new();
    let rx = |f: Field| f.within(flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE);
    for (f, v) in [
        (ftp::FT_SUPPORT, 1),
        (ftp::FLOW_MODIFY_EN, 1),
        (ftp::MODIFY_ROOT, 1),
        (ftp::RESET_ROOT_TO_DEFAULT, 1),
        (ftp::LOG_MAX_FT_SIZE, FT_LOG_MAX_SIZE),
        (ftp::MAX_FT_LEVEL, FT_MAX_LEVEL),
        (ftp::LOG_MAX_FT_NUM, FT_LOG_MAX_NUM),
        (ftp::LOG_MAX_DESTINATION, FT_LOG_MAX_DESTINATION),
        (ftp::LOG_MAX_FLOW, FT_LOG_MAX_SIZE),
    ] {
        p.both(rx(f), v);
    }
    for f in [
        ffs::OUTER_DMAC,
        ffs::OUTER_SMAC,
        ffs::OUTER_ETHER_TYPE,
        ffs::OUTER_IP_VERSION,
        ffs::OUTER_FIRST_PRIO,
        ffs::OUTER_FIRST_CFI,
        ffs::OUTER_FIRST_VID,
        ffs::OUTER_SIP,
        ffs::OUTER_DIP,
        ffs::OUTER_IP_PROTOCOL,
        ffs::OUTER_UDP_SPORT,
        ffs::OUTER_UDP_DPORT,
        ffs::OUTER_TCP_SPORT,
        ffs::OUTER_TCP_DPORT,
    ] {
        p.both(rx(f.within(ftp::FT_FIELD_SUPPORT)), 1);
        p.both(rx(f.within(ftp::FT_FIELD_BITMASK_SUPPORT)), 1);
    }
    // Every step of a lookup goes one level deeper.
    p.both(
        flow_table_nic_cap::NIC_RECEIVE_MAX_STEERING_DEPTH,
        FT_MAX_LEVEL + 1,
    );
    p
}

/// The general device capabilities (`cmd_hca_cap`) of [`Caps::connectx5`].
fn general_page() -> CapPage {
    use cmd_hca_cap as g;
    let mut gen = CapPage::new();
    // Queue sizes and table sizes (log2).
    gen.both(g::LOG_MAX_QP_SZ, 15);
    gen.both(g::LOG_MAX_QP, LOG_MAX_QP);
    gen.both(g::LOG_MAX_CQ_SZ, 22);
    gen.both(g::LOG_MAX_CQ, LOG_MAX_CQ);
    gen.both(g::LOG_MAX_EQ_SZ, LOG_MAX_EQ_SZ);
    gen.both(g::LOG_MAX_MKEY, LOG_MAX_MKEY);
    gen.both(g::LOG_MAX_EQ, LOG_MAX_EQ);
    gen.both(g::LOG_MAX_MRW_SZ, LOG_MAX_MRW_SZ);
    gen.both(g::LOG_MAX_KLM_LIST_SIZE, 16);
    gen.both(g::LOG_MAX_RA_REQ_QP, 4);
    gen.both(g::LOG_MAX_RA_RES_QP, 4);
    gen.both(g::LOG_MAX_MSG, 30);
    gen.both(g::LOG_MAX_PD, LOG_MAX_PD);
    gen.both(g::LOG_MAX_TRANSPORT_DOMAIN, LOG_MAX_TRANSPORT_DOMAIN);
    gen.both(g::MAX_WQE_SZ_SQ, 1024);
    gen.both(g::MAX_WQE_SZ_RQ, 512);
    // One Ethernet port with RoCE; RC and UD transports (UD QPs and the GSI QP,
    // datapath/ud; the `ud` bit of Linux mlx5_ifc.h `cmd_hca_cap`); atomics;
    // page-fault capable (the ODP
    // page reports no ODP transport, so no page faults are ever requested).
    gen.both(g::PORT_TYPE, mlx5_prm::hca_cap::port_type::ETH.into());
    gen.both(g::NUM_PORTS, 1);
    gen.both(g::ROCE, 1);
    gen.both(g::ATOMIC, 1);
    // MODIFY_CQ resize (Linux ib/cq.c `mlx5_ib_resize_cq` checks `cq_resize`).
    gen.both(g::CQ_RESIZE, 1);
    gen.both(g::PG, 1);
    gen.both(g::RC, 1);
    gen.both(g::UD, 1);
    gen.both(g::HCA_CAP_2, 1);
    gen.both(g::CQE_VERSION, 1);
    gen.both(g::LOCAL_CA_ACK_DELAY, 16);
    // Relaxed ordering: writes, and reads while PCIe RO is enabled (the older cap a
    // ConnectX-5 reports, Linux mlx5_ifc.h `relaxed_ordering_read_pci_enabled`); the
    // unconditional `relaxed_ordering_read` (0x32a) is left clear.
    gen.both(g::RELAXED_ORDERING_WRITE, 1);
    gen.both(
        linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED,
        1,
    );
    // Doorbells: BlueFlame registers of 2^8 bytes, 4 KiB UAR pages only.
    gen.both(g::BF, 1);
    gen.both(g::LOG_BF_REG_SIZE, LOG_BF_REG_SIZE);
    gen.both(g::LOG_PG_SZ, mlx5_prm::pages::ADAPTER_PAGE_SHIFT);
    gen.both(g::NUM_OF_UARS_PER_PAGE, 1);
    gen.split(g::UAR_4K, 0, 0);
    gen.split(g::LOG_UAR_PAGE_SZ, 0, 0);
    // SET_DRIVER_VERSION is answered.
    gen.both(g::DRIVER_VERSION, 1);
    // TEARDOWN_HCA profile FORCE_CLOSE is answered.
    gen.both(g::FORCE_TEARDOWN, 1);
    // Command signatures: supported, initially not enforced.
    gen.split(
        g::CMDIF_CHECKSUM,
        cmdif_checksum::ENABLED,
        cmdif_checksum::INITIAL_STATE,
    );
    // Linux always sets drain_sigerr = 1 (main.c:811); allow it.
    gen.split(g::DRAIN_SIGERR, 1, 0);
    gen.split(g::DISABLE_LINK_UP_BY_INIT_HCA, 1, 0);
    // pkey_table_size 0 = 128 entries (MLX5_CMD_HCA_CAP_PKEY_TABLE_SIZE_128_ENTRIES).
    gen.both(g::PKEY_TABLE_SIZE, 0);
    gen.both(g::DEVICE_FREQUENCY_MHZ, 156);
    gen.both(g::DEVICE_FREQUENCY_KHZ, 156_250);
    general_nic(&mut gen);
    gen
}

/// [`general_page`]'s queue counters, flow tables and Ethernet queues.
fn general_nic(gen: &mut CapPage) {
    use cmd_hca_cap as g;
    // Queue counters (counter.rs): `max_qp_cnt` sets; the groups Linux
    // drivers/infiniband/hw/mlx5/counters.c `mlx5_ib_fill_counters` reads when their cap
    // is set (`out_of_seq_cnt`: out_of_sequence; `retransmission_q_counters`:
    // duplicate_request, rnr_nak_retry_err, packet_seq_err, implied_nak_seq_err,
    // local_ack_timeout_err); QUERY_VPORT_COUNTER; a QP's set changed on RTS2RTS
    // (qp.c `__mlx5_ib_qp_set_counter`).
    gen.both(g::MAX_QP_CNT, MAX_QP_CNT);
    gen.both(g::OUT_OF_SEQ_CNT, 1);
    gen.both(g::RETRANSMISSION_Q_COUNTERS, 1);
    gen.both(g::VPORT_COUNTERS, 1);
    gen.both(g::RTS2RTS_QP_COUNTERS_SET_ID, 1);
    // NIC receive flow tables (objects/flow/, the `flow_table_nic_cap` page) and the
    // vport's address lists (objects/vport.rs): 2^7 addresses per list. Model choice (a
    // ConnectX-5's numbers are not public): Linux's default for the unicast list is 128
    // too (devlink `max_macs`, core/main.c `handle_hca_cap` sets
    // log_max_current_uc_list to its log when the device lets it).
    gen.both(g::NIC_FLOW_TABLE, 1);
    gen.both(g::LOG_MAX_CURRENT_UC_LIST, LOG_MAX_CURRENT_ADDRESS_LIST);
    gen.both(g::LOG_MAX_CURRENT_MC_LIST, LOG_MAX_CURRENT_ADDRESS_LIST);
    // The Ethernet queues (objects/tis.rs, sq.rs, rq.rs, tir.rs, wq.rs): Linux reads the
    // ETHERNET_OFFLOADS page when `eth_net_offloads` is set (core/fw.c
    // `mlx5_query_hca_caps`). One TIS per SQ (`log_max_tis_per_sq` 0); receive WQs may pad
    // to the cache line (`end_pad`, set by en/params.c `rq_end_pad_mode`); timestamps are
    // free-running only (`sq_ts_format` / `rq_ts_format` 0).
    gen.both(g::ETH_NET_OFFLOADS, 1);
    gen.both(g::LOG_MAX_SQ, LOG_MAX_SQ_RQ);
    gen.both(g::LOG_MAX_RQ, LOG_MAX_SQ_RQ);
    gen.both(g::LOG_MAX_TIS, LOG_MAX_TIS_TIR);
    gen.both(g::LOG_MAX_TIR, LOG_MAX_TIS_TIR);
    gen.both(g::LOG_MAX_WQ_SZ, LOG_MAX_WQ_SZ);
    gen.both(g::END_PAD, 1);
}

/// The atomic capabilities of [`Caps::connectx5`].
fn atomic_page() -> CapPage {
    let mut atomic = CapPage::new();
    atomic.both(
        atomic_caps::ATOMIC_OPERATIONS,
        ATOMIC_OPS_CMP_SWAP_FETCH_ADD,
    );
    atomic.both(atomic_caps::ATOMIC_SIZE_QP, ATOMIC_SIZE_QP_8_BYTES);
    atomic.both(atomic_caps::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1, 1);
    atomic.split(
        atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE,
        ATOMIC_REQ_MODE_HOST_ENDIANNESS,
        0,
    );
    atomic
}

/// The RoCE capabilities of [`Caps::connectx5`].
fn roce_page() -> CapPage {
    let mut roce = CapPage::new();
    roce.split(roce_cap::SW_R_ROCE_SRC_UDP_PORT, 1, 0);
    roce.both(linux_layout::roce_cap::L3_TYPE, ROCE_L3_TYPE_IPV4_IPV6_CAP);
    roce.both(linux_layout::roce_cap::ROCE_VERSION, ROCE_VERSION_2_CAP);
    roce.both(
        linux_layout::roce_cap::R_ROCE_DEST_UDP_PORT,
        ROCE_V2_UDP_DPORT,
    );
    roce.both(linux_layout::roce_cap::R_ROCE_MAX_SRC_UDP_PORT, 0xffff);
    roce.both(linux_layout::roce_cap::R_ROCE_MIN_SRC_UDP_PORT, 0xc000);
    roce.both(
        linux_layout::roce_cap::ROCE_ADDRESS_TABLE_SIZE,
        ROCE_ADDRESS_TABLE_SIZE,
    );
    roce
}

/// Ethernet offloads: checksums only (TX `cs_flags` L3/L4, RX `l3_ok` / `l4_ok` and the
/// CQE checksum, datapath/eth); no VLAN stripping or insertion, LSO, LRO, RSS,
/// multi-packet WQEs, tunnels or software parsing. Linux mlx5e wants more before it
/// makes a netdev (core/dev.c `mlx5_eth_supported`: `vlan_cap`, `max_lso_cap`,
/// `rss_ind_tbl_cap`), so it makes none on the model.
fn eth_offloads_page() -> CapPage {
    let mut eth = CapPage::new();
    {
        use mlx5_prm::per_protocol_networking_offload_caps as e;
        eth.both(e::CSUM_CAP, 1);
        // What a ConnectX-5 reports (Linux commit c415f704c827 "net/mlx5: E-Switch,
        // Correctly deal with inline mode on ConnectX-5": "On ConnectX5 the wqe inline
        // mode is "none" and hence the FW reports MLX5_CAP_INLINE_MODE_NOT_REQUIRED").
        eth.both(
            e::WQE_INLINE_MODE,
            mlx5_prm::cap_inline_mode::NOT_REQUIRED.into(),
        );
    }
    eth
}
/// Log2 of the Ethernet SQs, RQs, TISes and TIRs the device holds (`log_max_sq`,
/// `log_max_rq`, `log_max_tis`, `log_max_tir`). Model choice: no public source gives a
/// ConnectX-5's numbers; the SQs and RQs share the QPN space with the QPs (`objects::sq`), so
/// they are as many as the QPs, and a few hundred TISes and TIRs are more than a driver of
/// one port with eight traffic classes creates (Linux en_common.c `mlx5e_create_tises`).
pub const LOG_MAX_SQ_RQ: u32 = LOG_MAX_QP;
/// Log2 of the TISes and of the TIRs (`log_max_tis`, `log_max_tir`).
pub const LOG_MAX_TIS_TIR: u32 = 8;
/// Log2 of the largest Ethernet work queue in strides (`log_max_wq_sz`). Model choice: the
/// largest QP work queue (`log_max_qp_sz`).
pub const LOG_MAX_WQ_SZ: u32 = 15;

/// One capability type: its MAX and CUR pages.
#[derive(Clone)]
pub struct CapPage {
    pub max: Box<[u8; CAP_PAGE_BYTES]>,
    pub cur: Box<[u8; CAP_PAGE_BYTES]>,
}

impl CapPage {
    fn new() -> CapPage {
        CapPage {
            max: Box::new([0; CAP_PAGE_BYTES]),
            cur: Box::new([0; CAP_PAGE_BYTES]),
        }
    }

    /// Sets `field` to `v` in both MAX and CUR.
    fn both(&mut self, field: Field, v: u32) {
        set(&mut self.max[..], field, v);
        set(&mut self.cur[..], field, v);
    }

    /// Sets `field` in MAX and CUR separately.
    fn split(&mut self, field: Field, max: u32, cur: u32) {
        set(&mut self.max[..], field, max);
        set(&mut self.cur[..], field, cur);
    }
}

fn set(page: &mut [u8], field: Field, v: u32) {
    // The page is 4096 bytes and every declared cap field lies inside it: cannot fail.
    let _ = field.set(page, v);
}

/// Why SET_HCA_CAP refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCapError {
    /// The cap type is not one the device answers (or has nothing settable).
    UnsupportedType,
    /// A read-only field is neither its current value nor zero.
    ReadOnlyChanged,
    /// A settable field exceeds its MAX value (or is an invalid encoding).
    AboveMax(Field),
}

/// Every capability type the device answers.
#[derive(Clone)]
pub struct Caps {
    pub general: CapPage,
    pub odp: CapPage,
    pub atomic: CapPage,
    pub roce: CapPage,
    pub general_2: CapPage,
    /// `flow_table_nic_cap` (cap type FLOW_TABLE).
    pub flow_table: CapPage,
    /// `per_protocol_networking_offload_caps` (`MLX5_CAP_ETHERNET_OFFLOADS`).
    pub eth: CapPage,
}

/// A settable field and how its new value is checked.
#[derive(Clone, Copy)]
enum Rule {
    /// New value <= the MAX page's value.
    AtMostMax,
    /// New value is one of these.
    OneOf(&'static [u32]),
}

/// Settable GENERAL fields: what Linux core/main.c handle_hca_cap (lines 771-863) and rdma-core
/// mlx5_vfio.c handle_hca_cap (1832-1863) change, restricted to fields the layout declares.
const GENERAL_SETTABLE: &[(Field, Rule)] = &[
    (cmd_hca_cap::PKEY_TABLE_SIZE, Rule::AtMostMax),
    (cmd_hca_cap::LOG_MAX_QP, Rule::AtMostMax),
    (
        cmd_hca_cap::CMDIF_CHECKSUM,
        Rule::OneOf(&[
            cmdif_checksum::DISABLED,
            cmdif_checksum::INITIAL_STATE,
            cmdif_checksum::ENABLED,
        ]),
    ),
    (cmd_hca_cap::DRAIN_SIGERR, Rule::AtMostMax),
    (cmd_hca_cap::UAR_4K, Rule::AtMostMax),
    (cmd_hca_cap::LOG_UAR_PAGE_SZ, Rule::AtMostMax),
    (cmd_hca_cap::CACHE_LINE_128BYTE, Rule::AtMostMax),
    (cmd_hca_cap::DCT, Rule::AtMostMax),
    (cmd_hca_cap::NUM_VHCA_PORTS, Rule::AtMostMax),
    (cmd_hca_cap::MKEY_BY_NAME, Rule::AtMostMax),
    (cmd_hca_cap::LOG_MAX_CURRENT_UC_LIST, Rule::AtMostMax),
    (cmd_hca_cap::DISABLE_LINK_UP_BY_INIT_HCA, Rule::AtMostMax),
];

/// Settable ROCE fields (Linux main.c handle_hca_cap_roce:905, rdma-core mlx5_vfio.c:1826).
const ROCE_SETTABLE: &[(Field, Rule)] = &[(roce_cap::SW_R_ROCE_SRC_UDP_PORT, Rule::AtMostMax)];

/// Settable ATOMIC fields (Linux main.c handle_hca_cap_atomic:638): big-endian (0) or host
/// endianness (1) for 8-byte atomic responses.
const ATOMIC_SETTABLE: &[(Field, Rule)] = &[(
    atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE,
    Rule::OneOf(&[0, ATOMIC_REQ_MODE_HOST_ENDIANNESS]),
)];

impl Default for Caps {
    fn default() -> Self {
        Self::connectx5()
    }
}

impl Caps {
    /// The power-on capabilities of the emulated ConnectX-5.
    pub fn connectx5() -> Caps {
        Caps {
            general: general_page(),
            odp: CapPage::new(),
            atomic: atomic_page(),
            roce: roce_page(),
            general_2: CapPage::new(),
            flow_table: flow_table_nic(),
            eth: eth_offloads_page(),
        }
    }

    /// The page of capability type `t`, if the device answers it.
    pub fn page(&self, t: u16) -> Option<&CapPage> {
        match t {
            cap_type::GENERAL => Some(&self.general),
            cap_type::ODP => Some(&self.odp),
            cap_type::ATOMIC => Some(&self.atomic),
            cap_type::ROCE => Some(&self.roce),
            cap_type::GENERAL_2 => Some(&self.general_2),
            cap_type::FLOW_TABLE => Some(&self.flow_table),
            cap_type::ETHERNET_OFFLOADS => Some(&self.eth),
            _ => None,
        }
    }

    fn page_mut(&mut self, t: u16) -> Option<&mut CapPage> {
        match t {
            cap_type::GENERAL => Some(&mut self.general),
            cap_type::ODP => Some(&mut self.odp),
            cap_type::ATOMIC => Some(&mut self.atomic),
            cap_type::ROCE => Some(&mut self.roce),
            cap_type::GENERAL_2 => Some(&mut self.general_2),
            cap_type::FLOW_TABLE => Some(&mut self.flow_table),
            cap_type::ETHERNET_OFFLOADS => Some(&mut self.eth),
            _ => None,
        }
    }

    /// A field of the CURRENT Ethernet offload capabilities.
    pub fn eth(&self, field: Field) -> u32 {
        field.get(&self.eth.cur[..]).unwrap_or(0)
    }

    /// A field of the CURRENT general capabilities.
    pub fn general(&self, field: Field) -> u32 {
        field.get(&self.general.cur[..]).unwrap_or(0)
    }

    /// SET_HCA_CAP of type `t` with the capability bytes `input` (at least one page of the
    /// type's layout; shorter input is treated as zero-padded).
    ///
    /// Settable fields take the new value if it is allowed. Read-only fields must be left as
    /// they are: either all equal to CUR (Linux and rdma-core copy CUR and edit it) or all zero
    /// (Linux's atomic handler, main.c:635, writes a zeroed page with one field set). Anything
    /// else is refused and CUR is unchanged.
    pub fn set(&mut self, t: u16, input: &[u8]) -> Result<(), SetCapError> {
        let rules = match t {
            cap_type::GENERAL => GENERAL_SETTABLE,
            cap_type::ROCE => ROCE_SETTABLE,
            cap_type::ATOMIC => ATOMIC_SETTABLE,
            cap_type::ODP
            | cap_type::GENERAL_2
            | cap_type::ETHERNET_OFFLOADS
            | cap_type::FLOW_TABLE => &[],
            _ => return Err(SetCapError::UnsupportedType),
        };
        let page = self.page_mut(t).ok_or(SetCapError::UnsupportedType)?;
        let mut new = [0u8; CAP_PAGE_BYTES];
        let n = input.len().min(CAP_PAGE_BYTES);
        new[..n].copy_from_slice(&input[..n]);

        let mut mask = [0u8; CAP_PAGE_BYTES];
        for (f, _) in rules {
            set(&mut mask, *f, u32::MAX >> (32 - f.width));
        }
        let ro_same = (0..CAP_PAGE_BYTES).all(|i| new[i] & !mask[i] == page.cur[i] & !mask[i]);
        let ro_zero = (0..CAP_PAGE_BYTES).all(|i| new[i] & !mask[i] == 0);
        if !ro_same && !ro_zero {
            return Err(SetCapError::ReadOnlyChanged);
        }
        for (f, rule) in rules {
            let v = f.get(&new[..]).unwrap_or(0);
            let ok = match rule {
                Rule::AtMostMax => v <= f.get(&page.max[..]).unwrap_or(0),
                Rule::OneOf(allowed) => {
                    allowed.contains(&v) && v <= f.get(&page.max[..]).unwrap_or(0)
                }
            };
            if !ok {
                return Err(SetCapError::AboveMax(*f));
            }
        }
        for (f, _) in rules {
            let v = f.get(&new[..]).unwrap_or(0);
            set(&mut page.cur[..], *f, v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_style_general_set() {
        let mut c = Caps::connectx5();
        let mut p = *c.general.cur;
        cmd_hca_cap::CMDIF_CHECKSUM.set(&mut p, 0).unwrap();
        cmd_hca_cap::DRAIN_SIGERR.set(&mut p, 1).unwrap();
        cmd_hca_cap::LOG_MAX_QP.set(&mut p, 10).unwrap();
        c.set(cap_type::GENERAL, &p).unwrap();
        assert_eq!(c.general(cmd_hca_cap::LOG_MAX_QP), 10);
        assert_eq!(c.general(cmd_hca_cap::CMDIF_CHECKSUM), 0);
        // Above max.
        cmd_hca_cap::LOG_MAX_QP.set(&mut p, 13).unwrap();
        assert_eq!(
            c.set(cap_type::GENERAL, &p),
            Err(SetCapError::AboveMax(cmd_hca_cap::LOG_MAX_QP))
        );
        assert_eq!(c.general(cmd_hca_cap::LOG_MAX_QP), 10);
        // A read-only field changed.
        cmd_hca_cap::LOG_MAX_QP.set(&mut p, 10).unwrap();
        cmd_hca_cap::LOG_MAX_CQ.set(&mut p, 3).unwrap();
        assert_eq!(
            c.set(cap_type::GENERAL, &p),
            Err(SetCapError::ReadOnlyChanged)
        );
    }

    #[test]
    fn linux_style_atomic_set_from_zeroed_page() {
        let mut c = Caps::connectx5();
        let mut p = [0u8; CAP_PAGE_BYTES];
        atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
            .set(&mut p, 1)
            .unwrap();
        c.set(cap_type::ATOMIC, &p).unwrap();
        assert_eq!(
            atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&c.atomic.cur[..]),
            Ok(1)
        );
        // The read-only fields were kept.
        assert_eq!(
            atomic_caps::ATOMIC_OPERATIONS.get(&c.atomic.cur[..]),
            Ok(ATOMIC_OPS_CMP_SWAP_FETCH_ADD)
        );
        atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
            .set(&mut p, 2)
            .unwrap();
        assert!(matches!(
            c.set(cap_type::ATOMIC, &p),
            Err(SetCapError::AboveMax(_))
        ));
        assert_eq!(
            c.set(cap_type::IPSEC, &p),
            Err(SetCapError::UnsupportedType)
        );
    }
}
