//! Data-path constants: CQE layout and codes, WQE segments and opcodes, doorbell records and
//! UAR offsets.
//!
//! These are C structs (`struct mlx5_cqe64`, `struct mlx5_wqe_*_seg`), not mlx5_ifc.h bit
//! layouts, so they are given as byte offsets, all fields big-endian. Each item cites its
//! source header or function; rdma-core means
//! linux-rdma/rdma-core @691953d8d502, Linux the OFED 24.07 tree wjz304/mlnx-ofed-kernel
//! @2c0186b9c664.

/// Completion queue entries.
pub mod cqe {
    /// Size of a 64-byte CQE. With 128-byte CQEs the 64-byte CQE is the second half.
    pub const SIZE: usize = 64;

    /// Bits of the responder CQE's `flags_rqpn` above the source QP number (bits 23:0, `wc->src_qp`),
    /// as Linux drivers/infiniband/hw/mlx5/cq.c `handle_responder` reads them.
    pub mod flags_rqpn {
        /// Bits 23:0: the sender's QP number (UD: the DETH source QP).
        pub const SRC_QP_MASK: u32 = 0xff_ffff;
        /// Bits 29:28 (`g`): a non-zero value sets `IB_WC_GRH`; 1 = the 40-byte GRH / IP header
        /// area was scattered in front of the payload (ucx src/uct/ib/mlx5/ib_mlx5.h
        /// `UCT_IB_MLX5_CQE_FLAG_L3_IN_DATA` = 1 << 28).
        pub const GRH_IN_DATA: u32 = 1 << 28;
        /// Bits 25:24 (Ethernet link layer): the RoCE L3 header type (Linux
        /// include/linux/mlx5/device.h `MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
        pub const L3_TYPE_SHIFT: u32 = 24;
        /// `MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH` (RoCE v1).
        pub const L3_GRH: u32 = 0x0;
        /// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6` (RoCE v2 over IPv6).
        pub const L3_IPV6: u32 = 0x1;
        /// `MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4` (RoCE v2 over IPv4).
        pub const L3_IPV4: u32 = 0x2;
    }

    /// Byte offsets in `struct mlx5_cqe64` (rdma-core providers/mlx5/mlx5dv.h:1180; Linux
    /// include/linux/mlx5/device.h:830 agrees on every offset listed here).
    pub mod offset {
        /// be16 `wqe_id`.
        pub const WQE_ID: usize = 2;
        /// u8 `ml_path`.
        pub const ML_PATH: usize = 17;
        /// be16 `slid`.
        pub const SLID: usize = 22;
        /// be32 `flags_rqpn`.
        pub const FLAGS_RQPN: usize = 24;
        /// u8 `hds_ip_ext`.
        pub const HDS_IP_EXT: usize = 28;
        /// u8 `l4_hdr_type_etc` (Linux `l4_l3_hdr_type`).
        pub const L4_HDR_TYPE_ETC: usize = 29;
        /// be16 `vlan_info`.
        pub const VLAN_INFO: usize = 30;
        /// be32 `srqn_uidx` (Linux `srqn`): low 24 bits = user index / SRQN.
        pub const SRQN_UIDX: usize = 32;
        /// be32 `imm_inval_pkey` (Linux union `immediate` / `inval_rkey` / `pkey`).
        pub const IMM_INVAL_PKEY: usize = 36;
        /// be32 `byte_cnt`.
        pub const BYTE_CNT: usize = 44;
        /// be64 `timestamp` (Linux `timestamp_h` / `timestamp_l`).
        pub const TIMESTAMP: usize = 48;
        /// be32 `sop_drop_qpn`: bits 23:0 QPN, bits 31:24 the send WQE opcode (requester).
        pub const SOP_DROP_QPN: usize = 56;
        /// be16 `wqe_counter`: index of the completed WQE (WQEBBs for the SQ).
        pub const WQE_COUNTER: usize = 60;
        /// u8 `signature`.
        pub const SIGNATURE: usize = 62;
        /// u8 `op_own`: bit 0 owner, bit 1 solicited, bits 3:2 format, bits 7:4 opcode.
        pub const OP_OWN: usize = 63;

        // Ethernet receive fields: Linux include/linux/mlx5/device.h:830 names them where
        // rdma-core's struct has reserved bytes ([`crate::eth_cqe`] reads them).
        /// u8 `tls_outer_l3_tunneled` (bit 0 tunneled, [`crate::eth_cqe::is_tunneled`]).
        pub const TLS_OUTER_L3_TUNNELED: usize = 0;
        /// u8 `lro.tcppsh_abort_dupack` ([`crate::eth_cqe::lro_tcppsh`]).
        pub const LRO_TCPPSH_ABORT_DUPACK: usize = 4;
        /// u8 `lro.min_ttl`.
        pub const LRO_MIN_TTL: usize = 5;
        /// be16 `lro.tcp_win`.
        pub const LRO_TCP_WIN: usize = 6;
        /// be32 `lro.ack_seq_num`.
        pub const LRO_ACK_SEQ_NUM: usize = 8;
        /// be32 `rss_hash_result`.
        pub const RSS_HASH_RESULT: usize = 12;
        /// u8 `rss_hash_type`.
        pub const RSS_HASH_TYPE: usize = 16;
        /// be16 `check_sum`: the packet's ones'-complement sum, for CHECKSUM_COMPLETE (Linux
        /// core/en_rx.c `mlx5e_handle_csum`).
        pub const CHECK_SUM: usize = 20;
        /// u8 `l4_l3_hdr_type`, Linux's name of [`L4_HDR_TYPE_ETC`].
        pub const L4_L3_HDR_TYPE: usize = L4_HDR_TYPE_ETC;
    }

    /// Byte offsets in `struct mlx5_err_cqe` (Linux include/linux/mlx5/device.h:818), for
    /// opcodes REQ_ERR / RESP_ERR.
    pub mod err_offset {
        /// be32 `srqn`.
        pub const SRQN: usize = 32;
        /// u8 `vendor_err_synd`.
        pub const VENDOR_ERR_SYND: usize = 54;
        /// u8 `syndrome` ([`super::syndrome`]).
        pub const SYNDROME: usize = 55;
        /// be32 `s_wqe_opcode_qpn`.
        pub const S_WQE_OPCODE_QPN: usize = 56;
        /// be16 `wqe_counter`.
        pub const WQE_COUNTER: usize = 60;
        /// u8 `signature`.
        pub const SIGNATURE: usize = 62;
        /// u8 `op_own`.
        pub const OP_OWN: usize = 63;
    }

