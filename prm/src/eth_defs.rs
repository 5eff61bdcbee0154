//! Constants of the Ethernet queue objects: WQ types, SQ/RQ states, TIR dispatch, the
//! minimum inline modes, the MODIFY_RQ bitmask and the vport address-list types.
//!
//! Each item cites its source header; Linux means the OFED 24.07 kernel tree
//! wjz304/mlnx-ofed-kernel @2c0186b9c664 (include/linux/mlx5/...). Layouts: [`crate::wq`],
//! [`crate::sqc`], [`crate::rqc`], [`crate::tisc`], [`crate::tirc`].

/// `wq.wq_type` (Linux mlx5_ifc.h:1485, anonymous enum `MLX5_WQ_TYPE_*`).
pub mod wq_type {
    /// `MLX5_WQ_TYPE_LINKED_LIST`: WQEs chained by a next segment (SRQ-like).
    pub const LINKED_LIST: u8 = 0x0;
    /// `MLX5_WQ_TYPE_CYCLIC`: a ring of fixed-stride WQEs; mlx5e's SQ and non-striding RQ.
    pub const CYCLIC: u8 = 0x1;
    /// `MLX5_WQ_TYPE_LINKED_LIST_STRIDING_RQ`.
    pub const LINKED_LIST_STRIDING_RQ: u8 = 0x2;
    /// `MLX5_WQ_TYPE_CYCLIC_STRIDING_RQ`: multi-packet WQEs of strides (mlx5e's MPWQE RQ).
    pub const CYCLIC_STRIDING_RQ: u8 = 0x3;
}

/// `wq.end_padding_mode` (Linux mlx5_ifc.h:1492, `MLX5_WQ_END_PAD_MODE_*`).
pub mod wq_end_pad_mode {
    /// `MLX5_WQ_END_PAD_MODE_NONE`.
    pub const NONE: u8 = 0x0;
    /// `MLX5_WQ_END_PAD_MODE_ALIGN`: pad the written data to a cache line.
    pub const ALIGN: u8 = 0x1;
}

/// `sqc.state`, `modify_sq_in.sq_state` (Linux mlx5_ifc.h:4034, `MLX5_SQC_STATE_*`).
pub mod sqc_state {
    /// `MLX5_SQC_STATE_RST`: the state CREATE_SQ leaves it in.
    pub const RST: u8 = 0x0;
    /// `MLX5_SQC_STATE_RDY`: sends.
    pub const RDY: u8 = 0x1;
    /// `MLX5_SQC_STATE_ERR`: after a send error; mlx5e recovers by ERR -> RST -> RDY
    /// (Linux core/en/reporter_tx.c `mlx5e_tx_reporter_err_cqe_recover`).
    pub const ERR: u8 = 0x3;
}

/// `rqc.state`, `modify_rq_in.rq_state` (Linux mlx5_ifc.h:4142, `MLX5_RQC_STATE_*`).
pub mod rqc_state {
    /// `MLX5_RQC_STATE_RST`: the state CREATE_RQ leaves it in.
    pub const RST: u8 = 0x0;
    /// `MLX5_RQC_STATE_RDY`: receives.
    pub const RDY: u8 = 0x1;
    /// `MLX5_RQC_STATE_ERR`.
    pub const ERR: u8 = 0x3;
}

/// `rqc.mem_rq_type` (Linux mlx5_ifc.h:4137, `MLX5_RQC_MEM_RQ_TYPE_*`).
pub mod rqc_mem_rq_type {
    /// `MLX5_RQC_MEM_RQ_TYPE_MEMORY_RQ_INLINE`: the RQ's own WQ holds the receive WQEs.
    pub const MEMORY_RQ_INLINE: u8 = 0x0;
    /// `MLX5_RQC_MEM_RQ_TYPE_MEMORY_RQ_RMP`: WQEs come from a shared RMP (`rqc.rmpn`).
    pub const MEMORY_RQ_RMP: u8 = 0x1;
}

/// `modify_rq_in.modify_bitmask` bits (Linux mlx5_ifc.h:7969,
/// `MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_*`): which `ctx` fields besides the state to change.
pub mod modify_rq_bitmask {
    /// `MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_VSD`: `rqc.vsd`.
    pub const VSD: u64 = 1 << 1;
    /// `MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_SCATTER_FCS`: `rqc.scatter_fcs`.
    pub const SCATTER_FCS: u64 = 1 << 2;
    /// `MLX5_MODIFY_RQ_IN_MODIFY_BITMASK_RQ_COUNTER_SET_ID`: `rqc.counter_set_id`.
    pub const RQ_COUNTER_SET_ID: u64 = 1 << 3;
}

/// `tirc.disp_type` (Linux mlx5_ifc.h:3931, `MLX5_TIRC_DISP_TYPE_*`).
pub mod tirc_disp_type {
    /// `MLX5_TIRC_DISP_TYPE_DIRECT`: every packet to `tirc.inline_rqn`.
    pub const DIRECT: u8 = 0x0;
    /// `MLX5_TIRC_DISP_TYPE_INDIRECT`: spread over an RQ table (`tirc.indirect_table`) by hash.
    pub const INDIRECT: u8 = 0x1;
}

