//! The command queue engine: reads queue entries and mailbox chains from guest memory, checks
//! them the way firmware does (delivery status), runs the command ([`crate::hca`] dispatch),
//! writes the output back, hands the entry back to software and, in event mode, posts a
//! command-completion EQE.
//!
//! Layouts: the 64-byte `mlx5_cmd_layout` (Linux device.h:533,
//! [`mlx5_prm::cmd_layout`]) and the 576-byte `mlx5_cmd_prot_block` (device.h:803,
//! [`mlx5_prm::cmd_prot_block`]). The first 16 bytes of input and output are inline in the
//! entry; the rest lives in 512-byte data blocks chained by `next`, numbered by `block_num` from
//! 0, each carrying the command's token (cmd.c `mlx5_copy_to_msg`). Ownership is `status_own` bit 0
//! (1 = hardware); the delivery status is `status_own >> 1` (Linux cmd.c `mlx5_cmd_comp_handler`).
//!
//! Every guest access goes through [`GuestMemory`]; a chain is followed for exactly as many
//! blocks as the length needs, so a looping or runaway chain ends in a delivery error.

use crate::be::{be32, be64};
use crate::control::caps::cmdif_checksum;
use crate::control::faults::GARBLED_OUTPUT_LENGTH;
use crate::front::init_seg::CmdQueue;
use crate::hca::Hca;
use crate::memory::GuestMemory;
use mlx5_prm::{cmd_layout, cmd_prot_block, cmdq, delivery_status, event, mbox_in, mbox_out};

/// Most mailbox blocks one command input or output may span (2 MiB of data). Longer lengths
/// get a length delivery error. (A model limit: the real firmware limit is not published.)
pub const MAX_MAILBOX_BLOCKS: usize = 4096;
/// Shortest input/output the engine can even parse: opcode+op_mod / status+syndrome.
pub const MIN_HEADER_LEN: usize = 8;

/// A delivery failure: `delivery_status` value and a note for the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Delivery(u8, &'static str);

fn xor8(b: &[u8]) -> u8 {
    b.iter().fold(0, |x, y| x ^ y)
}

/// Direction of a mailbox chain (selects the alignment/length delivery statuses).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    In,
    Out,
}

impl Dir {
    fn align_err(self) -> u8 {
        match self {
            Dir::In => delivery_status::IN_PTR_ALIGN_ERR,
            Dir::Out => delivery_status::OUT_PTR_ALIGN_ERR,
        }
    }
    fn length_err(self) -> u8 {
        match self {
            Dir::In => delivery_status::IN_LENGTH_ERR,
            Dir::Out => delivery_status::OUT_LENGTH_ERR,
        }
    }
}

/// Follows a mailbox chain of `nblocks` blocks from `first`, checking each block's alignment,
/// reachability, `block_num`, token and (if enabled) signatures. Returns the block addresses
/// and, for input chains, the concatenated data.
fn walk_chain(
    mem: &dyn GuestMemory,
    first: u64,
    nblocks: usize,
    token: u8,
    checksum: bool,
    dir: Dir,
    mut data: Option<&mut Vec<u8>>,
) -> Result<Vec<u64>, Delivery> {
    let mut addrs = Vec::with_capacity(nblocks);
    if let Some(d) = data.as_deref_mut() {
        d.reserve(nblocks * cmdq::DATA_BLOCK_SIZE);
    }
    let mut ptr = first;
    // The entry's pointers keep bits 63:9 (cmd_queue_entry.*_mailbox_pointer_31_9), a block's
    // `next` bits 63:10 (cmd_if_box.next_pointer_31_10).
    let mut align_mask = 0x1ffu64;
    let mut block = [0u8; cmd_prot_block::SIZE];
    for i in 0..nblocks {
        if ptr == 0 {
            return Err(Delivery(
                dir.length_err(),
                "mailbox chain shorter than the length",
            ));
        }
        if ptr & align_mask != 0 {
            return Err(Delivery(dir.align_err(), "mailbox pointer not aligned"));
        }
        if mem.read(ptr, &mut block).is_err() {
            return Err(Delivery(
                delivery_status::FW_ERR,
                "mailbox block outside guest memory",
            ));
        }
        if be32(&block, cmd_prot_block::BLOCK_NUM) != i as u32 {
            return Err(Delivery(
                delivery_status::BAD_BLK_NUM_ERR,
                "wrong block_num",
            ));
        }
        if block[cmd_prot_block::TOKEN] != token {
            return Err(Delivery(
                delivery_status::TOK_ERR,
                "block token != entry token",
            ));
        }
        if checksum
            && (xor8(&block[cmd_prot_block::RSVD0..cmd_prot_block::SIG]) != 0xff
                || xor8(&block) != 0xff)
        {
            return Err(Delivery(delivery_status::SIGNAT_ERR, "bad block signature"));
        }
        if let Some(d) = data.as_deref_mut() {
            d.extend_from_slice(&block[..cmdq::DATA_BLOCK_SIZE]);
        }
        addrs.push(ptr);
        ptr = be64(&block, cmd_prot_block::NEXT);
        align_mask = 0x3ff;
    }
    Ok(addrs)
}