    /// `op_own` owner bit (rdma-core mlx5dv.h:1230).
    pub const OWNER_MASK: u8 = 0x1;
    /// Opcode from `op_own` (bits 7:4, rdma-core mlx5dv.h:1255).
    pub const fn opcode(op_own: u8) -> u8 {
        op_own >> 4
    }
    /// Solicited-event bit from `op_own` (bit 1, rdma-core mlx5dv.h:1243).
    pub const fn se(op_own: u8) -> u8 {
        (op_own >> 1) & 1
    }
    /// CQE format from `op_own` (bits 3:2: 0 none, 1 inline32, 2 inline64, 3 compressed;
    /// rdma-core mlx5dv.h:1249).
    pub const fn format(op_own: u8) -> u8 {
        (op_own >> 2) & 0x3
    }
    /// Initial `op_own` of every CQE before CREATE_CQ: `MLX5_CQE_INVALID << 4` (rdma-core
    /// cq.c `mlx5_alloc_cq_buf`, Linux ib/cq.c:880 `init_cq_frag_buf`).
    pub const OP_OWN_INIT: u8 = opcode::INVALID << 4;
    /// CQE `n` of a CQ of `cqe_cnt` (power of two) entries belongs to software iff its opcode is
    /// not INVALID and its owner bit equals `!!(n & cqe_cnt)` (rdma-core cq.c:147).
    pub const fn is_sw_owned(op_own: u8, n: u32, cqe_cnt: u32) -> bool {
        opcode(op_own) != opcode::INVALID && ((op_own & OWNER_MASK) != 0) == ((n & cqe_cnt) != 0)
    }

