//! The control plane driven through raw PRM commands written by the tests themselves: bring-up,
//! teardown with page reclaim, UAR/PD/TD/EQ, every rejection with its status and syndrome, the
//! trace, both execution modes. Delivery errors, EQEs and INTx, the fault switches:
//! control_plane_events.rs; what Linux's probe asks: control_plane_probe.rs.

mod raw;

use mlx5_prm::*;
use mlx5_sim::control::syndrome as syn;
use mlx5_sim::{ExecMode, GuestMemory, InProcHca};
use raw::{dev, input, set, up, Raw};

#[test]
fn bring_up_regular_pages_teardown_and_reclaim() {
    let mut r = dev();
    r.enable_hca().ok();
    // ISSI 0 and 1.
    let d = r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES);
    d.ok();
    assert_eq!(d.get(query_issi_out::SUPPORTED_ISSI_DW0), 0b11);
    assert_eq!(d.get(query_issi_out::CURRENT_ISSI), 0);
    let mut s = input(opcode::SET_ISSI, 0, 16);
    set(&mut s, set_issi_in::CURRENT_ISSI, 1);
    r.exec(&s, 16).ok();
    // Boot pages.
    let boot = r.query_pages(1);
    assert_eq!(boot, mlx5_sim::control::pages::BOOT_PAGES as i32);
    r.alloc_and_give(boot as usize);
    assert_eq!(r.query_pages(1), 0);
    r.host_endianness().ok();
    // Caps: RoCE Ethernet port, atomics, the advertised types answer, MAX >= CUR.
    let cur = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::GENERAL, true).ok());
    let max = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::GENERAL, false).ok());
    assert_eq!(cmd_hca_cap::PORT_TYPE.get(&cur), Ok(1));
    assert_eq!(cmd_hca_cap::ROCE.get(&cur), Ok(1));
    assert_eq!(cmd_hca_cap::ATOMIC.get(&cur), Ok(1));
    assert_eq!(cmd_hca_cap::LOG_MAX_QP.get(&cur), Ok(12));
    assert_eq!(cmd_hca_cap::LOG_BF_REG_SIZE.get(&cur), Ok(9));
    assert_eq!(cmd_hca_cap::CMDIF_CHECKSUM.get(&max), Ok(3));
    for t in [
        hca_cap::cap_type::ROCE,
        hca_cap::cap_type::ATOMIC,
        hca_cap::cap_type::ODP,
        hca_cap::cap_type::GENERAL_2,
        hca_cap::cap_type::FLOW_TABLE,
    ] {
        r.query_cap(t, true).ok();
        r.query_cap(t, false).ok();
    }
    let atomic = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::ATOMIC, true).ok());
    assert_eq!(atomic_caps::ATOMIC_OPERATIONS.get(&atomic), Ok(3));
    assert_eq!(atomic_caps::ATOMIC_SIZE_QP.get(&atomic), Ok(8));
    // Init pages, INIT_HCA, regular pages.
    let init = r.query_pages(2);
    assert_eq!(init, mlx5_sim::control::pages::INIT_PAGES as i32);
    r.alloc_and_give(init as usize);
    r.exec(&input(opcode::INIT_HCA, 0, 16), 16).ok();
    let regular = r.query_pages(3);
    assert_eq!(regular, mlx5_sim::control::pages::REGULAR_PAGES as i32);
    r.alloc_and_give(regular as usize);
    assert_eq!(r.query_pages(3), 0);
    // Giving more than asked for is refused.
    let extra = r.dev.alloc(4096, 4096).unwrap();
    r.give_pages(&[extra])
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_TOO_MANY);
    // Nothing to reclaim while initialized.
    assert!(r.take_pages(8).is_empty());
    // Teardown: objects vanish, every page comes back, DISABLE_HCA.
    let uar = r.alloc_uar();
    r.exec(&input(opcode::TEARDOWN_HCA, 0, 16), 16).ok();
    let mut dealloc = input(opcode::DEALLOC_UAR, 0, 16);
    set(&mut dealloc, dealloc_uar_in::UAR, uar);
    r.exec(&dealloc, 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_INITIALIZED);
    let total = (boot + init + regular) as u32;
    assert_eq!(r.query_pages(3), -(total as i32));
    let mut back = r.take_pages(100);
    back.extend(r.take_pages(100));
    assert_eq!(back.len() as u32, total);
    back.sort();
    back.dedup();
    assert_eq!(back.len() as u32, total);
    assert!(r.take_pages(8).is_empty());
    r.exec(&input(opcode::DISABLE_HCA, 0, 16), disable_hca_out::BYTES)
        .ok();
    // Disabled again: only ENABLE_HCA.
    r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_ENABLED);
    r.enable_hca().ok();
}

