//! Ethernet data path: the Ethernet segment of a send WQE (checksum flags, inline headers) and
//! what a receive CQE says about the packet (L3/L4 types, checksum-ok bits, LRO), as Linux
//! mlx5e writes and reads them (core/en_tx.c, core/en_rx.c).
//!
//! C structs (`struct mlx5_wqe_eth_seg`, `struct mlx5_cqe64`), so byte offsets, fields
//! big-endian. An Ethernet send WQE is a control segment ([`crate::wqe::ctrl_seg`], opcode
//! [`crate::wqe::opcode::SEND`]), one Ethernet segment ([`eth_seg`]) whose inline headers
//! continue into the following 16-byte units, then data segments ([`crate::wqe::data_seg`])
//! (Linux core/en_tx.c `mlx5e_sq_xmit_wqe`). A receive WQE of mlx5e's cyclic RQ is data
//! segments only (Linux core/en.h `struct mlx5e_rx_wqe_cyc`). The CQE's byte offsets are in
//! [`crate::cqe::offset`]. Linux means the OFED 24.07 tree wjz304/mlnx-ofed-kernel
//! @2c0186b9c664, rdma-core linux-rdma/rdma-core @691953d8d502.

/// `struct mlx5_wqe_eth_seg` (16 bytes; Linux include/linux/mlx5/qp.h:275; rdma-core
/// mlx5dv.h:1356 has the same first 16 bytes, with the software-parser bytes reserved).
pub mod eth_seg {
    /// u8 `swp_outer_l4_offset` (software parser; 0 when unused).
    pub const SWP_OUTER_L4_OFFSET: usize = 0;
    /// u8 `swp_outer_l3_offset`.
    pub const SWP_OUTER_L3_OFFSET: usize = 1;
    /// u8 `swp_inner_l4_offset`.
    pub const SWP_INNER_L4_OFFSET: usize = 2;
    /// u8 `swp_inner_l3_offset`.
    pub const SWP_INNER_L3_OFFSET: usize = 3;
    /// u8 `cs_flags` ([`cs_flags`]).
    pub const CS_FLAGS: usize = 4;
    /// u8 `swp_flags`.
    pub const SWP_FLAGS: usize = 5;
    /// be16 `mss`: segment size of an LSO send; 0 for a plain SEND (Linux core/en_tx.c
    /// `mlx5e_sq_xmit_prepare`).
    pub const MSS: usize = 6;
    /// be32 `flow_table_metadata` (rdma-core: reserved).
    pub const FLOW_TABLE_METADATA: usize = 8;
    /// be16 `inline_hdr.sz`: bytes of the frame's start carried inline (Linux core/en_tx.c
    /// `mlx5e_sq_xmit_wqe`).
    pub const INLINE_HDR_SZ: usize = 12;
    /// `inline_hdr.start[2]`: the first two inline bytes; the rest follow in the next 16-byte
    /// units of the WQE, before the data segments.
    pub const INLINE_HDR_START: usize = 14;
    /// `INL_HDR_START_SZ`: inline bytes held inside the segment itself (Linux core/en/txrx.h).
    pub const INLINE_HDR_START_SZ: usize = 2;
    /// Segment size.
    pub const SIZE: usize = 16;

    /// `MLX5E_MIN_INLINE` (Linux core/en_tx.c:60): `ETH_HLEN + VLAN_HLEN` = 18 bytes, what
    /// mlx5e inlines at least under [`crate::inline_mode::L2`] (`mlx5e_skb_l2_header_offset`).
    pub const MIN_INLINE_L2: usize = 14 + 4;

    /// `MLX5E_TX_WQE_EMPTY_DS_COUNT` (Linux core/en/txrx.h): control plus Ethernet segment, in
    /// 16-byte units, before any inline continuation or data segment.
    pub const EMPTY_DS_COUNT: usize = 2;

    /// 16-byte units the inline headers take after the segment for `ihs` inline bytes:
    /// `DIV_ROUND_UP(ihs - INL_HDR_START_SZ, MLX5_SEND_WQE_DS)` (Linux core/en_tx.c
    /// `mlx5e_sq_calc_wqe_attr`); 0 for `ihs` <= 2.
    pub const fn inline_ds(ihs: usize) -> usize {
        ihs.saturating_sub(INLINE_HDR_START_SZ)
            .div_ceil(crate::wqe::SEND_WQE_DS)
    }

    /// `cs_flags` bits (Linux include/linux/mlx5/qp.h:246; rdma-core mlx5dv.h:1285 has the
    /// outer two): which checksums the device computes on send (Linux core/en_tx.c
    /// `mlx5e_txwqe_build_eseg_csum` sets `L3_CSUM | L4_CSUM` for CHECKSUM_PARTIAL).
    pub mod cs_flags {
        /// `MLX5_ETH_WQE_L3_INNER_CSUM`.
        pub const L3_INNER_CSUM: u8 = 1 << 4;
        /// `MLX5_ETH_WQE_L4_INNER_CSUM`.
        pub const L4_INNER_CSUM: u8 = 1 << 5;
        /// `MLX5_ETH_WQE_L3_CSUM`: the IPv4 header checksum.
        pub const L3_CSUM: u8 = 1 << 6;
        /// `MLX5_ETH_WQE_L4_CSUM`: the TCP/UDP checksum.
        pub const L4_CSUM: u8 = 1 << 7;
    }
}

