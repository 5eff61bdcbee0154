//! Tests of the guest memory implementations.

use super::*;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;

#[test]
fn region_alloc_read_write() {
    let m = RegionMemory::new();
    let a = m.alloc(100, 64).unwrap();
    assert_eq!(a % 64, 0);
    let b = m.alloc(4096, 4096).unwrap();
    assert_eq!(b % 4096, 0);
    assert!(b >= a + 100 + RegionMemory::GUARD);
    // Zeroed.
    assert_eq!(m.read_u64_be(a).unwrap(), 0);
    m.write_u32_be(a + 4, 0x1122_3344).unwrap();
    let mut raw = [0u8; 8];
    m.read(a, &mut raw).unwrap();
    assert_eq!(raw, [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
    m.write_u64_be(b + 4088, 0xdead_beef_0bad_f00d).unwrap();
    assert_eq!(m.read_u64_be(b + 4088).unwrap(), 0xdead_beef_0bad_f00d);
    // The host pointer sees the same bytes.
    let p = m.host_ptr(a + 4, 4).unwrap();
    // SAFETY: 4 bytes inside a live region, no concurrent device access in this test.
    let got = unsafe { std::slice::from_raw_parts(p.as_ptr(), 4) };
    assert_eq!(got, &[0x11, 0x22, 0x33, 0x44]);
}

/// The recently-found-piece guess (`last_at_or_below`) never answers for a region that
/// moved in the list or went away: indexes shift under it when a region is inserted
/// below, and a freed region's index then names a neighbour.
#[test]
fn region_lookups_survive_regions_moving_and_going() {
    let m = RegionMemory::new();
    let r: Vec<u64> = (0..3).map(|_| m.alloc(4096, 4096).unwrap()).collect();
    for (i, &a) in r.iter().enumerate() {
        m.write(a, &[i as u8 + 1; 4096]).unwrap();
    }
    let byte = |a: u64| {
        let mut b = [0u8; 1];
        m.read(a, &mut b).map(|_| b[0])
    };
    assert_eq!(byte(r[1] + 7), Ok(2));
    // A region below every other one: each index moves up by one.
    m.insert(0x1000, &[9; 64]).unwrap();
    assert_eq!(byte(r[1] + 7), Ok(2));
    assert_eq!(byte(r[0]), Ok(1));
    assert_eq!(byte(0x1000), Ok(9));
    // Gone: its old index now names r[2].
    assert!(m.free(r[1]));
    assert!(byte(r[1] + 7).is_err());
    assert_eq!(byte(r[2] + 4095), Ok(3));
    // One-piece-each-side copies still land where they should.
    m.copy(r[0] + 16, r[2] + 32, 100).unwrap();
    assert_eq!(byte(r[2] + 32), Ok(1));
    assert_eq!(byte(r[2] + 131), Ok(1));
    assert_eq!(byte(r[2] + 132), Ok(3));
    assert!(m.copy(r[0], r[1], 8).is_err());
}

/// `write_parts` (one lock for several writes) behaves as the writes one after another:
/// every part lands, across pieces too; a part that fails stops the sequence with its own
/// error, the earlier parts staying written and the later ones not; the trait's default
/// (one `write` per part) does the same.
#[test]
fn write_parts_is_writes_in_order() {
    let fresh: [&dyn Fn() -> Box<dyn GuestMemory>; 2] = [&|| Box::new(three_pieces()), &|| {
        Box::new(Bounce(three_pieces()))
    }];
    for make in fresh {
        // Two parts, the first across a piece boundary (0x1101), the second in another piece.
        let m = make();
        let mut want = snapshot(&*m);
        m.write_parts(&[(0x10fc, &[1u8; 8][..]), (0x1250, &[2u8; 3][..])])
            .unwrap();
        want[0xfc..0x104].fill(1);
        want[0x250..0x253].fill(2);
        assert_eq!(snapshot(&*m), want);
        // The second part runs past the end of guest memory (0x1301): the first part is
        // written, the second and third are not.
        let m = make();
        let mut want = snapshot(&*m);
        let e = m
            .write_parts(&[
                (0x1010, &[7u8; 4][..]),
                (0x12ff, &[9u8; 4][..]),
                (0x1020, &[8u8; 4][..]),
            ])
            .unwrap_err();
        assert_eq!(
            e,
            DmaError {
                addr: 0x12ff,
                len: 4
            }
        );
        want[0x10..0x14].fill(7);
        assert_eq!(snapshot(&*m), want);
    }
}

#[test]
fn region_errors_instead_of_crashing() {
    let m = RegionMemory::new();
    let a = m.alloc(64, 8).unwrap();
    let mut buf = [0u8; 16];
    // Overrun into the guard gap.
    assert_eq!(
        m.read(a + 56, &mut buf),
        Err(DmaError {
            addr: a + 56,
            len: 16
        })
    );
    // Below every region.
    assert!(m.read(0, &mut buf).is_err());
    // Wrap-around.
    assert!(m.write(u64::MAX - 3, &buf).is_err());
    // A failed write changes nothing.
    assert!(m.write(a + 60, &[0xff; 8]).is_err());
    assert_eq!(m.read_u32_be(a + 60).unwrap(), 0);
    // Use after free.
    assert!(m.free(a));
    assert!(!m.free(a));
    assert!(m.read(a, &mut buf).is_err());
    assert_eq!(m.region_count(), 0);
    // Bad layouts.
    assert_eq!(m.alloc(0, 8), Err(AllocError::BadLayout));
    assert_eq!(m.alloc(8, 3), Err(AllocError::BadLayout));
    // Zero-length access is always fine.
    assert!(m.read(12345, &mut []).is_ok());
}

#[test]
fn region_insert_adjacent_is_piecewise() {
    let m = RegionMemory::with_base(0x10_0000);
    m.insert(0x1000, &[1u8; 0x100]).unwrap();
    m.insert(0x1100, &[2u8; 0x100]).unwrap();
    assert_eq!(
        m.insert(0x10f0, &[0u8; 0x20]),
        Err(AllocError::AddressInUse)
    );
    let mut buf = [0u8; 4];
    m.read(0x10fe, &mut buf).unwrap();
    assert_eq!(buf, [1, 1, 2, 2]);
    m.write(0x10ff, &[9, 9]).unwrap();
    m.read(0x10fe, &mut buf).unwrap();
    assert_eq!(buf, [1, 9, 9, 2]);
    // A gap after the second region.
    m.insert(0x1300, &[3u8; 0x10]).unwrap();
    assert!(m.read(0x11fe, &mut buf).is_err());
}

#[test]
fn region_is_shareable_across_threads() {
    let m = Arc::new(RegionMemory::new());
    let a = m.alloc(4096, 4096).unwrap();
    let dev = {
        let m = m.clone();
        std::thread::spawn(move || {
            for i in 0..512u64 {
                m.write_u64_be(a + i * 8, i).unwrap();
            }
        })
    };
    dev.join().unwrap();
    for i in 0..512u64 {
        assert_eq!(m.read_u64_be(a + i * 8).unwrap(), i);
    }
}

/// A region freed (or added) on another thread is seen by the next access on this one, though
/// this thread cached a snapshot of the list from before: every change publishes a new version.
#[test]
fn region_changes_on_another_thread_are_seen_at_once() {
    let m = Arc::new(RegionMemory::new());
    let a = m.alloc(4096, 4096).unwrap();
    m.write(a, &[5; 16]).unwrap(); // caches this version's snapshot here
    let m2 = m.clone();
    std::thread::spawn(move || assert!(m2.free(a)))
        .join()
        .unwrap();
    let mut b = [0u8; 1];
    assert_eq!(m.read(a, &mut b), Err(DmaError { addr: a, len: 1 }));
    assert!(m.write(a, &[1]).is_err());
    assert!(m.check(a, 1).is_err());
    assert!(m.copy(a, a + 8, 1).is_err());
    // Added elsewhere: usable here at once.
    let m2 = m.clone();
    let c = std::thread::spawn(move || m2.alloc(64, 64).unwrap())
        .join()
        .unwrap();
    m.write(c, &[7; 64]).unwrap();
    m.read(c + 63, &mut b).unwrap();
    assert_eq!(b, [7]);
}

/// Two memories used in turn on one thread (and a third dropped while this thread still caches
/// its snapshot) never answer for each other, even at the same bus addresses.
#[test]
fn region_snapshots_are_per_memory() {
    let (m1, m2, m3) = (
        RegionMemory::new(),
        RegionMemory::new(),
        RegionMemory::new(),
    );
    let a1 = m1.alloc(4096, 4096).unwrap();
    let a2 = m2.alloc(4096, 4096).unwrap();
    assert_eq!(a1, a2); // same bump allocator start
    m1.write(a1, &[1; 8]).unwrap();
    m2.write(a2, &[2; 8]).unwrap();
    let a3 = m3.alloc(8192, 4096).unwrap();
    m3.write(a3, &[3; 8]).unwrap();
    drop(m3);
    let mut b = [0u8; 1];
    for _ in 0..3 {
        m1.read(a1, &mut b).unwrap();
        assert_eq!(b, [1]);
        m2.read(a2, &mut b).unwrap();
        assert_eq!(b, [2]);
    }
    // m1's list changes; m2's snapshot stays valid and m1 sees the change.
    assert!(m1.free(a1));
    assert!(m1.read(a1, &mut b).is_err());
    m2.read(a2 + 7, &mut b).unwrap();
    assert_eq!(b, [2]);
    assert!(m2.check(a2 + 4096, 1).is_err());
}

/// Regions freed and allocated on one thread while others copy in and out of the ones that
/// stay: every access either succeeds with the right bytes or fails with a DMA error, and a
/// freed region's bytes are never reachable after `free` returned.
#[test]
fn region_accesses_race_frees_safely() {
    let m = Arc::new(RegionMemory::new());
    let keep = m.alloc(4096, 4096).unwrap();
    m.write(keep, &[0xab; 4096]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    m.read(keep, &mut buf).unwrap();
                    assert!(buf.iter().all(|&x| x == 0xab));
                }
            })
        })
        .collect();
    for i in 0..2000u32 {
        let a = m.alloc(4096, 64).unwrap();
        m.write(a, &i.to_be_bytes()).unwrap();
        assert_eq!(m.read_u32_be(a), Ok(i));
        assert!(m.free(a));
        assert!(m.read_u32_be(a).is_err());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(m.region_count(), 1);
}

