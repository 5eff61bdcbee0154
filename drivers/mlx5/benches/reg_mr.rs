//! reg_mr cost, side by side with Linux page pinning, in one run.
//!
//! For 2 MiB, 64 MiB and 1 GiB:
//! - the driver's registration over the in-process emulated HCA (`reg_phys`): one naturally
//!   aligned contiguous buffer (what huge-page memory gives: one translation entry), the same
//!   memory as separate 2 MiB pages (one entry each), and as 4 KiB pages; commands sent, MTT
//!   entries, median time;
//! - Linux pinning of the same sizes through io_uring buffer registration
//!   (`IORING_REGISTER_BUFFERS`, which pins with `pin_user_pages` as `ibv_reg_mr` does), of
//!   anonymous memory touched first with 4 KiB pages (`MADV_NOHUGEPAGE`) and with 2 MiB huge
//!   pages (`MAP_HUGETLB`). As root the bench raises `/proc/sys/vm/nr_hugepages` for the run
//!   when too few huge pages are free and restores it afterwards.
//!
//! Also: 1 GiB of 4 KiB pages with an unaligned head and tail, a 64 GiB region of 1 GiB pages
//! (bus addresses the model never touches: registration reads no guest memory), and the
//! registration rate of 4 KiB, 64 KiB and 2 MiB regions: one CREATE_MKEY command each,
//! through the UMR mkey cache (one UMR WQE and one CQE, no command) and batched
//! (`reg_mr_batch`: up to 31 CREATE_MKEY in the command slots, one doorbell write; with the
//! cache, up to 32 UMR WQEs per doorbell), beside
//! Linux pinning one buffer of that size per `IORING_REGISTER_BUFFERS` call (pin plus one
//! system call); the deregistration rate by DESTROY_MKEY and by a revoking UMR; and the
//! measured probability of guessing the next rkey from the previous one, with and without
//! the cache.
//!
//! Times are medians over `--reps=N` repetitions (default 7), with the fastest and slowest
//! (min–max) beside them; each registration is undone (dereg / `IORING_UNREGISTER_BUFFERS`)
//! between repetitions, outside the timing. The rows of one size run interleaved: after one
//! unmeasured round, each repetition registers every driver layout and pins with Linux once
//! in turn (each round starting one row later), so that a busy machine slows both sides
//! alike. The column "Linux 4 KiB pin / this" divides Linux pinning the same size of 4 KiB
//! pages by the row's time. Rows that cannot run here (no io_uring, no huge pages, ...) say
//! `SKIPPED: ... because ...`.
//!
//! `cargo bench -p mlx5 --bench reg_mr [-- --reps=N] [--small-only | --sizes-only] [--cpu-clock]`
//!
//! `cargo bench -p mlx5 --bench reg_mr -- --instructions` instead counts instructions per
//! small registration (4 KiB, one MTT entry) for each column of the small-MR table, under
//! `valgrind --tool=callgrind` (see [`callgrind::instruction_counts`]): steady on a busy machine, and
//! what the cached path's cost is made of can be read from the same runs.
//!
//! `--cpu-clock` reads every figure from the thread's CPU time (user + system) instead of wall
//! time: steadier on a machine shared with other work, since the model runs inline on the
//! bench's thread and Linux pins in this thread's system calls.
//!
//! The driver's figures include the emulated device's own work (it executes CREATE_MKEY in
//! the same process), so they compare what each side does per registration, not hardware
//! latency.

/// The clock every figure is read from: wall time, or with `--cpu-clock` the thread's CPU
/// time (user + system; steadier on a machine shared with other work: the model runs inline
/// on this thread, and the Linux pinning is this thread's system time).
mod clock {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    static CPU: AtomicBool = AtomicBool::new(false);

    pub fn use_cpu_time() {
        CPU.store(true, Ordering::Relaxed);
    }

    pub fn is_cpu() -> bool {
        CPU.load(Ordering::Relaxed)
    }

    /// A point in time on the chosen clock.
    pub struct Stamp(Result<u128, Instant>);

    pub fn now() -> Stamp {
        if is_cpu() {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec, which `ts` provides.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            Stamp(Ok(ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128))
        } else {
            Stamp(Err(Instant::now()))
        }
    }

