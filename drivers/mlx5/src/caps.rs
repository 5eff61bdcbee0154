//! HCA capabilities: QUERY_HCA_CAP (max and current) and SET_HCA_CAP.
//!
//! op_mod of QUERY_HCA_CAP = `cap_type << 1 | cap_mode` (Linux core/main.c:535
//! `mlx5_core_get_caps_mode`, rdma-core mlx5_vfio.c `mlx5_vfio_get_caps_mode`), SET_HCA_CAP's =
//! `cap_type << 1` (Linux core/main.c `set_caps`; rdma-core's `MLX5_SET_HCA_CAP_OP_MOD_*` are
//! already shifted). The capability starts at byte 16 of the output (rdma-core mlx5_ifc.h
//! `mlx5_ifc_query_hca_cap_out_bits`).

use alloc::vec::Vec;

use mlx5_prm::{
    atomic_caps, cmd_hca_cap, hca_cap, linux_layout, opcode, query_hca_cap_in, query_hca_cap_out,
    roce_cap, set_hca_cap_in, set_hca_cap_out,
};

use crate::cmd::{get, CmdBuf};
use crate::error::Result;
use crate::hal::Hal;
use crate::hca::Device;

/// The capability values the driver uses, from the CURRENT general capabilities after
/// INIT_HCA (and the ROCE / ATOMIC ones when advertised).
#[derive(Clone, Debug, Default)]
pub struct Caps {
    /// `log_max_cq_sz`: log2 of the largest CQ.
    pub log_max_cq_sz: u8,
    /// `log_max_cq`.
    pub log_max_cq: u8,
    /// `log_max_qp_sz`: log2 of the largest work queue (in WQEBBs for the SQ).
    pub log_max_qp_sz: u8,
    /// `log_max_qp`.
    pub log_max_qp: u8,
    /// `log_max_mkey`.
    pub log_max_mkey: u8,
    /// `log_max_mrw_sz`: log2 of the largest memory region.
    pub log_max_mrw_sz: u8,
    /// `log_max_msg`: log2 of the largest message.
    pub log_max_msg: u8,
    /// `log_max_pd`.
    pub log_max_pd: u8,
    /// `log_max_eq_sz`.
    pub log_max_eq_sz: u8,
    /// `max_wqe_sz_sq`: largest send WQE in bytes.
    pub max_wqe_sz_sq: u16,
    /// `max_wqe_sz_rq`: largest receive WQE in bytes.
    pub max_wqe_sz_rq: u16,
    /// `log_max_ra_req_qp`: log2 of outstanding RDMA READ / atomic requests as initiator.
    pub log_max_ra_req_qp: u8,
    /// `log_max_ra_res_qp`: log2 of outstanding RDMA READ / atomic requests as responder.
    pub log_max_ra_res_qp: u8,
    /// `bf`: BlueFlame supported.
    pub bf: bool,
    /// `log_bf_reg_size`: log2 of a BlueFlame register (both halves).
    pub log_bf_reg_size: u8,
    /// `roce`.
    pub roce: bool,
    /// `atomic`.
    pub atomic: bool,
    /// `pg`: MTT entries carry read/write bits (create_mkey_in.pg_access).
    pub pg: bool,
    /// `port_type` (`MLX5_CAP_PORT_TYPE_*`).
    pub port_type: u8,
    /// `num_ports`.
    pub num_ports: u8,
    /// `gid_table_size`.
    pub gid_table_size: u16,
    /// `num_vhca_ports`: non-zero when commands name a port in `vhca_port_num` (Linux
    /// core/lib/gid.c `mlx5_core_roce_gid_set`).
    pub num_vhca_ports: u8,
    /// `relaxed_ordering_write`: mkeys may set `mkc.relaxed_ordering_write`.
    pub relaxed_ordering_write: bool,
    /// `relaxed_ordering_read` (Linux position 0x32a): mkeys may set
    /// `mkc.relaxed_ordering_read` regardless of the PCIe setting.
    pub relaxed_ordering_read: bool,
    /// `relaxed_ordering_read_pci_enabled` (0xe9): relaxed reads only while the PCIe function
    /// has relaxed ordering enabled, which the HAL does not report (so the driver never relies
    /// on it).
    pub relaxed_ordering_read_pci_enabled: bool,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `log_max_klm_list_size`.
    pub log_max_klm_list_size: u8,
    /// `log_pg_sz`: log2 of the smallest page the device translates.
    pub log_pg_sz: u8,
    /// `device_frequency_khz`.
    pub device_frequency_khz: u32,
    /// `roce_cap.roce_address_table_size`: RoCE GID table entries (read when `roce`).
    pub roce_address_table_size: u16,
    /// `roce_cap.r_roce_min_src_udp_port`: the smallest RoCE v2 UDP source port (read when
    /// `roce`; Linux `mlx5_get_roce_udp_sport_min`, the port of an address handle without a
    /// flow label).
    pub roce_min_src_udp_port: u16,
    /// `atomic_caps.atomic_operations` (bit mask).
    pub atomic_operations: u16,
    /// `atomic_caps.atomic_req_8B_endianness_mode` in force (1: host endianness).
    pub atomic_req_8b_endianness_mode: u8,
    /// `atomic_caps.atomic_size_qp` (bit mask of sizes).
    pub atomic_size_qp: u16,
    /// The raw 256-byte current general capability, for inspection.
    pub general_cur: Vec<u8>,
}

