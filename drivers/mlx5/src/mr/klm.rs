//! Registrations too long for one MTT key, or at an IOVA the pages' offsets do not match:
//! MTT keys under one indirect KLM key.

use alloc::vec::Vec;

use crate::error::{InvalidInput, Result};

use super::plan::{plan_one, plan_to};
use super::{PhysChunk, Translation, MAX_KLM_BYTE_COUNT, MAX_MTT_PER_MKEY};

/// One KLM entry (`struct mlx5_ifc_klm_bits`: be32 byte_count, be32 mkey, be64 address;
/// rdma-core / DPDK mlx5_prm.h, Linux include/linux/mlx5/qp.h `struct mlx5_klm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Klm {
    /// Bytes of the indirect key's range this entry maps.
    pub byte_count: u32,
    /// The inner (direct) key.
    pub mkey: u32,
    /// Where in the inner key's address space they start.
    pub address: u64,
}

/// How a registration is laid out on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KlmPlan {
    /// The page translation, of the virtual range starting at `mtt_va`.
    pub tr: Translation,
    /// Virtual address of the region's first byte in the MTT keys' address space: the IOVA
    /// itself when the chunks' page offsets match it, else the first chunk's bus address
    /// (the indirect key then maps the IOVA onto it).
    pub mtt_va: u64,
    /// Inner MTT keys: `(va, len, first entry, entry count)`; empty for a direct MTT key.
    pub segments: Vec<(u64, u64, usize, usize)>,
}

impl KlmPlan {
    /// The plan of a region one page translates: one direct MTT key of one entry at page
    /// shift `page_shift`, from `iova` (what [`plan_reg`] gives for one chunk whose
    /// [`super::plan::one_page`] is `(page_shift, entry)`).
    #[inline]
    pub(crate) fn one_page(page_shift: u32, entry: u64, iova: u64) -> KlmPlan {
        KlmPlan {
            tr: Translation {
                page_shift,
                entries: super::Entries::one(entry),
            },
            mtt_va: iova,
            segments: Vec::new(),
        }
    }
}

