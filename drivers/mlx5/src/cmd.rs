//! The command queue: 64-byte entries in one 4 KiB page, 16 bytes of input and output inline,
//! the rest in chains of 576-byte mailbox blocks (512 data bytes each), one token per command,
//! ownership handed to the device and back.
//!
//! Sources: Linux core/cmd.c (`mlx5_cmd_invoke`, `cmd_work_handler`, `mlx5_alloc_cmd_msg`,
//! `mlx5_copy_to_msg`), rdma-core providers/mlx5/mlx5_vfio.c (`mlx5_vfio_post_cmd`,
//! `mlx5_vfio_poll_timeout`, `mlx5_vfio_cmd_check`); layouts in [`mlx5_prm::cmd_layout`] and
//! [`mlx5_prm::cmd_prot_block`]. Signatures are not written: the driver clears
//! `cmd_hca_cap.cmdif_checksum` as Linux does (core/main.c `handle_hca_cap`, core/cmd.c
//! `mlx5_cmd_init`).
//!
//! The queue is polled: the driver never asks for command-completion events. Every wait has a
//! deadline and checks the health sensors while it spins.

use alloc::vec::Vec;
use core::time::Duration;

use mlx5_prm::{cmd_layout, cmd_prot_block, cmdq, health, init_seg, mbox_in, mbox_out};

use crate::error::{CmdError, CmdStatus, DeliveryStatus, Error, Result};
use crate::hal::{Bar, DmaMem, Hal};

/// Blocks per mailbox chunk: each chunk is one 4 KiB DMA page holding four 576-byte blocks at
/// 1 KiB alignment (`cmdq::MAILBOX_BLOCK_ALIGN`, Linux core/cmd.c:2391).
const BLOCKS_PER_CHUNK: usize = 4;
const CHUNK_SIZE: usize = 4096;

/// Timeouts of the command interface.
#[derive(Clone, Copy, Debug)]
pub struct CmdTimeouts {
    /// Deadline of one command (Linux default `CMD` 60 s, core/lib/tout.c).
    pub command: Duration,
    /// Interval between two reads of `health_counter` (Linux `HEALTH_POLL_INTERVAL` 2000 ms,
    /// core/lib/tout.c; rdma-core mlx5_vfio.h polls every 1000 ms); three unchanged reads in a
    /// row mean the firmware is dead (`MAX_MISSES`, Linux core/health.c:49).
    pub health_poll: Duration,
}

impl Default for CmdTimeouts {
    fn default() -> Self {
        CmdTimeouts {
            command: Duration::from_millis(mlx5_prm::timeouts::CMD_MS),
            health_poll: Duration::from_millis(mlx5_prm::timeouts::HEALTH_POLL_INTERVAL_MS),
        }
    }
}

/// Health sensors, as rdma-core mlx5_vfio.c `mlx5_health_check_fatal_sensors` and Linux
/// core/health.c `mlx5_health_check_fatal_sensors` read them.
pub(crate) struct HealthWatch {
    last_counter: u32,
    last_poll: Duration,
    misses: u32,
}

/// Syndrome reported when health.fw_ver reads all ones (PCI link gone, Linux
/// `sensor_pci_not_working`).
pub const SYND_PCI_GONE: u8 = 0xff;
/// Syndrome reported when the NIC interface reads DISABLED or SW_RESET.
pub const SYND_NIC_DISABLED: u8 = 0xfe;
/// Syndrome reported when `health_counter` stopped moving.
pub const SYND_COUNTER_STOPPED: u8 = 0xfd;

impl HealthWatch {
    pub(crate) fn new() -> Self {
        HealthWatch {
            last_counter: u32::MAX,
            last_poll: Duration::ZERO,
            misses: 0,
        }
    }

