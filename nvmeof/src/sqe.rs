//! The 64-byte submission queue entry (command capsule header) as the host sends it.
//!
//! Layout: NVM Express Base Specification, "Submission Queue Entry - Command Format", as Linux
//! `include/linux/nvme.h` declares it (`struct nvme_common_command`, `struct nvme_rw_command`,
//! `struct nvmf_common_command`, `struct nvmf_connect_command`, `struct
//! nvmf_property_get_command`, `struct nvmf_property_set_command`). Multi-byte fields are
//! little-endian.

use crate::sgl::Sgl;

/// Bytes of a submission queue entry (`nvme.h` `struct nvme_command`).
pub const SQE_LEN: usize = 64;

/// `flags` bits 0-1: fused operation (`nvme.h` `NVME_CMD_FUSE_FIRST`, `NVME_CMD_FUSE_SECOND`).
pub const FLAGS_FUSE: u8 = 0x03;
/// `flags` bits 6-7: PSDT (`nvme.h` `NVME_CMD_SGL_ALL`).
pub const FLAGS_PSDT: u8 = 0xc0;
/// PSDT = SGL for data, metadata pointer a single buffer (`nvme.h` `NVME_CMD_SGL_METABUF`):
/// the only form a fabrics target takes (Linux `drivers/nvme/target/core.c` `nvmet_req_init`).
pub const FLAGS_SGL_METABUF: u8 = 0x40;

/// Opcode of every fabrics command (`nvme.h` `nvme_fabrics_command`).
pub const OPC_FABRICS: u8 = 0x7f;

/// A submission queue entry, a view over its 64 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_LEN]);

impl Sqe {
    /// The first 64 bytes of a capsule, or `None` if there are fewer.
    pub fn from_capsule(capsule: &[u8]) -> Option<Sqe> {
        let head: &[u8; SQE_LEN] = capsule.get(..SQE_LEN)?.try_into().ok()?;
        Some(Sqe(*head))
    }

    fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.0[off], self.0[off + 1]])
    }

    fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes([
            self.0[off],
            self.0[off + 1],
            self.0[off + 2],
            self.0[off + 3],
        ])
    }

    fn u64_at(&self, off: usize) -> u64 {
        u64::from(self.u32_at(off)) | (u64::from(self.u32_at(off + 4)) << 32)
    }

    /// Byte 0: the opcode.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// Byte 1: fused operation and PSDT.
    pub fn flags(&self) -> u8 {
        self.0[1]
    }

    /// Bytes 2-3: the command identifier, returned in the CQE.
    pub fn cid(&self) -> u16 {
        self.u16_at(2)
    }

    /// Bytes 4-7: the namespace ID.
    pub fn nsid(&self) -> u32 {
        self.u32_at(4)
    }

    /// Bytes 24-39: the data pointer, an SGL descriptor here.
    pub fn sgl(&self) -> Sgl {
        let mut d = [0u8; 16];
        d.copy_from_slice(&self.0[24..40]);
        Sgl(d)
    }

    /// Command dword `n` (10..=15) at byte `4 * n`.
    pub fn cdw(&self, n: usize) -> u32 {
        self.u32_at(4 * n)
    }

    /// Byte 4 of a fabrics command: the fabrics command type (`struct nvmf_common_command`
    /// `fctype`).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }

    /// Bytes 40-41 of a Connect: the record format (`struct nvmf_connect_command` `recfmt`).
    pub fn connect_recfmt(&self) -> u16 {
        self.u16_at(40)
    }

    /// Bytes 42-43 of a Connect: the queue ID.
    pub fn connect_qid(&self) -> u16 {
        self.u16_at(42)
    }

    /// Bytes 44-45 of a Connect: the submission queue size, 0's based.
    pub fn connect_sqsize(&self) -> u16 {
        self.u16_at(44)
    }

    /// Byte 46 of a Connect: connect attributes.
    pub fn connect_cattr(&self) -> u8 {
        self.0[46]
    }

    /// Bytes 48-51 of a Connect: keep-alive timeout in milliseconds.
    pub fn connect_kato(&self) -> u32 {
        self.u32_at(48)
    }

    /// Byte 40 of a Property Get / Set: attributes (bit 0: 8-byte property).
    pub fn prop_attrib(&self) -> u8 {
        self.0[40]
    }

    /// Bytes 44-47 of a Property Get / Set: the property's offset.
    pub fn prop_offset(&self) -> u32 {
        self.u32_at(44)
    }

    /// Bytes 48-55 of a Property Set: the value.
    pub fn prop_value(&self) -> u64 {
        self.u64_at(48)
    }

    /// Bytes 40-47 of Read / Write / Write Zeroes: the starting LBA.
    pub fn slba(&self) -> u64 {
        self.u64_at(40)
    }

    /// Bytes 48-49 of Read / Write / Write Zeroes: number of logical blocks, 0's based.
    pub fn nlb(&self) -> u16 {
        self.u16_at(48)
    }
}
