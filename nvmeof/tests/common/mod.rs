//! What the tests share: the target of the shared capture `nvmeof.pcap` (Linux 6.1 nvmet-rdma
//! with a 1 GiB null_blk namespace), and a transport that carries out [`Step`]s in memory.

#![allow(dead_code)]

use nvmeof::exec::STAGING_LEN;
use nvmeof::target::{NamespaceConfig, PortConfig, SubsystemConfig, TargetConfig};
use nvmeof::{Dir, Local, QueueId, RamDisk, Response, Step, Target, Transfer};

pub type Disk = RamDisk<Vec<u8>>;

/// The NVM subsystem of the capture.
pub const NQN: &str = "nqn.2026-12.io.example:ram";
/// The host of the capture.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000b2";

/// The configuration Linux's target had in the capture (`nvmet-target.sh`): one subsystem,
/// any host, serial NVMEOF-RAM-0001, namespace 1 with UUID ...a1 and NGUID ...a2, port 1 on
/// 10.0.0.1:4420; Identify's model and firmware as Linux 6.1 reports them.
pub fn capture_config() -> TargetConfig {
    let mut uuid = [0u8; 16];
    uuid[15] = 0xa1;
    let mut nguid = [0u8; 16];
    nguid[15] = 0xa2;
    TargetConfig {
        port: PortConfig {
            portid: 1,
            traddr: "10.0.0.1".into(),
            trsvcid: "4420".into(),
        },
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            serial: "NVMEOF-RAM-0001".into(),
            allow_any_host: true,
            hosts: vec![],
            namespaces: vec![NamespaceConfig {
                nsid: 1,
                disk: 0,
                lba_shift: 9,
                uuid,
                nguid,
            }],
        }],
        model: "Linux".into(),
        firmware: "6.1.0-57".into(),
        discovery_serial: "45d41b30f0e9ee07bc32".into(),
        max_qid: 128,
        inline_data_size: 4096,
    }
}

/// A target like the capture's over a disk of `bytes`.
pub fn target(bytes: usize) -> Target<Disk> {
    Target::new(capture_config(), vec![RamDisk::new(vec![0u8; bytes], 0)]).unwrap()
}

/// The admin queue's REQ private data: hrqsize 32, hsqsize 31 (qid `qid`).
pub fn cm_req(qid: u16, hrqsize: u16, hsqsize: u16) -> [u8; 32] {
    nvmeof::rdma_cm_data::CmReq {
        recfmt: 0,
        qid,
        hrqsize,
        hsqsize,
    }
    .to_bytes()
}

/// Does a transfer the way the transport would, with `host` as the host's buffer.
pub fn do_transfer(t: &mut Target<Disk>, tr: &Transfer, staging: &mut [u8], host: &mut [u8]) {
    let n = tr.local.len() as usize;
    match (tr.dir, tr.local) {
        (Dir::ToHost, Local::Buf { .. }) => host[..n].copy_from_slice(&staging[..n]),
        (Dir::FromHost, Local::Buf { .. }) => staging[..n].copy_from_slice(&host[..n]),
        (Dir::ToHost, Local::Disk { disk, offset, .. }) => {
            let d = t.disk(usize::from(disk)).unwrap().bytes();
            host[..n].copy_from_slice(&d[offset as usize..offset as usize + n]);
        }
        (Dir::FromHost, Local::Disk { disk, offset, .. }) => {
            let d = t.disk_mut(usize::from(disk)).unwrap().bytes_mut();
            d[offset as usize..offset as usize + n].copy_from_slice(&host[..n]);
        }
    }
}

/// Submits `capsule` and runs it to its response, the host's buffer being `host` (what a
/// keyed SGL names). `None`: held.
pub fn run(t: &mut Target<Disk>, q: QueueId, capsule: &[u8], host: &mut [u8]) -> Option<Response> {
    let mut staging = vec![0u8; STAGING_LEN];
    match t.submit(q, capsule, &mut staging).unwrap() {
        Step::Respond(r) => Some(r),
        Step::Hold => None,
        Step::Transfer(tr) => {
            do_transfer(t, &tr, &mut staging, host);
            Some(t.complete_transfer(q, tr.tag, true, &staging).unwrap())
        }
    }
}

/// Hex to bytes.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The host script's patterns (`nvme-host.sh`): 4 KiB of `4k@%012x\n`, 128 KiB of
/// `128k@%010x\n`, each line naming its offset.
pub fn pattern(name: &str) -> Vec<u8> {
    let mut v = Vec::new();
    match name {
        "pattern4k" => (0..256).for_each(|i| v.extend(format!("4k@{:012x}\n", i * 16).bytes())),
        _ => (0..8192).for_each(|i| v.extend(format!("128k@{:010x}\n", i * 16).bytes())),
    }
    v
}

/// A data field of the session file: `LEN:hex`, `LEN:-` (zeros) or `LEN:patternX`.
pub fn data(field: &str) -> Vec<u8> {
    let (len, body) = field.split_once(':').unwrap();
    let len: usize = len.parse().unwrap();
    let mut v = match body {
        "-" => vec![],
        p if p.starts_with("pattern") => pattern(p),
        h => unhex(h),
    };
    v.resize(len, 0);
    v
}
