//! RDMA between two guests: each guest's HCA is joined to the other's by a wire (`cargo run --
//! --pair`, or the launcher's `run_pair`). The two apps swap their QP endpoints (QPN, PSN, GID,
//! buffer address and rkey) over TCP on that wire, through each guest's own IP stack on its
//! HCA's Ethernet queue (apps/src/oob.rs): the server listens on port 18515, the client
//! connects to it; each finds the other's MAC by ARP for the address of its GID. Then the
//! client runs every RC opcode across the wire — RDMA WRITE, WRITE with immediate, SEND, SEND
//! with immediate, RDMA READ, CMP_AND_SWAP, FETCH_AND_ADD — with messages longer than the path
//! MTU, and both sides check every byte. The steps between (`ready`, `done`, the stress run's
//! checksum and verdict) are lines on the same connection.
//!
//! Cmdline: `role=server` or `role=client`; `ip=A.B.C.D/LEN` gives the node its IPv4 identity
//! (its address on the wire, and its RoCE v2 GID, which the driver programs with
//! SET_ROCE_ADDRESS and the QP's path uses); `peer=A.B.C.D` the server's address, which the
//! client connects to; `neigh=A.B.C.D,MAC` an optional static neighbour; `mac=` names the MAC
//! the node expects its port to have (the driver does not reprogram the port MAC: a different
//! one is refused).
//!
//! `mode=stress` runs the fault run instead (meant for `--wire-fault`): the client pushes
//! 10,000 RDMA WRITEs of mixed sizes (1 B to 16 KiB, many above the 1024-byte path MTU) to
//! random places of the server's region, with an RDMA READ checked against the client's model
//! of that region and an atomic (FETCH_AND_ADD or CMP_AND_SWAP) after every batch. At the end
//! it reads the whole region back and compares it byte for byte with its model, and the
//! server checksums its region and atomic word and sends both over TCP for the client to
//! compare. Each side attaches its QP to a Q counter set (ALLOC_Q_COUNTER, the QPC's
//! `counter_set_id`) and prints it and the vport's RoCE traffic (QUERY_VPORT_COUNTER) as
//! `stress: counters ...` lines.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use apps::app::{self, HcaError};
use apps::oob::{Oob, OobError, Side, TOOL_PORT};
use apps::stack::{self, KernelNode, NetArgs};
use kernel::{println, AppContext};
use mlx5::{
    AccessFlags, ConnectOptions, Context, QpCaps, QpEndpoint, RecvWr, Remote, SendData, SendFlags,
    SendOp, SendWr, WcStatus,
};

kernel::entry_point!(main);

/// Bytes of each message: five packets at the default 1024-byte path MTU.
const BIG: u32 = 5000;
/// Server buffer layout (offsets in its MR): WRITE target, WRITE_IMM target, SEND and
/// SEND_IMM receive buffers, READ source, the 8-byte atomic target.
const AT_WRITE: u64 = 0;
const AT_WRITE_IMM: u64 = 8192;
const AT_SEND: u64 = 16384;
const AT_SEND_IMM: u64 = 24576;
const AT_READ: u64 = 32768;
const AT_ATOMIC: u64 = 40960;
const MR_LEN: usize = 49152;
/// Byte-symmetric atomic operands, so the check holds in either atomic byte order.
const SWAP: u64 = 0x0101_0101_0101_0101;
const ADD: u64 = 0x0202_0202_0202_0202;
const WAIT: Duration = Duration::from_secs(60);