impl Caps {
    /// Parses the general capability (bytes of `cmd_hca_cap`).
    pub fn parse_general(c: &[u8]) -> Caps {
        let g = |f| get(c, f);
        Caps {
            log_max_cq_sz: g(cmd_hca_cap::LOG_MAX_CQ_SZ) as u8,
            log_max_cq: g(cmd_hca_cap::LOG_MAX_CQ) as u8,
            log_max_qp_sz: g(cmd_hca_cap::LOG_MAX_QP_SZ) as u8,
            log_max_qp: g(cmd_hca_cap::LOG_MAX_QP) as u8,
            log_max_mkey: g(cmd_hca_cap::LOG_MAX_MKEY) as u8,
            log_max_mrw_sz: g(cmd_hca_cap::LOG_MAX_MRW_SZ) as u8,
            log_max_msg: g(cmd_hca_cap::LOG_MAX_MSG) as u8,
            log_max_pd: g(cmd_hca_cap::LOG_MAX_PD) as u8,
            log_max_eq_sz: g(cmd_hca_cap::LOG_MAX_EQ_SZ) as u8,
            max_wqe_sz_sq: g(cmd_hca_cap::MAX_WQE_SZ_SQ) as u16,
            max_wqe_sz_rq: g(cmd_hca_cap::MAX_WQE_SZ_RQ) as u16,
            log_max_ra_req_qp: g(cmd_hca_cap::LOG_MAX_RA_REQ_QP) as u8,
            log_max_ra_res_qp: g(cmd_hca_cap::LOG_MAX_RA_RES_QP) as u8,
            bf: g(cmd_hca_cap::BF) != 0,
            log_bf_reg_size: g(cmd_hca_cap::LOG_BF_REG_SIZE) as u8,
            roce: g(cmd_hca_cap::ROCE) != 0,
            atomic: g(cmd_hca_cap::ATOMIC) != 0,
            pg: g(cmd_hca_cap::PG) != 0,
            port_type: g(cmd_hca_cap::PORT_TYPE) as u8,
            num_ports: g(cmd_hca_cap::NUM_PORTS) as u8,
            gid_table_size: g(cmd_hca_cap::GID_TABLE_SIZE) as u16,
            num_vhca_ports: g(cmd_hca_cap::NUM_VHCA_PORTS) as u8,
            relaxed_ordering_write: g(cmd_hca_cap::RELAXED_ORDERING_WRITE) != 0,
            relaxed_ordering_read: g(linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ) != 0,
            relaxed_ordering_read_pci_enabled: g(
                linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED,
            ) != 0,
            local_ca_ack_delay: g(cmd_hca_cap::LOCAL_CA_ACK_DELAY) as u8,
            log_max_klm_list_size: g(cmd_hca_cap::LOG_MAX_KLM_LIST_SIZE) as u8,
            log_pg_sz: g(cmd_hca_cap::LOG_PG_SZ) as u8,
            device_frequency_khz: g(cmd_hca_cap::DEVICE_FREQUENCY_KHZ),
            roce_address_table_size: 0,
            roce_min_src_udp_port: 0,
            atomic_operations: 0,
            atomic_size_qp: 0,
            atomic_req_8b_endianness_mode: 0,
            general_cur: c.to_vec(),
        }
    }