    impl Stamp {
        /// Nanoseconds since this stamp.
        pub fn ns(&self) -> u128 {
            match &self.0 {
                Ok(t0) => match now().0 {
                    Ok(t1) => t1.saturating_sub(*t0),
                    Err(_) => 0,
                },
                Err(i) => i.elapsed().as_nanos(),
            }
        }
    }
}

#[path = "reg_mr/callgrind.rs"]
mod callgrind;
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use common::*;
use mlx5::mr::PhysChunk;
use mlx5::{AccessFlags, Context, DmaBuffer, Hal, ProtectionDomain};

const MIB: usize = 1 << 20;
const HUGE: usize = 2 * MIB;

struct Row {
    size: &'static str,
    method: String,
    commands: String,
    entries: String,
    median: Result<u128, String>,
    /// Fastest and slowest repetition (`None` where the row has one figure or none).
    spread: Option<(u128, u128)>,
    /// Linux rows: compared with the driver's contiguous registration of the same size.
    linux: bool,
}

fn median(mut v: Vec<u128>) -> u128 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// `(min, max)` of a non-empty list.
fn spread(v: &[u128]) -> Option<(u128, u128)> {
    Some((*v.iter().min()?, *v.iter().max()?))
}

fn main() {
    if std::env::args().any(|a| a == "--instructions") {
        callgrind::instruction_counts();
        return;
    }
    if std::env::args().any(|a| a == "--callgrind") {
        callgrind::callgrind_child();
        return;
    }
    let reps: usize = std::env::args()
        .find_map(|a| a.strip_prefix("--reps=").and_then(|v| v.parse().ok()))
        .unwrap_or(7)
        .max(1);
    if std::env::args().any(|a| a == "--cpu-clock") {
        clock::use_cpu_time();
    }
    let sim = SimHal::new();
    let hal = TestHal(sim.clone());
    let ctx = Context::open(hal.clone(), test_config()).expect("bring-up");
    let pd = ctx.alloc_pd().unwrap();
    let ring = linux::Ring::new();
    let sizes = [
        ("2 MiB", 2 * MIB),
        ("64 MiB", 64 * MIB),
        ("1 GiB", 1024 * MIB),
    ];
    // Huge pages are only worth reserving when io_uring can pin them.
    let largest = if ring.is_ok() {
        sizes.iter().map(|s| s.1).max().unwrap_or(0)
    } else {
        0
    };
    let hugepages = linux::HugePages::reserve(largest);
    let mut rows = Vec::new();
    // `--small-only` (or the older `--cache-only` / `--rates-only`): just the small-MR table
    // (commands, UMR cache, batched, Linux pin + 1 syscall) and the key-guess table.
    if std::env::args().any(|a| a == "--small-only" || a == "--cache-only" || a == "--rates-only") {
        small_mrs(&ring, reps);
        return;
    }
    for (name, size) in sizes {
        rows.extend(sized_rows(
            &ctx, &pd, &hal, &ring, &hugepages, name, size, reps,
        ));
    }
    drop(hugepages);
    rows.push(huge_region(&ctx, &pd, reps));
    rows.push(Row {
        size: "64 GiB",
        method: "Linux io_uring pin, 4 KiB pages".into(),
        commands: "-".into(),
        entries: "16777216 x 4 KiB pinned".into(),
        median: Err(format!(
            "64 GiB is more than this machine's memory ({} GiB)",
            linux::mem_total_gib()
        )),
        spread: None,
        linux: true,
    });
    // The 1 GiB rows of 4 KiB pages again with glibc keeping freed memory: the difference to
    // the rows above is the kernel faulting in and zeroing the MiB-sized buffers the driver
    // and the in-process model allocate per registration (the MTT list, the command, the
    // model's copy), which glibc returns to the kernel between registrations (dynamic mmap /
    // trim thresholds); it was half of the time while the command was built in a zeroed
    // buffer and the model's copy grew. The unikernel's allocator never returns memory.
    // Process-wide, so last.
    // SAFETY: mallopt only changes allocator thresholds.
    let tuned = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30) == 1
    };
    if tuned {
        let backing = hal
            .dma_alloc(1024 * MIB, 1024 * MIB)
            .expect("backing memory");
        let mut samplers = ours(&ctx, &pd, &backing, "1 GiB", 1024 * MIB);
        let rs: Vec<Row> = interleave(&mut samplers, reps);
        drop(samplers);
        drop(backing);
        for mut r in rs {
            if r.method.contains("4 KiB pages") {
                r.method.push_str(" (glibc keeps freed memory)");
                rows.push(r);
            }
        }
    } else {
        println!("SKIPPED: rows with glibc keeping freed memory because mallopt failed");
    }
    print_table(&rows, reps);
    println!();
    drop(pd);
    let _ = ctx.close();
    // `--sizes-only`: just the table above.
    if !std::env::args().any(|a| a == "--sizes-only") {
        small_mrs(&ring, reps);
    }
}

