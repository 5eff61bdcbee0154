//! Indirect (KLMS) mkeys created by CREATE_MKEY: the list in `klm_pas_mtt`, every rejection
//! with its syndrome, and the translation through the inner keys with their checks.

#[path = "datapath_common/mod.rs"]
mod dp;
#[path = "raw/mod.rs"]
mod raw;

use dp::*;
use mlx5_prm::*;
use mlx5_sim::objects::mr::{syndrome as mrs, Access, MrFault};
use mlx5_sim::InProcHca;
use raw::{input, set};

fn env() -> Env {
    Env::new(InProcHca::deterministic(), 1)
}

/// CREATE_MKEY input of a KLMS key over `[start, start + len)` with `entries` (byte_count,
/// mkey, address); `octo` overrides both octoword sizes.
fn klm_input(
    pd: u32,
    start: u64,
    len: u64,
    access: u8,
    entries: &[(u32, u32, u64)],
    octo: Option<(u32, u32)>,
) -> Vec<u8> {
    let mut i = input(
        opcode::CREATE_MKEY,
        0,
        create_mkey_in::BYTES + 16 * entries.len(),
    );
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    set(
        &mut i,
        mkc::ACCESS_MODE_1_0.within(m),
        mkc_access_mode::bits_1_0(mkc_access_mode::KLMS),
    );
    set_mkc_key(&mut i, m, access, 0x77, pd, start, len);
    let (size, actual) = octo.unwrap_or((entries.len() as u32, entries.len() as u32));
    set(&mut i, mkc::TRANSLATIONS_OCTWORD_SIZE.within(m), size);
    set(
        &mut i,
        create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
        actual,
    );
    for (k, &(bc, key, va)) in entries.iter().enumerate() {
        let at = create_mkey_in::BYTES + 16 * k;
        i[at + mkey::KLM_BCOUNT..at + mkey::KLM_BCOUNT + 4].copy_from_slice(&bc.to_be_bytes());
        i[at + mkey::KLM_KEY..at + mkey::KLM_KEY + 4].copy_from_slice(&key.to_be_bytes());
        i[at + mkey::KLM_VA..at + mkey::KLM_VA + 8].copy_from_slice(&va.to_be_bytes());
    }
    i
}

fn klm_key(e: &mut Env, start: u64, len: u64, access: u8, entries: &[(u32, u32, u64)]) -> u32 {
    let d = e
        .raw
        .exec(&klm_input(e.pd, start, len, access, entries, None), 16);
    d.ok();
    mkey::from_index(d.get(create_mkey_out::MKEY_INDEX), 0x77)
}

#[test]
fn klm_key_translates_through_inner_keys() {
    let mut e = env();
    let a = e.alloc(2 * 4096);
    let b = e.alloc(2 * 4096);
    // Two inner keys with local rights only; the indirect key maps IOVA 0x1_0000_0100.. onto
    // 0x200 bytes of `a` + 0x1000 and then 0x1800 bytes of `b`.
    let ka = e.mkey(a, 2 * 4096, LR | LW);
    let kb = e.mkey(b, 2 * 4096, LR | LW);
    let iova = 0x1_0000_0100;
    let k = klm_key(
        &mut e,
        iova,
        0x1a00,
        ALL,
        &[(0x200, ka, a + 0x1000), (0x1800, kb, b + 0x10)],
    );
    let pd = e.pd;
    e.dev().with_hca(|h| {
        let t = h.mkeys();
        assert_eq!(
            t.translate(k, iova, 0x1a00, Access::REMOTE_WRITE, pd),
            Ok(vec![(a + 0x1000, 0x200), (b + 0x10, 0x1800)])
        );
        // First and last byte, one before, one past.
        assert!(t.translate(k, iova, 1, Access::REMOTE_READ, pd).is_ok());
        assert!(t
            .translate(k, iova + 0x19ff, 1, Access::REMOTE_READ, pd)
            .is_ok());
        assert_eq!(
            t.translate(k, iova - 1, 1, Access::REMOTE_READ, pd),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(k, iova + 0x1a00, 1, Access::REMOTE_READ, pd),
            Err(MrFault::OutOfBounds)
        );
        assert_eq!(
            t.translate(k, iova + 0x1900, 0x101, Access::REMOTE_READ, pd),
            Err(MrFault::OutOfBounds)
        );
        // The indirect key's rights and PD are checked, and its variant.
        assert_eq!(
            t.translate(k, iova, 8, Access::LOCAL_READ, pd + 1),
            Err(MrFault::PdMismatch)
        );
        assert_eq!(
            t.translate(k ^ 1, iova, 8, Access::LOCAL_READ, pd),
            Err(MrFault::VariantMismatch)
        );
        let m = t.by_index(mkey::index(k)).unwrap();
        assert_eq!(m.klm_entries().unwrap().len(), 2);
        assert!(m.dma_ranges().is_none());
    });
    // QUERY_MKEY returns the mode and the first two KLM entries.
    let mut q = input(opcode::QUERY_MKEY, 0, query_mkey_in::BYTES);
    set(&mut q, query_mkey_in::MKEY_INDEX, mkey::index(k));
    let d = e.raw.exec(&q, query_mkey_out::BYTES);
    d.ok();
    let mc = query_mkey_out::MEMORY_KEY_MKEY_ENTRY;
    assert_eq!(
        d.get(mkc::ACCESS_MODE_1_0.within(mc)),
        mkc_access_mode::KLMS as u32
    );
    let k0 = query_mkey_out::BSF0_KLM0_PAS_MTT0_1.byte_offset();
    let k1 = query_mkey_out::BSF1_KLM1_PAS_MTT2_3.byte_offset();
    let be32 = |o: usize| u32::from_be_bytes(d.out[o..o + 4].try_into().unwrap());
    let be64 = |o: usize| u64::from_be_bytes(d.out[o..o + 8].try_into().unwrap());
    assert_eq!(
        (be32(k0), be32(k0 + 4), be64(k0 + 8)),
        (0x200, ka, a + 0x1000)
    );
    assert_eq!(
        (be32(k1), be32(k1 + 4), be64(k1 + 8)),
        (0x1800, kb, b + 0x10)
    );
    // Inner keys used directly keep their own (local-only) rights.
    e.dev().with_hca(|h| {
        assert_eq!(
            h.mkeys().translate(ka, a, 8, Access::REMOTE_READ, pd),
            Err(MrFault::AccessDenied)
        );
    });
}

