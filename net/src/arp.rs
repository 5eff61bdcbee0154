//! The neighbour table behind [`crate::Stack::resolve`]: ARP snooped from received frames, and
//! static entries.
//!
//! smoltcp keeps its own ARP cache for the IP traffic it sends, but does not show it. The
//! RDMA apps need the neighbour's MAC themselves (a RoCE address vector names it), so the
//! device wrapper shows every received frame to [`Neighbours::snoop`] before smoltcp sees it,
//! and [`request`] builds the requests `resolve` sends. Both use smoltcp's `wire` types only.
//!
//! What is learned follows smoltcp's own ARP input (smoltcp `src/iface/interface/ipv4.rs`
//! `InterfaceInner::process_arp`), so the two caches agree: only requests and replies whose
//! target protocol address is ours, only from a unicast sender in our subnet. A learned entry
//! is replaced by a newer ARP from the same address (RFC 826, "Packet Reception": the sender's
//! pair is merged into the table); a static entry is never replaced by ARP.

use alloc::vec::Vec;

use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Address, Ipv4Cidr,
};

/// How many neighbours the table holds; the least recently learned goes first when full.
pub const NEIGHBOUR_CAPACITY: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Static,
    Learned,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    ip: Ipv4Address,
    mac: EthernetAddress,
    kind: Kind,
    /// When it was last learned, in the table's own count of updates (for eviction).
    stamp: u64,
}

/// IPv4 address -> MAC address of the neighbours on the link.
pub(crate) struct Neighbours {
    own: Ipv4Cidr,
    entries: Vec<Entry>,
    stamp: u64,
}

impl Neighbours {
    /// An empty table for an interface with address and subnet `own`.
    pub(crate) fn new(own: Ipv4Cidr) -> Self {
        Neighbours {
            own,
            entries: Vec::with_capacity(NEIGHBOUR_CAPACITY),
            stamp: 0,
        }
    }

    /// The MAC of `ip`, if known.
    pub(crate) fn lookup(&self, ip: Ipv4Address) -> Option<[u8; 6]> {
        self.entries.iter().find(|e| e.ip == ip).map(|e| e.mac.0)
    }

    /// Adds or replaces a static entry (never replaced by ARP, never evicted).
    pub(crate) fn insert_static(&mut self, ip: Ipv4Address, mac: [u8; 6]) {
        self.put(ip, EthernetAddress(mac), Kind::Static);
    }

    /// Learns from `frame` if it is an ARP request or reply to our address (see the module
    /// docs); anything else, malformed or not, is ignored.
    pub(crate) fn snoop(&mut self, frame: &[u8]) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        if eth.ethertype() != EthernetProtocol::Arp {
            return;
        }
        let Ok(arp) = ArpPacket::new_checked(eth.payload()) else {
            return;
        };
        let Ok(ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr: mac,
            source_protocol_addr: ip,
            target_protocol_addr,
            ..
        }) = ArpRepr::parse(&arp)
        else {
            return;
        };
        let known_op = matches!(operation, ArpOperation::Request | ArpOperation::Reply);
        let unicast = !(ip.is_broadcast() || ip.is_multicast() || ip.is_unspecified());
        if known_op
            && target_protocol_addr == self.own.address()
            && unicast
            && mac.is_unicast()
            && self.own.contains_addr(&ip)
            && ip != self.own.address()
        {
            self.put(ip, mac, Kind::Learned);
        }
    }

    fn put(&mut self, ip: Ipv4Address, mac: EthernetAddress, kind: Kind) {
        self.stamp += 1;
        let stamp = self.stamp;
        if let Some(e) = self.entries.iter_mut().find(|e| e.ip == ip) {
            if kind == Kind::Learned && e.kind == Kind::Static {
                return;
            }
            *e = Entry {
                ip,
                mac,
                kind,
                stamp,
            };
            return;
        }
        if self.entries.len() == NEIGHBOUR_CAPACITY {
            // Full: the oldest learned entry goes. All static: a learned one is not kept.
            let oldest = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.kind == Kind::Learned)
                .min_by_key(|(_, e)| e.stamp)
                .map(|(i, _)| i);
            match (oldest, kind) {
                (Some(i), _) => {
                    self.entries.swap_remove(i);
                }
                (None, Kind::Learned) => return,
                // Only static entries and one more static one: the table grows past its
                // capacity rather than lose an entry the user gave.
                (None, Kind::Static) => {}
            }
        }
        self.entries.push(Entry {
            ip,
            mac,
            kind,
            stamp,
        });
    }
}

