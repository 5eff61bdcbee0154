//! Control-plane hard edges (issue 7): GID commands and vhca_port_num, GID indexes, absurd
//! memory-region sizes, optional access flags, oversized page requests, quarantined DMA memory
//! after garbled replies, query_device / query_port.

#[allow(dead_code)]
mod common;

use common::*;
use mlx5::mr::PhysChunk;
use mlx5::{AccessFlags, AtomicCap, Context, Error, InvalidInput, LinkLayer, Mtu, PortState};
use mlx5_prm::{cmd_hca_cap, linux_layout, mkc, mkey, Field};

// ---------------------------------------------------------------------------------------------
// vhca_port_num and GID indexes
// ---------------------------------------------------------------------------------------------

#[test]
fn gid_commands_name_no_vhca_port_while_the_device_has_none() {
    // The model refuses vhca_port_num != 0 while num_vhca_ports = 0 (Linux core/lib/gid.c sets
    // it only when num_vhca_ports > 0): bring-up programs GID 0, so it fails if the driver sets
    // the port.
    let (sim, ctx) = open();
    assert_eq!(
        sim.with_hca(|h| h.cap(cmd_hca_cap::NUM_VHCA_PORTS)),
        0,
        "the model advertises no vHCA ports"
    );
    assert_eq!(ctx.caps().num_vhca_ports, 0);
    let (gid, mac, ver) = ctx.query_gid(0).expect("query gid 0");
    assert_eq!(gid, mlx5::hca::link_local_gid(ctx.mac()));
    assert_eq!(mac, ctx.mac());
    assert_eq!(ver, 2);
    let g = mlx5::hca::ipv4_mapped_gid([10, 0, 0, 7]);
    ctx.set_gid(5, g).expect("set gid 5");
    assert_eq!(sim.with_hca(|h| h.roce_gid(5)), Some(g));
    assert_eq!(ctx.query_gid(5).unwrap().0, g);
}

#[test]
fn gid_index_beyond_the_table_is_refused_before_any_command() {
    let (_sim, ctx) = open();
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    assert_eq!(len, 64, "roce_address_table_size of the model");
    let sent = ctx.commands_sent();
    for i in [u16::MAX, 64, 200] {
        assert_eq!(
            ctx.query_gid(i).err(),
            Some(Error::Invalid(InvalidInput::GidIndex)),
            "query_gid({i})"
        );
        assert_eq!(
            ctx.set_gid(i, [1; 16]).err(),
            Some(Error::Invalid(InvalidInput::GidIndex)),
            "set_gid({i})"
        );
    }
    assert_eq!(ctx.commands_sent(), sent, "nothing reached the device");
    // The last entry is fine.
    ctx.query_gid(63).expect("last index");
}

// ---------------------------------------------------------------------------------------------
// Memory-region sizes
// ---------------------------------------------------------------------------------------------

#[test]
fn absurd_alloc_mr_lengths_are_typed_errors_not_panics() {
    let (sim, ctx) = open();
    let log = sim.with_hca(|h| h.cap(cmd_hca_cap::LOG_MAX_MRW_SZ));
    assert!(log < 64, "the model advertises a real limit ({log})");
    assert_eq!(ctx.caps().log_max_mrw_sz as u32, log);
    let max = 1u64 << log;
    let pd = ctx.alloc_pd().unwrap();
    let sent = ctx.commands_sent();
    for len in [usize::MAX, (1usize << 63) + 1, 1 << 63, max as usize + 1] {
        let e = pd.alloc_mr(len, AccessFlags::ALL).err();
        assert_eq!(
            e,
            Some(Error::Invalid(InvalidInput::MrTooLarge {
                len: len as u64,
                max
            })),
            "alloc_mr({len:#x})"
        );
    }
    assert_eq!(ctx.commands_sent(), sent, "refused before any command");
    assert_eq!(ctx.query_device().max_mr_size, max);
    // An ordinary region still works.
    let m = pd.alloc_mr(8192, AccessFlags::ALL).unwrap();
    assert_eq!(m.len(), 8192);
}

