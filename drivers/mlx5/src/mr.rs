//! Memory keys: CREATE_MKEY / DESTROY_MKEY in MTT mode, with the fewest translation entries.
//!
//! Sources: Linux ib/mr.c (`set_mkc_access_pd_addr_fields`, `reg_create`), rdma-core
//! mlx5_vfio.c `vfio_reg_mr`; facts traps 1 (absolute `log_page_size`), 5 (key = index << 8 |
//! variant), 6 (MTT entry format), 7 (`translations_octword_size`).
//!
//! Translation planning: the MR's virtual range `[iova, iova + len)` is made of physically
//! contiguous chunks. For a page size `2^s` the range is cut at `2^s`-aligned virtual
//! addresses; that works when every chunk has the same offset inside a page virtually and
//! physically, and chunks meet at page boundaries. Among the sizes that work (4 KiB .. 1 GiB)
//! the planner picks the one with the fewest entries (the smallest such size on a tie), so a
//! contiguous region becomes one entry and a list of 2 MiB huge pages one entry per page.

use alloc::vec::Vec;

use mlx5_prm::{
    create_mkey_in, create_mkey_out, destroy_mkey_in, destroy_mkey_out, mkc, mkc_access_mode, mkey,
    opcode,
};

use crate::cmd::{get, CmdBuf};
use crate::error::{InvalidInput, Result};
use crate::hal::Hal;
use crate::hca::Device;

/// Smallest translation page: 4 KiB (`MLX5_ADAPTER_PAGE_SHIFT`).
pub const MIN_PAGE_SHIFT: u32 = 12;
/// Largest translation page the planner uses: 1 GiB.
pub const MAX_PAGE_SHIFT: u32 = 30;

/// A physically contiguous piece of memory: bus address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhysChunk {
    /// Bus (IOVA) address of the first byte.
    pub bus: u64,
    /// Length in bytes.
    pub len: u64,
}

/// How a region is translated: page shift and one bus address per page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Translation {
    /// log2 of the page size (absolute, facts trap 1).
    pub page_shift: u32,
    /// The page addresses, in virtual order.
    pub entries: Vec<u64>,
}

fn count_at(chunks: &[PhysChunk], iova: u64, s: u32) -> Option<u64> {
    let ps = 1u64 << s;
    let mask = ps - 1;
    let mut v = iova;
    let mut n = 0u64;
    let last = chunks.len().checked_sub(1)?;
    for (i, c) in chunks.iter().enumerate() {
        if c.len == 0 {
            return None;
        }
        // Same offset inside the page, virtually and physically.
        if (v & mask) != (c.bus & mask) {
            return None;
        }
        let end = v.checked_add(c.len)?;
        // Interior boundaries must be page boundaries.
        if i > 0 && v & mask != 0 {
            return None;
        }
        if i < last && end & mask != 0 {
            return None;
        }
        n += (end.div_ceil(ps)) - (v >> s);
        v = end;
    }
    Some(n)
}

/// Plans the translation of `[iova, iova + total)` made of `chunks` in order.
pub fn plan(chunks: &[PhysChunk], iova: u64) -> Result<Translation> {
    let mut best: Option<(u64, u32)> = None;
    for s in MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT {
        if let Some(n) = count_at(chunks, iova, s) {
            if best.is_none_or(|(bn, _)| n < bn) {
                best = Some((n, s));
            }
        }
    }
    let Some((n, s)) = best else {
        return Err(InvalidInput::PageList.into());
    };
    let ps = 1u64 << s;
    let mut entries = Vec::with_capacity(n as usize);
    let mut v = iova;
    for c in chunks {
        let end = v + c.len;
        // Physical address of the page holding v.
        let mut p = c.bus - (v & (ps - 1));
        let mut page = v >> s;
        while page < end.div_ceil(ps) {
            entries.push(p);
            p += ps;
            page += 1;
        }
        v = end;
    }
    Ok(Translation {
        page_shift: s,
        entries,
    })
}

