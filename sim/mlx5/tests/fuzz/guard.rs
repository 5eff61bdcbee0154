//! Guarded guest memory: a memfd mapped through [`MappedMemory`], with guard regions before and
//! after the mapped section, checked after every step.

use super::*;

/// Bus address of the guest RAM the fuzzed model gets.
pub const BASE: u64 = 0x1_0000_0000;
/// Guard bytes before and after the mapped section, in the same file.
pub const GUARD: u64 = 64 << 10;
const GUARD_BYTE: u8 = 0xa5;

/// A memfd of `GUARD + size + GUARD` bytes whose middle is the device's guest RAM.
pub struct GuardedRam {
    pub file: File,
    pub size: u64,
    pub mem: Arc<MappedMemory>,
    next: AtomicU64,
}

impl GuardedRam {
    pub fn new(size: u64) -> GuardedRam {
        let name = std::ffi::CString::new("mlx5-fuzz-ram").unwrap();
        // SAFETY: a valid NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nobody else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(GUARD + size + GUARD).unwrap();
        let guard = vec![GUARD_BYTE; GUARD as usize];
        file.write_all_at(&guard, 0).unwrap();
        file.write_all_at(&guard, GUARD + size).unwrap();
        let mem = Arc::new(MappedMemory::new());
        mem.replace(vec![MemSection {
            gpa: BASE,
            size,
            offset: GUARD,
            fd: OwnedFd::from(file.try_clone().unwrap()),
        }])
        .unwrap();
        GuardedRam {
            file,
            size,
            mem,
            next: AtomicU64::new(BASE),
        }
    }

    /// Bump allocation inside the section (never freed; an epoch makes a new one).
    pub fn alloc(&self, size: usize, align: usize) -> u64 {
        let a = align.max(8) as u64;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let at = (cur + a - 1) & !(a - 1);
            let end = at + size as u64;
            assert!(end <= BASE + self.size, "fuzz harness out of guest RAM");
            match self
                .next
                .compare_exchange(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return at,
                Err(v) => cur = v,
            }
        }
    }

    /// Free bytes left for [`alloc`](Self::alloc).
    pub fn left(&self) -> u64 {
        BASE + self.size - self.next.load(Ordering::Relaxed)
    }

    /// Err if a byte of either guard region changed: the model wrote outside its memory.
    pub fn check_guards(&self) -> Result<(), String> {
        let mut buf = vec![0u8; GUARD as usize];
        for (name, at) in [("below", 0), ("above", GUARD + self.size)] {
            self.file.read_exact_at(&mut buf, at).unwrap();
            if let Some(i) = buf.iter().position(|&b| b != GUARD_BYTE) {
                return Err(format!(
                    "guard region {name} the guest RAM changed at file offset {:#x}",
                    at + i as u64
                ));
            }
        }
        Ok(())
    }

    /// Fills the whole section with random bytes.
    pub fn randomize(&self, rng: &mut Rng) {
        let chunk = rng.bytes(64 << 10);
        let mut off = 0;
        while off < self.size {
            let n = (self.size - off).min(chunk.len() as u64) as usize;
            // Rotate so pages differ.
            let rot = rng.below(chunk.len() as u64) as usize;
            let mut c = chunk.clone();
            c.rotate_left(rot);
            self.file.write_all_at(&c[..n], GUARD + off).unwrap();
            off += n as u64;
        }
    }
}

/// The ConnectX-5 function (inline execution, no initialization delay) over guarded RAM.
pub struct Guarded {
    pub func: Mutex<Mlx5Function>,
    pub ram: GuardedRam,
}

impl Guarded {
    pub fn new(size: u64) -> Guarded {
        Guarded::with_mac(size, mlx5_sim::HcaConfig::default().mac)
    }
    /// [`Guarded::new`] with the port's permanent MAC `mac` (two HCAs on one wire).
    pub fn with_mac(size: u64, mac: [u8; 6]) -> Guarded {
        let ram = GuardedRam::new(size);
        let mut opts = Mlx5Options {
            exec: ExecMode::Inline,
            hca: mlx5_sim::HcaConfig { mac },
            ..Default::default()
        };
        opts.init.init_delay = Duration::ZERO;
        let mut func = Mlx5Function::with_options(opts);
        func.set_guest_memory(ram.mem.clone());
        func.set_intx(Intx::new());
        Guarded {
            func: Mutex::new(func),
            ram,
        }
    }
    pub(super) fn f(&self) -> std::sync::MutexGuard<'_, Mlx5Function> {
        self.func.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn bar_read(&self, off: u64, size: u32) -> u64 {
        self.f().bar_read(0, off, size)
    }
    pub fn bar_write(&self, off: u64, v: u64, size: u32) {
        self.f().bar_write(0, off, v, size)
    }
}

impl Device for Guarded {
    fn mem(&self) -> &dyn GuestMemory {
        &*self.ram.mem
    }
    fn alloc(&self, size: usize, align: usize) -> u64 {
        self.ram.alloc(size, align)
    }
    fn read32(&self, offset: u64) -> u32 {
        self.bar_read(offset, 4) as u32
    }
    fn write32(&self, offset: u64, value: u32) {
        self.bar_write(offset, value.into(), 4)
    }
    fn write64(&self, offset: u64, value: u64) {
        self.bar_write(offset, value, 8)
    }
    fn settle(&self) -> bool {
        true
    }
    fn poll(&self) {
        let f = self.f();
        let mut h = f.lock_hca();
        mlx5_sim::datapath::poll_wire(&mut h.dp());
    }
}
