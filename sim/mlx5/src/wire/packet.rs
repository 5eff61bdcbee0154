//! The packets of the routes that carry no frame (loopback, a pair sharing one guest memory):
//! [`RefPacket`] and its payload by reference, [`RefPayload`], moved with one
//! [`GuestMemory::copy`] (see [`crate::wire`]).

use std::sync::Arc;

use crate::memory::{DmaError, GuestMemory};
use crate::roce::{Aeth, Bth, ExtHdrs, Reth, NO_EXT};

/// A packet whose payload was not put into a frame (loopback, shared-memory pair).
pub struct RefPacket {
    /// Source IP as a 16-byte GID (the sender's SGID).
    pub src_gid: [u8; 16],
    /// BTH.
    pub bth: Bth,
    /// Extension headers.
    pub ext: PktExt,
    /// Payload (of every packet of the entry, see `more`).
    pub payload: RefPayload,
    /// Loopback queue: how many packets follow this one in the same entry. Each is a real
    /// packet of its own: this BTH with the next PSN (`psn + i`) and its own AckReq (bit `i`
    /// of `acks`), no extension header, and the next `payload.len() / (more + 1)` bytes of
    /// the payload. Only packets with the same opcode and length that continue one message
    /// share an entry (the MIDDLE packets of a long WRITE or SEND): the queue holds one entry
    /// instead of each, and the receiver still takes them one by one. 0 elsewhere.
    pub more: u32,
    /// AckReq of packet `i` of the entry (bit 0 mirrors `bth.ack_req`).
    pub acks: u64,
}

impl RefPacket {
    /// One packet.
    pub fn one(src_gid: [u8; 16], bth: Bth, ext: PktExt, payload: RefPayload) -> RefPacket {
        RefPacket {
            src_gid,
            acks: bth.ack_req as u64,
            bth,
            ext,
            payload,
            more: 0,
        }
    }

    /// Most packets one entry holds.
    pub const MAX_PACKETS: u32 = 64;

    /// Packets in this entry.
    #[inline]
    pub fn count(&self) -> u32 {
        self.more + 1
    }

    /// The BTH of packet `i` of the entry, the offset of its bytes in the payload, and their
    /// count.
    #[inline]
    pub fn packet(&self, i: u32) -> (Bth, usize, usize) {
        if self.more == 0 {
            return (self.bth, 0, self.payload.len());
        }
        let mut bth = self.bth;
        bth.psn = crate::roce::psn_add(bth.psn, i);
        bth.ack_req = (self.acks >> i) & 1 != 0;
        let each = self.payload.len() / self.count() as usize;
        (bth, i as usize * each, each)
    }
}

/// The extension headers of a [`RefPacket`], compact: an [`ExtHdrs`] is over a hundred bytes
/// and most packets carry none (MIDDLE), a RETH (WRITE FIRST / ONLY) or an AETH (ACK), so a
/// packet moved through a queue does not carry the full set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PktExt {
    /// No extension header.
    None,
    /// A RETH alone.
    Reth(Reth),
    /// An AETH alone.
    Aeth(Aeth),
    /// Any other combination.
    Other(Box<ExtHdrs>),
}

impl PktExt {
    /// The compact form of `e` ([`NO_EXT`] itself is recognised by its address).
    #[inline]
    pub fn new(e: &ExtHdrs) -> PktExt {
        if std::ptr::eq(e, &NO_EXT) {
            return PktExt::None;
        }
        let ExtHdrs {
            deth: None,
            atomic_eth: None,
            atomic_ack_eth: None,
            imm_dt: None,
            ieth: None,
            reth,
            aeth,
        } = *e
        else {
            return PktExt::Other(Box::new(*e));
        };
        match (reth, aeth) {
            (None, None) => PktExt::None,
            (Some(r), None) => PktExt::Reth(r),
            (None, Some(a)) => PktExt::Aeth(a),
            _ => PktExt::Other(Box::new(*e)),
        }
    }