    /// The fatal sensors: `Some(syndrome)` when the device is dead.
    pub(crate) fn check<H: Hal>(&mut self, hal: &H, interval: Duration) -> Result<Option<u8>> {
        let bar = Bar(hal);
        let hb = init_seg::HEALTH;
        if bar.read32(hb + health::FW_VER)? == 0xffff_ffff {
            return Ok(Some(SYND_PCI_GONE));
        }
        let nic = init_seg::nic_interface(bar.read32(init_seg::CMDQ_ADDR_L_SZ)?) as u8;
        if nic == init_seg::nic_interface::DISABLED || nic == init_seg::nic_interface::SW_RESET {
            return Ok(Some(SYND_NIC_DISABLED));
        }
        let rfr = bar.read8(hb + health::RFR_SEVERITY)?;
        let synd = bar.read8(hb + health::SYND)?;
        if health::is_fatal(rfr, synd) {
            return Ok(Some(synd));
        }
        let now = hal.now();
        if now.saturating_sub(self.last_poll) >= interval {
            self.last_poll = now;
            let c = bar.read32(init_seg::HEALTH_COUNTER)? & init_seg::HEALTH_COUNTER_MASK;
            if c == self.last_counter {
                self.misses += 1;
                if self.misses >= init_seg::HEALTH_MAX_MISSES {
                    return Ok(Some(SYND_COUNTER_STOPPED));
                }
            } else {
                self.misses = 0;
                self.last_counter = c;
            }
        }
        Ok(None)
    }
}

/// A command built with the PRM field accessors; a field that does not fit its buffer is a
/// driver bug, reported as [`Error::Internal`] when the command is sent instead of a panic.
pub struct CmdBuf {
    /// The bytes.
    pub buf: Vec<u8>,
    bad: bool,
}

impl CmdBuf {
    /// `len` zero bytes with the `mbox_in` header (opcode, op_mod) set.
    pub fn new(opcode: u16, op_mod: u16, len: usize) -> CmdBuf {
        CmdBuf::with_room(opcode, op_mod, len, 0)
    }
    /// [`CmdBuf::new`] with room for `extra` more bytes, which the caller appends to `buf`
    /// (a translation list: written once, not zeroed first, and no reallocation).
    pub fn with_room(opcode: u16, op_mod: u16, len: usize, extra: usize) -> CmdBuf {
        let len = len.max(mbox_in::BYTES);
        let mut buf = Vec::with_capacity(len + extra);
        buf.resize(len, 0);
        let mut c = CmdBuf { buf, bad: false };
        c.set(mbox_in::OPCODE, opcode.into());
        c.set(mbox_in::OP_MOD, op_mod.into());
        c
    }
    /// `MLX5_SET`.
    pub fn set(&mut self, f: mlx5_prm::Field, v: u32) -> &mut Self {
        if f.set(&mut self.buf, v).is_err() {
            self.bad = true;
        }
        self
    }
    /// `MLX5_SET64`.
    pub fn set64(&mut self, f: mlx5_prm::Field, v: u64) -> &mut Self {
        if f.set64(&mut self.buf, v).is_err() {
            self.bad = true;
        }
        self
    }
    /// Copies `src` into a byte-aligned field.
    pub fn bytes(&mut self, f: mlx5_prm::Field, src: &[u8]) -> &mut Self {
        match f.bytes_mut(&mut self.buf) {
            Ok(d) if d.len() >= src.len() => d[..src.len()].copy_from_slice(src),
            _ => self.bad = true,
        }
        self
    }
    /// Writes a big-endian u64 at byte `off` (array elements such as `pas[i]`).
    pub fn put64(&mut self, off: usize, v: u64) -> &mut Self {
        match self.buf.get_mut(off..off + 8) {
            Some(d) => d.copy_from_slice(&v.to_be_bytes()),
            None => self.bad = true,
        }
        self
    }
    pub(crate) fn check(&self) -> Result<()> {
        if self.bad {
            Err(Error::Internal)
        } else {
            Ok(())
        }
    }
}

/// `MLX5_GET` on an output buffer, 0 when the field lies outside it (outputs are always
/// allocated at their PRM size, so this only happens on a driver bug).
pub fn get(out: &[u8], f: mlx5_prm::Field) -> u32 {
    f.get(out).unwrap_or(0)
}