#[test]
fn uar_pd_td_lifecycle_and_bad_numbers() {
    let mut r = up();
    let u1 = r.alloc_uar();
    let u2 = r.alloc_uar();
    assert!(u1 >= mlx5_sim::objects::uar::FIRST_UAR && u2 != u1);
    let pd = {
        let d = r.exec(&input(opcode::ALLOC_PD, 0, 16), 16);
        d.ok();
        d.get(alloc_pd_out::PD)
    };
    let td = {
        let d = r.exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16);
        d.ok();
        d.get(alloc_transport_domain_out::TRANSPORT_DOMAIN)
    };
    assert!(pd != 0 && td != 0);
    r.dev.with_hca(|h| {
        assert!(h.pd_exists(pd) && h.td_exists(td) && h.uar_exists(u1));
        assert!(!h.pd_exists(pd + 1) && !h.uar_exists(0));
    });
    let dealloc = |op: u16, f: Field, n: u32| {
        let mut i = input(op, 0, 16);
        set(&mut i, f, n);
        i
    };
    r.exec(&dealloc(opcode::DEALLOC_PD, dealloc_pd_in::PD, pd), 16)
        .ok();
    r.exec(&dealloc(opcode::DEALLOC_PD, dealloc_pd_in::PD, pd), 16)
        .fails(cmd_status::BAD_RES_ERR, syn::PD_UNKNOWN);
    r.exec(&dealloc(opcode::DEALLOC_PD, dealloc_pd_in::PD, 0x77), 16)
        .fails(cmd_status::BAD_RES_ERR, syn::PD_UNKNOWN);
    let tdf = dealloc_transport_domain_in::TRANSPORT_DOMAIN;
    r.exec(&dealloc(opcode::DEALLOC_TRANSPORT_DOMAIN, tdf, td), 16)
        .ok();
    r.exec(&dealloc(opcode::DEALLOC_TRANSPORT_DOMAIN, tdf, td), 16)
        .fails(cmd_status::BAD_RES_ERR, syn::TD_UNKNOWN);
    // A UAR with an EQ on it is busy.
    let (eqn, _) = r.create_eq(u1, 4, &[event::PORT_CHANGE]);
    r.exec(&dealloc(opcode::DEALLOC_UAR, dealloc_uar_in::UAR, u1), 16)
        .fails(cmd_status::RES_BUSY, syn::UAR_BUSY);
    r.exec(
        &dealloc(opcode::DESTROY_EQ, destroy_eq_in::EQ_NUMBER, eqn),
        16,
    )
    .ok();
    r.exec(
        &dealloc(opcode::DESTROY_EQ, destroy_eq_in::EQ_NUMBER, eqn),
        16,
    )
    .fails(cmd_status::BAD_RES_ERR, syn::EQ_UNKNOWN);
    r.exec(
        &dealloc(opcode::QUERY_EQ, query_eq_in::EQ_NUMBER, eqn),
        query_eq_out::BYTES,
    )
    .fails(cmd_status::BAD_RES_ERR, syn::EQ_UNKNOWN);
    r.exec(&dealloc(opcode::DEALLOC_UAR, dealloc_uar_in::UAR, u1), 16)
        .ok();
    r.exec(&dealloc(opcode::DEALLOC_UAR, dealloc_uar_in::UAR, u1), 16)
        .fails(cmd_status::BAD_RES_ERR, syn::UAR_UNKNOWN);
    r.exec(&dealloc(opcode::DEALLOC_UAR, dealloc_uar_in::UAR, 2), 16)
        .fails(cmd_status::BAD_RES_ERR, syn::UAR_UNKNOWN);
}