    /// The full set: lent from a static (none), from the box, or written into `tmp`.
    #[inline]
    pub fn get<'s>(&'s self, tmp: &'s mut ExtHdrs) -> &'s ExtHdrs {
        match self {
            PktExt::None => &NO_EXT,
            PktExt::Other(b) => b,
            PktExt::Reth(r) => {
                *tmp = ExtHdrs::NONE;
                tmp.reth = Some(*r);
                tmp
            }
            PktExt::Aeth(a) => {
                *tmp = ExtHdrs::NONE;
                tmp.aeth = Some(*a);
                tmp
            }
        }
    }

    /// The full set, as a value.
    pub fn to_ext(&self) -> ExtHdrs {
        let mut tmp = ExtHdrs::NONE;
        *self.get(&mut tmp)
    }
}

impl std::fmt::Debug for RefPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefPacket")
            .field("bth", &self.bth)
            .field("ext", &self.ext)
            .field("more", &self.more)
            .finish_non_exhaustive()
    }
}

/// The payload of a [`RefPacket`].
pub enum RefPayload {
    /// No payload.
    None,
    /// Bytes (inline data of a WQE: it lives in the SQ, which may be reused once completed).
    Bytes(Vec<u8>),
    /// Bytes still in the sender's guest memory: bus-contiguous `(address, length)` pieces in
    /// payload order, checked to be guest memory when the packet was made.
    Mem {
        /// The sender's memory.
        mem: Arc<dyn GuestMemory>,
        /// The pieces.
        pieces: Vec<(u64, usize)>,
    },
    /// Bytes `off..off + len` of a work request's message, whose pieces (in the sender's
    /// memory, in message order) the packet shares with the work request instead of copying
    /// them.
    Window {
        /// The sender's memory.
        mem: Arc<dyn GuestMemory>,
        /// The whole message's pieces.
        pieces: Arc<[(u64, usize)]>,
        /// Message offset of the payload.
        off: usize,
        /// Payload length.
        len: usize,
    },
    /// A [`RefPayload::Window`] in the receiver's own memory (loopback: the sending and the
    /// receiving QP are on one HCA), so no handle to that memory travels with each packet.
    Own {
        /// The whole message's pieces.
        pieces: Arc<[(u64, usize)]>,
        /// Message offset of the payload.
        off: usize,
        /// Payload length.
        len: usize,
    },
}

impl RefPayload {
    /// Payload length.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            RefPayload::None => 0,
            RefPayload::Bytes(b) => b.len(),
            RefPayload::Mem { pieces, .. } => pieces.iter().map(|p| p.1).sum(),
            RefPayload::Window { len, .. } | RefPayload::Own { len, .. } => *len,
        }
    }
    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which side of a payload move failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliverError {
    /// The payload's bytes could not be read (its memory went away after the sender checked
    /// it): the packet is as good as corrupted in transit.
    Source(DmaError),
    /// The destination is not guest memory.
    Destination(DmaError),
}

/// Whether two handles are the same guest memory (data pointers only: the vtable half of a
/// `dyn` pointer is not unique).
pub fn same_memory(a: &Arc<dyn GuestMemory>, b: &Arc<dyn GuestMemory>) -> bool {
    std::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
}

/// Where bytes `[off, end)` of a [`RefPayload`] lie ([`RefPayload::source`]).
enum Source<'a> {
    /// No payload and no bytes asked for.
    Empty,
    /// In the packet.
    Bytes(&'a [u8]),
    /// Bytes `[off, end)` of the message made of `pieces` in `mem`.
    Pieces {
        mem: &'a Arc<dyn GuestMemory>,
        pieces: &'a [(u64, usize)],
        off: usize,
        end: usize,
    },
}

