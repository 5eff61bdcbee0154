//! Send and receive WQE parsing.
//!
//! A send WQE is a ctrl segment followed by opcode-specific segments, `qpn_ds & 0x3f` 16-byte
//! units in all, occupying `ceil(ds * 16 / 64)` 64-byte basic blocks of the SQ ring
//! (rdma-core providers/mlx5/mlx5dv.h `mlx5dv_set_ctrl_seg`, qp.c `_mlx5_post_send`). The caller
//! copies the WQE out of the ring (handling the wrap to the ring start) and hands the bytes to
//! [`SendWqe::parse`]; parsing never allocates.
//!
//! Segment order per opcode (rdma-core qp.c `_mlx5_post_send`):
//! - SEND / SEND_IMM / SEND_INVAL: ctrl, data or inline segments;
//! - RDMA_WRITE(_IMM) / RDMA_READ: ctrl, raddr, data or inline segments (READ: data only);
//! - ATOMIC_CS / ATOMIC_FA: ctrl, raddr, atomic, one data segment of 8 bytes
//!   (`MLX5_ATOMIC_SIZE`, rdma-core qp.c:284);
//! - NOP: ctrl only.
//!
//! A receive WQE is an array of data segments, `16 << log_rq_stride` bytes, ended early by a
//! segment whose lkey is `MLX5_INVALID_LKEY` (rdma-core qp.c:3797).

use mlx5_prm::wqe::{
    self, atomic_seg, ctrl_seg, data_seg, inl_data_seg, opcode, raddr_seg, INLINE_SEG,
    INVALID_LKEY, SEND_WQE_DS,
};

/// Most 16-byte units a WQE can have (`qpn_ds` has 6 bits).
pub const MAX_DS: usize = wqe::CTRL_DS_MASK as usize;
/// Largest WQE in bytes.
pub const MAX_WQE_BYTES: usize = MAX_DS * SEND_WQE_DS;
/// Most gather entries a send WQE can carry (every unit but the ctrl segment).
pub const MAX_GATHER: usize = MAX_DS - 1;

/// A data segment `byte_count` of 0 stands for 2^31 bytes. The PRM description is not public;
/// the evidence is that both drivers refuse to hand hardware an empty segment (rdma-core
/// providers/mlx5/qp.c skips zero-length SGEs, `if (likely(sg->length))`), so the model does not
/// treat 0 as "empty" either; the 31-bit `byte_count` makes 2^31 the only value 0 can stand for.
pub const ZERO_BYTE_COUNT_MEANS: u64 = 1 << 31;

/// Why a WQE is malformed. The data path completes it with a local QP operation error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeError {
    /// `ds` is 0 or smaller than the opcode's mandatory segments.
    TooShort,
    /// An inline segment runs past the end of the WQE.
    InlineOverrun,
    /// The opcode is not one the model executes on an RC QP.
    UnsupportedOpcode(u8),
    /// An atomic WQE without exactly one 8-byte data segment.
    BadAtomicSegment,
    /// An RDMA READ with inline data (a READ scatters, it cannot carry data).
    InlineInRead,
    /// `qpn_ds` bits 7:6 set: a size of 64 or more 16-byte units, which the 6-bit `ds` field
    /// cannot hold (a driver that computed ds > 63 and let it spill into the reserved bits).
    DsOverflow,
}

/// One gather entry of a send WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gather {
    /// A data segment: `len` bytes at `addr`, translated through `lkey`.
    Data {
        /// `byte_count` (0 already replaced by 2^31).
        len: u64,
        /// `lkey`.
        lkey: u32,
        /// `addr`.
        addr: u64,
    },
    /// Inline data: `len` bytes starting at byte `at` of the WQE.
    Inline {
        /// Offset of the data in the WQE bytes.
        at: usize,
        /// Length in bytes.
        len: usize,
    },
}

