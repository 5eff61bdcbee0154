//! The device under the stack: what it does with frames a NIC refuses or hands in too long.

mod common;

use common::*;
use net::{Nic, NicError, Stack, StackConfig};

/// A NIC that refuses every frame and hands in one frame of `rx_len` bytes, once.
struct Stubborn {
    rx_len: Option<usize>,
}

impl Nic for Stubborn {
    type Error = ();
    fn mac(&self) -> [u8; 6] {
        MAC_A
    }
    fn mtu(&self) -> usize {
        MTU
    }
    fn send(&mut self, _: &[u8]) -> Result<(), NicError<()>> {
        Err(NicError::QueueFull)
    }
    fn recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let len = self.rx_len.take()?;
        Some(f(&vec![0xff; len]))
    }
}

#[test]
fn refused_and_oversized_frames_are_counted() {
    let clock = StdClock(std::time::Instant::now());
    let nic = Stubborn {
        rx_len: Some(MTU + 1),
    };
    let mut s = Stack::new(nic, clock, &StackConfig::new(IP_A, 24)).unwrap();
    let d = s.now_us() + 100_000;
    assert_eq!(
        s.resolve(IP_B, d),
        Err(net::NetError::ArpTimeout { ip: IP_B })
    );
    let st = s.stats();
    assert_eq!(st.rx_too_large, 1);
    assert_eq!(st.rx_frames, 0);
    assert_eq!(st.tx_frames, 0);
    assert!(st.tx_errors >= 1);
    assert_eq!(st.last_tx_error, Some(NicError::QueueFull));
}
