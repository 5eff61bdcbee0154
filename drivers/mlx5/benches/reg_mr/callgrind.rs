//! `--instructions` and its child runs `--callgrind`: instructions per small registration,
//! counted by callgrind (the `reg_mr` bench's instruction table; docs/benchmarks.md,
//! "Registration: instructions per MR"), and per page of a large region of scattered 4 KiB
//! pages.

use super::common::*;
use mlx5::mr::PhysChunk;
use mlx5::{AccessFlags, Context, DmaBuffer, Hal, ProtectionDomain};

/// What `--callgrind` measures: `--path=<one of these>`.
const PATHS: [(&str, &str, &str); 6] = [
    ("cmd-reg", "measure_reg", "commands: reg (CREATE_MKEY)"),
    (
        "cache-reg",
        "measure_reg",
        "UMR cache: reg (1 UMR WQE + CQE)",
    ),
    (
        "cmd-batch",
        "measure_batch",
        "commands batched: reg_mr_batch",
    ),
    (
        "cache-batch",
        "measure_batch",
        "UMR cache batched: reg_mr_batch",
    ),
    (
        "cmd-dereg",
        "measure_dereg",
        "commands: dereg (DESTROY_MKEY)",
    ),
    (
        "cache-dereg",
        "measure_dereg",
        "UMR cache: dereg (revoking UMR)",
    ),
];

/// Registers every region one by one (the measured function of `--callgrind`).
#[inline(never)]
fn measure_reg(
    pd: &ProtectionDomain<TestHal>,
    regions: &[(&[PhysChunk], u64, AccessFlags)],
) -> Vec<mlx5::MemoryRegion<TestHal>> {
    let mut mrs = Vec::with_capacity(regions.len());
    for r in regions {
        // SAFETY: the caller's backing outlives the regions.
        mrs.push(unsafe { pd.reg_phys(r.0, r.1, r.2) }.expect("reg"));
    }
    mrs
}

/// `reg_mr_batch` of every region (the measured function of `--callgrind`).
#[inline(never)]
fn measure_batch(
    pd: &ProtectionDomain<TestHal>,
    regions: &[(&[PhysChunk], u64, AccessFlags)],
) -> Vec<mlx5::MemoryRegion<TestHal>> {
    // SAFETY: the caller's backing outlives the regions.
    let v = unsafe { pd.reg_mr_batch(regions) };
    v.into_iter().map(|r| r.expect("batched reg")).collect()
}

/// Deregisters every region (the measured function of `--callgrind`).
#[inline(never)]
fn measure_dereg(mrs: Vec<mlx5::MemoryRegion<TestHal>>) {
    for mut m in mrs {
        m.dereg().expect("dereg");
    }
}

/// One `--callgrind --n=N --path=P` run: N regions of 4 KiB (one MTT entry each, as every
/// small size of the table) through the measured function of `P`, after a warm-up that
/// registers and deregisters [`WARM`] regions, so that every key of the cache's pool has been
/// used once (and holds its parked region object) whatever N is. Without that, the smaller
/// run drew keys still cold and paid allocations the larger did not, which made the
/// marginal count look cheaper than the steady state.
pub(crate) fn callgrind_child() {
    if let Some(p) = std::env::args().find_map(|a| {
        a.strip_prefix("--path=")
            .filter(|p| p.starts_with("large-"))
            .map(str::to_string)
    }) {
        large_child(&p);
        return;
    }
    /// Keys per size class of the cache, and the warm-up's region count.
    const WARM: usize = 248;
    let n: usize = std::env::args()
        .find_map(|a| a.strip_prefix("--n=").and_then(|v| v.parse().ok()))
        .unwrap_or(124);
    let path = std::env::args()
        .find_map(|a| a.strip_prefix("--path=").map(str::to_string))
        .unwrap_or_default();
    let cache = path.starts_with("cache");
    let hal = TestHal(SimHal::new());
    let ctx = Context::open(hal.clone(), test_config()).expect("bring-up");
    if cache {
        ctx.enable_mkey_cache(WARM).expect("cache");
    }
    let pd = ctx.alloc_pd().expect("pd");
    let backing = hal.dma_alloc(4096 * n.max(WARM), 4096).expect("backing");
    let chunks: Vec<[PhysChunk; 1]> = (0..n.max(WARM))
        .map(|i| {
            [PhysChunk {
                bus: backing.bus_addr() + (i * 4096) as u64,
                len: 4096,
            }]
        })
        .collect();
    let regions: Vec<(&[PhysChunk], u64, AccessFlags)> = chunks
        .iter()
        .map(|c| (&c[..], c[0].bus, AccessFlags::ALL))
        .collect();
    let c0 = ctx.commands_sent();
    for round in 0..2 {
        let measured = round == 1;
        let regions = if measured {
            &regions[..n]
        } else {
            &regions[..]
        };
        let mrs = if path.ends_with("batch") && measured {
            measure_batch(&pd, regions)
        } else if path.ends_with("reg") && !path.ends_with("dereg") && measured {
            measure_reg(&pd, regions)
        } else {
            regions
                .iter()
                // SAFETY: `backing` outlives the regions.
                .map(|r| unsafe { pd.reg_phys(r.0, r.1, r.2) }.expect("reg"))
                .collect()
        };
        if path.ends_with("dereg") && measured {
            measure_dereg(mrs);
        } else {
            for mut m in mrs {
                m.dereg().expect("dereg");
            }
        }
    }
    if cache {
        assert_eq!(
            ctx.commands_sent(),
            c0,
            "cached registrations send no command"
        );
    }
    drop(pd);
    let _ = ctx.close();
}

