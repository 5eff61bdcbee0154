//! Big-endian reads of device bytes (the PRM lays every multi-byte field out big-endian):
//! the one copy the model's parsers (command mailboxes, WQEs, UMR and KLM entries, doorbell
//! records) use. A field that does not fit in the bytes reads as 0; callers check lengths
//! where a short buffer is an error.

/// The big-endian `u16` at `b[at..at + 2]` (0 if out of range).
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |x| u16::from_be_bytes([x[0], x[1]]))
}

/// The big-endian `u32` at `b[at..at + 4]` (0 if out of range).
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
}

/// The big-endian `u64` at `b[at..at + 8]` (each half 0 if out of range).
#[inline]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    (be32(b, at) as u64) << 32 | be32(b, at + 4) as u64
}