    /// CQE opcodes (`MLX5_CQE_*`, rdma-core providers/mlx5/mlx5dv.h @691953d8d502; Linux
    /// include/linux/mlx5/cq.h has the same values except that it lacks `NO_PACKET`).
    pub mod opcode {
        /// `MLX5_CQE_REQ` (mlx5dv.h:1140).
        pub const REQ: u8 = 0x0;
        /// `MLX5_CQE_RESP_WR_IMM` (mlx5dv.h:1141).
        pub const RESP_WR_IMM: u8 = 0x1;
        /// `MLX5_CQE_RESP_SEND` (mlx5dv.h:1142).
        pub const RESP_SEND: u8 = 0x2;
        /// `MLX5_CQE_RESP_SEND_IMM` (mlx5dv.h:1143).
        pub const RESP_SEND_IMM: u8 = 0x3;
        /// `MLX5_CQE_RESP_SEND_INV` (mlx5dv.h:1144).
        pub const RESP_SEND_INV: u8 = 0x4;
        /// `MLX5_CQE_RESIZE_CQ` (mlx5dv.h:1145).
        pub const RESIZE_CQ: u8 = 0x5;
        /// `MLX5_CQE_NO_PACKET` (mlx5dv.h:1146).
        pub const NO_PACKET: u8 = 0x6;
        /// `MLX5_CQE_SIG_ERR` (mlx5dv.h:1147).
        pub const SIG_ERR: u8 = 0xc;
        /// `MLX5_CQE_REQ_ERR` (mlx5dv.h:1148).
        pub const REQ_ERR: u8 = 0xd;
        /// `MLX5_CQE_RESP_ERR` (mlx5dv.h:1149).
        pub const RESP_ERR: u8 = 0xe;
        /// `MLX5_CQE_INVALID` (mlx5dv.h:1150).
        pub const INVALID: u8 = 0xf;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_CQE_REQ", REQ),
            ("MLX5_CQE_RESP_WR_IMM", RESP_WR_IMM),
            ("MLX5_CQE_RESP_SEND", RESP_SEND),
            ("MLX5_CQE_RESP_SEND_IMM", RESP_SEND_IMM),
            ("MLX5_CQE_RESP_SEND_INV", RESP_SEND_INV),
            ("MLX5_CQE_RESIZE_CQ", RESIZE_CQ),
            ("MLX5_CQE_NO_PACKET", NO_PACKET),
            ("MLX5_CQE_SIG_ERR", SIG_ERR),
            ("MLX5_CQE_REQ_ERR", REQ_ERR),
            ("MLX5_CQE_RESP_ERR", RESP_ERR),
            ("MLX5_CQE_INVALID", INVALID),
        ];
    }

    /// Error CQE syndromes (`MLX5_CQE_SYNDROME_*`, Linux include/linux/mlx5/cq.h @2c0186b9c664),
    /// with the verbs status each maps to.
    pub mod syndrome {
        /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR` — IBV_WC_LOC_LEN_ERR (cq.h:68).
        pub const LOCAL_LENGTH_ERR: u8 = 0x1;
        /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR` — IBV_WC_LOC_QP_OP_ERR (cq.h:69).
        pub const LOCAL_QP_OP_ERR: u8 = 0x2;
        /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR` — IBV_WC_LOC_PROT_ERR (cq.h:70).
        pub const LOCAL_PROT_ERR: u8 = 0x4;
        /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR` — IBV_WC_WR_FLUSH_ERR (cq.h:71).
        pub const WR_FLUSH_ERR: u8 = 0x5;
        /// `MLX5_CQE_SYNDROME_MW_BIND_ERR` — IBV_WC_MW_BIND_ERR (cq.h:72).
        pub const MW_BIND_ERR: u8 = 0x6;
        /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR` — IBV_WC_BAD_RESP_ERR (cq.h:73).
        pub const BAD_RESP_ERR: u8 = 0x10;
        /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR` — IBV_WC_LOC_ACCESS_ERR (cq.h:74).
        pub const LOCAL_ACCESS_ERR: u8 = 0x11;
        /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR` — IBV_WC_REM_INV_REQ_ERR (cq.h:75).
        pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
        /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR` — IBV_WC_REM_ACCESS_ERR (cq.h:76).
        pub const REMOTE_ACCESS_ERR: u8 = 0x13;
        /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR` — IBV_WC_REM_OP_ERR (cq.h:77).
        pub const REMOTE_OP_ERR: u8 = 0x14;
        /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR` — IBV_WC_RETRY_EXC_ERR (cq.h:78).
        pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
        /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR` — IBV_WC_RNR_RETRY_EXC_ERR (cq.h:79).
        pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
        /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR` — IBV_WC_REM_ABORT_ERR (cq.h:80).
        pub const REMOTE_ABORTED_ERR: u8 = 0x22;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR", LOCAL_LENGTH_ERR),
            ("MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR", LOCAL_QP_OP_ERR),
            ("MLX5_CQE_SYNDROME_LOCAL_PROT_ERR", LOCAL_PROT_ERR),
            ("MLX5_CQE_SYNDROME_WR_FLUSH_ERR", WR_FLUSH_ERR),
            ("MLX5_CQE_SYNDROME_MW_BIND_ERR", MW_BIND_ERR),
            ("MLX5_CQE_SYNDROME_BAD_RESP_ERR", BAD_RESP_ERR),
            ("MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR", LOCAL_ACCESS_ERR),
            (
                "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR",
                REMOTE_INVAL_REQ_ERR,
            ),
            ("MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR", REMOTE_ACCESS_ERR),
            ("MLX5_CQE_SYNDROME_REMOTE_OP_ERR", REMOTE_OP_ERR),
            (
                "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
                TRANSPORT_RETRY_EXC_ERR,
            ),
            ("MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR", RNR_RETRY_EXC_ERR),
            ("MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR", REMOTE_ABORTED_ERR),
        ];
    }

    /// A work completion's status: verbs `enum ibv_wc_status` (rdma-core libibverbs/verbs.h;
    /// Linux `enum ib_wc_status`, include/rdma/ib_verbs.h), which an error CQE's [`syndrome`]
    /// encodes. The mapping both ways is the one of rdma-core providers/mlx5/cq.c and Linux
    /// drivers/infiniband/hw/mlx5/cq.c `mlx5_handle_error_cqe`: [`WcStatus::from_syndrome`]
    /// (a driver reading a CQE), [`WcStatus::cqe_syndrome`] (a device writing one).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    #[repr(u8)]
    pub enum WcStatus {
        /// `IBV_WC_SUCCESS`.
        Success,
        /// `IBV_WC_LOC_LEN_ERR`: a local length error (a receive WQE too small for the
        /// message).
        LocLenErr,
        /// `IBV_WC_LOC_QP_OP_ERR`: a local QP operation error (a malformed WQE).
        LocQpOpErr,
        /// `IBV_WC_LOC_PROT_ERR`: a local protection error (an lkey fault while gathering or
        /// scattering).
        LocProtErr,
        /// `IBV_WC_WR_FLUSH_ERR`: flushed, the QP is in the error state.
        WrFlushErr,
        /// `IBV_WC_MW_BIND_ERR`.
        MwBindErr,
        /// `IBV_WC_BAD_RESP_ERR`.
        BadRespErr,
        /// `IBV_WC_LOC_ACCESS_ERR` (e.g. a responder-side rkey violation on a WRITE with
        /// immediate, reported on the receive WQE it consumed).
        LocAccessErr,
        /// `IBV_WC_REM_INV_REQ_ERR`: the responder answered NAK invalid request.
        RemInvReqErr,
        /// `IBV_WC_REM_ACCESS_ERR`: the responder answered NAK remote access error.
        RemAccessErr,
        /// `IBV_WC_REM_OP_ERR`: the responder answered NAK remote operational error.
        RemOpErr,
        /// `IBV_WC_RETRY_EXC_ERR`: no ACK after `retry_count` retransmissions.
        RetryExcErr,
        /// `IBV_WC_RNR_RETRY_EXC_ERR`: RNR NAKs after `rnr_retry` retries.
        RnrRetryExcErr,
        /// `IBV_WC_REM_ABORT_ERR`.
        RemAbortErr,
        /// `IBV_WC_GENERAL_ERR`: an error syndrome the PRM does not name. No CQE syndrome
        /// encodes it.
        GeneralErr,
        /// Not a verbs status and not in any CQE: the consumer could not make sense of the CQE
        /// (unknown opcode, a QP not attached to this CQ, a WQE counter that names no
        /// outstanding WQE, e.g. a duplicate), and reports that instead of guessing. The mlx5
        /// driver's; the CQE was consumed and nothing else touched.
        BadCqe,
    }

    impl WcStatus {
        /// The status an error CQE with syndrome `s` reports ([`GeneralErr`] for a syndrome
        /// the PRM does not name).
        ///
        /// [`GeneralErr`]: WcStatus::GeneralErr
        #[inline]
        pub const fn from_syndrome(s: u8) -> WcStatus {
            use syndrome as sy;
            match s {
                sy::LOCAL_LENGTH_ERR => WcStatus::LocLenErr,
                sy::LOCAL_QP_OP_ERR => WcStatus::LocQpOpErr,
                sy::LOCAL_PROT_ERR => WcStatus::LocProtErr,
                sy::WR_FLUSH_ERR => WcStatus::WrFlushErr,
                sy::MW_BIND_ERR => WcStatus::MwBindErr,
                sy::BAD_RESP_ERR => WcStatus::BadRespErr,
                sy::LOCAL_ACCESS_ERR => WcStatus::LocAccessErr,
                sy::REMOTE_INVAL_REQ_ERR => WcStatus::RemInvReqErr,
                sy::REMOTE_ACCESS_ERR => WcStatus::RemAccessErr,
                sy::REMOTE_OP_ERR => WcStatus::RemOpErr,
                sy::TRANSPORT_RETRY_EXC_ERR => WcStatus::RetryExcErr,
                sy::RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
                sy::REMOTE_ABORTED_ERR => WcStatus::RemAbortErr,
                _ => WcStatus::GeneralErr,
            }
        }

        /// The syndrome of the error CQE that reports this status: `None` for
        /// [`Success`](WcStatus::Success) (no error CQE), and for the two statuses no
        /// syndrome encodes, [`GeneralErr`](WcStatus::GeneralErr) and
        /// [`BadCqe`](WcStatus::BadCqe).
        #[inline]
        pub const fn cqe_syndrome(self) -> Option<u8> {
            use syndrome as sy;
            Some(match self {
                WcStatus::LocLenErr => sy::LOCAL_LENGTH_ERR,
                WcStatus::LocQpOpErr => sy::LOCAL_QP_OP_ERR,
                WcStatus::LocProtErr => sy::LOCAL_PROT_ERR,
                WcStatus::WrFlushErr => sy::WR_FLUSH_ERR,
                WcStatus::MwBindErr => sy::MW_BIND_ERR,
                WcStatus::BadRespErr => sy::BAD_RESP_ERR,
                WcStatus::LocAccessErr => sy::LOCAL_ACCESS_ERR,
                WcStatus::RemInvReqErr => sy::REMOTE_INVAL_REQ_ERR,
                WcStatus::RemAccessErr => sy::REMOTE_ACCESS_ERR,
                WcStatus::RemOpErr => sy::REMOTE_OP_ERR,
                WcStatus::RetryExcErr => sy::TRANSPORT_RETRY_EXC_ERR,
                WcStatus::RnrRetryExcErr => sy::RNR_RETRY_EXC_ERR,
                WcStatus::RemAbortErr => sy::REMOTE_ABORTED_ERR,
                WcStatus::Success | WcStatus::GeneralErr | WcStatus::BadCqe => return None,
            })
        }
    }

    /// Vendor syndromes (`MLX5_CQE_VENDOR_SYNDROME_*`, rdma-core providers/mlx5/mlx5dv.h
    /// @691953d8d502).
    pub mod vendor_syndrome {
        /// `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT` (mlx5dv.h:1123).
        pub const ODP_PFAULT: u8 = 0x93;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[("MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT", ODP_PFAULT)];
    }

    /// CQ states in `cqc.st` (`MLX5_CQ_STATE_*`, Linux include/linux/mlx5/device.h @2c0186b9c664).
    pub mod state {
        /// `MLX5_CQ_STATE_ARMED` (device.h:185).
        pub const ARMED: u8 = 0x9;
        /// `MLX5_CQ_STATE_ALWAYS_ARMED` (device.h:186).
        pub const ALWAYS_ARMED: u8 = 0xb;
        /// `MLX5_CQ_STATE_FIRED` (device.h:187).
        pub const FIRED: u8 = 0xa;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_CQ_STATE_ARMED", ARMED),
            ("MLX5_CQ_STATE_ALWAYS_ARMED", ALWAYS_ARMED),
            ("MLX5_CQ_STATE_FIRED", FIRED),
        ];
    }

    /// `cqc.cqe_sz` encoding (`CQE_STRIDE_*`, Linux include/linux/mlx5/cq.h @2c0186b9c664; Linux
    /// ib/cq.c `mlx5_ib_create_cq` writes it).
    pub mod stride {
        /// `CQE_STRIDE_64` (cq.h:127).
        pub const CQE_STRIDE_64: u8 = 0x0;
        /// `CQE_STRIDE_128` (cq.h:128).
        pub const CQE_STRIDE_128: u8 = 0x1;
        /// `CQE_STRIDE_128_PAD` (cq.h:129).
        pub const CQE_STRIDE_128_PAD: u8 = 0x2;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("CQE_STRIDE_64", CQE_STRIDE_64),
            ("CQE_STRIDE_128", CQE_STRIDE_128),
            ("CQE_STRIDE_128_PAD", CQE_STRIDE_128_PAD),
        ];
    }
}

