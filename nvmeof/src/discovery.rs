//! The discovery controller (`nqn.2014-08.org.nvmexpress.discovery`): its admin commands and
//! the discovery log page with one entry per subsystem on the port, as Linux's target runs
//! them (`drivers/nvme/target/discovery.c`); layouts from `include/linux/nvme.h` (`struct
//! nvmf_disc_rsp_page_hdr`, `struct nvmf_disc_rsp_page_entry`).

use crate::admin::{self, feat, lid, log_page_len, opc, to_host};
use crate::backend::Backend;
use crate::ctrl::{Ctrl, CSTS_RDY};
use crate::dispatch::{known_opcode, opcode_set, Cmd, Outcome};
use crate::exec::QueueId;
use crate::identify::{self, put_cstr, put_padded, sgls, CTRL_DISC, IDENTIFY_LEN};
use crate::rdma_cm_data::AQ_DEPTH;
use crate::sqe::Sqe;
use crate::status::{self, loc, DNR};
use crate::target::{Target, DISCOVERY_NQN};

/// Bytes of the log page header, and of each entry.
pub const ENTRY_LEN: usize = 1024;
/// Events a discovery controller reports: discovery log changes (Linux `nvmet.h`
/// `NVMET_DISC_AEN_CFG_OPTIONAL`).
pub const DISC_AEN_CFG: u32 = 1 << 31;
/// Subtypes (`nvme.h` `NVME_NQN_DISC`... : 2 NVM subsystem, 3 the current discovery
/// subsystem).
const SUBTYPE_NVME: u8 = 2;
const SUBTYPE_CURR: u8 = 3;

/// Linux `discovery.c` `nvmet_parse_discovery_cmd`: ready, and one of its six opcodes.
pub(crate) fn parse(ctl: &Ctrl, sqe: &Sqe) -> Result<(), Outcome> {
    if ctl.csts & CSTS_RDY == 0 {
        return Err(Outcome::fail_at(status::INVALID_OPCODE | DNR, loc::OPCODE));
    }
    use opc::*;
    const KNOWN: u32 = opcode_set(&[
        SET_FEATURES,
        GET_FEATURES,
        ASYNC_EVENT,
        KEEP_ALIVE,
        GET_LOG_PAGE,
        IDENTIFY,
    ]);
    known_opcode(sqe, KNOWN)
}

/// Runs a parsed discovery command.
pub(crate) fn execute<B: Backend>(
    t: &mut Target<B>,
    id: QueueId,
    c: usize,
    cmd: &Cmd,
    staging: &mut [u8],
) -> Outcome {
    let sqe = &cmd.sqe;
    match sqe.opcode() {
        opc::SET_FEATURES => {
            // nvmet_execute_disc_set_features
            if let Err(o) = cmd.check_len(0) {
                return o;
            }
            match sqe.cdw(10) as u8 {
                feat::KATO => admin::set_kato(t, c, sqe.cdw(11)),
                feat::ASYNC_EVENT => admin::set_aen(t, c, sqe.cdw(11), DISC_AEN_CFG),
                _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
            }
        }
        opc::GET_FEATURES => {
            // nvmet_execute_disc_get_features
            if let Err(o) = cmd.check_len(0) {
                return o;
            }
            let Some(ctl) = t.ctrls[c].as_ref() else {
                return Outcome::fail(status::INTERNAL | DNR);
            };
            match sqe.cdw(10) as u8 {
                feat::KATO => Outcome::ok(u64::from(ctl.kato) * 1000),
                feat::ASYNC_EVENT => Outcome::ok(u64::from(ctl.aen_enabled)),
                _ => Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10),
            }
        }
        opc::ASYNC_EVENT => admin::async_event(t, id, c, cmd),
        opc::KEEP_ALIVE => admin::keep_alive(t, c, cmd),
        opc::GET_LOG_PAGE => log_page(t, c, cmd, staging),
        _ => identify(t, c, cmd, staging),
    }
}