/// The command queue page and its mailboxes.
pub(crate) struct CmdQueue<H: Hal> {
    page: DmaMem<H::Dma>,
    log_stride: u32,
    nslots: usize,
    token: u8,
    /// Mailbox blocks, per slot: a command's chains live in its own slot's chunks, so a
    /// nested command (a page request answered while another waits) or a batch never writes
    /// over the mailboxes of a command the device has not finished with, and a slot the device
    /// kept after a timeout keeps its blocks untouched (Linux core/cmd.c gives every command
    /// its own message, `mlx5_alloc_cmd_msg`).
    chunks: Vec<Vec<DmaMem<H::Dma>>>,
    /// Slots whose entry the device still owned when the driver gave up on them.
    stuck: u32,
    pub(crate) timeouts: CmdTimeouts,
    pub(crate) health: HealthWatch,
    /// Sticky: once the device is dead every command fails with this syndrome.
    pub(crate) fatal: Option<u8>,
    /// Number of commands handed to the device (for tests and benchmarks).
    pub(crate) sent: u64,
    /// Number of `cmd_dbell` writes (a batch rings several commands with one).
    pub(crate) rung: u64,
    /// Completions whose entry came back with another token than the one sent (logged, not
    /// refused: see [`CmdQueue::finish`]).
    pub(crate) token_mismatches: u64,
}

/// Where a posted command waits.
pub(crate) struct Posted {
    slot: usize,
    opcode: u16,
    op_mod: u16,
    outlen: usize,
    /// First mailbox block of the output chain.
    out_first: usize,
    token: u8,
}

impl<H: Hal> CmdQueue<H> {
    /// Allocates the queue page and programs `cmdq_addr_h` / `cmdq_addr_l_sz` (Linux
    /// core/cmd.c `mlx5_cmd_init`: high word first, then low word; the low 12 bits of the
    /// address register are the read-only sizes and the NIC interface state).
    pub(crate) fn new(hal: &H, timeouts: CmdTimeouts) -> Result<Self> {
        let bar = Bar(hal);
        let l_sz = bar.read32(init_seg::CMDQ_ADDR_L_SZ)?;
        let log_size = init_seg::log_cmdq_size(l_sz);
        let log_stride = init_seg::log_cmdq_stride(l_sz);
        // Linux core/cmd.c:2412-2420: 1 << log_sz entries of 1 << log_stride bytes in one page;
        // rdma-core mlx5_vfio.c `mlx5_vfio_init_cmd_interface` checks the same.
        if log_size == 0
            || (1usize << log_size) > cmdq::MAX_COMMANDS
            || (1usize << log_stride) < cmdq::ENTRY_SIZE
            || log_size + log_stride > 12
        {
            return Err(Error::CmdQueueLayout {
                log_size: log_size as u8,
                log_stride: log_stride as u8,
            });
        }
        let page = DmaMem::alloc(hal, cmdq::QUEUE_PAGE_SIZE, cmdq::QUEUE_PAGE_SIZE)?;
        let bus = page.bus();
        bar.write32(init_seg::CMDQ_ADDR_H, (bus >> 32) as u32)?;
        bar.write32(init_seg::CMDQ_ADDR_L_SZ, bus as u32 & 0xffff_f000)?;
        hal.dma_wmb();
        Ok(CmdQueue {
            page,
            log_stride,
            nslots: 1 << log_size,
            token: 0,
            chunks: (0..1usize << log_size).map(|_| Vec::new()).collect(),
            stuck: 0,
            timeouts,
            health: HealthWatch::new(),
            fatal: None,
            sent: 0,
            rung: 0,
            token_mismatches: 0,
        })
    }

    /// Number of slots.
    pub(crate) fn nslots(&self) -> usize {
        self.nslots
    }

    fn entry(&self, slot: usize) -> usize {
        slot << self.log_stride
    }

    fn block_addr(&self, i: usize) -> (usize, usize) {
        (
            i / BLOCKS_PER_CHUNK,
            (i % BLOCKS_PER_CHUNK) * cmdq::MAILBOX_BLOCK_ALIGN,
        )
    }

    fn ensure_blocks(&mut self, hal: &H, slot: usize, n: usize) -> Result<()> {
        let pool = self.chunks.get_mut(slot).ok_or(Error::Internal)?;
        while pool.len() * BLOCKS_PER_CHUNK < n {
            pool.push(DmaMem::alloc(hal, CHUNK_SIZE, CHUNK_SIZE)?);
        }
        Ok(())
    }