/// Registers one large region (the measured function of `--callgrind --path=large-*`).
#[inline(never)]
fn measure_large(
    pd: &ProtectionDomain<TestHal>,
    chunks: &[PhysChunk],
    iova: u64,
) -> mlx5::MemoryRegion<TestHal> {
    // SAFETY: the caller's backing outlives the region.
    unsafe { pd.reg_phys(chunks, iova, AccessFlags::ALL) }.expect("large reg")
}

/// One `--callgrind --path=large-<MiB>[-unaligned]` run: the bench's region of that many
/// MiB of 4 KiB pages (reversed, so that no two pages are adjacent; unaligned: 0x123 bytes
/// into the first page, 0x456 short of the last page's end), registered once unmeasured
/// (warms the mailboxes and the allocator, as the bench's repetitions are), deregistered,
/// then once through [`measure_large`].
fn large_child(path: &str) {
    let rest = path.trim_start_matches("large-");
    let unaligned = rest.ends_with("-unaligned");
    let mib: usize = rest
        .trim_end_matches("-unaligned")
        .parse()
        .expect("--path=large-<MiB>");
    let size = mib << 20;
    let hal = TestHal(SimHal::new());
    let ctx = Context::open(hal.clone(), test_config()).expect("bring-up");
    let pd = ctx.alloc_pd().expect("pd");
    let backing = hal.dma_alloc(size, size).expect("backing");
    let base = backing.bus_addr();
    let mut chunks: Vec<PhysChunk> = (0..size / 4096)
        .rev()
        .map(|i| PhysChunk {
            bus: base + (i * 4096) as u64,
            len: 4096,
        })
        .collect();
    if unaligned {
        chunks[0].bus += 0x123;
        chunks[0].len -= 0x123;
        let l = chunks.len() - 1;
        chunks[l].len -= 0x456;
    }
    let iova = 0x7f00_0000_0000 + (chunks[0].bus & 0xfff);
    for measured in [false, true] {
        let mut mr = if measured {
            measure_large(&pd, &chunks, iova)
        } else {
            // SAFETY: `backing` outlives the region.
            unsafe { pd.reg_phys(&chunks, iova, AccessFlags::ALL) }.expect("large reg")
        };
        mr.dereg().expect("dereg");
    }
    drop(pd);
    let _ = ctx.close();
}

/// The large-region table of `--instructions`: one registration of each region of
/// [`large_child`] (scattered 4 KiB pages) counted whole, per page.
fn large_counts(collected: &dyn Fn(&str, u32, &str) -> Option<u64>) {
    println!("| region (scattered 4 KiB pages, driver + model) | Ir of one reg_mr | instructions per page |");
    println!("|---|---:|---:|");
    for (path, what, pages) in [
        ("large-64", "64 MiB", 16384u64),
        ("large-1024", "1 GiB", 262_144),
        ("large-1024-unaligned", "1 GiB, unaligned", 262_144),
    ] {
        match collected("measure_large", 0, path) {
            Some(ir) => println!("| {what} | {ir} | {:.1} |", ir as f64 / pages as f64),
            None => println!("| {what} | SKIPPED: callgrind run failed | |"),
        }
    }
    println!();
}

/// `--instructions`: runs this binary under `valgrind --tool=callgrind` for each path of
/// [`PATHS`], as
///
/// ```text
/// valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect='*<fn>*' \
///     target/release/deps/reg_mr-<hash> --callgrind --n=<n> --path=<path>
/// ```
/// with `<n>` 124 and 248, and prints `(Ir(248) - Ir(124)) / 124`: the marginal instructions
/// of one registration or deregistration, driver and in-process model together (fixed costs
/// cancel out). First, the large regions' table ([`large_counts`]: `--path=large-*`, one
/// registration counted whole).
pub(crate) fn instruction_counts() {
    let exe = std::env::current_exe().expect("own path");
    let probe = std::process::Command::new("valgrind")
        .arg("--version")
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: instruction counts, because valgrind is not installed");
        return;
    }
    let collected = |f: &str, n: u32, path: &str| -> Option<u64> {
        let out = std::process::Command::new("valgrind")
            .args([
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                &format!("--toggle-collect=*{f}*"),
            ])
            .arg(&exe)
            .args([
                "--callgrind",
                &format!("--n={n}"),
                &format!("--path={path}"),
            ])
            .output()
            .ok()?;
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.contains("Collected :"))?;
        line.rsplit(':').next()?.trim().parse().ok()
    };
    large_counts(&collected);
    println!(
        "| path (4 KiB MRs, driver + model) | Ir (n=124) | Ir (n=248) | instructions per MR |"
    );
    println!("|---|---:|---:|---:|");
    for (path, f, what) in PATHS {
        match (collected(f, 124, path), collected(f, 248, path)) {
            (Some(a), Some(b)) => println!(
                "| {what} | {a} | {b} | {:.0} |",
                (b as f64 - a as f64) / 124.0
            ),
            _ => println!("| {what} | SKIPPED: callgrind run failed | | |"),
        }
    }
}
