//! Target: the command queue.

use super::*;

/// Opcodes the model implements (and a few it does not).
const OPCODES: &[u16] = &[
    opcode::QUERY_HCA_CAP,
    opcode::QUERY_ADAPTER,
    opcode::INIT_HCA,
    opcode::TEARDOWN_HCA,
    opcode::ENABLE_HCA,
    opcode::DISABLE_HCA,
    opcode::QUERY_PAGES,
    opcode::MANAGE_PAGES,
    opcode::SET_HCA_CAP,
    opcode::QUERY_ISSI,
    opcode::SET_ISSI,
    opcode::SET_DRIVER_VERSION,
    opcode::CREATE_MKEY,
    opcode::QUERY_MKEY,
    opcode::DESTROY_MKEY,
    opcode::CREATE_EQ,
    opcode::DESTROY_EQ,
    opcode::QUERY_EQ,
    opcode::CREATE_CQ,
    opcode::DESTROY_CQ,
    opcode::QUERY_CQ,
    opcode::MODIFY_CQ,
    opcode::CREATE_QP,
    opcode::DESTROY_QP,
    opcode::RST2INIT_QP,
    opcode::INIT2RTR_QP,
    opcode::RTR2RTS_QP,
    opcode::RTS2RTS_QP,
    opcode::SQERR2RTS_QP,
    opcode::QP_2ERR,
    opcode::QP_2RST,
    opcode::QUERY_QP,
    opcode::SQD_RTS_QP,
    opcode::INIT2INIT_QP,
    opcode::QUERY_VPORT_STATE,
    opcode::QUERY_NIC_VPORT_CONTEXT,
    opcode::MODIFY_NIC_VPORT_CONTEXT,
    opcode::QUERY_ROCE_ADDRESS,
    opcode::SET_ROCE_ADDRESS,
    opcode::NOP,
    opcode::ALLOC_PD,
    opcode::DEALLOC_PD,
    opcode::ALLOC_UAR,
    opcode::DEALLOC_UAR,
    opcode::ACCESS_REGISTER,
    opcode::ALLOC_TRANSPORT_DOMAIN,
    opcode::DEALLOC_TRANSPORT_DOMAIN,
    opcode::CREATE_SRQ,
    opcode::CREATE_RQ,
];

pub(super) fn random_opcode(rng: &mut Rng) -> u16 {
    match rng.below(20) {
        0 => rng.u32() as u16,
        1 => rng.pick(opcode::ALL).1,
        _ => rng.pick(OPCODES),
    }
}

/// Mailbox blocks the cmdq target builds chains from.
const POOL: usize = 48;

pub(super) struct CmdQueueFuzz {
    raw: Raw<Guarded>,
    pool: Vec<u64>,
}

impl CmdQueueFuzz {
    pub(super) fn new(rng: &mut Rng) -> CmdQueueFuzz {
        let mut raw = Raw::new(Guarded::new(4 << 20));
        if rng.chance(500) {
            raw.bring_up();
        }
        let pool = (0..POOL)
            .map(|_| {
                raw.dev
                    .alloc(cmdq::MAILBOX_BLOCK_SIZE, cmdq::MAILBOX_BLOCK_ALIGN)
            })
            .collect();
        CmdQueueFuzz { raw, pool }
    }

    /// A pointer for an entry or a `next` field.
    fn pointer(&self, rng: &mut Rng) -> u64 {
        match rng.below(10) {
            0..=5 => rng.pick(&self.pool),
            6 => BASE + rng.below(self.raw.dev.ram.size + 4096), // anywhere, maybe unaligned
            7 => 0,
            8 => rng.pick(&self.pool) + rng.range(1, 1023), // misaligned
            _ => rng.interesting(),
        }
    }

    /// A length: small, block-sized, a chain's worth, or absurd.
    fn length(rng: &mut Rng) -> u32 {
        match rng.below(6) {
            0 => rng.range(0, 16) as u32,
            1 => 16 + rng.below(512 * 4) as u32,
            2 => 16 + 512 * rng.range(1, 30) as u32,
            3 => rng.interesting() as u32,
            _ => rng.range(8, 0x400) as u32,
        }
    }

