//! The PCI function as front ends see it, a reusable type-0 configuration space, and the INTx
//! line.
//!
//! A front end (the QEMU multi-process proxy today, vfio-user later) owns a [`PciFunction`] and
//! forwards config-space and BAR accesses to it. BAR accesses arrive already decoded to
//! (BAR index, offset): the function's [`ConfigSpace`] tracks where software programmed each BAR.
//!
//! Register layouts here are the PCI Local Bus 3.0 / PCI Express 3.0 type-0 header, not PRM.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use crate::memory::GuestMemory;

/// Address space of a BAR access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressSpace {
    /// Memory space (MMIO).
    Memory,
    /// I/O port space.
    Io,
}

/// A PCI function behind a front end.
///
/// `len`/`size` are access widths in bytes: 1, 2 or 4 for config space; 1, 2, 4 or 8 for BARs.
/// Values are little-endian as the CPU sees them (byte at the lowest address in bits 7:0).
pub trait PciFunction: Send {
    /// Reads `len` bytes of configuration space at `offset`. Out-of-range accesses read 0.
    fn config_read(&mut self, offset: u32, len: u32) -> u32;
    /// Writes `len` bytes of configuration space at `offset`. Out-of-range accesses are ignored.
    fn config_write(&mut self, offset: u32, value: u32, len: u32);
    /// Reads `size` bytes at `offset` inside BAR `bar`.
    fn bar_read(&mut self, bar: u8, offset: u64, size: u32) -> u64;
    /// Writes `size` bytes at `offset` inside BAR `bar`.
    fn bar_write(&mut self, bar: u8, offset: u64, value: u64, size: u32);
    /// Function-level reset: configuration space back to power-on values, device state too.
    fn reset(&mut self);
    /// Translates a bus address to (BAR index, offset), for front ends that forward absolute
    /// addresses. `None` when no enabled BAR decodes all of `[addr, addr + len)`.
    fn decode_bar_address(&self, space: AddressSpace, addr: u64, len: u64) -> Option<(u8, u64)>;
    /// Hands the function the memory its DMA engine reaches. Called again whenever the front end
    /// changes it (the object behind may also change its contents on its own, e.g. MappedMemory).
    fn set_guest_memory(&mut self, mem: Arc<dyn GuestMemory>);
    /// Hands the function its INTx line.
    fn set_intx(&mut self, intx: Intx) {
        let _ = intx;
    }
}

// ---------------------------------------------------------------------------------------------
// Type-0 header offsets (PCI Local Bus Specification 3.0, 6.1)
// ---------------------------------------------------------------------------------------------

/// Configuration space the proxy can reach (conventional PCI header + device-specific area).
pub const CONFIG_SPACE_SIZE: usize = 256;

pub const PCI_VENDOR_ID: usize = 0x00;
pub const PCI_DEVICE_ID: usize = 0x02;
pub const PCI_COMMAND: usize = 0x04;
pub const PCI_STATUS: usize = 0x06;
pub const PCI_REVISION_ID: usize = 0x08;
pub const PCI_CLASS_PROG: usize = 0x09;
pub const PCI_CLASS_DEVICE: usize = 0x0a;
pub const PCI_CACHE_LINE_SIZE: usize = 0x0c;
pub const PCI_HEADER_TYPE: usize = 0x0e;
pub const PCI_BASE_ADDRESS_0: usize = 0x10;
pub const PCI_CARDBUS_CIS: usize = 0x28;
pub const PCI_SUBSYSTEM_VENDOR_ID: usize = 0x2c;
pub const PCI_SUBSYSTEM_ID: usize = 0x2e;
pub const PCI_ROM_ADDRESS: usize = 0x30;
pub const PCI_CAPABILITY_LIST: usize = 0x34;
pub const PCI_INTERRUPT_LINE: usize = 0x3c;
pub const PCI_INTERRUPT_PIN: usize = 0x3d;

pub const PCI_COMMAND_IO: u16 = 0x1;
pub const PCI_COMMAND_MEMORY: u16 = 0x2;
pub const PCI_COMMAND_MASTER: u16 = 0x4;
pub const PCI_COMMAND_PARITY: u16 = 0x40;
pub const PCI_COMMAND_SERR: u16 = 0x100;
pub const PCI_COMMAND_INTX_DISABLE: u16 = 0x400;