impl Gather {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match *self {
            Gather::Data { len, .. } => len,
            Gather::Inline { len, .. } => len as u64,
        }
    }

    /// Whether the entry is empty (inline of length 0).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A parsed send WQE.
#[derive(Clone, Debug)]
pub struct SendWqe {
    /// `opmod_idx_opcode` bits 7:0.
    pub opcode: u8,
    /// `opmod_idx_opcode` bits 31:24.
    pub opmod: u8,
    /// `opmod_idx_opcode` bits 23:8: the WQE index (in WQEBBs) software wrote.
    pub wqe_index: u16,
    /// `qpn_ds` bits 31:8.
    pub qpn: u32,
    /// `qpn_ds` bits 5:0: size in 16-byte units.
    pub ds: u8,
    /// `fm_ce_se` bits 7:5 (fence mode).
    pub fence: u8,
    /// `fm_ce_se` bits 3:2 (CE: 2 = CQ update, 3 = CQ update and EQE).
    pub ce: u8,
    /// `fm_ce_se` bit 1 (solicited event).
    pub solicited: bool,
    /// `imm` (big-endian as in the WQE, as it goes on the wire).
    pub imm: u32,
    /// Remote address (raddr segment), for RDMA and atomics.
    pub raddr: u64,
    /// Remote key (raddr segment).
    pub rkey: u32,
    /// Atomic `swap_add`.
    pub swap_add: u64,
    /// Atomic `compare`.
    pub compare: u64,
    /// The first [`INLINE_GATHERS`] entries; a longer list lives in `more` (all of it).
    gathers: [Gather; INLINE_GATHERS],
    ngathers: usize,
    /// The whole list once it is longer than [`INLINE_GATHERS`] (empty, and so not
    /// allocated, for the usual one- or few-entry WQE: parsing one sets up only a few
    /// slots, not [`MAX_GATHER`] of them).
    more: Vec<Gather>,
}

/// Gather entries kept in the parsed WQE itself.
const INLINE_GATHERS: usize = 4;

impl SendWqe {
    /// Whether a completion is requested (`CE` = CQ update, with or without EQE).
    pub fn signaled(&self) -> bool {
        self.ce & 0x2 != 0
    }

    /// Number of 64-byte basic blocks the WQE occupies.
    pub fn wqebbs(&self) -> u32 {
        wqe::wqebbs(self.ds as u32)
    }

    /// The gather (or, for RDMA READ / atomics, scatter) list.
    pub fn gathers(&self) -> &[Gather] {
        if self.more.is_empty() {
            &self.gathers[..self.ngathers]
        } else {
            &self.more
        }
    }

    /// Total bytes of the gather list (u64: 62 entries of up to 2^31 do not fit 32 bits).
    pub fn total_len(&self) -> u64 {
        self.gathers().iter().map(Gather::len).sum()
    }

    /// The basic blocks a WQE occupies from its ctrl segment alone, for stepping over it
    /// when it is malformed or flushed: from bits 7:0 of `qpn_ds`, so that a WQE whose size
    /// spilled into the reserved bits 7:6 (ds > 63, [`WqeError::DsOverflow`]) is skipped as
    /// a whole rather than read as ds = 0 (model choice); at least one block.
    pub fn bbs_of(ctrl: &[u8]) -> u32 {
        let units = ctrl.get(ctrl_seg::QPN_DS + 3).copied().unwrap_or(0);
        wqe::wqebbs(units as u32).max(1)
    }

    /// Reads just the ctrl segment's `ds` (bits 5:0 of `qpn_ds`) from the first 16 bytes.
    pub fn ds_of(ctrl: &[u8]) -> u8 {
        ctrl.get(ctrl_seg::QPN_DS + 3)
            .map_or(0, |b| b & wqe::CTRL_DS_MASK as u8)
    }