fn tmpfile(len: u64) -> File {
    let path = std::env::temp_dir().join(format!(
        "mlx5-sim-mem-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    f.set_len(len).unwrap();
    f
}

fn section(f: &File, gpa: u64, size: u64, offset: u64) -> MemSection {
    MemSection {
        gpa,
        size,
        offset,
        fd: OwnedFd::from(f.try_clone().unwrap()),
    }
}

#[test]
fn mapped_piecewise_and_errors() {
    use std::os::unix::fs::FileExt;
    let mut f = tmpfile(0x4000);
    f.write_all(b"hello").unwrap();
    let m = MappedMemory::new();
    // Two adjacent sections mapping the file in reverse order, and a third with a gap.
    m.replace(vec![
        section(&f, 0x10_0000, 0x2000, 0x2000),
        section(&f, 0x10_2000, 0x1000, 0x0),
        section(&f, 0x20_0000, 0x800, 0x1800), // unaligned offset is fine
    ])
    .unwrap();
    assert_eq!(
        m.sections(),
        vec![(0x10_0000, 0x2000), (0x10_2000, 0x1000), (0x20_0000, 0x800)]
    );
    let mut b = [0u8; 5];
    m.read(0x10_2000, &mut b).unwrap();
    assert_eq!(&b, b"hello");
    // Crossing the boundary between the two adjacent sections.
    m.write(0x10_1ffe, &[1, 2, 3, 4]).unwrap();
    let mut fb = [0u8; 2];
    f.read_exact_at(&mut fb, 0x3ffe).unwrap();
    assert_eq!(fb, [1, 2]);
    f.read_exact_at(&mut fb, 0x0).unwrap();
    assert_eq!(fb, [3, 4]);
    // Unaligned offset section.
    f.write_all_at(&[7, 7, 7], 0x1800).unwrap();
    m.read(0x20_0000, &mut b[..3]).unwrap();
    assert_eq!(&b[..3], &[7, 7, 7]);
    // Past the end of the adjacent pair, and across the gap.
    assert!(m.read(0x10_2ffe, &mut b).is_err());
    assert!(m.read(0x20_07fe, &mut b).is_err());
    assert!(m.read(0xf_fffe, &mut b).is_err());

    // A section past the end of the file is refused (it would SIGBUS), leaving nothing mapped.
    assert!(m.replace(vec![section(&f, 0, 0x8000, 0)]).is_err());
    assert!(m.sections().is_empty());
    assert!(m.read(0x10_2000, &mut b).is_err());
    // Overlapping sections are refused.
    assert!(m
        .replace(vec![
            section(&f, 0, 0x2000, 0),
            section(&f, 0x1000, 0x1000, 0)
        ])
        .is_err());
    m.clear();
}

/// Only `read`/`write`: exercises the trait's default `check` and `copy`.
struct Bounce(RegionMemory);

impl GuestMemory for Bounce {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.0.read(addr, buf)
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        self.0.write(addr, buf)
    }
}

/// Three adjacent regions of odd sizes at 0x1000 (one bus-contiguous range of 0x301 bytes
/// made of three pieces), then a gap, then a fourth region.
fn three_pieces() -> RegionMemory {
    let m = RegionMemory::with_base(0x10_0000);
    let pattern = |n: usize, k: u8| {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(7) ^ k)
            .collect::<Vec<_>>()
    };
    m.insert(0x1000, &pattern(0x101, 1)).unwrap();
    m.insert(0x1101, &pattern(0xff, 2)).unwrap();
    m.insert(0x1200, &pattern(0x101, 3)).unwrap();
    m.insert(0x2000, &pattern(0x40, 4)).unwrap();
    m
}

