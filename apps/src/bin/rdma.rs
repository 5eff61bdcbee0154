//! The default application with an HCA: brings the mlx5 function up, registers up to 1 GiB of
//! huge-page memory without pinning anything, runs every RC opcode over loopback QPs checking
//! every byte, provokes the error cases, and prints perftest-style figures.
//!
//! The checks themselves are the `rdma-checks` crate, which the Linux program over VFIO
//! (drivers/mlx5-vfio, example `rdma`) runs too. Exits 0 only if every check passed.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use kernel::mem::{self, DmaBuffer, SIZE_1G, SIZE_2M};
use kernel::time::Instant;
use kernel::{println, AppContext};
use mlx5::mr::PhysChunk;
use mlx5::{Context, ContextConfig};
use rdma_checks::{BigMemory, Console};

kernel::entry_point!(main);

/// The serial console and the TSC clock.
struct Serial(Instant);

impl Console for Serial {
    fn print(&self, line: fmt::Arguments<'_>) {
        println!("{}", line);
    }
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

/// The big region: a 1 GiB huge page when there is one, else the largest run of 2 MiB pages
/// up to 1 GiB. Identity-mapped RAM: nothing to pin, and the memory is not touched.
struct Big(DmaBuffer);

impl BigMemory for Big {
    fn chunks(&self) -> Vec<PhysChunk> {
        vec![PhysChunk {
            bus: self.0.bus_addr(),
            len: self.0.len() as u64,
        }]
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn page_size(&self) -> u64 {
        self.0.page_size().bytes()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset
            .checked_add(dst.len())
            .is_some_and(|end| end <= self.0.len()));
        // SAFETY: the buffer is identity-mapped RAM owned by this app and the range is inside
        // it (asserted); the device's writes to it have completed when the checks read.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (self.0.bus_addr() as usize + offset) as *const u8,
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
    }
}

fn big_buffer() -> Option<DmaBuffer> {
    let mut size = SIZE_1G as usize;
    loop {
        let align = if size as u64 >= SIZE_1G {
            SIZE_1G
        } else {
            SIZE_2M
        } as usize;
        match mem::alloc_dma(size, align, false) {
            Ok(b) => return Some(b),
            Err(_) if size as u64 > SIZE_2M => size /= 2,
            Err(_) => return None,
        }
    }
}

fn main(ctx: &AppContext) -> i32 {
    let con = Serial(Instant::now());
    let hal = match mlx5_kernel::open_first(None) {
        Ok(h) => h,
        Err(e) => {
            println!("rdma: no usable mlx5 function: {e:?}");
            return 2;
        }
    };
    let bdf = hal.bdf();
    let t = Instant::now();
    let dev = match Context::open(hal, ContextConfig::default()) {
        Ok(d) => d,
        Err(e) => {
            println!("rdma: bring-up of {bdf} failed: {e:?}");
            return 3;
        }
    };
    rdma_checks::report_bring_up(&con, &dev, &bdf, t.elapsed());
    let Some(big) = big_buffer() else {
        println!("rdma: no huge-page memory for the big registration");
        let _ = dev.close();
        return 1;
    };
    let (_, failed) = rdma_checks::run(&con, dev, Big(big), ctx.cmdline.flag("quick"));
    if failed == 0 {
        0
    } else {
        1
    }
}