/// Verbs access flags (`IBV_ACCESS_*` values, libibverbs verbs.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: Access = Access(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: Access = Access(2);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: Access = Access(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Everything.
    pub const ALL: Access = Access(15);
    /// No access beyond local read.
    pub const NONE: Access = Access(0);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }

    /// The verbs rule (Linux include/rdma/ib_verbs.h `ib_check_mr_access`): remote write and
    /// remote atomic need local write; unknown bits are refused.
    pub fn validate(self) -> Result<()> {
        if self.0 & !Access::ALL.0 != 0 {
            return Err(InvalidInput::AccessFlags.into());
        }
        if (self.contains(Access::REMOTE_WRITE) || self.contains(Access::REMOTE_ATOMIC))
            && !self.contains(Access::LOCAL_WRITE)
        {
            return Err(InvalidInput::AccessFlags.into());
        }
        Ok(())
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// What CREATE_MKEY needs.
pub(crate) struct MkeyParams<'a> {
    pub pdn: u32,
    pub iova: u64,
    pub len: u64,
    pub access: Access,
    pub variant: u8,
    pub pg_access: bool,
    pub tr: &'a Translation,
}

impl<H: Hal> Device<H> {
    /// CREATE_MKEY (MTT mode): returns the key `index << 8 | variant`.
    pub(crate) fn create_mkey(&mut self, hal: &H, p: &MkeyParams<'_>) -> Result<u32> {
        let n = p.tr.entries.len();
        let padded = n + (n & 1); // even count (facts trap 7)
        let mut c = CmdBuf::new(
            opcode::CREATE_MKEY,
            0,
            create_mkey_in::KLM_PAS_MTT.byte_offset() + padded * mkey::MTT_ENTRY_SIZE,
        );
        let m = |f: mlx5_prm::Field| f.within(create_mkey_in::MEMORY_KEY_MKEY_ENTRY);
        let oct = mkey::mtt_octowords(n as u32);
        c.set(create_mkey_in::PG_ACCESS, p.pg_access as u32)
            .set(
                m(mkc::ACCESS_MODE_1_0),
                mkc_access_mode::bits_1_0(mkc_access_mode::MTT),
            )
            .set(
                m(mkc::ACCESS_MODE_4_2),
                mkc_access_mode::bits_4_2(mkc_access_mode::MTT),
            )
            .set(m(mkc::A), p.access.contains(Access::REMOTE_ATOMIC) as u32)
            .set(m(mkc::RW), p.access.contains(Access::REMOTE_WRITE) as u32)
            .set(m(mkc::RR), p.access.contains(Access::REMOTE_READ) as u32)
            .set(m(mkc::LW), p.access.contains(Access::LOCAL_WRITE) as u32)
            .set(m(mkc::LR), 1)
            // Not bound to a QP (Linux mr.c set_mkc_access_pd_addr_fields: qpn 0xffffff).
            .set(m(mkc::QPN), 0xff_ffff)
            .set(m(mkc::MKEY_7_0), p.variant.into())
            .set(m(mkc::PD), p.pdn)
            .set64(m(mkc::START_ADDR), p.iova)
            .set64(m(mkc::LEN), p.len)
            .set(m(mkc::TRANSLATIONS_OCTWORD_SIZE), oct)
            .set(m(mkc::LOG_PAGE_SIZE), p.tr.page_shift)
            .set(create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, oct);
        let flags = if p.pg_access { mkey::MTT_PRESENT } else { 0 };
        let base = create_mkey_in::KLM_PAS_MTT.byte_offset();
        for (i, e) in p.tr.entries.iter().enumerate() {
            c.put64(base + i * mkey::MTT_ENTRY_SIZE, e | flags);
        }
        let mut out = [0u8; create_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok(mkey::from_index(
            get(&out, create_mkey_out::MKEY_INDEX),
            p.variant,
        ))
    }

    /// DESTROY_MKEY (takes `mkey >> 8`).
    pub(crate) fn destroy_mkey(&mut self, hal: &H, key: u32) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
        c.set(destroy_mkey_in::MKEY_INDEX, mkey::index(key));
        let mut out = [0u8; destroy_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)
    }
}