fn snapshot(m: &dyn GuestMemory) -> Vec<u8> {
    let mut v = vec![0u8; 0x301];
    m.read(0x1000, &mut v).unwrap();
    v
}

/// A byte-by-byte reference: every byte of 0x1000..0x2100 either present or not, an access
/// failing before any byte moves if one of its bytes is not.
struct Bytes(std::sync::Mutex<Vec<Option<u8>>>);

impl Bytes {
    const BASE: u64 = 0x1000;
    fn of(m: &RegionMemory) -> Bytes {
        let v = (Self::BASE..0x2100)
            .map(|a| {
                let mut b = [0u8];
                m.read(a, &mut b).ok().map(|_| b[0])
            })
            .collect();
        Bytes(std::sync::Mutex::new(v))
    }
    fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, DmaError> {
        let err = DmaError { addr, len };
        let v = self.0.lock().unwrap();
        let at = addr.checked_sub(Self::BASE).ok_or(err)? as usize;
        let r = at..at + len;
        match v.get(r.clone()) {
            Some(s) if s.iter().all(Option::is_some) => Ok(r),
            _ => Err(err),
        }
    }
}

impl GuestMemory for Bytes {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        let r = self.range(addr, buf.len())?;
        let v = self.0.lock().unwrap();
        for (d, s) in buf.iter_mut().zip(&v[r]) {
            *d = s.unwrap();
        }
        Ok(())
    }
    fn write(&self, addr: u64, buf: &[u8]) -> Result<(), DmaError> {
        let r = self.range(addr, buf.len())?;
        let mut v = self.0.lock().unwrap();
        for (d, s) in v[r].iter_mut().zip(buf) {
            *d = Some(*s);
        }
        Ok(())
    }
}

