//! The control plane driven through raw PRM commands written by the tests themselves: bring-up,
//! teardown with page reclaim, UAR/PD/TD/EQ, every rejection with its status and syndrome,
//! delivery errors, EQEs and INTx, the fault switches, both execution modes.

mod raw;

use mlx5_prm::*;
use mlx5_sim::hca::syndrome as syn;
use mlx5_sim::{ExecMode, GuestMemory, InProcHca};
use raw::{input, set, Raw};

fn dev() -> Raw {
    Raw::new(InProcHca::deterministic())
}

fn up() -> Raw {
    let mut r = dev();
    r.bring_up();
    r
}

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
    assert_eq!(boot, mlx5_sim::pages::BOOT_PAGES as i32);
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
    ] {
        r.query_cap(t, true).ok();
        r.query_cap(t, false).ok();
    }
    let atomic = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::ATOMIC, true).ok());
    assert_eq!(atomic_caps::ATOMIC_OPERATIONS.get(&atomic), Ok(3));
    assert_eq!(atomic_caps::ATOMIC_SIZE_QP.get(&atomic), Ok(8));
    // Init pages, INIT_HCA, regular pages.
    let init = r.query_pages(2);
    assert_eq!(init, mlx5_sim::pages::INIT_PAGES as i32);
    r.alloc_and_give(init as usize);
    r.exec(&input(opcode::INIT_HCA, 0, 16), 16).ok();
    let regular = r.query_pages(3);
    assert_eq!(regular, mlx5_sim::pages::REGULAR_PAGES as i32);
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
    assert!(u1 >= mlx5_sim::uar::FIRST_UAR && u2 != u1);
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
    let n = 1u32 << mlx5_sim::caps::LOG_MAX_TRANSPORT_DOMAIN;
    for _ in 0..n {
        r.exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16)
            .ok();
    }
    r.exec(&input(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16)
        .fails(cmd_status::LIM_ERR, syn::TD_EXHAUSTED);
    // UARs.
    for _ in 0..mlx5_sim::uar::MAX_UARS {
        r.alloc_uar();
    }
    r.exec(&input(opcode::ALLOC_UAR, 0, 16), 16)
        .fails(cmd_status::LIM_ERR, syn::UAR_EXHAUSTED);
    // EQs: 1 << log_max_eq.
    let uar = mlx5_sim::uar::FIRST_UAR;
    for _ in 0..(1u32 << mlx5_sim::caps::LOG_MAX_EQ) {
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
        mlx5_sim::caps::LOG_MAX_EQ_SZ + 1,
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
    r.query_cap(hca_cap::cap_type::FLOW_TABLE, true)
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
fn delivery_errors() {
    let mut r = dev();
    let nop = input(opcode::NOP, 0, 16);
    // Not a PCI command descriptor.
    let d = r.exec_with(0, &nop, 16, |e, _| e[0] = 3);
    assert_eq!(d.delivery, Some(delivery_status::CMD_DESCR_ERR));
    // Reserved entry bytes.
    let d = r.exec_with(0, &nop, 16, |e, _| e[2] = 1);
    assert_eq!(d.delivery, Some(delivery_status::RES_FLD_NOT_CLR_ERR));
    // A command with mailboxes: ENABLE_HCA padded to 600 bytes of input is too long for the
    // command but the chain checks come first.
    let long = input(opcode::ENABLE_HCA, 0, 16 + 2 * 512);
    // Bad token in the second block.
    let d = r.exec_with(0, &long, 16, |_, r| {
        r.mem()
            .write(r.in_blocks[1] + cmd_prot_block::TOKEN as u64, &[0x11])
            .unwrap()
    });
    assert_eq!(d.delivery, Some(delivery_status::TOK_ERR));
    // Bad block number.
    let d = r.exec_with(0, &long, 16, |_, r| {
        r.mem()
            .write(
                r.in_blocks[1] + cmd_prot_block::BLOCK_NUM as u64,
                &7u32.to_be_bytes(),
            )
            .unwrap()
    });
    assert_eq!(d.delivery, Some(delivery_status::BAD_BLK_NUM_ERR));
    // Input length beyond the chain: the first block's next is 0.
    let d = r.exec_with(0, &long, 16, |_, r| {
        r.mem()
            .write(
                r.in_blocks[0] + cmd_prot_block::NEXT as u64,
                &0u64.to_be_bytes(),
            )
            .unwrap()
    });
    assert_eq!(d.delivery, Some(delivery_status::IN_LENGTH_ERR));
    // A chain that loops back to itself: block numbers stop matching.
    let d = r.exec_with(0, &long, 16, |_, r| {
        let b0 = r.in_blocks[0];
        r.mem()
            .write(b0 + cmd_prot_block::NEXT as u64, &b0.to_be_bytes())
            .unwrap()
    });
    assert_eq!(d.delivery, Some(delivery_status::BAD_BLK_NUM_ERR));
    // Unaligned mailbox pointers, in and out.
    let d = r.exec_with(0, &long, 16, |e, r| {
        e[8..16].copy_from_slice(&(r.in_blocks[0] + 0x40).to_be_bytes())
    });
    assert_eq!(d.delivery, Some(delivery_status::IN_PTR_ALIGN_ERR));
    let d = r.exec_with(0, &nop, 600, |e, r| {
        e[48..56].copy_from_slice(&(r.out_blocks[0] + 0x10).to_be_bytes())
    });
    assert_eq!(d.delivery, Some(delivery_status::OUT_PTR_ALIGN_ERR));
    // A mailbox outside guest memory.
    let d = r.exec_with(0, &long, 16, |e, _| {
        e[8..16].copy_from_slice(&0x20_0000u64.to_be_bytes())
    });
    assert_eq!(d.delivery, Some(delivery_status::FW_ERR));
    // Output chain shorter than outlen.
    let d = r.exec_with(0, &nop, 16 + 2 * 512, |_, r| {
        r.mem()
            .write(
                r.out_blocks[0] + cmd_prot_block::NEXT as u64,
                &0u64.to_be_bytes(),
            )
            .unwrap()
    });
    assert_eq!(d.delivery, Some(delivery_status::OUT_LENGTH_ERR));
    // Absurd lengths.
    let d = r.exec_with(0, &nop, 16, |e, _| {
        e[4..8].copy_from_slice(&4u32.to_be_bytes())
    });
    assert_eq!(d.delivery, Some(delivery_status::IN_LENGTH_ERR));
    let d = r.exec_with(0, &nop, 16, |e, _| {
        e[56..60].copy_from_slice(&u32::MAX.to_be_bytes())
    });
    assert_eq!(d.delivery, Some(delivery_status::OUT_LENGTH_ERR));
    // The engine still works, with the long ENABLE_HCA now reaching dispatch.
    r.exec(&long, 16)
        .fails(cmd_status::BAD_INP_LEN_ERR, syn::INLEN_LONG);
    r.exec(&nop, 16)
        .fails(cmd_status::BAD_SYS_STATE_ERR, syn::NOT_ENABLED);
}

/// `!xor8` of a byte range.
fn sig(b: &[u8]) -> u8 {
    !b.iter().fold(0, |x, y| x ^ y)
}

#[test]
fn signatures_when_the_driver_enables_them() {
    let mut r = dev();
    r.enable_hca().ok();
    let boot = r.query_pages(1) as usize;
    r.alloc_and_give(boot);
    // Unsigned commands work while checksums are in their initial state ...
    let mut cur = Raw::cap_bytes(r.query_cap(0, true).ok());
    assert_eq!(cmd_hca_cap::CMDIF_CHECKSUM.get(&cur), Ok(1));
    cmd_hca_cap::CMDIF_CHECKSUM.set(&mut cur, 3).unwrap();
    r.set_cap(0, &cur).ok();
    // ... and are refused once they are enabled.
    let nop = input(opcode::NOP, 0, 16);
    let d = r.exec(&nop, 16);
    assert_eq!(d.delivery, Some(delivery_status::SIGNAT_ERR));
    // Signed entry (Linux: sig = ~xor of the entry with status_own = 1, cmd.c:273).
    let d = r.exec_with(0, &nop, 16, |e, _| e[61] = sig(e));
    d.ok();
    // Signed mailboxes too: blocks need ctrl_sig and sig (cmd.c:255-256).
    let long_out = 16 + 512;
    let d = r.exec_with(0, &nop, long_out, |e, r| {
        let mut b = [0u8; 576];
        r.mem().read(r.out_blocks[0], &mut b).unwrap();
        b[574] = sig(&b[512..574]);
        b[575] = sig(&b[..575]);
        r.mem().write(r.out_blocks[0], &b).unwrap();
        e[61] = sig(e);
    });
    d.ok();
    // The device re-signed the output block it wrote.
    let mut b = [0u8; 576];
    r.mem().read(r.out_blocks[0], &mut b).unwrap();
    assert_eq!(b.iter().fold(0u8, |x, y| x ^ y), 0xff);
    // An unsigned block in a signed entry.
    let d = r.exec_with(0, &nop, long_out, |e, _| e[61] = sig(e));
    assert_eq!(d.delivery, Some(delivery_status::SIGNAT_ERR));
}

#[test]
fn eqes_owner_bit_intx_and_page_requests() {
    let mut r = up();
    let uar = r.alloc_uar();
    assert!(!r.dev.intx().level());
    let (eqn, buf) = r.create_eq(uar, 2, &[event::PAGE_REQUEST, event::CMD]);
    // The EQ exists when CREATE_EQ completes, so that completion is its first event (slot 0).
    let e0 = r.eqe(buf, 0);
    assert_eq!(e0[1], event::CMD);
    assert_eq!(u32::from_be_bytes(e0[32..36].try_into().unwrap()), 1 << 0);
    assert_eq!(e0[63] & 1, 0, "first pass: owner 0");
    // Regular pages are demanded as soon as an EQ listens for page requests.
    let e1 = r.eqe(buf, 1);
    assert_eq!(e1[1], event::PAGE_REQUEST);
    assert_eq!(e1[63] & 1, 0);
    assert_eq!(
        i32::from_be_bytes(e1[36..40].try_into().unwrap()),
        mlx5_sim::pages::REGULAR_PAGES as i32
    );
    assert_eq!(u16::from_be_bytes([e1[34], e1[35]]), 0, "func_id");
    // A command in slot 3: its completion carries the slot bit.
    let d = r.exec_with(3, &input(opcode::NOP, 0, 16), 16, |_, _| {});
    d.ok();
    let e2 = r.eqe(buf, 2);
    assert_eq!(e2[1], event::CMD);
    assert_eq!(u32::from_be_bytes(e2[32..36].try_into().unwrap()), 1 << 3);
    // Entry 3 is still software-initialised (owner 1 = not valid in pass 0).
    assert_eq!(r.eqe(buf, 3)[63], 1);
    // Not armed yet: no interrupt.
    assert!(!r.dev.intx().level());
    // Consume all three and arm: nothing pending, no interrupt.
    r.eq_doorbell(uar, eqn, 3, true);
    assert!(!r.dev.intx().level());
    // Giving the regular pages completes a command: EQE 3, armed EQ, INTx.
    let regular = mlx5_sim::pages::REGULAR_PAGES as usize;
    r.alloc_and_give(regular);
    assert!(r.dev.intx().level());
    assert_eq!(r.eqe(buf, 3)[1], event::CMD);
    assert_eq!(r.eqe(buf, 3)[63] & 1, 0);
    r.eq_doorbell(uar, eqn, 4, false);
    assert!(!r.dev.intx().level(), "the doorbell clears the interrupt");
    // A surprise reclaim request: second pass of the 4-entry ring, owner 1.
    r.dev.faults(|f| f.page_request = Some(-5));
    let e4 = r.eqe(buf, 0);
    assert_eq!(e4[1], event::PAGE_REQUEST);
    assert_eq!(i32::from_be_bytes(e4[36..40].try_into().unwrap()), -5);
    assert_eq!(e4[63] & 1, 1, "second pass: owner 1");
    assert!(!r.dev.intx().level(), "not armed");
    // Arming with an unconsumed EQE fires at once.
    r.eq_doorbell(uar, eqn, 4, true);
    assert!(r.dev.intx().level());
    r.eq_doorbell(uar, eqn, 5, true);
    assert!(!r.dev.intx().level());
    let back = r.take_pages(5);
    assert_eq!(back.len(), 5);
    assert!(
        r.take_pages(1).is_empty(),
        "only the 5 surplus pages come back"
    );
    assert!(r.dev.intx().level());
    // QUERY_EQ reports the counters and the fired state.
    let mut q = input(opcode::QUERY_EQ, 0, 16);
    set(&mut q, query_eq_in::EQ_NUMBER, eqn);
    let d = r.exec(&q, query_eq_out::BYTES + 8);
    d.ok();
    let ctx = &d.out[16..16 + eqc::BYTES];
    assert_eq!(eqc::LOG_EQ_SIZE.get(ctx), Ok(2));
    assert_eq!(eqc::UAR_PAGE.get(ctx), Ok(uar));
    assert_eq!(eqc::CONSUMER_COUNTER.get(ctx), Ok(5));
    assert_eq!(eqc::PRODUCER_COUNTER.get(ctx), Ok(7));
    assert_eq!(eqc::ST.get(ctx), Ok(0xa));
    assert_eq!(query_eq_out::PAS.elem(0).get64(&d.out), Ok(buf));
    // A doorbell through another UAR page is ignored; so are writes to unallocated UAR pages.
    let other = r.alloc_uar();
    r.eq_doorbell(other, eqn, 8, false);
    assert!(r.dev.intx().level());
    r.dev.with_hca(|h| h.trace_mut().capture());
    r.dev.bar0_write(0x7f_0000, 0, 4);
    let lines = r.dev.with_hca(|h| h.trace_mut().take_captured());
    assert!(lines[0].contains("unallocated UAR page"), "{lines:?}");
}

#[test]
fn async_eq_overrun_is_fatal() {
    let mut r = up();
    let uar = r.alloc_uar();
    // Entry 0: CREATE_EQ's own completion; entry 1: the first NOP.
    let (_eqn, _buf) = r.create_eq(uar, 1, &[event::CMD]);
    r.exec(&input(opcode::NOP, 0, 16), 16).ok();
    // The next completion finds the 2-entry EQ full: ASYNCHRONOUS_EQ_BUF_OVERRUN.
    r.exec(&input(opcode::NOP, 0, 16), 16).ok();
    assert_eq!(r.dev.reg32(0x23c) >> 16 & 0xff, 0xc);
    assert_eq!(r.dev.reg32(0x238) >> 24, 0x80, "rfr");
    let d = r.exec(&input(opcode::NOP, 0, 16), 16);
    assert_eq!(d.delivery, None, "dead firmware completes nothing");
}

#[test]
fn fault_switches() {
    let mut r = up();
    let nop = input(opcode::NOP, 0, 16);
    // Wrong delivery status, once.
    r.dev
        .faults(|f| f.next_delivery_status = Some(delivery_status::FW_ERR));
    assert_eq!(r.exec(&nop, 16).delivery, Some(delivery_status::FW_ERR));
    r.exec(&nop, 16).ok();
    // Garbled output length, once.
    r.dev.faults(|f| f.garble_next_output_length = true);
    let d = r.exec(&nop, 16);
    d.ok();
    assert_eq!(d.entry[56..60], 0xdead_beefu32.to_be_bytes());
    assert_eq!(r.exec(&nop, 16).entry[56..60], 16u32.to_be_bytes());
    // Swallowed commands stay hardware-owned until the switch is cleared.
    r.dev.faults(|f| f.swallow_commands = true);
    let d = r.exec(&nop, 16);
    assert_eq!(d.delivery, None);
    assert_eq!(d.entry[63] & 1, 1);
    r.dev.faults(|f| f.swallow_commands = false);
    r.ring(0);
    r.wait(r.cmdq, 16).ok();
    // Fatal health: syndrome in the health buffer and health_counter, counter frozen,
    // INTERNAL_ERROR to subscribed EQs, no completions.
    let uar = r.alloc_uar();
    let (_eqn, buf) = r.create_eq(uar, 3, &[event::INTERNAL_ERROR]);
    assert_eq!(r.dev.reg32(0x238), 0);
    r.dev
        .faults(|f| f.fatal_health = Some(health::syndrome::HW_FATAL_ERR));
    assert_eq!(r.eqe(buf, 0)[1], event::INTERNAL_ERROR);
    assert_eq!(r.dev.reg32(0x23c) >> 16 & 0xff, 8);
    assert_eq!(
        r.dev.reg32(0x238) >> 31,
        1,
        "rfr: Linux treats rfr && synd as fatal"
    );
    let c1 = r.dev.reg32(0x1010);
    assert_eq!(c1 >> 24, 8, "health_syndrome");
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(r.dev.reg32(0x1010), c1, "the counter stopped");
    let d = r.exec(&nop, 16);
    assert_eq!(d.delivery, None);
    // A device reset brings the firmware back.
    r.dev.reset();
    assert_eq!(r.dev.reg32(0x238), 0);
    let mut r = Raw::new(r.dev.clone());
    r.enable_hca().ok();
}

#[test]
fn healthy_counter_moves() {
    let r = dev();
    let c1 = r.dev.reg32(0x1010);
    let deadline = std::time::Instant::now() + raw::PATIENCE;
    while r.dev.reg32(0x1010) == c1 {
        assert!(std::time::Instant::now() < deadline, "health counter stuck");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(r.dev.reg32(0x1010) >> 24, 0);
    // fw_ver at 0x230 is not 0xffffffff (what a vanished PCI device reads).
    assert_ne!(r.dev.reg32(0x230), 0xffff_ffff);
}

#[test]
fn vport_and_roce_addresses() {
    let mut r = up();
    let d = r.exec(&input(opcode::QUERY_VPORT_STATE, 0, 16), 16);
    d.ok();
    assert_eq!(d.get(query_vport_state_out::STATE), 1);
    r.exec(&input(opcode::QUERY_VPORT_STATE, 1, 16), 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_STATE_OP_MOD);
    let q = input(opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16);
    let d = r.exec(&q, query_nic_vport_context_out::BYTES);
    d.ok();
    let ctx = &d.out[16..];
    assert_eq!(nic_vport_context::ROCE_EN.get(ctx), Ok(0));
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_47_32.get(ctx),
        Ok(0x0200)
    );
    assert_eq!(
        linux_layout::nic_vport_context::PERMANENT_ADDRESS_MAC_31_0.get(ctx),
        Ok(1)
    );
    // roce_en only changes when field_select says so (facts trap 20).
    let mut m = input(
        opcode::MODIFY_NIC_VPORT_CONTEXT,
        0,
        modify_nic_vport_context_in::BYTES,
    );
    let ctx_at = modify_nic_vport_context_in::NIC_VPORT_CONTEXT.offset;
    set(
        &mut m,
        Field::new(ctx_at + nic_vport_context::ROCE_EN.offset, 1),
        1,
    );
    r.exec(&m, 16).ok();
    assert!(!r.dev.with_hca(|h| h.roce_enabled()));
    let fs = modify_nic_vport_context_in::FIELD_SELECT.offset;
    set(
        &mut m,
        Field::new(fs + modify_nic_vport_field_select::ROCE_EN.offset, 1),
        1,
    );
    r.exec(&m, 16).ok();
    assert!(r.dev.with_hca(|h| h.roce_enabled()));
    set(
        &mut m,
        Field::new(fs + modify_nic_vport_field_select::PROMISC.offset, 1),
        1,
    );
    r.exec(&m, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_FIELD_SELECT);
    let mut other = q.clone();
    set(&mut other, Field::new(0x40, 1), 1);
    r.exec(&other, query_nic_vport_context_out::BYTES)
        .fails(cmd_status::BAD_PARAM_ERR, syn::VPORT_OTHER);
    // GID table: empty, set a RoCE v2 IPv4-mapped GID, read it back, delete it.
    let mut qa = input(opcode::QUERY_ROCE_ADDRESS, 0, 16);
    set(&mut qa, query_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    let d = r.exec(&qa, query_roce_address_out::BYTES);
    d.ok();
    assert!(d.out[16..48].iter().all(|&b| b == 0));
    let mut sa = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    set(&mut sa, set_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
    sa[16..32].copy_from_slice(&gid);
    sa[16 + 0x12..16 + 0x18].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    let ra = set_roce_address_in::ROCE_ADDRESS.offset;
    set(
        &mut sa,
        Field::new(ra + roce_addr_layout::ROCE_VERSION.offset, 8),
        2,
    );
    r.exec(&sa, 16).ok();
    let d = r.exec(&qa, query_roce_address_out::BYTES);
    d.ok();
    assert_eq!(&d.out[16..32], &gid);
    assert_eq!(r.dev.with_hca(|h| h.roce_gid(1)), Some(gid));
    set(
        &mut sa,
        Field::new(ra + roce_addr_layout::ROCE_VERSION.offset, 8),
        1,
    );
    r.exec(&sa, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::GID_TYPE);
    set(&mut sa, set_roce_address_in::ROCE_ADDRESS_INDEX, 64);
    r.exec(&sa, 16).fails(cmd_status::IX_ERR, syn::GID_INDEX);
    let mut del = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    set(&mut del, set_roce_address_in::ROCE_ADDRESS_INDEX, 1);
    r.exec(&del, 16).ok();
    assert_eq!(r.dev.with_hca(|h| h.roce_gid(1)), None);
}

#[test]
fn query_adapter_and_driver_version() {
    let mut r = up();
    let d = r.exec(
        &input(opcode::QUERY_ADAPTER, 0, 16),
        query_adapter_out::BYTES,
    );
    d.ok();
    let blk = &d.out[16..];
    assert_eq!(
        query_adapter_param_block::IEEE_VENDOR_ID.get(blk),
        Ok(0x0002c9)
    );
    let mut v = input(opcode::SET_DRIVER_VERSION, 0, set_driver_version_in::BYTES);
    v[16..16 + 11].copy_from_slice(b"rust,mlx5,1");
    r.exec(&v, 16).ok();
    assert_eq!(
        r.dev.with_hca(|h| h.driver_version().map(str::to_owned)),
        Some("rust,mlx5,1".to_owned())
    );
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
fn linux_probe_replay() {
    // drivers/net/ethernet/mellanox/mlx5/core (Debian 6.1), per the project's probe notes.
    let dev = InProcHca::deterministic();
    // Registers before any command.
    let fw = dev.reg32(0x0);
    assert_eq!(fw & 0xffff, 16, "fw major");
    assert_eq!(dev.reg32(0x1fc) >> 31, 0);
    assert_eq!(dev.reg32(0x4) >> 16, 5);
    let lsz = dev.reg32(0x14) & 0xff;
    assert_eq!((lsz >> 4, lsz & 0xf), (5, 6));
    assert_eq!(
        dev.reg32(0xffc),
        0,
        "cmd_q_init_to 0: Linux keeps its own timeouts (no DTOR)"
    );
    // Health poll registers.
    assert_eq!(dev.reg32(0x238) >> 31, 0);
    assert_eq!(dev.reg32(0x23c) >> 16 & 0xff, 0);
    let mut r = Raw::new(dev);
    // mlx5_function_enable.
    r.enable_hca().ok();
    let d = r.exec(&input(opcode::QUERY_ISSI, 0, 16), query_issi_out::BYTES);
    d.ok();
    assert_ne!(d.get(query_issi_out::SUPPORTED_ISSI_DW0) & 2, 0);
    let mut s = input(opcode::SET_ISSI, 0, 16);
    set(&mut s, set_issi_in::CURRENT_ISSI, 1);
    r.exec(&s, 16).ok();
    let boot = r.query_pages(1);
    r.alloc_and_give(boot as usize);
    // mlx5_function_open: host endianness, caps.
    r.host_endianness().ok();
    let gen_cur = Raw::cap_bytes(r.query_cap(0, true).ok());
    let gen_max = Raw::cap_bytes(r.query_cap(0, false).ok());
    // handle_hca_cap (main.c:771): copy CUR, then its edits.
    let mut set_cap = gen_cur.clone();
    cmd_hca_cap::PKEY_TABLE_SIZE.set(&mut set_cap, 0).unwrap();
    let lmq = cmd_hca_cap::LOG_MAX_QP.get(&gen_max).unwrap().min(18);
    cmd_hca_cap::LOG_MAX_QP.set(&mut set_cap, lmq).unwrap();
    cmd_hca_cap::CMDIF_CHECKSUM.set(&mut set_cap, 0).unwrap();
    cmd_hca_cap::DRAIN_SIGERR.set(&mut set_cap, 1).unwrap();
    cmd_hca_cap::LOG_UAR_PAGE_SZ.set(&mut set_cap, 0).unwrap();
    if cmd_hca_cap::CACHE_LINE_128BYTE.get(&gen_max).unwrap() != 0 {
        cmd_hca_cap::CACHE_LINE_128BYTE
            .set(&mut set_cap, 0)
            .unwrap();
    }
    r.set_cap(0, &set_cap).ok();
    // handle_hca_cap_atomic (main.c:615): zeroed page + host endianness mode.
    assert_eq!(cmd_hca_cap::ATOMIC.get(&gen_cur), Ok(1));
    r.query_cap(3, true).ok();
    let amax = Raw::cap_bytes(r.query_cap(3, false).ok());
    let acur = Raw::cap_bytes(r.query_cap(3, true).ok());
    assert_eq!(
        atomic_caps::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(&acur),
        Ok(1)
    );
    let _ = amax;
    let mut z = vec![0u8; 4096];
    atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
        .set(&mut z, 1)
        .unwrap();
    r.set_cap(3, &z).ok();
    // handle_hca_cap_odp (pg): every ODP max is 0, so no SET.
    assert_eq!(cmd_hca_cap::PG.get(&gen_cur), Ok(1));
    let omax = Raw::cap_bytes(r.query_cap(2, false).ok());
    assert!(omax.iter().all(|&b| b == 0));
    r.query_cap(2, true).ok();
    // handle_hca_cap_roce: sw_r_roce_src_udp_port is 0 in CUR, 1 in MAX: set it.
    let rcur = Raw::cap_bytes(r.query_cap(4, true).ok());
    let rmax = Raw::cap_bytes(r.query_cap(4, false).ok());
    assert_eq!(roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(&rcur), Ok(0));
    assert_eq!(roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(&rmax), Ok(1));
    let mut rset = rcur.clone();
    roce_cap::SW_R_ROCE_SRC_UDP_PORT.set(&mut rset, 1).unwrap();
    r.set_cap(4, &rset).ok();
    // handle_hca_cap_2 (hca_cap_2): queried; nothing to set.
    assert_eq!(cmd_hca_cap::HCA_CAP_2.get(&gen_max), Ok(1));
    r.query_cap(0x20, true).ok();
    r.query_cap(0x20, false).ok();
    // Init pages, INIT_HCA (Linux's 32-byte init_hca_in), SET_DRIVER_VERSION.
    let init = r.query_pages(2);
    r.alloc_and_give(init as usize);
    r.exec(&input(opcode::INIT_HCA, 0, 32), 16).ok();
    assert_eq!(cmd_hca_cap::DRIVER_VERSION.get(&gen_cur), Ok(1));
    let mut v = input(opcode::SET_DRIVER_VERSION, 0, set_driver_version_in::BYTES);
    v[16..16 + 5].copy_from_slice(b"linux");
    r.exec(&v, 16).ok();
    // mlx5_query_hca_caps: GENERAL again, then every advertised type; the non-advertised
    // types stay unasked (their gating caps are 0).
    let gen = Raw::cap_bytes(r.query_cap(0, true).ok());
    for (gate, t) in [
        (cmd_hca_cap::HCA_CAP_2, 0x20),
        (cmd_hca_cap::PG, 2),
        (cmd_hca_cap::ATOMIC, 3),
        (cmd_hca_cap::ROCE, 4),
    ] {
        assert_eq!(gate.get(&gen), Ok(1));
        r.query_cap(t, true).ok();
    }
    for gate in [
        cmd_hca_cap::ETH_NET_OFFLOADS,
        cmd_hca_cap::IPOIB_ENHANCED_OFFLOADS,
        cmd_hca_cap::NIC_FLOW_TABLE,
        cmd_hca_cap::VPORT_GROUP_MANAGER,
        cmd_hca_cap::ESWITCH_MANAGER,
        cmd_hca_cap::QOS,
        cmd_hca_cap::DEBUG,
        cmd_hca_cap::NVMF_TARGET_OFFLOAD,
        cmd_hca_cap::DEVICE_MEMORY,
        cmd_hca_cap::CRYPTO,
        cmd_hca_cap::PCAM_REG,
        cmd_hca_cap::MCAM_REG,
        cmd_hca_cap::QCAM_REG,
    ] {
        assert_eq!(gate.get(&gen), Ok(0), "{gate:?} advertised");
    }
    assert_eq!(cmd_hca_cap::GENERAL_OBJ_TYPES.get64(&gen), Ok(0));
    // mlx5_init_once: QUERY_ADAPTER. mlx5_load: ALLOC_UAR, then the command EQ.
    r.exec(
        &input(opcode::QUERY_ADAPTER, 0, 16),
        query_adapter_out::BYTES,
    )
    .ok();
    let uar = r.alloc_uar();
    let (eqn, buf) = r.create_eq(uar, 7, &[event::CMD]);
    r.eq_doorbell(uar, eqn, 0, true);
    r.exec(&input(opcode::NOP, 0, 16), 16).ok();
    assert_eq!(r.eqe(buf, 0)[1], event::CMD);
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
