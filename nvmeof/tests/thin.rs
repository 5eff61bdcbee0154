//! The thin RAM disk through the core: a namespace over memory full of old bytes serves
//! none of them. A read of blocks never written returns zeros, a write's neighbours in its
//! chunk read as zeros, Write Zeroes and Dataset Management deallocate of whole chunks make
//! them unwritten again, and the data of writes stays.

mod common;

use common::*;
use nvmeof::backend::CHUNK;
use nvmeof::exec::STAGING_LEN;
use nvmeof::sgl::Sgl;
use nvmeof::{Local, QueueId, RamDisk, Step, Target};

/// Four chunks.
const DISK: usize = 4 * CHUNK as usize;
/// What the memory held before the target: never to be served.
const OLD: u8 = 0xee;
/// Blocks of a chunk.
const CHUNK_LBAS: u64 = CHUNK / 512;

fn thin_target() -> (Target<Disk>, QueueId) {
    let disk = RamDisk::new(vec![OLD; DISK], 0);
    let mut t = Target::new(capture_config(), vec![disk]).unwrap();
    let q = connected(&mut t, 0, 1)[1];
    (t, q)
}

fn io(opcode: u8, slba: u64, blocks: u32, sgl: Sgl) -> Vec<u8> {
    sqe(
        opcode,
        7,
        1,
        &[slba as u32, (slba >> 32) as u32, blocks - 1],
        sgl,
    )
}

/// Reads `blocks` at `slba` by a keyed SGL (an RDMA WRITE out of the disk).
fn read(t: &mut Target<Disk>, q: QueueId, slba: u64, blocks: u32) -> Vec<u8> {
    let len = blocks * 512;
    let mut host = vec![0x55; len as usize];
    let r = run(t, q, &io(0x02, slba, blocks, keyed(len)), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0, "read {slba}+{blocks}");
    host
}

/// Writes `data` at `slba` by a keyed SGL (an RDMA READ into the disk).
fn write(t: &mut Target<Disk>, q: QueueId, slba: u64, data: &[u8]) {
    let len = data.len() as u32;
    let mut host = data.to_vec();
    let r = run(t, q, &io(0x01, slba, len / 512, keyed(len)), &mut host).unwrap();
    assert_eq!(r.cqe.status, 0, "write {slba}");
}

fn status(t: &mut Target<Disk>, q: QueueId, capsule: &[u8]) -> u16 {
    run(t, q, capsule, &mut []).unwrap().cqe.status
}