pub const PCI_STATUS_INTERRUPT: u16 = 0x8;
pub const PCI_STATUS_CAP_LIST: u16 = 0x10;
/// Error bits software clears by writing 1: master data parity error, signalled/received target
/// abort, received master abort, signalled system error, detected parity error.
pub const PCI_STATUS_W1C: u16 = 0xf900;

pub const PCI_CAP_ID_PM: u8 = 0x01;
pub const PCI_CAP_ID_EXP: u8 = 0x10;

const BAR_SPACE_IO: u32 = 0x1;
const BAR_MEM_TYPE_64: u32 = 0x4;
const BAR_MEM_PREFETCH: u32 = 0x8;

/// What a BAR decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarKind {
    /// 32-bit memory BAR.
    Memory32,
    /// 64-bit memory BAR occupying this slot and the next. With `high_writable == false` the
    /// upper dword reads as zero and ignores writes (the BAR can only be placed below 4 GiB).
    Memory64 { high_writable: bool },
    /// I/O port BAR.
    Io,
}

/// A BAR definition: kind and size (a power of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarDef {
    pub kind: BarKind,
    pub size: u64,
    pub prefetchable: bool,
}

/// Identity registers of a function.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    pub vendor_id: u16,
    pub device_id: u16,
    /// 24-bit class code: base class << 16 | subclass << 8 | programming interface.
    pub class_code: u32,
    pub revision: u8,
    pub subsystem_vendor_id: u16,
    pub subsystem_id: u16,
    /// 0 = none, 1 = INTA# .. 4 = INTD#.
    pub interrupt_pin: u8,
}

/// A type-0 configuration header (256 bytes): read-only identity, write masks, RW1C bits,
/// BAR sizing and tracking, and a capability list.
#[derive(Clone)]
pub struct ConfigSpace {
    /// Current values of everything except the BAR registers.
    data: [u8; CONFIG_SPACE_SIZE],
    /// Power-on values, restored by `reset`.
    defaults: [u8; CONFIG_SPACE_SIZE],
    /// Bits software may write.
    wmask: [u8; CONFIG_SPACE_SIZE],
    /// Bits software clears by writing 1.
    w1cmask: [u8; CONFIG_SPACE_SIZE],
    bars: [Option<BarDef>; 6],
    /// Programmed address of each BAR (for a 64-bit BAR, in its lower slot).
    bar_addr: [u64; 6],
    /// Offset of the last capability added (to link the next one), 0 if none.
    last_cap: usize,
}