    /// Writes a chain of `n` blocks starting at a random pool block; returns its head.
    fn chain(&self, rng: &mut Rng, token: u8) -> u64 {
        let mem = self.raw.dev.mem();
        let n = rng.range(1, 8) as usize;
        let mut idx: Vec<usize> = (0..n).map(|_| rng.below(POOL as u64) as usize).collect();
        if rng.chance(700) {
            idx.dedup(); // usually no cycles; sometimes a block repeats
        }
        for (k, &b) in idx.iter().enumerate() {
            let mut blk = [0u8; cmdq::MAILBOX_BLOCK_SIZE];
            if rng.chance(500) {
                rng.fill(&mut blk[..512]);
            } else {
                for _ in 0..rng.range(0, 8) {
                    let at = rng.below(512) as usize & !3;
                    blk[at..at + 4].copy_from_slice(&(rng.interesting() as u32).to_be_bytes());
                }
            }
            let next = if k + 1 < idx.len() {
                if rng.chance(900) {
                    self.pool[idx[k + 1]]
                } else {
                    self.pointer(rng)
                }
            } else if rng.chance(900) {
                0
            } else {
                self.pointer(rng)
            };
            blk[cmd_prot_block::NEXT..cmd_prot_block::NEXT + 8]
                .copy_from_slice(&next.to_be_bytes());
            let num = if rng.chance(850) { k as u32 } else { rng.u32() };
            blk[cmd_prot_block::BLOCK_NUM..cmd_prot_block::BLOCK_NUM + 4]
                .copy_from_slice(&num.to_be_bytes());
            blk[cmd_prot_block::TOKEN] = if rng.chance(850) {
                token
            } else {
                rng.u32() as u8
            };
            if rng.chance(100) {
                blk[cmd_prot_block::CTRL_SIG] = rng.u32() as u8;
                blk[cmd_prot_block::SIG] = rng.u32() as u8;
            }
            mem.write(self.pool[b], &blk).unwrap();
        }
        self.pool[idx[0]]
    }
}

impl Epoch for CmdQueueFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        let cmdq_addr = self.raw.cmdq;
        let mut mask = 0u32;
        for _ in 0..rng.range(1, 4) {
            let slot = rng.below(32) as u32;
            mask |= 1 << slot;
            let token = rng.u32() as u8;
            let op = random_opcode(rng);
            let mut e = [0u8; 64];
            if rng.chance(100) {
                rng.fill(&mut e);
            } else {
                e[cmd_layout::TYPE] = if rng.chance(900) {
                    cmdq::PCI_CMD_XPORT
                } else {
                    rng.u32() as u8
                };
                let inlen = Self::length(rng);
                e[cmd_layout::INLEN..cmd_layout::INLEN + 4].copy_from_slice(&inlen.to_be_bytes());
                let in_ptr = if rng.chance(700) {
                    self.chain(rng, token)
                } else {
                    self.pointer(rng)
                };
                e[cmd_layout::IN_PTR..cmd_layout::IN_PTR + 8]
                    .copy_from_slice(&in_ptr.to_be_bytes());
                rng.fill(&mut e[cmd_layout::IN..cmd_layout::IN + 16]);
                if rng.chance(800) {
                    e[cmd_layout::IN..cmd_layout::IN + 2].copy_from_slice(&op.to_be_bytes());
                    e[cmd_layout::IN + 2..cmd_layout::IN + 6].fill(0);
                }
                let outlen = Self::length(rng);
                e[cmd_layout::OUTLEN..cmd_layout::OUTLEN + 4]
                    .copy_from_slice(&outlen.to_be_bytes());
                let out_ptr = if rng.chance(700) {
                    self.chain(rng, token)
                } else {
                    self.pointer(rng)
                };
                e[cmd_layout::OUT_PTR..cmd_layout::OUT_PTR + 8]
                    .copy_from_slice(&out_ptr.to_be_bytes());
                e[cmd_layout::TOKEN] = token;
                if rng.chance(50) {
                    e[cmd_layout::SIG] = rng.u32() as u8;
                }
                e[cmd_layout::STATUS_OWN] = if rng.chance(950) {
                    cmdq::OWNER_HW
                } else {
                    rng.u32() as u8
                };
            }
            self.raw
                .dev
                .mem()
                .write(cmdq_addr + u64::from(slot) * 64, &e)
                .unwrap();
        }
        if rng.chance(100) {
            mask = rng.u32();
        }
        self.raw.dev.set_reg32(0x18, mask);
        Ok(())
    }
    fn check(&mut self) -> Result<(), String> {
        self.raw.dev.ram.check_guards()
    }
}