    /// Parses a WQE from its bytes (at least `ds * 16` of them, the ring wrap already undone).
    pub fn parse(raw: &[u8]) -> Result<SendWqe, WqeError> {
        let be32 = |at: usize| -> u32 {
            raw.get(at..at + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let be64 = |at: usize| -> u64 { (be32(at) as u64) << 32 | be32(at + 4) as u64 };
        if raw.len() < ctrl_seg::SIZE {
            return Err(WqeError::TooShort);
        }
        let oio = be32(ctrl_seg::OPMOD_IDX_OPCODE);
        let qpn_ds = be32(ctrl_seg::QPN_DS);
        let ds = (qpn_ds & wqe::CTRL_DS_MASK) as u8;
        let size = ds as usize * SEND_WQE_DS;
        // Model choice (no public source says what firmware does): bits 7:6 of qpn_ds are
        // reserved (MLX5_WQE_CTRL_DS_MASK = 0x3f, Linux qp.h), so a WQE that sets them
        // (ds > 63 spilling over) is malformed, and so is ds = 0 (no ctrl segment). Both
        // complete with a local QP operation error CQE and move the QP to ERR.
        if qpn_ds & 0xc0 != 0 {
            return Err(WqeError::DsOverflow);
        }
        if ds == 0 || raw.len() < size {
            return Err(WqeError::TooShort);
        }
        let fm_ce_se = raw[ctrl_seg::FM_CE_SE];
        let mut w = SendWqe {
            opcode: (oio & 0xff) as u8,
            opmod: (oio >> 24) as u8,
            wqe_index: (oio >> 8) as u16,
            qpn: qpn_ds >> 8,
            ds,
            fence: fm_ce_se >> 5,
            ce: (fm_ce_se >> 2) & 0x3,
            solicited: fm_ce_se & wqe::ctrl::SOLICITED != 0,
            imm: be32(ctrl_seg::IMM),
            raddr: 0,
            rkey: 0,
            swap_add: 0,
            compare: 0,
            gathers: [Gather::Inline { at: 0, len: 0 }; INLINE_GATHERS],
            ngathers: 0,
            more: Vec::new(),
        };
        let mut at = ctrl_seg::SIZE;
        let need = |at: usize, n: usize| -> Result<(), WqeError> {
            if at + n > size {
                Err(WqeError::TooShort)
            } else {
                Ok(())
            }
        };
        match w.opcode {
            opcode::NOP => return Ok(w),
            // SEND_INVAL: the ctrl `imm` carries the rkey to invalidate (rdma-core qp.c
            // `send_ieth`); otherwise a SEND.
            opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL => {}
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => {
                need(at, raddr_seg::SIZE)?;
                w.raddr = be64(at + raddr_seg::RADDR);
                w.rkey = be32(at + raddr_seg::RKEY);
                at += raddr_seg::SIZE;
            }
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                need(at, raddr_seg::SIZE + atomic_seg::SIZE + data_seg::SIZE)?;
                w.raddr = be64(at + raddr_seg::RADDR);
                w.rkey = be32(at + raddr_seg::RKEY);
                at += raddr_seg::SIZE;
                w.swap_add = be64(at + atomic_seg::SWAP_ADD);
                w.compare = be64(at + atomic_seg::COMPARE);
                at += atomic_seg::SIZE;
            }
            op => return Err(WqeError::UnsupportedOpcode(op)),
        }
        // The rest: data or inline segments.
        while at < size {
            let bc = be32(at);
            if bc & INLINE_SEG != 0 {
                let len = (bc & !INLINE_SEG) as usize;
                let data = at + inl_data_seg::SIZE;
                if data + len > size {
                    return Err(WqeError::InlineOverrun);
                }
                w.push(Gather::Inline { at: data, len });
                // align(len + 4, 16) (rdma-core qp.c:364).
                at += (len + inl_data_seg::SIZE).div_ceil(SEND_WQE_DS) * SEND_WQE_DS;
            } else {
                let len = if bc == 0 {
                    ZERO_BYTE_COUNT_MEANS
                } else {
                    bc as u64
                };
                w.push(Gather::Data {
                    len,
                    lkey: be32(at + data_seg::LKEY),
                    addr: be64(at + data_seg::ADDR),
                });
                at += data_seg::SIZE;
            }
        }
        let inline = w
            .gathers()
            .iter()
            .any(|g| matches!(g, Gather::Inline { .. }));
        match w.opcode {
            opcode::ATOMIC_CS | opcode::ATOMIC_FA
                if !matches!(w.gathers(), [Gather::Data { len: 8, .. }]) =>
            {
                return Err(WqeError::BadAtomicSegment);
            }
            opcode::RDMA_READ if inline => return Err(WqeError::InlineInRead),
            _ => {}
        }
        Ok(w)
    }

    fn push(&mut self, g: Gather) {
        // At most one entry per 16-byte unit after the ctrl segment, so this never overflows.
        if self.ngathers >= MAX_GATHER {
            return;
        }
        if let Some(slot) = self.gathers.get_mut(self.ngathers) {
            *slot = g;
        } else {
            if self.more.is_empty() {
                self.more.reserve(MAX_GATHER);
                self.more.extend_from_slice(&self.gathers);
            }
            self.more.push(g);
        }
        self.ngathers += 1;
    }
}

/// One scatter entry of a receive WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scatter {
    /// `byte_count` (0 replaced by 2^31).
    pub len: u64,
    /// `lkey`.
    pub lkey: u32,
    /// `addr`.
    pub addr: u64,
}

