//! Address handles: where a datagram goes (RoCE v2 only), as the 48-byte mlx5 address vector
//! a UD send WQE carries in its datagram segment (`struct mlx5_wqe_av`, [`mlx5_prm::wqe::av`]).
//!
//! The vector is built once, when the handle is made, the way Linux
//! drivers/infiniband/hw/mlx5/ah.c `create_ib_ah` builds it for a RoCE v2 GID (rdma-core
//! providers/mlx5/verbs.c `mlx5_create_ah` does the same in user space): the destination GID,
//! `grh_gid_fl` = the GRH bit, the source GID index and the flow label, the hop limit, the
//! traffic class with the ECN-capable bit, the destination MAC, the UDP source port (from the
//! flow label, else the device's smallest RoCE source port) and the service level. A send
//! copies it and adds the remote QPN and Q_Key (Linux ib/wr.c `set_datagram_seg`,
//! [`crate::qp`]'s UD module).

use mlx5_prm::wqe::av;

use crate::caps::Caps;
use crate::error::{InvalidInput, Result};

/// What an address handle points at (`struct ibv_ah_attr` for a RoCE v2 port: always global,
/// port 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination GID (an IPv4-mapped one for RoCE v2 over IPv4).
    pub dgid: [u8; 16],
    /// The destination MAC (the next hop's, from the neighbour table).
    pub dmac: [u8; 6],
    /// The source GID index (below the port's GID table length).
    pub sgid_index: u8,
    /// IP TTL / hop limit (Linux `create_ib_ah`: below 2 it sends 64, `IPV6_DEFAULT_HOPLIMIT`).
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN bits).
    pub traffic_class: u8,
    /// The 20-bit flow label; non-zero, it also picks the UDP source port.
    pub flow_label: u32,
}

/// An address handle: the mlx5 address vector of an [`AhAttr`], built once. Copy it freely;
/// it names no device object (mlx5 address handles live in the send WQEs only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressHandle {
    av: [u8; av::SIZE],
}

/// `grh_gid_fl` bit 30: a GRH follows (Linux ah.c `create_ib_ah` sets it for every
/// `IB_AH_GRH` handle, and RoCE handles always have one).
const GRH_PRESENT: u32 = 1 << 30;
/// The ECN-capable transport bit Linux ORs into a RoCE v2 handle's traffic class (ah.c
/// `create_ib_ah`: `MLX5_ECN_ENABLED`, `BIT(1)`).
const ECN_ENABLED: u8 = 1 << 1;
/// Linux `IPV6_DEFAULT_HOPLIMIT`, what ah.c `create_ib_ah` sends for a RoCE hop limit below 2.
const DEFAULT_HOP_LIMIT: u8 = 64;
/// The flow label's 20 bits (`IB_GRH_FLOWLABEL_MASK`).
const FLOW_LABEL_MASK: u32 = 0xf_ffff;

impl AddressHandle {
    /// Builds the address vector of `attr` (Linux ah.c `create_ib_ah` for a RoCE v2 GID),
    /// after checking the source GID index against the port's table ([`Caps::gid_table_len`]:
    /// [`InvalidInput::GidIndex`], Linux core/verbs.c `rdma_create_ah` fails on a GID index
    /// without an entry) and refusing an all-zero GID or MAC ([`InvalidInput::RemoteAddress`]). `min_sport` is the device's smallest RoCE UDP source port
    /// (`roce_cap.r_roce_min_src_udp_port`, Linux `mlx5_get_roce_udp_sport_min`).
    pub(crate) fn new(caps: &Caps, attr: &AhAttr) -> Result<AddressHandle> {
        if u32::from(attr.sgid_index) >= caps.gid_table_len() {
            return Err(InvalidInput::GidIndex.into());
        }
        // As for a connection's path (`qp::rc::check_remote`): no address, no datagram.
        if attr.dgid == [0; 16] || attr.dmac == [0; 6] {
            return Err(InvalidInput::RemoteAddress.into());
        }
        let fl = attr.flow_label & FLOW_LABEL_MASK;
        // Linux ah.c `mlx5_ah_get_udp_sport`.
        let sport = if fl != 0 {
            flow_label_to_udp_sport(fl)
        } else {
            caps.roce_min_src_udp_port
        };
        let hop = if attr.hop_limit < 2 {
            DEFAULT_HOP_LIMIT
        } else {
            attr.hop_limit
        };
        let mut v = [0u8; av::SIZE];
        v[av::RLID..av::RLID + 2].copy_from_slice(&sport.to_be_bytes());
        v[av::RMAC..av::RMAC + 6].copy_from_slice(&attr.dmac);
        v[av::TCLASS] = attr.traffic_class | ECN_ENABLED;
        v[av::HOP_LIMIT] = hop;
        let gid_fl = fl | GRH_PRESENT | u32::from(attr.sgid_index) << 20;
        v[av::GRH_GID_FL..av::GRH_GID_FL + 4].copy_from_slice(&gid_fl.to_be_bytes());
        v[av::RGID..av::RGID + 16].copy_from_slice(&attr.dgid);
        // stat_rate_sl: static rate 0 (port rate) and SL 0 (`(sl & 7) << 1` for RoCE).
        Ok(AddressHandle { av: v })
    }

