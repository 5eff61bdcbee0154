//! The unikernel's `rdma` application as a Linux program over VFIO: the same checks
//! (`rdma-checks`) with the same verbs code, on a ConnectX function bound to vfio-pci.
//!
//! ```text
//! rdma [--iova-mode alloc|pa] [--hugepages N] [--cmd-timeout-ms N] [--quick] BDF
//! cargo run -p mlx5-vfio --example rdma -- 0000:3b:00.0
//! ```
//!
//! Brings the function up, maps N 2 MiB pages of hugetlbfs memory (default: every free huge
//! page but a few for the driver, at most 1 GiB), pins them with VFIO_IOMMU_MAP_DMA (timed on
//! its own) and registers them with one command (timed too), runs loopback RC traffic for every
//! opcode checking every byte, the error cases and the perftest-style table, and tears the
//! function down with every firmware page reclaimed. Exits 0 only if every check passed.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::os::fd::AsRawFd;
use std::process::ExitCode;
use std::ptr;
use std::time::{Duration, Instant};

use mlx5::cmd::CmdTimeouts;
use mlx5::mr::PhysChunk;
use mlx5::{Context, ContextConfig};
use mlx5_vfio::{IovaMode, PinnedMemory, VfioHal, HUGE_PAGE};
use rdma_checks::{BigMemory, Console};

const USAGE: &str =
    "usage: rdma [--iova-mode alloc|pa] [--hugepages N] [--cmd-timeout-ms N] [--quick] BDF";
/// Huge pages left to the driver's own DMA arenas when `--hugepages` is not given.
const DRIVER_RESERVE: usize = 8;
/// The big region is at most 1 GiB, as in the unikernel.
const MAX_PAGES: usize = 512;

struct Args {
    bdf: String,
    iova: IovaMode,
    hugepages: Option<usize>,
    cmd_timeout: Option<Duration>,
    quick: bool,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        bdf: String::new(),
        iova: IovaMode::Allocated,
        hugepages: None,
        cmd_timeout: None,
        quick: false,
    };
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--iova-mode" => a.iova = value("--iova-mode")?.parse().map_err(|e| format!("{e}"))?,
            "--hugepages" => {
                let v = value("--hugepages")?;
                let n = v
                    .parse()
                    .map_err(|_| format!("--hugepages: not a number: {v}"))?;
                if n == 0 {
                    return Err("--hugepages must be at least 1".into());
                }
                a.hugepages = Some(n);
            }
            "--cmd-timeout-ms" => {
                let v = value("--cmd-timeout-ms")?;
                let ms = v
                    .parse()
                    .map_err(|_| format!("--cmd-timeout-ms: not a number: {v}"))?;
                a.cmd_timeout = Some(Duration::from_millis(ms));
            }
            "--quick" => a.quick = true,
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            s if a.bdf.is_empty() => a.bdf = s.to_string(),
            s => return Err(format!("unexpected argument {s}")),
        }
    }
    if a.bdf.is_empty() {
        return Err("no PCI address given".into());
    }
    Ok(a)
}

/// stdout and `Instant`.
struct Stdout(Instant);

impl Console for Stdout {
    fn print(&self, line: fmt::Arguments<'_>) {
        println!("{line}");
    }
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A shared mapping of a hugetlbfs file (unlinked once mapped), unmapped on drop.
struct HugeMap {
    ptr: *mut u8,
    len: usize,
}

impl Drop for HugeMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping mmap returned.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Where hugetlbfs is mounted (2 MiB pages), from /proc/mounts.
fn hugetlbfs_mount() -> Option<String> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 3 && f[2] == "hugetlbfs" && !f[3].contains("pagesize=1G"))
            .then(|| f[1].to_string())
    })
}