/// Accesses that end exactly at a piece's end, start exactly at the next piece, or run one
/// byte past it, and `write_parts` whose next part leaves the previous part's piece, give
/// the bytes and errors of a byte-by-byte reference (single-piece accesses take a shorter
/// path than those across pieces).
#[test]
fn piece_edges_match_a_byte_by_byte_reference() {
    let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
    for (addr, len) in [
        (0x1000, 0x101),
        (0x10f0, 0x11),
        (0x10f0, 0x12),
        (0x1101, 0xff),
        (0x1101, 0x100),
        (0x12f0, 0x11),
        (0x12f0, 0x12),
        (0x1301, 1),
        (0xfff, 2),
        (0x1fff, 2),
        (0x2000, 0x40),
        (0x2000, 0x41),
        (0x203f, 1),
    ] {
        let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
        assert_eq!(
            m.read(addr, &mut x),
            b.read(addr, &mut y),
            "read {addr:#x}+{len:#x}"
        );
        assert_eq!(x, y, "read {addr:#x}+{len:#x}");
        let w: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        assert_eq!(
            m.write(addr, &w),
            b.write(addr, &w),
            "write {addr:#x}+{len:#x}"
        );
        assert_eq!(snapshot(&m), snapshot(&b), "write {addr:#x}+{len:#x}");
    }
    let parts: [(u64, &[u8]); 6] = [
        (0x10c0, &[1; 0x3f]),
        (0x10ff, &[2; 1]),
        (0x1100, &[3; 4]),
        (0x1101, &[4; 0]),
        (0x1180, &[5; 0x80]),
        (0x1190, &[6; 2]),
    ];
    let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
    m.write_parts(&parts).unwrap();
    b.write_parts(&parts).unwrap();
    assert_eq!(snapshot(&m), snapshot(&b));
    let bad: [(u64, &[u8]); 3] = [(0x2010, &[6; 8]), (0x2038, &[7; 9]), (0x2000, &[8; 1])];
    let (m, b) = (three_pieces(), Bytes::of(&three_pieces()));
    assert_eq!(
        m.write_parts(&bad),
        Err(DmaError {
            addr: 0x2038,
            len: 9
        })
    );
    assert_eq!(b.write_parts(&bad), m.write_parts(&bad));
    let (mut x, mut y) = ([0u8; 0x40], [0u8; 0x40]);
    m.read(0x2000, &mut x).unwrap();
    b.read(0x2000, &mut y).unwrap();
    assert_eq!(x, y);
}

