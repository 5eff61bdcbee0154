//! What the device and its port can do: `ibv_query_device` and `ibv_query_port`.

use super::*;

/// `2^log` as a u32, saturating (a capability field read from the device is never trusted
/// to be in range).
pub(super) fn pow2(log: u8) -> u32 {
    if log >= 32 {
        u32::MAX
    } else {
        1u32 << log
    }
}

/// Atomic support, `ibv_atomic_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicCap {
    /// `IBV_ATOMIC_NONE`.
    None,
    /// `IBV_ATOMIC_HCA`: atomic only between QPs of this HCA's ports.
    Hca,
    /// `IBV_ATOMIC_GLOB`: atomic with respect to every other access.
    Glob,
}

/// [`Context::query_device`]: the fields of `struct ibv_device_attr` this driver has a value
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version (major, minor, subminor), `fw_ver`.
    pub fw_ver: (u16, u16, u16),
    /// Largest memory region in bytes (`1 << log_max_mrw_sz`; the driver refuses more).
    pub max_mr_size: u64,
    /// Page sizes the device translates: every power of two from `1 << log_pg_sz` up
    /// (Linux: `~(min_page_size - 1)`).
    pub page_size_cap: u64,
    /// `1 << log_max_qp`.
    pub max_qp: u32,
    /// `1 << log_max_qp_sz`.
    pub max_qp_wr: u32,
    /// SGEs per send WR: Linux's `(min(max_wqe_sz_sq, 512) - ctrl - raddr) / 16`, at most the
    /// driver's [`crate::qp::MAX_SGE`].
    pub max_send_sge: u32,
    /// SGEs per receive WR: `max_wqe_sz_rq / 16`, at most [`crate::qp::MAX_SGE`].
    pub max_recv_sge: u32,
    /// `min(max_send_sge, max_recv_sge)` (the old `max_sge`).
    pub max_sge: u32,
    /// `1 << log_max_cq`.
    pub max_cq: u32,
    /// `(1 << log_max_cq_sz) - 1`.
    pub max_cqe: u32,
    /// `1 << log_max_mkey`.
    pub max_mr: u32,
    /// `1 << log_max_pd`.
    pub max_pd: u32,
    /// `1 << log_max_ra_req_qp`: outstanding RDMA READ / atomics a QP may receive.
    pub max_qp_rd_atom: u32,
    /// `1 << log_max_ra_res_qp`: outstanding RDMA READ / atomics a QP may initiate.
    pub max_qp_init_rd_atom: u32,
    /// `max_qp_rd_atom * max_qp`.
    pub max_res_rd_atom: u64,
    /// Atomic support (Linux ib/main.c `get_atomic_caps`).
    pub atomic_cap: AtomicCap,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `num_ports`.
    pub phys_port_cnt: u8,
    /// `device_frequency_khz` (Linux reports it as `hca_core_clock`).
    pub hca_core_clock_khz: u32,
}

/// `MLX5_ATOMIC_OPS_CMP_SWAP | MLX5_ATOMIC_OPS_FETCH_ADD` (Linux include/linux/mlx5/driver.h).
pub(super) const ATOMIC_OPS_CMP_SWAP_FETCH_ADD: u16 = 0x3;
/// `MLX5_ATOMIC_SIZE_QP_8BYTES` = 1 << 3 (Linux include/linux/mlx5/mlx5_ifc.h).
pub(super) const ATOMIC_SIZE_QP_8BYTES: u16 = 1 << 3;

