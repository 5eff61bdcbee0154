//! A type 2 memory window checked with RDMA traffic.

use alloc::vec;

use mlx5::{
    AccessFlags, Hal, MwBind, MwType, QpCaps, QpOptions, Remote, SendData, SendOp, SendWr,
    WcOpcode, WcStatus,
};

use crate::{
    connect, pattern, post_one, recover, wait_one, write_status, Checks, Loopback, Pairs, R, SIG,
};

/// A type 2 memory window over part of a region, checked with RDMA traffic: bound by a BIND_MW
/// work request on the responder QP (a new rkey), RDMA WRITE and READ through the window's
/// rkey, an access just outside the window refused, LOCAL_INV, and the old rkey refused.
pub(crate) fn windows<H: Hal>(lb: &Loopback<'_, H>, checks: &mut Checks<'_>) -> R<()> {
    let Loopback { dev, pd, src, dst } = *lb;
    // QPs with room for window WQEs (QpOptions::mw_bind); b owns the window.
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let opts = QpOptions {
        mw_bind: true,
        ..QpOptions::default()
    };
    let cq_a = dev.create_cq(64)?;
    let cq_b = dev.create_cq(64)?;
    let a = pd.create_qp_with(&cq_a, &cq_a, &caps, &opts)?;
    let b = pd.create_qp_with(&cq_b, &cq_b, &caps, &opts)?;
    let mut p = Pairs { a, b, cq_a, cq_b };
    connect(&mut p.a, &mut p.b)?;
    let target = pd.alloc_mr(
        16 * 1024,
        AccessFlags(AccessFlags::ALL.0 | AccessFlags::MW_BIND.0),
    )?;
    target.write(0, &[0u8; 16 * 1024])?;
    let mut mw = pd.alloc_mw(MwType::Type2)?;
    let first = mw.rkey();
    let access = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);
    let (off, len) = (4096u64, 4096u64);
    let bind = MwBind {
        mr: &target,
        addr: target.addr() + off,
        len,
        access,
    };
    let rkey = p.b.post_bind_mw(400, &mut mw, &bind, SIG)?;
    let wc = wait_one(&mut p.cq_b)?;
    checks.check(
        "memory window bound over part of a region by BIND_MW: new rkey, BIND_MW completion",
        wc.status == WcStatus::Success
            && wc.opcode == WcOpcode::BindMw
            && rkey != first
            && rkey == mw.rkey(),
    );
    let data = pattern(0x77, 4096);
    src.write(0, &data)?;
    let at = target.addr() + off;
    let w = write_status(&mut p, src, 4096, at, rkey)?;
    let mut got = vec![0u8; 4096];
    target.read(off, &mut got)?;
    let landed = got == data;
    dst.write(0, &[0u8; 4096])?;
    let sge = [dst.sge(0, 4096)];
    let remote = Remote { addr: at, rkey };
    let r = post_one(&mut p, 401, SendOp::Read { remote }, SendData::Sges(&sge))?;
    dst.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE and RDMA_READ through the window's rkey",
        w == WcStatus::Success && landed && r.status == WcStatus::Success && got == data,
    );
    // One byte past the window, still inside the region.
    let past = write_status(&mut p, src, 1, at + len, rkey)?;
    let mut c = [0u8; 1];
    target.read(off + len, &mut c)?;
    checks.check(
        "access outside the window gets REM_ACCESS_ERR and writes nothing",
        past == WcStatus::RemAccessErr && c == [0],
    );
    recover(&mut p)?;
    // LOCAL_INV on the window's QP; then the rkey names nothing.
    p.b.post_send(&[SendWr {
        wr_id: 402,
        op: SendOp::LocalInv { rkey },
        data: SendData::Sges(&[]),
        flags: SIG,
    }])?;
    let inv = wait_one(&mut p.cq_b)?;
    target.write(off, &[0u8; 8])?;
    let stale = write_status(&mut p, src, 8, at, rkey)?;
    let mut z = [0u8; 8];
    target.read(off, &mut z)?;
    checks.check(
        "after LOCAL_INV the window's old rkey gets REM_ACCESS_ERR",
        inv.status == WcStatus::Success
            && inv.opcode == WcOpcode::LocalInv
            && stale == WcStatus::RemAccessErr
            && z == [0; 8],
    );
    recover(&mut p)?;
    mw.dealloc()?;
    drop(target);
    Ok(())
}