/// Checks a registration request before anything is sent.
pub(crate) fn check_request(len: u64, iova: u64, access: Access, log_max_mrw_sz: u8) -> Result<()> {
    access.validate()?;
    if len == 0 {
        return Err(InvalidInput::ZeroLength.into());
    }
    if iova.checked_add(len).is_none() {
        return Err(InvalidInput::LengthOverflow.into());
    }
    if log_max_mrw_sz != 0 && log_max_mrw_sz < 64 && len > 1u64 << log_max_mrw_sz {
        return Err(InvalidInput::LengthOverflow.into());
    }
    Ok(())
}

/// A recently destroyed key that must not come back at once (ReDMArk: keys are not recycled
/// right after dereg).
pub(crate) const QUARANTINE: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_region_is_one_entry() {
        let t = plan(
            &[PhysChunk {
                bus: 0x4020_0000,
                len: 2 << 20,
            }],
            0x4020_0000,
        )
        .unwrap();
        assert_eq!(t.entries, alloc::vec![0x4020_0000]);
        assert_eq!(t.page_shift, 21);
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 64 << 20,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!(t.entries.len(), 1);
        assert_eq!(t.page_shift, 26);
        let t = plan(
            &[PhysChunk {
                bus: 0x4000_0000,
                len: 1 << 30,
            }],
            0x4000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (1, 30));
        // 4 GiB contiguous: four 1 GiB entries.
        let t = plan(
            &[PhysChunk {
                bus: 0x1_0000_0000,
                len: 4 << 30,
            }],
            0x1_0000_0000,
        )
        .unwrap();
        assert_eq!((t.entries.len(), t.page_shift), (4, 30));
    }

    #[test]
    fn huge_pages_are_one_entry_each() {
        let pages: Vec<PhysChunk> = [0x8000_0000u64, 0x4000_0000, 0x1_2340_0000]
            .iter()
            .map(|&b| PhysChunk {
                bus: b,
                len: 2 << 20,
            })
            .collect();
        let t = plan(&pages, 0x7f00_0000_0000).unwrap();
        assert_eq!(t.page_shift, 21);
        assert_eq!(
            t.entries,
            alloc::vec![0x8000_0000, 0x4000_0000, 0x1_2340_0000]
        );
    }

    #[test]
    fn small_pages_and_offsets() {
        // Two 4 KiB pages, scattered, region starting 0x100 into the first.
        let t = plan(
            &[
                PhysChunk {
                    bus: 0x5100,
                    len: 0xf00,
                },
                PhysChunk {
                    bus: 0x9000,
                    len: 0x800,
                },
            ],
            0x1100,
        )
        .unwrap();
        assert_eq!(t.page_shift, 12);
        assert_eq!(t.entries, alloc::vec![0x5000, 0x9000]);
        // Mismatched offsets cannot be translated.
        assert!(plan(
            &[PhysChunk {
                bus: 0x5100,
                len: 0x100
            }],
            0x1200
        )
        .is_err());
        // A chunk boundary inside a page cannot either.
        assert!(plan(
            &[
                PhysChunk {
                    bus: 0x5000,
                    len: 0x800
                },
                PhysChunk {
                    bus: 0x9800,
                    len: 0x800
                }
            ],
            0
        )
        .is_err());
    }

    #[test]
    fn access_rules() {
        assert!(Access::REMOTE_WRITE.validate().is_err());
        assert!(Access::REMOTE_ATOMIC.validate().is_err());
        assert!((Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .validate()
            .is_ok());
        assert!(Access::REMOTE_READ.validate().is_ok());
        assert!(Access(0x100).validate().is_err());
        assert_eq!(
            check_request(0, 0, Access::NONE, 0),
            Err(InvalidInput::ZeroLength.into())
        );
        assert_eq!(
            check_request(16, u64::MAX - 4, Access::NONE, 0),
            Err(InvalidInput::LengthOverflow.into())
        );
    }
}
