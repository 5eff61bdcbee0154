//! The initialization segment at the start of BAR0: the registers a driver reads before it can
//! issue any command, and the command doorbell the command interface plugs in behind.
//!
//! Layout: Linux include/linux/mlx5/device.h `struct mlx5_init_seg` (field byte offsets) and
//! mlx5_ifc.h `mlx5_ifc_initial_seg_bits` (bit fields); decoding as the Linux accessors cited
//! below. Every register is a big-endian dword: this
//! module works with register values; [`crate::device::Bar0`] turns them into bytes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::memory::{GuestMemory, NoMemory};

/// `fw_rev` (0x00): minor in bits 31:16, major in bits 15:0.
/// Linux include/linux/mlx5/driver.h `fw_rev_maj`, `fw_rev_min`:
/// major = fw_rev & 0xffff, minor = fw_rev >> 16 (mlx5_ifc.h initial_seg: fw_rev_minor at bit 0,
/// fw_rev_major at bit 16).
pub const FW_REV: u32 = 0x00;
/// `cmdif_rev_fw_sub` (0x04): command interface revision in 31:16, fw subminor in 15:0.
/// Linux core/cmd.c `cmdif_rev`, include/linux/mlx5/driver.h `fw_rev_sub`.
pub const CMDIF_REV_FW_SUB: u32 = 0x04;
/// `cmdq_addr_h` (0x10) (Linux core/cmd.c `mlx5_cmd_enable`).
pub const CMDQ_ADDR_H: u32 = 0x10;
/// `cmdq_addr_l_sz` (0x14): address bits 31:12, nic_interface 10:8, log_cmdq_size 7:4,
/// log_cmdq_stride 3:0 (Linux core/cmd.c `mlx5_cmd_enable`; nic_interface: core/health.c
/// `mlx5_get_nic_state`, `mlx5_set_nic_state`).
pub const CMDQ_ADDR_L_SZ: u32 = 0x14;
/// `cmd_dbell` (0x18): software writes 1 << slot (Linux core/cmd.c
/// `cmd_work_handler`).
pub const CMD_DBELL: u32 = 0x18;
/// `initializing` (0x1fc): bit 31 set while firmware initializes (Linux core/main.c
/// `wait_fw_init`).
pub const INITIALIZING: u32 = 0x1fc;
/// `health_counter` (0x1010): low 24 bits keep incrementing while firmware is alive; bits 31:24
/// are health_syndrome (Linux mlx5_ifc.h `mlx5_ifc_initial_seg_bits`: `health_syndrome` 8
/// bits, `health_counter` 24 bits; core/health.c `poll_health` samples it).
pub const HEALTH_COUNTER: u32 = 0x1010;

/// Health buffer dword holding `rfr_severity` (byte 0x238): byte 56 of Linux device.h
/// `struct health_buffer` at 0x200.
pub const HEALTH_RFR_SEVERITY: u32 = 0x238;
/// Health buffer dword holding `irisc_index`, `synd`, `ext_synd` (bytes 0x23c..0x240): bytes
/// 60, 61 and 62 of Linux device.h `struct health_buffer`.
pub const HEALTH_SYND: u32 = 0x23c;
/// `rfr` bit of `rfr_severity` (`MLX5_RFR_BIT_OFFSET` = 7, Linux device.h:549).
pub const HEALTH_RFR: u32 = 1 << 7;

/// Command interface revision the driver requires (Linux core/cmd.c `CMD_IF_REV = 5`, checked in
/// `mlx5_cmd_enable`).
pub const CMD_IF_REV: u16 = 5;
/// log2 of the number of command queue slots: 32 = MLX5_MAX_COMMANDS.
/// Linux core/cmd.c `mlx5_cmd_enable` requires 1 << log_sz <= MLX5_MAX_COMMANDS (device.h).
pub const LOG_CMDQ_SIZE: u8 = 5;
/// log2 of the command queue entry stride: 64 bytes = sizeof(struct mlx5_cmd_layout).
/// Linux core/cmd.c `mlx5_cmd_enable` requires log_sz + log_stride <= 12.
pub const LOG_CMDQ_STRIDE: u8 = 6;
/// `initializing` bit 31 (Linux main.c `wait_fw_init`: `fw_initializing >> 31`).
pub const INITIALIZING_BIT: u32 = 1 << 31;
/// Bits of `health_counter` that count (24, `mlx5_ifc_initial_seg_bits`).
pub const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;