/// 64 GiB of 1 GiB pages: one MTT key of 64 entries. The chunks are bus addresses above the
/// model's memory (the model reads no guest memory to register; nothing is accessed).
fn huge_region(ctx: &Context<TestHal>, pd: &ProtectionDomain<TestHal>, reps: usize) -> Row {
    const GIB: u64 = 1 << 30;
    let chunks: Vec<PhysChunk> = (0..64u64)
        .map(|i| PhysChunk {
            bus: (0x1000 + 2 * (63 - i)) * GIB,
            len: GIB,
        })
        .collect();
    let mut times = Vec::new();
    let mut last = (0, 0);
    let mut cmds = 0;
    for _ in 0..reps {
        let c0 = ctx.commands_sent();
        let t = clock::now();
        // SAFETY: the region is never used for DMA (no WR names it) and is deregistered at once.
        let r = unsafe { pd.reg_phys(&chunks, 0x40_0000_0000, AccessFlags::ALL) };
        let ns = t.ns();
        cmds = ctx.commands_sent() - c0;
        let mut mr = r.expect("64 GiB of 1 GiB pages");
        let t = mr.translation_info();
        last = (t.mtt_entries, t.page_shift);
        times.push(ns);
        mr.dereg().expect("dereg");
    }
    Row {
        size: "64 GiB",
        method: "mlx5 reg_mr, 1 GiB pages".into(),
        commands: cmds.to_string(),
        entries: format!("{} x {}", last.0, page_name(1 << last.1)),
        spread: spread(&times),
        median: Ok(median(times)),
        linux: false,
    }
}

