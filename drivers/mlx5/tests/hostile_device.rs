//! The driver against a hostile or failing device (issue 7): a whole lifecycle (bring-up, the
//! objects, a transfer, teardown) with every fault the model injects, at every command of the
//! lifecycle, and with BAR reads that return random values. The driver must never panic or
//! hang: every call returns, with a typed error where the device misbehaved. Fixed seeds and
//! short timeouts (configuration, not timing assertions) keep it to seconds.

#[allow(dead_code)]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use mlx5::hal::{Hal, HalError};
use mlx5::{
    AccessFlags, ConnectOptions, Context, ContextConfig, Error, QpCaps, SendData, SendFlags,
    SendOp, SendWr,
};
use mlx5_prm::init_seg;
use mlx5_sim::control::faults::Faults;

/// What the wrapper does to the device.
#[derive(Clone, Debug)]
enum Hostility {
    /// Nothing (counts commands).
    None,
    /// Applies the fault just before the `at`-th command doorbell (0-based). `one_shot`
    /// clears a persistent switch again at the next doorbell.
    FaultAt { at: u64, fault: Fault },
    /// Each BAR read returns a random value with probability 1/`one_in`.
    RandomReads { one_in: u32 },
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Firmware hangs for good.
    SwallowForever,
    /// One command is lost (the switch is cleared at the next doorbell).
    SwallowOne,
    Delivery(u8),
    Garble,
    FatalHealth(u8),
    PageRequest(i32),
}

impl Fault {
    fn apply(self, f: &mut Faults) {
        match self {
            Fault::SwallowForever | Fault::SwallowOne => f.swallow_commands = true,
            Fault::Delivery(s) => f.next_delivery_status = Some(s),
            Fault::Garble => f.garble_next_output_length = true,
            Fault::FatalHealth(s) => f.fatal_health = Some(s),
            Fault::PageRequest(n) => f.page_request = Some(n),
        }
    }
}

struct State {
    mode: Hostility,
    /// Buffers the driver freed while the device still held them.
    violations: Vec<String>,
    /// Command doorbells reach the device only at the driver's next `relax()` (a device that
    /// takes a moment): the driver's wait loop runs before any command completes.
    defer: bool,
    /// Command doorbells held back.
    deferred: Vec<[u8; 4]>,
    doorbells: u64,
    rng: u64,
    clear_swallow_at_next: bool,
}

/// A HAL over the in-process model that misbehaves on purpose.
#[derive(Clone)]
struct HostileHal {
    inner: TestHal,
    st: Arc<Mutex<State>>,
}

impl HostileHal {
    fn new(mode: Hostility, seed: u64) -> (Arc<SimHal>, HostileHal) {
        let sim = SimHal::new();
        let h = HostileHal {
            inner: TestHal(sim.clone()),
            st: Arc::new(Mutex::new(State {
                mode,
                doorbells: 0,
                rng: seed | 1,
                violations: Vec::new(),
                defer: false,
                deferred: Vec::new(),
                clear_swallow_at_next: false,
            })),
        };
        (sim, h)
    }

    fn doorbells(&self) -> u64 {
        self.st.lock().unwrap().doorbells
    }

    fn set_defer(&self, on: bool) {
        self.st.lock().unwrap().defer = on;
    }

    fn violations(&self) -> Vec<String> {
        self.st.lock().unwrap().violations.clone()
    }
}

/// A DMA buffer that, when the driver frees it, checks that the device holds none of it: no
/// firmware page the model owns and no page a live mkey translates to lies inside it. On
/// hardware the device would later write into the reused memory.
struct HostileDma {
    inner: Option<SimDma>,
    sim: Arc<SimHal>,
    st: Arc<Mutex<State>>,
}

// SAFETY: forwards to the inner buffer, unchanged.
unsafe impl mlx5::hal::DmaBuffer for HostileDma {
    fn bus_addr(&self) -> u64 {
        self.inner.as_ref().map_or(0, |d| d.bus_addr())
    }
    fn cpu_ptr(&self) -> *mut u8 {
        self.inner
            .as_ref()
            .map_or(std::ptr::null_mut(), |d| d.cpu_ptr())
    }
    fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |d| d.len())
    }
}