#[test]
fn exhausting_capabilities() {
    let mut r = up();
    // Transport domains: 1 << log_max_transport_domain.
    let n = 1u32 << mlx5_sim::control::caps::LOG_MAX_TRANSPORT_DOMAIN;
    for _ in 0..n {
        r.exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16)
            .ok();
    }
    r.exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16)
        .fails(cmd_status::LIM_ERR, syn::TD_EXHAUSTED);
    // UARs.
    for _ in 0..mlx5_sim::objects::uar::MAX_UARS {
        r.alloc_uar();
    }
    r.exec(&input(opcode::ALLOC_UAR, 0, 16), 16)
        .fails(cmd_status::LIM_ERR, syn::UAR_EXHAUSTED);
    // EQs: 1 << log_max_eq.
    let uar = mlx5_sim::objects::uar::FIRST_UAR;
    for _ in 0..(1u32 << mlx5_sim::control::caps::LOG_MAX_EQ) {
        r.create_eq(uar, 1, &[]);
    }
    let mut i = input(opcode::CREATE_EQ, 0, create_eq_in::PAS.bytes_with(1));
    let c = create_eq_in::EQ_CONTEXT_ENTRY.offset;
    set(&mut i, Field::new(c + eqc::UAR_PAGE.offset, 24), uar);
    let page = r.dev.alloc(4096, 4096).unwrap();
    create_eq_in::PAS.elem(0).set64(&mut i, page).unwrap();
    r.exec(&i, 16).fails(cmd_status::LIM_ERR, syn::EQ_EXHAUSTED);
    // log_eq_size above log_max_eq_sz.
    set(
        &mut i,
        Field::new(c + eqc::LOG_EQ_SIZE.offset, 5),
        mlx5_sim::control::caps::LOG_MAX_EQ_SZ + 1,
    );
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::EQ_TOO_BIG);
}