    /// The address vector (48 bytes, big-endian fields; the Q_Key and remote QPN are zero:
    /// each send fills them in).
    pub fn av(&self) -> &[u8; av::SIZE] {
        &self.av
    }

    /// The destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.av[av::RGID..av::RGID + 16]);
        g
    }

    /// The destination MAC.
    pub fn dmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.av[av::RMAC..av::RMAC + 6]);
        m
    }

    /// The UDP source port the handle's datagrams leave from.
    pub fn udp_sport(&self) -> u16 {
        u16::from_be_bytes([self.av[av::RLID], self.av[av::RLID + 1]])
    }
}

/// The RoCE v2 UDP source port of a flow label: its 20 bits folded into 14, in 0xC000..0xFFFF
/// (Linux include/rdma/ib_verbs.h `rdma_flow_label_to_udp_sport`).
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
    (low | 0xc000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(gids: u16) -> Caps {
        Caps {
            roce: true,
            port_type: mlx5_prm::hca_cap::port_type::ETH,
            roce_address_table_size: gids,
            roce_min_src_udp_port: 0xc000,
            ..Default::default()
        }
    }

    /// The vector as Linux ah.c `create_ib_ah` writes it for a RoCE v2 handle: GRH bit,
    /// source GID index and flow label in `grh_gid_fl`, ECN in the traffic class, the
    /// flow label's UDP source port, the MAC and GID in place.
    #[test]
    fn the_vector_is_linuxs() {
        let dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
        let a = AhAttr {
            dgid,
            dmac: [2, 0, 0, 0, 0, 2],
            sgid_index: 3,
            hop_limit: 64,
            traffic_class: 0x20,
            flow_label: 0x12345,
        };
        let h = AddressHandle::new(&caps(8), &a).unwrap();
        let v = h.av();
        assert_eq!(&v[28..32], &(0x12345u32 | 1 << 30 | 3 << 20).to_be_bytes());
        assert_eq!(v[26], 0x22);
        assert_eq!(v[27], 64);
        assert_eq!(h.udp_sport(), flow_label_to_udp_sport(0x12345));
        assert_eq!(h.dmac(), a.dmac);
        assert_eq!(h.dgid(), dgid);
        assert_eq!(&v[..12], &[0; 12], "Q_Key and remote QPN are each send's");
        // No flow label: the device's smallest source port; hop limit 0 sends 64.
        let h = AddressHandle::new(
            &caps(8),
            &AhAttr {
                flow_label: 0,
                hop_limit: 0,
                ..a
            },
        )
        .unwrap();
        assert_eq!(h.udp_sport(), 0xc000);
        assert_eq!(h.av()[27], 64);
        assert_eq!(
            AddressHandle::new(&caps(3), &a),
            Err(InvalidInput::GidIndex.into())
        );
        for bad in [AhAttr { dgid: [0; 16], ..a }, AhAttr { dmac: [0; 6], ..a }] {
            assert_eq!(
                AddressHandle::new(&caps(8), &bad),
                Err(InvalidInput::RemoteAddress.into())
            );
        }
    }

    /// rdma_flow_label_to_udp_sport: `fl_low ^ fl_high`, with 0xC000 set.
    #[test]
    fn flow_label_folds_into_the_roce_port_range() {
        assert_eq!(flow_label_to_udp_sport(0), 0xc000);
        assert_eq!(flow_label_to_udp_sport(0x4001), 0xc000);
        assert_eq!(flow_label_to_udp_sport(0xf_ffff), 0xc000 | (0x3fff ^ 0x3f));
    }
}