/// CQ doorbell record and arm doorbell.
pub mod cq_db {
    /// Index of the consumer-index word in the CQ doorbell record (`MLX5_CQ_SET_CI`):
    /// `dbrec[0] = be32(ci & 0xffffff)` (rdma-core cq.c:161).
    pub const SET_CI: usize = 0;
    /// Index of the arm word (`MLX5_CQ_ARM_DB`): `dbrec[1] = be32(sn << 28 | cmd | ci)`
    /// (rdma-core cq.c:1741).
    pub const ARM_DB: usize = 1;
    /// rdma-core providers/mlx5/mlx5dv.h @691953d8d502
    pub mod cmd {
        /// `MLX5_CQ_DB_REQ_NOT_SOL` (mlx5dv.h:1158).
        pub const REQ_NOT_SOL: u32 = 0x1000000;
        /// `MLX5_CQ_DB_REQ_NOT` (mlx5dv.h:1159).
        pub const REQ_NOT: u32 = 0x0;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u32)] = &[
            ("MLX5_CQ_DB_REQ_NOT_SOL", REQ_NOT_SOL),
            ("MLX5_CQ_DB_REQ_NOT", REQ_NOT),
        ];
    }
    /// The arm word / upper half of the arm doorbell: `(sn & 3) << 28 | cmd | (ci & 0xffffff)`.
    /// The 64-bit doorbell written to UAR + [`crate::uar::CQ_DOORBELL`] is this word followed by
    /// the CQN (rdma-core cq.c:1749, Linux include/linux/mlx5/cq.h:170).
    pub const fn arm_value(sn: u32, cmd: u32, ci: u32) -> u32 {
        ((sn & 3) << 28) | cmd | (ci & 0xff_ffff)
    }
}

/// Send and receive work queue entries.
pub mod wqe {
    /// `MLX5_SEND_WQE_BB`: send WQE basic block (Linux include/linux/mlx5/qp.h).
    pub const SEND_WQE_BB: usize = 64;
    /// `MLX5_SEND_WQE_DS`: the 16-byte unit of `qpn_ds` ("octoword").
    pub const SEND_WQE_DS: usize = 16;
    /// `MLX5_SEND_WQE_MAX_WQEBBS` (Linux qp.h:162).
    pub const SEND_WQE_MAX_WQEBBS: usize = 16;
    /// `MLX5_WQE_CTRL_DS_MASK`: low 6 bits of `qpn_ds` (Linux qp.h:238).
    pub const CTRL_DS_MASK: u32 = 0x3f;
    /// `MLX5_INLINE_SEG`: flag in an inline segment's byte_count (rdma-core qp.c:363).
    pub const INLINE_SEG: u32 = 0x8000_0000;
    /// `MLX5_INVALID_LKEY`: terminates a short receive scatter list (rdma-core mlx5dv.h:1262;
    /// Linux `MLX5_TERMINATE_SCATTER_LIST_LKEY`, qp.h:39).
    pub const INVALID_LKEY: u32 = 0x100;
    /// `MLX5_EXTENDED_UD_AV`: flag in `av.dqp_dct` (rdma-core qp.c:262).
    pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
    /// `MLX5_ATOMIC_SIZE`: byte_count of the data segment after an atomic segment
    /// (rdma-core qp.c:284).
    pub const ATOMIC_SIZE: u32 = 8;

    /// `opmod_idx_opcode`: bits 31:24 opmod, 23:8 WQE index (`sq.cur_post & 0xffff`, in WQEBBs),
    /// 7:0 opcode (rdma-core mlx5dv.h:1495).
    pub const fn opmod_idx_opcode(opmod: u8, idx: u16, opcode: u8) -> u32 {
        ((opmod as u32) << 24) | ((idx as u32) << 8) | opcode as u32
    }
    /// `qpn_ds`: bits 31:8 QPN, bits 5:0 WQE size in 16-byte units including the ctrl segment
    /// (rdma-core mlx5dv.h:1496).
    pub const fn qpn_ds(qpn: u32, ds: u8) -> u32 {
        (qpn << 8) | (ds as u32 & CTRL_DS_MASK)
    }
    /// WQEBBs a WQE of `ds` 16-byte units occupies: `DIV_ROUND_UP(ds * 16, 64)`
    /// (rdma-core qp.c:1135).
    pub const fn wqebbs(ds: u32) -> u32 {
        ds.saturating_mul(SEND_WQE_DS as u32)
            .div_ceil(SEND_WQE_BB as u32)
    }