/// Calls `f(bus, at, k)` for each stretch of bytes `[off, end)` of the message made of
/// `pieces`: `k` bytes at bus address `bus`, message bytes `off + at..off + at + k`. Fails
/// as a short source when the pieces end first.
#[inline]
fn each_stretch(
    pieces: &[(u64, usize)],
    off: usize,
    end: usize,
    mut f: impl FnMut(u64, usize, usize) -> Result<(), DeliverError>,
) -> Result<(), DeliverError> {
    let mut at = 0usize;
    let mut moved = 0usize;
    for &(bus, len) in pieces {
        let (lo, hi) = (at.max(off), (at + len).min(end));
        at += len;
        if lo >= hi {
            if at >= end {
                break;
            }
            continue;
        }
        let k = hi - lo;
        f(bus + (lo - (at - len)) as u64, moved, k)?;
        moved += k;
    }
    if moved == end - off {
        Ok(())
    } else {
        Err(DeliverError::Source(DmaError {
            addr: 0,
            len: end - off,
        }))
    }
}

impl RefPayload {
    /// Where payload bytes `[off, off + n)` lie; `own` is the memory of an
    /// [`RefPayload::Own`] payload (the receiver's), `None` where it cannot be read.
    #[inline]
    fn source<'a>(
        &'a self,
        off: usize,
        n: usize,
        own: Option<&'a Arc<dyn GuestMemory>>,
    ) -> Result<Source<'a>, DeliverError> {
        let short = DeliverError::Source(DmaError { addr: 0, len: n });
        let end = off.checked_add(n).ok_or(short)?;
        let window =
            |mem: &'a Arc<dyn GuestMemory>, pieces: &'a [(u64, usize)], base: usize, len: usize| {
                if end > len {
                    Err(short)
                } else {
                    Ok(Source::Pieces {
                        mem,
                        pieces,
                        off: base + off,
                        end: base + end,
                    })
                }
            };
        match self {
            RefPayload::None if n == 0 => Ok(Source::Empty),
            RefPayload::None => Err(short),
            RefPayload::Bytes(b) => b.get(off..end).map(Source::Bytes).ok_or(short),
            RefPayload::Mem { mem, pieces } => Ok(Source::Pieces {
                mem,
                pieces,
                off,
                end,
            }),
            RefPayload::Window {
                mem,
                pieces,
                off: base,
                len,
            } => window(mem, pieces, *base, *len),
            RefPayload::Own {
                pieces,
                off: base,
                len,
            } => window(own.ok_or(short)?, pieces, *base, *len),
        }
    }

    /// Moves payload bytes `[off, off + n)` to bus address `dst` of `mem`: one
    /// [`GuestMemory::copy`] per source piece when the payload lies in `mem`, else a read and a
    /// write.
    pub fn deliver(
        &self,
        off: usize,
        mem: &Arc<dyn GuestMemory>,
        dst: u64,
        n: usize,
    ) -> Result<(), DeliverError> {
        let (src_mem, pieces, off, end) = match self.source(off, n, Some(mem))? {
            Source::Empty => return Ok(()),
            Source::Bytes(b) => return mem.write(dst, b).map_err(DeliverError::Destination),
            Source::Pieces {
                mem,
                pieces,
                off,
                end,
            } => (mem, pieces, off, end),
        };
        let same = same_memory(src_mem, mem);
        let mut bounce = Vec::new();
        each_stretch(pieces, off, end, |src, at, k| {
            let to = dst + at as u64;
            if same {
                mem.copy(src, to, k).map_err(|e| {
                    if e.addr == src {
                        DeliverError::Source(e)
                    } else {
                        DeliverError::Destination(e)
                    }
                })
            } else {
                bounce.resize(k, 0);
                src_mem
                    .read(src, &mut bounce)
                    .map_err(DeliverError::Source)?;
                mem.write(to, &bounce).map_err(DeliverError::Destination)
            }
        })
    }

    /// Reads payload bytes `[off, off + dst.len())` into `dst`. (The memory of an `Own`
    /// payload is the reader's: `deliver` it instead.)
    pub fn read_into(&self, off: usize, dst: &mut [u8]) -> Result<(), DeliverError> {
        match self.source(off, dst.len(), None)? {
            Source::Empty => Ok(()),
            Source::Bytes(b) => {
                dst.copy_from_slice(b);
                Ok(())
            }
            Source::Pieces {
                mem,
                pieces,
                off,
                end,
            } => each_stretch(pieces, off, end, |src, at, k| {
                mem.read(src, &mut dst[at..at + k])
                    .map_err(DeliverError::Source)
            }),
        }
    }
}