impl Drop for HostileDma {
    fn drop(&mut self) {
        use mlx5::hal::DmaBuffer;
        let (bus, len) = (self.bus_addr(), self.len() as u64);
        let end = bus + len;
        let held = self.sim.with_hca(|h| {
            h.dma_in_use()
                .into_iter()
                .find(|&(a, l, _)| a < end && a.saturating_add(l) > bus)
                .map(|(a, l, who)| format!("{who} at {a:#x}+{l:#x}"))
        });
        if let Some(what) = held {
            self.st
                .lock()
                .unwrap()
                .violations
                .push(format!("freed {bus:#x}+{len:#x}: {what}"));
        }
        drop(self.inner.take());
    }
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

impl Hal for HostileHal {
    type Dma = HostileDma;

    fn bar0_len(&self) -> usize {
        self.inner.bar0_len()
    }
    fn mmio_read32(&self, offset: usize) -> [u8; 4] {
        let real = self.inner.mmio_read32(offset);
        let mut st = self.st.lock().unwrap();
        if let Hostility::RandomReads { one_in } = st.mode {
            let r = xorshift(&mut st.rng);
            if ((r >> 32) as u32).is_multiple_of(one_in) {
                return (xorshift(&mut st.rng) as u32).to_ne_bytes();
            }
        }
        real
    }
    fn mmio_write32(&self, offset: usize, bytes: [u8; 4]) {
        if offset == init_seg::CMD_DBELL {
            let apply = {
                let mut st = self.st.lock().unwrap();
                let n = st.doorbells;
                st.doorbells += 1;
                let clear = std::mem::take(&mut st.clear_swallow_at_next);
                let fault = match st.mode {
                    Hostility::FaultAt { at, fault } if at == n => {
                        st.clear_swallow_at_next = matches!(fault, Fault::SwallowOne);
                        Some(fault)
                    }
                    _ => None,
                };
                (clear, fault)
            };
            match apply {
                (true, _) => self
                    .inner
                    .0
                    .with_hca(|h| h.update_faults(|f| f.swallow_commands = false)),
                (false, Some(fault)) => self
                    .inner
                    .0
                    .with_hca(|h| h.update_faults(|f| fault.apply(f))),
                _ => {}
            }
            let mut st = self.st.lock().unwrap();
            if st.defer {
                st.deferred.push(bytes);
                return;
            }
        }
        self.inner.mmio_write32(offset, bytes)
    }
    fn mmio_write64(&self, offset: usize, bytes: [u8; 8]) {
        self.inner.mmio_write64(offset, bytes)
    }
    fn mmio_copy_bf(&self, offset: usize, src: &[u8; 64]) {
        self.inner.mmio_copy_bf(offset, src)
    }
    fn dma_alloc(&self, size: usize, align: usize) -> Result<HostileDma, HalError> {
        Ok(HostileDma {
            inner: Some(self.inner.dma_alloc(size, align)?),
            sim: self.inner.0.clone(),
            st: self.st.clone(),
        })
    }
    fn now(&self) -> Duration {
        self.inner.now()
    }
    fn relax(&self) {
        let held = std::mem::take(&mut self.st.lock().unwrap().deferred);
        for b in held {
            self.inner.mmio_write32(init_seg::CMD_DBELL, b);
        }
        self.inner.relax()
    }
    fn function_level_reset(&self) -> Result<(), HalError> {
        self.inner.function_level_reset()
    }
}

/// Short deadlines: a lost command costs 20 ms.
fn hostile_config() -> ContextConfig {
    ContextConfig {
        fw_init_timeout: Duration::from_millis(5),
        cmd: mlx5::cmd::CmdTimeouts {
            command: Duration::from_millis(20),
            health_poll: Duration::from_millis(1),
        },
        ..ContextConfig::default()
    }
}

/// Errors seen, by kind (a panic ends the test; everything else is counted).
#[derive(Default, Debug)]
struct Seen {
    ok: usize,
    errors: std::collections::BTreeMap<String, usize>,
}

impl Seen {
    fn note(&mut self, r: Result<(), Error>) {
        match r {
            Ok(()) => self.ok += 1,
            Err(e) => {
                let k = format!("{e:?}");
                let k = k.split([' ', '(', '{']).next().unwrap_or("").to_string();
                *self.errors.entry(k).or_default() += 1;
            }
        }
    }
}

/// Memory the device still holds was not freed: every firmware page the model owns and every
/// page a live mkey translates to is still allocated DMA memory (a freed region is gone from
/// the model's memory, so the device would write into reused memory on hardware).
fn device_memory_is_alive(sim: &SimHal, what: &str) {
    let mem = sim.hca.memory().clone();
    sim.with_hca(|h| {
        for a in h.pages().owned_pages() {
            assert!(
                mem.host_ptr(a, 4096).is_some(),
                "{what}: firmware page {a:#x} the device owns was freed"
            );
        }
        for k in h.mkeys().iter() {
            if let Some((_, pages)) = k.mtt_pages() {
                for p in pages {
                    assert!(
                        mem.host_ptr(p, 1).is_some(),
                        "{what}: page {p:#x} of live mkey {:#x} was freed",
                        k.key()
                    );
                }
            }
        }
    });
}

/// Buffers freed while the device held them, by what held them.
#[derive(Default)]
struct Findings {
    by_kind: std::collections::BTreeMap<String, Vec<String>>,
}

/// Holders whose release paths belong to other parts of the driver (cq.rs, eq.rs, qp.rs) and
/// are fixed there (issue 7, "freed while the device holds it"); until then their findings are
/// printed loudly instead of failing this test. Firmware pages and mkeys must be clean.
const FIXED_ELSEWHERE: &[&str] = &[];

impl Findings {
    fn note(&mut self, what: &str, v: Vec<String>) {
        for f in v {
            let holder = f.split(": ").nth(1).unwrap_or("");
            let kind = holder.split(' ').next().unwrap_or("").to_string();
            self.by_kind
                .entry(kind)
                .or_default()
                .push(format!("{what}: {f}"));
        }
    }

