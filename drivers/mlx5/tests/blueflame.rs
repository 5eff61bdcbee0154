//! BlueFlame (issue 7, item 8): the driver copies a lone small WQE through the BlueFlame
//! register only when the HAL maps it write-combining, at the offsets the device advertises
//! (`log_bf_reg_size` = 9: registers of 512 bytes from 0x800, halves of 256); the model checks
//! every copied block against the WQE in memory and fails the QP on a stale copy.

#[allow(dead_code)]
mod common;

use std::sync::atomic::Ordering;

use common::*;
use mlx5::{QpCaps, Remote, SendFlags, WcStatus};

const SIG: SendFlags = SendFlags::SIGNALED;

fn write_once(p: &mut Pair, n: u64) -> Vec<mlx5::WorkCompletion> {
    let local = mr(&p.pd, 4096);
    let remote = mr(&p.pd, 4096);
    local.write(0, &pattern(256, 7)).unwrap();
    let lb = p.a.bind_mr(&local).unwrap();
    let r = Remote {
        addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let mut out = Vec::new();
    for i in 0..n {
        if p.a.post_write(i, lb.sge(0, 256), r, SIG).is_err() {
            break;
        }
        out.extend(wait(&mut p.cq_a, 1));
    }
    let _ = p.a.unbind_mr(lb);
    out
}

#[test]
fn blueflame_copies_match_the_wqe_in_memory() {
    let (sim, ctx) = open();
    assert_eq!(
        ctx.caps().log_bf_reg_size,
        9,
        "ConnectX-5: 512-byte BF registers"
    );
    let mut p = pair(&ctx, QpCaps::default());
    let wcs = write_once(&mut p, 5);
    assert_eq!(wcs.len(), 5);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        sim.stats.lock().unwrap().bf_copies,
        5,
        "one BlueFlame block per WR"
    );
    let (checked, bad) = sim.with_hca(|h| h.blueflame_stats());
    assert_eq!((checked, bad), (5, 0), "every block checked, none stale");
}

#[test]
fn stale_blueflame_copy_is_a_device_error() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    sim.stale_bf.store(true, Ordering::Relaxed);
    let _ = write_once(&mut p, 1);
    let (_, bad) = sim.with_hca(|h| h.blueflame_stats());
    assert_eq!(bad, 1, "the model saw the stale copy");
    let qpn = p.a.qpn();
    assert_eq!(
        sim.with_hca(|h| h.qps().state(qpn)),
        Some(mlx5_prm::qp::state::ERR),
        "the QP is in error after a stale BlueFlame copy"
    );
}

#[test]
fn uncached_bar_rings_doorbells_only() {
    let (sim, ctx) = open();
    sim.uncached.store(true, Ordering::Relaxed);
    let mut p = pair(&ctx, QpCaps::default());
    let before = sim.stats.lock().unwrap().writes64;
    let wcs = write_once(&mut p, 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let s = *sim.stats.lock().unwrap();
    assert_eq!(s.bf_copies, 0, "no BlueFlame through an uncached mapping");
    assert_eq!(s.writes64 - before, 3, "one 8-byte doorbell per WR");
}

#[test]
fn torn_blueflame_copy_is_a_device_error() {
    let (sim, ctx) = open();
    let mut p = pair(&ctx, QpCaps::default());
    sim.torn_bf.store(true, Ordering::Relaxed);
    // The first copy is torn (half a block); the second goes to the other half of the
    // register; the third reuses the first half while the torn copy never finished.
    let _ = write_once(&mut p, 3);
    let (_, bad) = sim.with_hca(|h| h.blueflame_stats());
    assert_eq!(bad, 1, "the model saw the torn copy");
    let qpn = p.a.qpn();
    assert_eq!(
        sim.with_hca(|h| h.qps().state(qpn)),
        Some(mlx5_prm::qp::state::ERR)
    );
}
