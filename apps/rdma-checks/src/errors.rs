//! The error cases on the loopback pair: an RDMA WRITE past the end of its region (nothing
//! outside it touched), a remote and a local PD mismatch, posting on a QP in RESET.

use alloc::vec;

use mlx5::{AccessFlags, Hal, Remote, SendData, SendOp, SendWr, WcStatus};

use crate::{
    connect, drain, pattern, post_one, recover, remote_of, Checks, Loopback, Pairs, BUF, R, SIG,
};

pub(crate) fn errors<H: Hal>(
    lb: &Loopback<'_, H>,
    p: &mut Pairs<H>,
    checks: &mut Checks<'_>,
) -> R<()> {
    let Loopback { dev, pd, src, dst } = *lb;
    // An RDMA WRITE past the end of the target region: remote access error, QP to error, and
    // nothing outside the region touched.
    let guard = pattern(9, 64);
    dst.write(BUF as u64 - 64, &guard)?;
    let sge = [src.sge(0, 128)];
    let remote = Remote {
        addr: dst.addr() + BUF as u64 - 64,
        rkey: dst.rkey(),
    };
    let wc = post_one(
        p,
        200,
        SendOp::Write { remote, imm: None },
        SendData::Sges(&sge),
    )?;
    let mut tail = vec![0u8; 64];
    dst.read(BUF as u64 - 64, &mut tail)?;
    checks.check(
        "out-of-bounds RDMA_WRITE gets REM_ACCESS_ERR and writes nothing",
        wc.status == WcStatus::RemAccessErr && tail == guard,
    );
    recover(p)?;

    // A PD mismatch: the target region belongs to another PD than the responder QP.
    let other_pd = dev.alloc_pd()?;
    let foreign = other_pd.alloc_mr(4096, AccessFlags::ALL)?;
    foreign.write(0, &[0xee; 64])?;
    let remote = remote_of(&foreign);
    let sge = [src.sge(0, 64)];
    let wc = post_one(
        p,
        201,
        SendOp::Write { remote, imm: None },
        SendData::Sges(&sge),
    )?;
    let mut got = [0u8; 64];
    foreign.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE with an rkey of another PD is refused",
        wc.status == WcStatus::RemAccessErr && got == [0xee; 64],
    );
    recover(p)?;

    // The same mismatch on the local side: an lkey from another PD in the gather list.
    let lsge = [foreign.sge(0, 64)];
    let remote = remote_of(dst);
    let wc = post_one(
        p,
        202,
        SendOp::Write { remote, imm: None },
        SendData::Sges(&lsge),
    )?;
    checks.check(
        "gather from an lkey of another PD gets LOC_PROT_ERR",
        wc.status == WcStatus::LocProtErr,
    );
    recover(p)?;
    drop(foreign);
    drop(other_pd);
    let _ = pd;

    // Posting on a QP in RESET is refused before anything reaches the device.
    p.a.to_err()?;
    p.a.to_reset()?;
    let before = dev.commands_sent();
    let r = p.a.post_send(&[SendWr {
        wr_id: 203,
        op: SendOp::Send { imm: None },
        data: SendData::Inline(b"x"),
        flags: SIG,
    }]);
    checks.check(
        "post_send in RESET is an error, nothing sent",
        r.is_err() && dev.commands_sent() == before,
    );
    p.b.to_err()?;
    drain(&mut p.cq_b);
    p.b.to_reset()?;
    connect(&mut p.a, &mut p.b)?;
    Ok(())
}