/// Small-MR registration (4 KiB, 64 KiB, 2 MiB; 248 regions per repetition) through one
/// CREATE_MKEY command each, through the UMR mkey cache (one UMR WQE and one CQE each, no
/// command) and batched (`reg_mr_batch`: up to 31 CREATE_MKEY per doorbell), and
/// deregistration by DESTROY_MKEY and by a revoking UMR; beside Linux pinning one buffer of
/// that size per `IORING_REGISTER_BUFFERS` call (pin plus one system call). The three driver
/// methods run in turn within each repetition (one context without the cache, one with it),
/// so that a busy machine slows them alike.
fn small_mrs(ring: &Result<linux::Ring, String>, reps: usize) {
    const N: usize = 248; // 8 batches of 31
                          // One model each (a context owns its device function): without and with the cache.
    let open = |cache: bool| {
        let hal = TestHal(SimHal::new());
        let ctx = Context::open(hal.clone(), test_config()).expect("bring-up");
        if cache {
            ctx.enable_mkey_cache(N).expect("cache");
        }
        let pd = ctx.alloc_pd().expect("pd");
        (hal, ctx, pd)
    };
    let sides = [open(false), open(true)];
    println!(
        "| MR size | commands: reg ns/MR | UMR cache: reg ns/MR | commands / cache | commands batched: reg ns/MR (doorbells) | UMR cache batched: reg ns/MR | commands / cache batched | Linux io_uring pin + 1 syscall, ns/MR | Linux / cache | commands: dereg ns/MR | UMR cache: dereg ns/MR | commands / cache |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, size) in [("4 KiB", 4096usize), ("64 KiB", 64 << 10), ("2 MiB", HUGE)] {
        let backing: Vec<_> = sides
            .iter()
            .map(|(hal, _, _)| hal.dma_alloc(size * N, size).expect("backing"))
            .collect();
        let chunks: Vec<Vec<[PhysChunk; 1]>> = backing
            .iter()
            .map(|b| {
                (0..N)
                    .map(|i| {
                        [PhysChunk {
                            bus: b.bus_addr() + (i * size) as u64,
                            len: size as u64,
                        }]
                    })
                    .collect()
            })
            .collect();
        let regions: Vec<Vec<(&[PhysChunk], u64, AccessFlags)>> = chunks
            .iter()
            .map(|cs| {
                cs.iter()
                    .map(|c| (&c[..], c[0].bus, AccessFlags::ALL))
                    .collect()
            })
            .collect();
        // [commands, cache] x [reg, dereg], and batched registration.
        let mut t = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        let mut batched = Vec::new();
        let mut batched_umr = Vec::new();
        let mut rung = 0;
        // One extra, unmeasured repetition first (warms the allocator and both contexts).
        for rep in 0..=reps {
            for (k, (_, ctx, pd)) in sides.iter().enumerate() {
                let c0 = ctx.commands_sent();
                let s = clock::now();
                let mut mrs = Vec::with_capacity(N);
                for r in &regions[k] {
                    // SAFETY: `backing` outlives the regions.
                    mrs.push(unsafe { pd.reg_phys(r.0, r.1, r.2) }.expect("reg"));
                }
                let reg = s.ns() / N as u128;
                if k == 1 {
                    assert_eq!(
                        ctx.commands_sent(),
                        c0,
                        "cached registrations send no command"
                    );
                }
                let s = clock::now();
                for mut m in mrs {
                    m.dereg().expect("dereg");
                }
                let dereg = s.ns() / N as u128;
                if rep > 0 {
                    t[k][0].push(reg);
                    t[k][1].push(dereg);
                }
            }
            for (k, (_, ctx, pd)) in sides.iter().enumerate() {
                let (d0, c0) = (ctx.command_doorbells(), ctx.commands_sent());
                let s = clock::now();
                // SAFETY: as above.
                let mrs = unsafe { pd.reg_mr_batch(&regions[k]) };
                let ns = s.ns() / N as u128;
                assert!(mrs.iter().all(|m| m.is_ok()), "batched registration");
                if k == 0 {
                    rung = ctx.command_doorbells() - d0;
                } else {
                    assert_eq!(
                        ctx.commands_sent(),
                        c0,
                        "batched from the cache: no command"
                    );
                }
                drop(mrs);
                if rep > 0 {
                    [&mut batched, &mut batched_umr][k].push(ns);
                }
            }
        }
        drop(regions);
        drop(chunks);
        drop(backing);
        let [[cr, cd], [ur, ud]] = t;
        let (cr, cd, ur, ud) = (median(cr), median(cd), median(ur), median(ud));
        let (b1, b2) = (median(batched), median(batched_umr));
        let lin = (|| {
            let ring = ring.as_ref().map_err(|e| e.clone())?;
            let buf = linux::Buffer::new(size, false)?;
            let mut times = Vec::new();
            for _ in 0..reps * 16 {
                times.push(ring.register_timed(&buf)?);
                ring.unregister()?;
            }
            Ok::<u128, String>(median(times))
        })();
        let (l, lr) = match lin {
            Ok(l) => (
                l.to_string(),
                format!("{:.1}x", l as f64 / ur.max(1) as f64),
            ),
            Err(e) => (format!("SKIPPED: Linux pin because {e}"), "-".into()),
        };
        println!(
            "| {name} | {cr} | {ur} | {:.1}x | {b1} ({rung} for {N}) | {b2} | {:.1}x | {l} | {lr} | {cd} | {ud} | {:.1}x |",
            cr as f64 / ur.max(1) as f64,
            cr as f64 / b2.max(1) as f64,
            cd as f64 / ud.max(1) as f64
        );
    }
    println!();
    // ReDMArk: how often the next rkey can be guessed from the previous one (index + 1, same
    // variant: the best fixed guess), registering and deregistering one 4 KiB region 4096
    // times, without and with the cache (`mr_layouts.rs` `next_rkey_guess_probability`,
    // `umr.rs` `cached_keys_are_unpredictable`).
    println!("| keys from | next rkey's index = previous + 1 | next rkey = previous index + 1, same variant | 1/256 |");
    println!("|---|---:|---:|---:|");
    for (what, (hal, _, pd)) in [
        "CREATE_MKEY (firmware order)",
        "the UMR cache (248 keys per class)",
    ]
    .into_iter()
    .zip(&sides)
    {
        let b = hal.dma_alloc(4096, 4096).expect("buffer");
        let c = [PhysChunk {
            bus: b.bus_addr(),
            len: 4096,
        }];
        const K: usize = 4096;
        let mut keys = Vec::with_capacity(K);
        for _ in 0..K {
            // SAFETY: `b` outlives every region.
            let mut m = unsafe { pd.reg_phys(&c, 0x1000, AccessFlags::LOCAL_WRITE) }.expect("reg");
            keys.push(m.rkey());
            m.dereg().expect("dereg");
        }
        let (index_next, full) = next_key_guesses(&keys);
        let n = (K - 1) as f64;
        println!(
            "| {what} | {:.4} ({index_next}/{}) | {:.5} ({full}/{}) | {:.5} |",
            index_next as f64 / n,
            K - 1,
            full as f64 / n,
            K - 1,
            1.0 / 256.0
        );
    }
    for (_, ctx, pd) in sides {
        drop(pd);
        let _ = ctx.close();
    }
}

