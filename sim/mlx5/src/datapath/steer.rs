//! The Ethernet receive path up to the receive queues: a frame that is not RoCEv2
//! ([`crate::wire::Arrival::Eth`]; RoCEv2 frames to the port's addresses go to the RC
//! transport) is judged in this order, and a frame failing a step is dropped and counted in
//! the port counters under the step's [`Counter`]:
//!
//! 1. longer than the vport's MTU allows: `nic_vport_context.mtu` is the hardware MTU, which
//!    counts the Ethernet header, a VLAN tag and the FCS (Linux en.h `MLX5E_ETH_HARD_MTU`),
//!    and the link carries frames without their FCS (4 bytes, Linux
//!    include/uapi/linux/if_ether.h `ETH_FCS_LEN`): [`Counter::RxDropOversize`];
//! 2. VLAN-tagged (802.1Q or 802.1ad; model choice: the vport has no VLAN list):
//!    [`Counter::RxDropVlanTagged`];
//! 3. an IEEE 802.3 length instead of an EtherType (below 0x0600; model choice: Ethernet II
//!    only): [`Counter::RxDropNotEthernetII`];
//! 4. the vport's address filter ([`crate::objects::vport::AddressFilter`]):
//!    [`Counter::RxDropVportFilter`]; a frame that passes is the vport's, counted in its
//!    `received_eth_*` class;
//! 5. the NIC_RX flow tables ([`crate::objects::flow::steer`]): no root table
//!    ([`Counter::RxDropNoRootTable`]), no entry took it ([`Counter::RxSteerMissed`]), an entry
//!    dropped it ([`Counter::RxDropSteeringRule`]); else each TIR the entry forwards to receives
//!    it ([`crate::datapath::eth::rx::deliver`], which counts its own drops).
//!
//! Frames the port's checks already dropped (runts, frames that do not decode: bad IP
//! header lengths, truncated headers) never get here (crate::link `classify`).

use std::sync::Arc;

use crate::datapath::eth::rx::deliver;
use crate::datapath::Dp;
use crate::link::count_eth_class;
use crate::objects::flow::steer::{Packet, Steer};
use crate::objects::Objects;
use crate::roce::counters::{Counter, PortCounters};
use crate::roce::{decode, Frame, ETHERTYPE_QINQ};

/// `ETH_FCS_LEN` (Linux include/uapi/linux/if_ether.h).
const ETH_FCS_LEN: usize = 4;
/// EtherType values start here; below it the field is an IEEE 802.3 length (`ETH_P_802_3_MIN`,
/// Linux include/uapi/linux/if_ether.h).
const ETH_P_802_3_MIN: u16 = 0x0600;
/// Most TIRs one entry forwards to (`1 << log_max_destination`).
const MAX_DESTS: usize = 1 << crate::control::caps::FT_LOG_MAX_DESTINATION;

/// Takes one Ethernet frame that arrived at the port to the TIRs steering picks.
pub(crate) fn arrive(dp: &mut Dp<'_>, frame: &[u8]) {
    let counters = Arc::clone(dp.port.counters());
    let mut tirs = [0u32; MAX_DESTS];
    let n = match judge(dp.objects, &counters, frame, &mut tirs) {
        Ok(n) => n,
        Err(c) => {
            counters.bump(c);
            return;
        }
    };
    for &tirn in &tirs[..n] {
        if let Err(e) = deliver(dp, tirn, frame) {
            dp.trace_note(format_args!(
                "Ethernet frame of {} bytes steered to TIR {tirn:#x} not received: {e:?}",
                frame.len()
            ));
        }
    }
}