#[test]
fn absurd_reg_phys_chunks_are_typed_errors_not_aborts() {
    let (_sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let max = ctx.query_device().max_mr_size;
    let sent = ctx.commands_sent();
    // A 2^62-byte chunk: above the device's limit.
    let huge = [PhysChunk {
        bus: 0x1000,
        len: 1 << 62,
    }];
    // SAFETY: refused before the device is told about the memory.
    let e = unsafe { pd.reg_phys(&huge, 0x1000, AccessFlags::ALL) }.err();
    assert_eq!(
        e,
        Some(Error::Invalid(InvalidInput::MrTooLarge {
            len: 1 << 62,
            max
        }))
    );
    // 1 TiB + 4 KiB that only 4 KiB pages translate (the chunks' bus addresses differ from
    // their virtual ones at bit 12, at any IOVA): 2^28 + 1 entries, more than the driver
    // plans (a single chunk would be planned at its own address with large pages).
    let scattered = [
        PhysChunk {
            bus: 0x1000,
            len: 0x1000,
        },
        PhysChunk {
            bus: 0x3000,
            len: 1 << 40,
        },
    ];
    // SAFETY: refused before the device is told about the memory.
    let e = unsafe { pd.reg_phys(&scattered, 0x2000, AccessFlags::ALL) }.err();
    assert_eq!(
        e,
        Some(Error::Invalid(InvalidInput::TooManyTranslations {
            entries: (1 << 28) + 1,
            max: mlx5::mr::MAX_MTT_ENTRIES
        }))
    );
    // Chunk lengths whose sum wraps.
    let wrap = [
        PhysChunk {
            bus: 0x1000,
            len: u64::MAX - 0xfff,
        },
        PhysChunk {
            bus: 0x1000,
            len: 0x2000,
        },
    ];
    // SAFETY: refused before the device is told about the memory.
    let e = unsafe { pd.reg_phys(&wrap, 0, AccessFlags::ALL) }.err();
    assert_eq!(e, Some(Error::Invalid(InvalidInput::LengthOverflow)));
    assert_eq!(ctx.commands_sent(), sent, "refused before any command");
}

// ---------------------------------------------------------------------------------------------
// Optional access flags
// ---------------------------------------------------------------------------------------------

fn mkc_of(sim: &SimHal, key: u32) -> Vec<u8> {
    sim.with_hca(|h| {
        h.mkeys()
            .by_index(mkey::index(key))
            .expect("mkey exists")
            .mkc()
            .to_vec()
    })
}

#[test]
fn relaxed_ordering_is_accepted_and_set_where_the_caps_allow() {
    let (sim, ctx) = open();
    assert!(ctx.caps().relaxed_ordering_write);
    assert!(!ctx.caps().relaxed_ordering_read);
    assert!(ctx.caps().relaxed_ordering_read_pci_enabled);
    let pd = ctx.alloc_pd().unwrap();
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::RELAXED_ORDERING;
    let m = pd
        .alloc_mr(4096, acc)
        .expect("relaxed ordering is optional, not refused");
    assert_eq!(m.access(), acc);
    let c = mkc_of(&sim, m.lkey());
    assert_eq!(mkc::RELAXED_ORDERING_WRITE.get(&c), Ok(1));
    // Reads only with the unconditional cap (PCIe RO state is unknown to the driver).
    assert_eq!(mkc::RELAXED_ORDERING_READ.get(&c), Ok(0));
    assert_eq!(mkc::RW.get(&c), Ok(1));
    // Without the flag, neither bit.
    let m2 = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let c2 = mkc_of(&sim, m2.lkey());
    assert_eq!(mkc::RELAXED_ORDERING_WRITE.get(&c2), Ok(0));
    // Another optional bit the device knows nothing of is accepted and ignored.
    let m3 = pd
        .alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags(1 << 25))
        .expect("optional range");
    let c3 = mkc_of(&sim, m3.lkey());
    assert_eq!(mkc::RELAXED_ORDERING_WRITE.get(&c3), Ok(0));
    // Outside the optional range, unknown bits are still refused.
    assert_eq!(
        pd.alloc_mr(4096, AccessFlags(1 << 30)).err(),
        Some(Error::Invalid(InvalidInput::AccessFlags))
    );
}

#[test]
fn relaxed_ordering_on_a_device_without_it_is_dropped_not_refused() {
    let sim = SimHal::new();
    sim.with_hca(|h| {
        let g = &mut h.caps_mut().general;
        for f in [
            cmd_hca_cap::RELAXED_ORDERING_WRITE,
            linux_layout::cmd_hca_cap::RELAXED_ORDERING_READ_PCI_ENABLED,
        ] {
            f.set(&mut g.max[..], 0).unwrap();
            f.set(&mut g.cur[..], 0).unwrap();
        }
    });
    // No FLR: it would power the model back on with its own caps.
    let cfg = mlx5::ContextConfig {
        reset_function: false,
        ..test_config()
    };
    let ctx = Context::open(TestHal(sim.clone()), cfg).expect("bring-up");
    assert!(!ctx.caps().relaxed_ordering_write);
    let pd = ctx.alloc_pd().unwrap();
    // The model refuses the bits it does not advertise: the driver must not send them.
    let m = pd
        .alloc_mr(
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::RELAXED_ORDERING,
        )
        .expect("accepted without relaxed ordering");
    let c = mkc_of(&sim, m.lkey());
    assert_eq!(mkc::RELAXED_ORDERING_WRITE.get(&c), Ok(0));
    assert_eq!(mkc::RELAXED_ORDERING_READ.get(&c), Ok(0));
}

