//! The NVM command set on I/O queues: Read, Write, Flush, Write Zeroes, Dataset Management,
//! as Linux's target runs them on a block device (`drivers/nvme/target/core.c`
//! `nvmet_parse_io_cmd`, `drivers/nvme/target/io-cmd-bdev.c`). Reads and writes with a keyed
//! data pointer move straight between the host and the disk; in-capsule writes are copied
//! into the backend before their response.

use crate::backend::{Backend, BackendError};
use crate::ctrl::{Ctrl, CSTS_RDY};
use crate::dispatch::{known_opcode, opcode_set, Cmd, Data, Outcome};
use crate::exec::{Local, STAGING_LEN};
use crate::queue::Then;
use crate::sqe::{Sqe, OPC_FABRICS};
use crate::status::{self, loc, DNR};
use crate::target::{NamespaceConfig, SubsysRef, Target};

/// NVM opcodes (`nvme.h` `enum nvme_opcode`).
pub mod opc {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// Dataset Management attribute "deallocate" (`nvme.h` `NVME_DSMGMT_AD`).
const DSMGMT_AD: u32 = 1 << 2;
/// Bytes of a DSM range (`struct nvme_dsm_range`: cattr, nlb, slba).
const DSM_RANGE_LEN: usize = 16;

/// What the SMART log reports: commands and 512-byte units moved, per disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Read commands.
    pub reads: u64,
    /// Write commands.
    pub writes: u64,
    /// 512-byte units read.
    pub sectors_read: u64,
    /// 512-byte units written.
    pub sectors_written: u64,
}

impl IoStats {
    pub(crate) fn add(&mut self, o: &IoStats) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.sectors_read += o.sectors_read;
        self.sectors_written += o.sectors_written;
    }
}

/// The namespace's size in bytes: its disk, whole logical blocks.
pub(crate) fn ns_bytes<B: Backend>(t: &Target<B>, ns: &NamespaceConfig) -> u64 {
    t.disks
        .get(usize::from(ns.disk))
        .map_or(0, |d| disk_ns_bytes(d, ns))
}

/// [`ns_bytes`] of the namespace's disk `d`.
fn disk_ns_bytes<B: Backend>(d: &B, ns: &NamespaceConfig) -> u64 {
    d.size() >> ns.lba_shift << ns.lba_shift
}

fn find_ns<'a, B: Backend>(t: &'a Target<B>, ctl: &Ctrl, nsid: u32) -> Option<&'a NamespaceConfig> {
    let SubsysRef::Nvm(s) = ctl.subsys else {
        return None;
    };
    t.cfg.subsystems[s]
        .namespaces
        .iter()
        .find(|n| n.nsid == nsid)
}

/// Linux `core.c` `nvmet_parse_io_cmd`: no fabrics command but authentication (not here),
/// the controller enabled and ready, an active namespace, an opcode the block device
/// backend runs (`nvmet_bdev_parse_io_cmd`).
pub(crate) fn parse<B: Backend>(t: &Target<B>, ctl: &Ctrl, sqe: &Sqe) -> Result<(), Outcome> {
    if sqe.opcode() == OPC_FABRICS {
        return Err(Outcome::fail_at(status::INVALID_OPCODE | DNR, loc::FCTYPE));
    }
    if ctl.cc & 1 == 0 || ctl.csts & CSTS_RDY == 0 {
        return Err(Outcome::fail(status::CMD_SEQ_ERROR | DNR));
    }
    if find_ns(t, ctl, sqe.nsid()).is_none() {
        return Err(Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID));
    }
    use opc::*;
    const KNOWN: u32 = opcode_set(&[READ, WRITE, FLUSH, DSM, WRITE_ZEROES]);
    known_opcode(sqe, KNOWN)
}

/// A range of logical blocks in bytes, or the status of a range past the namespace's end:
/// Linux's block layer fails such a bio with `BLK_STS_IOERR` (`block/blk-core.c`
/// `bio_check_eod`), which the target answers as `NVME_SC_INTERNAL | DNR`
/// (`io-cmd-bdev.c` `blk_to_nvme_status`).
fn byte_range(ns_bytes: u64, shift: u8, slba: u64, blocks: u64) -> Result<(u64, u64), Outcome> {
    let off = slba.checked_mul(1 << shift);
    let len = blocks << shift;
    match off.and_then(|o| o.checked_add(len)) {
        Some(end) if end <= ns_bytes => Ok((off.unwrap_or(0), len)),
        _ => Err(Outcome::fail_at(status::INTERNAL | DNR, loc::OPCODE)),
    }
}

fn io_status(r: Result<(), BackendError>) -> Outcome {
    match r {
        Ok(()) => Outcome::ok(0),
        Err(_) => Outcome::fail_at(status::INTERNAL | DNR, loc::OPCODE),
    }
}

/// Runs a parsed I/O command of controller `c`.
pub(crate) fn execute<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    let sqe = &cmd.sqe;
    let Some(ns) = t.ctrls[c]
        .as_ref()
        .and_then(|ctl| find_ns(t, ctl, sqe.nsid()))
        .cloned()
    else {
        return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
    };
    let disk = usize::from(ns.disk);
    match sqe.opcode() {
        opc::READ | opc::WRITE => rw(t, &ns, cmd),
        opc::FLUSH => match cmd.check_len(0) {
            Err(o) => o,
            Ok(()) => io_status(t.disks[disk].flush()),
        },
        opc::WRITE_ZEROES => {
            if let Err(o) = cmd.check_len(0) {
                return o;
            }
            let blocks = u64::from(sqe.nlb()) + 1;
            match byte_range(ns_bytes(t, &ns), ns.lba_shift, sqe.slba(), blocks) {
                Err(o) => o,
                Ok((off, len)) => io_status(t.disks[disk].write_zeroes(off, len)),
            }
        }
        _ => dsm(t, c, cmd),
    }
}

