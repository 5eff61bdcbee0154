//! The device under smoltcp against NICs that misbehave on purpose: a full NIC holds
//! smoltcp's frames back instead of losing them, a failed receive is counted, and a static
//! neighbour reaches smoltcp's own ARP cache (no ARP on the wire).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use net::loopback::{self, MemNic};
use net::{NetError, Nic, NicError, Stack, StackConfig};

/// A loopback NIC that says it is full for its first `full_for` questions (and refuses a
/// frame meanwhile, as a full NIC does), fails its first `rx_failures` receives, and counts
/// the ARP frames it receives.
struct TestNic {
    inner: MemNic,
    full_for: u32,
    rx_failures: u32,
    arp_held: bool,
    arps: Arc<AtomicU64>,
}

impl Nic for TestNic {
    type Error = u32;
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn can_send(&mut self) -> bool {
        if self.full_for > 0 {
            self.full_for -= 1;
            return false;
        }
        self.inner.can_send()
    }
    fn tx_buffer(&mut self, len: usize) -> Result<&mut [u8], NicError<u32>> {
        if self.full_for > 0 {
            return Err(NicError::QueueFull);
        }
        self.inner.tx_buffer(len).map_err(|_| NicError::Device(0))
    }
    fn post_tx(&mut self, len: usize) -> Result<(), NicError<u32>> {
        self.inner.post_tx(len).map_err(|_| NicError::Device(0))
    }
    fn rx_frame(&mut self) -> Result<Option<&[u8]>, u32> {
        if self.rx_failures > 0 {
            self.rx_failures -= 1;
            return Err(7);
        }
        let Ok(frame) = self.inner.rx_frame();
        // ETH_P_ARP (Linux include/uapi/linux/if_ether.h).
        self.arp_held = frame.is_some_and(|f| f.get(12..14) == Some(&[0x08, 0x06]));
        Ok(frame)
    }
    fn rx_done(&mut self) -> Result<(), u32> {
        if std::mem::take(&mut self.arp_held) {
            self.arps.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.rx_done().map_err(|e| match e {})
    }
}

type T = Stack<TestNic, StdClock>;

/// Stacks A and B over test NICs: A full for its first `a_full_for` questions and failing
/// its first `a_rx_failures` receives; the ARP frames each end received.
fn test_stacks(a_full_for: u32, a_rx_failures: u32) -> (T, T, [Arc<AtomicU64>; 2]) {
    let (na, nb, _link) = loopback::pair(MAC_A, MAC_B, MTU);
    let arps = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let wrap = |inner, full_for, rx_failures, arps: &Arc<AtomicU64>| TestNic {
        inner,
        full_for,
        rx_failures,
        arp_held: false,
        arps: arps.clone(),
    };
    let clock = StdClock(std::time::Instant::now());
    let a = Stack::new(
        wrap(na, a_full_for, a_rx_failures, &arps[0]),
        clock,
        &StackConfig::new(IP_A, 24),
    )
    .unwrap();
    let b = Stack::new(wrap(nb, 0, 0, &arps[1]), clock, &StackConfig::new(IP_B, 24)).unwrap();
    (a, b, arps)
}

/// TCP between two stacks that know each other as static neighbours: no ARP crosses the
/// link, either way.
#[test]
fn tcp_to_a_static_neighbour_needs_no_arp() {
    let (mut a, mut b, arps) = test_stacks(0, 0);
    a.add_neighbour(IP_B, MAC_B);
    b.add_neighbour(IP_A, MAC_A);
    let (ra, rb) = both(
        &mut a,
        &mut b,
        |a| {
            let c = a.tcp_connect(IP_B, 7000, after(a, 5000))?;
            a.tcp_send_all(&c, b"over a static neighbour", after(a, 5000))?;
            a.tcp_close(c, after(a, 5000))
        },
        |b| {
            let mut l = b.tcp_listen(7000)?;
            let c = b.tcp_accept(&mut l, after(b, 5000))?;
            let mut buf = [0; 64];
            let n = b.tcp_recv(&c, &mut buf, after(b, 5000))?;
            Ok::<_, NetError>(buf[..n].to_vec())
        },
    );
    assert_eq!(ra, Ok(()));
    assert_eq!(rb.as_deref(), Ok(&b"over a static neighbour"[..]));
    assert_eq!(arps[0].load(Ordering::Relaxed), 0, "A received no ARP");
    assert_eq!(arps[1].load(Ordering::Relaxed), 0, "B received no ARP");
}

/// While the NIC says it is full, smoltcp keeps its datagram (the NIC never refuses one);
/// once there is room it goes out and arrives.
#[test]
fn a_full_nic_holds_frames_back_instead_of_losing_them() {
    let (mut a, mut b, _arps) = test_stacks(20, 0);
    a.add_neighbour(IP_B, MAC_B);
    b.add_neighbour(IP_A, MAC_A);
    let ub = b.udp_bind(6000).unwrap();
    let ra = with_peer_t(&mut a, &mut b, |a| {
        let u = a.udp_bind(5000)?;
        a.udp_send(&u, (IP_B, 6000), b"held back", after(a, 5000))
    });
    assert_eq!(ra, Ok(()));
    let st = a.stats();
    assert_eq!(st.tx_full, 20, "smoltcp was told 20 times");
    assert_eq!(
        st.tx_errors, 0,
        "and no frame was refused: {:?}",
        st.last_tx_error
    );
    let mut buf = [0; 64];
    let got = b.udp_recv(&ub, &mut buf, after(&b, 5000)).unwrap();
    assert_eq!(&buf[..got.len], b"held back");
}

/// A receive the NIC fails is counted with its error; the stack goes on.
#[test]
fn a_failed_receive_is_counted() {
    let (mut a, mut b, _arps) = test_stacks(0, 2);
    // Both ways: with A asking no ARP, B learns A from nothing (smoltcp drops the echo reply
    // it must ARP for).
    a.add_neighbour(IP_B, MAC_B);
    b.add_neighbour(IP_A, MAC_A);
    let rtt = with_peer_t(&mut a, &mut b, |a| a.ping(IP_B, after(a, 5000)));
    assert!(rtt.is_ok(), "{rtt:?}");
    let st = a.stats();
    assert_eq!(st.rx_errors, 2);
    assert_eq!(st.last_rx_error, Some(7));
}

/// Runs `f` on `a` while `b` is polled in another thread.
fn with_peer_t<R: Send>(a: &mut T, b: &mut T, f: impl FnOnce(&mut T) -> R + Send) -> R {
    both(a, b, f, |_| ()).0
}
