//! The perftest-style figures: ib_write_bw, ib_read_bw and ib_write_lat over the loopback pair.

use alloc::vec::Vec;

use mlx5::{Hal, SendData, SendFlags, SendOp, SendWr, WcStatus};

use crate::{post_one, remote_of, wait_one, AppError, Console, Mr, Pairs, R, SIG};

/// ib_write_bw, ib_read_bw and ib_write_lat in the style of perftest.
pub(crate) fn perf<H: Hal>(
    c: &dyn Console,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    quick: bool,
) -> R<()> {
    let iters: u64 = if quick { 64 } else { 512 };
    let sizes: &[u32] = &[64, 1024, 4096, 16384, 65536];
    out!(
        c,
        "rdma: ---------------------------------------------------------------------------"
    );
    for (name, read) in [("RDMA_Write", false), ("RDMA_Read", true)] {
        out!(
            c,
            "rdma: {name} BW (loopback RC, {iters} iterations, 16 WRs per doorbell)"
        );
        out!(c, "rdma:  #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]");
        for &size in sizes {
            let (peak, avg, mpps) = bw(c, p, src, dst, size, iters, read)?;
            out!(
                c,
                "rdma:  {size:<10} {iters:<14} {peak:<18.2} {avg:<20.2} {mpps:.6}"
            );
        }
    }
    let lat_iters = if quick { 32 } else { 256 };
    out!(
        c,
        "rdma: RDMA_Write Latency (loopback RC, {} iterations, one signaled WR each)",
        lat_iters
    );
    out!(
        c,
        "rdma:  #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"
    );
    for &size in &[2u32, 64, 4096] {
        let (min, max, typ) = lat(c, p, src, dst, size, lat_iters)?;
        out!(
            c,
            "rdma:  {:<6} {:<14} {:<14.2} {:<12.2} {:.2}",
            size,
            lat_iters,
            min,
            max,
            typ
        );
    }
    out!(
        c,
        "rdma: ---------------------------------------------------------------------------"
    );
    Ok(())
}

/// (peak MB/s over one batch, average MB/s, Mpps).
fn bw<H: Hal>(
    c: &dyn Console,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    size: u32,
    iters: u64,
    read: bool,
) -> R<(f64, f64, f64)> {
    const BATCH: u64 = 16;
    let remote = remote_of(dst);
    let sge = [src.sge(0, size)];
    let start = c.now();
    let mut peak = 0f64;
    let mut done = 0;
    while done < iters {
        let n = BATCH.min(iters - done);
        let t = c.now();
        let wrs: Vec<SendWr<'_, H>> = (0..n)
            .map(|i| SendWr {
                wr_id: done + i,
                op: if read {
                    SendOp::Read { remote }
                } else {
                    SendOp::Write { remote, imm: None }
                },
                data: SendData::Sges(&sge),
                flags: if i == n - 1 { SIG } else { SendFlags::NONE },
            })
            .collect();
        p.a.post_send(&wrs)?;
        let wc = wait_one(&mut p.cq_a)?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        let secs = (c.now() - t).as_secs_f64();
        if secs > 0.0 {
            peak = peak.max((n * size as u64) as f64 / secs / 1e6);
        }
        done += n;
    }
    let secs = (c.now() - start).as_secs_f64().max(1e-9);
    Ok((
        peak,
        (iters * size as u64) as f64 / secs / 1e6,
        iters as f64 / secs / 1e6,
    ))
}

/// (min, max, typical = median) microseconds from post to completion.
fn lat<H: Hal>(
    c: &dyn Console,
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    size: u32,
    iters: usize,
) -> R<(f64, f64, f64)> {
    let remote = remote_of(dst);
    let sge = [src.sge(0, size)];
    let mut us = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = c.now();
        let wc = post_one(
            p,
            i as u64,
            SendOp::Write { remote, imm: None },
            SendData::Sges(&sge),
        )?;
        if wc.status != WcStatus::Success {
            return Err(AppError::Completion(wc.status));
        }
        us.push((c.now() - t).as_nanos() as f64 / 1000.0);
    }
    us.sort_by(|a, b| a.partial_cmp(b).unwrap_or(core::cmp::Ordering::Equal));
    Ok((us[0], us[us.len() - 1], us[us.len() / 2]))
}