/// Linux `nvmet_execute_disc_identify`: Identify Controller only (another CNS is an invalid
/// opcode there).
fn identify<B: Backend>(t: &Target<B>, c: usize, cmd: &Cmd, staging: &mut [u8]) -> Outcome {
    if let Err(o) = cmd.check_len(IDENTIFY_LEN) {
        return o;
    }
    if cmd.sqe.0[40] != identify::cns::CTRL {
        return Outcome::fail_at(status::INVALID_OPCODE | DNR, loc::CDW10);
    }
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let cntlid = ctl.cntlid;
    to_host(staging, IDENTIFY_LEN, 0, |b| {
        put_padded(&mut b[4..24], &t.cfg.discovery_serial);
        put_padded(&mut b[24..64], &t.cfg.model);
        put_padded(&mut b[64..72], &t.cfg.firmware);
        b[111] = CTRL_DISC;
        b[78..80].copy_from_slice(&cntlid.to_le_bytes());
        b[80..84].copy_from_slice(&crate::ctrl::VERSION.to_le_bytes());
        b[92..96].copy_from_slice(&DISC_AEN_CFG.to_le_bytes()); // OAES
        b[261] = 1 << 2; // LPA: extended data for Get Log Page
        b[514..516].copy_from_slice(&1024u16.to_le_bytes()); // MAXCMD
        b[536..540].copy_from_slice(&sgls(t.cfg.inline_data_size).to_le_bytes());
        put_cstr(&mut b[768..1024], DISCOVERY_NQN);
    })
}

/// The discovery log page of controller `c`'s host.
fn log_page<B: Backend>(t: &Target<B>, c: usize, cmd: &Cmd, staging: &mut [u8]) -> Outcome {
    let sqe = &cmd.sqe;
    let len = log_page_len(sqe);
    if u64::from(cmd.data.len()) != len {
        return Outcome::fail_at(status::SGL_INVALID_DATA | DNR, loc::DPTR);
    }
    let offset = u64::from(sqe.cdw(12)) | (u64::from(sqe.cdw(13)) << 32);
    if sqe.cdw(10) as u8 != lid::DISC {
        return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::CDW10);
    }
    // "Spec requires dword aligned offsets".
    if offset & 3 != 0 {
        return Outcome::fail_at(status::INVALID_FIELD | DNR, loc::LPO);
    }
    let Some(ctl) = t.ctrls[c].as_ref() else {
        return Outcome::fail(status::INTERNAL | DNR);
    };
    let page = build_log(t, &ctl.hostnqn);
    to_host(staging, len as u32, 0, |b| {
        // Linux copies `len` bytes from `offset`; past the page's end there is nothing.
        let from = (offset as usize).min(page.len());
        let n = (page.len() - from).min(b.len());
        b[..n].copy_from_slice(&page[from..from + n]);
    })
}

/// The discovery log page (`nvmet_execute_disc_get_log_page`,
/// `nvmet_format_discovery_entry`): the discovery subsystem itself, then every NVM subsystem
/// the host may connect to, all on the one port. GENCTR counts the configuration changes
/// Linux would have made: the port enabled and each subsystem linked to it
/// (`nvmet_port_disc_changed`).
pub(crate) fn build_log<B: Backend>(t: &Target<B>, hostnqn: &str) -> alloc::vec::Vec<u8> {
    let subs: alloc::vec::Vec<&str> = t
        .cfg
        .subsystems
        .iter()
        .filter(|s| s.allow_any_host || s.hosts.iter().any(|h| h == hostnqn))
        .map(|s| s.nqn.as_str())
        .collect();
    let numrec = 1 + subs.len();
    let mut page = alloc::vec![0u8; ENTRY_LEN * (1 + numrec)];
    let genctr = 1 + t.cfg.subsystems.len() as u64;
    page[0..8].copy_from_slice(&genctr.to_le_bytes());
    page[8..16].copy_from_slice(&(numrec as u64).to_le_bytes());
    let names = core::iter::once((DISCOVERY_NQN, SUBTYPE_CURR))
        .chain(subs.iter().map(|n| (*n, SUBTYPE_NVME)));
    for (i, (nqn, subtype)) in names.enumerate() {
        let e = &mut page[ENTRY_LEN * (1 + i)..ENTRY_LEN * (2 + i)];
        e[0] = 1; // TRTYPE RDMA
        e[1] = 1; // ADRFAM IPv4
        e[2] = subtype;
        e[3] = 1 << 2; // TREQ: SQ flow control disable supported
        e[4..6].copy_from_slice(&t.cfg.port.portid.to_le_bytes());
        e[6..8].copy_from_slice(&0xffffu16.to_le_bytes()); // CNTLID: dynamic
        e[8..10].copy_from_slice(&(AQ_DEPTH as u16).to_le_bytes()); // ASQSZ
        put_cstr(&mut e[32..64], &t.cfg.port.trsvcid);
        put_cstr(&mut e[256..512], nqn);
        put_cstr(&mut e[512..768], &t.cfg.port.traddr);
        // TSAS for RDMA: connected QPs, no provider type, the RDMA CM.
        e[768] = 1;
        e[769] = 1;
        e[770] = 1;
    }
    page
}