/// One row of the size table, measured one repetition at a time ([`interleave`]).
struct Sampler<'a> {
    row: Row,
    times: Vec<u128>,
    /// One repetition: its time, or why the row cannot run (then it stops).
    run: Box<Repetition<'a>>,
}

/// One repetition of a [`Sampler`]: its time, or why the row cannot run.
type Repetition<'a> = dyn FnMut(&mut Row) -> Result<u128, String> + 'a;

/// Runs one unmeasured round of every sampler (warms the allocator, the command mailboxes
/// and the kernel's page tables alike), then `reps` measured rounds, each running every
/// sampler once in turn: the driver's and Linux's repetitions alternate, so that a busy
/// machine slows both sides alike. Each round starts one sampler later than the one before,
/// so every row runs as often right after each other row (a row run right after Linux pins a
/// whole GiB finds cold caches; no row is always that one). A sampler that fails stops and
/// reports why.
fn interleave(samplers: &mut [Sampler<'_>], reps: usize) -> Vec<Row> {
    let mut failed: Vec<Option<String>> = samplers.iter().map(|_| None).collect();
    let n = samplers.len();
    for round in 0..=reps {
        for k in 0..n {
            let i = (round + k) % n;
            let (s, f) = (&mut samplers[i], &mut failed[i]);
            if f.is_some() {
                continue;
            }
            match (s.run)(&mut s.row) {
                Ok(ns) if round > 0 => s.times.push(ns),
                Ok(_) => {}
                Err(e) => *f = Some(e),
            }
        }
    }
    samplers
        .iter_mut()
        .zip(failed)
        .map(|(s, f)| {
            let mut row = std::mem::replace(
                &mut s.row,
                Row {
                    size: "",
                    method: String::new(),
                    commands: String::new(),
                    entries: String::new(),
                    median: Err(String::new()),
                    spread: None,
                    linux: false,
                },
            );
            match f {
                Some(why) => row.median = Err(why),
                None => {
                    row.spread = spread(&s.times);
                    row.median = Ok(median(std::mem::take(&mut s.times)));
                }
            }
            row
        })
        .collect()
}

/// The rows of one size: the driver's layouts and Linux pinning of 4 KiB and 2 MiB pages,
/// repetitions interleaved ([`interleave`]).
#[allow(clippy::too_many_arguments)]
fn sized_rows(
    ctx: &Context<TestHal>,
    pd: &ProtectionDomain<TestHal>,
    hal: &TestHal,
    ring: &Result<linux::Ring, String>,
    hugepages: &linux::HugePages,
    name: &'static str,
    size: usize,
    reps: usize,
) -> Vec<Row> {
    let backing = hal.dma_alloc(size, size).expect("backing memory");
    let mut samplers = ours(ctx, pd, &backing, name, size);
    samplers.push(linux_sampler(ring, name, size, false, hugepages));
    samplers.push(linux_sampler(ring, name, size, true, hugepages));
    let rows = interleave(&mut samplers, reps);
    drop(samplers);
    drop(backing);
    rows
}

/// The driver's registrations of `size` bytes of `backing` (one naturally aligned buffer):
/// one sampler per layout, each repetition one registration (timed) and its deregistration.
fn ours<'a>(
    ctx: &'a Context<TestHal>,
    pd: &'a ProtectionDomain<TestHal>,
    backing: &'a <TestHal as Hal>::Dma,
    name: &'static str,
    size: usize,
) -> Vec<Sampler<'a>> {
    let base = backing.bus_addr();
    let pages = |page: usize| -> Vec<PhysChunk> {
        // Reversed so that no two pages are physically adjacent in region order.
        (0..size / page)
            .rev()
            .map(|i| PhysChunk {
                bus: base + (i * page) as u64,
                len: page as u64,
            })
            .collect()
    };
    let mut layouts: Vec<(&str, Vec<PhysChunk>)> = vec![
        (
            "contiguous",
            vec![PhysChunk {
                bus: base,
                len: size as u64,
            }],
        ),
        ("2 MiB pages", pages(HUGE)),
        ("4 KiB pages", pages(4096)),
    ];
    if size >= 1 << 30 {
        // 0x123 bytes into the first page, 0x456 short of the last page's end.
        let mut c = pages(4096);
        c[0].bus += 0x123;
        c[0].len -= 0x123;
        let l = c.len() - 1;
        c[l].len -= 0x456;
        layouts.push(("4 KiB pages, unaligned", c));
    }
    let page_of = |layout: &str| match layout {
        "contiguous" => size,
        "2 MiB pages" => HUGE,
        _ => 4096,
    };
    layouts
        .into_iter()
        .map(|(layout, chunks)| {
            let row = Row {
                size: name,
                method: format!("mlx5 reg_mr, {layout}"),
                commands: "-".into(),
                entries: format!("{} x {}", chunks.len(), page_name(page_of(layout))),
                median: Err(String::new()),
                spread: None,
                linux: false,
            };
            let run = move |row: &mut Row| {
                let before = ctx.commands_sent();
                let t = clock::now();
                let iova = 0x7f00_0000_0000 + (chunks[0].bus & 0xfff);
                // SAFETY: `backing` stays allocated (and otherwise unused) until after dereg.
                let r = unsafe { pd.reg_phys(&chunks, iova, AccessFlags::ALL) };
                let ns = t.ns();
                row.commands = (ctx.commands_sent() - before).to_string();
                // Beyond what the device accepts, the driver gets a typed error.
                let mut mr = r.map_err(|e| format!("refused by the device: {e:?}"))?;
                let t = mr.translation_info();
                row.entries = format!("{} x {}", t.mtt_entries, page_name(1 << t.page_shift));
                mr.dereg().expect("dereg");
                Ok(ns)
            };
            Sampler {
                row,
                times: Vec::new(),
                run: Box::new(run),
            }
        })
        .collect()
}

