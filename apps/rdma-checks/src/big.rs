//! The big registration: the platform's memory registered with one command, checked to need one
//! command and at most one MTT entry per huge page.

use core::fmt;

use mlx5::{AccessFlags, Hal, ProtectionDomain};

use crate::{BigMemory, BigMr, Checks, Ctx, R};

pub(crate) fn register_big<H: Hal, B: BigMemory>(
    dev: &Ctx<H>,
    pd: &ProtectionDomain<H>,
    mem: B,
    checks: &mut Checks<'_>,
) -> R<BigMr<H, B>> {
    let c = checks.con;
    let chunks = mem.chunks();
    let Some(first) = chunks.first() else {
        return Err(mlx5::Error::Hal(mlx5::HalError::OutOfMemory).into());
    };
    let iova = first.bus;
    let before = dev.commands_sent();
    let t = c.now();
    // SAFETY: the memory is owned by `BigMr`, which deregisters before freeing it, and no
    // work request outlives `run_all`.
    let mr = unsafe { pd.reg_phys(&chunks, iova, AccessFlags::ALL) }?;
    let ns = (c.now() - t).as_nanos();
    let (entries, shift) = mr.translation();
    out!(
        c,
        "rdma: reg_mr {} MiB of {} pages at {:#x} ({} chunks): {} MTT entries (page 2^{}), {} commands, {} ns",
        mem.len() >> 20,
        PageName(mem.page_size()),
        iova,
        chunks.len(),
        entries,
        shift,
        dev.commands_sent() - before,
        ns
    );
    checks.check(
        "reg_mr of huge pages needs one command and at most one entry per huge page",
        {
            let pages = (mem.len() as u64).div_ceil(mem.page_size()) as usize;
            dev.commands_sent() - before == 1 && entries <= pages
        },
    );
    Ok(BigMr { mr, mem })
}

/// A page size as the unikernel's `PageSize` prints it (`Size2M`).
struct PageName(u64);

impl fmt::Display for PageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b if b >= 1 << 30 && b % (1 << 30) == 0 => write!(f, "Size{}G", b >> 30),
            b if b >= 1 << 20 && b % (1 << 20) == 0 => write!(f, "Size{}M", b >> 20),
            b => write!(f, "Size{}K", b >> 10),
        }
    }
}