    /// Send opcodes, rdma-core names (`MLX5_OPCODE_*`, rdma-core providers/mlx5/mlx5dv.h
    /// @691953d8d502).
    pub mod opcode {
        /// `MLX5_OPCODE_NOP` (mlx5dv.h:1075).
        pub const NOP: u8 = 0x0;
        /// `MLX5_OPCODE_SEND_INVAL` (mlx5dv.h:1076).
        pub const SEND_INVAL: u8 = 0x1;
        /// `MLX5_OPCODE_RDMA_WRITE` (mlx5dv.h:1077).
        pub const RDMA_WRITE: u8 = 0x8;
        /// `MLX5_OPCODE_RDMA_WRITE_IMM` (mlx5dv.h:1078).
        pub const RDMA_WRITE_IMM: u8 = 0x9;
        /// `MLX5_OPCODE_SEND` (mlx5dv.h:1079).
        pub const SEND: u8 = 0xa;
        /// `MLX5_OPCODE_SEND_IMM` (mlx5dv.h:1080).
        pub const SEND_IMM: u8 = 0xb;
        /// `MLX5_OPCODE_TSO` (mlx5dv.h:1081).
        pub const TSO: u8 = 0xe;
        /// `MLX5_OPCODE_RDMA_READ` (mlx5dv.h:1082).
        pub const RDMA_READ: u8 = 0x10;
        /// `MLX5_OPCODE_ATOMIC_CS` (mlx5dv.h:1083).
        pub const ATOMIC_CS: u8 = 0x11;
        /// `MLX5_OPCODE_ATOMIC_FA` (mlx5dv.h:1084).
        pub const ATOMIC_FA: u8 = 0x12;
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS` (mlx5dv.h:1085).
        pub const ATOMIC_MASKED_CS: u8 = 0x14;
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA` (mlx5dv.h:1086).
        pub const ATOMIC_MASKED_FA: u8 = 0x15;
        /// `MLX5_OPCODE_FMR` (mlx5dv.h:1087).
        pub const FMR: u8 = 0x19;
        /// `MLX5_OPCODE_LOCAL_INVAL` (mlx5dv.h:1088).
        pub const LOCAL_INVAL: u8 = 0x1b;
        /// `MLX5_OPCODE_CONFIG_CMD` (mlx5dv.h:1089).
        pub const CONFIG_CMD: u8 = 0x1f;
        /// `MLX5_OPCODE_SET_PSV` (mlx5dv.h:1090).
        pub const SET_PSV: u8 = 0x20;
        /// `MLX5_OPCODE_UMR` (mlx5dv.h:1091).
        pub const UMR: u8 = 0x25;
        /// `MLX5_OPCODE_TAG_MATCHING` (mlx5dv.h:1092).
        pub const TAG_MATCHING: u8 = 0x28;
        /// `MLX5_OPCODE_FLOW_TBL_ACCESS` (mlx5dv.h:1093).
        pub const FLOW_TBL_ACCESS: u8 = 0x2c;
        /// `MLX5_OPCODE_MMO` (mlx5dv.h:1094).
        pub const MMO: u8 = 0x2f;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_OPCODE_NOP", NOP),
            ("MLX5_OPCODE_SEND_INVAL", SEND_INVAL),
            ("MLX5_OPCODE_RDMA_WRITE", RDMA_WRITE),
            ("MLX5_OPCODE_RDMA_WRITE_IMM", RDMA_WRITE_IMM),
            ("MLX5_OPCODE_SEND", SEND),
            ("MLX5_OPCODE_SEND_IMM", SEND_IMM),
            ("MLX5_OPCODE_TSO", TSO),
            ("MLX5_OPCODE_RDMA_READ", RDMA_READ),
            ("MLX5_OPCODE_ATOMIC_CS", ATOMIC_CS),
            ("MLX5_OPCODE_ATOMIC_FA", ATOMIC_FA),
            ("MLX5_OPCODE_ATOMIC_MASKED_CS", ATOMIC_MASKED_CS),
            ("MLX5_OPCODE_ATOMIC_MASKED_FA", ATOMIC_MASKED_FA),
            ("MLX5_OPCODE_FMR", FMR),
            ("MLX5_OPCODE_LOCAL_INVAL", LOCAL_INVAL),
            ("MLX5_OPCODE_CONFIG_CMD", CONFIG_CMD),
            ("MLX5_OPCODE_SET_PSV", SET_PSV),
            ("MLX5_OPCODE_UMR", UMR),
            ("MLX5_OPCODE_TAG_MATCHING", TAG_MATCHING),
            ("MLX5_OPCODE_FLOW_TBL_ACCESS", FLOW_TBL_ACCESS),
            ("MLX5_OPCODE_MMO", MMO),
        ];
    }

    /// Send opcodes, Linux names (`MLX5_OPCODE_*`, Linux include/linux/mlx5/device.h
    /// @2c0186b9c664). Same values where the names overlap; Linux calls 0x0e `LSO` where rdma-core
    /// says `TSO`.
    pub mod opcode_linux {
        /// `MLX5_OPCODE_NOP` (device.h:429).
        pub const NOP: u8 = 0x0;
        /// `MLX5_OPCODE_SEND_INVAL` (device.h:430).
        pub const SEND_INVAL: u8 = 0x1;
        /// `MLX5_OPCODE_RDMA_WRITE` (device.h:431).
        pub const RDMA_WRITE: u8 = 0x8;
        /// `MLX5_OPCODE_RDMA_WRITE_IMM` (device.h:432).
        pub const RDMA_WRITE_IMM: u8 = 0x9;
        /// `MLX5_OPCODE_SEND` (device.h:433).
        pub const SEND: u8 = 0xa;
        /// `MLX5_OPCODE_SEND_IMM` (device.h:434).
        pub const SEND_IMM: u8 = 0xb;
        /// `MLX5_OPCODE_LSO` (device.h:435).
        pub const LSO: u8 = 0xe;
        /// `MLX5_OPCODE_RDMA_READ` (device.h:436).
        pub const RDMA_READ: u8 = 0x10;
        /// `MLX5_OPCODE_ATOMIC_CS` (device.h:437).
        pub const ATOMIC_CS: u8 = 0x11;
        /// `MLX5_OPCODE_ATOMIC_FA` (device.h:438).
        pub const ATOMIC_FA: u8 = 0x12;
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS` (device.h:439).
        pub const ATOMIC_MASKED_CS: u8 = 0x14;
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA` (device.h:440).
        pub const ATOMIC_MASKED_FA: u8 = 0x15;
        /// `MLX5_OPCODE_BIND_MW` (device.h:441).
        pub const BIND_MW: u8 = 0x18;
        /// `MLX5_OPCODE_CONFIG_CMD` (device.h:442).
        pub const CONFIG_CMD: u8 = 0x1f;
        /// `MLX5_OPCODE_ENHANCED_MPSW` (device.h:443).
        pub const ENHANCED_MPSW: u8 = 0x29;
        /// `MLX5_OPCODE_SET_PSV` (device.h:453).
        pub const SET_PSV: u8 = 0x20;
        /// `MLX5_OPCODE_GET_PSV` (device.h:454).
        pub const GET_PSV: u8 = 0x21;
        /// `MLX5_OPCODE_CHECK_PSV` (device.h:455).
        pub const CHECK_PSV: u8 = 0x22;
        /// `MLX5_OPCODE_DUMP` (device.h:456).
        pub const DUMP: u8 = 0x23;
        /// `MLX5_OPCODE_RGET_PSV` (device.h:457).
        pub const RGET_PSV: u8 = 0x26;
        /// `MLX5_OPCODE_RCHECK_PSV` (device.h:458).
        pub const RCHECK_PSV: u8 = 0x27;
        /// `MLX5_OPCODE_UMR` (device.h:460).
        pub const UMR: u8 = 0x25;
        /// `MLX5_OPCODE_FLOW_TBL_ACCESS` (device.h:462).
        pub const FLOW_TBL_ACCESS: u8 = 0x2c;
        /// `MLX5_OPCODE_ACCESS_ASO` (device.h:464).
        pub const ACCESS_ASO: u8 = 0x2d;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_OPCODE_NOP", NOP),
            ("MLX5_OPCODE_SEND_INVAL", SEND_INVAL),
            ("MLX5_OPCODE_RDMA_WRITE", RDMA_WRITE),
            ("MLX5_OPCODE_RDMA_WRITE_IMM", RDMA_WRITE_IMM),
            ("MLX5_OPCODE_SEND", SEND),
            ("MLX5_OPCODE_SEND_IMM", SEND_IMM),
            ("MLX5_OPCODE_LSO", LSO),
            ("MLX5_OPCODE_RDMA_READ", RDMA_READ),
            ("MLX5_OPCODE_ATOMIC_CS", ATOMIC_CS),
            ("MLX5_OPCODE_ATOMIC_FA", ATOMIC_FA),
            ("MLX5_OPCODE_ATOMIC_MASKED_CS", ATOMIC_MASKED_CS),
            ("MLX5_OPCODE_ATOMIC_MASKED_FA", ATOMIC_MASKED_FA),
            ("MLX5_OPCODE_BIND_MW", BIND_MW),
            ("MLX5_OPCODE_CONFIG_CMD", CONFIG_CMD),
            ("MLX5_OPCODE_ENHANCED_MPSW", ENHANCED_MPSW),
            ("MLX5_OPCODE_SET_PSV", SET_PSV),
            ("MLX5_OPCODE_GET_PSV", GET_PSV),
            ("MLX5_OPCODE_CHECK_PSV", CHECK_PSV),
            ("MLX5_OPCODE_DUMP", DUMP),
            ("MLX5_OPCODE_RGET_PSV", RGET_PSV),
            ("MLX5_OPCODE_RCHECK_PSV", RCHECK_PSV),
            ("MLX5_OPCODE_UMR", UMR),
            ("MLX5_OPCODE_FLOW_TBL_ACCESS", FLOW_TBL_ACCESS),
            ("MLX5_OPCODE_ACCESS_ASO", ACCESS_ASO),
        ];
    }

    /// Receive opcodes (`MLX5_RECV_OPCODE_*`, Linux include/linux/mlx5/device.h @2c0186b9c664).
    pub mod recv_opcode {
        /// `MLX5_RECV_OPCODE_RDMA_WRITE_IMM` (device.h:445).
        pub const RDMA_WRITE_IMM: u8 = 0x0;
        /// `MLX5_RECV_OPCODE_SEND` (device.h:446).
        pub const SEND: u8 = 0x1;
        /// `MLX5_RECV_OPCODE_SEND_IMM` (device.h:447).
        pub const SEND_IMM: u8 = 0x2;
        /// `MLX5_RECV_OPCODE_SEND_INVAL` (device.h:448).
        pub const SEND_INVAL: u8 = 0x3;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_RECV_OPCODE_RDMA_WRITE_IMM", RDMA_WRITE_IMM),
            ("MLX5_RECV_OPCODE_SEND", SEND),
            ("MLX5_RECV_OPCODE_SEND_IMM", SEND_IMM),
            ("MLX5_RECV_OPCODE_SEND_INVAL", SEND_INVAL),
        ];
    }

    /// `fm_ce_se` byte (ctrl segment byte 11): bit 1 SE, bits 3:2 CE, bits 7:5 fence mode.
    /// rdma-core's `FENCE` is 4 << 5, which is Linux's `SMALL_AND_FENCE`; Linux uses
    /// `FENCE_MODE_FENCE` (2 << 5) for a fenced WR.
    pub mod ctrl {
        /// `MLX5_WQE_CTRL_CQ_UPDATE` (mlx5dv.h:1270).
        pub const CQ_UPDATE: u8 = 0x8;
        /// `MLX5_WQE_CTRL_SOLICITED` (mlx5dv.h:1271).
        pub const SOLICITED: u8 = 0x2;
        /// `MLX5_WQE_CTRL_FENCE` (mlx5dv.h:1272).
        pub const FENCE: u8 = 0x80;
        /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (mlx5dv.h:1273).
        pub const INITIATOR_SMALL_FENCE: u8 = 0x20;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_WQE_CTRL_CQ_UPDATE", CQ_UPDATE),
            ("MLX5_WQE_CTRL_SOLICITED", SOLICITED),
            ("MLX5_WQE_CTRL_FENCE", FENCE),
            ("MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE", INITIATOR_SMALL_FENCE),
        ];
        /// `MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE` (Linux include/linux/mlx5/qp.h:150).
        pub const CQ_UPDATE_AND_EQE: u8 = 0xc;
    }

    /// Fence modes for `fm_ce_se` bits 7:5 (`MLX5_FENCE_MODE_*`, Linux include/linux/mlx5/qp.h
    /// @2c0186b9c664).
    pub mod fence {
        /// `MLX5_FENCE_MODE_NONE` (qp.h:176).
        pub const NONE: u8 = 0x0;
        /// `MLX5_FENCE_MODE_INITIATOR_SMALL` (qp.h:177).
        pub const INITIATOR_SMALL: u8 = 0x20;
        /// `MLX5_FENCE_MODE_FENCE` (qp.h:178).
        pub const FENCE: u8 = 0x40;
        /// `MLX5_FENCE_MODE_STRONG_ORDERING` (qp.h:179).
        pub const STRONG_ORDERING: u8 = 0x60;
        /// `MLX5_FENCE_MODE_SMALL_AND_FENCE` (qp.h:180).
        pub const SMALL_AND_FENCE: u8 = 0x80;
        /// `(C name, value)` for every constant above.
        pub const ALL: &[(&str, u8)] = &[
            ("MLX5_FENCE_MODE_NONE", NONE),
            ("MLX5_FENCE_MODE_INITIATOR_SMALL", INITIATOR_SMALL),
            ("MLX5_FENCE_MODE_FENCE", FENCE),
            ("MLX5_FENCE_MODE_STRONG_ORDERING", STRONG_ORDERING),
            ("MLX5_FENCE_MODE_SMALL_AND_FENCE", SMALL_AND_FENCE),
        ];
    }

    /// `struct mlx5_wqe_ctrl_seg` (16 bytes; rdma-core mlx5dv.h:1303, Linux qp.h:204).
    pub mod ctrl_seg {
        /// be32 `opmod_idx_opcode` ([`super::opmod_idx_opcode`]).
        pub const OPMOD_IDX_OPCODE: usize = 0;
        /// be32 `qpn_ds` ([`super::qpn_ds`]).
        pub const QPN_DS: usize = 4;
        /// u8 `signature`.
        pub const SIGNATURE: usize = 8;
        /// be16 `dci_stream_channel_id` (rdma-core; reserved in Linux).
        pub const DCI_STREAM_CHANNEL_ID: usize = 9;
        /// u8 `fm_ce_se` ([`super::ctrl`], [`super::fence`]).
        pub const FM_CE_SE: usize = 11;
        /// be32 `imm` (Linux union `general_id` / `imm` / `umr_mkey` / `tis_tir_num`);
        /// SEND_INVAL puts the rkey to invalidate here.
        pub const IMM: usize = 12;
        /// Segment size.
        pub const SIZE: usize = 16;
    }

    /// `struct mlx5_wqe_raddr_seg` (16 bytes; rdma-core mlx5dv.h:1341, Linux qp.h:367).
    pub mod raddr_seg {
        /// be64 `raddr`.
        pub const RADDR: usize = 0;
        /// be32 `rkey`.
        pub const RKEY: usize = 8;
        /// Segment size (bytes 12..16 reserved, 0).
        pub const SIZE: usize = 16;
    }

    /// `struct mlx5_wqe_data_seg` (16 bytes; rdma-core mlx5dv.h:1297, Linux qp.h:378).
    pub mod data_seg {
        /// be32 `byte_count`.
        pub const BYTE_COUNT: usize = 0;
        /// be32 `lkey`.
        pub const LKEY: usize = 4;
        /// be64 `addr`.
        pub const ADDR: usize = 8;
        /// Segment size.
        pub const SIZE: usize = 16;
    }

    /// `struct mlx5_wqe_atomic_seg` (16 bytes; rdma-core mlx5dv.h:1347, Linux qp.h:373).
    pub mod atomic_seg {
        /// be64 `swap_add`.
        pub const SWAP_ADD: usize = 0;
        /// be64 `compare`.
        pub const COMPARE: usize = 8;
        /// Segment size.
        pub const SIZE: usize = 16;
    }

    /// `struct mlx5_wqe_masked_atomic_seg` (32 bytes; rdma-core providers/mlx5/wqe.h:64).
    pub mod masked_atomic_seg {
        /// be64 `swap_add`.
        pub const SWAP_ADD: usize = 0;
        /// be64 `compare`.
        pub const COMPARE: usize = 8;
        /// be64 `swap_add_mask`.
        pub const SWAP_ADD_MASK: usize = 16;
        /// be64 `compare_mask`.
        pub const COMPARE_MASK: usize = 24;
        /// Segment size.
        pub const SIZE: usize = 32;
    }

    /// `struct mlx5_wqe_inl_data_seg` header (4 bytes, rdma-core mlx5dv.h:1352): be32
    /// `byte_count = len | INLINE_SEG`, then the data; the segment occupies
    /// `align(len + 4, 16) / 16` octowords (rdma-core qp.c:364).
    pub mod inl_data_seg {
        /// be32 `byte_count`.
        pub const BYTE_COUNT: usize = 0;
        /// Header size.
        pub const SIZE: usize = 4;
    }

    /// `struct mlx5_wqe_av` / Linux `struct mlx5_av` (48 bytes; rdma-core mlx5dv.h:1317, Linux
    /// qp.h:329), the whole of `struct mlx5_wqe_datagram_seg` (UD).
    pub mod av {
        /// be32 `key.qkey.qkey` (or be64 `dc_key`).
        pub const QKEY: usize = 0;
        /// be32 `dqp_dct`: remote QPN | [`super::EXTENDED_UD_AV`].
        pub const DQP_DCT: usize = 8;
        /// u8 `stat_rate_sl`.
        pub const STAT_RATE_SL: usize = 12;
        /// u8 `fl_mlid`.
        pub const FL_MLID: usize = 13;
        /// be16 `rlid` (Linux union with `udp_sport`).
        pub const RLID: usize = 14;
        /// u8 `rmac[6]`.
        pub const RMAC: usize = 20;
        /// u8 `tclass`.
        pub const TCLASS: usize = 26;
        /// u8 `hop_limit`.
        pub const HOP_LIMIT: usize = 27;
        /// be32 `grh_gid_fl`.
        pub const GRH_GID_FL: usize = 28;
        /// u8 `rgid[16]`.
        pub const RGID: usize = 32;
        /// Segment size.
        pub const SIZE: usize = 48;
    }

    /// `struct mlx5_wqe_umr_ctrl_seg` (48 bytes; rdma-core mlx5dv.h:1399, Linux qp.h:384).
    pub mod umr_ctrl_seg {
        /// u8 `flags`.
        pub const FLAGS: usize = 0;
        /// be16 `klm_octowords` (Linux `xlt_octowords`).
        pub const KLM_OCTOWORDS: usize = 4;
        /// be16 `translation_offset` / `bsf_octowords` (Linux `xlt_offset`).
        pub const TRANSLATION_OFFSET: usize = 6;
        /// be64 `mkey_mask`.
        pub const MKEY_MASK: usize = 8;
        /// be32 `xlt_offset_47_16` (Linux only; reserved in rdma-core).
        pub const XLT_OFFSET_47_16: usize = 16;
        /// Segment size.
        pub const SIZE: usize = 48;

        /// `flags`: `MLX5_UMR_TRANSLATION_OFFSET_EN` (Linux include/linux/mlx5/device.h):
        /// `xlt_offset` / `xlt_offset_47_16` name where the entries go.
        pub const FLAG_TRANSLATION_OFFSET_EN: u8 = 1 << 4;
        /// `flags`: `MLX5_UMR_CHECK_NOT_FREE` (device.h): "fail if not free" (Linux ib/umr.c
        /// `mlx5r_umr_set_update_xlt_ctrl_seg`).
        pub const FLAG_CHECK_NOT_FREE: u8 = 1 << 5;
        /// `flags`: `MLX5_UMR_CHECK_FREE` (device.h): "fail if free".
        pub const FLAG_CHECK_FREE: u8 = 2 << 5;
        /// `flags`: `MLX5_UMR_INLINE` (device.h): the translation (if any) follows the mkey
        /// segment in the WQE instead of a data segment pointing to it.
        pub const FLAG_INLINE: u8 = 1 << 7;
        /// The two bits of the free check (`CHECK_NOT_FREE` / `CHECK_FREE`).
        pub const FLAG_CHECK_MASK: u8 = 3 << 5;
        /// `flags`: `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN` (rdma-core mlx5dv.h): fail unless the
        /// key's `qpn` is the posting QP's (rdma-core qp.c `set_umr_control_seg` sets it when
        /// invalidating a type 2 memory window, IBV_WR_LOCAL_INV).
        pub const FLAG_CHECK_QPN: u8 = 1 << 3;

        /// `mkey_mask` bits: which fields of the mkey segment (an `mlx5_ifc_mkc_bits`, Linux
        /// `struct mlx5_mkey_seg`, 64 bytes) the UMR writes (`MLX5_MKEY_MASK_*`, Linux
        /// include/linux/mlx5/device.h).
        pub mod mask {
            /// `MLX5_MKEY_MASK_LEN` (with `length64`).
            pub const LEN: u64 = 1 << 0;
            /// `MLX5_MKEY_MASK_PAGE_SIZE` (`log_page_size`).
            pub const PAGE_SIZE: u64 = 1 << 1;
            /// `MLX5_MKEY_MASK_START_ADDR`.
            pub const START_ADDR: u64 = 1 << 6;
            /// `MLX5_MKEY_MASK_PD`.
            pub const PD: u64 = 1 << 7;
            /// `MLX5_MKEY_MASK_EN_RINVAL`.
            pub const EN_RINVAL: u64 = 1 << 8;
            /// `MLX5_MKEY_MASK_KEY` (`mkey_7_0`, the variant).
            pub const KEY: u64 = 1 << 13;
            /// `MLX5_MKEY_MASK_QPN`.
            pub const QPN: u64 = 1 << 14;
            /// `MLX5_MKEY_MASK_LR`.
            pub const LR: u64 = 1 << 17;
            /// `MLX5_MKEY_MASK_LW`.
            pub const LW: u64 = 1 << 18;
            /// `MLX5_MKEY_MASK_RR`.
            pub const RR: u64 = 1 << 19;
            /// `MLX5_MKEY_MASK_RW`.
            pub const RW: u64 = 1 << 20;
            /// `MLX5_MKEY_MASK_A`.
            pub const A: u64 = 1 << 21;
            /// `MLX5_MKEY_MASK_FREE`.
            pub const FREE: u64 = 1 << 29;
        }
    }

    /// `struct mlx5_wqe_xrc_seg` (16 bytes; rdma-core wqe.h:59).
    pub mod xrc_seg {
        /// be32 `xrc_srqn`.
        pub const XRC_SRQN: usize = 0;
        /// Segment size.
        pub const SIZE: usize = 16;
    }

    /// `struct mlx5_wqe_srq_next_seg` (16 bytes; rdma-core mlx5dv.h:1290).
    pub mod srq_next_seg {
        /// be16 `next_wqe_index`.
        pub const NEXT_WQE_INDEX: usize = 2;
        /// u8 `signature`.
        pub const SIGNATURE: usize = 4;
        /// Segment size.
        pub const SIZE: usize = 16;
    }
}

