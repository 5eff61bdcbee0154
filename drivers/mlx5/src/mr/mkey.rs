//! CREATE_MKEY / DESTROY_MKEY.

use mlx5_prm::{
    create_mkey_in, create_mkey_out, destroy_mkey_in, destroy_mkey_out, mkc, mkc_access_mode, mkey,
    opcode,
};

use crate::cmd::{get, CmdBuf};
use crate::error::{InvalidInput, Result};
use crate::hal::Hal;
use crate::hca::Device;

use super::{Access, Klm, MAX_MTT_PER_MKEY};

/// What CREATE_MKEY needs.
pub(crate) struct MkeyParams<'a> {
    pub pdn: u32,
    pub iova: u64,
    pub len: u64,
    pub access: Access,
    pub variant: u8,
    pub pg_access: bool,
    /// `mkc.relaxed_ordering_write` / `_read` (already reduced to what the caps allow).
    pub ro_write: bool,
    pub ro_read: bool,
    pub xlt: Xlt<'a>,
    /// `mkc.umr_en`: UMR WQEs may modify the key ([`crate::umr`]).
    pub umr_en: bool,
    /// `mkc.free`: created disabled (a UMR enables it).
    pub free: bool,
    /// Room for translation entries, in octowords, when above what `xlt` carries (a key UMR
    /// loads later; Linux ib/mr.c `set_cache_mkc`).
    pub xlt_room: u32,
}

