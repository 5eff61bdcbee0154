//! The rdma app's checks on the host, against the in-process model (the unikernel and the
//! VFIO example run the same code on QEMU and on hardware).

#[allow(dead_code)]
#[path = "../../../drivers/mlx5/tests/common/mod.rs"]
mod common;

use std::fmt;
use std::time::{Duration, Instant};

use common::*;
use mlx5::hal::{DmaBuffer, Hal};
use mlx5::mr::PhysChunk;
use rdma_checks::{BigMemory, Console};

struct Con(Instant);

impl Console for Con {
    fn print(&self, line: fmt::Arguments<'_>) {
        println!("{line}");
    }
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

struct Big(<TestHal as Hal>::Dma);

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
        2 << 20
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        // SAFETY: `offset + dst.len()` is inside the buffer (the checks read what they wrote).
        unsafe {
            std::ptr::copy_nonoverlapping(self.0.cpu_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
    }
}

#[test]
fn rdma_checks_pass_on_the_model() {
    let (sim, ctx) = open();
    let hal = TestHal(sim.clone());
    let big = Big(hal.dma_alloc(4 << 20, 2 << 20).expect("big memory"));
    let (passed, failed) = rdma_checks::run(&Con(Instant::now()), ctx, big, true);
    assert!(passed > 0);
    assert_eq!(failed, 0, "{failed} rdma checks failed");
}
