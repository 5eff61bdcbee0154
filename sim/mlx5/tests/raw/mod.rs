//! A small raw-command driver for host tests: builds queue entries and mailbox chains in the
//! device's guest memory, rings the doorbell and reads status, syndrome and output back. The
//! device is anything implementing [`Device`]: the in-process HCA, or (tests/two_process_wire.rs)
//! an `mlx5-sim` process reached over QEMU's proxy protocol. Test code: no error handling
//! beyond what the tests need.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use mlx5_prm::*;
use mlx5_sim::{GuestMemory, InProcHca};

/// What the raw driver needs from a device: BAR0 MMIO, the guest memory it DMAs into, and a way
/// to let it catch up.
pub trait Device {
    /// Guest memory as the driver sees it (the device DMAs into the same bytes).
    fn mem(&self) -> &dyn GuestMemory;
    /// Allocates zeroed DMA memory; returns its bus address.
    fn alloc(&self, size: usize, align: usize) -> u64;
    /// A 32-bit BAR0 load at `offset` (CPU byte order).
    fn read32(&self, offset: u64) -> u32;
    /// A 32-bit BAR0 store (CPU byte order).
    fn write32(&self, offset: u64, value: u32);
    /// A 64-bit BAR0 store (CPU byte order).
    fn write64(&self, offset: u64, value: u64);
    /// Waits for the device to process what was written so far. True if that is certain once
    /// this returns (then a command entry still owned by hardware never completes); false if
    /// the device works on its own time and the caller has to poll.
    fn settle(&self) -> bool;
    /// Lets the device deliver wire packets and run its timers, if it does not by itself.
    fn poll(&self) {}

    /// Reads the big-endian register dword at `offset`.
    fn reg32(&self, offset: u64) -> u32 {
        u32::from_be(self.read32(offset))
    }
    /// Writes the big-endian register dword at `offset`.
    fn set_reg32(&self, offset: u64, value: u32) {
        self.write32(offset, value.to_be())
    }
}

impl Device for InProcHca {
    fn mem(&self) -> &dyn GuestMemory {
        &**self.memory()
    }
    fn alloc(&self, size: usize, align: usize) -> u64 {
        InProcHca::alloc(self, size, align).unwrap()
    }
    fn read32(&self, offset: u64) -> u32 {
        InProcHca::read32(self, offset)
    }
    fn write32(&self, offset: u64, value: u32) {
        InProcHca::write32(self, offset, value)
    }
    fn write64(&self, offset: u64, value: u64) {
        InProcHca::write64(self, offset, value)
    }
    fn settle(&self) -> bool {
        self.flush();
        true
    }
    fn poll(&self) {
        InProcHca::poll(self)
    }
}

/// Mailbox blocks allocated per direction (4 KiB pages, like rdma-core's vfio driver).
pub const BLOCKS: usize = 24;
/// How long a test waits for the device (threaded mode); never asserted on.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A completed (or not) command.
#[derive(Debug, Clone)]
pub struct Done {
    /// Delivery status (`status_own >> 1`); `None` if the entry stayed hardware-owned.
    pub delivery: Option<u8>,
    /// The output (outlen bytes).
    pub out: Vec<u8>,
    /// The entry as the device left it.
    pub entry: [u8; 64],
}

impl Done {
    pub fn status(&self) -> u8 {
        self.out[0]
    }
    pub fn syndrome(&self) -> u32 {
        u32::from_be_bytes(self.out[4..8].try_into().unwrap())
    }
    /// Asserts delivery OK and command status OK.
    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.delivery, Some(0), "delivery status");
        assert_eq!(
            (self.status(), self.syndrome()),
            (0, 0),
            "command status {} syndrome {:#x}",
            cmd_status::name(self.status()).unwrap_or("?"),
            self.syndrome()
        );
        self
    }
    /// Asserts delivery OK and the given command status and syndrome.
    #[track_caller]
    pub fn fails(&self, status: u8, syndrome: u32) {
        assert_eq!(self.delivery, Some(0), "delivery status");
        assert_eq!(
            (self.status(), self.syndrome()),
            (status, syndrome),
            "expected {} {:#x}, got {} {:#x}",
            cmd_status::name(status).unwrap_or("?"),
            syndrome,
            cmd_status::name(self.status()).unwrap_or("?"),
            self.syndrome()
        );
    }
    pub fn get(&self, f: Field) -> u32 {
        f.get(&self.out).unwrap()
    }
}

impl Raw {
    /// The capability bytes of a QUERY_HCA_CAP output (on the in-process `Raw` so the
    /// `Raw::cap_bytes` path needs no type annotation; [`cap_bytes`] for any device).
    pub fn cap_bytes(d: &Done) -> Vec<u8> {
        cap_bytes(d)
    }
}

