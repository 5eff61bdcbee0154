//! The driver's Ethernet queue as a [`Nic`]: [`mlx5::EthQueue`] hands its transmit and
//! receive buffers in place already; its refusals map onto [`NicError`], the rest stays the
//! driver's [`EthError`] (a receive completed in error carries its status and vendor
//! syndrome). A send completion in error is kept by the queue
//! ([`mlx5::EthQueue::take_send_error`]): the frame it concerns was posted earlier.

use mlx5::hal::Hal;
use mlx5::{EthError, EthQueue};

use crate::nic::{Nic, NicError};

/// The driver's refusal as the stack's.
fn refusal(e: EthError) -> NicError<EthError> {
    match e {
        EthError::FrameTooLarge { len, max } => NicError::FrameTooLarge { len, max },
        EthError::QueueFull => NicError::QueueFull,
        e => NicError::Device(e),
    }
}

impl<H: Hal> Nic for EthQueue<H> {
    type Error = EthError;

    fn mac(&self) -> [u8; 6] {
        EthQueue::mac(self)
    }

    fn mtu(&self) -> usize {
        EthQueue::mtu(self)
    }

    fn can_send(&mut self) -> bool {
        EthQueue::can_send(self)
    }

    fn tx_buffer(&mut self, len: usize) -> Result<&mut [u8], NicError<EthError>> {
        EthQueue::tx_buffer(self, len).map_err(refusal)
    }

    fn post_tx(&mut self, len: usize) -> Result<(), NicError<EthError>> {
        EthQueue::post_tx(self, len).map_err(refusal)
    }

    fn rx_frame(&mut self) -> Result<Option<&[u8]>, EthError> {
        EthQueue::rx_frame(self)
    }

    fn rx_done(&mut self) -> Result<(), EthError> {
        EthQueue::rx_done(self)
    }
}