    fn block(&self, slot: usize, i: usize) -> (&DmaMem<H::Dma>, usize) {
        let (c, off) = self.block_addr(i);
        (&self.chunks[slot][c], off)
    }

    fn block_bus(&self, slot: usize, i: usize) -> u64 {
        let (b, off) = self.block(slot, i);
        b.bus() + off as u64
    }

    /// Picks a slot the software owns, never one the device kept after a timeout.
    pub(crate) fn free_slot(&mut self, prefer: usize) -> Result<usize> {
        for k in 0..self.nslots {
            let s = (prefer + k) % self.nslots;
            let own = self.page.read_u8(self.entry(s) + cmd_layout::STATUS_OWN)?;
            if own & cmdq::OWNER_HW == 0 {
                self.stuck &= !(1 << s);
                return Ok(s);
            }
        }
        Err(Error::CommandTimeout { opcode: 0 })
    }

    /// Builds the entry and mailboxes in `slot` and rings its doorbell.
    pub(crate) fn post(
        &mut self,
        hal: &H,
        slot: usize,
        input: &CmdBuf,
        outlen: usize,
    ) -> Result<Posted> {
        let p = self.prepare(hal, slot, input, outlen)?;
        self.ring(hal, 1 << slot)?;
        Ok(p)
    }

    /// Rings the doorbell of every slot in `mask` with one write: `cmd_dbell` is a bitmask of
    /// slots (Linux core/cmd.c `cmd_work_handler`: `iowrite32be(1 << ent->idx,
    /// &dev->iseg->cmd_dbell)`; the firmware runs each slot whose bit is set).
    pub(crate) fn ring(&mut self, hal: &H, mask: u32) -> Result<()> {
        hal.dma_wmb();
        self.rung += 1;
        Bar(hal).write32(init_seg::CMD_DBELL, mask)
    }

    /// Builds the entry of `slot` and its mailboxes (in the slot's own blocks), and hands the
    /// entry to the device without ringing (see [`CmdQueue::ring`]).
    pub(crate) fn prepare(
        &mut self,
        hal: &H,
        slot: usize,
        input: &CmdBuf,
        outlen: usize,
    ) -> Result<Posted> {
        input.check()?;
        let inb = &input.buf;
        let opcode = mbox_in::OPCODE.get(inb).unwrap_or(0) as u16;
        let op_mod = mbox_in::OP_MOD.get(inb).unwrap_or(0) as u16;
        if let Some(s) = self.fatal {
            return Err(Error::DeviceFatal { syndrome: s });
        }
        let outlen = outlen.max(mbox_out::BYTES);
        let nin = cmdq::num_blocks(inb.len());
        let nout = cmdq::num_blocks(outlen);
        self.ensure_blocks(hal, slot, nin + nout)?;
        // A non-zero token, copied into every block of the command (Linux core/cmd.c
        // `alloc_token`, `mlx5_copy_to_msg`).
        self.token = self.token.wrapping_add(1);
        if self.token == 0 {
            self.token = 1;
        }
        let token = self.token;

        // Mailbox chains: input blocks 0..nin, output blocks nin..nin+nout (Linux
        // core/cmd.c `mlx5_alloc_cmd_msg`: next = bus address of the next block or 0,
        // block_num = index in the chain).
        let (fi, fo) = (0, nin);
        for (chain, (first, n)) in [(fi, nin), (fo, nout)].into_iter().enumerate() {
            for k in 0..n {
                let next = if k + 1 < n {
                    self.block_bus(slot, first + k + 1)
                } else {
                    0
                };
                let (blk, off) = self.block(slot, first + k);
                if chain == 0 {
                    // The data written once (not zeroed first: a 2 Ki-block chain of a
                    // large CREATE_MKEY wrote every byte twice), the rest of the block zeroed.
                    let from = cmdq::INLINE_SIZE + k * cmdq::DATA_BLOCK_SIZE;
                    let to = (from + cmdq::DATA_BLOCK_SIZE).min(inb.len());
                    blk.write(off + cmd_prot_block::DATA, &inb[from..to])?;
                    let rest = off + cmd_prot_block::DATA + (to - from);
                    blk.fill(rest, cmd_prot_block::SIZE - (rest - off), 0)?;
                } else {
                    blk.fill(off, cmd_prot_block::SIZE, 0)?;
                }
                blk.write_be64(off + cmd_prot_block::NEXT, next)?;
                blk.write_be32(off + cmd_prot_block::BLOCK_NUM, k as u32)?;
                blk.write_u8(off + cmd_prot_block::TOKEN, token)?;
            }
        }

        // The entry (Linux core/cmd.c:1050-1060): zero it, fill it, hand it to the device.
        let e = self.entry(slot);
        let p = &self.page;
        p.fill(e, cmdq::ENTRY_SIZE, 0)?;
        p.write_u8(e + cmd_layout::TYPE, cmdq::PCI_CMD_XPORT)?;
        p.write_be32(e + cmd_layout::INLEN, inb.len() as u32)?;
        let inline = inb.len().min(cmdq::INLINE_SIZE);
        p.write(e + cmd_layout::IN, &inb[..inline])?;
        p.write_be64(
            e + cmd_layout::IN_PTR,
            if nin > 0 { self.block_bus(slot, fi) } else { 0 },
        )?;
        p.write_be64(
            e + cmd_layout::OUT_PTR,
            if nout > 0 {
                self.block_bus(slot, fo)
            } else {
                0
            },
        )?;
        p.write_be32(e + cmd_layout::OUTLEN, outlen as u32)?;
        p.write_u8(e + cmd_layout::TOKEN, token)?;
        hal.dma_wmb();
        p.write_u8(e + cmd_layout::STATUS_OWN, cmdq::OWNER_HW)?;
        self.sent += 1;
        Ok(Posted {
            slot,
            opcode,
            op_mod,
            outlen,
            out_first: fo,
            token,
        })
    }

