//! The model as strict as firmware on the control-plane edges of issue 7: vhca_port_num
//! without vHCA ports, the largest memory region, relaxed ordering without the caps, and a page
//! demand beyond what the device will take.

mod raw;

use mlx5_prm::*;
use mlx5_sim::control::syndrome as syn;
use mlx5_sim::objects::mr::syndrome as mkey_syn;
use raw::{input, set, up, Raw};

#[test]
fn vhca_port_num_is_refused_while_the_device_has_no_vhca_ports() {
    let mut r = up();
    let cur = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::GENERAL, true).ok());
    assert_eq!(cmd_hca_cap::NUM_VHCA_PORTS.get(&cur), Ok(0));
    let mut qa = input(opcode::QUERY_ROCE_ADDRESS, 0, 16);
    set(&mut qa, query_roce_address_in::ROCE_ADDRESS_INDEX, 0);
    r.exec(&qa, query_roce_address_out::BYTES).ok();
    set(&mut qa, query_roce_address_in::VHCA_PORT_NUM, 1);
    r.exec(&qa, query_roce_address_out::BYTES)
        .fails(cmd_status::BAD_PARAM_ERR, syn::GID_PORT);
    let mut sa = input(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::BYTES);
    set(&mut sa, set_roce_address_in::VHCA_PORT_NUM, 1);
    r.exec(&sa, 16)
        .fails(cmd_status::BAD_PARAM_ERR, syn::GID_PORT);
    // With vHCA ports advertised, port 1 is fine (and 2 is not: one port).
    r.dev.with_hca(|h| {
        let g = &mut h.caps_mut().general;
        cmd_hca_cap::NUM_VHCA_PORTS.set(&mut g.cur[..], 1).unwrap();
    });
    r.exec(&qa, query_roce_address_out::BYTES).ok();
    set(&mut qa, query_roce_address_in::VHCA_PORT_NUM, 2);
    r.exec(&qa, query_roce_address_out::BYTES)
        .fails(cmd_status::BAD_PARAM_ERR, syn::GID_PORT);
}

fn alloc_pd(r: &mut Raw) -> u32 {
    let d = r.exec(&input(opcode::ALLOC_PD, 0, 16), 16);
    d.ok();
    d.get(alloc_pd_out::PD)
}

/// CREATE_MKEY in PA mode (no translation list) of `len` bytes with extra mkc bits.
fn create_pa_mkey(r: &mut Raw, pd: u32, len: u64, extra: &[Field]) -> raw::Done {
    let mut i = input(opcode::CREATE_MKEY, 0, create_mkey_in::BYTES);
    let m = |f: Field| f.within(create_mkey_in::MEMORY_KEY_MKEY_ENTRY);
    set(&mut i, m(mkc::LR), 1);
    set(&mut i, m(mkc::QPN), 0xff_ffff);
    set(&mut i, m(mkc::PD), pd);
    m(mkc::LEN).set_u64(&mut i, len).unwrap();
    for f in extra {
        set(&mut i, m(*f), 1);
    }
    r.exec(&i, create_mkey_out::BYTES)
}

#[test]
fn an_mkey_longer_than_log_max_mrw_sz_is_refused() {
    let mut r = up();
    let cur = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::GENERAL, true).ok());
    let log = cmd_hca_cap::LOG_MAX_MRW_SZ.get(&cur).unwrap();
    assert_eq!(log, mlx5_sim::control::caps::LOG_MAX_MRW_SZ);
    assert!(log < 64, "a real limit");
    let pd = alloc_pd(&mut r);
    create_pa_mkey(&mut r, pd, 1 << log, &[]).ok();
    create_pa_mkey(&mut r, pd, (1 << log) + 1, &[])
        .fails(cmd_status::LIM_ERR, mkey_syn::LENGTH_ABOVE_CAP);
}

#[test]
fn relaxed_ordering_bits_need_their_caps() {
    let mut r = up();
    let cur = Raw::cap_bytes(r.query_cap(hca_cap::cap_type::GENERAL, true).ok());
    assert_eq!(cmd_hca_cap::RELAXED_ORDERING_WRITE.get(&cur), Ok(1));
    assert_eq!(
        linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED.get(&cur),
        Ok(1)
    );
    assert_eq!(
        linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ.get(&cur),
        Ok(0)
    );
    let pd = alloc_pd(&mut r);
    create_pa_mkey(
        &mut r,
        pd,
        4096,
        &[mkc::RELAXED_ORDERING_WRITE, mkc::RELAXED_ORDERING_READ],
    )
    .ok();
    r.dev.with_hca(|h| {
        let g = &mut h.caps_mut().general;
        cmd_hca_cap::RELAXED_ORDERING_WRITE
            .set(&mut g.cur[..], 0)
            .unwrap();
        linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED
            .set(&mut g.cur[..], 0)
            .unwrap();
    });
    create_pa_mkey(&mut r, pd, 4096, &[mkc::RELAXED_ORDERING_WRITE]).fails(
        cmd_status::BAD_PARAM_ERR,
        mkey_syn::RELAXED_ORDERING_UNSUPPORTED,
    );
    create_pa_mkey(&mut r, pd, 4096, &[mkc::RELAXED_ORDERING_READ]).fails(
        cmd_status::BAD_PARAM_ERR,
        mkey_syn::RELAXED_ORDERING_UNSUPPORTED,
    );
    create_pa_mkey(&mut r, pd, 4096, &[]).ok();
}

#[test]
fn a_page_demand_beyond_the_bound_is_asked_for_but_not_taken() {
    let mut r = up();
    let regular = r.query_pages(3);
    r.alloc_and_give(regular as usize);
    let uar = r.alloc_uar();
    let (_eqn, buf) = r.create_eq(uar, 2, &[event::PAGE_REQUEST]);
    r.dev
        .with_hca(|h| h.update_faults(|f| f.page_request = Some(i32::MAX)));
    // The event asks for i32::MAX pages, and so does QUERY_PAGES.
    let e = r.eqe(buf, 0);
    assert_eq!(e[1], event::PAGE_REQUEST);
    let n = i32::from_be_bytes([e[0x20 + 4], e[0x20 + 5], e[0x20 + 6], e[0x20 + 7]]);
    assert_eq!(n, i32::MAX);
    assert_eq!(r.query_pages(3), i32::MAX);
    // GIVE still takes no more than MAX_PAGES in all (the existing PAGES_TOO_MANY check);
    // the driver's answer is CANT_GIVE, which the model counts.
    let mut c = input(opcode::MANAGE_PAGES, pages::manage::CANT_GIVE, 16);
    set(&mut c, manage_pages_in::FUNCTION_ID, 0);
    r.exec(&c, 16).ok();
    assert_eq!(r.dev.with_hca(|h| h.pages().cant_give_count()), 1);
}