/// The translation a CREATE_MKEY carries.
#[derive(Clone, Copy)]
pub(crate) enum Xlt<'a> {
    /// MTT mode: log2 page size and page addresses.
    Mtt { page_shift: u32, entries: &'a [u64] },
    /// KLMS mode: the inner keys.
    Klm(&'a [Klm]),
}

/// The relaxed-ordering bits of an mkey for `access` on a device with `caps` (Linux ib/mr.c
/// `set_mkc_access_pd_addr_fields`): write when `relaxed_ordering_write`; read when
/// `relaxed_ordering_read`, or `relaxed_ordering_read_pci_enabled` with PCIe relaxed
/// ordering on, which the HAL does not report, so that half is never used. Without the flag,
/// or without the caps, neither bit: the optional flag is dropped, not refused.
pub(crate) fn relaxed_ordering(access: Access, caps: &crate::caps::Caps) -> (bool, bool) {
    if !access.contains(Access::RELAXED_ORDERING) {
        return (false, false);
    }
    (caps.relaxed_ordering_write, caps.relaxed_ordering_read)
}

/// The CREATE_MKEY command for `p` (MTT: Linux ib/mr.c `reg_create` /
/// `set_mkc_access_pd_addr_fields`; KLMS: one octoword per entry in both sizes, UCX
/// ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`, entries as `uct_ib_mlx5_devx_klm_entry_set`).
pub(crate) fn mkey_cmd(p: &MkeyParams<'_>) -> Result<CmdBuf> {
    let m = |f: mlx5_prm::Field| f.within(create_mkey_in::MEMORY_KEY_MKEY_ENTRY);
    let base = create_mkey_in::KLM_PAS_MTT.byte_offset();
    let (mode, list_bytes, oct) = match p.xlt {
        Xlt::Mtt { entries, .. } => {
            let n = entries.len();
            if n > MAX_MTT_PER_MKEY {
                return Err(InvalidInput::TooManyTranslations {
                    entries: n as u64,
                    max: MAX_MTT_PER_MKEY as u64,
                }
                .into());
            }
            let padded = n + (n & 1); // even count (rdma-core `mlx5_vfio_reg_mr`)
            (
                mkc_access_mode::MTT,
                padded * mkey::MTT_ENTRY_SIZE,
                mkey::mtt_octowords(n as u32),
            )
        }
        Xlt::Klm(k) => (
            mkc_access_mode::KLMS,
            k.len() * mkey::KLM_ENTRY_SIZE,
            k.len() as u32,
        ),
    };
    // The fixed part zeroed; the list is appended below, each byte written once (no zeroed
    // megabyte written over).
    let mut c = CmdBuf::with_room(opcode::CREATE_MKEY, 0, base, list_bytes);
    c.set(
        create_mkey_in::PG_ACCESS,
        (p.pg_access && matches!(p.xlt, Xlt::Mtt { .. })) as u32,
    )
    .set(m(mkc::ACCESS_MODE_1_0), mkc_access_mode::bits_1_0(mode))
    .set(m(mkc::ACCESS_MODE_4_2), mkc_access_mode::bits_4_2(mode))
    .set(m(mkc::A), p.access.contains(Access::REMOTE_ATOMIC) as u32)
    .set(m(mkc::RW), p.access.contains(Access::REMOTE_WRITE) as u32)
    .set(m(mkc::RR), p.access.contains(Access::REMOTE_READ) as u32)
    .set(m(mkc::LW), p.access.contains(Access::LOCAL_WRITE) as u32)
    .set(m(mkc::LR), 1)
    .set(m(mkc::RELAXED_ORDERING_WRITE), p.ro_write as u32)
    .set(m(mkc::RELAXED_ORDERING_READ), p.ro_read as u32)
    // Not bound to a QP (Linux mr.c set_mkc_access_pd_addr_fields: qpn 0xffffff).
    .set(m(mkc::QPN), 0xff_ffff)
    .set(m(mkc::MKEY_7_0), p.variant.into())
    .set(m(mkc::PD), p.pdn)
    .set64(m(mkc::START_ADDR), p.iova)
    .set64(m(mkc::LEN), p.len)
    .set(m(mkc::UMR_EN), p.umr_en as u32)
    .set(m(mkc::FREE), p.free as u32)
    .set(m(mkc::TRANSLATIONS_OCTWORD_SIZE), oct.max(p.xlt_room))
    .set(create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, oct);
    match p.xlt {
        Xlt::Mtt {
            page_shift,
            entries,
        } => {
            c.set(m(mkc::LOG_PAGE_SIZE), page_shift);
            let flags = if p.pg_access { mkey::MTT_PRESENT } else { 0 };
            put_mtt(&mut c.buf, entries, flags);
        }
        Xlt::Klm(k) => {
            c.buf.resize(base + list_bytes, 0);
            for (i, e) in k.iter().enumerate() {
                let at = base + i * mkey::KLM_ENTRY_SIZE;
                c.buf[at + mkey::KLM_BCOUNT..at + mkey::KLM_BCOUNT + 4]
                    .copy_from_slice(&e.byte_count.to_be_bytes());
                c.buf[at + mkey::KLM_KEY..at + mkey::KLM_KEY + 4]
                    .copy_from_slice(&e.mkey.to_be_bytes());
                c.put64(at + mkey::KLM_VA, e.address);
            }
        }
    }
    Ok(c)
}

/// Appends `entries` to `buf` as big-endian MTT entries with `flags`, padded with a zero
/// entry to an even count (rdma-core `mlx5_vfio_reg_mr`). Converted in stack blocks of
/// [`PUT_BLOCK`] entries, each appended with one copy: this runs 2^17 times per command of a
/// large region, where an append per entry cost a length check and a store each.
fn put_mtt(buf: &mut alloc::vec::Vec<u8>, entries: &[u64], flags: u64) {
    let mut tmp = [0u8; PUT_BLOCK * mkey::MTT_ENTRY_SIZE];
    for part in entries.chunks(PUT_BLOCK) {
        for (d, e) in tmp.as_chunks_mut::<8>().0.iter_mut().zip(part) {
            *d = (e | flags).to_be_bytes();
        }
        buf.extend_from_slice(&tmp[..part.len() * mkey::MTT_ENTRY_SIZE]);
    }
    if entries.len() % 2 == 1 {
        buf.extend_from_slice(&[0; mkey::MTT_ENTRY_SIZE]);
    }
}

/// Entries [`put_mtt`] converts per copy (one 512-byte mailbox block's worth).
const PUT_BLOCK: usize = 64;

/// The key a CREATE_MKEY output names.
pub(crate) fn mkey_from_out(out: &[u8], variant: u8) -> u32 {
    mkey::from_index(get(out, create_mkey_out::MKEY_INDEX), variant)
}

impl<H: Hal> Device<H> {
    /// CREATE_MKEY: returns the key `index << 8 | variant`.
    pub(crate) fn create_mkey(&mut self, hal: &H, p: &MkeyParams<'_>) -> Result<u32> {
        let c = mkey_cmd(p)?;
        let mut out = [0u8; create_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)?;
        Ok(mkey_from_out(&out, p.variant))
    }

    /// DESTROY_MKEY (takes `mkey >> 8`).
    pub(crate) fn destroy_mkey(&mut self, hal: &H, key: u32) -> Result<()> {
        let mut c = CmdBuf::new(opcode::DESTROY_MKEY, 0, destroy_mkey_in::BYTES);
        c.set(destroy_mkey_in::MKEY_INDEX, mkey::index(key));
        let mut out = [0u8; destroy_mkey_out::BYTES];
        self.exec(hal, &c, &mut out)
    }
}