#[test]
fn copy_is_memmove_across_pieces_in_both_directions() {
    // Every (src, dst, len) on a grid, against memmove on a flat copy, for the native
    // RegionMemory copy and the trait's bounce default.
    let offsets = [
        0u64, 1, 0xfe, 0x100, 0x101, 0x150, 0x1ff, 0x200, 0x201, 0x280,
    ];
    let lens = [1usize, 2, 0x10, 0x100, 0x102, 0x180];
    for native in [true, false] {
        for &so in &offsets {
            for &do_ in &offsets {
                for &len in &lens {
                    if so + len as u64 > 0x301 || do_ + len as u64 > 0x301 {
                        continue;
                    }
                    let m: Box<dyn GuestMemory> = if native {
                        Box::new(three_pieces())
                    } else {
                        Box::new(Bounce(three_pieces()))
                    };
                    let mut want = snapshot(&*m);
                    want.copy_within(so as usize..so as usize + len, do_ as usize);
                    m.copy(0x1000 + so, 0x1000 + do_, len).unwrap();
                    assert_eq!(
                        snapshot(&*m),
                        want,
                        "src +{so:#x} dst +{do_:#x} len {len:#x}"
                    );
                }
            }
        }
    }
}

#[test]
fn copy_checks_both_ranges_before_moving() {
    for native in [true, false] {
        let m: Box<dyn GuestMemory> = if native {
            Box::new(three_pieces())
        } else {
            Box::new(Bounce(three_pieces()))
        };
        let before = snapshot(&*m);
        // Source runs into the gap after 0x1301: names the source, nothing written.
        assert_eq!(
            m.copy(0x12f0, 0x1000, 0x20),
            Err(DmaError {
                addr: 0x12f0,
                len: 0x20
            })
        );
        // Destination runs into the gap: names the destination, nothing written.
        assert_eq!(
            m.copy(0x1000, 0x12f0, 0x20),
            Err(DmaError {
                addr: 0x12f0,
                len: 0x20
            })
        );
        // Both bad: the source is named.
        assert_eq!(
            m.copy(0x3000, 0x4000, 8),
            Err(DmaError {
                addr: 0x3000,
                len: 8
            })
        );
        // Wrapping ranges fail instead of overflowing.
        assert!(m.copy(u64::MAX - 3, 0x1000, 8).is_err());
        assert!(m.copy(0x1000, u64::MAX - 3, 8).is_err());
        assert_eq!(snapshot(&*m), before);
        // check() agrees with the maps, and zero-length is always fine.
        assert!(m.check(0x1000, 0x301).is_ok());
        assert_eq!(
            m.check(0x1000, 0x302),
            Err(DmaError {
                addr: 0x1000,
                len: 0x302
            })
        );
        assert!(m.check(0xdead, 0).is_ok());
        assert!(m.copy(0xdead, 0xbeef, 0).is_ok());
        // Across the gap into the fourth region is refused; inside it is fine.
        assert!(m.copy(0x2000, 0x1300, 2).is_err());
        assert!(m.copy(0x2000, 0x2010, 0x30).is_ok());
    }
}

