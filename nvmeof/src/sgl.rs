//! SGL descriptors in a command's data pointer, the forms NVMe/RDMA uses.
//!
//! Layouts: NVM Express Base Specification, "SGL Descriptor", as Linux `include/linux/nvme.h`
//! declares them (`struct nvme_sgl_desc`: address 8, length 4, rsvd 3, type 1; `struct
//! nvme_keyed_sgl_desc`: address 8, length 3, key 4, type 1). The type byte: descriptor type in
//! the high nibble, subtype in the low (`NVME_SGL_FMT_*`, `NVME_KEY_SGL_FMT_DATA_DESC`).

/// Descriptor type "data block" (`nvme.h` `NVME_SGL_FMT_DATA_DESC`).
pub const TYPE_DATA_BLOCK: u8 = 0x0;
/// Descriptor type "keyed data block" (`nvme.h` `NVME_KEY_SGL_FMT_DATA_DESC`).
pub const TYPE_KEYED_DATA_BLOCK: u8 = 0x4;
/// Subtype "address" (`nvme.h` `NVME_SGL_FMT_ADDRESS`).
pub const SUB_ADDRESS: u8 = 0x0;
/// Subtype "offset": in-capsule data (`nvme.h` `NVME_SGL_FMT_OFFSET`).
pub const SUB_OFFSET: u8 = 0x1;
/// Subtype "invalidate key" (`nvme.h` `NVME_SGL_FMT_INVALIDATE`).
pub const SUB_INVALIDATE: u8 = 0xf;

/// A remote buffer named by a keyed SGL: the host's address, length and rkey.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedSgl {
    /// The host's virtual address (the MR's iova).
    pub addr: u64,
    /// Bytes (24 bits on the wire).
    pub len: u32,
    /// The rkey.
    pub key: u32,
}

/// What a data pointer describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPtr {
    /// Type 0x01: data in the capsule, `len` bytes at `offset` after the SQE.
    InCapsule {
        /// Offset into the in-capsule data.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// Type 0x40 (`invalidate` false) or 0x4f (`invalidate` true): a remote buffer.
    Keyed {
        /// The remote buffer.
        sgl: KeyedSgl,
        /// Whether the response is to invalidate the key (SEND with invalidate).
        invalidate: bool,
    },
}

/// Why a data pointer is not one a fabrics RDMA target takes; each maps to the status Linux's
/// `drivers/nvme/target/rdma.c` `nvmet_rdma_map_sgl` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SglError {
    /// A data block or keyed data block with another subtype (`NVME_SC_INVALID_FIELD`).
    Subtype(u8),
    /// Another descriptor type (`NVME_SC_SGL_INVALID_TYPE`).
    Type(u8),
}

/// The 16 bytes of an SGL descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sgl(pub [u8; 16]);

impl Sgl {
    /// Byte 15: type (high nibble) and subtype (low nibble).
    pub fn type_byte(&self) -> u8 {
        self.0[15]
    }

    /// Bytes 0-7: the address (or the in-capsule offset).
    pub fn addr(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[0..8]);
        u64::from_le_bytes(a)
    }

    /// Decodes the forms of Linux `nvmet_rdma_map_sgl` (drivers/nvme/target/rdma.c).
    pub fn decode(&self) -> Result<DataPtr, SglError> {
        let t = self.type_byte();
        let b = &self.0;
        match (t >> 4, t & 0xf) {
            (TYPE_DATA_BLOCK, SUB_OFFSET) => Ok(DataPtr::InCapsule {
                offset: self.addr(),
                len: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            }),
            (TYPE_DATA_BLOCK, s) => Err(SglError::Subtype(s)),
            (TYPE_KEYED_DATA_BLOCK, s @ (SUB_ADDRESS | SUB_INVALIDATE)) => Ok(DataPtr::Keyed {
                sgl: KeyedSgl {
                    addr: self.addr(),
                    len: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                    key: u32::from_le_bytes([b[11], b[12], b[13], b[14]]),
                },
                invalidate: s == SUB_INVALIDATE,
            }),
            (TYPE_KEYED_DATA_BLOCK, s) => Err(SglError::Subtype(s)),
            _ => Err(SglError::Type(t)),
        }
    }

    /// A keyed descriptor (type 0x40, or 0x4f with `invalidate`).
    pub fn keyed(sgl: KeyedSgl, invalidate: bool) -> Sgl {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&sgl.addr.to_le_bytes());
        b[8..11].copy_from_slice(&sgl.len.to_le_bytes()[..3]);
        b[11..15].copy_from_slice(&sgl.key.to_le_bytes());
        let sub = if invalidate {
            SUB_INVALIDATE
        } else {
            SUB_ADDRESS
        };
        b[15] = (TYPE_KEYED_DATA_BLOCK << 4) | sub;
        Sgl(b)
    }

    /// An in-capsule data block descriptor (type 0x01).
    pub fn in_capsule(offset: u64, len: u32) -> Sgl {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&offset.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[15] = (TYPE_DATA_BLOCK << 4) | SUB_OFFSET;
        Sgl(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_round_trip() {
        let k = KeyedSgl {
            addr: 0xff31_22dd_8273_e000,
            len: 0x12_3456,
            key: 0x0000_03c9,
        };
        assert_eq!(
            Sgl::keyed(k, true).decode(),
            Ok(DataPtr::Keyed {
                sgl: k,
                invalidate: true
            })
        );
        assert_eq!(Sgl::keyed(k, false).type_byte(), 0x40);
        assert_eq!(
            Sgl::in_capsule(0, 4096).decode(),
            Ok(DataPtr::InCapsule {
                offset: 0,
                len: 4096
            })
        );
        // The capture's admin Connect: SGL 0x4f, 1024 bytes, key 0x3c9.
        let mut b = [0u8; 16];
        b.copy_from_slice(&[
            0x00, 0xe0, 0x73, 0x82, 0xdd, 0x22, 0x31, 0xff, 0x00, 0x04, 0x00, 0xc9, 0x03, 0x00,
            0x00, 0x4f,
        ]);
        let Ok(DataPtr::Keyed { sgl, invalidate }) = Sgl(b).decode() else {
            panic!()
        };
        assert_eq!((sgl.len, sgl.key, invalidate), (1024, 0x3c9, true));
        let mut seg = Sgl::in_capsule(0, 0);
        seg.0[15] = 0x20;
        assert_eq!(seg.decode(), Err(SglError::Type(0x20)));
    }
}
