//! reg_mr cost against the emulated HCA: 2 MiB, 64 MiB and 1 GiB regions registered as one
//! contiguous buffer (one translation entry), as separate 2 MiB huge pages (one entry each),
//! and as 4 KiB pages. Prints commands sent, MTT entries, page size and time.
//!
//! `cargo bench -p mlx5 --bench reg_mr` (plain std::time; the model's own work is included,
//! so the figures compare layouts, not hardware).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::Instant;

use common::*;
use mlx5::mr::PhysChunk;
use mlx5::{AccessFlags, Context, DmaBuffer, Hal};

fn main() {
    let sim = SimHal::new();
    let hal = TestHal(sim.clone());
    let ctx = Context::open(hal.clone(), test_config()).expect("bring-up");
    let pd = ctx.alloc_pd().unwrap();
    println!("| size | layout | commands | MTT entries | page | reg ns | dereg ns |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (name, size) in [
        ("2 MiB", 2usize << 20),
        ("64 MiB", 64 << 20),
        ("1 GiB", 1 << 30),
    ] {
        // Memory the "huge pages" come from: one naturally aligned allocation.
        let backing = hal.dma_alloc(size, size).expect("backing memory");
        let base = backing.bus_addr();
        let layouts: Vec<(&str, Vec<PhysChunk>)> = vec![
            (
                "contiguous",
                vec![PhysChunk {
                    bus: base,
                    len: size as u64,
                }],
            ),
            // Reversed so that no two pages are physically adjacent in region order.
            (
                "2 MiB pages",
                (0..size / (2 << 20))
                    .rev()
                    .map(|i| PhysChunk {
                        bus: base + (i as u64) * (2 << 20),
                        len: 2 << 20,
                    })
                    .collect(),
            ),
            (
                "4 KiB pages",
                (0..size / 4096)
                    .rev()
                    .map(|i| PhysChunk {
                        bus: base + (i as u64) * 4096,
                        len: 4096,
                    })
                    .collect(),
            ),
        ];
        for (layout, chunks) in layouts {
            let before = ctx.commands_sent();
            let t = Instant::now();
            // SAFETY: `backing` stays allocated (and unused otherwise) until after dereg.
            let r = unsafe { pd.reg_phys(&chunks, 0x7f00_0000_0000, AccessFlags::ALL) };
            let reg = t.elapsed().as_nanos();
            let cmds = ctx.commands_sent() - before;
            let mut mr = match r {
                Ok(mr) => mr,
                Err(e) => {
                    // One CREATE_MKEY carrying every entry: beyond the command length the
                    // device accepts, the driver gets a typed error (UMR would be needed).
                    println!(
                        "| {name} | {layout} | {cmds} | {} | - | refused: {e:?} | - |",
                        chunks.len()
                    );
                    continue;
                }
            };
            let (entries, shift) = mr.translation();
            let t = Instant::now();
            mr.dereg().unwrap();
            let dereg = t.elapsed().as_nanos();
            let page = if shift >= 30 {
                format!("{} GiB", 1u64 << (shift - 30))
            } else if shift >= 20 {
                format!("{} MiB", 1u64 << (shift - 20))
            } else {
                format!("{} KiB", 1u64 << (shift - 10))
            };
            println!("| {name} | {layout} | {cmds} | {entries} | {page} | {reg} | {dereg} |");
        }
        drop(backing);
    }
    // The safe path: the driver allocates the buffer itself.
    let t = Instant::now();
    let before = ctx.commands_sent();
    let mr = pd.alloc_mr(64 << 20, AccessFlags::ALL).unwrap();
    println!(
        "| 64 MiB | alloc_mr (driver-owned DMA buffer) | {} | {} | - | {} | - |",
        ctx.commands_sent() - before,
        mr.translation().0,
        t.elapsed().as_nanos()
    );
}
