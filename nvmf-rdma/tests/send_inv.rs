//! SEND with invalidate, end to end on two emulated HCAs: the response to a command whose
//! keyed SGL asks for invalidation (type 0x4f: subtype `NVME_SGL_FMT_INVALIDATE`,
//! include/linux/nvme.h) goes out as SEND with invalidate of the SGL's key, as Linux's target
//! sends it (drivers/nvme/target/rdma.c `nvmet_rdma_map_sgl_keyed` keeps the key,
//! `nvmet_rdma_queue_response` posts IB_WR_SEND_WITH_INV); the host's HCA invalidates the
//! key, so the target's next access with it fails; a plain keyed SGL (0x40) gets a plain
//! SEND and the key stays valid.
//!
//! The host's key is a type 2 memory window bound on its queue's QP: the key of this driver
//! that a peer may invalidate (`mkc.en_rinval`, set for type 2 windows as Linux ib/mr.c
//! `mlx5_ib_alloc_mw` sets it). Linux's host (drivers/nvme/host/rdma.c) registers its pages
//! by IB_WR_REG_MR, whose mkey segment sets the same remote-invalidate flag (ib/wr.c
//! `set_reg_mkey_seg`: `MLX5_MKEY_REMOTE_INVAL`); the driver has no such work request, and the
//! target's side is the same for either key.

mod common;

use common::*;
use mlx5::mr::Access;
use mlx5::{MemoryWindow, MwBind, MwType, SendFlags, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use nvmeof::sgl::Sgl;
use nvmeof::KeyedSgl;
use nvmf_rdma::{Note, Why};

/// The window's region: 16 KiB of the host's, its own (a window's region needs
/// [`Access::MW_BIND`]).
const WIN_LEN: usize = 16 << 10;

/// The host's data region and the type 2 window over it, bound on queue `q`'s QP (the
/// window first: it goes before its region).
struct Window {
    mw: MemoryWindow<cm::sim::TestHal>,
    mr: mlx5::MemoryRegion<cm::sim::TestHal>,
}

/// The admin queue and I/O queue 1 of one controller, the I/O queue's QP with room for a bind
/// WQE; a region with a type 2 window over it bound on that QP (remote read and write);
/// 4 KiB of a pattern at LBA 0.
fn setup_window() -> (Tgt, Host, cm::CmClock, usize, Window) {
    let (mut t, mut h, clock) = setup();
    let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
    // A bind WQE is 192 bytes (ctrl, UMR ctrl, mkey context, one KLM padded to 64: rdma-core
    // verbs.c `_sq_overhead`'s `mw_size`); rdma_cm's QP takes sizes only, so the room comes
    // with the inline size (48 bytes of overhead + 4 + 140 inline = 192).
    h.init.caps.max_inline_data = 140;
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);
    let mut w = rw(0x01, 0, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);

    let access = Access::ALL | Access::MW_BIND;
    let mr = h
        .node
        .pd
        .alloc_mr(WIN_LEN, access)
        .expect("window's region");
    let mut mw = h.node.pd.alloc_mw(MwType::Type2).expect("type 2 window");
    let bind = MwBind {
        mr: &mr,
        addr: mr.addr(),
        len: WIN_LEN as u64,
        access: Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    };
    let id = h.queues[q].id;
    let qp = h.node.cm.qp(id).unwrap();
    let rkey = qp
        .post_bind_mw(7, &mut mw, &bind, SendFlags::SIGNALED)
        .expect("bind");
    let mut bound = None;
    spin(&mut t, &mut h, &clock, |_, h| {
        bound = h.node.poll_cq();
        bound.is_some()
    });
    let b = bound.unwrap();
    assert_eq!(
        (b.wr_id, b.status, b.opcode),
        (7, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(mw.rkey(), rkey);
    (t, h, clock, q, Window { mw, mr })
}

impl Window {
    /// A keyed SGL over the window's first 4 KiB, with invalidate (0x4f) or not (0x40).
    fn sgl(&self, invalidate: bool) -> Sgl {
        let k = KeyedSgl {
            addr: self.mr.addr(),
            len: 4096,
            key: self.mw.rkey(),
        };
        let s = Sgl::keyed(k, invalidate);
        assert_eq!(s.type_byte(), if invalidate { 0x4f } else { 0x40 });
        s
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        self.mr.read(0, &mut b).unwrap();
        b
    }

    fn clear(&self) {
        self.mr.write(0, &[0u8; 4096]).unwrap();
    }
}

/// Reads LBA 0 (4 KiB) into the window by its SGL (with invalidate or not): the data
/// arrives by RDMA WRITE through the window. Returns the completion of the receive that took
/// the response.
fn read(
    t: &mut Tgt,
    h: &mut Host,
    clock: &cm::CmClock,
    q: usize,
    w: &Window,
    invalidate: bool,
) -> WorkCompletion {
    w.clear();
    let (r, wc) = Host::command_wc(t, h, clock, q, &rw(0x02, 0, 8, w.sgl(invalidate)));
    assert_eq!(r.status, 0, "read: {r:?}");
    assert_eq!(
        w.bytes(),
        pattern("pattern4k"),
        "by RDMA WRITE through the window"
    );
    wc
}

#[test]
fn a_keyed_sgl_with_invalidate_gets_send_with_invalidate_and_the_key_dies() {
    let (mut t, mut h, clock, q, w) = setup_window();
    // The response to a read by SGL 0x4f: a receive completed by SEND with invalidate
    // (rdma-core cq.c `handle_responder`, MLX5_CQE_RESP_SEND_INV: IBV_WC_WITH_INV), naming
    // the window's key as the invalidated rkey.
    let wc = read(&mut t, &mut h, &clock, q, &w, true);
    assert_eq!(wc.opcode, WcOpcode::RecvWithInv, "{wc:?}");
    assert_eq!(wc.imm, Some(w.mw.rkey()), "the invalidated rkey");
    assert!(!wc.wc_flags.contains(WcFlags::WITH_IMM), "{wc:?}");

    // The key is dead on the host's HCA: the target's RDMA WRITE with it, for the next read
    // (SGL 0x40, same key), is refused by the host's responder (NAK remote access error) and
    // fails at the target, which ends the queue; nothing lands in the window.
    w.clear();
    Host::send_capsule(&mut h, q, &rw(0x02, 0, 8, w.sgl(false)));
    spin(&mut t, &mut h, &clock, |t, _| {
        t.notes.iter().any(|n| {
            matches!(
                n,
                Note::Disconnected {
                    qid: 1,
                    why: Why::Transport,
                    ..
                }
            )
        })
    });
    let failed: Vec<_> = t
        .notes
        .iter()
        .filter_map(|n| match n {
            Note::Transport { status, .. } => Some(*status),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [WcStatus::RemAccessErr], "{:?}", t.notes);
    assert_eq!(
        w.bytes(),
        vec![0u8; 4096],
        "nothing written through a dead key"
    );
}

#[test]
fn a_keyed_sgl_without_invalidate_gets_a_plain_send_and_the_key_lives() {
    let (mut t, mut h, clock, q, w) = setup_window();
    for _ in 0..2 {
        // A plain receive completion (IBV_WC_RECV, no immediate, no invalidated rkey) ...
        let wc = read(&mut t, &mut h, &clock, q, &w, false);
        assert_eq!((wc.opcode, wc.imm), (WcOpcode::Recv, None), "{wc:?}");
        // ... and the key still opens the window for the next read.
    }
    assert!(!t
        .notes
        .iter()
        .any(|n| matches!(n, Note::Transport { .. } | Note::Disconnected { .. })));
}