/// What one side tells the other.
struct Peer {
    ep: QpEndpoint,
    addr: u64,
    rkey: u32,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn parse_endpoint(line: &str) -> Option<(QpEndpoint, u64, u32)> {
    let rest = line.trim().strip_prefix("endpoint ")?;
    let get = |k: &str| {
        rest.split(' ')
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
    };
    Some((
        QpEndpoint {
            qpn: hex(get("qpn")?)? as u32,
            psn: hex(get("psn")?)? as u32,
            gid: hex_bytes::<16>(get("gid")?)?,
            mac: [0; 6],
        },
        hex(get("addr")?)?,
        hex(get("rkey")?)? as u32,
    ))
}

/// The longest line the two sides send each other.
const LINE_MAX: usize = 256;

/// Tells the other guest this side's endpoint (`me`, and the buffer `addr`/`rkey` it may
/// access) and takes its own, with its MAC by ARP for its GID's address.
fn exchange(link: &mut Oob, me: QpEndpoint, addr: u64, rkey: u32) -> Result<Peer, PeerError> {
    let line = alloc::format!(
        "endpoint qpn={:x} psn={:x} gid={} addr={:x} rkey={:x}",
        me.qpn,
        me.psn,
        hexs(&me.gid),
        addr,
        rkey
    );
    say(link, &line)?;
    let got = link
        .recv_line(LINE_MAX)
        .map_err(|e| failed("no endpoint from the other guest", e))?;
    let (mut ep, addr, rkey) = parse_endpoint(
        core::str::from_utf8(&got).map_err(|_| PeerError::Protocol("garbled endpoint"))?,
    )
    .ok_or(PeerError::Protocol("bad endpoint"))?;
    ep.mac = link
        .peer_mac(&ep.gid)
        .map_err(|e| failed("the other guest's MAC", e))?;
    Ok(Peer { ep, addr, rkey })
}

/// Sends one line (`\n` added) to the other guest.
fn say(link: &mut Oob, line: &str) -> Result<(), PeerError> {
    let mut b = Vec::from(line.as_bytes());
    b.push(b'\n');
    link.send(&b).map_err(|e| failed("sending a line", e))
}

/// Waits for the other guest's next line, which must start with `prefix`.
fn hear(link: &mut Oob, prefix: &str, why: &'static str) -> Result<Vec<u8>, PeerError> {
    let line = link.recv_line(LINE_MAX).map_err(|e| failed(why, e))?;
    if !line.starts_with(prefix.as_bytes()) {
        println!(
            "peer: expected `{prefix}...`, got {:?}",
            core::str::from_utf8(&line)
        );
        return Err(PeerError::Protocol(why));
    }
    Ok(line)
}

/// The exchange's error `err`, in the step `what`.
fn failed(what: &'static str, err: OobError) -> PeerError {
    PeerError::Oob { what, err }
}

/// The driver's error in the step `what`.
fn hca(what: &'static str) -> impl FnOnce(mlx5::Error) -> PeerError {
    move |err| PeerError::Hca { what, err }
}

/// Why a run failed: the step, with the typed error under it.
#[derive(Debug)]
enum PeerError {
    /// Opening, bringing up or closing the HCA.
    Device(HcaError),
    /// `mac=` differs from the port's MAC (the driver does not reprogram it).
    MacDiffers,
    /// The HCA's Ethernet queue or the stack on it did not come up.
    Network(stack::NodeError),
    /// A driver step (`what`) failed.
    Hca {
        what: &'static str,
        err: mlx5::Error,
    },
    /// The exchange with the other guest failed in the step `what`.
    Oob { what: &'static str, err: OobError },
    /// The other guest's line is not what the exchange expects.
    Protocol(&'static str),
    /// A check of the RDMA results failed.
    Check(&'static str),
}

impl From<HcaError> for PeerError {
    fn from(e: HcaError) -> Self {
        PeerError::Device(e)
    }
}

impl fmt::Display for PeerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerError::Device(e) => write!(f, "{e}"),
            PeerError::MacDiffers => write!(
                f,
                "mac= differs from the port's MAC (the driver does not reprogram it)"
            ),
            PeerError::Network(e) => write!(f, "the network did not come up: {e:?}"),
            PeerError::Hca { what, err } => write!(f, "{what}: {err:?}"),
            PeerError::Oob { what, err } => write!(f, "{what}: {err}"),
            PeerError::Protocol(why) | PeerError::Check(why) => f.write_str(why),
        }
    }
}

fn pattern(i: usize, seed: u8) -> u8 {
    (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 8) as u8
}

fn bytes(seed: u8) -> Vec<u8> {
    (0..BIG as usize).map(|i| pattern(i, seed)).collect()
}

fn hexs(b: &[u8]) -> alloc::string::String {
    b.iter().map(|b| alloc::format!("{b:02x}")).collect()
}

fn main(ctx: &AppContext) -> i32 {
    let server = match ctx.cmdline.get("role") {
        Some("server") => true,
        Some("client") => false,
        _ => {
            println!("peer: need role=server or role=client on the cmdline");
            return 2;
        }
    };
    let (net, mac) = match (stack::net_args(ctx.cmdline.0), ctx.cmdline.mac()) {
        (Ok(n), Ok(mac)) => (n, mac),
        (Err(e), _) => {
            println!("peer: bad cmdline: {e}");
            return 2;
        }
        (_, Err(e)) => {
            println!("peer: bad cmdline: {e:?}");
            return 2;
        }
    };
    let side = match Side::new(!server, net.peer) {
        Ok(s) => s,
        Err(e) => {
            println!("peer: bad cmdline: {e}");
            return 2;
        }
    };
    if ctx.cmdline.get("mode") == Some("stress") {
        return match stress::run(side, &net, mac) {
            Ok(()) => 0,
            Err(why) => {
                println!("peer: stress: FAILED: {why}");
                1
            }
        };
    }
    match run(side, &net, mac) {
        Ok(()) => 0,
        Err(why) => {
            println!("peer: FAILED: {why}");
            1
        }
    }
}

type Dev = Context<mlx5_kernel::KernelHal>;

/// Gives the node on the HCA its identity: `(sgid_index, gid)`.
fn identity(dev: &Dev, net: &NetArgs, mac: Option<[u8; 6]>) -> Result<(u8, [u8; 16]), PeerError> {
    if mac.is_some_and(|m| m != dev.mac()) {
        return Err(PeerError::MacDiffers);
    }
    // The node's identity: its IPv4 GID.
    let ip = net.ip;
    let i = dev
        .add_ipv4_gid(ip.addr)
        .map_err(hca("SET_ROCE_ADDRESS for ip= failed"))?;
    println!(
        "peer: ip {}.{}.{}.{}/{} is RoCE v2 GID index {i}",
        ip.addr[0], ip.addr[1], ip.addr[2], ip.addr[3], ip.prefix_len
    );
    Ok((i as u8, mlx5::hca::ipv4_mapped_gid(ip.addr)))
}

/// The TCP connection to the other guest, on the node's stack over `dev`'s Ethernet queue.
fn connect(dev: &Dev, net: &NetArgs, side: Side, wait: Duration) -> Result<Oob, PeerError> {
    let node = KernelNode::up(dev, net).map_err(PeerError::Network)?;
    Oob::open(node, side, TOOL_PORT, wait)
        .map_err(|e| failed("no connection to the other guest", e))
}

fn run(side: Side, net: &NetArgs, mac: Option<[u8; 6]>) -> Result<(), PeerError> {
    app::with_hca(|dev| run_on(dev, side, net, mac))
}

/// The run on the open HCA.
fn run_on(dev: &Dev, side: Side, net: &NetArgs, mac: Option<[u8; 6]>) -> Result<(), PeerError> {
    let server = side == Side::Server;
    let (sgid_index, gid) = identity(dev, net, mac)?;
    let mut link = connect(dev, net, side, WAIT)?;
    let pd = dev.alloc_pd().map_err(hca("alloc_pd"))?;
    let mr = pd
        .alloc_mr(MR_LEN, AccessFlags::ALL)
        .map_err(hca("alloc_mr"))?;
    let mut cq = dev.create_cq(64).map_err(hca("create_cq"))?;
    let mut qp = pd
        .create_qp(&cq, &cq, &QpCaps::default())
        .map_err(hca("create_qp"))?;
    let me = QpEndpoint {
        gid,
        ..qp.endpoint()
    };
    let peer = exchange(&mut link, me, mr.addr(), mr.rkey())?;
    let o = ConnectOptions {
        min_rnr_timer: 1,
        sgid_index,
        ..ConnectOptions::default()
    };
    qp.connect(&peer.ep, &o).map_err(hca("connect"))?;

    if server {
        mr.write(AT_READ, &bytes(50)).map_err(hca("write"))?;
        mr.write(AT_ATOMIC, &[0; 8]).map_err(hca("write"))?;
        let r = |at| [mr.sge(at, BIG)];
        // The WRITE_IMM's receive only reports it (its bytes go to the RETH's address).
        let (r1, r2, r3) = (r(AT_WRITE_IMM), r(AT_SEND), r(AT_SEND_IMM));
        qp.post_recv(&[
            RecvWr {
                wr_id: 1,
                sges: &r1,
            },
            RecvWr {
                wr_id: 2,
                sges: &r2,
            },
            RecvWr {
                wr_id: 3,
                sges: &r3,
            },
        ])
        .map_err(hca("post_recv"))?;
        say(&mut link, "ready")?;
        // WRITE_IMM, SEND, SEND_IMM consume the receives in that order.
        let wcs = link.poll_cq(&mut cq, 3, WAIT).map_err(hca("poll"))?;
        if wcs.len() != 3
            || wcs
                .iter()
                .any(|w| w.status != WcStatus::Success || w.byte_len != BIG)
        {
            return Err(PeerError::Check("receive completions missing or in error"));
        }
        if wcs[0].imm != Some(0xbeef) || wcs[1].imm.is_some() || wcs[2].imm != Some(0xc0ffee) {
            return Err(PeerError::Check("wrong immediate data"));
        }
        let check = |at: u64, seed: u8| -> Result<bool, PeerError> {
            let mut got = alloc::vec![0u8; BIG as usize];
            mr.read(at, &mut got).map_err(hca("read"))?;
            Ok(got == bytes(seed))
        };
        // RC ordering: the WRITEs landed before the SENDs completed.
        if !check(AT_WRITE, 10)?
            || !check(AT_WRITE_IMM, 20)?
            || !check(AT_SEND, 30)?
            || !check(AT_SEND_IMM, 40)?
        {
            return Err(PeerError::Check("data from the other guest is wrong"));
        }
        // Stay up until the client has read back and run its atomics.
        hear(&mut link, "done", "client never finished")?;
        let mut at = [0u8; 8];
        mr.read(AT_ATOMIC, &mut at).map_err(hca("read"))?;
        if u64::from_ne_bytes(at) != SWAP + ADD {
            return Err(PeerError::Check("atomics left the wrong value"));
        }
        println!(
            "peer: server received RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM of {BIG} B, served RDMA_READ, CMP_AND_SWAP, FETCH_AND_ADD: ok"
        );
    } else {
        for (at, seed) in [(0u64, 10u8), (8192, 20), (16384, 30), (24576, 40)] {
            mr.write(at, &bytes(seed)).map_err(hca("write"))?;
        }
        hear(&mut link, "ready", "the server never got ready")?;
        let remote = |off| Remote {
            addr: peer.addr + off,
            rkey: peer.rkey,
        };
        let sge = |at| [mr.sge(at, BIG)];
        let (w, wi, sd, si, back) = (sge(0), sge(8192), sge(16384), sge(24576), sge(32768));
        let (cs_out, fa_out) = ([mr.sge(40960, 8)], [mr.sge(40968, 8)]);
        let sig = SendFlags::SIGNALED;
        let wrs = [
            SendWr {
                wr_id: 1,
                op: SendOp::Write {
                    remote: remote(AT_WRITE),
                    imm: None,
                },
                data: SendData::Sges(&w),
                flags: sig,
            },
            SendWr {
                wr_id: 2,
                op: SendOp::Write {
                    remote: remote(AT_WRITE_IMM),
                    imm: Some(0xbeef),
                },
                data: SendData::Sges(&wi),
                flags: sig,
            },
            SendWr {
                wr_id: 3,
                op: SendOp::Send { imm: None },
                data: SendData::Sges(&sd),
                flags: sig,
            },
            SendWr {
                wr_id: 4,
                op: SendOp::Send {
                    imm: Some(0xc0ffee),
                },
                data: SendData::Sges(&si),
                flags: sig,
            },
            SendWr {
                wr_id: 5,
                op: SendOp::Read {
                    remote: remote(AT_READ),
                },
                data: SendData::Sges(&back),
                flags: sig,
            },
            SendWr {
                wr_id: 6,
                op: SendOp::CompareSwap {
                    remote: remote(AT_ATOMIC),
                    compare: 0,
                    swap: SWAP,
                },
                data: SendData::Sges(&cs_out),
                flags: sig,
            },
            SendWr {
                wr_id: 7,
                op: SendOp::FetchAdd {
                    remote: remote(AT_ATOMIC),
                    add: ADD,
                },
                data: SendData::Sges(&fa_out),
                flags: sig,
            },
        ];
        qp.post_send(&wrs).map_err(hca("post_send"))?;
        let wcs = link.poll_cq(&mut cq, 7, WAIT).map_err(hca("poll"))?;
        if wcs.len() != 7 || wcs.iter().any(|w| w.status != WcStatus::Success) {
            return Err(PeerError::Check("send completions missing or in error"));
        }
        let mut got = alloc::vec![0u8; BIG as usize];
        mr.read(32768, &mut got).map_err(hca("read"))?;
        if got != bytes(50) {
            return Err(PeerError::Check(
                "RDMA_READ from the other guest returned wrong bytes",
            ));
        }
        let (mut cs, mut fa) = ([0u8; 8], [0u8; 8]);
        mr.read(40960, &mut cs).map_err(hca("read"))?;
        mr.read(40968, &mut fa).map_err(hca("read"))?;
        if u64::from_ne_bytes(cs) != 0 || u64::from_ne_bytes(fa) != SWAP {
            return Err(PeerError::Check("atomics returned wrong original values"));
        }
        say(&mut link, "done")?;
        println!(
            "peer: client ran RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ of {BIG} B and CMP_AND_SWAP, FETCH_AND_ADD across the wire: ok"
        );
    }
    drop(link);
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    Ok(())
}

/// `mode=stress`: the fault run (see the module documentation).
mod stress {
    use alloc::vec;
    use alloc::vec::Vec;
    use core::time::Duration;

