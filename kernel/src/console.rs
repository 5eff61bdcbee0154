//! The serial console (COM1) and the `log` backend.

use core::fmt::{self, Write};
use spin::Mutex;
use uart_16550::SerialPort;

pub use crate::line::{ReadLineError, LINE_MAX};

const COM1: u16 = 0x3f8;

static SERIAL: Mutex<Option<SerialPort>> = Mutex::new(None);

pub fn init() {
    // SAFETY: 0x3F8 is COM1's base port on PC-compatible machines.
    let mut port = unsafe { SerialPort::new(COM1) };
    port.init();
    *SERIAL.lock() = Some(port);
}

/// Writes to COM1 under the console lock.
pub fn write_fmt(args: fmt::Arguments<'_>) {
    x86_64::instructions::interrupts::without_interrupts(|| {
        if let Some(port) = SERIAL.lock().as_mut() {
            let _ = port.write_fmt(args);
        }
    });
}

/// A writer for panics and exceptions: it takes the console even if the lock is held (the
/// holder was interrupted and will never finish).
pub struct Emergency;

impl Write for Emergency {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if SERIAL.is_locked() {
            // SAFETY: single CPU; whoever held the lock was interrupted by this fatal path and
            // will not run again.
            unsafe { SERIAL.force_unlock() };
        }
        let mut guard = SERIAL.lock();
        match guard.as_mut() {
            Some(port) => port.write_str(s),
            None => {
                // SAFETY: as in `init`; the console was never set up, so use the port directly.
                let mut port = unsafe { SerialPort::new(COM1) };
                port.init();
                let r = port.write_str(s);
                *guard = Some(port);
                r
            }
        }
    }
}

/// Prints a line to the console without a log prefix (the boot report uses this).
#[macro_export]
macro_rules! println {
    () => { $crate::console::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::write_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}

struct Logger;

static LOGGER: Logger = Logger;

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let us = crate::time::micros_since_boot();
        write_fmt(format_args!(
            "[{:>5}.{:06}] {:<5} {}: {}\n",
            us / 1_000_000,
            us % 1_000_000,
            record.level(),
            record.target(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

/// Installs the logger at `level` (from the `log=` cmdline option).
pub fn init_log(level: log::LevelFilter) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level);
}

/// The line being received, kept across [`read_line`] calls.
static LINE: Mutex<crate::line::LineAssembler> = Mutex::new(crate::line::LineAssembler::new());

/// Reads one line from COM1 (without the line end; empty lines are skipped), polling until
/// `deadline`. Returns its length in `buf`. A line still arriving at the deadline is kept:
/// [`ReadLineError::Timeout`] says how many of its bytes came, and the next call returns the
/// whole line. A line longer than `buf` is dropped to its end and reported as
/// [`ReadLineError::TooLong`]. (16550: LSR bit 0 = data ready, RBR at the base port.)
pub fn read_line(buf: &mut [u8], deadline: crate::time::Deadline) -> Result<usize, ReadLineError> {
    use x86_64::instructions::port::Port;
    let mut lsr = Port::<u8>::new(COM1 + 5);
    let mut rbr = Port::<u8>::new(COM1);
    let next = || {
        // SAFETY: reading the line status register has no side effect.
        if unsafe { lsr.read() } & 1 != 0 {
            // SAFETY: data is ready (LSR.DR); reading RBR takes the byte.
            Some(unsafe { rbr.read() })
        } else {
            None
        }
    };
    let expired = || {
        if deadline.expired() {
            return true;
        }
        // Back off between polls of an empty port. Each LSR read is a port-I/O exit that
        // QEMU serves under its big lock; polled back to back they can keep QEMU's main
        // loop, which moves the bytes from the host side into the UART, from running at
        // all, so a line that was sent never arrives. 200 µs is far below a line's worth
        // of the host's writes and leaves the main loop the lock.
        crate::time::spin_for(core::time::Duration::from_micros(200));
        false
    };
    LINE.lock().read_line(buf, next, expired)
}
