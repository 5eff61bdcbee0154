//! Bit-field accessors with `MLX5_SET` / `MLX5_GET` semantics.
//!
//! A PRM field is `(offset, width)` in bits, where offset 0 is the most significant bit of
//! the first big-endian dword of the structure. A field of width 1..=32 lives inside one
//! dword: dword index `offset / 32`, and, counting bits from the dword's LSB, it occupies
//! `shift .. shift + width` with `shift = 32 - offset % 32 - width`. 64-bit fields are
//! big-endian 64-bit words. Wider fields (GIDs, MACs split in two, mailbox data) are
//! byte-aligned byte arrays.
//!
//! Every accessor checks the buffer length and the field shape and returns [`Error`]
//! instead of panicking or touching bytes outside the field's dword(s).

use core::fmt;

/// Why an accessor refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the bytes the access needs (`needed` bytes from its start).
    OutOfBounds {
        /// Buffer length the access needs.
        needed: usize,
        /// Actual buffer length.
        len: usize,
    },
    /// The field's shape does not suit the accessor: `get`/`set` need `1..=32` bits inside one
    /// dword, `get64`/`set64` need 64 bits starting on a dword boundary, the byte accessors need
    /// a byte-aligned offset and width.
    BadShape {
        /// Field offset in bits.
        offset: u32,
        /// Field width in bits.
        width: u32,
    },
    /// `set_checked`: the value does not fit in the field.
    ValueTooWide {
        /// Field width in bits.
        width: u32,
        /// The rejected value.
        value: u64,
    },
    /// `write_bytes` / `read_bytes`: the slice length differs from the field's byte length.
    LengthMismatch {
        /// Field length in bytes.
        field: usize,
        /// Slice length.
        given: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::OutOfBounds { needed, len } => {
                write!(f, "buffer too short: need {needed} bytes, have {len}")
            }
            Error::BadShape { offset, width } => {
                write!(
                    f,
                    "field at bit {offset:#x} width {width:#x} does not suit this accessor"
                )
            }
            Error::ValueTooWide { width, value } => {
                write!(f, "value {value:#x} does not fit in {width} bits")
            }
            Error::LengthMismatch { field, given } => {
                write!(f, "field is {field} bytes, slice is {given} bytes")
            }
        }
    }
}

/// Result of a field access.
pub type Result<T> = core::result::Result<T, Error>;

/// A PRM field: bit offset from the MSB of the first big-endian dword, and bit width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Offset in bits from the most significant bit of byte 0.
    pub offset: u32,
    /// Width in bits.
    pub width: u32,
}

#[inline(always)]
fn dword(buf: &[u8], byte: usize) -> Result<[u8; 4]> {
    match buf.get(byte..byte + 4) {
        Some(s) => Ok([s[0], s[1], s[2], s[3]]),
        None => Err(Error::OutOfBounds {
            needed: byte + 4,
            len: buf.len(),
        }),
    }
}

impl Field {
    /// A field of `width` bits at bit `offset`.
    #[inline(always)]
    pub const fn new(offset: u32, width: u32) -> Field {
        Field { offset, width }
    }

    /// One past the last bit (`offset + width`, saturating).
    #[inline(always)]
    pub const fn end(self) -> u32 {
        self.offset.saturating_add(self.width)
    }

    /// Byte offset of the field's first byte (`offset / 8`).
    #[inline(always)]
    pub const fn byte_offset(self) -> usize {
        (self.offset / 8) as usize
    }

    /// Number of bytes the field spans when byte-aligned (`width / 8`).
    #[inline(always)]
    pub const fn byte_len(self) -> usize {
        (self.width / 8) as usize
    }

    /// Index of the big-endian dword holding a `<= 32`-bit field (`offset / 32`).
    #[inline(always)]
    pub const fn dword_index(self) -> usize {
        (self.offset / 32) as usize
    }

    /// LSB position of a `<= 32`-bit field inside its dword: `32 - offset % 32 - width`.
    /// Only meaningful when [`Field::fits_dword`] holds.
    #[inline(always)]
    pub const fn shift(self) -> u32 {
        32u32
            .wrapping_sub(self.offset % 32)
            .wrapping_sub(self.width)
    }