    use apps::oob::{Oob, Side};
    use apps::stack::NetArgs;
    use kernel::println;
    use kernel::time::Instant;
    use mlx5::{
        AccessFlags, ConnectOptions, CounterSet, MemoryRegion, QpCaps, QpEndpoint, Remote,
        SendData, SendFlags, SendOp, SendWr, WcStatus,
    };
    use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
    use rand_xoshiro::SplitMix64;

    use super::{app, connect, exchange, hca, hear, identity, say, Dev, PeerError};

    /// The server's region the WRITEs land in.
    const REGION: usize = 256 * 1024;
    /// The server's atomic word, right after the region.
    const AT_ATOMIC: u64 = REGION as u64;
    const SERVER_MR: usize = REGION + 4096;
    /// Client layout: WRITE sources, the batch READ's target, atomic results, the final
    /// read-back of the whole region.
    const SRC: u64 = 0;
    const RD: u64 = REGION as u64;
    const ATOM: u64 = RD + 16 * 1024;
    const BACK: u64 = ATOM + 4096;
    const CLIENT_MR: usize = BACK as usize + REGION;
    const WRITES: usize = 10_000;
    /// WRITEs per batch, and every how many one is signaled.
    const BATCH: usize = 64;
    const SIGNAL_EVERY: usize = 16;
    /// Message sizes: below, at and above the 1024-byte path MTU, up to 16 packets.
    const SIZES: [u32; 11] = [1, 7, 64, 256, 1000, 1024, 1025, 4096, 4097, 9000, 16384];
    /// Atomic operand unit: byte-symmetric, and the total stays below 256 per byte, so the
    /// checks hold in either atomic byte order (as in the basic run).
    const ONE: u64 = 0x0101_0101_0101_0101;
    /// The whole run's patience (each wait has its own deadline).
    const WAIT: Duration = Duration::from_secs(240);
    /// Local ACK timeout 14: 4.096 us << 14, ~67 ms before a lost packet is sent again. Not
    /// shorter: the two HCAs and guests share a loaded host, and `retry_count` (7) timeouts
    /// in a row without progress end the QP in RETRY_EXC_ERR.
    const ACK_TIMEOUT: u8 = 14;

