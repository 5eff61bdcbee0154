//! The README's example: one RDMA WRITE between two loopback RC queue pairs, read back and
//! compared. Exits 0 when the bytes landed, 1 when not, 2 without an mlx5 function.
#![no_std]
#![no_main]

use core::time::Duration;
use mlx5::{AccessFlags as A, ConnectOptions, Context, QpCaps, Remote, SendData, SendFlags};
use mlx5::{SendOp, SendWr, WcStatus};

kernel::entry_point!(main);

fn main(_: &kernel::AppContext) -> i32 {
    let Ok(hal) = mlx5_kernel::open_first(None) else {
        return 2;
    };
    let write = || -> mlx5::Result<bool> {
        let dev = Context::open(hal, Default::default())?; // ENABLE_HCA .. INIT_HCA, EQ, RoCE
        let pd = dev.alloc_pd()?;
        let (src, dst) = (pd.alloc_mr(4096, A::ALL)?, pd.alloc_mr(4096, A::ALL)?);
        let mut cq = dev.create_cq(16)?;
        let mut a = pd.create_qp(&cq, &cq, &QpCaps::default())?;
        let mut b = pd.create_qp(&cq, &cq, &QpCaps::default())?;
        a.connect(&b.endpoint(), &ConnectOptions::default())?; // RESET -> INIT -> RTR -> RTS
        b.connect(&a.endpoint(), &ConnectOptions::default())?;
        src.write(0, b"hello, RDMA")?;
        let remote = Remote {
            addr: dst.addr(),
            rkey: dst.rkey(),
        };
        let op = SendOp::Write { remote, imm: None };
        let data = SendData::Sges(&[src.sge(0, 11)]);
        a.post_send(&[SendWr {
            wr_id: 1,
            op,
            data,
            flags: SendFlags::SIGNALED,
        }])?;
        let wc = cq.poll_wait(1, Duration::from_secs(5))?;
        let mut got = [0u8; 11];
        dst.read(0, &mut got)?;
        Ok(wc.first().is_some_and(|c| c.status == WcStatus::Success) && &got == b"hello, RDMA")
    };
    let r = write();
    kernel::println!("hello-rdma: {r:?}"); // Ok(true): the bytes landed
    if matches!(r, Ok(true)) {
        0
    } else {
        1
    }
}