#[cfg(test)]
mod pkt_ext_tests {
    use super::*;
    use crate::roce::{AtomicEth, NakCode};

    #[test]
    fn pkt_ext_gives_back_every_header_set() {
        let reth = Reth {
            va: 0x1234_5678_9abc,
            r_key: 0x55,
            dma_len: 65536,
        };
        let aeth = Aeth::nak(NakCode::RemoteAccessError, 7);
        let sets = [
            ExtHdrs::NONE,
            ExtHdrs {
                reth: Some(reth),
                ..ExtHdrs::NONE
            },
            ExtHdrs {
                aeth: Some(aeth),
                ..ExtHdrs::NONE
            },
            ExtHdrs {
                reth: Some(reth),
                imm_dt: Some(9),
                ..ExtHdrs::NONE
            },
            ExtHdrs {
                imm_dt: Some(9),
                ..ExtHdrs::NONE
            },
            ExtHdrs {
                ieth: Some(3),
                ..ExtHdrs::NONE
            },
            ExtHdrs {
                atomic_eth: Some(AtomicEth {
                    va: 8,
                    r_key: 1,
                    swap_add: 2,
                    compare: 3,
                }),
                ..ExtHdrs::NONE
            },
        ];
        for e in sets {
            let c = PktExt::new(&e);
            let mut tmp = ExtHdrs::NONE;
            assert_eq!(*c.get(&mut tmp), e);
            assert_eq!(c.to_ext(), e);
        }
        assert_eq!(PktExt::new(&ExtHdrs::NONE), PktExt::None);
        assert!(matches!(PktExt::new(&sets[1]), PktExt::Reth(_)));
        assert!(matches!(PktExt::new(&sets[2]), PktExt::Aeth(_)));
        assert!(matches!(PktExt::new(&sets[3]), PktExt::Other(_)));
        assert_eq!(PktExt::new(&NO_EXT), PktExt::None);
    }

    /// Each packet of an entry that holds several: its own PSN (wrapping at 24 bits), its own
    /// AckReq, its share of the payload.
    #[test]
    fn packets_of_one_entry() {
        let mut bth = Bth::new(crate::roce::Opcode::RC_RDMA_WRITE_MIDDLE, 7, 0xff_fffe);
        bth.ack_req = false;
        let mut p = RefPacket::one(
            [1; 16],
            bth,
            PktExt::None,
            RefPayload::Own {
                pieces: Arc::from(vec![(0x1000u64, 4 * 256usize)]),
                off: 256,
                len: 256,
            },
        );
        assert_eq!(p.packet(0), (bth, 0, 256));
        p.more = 2;
        p.acks = 0b100;
        if let RefPayload::Own { len, .. } = &mut p.payload {
            *len = 3 * 256;
        }
        assert_eq!(p.count(), 3);
        let (b1, at1, n1) = p.packet(1);
        assert_eq!((b1.psn, b1.ack_req, at1, n1), (0xff_ffff, false, 256, 256));
        let (b2, at2, n2) = p.packet(2);
        assert_eq!((b2.psn, b2.ack_req, at2, n2), (0, true, 512, 256));
        assert_eq!((b2.opcode, b2.dest_qp), (bth.opcode, bth.dest_qp));
    }
}
