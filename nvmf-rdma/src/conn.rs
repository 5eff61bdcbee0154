//! One connection (one NVMe queue): its rdma_cm id, the core's queue, its receive buffers
//! (one region, a slot per receive of the whole queue depth), its bounce buffers for the
//! admin data the core moves through its staging buffer, and the transfers in flight; and the
//! work request ids that name them in completions.

use alloc::vec;
use alloc::vec::Vec;

use mlx5::hal::Hal;
use mlx5::mr::Access;
use mlx5::{MemoryRegion, ProtectionDomain, QueuePair, RecvWr};
use nvmeof::exec::STAGING_LEN;
use nvmeof::{QueueId, Transfer};
use rdmacm::CmId;

/// What a work request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A receive of slot `index`.
    Recv,
    /// An RDMA READ of command `index` (the tag).
    Read,
    /// A response SEND (its RDMA WRITE, if any, is unsignaled in front of it).
    Resp,
}

/// A work request id: the connection's slot and generation, the kind, the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WrId {
    pub(crate) conn: u16,
    pub(crate) gen: u16,
    pub(crate) kind: Kind,
    pub(crate) index: u16,
}

impl WrId {
    pub(crate) fn encode(self) -> u64 {
        let k = match self.kind {
            Kind::Recv => 0u64,
            Kind::Read => 1,
            Kind::Resp => 2,
        };
        u64::from(self.conn) << 48 | u64::from(self.gen) << 32 | k << 16 | u64::from(self.index)
    }

    pub(crate) fn decode(v: u64) -> Option<WrId> {
        let kind = match (v >> 16) & 0xffff {
            0 => Kind::Recv,
            1 => Kind::Read,
            2 => Kind::Resp,
            _ => return None,
        };
        Some(WrId {
            conn: (v >> 48) as u16,
            gen: (v >> 32) as u16,
            kind,
            index: v as u16,
        })
    }
}

/// One connection's state.
pub(crate) struct Conn<H: Hal> {
    pub(crate) id: CmId,
    pub(crate) queue: QueueId,
    pub(crate) gen: u16,
    /// The host's address.
    pub(crate) ip: [u8; 4],
    /// Receive slots: `depth` of `slot_len` bytes (the SQE and the in-capsule data).
    pub(crate) recv: MemoryRegion<H>,
    pub(crate) slot_len: u32,
    pub(crate) depth: u32,
    /// Bounce slots of [`STAGING_LEN`] bytes, one per command tag.
    pub(crate) bounce: MemoryRegion<H>,
    /// The RDMA READ of each tag in flight.
    pub(crate) reads: Vec<Option<Transfer>>,
    /// RTU seen (or the first capsule told the CM it is).
    pub(crate) established: bool,
    /// Its Connect was announced.
    pub(crate) announced: bool,
    /// The tag of a Connect whose data is on its way by RDMA READ (its NQNs are noted if
    /// it is refused).
    pub(crate) connect_read: Option<usize>,
}

/// The regions of a new connection: `depth` receive slots of `slot_len` bytes and `depth`
/// bounce slots (a command's tag is below the queue's depth).
pub(crate) fn buffers<H: Hal>(
    pd: &ProtectionDomain<H>,
    depth: u32,
    slot_len: u32,
) -> mlx5::Result<(MemoryRegion<H>, MemoryRegion<H>)> {
    let recv = pd.alloc_mr(depth as usize * slot_len as usize, Access::LOCAL_WRITE)?;
    let bounce = pd.alloc_mr(depth as usize * STAGING_LEN, Access::LOCAL_WRITE)?;
    Ok((recv, bounce))
}

impl<H: Hal> Conn<H> {
    pub(crate) fn new(
        id: CmId,
        queue: QueueId,
        gen: u16,
        ip: [u8; 4],
        (recv, bounce): (MemoryRegion<H>, MemoryRegion<H>),
        depth: u32,
        slot_len: u32,
    ) -> Self {
        Conn {
            id,
            queue,
            gen,
            ip,
            recv,
            slot_len,
            depth,
            bounce,
            reads: vec![None; depth as usize],
            established: false,
            announced: false,
            connect_read: None,
        }
    }

    pub(crate) fn wr(&self, conn: usize, kind: Kind, index: usize) -> u64 {
        WrId {
            conn: conn as u16,
            gen: self.gen,
            kind,
            index: index as u16,
        }
        .encode()
    }

    /// Posts the receive of slot `slot`.
    pub(crate) fn post_recv(
        &self,
        qp: &mut QueuePair<H>,
        conn: usize,
        slot: usize,
    ) -> mlx5::Result<()> {
        let off = slot as u64 * u64::from(self.slot_len);
        let sge = [self.recv.sge(off, self.slot_len)];
        qp.post_recv(&[RecvWr {
            wr_id: self.wr(conn, Kind::Recv, slot),
            sges: &sge,
        }])
    }

    /// The bounce slot of tag `tag`'s offset, if the tag has one.
    pub(crate) fn bounce_at(&self, tag: usize) -> Option<u64> {
        (tag < self.depth as usize).then_some((tag * STAGING_LEN) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_request_ids_round_trip() {
        for kind in [Kind::Recv, Kind::Read, Kind::Resp] {
            let w = WrId {
                conn: 0xfffe,
                gen: 0x1234,
                kind,
                index: 0xffff,
            };
            assert_eq!(WrId::decode(w.encode()), Some(w));
        }
        assert_eq!(WrId::decode(3 << 16), None);
    }
}