    /// True once the device handed the entry back.
    pub(crate) fn done(&self, p: &Posted) -> Result<bool> {
        let own = self
            .page
            .read_u8(self.entry(p.slot) + cmd_layout::STATUS_OWN)?;
        Ok(own & cmdq::OWNER_HW == 0)
    }

    /// Marks a command the device never returned: its slot is not reused until the device
    /// gives it back.
    pub(crate) fn abandon(&mut self, p: &Posted) {
        self.stuck |= 1 << p.slot;
    }

    /// Checks the health sensors; a fatal reading becomes sticky.
    pub(crate) fn check_health(&mut self, hal: &H) -> Result<()> {
        if let Some(s) = self.fatal {
            return Err(Error::DeviceFatal { syndrome: s });
        }
        let interval = self.timeouts.health_poll;
        if let Some(s) = self.health.check(hal, interval)? {
            self.fatal = Some(s);
            return Err(Error::DeviceFatal { syndrome: s });
        }
        Ok(())
    }

    /// Reads the result of a completed command into `out` (exactly `out.len()` bytes, never
    /// more, whatever the device wrote in the entry).
    pub(crate) fn finish(&mut self, hal: &H, p: &Posted, out: &mut [u8]) -> Result<()> {
        hal.dma_rmb();
        let e = self.entry(p.slot);
        let own = self.page.read_u8(e + cmd_layout::STATUS_OWN)?;
        let ds = cmd_layout::delivery_status(own);
        if ds != 0 {
            return Err(Error::Delivery {
                opcode: p.opcode,
                status: DeliveryStatus::from_raw(ds),
            });
        }
        // A changed output length is refused rather than trusted: the driver would otherwise
        // read a reply of a length it did not ask for.
        let outlen = self.page.read_be32(e + cmd_layout::OUTLEN)? as usize;
        if outlen != p.outlen {
            return Err(Error::BadFirmwareReply { opcode: p.opcode });
        }
        // The token is not checked on completion: Linux core/cmd.c (`cmd_work_handler`,
        // `mlx5_cmd_comp_handler`) writes `lay->token` and never reads it back, and rdma-core
        // mlx5_vfio.c (`mlx5_vfio_post_cmd`, `mlx5_vfio_cmd_do`) does not use one at all. A
        // token error is the firmware's to report, as delivery status TOK_ERR (checked above).
        // A changed token is only logged.
        let token = self.page.read_u8(e + cmd_layout::TOKEN)?;
        if token != p.token {
            self.token_mismatches = self.token_mismatches.saturating_add(1);
            log::warn!(
                "command {:#x}: entry token {:#x} on completion, {:#x} was sent (ignored)",
                p.opcode,
                token,
                p.token
            );
        }
        let mut hdr = [0u8; cmdq::INLINE_SIZE];
        self.page.read(e + cmd_layout::OUT, &mut hdr)?;
        let n = out.len().min(cmdq::INLINE_SIZE);
        out[..n].copy_from_slice(&hdr[..n]);
        let mut done = n;
        let mut k = 0;
        while done < out.len() {
            let (blk, off) = self.block(p.slot, p.out_first + k);
            let take = (out.len() - done).min(cmdq::DATA_BLOCK_SIZE);
            blk.read(off + cmd_prot_block::DATA, &mut out[done..done + take])?;
            done += take;
            k += 1;
        }
        let status = hdr[0];
        if status != 0 {
            return Err(Error::Command(CmdError {
                opcode: p.opcode,
                op_mod: p.op_mod,
                status: CmdStatus::from_raw(status),
                syndrome: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
            }));
        }
        Ok(())
    }