    /// Mask of the field's value, unshifted (`(1 << width) - 1`; all ones for 32 bits).
    #[inline(always)]
    pub const fn mask(self) -> u32 {
        if self.width >= 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// True when the field is 1..=32 bits and does not cross a dword boundary
    /// (the shape `MLX5_SET` / `MLX5_GET` accept).
    #[inline(always)]
    pub const fn fits_dword(self) -> bool {
        self.width >= 1 && self.width <= 32 && (self.offset % 32) + self.width <= 32
    }

    /// True when offset and width are both multiples of 8 bits.
    #[inline(always)]
    pub const fn is_byte_aligned(self) -> bool {
        self.offset.is_multiple_of(8) && self.width.is_multiple_of(8)
    }

    /// This field as a member of a nested struct placed at `outer` (e.g.
    /// `qpc::LOG_SQ_SIZE.within(create_qp_in::QPC)` is `create_qp_in.qpc.log_sq_size`).
    #[inline(always)]
    pub const fn within(self, outer: Field) -> Field {
        Field {
            offset: outer.offset.saturating_add(self.offset),
            width: self.width,
        }
    }

    /// The same field `bits` further on (saturating).
    #[inline(always)]
    pub const fn shifted(self, bits: u32) -> Field {
        Field {
            offset: self.offset.saturating_add(bits),
            width: self.width,
        }
    }

    /// `MLX5_GET`: read a 1..=32-bit field.
    #[inline]
    pub fn get(self, buf: &[u8]) -> Result<u32> {
        if !self.fits_dword() {
            return Err(self.bad());
        }
        let dw = u32::from_be_bytes(dword(buf, self.dword_index() * 4)?);
        Ok((dw >> self.shift()) & self.mask())
    }

    /// `MLX5_SET`: write a 1..=32-bit field, read-modify-write of its big-endian dword. Like
    /// the C macro, `value` is truncated to the field width; see [`Field::set_checked`].
    #[inline]
    pub fn set(self, buf: &mut [u8], value: u32) -> Result<()> {
        if !self.fits_dword() {
            return Err(self.bad());
        }
        let at = self.dword_index() * 4;
        let len = buf.len();
        let Some(slot) = buf.get_mut(at..at + 4) else {
            return Err(Error::OutOfBounds {
                needed: at + 4,
                len,
            });
        };
        let old = u32::from_be_bytes([slot[0], slot[1], slot[2], slot[3]]);
        let mask = self.mask() << self.shift();
        let new = (old & !mask) | ((value & self.mask()) << self.shift());
        slot.copy_from_slice(&new.to_be_bytes());
        Ok(())
    }

    /// Like [`Field::set`], but refuses values wider than the field instead of truncating.
    #[inline]
    pub fn set_checked(self, buf: &mut [u8], value: u32) -> Result<()> {
        if self.fits_dword() && value & !self.mask() != 0 {
            return Err(Error::ValueTooWide {
                width: self.width,
                value: value as u64,
            });
        }
        self.set(buf, value)
    }

    /// `MLX5_GET64`: read a 64-bit big-endian field. The field must start on a dword
    /// boundary (the C macro additionally requires a 64-bit boundary; for 32-bit-aligned
    /// fields the big-endian value is the same).
    #[inline]
    pub fn get64(self, buf: &[u8]) -> Result<u64> {
        if self.width != 64 || !self.offset.is_multiple_of(32) {
            return Err(self.bad());
        }
        let at = self.byte_offset();
        match buf.get(at..at + 8) {
            Some(s) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(s);
                Ok(u64::from_be_bytes(b))
            }
            None => Err(Error::OutOfBounds {
                needed: at + 8,
                len: buf.len(),
            }),
        }
    }

    /// `MLX5_SET64`: write a 64-bit big-endian field (see [`Field::get64`] for alignment).
    #[inline]
    pub fn set64(self, buf: &mut [u8], value: u64) -> Result<()> {
        if self.width != 64 || !self.offset.is_multiple_of(32) {
            return Err(self.bad());
        }
        let at = self.byte_offset();
        let len = buf.len();
        match buf.get_mut(at..at + 8) {
            Some(s) => {
                s.copy_from_slice(&value.to_be_bytes());
                Ok(())
            }
            None => Err(Error::OutOfBounds {
                needed: at + 8,
                len,
            }),
        }
    }

    /// Read a 1..=32-bit field or a 64-bit field as `u64` (convenient for dumps).
    #[inline]
    pub fn get_u64(self, buf: &[u8]) -> Result<u64> {
        if self.width == 64 {
            self.get64(buf)
        } else {
            self.get(buf).map(u64::from)
        }
    }

    /// Write a 1..=32-bit field or a 64-bit field from a `u64`, refusing values that do not fit.
    #[inline]
    pub fn set_u64(self, buf: &mut [u8], value: u64) -> Result<()> {
        if self.width == 64 {
            return self.set64(buf, value);
        }
        match u32::try_from(value) {
            Ok(v) => self.set_checked(buf, v),
            Err(_) => Err(Error::ValueTooWide {
                width: self.width,
                value,
            }),
        }
    }

    /// The bytes of a byte-aligned field (GIDs, MAC halves, nested structs, mailbox data).
    #[inline]
    pub fn bytes(self, buf: &[u8]) -> Result<&[u8]> {
        let (at, n) = self.byte_range()?;
        let len = buf.len();
        buf.get(at..at + n).ok_or(Error::OutOfBounds {
            needed: at + n,
            len,
        })
    }

    /// Mutable bytes of a byte-aligned field.
    #[inline]
    pub fn bytes_mut(self, buf: &mut [u8]) -> Result<&mut [u8]> {
        let (at, n) = self.byte_range()?;
        let len = buf.len();
        buf.get_mut(at..at + n).ok_or(Error::OutOfBounds {
            needed: at + n,
            len,
        })
    }