/// A parsed, delivered command: its input and where the output goes.
struct Delivered {
    input: Vec<u8>,
    outlen: usize,
    out_blocks: Vec<u64>,
}

fn deliver(
    mem: &dyn GuestMemory,
    e: &[u8; cmd_layout::SIZE],
    checksum: bool,
) -> Result<Delivered, Delivery> {
    if e[cmd_layout::TYPE] != cmdq::PCI_CMD_XPORT {
        return Err(Delivery(
            delivery_status::CMD_DESCR_ERR,
            "type is not PCI (7)",
        ));
    }
    // rsvd0 (bytes 1..3) and rsvd1 (byte 62) of mlx5_cmd_layout.
    if e[1..4] != [0, 0, 0] || e[62] != 0 {
        return Err(Delivery(
            delivery_status::RES_FLD_NOT_CLR_ERR,
            "reserved entry bytes set",
        ));
    }
    if checksum && xor8(e) != 0xff {
        return Err(Delivery(delivery_status::SIGNAT_ERR, "bad entry signature"));
    }
    let inlen = be32(e, cmd_layout::INLEN) as usize;
    let outlen = be32(e, cmd_layout::OUTLEN) as usize;
    let max = cmdq::INLINE_SIZE + MAX_MAILBOX_BLOCKS * cmdq::DATA_BLOCK_SIZE;
    if !(MIN_HEADER_LEN..=max).contains(&inlen) {
        return Err(Delivery(
            delivery_status::IN_LENGTH_ERR,
            "input length out of range",
        ));
    }
    if !(MIN_HEADER_LEN..=max).contains(&outlen) {
        return Err(Delivery(
            delivery_status::OUT_LENGTH_ERR,
            "output length out of range",
        ));
    }
    let token = e[cmd_layout::TOKEN];
    // The inline bytes and every block's whole data (truncated after): `walk_chain` then
    // never grows the buffer (growing a megabyte-long input copied it once more).
    let mut input =
        Vec::with_capacity(cmdq::INLINE_SIZE + cmdq::num_blocks(inlen) * cmdq::DATA_BLOCK_SIZE);
    input.extend_from_slice(&e[cmd_layout::IN..cmd_layout::IN + cmdq::INLINE_SIZE]);
    walk_chain(
        mem,
        be64(e, cmd_layout::IN_PTR),
        cmdq::num_blocks(inlen),
        token,
        checksum,
        Dir::In,
        Some(&mut input),
    )?;
    input.truncate(inlen);
    let out_blocks = walk_chain(
        mem,
        be64(e, cmd_layout::OUT_PTR),
        cmdq::num_blocks(outlen),
        token,
        checksum,
        Dir::Out,
        None,
    )?;
    Ok(Delivered {
        input,
        outlen,
        out_blocks,
    })
}

/// Writes `output` back: 16 bytes inline in the entry image `e`, the rest into the data part of
/// the output blocks (re-signing them when signatures are on). DMA faults are reported.
fn write_output(
    mem: &dyn GuestMemory,
    e: &mut [u8; cmd_layout::SIZE],
    output: &[u8],
    blocks: &[u64],
    checksum: bool,
) -> Result<(), ()> {
    let n = output.len().min(cmdq::INLINE_SIZE);
    e[cmd_layout::OUT..cmd_layout::OUT + n].copy_from_slice(&output[..n]);
    for (i, chunk) in output[n..].chunks(cmdq::DATA_BLOCK_SIZE).enumerate() {
        let addr = *blocks.get(i).ok_or(())?;
        mem.write(addr, chunk).map_err(|_| ())?;
        if checksum {
            let mut block = [0u8; cmd_prot_block::SIZE];
            mem.read(addr, &mut block).map_err(|_| ())?;
            let sig = !xor8(&block[..cmd_prot_block::SIG]);
            mem.write(addr + cmd_prot_block::SIG as u64, &[sig])
                .map_err(|_| ())?;
        }
    }
    Ok(())
}