    /// Uniform in `0..n` (`n > 0`) from SplitMix64 (rand_xoshiro's).
    fn below(rng: &mut SplitMix64, n: u64) -> u64 {
        rng.next_u64() % n
    }

    /// FNV-1a over `b`.
    fn fnv(b: &[u8]) -> u64 {
        b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
            (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
        })
    }

    fn src_pattern() -> Vec<u8> {
        (0..REGION)
            .map(|i| ((i * 31) as u8).wrapping_add(3) ^ (i >> 9) as u8)
            .collect()
    }

    /// Prints the QP's counter set and the vport's RoCE traffic (read with `clear`, so a later
    /// run starts from zero).
    fn print_counters(
        side: &str,
        dev: &Dev,
        set: &CounterSet<mlx5_kernel::KernelHal>,
    ) -> Result<(), PeerError> {
        let q = set.query(true).map_err(hca("QUERY_Q_COUNTER failed"))?;
        let v = dev
            .query_vport_counters(true)
            .map_err(hca("QUERY_VPORT_COUNTER failed"))?;
        println!(
            "stress: counters {side} q: out_of_sequence={} duplicate_request={} packet_seq_err={} local_ack_timeout_err={} implied_nak_seq_err={} rnr_nak_retry_err={} req_transport_retries_exceeded={} req_rnr_retries_exceeded={}",
            q.out_of_sequence,
            q.duplicate_request,
            q.packet_seq_err,
            q.local_ack_timeout_err,
            q.implied_nak_seq_err,
            q.rnr_nak_retry_err,
            q.req_transport_retries_exceeded,
            q.req_rnr_retries_exceeded
        );
        println!(
            "stress: counters {side} vport: tx_roce_packets={} tx_roce_bytes={} rx_roce_packets={} rx_roce_bytes={}",
            v.transmitted_ib_unicast.packets,
            v.transmitted_ib_unicast.octets,
            v.received_ib_unicast.packets,
            v.received_ib_unicast.octets
        );
        Ok(())
    }

