//! Bit fields of a CM MAD in IBTA's notation: a byte offset counted from the start of the CM
//! message data (after the 24-byte common MAD header), a bit offset counted from the most
//! significant bit of that byte, and a width; multi-byte fields are big-endian. This is the
//! notation of Linux `include/rdma/ibta_vol1_c12.h` (`CM_FIELD_BLOC`, `CM_FIELD8_LOC`,
//! `CM_FIELD32_LOC`, ...) and of IBTA vol. 1 chapter 12's message tables, so each constant
//! below reads like the table row it comes from.

use crate::mad::{CmError, MAD_HDR_LEN, MAD_LEN};

/// Where a field lives in the CM message data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    /// Byte offset after the common MAD header.
    pub byte: usize,
    /// Bit offset from the most significant bit of that byte.
    pub bit: u32,
    /// Width in bits (1..=64).
    pub width: u32,
}

/// A field at `byte`, starting at bit `bit` (0 = MSB), `width` bits wide.
pub(crate) const fn loc(byte: usize, bit: u32, width: u32) -> Loc {
    Loc { byte, bit, width }
}

impl Loc {
    /// The same field `delta` bytes further on (the alternate path repeats the primary's).
    pub(crate) const fn plus(self, delta: usize) -> Loc {
        Loc {
            byte: self.byte + delta,
            ..self
        }
    }

    fn first_bit(self) -> usize {
        (MAD_HDR_LEN + self.byte) * 8 + self.bit as usize
    }

    /// Reads the field.
    pub(crate) fn get(self, mad: &[u8; MAD_LEN]) -> u64 {
        let start = self.first_bit();
        (0..self.width as usize).fold(0u64, |acc, i| {
            let b = start + i;
            (acc << 1) | u64::from((mad[b / 8] >> (7 - b % 8)) & 1)
        })
    }

    /// Reads a field of at most 32 bits.
    pub(crate) fn get32(self, mad: &[u8; MAD_LEN]) -> u32 {
        self.get(mad) as u32
    }

    /// Reads a field of at most 16 bits.
    pub(crate) fn get16(self, mad: &[u8; MAD_LEN]) -> u16 {
        self.get(mad) as u16
    }

    /// Reads a field of at most 8 bits.
    pub(crate) fn get8(self, mad: &[u8; MAD_LEN]) -> u8 {
        self.get(mad) as u8
    }

    /// Reads a one-bit field.
    pub(crate) fn flag(self, mad: &[u8; MAD_LEN]) -> bool {
        self.get(mad) != 0
    }

    /// Writes the field; a value wider than the field is refused, nothing written.
    pub(crate) fn set(self, mad: &mut [u8; MAD_LEN], v: impl Into<u64>) -> Result<(), CmError> {
        let v = v.into();
        if self.width < 64 && v >> self.width != 0 {
            return Err(CmError::FieldRange {
                bit_offset: self.first_bit() as u16,
                width: self.width as u8,
                value: v,
            });
        }
        let start = self.first_bit();
        for i in 0..self.width as usize {
            let b = start + i;
            let bit = ((v >> (self.width as usize - 1 - i)) & 1) as u8;
            let mask = 1u8 << (7 - b % 8);
            mad[b / 8] = (mad[b / 8] & !mask) | (bit << (7 - b % 8));
        }
        Ok(())
    }
}

/// A field the tables split over several places (the vendor IDs), high part first.
pub(crate) fn get_split(mad: &[u8; MAD_LEN], parts: &[Loc]) -> u32 {
    parts.iter().fold(0u64, |v, p| (v << p.width) | p.get(mad)) as u32
}

/// Writes a split field; a value wider than all its parts together is refused.
pub(crate) fn set_split(mad: &mut [u8; MAD_LEN], parts: &[Loc], v: u32) -> Result<(), CmError> {
    let width: u32 = parts.iter().map(|p| p.width).sum();
    if u64::from(v) >> width != 0 {
        return Err(CmError::FieldRange {
            bit_offset: parts[0].first_bit() as u16,
            width: width as u8,
            value: v.into(),
        });
    }
    let mut shift = width;
    for p in parts {
        shift -= p.width;
        p.set(mad, (u64::from(v) >> shift) & ((1 << p.width) - 1))?;
    }
    Ok(())
}

/// A byte range of the CM message data: a GID, the REJ ARI, private data.
pub(crate) fn bytes<const N: usize>(mad: &[u8; MAD_LEN], byte: usize) -> [u8; N] {
    let s = MAD_HDR_LEN + byte;
    let mut out = [0u8; N];
    out.copy_from_slice(&mad[s..s + N]);
    out
}

/// Writes a byte range of the CM message data.
pub(crate) fn put(mad: &mut [u8; MAD_LEN], byte: usize, src: &[u8]) {
    let s = MAD_HDR_LEN + byte;
    mad[s..s + src.len()].copy_from_slice(src);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_count_from_the_msb_and_round_trip() {
        let mut m = [0u8; MAD_LEN];
        // ibta_vol1_c12.h CM_REQ_TRANSPORT_SERVICE_TYPE: byte 43, bits 5..7.
        loc(43, 5, 2).set(&mut m, 3u8).unwrap();
        assert_eq!(m[MAD_HDR_LEN + 43], 0b0000_0110);
        loc(43, 0, 5).set(&mut m, 20u8).unwrap();
        assert_eq!(m[MAD_HDR_LEN + 43], 0b1010_0110);
        assert_eq!(loc(43, 0, 5).get(&m), 20);
        assert_eq!(loc(43, 5, 2).get(&m), 3);
        // A 20-bit field across three bytes (the REQ's flow label).
        loc(88, 0, 20).set(&mut m, 0x2e3f3u32).unwrap();
        assert_eq!(&m[MAD_HDR_LEN + 88..MAD_HDR_LEN + 91], &[0x2e, 0x3f, 0x30]);
        assert_eq!(loc(88, 0, 20).get(&m), 0x2e3f3);
        loc(8, 0, 64).set(&mut m, u64::MAX).unwrap();
        assert_eq!(loc(8, 0, 64).get(&m), u64::MAX);
    }

    #[test]
    fn too_wide_values_are_refused() {
        let mut m = [0u8; MAD_LEN];
        let e = loc(43, 0, 5).set(&mut m, 32u8).unwrap_err();
        assert_eq!(
            e,
            CmError::FieldRange {
                bit_offset: (24 + 43) * 8,
                width: 5,
                value: 32
            }
        );
        assert_eq!(m, [0u8; MAD_LEN]);
    }
}
