//! The NIC the stack runs on, and the smoltcp device over it.
//!
//! A [`Nic`] moves whole Ethernet frames (destination MAC first, no FCS) in its own buffers.
//! [`NicDevice`] is the smoltcp [`Device`] over any `Nic`, with no copy between the NIC's
//! buffers and smoltcp: a receive token reads the frame in place in the NIC's receive buffer
//! (shown to the ARP snooper of [`crate::arp`] first) and gives it back afterwards; a transmit
//! token has smoltcp build the frame in place in the NIC's transmit buffer. The one exception
//! is the transmit token smoltcp gets with a receive token and uses while the received frame
//! is still lent (its reply: an ACK, an ARP or ICMP answer): that reply is built aside and
//! copied to the NIC once the received frame is given back. When the NIC has no room,
//! [`Device::transmit`] and [`Device::receive`] say so and smoltcp holds its frames back.
//! Send and receive errors cannot travel back through smoltcp's tokens: they are counted in
//! [`NicStats`] and the protocols' own retransmission deals with the loss.

use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

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

/// An Ethernet NIC: whole frames in and out of its own buffers, polled.
pub trait Nic {
    /// The NIC's own errors, in [`NicError::Device`].
    type Error: Copy + core::fmt::Debug;
    /// The NIC's own unicast MAC address.
    fn mac(&self) -> [u8; 6];
    /// The largest frame, without FCS, that the NIC sends and takes (1514 for a 1500-byte MTU).
    fn mtu(&self) -> usize;
    /// Whether a frame has room to be sent now (a NIC that cannot tell says yes and lets
    /// [`Nic::tx_buffer`] refuse).
    fn can_send(&mut self) -> bool;
    /// The NIC's next transmit buffer, `len` bytes, for a frame to be written in place and
    /// sent by [`Nic::post_tx`].
    fn tx_buffer(&mut self, len: usize) -> Result<&mut [u8], NicError<Self::Error>>;
    /// Sends the frame of `len` bytes written in the buffer [`Nic::tx_buffer`] gave.
    fn post_tx(&mut self, len: usize) -> Result<(), NicError<Self::Error>>;
    /// The next received frame, in place in the NIC's buffer, or `None` when none is there;
    /// the same frame until [`Nic::rx_done`] gives it back.
    fn rx_frame(&mut self) -> Result<Option<&[u8]>, Self::Error>;
    /// Gives back the frame [`Nic::rx_frame`] handed (nothing when none is held).
    fn rx_done(&mut self) -> Result<(), Self::Error>;
    /// Sends a copy of `frame` (destination MAC first).
    fn send(&mut self, frame: &[u8]) -> Result<(), NicError<Self::Error>> {
        self.tx_buffer(frame.len())?.copy_from_slice(frame);
        self.post_tx(frame.len())
    }
}

/// Counters of the device: what went through it and what it dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicStats<E> {
    /// Frames received and handed to smoltcp.
    pub rx_frames: u64,
    /// Frames received longer than [`Nic::mtu`] (dropped).
    pub rx_too_large: u64,
    /// Receives the NIC failed (a frame lost); the last failure is in `last_rx_error`.
    pub rx_errors: u64,
    /// The last error of [`Nic::rx_frame`] or [`Nic::rx_done`].
    pub last_rx_error: Option<E>,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames the NIC refused (dropped); the last refusal is in `last_tx_error`.
    pub tx_errors: u64,
    /// The last refusal of [`Nic::tx_buffer`] or [`Nic::post_tx`].
    pub last_tx_error: Option<NicError<E>>,
    /// Times smoltcp was told to hold its frames back because the NIC had no room.
    pub tx_full: u64,
}

impl<E> Default for NicStats<E> {
    fn default() -> Self {
        NicStats {
            rx_frames: 0,
            rx_too_large: 0,
            rx_errors: 0,
            last_rx_error: None,
            tx_frames: 0,
            tx_errors: 0,
            last_tx_error: None,
            tx_full: 0,
        }
    }
}

impl<E> NicStats<E> {
    fn rx_failed(&mut self, e: E) {
        self.rx_errors += 1;
        self.last_rx_error = Some(e);
    }

    fn tx_outcome(&mut self, res: Result<(), NicError<E>>) {
        match res {
            Ok(()) => self.tx_frames += 1,
            Err(e) => {
                self.tx_errors += 1;
                self.last_tx_error = Some(e);
            }
        }
    }
}

/// A reply smoltcp built with the transmit token of a receive, while the received frame was
/// still lent: sent when the frame is given back.
pub(crate) struct Reply {
    buf: Vec<u8>,
    len: Option<usize>,
}

/// The smoltcp device over a [`Nic`].
pub(crate) struct NicDevice<N: Nic> {
    nic: N,
    reply: RefCell<Reply>,
    /// Frames the stack itself hands smoltcp before the NIC's (a static neighbour's ARP).
    injected: Vec<Vec<u8>>,
    pub(crate) neighbours: Neighbours,
    pub(crate) stats: NicStats<N::Error>,
}

impl<N: Nic> NicDevice<N> {
    /// The device over `nic`, which snoops ARP into `neighbours`.
    pub(crate) fn new(nic: N, neighbours: Neighbours) -> Self {
        let mtu = nic.mtu();
        NicDevice {
            nic,
            reply: RefCell::new(Reply {
                buf: vec![0; mtu],
                len: None,
            }),
            injected: Vec::new(),
            neighbours,
            stats: NicStats::default(),
        }
    }

    /// The NIC.
    pub(crate) fn nic(&self) -> &N {
        &self.nic
    }

    /// Hands `frame` to smoltcp as if received, before the NIC's next frame.
    pub(crate) fn inject(&mut self, frame: Vec<u8>) {
        self.injected.push(frame);
    }