/// A parsed receive WQE: up to `stride / 16` scatter entries.
#[derive(Clone, Debug)]
pub struct RecvWqe {
    /// The first [`INLINE_SCATTERS`] entries; a longer list lives in `more` (all of it).
    entries: [Scatter; INLINE_SCATTERS],
    n: usize,
    /// The whole list once it is longer than [`INLINE_SCATTERS`] (empty, and not allocated,
    /// for the usual WQE of a few entries: parsing one sets up a few slots, not
    /// [`MAX_SCATTER`] of them).
    more: Vec<Scatter>,
}

/// Scatter entries kept in the parsed receive WQE itself.
const INLINE_SCATTERS: usize = 4;

/// Most scatter entries a receive WQE can have (`log_rq_stride` has 3 bits: 16 << 7 = 2048
/// bytes = 128 segments).
pub const MAX_SCATTER: usize = 128;

impl RecvWqe {
    /// Parses a receive WQE of `raw.len()` bytes (the RQ stride).
    pub fn parse(raw: &[u8]) -> RecvWqe {
        let mut w = RecvWqe {
            entries: [Scatter {
                len: 0,
                lkey: 0,
                addr: 0,
            }; INLINE_SCATTERS],
            n: 0,
            more: Vec::new(),
        };
        for seg in raw.chunks_exact(data_seg::SIZE).take(MAX_SCATTER) {
            let bc = u32::from_be_bytes([seg[0], seg[1], seg[2], seg[3]]);
            let lkey = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
            if lkey == INVALID_LKEY {
                break;
            }
            let mut a = [0u8; 8];
            a.copy_from_slice(&seg[8..16]);
            w.push(Scatter {
                len: if bc == 0 {
                    ZERO_BYTE_COUNT_MEANS
                } else {
                    (bc & !INLINE_SEG) as u64
                },
                lkey,
                addr: u64::from_be_bytes(a),
            });
        }
        w
    }

    fn push(&mut self, s: Scatter) {
        if let Some(slot) = self.entries.get_mut(self.n) {
            *slot = s;
        } else {
            if self.more.is_empty() {
                self.more.reserve(MAX_SCATTER);
                self.more.extend_from_slice(&self.entries);
            }
            self.more.push(s);
        }
        self.n += 1;
    }

    /// The scatter list.
    pub fn entries(&self) -> &[Scatter] {
        if self.more.is_empty() {
            &self.entries[..self.n]
        } else {
            &self.more
        }
    }

