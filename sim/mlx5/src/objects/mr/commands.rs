use mlx5_prm::{
    cmd_hca_cap, cmd_status, create_mkey_in, create_mkey_out, destroy_mkey_in, linux_layout, mkc,
    mkc_access_mode, mkey, query_mkey_in, query_mkey_out,
};

use super::{
    syndrome, Access, KlmEntry, Mkey, MttEntry, Translation, ANY_QPN, MAX_KLM_BYTE_COUNT,
    MAX_MTT_PAGE_SHIFT, MIN_MTT_PAGE_SHIFT,
};
use crate::control::caps::Caps;
use crate::control::result::{bad_param, err, get, CmdResult};

use crate::objects::Objects;

/// CREATE_MKEY (opcode 0x200): validates the mkc and the translation list, allocates an index
/// and returns it in `create_mkey_out.mkey_index` (the usable key is `index << 8 | mkey_7_0`).
pub(crate) fn create_mkey(
    caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let ctx = create_mkey_in::MEMORY_KEY_MKEY_ENTRY
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    if get(input, create_mkey_in::MKEY_UMEM_VALID) != 0 {
        return Err(bad_param(syndrome::UMEM_UNSUPPORTED));
    }
    let mode = (get(ctx, mkc::ACCESS_MODE_4_2) << 2) | get(ctx, mkc::ACCESS_MODE_1_0);
    let pd = get(ctx, mkc::PD);
    if !objects.pds.contains(pd) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_PD));
    }
    let qpn = get(ctx, mkc::QPN);
    if qpn != ANY_QPN && !objects.qps.contains(qpn) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_QPN));
    }
    let start = mkc::START_ADDR.get_u64(ctx).unwrap_or(0);
    let length64 = get(ctx, mkc::LENGTH64) != 0;
    let len: u128 = if length64 {
        1u128 << 64
    } else {
        mkc::LEN.get_u64(ctx).unwrap_or(0) as u128
    };
    if start as u128 + len > 1u128 << 64 {
        return Err(bad_param(syndrome::LENGTH_OVERFLOW));
    }
    // Relaxed ordering only where advertised (Linux ib/mr.c set_mkc_access_pd_addr_fields
    // sets the bits only under the caps; model choice: refuse them otherwise).
    if get(ctx, mkc::RELAXED_ORDERING_WRITE) != 0
        && caps.general(cmd_hca_cap::RELAXED_ORDERING_WRITE) == 0
    {
        return Err(bad_param(syndrome::RELAXED_ORDERING_UNSUPPORTED));
    }
    if get(ctx, mkc::RELAXED_ORDERING_READ) != 0
        && caps.general(linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ) == 0
        && caps.general(linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED) == 0
    {
        return Err(bad_param(syndrome::RELAXED_ORDERING_UNSUPPORTED));
    }
    if !length64 {
        let log_max = caps.general(cmd_hca_cap::LOG_MAX_MRW_SZ);
        if log_max != 0 && log_max < 64 && len > 1u128 << log_max {
            return Err(err(cmd_status::LIM_ERR, syndrome::LENGTH_ABOVE_CAP));
        }
    }

    let translation = match mode as u8 {
        mkc_access_mode::PA => Translation::Pa,
        mkc_access_mode::MTT => {
            if length64 {
                return Err(bad_param(syndrome::LENGTH64_NOT_PA));
            }
            let page_shift = get(ctx, mkc::LOG_PAGE_SIZE); // absolute (Linux ib/mr.c `reg_create`)
            if !(MIN_MTT_PAGE_SHIFT..=MAX_MTT_PAGE_SHIFT).contains(&page_shift) {
                return Err(bad_param(syndrome::BAD_LOG_PAGE_SIZE));
            }
            let page = 1u128 << page_shift;
            let first = start as u128 >> page_shift;
            let end = (start as u128 + len).div_ceil(page);
            let npages = (end - first) as u64;
            let size = get(ctx, mkc::TRANSLATIONS_OCTWORD_SIZE) as u64;
            let actual = get(input, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE) as u64;
            if actual > size {
                return Err(bad_param(syndrome::MTT_ACTUAL_EXCEEDS_SIZE));
            }
            // Two 8-byte MTTs per octoword (Linux ib/mr.c `get_octo_len`).
            if actual * 2 < npages {
                return Err(bad_param(syndrome::MTT_TOO_FEW));
            }
            let list = &input[create_mkey_in::BYTES..];
            if (list.len() as u64) < npages * mkey::MTT_ENTRY_SIZE as u64
                || (list.len() as u64) < actual * mkey::OCTOWORD_SIZE as u64
            {
                return Err(err(
                    cmd_status::BAD_INP_LEN_ERR,
                    syndrome::MTT_INPUT_TRUNCATED,
                ));
            }
            let pg_access = get(input, create_mkey_in::PG_ACCESS) != 0;
            let umr_en = get(ctx, mkc::UMR_EN) != 0;
            // A UMR-enabled key has room for `translations_octword_size` octowords that UMR
            // WQEs fill later (Linux ib/mr.c `set_cache_mkc`: a free key, `umr_en`, and the
            // size only); entries not loaded yet are not present.
            let room = if umr_en {
                (size * 2).max(npages)
            } else {
                npages
            };
            if umr_en && room > 1 << 24 {
                return Err(bad_param(syndrome::MTT_TOO_FEW));
            }
            let mut entries = Vec::with_capacity(room as usize);
            // Every entry is checked, in bulk: the address bits below the page size of all
            // entries OR'ed together, refused if any is set.
            // mlx5_ifc_mtt_bits: ptag above bit 8, wr_en bit 1, rd_en bit 0; the enables
            // count only with pg_access (Linux ib/mr.c `reg_create`).
            let low = (page as u64 - 1) & !0xff;
            let forced = if pg_access {
                0
            } else {
                mkey::MTT_READ | mkey::MTT_WRITE
            };
            let (raw, _) = list[..npages as usize * mkey::MTT_ENTRY_SIZE].as_chunks::<8>();
            // The check first: the entries OR'ed as they lie (byte order does not matter
            // to an OR; one swap of the result), then the entries decoded into the key's
            // list, each written once.
            let any = raw.iter().fold(0, |a, b| a | u64::from_ne_bytes(*b));
            if u64::from_be(any) & low != 0 {
                return Err(bad_param(syndrome::MTT_MISALIGNED));
            }
            entries.extend(
                raw.iter()
                    .map(|b| MttEntry::from_mtt(u64::from_be_bytes(*b), forced)),
            );
            entries.resize(room as usize, MttEntry(0));
            Translation::Mtt {
                page_shift,
                entries,
            }
        }
        mkc_access_mode::KLMS => {
            // A free `umr_en` key may be created empty: its list is loaded later by UMR
            // (Linux ib/mr.c `mlx5_ib_alloc_mw`: free, umr_en, KLMS, `translations_octword_size`
            // only, no list and no length; [`crate::objects::mw`]).
            let empty_ok = get(ctx, mkc::FREE) != 0 && get(ctx, mkc::UMR_EN) != 0;
            if length64 || (len == 0 && !empty_ok) {
                return Err(bad_param(syndrome::KLM_BAD_LENGTH));
            }
            // One octoword per 16-byte entry (UCX ib_mlx5dv_md.c `uct_ib_mlx5_devx_reg_ksm`
            // sets both sizes to the entry count).
            let size = get(ctx, mkc::TRANSLATIONS_OCTWORD_SIZE) as u64;
            let actual = get(input, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE) as u64;
            if actual > size {
                return Err(bad_param(syndrome::MTT_ACTUAL_EXCEEDS_SIZE));
            }
            if actual == 0 && !(empty_ok && len == 0 && size > 0) {
                return Err(bad_param(syndrome::KLM_BAD_LENGTH));
            }
            let log_max = caps.general(cmd_hca_cap::LOG_MAX_KLM_LIST_SIZE);
            if size.max(actual) > 1u64 << log_max.min(63) {
                return Err(bad_param(syndrome::KLM_LIST_TOO_LONG));
            }
            let list = &input[create_mkey_in::BYTES..];
            if (list.len() as u64) < actual * mkey::KLM_ENTRY_SIZE as u64 {
                return Err(err(
                    cmd_status::BAD_INP_LEN_ERR,
                    syndrome::MTT_INPUT_TRUNCATED,
                ));
            }
            let mut entries = Vec::with_capacity(actual as usize);
            let mut off = 0u64;
            for e in list
                .chunks_exact(mkey::KLM_ENTRY_SIZE)
                .take(actual as usize)
            {
                let be32 = |o: usize| crate::be::be32(e, o);
                let bcount = u64::from(be32(mkey::KLM_BCOUNT));
                // Model choice: a zero byte count is refused (no source says what it means).
                if bcount == 0 || bcount > MAX_KLM_BYTE_COUNT {
                    return Err(bad_param(syndrome::KLM_BAD_BYTE_COUNT));
                }
                let va = u64::from_be_bytes(
                    e[mkey::KLM_VA..mkey::KLM_VA + 8]
                        .try_into()
                        .unwrap_or([0; 8]),
                );
                entries.push(KlmEntry {
                    off,
                    bcount,
                    key: be32(mkey::KLM_KEY),
                    va,
                });
                off += bcount; // at most 2^16 entries of at most 2^31 bytes
            }
            if (off as u128) < len {
                return Err(bad_param(syndrome::KLM_TOO_SHORT));
            }
            Translation::Klm { entries }
        }
        _ => return Err(bad_param(syndrome::UNSUPPORTED_ACCESS_MODE)),
    };

    let log_max_mkey = caps.general(cmd_hca_cap::LOG_MAX_MKEY).min(24);
    let limit = 1u32 << log_max_mkey;
    if objects.mkeys.keys.len() as u64 >= limit as u64 {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_MKEYS));
    }
    let index = objects
        .mkeys
        .alloc_index(limit)
        .ok_or(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_MKEYS))?;
    let mut access = Access::default();
    for (f, a) in [
        (mkc::LR, Access::LOCAL_READ),
        (mkc::LW, Access::LOCAL_WRITE),
        (mkc::RR, Access::REMOTE_READ),
        (mkc::RW, Access::REMOTE_WRITE),
        (mkc::A, Access::REMOTE_ATOMIC),
    ] {
        if get(ctx, f) != 0 {
            access = access.union(a);
        }
    }
    let mut saved = [0u8; mkc::BYTES];
    saved.copy_from_slice(&ctx[..mkc::BYTES]);
    let m = Mkey {
        index,
        variant: get(ctx, mkc::MKEY_7_0) as u8,
        pd,
        qpn,
        access,
        start,
        len,
        free: get(ctx, mkc::FREE) != 0,
        umr_en: get(ctx, mkc::UMR_EN) != 0,
        en_rinval: get(ctx, mkc::EN_RINVAL) != 0,
        xlt_octowords: get(ctx, mkc::TRANSLATIONS_OCTWORD_SIZE),
        translation,
        mkc: saved,
    };
    objects.mkeys.keys.insert(index, m);
    let _ = create_mkey_out::MKEY_INDEX.set(output, index);
    Ok(())
}