    /// Entries of the port's GID table: for an Ethernet (RoCE) port the RoCE address table
    /// (Linux ib/main.c `mlx5_query_port_roce`: `roce_address_table_size`), for InfiniBand
    /// `8 << gid_table_size` (Linux include/linux/mlx5/driver.h `mlx5_get_gid_table_len`,
    /// 0 for an encoding above 4).
    pub fn gid_table_len(&self) -> u32 {
        if self.port_type == hca_cap::port_type::ETH {
            if self.roce {
                u32::from(self.roce_address_table_size)
            } else {
                0
            }
        } else if self.gid_table_size > 4 {
            0
        } else {
            8u32 << self.gid_table_size
        }
    }

    /// The largest memory region in bytes (`1 << log_max_mrw_sz`; `u64::MAX` for 64 or
    /// more, where every length fits).
    pub fn max_mr_size(&self) -> u64 {
        if self.log_max_mrw_sz >= 64 {
            u64::MAX
        } else {
            1u64 << self.log_max_mrw_sz
        }
    }
}

impl<H: Hal> Device<H> {
    /// QUERY_HCA_CAP for one capability type and mode; returns the capability bytes
    /// (the 4096-byte `hca_cap_union`).
    pub(crate) fn query_cap(&mut self, hal: &H, cap_type: u16, mode: u16) -> Result<Vec<u8>> {
        let mut c = CmdBuf::new(
            opcode::QUERY_HCA_CAP,
            hca_cap::query_op_mod(cap_type, mode),
            query_hca_cap_in::BYTES,
        );
        c.set(
            query_hca_cap_in::OP_MOD,
            hca_cap::query_op_mod(cap_type, mode).into(),
        );
        let mut out = alloc::vec![0u8; query_hca_cap_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        let off = query_hca_cap_out::CAPABILITY.byte_offset();
        Ok(out[off..].to_vec())
    }

    /// SET_HCA_CAP with `cap` (capability bytes, at most the union's size) for `cap_type`.
    pub(crate) fn set_cap(&mut self, hal: &H, cap_type: u16, cap: &[u8]) -> Result<()> {
        let mut c = CmdBuf::new(
            opcode::SET_HCA_CAP,
            hca_cap::set_op_mod(cap_type),
            set_hca_cap_in::BYTES,
        );
        let off = set_hca_cap_in::CAPABILITY.byte_offset();
        let n = cap.len().min(c.buf.len() - off);
        c.buf[off..off + n].copy_from_slice(&cap[..n]);
        let mut out = [0u8; set_hca_cap_out::BYTES];
        self.exec(hal, &c, &mut out)
    }

    /// The capability negotiation of rdma-core mlx5_vfio.c `set_hca_cap` (`handle_hca_cap`,
    /// `handle_hca_cap_roce`) and Linux core/main.c `set_hca_cap` (`handle_hca_cap_atomic`).
    pub(crate) fn negotiate_caps(&mut self, hal: &H) -> Result<()> {
        use hca_cap::cap_type;
        let cur = self.query_cap(hal, cap_type::GENERAL, hca_cap::OPMOD_GET_CUR)?;
        let _max = self.query_cap(hal, cap_type::GENERAL, hca_cap::OPMOD_GET_MAX)?;
        let mut set = cur[..cmd_hca_cap::BYTES].to_vec();
        // Disable the command checksum (Linux main.c:808, rdma-core handle_hca_cap).
        let _ = cmd_hca_cap::CMDIF_CHECKSUM.set(&mut set, 0);
        // UAR pages are 4 KiB: log_uar_page_sz = PAGE_SHIFT - 12 = 0 (Linux main.c:819).
        let _ = cmd_hca_cap::LOG_UAR_PAGE_SZ.set(&mut set, 0);
        self.set_cap(hal, cap_type::GENERAL, &set)?;

        if get(&cur, cmd_hca_cap::ROCE) != 0 {
            // rdma-core handle_hca_cap_roce: ask for software-chosen UDP source ports when
            // the device allows it and it is not on yet.
            let rcur = self.query_cap(hal, cap_type::ROCE, hca_cap::OPMOD_GET_CUR)?;
            let rmax = self.query_cap(hal, cap_type::ROCE, hca_cap::OPMOD_GET_MAX)?;
            if get(&rcur, roce_cap::SW_R_ROCE_SRC_UDP_PORT) == 0
                && get(&rmax, roce_cap::SW_R_ROCE_SRC_UDP_PORT) != 0
            {
                let mut r = rcur[..roce_cap::BYTES].to_vec();
                let _ = roce_cap::SW_R_ROCE_SRC_UDP_PORT.set(&mut r, 1);
                self.set_cap(hal, cap_type::ROCE, &r)?;
            }
        }
        if get(&cur, cmd_hca_cap::ATOMIC) != 0 {
            // Linux main.c handle_hca_cap_atomic: when the device supports it, requests use
            // host endianness for 8-byte atomics (MLX5_ATOMIC_REQ_MODE_HOST_ENDIANNESS = 1).
            let acur = self.query_cap(hal, cap_type::ATOMIC, hca_cap::OPMOD_GET_CUR)?;
            let _amax = self.query_cap(hal, cap_type::ATOMIC, hca_cap::OPMOD_GET_MAX)?;
            if get(
                &acur,
                atomic_caps::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1,
            ) != 0
            {
                let mut a = acur[..atomic_caps::BYTES].to_vec();
                let _ = atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE.set(&mut a, 1);
                self.set_cap(hal, cap_type::ATOMIC, &a)?;
            }
        }
        Ok(())
    }

    /// Reads the current capabilities the driver works with (after INIT_HCA, as Linux
    /// `mlx5_query_hca_caps` does).
    pub(crate) fn read_caps(&mut self, hal: &H) -> Result<Caps> {
        use hca_cap::cap_type;
        let cur = self.query_cap(hal, cap_type::GENERAL, hca_cap::OPMOD_GET_CUR)?;
        let mut caps = Caps::parse_general(&cur[..cmd_hca_cap::BYTES]);
        if caps.atomic {
            let a = self.query_cap(hal, cap_type::ATOMIC, hca_cap::OPMOD_GET_CUR)?;
            caps.atomic_operations = get(&a, atomic_caps::ATOMIC_OPERATIONS) as u16;
            caps.atomic_size_qp = get(&a, atomic_caps::ATOMIC_SIZE_QP) as u16;
            caps.atomic_req_8b_endianness_mode =
                get(&a, atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE) as u8;
        }
        if caps.roce {
            let r = self.query_cap(hal, cap_type::ROCE, hca_cap::OPMOD_GET_CUR)?;
            caps.roce_address_table_size =
                get(&r, linux_layout::roce_cap::ROCE_ADDRESS_TABLE_SIZE) as u16;
            caps.roce_min_src_udp_port =
                get(&r, linux_layout::roce_cap::R_ROCE_MIN_SRC_UDP_PORT) as u16;
        }
        Ok(caps)
    }
}