/// Linux pinning `size` bytes of 4 KiB or 2 MiB pages: each repetition one
/// `IORING_REGISTER_BUFFERS` (timed) and its `IORING_UNREGISTER_BUFFERS`.
fn linux_sampler<'a>(
    ring: &'a Result<linux::Ring, String>,
    name: &'static str,
    size: usize,
    huge: bool,
    hugepages: &'a linux::HugePages,
) -> Sampler<'a> {
    let method = format!(
        "Linux io_uring pin, {}",
        if huge {
            "2 MiB huge pages"
        } else {
            "4 KiB pages"
        }
    );
    let page = if huge { HUGE } else { 4096 };
    let row = Row {
        size: name,
        method,
        commands: "-".into(),
        entries: format!("{} x {} pinned", size / page, page_name(page)),
        median: Err(String::new()),
        spread: None,
        linux: true,
    };
    let mut buf: Option<linux::Buffer> = None;
    let run = move |_: &mut Row| {
        let ring = ring.as_ref().map_err(|e| e.clone())?;
        let b = match &mut buf {
            Some(b) => b,
            None => {
                if huge {
                    hugepages.check(size / HUGE)?;
                }
                buf.insert(linux::Buffer::new(size, huge)?)
            }
        };
        let ns = ring.register_timed(b)?;
        ring.unregister()?;
        Ok(ns)
    };
    Sampler {
        row,
        times: Vec::new(),
        run: Box::new(run),
    }
}