    /// Total capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.entries().iter().map(|s| s.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl(op: u8, idx: u16, qpn: u32, ds: u8, fm_ce_se: u8, imm: u32) -> Vec<u8> {
        let mut v = vec![0u8; 16];
        v[0..4].copy_from_slice(&wqe::opmod_idx_opcode(0, idx, op).to_be_bytes());
        v[4..8].copy_from_slice(&wqe::qpn_ds(qpn, ds).to_be_bytes());
        v[11] = fm_ce_se;
        v[12..16].copy_from_slice(&imm.to_be_bytes());
        v
    }

    fn dseg(len: u32, lkey: u32, addr: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&len.to_be_bytes());
        v.extend_from_slice(&lkey.to_be_bytes());
        v.extend_from_slice(&addr.to_be_bytes());
        v
    }

    #[test]
    fn write_with_raddr_and_two_sges() {
        let mut w = ctrl(
            opcode::RDMA_WRITE_IMM,
            7,
            0x1234,
            4,
            0x08 | 0x02,
            0xdead_beef,
        );
        w.extend_from_slice(&0x1_0000_2000u64.to_be_bytes());
        w.extend_from_slice(&0x5566u32.to_be_bytes());
        w.extend_from_slice(&[0; 4]);
        w.extend(dseg(100, 0x2001, 0x9000));
        w.extend(dseg(0, 0x2001, 0xa000));
        let p = SendWqe::parse(&w).unwrap();
        assert_eq!(p.opcode, opcode::RDMA_WRITE_IMM);
        assert_eq!(p.wqe_index, 7);
        assert_eq!(p.qpn, 0x1234);
        assert_eq!(p.wqebbs(), 1);
        assert!(p.signaled() && p.solicited);
        assert_eq!(p.imm, 0xdead_beef);
        assert_eq!((p.raddr, p.rkey), (0x1_0000_2000, 0x5566));
        assert_eq!(
            p.gathers(),
            &[
                Gather::Data {
                    len: 100,
                    lkey: 0x2001,
                    addr: 0x9000
                },
                Gather::Data {
                    len: 1 << 31,
                    lkey: 0x2001,
                    addr: 0xa000
                }
            ]
        );
    }

    /// Gather lists past the few entries kept in the parsed WQE itself, up to the most a
    /// 63-unit WQE holds, come back whole and in order.
    #[test]
    fn long_gather_lists_keep_every_entry_in_order() {
        for n in [1usize, 3, 4, 5, 9, MAX_GATHER] {
            let mut w = ctrl(opcode::SEND, 0, 9, (n + 1) as u8, 0, 0);
            for i in 0..n {
                w.extend(dseg(i as u32 + 1, 0x100 + i as u32, 0x1000 * i as u64));
            }
            let p = SendWqe::parse(&w).unwrap();
            let want: Vec<Gather> = (0..n)
                .map(|i| Gather::Data {
                    len: i as u64 + 1,
                    lkey: 0x100 + i as u32,
                    addr: 0x1000 * i as u64,
                })
                .collect();
            assert_eq!(p.gathers(), &want[..], "{n} entries");
            assert_eq!(p.total_len(), (1..=n as u64).sum::<u64>());
            assert_eq!(p.clone().gathers(), &want[..]);
        }
    }

    #[test]
    fn inline_send_spanning_blocks() {
        // 70 bytes inline: header 4 + 70 = 74 -> 80 bytes = 5 units; ds = 6 -> 2 WQEBBs.
        let mut w = ctrl(opcode::SEND, 0, 9, 6, 0, 0);
        w.extend_from_slice(&(70u32 | INLINE_SEG).to_be_bytes());
        w.extend((0..70u8).collect::<Vec<_>>());
        w.resize(96, 0);
        let p = SendWqe::parse(&w).unwrap();
        assert_eq!(p.wqebbs(), 2);
        assert_eq!(p.gathers(), &[Gather::Inline { at: 20, len: 70 }]);
        assert!(!p.signaled());
        // Inline length beyond ds.
        let mut bad = w.clone();
        bad[16..20].copy_from_slice(&(90u32 | INLINE_SEG).to_be_bytes());
        assert_eq!(SendWqe::parse(&bad).err(), Some(WqeError::InlineOverrun));
    }

    #[test]
    fn atomic_and_malformed() {
        let mut w = ctrl(opcode::ATOMIC_CS, 3, 9, 4, 0x08, 0);
        w.extend_from_slice(&0x8000u64.to_be_bytes());
        w.extend_from_slice(&0x77u32.to_be_bytes());
        w.extend_from_slice(&[0; 4]);
        w.extend_from_slice(&5u64.to_be_bytes());
        w.extend_from_slice(&4u64.to_be_bytes());
        w.extend(dseg(8, 0x3001, 0x1000));
        let p = SendWqe::parse(&w).unwrap();
        assert_eq!((p.swap_add, p.compare), (5, 4));
        let mut bad = w.clone();
        bad[48..52].copy_from_slice(&16u32.to_be_bytes());
        assert_eq!(SendWqe::parse(&bad).err(), Some(WqeError::BadAtomicSegment));
        let short = ctrl(opcode::RDMA_WRITE, 0, 9, 1, 0, 0);
        assert_eq!(SendWqe::parse(&short).err(), Some(WqeError::TooShort));
        let unk = ctrl(0x7f, 0, 9, 1, 0, 0);
        assert_eq!(
            SendWqe::parse(&unk).err(),
            Some(WqeError::UnsupportedOpcode(0x7f))
        );
        let zero = ctrl(opcode::NOP, 0, 9, 0, 0, 0);
        assert_eq!(SendWqe::parse(&zero).err(), Some(WqeError::TooShort));
        // ds = 64 written unmasked: bit 6 of qpn_ds, reserved.
        let mut over = ctrl(opcode::SEND, 0, 9, 1, 0, 0);
        over[4..8].copy_from_slice(&((9u32 << 8) | 64).to_be_bytes());
        over.resize(1024, 0);
        assert_eq!(SendWqe::parse(&over).err(), Some(WqeError::DsOverflow));
    }

    #[test]
    fn recv_wqe_terminated_by_invalid_lkey() {
        let mut w = dseg(64, 0x1100, 0x4000);
        w.extend(dseg(32, 0x1100, 0x5000));
        w.extend(dseg(0, INVALID_LKEY, 0));
        w.extend(dseg(999, 0x1100, 0x6000)); // after the terminator: ignored
        let r = RecvWqe::parse(&w);
        assert_eq!(r.entries().len(), 2);
        assert_eq!(r.capacity(), 96);
    }

    /// A receive WQE of more entries than the parsed WQE keeps inline (up to the 128 of a
    /// 2 KiB stride) lists every one of them, in order.
    #[test]
    fn recv_wqe_longer_than_the_inline_entries() {
        for n in [3usize, 4, 5, 9, MAX_SCATTER] {
            let mut w = Vec::new();
            for i in 0..n {
                w.extend(dseg(i as u32 + 1, 0x1100 + i as u32, 0x4000 * i as u64));
            }
            w.resize(2048, 0);
            if n < MAX_SCATTER {
                w[n * 16 + 4..n * 16 + 8].copy_from_slice(&INVALID_LKEY.to_be_bytes());
            }
            let r = RecvWqe::parse(&w);
            assert_eq!(r.entries().len(), n);
            for (i, e) in r.entries().iter().enumerate() {
                assert_eq!(
                    *e,
                    Scatter {
                        len: i as u64 + 1,
                        lkey: 0x1100 + i as u32,
                        addr: 0x4000 * i as u64
                    }
                );
            }
            assert_eq!(r.capacity(), (n * (n + 1) / 2) as u64);
        }
    }
}