/// Issue 7 (hostile input 2): a file truncated after it was mapped used to kill the
/// process with SIGBUS on the next access. The fault is now caught: the access fails with
/// a DmaError, the memory reports itself poisoned, and the process lives on.
#[test]
fn truncated_file_is_a_dma_error_not_sigbus() {
    let f = tmpfile(0x4000);
    let m = MappedMemory::new();
    m.replace(vec![section(&f, 0x10_0000, 0x4000, 0)]).unwrap();
    m.write(0x10_0000, &[0x5a; 16]).unwrap();
    assert!(!m.poisoned());
    let caught = sigbus::caught();
    f.set_len(0x1000).unwrap(); // the peer shrinks its memfd under us
                                // The first page is still backed: fine.
    let mut b = [0u8; 16];
    m.read(0x10_0000, &mut b).unwrap();
    assert_eq!(b, [0x5a; 16]);
    // Past the new end: read, write and copy fail instead of raising SIGBUS.
    assert_eq!(
        m.read(0x10_2000, &mut b),
        Err(DmaError {
            addr: 0x10_2000,
            len: 16
        })
    );
    assert!(sigbus::caught() > caught);
    assert!(m.poisoned());
    assert!(m.write(0x10_3000, &[1; 8]).is_err());
    assert!(m.copy(0x10_0000, 0x10_3800, 8).is_err());
    // Every access to the poisoned mapping fails now, even to the page that is backed.
    assert!(m.read(0x10_0000, &mut b).is_err());
    // A new SYNC_SYSMEM starts clean.
    m.replace(vec![section(&f, 0x20_0000, 0x1000, 0)]).unwrap();
    assert!(!m.poisoned());
    m.read(0x20_0000, &mut b).unwrap();
    assert_eq!(b, [0x5a; 16]);
    m.clear();
}

#[test]
fn mapped_copy_between_sections() {
    use std::os::unix::fs::FileExt;
    let f = tmpfile(0x3000);
    let bytes: Vec<u8> = (0..0x3000u32).map(|i| (i % 251) as u8).collect();
    f.write_all_at(&bytes, 0).unwrap();
    let m = MappedMemory::new();
    // gpa 0x10_0000.. maps file 0x1000..0x3000, gpa 0x10_2000.. maps file 0..0x1000.
    m.replace(vec![
        section(&f, 0x10_0000, 0x2000, 0x1000),
        section(&f, 0x10_2000, 0x1000, 0x0),
    ])
    .unwrap();
    let read_all = |m: &MappedMemory| {
        let mut v = vec![0u8; 0x3000];
        m.read(0x10_0000, &mut v).unwrap();
        v
    };
    let mut want = read_all(&m);
    // Overlapping, backwards, across the section boundary.
    want.copy_within(0x1f00..0x2100, 0x1f80);
    m.copy(0x10_1f00, 0x10_1f80, 0x200).unwrap();
    assert_eq!(read_all(&m), want);
    // Overlapping, forwards.
    want.copy_within(0x1f80..0x2180, 0x1f00);
    m.copy(0x10_1f80, 0x10_1f00, 0x200).unwrap();
    assert_eq!(read_all(&m), want);
    // Past the end: refused, nothing moved.
    assert!(m.copy(0x10_0000, 0x10_2f00, 0x200).is_err());
    assert_eq!(read_all(&m), want);
    m.clear();
    assert!(m.copy(0x10_0000, 0x10_0100, 1).is_err());
}

