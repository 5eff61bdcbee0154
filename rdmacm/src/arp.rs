//! Waiting for a neighbour's MAC: asked for by ARP at once, again every second, given up at a
//! deadline (Linux `drivers/infiniband/core/addr.c` `rdma_resolve_ip` waits on the neighbour
//! table while `net/ipv4/arp.c` repeats its request every `RETRANS_TIME`, one second).

use crate::types::Neighbours;

/// How often a waiting MAC is asked for again ([`net::ARP_RETRY_US`]).
const SOLICIT_EVERY_NS: u64 = net::ARP_RETRY_US * 1000;

/// Where a wait stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arp {
    /// The MAC is known.
    Known([u8; 6]),
    /// The deadline passed without it.
    Expired,
    /// Still asking.
    Waiting,
}

/// One address being resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArpWait {
    pub(crate) ip: [u8; 4],
    deadline: u64,
    next_solicit: u64,
}

impl ArpWait {
    /// Starts waiting for `ip` for `timeout_ns` from `now` (no request is sent here: see
    /// [`ArpWait::check`]).
    pub(crate) fn new(now: u64, ip: [u8; 4], timeout_ns: u64) -> ArpWait {
        ArpWait {
            ip,
            deadline: now.saturating_add(timeout_ns),
            next_solicit: now,
        }
    }

    /// The MAC if known now; else the deadline, or one more ARP request when one is due.
    pub(crate) fn check(&mut self, now: u64, nb: &mut dyn Neighbours) -> Arp {
        if let Some(mac) = nb.lookup(self.ip) {
            return Arp::Known(mac);
        }
        if now >= self.deadline {
            return Arp::Expired;
        }
        if now >= self.next_solicit {
            self.next_solicit = now.saturating_add(SOLICIT_EVERY_NS);
            nb.solicit(self.ip);
        }
        Arp::Waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Table {
        mac: Option<[u8; 6]>,
        asked: usize,
    }
    impl Neighbours for Table {
        fn lookup(&mut self, _ip: [u8; 4]) -> Option<[u8; 6]> {
            self.mac
        }
        fn solicit(&mut self, _ip: [u8; 4]) {
            self.asked += 1;
        }
    }

    #[test]
    fn asks_every_second_until_known_or_expired() {
        let mut t = Table {
            mac: None,
            asked: 0,
        };
        let mut w = ArpWait::new(0, [10, 0, 0, 2], 2_500_000_000);
        assert_eq!(w.check(0, &mut t), Arp::Waiting);
        assert_eq!(w.check(500_000_000, &mut t), Arp::Waiting);
        assert_eq!(t.asked, 1);
        assert_eq!(w.check(1_000_000_000, &mut t), Arp::Waiting);
        assert_eq!(w.check(2_000_000_000, &mut t), Arp::Waiting);
        assert_eq!(t.asked, 3);
        assert_eq!(w.check(2_500_000_000, &mut t), Arp::Expired);
        t.mac = Some([2, 0, 0, 0, 0, 2]);
        assert_eq!(
            w.check(2_600_000_000, &mut t),
            Arp::Known([2, 0, 0, 0, 0, 2])
        );
        assert_eq!(t.asked, 3);
    }
}