/// QP doorbell record: two big-endian dwords at `qpc.dbr_addr`.
pub mod qp_db {
    /// `MLX5_RCV_DBR`: `dbrec[0] = be32(rq.head & 0xffff)` (rdma-core mlx5dv.h:70, qp.c:3903).
    pub const RCV_DBR: usize = 0;
    /// `MLX5_SND_DBR`: `dbrec[1] = be32(sq.cur_post & 0xffff)`, in WQEBBs (rdma-core qp.c:769).
    pub const SND_DBR: usize = 1;
}

/// Offsets inside a UAR page. UAR index `n` is the 4 KiB page at BAR0 + `n * 4096`.
pub mod uar {
    /// UAR page size (rdma-core mlx5_vfio.c:1327).
    pub const PAGE_SIZE: usize = 4096;
    /// `MLX5_CQ_DOORBELL`: 64-bit CQ arm doorbell (Linux include/linux/mlx5/doorbell.h:37).
    pub const CQ_DOORBELL: usize = 0x20;
    /// EQ doorbell, arm (`MLX5_EQ_DOORBEL_OFFSET`, Linux core/eq.c:37).
    pub const EQ_DOORBELL: usize = 0x40;
    /// EQ doorbell, update CI without arming.
    pub const EQ_DOORBELL_NO_ARM: usize = 0x48;
    /// `MLX5_BF_OFFSET`: first BlueFlame register (Linux doorbell.h:36); register `k` is at
    /// `0x800 + k * (1 << cmd_hca_cap.log_bf_reg_size)`. The send doorbell is the first 8 bytes
    /// of the ctrl segment written as one 64-bit store; software alternates between the two
    /// halves (`offset ^= bf_reg_size / 2`) (Linux ib/wr.c `mlx5r_ring_db`, rdma-core qp.c
    /// `post_send_db`).
    pub const BF_OFFSET: usize = 0x800;
    /// `MLX5_BFREGS_PER_UAR`.
    pub const BFREGS_PER_UAR: usize = 4;
}

