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

/// A command capsule: opcode, flags 0x40 (SGL), `cid`, `nsid`, command dwords 10.. from
/// `cdw` (bytes 40..), and the data pointer `sgl`.
pub fn sqe(opcode: u8, cid: u16, nsid: u32, cdw: &[u32], sgl: nvmeof::sgl::Sgl) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[0] = opcode;
    b[1] = 0x40;
    b[2..4].copy_from_slice(&cid.to_le_bytes());
    b[4..8].copy_from_slice(&nsid.to_le_bytes());
    b[24..40].copy_from_slice(&sgl.0);
    for (i, d) in cdw.iter().enumerate() {
        b[40 + 4 * i..44 + 4 * i].copy_from_slice(&d.to_le_bytes());
    }
    b
}

/// No data (keyed, length 0), as Linux's host sends commands without data.
pub fn no_data() -> nvmeof::sgl::Sgl {
    nvmeof::sgl::Sgl::keyed(nvmeof::KeyedSgl::default(), false)
}

/// A keyed buffer of `len` bytes with invalidation (type 0x4f), key 0x1234.
pub fn keyed(len: u32) -> nvmeof::sgl::Sgl {
    let k = nvmeof::KeyedSgl {
        addr: 0xff31_0000_0000_0000,
        len,
        key: 0x1234,
    };
    nvmeof::sgl::Sgl::keyed(k, true)
}

/// A Connect capsule with in-capsule data: queue `qid`, 0's based `sqsize`, `kato` ms,
/// controller `cntlid`, subsystem `subnqn`, host `hostnqn`.
pub fn connect(
    qid: u16,
    sqsize: u16,
    kato: u32,
    cntlid: u16,
    subnqn: &str,
    hostnqn: &str,
) -> Vec<u8> {
    let mut b = sqe(0x7f, 0, 0, &[], nvmeof::sgl::Sgl::in_capsule(0, 1024));
    b[4] = 0x01;
    b[42..44].copy_from_slice(&qid.to_le_bytes());
    b[44..46].copy_from_slice(&sqsize.to_le_bytes());
    b[48..52].copy_from_slice(&kato.to_le_bytes());
    let mut d = vec![0u8; 1024];
    d[15] = 0xb2;
    d[16..18].copy_from_slice(&cntlid.to_le_bytes());
    d[256..256 + subnqn.len()].copy_from_slice(subnqn.as_bytes());
    d[512..512 + hostnqn.len()].copy_from_slice(hostnqn.as_bytes());
    b.extend(d);
    b
}

/// Property Set CC = `cc` (4 bytes).
pub fn set_cc(cc: u32) -> Vec<u8> {
    let mut b = sqe(0x7f, 1, 0, &[], no_data());
    b[4] = 0x00;
    b[44..48].copy_from_slice(&0x14u32.to_le_bytes());
    b[48..52].copy_from_slice(&cc.to_le_bytes());
    b
}

/// CC as Linux's host enables a controller (EN, CSS 6, IOSQES 6, IOCQES 4).
pub const CC_ENABLE: u32 = 0x460061;

/// An admin queue connected to the capture's subsystem with keep-alive `kato` ms and enabled,
/// and `ios` I/O queues (qid 1..). Returns the queues.
pub fn connected(t: &mut Target<Disk>, kato: u32, ios: u16) -> Vec<QueueId> {
    let a = t.accept(&cm_req(0, 32, 31)).unwrap().queue;
    let r = run(t, a, &connect(0, 31, kato, 0xffff, NQN, HOSTNQN), &mut []).unwrap();
    assert_eq!(r.cqe.status, 0, "admin connect");
    let cntlid = r.cqe.result as u16;
    let r = run(t, a, &set_cc(CC_ENABLE), &mut []).unwrap();
    assert_eq!(r.cqe.status, 0, "enable");
    let mut qs = vec![a];
    for qid in 1..=ios {
        let q = t.accept(&cm_req(qid, 128, 127)).unwrap().queue;
        let r = run(t, q, &connect(qid, 127, 0, cntlid, NQN, HOSTNQN), &mut []).unwrap();
        assert_eq!(r.cqe.status, 0, "I/O connect");
        qs.push(q);
    }
    qs
}
