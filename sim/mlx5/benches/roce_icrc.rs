//! RoCEv2 ICRC and frame encode/decode speed at 4 KiB payload, next to plain `crc32fast` over
//! the same bytes in the same run.
//!
//! `cargo bench -p mlx5-sim --bench roce_icrc` (plain `std::time`, no harness).

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mlx5_sim::roce::{
    decode, icrc, Bth, EthHdr, ExtHdrs, Frame, IpHdr, Ipv4Hdr, Opcode, RoceHeaders, UdpHdr,
};

const RUN: Duration = Duration::from_millis(500);

/// MB/s of `f` over `bytes` bytes per call.
fn rate(bytes: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RUN {
        for _ in 0..64 {
            f();
        }
        n += 64;
    }
    (bytes as u64 * n) as f64 / start.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let h = RoceHeaders {
        eth: EthHdr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
        },
        ip: IpHdr::V4(Ipv4Hdr {
            dscp: 0,
            ecn: 0,
            identification: 1,
            dont_fragment: true,
            ttl: 64,
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
        }),
        udp: UdpHdr {
            src_port: 0xc121,
            checksum: 0,
        },
        bth: Bth::new(Opcode::RC_SEND_MIDDLE, 0x11, 1),
        ext: ExtHdrs::default(),
    };
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let frame = h.encode(&payload).unwrap();
    let dgram = &frame[14..frame.len() - 4];
    let n = dgram.len();
    let plain = rate(n, || {
        black_box(crc32fast::hash(black_box(dgram)));
    });
    let ours = rate(n, || {
        black_box(icrc(black_box(dgram), false));
    });
    let mut out = Vec::with_capacity(frame.len());
    let enc = rate(payload.len(), || {
        out.clear();
        h.encode_into(black_box(&payload), &mut out).unwrap();
        black_box(&out);
    });
    let dec = rate(payload.len(), || {
        let Ok(Frame::Roce(f)) = decode(black_box(&frame)) else {
            panic!()
        };
        assert!(f.icrc_ok());
    });
    println!("crc32fast::hash over {n} bytes   {plain:>9.0} MB/s");
    println!(
        "roce::icrc over the same          {ours:>9.0} MB/s ({:.0}% of crc32fast)",
        100.0 * ours / plain
    );
    println!("encode 4 KiB frame (copy + ICRC)  {enc:>9.0} MB/s");
    println!("decode 4 KiB frame (+ ICRC check) {dec:>9.0} MB/s");
}
