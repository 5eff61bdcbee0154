//! PRM declarations the `mlx5_prm` crate does not have yet (caps, vport lists and the Ethernet
//! segment are being added there); each goes when its `mlx5_prm` twin lands.

use mlx5_prm::Field;

/// `mlx5_ifc_per_protocol_networking_offload_caps_bits` (Linux mlx5_ifc.h).
pub(super) mod per_protocol_networking_offload_caps {
    use super::Field;
    /// `wqe_inline_mode[0x2]`.
    pub(crate) const WQE_INLINE_MODE: Field = Field::new(0x12, 0x2);
}

/// `mlx5_ifc_flow_table_nic_cap_bits` (Linux mlx5_ifc.h).
pub(super) mod flow_table_nic_cap {
    use super::Field;
    /// `flow_table_properties_nic_receive` (`flow_table_prop_layout`).
    pub(crate) const FLOW_TABLE_PROPERTIES_NIC_RECEIVE: Field = Field::new(0x200, 0x200);
}

/// `mlx5_ifc_flow_table_prop_layout_bits` (Linux mlx5_ifc.h).
pub(super) mod flow_table_prop_layout {
    use super::Field;
    /// `ft_support[0x1]`.
    pub(crate) const FT_SUPPORT: Field = Field::new(0x0, 0x1);
    /// `modify_root[0x1]`.
    pub(crate) const MODIFY_ROOT: Field = Field::new(0x4, 0x1);
    /// `log_max_ft_size[0x6]`.
    pub(crate) const LOG_MAX_FT_SIZE: Field = Field::new(0x22, 0x6);
}

/// `mlx5_ifc_nic_vport_context_bits` fields (Linux mlx5_ifc.h).
pub(super) mod nic_vport_context {
    use super::Field;
    /// `min_wqe_inline_mode[0x3]`.
    pub(crate) const MIN_WQE_INLINE_MODE: Field = Field::new(0x5, 0x3);
    /// `allowed_list_type[0x3]`.
    pub(crate) const ALLOWED_LIST_TYPE: Field = Field::new(0x785, 0x3);
    /// `allowed_list_size[0xc]`.
    pub(crate) const ALLOWED_LIST_SIZE: Field = Field::new(0x794, 0xc);
}

/// `struct mlx5_wqe_eth_seg` byte offsets (Linux include/linux/mlx5/qp.h).
pub(super) mod eth_seg {
    /// `inline_hdr.sz` (`__be16`).
    pub(crate) const INLINE_HDR_SZ: usize = 12;
    /// `inline_hdr.start` (the first 2 inline bytes).
    pub(crate) const INLINE_HDR_START: usize = 14;
}