    /// The opcode of a posted command.
    pub(crate) fn opcode(p: &Posted) -> u16 {
        p.opcode
    }
}

impl<H: Hal> crate::hca::Device<H> {
    /// Executes `cmds` (input, output length) in groups of up to `nslots - 1` commands: each
    /// group goes into distinct slots with distinct mailbox blocks and is rung with ONE
    /// doorbell write (the slot bitmask), then every slot is awaited (one deadline for the
    /// group, page requests served while waiting, as [`crate::hca::Device::exec`] does). The
    /// last slot stays free for nested commands (Linux core/cmd.c keeps it for page requests).
    ///
    /// Returns one result per command, in order: the output bytes or the command's error. A
    /// command that never came back gets [`Error::CommandTimeout`]; its slot is not reused.
    pub(crate) fn exec_batch(
        &mut self,
        hal: &H,
        cmds: &[(&CmdBuf, usize)],
    ) -> Vec<Result<Vec<u8>>> {
        let mut results: Vec<Result<Vec<u8>>> = Vec::with_capacity(cmds.len());
        let width = self.cmd.nslots().saturating_sub(1).max(1);
        for group in cmds.chunks(width) {
            if let Err(e) = self.cmd.check_health(hal) {
                results.extend(group.iter().map(|_| Err(e)));
                continue;
            }
            // Post every command of the group, then ring once.
            let mut posted: Vec<Result<Posted>> = Vec::with_capacity(group.len());
            let mut mask = 0u32;
            let mut used = 0u32;
            for (input, outlen) in group {
                let slot = (0..self.cmd.nslots() - 1).find(|s| used & (1 << s) == 0);
                let r = match slot {
                    None => Err(Error::CommandTimeout {
                        opcode: mlx5_prm::mbox_in::OPCODE.get(&input.buf).unwrap_or(0) as u16,
                    }),
                    Some(s) => self.cmd.free_slot(s).and_then(|s2| {
                        if used & (1 << s2) != 0 || s2 == self.cmd.nslots() - 1 {
                            return Err(Error::CommandTimeout {
                                opcode: mlx5_prm::mbox_in::OPCODE.get(&input.buf).unwrap_or(0)
                                    as u16,
                            });
                        }
                        let p = self.cmd.prepare(hal, s2, input, *outlen)?;
                        used |= 1 << s2;
                        Ok(p)
                    }),
                };
                if let Ok(p) = &r {
                    mask |= 1 << p.slot;
                }
                posted.push(r);
            }
            if mask != 0 {
                if let Err(e) = self.cmd.ring(hal, mask) {
                    // The doorbell may or may not have reached the device: the slots stay
                    // the device's until they come back.
                    for p in posted.iter().flatten() {
                        self.cmd.abandon(p);
                    }
                    results.extend(group.iter().map(|_| Err(e)));
                    continue;
                }
            }
            let deadline = hal.now() + self.cmd.timeouts.command;
            let mut pending: Vec<bool> = posted.iter().map(|p| p.is_ok()).collect();
            let mut fatal: Option<Error> = None;
            while pending.iter().any(|&b| b) {
                for (i, p) in posted.iter().enumerate() {
                    if let (true, Ok(p)) = (pending[i], p) {
                        if self.cmd.done(p).unwrap_or(false) {
                            pending[i] = false;
                        }
                    }
                }
                if !pending.iter().any(|&b| b) {
                    break;
                }
                if let Err(e) = self.cmd.check_health(hal) {
                    fatal = Some(e);
                    break;
                }
                if self.eq.as_ref().is_some_and(|q| q.peek_ready()) {
                    if let Err(e) = self.service_events(hal, true) {
                        if matches!(e, Error::DeviceFatal { .. }) {
                            fatal = Some(e);
                            break;
                        }
                    }
                }
                if hal.now() >= deadline {
                    break;
                }
                hal.relax();
            }
            for (i, (p, (_, outlen))) in posted.into_iter().zip(group.iter()).enumerate() {
                let r = match p {
                    Err(e) => Err(e),
                    Ok(p) if pending[i] => {
                        self.cmd.abandon(&p);
                        Err(fatal.unwrap_or(Error::CommandTimeout {
                            opcode: CmdQueue::<H>::opcode(&p),
                        }))
                    }
                    Ok(p) => {
                        let mut out = alloc::vec![0u8; (*outlen).max(mbox_out::BYTES)];
                        self.cmd.finish(hal, &p, &mut out).map(|()| out)
                    }
                };
                results.push(r);
            }
        }
        results
    }
}

