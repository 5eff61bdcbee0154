//! Monotonic time from the TSC, and the deadlines every driver wait uses.
//!
//! The TSC frequency comes from CPUID leaf 0x15 (crystal ratio), the hypervisor timing leaf
//! 0x40000010, CPUID leaf 0x16 (base MHz), or else a 10 ms measurement against PIT channel 2.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

static TSC_HZ: AtomicU64 = AtomicU64::new(1_000_000_000);
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Where the TSC frequency came from.
#[derive(Clone, Copy, Debug)]
pub enum TscSource {
    CpuidCrystal,
    Hypervisor,
    CpuidBase,
    Pit,
    Guess,
}

pub fn init() -> (u64, TscSource) {
    BOOT_TSC.store(rdtsc(), Ordering::Relaxed);
    let (hz, source) = calibrate();
    TSC_HZ.store(hz, Ordering::Relaxed);
    (hz, source)
}

pub fn tsc_hz() -> u64 {
    TSC_HZ.load(Ordering::Relaxed)
}

fn cpuid(leaf: u32) -> core::arch::x86_64::CpuidResult {
    core::arch::x86_64::__cpuid(leaf)
}

fn calibrate() -> (u64, TscSource) {
    let max_leaf = cpuid(0).eax;
    if max_leaf >= 0x15 {
        let l = cpuid(0x15);
        if l.eax != 0 && l.ebx != 0 && l.ecx != 0 {
            return (
                l.ecx as u64 * l.ebx as u64 / l.eax as u64,
                TscSource::CpuidCrystal,
            );
        }
    }
    if crate::arch::cpu_features().hypervisor && cpuid(0x4000_0000).eax >= 0x4000_0010 {
        let khz = cpuid(0x4000_0010).eax;
        if khz != 0 {
            return (khz as u64 * 1000, TscSource::Hypervisor);
        }
    }
    if let Some(hz) = pit_measure() {
        return (hz, TscSource::Pit);
    }
    if max_leaf >= 0x16 {
        let mhz = cpuid(0x16).eax & 0xffff;
        if mhz != 0 {
            return (mhz as u64 * 1_000_000, TscSource::CpuidBase);
        }
    }
    (1_000_000_000, TscSource::Guess)
}

/// Counts TSC ticks over 10 ms of PIT channel 2 (mode 0, gate via port 0x61).
fn pit_measure() -> Option<u64> {
    use x86_64::instructions::port::Port;
    const PIT_HZ: u64 = 1_193_182;
    const COUNT: u16 = (PIT_HZ / 100) as u16;
    let mut gate = Port::<u8>::new(0x61);
    let mut command = Port::<u8>::new(0x43);
    let mut ch2 = Port::<u8>::new(0x42);
    // SAFETY: ports 0x42/0x43/0x61 are the PIT channel 2 data, PIT command and system control
    // port B; the speaker output (bit 1) stays off.
    unsafe {
        let b = gate.read();
        gate.write((b & !0x02) | 0x01);
        command.write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0, binary
        ch2.write(COUNT as u8);
        ch2.write((COUNT >> 8) as u8);
    }
    let start = rdtsc();
    // Bounded wait: a PIT that never fires must not hang boot.
    for _ in 0..200_000_000u64 {
        // SAFETY: reading port B has no side effects.
        if unsafe { gate.read() } & 0x20 != 0 {
            let ticks = rdtsc() - start;
            return Some(ticks * 100);
        }
    }
    None
}

/// A point in time (TSC based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(u64);

impl Instant {
    #[inline]
    pub fn now() -> Self {
        Instant(rdtsc())
    }

    pub fn duration_since(&self, earlier: Instant) -> Duration {
        ticks_to_duration(self.0.saturating_sub(earlier.0))
    }

    pub fn elapsed(&self) -> Duration {
        Instant::now().duration_since(*self)
    }

    pub fn ticks(&self) -> u64 {
        self.0
    }
}

fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = tsc_hz();
    Duration::new(
        ticks / hz,
        ((ticks % hz) as u128 * 1_000_000_000 / hz as u128) as u32,
    )
}

fn duration_to_ticks(d: Duration) -> u64 {
    (d.as_nanos().saturating_mul(tsc_hz() as u128) / 1_000_000_000).min(u64::MAX as u128) as u64
}

/// A point after which a wait gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(u64);

impl Deadline {
    pub fn after(d: Duration) -> Self {
        Deadline(rdtsc().saturating_add(duration_to_ticks(d)))
    }

    #[inline]
    pub fn expired(&self) -> bool {
        rdtsc() >= self.0
    }
}

pub fn micros_since_boot() -> u64 {
    Instant(BOOT_TSC.load(Ordering::Relaxed))
        .elapsed()
        .as_micros() as u64
}

/// Busy-waits for `d`.
pub fn spin_for(d: Duration) {
    let deadline = Deadline::after(d);
    while !deadline.expired() {
        core::hint::spin_loop();
    }
}
