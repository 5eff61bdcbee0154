//! The 16-byte completion queue entry (response capsule) the target sends back.
//!
//! Layout: NVM Express Base Specification, "Completion Queue Entry", as Linux
//! `include/linux/nvme.h` declares it (`struct nvme_completion`): result (8 bytes), SQ head,
//! SQ ID, command ID, status (status code shifted left by one over the phase bit, which a
//! fabrics target leaves 0: Linux `drivers/nvme/target/core.c` `nvmet_set_status`).

/// Bytes of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// A completion queue entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific result (dwords 0 and 1).
    pub result: u64,
    /// The submission queue head after this command.
    pub sqhd: u16,
    /// The submission queue (queue ID) of the command.
    pub sqid: u16,
    /// The command's identifier.
    pub cid: u16,
    /// The status code, unshifted: SCT in bits 8-10, SC in bits 0-7, More bit 13 and DNR bit
    /// 14 (the value Linux's `NVME_SC_*` constants carry).
    pub status: u16,
}

impl Cqe {
    /// The 16 bytes on the wire.
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..8].copy_from_slice(&self.result.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&(self.status << 1).to_le_bytes());
        b
    }

    /// Reads 16 bytes (the phase bit is dropped).
    pub fn from_bytes(b: &[u8; CQE_LEN]) -> Cqe {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let mut r = [0u8; 8];
        r.copy_from_slice(&b[0..8]);
        Cqe {
            result: u64::from_le_bytes(r),
            sqhd: u16_at(8),
            sqid: u16_at(10),
            cid: u16_at(12),
            status: u16_at(14) >> 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capture_s_connect_response() {
        // nvmeof.pcap frame 26: CNTLID 1, SQ head 1, SQ 0, command 0.
        let c = Cqe {
            result: 1,
            sqhd: 1,
            sqid: 0,
            cid: 0,
            status: 0,
        };
        let b = c.to_bytes();
        assert_eq!(b, [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Cqe::from_bytes(&b), c);
        // The status sits over the phase bit.
        let e = Cqe {
            status: 0x4002,
            ..c
        };
        assert_eq!(e.to_bytes()[14..], [0x04, 0x80]);
    }
}