    fn check(&self) {
        let mut fail = Vec::new();
        for (kind, v) in &self.by_kind {
            if FIXED_ELSEWHERE.contains(&kind.as_str()) {
                eprintln!(
                    "SKIPPED (fixed outside mr/pages): {} buffer(s) of a {kind} freed while the \
                     device held them: {v:#?}",
                    v.len(),
                );
            } else {
                fail.extend(v.iter().cloned());
            }
        }
        assert!(
            fail.is_empty(),
            "freed while the device held them: {fail:#?}"
        );
    }
}

/// The lifecycle: every step that can fail returns its typed error.
fn lifecycle(hal: HostileHal) -> Result<(), Error> {
    lifecycle_with(hal, hostile_config())
}

fn lifecycle_with(hal: HostileHal, cfg: ContextConfig) -> Result<(), Error> {
    let ctx = Context::open(hal, cfg)?;
    let _ = ctx.query_port(1);
    let _ = ctx.query_gid(0);
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_cq(16)?;
    let m = pd.alloc_mr(8192, AccessFlags::ALL)?;
    let mut a = pd.create_qp(&cq, &cq, &QpCaps::default())?;
    let mut b = pd.create_qp(&cq, &cq, &QpCaps::default())?;
    let (ea, eb) = (a.endpoint(), b.endpoint());
    a.connect(&eb, &ConnectOptions::default())?;
    b.connect(&ea, &ConnectOptions::default())?;
    let _ = m.write(0, b"hostile");
    let wr = SendWr {
        wr_id: 7,
        op: SendOp::Write {
            remote: mlx5::Remote {
                addr: m.addr() + 4096,
                rkey: m.rkey(),
            },
            imm: None,
        },
        data: SendData::Sges(&[m.sge(0, 7)]),
        flags: SendFlags::SIGNALED,
    };
    a.post_send(&[wr])?;
    let _ = cq.poll_wait(1, Duration::from_millis(50))?;
    let _ = ctx.poll_events();
    drop(a);
    drop(b);
    drop(m);
    drop(cq);
    drop(pd);
    ctx.close().map_err(Error::from)
}

/// The Ethernet queue's lifecycle ([`mlx5::EthQueue`]): open, a frame out, a receive
/// poll, close; every step that can fail returns its typed error.
fn eth_lifecycle_with(hal: HostileHal, cfg: ContextConfig) -> Result<(), Error> {
    let ctx = Context::open(hal, cfg)?;
    let mut q = ctx.open_eth(&mlx5::EthConfig::default())?;
    let mut f = [0u8; 64];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&q.mac());
    let _ = q.send(&f);
    let _ = q.try_recv(|f| f.len());
    let _ = q.sends_in_flight();
    q.close()?;
    ctx.close().map_err(Error::from)
}

#[test]
fn every_model_fault_at_every_command_of_the_lifecycle() {
    fault_matrix(lifecycle_with);
}