// ---------------------------------------------------------------------------------------------
// Page requests
// ---------------------------------------------------------------------------------------------

#[test]
fn a_page_request_of_i32_max_is_answered_with_cant_give() {
    let (sim, ctx) = open();
    let held = ctx.pages_held();
    let owned = sim.with_hca(|h| h.pages().owned());
    assert_eq!(held, owned);
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(i32::MAX)));
    let e = ctx.poll_events().err();
    assert!(
        matches!(
            e,
            Some(Error::PageRequestTooLarge {
                max: mlx5::pages::MAX_FW_PAGES,
                ..
            })
        ),
        "{e:?}"
    );
    assert_eq!(ctx.pages_held(), held, "nothing was allocated or given");
    assert_eq!(sim.with_hca(|h| h.pages().cant_give_count()), 1);
    // The refused request still ended the round: consumer index back, EQ armed again.
    assert!(
        sim.with_hca(|h| h
            .eq(mlx5_sim::objects::eq::FIRST_EQN as u8)
            .expect("the async EQ")
            .armed),
        "the EQ is re-armed after a page request the driver refused"
    );
    // The context goes on working.
    let pd = ctx.alloc_pd().expect("pd after a refused page request");
    pd.alloc_mr(4096, AccessFlags::ALL).expect("mr");
    drop(pd);
    ctx.close().expect("clean teardown");
}

#[test]
fn an_absurd_page_demand_raised_before_bring_up_is_refused() {
    let sim = SimHal::new();
    // Raised before bring-up: the model posts it once the EQ asks for page requests; the
    // driver answers CANT_GIVE when it sees it (during bring-up or at the next poll).
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(i32::MAX - 200)));
    match Context::open(TestHal(sim.clone()), test_config()) {
        Ok(ctx) => {
            let e = ctx.poll_events().err();
            assert!(
                matches!(e, Some(Error::PageRequestTooLarge { .. })),
                "{e:?}"
            );
            assert_eq!(sim.with_hca(|h| h.pages().cant_give_count()), 1);
            assert_eq!(ctx.pages_held(), sim.with_hca(|h| h.pages().owned()));
            ctx.close().expect("clean teardown");
        }
        Err(e) => assert!(matches!(e, Error::PageRequestTooLarge { .. }), "{e:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Quarantine after garbled replies
// ---------------------------------------------------------------------------------------------

#[test]
fn garbled_create_mkey_reply_quarantines_the_buffer() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(ctx.quarantined(), (0, 0));
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    let e = pd.alloc_mr(8192, AccessFlags::ALL).err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x200 }));
    // The model did create the key: the buffer behind it must not be freed.
    assert_eq!(sim.with_hca(|h| h.mkeys().len()), 1);
    assert_eq!(ctx.quarantined(), (1, 8192));
    assert!(ctx.needs_reset());
}

#[test]
fn failed_destroy_mkey_quarantines_the_buffer() {
    let (sim, ctx) = open();
    let pd = ctx.alloc_pd().unwrap();
    let mut m = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.garble_next_output_length = true));
    assert_eq!(
        m.dereg().err(),
        Some(Error::BadFirmwareReply { opcode: 0x202 })
    );
    assert_eq!(ctx.quarantined(), (1, 4096));
    // A firmware status error on destroy leaves the key alive too: held, whatever the error.
    let mut m2 = pd.alloc_mr(4096, AccessFlags::ALL).unwrap();
    sim.with_hca(|h| h.update_faults(|f| f.next_delivery_status = Some(0x7)));
    assert!(m2.dereg().is_err());
    assert_eq!(ctx.quarantined(), (2, 8192));
}

#[test]
fn garbled_manage_pages_give_quarantines_the_pages_until_teardown_returns_them() {
    let (sim, ctx) = open();
    let held = ctx.pages_held();
    // The device asks for 8 more pages; the GIVE's reply is garbled after the device took
    // them.
    sim.with_hca(|h| {
        h.update_faults(|f| {
            f.page_request = Some(8);
            f.garble_next_output_length = true;
        })
    });
    let e = ctx.poll_events().err();
    assert_eq!(e, Some(Error::BadFirmwareReply { opcode: 0x108 }));
    assert_eq!(
        sim.with_hca(|h| h.pages().owned()),
        held + 8,
        "the device took them"
    );
    assert_eq!(ctx.pages_held(), held, "the driver does not know it");
    assert_eq!(ctx.quarantined(), (8, 8 * 4096));
    assert!(ctx.needs_reset());
    // Teardown reclaims them like any other page: every page comes back, clean close.
    ctx.close()
        .expect("teardown reclaims the quarantined pages too");
    assert_eq!(sim.with_hca(|h| h.pages().owned()), 0);
}