    /// Copy `src` (exactly [`Field::byte_len`] bytes) into a byte-aligned field.
    #[inline]
    pub fn write_bytes(self, buf: &mut [u8], src: &[u8]) -> Result<()> {
        let dst = self.bytes_mut(buf)?;
        if dst.len() != src.len() {
            return Err(Error::LengthMismatch {
                field: dst.len(),
                given: src.len(),
            });
        }
        dst.copy_from_slice(src);
        Ok(())
    }

    /// Copy a byte-aligned field into `out` (exactly [`Field::byte_len`] bytes).
    #[inline]
    pub fn read_bytes(self, buf: &[u8], out: &mut [u8]) -> Result<()> {
        let src = self.bytes(buf)?;
        if src.len() != out.len() {
            return Err(Error::LengthMismatch {
                field: src.len(),
                given: out.len(),
            });
        }
        out.copy_from_slice(src);
        Ok(())
    }

    #[inline(always)]
    fn byte_range(self) -> Result<(usize, usize)> {
        if !self.is_byte_aligned() {
            return Err(self.bad());
        }
        Ok((self.byte_offset(), self.byte_len()))
    }

    #[cold]
    fn bad(self) -> Error {
        Error::BadShape {
            offset: self.offset,
            width: self.width,
        }
    }
}

/// An array field (`u8 pas[][0x40]`, `u8 event_bitmask[4][0x40]`, ...): `width` is the total
/// declared width in bits (0 for a flexible array at the end of a command), `elem_width` the
/// width of one element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Array {
    /// Offset of element 0 in bits.
    pub offset: u32,
    /// Total declared width in bits; 0 for a flexible array (`[]`).
    pub width: u32,
    /// Width of one element in bits.
    pub elem_width: u32,
}

impl Array {
    /// An array at bit `offset`, `width` bits in total (0 = flexible), elements of `elem_width` bits.
    #[inline(always)]
    pub const fn new(offset: u32, width: u32, elem_width: u32) -> Array {
        Array {
            offset,
            width,
            elem_width,
        }
    }

    /// True for a flexible array (`[]`, declared width 0).
    #[inline(always)]
    pub const fn is_flexible(self) -> bool {
        self.width == 0
    }

    /// Number of declared elements; `None` for a flexible array.
    #[inline(always)]
    pub const fn count(self) -> Option<u32> {
        if self.width == 0 || self.elem_width == 0 {
            None
        } else {
            Some(self.width / self.elem_width)
        }
    }

    /// The whole array as one field (declared offset and width, as the layout dump reports it).
    #[inline(always)]
    pub const fn as_field(self) -> Field {
        Field {
            offset: self.offset,
            width: self.width,
        }
    }

    /// Element `i`, without checking a fixed array's count (the buffer length is still checked
    /// by the accessor). Saturates instead of overflowing.
    #[inline(always)]
    pub const fn elem(self, i: u32) -> Field {
        Field {
            offset: self
                .offset
                .saturating_add(i.saturating_mul(self.elem_width)),
            width: self.elem_width,
        }
    }

    /// Element `i`, or `None` past the end of a fixed-size array.
    #[inline(always)]
    pub const fn at(self, i: u32) -> Option<Field> {
        match self.count() {
            Some(n) if i >= n => None,
            _ => Some(self.elem(i)),
        }
    }

    /// The same array viewed with another element width (e.g. `klm_pas_mtt`, declared with
    /// 32-bit elements, holds 64-bit MTT entries).
    #[inline(always)]
    pub const fn with_elem_width(self, elem_width: u32) -> Array {
        Array {
            offset: self.offset,
            width: self.width,
            elem_width,
        }
    }

    /// Byte offset of element 0.
    #[inline(always)]
    pub const fn byte_offset(self) -> usize {
        (self.offset / 8) as usize
    }

    /// Bytes needed to hold the struct prefix plus `n` elements (e.g. a command's `inlen`
    /// with `n` page addresses).
    #[inline(always)]
    pub const fn bytes_with(self, n: usize) -> usize {
        self.byte_offset() + n * (self.elem_width as usize / 8)
    }
}

/// `MLX5_GET(typ, buf, fld)` as a function: `get(&buf, mkc::LR)`.
#[inline]
pub fn get(buf: &[u8], f: Field) -> Result<u32> {
    f.get(buf)
}

/// `MLX5_SET(typ, buf, fld, v)` as a function (truncates like the C macro).
#[inline]
pub fn set(buf: &mut [u8], f: Field, value: u32) -> Result<()> {
    f.set(buf, value)
}

/// `MLX5_GET64` as a function.
#[inline]
pub fn get64(buf: &[u8], f: Field) -> Result<u64> {
    f.get64(buf)
}

/// `MLX5_SET64` as a function.
#[inline]
pub fn set64(buf: &mut [u8], f: Field, value: u64) -> Result<()> {
    f.set64(buf, value)
}
