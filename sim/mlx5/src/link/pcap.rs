//! Classic libpcap files: a reader (both byte orders, microsecond and nanosecond timestamps) and
//! a writer (little-endian, microseconds or nanoseconds). Link type Ethernet only.
//!
//! Format (the tcpdump/libpcap "pcap-savefile" format, also IETF draft-ietf-opsawg-pcap): a
//! 24-byte file header — magic 0xa1b2c3d4 (µs) or 0xa1b23c4d (ns) in the writer's byte order,
//! version 2.4, thiszone, sigfigs, snaplen, linktype (1 = LINKTYPE_ETHERNET) — then records of a
//! 16-byte header (seconds, µs or ns, captured length, original length) and the captured bytes.
//! QEMU's `filter-dump` writes exactly this (net/dump.c); so does the linuxpeer relay.
//!
//! Hand-written rather than the `pcap-file` crate: its last stable release (2.0.0, 2022) pulls a
//! proc-macro crate and `thiserror` for ~100 lines of format this module needs, and its 3.0 is
//! still a release candidate.

use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

/// LINKTYPE_ETHERNET.
pub const LINKTYPE_ETHERNET: u32 = 1;
const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const FILE_HDR_LEN: usize = 24;
const REC_HDR_LEN: usize = 16;

/// Why a pcap file cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcapError {
    /// Shorter than the 24-byte file header.
    ShortHeader(usize),
    /// Not a classic pcap magic number (pcapng and others are not read).
    BadMagic(u32),
    /// A link type other than Ethernet.
    LinkType(u32),
    /// A record header or its data runs past the end of the file.
    TruncatedRecord {
        /// Record number (1-based).
        index: usize,
        /// File offset of the record header.
        offset: usize,
    },
    /// A record whose captured length exceeds its original length or the snap length.
    BadRecordLength {
        /// Record number (1-based).
        index: usize,
        /// Captured length.
        caplen: u32,
        /// Original length.
        orig_len: u32,
    },
}

impl fmt::Display for PcapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PcapError::ShortHeader(n) => write!(f, "{n} bytes: shorter than a pcap header"),
            PcapError::BadMagic(m) => write!(f, "magic 0x{m:08x}: not a classic pcap file"),
            PcapError::LinkType(l) => write!(f, "link type {l}, want 1 (Ethernet)"),
            PcapError::TruncatedRecord { index, offset } => {
                write!(
                    f,
                    "record {index} at offset {offset} runs past the end of the file"
                )
            }
            PcapError::BadRecordLength {
                index,
                caplen,
                orig_len,
            } => write!(f, "record {index}: captured {caplen} of {orig_len} bytes"),
        }
    }
}

impl std::error::Error for PcapError {}

/// One captured frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time since the Unix epoch.
    pub ts: Duration,
    /// The captured bytes.
    pub data: &'a [u8],
    /// The frame's length on the wire (more than `data.len()` when the capture cut it).
    pub orig_len: u32,
}

/// A pcap file held in memory.
#[derive(Clone, Copy, Debug)]
pub struct PcapFile<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    nanos: bool,
    /// The snap length from the file header.
    pub snaplen: u32,
}

impl<'a> PcapFile<'a> {
    /// Checks the file header.
    pub fn parse(bytes: &'a [u8]) -> Result<PcapFile<'a>, PcapError> {
        if bytes.len() < FILE_HDR_LEN {
            return Err(PcapError::ShortHeader(bytes.len()));
        }
        let le = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let be = le.swap_bytes();
        let (big_endian, nanos) = match (le, be) {
            (MAGIC_US, _) => (false, false),
            (MAGIC_NS, _) => (false, true),
            (_, MAGIC_US) => (true, false),
            (_, MAGIC_NS) => (true, true),
            _ => return Err(PcapError::BadMagic(le)),
        };
        let f = PcapFile {
            bytes,
            big_endian,
            nanos,
            snaplen: 0,
        };
        let snaplen = f.u32_at(16);
        let link = f.u32_at(20);
        if link != LINKTYPE_ETHERNET {
            return Err(PcapError::LinkType(link));
        }
        Ok(PcapFile { snaplen, ..f })
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = [
            self.bytes[at],
            self.bytes[at + 1],
            self.bytes[at + 2],
            self.bytes[at + 3],
        ];
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// Whether timestamps are in nanoseconds.
    pub fn nanosecond(&self) -> bool {
        self.nanos
    }

    /// The records in file order; iteration stops after the first error.
    pub fn records(&self) -> Records<'a> {
        Records {
            file: *self,
            offset: FILE_HDR_LEN,
            index: 0,
            failed: false,
        }
    }
}

/// Iterator over a [`PcapFile`]'s records.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    file: PcapFile<'a>,
    offset: usize,
    index: usize,
    failed: bool,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let len = self.file.bytes.len();
        if self.failed || self.offset == len {
            return None;
        }
        self.index += 1;
        let (index, offset) = (self.index, self.offset);
        let mut fail = |e| {
            self.failed = true;
            Some(Err(e))
        };
        if len - offset < REC_HDR_LEN {
            return fail(PcapError::TruncatedRecord { index, offset });
        }
        let sec = self.file.u32_at(offset);
        let frac = self.file.u32_at(offset + 4);
        let caplen = self.file.u32_at(offset + 8);
        let orig_len = self.file.u32_at(offset + 12);
        if caplen > orig_len.max(self.file.snaplen) {
            return fail(PcapError::BadRecordLength {
                index,
                caplen,
                orig_len,
            });
        }
        let start = offset + REC_HDR_LEN;
        if ((len - start) as u64) < caplen as u64 {
            return fail(PcapError::TruncatedRecord { index, offset });
        }
        let end = start + caplen as usize;
        self.offset = end;
        let nanos = if self.file.nanos {
            frac as u64
        } else {
            frac as u64 * 1000
        };
        Some(Ok(Record {
            ts: Duration::from_secs(sec as u64) + Duration::from_nanos(nanos),
            data: &self.file.bytes[start..end],
            orig_len,
        }))
    }
}

