//! Command delivery and what the device reports by itself, driven through raw PRM commands:
//! delivery errors, command signatures, EQEs (owner bit, INTx, page requests), the async EQ
//! overrun, the fault switches and the health counter.

mod raw;

use mlx5_prm::*;
use mlx5_sim::control::syndrome as syn;
use raw::{dev, input, set, up, Raw};

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
        mlx5_sim::control::pages::REGULAR_PAGES as i32
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
    let regular = mlx5_sim::control::pages::REGULAR_PAGES as usize;
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