/// The length of an ARP request frame (Ethernet header and ARP packet, no padding).
pub(crate) fn request_len() -> usize {
    EthernetFrame::<&[u8]>::buffer_len(
        request_repr([0; 6], Ipv4Address::UNSPECIFIED, Ipv4Address::UNSPECIFIED).buffer_len(),
    )
}

/// An ARP request for `target` from `(mac, ip)`, as smoltcp sends its own (smoltcp
/// `src/iface/interface/mod.rs` `InterfaceInner::lookup_hardware_addr`: broadcast destination,
/// target hardware address broadcast).
fn request_repr(mac: [u8; 6], ip: Ipv4Address, target: Ipv4Address) -> ArpRepr {
    ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(mac),
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress::BROADCAST,
        target_protocol_addr: target,
    }
}

/// Writes an ARP request for `target` from `(mac, ip)` into `buf`, which is
/// [`request_len`] bytes long.
pub(crate) fn request(buf: &mut [u8], mac: [u8; 6], ip: Ipv4Address, target: Ipv4Address) {
    let repr = request_repr(mac, ip, target);
    emit(buf, EthernetAddress::BROADCAST, repr, mac);
}

/// Writes the Ethernet frame of ARP packet `repr` from `src` to `dst` into `buf`, which is
/// exactly as long as the frame.
fn emit(buf: &mut [u8], dst: EthernetAddress, repr: ArpRepr, src: [u8; 6]) {
    let mut frame = EthernetFrame::new_unchecked(buf);
    EthernetRepr {
        src_addr: EthernetAddress(src),
        dst_addr: dst,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut frame);
    repr.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
}

