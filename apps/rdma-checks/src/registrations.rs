//! Registrations checked with RDMA traffic: an unaligned region at a chosen IOVA and a region
//! from the UMR mkey cache.

use mlx5::mr::PhysChunk;
use mlx5::{AccessFlags, Hal, WcStatus};

use crate::{pattern, recover, write_status, Checks, Loopback, Pairs, R};

/// Registrations checked with RDMA traffic: an unaligned region at a chosen IOVA (first and
/// last byte reachable, one past the end refused), and a region from the UMR mkey cache
/// (no command; after dereg the old rkey gets REM_ACCESS_ERR).
pub(crate) fn registrations<H: Hal>(
    lb: &Loopback<'_, H>,
    p: &mut Pairs<H>,
    checks: &mut Checks<'_>,
) -> R<()> {
    let Loopback { dev, pd, src, dst } = *lb;
    let byte = pattern(0x5a, 1);
    src.write(0, &byte)?;
    dst.write(0, &[0u8; 8192])?;
    // 5000 bytes starting 100 bytes into `dst`'s memory, at an IOVA of another page offset.
    let chunk = [PhysChunk {
        bus: dst.addr() + 100,
        len: 5000,
    }];
    let iova = 0x1234_5678_9abc;
    // SAFETY: `dst` owns the memory and outlives the region (deregistered below); no WR
    // using it is left in flight.
    let mut mr = unsafe { pd.reg_phys_iova(&chunk, iova, AccessFlags::ALL) }?;
    let first = write_status(p, src, 1, iova, mr.rkey())?;
    let last = write_status(p, src, 1, iova + 4999, mr.rkey())?;
    let (mut a, mut b) = ([0u8; 1], [0u8; 1]);
    dst.read(100, &mut a)?;
    dst.read(5099, &mut b)?;
    checks.check(
        "unaligned region at a chosen IOVA: first and last byte written by RDMA_WRITE",
        first == WcStatus::Success && last == WcStatus::Success && a == [byte[0]] && b == [byte[0]],
    );
    let past = write_status(p, src, 1, iova + 5000, mr.rkey())?;
    let mut c = [0u8; 1];
    dst.read(5100, &mut c)?;
    checks.check(
        "one byte past the unaligned region gets REM_ACCESS_ERR",
        past == WcStatus::RemAccessErr && c == [0],
    );
    recover(p)?;
    mr.dereg()?;

    // The mkey cache: registration and deregistration are UMR WQEs.
    dev.enable_mkey_cache(1)?;
    let chunk = [PhysChunk {
        bus: dst.addr() + 8192,
        len: 4096,
    }];
    let iova = 0x7000_0000_0000;
    let before = dev.commands_sent();
    // SAFETY: as above.
    let mut mr = unsafe { pd.reg_phys_iova(&chunk, iova, AccessFlags::ALL) }?;
    let ok = write_status(p, src, 1, iova + 4095, mr.rkey())?;
    let mut d = [0u8; 1];
    dst.read(8192 + 4095, &mut d)?;
    let rkey = mr.rkey();
    mr.dereg()?;
    let cmds = dev.commands_sent() - before;
    checks.check(
        "region from the UMR mkey cache: no command to register or deregister, RDMA_WRITE lands",
        cmds == 0 && ok == WcStatus::Success && d == [byte[0]],
    );
    dst.write(8192 + 4095, &[0])?;
    let stale = write_status(p, src, 1, iova + 4095, rkey)?;
    dst.read(8192 + 4095, &mut d)?;
    checks.check(
        "after dereg of a cached region its rkey gets REM_ACCESS_ERR",
        stale == WcStatus::RemAccessErr && d == [0],
    );
    recover(p)?;
    Ok(())
}