#[test]
fn klm_inner_key_checks() {
    let mut e = env();
    let a = e.alloc(4096);
    let ro = e.mkey(a, 4096, LR);
    let pd = e.pd;
    // Writes need the inner key's local write right.
    let k = klm_key(&mut e, 0x5000, 0x100, ALL, &[(0x100, ro, a)]);
    e.dev().with_hca(|h| {
        assert_eq!(
            h.mkeys().translate(k, 0x5000, 8, Access::REMOTE_WRITE, pd),
            Err(MrFault::AccessDenied)
        );
        assert!(h
            .mkeys()
            .translate(k, 0x5000, 8, Access::REMOTE_READ, pd)
            .is_ok());
    });
    // An inner key of another PD.
    let pd2 = e.alloc_pd();
    let other = e.mkey_in_pd(pd2, a, 4096, LR | LW);
    let k2 = klm_key(&mut e, 0, 0x100, ALL, &[(0x100, other, a)]);
    // An inner key whose variant differs from the entry's.
    let good = e.mkey(a, 4096, LR | LW);
    let k3 = klm_key(&mut e, 0, 0x100, ALL, &[(0x100, good ^ 0x5, a)]);
    // An inner range outside the inner key.
    let k4 = klm_key(&mut e, 0, 0x100, ALL, &[(0x100, good, a + 0xf80)]);
    // An indirect inner key (one level only).
    let k5 = klm_key(&mut e, 0, 0x100, ALL, &[(0x100, k, 0x5000)]);
    e.dev().with_hca(|h| {
        let t = h.mkeys();
        let r = |key| t.translate(key, 0, 0x100, Access::REMOTE_READ, pd);
        assert_eq!(r(k2), Err(MrFault::PdMismatch));
        assert_eq!(r(k3), Err(MrFault::VariantMismatch));
        assert_eq!(r(k4), Err(MrFault::OutOfBounds));
        assert_eq!(r(k5), Err(MrFault::Indirection));
        assert!(t.translate(k4, 0, 0x80, Access::REMOTE_READ, pd).is_ok());
    });
    // A destroyed inner key: the indirect key faults (checked when used).
    e.destroy_mkey(good).ok();
    e.dev().with_hca(|h| {
        assert_eq!(
            h.mkeys().translate(k3, 0, 0x100, Access::REMOTE_READ, pd),
            Err(MrFault::UnknownKey)
        );
    });
}

#[test]
fn klm_rejections() {
    let mut e = env();
    let a = e.alloc(4096);
    let ka = e.mkey(a, 4096, LR | LW);
    let pd = e.pd;
    let bad = mlx5_prm::cmd_status::BAD_PARAM_ERR;
    let one = [(0x100u32, ka, a)];
    // Entries do not cover len.
    e.raw
        .exec(&klm_input(pd, 0, 0x101, ALL, &one, None), 16)
        .fails(bad, mrs::KLM_TOO_SHORT);
    // Zero and above-2-GiB byte counts.
    e.raw
        .exec(&klm_input(pd, 0, 0x100, ALL, &[(0, ka, a)], None), 16)
        .fails(bad, mrs::KLM_BAD_BYTE_COUNT);
    e.raw
        .exec(
            &klm_input(pd, 0, 0x100, ALL, &[(0x8000_0001, ka, a)], None),
            16,
        )
        .fails(bad, mrs::KLM_BAD_BYTE_COUNT);
    // actual > size, actual 0, zero length.
    e.raw
        .exec(&klm_input(pd, 0, 0x100, ALL, &one, Some((0, 1))), 16)
        .fails(bad, mrs::MTT_ACTUAL_EXCEEDS_SIZE);
    e.raw
        .exec(&klm_input(pd, 0, 0x100, ALL, &one, Some((1, 0))), 16)
        .fails(bad, mrs::KLM_BAD_LENGTH);
    e.raw
        .exec(&klm_input(pd, 0, 0, ALL, &one, None), 16)
        .fails(bad, mrs::KLM_BAD_LENGTH);
    // The list announced is longer than the input.
    e.raw
        .exec(&klm_input(pd, 0, 0x100, ALL, &one, Some((2, 2))), 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, mrs::MTT_INPUT_TRUNCATED);
    // Above 1 << log_max_klm_list_size entries.
    let log_max = e
        .dev()
        .with_hca(|h| h.cap(cmd_hca_cap::LOG_MAX_KLM_LIST_SIZE));
    let n = (1u32 << log_max) + 1;
    e.raw
        .exec(&klm_input(pd, 0, 0x100, ALL, &one, Some((n, n))), 16)
        .fails(bad, mrs::KLM_LIST_TOO_LONG);
    // An unknown PD.
    e.raw
        .exec(&klm_input(pd + 100, 0, 0x100, ALL, &one, None), 16)
        .fails(cmd_status::BAD_RES_ERR, mrs::BAD_PD);
}