fn zeros(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

#[test]
fn blocks_never_written_read_as_zeros() {
    let (mut t, q) = thin_target();
    assert!(zeros(&read(&mut t, q, 0, 8)));
    // 1 MiB (MDTS) across the boundary of chunks 1 and 2.
    assert!(zeros(&read(&mut t, q, CHUNK_LBAS + CHUNK_LBAS / 2, 2048)));
    // The last blocks of the namespace.
    assert!(zeros(&read(&mut t, q, 4 * CHUNK_LBAS - 8, 8)));
    // Chunk 3 was never read whole before: none of the old bytes anywhere it serves.
    assert!(zeros(&read(&mut t, q, 3 * CHUNK_LBAS, 2048)));
}

#[test]
fn the_chunk_is_zeroed_before_the_transfer_is_handed_out() {
    let (mut t, q) = thin_target();
    let mut staging = vec![0u8; STAGING_LEN];
    let Ok(Step::Transfer(tr)) = t.submit(q, &io(0x01, 8, 8, keyed(4096)), &mut staging) else {
        panic!("a transfer")
    };
    assert_eq!(
        tr.local,
        Local::Disk {
            disk: 0,
            offset: 4096,
            len: 4096
        }
    );
    // Before the RDMA READ lands, its chunk is already zeros, the others untouched.
    let d = t.disk(0).unwrap().bytes();
    assert!(zeros(&d[..CHUNK as usize]));
    assert!(d[CHUNK as usize..].iter().all(|&b| b == OLD));
    do_transfer(&mut t, &tr, &mut staging, &mut vec![0xa5; 4096]);
    let r = t.complete_transfer(q, tr.tag, true, &staging).unwrap();
    assert_eq!(r.cqe.status, 0);
    let back = read(&mut t, q, 0, 24);
    assert!(zeros(&back[..4096]) && zeros(&back[8192..]));
    assert!(back[4096..8192].iter().all(|&b| b == 0xa5));
}

#[test]
fn writes_in_the_capsule_and_keyed_keep_their_data_and_their_neighbours_read_zeros() {
    let (mut t, q) = thin_target();
    let mut w = io(0x01, CHUNK_LBAS + 16, 8, Sgl::in_capsule(0, 4096));
    w.extend(pattern("pattern4k"));
    assert_eq!(status(&mut t, q, &w), 0);
    write(
        &mut t,
        q,
        2 * CHUNK_LBAS - 8,
        &pattern("pattern128k")[..8192],
    );
    let c1 = read(&mut t, q, CHUNK_LBAS, 2048);
    assert_eq!(c1[8192..12288], pattern("pattern4k")[..]);
    assert!(zeros(&c1[..8192]));
    assert!(zeros(&c1[12288..CHUNK as usize - 4096]));
    // The keyed write straddles chunks 1 and 2: its two halves, zeros after it.
    assert_eq!(c1[CHUNK as usize - 4096..], pattern("pattern128k")[..4096]);
    let c2 = read(&mut t, q, 2 * CHUNK_LBAS, 2048);
    assert_eq!(c2[..4096], pattern("pattern128k")[4096..8192]);
    assert!(zeros(&c2[4096..]));
}

#[test]
fn write_zeroes_and_deallocate_of_whole_chunks_leave_nothing_behind() {
    let (mut t, q) = thin_target();
    let ones = vec![0x11u8; CHUNK as usize];
    for c in 0..4 {
        write(&mut t, q, c * CHUNK_LBAS, &ones);
    }
    // Write Zeroes (no data, no MDTS): the 8 blocks before chunk 1, chunk 1 whole, and the
    // 8 blocks after it.
    let wz = sqe(
        0x08,
        8,
        1,
        &[(CHUNK_LBAS - 8) as u32, 0, (CHUNK_LBAS + 16 - 1) as u32],
        no_data(),
    );
    assert_eq!(status(&mut t, q, &wz), 0);
    assert_eq!(t.disk(0).unwrap().chunks().written(), 3);
    let head = read(&mut t, q, CHUNK_LBAS - 16, 16);
    assert!(head[..4096].iter().all(|&b| b == 0x11));
    assert!(zeros(&head[4096..]));
    assert!(zeros(&read(&mut t, q, CHUNK_LBAS, 2048)));
    let tail = read(&mut t, q, 2 * CHUNK_LBAS, 16);
    assert!(zeros(&tail[..4096]));
    assert!(tail[4096..].iter().all(|&b| b == 0x11));
    // Dataset Management deallocate of chunks 2 and 3, as mkfs.ext4's discard sends it.
    let mut range = [0u8; 16];
    range[4..8].copy_from_slice(&((2 * CHUNK_LBAS) as u32).to_le_bytes());
    range[8..16].copy_from_slice(&(2 * CHUNK_LBAS).to_le_bytes());
    let mut dsm = sqe(0x09, 9, 1, &[0, 1 << 2], Sgl::in_capsule(0, 16));
    dsm.extend(range);
    assert_eq!(status(&mut t, q, &dsm), 0);
    // Chunks 0 and 1 are written (reading chunk 1 above was its first touch since).
    let chunks = t.disk(0).unwrap().chunks();
    assert_eq!(chunks.written(), 2);
    assert!(!chunks.is_written(2) && !chunks.is_written(3));
    assert!(zeros(&read(&mut t, q, 2 * CHUNK_LBAS + 8, 2048)));
    // A block written into an unwritten chunk again: the old ones of before do not return.
    write(&mut t, q, 3 * CHUNK_LBAS + 1, &[0x22; 512]);
    let c3 = read(&mut t, q, 3 * CHUNK_LBAS, 2048);
    assert!(zeros(&c3[..512]) && zeros(&c3[1024..]));
    assert!(c3[512..1024].iter().all(|&b| b == 0x22));
    // Nothing outside the namespace was ever touched: the memory is the disk's only.
    assert_eq!(t.disk(0).unwrap().bytes().len(), DISK);
}

/// The namespace promises nothing of deallocated blocks, as Linux's target does not for a
/// block device (`drivers/nvme/target/admin-cmd.c` `nvmet_execute_identify_ns` leaves DLFEAT
/// zero): a deallocate of part of a chunk may leave its bytes.
#[test]
fn identify_namespace_reports_no_deallocated_read_behaviour() {
    let disk = RamDisk::new(vec![OLD; DISK], 0);
    let mut t = Target::new(capture_config(), vec![disk]).unwrap();
    let admin = connected(&mut t, 0, 0)[0];
    let mut id = vec![0x55u8; 4096];
    let r = run(&mut t, admin, &sqe(0x06, 1, 1, &[0], keyed(4096)), &mut id).unwrap();
    assert_eq!(r.cqe.status, 0);
    assert_eq!(id[33], 0, "DLFEAT");
    assert_eq!(
        u64::from_le_bytes(id[..8].try_into().unwrap()),
        DISK as u64 / 512
    );
}

/// Random writes (in the capsule, and keyed: prepare, then the bytes straight into the
/// memory), reads (copied, and keyed: prepare, then the bytes straight out of the memory),
/// Write Zeroes and deallocations over a disk of old bytes whose end is inside a chunk,
/// against a plain model that starts all zeros: every read and the whole disk at the end are
/// the model's, so no write is lost and no old byte is ever served.
#[test]
fn random_operations_read_back_what_was_written_and_zeros_elsewhere() {
    use nvmeof::Backend;
    use rand_xoshiro::rand_core::{Rng as _, SeedableRng};

    let size = 4 * CHUNK as usize + 4096;
    let mut d = RamDisk::new(vec![OLD; size], 0);
    let mut model = vec![0u8; size];
    let mut rng = rand_xoshiro::SplitMix64::seed_from_u64(0x7417);
    let mut below = |n: u64| rng.next_u64() % n;
    for round in 0..3000u32 {
        // Ranges near chunk boundaries half of the time, up to 1.5 chunks long.
        let len = 1 + below(CHUNK + CHUNK / 2) as usize;
        let off = if below(2) == 0 {
            let edge = below(5) * CHUNK;
            (edge as usize + below(1024) as usize).saturating_sub(512)
        } else {
            below(size as u64) as usize
        };
        let off = off.min(size - 1);
        let len = len.min(size - off);
        let r = off..off + len;
        let fill = (round % 251) as u8 + 1;
        match below(6) {
            0 => {
                d.write(off as u64, &vec![fill; len]).unwrap();
                model[r].fill(fill);
            }
            1 => {
                d.prepare(off as u64, len as u64).unwrap();
                d.bytes_mut()[r.clone()].fill(fill);
                model[r].fill(fill);
            }
            2 => {
                let mut out = vec![0x55; len];
                d.read(off as u64, &mut out).unwrap();
                assert!(out == model[r], "round {round}: read {off}+{len}");
            }
            3 => {
                d.prepare(off as u64, len as u64).unwrap();
                assert!(
                    d.bytes()[r.clone()] == model[r],
                    "round {round}: keyed read"
                );
            }
            4 => {
                d.write_zeroes(off as u64, len as u64).unwrap();
                model[r].fill(0);
            }
            _ => {
                d.deallocate(off as u64, len as u64).unwrap();
                model[r].fill(0);
            }
        }
    }
    let mut all = vec![0x55; size];
    d.read(0, &mut all).unwrap();
    assert!(all == model);
}