#[test]
fn every_dispatch_rejection() {
    let mut r = dev();
    // Unknown opcode.
    r.exec(&input(0x7ff, 0, 16), 16)
        .fails(cmd_status::BAD_OP_ERR, syn::BAD_OPCODE);
    // Before ENABLE_HCA.
    r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_ENABLED);
    // Lengths.
    r.exec(&input(opcode::ENABLE_HCA, 0, 12), 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::INLEN_SHORT);
    r.exec(&input(opcode::ENABLE_HCA, 0, 20), 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::INLEN_LONG);
    r.exec(&input(opcode::ENABLE_HCA, 0, 16), 8)
        .fails(cmd_status::BAD_OUTP_LEN_ERR, syn::OUTLEN_SHORT);
    // Reserved header bits, uid, op_mod where none is defined.
    let mut i = input(opcode::ENABLE_HCA, 0, 16);
    i[4] = 1;
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::HEADER_RESERVED);
    let mut i = input(opcode::ENABLE_HCA, 0, 16);
    i[2] = 1;
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::UID_SET);
    r.exec(&input(opcode::ENABLE_HCA, 1, 16), 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::OP_MOD_SET);
    let mut i = input(opcode::ENABLE_HCA, 0, 16);
    set(&mut i, enable_hca_in::FUNCTION_ID, 1);
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::FUNCTION_ID);
    r.enable_hca().ok();
    r.enable_hca()
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::ALREADY_ENABLED);
    // Unsupported ISSI.
    let mut s = input(opcode::SET_ISSI, 0, 16);
    set(&mut s, set_issi_in::CURRENT_ISSI, 2);
    r.exec(&s, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::BAD_ISSI);
    // Caps and registers need the boot pages.
    r.query_cap(0, true)
        .fails(cmd_status::NO_RES_ERR, syn::NO_BOOT_PAGES);
    // Object commands before INIT_HCA.
    r.exec(&input(opcode::ALLOC_PD, 0, 16), 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_INITIALIZED);
    r.exec(&input(opcode::CREATE_CQ, 0, create_cq_in::BYTES), 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_INITIALIZED);
    // QUERY_PAGES op_mod range, function_id.
    r.exec(&input(opcode::QUERY_PAGES, 4, 16), 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_OP_MOD);
    let mut q = input(opcode::QUERY_PAGES, 1, 16);
    set(&mut q, query_pages_in::FUNCTION_ID, 3);
    r.exec(&q, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_FUNCTION);
    // MANAGE_PAGES: input shorter than its entry count, misaligned, duplicate, outside memory.
    let mut g = input(opcode::MANAGE_PAGES, 1, 16 + 8);
    set(&mut g, manage_pages_in::INPUT_NUM_ENTRIES, 2);
    r.exec(&g, 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::PAGES_INLEN);
    let p = r.dev.alloc(8192, 4096).unwrap();
    r.give_pages(&[p + 0x800])
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_UNALIGNED);
    r.give_pages(&[p, p])
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_DUPLICATE);
    r.give_pages(&[0x1000])
        .fails(cmd_status::BAD_PARAM_ERR, syn::PAGES_OUTSIDE);
    // INIT_HCA without pages.
    r.exec(&input(opcode::INIT_HCA, 0, 16), 16)
        .fails(cmd_status::NO_RES_ERR, syn::INIT_NO_PAGES);
    let boot = r.query_pages(1) as usize;
    r.alloc_and_give(boot);
    r.exec(&input(opcode::INIT_HCA, 0, 16), 16)
        .fails(cmd_status::NO_RES_ERR, syn::INIT_NO_PAGES);
    // Caps: unsupported type, other_function, SET with op_mod bit 0, read-only field, above max.
    r.query_cap(hca_cap::cap_type::ESWITCH_FLOW_TABLE, true)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_TYPE);
    let mut qc = input(opcode::QUERY_HCA_CAP, 1, 16);
    set(&mut qc, query_hca_cap_in::OTHER_FUNCTION, 1);
    r.exec(&qc, query_hca_cap_out::BYTES)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_FUNCTION);
    r.exec(&input(opcode::QUERY_HCA_CAP, 1, 16), 16)
        .fails(cmd_status::BAD_OUTP_LEN_ERR, syn::OUTLEN_SHORT);
    let mut cur = Raw::cap_bytes(r.query_cap(0, true).ok());
    let mut bad = input(opcode::SET_HCA_CAP, 1, set_hca_cap_in::BYTES);
    bad[16..16 + 4096].copy_from_slice(&cur);
    r.exec(&bad, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_SET_OP_MOD);
    cmd_hca_cap::LOG_MAX_CQ.set(&mut cur, 3).unwrap();
    r.set_cap(0, &cur)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_READ_ONLY);
    cmd_hca_cap::LOG_MAX_CQ.set(&mut cur, 12).unwrap();
    cmd_hca_cap::LOG_MAX_QP.set(&mut cur, 13).unwrap();
    r.set_cap(0, &cur)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_ABOVE_MAX);
    cmd_hca_cap::LOG_MAX_QP.set(&mut cur, 12).unwrap();
    cmd_hca_cap::CMDIF_CHECKSUM.set(&mut cur, 2).unwrap();
    r.set_cap(0, &cur)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_ABOVE_MAX);
    r.set_cap(hca_cap::cap_type::QOS, &cur)
        .fails(cmd_status::BAD_PARAM_ERR, syn::CAP_TYPE);
    // ACCESS_REGISTER: unknown register, bad op_mod, argument, short data, short output.
    let reg = |id: u16, op_mod: u16, len: usize| {
        let mut i = input(opcode::ACCESS_REGISTER, op_mod, len);
        set(&mut i, access_register_in::REGISTER_ID, id.into());
        i
    };
    r.exec(&reg(0x507f, 1, 32), 96)
        .fails(cmd_status::BAD_PARAM_ERR, syn::REG_UNSUPPORTED);
    r.exec(&reg(0x7004, 2, 32), 32)
        .fails(cmd_status::BAD_PARAM_ERR, syn::REG_OP_MOD);
    let mut a = reg(0x7004, 0, 32);
    set(&mut a, access_register_in::ARGUMENT, 1);
    r.exec(&a, 32)
        .fails(cmd_status::BAD_PARAM_ERR, syn::REG_ARGUMENT);
    r.exec(&reg(0x7004, 0, 20), 32)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::REG_INLEN);
    r.exec(&reg(0x7004, 0, 32), 16)
        .fails(cmd_status::BAD_OUTP_LEN_ERR, syn::REG_OUTLEN);
    // Reading it back: a big-endian host setting.
    let mut w = reg(0x7004, 0, 32);
    w[16] = 0x80;
    r.exec(&w, 32).ok();
    let d = r.exec(&reg(0x7004, 1, 32), 32);
    d.ok();
    assert_eq!(d.out[16], 0x80);
    r.dev.with_hca(|h| assert_eq!(h.host_endianness(), 0x80));
    // INIT_HCA with sw_owner_id set (Linux's 32-byte init_hca_in), then properly.
    let init = r.query_pages(2) as usize;
    r.alloc_and_give(init);
    let mut ih = input(opcode::INIT_HCA, 0, 32);
    ih[20] = 1;
    r.exec(&ih, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::INIT_RESERVED);
    r.exec(&input(opcode::INIT_HCA, 0, 32), 16).ok();
    // Once initialized: no SET_ISSI / SET_HCA_CAP / INIT_HCA / DISABLE_HCA.
    r.exec(&s, 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::ALREADY_INITIALIZED);
    r.exec(&input(opcode::INIT_HCA, 0, 16), 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::ALREADY_INITIALIZED);
    r.exec(&input(opcode::DISABLE_HCA, 0, 16), 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::ALREADY_INITIALIZED);
    // TEARDOWN_HCA profiles: fast teardown is not advertised.
    let mut t = input(opcode::TEARDOWN_HCA, 0, 16);
    set(&mut t, teardown_hca_in::PROFILE, 2);
    r.exec(&t, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::TEARDOWN_PROFILE);
    set(&mut t, teardown_hca_in::PROFILE, 1);
    let d = r.exec(&t, 16);
    d.ok();
    assert_eq!(d.get(teardown_hca_out::STATE), 0);
    // After teardown: object commands are refused again.
    r.exec(&input(opcode::ALLOC_PD, 0, 16), 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_INITIALIZED);
}

