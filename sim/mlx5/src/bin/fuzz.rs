//! `fuzz`: longer runs of the model's fuzz targets (the same code as the `cargo test` smoke
//! runs in tests/fuzz.rs).
//!
//! ```text
//! cargo run --release -p mlx5-sim --bin fuzz -- [--seed N] [--iters N] [--target T]...
//!   --seed N     first seed (decimal or 0x hex; default: from the clock, printed)
//!   --iters N    iterations per target and seed (default 100000)
//!   --runs N     seeds to try, seed, seed+1, ... (default 1)
//!   --target T   cmdq | cmd | wqe | bar | proxy (repeatable; default: all)
//! ```
//! Exit status 0 if nothing was found, 1 on a finding (printed with how to reproduce it),
//! 2 on bad arguments.

#[path = "../../tests/datapath_common/mod.rs"]
mod dp;
#[path = "../../tests/fuzz/mod.rs"]
mod fuzz;
#[path = "../../tests/raw/mod.rs"]
mod raw;

use std::process::ExitCode;

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn main() -> ExitCode {
    let mut seed = None;
    let mut iters = 100_000u64;
    let mut runs = 1u64;
    let mut targets = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next();
        let ok = match (a.as_str(), v.as_deref()) {
            ("--seed", Some(v)) => parse_u64(v).map(|n| seed = Some(n)),
            ("--iters", Some(v)) => parse_u64(v).map(|n| iters = n),
            ("--runs", Some(v)) => parse_u64(v).map(|n| runs = n),
            ("--target", Some(v)) => fuzz::Target::parse(v).map(|t| targets.push(t)),
            _ => None,
        };
        if ok.is_none() {
            eprintln!(
                "usage: fuzz [--seed N] [--iters N] [--runs N] [--target cmdq|cmd|wqe|bar|proxy]..."
            );
            return ExitCode::from(2);
        }
    }
    if targets.is_empty() {
        targets = fuzz::ALL_TARGETS.to_vec();
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut total = 0u64;
    for r in 0..runs {
        let s = seed.wrapping_add(r);
        for &t in &targets {
            let t0 = std::time::Instant::now();
            match fuzz::run(t, s, iters) {
                Ok(n) => {
                    total += n;
                    println!(
                        "{:6} seed {s:#x}: {n} iterations, nothing found ({:.1?})",
                        t.name(),
                        t0.elapsed()
                    );
                }
                Err(f) => {
                    println!("FOUND: {f}");
                    return ExitCode::from(1);
                }
            }
        }
    }
    let st = &fuzz::STATS;
    let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{total} iterations, nothing found (commands {} of which ok {}; CQEs {} of which ok {}; \
         SIGBUS caught {})",
        ld(&st.commands),
        ld(&st.commands_ok),
        ld(&st.cqes),
        ld(&st.cqes_ok),
        mlx5_sim::memory::sigbus::caught()
    );
    ExitCode::SUCCESS
}