/// What an Ethernet receive CQE says about the packet (Linux include/linux/mlx5/device.h,
/// core/en_rx.c; rdma-core providers/mlx5/cq.c reads the same bits). Byte offsets are in
/// [`crate::cqe::offset`]; the completion opcode of a received frame is
/// [`crate::cqe::opcode::RESP_SEND`].
pub mod eth_cqe {
    /// `hds_ip_ext` bits (Linux device.h:1048 `CQE_L2_OK`..., rdma-core mlx5dv.h:1127
    /// `MLX5_CQE_L2_OK`...): the device verified these checksums. Linux core/en_rx.c
    /// `mlx5e_handle_csum` trusts a packet with `L3_OK` and `L4_OK` both set.
    pub mod hds_ip_ext {
        /// `CQE_L2_OK`.
        pub const L2_OK: u8 = 1 << 0;
        /// `CQE_L3_OK`: the IPv4 header checksum is good.
        pub const L3_OK: u8 = 1 << 1;
        /// `CQE_L4_OK`: the TCP/UDP checksum is good.
        pub const L4_OK: u8 = 1 << 2;
    }

    /// `l4_l3_hdr_type` bits 6:4: the L4 header type (Linux device.h `get_cqe_l4_hdr_type`).
    pub const fn l4_hdr_type(l4_l3_hdr_type: u8) -> u8 {
        (l4_l3_hdr_type >> 4) & 0x7
    }
    /// `l4_l3_hdr_type` bits 3:2: the L3 header type (rdma-core cq.c `get_cqe_l3_hdr_type`).
    pub const fn l3_hdr_type(l4_l3_hdr_type: u8) -> u8 {
        (l4_l3_hdr_type >> 2) & 0x3
    }
    /// `l4_l3_hdr_type` bit 0: the device stripped a VLAN tag into `vlan_info` (Linux device.h
    /// `cqe_has_vlan`).
    pub const fn has_vlan(l4_l3_hdr_type: u8) -> bool {
        l4_l3_hdr_type & 0x1 != 0
    }
    /// The byte `l4_l3_hdr_type` for an L4 type, an L3 type and the VLAN bit (the inverse of
    /// the three readers above).
    pub const fn l4_l3_hdr_type(l4: u8, l3: u8, vlan: bool) -> u8 {
        ((l4 & 0x7) << 4) | ((l3 & 0x3) << 2) | vlan as u8
    }

    /// L4 header types (Linux device.h:1014, `CQE_L4_HDR_TYPE_*`).
    pub mod l4_hdr_type {
        /// `CQE_L4_HDR_TYPE_NONE`.
        pub const NONE: u8 = 0x0;
        /// `CQE_L4_HDR_TYPE_TCP_NO_ACK`.
        pub const TCP_NO_ACK: u8 = 0x1;
        /// `CQE_L4_HDR_TYPE_UDP`.
        pub const UDP: u8 = 0x2;
        /// `CQE_L4_HDR_TYPE_TCP_ACK_NO_DATA`.
        pub const TCP_ACK_NO_DATA: u8 = 0x3;
        /// `CQE_L4_HDR_TYPE_TCP_ACK_AND_DATA`.
        pub const TCP_ACK_AND_DATA: u8 = 0x4;
    }

    /// L3 header types (rdma-core mlx5dv.h:1132, `MLX5_CQE_L3_HDR_TYPE_*`).
    pub mod l3_hdr_type {
        /// `MLX5_CQE_L3_HDR_TYPE_NONE`.
        pub const NONE: u8 = 0x0;
        /// `MLX5_CQE_L3_HDR_TYPE_IPV6`.
        pub const IPV6: u8 = 0x1;
        /// `MLX5_CQE_L3_HDR_TYPE_IPV4`.
        pub const IPV4: u8 = 0x2;
    }

    /// `srqn` bits 31:24: the number of segments LRO merged into this packet, 0 without LRO
    /// (Linux core/en_rx.c `mlx5e_build_rx_skb`).
    pub const fn lro_num_seg(srqn: u32) -> u8 {
        (srqn >> 24) as u8
    }
    /// `lro_tcppsh_abort_dupack` bit 6: the merged segments carried PSH (Linux device.h
    /// `get_cqe_lro_tcppsh`).
    pub const fn lro_tcppsh(lro_tcppsh_abort_dupack: u8) -> bool {
        (lro_tcppsh_abort_dupack >> 6) & 1 != 0
    }
    /// `tls_outer_l3_tunneled` bit 0: the packet was tunneled and the `hds_ip_ext` bits are the
    /// inner headers' (Linux device.h `cqe_is_tunneled`).
    pub const fn is_tunneled(tls_outer_l3_tunneled: u8) -> bool {
        tls_outer_l3_tunneled & 0x1 != 0
    }

    /// `op_own` bits 3:2 ([`crate::cqe::format`]) (Linux device.h:897): how the CQE is laid out.
    pub mod format {
        /// `MLX5_NO_INLINE_DATA`: a plain 64-byte CQE; what mlx5e's RQ gets without
        /// compression or scatter-to-CQE.
        pub const NO_INLINE_DATA: u8 = 0;
        /// `MLX5_INLINE_DATA32_SEG`.
        pub const INLINE_DATA32_SEG: u8 = 1;
        /// `MLX5_INLINE_DATA64_SEG`.
        pub const INLINE_DATA64_SEG: u8 = 2;
        /// `MLX5_COMPRESSED`: a title CQE of a compressed block (`cqc.cqe_comp_en`).
        pub const COMPRESSED: u8 = 3;
    }

    /// `cqc.mini_cqe_res_format` of a compressing CQ (Linux device.h:904, core/en/params.c
    /// `mlx5e_build_rx_cq_param`).
    pub mod mini_cqe_res_format {
        /// `MLX5_CQE_FORMAT_CSUM`: mini CQEs carry the checksum.
        pub const CSUM: u8 = 0x1;
        /// `MLX5_CQE_FORMAT_CSUM_STRIDX`: checksum and stride index.
        pub const CSUM_STRIDX: u8 = 0x3;
    }
}