    pub fn run(side: Side, net: &NetArgs, mac: Option<[u8; 6]>) -> Result<(), PeerError> {
        let t0 = Instant::now();
        app::with_hca(|dev| run_on(dev, side, net, mac))?;
        println!("stress: wall {} ms", t0.elapsed().as_millis());
        Ok(())
    }

    /// The run on the open HCA.
    fn run_on(dev: &Dev, side: Side, net: &NetArgs, mac: Option<[u8; 6]>) -> Result<(), PeerError> {
        let server = side == Side::Server;
        let (sgid_index, gid) = identity(dev, net, mac)?;
        let mut link = connect(dev, net, side, WAIT)?;
        let set = dev
            .alloc_counter_set()
            .map_err(hca("ALLOC_Q_COUNTER failed"))?;
        let pd = dev.alloc_pd().map_err(hca("alloc_pd"))?;
        let mr = pd
            .alloc_mr(if server { SERVER_MR } else { CLIENT_MR }, AccessFlags::ALL)
            .map_err(hca("alloc_mr"))?;
        let mut cq = dev.create_cq(64).map_err(hca("create_cq"))?;
        let caps = QpCaps {
            max_send_wr: 128,
            ..QpCaps::default()
        };
        let mut qp = pd.create_qp(&cq, &cq, &caps).map_err(hca("create_qp"))?;
        // The QP counts into `set` from RST2INIT on (the QPC's counter_set_id).
        qp.set_counter_set(Some(&set))
            .map_err(hca("set_counter_set"))?;
        let me = QpEndpoint {
            gid,
            ..qp.endpoint()
        };
        let peer = exchange(&mut link, me, mr.addr(), mr.rkey())?;
        let o = ConnectOptions {
            min_rnr_timer: 1,
            sgid_index,
            timeout: ACK_TIMEOUT,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..ConnectOptions::default()
        };
        qp.connect(&peer.ep, &o).map_err(hca("connect"))?;
        if server {
            mr.write(0, &vec![0u8; SERVER_MR]).map_err(hca("write"))?;
            say(&mut link, "ready")?;
            hear(&mut link, "done", "the client never finished")?;
            let mut region = vec![0u8; REGION];
            mr.read(0, &mut region).map_err(hca("read"))?;
            let mut at = [0u8; 8];
            mr.read(AT_ATOMIC, &mut at).map_err(hca("read"))?;
            let sum = alloc::format!(
                "sum={:016x} atomic={:016x}",
                fnv(&region),
                u64::from_ne_bytes(at)
            );
            println!("peer: {sum}");
            say(&mut link, &sum)?;
            print_counters("server", dev, &set)?;
            hear(&mut link, "verdict", "no verdict from the client")?;
        } else {
            hear(&mut link, "ready", "the server never got ready")?;
            let t1 = Instant::now();
            let r = client(
                &mut link,
                &mut qp,
                &mut cq,
                &mr,
                Remote {
                    addr: peer.addr,
                    rkey: peer.rkey,
                },
            );
            let secs = t1.elapsed().as_millis();
            match r {
                Ok((model, atomic, reads, atomics)) => {
                    say(&mut link, "done")?;
                    let want = alloc::format!("sum={:016x} atomic={:016x}", fnv(&model), atomic);
                    let line = hear(&mut link, "sum=", "no checksum from the server")?;
                    let ok = line == want.as_bytes();
                    let verdict = if ok { "verdict ok" } else { "verdict bad" };
                    println!("peer: {verdict}");
                    say(&mut link, verdict)?;
                    if !ok {
                        println!(
                            "stress: server says {}, the model {want}",
                            core::str::from_utf8(&line).unwrap_or("?")
                        );
                        return Err(PeerError::Check(
                            "the server's region differs from the client's model",
                        ));
                    }
                    print_counters("client", dev, &set)?;
                    println!(
                        "stress: {WRITES} RDMA WRITEs, {reads} RDMA READs, {atomics} atomics, 0 error completions, region byte-exact in {secs} ms: ok"
                    );
                }
                Err(e) => {
                    println!("peer: verdict bad");
                    let _ = say(&mut link, "verdict bad");
                    let _ = print_counters("client", dev, &set);
                    return Err(e);
                }
            }
        }
        drop(link);
        drop(qp);
        drop(set);
        drop(cq);
        drop(mr);
        drop(pd);
        Ok(())
    }