    /// Gives back the NIC.
    pub(crate) fn into_nic(self) -> N {
        self.nic
    }

    /// Builds a frame of `len` bytes with `f` in place in the NIC's transmit buffer and sends
    /// it; counts the outcome. Returns the NIC's refusal, if any.
    pub(crate) fn send_with(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<(), NicError<N::Error>> {
        send(&mut self.nic, &mut self.stats, len, f).1
    }
}

/// Builds a frame of `len` bytes with `f` in place in the NIC's transmit buffer and sends
/// it: `f`'s result, and the NIC's refusal (counted). A refused frame is built in scratch
/// space (a token must return `f`'s result) and dropped.
fn send<N: Nic, R>(
    nic: &mut N,
    stats: &mut NicStats<N::Error>,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> (R, Result<(), NicError<N::Error>>) {
    let (r, res) = match nic.tx_buffer(len) {
        Ok(buf) => {
            let r = f(buf);
            (r, nic.post_tx(len))
        }
        Err(e) => (f(&mut vec![0; len]), Err(e)),
    };
    stats.tx_outcome(res);
    (r, res)
}

/// Sends the reply left aside, if any (a copy from the reply buffer to the NIC's).
fn flush<N: Nic>(nic: &mut N, stats: &mut NicStats<N::Error>, reply: &RefCell<Reply>) {
    let Ok(mut reply) = reply.try_borrow_mut() else {
        return;
    };
    if let Some(len) = reply.len.take() {
        let frame = &reply.buf[..len];
        // Counted in `stats`.
        let _ = send(nic, stats, len, |buf| buf.copy_from_slice(frame));
    }
}

/// A received frame, read in place in the NIC's buffer when consumed (or a frame the stack
/// injected).
pub(crate) struct RxToken<'a, N: Nic> {
    injected: Option<Vec<u8>>,
    nic: &'a mut N,
    neighbours: &'a mut Neighbours,
    stats: &'a mut NicStats<N::Error>,
    reply: &'a RefCell<Reply>,
}

impl<N: Nic> phy::RxToken for RxToken<'_, N> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let RxToken {
            injected,
            nic,
            neighbours,
            stats,
            reply,
        } = self;
        if let Some(frame) = injected {
            let r = f(&frame);
            flush(nic, stats, reply);
            return r;
        }
        // The frame `receive` found is held by the NIC until `rx_done`; should it be gone,
        // smoltcp gets an empty frame, which it skips.
        let r = match nic.rx_frame() {
            Ok(Some(frame)) => {
                neighbours.snoop(frame);
                stats.rx_frames += 1;
                f(frame)
            }
            Ok(None) => f(&[]),
            Err(e) => {
                stats.rx_failed(e);
                f(&[])
            }
        };
        if let Err(e) = nic.rx_done() {
            stats.rx_failed(e);
        }
        flush(nic, stats, reply);
        r
    }
}

/// Leave to send one frame: built in place in the NIC's transmit buffer, or, for the token
/// of a receive, built aside and sent once the received frame is given back.
pub(crate) enum TxToken<'a, N: Nic> {
    Direct {
        nic: &'a mut N,
        stats: &'a mut NicStats<N::Error>,
    },
    Reply(&'a RefCell<Reply>),
}

impl<N: Nic> phy::TxToken for TxToken<'_, N> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        match self {
            TxToken::Direct { nic, stats } => send(nic, stats, len, f).0,
            TxToken::Reply(reply) => match reply.try_borrow_mut() {
                Ok(mut reply) => {
                    if reply.buf.len() < len {
                        // Longer than the MTU: the NIC refuses it when it is sent.
                        reply.buf.resize(len, 0);
                    }
                    reply.len = Some(len);
                    f(&mut reply.buf[..len])
                }
                // Never: one reply token per receive, consumed once.
                Err(_) => f(&mut vec![0; len]),
            },
        }
    }
}

impl<N: Nic> Device for NicDevice<N> {
    type RxToken<'a>
        = RxToken<'a, N>
    where
        Self: 'a;
    type TxToken<'a>
        = TxToken<'a, N>
    where
        Self: 'a;

    /// A frame when one is there and a reply to it has room (else smoltcp waits).
    fn receive(&mut self, _: Instant) -> Option<(RxToken<'_, N>, TxToken<'_, N>)> {
        let NicDevice {
            nic,
            reply,
            injected,
            neighbours,
            stats,
        } = self;
        flush(nic, stats, reply);
        if !nic.can_send() {
            stats.tx_full += 1;
            return None;
        }
        let injected = injected.pop();
        let mtu = nic.mtu();
        while injected.is_none() {
            match nic.rx_frame() {
                Ok(Some(frame)) if frame.len() > mtu => {
                    stats.rx_too_large += 1;
                    if let Err(e) = nic.rx_done() {
                        stats.rx_failed(e);
                        return None;
                    }
                }
                Ok(Some(_)) => break,
                Ok(None) => return None,
                Err(e) => {
                    stats.rx_failed(e);
                    return None;
                }
            }
        }
        let rx = RxToken {
            injected,
            nic,
            neighbours,
            stats,
            reply,
        };
        Some((rx, TxToken::Reply(reply)))
    }

    /// Leave to send when the NIC has room; otherwise `None`, and smoltcp keeps its frame.
    fn transmit(&mut self, _: Instant) -> Option<TxToken<'_, N>> {
        flush(&mut self.nic, &mut self.stats, &self.reply);
        if !self.nic.can_send() {
            self.stats.tx_full += 1;
            return None;
        }
        Some(TxToken::Direct {
            nic: &mut self.nic,
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