/// A [`ViewSlot`] reads and writes the bytes the memory's own path does, keeps working across
/// a change of the memory's version that leaves its region in place, and fails exactly as the
/// memory's own path once its region is freed (the error names the access).
#[test]
fn view_slot_accesses_match_the_memory_and_fail_after_free() {
    let mem = RegionMemory::new();
    let a = mem.alloc(4096, 4096).unwrap();
    mem.write(a + 8, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let mut v = ViewSlot::default();
    let mut b = [0u8; 8];
    v.read(&mem, a + 8, &mut b).unwrap(); // resolves the view
    assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    v.write_split(&mem, a + 100, &[9u8; 7], 0xaa).unwrap();
    let mut w = [0u8; 8];
    mem.read(a + 100, &mut w).unwrap();
    assert_eq!(w, [9, 9, 9, 9, 9, 9, 9, 0xaa]);
    // Past the region's end: the memory's error, through the view as without it.
    let mut big = [0u8; 16];
    assert_eq!(
        v.read(&mem, a + 4090, &mut big),
        Err(DmaError {
            addr: a + 4090,
            len: 16
        })
    );
    // Another region: the version changes, the view is resolved again and still reads.
    let other = mem.alloc(4096, 4096).unwrap();
    v.read(&mem, a + 8, &mut b).unwrap();
    assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    // Freed: every access fails as the memory's own does.
    assert!(mem.free(a));
    assert_eq!(
        mem.read(a + 8, &mut b),
        Err(DmaError {
            addr: a + 8,
            len: 8
        })
    );
    assert_eq!(
        v.read(&mem, a + 8, &mut b),
        Err(DmaError {
            addr: a + 8,
            len: 8
        })
    );
    assert!(v.write_split(&mem, a + 100, &[9u8; 7], 0xaa).is_err());
    assert!(v
        .write_parts(&mem, &[(a, &[1u8][..]), (a + 1, &[2u8][..])])
        .is_err());
    // The other region is untouched and still reachable through the slot.
    v.read(&mem, other, &mut b).unwrap();
    assert_eq!(b, [0; 8]);
}

/// A memory without views ([`MappedMemory`], [`NoMemory`]) takes its own path every time.
#[test]
fn view_slot_over_memory_without_views_uses_its_own_path() {
    let mut v = ViewSlot::default();
    let mut b = [0u8; 4];
    assert_eq!(
        v.read(&NoMemory, 0x1000, &mut b),
        Err(DmaError {
            addr: 0x1000,
            len: 4
        })
    );
    assert!(NoMemory.view(0x1000).is_none());
}

/// A [`RingWindow`] serves exactly the buffer bytes that lie contiguous in bus space and in
/// one region around the access it was resolved at: a range crossing into a page elsewhere,
/// into another region (even one adjacent in bus space), or below the stretch is refused
/// (the caller then takes the ordinary path); it reads and writes what the memory holds there;
/// and it refuses everything once the memory changes (a region freed or added) until resolved
/// again, and nothing once its region is gone.
#[test]
fn ring_window_serves_only_its_contiguous_stretch_of_one_region() {
    use crate::objects::mr::PagedBuffer;
    let mem = RegionMemory::with_base(0x10_0000);
    // Pages 0 and 1: one region of two pages at 0x20000; page 2 a region adjacent to it
    // (0x22000, contiguous in bus space but another region); page 3 elsewhere (0x40000).
    let mut fill = vec![0u8; 0x2000];
    for (i, b) in fill.iter_mut().enumerate() {
        *b = i as u8;
    }
    mem.insert(0x20000, &fill).unwrap();
    mem.insert(0x22000, &[0xcc; 0x1000]).unwrap();
    mem.insert(0x40000, &[0xdd; 0x1000]).unwrap();
    let pas: Vec<u8> = [0x20000u64, 0x21000, 0x22000, 0x40000]
        .iter()
        .flat_map(|p| p.to_be_bytes())
        .collect();
    // `page_offset` 1: the buffer starts 64 bytes into page 0.
    let buf = PagedBuffer::new(&pas, 0, 1, 4 * 0x1000 - 64).unwrap();
    assert_eq!(buf.contiguous_at(0), Some((0, 3 * 0x1000 - 64, 0x20040)));
    assert_eq!(
        buf.contiguous_at(3 * 0x1000 - 64),
        Some((3 * 0x1000 - 64, 4 * 0x1000 - 64, 0x40000))
    );
    assert_eq!(buf.contiguous_at(4 * 0x1000 - 64), None);

    let mut w = RingWindow::default();
    let mut b = [0u8; 16];
    assert!(!w.read(mem.version(), 0, &mut b), "not resolved yet");
    w.refresh(&mem, &buf, 100);
    // Across the page boundary inside the first region: served, the memory's bytes.
    let at = 0x1000 - 64 - 8;
    assert!(w.read(mem.version(), at, &mut b));
    let mut want = [0u8; 16];
    mem.read(0x20000 + 64 + at, &mut want).unwrap();
    assert_eq!(b, want);
    // Into the adjacent region (page 2): refused, and so is anything past it.
    let end = 0x2000 - 64;
    assert!(w.read(mem.version(), end - 16, &mut b));
    assert!(!w.read(mem.version(), end - 8, &mut b));
    assert!(!w.read(mem.version(), end, &mut b));
    assert!(!w.read(mem.version(), 3 * 0x1000 - 64, &mut b));
    // Below the stretch (wraps past its length): refused.
    assert!(!w.read(mem.version(), u64::MAX - 4, &mut b));
    // A write lands where the memory's own path puts it: body first, then the last byte.
    assert!(w.write_split(mem.version(), 200, &[7u8; 15], 0xee));
    let mut got = [0u8; 16];
    mem.read(0x20000 + 64 + 200, &mut got).unwrap();
    assert_eq!(got, [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 0xee]);
    // Resolved in page 3: only page 3.
    w.refresh(&mem, &buf, 3 * 0x1000 - 64 + 8);
    assert!(w.read(mem.version(), 3 * 0x1000 - 64, &mut b));
    assert_eq!(b, [0xdd; 16]);
    assert!(!w.read(mem.version(), 100, &mut b));
    // Another region added: the memory's version changed, the window refuses until resolved
    // again.
    w.refresh(&mem, &buf, 100);
    assert!(w.read(mem.version(), 100, &mut b));
    mem.insert(0x50000, &[0u8; 64]).unwrap();
    assert!(!w.read(mem.version(), 100, &mut b));
    assert!(!w.write_split(mem.version(), 100, &[1u8; 15], 1));
    w.refresh(&mem, &buf, 100);
    assert!(w.read(mem.version(), 100, &mut b));
    // The region freed: refused, and resolving again finds nothing.
    assert!(mem.free(0x20000));
    assert!(!w.read(mem.version(), 100, &mut b));
    w.refresh(&mem, &buf, 100);
    assert!(!w.read(mem.version(), 100, &mut b));
    assert!(!w.write_split(mem.version(), 100, &[1u8; 15], 1));
    // Cleared: refused.
    w.refresh(&mem, &buf, 3 * 0x1000 - 64);
    assert!(w.read(mem.version(), 3 * 0x1000 - 64, &mut b));
    w.clear();
    assert!(!w.read(mem.version(), 3 * 0x1000 - 64, &mut b));
}

/// [`ViewSlot::read_at`] with the memory's version read once ([`GuestMemory::version`]):
/// the version is the one `view_current` compares (equal exactly while nothing changed), a
/// read at the current version goes through the view, one at any other version (a stale
/// reading, or 0: no views) takes the memory's own path with the same outcome, and after the
/// region is freed the current version's read fails as the memory's own does.
#[test]
fn view_slot_read_at_one_version_reading_matches_the_memory() {
    let region = RegionMemory::new();
    let mem: &dyn GuestMemory = &region;
    let a = region.alloc(4096, 4096).unwrap();
    mem.write(a + 8, &[1, 2, 3, 4]).unwrap();
    let mut v = ViewSlot::default();
    let mut b = [0u8; 4];
    let v0 = mem.version();
    assert_ne!(v0, 0);
    v.read_at(v0, &mem, a + 8, &mut b).unwrap(); // resolves the view
    assert_eq!(b, [1, 2, 3, 4]);
    let view = mem.view(a).unwrap();
    assert!(mem.view_current(&view) && view.version == mem.version());
    mem.write(a + 8, &[5, 6, 7, 8]).unwrap();
    v.read_at(v0, &mem, a + 8, &mut b).unwrap();
    assert_eq!(b, [5, 6, 7, 8]);
    // Another region: the version moves; views of the old one are no longer current.
    let other = region.alloc(4096, 4096).unwrap();
    let v1 = mem.version();
    assert_ne!(v1, v0);
    assert!(!mem.view_current(&view));
    for now in [0, v0, v1] {
        b = [0; 4];
        v.read_at(now, &mem, a + 8, &mut b).unwrap();
        assert_eq!(b, [5, 6, 7, 8], "now {now}");
    }
    // Freed: the current reading fails as the memory's own read does.
    assert!(region.free(a));
    let err = mem.read(a + 8, &mut b);
    assert!(err.is_err());
    assert_eq!(v.read_at(mem.version(), &mem, a + 8, &mut b), err);
    v.read_at(mem.version(), &mem, other, &mut b).unwrap();
    assert_eq!(b, [0; 4]);
    // A memory without views: version 0, every read its own path.
    assert_eq!(NoMemory.version(), 0);
    let none: &dyn GuestMemory = &NoMemory;
    assert!(v.read_at(0, &none, 0x1000, &mut b).is_err());
}