    /// Polls `n` completions (the stack kept polled); any error completion fails the run.
    fn complete(
        link: &mut Oob,
        cq: &mut mlx5::CompletionQueue<mlx5_kernel::KernelHal>,
        n: usize,
    ) -> Result<(), PeerError> {
        let wcs = link.poll_cq(cq, n, WAIT).map_err(hca("poll"))?;
        if wcs.len() != n {
            return Err(PeerError::Check("completions missing"));
        }
        if let Some(w) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            println!(
                "stress: error completion: wr_id={} status={:?} vendor_err={:#x}",
                w.wr_id, w.status, w.vendor_err
            );
            return Err(PeerError::Check("an error completion"));
        }
        Ok(())
    }

    /// The client's traffic; returns the model of the server's region, the expected atomic
    /// word, and the READ and atomic counts.
    #[allow(clippy::type_complexity)]
    fn client(
        link: &mut Oob,
        qp: &mut mlx5::QueuePair<mlx5_kernel::KernelHal>,
        cq: &mut mlx5::CompletionQueue<mlx5_kernel::KernelHal>,
        mr: &MemoryRegion<mlx5_kernel::KernelHal>,
        remote: Remote,
    ) -> Result<(Vec<u8>, u64, usize, usize), PeerError> {
        let t0 = Instant::now();
        let src = src_pattern();
        mr.write(SRC, &src).map_err(hca("write"))?;
        let mut model = vec![0u8; REGION];
        let mut atomic = 0u64;
        let at = |off: u64| Remote {
            addr: remote.addr + off,
            rkey: remote.rkey,
        };
        let mut rng = SplitMix64::seed_from_u64(0x5eed_0008);
        let (mut writes, mut reads, mut atomics, mut batch_no) = (0usize, 0usize, 0usize, 0usize);
        while writes < WRITES {
            let n = BATCH.min(WRITES - writes);
            // (source offset, destination offset, length) of each WRITE.
            let plan: Vec<(u64, u64, u32)> = (0..n)
                .map(|_| {
                    let len = SIZES[below(&mut rng, SIZES.len() as u64) as usize];
                    let s = below(&mut rng, REGION as u64 - len as u64 + 1);
                    let d = below(&mut rng, REGION as u64 - len as u64 + 1);
                    (s, d, len)
                })
                .collect();
            let sges: Vec<_> = plan
                .iter()
                .map(|&(s, _, len)| [mr.sge(SRC + s, len)])
                .collect();
            // A READ of some of what the batch wrote, checked against the model, and an
            // atomic: after the WRITEs (RC executes in order), nothing posted after them
            // until they complete (a READ retried after a lost response executes again).
            let rlen = SIZES[below(&mut rng, SIZES.len() as u64) as usize];
            let roff = below(&mut rng, REGION as u64 - rlen as u64 + 1);
            let rd = [mr.sge(RD, rlen)];
            let cas = batch_no % 2 == 1;
            let at_out = [mr.sge(ATOM, 8)];
            let mut wrs: Vec<SendWr<'_, mlx5_kernel::KernelHal>> = plan
                .iter()
                .zip(&sges)
                .enumerate()
                .map(|(i, (&(_, d, _), sge))| SendWr {
                    wr_id: (writes + i) as u64,
                    op: SendOp::Write {
                        remote: at(d),
                        imm: None,
                    },
                    data: SendData::Sges(sge),
                    flags: if (i + 1) % SIGNAL_EVERY == 0 || i + 1 == n {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::NONE
                    },
                })
                .collect();
            wrs.push(SendWr {
                wr_id: 1 << 32 | reads as u64,
                op: SendOp::Read { remote: at(roff) },
                data: SendData::Sges(&rd),
                flags: SendFlags::SIGNALED,
            });
            let op = if cas {
                SendOp::CompareSwap {
                    remote: at(AT_ATOMIC),
                    compare: atomic,
                    swap: atomic.wrapping_add(ONE),
                }
            } else {
                SendOp::FetchAdd {
                    remote: at(AT_ATOMIC),
                    add: ONE,
                }
            };
            wrs.push(SendWr {
                wr_id: 2 << 32 | atomics as u64,
                op,
                data: SendData::Sges(&at_out),
                flags: SendFlags::SIGNALED,
            });
            qp.post_send(&wrs).map_err(hca("post_send"))?;
            let signaled = wrs
                .iter()
                .filter(|w| w.flags.0 & SendFlags::SIGNALED.0 != 0)
                .count();
            complete(link, cq, signaled)?;
            for &(s, d, len) in &plan {
                model[d as usize..d as usize + len as usize]
                    .copy_from_slice(&src[s as usize..s as usize + len as usize]);
            }
            let mut got = vec![0u8; rlen as usize];
            mr.read(RD, &mut got).map_err(hca("read"))?;
            if got[..] != model[roff as usize..roff as usize + rlen as usize] {
                println!("stress: READ of {rlen} B at {roff:#x} after batch {batch_no} differs from the model");
                return Err(PeerError::Check("an RDMA READ returned wrong bytes"));
            }
            let mut orig = [0u8; 8];
            mr.read(ATOM, &mut orig).map_err(hca("read"))?;
            if u64::from_ne_bytes(orig) != atomic {
                println!(
                    "stress: atomic {atomics} returned {:#x}, expected {atomic:#x}",
                    u64::from_ne_bytes(orig)
                );
                return Err(PeerError::Check(
                    "an atomic returned the wrong original value",
                ));
            }
            atomic = atomic.wrapping_add(ONE);
            writes += n;
            reads += 1;
            atomics += 1;
            batch_no += 1;
            if writes % 2048 < BATCH {
                println!(
                    "stress: {writes} WRITEs done at {} ms",
                    t0.elapsed().as_millis()
                );
            }
        }
        // Read the whole region back, 16 KiB per READ, and compare with the model.
        let chunk = 16 * 1024u32;
        let sges: Vec<_> = (0..REGION as u64 / chunk as u64)
            .map(|i| [mr.sge(BACK + i * chunk as u64, chunk)])
            .collect();
        let wrs: Vec<_> = sges
            .iter()
            .enumerate()
            .map(|(i, sge)| SendWr {
                wr_id: 3 << 32 | i as u64,
                op: SendOp::Read {
                    remote: at(i as u64 * chunk as u64),
                },
                data: SendData::Sges(sge),
                flags: SendFlags::SIGNALED,
            })
            .collect();
        qp.post_send(&wrs).map_err(hca("post_send"))?;
        complete(link, cq, wrs.len())?;
        reads += wrs.len();
        let mut back = vec![0u8; REGION];
        mr.read(BACK, &mut back).map_err(hca("read"))?;
        if back != model {
            let first = back
                .iter()
                .zip(&model)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            println!("stress: read-back differs from the model first at {first:#x}");
            return Err(PeerError::Check(
                "the region read back differs from the model",
            ));
        }
        Ok((model, atomic, reads, atomics))
    }
}