/// `tirc.packet_merge_mask` bits (Linux mlx5_ifc.h:3936, `MLX5_TIRC_PACKET_MERGE_MASK_*`).
pub mod tirc_packet_merge_mask {
    /// `MLX5_TIRC_PACKET_MERGE_MASK_IPV4_LRO`.
    pub const IPV4_LRO: u8 = 1 << 0;
    /// `MLX5_TIRC_PACKET_MERGE_MASK_IPV6_LRO`.
    pub const IPV6_LRO: u8 = 1 << 1;
}

/// `tirc.rx_hash_fn` (Linux mlx5_ifc.h:3941, `MLX5_RX_HASH_FN_*`).
pub mod rx_hash_fn {
    /// `MLX5_RX_HASH_FN_NONE`: a direct TIR (Linux core/en/tir.c
    /// `mlx5e_tir_builder_build_inline`).
    pub const NONE: u8 = 0x0;
    /// `MLX5_RX_HASH_FN_INVERTED_XOR8`.
    pub const INVERTED_XOR8: u8 = 0x1;
    /// `MLX5_RX_HASH_FN_TOEPLITZ`.
    pub const TOEPLITZ: u8 = 0x2;
}

/// `tirc.self_lb_block` bits (Linux mlx5_ifc.h:3947, `MLX5_TIRC_SELF_LB_BLOCK_*`).
pub mod tirc_self_lb_block {
    /// `MLX5_TIRC_SELF_LB_BLOCK_BLOCK_UNICAST`.
    pub const BLOCK_UNICAST: u8 = 0x1;
    /// `MLX5_TIRC_SELF_LB_BLOCK_BLOCK_MULTICAST`.
    pub const BLOCK_MULTICAST: u8 = 0x2;
}

/// `rx_hash_field_select.selected_fields` bit numbers (Linux mlx5_ifc.h:2221,
/// `MLX5_RX_HASH_FIELD_SELECT_SELECTED_FIELDS_*`).
pub mod rx_hash_selected_field {
    /// `..._SRC_IP`.
    pub const SRC_IP: u8 = 0x0;
    /// `..._DST_IP`.
    pub const DST_IP: u8 = 0x1;
    /// `..._L4_SPORT`.
    pub const L4_SPORT: u8 = 0x2;
    /// `..._L4_DPORT`.
    pub const L4_DPORT: u8 = 0x3;
    /// `..._IPSEC_SPI`.
    pub const IPSEC_SPI: u8 = 0x4;
}

/// How many leading bytes of a frame a send WQE must carry inline in its Ethernet segment
/// (`enum mlx5_inline_modes`, Linux include/linux/mlx5/device.h:165): `sqc.min_wqe_inline_mode`
/// and `nic_vport_context.min_wqe_inline_mode`.
pub mod inline_mode {
    /// `MLX5_INLINE_MODE_NONE`: nothing needs to be inline.
    pub const NONE: u8 = 0;
    /// `MLX5_INLINE_MODE_L2`: the Ethernet header (and VLAN tag).
    pub const L2: u8 = 1;
    /// `MLX5_INLINE_MODE_IP`: up to the end of the IP header.
    pub const IP: u8 = 2;
    /// `MLX5_INLINE_MODE_TCP_UDP`: up to the end of the TCP/UDP header.
    pub const TCP_UDP: u8 = 3;
}

/// `per_protocol_networking_offload_caps.wqe_inline_mode`: where the minimum inline mode comes
/// from (Linux include/linux/mlx5/vport.h:44, `MLX5_CAP_INLINE_MODE_*`; read by Linux
/// core/vport.c `mlx5_query_min_inline`).
pub mod cap_inline_mode {
    /// `MLX5_CAP_INLINE_MODE_L2`: always [`super::inline_mode::L2`].
    pub const L2: u8 = 0;
    /// `MLX5_CAP_INLINE_MODE_VPORT_CONTEXT`: `nic_vport_context.min_wqe_inline_mode`
    /// (QUERY_NIC_VPORT_CONTEXT) says, and mlx5e copies it into `sqc.min_wqe_inline_mode`.
    pub const VPORT_CONTEXT: u8 = 1;
    /// `MLX5_CAP_INLINE_MODE_NOT_REQUIRED`: [`super::inline_mode::NONE`].
    pub const NOT_REQUIRED: u8 = 2;
}

/// `nic_vport_context.allowed_list_type` / `query_nic_vport_context_in.allowed_list_type`
/// (`enum mlx5_list_type`, Linux include/linux/mlx5/device.h:1190).
pub mod nic_vport_list_type {
    /// `MLX5_NVPRT_LIST_TYPE_UC`: the unicast MAC list.
    pub const UC: u8 = 0x0;
    /// `MLX5_NVPRT_LIST_TYPE_MC`: the multicast MAC list (broadcast included).
    pub const MC: u8 = 0x1;
    /// `MLX5_NVPRT_LIST_TYPE_VLAN`: the VLAN list (`vlan_layout` entries).
    pub const VLAN: u8 = 0x2;
}