// ---------------------------------------------------------------------------------------------
// query_device / query_port
// ---------------------------------------------------------------------------------------------

#[test]
fn query_device_reports_the_caps_as_linux_does() {
    let (sim, ctx) = open();
    let a = ctx.query_device();
    let cap = |f: Field| sim.with_hca(|h| h.cap(f));
    assert_eq!(a.fw_ver, ctx.fw_version());
    assert_eq!(a.max_qp, 1 << cap(cmd_hca_cap::LOG_MAX_QP));
    assert_eq!(a.max_qp_wr, 1 << cap(cmd_hca_cap::LOG_MAX_QP_SZ));
    assert_eq!(a.max_cq, 1 << cap(cmd_hca_cap::LOG_MAX_CQ));
    assert_eq!(a.max_cqe, (1 << cap(cmd_hca_cap::LOG_MAX_CQ_SZ)) - 1);
    assert_eq!(a.max_mr, 1 << cap(cmd_hca_cap::LOG_MAX_MKEY));
    assert_eq!(a.max_pd, 1 << cap(cmd_hca_cap::LOG_MAX_PD));
    assert_eq!(a.max_qp_rd_atom, 1 << cap(cmd_hca_cap::LOG_MAX_RA_REQ_QP));
    assert_eq!(
        a.max_qp_init_rd_atom,
        1 << cap(cmd_hca_cap::LOG_MAX_RA_RES_QP)
    );
    assert_eq!(a.max_res_rd_atom, a.max_qp_rd_atom as u64 * a.max_qp as u64);
    assert_eq!(a.max_mr_size, 1 << cap(cmd_hca_cap::LOG_MAX_MRW_SZ));
    assert_eq!(a.page_size_cap, !0xfffu64);
    // Linux: min(max_wqe_sz_sq, 512) - ctrl 16 - raddr 16, in 16-byte SGEs: 30 for 1024-byte
    // send WQEs; receive: 512 / 16 = 32, capped by the driver's 30.
    assert_eq!(a.max_send_sge, 30);
    assert_eq!(a.max_recv_sge, 30);
    assert_eq!(a.max_sge, 30);
    // 8-byte CAS / FAA, host-endian responses negotiated at bring-up.
    assert_eq!(a.atomic_cap, AtomicCap::Hca);
    assert_eq!(a.phys_port_cnt, 1);
    assert_eq!(
        a.local_ca_ack_delay as u32,
        cap(cmd_hca_cap::LOCAL_CA_ACK_DELAY)
    );
    assert_eq!(a.hca_core_clock_khz, cap(cmd_hca_cap::DEVICE_FREQUENCY_KHZ));
    // What it promises holds: a CQ of max_cqe entries and a QP of the largest SGE count.
    let cq = ctx.create_cq(a.max_cqe.min(1 << 16)).expect("cq");
    let pd = ctx.alloc_pd().unwrap();
    let caps = mlx5::QpCaps {
        max_send_sge: a.max_send_sge,
        max_recv_sge: a.max_recv_sge,
        ..Default::default()
    };
    pd.create_qp(&cq, &cq, &caps).expect("qp with max SGEs");
}

#[test]
fn query_port_reports_an_active_ethernet_port() {
    let (sim, ctx) = open();
    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(p.max_mtu, Mtu::Mtu4096);
    // 1522-byte frames: 1500-byte payload, minus 96 bytes of RoCE headers: 1024.
    assert_eq!(p.hw_mtu, 1522);
    assert_eq!(p.active_mtu, Some(Mtu::Mtu1024));
    assert_eq!(p.gid_tbl_len, 64);
    assert_eq!(p.pkey_tbl_len, 1);
    assert_eq!(
        p.max_msg_sz,
        1 << sim.with_hca(|h| h.cap(cmd_hca_cap::LOG_MAX_MSG))
    );
    let sent = ctx.commands_sent();
    for bad in [0u8, 2, 255] {
        assert_eq!(
            ctx.query_port(bad).err(),
            Some(Error::Invalid(InvalidInput::Port(bad)))
        );
    }
    assert_eq!(ctx.commands_sent(), sent);
}