fn page_name(bytes: usize) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= MIB {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn print_table(rows: &[Row], reps: usize) {
    println!(
        "| size | method | commands | MTT entries / pages pinned | median ns ({reps} reps) | min–max ns | Linux / mlx5 contiguous | Linux 4 KiB pin / this |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let ours = rows
            .iter()
            .find(|o| o.size == r.size && o.method.ends_with("contiguous"))
            .and_then(|o| o.median.as_ref().ok().copied());
        let ratio = match (r.linux, &r.median, ours) {
            (true, Ok(ns), Some(o)) if o > 0 => format!("{:.0}x", *ns as f64 / o as f64),
            _ => "-".into(),
        };
        let lin4k = rows
            .iter()
            .find(|o| o.size == r.size && o.method == "Linux io_uring pin, 4 KiB pages")
            .and_then(|o| o.median.as_ref().ok().copied());
        let vs4k = match (r.linux, &r.median, lin4k) {
            (false, Ok(ns), Some(l)) if *ns > 0 => format!("{:.1}x", l as f64 / *ns as f64),
            (false, _, None) => "- (no Linux row of this size)".into(),
            _ => "-".into(),
        };
        let median = match &r.median {
            Ok(ns) => ns.to_string(),
            Err(why) if r.linux => format!("SKIPPED: {} because {why}", r.method),
            Err(why) => why.clone(),
        };
        let range = match r.spread {
            Some((lo, hi)) => format!("{lo}–{hi}"),
            None => "-".into(),
        };
        println!(
            "| {} | {} | {} | {} | {median} | {range} | {ratio} | {vs4k} |",
            r.size, r.method, r.commands, r.entries
        );
    }
}

/// Linux page pinning through io_uring buffer registration, with raw system calls.
mod linux {
    use std::io;

    /// `IORING_REGISTER_BUFFERS` / `IORING_UNREGISTER_BUFFERS` (Linux
    /// include/uapi/linux/io_uring.h, enum io_uring_register_op).
    const IORING_REGISTER_BUFFERS: libc::c_long = 0;
    const IORING_UNREGISTER_BUFFERS: libc::c_long = 1;
    /// `sizeof(struct io_uring_params)` (include/uapi/linux/io_uring.h): 10 u32 fields and
    /// two 40-byte offset structs.
    const IO_URING_PARAMS_BYTES: usize = 120;

    fn os_err(what: &str) -> String {
        format!("{what} failed: {}", io::Error::last_os_error())
    }

    /// An io_uring instance (only used to register buffers).
    pub struct Ring {
        fd: libc::c_int,
    }

    impl Ring {
        pub fn new() -> Result<Ring, String> {
            let mut params = [0u64; IO_URING_PARAMS_BYTES / 8];
            // SAFETY: io_uring_setup(entries, params) reads and writes the 120-byte
            // io_uring_params behind the pointer, which `params` provides.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
            if fd < 0 {
                return Err(os_err("io_uring_setup"));
            }
            Ok(Ring {
                fd: fd as libc::c_int,
            })
        }

        /// Registers (pins) `buf` as one fixed buffer; returns the time the call took.
        pub fn register_timed(&self, buf: &Buffer) -> Result<u128, String> {
            let iov = libc::iovec {
                iov_base: buf.ptr.cast(),
                iov_len: buf.len,
            };
            let t = super::clock::now();
            // SAFETY: one iovec describing memory this process mapped and keeps mapped until
            // the buffer is unregistered (Buffer outlives the registration).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.fd,
                    IORING_REGISTER_BUFFERS,
                    &iov as *const libc::iovec,
                    1u32,
                )
            };
            let ns = t.ns();
            if r < 0 {
                return Err(os_err("IORING_REGISTER_BUFFERS"));
            }
            Ok(ns)
        }

        pub fn unregister(&self) -> Result<(), String> {
            // SAFETY: no argument memory is passed.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_register,
                    self.fd,
                    IORING_UNREGISTER_BUFFERS,
                    std::ptr::null::<u8>(),
                    0u32,
                )
            };
            if r < 0 {
                return Err(os_err("IORING_UNREGISTER_BUFFERS"));
            }
            Ok(())
        }
    }

    impl Drop for Ring {
        fn drop(&mut self) {
            // SAFETY: the fd is ours and closed once.
            unsafe { libc::close(self.fd) };
        }
    }

    /// Anonymous memory, every page touched (so pinning finds it present).
    pub struct Buffer {
        ptr: *mut u8,
        len: usize,
    }

    impl Buffer {
        pub fn new(len: usize, huge: bool) -> Result<Buffer, String> {
            let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            if huge {
                flags |= libc::MAP_HUGETLB;
            }
            // SAFETY: a fresh anonymous mapping; no existing memory is affected.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(os_err(if huge { "mmap(MAP_HUGETLB)" } else { "mmap" }));
            }
            let buf = Buffer { ptr: p.cast(), len };
            if !huge {
                // Keep transparent huge pages out: this row is about 4 KiB pages.
                // SAFETY: advice on the mapping just created.
                if unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) } != 0 {
                    return Err(os_err("madvise(MADV_NOHUGEPAGE)"));
                }
            }
            let step = if huge { super::HUGE } else { 4096 };
            for off in (0..len).step_by(step) {
                // SAFETY: off < len, inside the mapping.
                unsafe { buf.ptr.add(off).write_volatile(1) };
            }
            Ok(buf)
        }
    }

    impl Drop for Buffer {
        fn drop(&mut self) {
            // SAFETY: exactly the mapping `new` created, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }

    /// `MemTotal` in GiB (0 when unknown).
    pub fn mem_total_gib() -> usize {
        meminfo("MemTotal:").unwrap_or(0) >> 20 // kB
    }

    fn meminfo(key: &str) -> Option<usize> {
        let s = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = s.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

    /// Enough free 2 MiB huge pages for the run, raised if needed (as root) and put back.
    pub struct HugePages {
        /// The value to restore, when the bench changed it.
        restore: Option<String>,
        free: usize,
        why_short: String,
    }

    impl HugePages {
        pub fn reserve(bytes: usize) -> HugePages {
            let need = bytes.div_ceil(super::HUGE);
            let size_kb = meminfo("Hugepagesize:").unwrap_or(0);
            let free = meminfo("HugePages_Free:").unwrap_or(0);
            let mut hp = HugePages {
                restore: None,
                free,
                why_short: String::new(),
            };
            if size_kb != 2048 {
                hp.free = 0;
                hp.why_short = format!("the default huge page size is {size_kb} KiB, not 2 MiB");
                return hp;
            }
            if free >= need {
                return hp;
            }
            let old = match std::fs::read_to_string(NR_HUGEPAGES) {
                Ok(v) => v.trim().to_string(),
                Err(e) => {
                    hp.why_short = format!("{NR_HUGEPAGES} is not readable ({e})");
                    return hp;
                }
            };
            let total: usize = old.parse().unwrap_or(0);
            let want = total + (need - free);
            if let Err(e) = std::fs::write(NR_HUGEPAGES, want.to_string()) {
                hp.why_short = format!("{NR_HUGEPAGES} could not be raised to {want} ({e})");
                return hp;
            }
            hp.restore = Some(old);
            hp.free = meminfo("HugePages_Free:").unwrap_or(0);
            if hp.free < need {
                hp.why_short = format!(
                    "the kernel found only {} free huge pages after raising {NR_HUGEPAGES} to \
                     {want}",
                    hp.free
                );
            }
            hp
        }

        /// Ok when `n` huge pages are free for a row.
        pub fn check(&self, n: usize) -> Result<(), String> {
            if self.free >= n {
                Ok(())
            } else if self.why_short.is_empty() {
                Err(format!(
                    "only {} free 2 MiB huge pages (need {n})",
                    self.free
                ))
            } else {
                Err(format!("{} (need {n})", self.why_short))
            }
        }
    }

    impl Drop for HugePages {
        fn drop(&mut self) {
            if let Some(old) = self.restore.take() {
                if let Err(e) = std::fs::write(NR_HUGEPAGES, &old) {
                    eprintln!("could not restore {NR_HUGEPAGES} to {old}: {e}");
                }
            }
        }
    }
}