/// Plans a registration of `chunks` at `iova`: one MTT key when the pages' offsets match the
/// IOVA and the list fits one command; otherwise MTT keys of at most
/// `min(MAX_MTT_PER_MKEY, MAX_KLM_BYTE_COUNT / page)` entries under one KLM key of at most
/// `1 << log_max_klm` entries.
pub fn plan_reg(chunks: &[PhysChunk], iova: u64, log_max_klm: u8) -> Result<KlmPlan> {
    // One chunk whose page offset matches the IOVA (every small registration): one MTT key,
    // as below, without the general path's second plan and segment walk.
    if let [c] = chunks {
        if let Ok(tr) = plan_one(c, iova) {
            if tr.entries.len() <= MAX_MTT_PER_MKEY {
                return Ok(KlmPlan {
                    tr,
                    mtt_va: iova,
                    segments: Vec::new(),
                });
            }
        }
    }
    let (tr, mtt_va, end) = match plan_to(chunks, iova) {
        Ok((t, end)) => (t, iova, end),
        Err(e) => {
            // Same pages at the first chunk's own address: the IOVA's page offset no longer
            // matters, the KLM entry's `address` absorbs the difference.
            let v = chunks.first().map(|c| c.bus).ok_or(e)?;
            match plan_to(chunks, v) {
                Ok((t, end)) => (t, v, end),
                Err(_) => return Err(e),
            }
        }
    };
    if mtt_va == iova && tr.entries.len() <= MAX_MTT_PER_MKEY {
        return Ok(KlmPlan {
            tr,
            mtt_va,
            segments: Vec::new(),
        });
    }
    let ps = 1u64 << tr.page_shift;
    let per = (MAX_KLM_BYTE_COUNT >> tr.page_shift).clamp(1, MAX_MTT_PER_MKEY as u64) as usize;
    let base = mtt_va & !(ps - 1);
    let mut segments = Vec::new();
    let mut first = 0usize;
    while first < tr.entries.len() {
        let count = per.min(tr.entries.len() - first);
        let lo = (base + first as u64 * ps).max(mtt_va);
        let hi = (base + (first + count) as u64 * ps).min(end);
        segments.push((lo, hi - lo, first, count));
        first += count;
    }
    let max = if log_max_klm >= 63 {
        u64::MAX
    } else {
        1u64 << log_max_klm
    };
    if segments.len() as u64 > max {
        return Err(InvalidInput::TooManyTranslations {
            entries: tr.entries.len() as u64,
            max: max.saturating_mul(per as u64),
        }
        .into());
    }
    Ok(KlmPlan {
        tr,
        mtt_va,
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-page plan the mkey cache's shortcut builds is the one `plan_reg` makes.
    #[test]
    fn one_page_plan_is_plan_regs() {
        for (bus, len, iova) in [
            (0x10_0000u64, 4096u64, 0x10_0000u64),
            (0x10_0123, 0x100, 0x7f00_0000_0123),
            (0x20_0000, 0x20_0000, 0x4020_0000),
            (0x1f_f000, 0x2000, 0x1f_f000),
        ] {
            let c = PhysChunk { bus, len };
            let Some((s, e)) = super::super::plan::one_page(&c, iova) else {
                panic!("{c:?} at {iova:#x} is one page");
            };
            assert_eq!(plan_reg(&[c], iova, 16), Ok(KlmPlan::one_page(s, e, iova)));
        }
    }

    #[test]
    fn long_lists_and_odd_iovas_become_klm_segments() {
        // Fits one command at a matching IOVA: direct.
        let c: Vec<PhysChunk> = (0..MAX_MTT_PER_MKEY as u64)
            .map(|i| PhysChunk {
                bus: (i * 2 + 1) << 12,
                len: 4096,
            })
            .collect();
        let p = plan_reg(&c, 0x10_0000, 16).unwrap();
        assert!(p.segments.is_empty());
        assert_eq!(p.mtt_va, 0x10_0000);
        // One page more: two MTT keys, split at a page boundary, covering the region exactly.
        let mut c2 = c.clone();
        c2.push(PhysChunk {
            bus: 1 << 40,
            len: 0x800,
        });
        let p = plan_reg(&c2, 0x10_0000, 16).unwrap();
        let ps = 4096u64;
        assert_eq!(
            p.segments,
            alloc::vec![
                (0x10_0000, MAX_MTT_PER_MKEY as u64 * ps, 0, MAX_MTT_PER_MKEY),
                (
                    0x10_0000 + MAX_MTT_PER_MKEY as u64 * ps,
                    0x800,
                    MAX_MTT_PER_MKEY,
                    1
                ),
            ]
        );
        // More segments than 1 << log_max_klm_list_size: refused before anything is sent.
        assert!(matches!(
            plan_reg(&c2, 0x10_0000, 0),
            Err(crate::Error::Invalid(
                InvalidInput::TooManyTranslations { .. }
            ))
        ));
        // 1 GiB pages at an IOVA with another page offset: planned at the memory's own
        // address, and no KLM entry above 2 GiB (two 1 GiB pages each).
        let g: Vec<PhysChunk> = (0..5u64)
            .map(|i| PhysChunk {
                bus: (8 + 2 * i) << 30,
                len: 1 << 30,
            })
            .collect();
        let p = plan_reg(&g, 0x1234, 16).unwrap();
        assert_eq!((p.mtt_va, p.tr.page_shift), (8 << 30, 30));
        let lens: Vec<u64> = p.segments.iter().map(|s| s.1).collect();
        assert_eq!(lens, alloc::vec![2 << 30, 2 << 30, 1 << 30]);
        assert!(lens.iter().all(|&l| l <= MAX_KLM_BYTE_COUNT));
        // A layout no IOVA fixes (a chunk boundary inside a page) stays an error.
        let bad = [
            PhysChunk {
                bus: 0x1000,
                len: 0x800,
            },
            PhysChunk {
                bus: 0x3800,
                len: 0x800,
            },
        ];
        assert_eq!(
            plan_reg(&bad, 0x1000, 16),
            Err(InvalidInput::PageList.into())
        );
    }
}
