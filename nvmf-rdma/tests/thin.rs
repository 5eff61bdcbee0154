//! The thin disk on the emulated HCA: the target's disk region is filled with old bytes
//! before the host comes (its memory is not zeroed at start: what it held before the
//! appliance is whatever it held), and the host never sees one of them. A read of blocks
//! never written is zeros by RDMA WRITE, a keyed write's RDMA READ lands in a chunk already
//! zeroed around it, Write Zeroes and deallocate of whole chunks make them read as zeros.

mod common;

use common::*;
use nvmeof::backend::CHUNK;
use nvmeof::sgl::Sgl;

/// What the disk's memory held before: never to be served.
const OLD: u8 = 0xee;
/// Blocks of a chunk.
const CHUNK_LBAS: u64 = CHUNK / 512;

fn disk_bytes(t: &Tgt, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    let d = t.nv.target().disk(0).unwrap();
    d.mr().read(off, &mut b).unwrap();
    b
}

fn zeros(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Reads `blocks` at `slba` into the host's READ_OFF (filled with 0x55 first, so what the
/// RDMA WRITE put there shows).
fn read(
    t: &mut Tgt,
    h: &mut Host,
    clock: &cm::CmClock,
    q: usize,
    slba: u64,
    blocks: u32,
) -> Vec<u8> {
    let len = blocks * 512;
    h.mr.write(READ_OFF, &vec![0x55; len as usize]).unwrap();
    let r = Host::command(
        t,
        h,
        clock,
        q,
        &rw(0x02, slba, blocks, h.keyed(READ_OFF, len)),
    );
    assert_eq!(r.status, 0, "read {slba}+{blocks}: {r:?}");
    let mut b = vec![0u8; len as usize];
    h.mr.read(READ_OFF, &mut b).unwrap();
    b
}

#[test]
fn the_host_never_reads_what_the_disk_memory_held_before() {
    let (mut t, mut h, clock) = setup();
    let disk = t.nv.target().disk(0).unwrap();
    disk.mr().write(0, &vec![OLD; DISK]).unwrap();
    assert_eq!(disk.chunks().written(), 0);
    let (_, cntlid) = Host::admin(&mut t, &mut h, &clock, 0);
    let q = Host::io(&mut t, &mut h, &clock, 1, cntlid);

    // Never written: zeros, 4 KiB and the last 256 KiB of the namespace.
    assert!(zeros(&read(&mut t, &mut h, &clock, q, 0, 8)));
    let end = (DISK as u64 / 512) - 512;
    assert!(zeros(&read(&mut t, &mut h, &clock, q, end, 512)));

    // 128 KiB by RDMA READ into chunk 1: the chunk was zeroed before the READ was posted.
    h.mr.write(WRITE_OFF, &pattern("pattern128k")).unwrap();
    let w = rw(0x01, CHUNK_LBAS + 8, 256, h.keyed(WRITE_OFF, 128 << 10));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);
    let c1 = disk_bytes(&t, CHUNK, CHUNK as usize);
    assert!(zeros(&c1[..4096]));
    assert_eq!(c1[4096..4096 + (128 << 10)], pattern("pattern128k")[..]);
    assert!(zeros(&c1[4096 + (128 << 10)..]));
    let back = read(&mut t, &mut h, &clock, q, CHUNK_LBAS, 512);
    assert_eq!(back[..], c1[..256 << 10]);

    // 4 KiB in the capsule into chunk 2: copied by the CPU after its chunk was zeroed.
    let mut w = rw(0x01, 2 * CHUNK_LBAS + 64, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &w).status, 0);
    let c2 = disk_bytes(&t, 2 * CHUNK, CHUNK as usize);
    assert!(zeros(&c2[..64 * 512]) && zeros(&c2[64 * 512 + 4096..]));
    assert_eq!(c2[64 * 512..64 * 512 + 4096], pattern("pattern4k")[..]);
    // Chunk 3 was only read by the host: zeroed on that first touch.
    assert!(zeros(&disk_bytes(&t, 3 * CHUNK, CHUNK as usize)));
    assert_eq!(t.nv.target().disk(0).unwrap().chunks().written(), 4);

    // Write Zeroes of chunk 1 whole: no memset, and it reads as zeros.
    let wz = sqe(
        0x08,
        0,
        1,
        &[CHUNK_LBAS as u32, 0, CHUNK_LBAS as u32 - 1],
        Sgl::keyed(Default::default(), false),
    );
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &wz).status, 0);
    assert!(!t.nv.target().disk(0).unwrap().chunks().is_written(1));
    assert_eq!(
        disk_bytes(&t, CHUNK + 4096, 4096),
        pattern("pattern128k")[..4096]
    );
    assert!(zeros(&read(&mut t, &mut h, &clock, q, CHUNK_LBAS, 512)));
    // Dataset Management deallocate of chunk 2 whole (one range, in the capsule).
    let mut range = vec![0u8; 16];
    range[4..8].copy_from_slice(&(CHUNK_LBAS as u32).to_le_bytes());
    range[8..16].copy_from_slice(&(2 * CHUNK_LBAS).to_le_bytes());
    let mut d = sqe(0x09, 0, 1, &[0, 1 << 2], Sgl::in_capsule(0, 16));
    d.extend(range);
    assert_eq!(Host::command(&mut t, &mut h, &clock, q, &d).status, 0);
    assert!(zeros(&read(
        &mut t,
        &mut h,
        &clock,
        q,
        2 * CHUNK_LBAS + 64,
        8
    )));
}
