//! Identify data and the Commands Supported and Effects log: what an NVM controller reports
//! about itself and its namespaces, as Linux's target fills them
//! (`drivers/nvme/target/admin-cmd.c` `nvmet_execute_identify_ctrl`,
//! `nvmet_execute_identify_ns`, `nvmet_execute_identify_nslist`,
//! `nvmet_execute_identify_desclist`, `nvmet_get_cmd_effects_nvm`), at the offsets of
//! `include/linux/nvme.h` `struct nvme_id_ctrl` / `struct nvme_id_ns`.

use crate::admin::{opc, to_host};
use crate::backend::Backend;
use crate::ctrl::VERSION;
use crate::dispatch::{Cmd, Outcome, MAX_TRANSFER};
use crate::nvm;
use crate::status::{self, loc, DNR};
use crate::target::{NamespaceConfig, SubsysRef, Target};

/// Bytes of every Identify data structure (`nvme.h` `NVME_IDENTIFY_DATA_SIZE`).
pub const IDENTIFY_LEN: u32 = 4096;

/// CNS values (`nvme.h` `NVME_ID_CNS_*`).
pub mod cns {
    /// Namespace.
    pub const NS: u8 = 0x00;
    /// Controller.
    pub const CTRL: u8 = 0x01;
    /// Active namespace ID list.
    pub const NS_ACTIVE_LIST: u8 = 0x02;
    /// Namespace identification descriptors.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// I/O command set specific controller.
    pub const CS_CTRL: u8 = 0x06;
}

/// Controller type I/O, discovery (`nvme.h` `NVME_CTRL_IO`, `NVME_CTRL_DISC`).
pub const CTRL_IO: u8 = 1;
/// Discovery controller type.
pub const CTRL_DISC: u8 = 2;

