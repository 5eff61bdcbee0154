//! What the host tests share: a clock on `std::time`, two stacks on an in-memory link, and
//! running a closure on each stack in its own thread (a blocking call of one stack needs the
//! other polled at the same time).
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use net::loopback::{self, LinkControl, MemNic};
use net::{Clock, Ipv4Addr, Nic, Stack, StackConfig};

/// Microseconds since the clock was made; waits yield to the other threads.
#[derive(Clone, Copy)]
pub struct StdClock(pub Instant);

impl Clock for StdClock {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
    fn relax(&self) {
        std::thread::yield_now();
    }
}

pub type S = Stack<MemNic, StdClock>;

pub const IP_A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const IP_B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// An address in the subnet nobody holds.
pub const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
/// A 1500-byte IP MTU.
pub const MTU: usize = 1514;

/// Stacks A (10.0.0.1) and B (10.0.0.2) on one /24 link.
pub fn stacks() -> (S, S, LinkControl) {
    stacks_with(|_| {})
}

/// Stacks A and B, their configuration changed by `f` first.
pub fn stacks_with(f: impl Fn(&mut StackConfig)) -> (S, S, LinkControl) {
    let (na, nb, link) = loopback::pair(MAC_A, MAC_B, MTU);
    let clock = StdClock(Instant::now());
    let mut ca = StackConfig::new(IP_A, 24);
    let mut cb = StackConfig::new(IP_B, 24);
    f(&mut ca);
    f(&mut cb);
    let a = Stack::new(na, clock, &ca).unwrap();
    let b = Stack::new(nb, clock, &cb).unwrap();
    (a, b, link)
}

/// A deadline `ms` milliseconds from now on `s`'s clock.
pub fn after<N: Nic>(s: &Stack<N, StdClock>, ms: u64) -> u64 {
    s.now_us() + ms * 1000
}

/// Runs `fa` on `a` and `fb` on `b` at once, each in its own thread; a stack whose closure
/// is done keeps being polled until the other's is done too.
pub fn both<N: Nic<Error: Send> + Send, C: Clock + Send, RA: Send, RB: Send>(
    a: &mut Stack<N, C>,
    b: &mut Stack<N, C>,
    fa: impl FnOnce(&mut Stack<N, C>) -> RA + Send,
    fb: impl FnOnce(&mut Stack<N, C>) -> RB + Send,
) -> (RA, RB) {
    let done = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        let ha = sc.spawn(|| serve(a, &done, fa));
        let hb = sc.spawn(|| serve(b, &done, fb));
        (ha.join().unwrap(), hb.join().unwrap())
    })
}

/// Counts its closure in `done` when dropped: when the closure returns, and also when it
/// panics, so that the other thread does not poll for ever waiting for a closure that is gone
/// (the panic then reaches `both`'s join).
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs `f` on `s`, then polls `s` until `done` counts both closures.
fn serve<N: Nic, C: Clock, R>(
    s: &mut Stack<N, C>,
    done: &AtomicUsize,
    f: impl FnOnce(&mut Stack<N, C>) -> R,
) -> R {
    let r = {
        let _counted = Done(done);
        f(s)
    };
    while done.load(Ordering::SeqCst) < 2 {
        s.poll();
        std::thread::yield_now();
    }
    r
}

/// Runs `f` on `a` while `b` is polled in another thread.
pub fn with_peer<R: Send>(a: &mut S, b: &mut S, f: impl FnOnce(&mut S) -> R + Send) -> R {
    both(a, b, f, |_| ()).0
}

/// `n` bytes of a pattern that does not repeat every 256 bytes.
pub fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