/// DESTROY_MKEY (opcode 0x202): takes `mkey_index = mkey >> 8`.
pub(crate) fn destroy_mkey(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let index = get(input, destroy_mkey_in::MKEY_INDEX);
    match objects.mkeys.keys.remove(&index) {
        Some(_) => Ok(()),
        None => Err(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_MKEY)),
    }
}

/// QUERY_MKEY (opcode 0x201): returns the mkc (with the current `free` state) and the first
/// two translation entries.
pub(crate) fn query_mkey(
    _caps: &Caps,
    objects: &mut Objects,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let index = get(input, query_mkey_in::MKEY_INDEX);
    let m = objects
        .mkeys
        .keys
        .get(&index)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_MKEY))?;
    let mut ctx = m.mkc;
    let _ = mkc::FREE.set(&mut ctx, m.free as u32);
    let _ = query_mkey_out::MEMORY_KEY_MKEY_ENTRY.write_bytes(output, &ctx);
    if let Translation::Mtt { entries, .. } = &m.translation {
        let mut pas = [0u8; 16];
        for (i, e) in entries.iter().take(2).enumerate() {
            let raw = e.addr() | (e.write() as u64) << 1 | e.read() as u64;
            pas[i * 8..i * 8 + 8].copy_from_slice(&raw.to_be_bytes());
        }
        let _ = query_mkey_out::BSF0_KLM0_PAS_MTT0_1.write_bytes(output, &pas);
    }
    // An indirect key: its first two KLM entries (`bsf0_klm0_pas_mtt0_1`,
    // `bsf1_klm1_pas_mtt2_3`), each as `mlx5_ifc_klm_bits`.
    if let Translation::Klm { entries } = &m.translation {
        for (e, f) in entries.iter().zip([
            query_mkey_out::BSF0_KLM0_PAS_MTT0_1,
            query_mkey_out::BSF1_KLM1_PAS_MTT2_3,
        ]) {
            let mut k = [0u8; mkey::KLM_ENTRY_SIZE];
            k[mkey::KLM_BCOUNT..mkey::KLM_BCOUNT + 4]
                .copy_from_slice(&(e.bcount as u32).to_be_bytes());
            k[mkey::KLM_KEY..mkey::KLM_KEY + 4].copy_from_slice(&e.key.to_be_bytes());
            k[mkey::KLM_VA..mkey::KLM_VA + 8].copy_from_slice(&e.va.to_be_bytes());
            let _ = f.write_bytes(output, &k);
        }
    }
    Ok(())
}