/// The capability bytes of a QUERY_HCA_CAP output.
pub fn cap_bytes(d: &Done) -> Vec<u8> {
    let at = query_hca_cap_out::CAPABILITY.byte_offset();
    d.out[at..at + 4096].to_vec()
}

/// A command input buffer.
pub fn input(op: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    mbox_in::OPCODE.set(&mut b, op.into()).unwrap();
    mbox_in::OP_MOD.set(&mut b, op_mod.into()).unwrap();
    b
}

/// Sets a field (panics if outside).
pub fn set(b: &mut [u8], f: Field, v: u32) {
    f.set(b, v).unwrap();
}

/// A raw driver on a deterministic in-process HCA.
pub fn dev() -> Raw {
    Raw::new(InProcHca::deterministic())
}

/// [`dev`], brought up.
pub fn up() -> Raw {
    let mut r = dev();
    r.bring_up();
    r
}

/// The raw driver.
pub struct Raw<D: Device = InProcHca> {
    pub dev: D,
    pub cmdq: u64,
    pub token: u8,
    pub in_blocks: Vec<u64>,
    pub out_blocks: Vec<u64>,
}

impl<D: Device> Raw<D> {
    /// Waits for `initializing` to clear, checks the command interface revision and programs
    /// the command queue.
    pub fn new(dev: D) -> Raw<D> {
        let deadline = Instant::now() + PATIENCE;
        while dev.reg32(0x1fc) >> 31 != 0 {
            assert!(Instant::now() < deadline, "initializing never cleared");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(dev.reg32(0x4) >> 16, 5, "cmdif revision");
        assert_eq!(dev.reg32(0x14) & 0xff, 0x56, "log_cmdq_size/stride");
        let cmdq = dev.alloc(4096, 4096);
        dev.set_reg32(0x10, (cmdq >> 32) as u32);
        dev.set_reg32(0x14, cmdq as u32);
        let in_blocks = (0..BLOCKS).map(|_| dev.alloc(4096, 4096)).collect();
        let out_blocks = (0..BLOCKS).map(|_| dev.alloc(4096, 4096)).collect();
        Raw {
            dev,
            cmdq,
            token: 0x5a,
            in_blocks,
            out_blocks,
        }
    }

    pub fn mem(&self) -> &dyn GuestMemory {
        self.dev.mem()
    }

    /// Executes `input` in slot 0 with an output of `outlen` bytes.
    pub fn exec(&mut self, input: &[u8], outlen: usize) -> Done {
        self.exec_with(0, input, outlen, |_, _| {})
    }

    /// Prepares entry and chains, lets `tweak` change them (entry image, then the memory with
    /// the block addresses), rings slot `slot` and waits.
    pub fn exec_with(
        &mut self,
        slot: u32,
        input: &[u8],
        outlen: usize,
        tweak: impl FnOnce(&mut [u8; 64], &Self),
    ) -> Done {
        let entry_addr = self.prepare(slot, input, outlen, tweak);
        self.ring(slot);
        self.wait(entry_addr, outlen)
    }

    /// Builds the entry (returns its address) without ringing.
    pub fn prepare(
        &mut self,
        slot: u32,
        input: &[u8],
        outlen: usize,
        tweak: impl FnOnce(&mut [u8; 64], &Self),
    ) -> u64 {
        let mem = self.dev.mem();
        let nin = cmdq::num_blocks(input.len());
        let nout = cmdq::num_blocks(outlen);
        assert!(
            nin <= BLOCKS && nout <= BLOCKS,
            "command too large for the test chains"
        );
        for (blocks, n, data) in [
            (&self.in_blocks, nin, Some(input)),
            (&self.out_blocks, nout, None),
        ] {
            for i in 0..n {
                let mut b = [0u8; 576];
                if let Some(d) = data {
                    let start = 16 + i * 512;
                    let end = (start + 512).min(d.len());
                    b[..end - start].copy_from_slice(&d[start..end]);
                }
                let next = if i + 1 < n { blocks[i + 1] } else { 0 };
                b[cmd_prot_block::NEXT..cmd_prot_block::NEXT + 8]
                    .copy_from_slice(&next.to_be_bytes());
                b[cmd_prot_block::BLOCK_NUM..cmd_prot_block::BLOCK_NUM + 4]
                    .copy_from_slice(&(i as u32).to_be_bytes());
                b[cmd_prot_block::TOKEN] = self.token;
                mem.write(blocks[i], &b).unwrap();
            }
        }
        let mut e = [0u8; 64];
        e[cmd_layout::TYPE] = cmdq::PCI_CMD_XPORT;
        e[cmd_layout::INLEN..cmd_layout::INLEN + 4]
            .copy_from_slice(&(input.len() as u32).to_be_bytes());
        e[cmd_layout::IN_PTR..cmd_layout::IN_PTR + 8]
            .copy_from_slice(&self.in_blocks[0].to_be_bytes());
        let n = input.len().min(16);
        e[cmd_layout::IN..cmd_layout::IN + n].copy_from_slice(&input[..n]);
        e[cmd_layout::OUT_PTR..cmd_layout::OUT_PTR + 8]
            .copy_from_slice(&self.out_blocks[0].to_be_bytes());
        e[cmd_layout::OUTLEN..cmd_layout::OUTLEN + 4]
            .copy_from_slice(&(outlen as u32).to_be_bytes());
        e[cmd_layout::TOKEN] = self.token;
        e[cmd_layout::STATUS_OWN] = cmdq::OWNER_HW;
        tweak(&mut e, self);
        let addr = self.cmdq + u64::from(slot) * 64;
        self.dev.mem().write(addr, &e).unwrap();
        addr
    }

    /// Rings the doorbell for `slot`.
    pub fn ring(&self, slot: u32) {
        self.dev.set_reg32(0x18, 1 << slot);
    }

    /// Waits for the entry at `entry_addr` to return to software (or for the device to have
    /// processed everything, if it never does) and reads the output.
    pub fn wait(&self, entry_addr: u64, outlen: usize) -> Done {
        let mem = self.dev.mem();
        let mut e = [0u8; 64];
        let deadline = Instant::now() + PATIENCE;
        loop {
            // settle() true: the device has processed the doorbell, so an entry still owned by
            // hardware afterwards will never complete. False: poll until it is returned.
            let settled = self.dev.settle();
            mem.read(entry_addr, &mut e).unwrap();
            if e[cmd_layout::STATUS_OWN] & 1 == 0 {
                break;
            }
            if settled || Instant::now() >= deadline {
                return Done {
                    delivery: None,
                    out: vec![0; outlen],
                    entry: e,
                };
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let mut out = vec![0u8; outlen];
        let n = outlen.min(16);
        out[..n].copy_from_slice(&e[cmd_layout::OUT..cmd_layout::OUT + n]);
        let mut off = n;
        let mut i = 0;
        while off < outlen {
            let len = (outlen - off).min(512);
            mem.read(self.out_blocks[i], &mut out[off..off + len])
                .unwrap();
            off += len;
            i += 1;
        }
        Done {
            delivery: Some(e[cmd_layout::STATUS_OWN] >> 1),
            out,
            entry: e,
        }
    }

    // --- Bring-up helpers -----------------------------------------------------------------

    pub fn enable_hca(&mut self) -> Done {
        self.exec(
            &input(opcode::ENABLE_HCA, 0, enable_hca_in::BYTES),
            enable_hca_out::BYTES,
        )
    }

    pub fn query_pages(&mut self, op_mod: u16) -> i32 {
        let d = self.exec(&input(opcode::QUERY_PAGES, op_mod, 16), 16);
        d.ok();
        d.get(query_pages_out::NUM_PAGES) as i32
    }

    /// MANAGE_PAGES GIVE of `pages`.
    pub fn give_pages(&mut self, pages: &[u64]) -> Done {
        let mut i = input(
            opcode::MANAGE_PAGES,
            mlx5_prm::pages::manage::GIVE,
            manage_pages_in::PAS.bytes_with(pages.len()),
        );
        set(
            &mut i,
            manage_pages_in::INPUT_NUM_ENTRIES,
            pages.len() as u32,
        );
        for (k, a) in pages.iter().enumerate() {
            manage_pages_in::PAS
                .elem(k as u32)
                .set64(&mut i, *a)
                .unwrap();
        }
        self.exec(&i, 16)
    }

    /// Allocates and gives `n` fresh pages.
    pub fn alloc_and_give(&mut self, n: usize) -> Vec<u64> {
        let pages: Vec<u64> = (0..n).map(|_| self.dev.alloc(4096, 4096)).collect();
        self.give_pages(&pages).ok();
        pages
    }

    /// MANAGE_PAGES TAKE of up to `n` pages: the returned addresses.
    pub fn take_pages(&mut self, n: u32) -> Vec<u64> {
        let mut i = input(opcode::MANAGE_PAGES, mlx5_prm::pages::manage::TAKE, 16);
        set(&mut i, manage_pages_in::INPUT_NUM_ENTRIES, n);
        let d = self.exec(&i, manage_pages_out::PAS.bytes_with(n as usize));
        d.ok();
        let got = d.get(manage_pages_out::OUTPUT_NUM_ENTRIES);
        (0..got)
            .map(|k| manage_pages_out::PAS.elem(k).get64(&d.out).unwrap())
            .collect()
    }

    pub fn query_cap(&mut self, cap_type: u16, cur: bool) -> Done {
        let op_mod = hca_cap::query_op_mod(cap_type, cur as u16);
        self.exec(
            &input(opcode::QUERY_HCA_CAP, op_mod, 16),
            query_hca_cap_out::BYTES,
        )
    }

    pub fn set_cap(&mut self, cap_type: u16, cap: &[u8]) -> Done {
        let mut i = input(
            opcode::SET_HCA_CAP,
            hca_cap::set_op_mod(cap_type),
            set_hca_cap_in::BYTES,
        );
        let at = set_hca_cap_in::CAPABILITY.byte_offset();
        i[at..at + cap.len()].copy_from_slice(cap);
        self.exec(&i, 16)
    }

    pub fn host_endianness(&mut self) -> Done {
        let mut i = input(opcode::ACCESS_REGISTER, access_reg::OP_MOD_WRITE, 32);
        set(
            &mut i,
            access_register_in::REGISTER_ID,
            access_reg::REG_HOST_ENDIANNESS.into(),
        );
        self.exec(&i, 32)
    }

    /// ENABLE_HCA, ISSI 1, boot pages, host endianness, caps (unchanged), init pages, INIT_HCA.
    pub fn bring_up(&mut self) {
        self.bring_up_with(|_| {});
    }

    /// [`bring_up`](Self::bring_up) with `before_init` run after the boot pages and the host
    /// endianness register, before the init pages and INIT_HCA: the place for SET_HCA_CAP
    /// (accepted only before INIT_HCA).
    pub fn bring_up_with(&mut self, before_init: impl FnOnce(&mut Raw<D>)) {
        self.enable_hca().ok();
        let mut s = input(opcode::SET_ISSI, 0, 16);
        set(&mut s, set_issi_in::CURRENT_ISSI, 1);
        self.exec(&s, 16).ok();
        let boot = self.query_pages(1);
        self.alloc_and_give(boot as usize);
        self.host_endianness().ok();
        before_init(self);
        let init = self.query_pages(2);
        self.alloc_and_give(init as usize);
        self.exec(&input(opcode::INIT_HCA, 0, 16), 16).ok();
    }

    pub fn alloc_uar(&mut self) -> u32 {
        let d = self.exec(&input(opcode::ALLOC_UAR, 0, 16), 16);
        d.ok();
        d.get(alloc_uar_out::UAR)
    }

    /// CREATE_EQ of 2^log_size entries in one fresh page run (owner bits initialised to 1),
    /// subscribed to `events`. Returns (eqn, buffer address).
    pub fn create_eq(&mut self, uar: u32, log_size: u32, events: &[u8]) -> (u32, u64) {
        let bytes = (64usize << log_size).max(4096);
        let buf = self.dev.alloc(bytes, 4096);
        for k in 0..(1u64 << log_size) {
            self.mem().write(buf + k * 64 + 63, &[1]).unwrap();
        }
        let npages = bytes / 4096;
        let mut i = input(opcode::CREATE_EQ, 0, create_eq_in::PAS.bytes_with(npages));
        let c = create_eq_in::EQ_CONTEXT_ENTRY.offset;
        set(&mut i, Field::new(c + eqc::LOG_EQ_SIZE.offset, 5), log_size);
        set(&mut i, Field::new(c + eqc::UAR_PAGE.offset, 24), uar);
        let mut mask = 0u64;
        for &t in events {
            mask |= 1 << t;
        }
        create_eq_in::EVENT_BITMASK
            .elem(0)
            .set64(&mut i, mask)
            .unwrap();
        for p in 0..npages {
            create_eq_in::PAS
                .elem(p as u32)
                .set64(&mut i, buf + p as u64 * 4096)
                .unwrap();
        }
        let d = self.exec(&i, 16);
        d.ok();
        (d.get(create_eq_out::EQ_NUMBER), buf)
    }

    /// Reads EQE `index` (64 bytes) of an EQ buffer at `buf`.
    pub fn eqe(&self, buf: u64, index: u64) -> [u8; 64] {
        let mut e = [0u8; 64];
        self.mem().read(buf + index * 64, &mut e).unwrap();
        e
    }

    /// Writes an EQ doorbell through UAR page `uar` (arm or not).
    pub fn eq_doorbell(&self, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let off = u64::from(uar) * 4096 + if arm { 0x40 } else { 0x48 };
        self.dev.set_reg32(off, (ci & 0xff_ffff) | eqn << 24);
        self.dev.settle();
    }
}
