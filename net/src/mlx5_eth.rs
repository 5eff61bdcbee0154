//! The [`Nic`] of the unikernel: the mlx5 driver's Ethernet queue ([`mlx5::EthQueue`], opened
//! with `Context::open_eth`). The queue already moves whole frames without FCS, so each call
//! is the queue's own; only the refusals are sorted into [`NicError`]'s kinds.

use mlx5::{EthError, EthQueue, Hal};

use crate::{Nic, NicError};

impl<H: Hal> Nic for EthQueue<H> {
    /// The driver's error, with the device's completion status where there is one.
    type Error = EthError;

    fn mac(&self) -> [u8; 6] {
        EthQueue::mac(self)
    }

    fn mtu(&self) -> usize {
        EthQueue::mtu(self)
    }

    fn send(&mut self, frame: &[u8]) -> Result<(), NicError<EthError>> {
        EthQueue::send(self, frame).map_err(nic_error)
    }

    fn recv<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        EthQueue::recv(self, f)
    }
}

/// A refusal of [`EthQueue::send`] as the stack counts it: too large and a full queue keep
/// their kinds (a later send may succeed after a full queue), everything else is the device's.
fn nic_error(e: EthError) -> NicError<EthError> {
    match e {
        EthError::FrameTooLarge { len, max } => NicError::FrameTooLarge { len, max },
        EthError::QueueFull => NicError::QueueFull,
        e => NicError::Device(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_their_kind() {
        assert_eq!(
            nic_error(EthError::FrameTooLarge {
                len: 1600,
                max: 1514
            }),
            NicError::FrameTooLarge {
                len: 1600,
                max: 1514
            }
        );
        assert_eq!(nic_error(EthError::QueueFull), NicError::QueueFull);
        let short = EthError::FrameTooShort { len: 3, min: 14 };
        assert_eq!(nic_error(short), NicError::Device(short));
    }
}