/// Firmware version reported in `fw_rev` / `cmdif_rev_fw_sub` (e.g. 16.35.2000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FwVersion {
    pub major: u16,
    pub minor: u16,
    pub subminor: u16,
}

/// Tunables of the initialization segment.
#[derive(Clone, Copy, Debug)]
pub struct InitSegmentConfig {
    pub fw: FwVersion,
    /// How long `initializing` stays set after reset (Linux polls it every 2 ms for up to 120 s,
    /// core/main.c `wait_fw_init`, timeouts in core/lib/tout.c).
    pub init_delay: Duration,
    /// Period of one `health_counter` increment (Linux samples it every 2 s and declares the
    /// device dead after 3 unchanged samples, core/health.c `poll_health`).
    pub health_tick: Duration,
}

impl Default for InitSegmentConfig {
    fn default() -> Self {
        InitSegmentConfig {
            // A ConnectX-5 firmware of the 16.35 line.
            fw: FwVersion {
                major: 16,
                minor: 35,
                subminor: 2000,
            },
            init_delay: Duration::from_millis(50),
            health_tick: Duration::from_millis(1),
        }
    }
}

/// Where the driver put the command queue, as of the doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdQueue {
    /// Bus address of the queue page (4 KiB aligned).
    pub addr: u64,
    pub log_size: u8,
    pub log_stride: u8,
}

/// What executes commands: plugged in behind `cmd_dbell`.
pub trait CommandInterface: Send {
    /// The driver rang the doorbell for the slots set in `slots` (bit n = slot n).
    fn doorbell(&mut self, queue: CmdQueue, slots: u32, mem: &dyn GuestMemory);
    /// Device reset: forget every command in flight.
    fn reset(&mut self) {}
}

/// A command interface that executes nothing (logs each doorbell).
#[derive(Debug, Default)]
pub struct NoCommands;

impl CommandInterface for NoCommands {
    fn doorbell(&mut self, queue: CmdQueue, slots: u32, _mem: &dyn GuestMemory) {
        eprintln!(
            "mlx5-sim: cmd doorbell {slots:#x} (queue {:#x}): no command interface yet",
            queue.addr
        );
    }
}

/// Firmware health, shared by the device model (which declares fatal errors) and the
/// initialization segment (which reports them in the health buffer and `health_counter`).
#[derive(Debug, Default)]
pub struct HealthState {
    /// 0 = healthy; else `1 << 24 | ext_synd << 8 | synd`.
    fatal: AtomicU32,
    /// `health_counter` value frozen at the fatal error.
    frozen_counter: AtomicU32,
}

impl HealthState {
    /// Healthy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares a fatal error with health syndrome `synd` and extended syndrome `ext`.
    pub fn set_fatal(&self, synd: u8, ext: u16) {
        self.fatal.store(
            1 << 24 | u32::from(ext) << 8 | u32::from(synd),
            Ordering::SeqCst,
        );
    }

    /// `(synd, ext_synd)` of the fatal error, if any.
    pub fn fatal(&self) -> Option<(u8, u16)> {
        let v = self.fatal.load(Ordering::SeqCst);
        (v != 0).then_some((v as u8, (v >> 8) as u16))
    }

    /// Healthy again (device reset).
    pub fn clear(&self) {
        self.fatal.store(0, Ordering::SeqCst);
    }
}

/// The initialization segment's state.
pub struct InitSegment {
    cfg: InitSegmentConfig,
    /// `initializing` clears at this instant.
    ready_at: Instant,
    /// `health_counter` counts from here.
    epoch: Instant,
    cmdq_addr_h: u32,
    /// Address bits 31:12 and nic_interface bits 10:8 as last written (log sizes are read-only).
    cmdq_addr_l: u32,
    cmd: Box<dyn CommandInterface>,
    mem: Arc<dyn GuestMemory>,
    health: Arc<HealthState>,
}

