//! The NIC the stack runs on, and the smoltcp device over it.
//!
//! A [`Nic`] moves whole Ethernet frames (destination MAC first, no FCS). [`NicDevice`] is the
//! smoltcp [`Device`] over any `Nic`: it copies each received frame once into its own buffer (a
//! `Nic` lends a frame only for the length of a closure, a smoltcp receive token outlives the
//! call that made it), shows every received frame to the ARP snooper of [`crate::arp`] first,
//! and sends what smoltcp builds through [`Nic::send`]. Send errors cannot travel back through
//! smoltcp's transmit token: they are counted in [`NicStats`] and the protocols' own
//! retransmission deals with the loss.

use alloc::vec;
use alloc::vec::Vec;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use crate::arp::Neighbours;

/// Why a NIC refused a frame. `E` is the NIC's own error ([`Nic::Error`]), with the
/// device's status and syndrome where it has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicError<E> {
    /// The frame is longer than [`Nic::mtu`].
    FrameTooLarge {
        /// Its length in bytes.
        len: usize,
        /// The largest frame the NIC sends.
        max: usize,
    },
    /// No room in the send queue now; a later send may succeed.
    QueueFull,
    /// The device failed or refused the frame otherwise.
    Device(E),
}

/// An Ethernet NIC: whole frames in and out, polled.
pub trait Nic {
    /// The NIC's own errors, in [`NicError::Device`].
    type Error: Copy + core::fmt::Debug;
    /// The NIC's own unicast MAC address.
    fn mac(&self) -> [u8; 6];
    /// The largest frame, without FCS, that the NIC sends and takes (1514 for a 1500-byte MTU).
    fn mtu(&self) -> usize;
    /// Sends one frame (destination MAC first). Returns once the NIC owns a copy of it.
    fn send(&mut self, frame: &[u8]) -> Result<(), NicError<Self::Error>>;
    /// Calls `f` with the next received frame, if one is waiting; the frame's buffer is the
    /// NIC's again once `f` returns.
    fn recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R>;
}

/// Counters of the device: what went through it and what it dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicStats<E> {
    /// Frames received and handed to smoltcp.
    pub rx_frames: u64,
    /// Frames received longer than [`Nic::mtu`] (dropped).
    pub rx_too_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames the NIC refused (dropped); the last refusal is in `last_tx_error`.
    pub tx_errors: u64,
    /// The last error of [`Nic::send`].
    pub last_tx_error: Option<NicError<E>>,
}

impl<E> Default for NicStats<E> {
    fn default() -> Self {
        NicStats {
            rx_frames: 0,
            rx_too_large: 0,
            tx_frames: 0,
            tx_errors: 0,
            last_tx_error: None,
        }
    }
}

/// The smoltcp device over a [`Nic`].
pub(crate) struct NicDevice<N: Nic> {
    nic: N,
    rx_buf: Vec<u8>,
    tx_buf: Vec<u8>,
    pub(crate) neighbours: Neighbours,
    pub(crate) stats: NicStats<N::Error>,
}

impl<N: Nic> NicDevice<N> {
    /// The device over `nic`, which snoops ARP into `neighbours`.
    pub(crate) fn new(nic: N, neighbours: Neighbours) -> Self {
        let mtu = nic.mtu();
        NicDevice {
            nic,
            rx_buf: vec![0; mtu],
            tx_buf: vec![0; mtu],
            neighbours,
            stats: NicStats::default(),
        }
    }

    /// The NIC.
    pub(crate) fn nic(&self) -> &N {
        &self.nic
    }

    /// Gives back the NIC.
    pub(crate) fn into_nic(self) -> N {
        self.nic
    }

    /// Builds a frame of `len` bytes with `f` in the transmit buffer and sends it; counts the
    /// outcome. Returns the NIC's refusal, if any.
    pub(crate) fn send_with(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), NicError<N::Error>> {
        TxToken {
            nic: &mut self.nic,
            tx_buf: &mut self.tx_buf,
            stats: &mut self.stats,
        }
        .send(len, f)
        .1
    }
}

/// A received frame, copied out of the NIC.
pub(crate) struct RxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

/// Leave to send one frame.
pub(crate) struct TxToken<'a, N: Nic> {
    nic: &'a mut N,
    tx_buf: &'a mut [u8],
    stats: &'a mut NicStats<N::Error>,
}

impl<N: Nic> TxToken<'_, N> {
    /// Builds a frame of `len` bytes with `f` and sends it: `f`'s result, and the NIC's
    /// refusal (counted).
    fn send<R>(
        self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> (R, Result<(), NicError<N::Error>>) {
        let max = self.tx_buf.len();
        let (r, res) = match self.tx_buf.get_mut(..len) {
            Some(buf) => {
                let r = f(buf);
                (r, self.nic.send(buf))
            }
            // smoltcp never builds a frame beyond the MTU it was given; if it did, it is built
            // in scratch space (the token must return f's result) and dropped.
            None => (
                f(&mut vec![0; len]),
                Err(NicError::FrameTooLarge { len, max }),
            ),
        };
        match res {
            Ok(()) => self.stats.tx_frames += 1,
            Err(e) => {
                self.stats.tx_errors += 1;
                self.stats.last_tx_error = Some(e);
            }
        }
        (r, res)
    }
}

impl<N: Nic> phy::TxToken for TxToken<'_, N> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.send(len, f).0
    }
}

impl<N: Nic> Device for NicDevice<N> {
    type RxToken<'a>
        = RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, N>
    where
        Self: 'a;

    fn receive(&mut self, _: Instant) -> Option<(RxToken<'_>, TxToken<'_, N>)> {
        let NicDevice {
            nic,
            rx_buf,
            tx_buf,
            neighbours,
            stats,
        } = self;
        loop {
            let got = nic.recv(|frame| {
                neighbours.snoop(frame);
                let dst = rx_buf.get_mut(..frame.len())?;
                dst.copy_from_slice(frame);
                Some(frame.len())
            })?;
            match got {
                Some(len) => {
                    stats.rx_frames += 1;
                    let rx = RxToken {
                        frame: &rx_buf[..len],
                    };
                    let tx = TxToken { nic, tx_buf, stats };
                    return Some((rx, tx));
                }
                None => stats.rx_too_large += 1,
            }
        }
    }

    fn transmit(&mut self, _: Instant) -> Option<TxToken<'_, N>> {
        Some(TxToken {
            nic: &mut self.nic,
            tx_buf: &mut self.tx_buf,
            stats: &mut self.stats,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // For Ethernet, smoltcp's MTU is the whole frame without FCS, as `Nic::mtu` is.
        caps.max_transmission_unit = self.nic.mtu();
        caps
    }
}