impl ConfigSpace {
    /// A header with the given identity, no BARs and no capabilities.
    pub fn new(id: Identity) -> Self {
        let mut c = ConfigSpace {
            data: [0; CONFIG_SPACE_SIZE],
            defaults: [0; CONFIG_SPACE_SIZE],
            wmask: [0; CONFIG_SPACE_SIZE],
            w1cmask: [0; CONFIG_SPACE_SIZE],
            bars: [None; 6],
            bar_addr: [0; 6],
            last_cap: 0,
        };
        c.put16(PCI_VENDOR_ID, id.vendor_id);
        c.put16(PCI_DEVICE_ID, id.device_id);
        c.data[PCI_REVISION_ID] = id.revision;
        c.data[PCI_CLASS_PROG] = id.class_code as u8;
        c.put16(PCI_CLASS_DEVICE, (id.class_code >> 8) as u16);
        c.data[PCI_HEADER_TYPE] = 0x00; // type 0, single function
        c.put16(PCI_SUBSYSTEM_VENDOR_ID, id.subsystem_vendor_id);
        c.put16(PCI_SUBSYSTEM_ID, id.subsystem_id);
        c.data[PCI_INTERRUPT_PIN] = id.interrupt_pin;
        c.set_wmask16(
            PCI_COMMAND,
            PCI_COMMAND_MEMORY
                | PCI_COMMAND_MASTER
                | PCI_COMMAND_PARITY
                | PCI_COMMAND_SERR
                | PCI_COMMAND_INTX_DISABLE,
        );
        c.w1cmask[PCI_STATUS..PCI_STATUS + 2].copy_from_slice(&PCI_STATUS_W1C.to_le_bytes());
        c.wmask[PCI_CACHE_LINE_SIZE] = 0xff;
        c.wmask[PCI_INTERRUPT_LINE] = 0xff;
        c.defaults = c.data;
        c
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.data[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn set_wmask16(&mut self, off: usize, m: u16) {
        self.wmask[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }

    /// Defines BAR `index`. A 64-bit BAR also takes slot `index + 1`.
    ///
    /// Panics on a definition that cannot exist (size not a power of two, too small, slot taken):
    /// that is a bug in the device model, not input from the wire.
    pub fn set_bar(&mut self, index: usize, def: BarDef) {
        let is64 = matches!(def.kind, BarKind::Memory64 { .. });
        assert!(
            index < 6 && (!is64 || index < 5),
            "BAR {index} out of range"
        );
        assert!(
            def.size.is_power_of_two(),
            "BAR size {:#x} not a power of two",
            def.size
        );
        match def.kind {
            BarKind::Io => assert!(def.size >= 4 && def.size <= 256, "bad I/O BAR size"),
            BarKind::Memory32 => assert!(def.size >= 16 && def.size <= 1 << 31, "bad BAR size"),
            BarKind::Memory64 { high_writable } => {
                assert!(def.size >= 16, "bad BAR size");
                assert!(
                    high_writable || def.size <= 1 << 31,
                    "BAR too large for a zero high dword"
                );
            }
        }
        assert!(
            self.bars[index].is_none() && !self.is_high_half(index),
            "BAR {index} taken"
        );
        if is64 {
            assert!(self.bars[index + 1].is_none(), "BAR {} taken", index + 1);
        }
        self.bars[index] = Some(def);
        self.bar_addr[index] = 0;
        if def.kind == BarKind::Io {
            let m = u16::from_le_bytes([self.wmask[PCI_COMMAND], self.wmask[PCI_COMMAND + 1]]);
            self.set_wmask16(PCI_COMMAND, m | PCI_COMMAND_IO);
        }
    }

    /// True if slot `index` is the upper dword of the 64-bit BAR below it.
    fn is_high_half(&self, index: usize) -> bool {
        index > 0
            && matches!(
                self.bars[index - 1],
                Some(BarDef {
                    kind: BarKind::Memory64 { .. },
                    ..
                })
            )
    }

    /// Adds a capability at `offset` with the given body (the bytes after the ID and next
    /// pointer), write mask and RW1C mask (each the same length as `body`, or empty for none).
    /// Links it at the end of the list and sets the status register's capability-list bit.
    ///
    /// Panics on a layout bug (offset inside the header, unaligned, past 256 bytes, overlapping).
    pub fn add_capability(&mut self, offset: usize, id: u8, body: &[u8], wmask: &[u8], w1c: &[u8]) {
        let len = 2 + body.len();
        assert!(
            offset >= 0x40 && offset.is_multiple_of(4),
            "capability offset {offset:#x}"
        );
        assert!(offset + len <= CONFIG_SPACE_SIZE, "capability past the end");
        assert!(wmask.is_empty() || wmask.len() == body.len());
        assert!(w1c.is_empty() || w1c.len() == body.len());
        assert!(
            self.data[offset..offset + len].iter().all(|&b| b == 0),
            "capabilities overlap"
        );
        self.data[offset] = id;
        self.data[offset + 1] = 0;
        self.data[offset + 2..offset + len].copy_from_slice(body);
        if !wmask.is_empty() {
            self.wmask[offset + 2..offset + len].copy_from_slice(wmask);
        }
        if !w1c.is_empty() {
            self.w1cmask[offset + 2..offset + len].copy_from_slice(w1c);
        }
        if self.last_cap == 0 {
            self.data[PCI_CAPABILITY_LIST] = offset as u8;
        } else {
            self.data[self.last_cap + 1] = offset as u8;
        }
        self.last_cap = offset;
        let st = u16::from_le_bytes([self.data[PCI_STATUS], self.data[PCI_STATUS + 1]]);
        self.put16(PCI_STATUS, st | PCI_STATUS_CAP_LIST);
        self.defaults = self.data;
    }

    /// Power-on state: every register back to its default, BARs unprogrammed.
    pub fn reset(&mut self) {
        self.data = self.defaults;
        self.bar_addr = [0; 6];
    }

    /// The value of BAR register slot `index` (0..6) as software reads it.
    fn bar_reg(&self, index: usize) -> u32 {
        if let Some(def) = self.bars[index] {
            let addr = self.bar_addr[index] & !(def.size - 1);
            match def.kind {
                BarKind::Io => (addr as u32 & !0x3) | BAR_SPACE_IO,
                BarKind::Memory32 | BarKind::Memory64 { .. } => {
                    let mut v = addr as u32 & !0xf;
                    if matches!(def.kind, BarKind::Memory64 { .. }) {
                        v |= BAR_MEM_TYPE_64;
                    }
                    if def.prefetchable {
                        v |= BAR_MEM_PREFETCH;
                    }
                    v
                }
            }
        } else if self.is_high_half(index) {
            match self.bars[index - 1] {
                Some(BarDef {
                    kind:
                        BarKind::Memory64 {
                            high_writable: true,
                        },
                    size,
                    ..
                }) => ((self.bar_addr[index - 1] & !(size - 1)) >> 32) as u32,
                _ => 0,
            }
        } else {
            0
        }
    }

    /// Software writes a whole dword to BAR register slot `index`.
    fn write_bar_reg(&mut self, index: usize, v: u32) {
        if let Some(def) = self.bars[index] {
            let low_mask = match def.kind {
                BarKind::Io => !0x3u32,
                _ => !0xfu32,
            } & !((def.size - 1) as u32);
            let a = &mut self.bar_addr[index];
            *a = (*a & !0xffff_ffff) | u64::from(v & low_mask);
        } else if self.is_high_half(index) {
            if let Some(BarDef {
                kind: BarKind::Memory64 {
                    high_writable: true,
                },
                size,
                ..
            }) = self.bars[index - 1]
            {
                let high_mask = (!(size - 1) >> 32) as u32;
                let a = &mut self.bar_addr[index - 1];
                *a = (*a & 0xffff_ffff) | (u64::from(v & high_mask) << 32);
            }
        }
    }

    fn bar_slot(off: usize) -> Option<usize> {
        (PCI_BASE_ADDRESS_0..PCI_BASE_ADDRESS_0 + 24)
            .contains(&off)
            .then(|| (off - 0x10) / 4)
    }

    fn byte(&self, off: usize) -> u8 {
        match Self::bar_slot(off) {
            Some(slot) => self.bar_reg(slot).to_le_bytes()[off % 4],
            None => self.data[off],
        }
    }

    /// Reads `len` (1, 2 or 4) bytes at `offset`. Anything else, or past 256 bytes, reads 0.
    pub fn read(&self, offset: u32, len: u32) -> u32 {
        let Some((off, len)) = Self::check(offset, len) else {
            return 0;
        };
        let mut b = [0u8; 4];
        for (i, x) in b.iter_mut().enumerate().take(len) {
            *x = self.byte(off + i);
        }
        u32::from_le_bytes(b)
    }

    /// Writes `len` (1, 2 or 4) bytes at `offset`, honouring read-only and RW1C bits.
    /// Anything else, or past 256 bytes, is ignored.
    pub fn write(&mut self, offset: u32, value: u32, len: u32) {
        let Some((off, len)) = Self::check(offset, len) else {
            return;
        };
        let bytes = value.to_le_bytes();
        let mut i = 0;
        while i < len {
            let o = off + i;
            if let Some(slot) = Self::bar_slot(o) {
                // Merge the written bytes of this dword into its current value.
                let base = o & !3;
                let mut cur = self.bar_reg(slot).to_le_bytes();
                while i < len && (off + i) & !3 == base {
                    cur[(off + i) % 4] = bytes[i];
                    i += 1;
                }
                self.write_bar_reg(slot, u32::from_le_bytes(cur));
            } else {
                let v = bytes[i];
                let w = self.wmask[o];
                let c = self.w1cmask[o];
                self.data[o] = ((self.data[o] & !w) | (v & w)) & !(v & c);
                i += 1;
            }
        }
    }

    fn check(offset: u32, len: u32) -> Option<(usize, usize)> {
        let (off, len) = (offset as usize, len as usize);
        (matches!(len, 1 | 2 | 4) && off + len <= CONFIG_SPACE_SIZE).then_some((off, len))
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        u16::from_le_bytes([self.data[PCI_COMMAND], self.data[PCI_COMMAND + 1]])
    }

    /// True if software set Interrupt Disable: the function must not assert INTx.
    pub fn intx_disabled(&self) -> bool {
        self.command() & PCI_COMMAND_INTX_DISABLE != 0
    }

    /// True if software enabled bus mastering (the function may DMA).
    pub fn bus_master(&self) -> bool {
        self.command() & PCI_COMMAND_MASTER != 0
    }

    /// Sets the status register's Interrupt Status bit (the function's INTx state, whether or
    /// not Interrupt Disable masks it).
    pub fn set_interrupt_status(&mut self, pending: bool) {
        if pending {
            self.data[PCI_STATUS] |= PCI_STATUS_INTERRUPT as u8;
        } else {
            self.data[PCI_STATUS] &= !(PCI_STATUS_INTERRUPT as u8);
        }
    }

    /// The address BAR `index` is programmed to (0 if unprogrammed or not a BAR).
    pub fn bar_address(&self, index: usize) -> u64 {
        match self.bars.get(index).copied().flatten() {
            Some(def) => self.bar_addr[index] & !(def.size - 1),
            None => 0,
        }
    }

    /// The definition of BAR `index`.
    pub fn bar(&self, index: usize) -> Option<BarDef> {
        self.bars.get(index).copied().flatten()
    }

    /// Translates `[addr, addr + len)` to (BAR, offset) if an enabled BAR of that space decodes
    /// all of it.
    pub fn decode(&self, space: AddressSpace, addr: u64, len: u64) -> Option<(u8, u64)> {
        let cmd = self.command();
        for (i, def) in self.bars.iter().enumerate() {
            let Some(def) = def else { continue };
            let (is_io, enable) = match def.kind {
                BarKind::Io => (true, PCI_COMMAND_IO),
                _ => (false, PCI_COMMAND_MEMORY),
            };
            if is_io != (space == AddressSpace::Io) || cmd & enable == 0 {
                continue;
            }
            let base = self.bar_address(i);
            let off = addr.wrapping_sub(base);
            if addr >= base && off < def.size && off.checked_add(len)? <= def.size {
                return Some((i as u8, off));
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------------------------
// INTx
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct IntxState {
    level: bool,
    irqfd: Option<Arc<File>>,
}

/// The function's INTx line, delivered through an eventfd (KVM irqfd with resampling).
///
/// Level-triggered semantics over an edge-like eventfd: a 0 -> 1 transition signals the irqfd;
/// when the guest EOIs, KVM de-asserts the line and signals the resample eventfd, and the front
/// end calls [`resample`](Self::resample), which signals again if the level is still high.
/// Cloning gives another handle to the same line. Without an irqfd, the level is only recorded.
///
/// The eventfd belongs to a peer (QEMU, or whoever connected to the socket): it is switched to
/// non-blocking when attached, and written only after the line's lock is released, so a peer
/// whose counter is full can neither block the device nor, through the lock, a disconnect.
#[derive(Clone, Default)]
pub struct Intx {
    state: Arc<Mutex<IntxState>>,
}

/// Sets `O_NONBLOCK` on a peer's descriptor (QEMU creates its eventfds non-blocking too:
/// util/event_notifier-posix.c `event_notifier_init`, `EFD_NONBLOCK`).
pub(crate) fn set_nonblocking(fd: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL touch no memory of ours.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if flags & libc::O_NONBLOCK == 0
            && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Intx {
    /// A line with no eventfd attached.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IntxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Signals the eventfd (called without the lock). The descriptor is non-blocking: a write
    /// that would overflow the counter fails with EAGAIN, and the counter is then non-zero, so
    /// the interrupt is pending anyway.
    fn signal(fd: Option<Arc<File>>) {
        if let Some(fd) = fd {
            let _ = (&*fd).write(&1u64.to_ne_bytes());
        }
    }

    /// Sets the line's level. Asserting it (0 -> 1) signals the irqfd.
    pub fn set_level(&self, level: bool) {
        let fd = {
            let mut s = self.lock();
            let edge = level && !s.level;
            s.level = level;
            if edge {
                s.irqfd.clone()
            } else {
                None
            }
        };
        Self::signal(fd);
    }

    /// Asserts the line.
    pub fn raise(&self) {
        self.set_level(true);
    }

    /// De-asserts the line.
    pub fn lower(&self) {
        self.set_level(false);
    }

    /// The current level.
    pub fn level(&self) -> bool {
        self.lock().level
    }

    /// The guest acknowledged the interrupt (resample eventfd fired): re-signal if still asserted.
    pub fn resample(&self) {
        let fd = {
            let s = self.lock();
            if s.level {
                s.irqfd.clone()
            } else {
                None
            }
        };
        Self::signal(fd);
    }

    /// Attaches the interrupt eventfd (closing the previous one), switching it to non-blocking.
    /// If the line is asserted, it is signalled at once so the new route sees it. A descriptor
    /// that cannot be made non-blocking is not attached (the line is then only recorded).
    pub fn set_irqfd(&self, fd: Option<File>) {
        let fd = fd.and_then(|f| match set_nonblocking(&f) {
            Ok(()) => Some(Arc::new(f)),
            Err(e) => {
                eprintln!("mlx5-sim: interrupt eventfd refused: cannot make it non-blocking: {e}");
                None
            }
        });
        let (old, signal) = {
            let mut s = self.lock();
            let old = std::mem::replace(&mut s.irqfd, fd);
            let signal = if s.level { s.irqfd.clone() } else { None };
            (old, signal)
        };
        drop(old);
        Self::signal(signal);
    }

    /// True if an interrupt eventfd is attached.
    pub fn connected(&self) -> bool {
        self.lock().irqfd.is_some()
    }

    /// Detaches the eventfd and de-asserts the line.
    pub fn disconnect(&self) {
        let old = {
            let mut s = self.lock();
            s.level = false;
            s.irqfd.take()
        };
        drop(old);
    }
}

/// Reads and discards an eventfd's counter (non-blocking eventfds included).
pub(crate) fn drain_eventfd(fd: &File) -> io::Result<()> {
    let mut b = [0u8; 8];
    match io::Read::read(&mut &*fd, &mut b) {
        Ok(_) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident() -> Identity {
        Identity {
            vendor_id: 0x1234,
            device_id: 0x5678,
            class_code: 0x020700,
            revision: 1,
            subsystem_vendor_id: 0x1234,
            subsystem_id: 0x0001,
            interrupt_pin: 1,
        }
    }

    #[test]
    fn identity_is_read_only() {
        let mut c = ConfigSpace::new(ident());
        assert_eq!(c.read(0, 4), 0x5678_1234);
        assert_eq!(c.read(8, 4), 0x0207_0001);
        c.write(0, 0xffff_ffff, 4);
        c.write(8, 0xffff_ffff, 4);
        c.write(0x2c, 0xffff_ffff, 4);
        assert_eq!(c.read(0, 4), 0x5678_1234);
        assert_eq!(c.read(8, 4), 0x0207_0001);
        assert_eq!(c.read(0x2c, 4), 0x0001_1234);
        assert_eq!(c.read(PCI_INTERRUPT_PIN as u32, 1), 1);
        c.write(PCI_INTERRUPT_LINE as u32, 0xab, 1);
        assert_eq!(c.read(PCI_INTERRUPT_LINE as u32, 1), 0xab);
        c.reset();
        assert_eq!(c.read(PCI_INTERRUPT_LINE as u32, 1), 0);
        // Out of range and odd widths.
        assert_eq!(c.read(0xfe, 4), 0);
        assert_eq!(c.read(0x100, 4), 0);
        assert_eq!(c.read(0, 3), 0);
        c.write(0x100, 1, 4);
    }

    #[test]
    fn command_and_status() {
        let mut c = ConfigSpace::new(ident());
        c.write(PCI_COMMAND as u32, 0xffff, 2);
        // No I/O BAR: the I/O enable bit is hardwired to 0.
        assert_eq!(c.command(), 0x0546);
        assert!(c.intx_disabled() && c.bus_master());
        c.set_interrupt_status(true);
        assert_eq!(c.read(PCI_STATUS as u32, 2) & 0x8, 0x8);
        // Status bits are RO or RW1C: writing ones clears nothing we set, sets nothing.
        c.write(PCI_STATUS as u32, 0xffff, 2);
        assert_eq!(c.read(PCI_STATUS as u32, 2), 0x8);
        // Byte write to the upper command byte.
        c.write(PCI_COMMAND as u32 + 1, 0, 1);
        assert_eq!(c.command(), 0x0046);
    }

    #[test]
    fn io_and_64bit_bars() {
        let mut c = ConfigSpace::new(ident());
        c.set_bar(
            0,
            BarDef {
                kind: BarKind::Memory64 {
                    high_writable: true,
                },
                size: 1 << 20,
                prefetchable: true,
            },
        );
        c.set_bar(
            2,
            BarDef {
                kind: BarKind::Io,
                size: 32,
                prefetchable: false,
            },
        );
        c.write(0x10, 0xffff_ffff, 4);
        c.write(0x14, 0xffff_ffff, 4);
        c.write(0x18, 0xffff_ffff, 4);
        assert_eq!(c.read(0x10, 4), 0xfff0_000c);
        assert_eq!(c.read(0x14, 4), 0xffff_ffff);
        assert_eq!(c.read(0x18, 4), 0xffff_ffe1);
        c.write(0x10, 0x0010_0000, 4);
        c.write(0x14, 0x0000_0001, 4);
        c.write(0x18, 0xc000, 4);
        assert_eq!(c.bar_address(0), 0x1_0010_0000);
        assert_eq!(c.bar_address(2), 0xc000);
        assert_eq!(c.decode(AddressSpace::Memory, 0x1_0010_0000, 4), None); // decoding off
        c.write(PCI_COMMAND as u32, 0x3, 2);
        assert_eq!(
            c.decode(AddressSpace::Memory, 0x1_0010_0010, 8),
            Some((0, 0x10))
        );
        assert_eq!(c.decode(AddressSpace::Memory, 0x1_001f_fffc, 8), None); // crosses the end
        assert_eq!(c.decode(AddressSpace::Io, 0xc01c, 4), Some((2, 0x1c)));
        assert_eq!(c.decode(AddressSpace::Memory, 0xc01c, 4), None);
        // Byte write to a BAR merges into the dword.
        c.write(0x13, 0x20, 1);
        assert_eq!(c.bar_address(0), 0x1_2010_0000);
    }

    #[test]
    fn intx_level_semantics() {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: eventfd returns a new descriptor (or -1, checked) that we own from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let ours = file.try_clone().unwrap();
        let count = |f: &File| {
            let mut b = [0u8; 8];
            match io::Read::read(&mut &*f, &mut b) {
                Ok(_) => u64::from_ne_bytes(b),
                Err(_) => 0,
            }
        };
        let intx = Intx::new();
        intx.raise(); // no fd yet: recorded only
        intx.set_irqfd(Some(file));
        assert_eq!(count(&ours), 1, "asserted line signalled on attach");
        intx.raise();
        assert_eq!(count(&ours), 0, "no new edge while asserted");
        intx.resample();
        assert_eq!(count(&ours), 1, "EOI with line still high re-signals");
        intx.lower();
        intx.resample();
        assert_eq!(count(&ours), 0);
        intx.raise();
        assert_eq!(count(&ours), 1);
        intx.disconnect();
        assert!(!intx.level() && !intx.connected());
    }

    /// Issue 7 (hostile input 3): a peer's *blocking* eventfd whose counter is one short of its
    /// maximum used to block `set_level` inside `write` with the line's lock held, and every
    /// later `disconnect` behind it. The descriptor is now switched to non-blocking when
    /// attached and written without the lock.
    #[test]
    fn full_blocking_eventfd_blocks_nothing() {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::sync::mpsc;
        use std::time::Duration;
        // SAFETY: eventfd returns a new descriptor (or -1, checked) that we own from here on.
        let fd = unsafe { libc::eventfd(0, 0) }; // blocking, as a hostile peer would send it
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        // The largest value an eventfd counter holds is 2^64 - 2: any further write blocks.
        (&file).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        let peer = file.try_clone().unwrap();
        let intx = Intx::new();
        intx.set_irqfd(Some(file));
        // SAFETY: F_GETFL reads the flags of a descriptor we own.
        let flags = unsafe { libc::fcntl(peer.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(
            flags & libc::O_NONBLOCK,
            0,
            "attached eventfd is non-blocking"
        );

        let (tx, rx) = mpsc::channel();
        let line = intx.clone();
        std::thread::spawn(move || {
            line.raise();
            line.resample();
            line.lower();
            line.raise();
            line.disconnect();
            let _ = tx.send(());
        });
        // A deadline, not a timing assertion: without the fix this thread never finishes.
        assert!(
            rx.recv_timeout(Duration::from_secs(30)).is_ok(),
            "raising a line whose eventfd is full blocked"
        );
        intx.disconnect();
        assert!(!intx.connected());
    }
}