impl InitSegment {
    /// A segment that has just come out of reset, with no command interface.
    pub fn new(cfg: InitSegmentConfig) -> Self {
        Self::with_command_interface(cfg, Box::new(NoCommands))
    }

    /// A segment whose doorbell drives `cmd`.
    pub fn with_command_interface(cfg: InitSegmentConfig, cmd: Box<dyn CommandInterface>) -> Self {
        let now = Instant::now();
        InitSegment {
            cfg,
            ready_at: now + cfg.init_delay,
            epoch: now,
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            cmd,
            mem: Arc::new(NoMemory),
            health: Arc::new(HealthState::new()),
        }
    }

    /// Replaces the command interface.
    pub fn set_command_interface(&mut self, cmd: Box<dyn CommandInterface>) {
        self.cmd = cmd;
    }

    /// Shares `health` with the device model.
    pub fn set_health(&mut self, health: Arc<HealthState>) {
        self.health = health;
    }

    /// The shared health state.
    pub fn health(&self) -> &Arc<HealthState> {
        &self.health
    }

    /// The memory the doorbell hands to the command interface.
    pub fn set_guest_memory(&mut self, mem: Arc<dyn GuestMemory>) {
        self.mem = mem;
    }

    /// Device reset: the command queue address is forgotten and `initializing` is set again for
    /// `init_delay`.
    pub fn reset(&mut self) {
        self.ready_at = Instant::now() + self.cfg.init_delay;
        self.cmdq_addr_h = 0;
        self.cmdq_addr_l = 0;
        self.health.clear();
        self.cmd.reset();
    }

    /// True while `initializing` reads as set.
    pub fn initializing(&self) -> bool {
        Instant::now() < self.ready_at
    }

    /// The command queue as currently programmed.
    pub fn cmd_queue(&self) -> CmdQueue {
        CmdQueue {
            addr: (u64::from(self.cmdq_addr_h) << 32) | u64::from(self.cmdq_addr_l & 0xffff_f000),
            log_size: LOG_CMDQ_SIZE,
            log_stride: LOG_CMDQ_STRIDE,
        }
    }

    fn health_counter(&self) -> u32 {
        let tick = self.cfg.health_tick.as_nanos().max(1);
        let n = (self.epoch.elapsed().as_nanos() / tick) as u32 & HEALTH_COUNTER_MASK;
        match self.health.fatal() {
            // health_syndrome in bits 31:24; the counter stops where the firmware died.
            Some((synd, _)) => {
                let frozen = match self.health.frozen_counter.load(Ordering::SeqCst) {
                    0 => {
                        let v = n | 1;
                        self.health.frozen_counter.store(v, Ordering::SeqCst);
                        v
                    }
                    v => v,
                };
                u32::from(synd) << 24 | frozen
            }
            None => {
                self.health.frozen_counter.store(0, Ordering::SeqCst);
                n
            }
        }
    }

    /// Reads the register dword at `offset` (4-byte aligned; unaligned offsets read 0).
    pub fn read32(&self, offset: u32) -> u32 {
        let fw = self.cfg.fw;
        match offset {
            FW_REV => (u32::from(fw.minor) << 16) | u32::from(fw.major),
            CMDIF_REV_FW_SUB => (u32::from(CMD_IF_REV) << 16) | u32::from(fw.subminor),
            CMDQ_ADDR_H => self.cmdq_addr_h,
            CMDQ_ADDR_L_SZ => {
                (self.cmdq_addr_l & 0xffff_f700)
                    | (u32::from(LOG_CMDQ_SIZE) << 4)
                    | u32::from(LOG_CMDQ_STRIDE)
            }
            INITIALIZING if self.initializing() => INITIALIZING_BIT,
            HEALTH_COUNTER => self.health_counter(),
            HEALTH_RFR_SEVERITY => match self.health.fatal() {
                Some(_) => HEALTH_RFR << 24,
                None => 0,
            },
            HEALTH_SYND => match self.health.fatal() {
                Some((synd, ext)) => u32::from(synd) << 16 | u32::from(ext),
                None => 0,
            },
            _ => 0,
        }
    }

