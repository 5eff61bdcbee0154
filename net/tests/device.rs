//! The device under the stack: what it does with frames a NIC refuses or hands in too long.

mod common;

use common::*;
use net::{Nic, NicError, Stack, StackConfig};

/// A NIC that refuses every frame and hands in one frame of `rx_len` bytes, once.
struct Stubborn {
    rx_len: Option<usize>,
    rx: Vec<u8>,
}

impl Nic for Stubborn {
    type Error = ();
    fn mac(&self) -> [u8; 6] {
        MAC_A
    }
    fn mtu(&self) -> usize {
        MTU
    }
    fn can_send(&mut self) -> bool {
        true
    }
    fn tx_buffer(&mut self, _: usize) -> Result<&mut [u8], NicError<()>> {
        Err(NicError::QueueFull)
    }
    fn post_tx(&mut self, _: usize) -> Result<(), NicError<()>> {
        Err(NicError::QueueFull)
    }
    fn rx_frame(&mut self) -> Result<Option<&[u8]>, ()> {
        let Some(len) = self.rx_len else {
            return Ok(None);
        };
        self.rx = vec![0xff; len];
        Ok(Some(&self.rx))
    }
    fn rx_done(&mut self) -> Result<(), ()> {
        self.rx_len = None;
        Ok(())
    }
}

#[test]
fn refused_and_oversized_frames_are_counted() {
    let clock = StdClock(std::time::Instant::now());
    let nic = Stubborn {
        rx_len: Some(MTU + 1),
        rx: Vec::new(),
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