/// The ARP reply `(mac, ip)` would send to our request (RFC 826, "Packet Reception": the
/// sender's pair, to our own), which smoltcp's ARP input learns (smoltcp
/// `src/iface/interface/ipv4.rs` `InterfaceInner::process_arp` fills its cache from any
/// request or reply aimed at us). Fed to smoltcp so that its cache holds a static neighbour.
pub(crate) fn reply(mac: [u8; 6], ip: Ipv4Address, own_mac: [u8; 6], own: Ipv4Address) -> Vec<u8> {
    let repr = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: EthernetAddress(mac),
        source_protocol_addr: ip,
        target_hardware_addr: EthernetAddress(own_mac),
        target_protocol_addr: own,
    };
    let mut buf = alloc::vec![0; EthernetFrame::<&[u8]>::buffer_len(repr.buffer_len())];
    emit(&mut buf, EthernetAddress(own_mac), repr, mac);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
    const PEER: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn table() -> Neighbours {
        Neighbours::new(Ipv4Cidr::new(OWN, 24))
    }

    /// An ARP frame from (mac, ip) about `target`.
    fn arp(op: ArpOperation, mac: [u8; 6], ip: Ipv4Address, target: Ipv4Address) -> Vec<u8> {
        let mut buf = alloc::vec![0; request_len()];
        request(&mut buf, mac, ip, target);
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        ArpPacket::new_unchecked(frame.payload_mut()).set_operation(op);
        buf
    }

    #[test]
    fn learns_requests_and_replies_to_us() {
        let mut t = table();
        t.snoop(&arp(ArpOperation::Reply, PEER_MAC, PEER, OWN));
        assert_eq!(t.lookup(PEER), Some(PEER_MAC));
        let other = Ipv4Address::new(10, 0, 0, 3);
        t.snoop(&arp(ArpOperation::Request, [2, 0, 0, 0, 0, 3], other, OWN));
        assert_eq!(t.lookup(other), Some([2, 0, 0, 0, 0, 3]));
        // A newer reply replaces a learned entry.
        t.snoop(&arp(ArpOperation::Reply, [2, 0, 0, 0, 0, 9], PEER, OWN));
        assert_eq!(t.lookup(PEER), Some([2, 0, 0, 0, 0, 9]));
    }

    #[test]
    fn ignores_what_smoltcp_ignores() {
        let mut t = table();
        // Not about us.
        t.snoop(&arp(
            ArpOperation::Reply,
            PEER_MAC,
            PEER,
            Ipv4Address::new(10, 0, 0, 7),
        ));
        // Another subnet.
        t.snoop(&arp(
            ArpOperation::Reply,
            PEER_MAC,
            Ipv4Address::new(10, 1, 0, 1),
            OWN,
        ));
        // Multicast sender MAC, broadcast sender IP, our own address.
        t.snoop(&arp(ArpOperation::Reply, [1, 0, 0x5e, 0, 0, 1], PEER, OWN));
        t.snoop(&arp(
            ArpOperation::Reply,
            PEER_MAC,
            Ipv4Address::BROADCAST,
            OWN,
        ));
        t.snoop(&arp(ArpOperation::Reply, PEER_MAC, OWN, OWN));
        // Unknown operation.
        t.snoop(&arp(ArpOperation::Unknown(9), PEER_MAC, PEER, OWN));
        assert!(t.entries.is_empty());
    }

    #[test]
    fn hostile_frames_are_ignored() {
        let mut t = table();
        let good = arp(ArpOperation::Reply, PEER_MAC, PEER, OWN);
        for len in 0..good.len() {
            t.snoop(&good[..len]);
        }
        // A wrong ethertype with an ARP body.
        let mut ipv4 = good.clone();
        EthernetFrame::new_unchecked(&mut ipv4[..]).set_ethertype(EthernetProtocol::Ipv4);
        t.snoop(&ipv4);
        // An ARP body for another protocol (hardware length 8).
        let mut odd = good.clone();
        EthernetFrame::new_unchecked(&mut odd[..]).payload_mut()[4] = 8;
        t.snoop(&odd);
        assert!(t.entries.is_empty());
    }

    #[test]
    fn static_entries_win_and_stay() {
        let mut t = table();
        t.insert_static(PEER, [2, 0, 0, 0, 0, 0x55]);
        t.snoop(&arp(ArpOperation::Reply, PEER_MAC, PEER, OWN));
        assert_eq!(t.lookup(PEER), Some([2, 0, 0, 0, 0, 0x55]));
        // Filling the table with learned entries evicts learned ones only.
        for i in 0..2 * NEIGHBOUR_CAPACITY as u8 {
            let ip = Ipv4Address::new(10, 0, 0, 10 + i);
            t.snoop(&arp(ArpOperation::Reply, [2, 0, 0, 0, 1, i], ip, OWN));
        }
        assert_eq!(t.entries.len(), NEIGHBOUR_CAPACITY);
        assert_eq!(t.lookup(PEER), Some([2, 0, 0, 0, 0, 0x55]));
        let newest = Ipv4Address::new(10, 0, 0, 10 + 2 * NEIGHBOUR_CAPACITY as u8 - 1);
        assert!(t.lookup(newest).is_some());
        assert!(t.lookup(Ipv4Address::new(10, 0, 0, 10)).is_none());
    }

    #[test]
    fn request_is_what_smoltcp_parses() {
        let mut buf = alloc::vec![0; request_len()];
        request(&mut buf, PEER_MAC, PEER, OWN);
        let eth = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress::BROADCAST);
        let repr = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(repr, request_repr(PEER_MAC, PEER, OWN));
    }
}