#[test]
fn every_model_fault_at_every_command_of_the_eth_lifecycle() {
    fault_matrix(eth_lifecycle_with);
}

/// Runs `lifecycle` with every model fault at every command it sends (and hung firmware at a
/// sample of them): it never panics or hangs, frees no memory the device holds, and ends in
/// a typed error or works.
fn fault_matrix(lifecycle_with: fn(HostileHal, ContextConfig) -> Result<(), Error>) {
    let run = |hal| lifecycle_with(hal, hostile_config());
    // The clean run: it works, and it tells how many commands a lifecycle takes.
    let (_sim, hal) = HostileHal::new(Hostility::None, 1);
    let probe = hal.clone();
    // Ordinary deadlines: a loaded machine must not make the clean run time out.
    lifecycle_with(hal, test_config()).expect("the clean lifecycle works");
    let total = probe.doorbells();
    assert!(total > 20, "a lifecycle is {total} commands");

    let faults = [
        Fault::SwallowOne,
        Fault::Delivery(0x1),
        Fault::Delivery(0x7),
        Fault::Delivery(0x7f),
        Fault::Garble,
        Fault::FatalHealth(0x8),
        Fault::PageRequest(16),
        Fault::PageRequest(-16),
        Fault::PageRequest(i32::MAX),
        Fault::PageRequest(i32::MIN),
    ];
    let mut seen = Seen::default();
    let mut found = Findings::default();
    for (fault, defer) in faults.iter().flat_map(|&f| [(f, false), (f, true)]) {
        for at in 0..total + 2 {
            let (sim, hal) = HostileHal::new(Hostility::FaultAt { at, fault }, 1);
            hal.set_defer(defer);
            let probe = hal.clone();
            seen.note(run(hal));
            let what = format!("{fault:?} at command {at}, deferred doorbells {defer}");
            found.note(&what, probe.violations());
            device_memory_is_alive(&sim, &what);
        }
    }
    // Firmware that hangs for good: every later command times out (20 ms each), so a
    // sample of positions.
    for at in (0..total).step_by(7) {
        let (sim, hal) = HostileHal::new(
            Hostility::FaultAt {
                at,
                fault: Fault::SwallowForever,
            },
            1,
        );
        let probe = hal.clone();
        seen.note(run(hal));
        let what = format!("hung firmware at command {at}");
        found.note(&what, probe.violations());
        device_memory_is_alive(&sim, &what);
    }
    eprintln!("{total} commands per lifecycle; outcomes: {seen:?}");
    found.check();
    assert!(seen.ok > 0 && !seen.errors.is_empty());
}

#[test]
fn random_bar_reads_never_panic_or_hang() {
    let mut seen = Seen::default();
    let mut found = Findings::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut runs = 0;
    for one_in in [1u32, 2, 8, 32, 128, 512] {
        for _ in 0..200 {
            let s = xorshift(&mut seed);
            let (sim, hal) = HostileHal::new(Hostility::RandomReads { one_in }, s);
            let probe = hal.clone();
            seen.note(lifecycle(hal));
            let what = format!("random reads 1/{one_in} seed {s:#x}");
            found.note(&what, probe.violations());
            device_memory_is_alive(&sim, &what);
            runs += 1;
        }
    }
    eprintln!("{runs} runs with random BAR reads; outcomes: {seen:?}");
    found.check();
    assert!(!seen.errors.is_empty());
}

#[test]
fn a_refused_page_request_seen_while_a_command_waits_does_not_fail_that_command() {
    let (sim, hal) = HostileHal::new(Hostility::None, 1);
    let probe = hal.clone();
    // Ordinary deadlines: nothing here is meant to time out.
    let ctx = Context::open(hal, test_config()).expect("bring-up");
    // The device asks for i32::MAX pages, and from now on commands complete only once the
    // driver waits: the request is seen inside the next command's wait loop.
    sim.with_hca(|h| h.update_faults(|f| f.page_request = Some(i32::MAX)));
    probe.set_defer(true);
    let pd = ctx.alloc_pd();
    assert!(
        pd.is_ok(),
        "ALLOC_PD succeeded on the device: {:?}",
        pd.err()
    );
    // The request was answered with CANT_GIVE, on the nested slot.
    assert_eq!(sim.with_hca(|h| h.pages().cant_give_count()), 1);
    assert_eq!(ctx.pages_held(), sim.with_hca(|h| h.pages().owned()));
    drop(pd);
    ctx.close().expect("clean teardown");
}