/// Writes `s` into `field`, padded with spaces (Linux `memcpy_and_pad(.., ' ')`).
pub(crate) fn put_padded(field: &mut [u8], s: &str) {
    field.fill(b' ');
    let n = s.len().min(field.len());
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Writes `s` as a NUL-terminated string into `field` (Linux `strscpy`).
pub(crate) fn put_cstr(field: &mut [u8], s: &str) {
    let n = s.len().min(field.len() - 1);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// SGL support both controllers report (`nvme_id_ctrl.sgls`, Linux
/// `nvmet_execute_identify_ctrl` / `nvmet_execute_disc_identify`): SGLs (bit 0), keyed data
/// blocks (bit 2, `NVMF_KEYED_SGLS`), and the offset form for in-capsule data (bit 20) when
/// the port takes in-capsule data.
pub fn sgls(inline_data_size: u32) -> u32 {
    let offset = if inline_data_size != 0 { 1 << 20 } else { 0 };
    (1 << 0) | (1 << 2) | offset
}

/// Linux `nvmet_execute_identify`.
pub(crate) fn execute<B: Backend>(
    t: &Target<B>,
    c: usize,
    cmd: &Cmd,
    staging: &mut [u8],
) -> Outcome {
    if let Err(o) = cmd.check_len(IDENTIFY_LEN) {
        return o;
    }
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let SubsysRef::Nvm(s) = ctl.subsys else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let sqe = &cmd.sqe;
    let nss = &t.cfg.subsystems[s].namespaces;
    let nsid = sqe.nsid();
    let csi = sqe.0[47];
    match sqe.0[40] {
        cns::CTRL => to_host(staging, IDENTIFY_LEN, 0, |b| id_ctrl(t, c, b)),
        cns::NS => {
            if nsid == u32::MAX {
                return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
            }
            // An inactive namespace: all zero (Linux answers success).
            let ns = nss.iter().find(|n| n.nsid == nsid);
            to_host(staging, IDENTIFY_LEN, 0, |b| {
                if let Some(ns) = ns {
                    id_ns(t, ns, b);
                }
            })
        }
        // Linux `admin-cmd.c` `nvmet_execute_identify_ctrl_nvm` ("Not supported: return
        // zeroes"); the recorded Linux 6.1 nvmet-rdma session (tests/data) shows the same:
        // 4096 zero bytes and success for CNS 06h, CSI NVM.
        cns::CS_CTRL if csi == 0 => to_host(staging, IDENTIFY_LEN, 0, |_| {}),
        cns::NS_ACTIVE_LIST => {
            if nsid >= 0xffff_fffe {
                return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
            }
            let mut ids: alloc::vec::Vec<u32> =
                nss.iter().map(|n| n.nsid).filter(|&n| n > nsid).collect();
            ids.sort_unstable();
            to_host(staging, IDENTIFY_LEN, 0, |b| {
                for (i, id) in ids.iter().take(1024).enumerate() {
                    put32(b, i * 4, *id);
                }
            })
        }
        cns::NS_DESC_LIST => {
            let Some(ns) = nss.iter().find(|n| n.nsid == nsid) else {
                return Outcome::fail_at(status::INVALID_NS | DNR, loc::NSID);
            };
            to_host(staging, IDENTIFY_LEN, 0, |b| desc_list(ns, b))
        }
        _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
    }
}

/// Identify Controller of an NVM controller (`nvmet_execute_identify_ctrl`). Not reported,
/// unlike Linux: asymmetric namespace access (CMIC bit 3, ANACAP and the ANA log), which a
/// single-port appliance does not need.
fn id_ctrl<B: Backend>(t: &Target<B>, c: usize, b: &mut [u8]) {
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return;
    };
    let SubsysRef::Nvm(s) = ctl.subsys else {
        return;
    };
    let sub = &t.cfg.subsystems[s];
    put_padded(&mut b[4..24], &sub.serial);
    put_padded(&mut b[24..64], &t.cfg.model);
    put_padded(&mut b[64..72], &t.cfg.firmware);
    b[72] = 6; // RAB
    b[76] = (1 << 0) | (1 << 1); // CMIC: multiple ports, multiple controllers
    b[77] = (MAX_TRANSFER / 4096).trailing_zeros() as u8; // MDTS in 4 KiB pages, log2
    put16(b, 78, ctl.cntlid);
    put32(b, 80, VERSION);
    put32(b, 92, 1 << 8); // OAES: namespace attribute notices
    put32(b, 96, (1 << 0) | (1 << 6)); // CTRATT: 128-bit host ID, traffic based keep alive
    b[111] = CTRL_IO;
    b[258] = 3; // ACL
    b[259] = crate::ctrl::ASYNC_EVENTS as u8 - 1; // AERL
    b[260] = (1 << 0) | (1 << 1); // FRMW: slot 1 read-only, one slot
    b[261] = (1 << 0) | (1 << 1) | (1 << 2); // LPA
    b[262] = 128 - 1; // ELPE: NVMET_ERROR_LOG_SLOTS - 1
    put16(b, 320, 10); // KAS: 100 ms units (NVMET_KAS)
    b[512] = (6 << 4) | 6; // SQES
    b[513] = (4 << 4) | 4; // CQES
    put16(b, 514, 1024); // MAXCMD (NVMET_MAX_CMD)
    put32(b, 516, 1024); // NN (NVMET_MAX_NAMESPACES)
    put16(b, 520, (1 << 2) | (1 << 3)); // ONCS: DSM, Write Zeroes
    b[525] = 1; // VWC present
    b[531] = 1; // NWPC
    put32(b, 536, sgls(t.cfg.inline_data_size));
    put32(b, 540, 1024); // MNAN
    put_cstr(&mut b[768..1024], &sub.nqn);
    put32(b, 1792, (64 + t.cfg.inline_data_size) / 16); // IOCCSZ
    put32(b, 1796, 1); // IORCSZ: the 16-byte CQE
    b[1803] = 1; // MSDBD
                 // Power state 0 as Linux fakes it (QEMU's values).
    put16(b, 2048, 0x9c4);
    put32(b, 2052, 0x10);
    put32(b, 2056, 0x4);
}

/// Identify Namespace (`nvmet_execute_identify_ns`, with the block device limits of
/// `drivers/nvme/target/io-cmd-bdev.c` `nvmet_bdev_set_limits` for 512-byte physical blocks).
fn id_ns<B: Backend>(t: &Target<B>, ns: &NamespaceConfig, b: &mut [u8]) {
    let blocks = nvm::ns_bytes(t, ns) >> ns.lba_shift;
    put64(b, 0, blocks); // NSZE
    put64(b, 8, blocks); // NCAP
    put64(b, 16, blocks); // NUSE
    b[24] = (1 << 1) | (1 << 4); // NSFEAT: NAWUN.., NPWG.. defined
    b[30] = 1; // NMIC: shared
    b[104..120].copy_from_slice(&ns.nguid);
    b[130] = ns.lba_shift; // LBAF[0].DS
}

/// Namespace identification descriptors: UUID, NGUID (when set) and the command set (NVM).
fn desc_list(ns: &NamespaceConfig, b: &mut [u8]) {
    let mut off = 0;
    let mut put = |nidt: u8, id: &[u8]| {
        b[off] = nidt;
        b[off + 1] = id.len() as u8;
        b[off + 4..off + 4 + id.len()].copy_from_slice(id);
        off += 4 + id.len();
    };
    if ns.uuid != [0; 16] {
        put(3, &ns.uuid);
    }
    if ns.nguid != [0; 16] {
        put(2, &ns.nguid);
    }
    put(4, &[0]);
}

/// The Commands Supported and Effects log of the NVM command set
/// (Linux 6.1 `nvmet_get_cmd_effects_nvm`): every command it runs marked supported (CSUPP,
/// bit 0) and nothing more, as the capture shows.
pub(crate) fn effects_log(log: &mut [u8; 4096]) {
    let csupp = 1u32;
    for o in [
        opc::GET_LOG_PAGE,
        opc::IDENTIFY,
        opc::ABORT,
        opc::SET_FEATURES,
        opc::GET_FEATURES,
        opc::ASYNC_EVENT,
        opc::KEEP_ALIVE,
    ] {
        put32(log, usize::from(o) * 4, csupp);
    }
    put32(log, 1024 + usize::from(nvm::opc::READ) * 4, csupp);
    for o in [
        nvm::opc::WRITE,
        nvm::opc::FLUSH,
        nvm::opc::DSM,
        nvm::opc::WRITE_ZEROES,
    ] {
        put32(log, 1024 + usize::from(o) * 4, csupp);
    }
}