#[test]
fn eq_rejections() {
    let mut r = up();
    let uar = r.alloc_uar();
    let page = r.dev.alloc(8192, 8192).unwrap();
    let c = create_eq_in::EQ_CONTEXT_ENTRY.offset;
    let base = |npas: usize, uar: u32| {
        let mut i = input(opcode::CREATE_EQ, 0, create_eq_in::PAS.bytes_with(npas));
        set(&mut i, Field::new(c + eqc::UAR_PAGE.offset, 24), uar);
        i
    };
    // Unknown UAR.
    let mut i = base(1, uar + 1);
    create_eq_in::PAS.elem(0).set64(&mut i, page).unwrap();
    r.exec(&i, 16)
        .fails(cmd_status::BAD_RES_ERR, syn::EQ_BAD_UAR);
    // 128 entries = 8 KiB = two 4 KiB pages, but one pas entry.
    let mut i = base(1, uar);
    set(&mut i, Field::new(c + eqc::LOG_EQ_SIZE.offset, 5), 7);
    create_eq_in::PAS.elem(0).set64(&mut i, page).unwrap();
    r.exec(&i, 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::EQ_PAS_SHORT);
    // One 8 KiB page (log_page_size 1, relative to 4 KiB) is enough, if aligned.
    set(&mut i, Field::new(c + eqc::LOG_PAGE_SIZE.offset, 5), 1);
    r.exec(&i, 16).ok();
    create_eq_in::PAS
        .elem(0)
        .set64(&mut i, page + 4096)
        .unwrap();
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::EQ_PAS_UNALIGNED);
    create_eq_in::PAS.elem(0).set64(&mut i, 0x10_0000).unwrap();
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::EQ_PAS_OUTSIDE);
    // Reserved eqc fields (status, an unknown st).
    let mut i = base(1, uar);
    create_eq_in::PAS.elem(0).set64(&mut i, page).unwrap();
    set(&mut i, Field::new(c + eqc::ST.offset, 4), 0x9);
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::EQ_RESERVED);
    set(&mut i, Field::new(c + eqc::ST.offset, 4), 0);
    set(&mut i, Field::new(c + eqc::LOG_PAGE_SIZE.offset, 5), 31);
    r.exec(&i, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::EQ_PAGE_GEOMETRY);
}