/// `cq_error.syndrome` of a CQ_ERROR event (`MLX5_CQ_ERROR_SYNDROME_*`, Linux
/// include/linux/mlx5/mlx5_ifc.h:3348 @2c0186b9c664).
pub mod cq_error_syndrome {
    /// `MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN` (mlx5_ifc.h:3348).
    pub const CQ_OVERRUN: u8 = 0x1;
    /// `MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR` (mlx5_ifc.h:3349).
    pub const CQ_ACCESS_VIOLATION_ERROR: u8 = 0x2;
    /// `(C name, value)` for every constant above.
    pub const ALL: &[(&str, u8)] = &[
        ("MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN", CQ_OVERRUN),
        (
            "MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR",
            CQ_ACCESS_VIOLATION_ERROR,
        ),
    ];
}

/// `qp_events.type`: which kind of queue an affiliated QP/SRQ event names
/// (`MLX5_EVENT_QUEUE_TYPE_*`, Linux include/linux/mlx5/device.h:302 @2c0186b9c664).
pub mod event_queue_type {
    /// `MLX5_EVENT_QUEUE_TYPE_QP` (device.h:302).
    pub const QP: u8 = 0;
    /// `MLX5_EVENT_QUEUE_TYPE_RQ` (device.h:303).
    pub const RQ: u8 = 1;
    /// `MLX5_EVENT_QUEUE_TYPE_SQ` (device.h:304).
    pub const SQ: u8 = 2;
    /// `MLX5_EVENT_QUEUE_TYPE_DCT` (device.h:305).
    pub const DCT: u8 = 6;
    /// `(C name, value)` for every constant above.
    pub const ALL: &[(&str, u8)] = &[
        ("MLX5_EVENT_QUEUE_TYPE_QP", QP),
        ("MLX5_EVENT_QUEUE_TYPE_RQ", RQ),
        ("MLX5_EVENT_QUEUE_TYPE_SQ", SQ),
        ("MLX5_EVENT_QUEUE_TYPE_DCT", DCT),
    ];
}