    /// Writes the register dword at `offset`. Read-only and unknown registers ignore writes.
    pub fn write32(&mut self, offset: u32, value: u32) {
        match offset {
            CMDQ_ADDR_H => self.cmdq_addr_h = value,
            // Address bits 31:12 and nic_interface 10:8; log_cmdq_size/stride are read-only.
            CMDQ_ADDR_L_SZ => self.cmdq_addr_l = value & 0xffff_f700,
            CMD_DBELL if value != 0 => {
                let q = self.cmd_queue();
                self.cmd.doorbell(q, value, &*self.mem);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn identity_registers() {
        let s = InitSegment::new(InitSegmentConfig::default());
        assert_eq!(s.read32(FW_REV), (35 << 16) | 16);
        assert_eq!(s.read32(CMDIF_REV_FW_SUB), (5 << 16) | 2000);
        assert_eq!(s.read32(CMDQ_ADDR_L_SZ) & 0xff, 0x56);
        assert_eq!(s.read32(0x8), 0);
        assert_eq!(s.read32(0x230), 0); // health.fw_ver: not 0xffffffff (= PCI offline)
    }

    #[test]
    fn cmdq_address_and_read_only_sizes() {
        let mut s = InitSegment::new(InitSegmentConfig::default());
        s.write32(CMDQ_ADDR_H, 0x1);
        s.write32(CMDQ_ADDR_L_SZ, 0x2345_6000 | 0xff); // try to change the sizes
        assert_eq!(s.read32(CMDQ_ADDR_H), 1);
        assert_eq!(s.read32(CMDQ_ADDR_L_SZ), 0x2345_6056);
        assert_eq!(
            s.cmd_queue(),
            CmdQueue {
                addr: 0x1_2345_6000,
                log_size: 5,
                log_stride: 6
            }
        );
        // nic_interface state (bits 10:8) is kept, as Linux's teardown writes it.
        s.write32(CMDQ_ADDR_L_SZ, 0x2345_6000 | (7 << 8));
        assert_eq!((s.read32(CMDQ_ADDR_L_SZ) >> 8) & 7, 7);
        s.reset();
        assert_eq!(s.read32(CMDQ_ADDR_H), 0);
        assert_eq!(s.read32(CMDQ_ADDR_L_SZ), 0x56);
    }

    #[test]
    fn initializing_clears_and_health_moves() {
        let cfg = InitSegmentConfig {
            init_delay: Duration::from_millis(30),
            ..Default::default()
        };
        let mut s = InitSegment::new(cfg);
        assert_eq!(s.read32(INITIALIZING), INITIALIZING_BIT);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(s.read32(INITIALIZING), 0);
        s.reset();
        assert_eq!(s.read32(INITIALIZING), INITIALIZING_BIT);
        let h1 = s.read32(HEALTH_COUNTER);
        std::thread::sleep(Duration::from_millis(5));
        let h2 = s.read32(HEALTH_COUNTER);
        assert_ne!(h1, h2);
        assert_eq!(h2 & !HEALTH_COUNTER_MASK, 0, "health_syndrome stays 0");
    }

    #[test]
    fn doorbell_reaches_the_command_interface() {
        struct Rec(Arc<Mutex<Vec<(CmdQueue, u32)>>>);
        impl CommandInterface for Rec {
            fn doorbell(&mut self, q: CmdQueue, slots: u32, _mem: &dyn GuestMemory) {
                self.0.lock().unwrap().push((q, slots));
            }
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut s = InitSegment::with_command_interface(
            InitSegmentConfig::default(),
            Box::new(Rec(log.clone())),
        );
        s.write32(CMDQ_ADDR_H, 0);
        s.write32(CMDQ_ADDR_L_SZ, 0x7000);
        s.write32(CMD_DBELL, 1 << 3);
        assert_eq!(
            *log.lock().unwrap(),
            vec![(
                CmdQueue {
                    addr: 0x7000,
                    log_size: 5,
                    log_stride: 6
                },
                8
            )]
        );
    }
}