/// Writes a classic pcap (little-endian, link type Ethernet).
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    nanos: bool,
}

/// Snap length written to the header: larger than any frame the model sends.
pub const WRITER_SNAPLEN: u32 = 65535;

impl<W: Write> PcapWriter<W> {
    /// Writes the file header; timestamps in microseconds (`nanos` false) or nanoseconds.
    pub fn new(mut out: W, nanos: bool) -> io::Result<PcapWriter<W>> {
        let mut h = [0u8; FILE_HDR_LEN];
        h[0..4].copy_from_slice(&(if nanos { MAGIC_NS } else { MAGIC_US }).to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&WRITER_SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out, nanos })
    }

    /// Appends one frame captured at `ts` (time since the Unix epoch). Frames longer than
    /// [`WRITER_SNAPLEN`] are cut to it, with the original length recorded.
    pub fn write_frame(&mut self, ts: Duration, frame: &[u8]) -> io::Result<()> {
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let cap = orig.min(WRITER_SNAPLEN);
        let frac = if self.nanos {
            ts.subsec_nanos()
        } else {
            ts.subsec_micros()
        };
        let mut h = [0u8; REC_HDR_LEN];
        h[0..4].copy_from_slice(&(ts.as_secs() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&cap.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..cap as usize])
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_both_resolutions() {
        for nanos in [false, true] {
            let mut w = PcapWriter::new(Vec::new(), nanos).unwrap();
            w.write_frame(Duration::new(5, 123_456_789), b"abc")
                .unwrap();
            w.write_frame(Duration::new(6, 0), &[]).unwrap();
            let bytes = w.into_inner();
            let f = PcapFile::parse(&bytes).unwrap();
            assert_eq!(f.nanosecond(), nanos);
            let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
            assert_eq!(recs.len(), 2);
            assert_eq!(recs[0].data, b"abc");
            assert_eq!(recs[0].orig_len, 3);
            let want = if nanos {
                Duration::new(5, 123_456_789)
            } else {
                Duration::new(5, 123_456_000)
            };
            assert_eq!(recs[0].ts, want);
            assert_eq!(recs[1].data, b"");
        }
    }

    #[test]
    fn big_endian_files_read() {
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC_US.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&100u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        for v in [7u32, 9, 2, 4] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(b"hi");
        let f = PcapFile::parse(&b).unwrap();
        let r: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(r[0].data, b"hi");
        assert_eq!(r[0].orig_len, 4);
        assert_eq!(r[0].ts, Duration::new(7, 9_000));
    }

    #[test]
    fn bad_files_give_typed_errors() {
        assert_eq!(
            PcapFile::parse(&[0; 10]).unwrap_err(),
            PcapError::ShortHeader(10)
        );
        assert!(matches!(
            PcapFile::parse(&[0; 24]).unwrap_err(),
            PcapError::BadMagic(0)
        ));
        let mut w = PcapWriter::new(Vec::new(), false).unwrap();
        w.write_frame(Duration::ZERO, &[1; 40]).unwrap();
        let mut bytes = w.into_inner();
        let mut other_link = bytes.clone();
        other_link[20] = 101;
        assert_eq!(
            PcapFile::parse(&other_link).unwrap_err(),
            PcapError::LinkType(101)
        );
        bytes.truncate(bytes.len() - 1);
        let f = PcapFile::parse(&bytes).unwrap();
        let r: Vec<_> = f.records().collect();
        assert_eq!(
            r,
            vec![Err(PcapError::TruncatedRecord {
                index: 1,
                offset: 24
            })]
        );
        // Every truncation of a good file gives records or a typed error, never a panic.
        for n in 0..bytes.len() {
            if let Ok(f) = PcapFile::parse(&bytes[..n]) {
                let _ = f.records().count();
            }
        }
    }
}