#[cfg(test)]
mod tests {
    use mlx5_prm::{cmd_layout, cmd_prot_block, cmdq, opcode};

    use super::CmdBuf;
    use crate::test_hal::{test_config, SimHal, TestHal};
    use alloc::{vec, vec::Vec};

    /// The input data the device would read for the command in `slot`: follows the entry's
    /// `in_ptr` chain by bus address, as the device does.
    fn device_view(q: &super::CmdQueue<TestHal>, slot: usize, len: usize) -> Vec<u8> {
        let e = q.entry(slot);
        let mut v = Vec::new();
        let mut bus = q.page.read_be64(e + cmd_layout::IN_PTR).unwrap();
        while bus != 0 && v.len() < len {
            let (blk, off) = q
                .chunks
                .iter()
                .flatten()
                .find_map(|c| {
                    (bus >= c.bus() && bus < c.bus() + c.len() as u64)
                        .then(|| (c, (bus - c.bus()) as usize))
                })
                .expect("in_ptr names a mailbox block of the driver");
            let mut d = vec![0u8; cmdq::DATA_BLOCK_SIZE];
            blk.read(off + cmd_prot_block::DATA, &mut d).unwrap();
            v.extend_from_slice(&d);
            bus = blk.read_be64(off + cmd_prot_block::NEXT).unwrap();
        }
        v.truncate(len);
        v
    }

    #[test]
    fn a_nested_command_leaves_the_waiting_commands_mailboxes_alone() {
        let sim = SimHal::new();
        let hal = TestHal(sim.clone());
        let o = crate::hca::open(&hal, &test_config()).expect("bring-up");
        let mut dev = o.dev;
        let q = &mut dev.cmd;
        // A long command on slot 0 that the device has not run yet (no doorbell), then a
        // nested one on the last slot, as when a page request is answered while it waits.
        let mut outer = CmdBuf::new(opcode::CREATE_MKEY, 0, 4096);
        for (i, b) in outer.buf[cmdq::INLINE_SIZE..].iter_mut().enumerate() {
            *b = (i % 251) as u8 | 1;
        }
        q.prepare(&hal, 0, &outer, 16).unwrap();
        let want = outer.buf[cmdq::INLINE_SIZE..].to_vec();
        assert_eq!(device_view(q, 0, want.len()), want);
        let last = q.nslots() - 1;
        let nested = CmdBuf::new(opcode::MANAGE_PAGES, 1, 2048);
        q.prepare(&hal, last, &nested, 16).unwrap();
        // What the device reads for slot 0 is still the outer command's input.
        assert_eq!(device_view(q, 0, want.len()), want);
    }
}
