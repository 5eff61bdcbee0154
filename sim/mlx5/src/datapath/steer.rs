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
