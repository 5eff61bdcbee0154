//! SIGBUS: a file that shrinks under its mapping (see the module documentation in
//! `memory/mod.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Most mappings registered at once (QEMU sends at most 8 sections per SYNC_SYSMEM; a
/// replace holds the old and the new set for a moment).
pub const SLOTS: usize = 256;

struct Slot {
    /// Host address range `[start, end)`; `end == 0` while free or being filled.
    start: AtomicUsize,
    end: AtomicUsize,
    /// 1 while the slot is taken.
    taken: AtomicBool,
    /// Set by the handler: an access to this mapping faulted.
    hit: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    taken: AtomicBool::new(false),
    hit: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// The SIGBUS action found when the handler was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
/// Faults the handler turned into zero pages (all mappings, for tests and logs).
static CAUGHT: AtomicUsize = AtomicUsize::new(0);

const PAGE: usize = 4096;

/// Installs the handler once per process. Idempotent; fails only if `sigaction` does.
fn install() -> std::io::Result<()> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = INSTALLED.get_or_init(|| {
        // SAFETY: sigaction structs are plain C data for which all-zero is valid; the new
        // action points at an extern "C" handler with the SA_SIGINFO signature, and the old
        // action is saved before any fault can reach the handler (it only reads PREVIOUS
        // after that).
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
            let _ = PREVIOUS.set(old);
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    });
    r.map_err(std::io::Error::from_raw_os_error)
}

/// Registers host range `[start, start + len)`; returns its slot.
pub(super) fn register(start: usize, len: usize) -> std::io::Result<usize> {
    install()?;
    for (i, s) in TABLE.iter().enumerate() {
        if s.taken
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            s.hit.store(false, Ordering::Relaxed);
            s.start.store(start, Ordering::Relaxed);
            s.end.store(start.saturating_add(len), Ordering::Release);
            return Ok(i);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::OutOfMemory,
        "too many guest memory mappings to guard against SIGBUS",
    ))
}

/// Unregisters a slot (before its range is unmapped).
pub(super) fn release(slot: usize) {
    let s = &TABLE[slot];
    s.end.store(0, Ordering::Release);
    s.start.store(0, Ordering::Relaxed);
    s.taken.store(false, Ordering::Release);
}

/// True once an access inside the slot's range faulted.
#[inline]
pub(super) fn hit(slot: usize) -> bool {
    TABLE[slot].hit.load(Ordering::Relaxed)
}

/// Faults caught so far in this process.
pub fn caught() -> usize {
    CAUGHT.load(Ordering::Relaxed)
}

/// The handler. Async-signal-safe: atomics, one `mmap`, one `sigaction`.
extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in TABLE.iter() {
        let end = s.end.load(Ordering::Acquire);
        let start = s.start.load(Ordering::Relaxed);
        if end == 0 || addr < start || addr >= end {
            continue;
        }
        let page = addr & !(PAGE - 1);
        // SAFETY: `page` lies in a live mapping this process made (the slot is registered
        // from mmap until before munmap, and accesses happen only in between); replacing
        // that one page by private anonymous memory touches no other object. The owner
        // unmaps the whole range later, which covers this page too.
        let p = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            s.hit.store(true, Ordering::Relaxed);
            CAUGHT.fetch_add(1, Ordering::Relaxed);
            return; // the access is retried and now completes
        }
        break;
    }
    // Not ours: hand it to the previous action.
    let Some(prev) = PREVIOUS.get() else {
        return default_action(sig);
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        default_action(sig);
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
        // signature; we pass it exactly what the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Restores the default action; the faulting access is retried and kills the process as
/// an unhandled SIGBUS would have.
fn default_action(sig: libc::c_int) {
    // SAFETY: all-zero sigaction with SIG_DFL is valid; sigaction is async-signal-safe.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}