pub(super) fn device_attr(c: &Caps, fw: (u16, u16, u16)) -> DeviceAttr {
    use mlx5_prm::wqe::{ctrl_seg, data_seg, raddr_seg};
    // Linux mlx5_ib_query_device: max_rq_sg / max_sq_sg from the WQE sizes.
    let max_rq_sg = u32::from(c.max_wqe_sz_rq) / data_seg::SIZE as u32;
    let max_sq_desc = u32::from(c.max_wqe_sz_sq).min(512);
    let max_sq_sg = max_sq_desc.saturating_sub((ctrl_seg::SIZE + raddr_seg::SIZE) as u32)
        / data_seg::SIZE as u32;
    let max_send_sge = max_sq_sg.min(MAX_SGE as u32);
    let max_recv_sge = max_rq_sg.min(MAX_SGE as u32);
    // Linux get_atomic_caps: 8-byte CAS and FAA, QP atomics of 8 bytes, host-endian
    // responses in force: IB_ATOMIC_HCA; otherwise none.
    let atomic_cap = if c.atomic
        && c.atomic_operations & ATOMIC_OPS_CMP_SWAP_FETCH_ADD == ATOMIC_OPS_CMP_SWAP_FETCH_ADD
        && c.atomic_size_qp & ATOMIC_SIZE_QP_8BYTES != 0
        && c.atomic_req_8b_endianness_mode != 0
    {
        AtomicCap::Hca
    } else {
        AtomicCap::None
    };
    let max_qp = pow2(c.log_max_qp);
    let max_qp_rd_atom = pow2(c.log_max_ra_req_qp);
    let min_page = if c.log_pg_sz >= 64 {
        0
    } else {
        1u64 << c.log_pg_sz
    };
    DeviceAttr {
        fw_ver: fw,
        max_mr_size: c.max_mr_size(),
        page_size_cap: !(min_page.wrapping_sub(1)),
        max_qp,
        max_qp_wr: pow2(c.log_max_qp_sz),
        max_send_sge,
        max_recv_sge,
        max_sge: max_send_sge.min(max_recv_sge),
        max_cq: pow2(c.log_max_cq),
        max_cqe: pow2(c.log_max_cq_sz).saturating_sub(1),
        max_mr: pow2(c.log_max_mkey),
        max_pd: pow2(c.log_max_pd),
        max_qp_rd_atom,
        max_qp_init_rd_atom: pow2(c.log_max_ra_res_qp),
        max_res_rd_atom: u64::from(max_qp_rd_atom) * u64::from(max_qp),
        atomic_cap,
        local_ca_ack_delay: c.local_ca_ack_delay,
        phys_port_cnt: c.num_ports,
        hca_core_clock_khz: c.device_frequency_khz,
    }
}

/// The port's state, `ibv_port_state` (the two a RoCE port reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_ACTIVE`.
    Active,
}

/// The port's link layer, `IBV_LINK_LAYER_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_INFINIBAND`.
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (RoCE).
    Ethernet,
}

/// [`Context::query_port`]: the fields of `struct ibv_port_attr` a RoCE port has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Active when the vport is up.
    pub state: PortState,
    /// Largest MTU: 4096 (Linux `mlx5_query_port_roce`: `IB_MTU_4096`).
    pub max_mtu: Mtu,
    /// The MTU the Ethernet MTU leaves room for (Linux `iboe_get_mtu`), `None` when the
    /// Ethernet MTU is too small for the smallest RoCE MTU.
    pub active_mtu: Option<Mtu>,
    /// The vport's hardware MTU in bytes (Ethernet frame without preamble).
    pub hw_mtu: u16,
    /// GID table entries ([`Caps::gid_table_len`]).
    pub gid_tbl_len: u32,
    /// Largest message, `1 << log_max_msg`.
    pub max_msg_sz: u32,
    /// P_Key table entries: 1 on Ethernet.
    pub pkey_tbl_len: u16,
    /// Ethernet for a RoCE port.
    pub link_layer: LinkLayer,
}

/// Linux `iboe_get_mtu` (include/rdma/ib_addr.h): the Ethernet payload MTU minus the RoCE
/// headers (GRH 40, UDP 8, BTH 12, XRC ext 4, AtomicETH 28, ICRC 4: 96 bytes), rounded down
/// to an IB MTU.
pub(super) fn iboe_mtu(eth_mtu: u32) -> Option<Mtu> {
    let m = eth_mtu.checked_sub(40 + 8 + 12 + 4 + 28 + 4)?;
    Some(match m {
        4096.. => Mtu::Mtu4096,
        2048.. => Mtu::Mtu2048,
        1024.. => Mtu::Mtu1024,
        512.. => Mtu::Mtu512,
        256.. => Mtu::Mtu256,
        _ => return None,
    })
}

pub(super) fn port_attr(c: &Caps, state: u8, hw_mtu: u16) -> PortAttr {
    // The vport's MTU counts the Ethernet header, a VLAN tag and the FCS; the netdev MTU
    // Linux hands to iboe_get_mtu does not (en.h MLX5E_HW2SW_MTU: ETH_HLEN 14 + VLAN_HLEN 4
    // + ETH_FCS_LEN 4).
    let sw_mtu = u32::from(hw_mtu).saturating_sub(14 + 4 + 4);
    PortAttr {
        state: if state == hca::VPORT_STATE_UP {
            PortState::Active
        } else {
            PortState::Down
        },
        max_mtu: Mtu::Mtu4096,
        active_mtu: iboe_mtu(sw_mtu),
        hw_mtu,
        gid_tbl_len: c.gid_table_len(),
        max_msg_sz: pow2(c.log_max_msg),
        pkey_tbl_len: 1,
        link_layer: if c.port_type == mlx5_prm::hca_cap::port_type::ETH {
            LinkLayer::Ethernet
        } else {
            LinkLayer::InfiniBand
        },
    }
}
