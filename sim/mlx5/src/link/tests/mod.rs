//! Link tests: QEMU framing over socket pairs, UNIX and TCP listeners, garbage peers, the
//! receive checks, faults, counters and capture (with tshark when it is installed).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::pcap::PcapFile;
use super::*;
use crate::roce::counters::Counter;
use crate::roce::*;

mod capture;
mod faults;
mod garbage;
mod links;
mod qemu;
mod rx_checks;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// A fresh path under the target's temp dir (short enough for `sun_path`).
fn sock_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("mlx5l-{}-{tag}-{n}", std::process::id()))
}

/// The extension headers `op` needs.
fn ext_for(op: Opcode) -> ExtHdrs {
    let h = op.info().unwrap().hdrs;
    let mut e = ExtHdrs::default();
    if h.contains(HdrSet::DETH) {
        e.deth = Some(Deth {
            q_key: 0x1111_1111,
            resv8: 0,
            src_qp: 0x11,
        });
    }
    if h.contains(HdrSet::RETH) {
        e.reth = Some(Reth {
            va: 0x5567_067f_4000,
            r_key: 0x363,
            dma_len: 3000,
        });
    }
    if h.contains(HdrSet::ATOMIC_ETH) {
        e.atomic_eth = Some(AtomicEth {
            va: 0x5565_fad5_7000,
            r_key: 0x2e8,
            swap_add: 1,
            compare: 7,
        });
    }
    if h.contains(HdrSet::AETH) {
        e.aeth = Some(Aeth::ack(Aeth::CREDIT_UNLIMITED, 3));
    }
    if h.contains(HdrSet::ATOMIC_ACK_ETH) {
        e.atomic_ack_eth = Some(AtomicAckEth { orig: 0x1234 });
    }
    if h.contains(HdrSet::IMM_DT) {
        e.imm_dt = Some(0xdead_beef);
    }
    if h.contains(HdrSet::IETH) {
        e.ieth = Some(0x77);
    }
    e
}

/// Headers of a frame from (`src_mac`, `src`) to (`dst_mac`, `dst`), as rxe sends them.
fn hdrs(
    op: Opcode,
    psn: u32,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> RoceHeaders {
    let mut bth = Bth::new(op, 0x11, psn);
    bth.ack_req = true;
    RoceHeaders {
        eth: EthHdr {
            dst: dst_mac,
            src: src_mac,
            vlan: None,
        },
        ip: IpHdr::V4(Ipv4Hdr {
            dscp: 0,
            ecn: 0,
            identification: psn as u16,
            dont_fragment: true,
            ttl: 64,
            src,
            dst,
        }),
        udp: UdpHdr {
            src_port: 0xc121,
            checksum: 0,
        },
        bth,
        ext: ext_for(op),
    }
}

/// A frame from A to B with `payload` (if the opcode carries one).
fn frame_ab(op: Opcode, psn: u32, payload: &[u8]) -> Vec<u8> {
    let p = if op.info().unwrap().payload {
        payload
    } else {
        &[]
    };
    hdrs(op, psn, MAC_A, MAC_B, IP_A, IP_B).encode(p).unwrap()
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn cfg_b() -> PortConfig {
    PortConfig {
        mac: MAC_B,
        ips: vec![IP_B.into()],
    }
}

fn cfg_a() -> PortConfig {
    PortConfig {
        mac: MAC_A,
        ips: vec![IP_A.into()],
    }
}

fn arp_request() -> Vec<u8> {
    // Who has 10.0.0.2? Tell 10.0.0.1 (RFC 826), to the broadcast MAC.
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&IP_A.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&IP_B.octets());
    f
}