#[test]
fn trace_lines_name_opcode_and_status() {
    let mut r = dev();
    r.dev.with_hca(|h| h.trace_mut().capture());
    r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES);
    r.enable_hca().ok();
    let lines = r.dev.with_hca(|h| h.trace_mut().take_captured());
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].contains("QUERY_ISSI") && lines[0].contains("MLX5_CMD_STAT_BAD_SYS_STATE_ERR")
    );
    assert!(lines[0].contains("0x51000008"));
    assert!(lines[1].contains("ENABLE_HCA") && lines[1].contains("MLX5_CMD_STAT_OK"));
}

#[test]
fn threaded_mode_works_asynchronously() {
    let dev = InProcHca::threaded();
    // `initializing` is set right after creation (50 ms default delay).
    assert_eq!(dev.reg32(0x1fc) >> 31, 1);
    let mut r = Raw::new(dev);
    r.bring_up();
    let uar = r.alloc_uar();
    let (eqn, buf) = r.create_eq(uar, 3, &[event::CMD]);
    r.eq_doorbell(uar, eqn, 0, true);
    r.exec(&input(opcode::NOP, 0, 16), 16).ok();
    r.dev.flush();
    assert_eq!(r.eqe(buf, 0)[1], event::CMD);
    assert!(r.dev.intx().level());
    // Commands on several slots in one doorbell.
    let a = r.prepare(1, &input(opcode::NOP, 0, 16), 16, |_, _| {});
    let mut r2 = r;
    let b = {
        // A second slot with its own entry (the chains are not used by NOP).
        r2.prepare(2, &input(opcode::ALLOC_PD, 0, 16), 16, |_, _| {})
    };
    r2.dev.set_reg32(0x18, (1 << 1) | (1 << 2));
    r2.wait(a, 16).ok();
    r2.wait(b, 16).ok();
}

#[test]
fn two_hcas_in_one_process() {
    let (a, b) = InProcHca::pair(ExecMode::Inline);
    let mut ra = Raw::new(a);
    let mut rb = Raw::new(b);
    ra.bring_up();
    rb.bring_up();
    assert_ne!(ra.dev.with_hca(|h| h.mac()), rb.dev.with_hca(|h| h.mac()));
    ra.dev.poll();
    let _ = rb.dev.memory().read(rb.cmdq, &mut [0u8; 4]);
}

#[test]
fn handle_is_send_and_sync() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<InProcHca>();
    // A driver thread and the test thread share one device.
    let r = up();
    let dev = r.dev.clone();
    let t = std::thread::spawn(move || dev.reg32(0x4) >> 16);
    assert_eq!(t.join().unwrap(), 5);
}
