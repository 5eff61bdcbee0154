//! The default application until the RDMA app lands: checks memory, DMA and the heap on the
//! booted machine, and exits 0 if all of it works.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;
use kernel::boot_kind::MemoryKind;
use kernel::mem::{self, SIZE_2M};
use kernel::{println, AppContext};

kernel::entry_point!(main);

fn main(_ctx: &AppContext) -> i32 {
    let mut failures = 0;

    // The heap.
    let v: Vec<u64> = (0..10_000).collect();
    if v.iter().sum::<u64>() != 10_000 * 9_999 / 2 {
        println!("selftest: heap FAILED");
        failures += 1;
    }

    // A DMA buffer: contiguous, aligned, zeroed.
    match mem::alloc_dma(12 * 1024, 4096, true) {
        Ok(mut buf) => {
            let aligned = buf.bus_addr() % 4096 == 0;
            // SAFETY: no device knows this buffer.
            let bytes = unsafe { buf.as_mut_slice() };
            let ok = aligned && bytes.iter().all(|&b| b == 0);
            if !ok {
                println!("selftest: dma FAILED");
                failures += 1;
            }
        }
        Err(e) => {
            println!("selftest: dma FAILED: {e}");
            failures += 1;
        }
    }

    // A huge page above 4 GiB, when the machine has RAM there: write and read every word.
    let high_ram = _ctx
        .boot
        .memory_map()
        .iter()
        .any(|r| r.kind == MemoryKind::Usable && r.end() > 4 << 30);
    if high_ram {
        match mem::alloc_dma_above(SIZE_2M as usize, SIZE_2M as usize, false, 4 << 30) {
            Ok(buf) => {
                let words = buf.len() / 8;
                let p = buf.as_ptr() as *mut u64;
                for i in 0..words {
                    // SAFETY: i < words, inside the owned buffer.
                    unsafe { p.add(i).write_volatile(buf.bus_addr() + i as u64) };
                }
                let ok = (0..words).all(|i| {
                    // SAFETY: as above.
                    let v = unsafe { p.add(i).read_volatile() };
                    v == buf.bus_addr() + i as u64
                });
                println!(
                    "selftest: touched 2M page at {:#x}: {}",
                    buf.bus_addr(),
                    if ok { "ok" } else { "FAILED" }
                );
                if !ok {
                    failures += 1;
                }
            }
            Err(e) => {
                println!("selftest: no 2M page above 4 GiB: {e}");
                failures += 1;
            }
        }
    }

    let st = mem::pool_stats();
    println!(
        "selftest: {} failures; free 4K={} KiB 2M={} 1G={}",
        failures,
        st.free_4k_bytes >> 10,
        st.free_2m,
        st.free_1g
    );
    if failures == 0 {
        0
    } else {
        1
    }
}