/// Free 2 MiB huge pages (/proc/meminfo HugePages_Free).
fn free_huge_pages() -> usize {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("HugePages_Free:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Maps `pages` huge pages of a new hugetlbfs file under `dir` (populated, so pagemap shows
/// them); the file is unlinked at once, the mapping keeps the pages.
fn map_hugetlbfs(dir: &str, pages: usize) -> Result<HugeMap, String> {
    let len = pages.checked_mul(HUGE_PAGE).ok_or("too many pages")?;
    let path = format!("{dir}/mlx5-vfio-rdma-{}", std::process::id());
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let _ = fs::remove_file(&path);
    // SAFETY: a shared mapping of our own new file, no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {pages} huge pages of {path}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(HugeMap {
        ptr: p as *mut u8,
        len,
    })
}

/// The big region: hugetlbfs memory pinned through VFIO.
struct Big {
    // Field order: the VFIO mappings go before the memory.
    pinned: PinnedMemory,
    map: HugeMap,
}

impl BigMemory for Big {
    fn chunks(&self) -> Vec<PhysChunk> {
        self.pinned.chunks().to_vec()
    }
    fn len(&self) -> usize {
        self.map.len
    }
    fn page_size(&self) -> u64 {
        HUGE_PAGE as u64
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset
            .checked_add(dst.len())
            .is_some_and(|end| end <= self.map.len));
        // SAFETY: inside our live mapping (asserted); the device's writes have completed.
        unsafe { ptr::copy_nonoverlapping(self.map.ptr.add(offset), dst.as_mut_ptr(), dst.len()) };
    }
}

/// Maps and pins the big region: `want` pages, or the most that can be had.
fn big_region(hal: &VfioHal, want: Option<usize>) -> Result<Big, String> {
    let dir = hugetlbfs_mount().ok_or("no hugetlbfs mount in /proc/mounts")?;
    let mut pages = match want {
        Some(n) => n,
        None => free_huge_pages()
            .saturating_sub(DRIVER_RESERVE)
            .clamp(1, MAX_PAGES),
    };
    let map = loop {
        match map_hugetlbfs(&dir, pages) {
            Ok(m) => break m,
            Err(e) if want.is_some() || pages == 1 => return Err(e),
            Err(_) => pages /= 2,
        }
    };
    let t = Instant::now();
    // SAFETY: `map` is a live, populated, huge-page-aligned mapping that `Big` keeps until
    // after the pinning is dropped.
    let pinned = unsafe { hal.pin(map.ptr, map.len) }.map_err(|e| format!("pin: {e}"))?;
    let took = t.elapsed();
    println!(
        "rdma: pinned {} MiB of hugetlbfs ({dir}, {pages} x 2 MiB) with {} VFIO_IOMMU_MAP_DMA in {} us",
        map.len >> 20,
        pinned.mappings(),
        took.as_micros()
    );
    Ok(Big { pinned, map })
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("rdma: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let con = Stdout(Instant::now());
    let hal = match VfioHal::open_with(format!("/sys/bus/pci/devices/{}", a.bdf), a.iova) {
        Ok(h) => h,
        Err(e) => {
            println!("rdma: {}: {e}", a.bdf);
            return ExitCode::from(2);
        }
    };
    let mut cfg = ContextConfig::default();
    if let Some(t) = a.cmd_timeout {
        cfg.cmd = CmdTimeouts {
            command: t,
            ..cfg.cmd
        };
    }
    println!("rdma: {} over VFIO, IOVA mode {:?}", a.bdf, a.iova);
    let t = Instant::now();
    let dev = match Context::open(hal, cfg) {
        Ok(d) => d,
        Err(e) => {
            println!("rdma: bring-up of {} failed: {e:?}", a.bdf);
            return ExitCode::from(3);
        }
    };
    rdma_checks::report_bring_up(&con, &dev, &a.bdf, t.elapsed());
    let big = match big_region(dev.hal(), a.hugepages) {
        Ok(b) => b,
        Err(e) => {
            println!("rdma: big region: {e}");
            if let Err(e) = dev.close() {
                println!("rdma: teardown failed: {:?}", e.error);
            }
            return ExitCode::from(1);
        }
    };
    let (_, failed) = rdma_checks::run(&con, dev, big, a.quick);
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