/// Linux `io-cmd-bdev.c` `nvmet_bdev_execute_rw`: the data pointer's length must be the
/// blocks' (`nvmet_rw_data_len`).
fn rw<B: Backend>(t: &mut Target<B>, ns: &NamespaceConfig, cmd: &Cmd) -> Outcome {
    let sqe = &cmd.sqe;
    let blocks = u64::from(sqe.nlb()) + 1;
    let len = blocks << ns.lba_shift;
    if u64::from(cmd.data.len()) != len {
        return Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR);
    }
    let disk = usize::from(ns.disk);
    // The namespace's disk exists (check_config); taken once for the size and the prepare.
    let Some(d) = t.disks.get_mut(disk) else {
        return io_status(Err(BackendError::OutOfRange));
    };
    let (offset, len) = match byte_range(disk_ns_bytes(d, ns), ns.lba_shift, sqe.slba(), blocks) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let local = Local::Disk {
        disk: ns.disk,
        offset,
        len: len as u32,
    };
    if let Some(st) = t.stats.get_mut(disk) {
        if sqe.opcode() == opc::READ {
            st.reads += 1;
            st.sectors_read += len >> 9;
        } else {
            st.writes += 1;
            st.sectors_written += len >> 9;
        }
    }
    if let Data::InCapsule(data) = cmd.data {
        return io_status(d.write(offset, data));
    }
    // The transport moves the bytes straight between the host and the disk's memory: a thin
    // disk zeroes what was never written there first.
    if let Err(e) = d.prepare(offset, len) {
        return io_status(Err(e));
    }
    if sqe.opcode() == opc::READ {
        return Outcome::ToHost { local, result: 0 };
    }
    Outcome::FromHost {
        local,
        then: Then::Done {
            status: 0,
            result: 0,
        },
    }
}

/// Linux `io-cmd-bdev.c` `nvmet_bdev_execute_dsm`: up to NR + 1 ranges of data; only
/// "deallocate" alone does anything, every other attribute set completes at once.
fn dsm<B: Backend>(t: &mut Target<B>, c: usize, cmd: &Cmd) -> Outcome {
    let sqe = &cmd.sqe;
    // The whole 32-bit NR field, as Linux `io-cmd-bdev.c` `nvmet_bdev_execute_discard` and
    // `nvmet_dsm_len` read it (`le32_to_cpu(cmd->dsm.nr)`); the spec's NR is bits 07:00, but
    // Linux 6.1 does not mask it. Widened so NR = 0xffffffff cannot overflow.
    let nr = sqe.cdw(10) as usize + 1;
    let need = nr.saturating_mul(DSM_RANGE_LEN).min(u32::MAX as usize) as u32;
    if let Err(o) = cmd.check_len_lte(need) {
        return o;
    }
    if sqe.cdw(11) != DSMGMT_AD {
        return Outcome::ok(0);
    }
    match cmd.data {
        Data::InCapsule(d) => dsm_ranges(t, c, sqe.nsid(), nr, d),
        Data::None => dsm_ranges(t, c, sqe.nsid(), nr, &[]),
        // Linux `nvmet_bdev_execute_discard` copies only the (nr + 1) * 16 bytes of ranges
        // (`nvmet_copy_from_sgl`) out of the host's buffer, however long the keyed SGL is; an
        // RDMA READ of that prefix is enough. More than the spec's 256 ranges (NR above 0xff,
        // reserved bits set) do not fit the staging buffer: refused here as an invalid NR, where
        // Linux would read them.
        Data::Keyed(_) if need as usize > STAGING_LEN => {
            Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10)
        }
        Data::Keyed(_) => Outcome::FromHost {
            local: Local::Buf { len: need },
            then: Then::Dsm {
                nsid: sqe.nsid(),
                ranges: nr as u16,
            },
        },
    }
}

/// Deallocates the ranges in `data` (Linux `nvmet_bdev_execute_discard`): a range the data
/// does not hold fails the copy (`NVME_SC_SGL_INVALID_DATA | DNR`), a range past the end is
/// an I/O error.
pub(crate) fn dsm_ranges<B: Backend>(
    t: &mut Target<B>,
    c: usize,
    nsid: u32,
    nr: usize,
    data: &[u8],
) -> Outcome {
    let Some(ns) = t.ctrls[c]
        .as_ref()
        .and_then(|ctl| find_ns(t, ctl, nsid))
        .cloned()
    else {
        return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
    };
    let size = ns_bytes(t, &ns);
    for i in 0..nr {
        let Some(r) = data.get(i * DSM_RANGE_LEN..(i + 1) * DSM_RANGE_LEN) else {
            return Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR);
        };
        let nlb = u64::from(u32::from_le_bytes([r[4], r[5], r[6], r[7]]));
        let mut s = [0u8; 8];
        s.copy_from_slice(&r[8..16]);
        let slba = u64::from_le_bytes(s);
        let (off, len) = match byte_range(size, ns.lba_shift, slba, nlb) {
            Ok(x) => x,
            Err(o) => return o,
        };
        if let Err(e) = t.disks[usize::from(ns.disk)].deallocate(off, len) {
            return io_status(Err(e));
        }
    }
    Outcome::ok(0)
}