/// Runs every slot set in `slots` (bit n = slot n), in slot order.
pub fn execute_doorbell(hca: &mut Hca, queue: CmdQueue, slots: u32) {
    let nslots = 1u32 << queue.log_size;
    for slot in 0..32 {
        if slots & (1 << slot) == 0 {
            continue;
        }
        if slot >= nslots {
            hca.trace(format_args!(
                "doorbell bit {slot} beyond the {nslots} slots: ignored"
            ));
            continue;
        }
        execute_slot(hca, queue, slot);
        hca.after_command();
    }
}

fn execute_slot(hca: &mut Hca, queue: CmdQueue, slot: u32) {
    let mem = hca.mem.clone();
    let mem = &*mem;
    let entry_addr = queue.addr + (u64::from(slot) << queue.log_stride);
    let mut e = [0u8; cmd_layout::SIZE];
    if mem.read(entry_addr, &mut e).is_err() {
        hca.trace(format_args!(
            "cmd slot {slot}: entry {entry_addr:#x} outside guest memory: dropped"
        ));
        return;
    }
    if e[cmd_layout::STATUS_OWN] & cmdq::OWNER_HW == 0 {
        hca.trace(format_args!(
            "cmd slot {slot}: doorbell for a software-owned entry: ignored"
        ));
        return;
    }
    if hca.dead() {
        hca.trace(format_args!(
            "cmd slot {slot}: firmware is dead (fatal health): no completion"
        ));
        return;
    }
    if hca.control.faults.swallow_commands {
        hca.trace(format_args!(
            "cmd slot {slot}: fault swallow-commands: entry left to hardware"
        ));
        return;
    }
    let checksum = hca
        .control
        .caps
        .general(mlx5_prm::cmd_hca_cap::CMDIF_CHECKSUM)
        == cmdif_checksum::ENABLED;

    let delivery = match hca.control.faults.next_delivery_status.take() {
        Some(st) => Err(Delivery(st, "fault delivery-status")),
        None => deliver(mem, &e, checksum),
    };
    let status = match delivery {
        Err(Delivery(st, why)) => {
            hca.trace_delivery(slot, st, why);
            st
        }
        Ok(d) => {
            let mut output = vec![0u8; d.outlen];
            let result = hca.dispatch(&d.input, &mut output);
            let (st, syn) = match result {
                Ok(()) => (0, 0),
                Err(err) => {
                    output.fill(0);
                    (err.status, err.syndrome)
                }
            };
            // mbox_out: status byte 0, syndrome dword 1 (`mlx5_ifc_mbox_out_bits`).
            let _ = mbox_out::STATUS.set(&mut output, st.into());
            let _ = mbox_out::SYNDROME.set(&mut output, syn);
            let opcode = mbox_in::OPCODE.get(&d.input).unwrap_or(0) as u16;
            let op_mod = mbox_in::OP_MOD.get(&d.input).unwrap_or(0) as u16;
            hca.trace_command(slot, opcode, op_mod, st, syn, &d.input, &output);
            if write_output(mem, &mut e, &output, &d.out_blocks, checksum).is_err() {
                hca.trace(format_args!("cmd slot {slot}: output mailbox write failed"));
                delivery_status::FW_ERR
            } else {
                delivery_status::OK
            }
        }
    };
    if hca.control.faults.garble_next_output_length {
        hca.control.faults.garble_next_output_length = false;
        e[cmd_layout::OUTLEN..cmd_layout::OUTLEN + 4]
            .copy_from_slice(&GARBLED_OUTPUT_LENGTH.to_be_bytes());
        hca.trace(format_args!("cmd slot {slot}: fault garble-output-length"));
    }
    if hca.control.faults.garble_next_token {
        hca.control.faults.garble_next_token = false;
        e[cmd_layout::TOKEN] ^= 0xff;
        hca.trace(format_args!("cmd slot {slot}: fault garble-token"));
    }
    // Everything but the status byte first, then hand the entry back (ownership bit clear).
    let _ = mem.write(entry_addr, &e[..cmd_layout::STATUS_OWN]);
    let _ = mem.write(
        entry_addr + cmd_layout::STATUS_OWN as u64,
        &[(status << 1) | cmdq::OWNER_SW],
    );
    // Event mode: the command-completion EQE carries the slot bit (mlx5_eqe_cmd.vector,
    // Linux device.h:653; consumed by mlx5_cmd_comp_handler).
    let vector = (1u32 << slot).to_be_bytes();
    hca.post_async_event(event::CMD, 0, &vector);
}
