//! The driver's Ethernet queue as a [`Nic`]: [`mlx5::EthQueue`] sends and receives whole
//! frames already; its refusals map onto [`NicError`], the rest stays the driver's
//! [`EthError`] (a send completed in error carries its status and vendor syndrome).

use mlx5::hal::Hal;
use mlx5::{EthError, EthQueue};

use crate::nic::{Nic, NicError};

impl<H: Hal> Nic for EthQueue<H> {
    type Error = EthError;

    fn mac(&self) -> [u8; 6] {
        EthQueue::mac(self)
    }

    fn mtu(&self) -> usize {
        EthQueue::mtu(self)
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), NicError<EthError>> {
        EthQueue::send(self, frame).map_err(|e| match e {
            EthError::FrameTooLarge { len, max } => NicError::FrameTooLarge { len, max },
            EthError::QueueFull => NicError::QueueFull,
            e => NicError::Device(e),
        })
    }

    fn recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        EthQueue::recv(self, f)
    }
}
