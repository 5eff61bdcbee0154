//! The lookup a received Ethernet frame makes in the NIC_RX flow tables: from the root table,
//! the first entry (in flow index order) whose match value agrees with the frame under its
//! group's mask decides: forward to TIRs (the frame is received), forward to a deeper table
//! (the lookup goes on there), or drop. A table no entry of which matches sends the frame to
//! its miss table, or drops it (the default miss action of NIC_RX: the frame "completed RX
//! flow steering but was discarded due to a mismatch in flow table", Linux
//! Documentation/networking/device_drivers/ethernet/mellanox/mlx5/devlink.rst on
//! `nic_receive_steering_discard`).
//!
//! Entries are tried in flow index order (model choice: firmware documents no order between
//! the groups of a table; Linux core/en_fs.c creates each table's groups from the most
//! specific match to the least, at increasing indexes, e.g. the L2 table's full-MAC group
//! before its multicast and promiscuous ones, so lowest index first is the order those
//! tables rely on).

use super::state::{Action, Dest, FlowSteering, OUTER_BYTES};
use crate::control::caps;
use crate::control::result::put;
use crate::roce::OtherFrame;
use mlx5_prm::fte_match_set_lyr_2_4 as l24;
use std::net::IpAddr;

/// A received frame's values of the outer header fields the model evaluates (the
/// `fte_match_set_lyr_2_4` it is compared as).
pub(crate) struct Packet([u8; OUTER_BYTES]);

impl Packet {
    /// The fields of a decoded non-RoCE frame.
    pub(crate) fn of(o: &OtherFrame) -> Packet {
        let mut b = [0u8; OUTER_BYTES];
        let mac47 = |m: &[u8; 6]| u32::from_be_bytes([m[0], m[1], m[2], m[3]]);
        let mac15 = |m: &[u8; 6]| u32::from(u16::from_be_bytes([m[4], m[5]]));
        put(&mut b, l24::DMAC_47_16, mac47(&o.dst));
        put(&mut b, l24::DMAC_15_0, mac15(&o.dst));
        put(&mut b, l24::SMAC_47_16, mac47(&o.src));
        put(&mut b, l24::SMAC_15_0, mac15(&o.src));
        put(&mut b, l24::ETHERTYPE, o.ethertype.into());
        if let Some(v) = o.vlan {
            put(&mut b, l24::CVLAN_TAG, 1);
            put(&mut b, l24::FIRST_PRIO, v.pcp.into());
            put(&mut b, l24::FIRST_CFI, v.dei.into());
            put(&mut b, l24::FIRST_VID, v.vid.into());
        }
        if let Some(ip) = o.ip {
            put(&mut b, l24::IP_PROTOCOL, ip.protocol.into());
            let addr = |b: &mut [u8; OUTER_BYTES], f: mlx5_prm::Field, a: IpAddr| {
                let at = f.byte_offset();
                match a {
                    // An IPv4 address is the last 32 bits (`ipv4_layout`).
                    IpAddr::V4(a) => b[at + 12..at + 16].copy_from_slice(&a.octets()),
                    IpAddr::V6(a) => b[at..at + 16].copy_from_slice(&a.octets()),
                }
            };
            addr(&mut b, l24::SRC_IPV4_SRC_IPV6, ip.src);
            addr(&mut b, l24::DST_IPV4_DST_IPV6, ip.dst);
            put(
                &mut b,
                l24::IP_VERSION,
                if ip.src.is_ipv4() { 4 } else { 6 },
            );
            if let Some((s, d)) = ip.udp_ports {
                put(&mut b, l24::UDP_SPORT, s.into());
                put(&mut b, l24::UDP_DPORT, d.into());
            }
            if let Some((s, d)) = ip.tcp_ports {
                put(&mut b, l24::TCP_SPORT, s.into());
                put(&mut b, l24::TCP_DPORT, d.into());
            }
        }
        Packet(b)
    }
}

/// Where the lookup took a frame.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Steer<'a> {
    /// To these destinations (all TIRs).
    Deliver(&'a [Dest]),
    /// No NIC_RX root table is set.
    NoRoot,
    /// A table missed with the default miss action.
    Missed,
    /// An entry with the DROP action took it.
    Dropped,
}

impl FlowSteering {
    /// Looks `p` up from the root table.
    pub(crate) fn lookup(&self, p: &Packet) -> Steer<'_> {
        let Some(mut id) = self.root else {
            return Steer::NoRoot;
        };
        // Every step goes to a table of a greater level (checked when the entry or the miss
        // was set), so a lookup takes at most one step per level.
        for _ in 0..=caps::FT_MAX_LEVEL {
            let Some(t) = self.tables.get(&id) else {
                return Steer::Missed;
            };
            let hit = t.ftes.values().find(|f| {
                t.groups.get(&f.group).is_some_and(|g| {
                    (0..OUTER_BYTES).all(|k| p.0[k] & g.outer_mask[k] == f.value[k])
                })
            });
            match hit.map(|f| &f.action) {
                Some(Action::Drop) => return Steer::Dropped,
                Some(Action::Forward(d)) => match d.as_slice() {
                    [Dest::Table(next)] => id = *next,
                    d => return Steer::Deliver(d),
                },
                None => match t.miss {
                    Some(next) => id = next,
                    None => return Steer::Missed,
                },
            }
        }
        Steer::Missed
    }
}