/// The TIRs (written to `tirs`, their count returned) that receive `frame`, or the counter
/// of the step that dropped it.
fn judge(
    objects: &Objects,
    counters: &PortCounters,
    frame: &[u8],
    tirs: &mut [u32; MAX_DESTS],
) -> Result<usize, Counter> {
    let Ok(Frame::Other(o)) = decode(frame) else {
        // The port only passes frames that decode as something other than RoCEv2.
        return Err(Counter::RxDropMalformed);
    };
    let vport = &objects.vport;
    if frame.len() + ETH_FCS_LEN > vport.mtu() as usize {
        return Err(Counter::RxDropOversize);
    }
    if o.vlan.is_some() || o.ethertype == ETHERTYPE_QINQ {
        return Err(Counter::RxDropVlanTagged);
    }
    if o.ethertype < ETH_P_802_3_MIN {
        return Err(Counter::RxDropNotEthernetII);
    }
    if !vport.filter().accepts(&o.dst) {
        return Err(Counter::RxDropVportFilter);
    }
    count_eth_class(counters, frame);
    match objects.flow.lookup(&Packet::of(&o)) {
        Steer::NoRoot => Err(Counter::RxDropNoRootTable),
        Steer::Missed => Err(Counter::RxSteerMissed),
        Steer::Dropped => Err(Counter::RxDropSteeringRule),
        Steer::Deliver(dests) => {
            let mut n = 0;
            for d in dests {
                if let (crate::objects::flow::Dest::Tir(t), Some(slot)) = (d, tirs.get_mut(n)) {
                    *slot = *t;
                    n += 1;
                }
            }
            Ok(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::flow::testing::{arp, eth, ipv4, BCAST, MAC, OTHER, T};
    use mlx5_prm::{
        flow_context_action as act, flow_destination_type as dt, fte_match_set_lyr_2_4 as l24,
    };

    /// `frame` judged with `t`'s objects: the TIRs, or the counter of the step that dropped
    /// it (and that counter alone moved, besides the vport's `received_eth_*` class).
    fn judged(t: &T, frame: &[u8]) -> Result<Vec<u32>, Counter> {
        let c = PortCounters::new();
        let mut tirs = [0u32; MAX_DESTS];
        let r = judge(&t.objects, &c, frame, &mut tirs).map(|n| tirs[..n].to_vec());
        let classes = [
            Counter::RxEthUnicastFrames,
            Counter::RxEthMulticastFrames,
            Counter::RxEthBroadcastFrames,
        ];
        let eth: u64 = classes.iter().map(|&k| c.get(k)).sum();
        let octets = [
            Counter::RxEthUnicastBytes,
            Counter::RxEthMulticastBytes,
            Counter::RxEthBroadcastBytes,
        ];
        let bytes: u64 = octets.iter().map(|&k| c.get(k)).sum();
        assert_eq!(bytes, eth * frame.len() as u64, "octets of the class");
        // A frame the vport takes is counted in one class; one it refuses in none.
        let taken = !matches!(
            r,
            Err(Counter::RxDropOversize
                | Counter::RxDropVlanTagged
                | Counter::RxDropNotEthernetII
                | Counter::RxDropVportFilter
                | Counter::RxDropMalformed)
        );
        assert_eq!(eth, taken as u64, "{:?}", c.snapshot().nonzero());
        r
    }

    /// The vport as mlx5e sets it (own MAC; broadcast), a root table taking ARP to TIR 1,
    /// IPv4 UDP to port 7 to TIRs 2 and 3, and dropping TCP.
    fn steered() -> T {
        let mut t = T::new();
        let f = t.objects.vport.filter_mut();
        f.uc = vec![MAC];
        f.mc = vec![BCAST];
        let ft = t.table(0, 2, None).unwrap();
        let g = t
            .group(
                ft,
                0,
                3,
                &[l24::ETHERTYPE, l24::IP_PROTOCOL, l24::UDP_DPORT],
            )
            .unwrap();
        let arp_v = [(l24::ETHERTYPE, 0x0806)];
        let udp7 = [
            (l24::ETHERTYPE, 0x0800),
            (l24::IP_PROTOCOL, 17),
            (l24::UDP_DPORT, 7),
        ];
        let tcp = [(l24::ETHERTYPE, 0x0800), (l24::IP_PROTOCOL, 6)];
        t.fte(ft, g, 0, act::FWD_DEST, &[(dt::TIR, 1)], &arp_v)
            .unwrap();
        t.fte(
            ft,
            g,
            1,
            act::FWD_DEST,
            &[(dt::TIR, 2), (dt::TIR, 3)],
            &udp7,
        )
        .unwrap();
        t.fte(ft, g, 2, act::DROP, &[], &tcp).unwrap();
        t.root(0, ft).unwrap();
        t
    }

    #[test]
    fn every_steering_decision_is_counted() {
        let mut t = steered();
        assert_eq!(judged(&t, &arp(MAC)), Ok(vec![1]));
        assert_eq!(judged(&t, &arp(BCAST)), Ok(vec![1]));
        assert_eq!(judged(&t, &ipv4(MAC, 17, 9, 7)), Ok(vec![2, 3]));
        assert_eq!(
            judged(&t, &ipv4(MAC, 6, 9, 7)),
            Err(Counter::RxDropSteeringRule)
        );
        assert_eq!(
            judged(&t, &ipv4(MAC, 17, 9, 8)),
            Err(Counter::RxSteerMissed)
        );
        // The vport's filter comes first: another unicast MAC, a multicast not listed.
        assert_eq!(judged(&t, &arp(OTHER)), Err(Counter::RxDropVportFilter));
        let mcast = [0x01, 0, 0x5e, 0, 0, 1];
        assert_eq!(judged(&t, &arp(mcast)), Err(Counter::RxDropVportFilter));
        // Promiscuous modes let them in, to the same tables.
        t.objects.vport.filter_mut().promisc_mc = true;
        assert_eq!(judged(&t, &arp(mcast)), Ok(vec![1]));
        assert_eq!(judged(&t, &arp(OTHER)), Err(Counter::RxDropVportFilter));
        t.objects.vport.filter_mut().promisc_uc = true;
        assert_eq!(judged(&t, &arp(OTHER)), Ok(vec![1]));
        // No root table.
        t.root(1, 0).unwrap();
        assert_eq!(judged(&t, &arp(MAC)), Err(Counter::RxDropNoRootTable));
        // Nothing set at all (power-on): the filter drops everything.
        assert_eq!(
            judged(&T::new(), &arp(BCAST)),
            Err(Counter::RxDropVportFilter)
        );
    }

    #[test]
    fn hostile_frames_are_dropped_and_counted() {
        let t = steered();
        // Giant: the vport's MTU (1522 at power-on) less the FCS is the largest frame.
        let fits = eth(MAC, 0x0806, &[0; 1518 - 14]);
        assert_eq!(judged(&t, &fits), Ok(vec![1]));
        let giant = eth(MAC, 0x0806, &[0; 1519 - 14]);
        assert_eq!(judged(&t, &giant), Err(Counter::RxDropOversize));
        // VLAN-tagged (802.1Q and 802.1ad), even to the port's MAC.
        let mut q = vec![0x00, 0x05, 0x08, 0x06];
        q.extend_from_slice(&[0; 28]);
        assert_eq!(
            judged(&t, &eth(MAC, 0x8100, &q)),
            Err(Counter::RxDropVlanTagged)
        );
        assert_eq!(
            judged(&t, &eth(MAC, 0x88a8, &q)),
            Err(Counter::RxDropVlanTagged)
        );
        // An 802.3 length field, a bad one included.
        assert_eq!(
            judged(&t, &eth(MAC, 46, &[0; 46])),
            Err(Counter::RxDropNotEthernetII)
        );
        assert_eq!(
            judged(&t, &eth(MAC, 0x05ff, &[0; 4])),
            Err(Counter::RxDropNotEthernetII)
        );
        // An unknown EtherType is the tables' business: this one misses.
        assert_eq!(
            judged(&t, &eth(MAC, 0x88b5, &[0; 46])),
            Err(Counter::RxSteerMissed)
        );
        // A frame the port would not pass on (it does not decode) is malformed here too.
        let mut bad_ip = ipv4(MAC, 17, 1, 7);
        bad_ip[14] = 0x65;
        assert_eq!(judged(&t, &bad_ip), Err(Counter::RxDropMalformed));
        assert_eq!(judged(&t, &MAC), Err(Counter::RxDropMalformed));
        // A storm of broadcasts: each one judged and counted, none lost track of.
        let c = PortCounters::new();
        let mut tirs = [0u32; MAX_DESTS];
        let storm = eth(BCAST, 0x88b5, &[0; 46]);
        for _ in 0..10_000 {
            assert_eq!(
                judge(&t.objects, &c, &storm, &mut tirs),
                Err(Counter::RxSteerMissed)
            );
        }
        assert_eq!(c.get(Counter::RxEthBroadcastFrames), 10_000);
    }
}
