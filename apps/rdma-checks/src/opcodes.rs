//! Every RC opcode over the loopback QPs, every byte checked: WRITE (also into the far end of
//! the big registration), READ, SEND, WRITE and SEND with immediate, the atomics, a chain of
//! unsignaled work requests.

use alloc::vec;
use alloc::vec::Vec;

use mlx5::{
    Hal, RecvWr, Remote, SendData, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

use crate::{pattern, post_one, remote_of, wait_one, BigMemory, BigMr, Checks, Mr, Pairs, R, SIG};

pub(crate) fn opcodes<H: Hal, B: BigMemory>(
    p: &mut Pairs<H>,
    src: &Mr<H>,
    dst: &Mr<H>,
    big: &BigMr<H, B>,
    checks: &mut Checks<'_>,
) -> R<()> {
    let len = 4096u32;
    let data = pattern(1, len as usize);
    src.write(0, &data)?;
    dst.write(0, &vec![0; len as usize])?;

    // RDMA WRITE.
    let sge = [src.sge(0, len)];
    let remote = remote_of(dst);
    let wc = post_one(
        p,
        1,
        SendOp::Write { remote, imm: None },
        SendData::Sges(&sge),
    )?;
    let mut got = vec![0u8; len as usize];
    dst.read(0, &mut got)?;
    checks.check(
        "RDMA_WRITE 4 KiB",
        wc.status == WcStatus::Success && wc.wr_id == 1 && got == data,
    );

    // RDMA WRITE into the far end of the big region (its whole length is registered).
    let far = big.mem.len() as u64 - len as u64;
    let remote_far = Remote {
        addr: big.mr.addr() + far,
        rkey: big.mr.rkey(),
    };
    let wc = post_one(
        p,
        2,
        SendOp::Write {
            remote: remote_far,
            imm: None,
        },
        SendData::Sges(&sge),
    )?;
    let mut far_bytes = vec![0u8; len as usize];
    big.mem.read(far as usize, &mut far_bytes);
    checks.check(
        "RDMA_WRITE to the last 4 KiB of the huge-page region",
        wc.status == WcStatus::Success && far_bytes == data,
    );

    // RDMA WRITE with immediate: consumes a receive on the target.
    let rsge = [dst.sge(8192, 16)];
    p.b.post_recv(&[RecvWr {
        wr_id: 30,
        sges: &rsge,
    }])?;
    let remote_b = Remote {
        addr: dst.addr() + 4096,
        rkey: dst.rkey(),
    };
    let small = [src.sge(0, 256)];
    let s = post_one(
        p,
        3,
        SendOp::Write {
            remote: remote_b,
            imm: Some(0xfeed_f00d),
        },
        SendData::Sges(&small),
    )?;
    let r = wait_one(&mut p.cq_b)?;
    let mut got = vec![0u8; 256];
    dst.read(4096, &mut got)?;
    checks.check(
        "RDMA_WRITE_WITH_IMM",
        s.status == WcStatus::Success
            && r.status == WcStatus::Success
            && r.opcode == WcOpcode::RecvRdmaWithImm
            && r.imm == Some(0xfeed_f00d)
            && got[..] == data[..256],
    );

    // RDMA READ: pull the bytes back from the target into another part of the source MR.
    let lsge = [src.sge(16384, len)];
    let remote = remote_of(dst);
    let wc = post_one(p, 4, SendOp::Read { remote }, SendData::Sges(&lsge))?;
    let mut got = vec![0u8; len as usize];
    src.read(16384, &mut got)?;
    checks.check(
        "RDMA_READ 4 KiB",
        wc.status == WcStatus::Success && wc.opcode == WcOpcode::RdmaRead && got == data,
    );

    // SEND and SEND with immediate into posted receives.
    for (wr_id, imm) in [(5u64, None), (6, Some(0x1234_5678u32))] {
        let rsge = [dst.sge(32768, 2048)];
        p.b.post_recv(&[RecvWr {
            wr_id: 50 + wr_id,
            sges: &rsge,
        }])?;
        let ssge = [src.sge(0, 1500)];
        let s = post_one(p, wr_id, SendOp::Send { imm }, SendData::Sges(&ssge))?;
        let r = wait_one(&mut p.cq_b)?;
        let mut got = vec![0u8; 1500];
        dst.read(32768, &mut got)?;
        let name = if imm.is_some() {
            "SEND_WITH_IMM 1500 B"
        } else {
            "SEND 1500 B"
        };
        checks.check(
            name,
            s.status == WcStatus::Success
                && r.status == WcStatus::Success
                && r.byte_len == 1500
                && r.wr_id == 50 + wr_id
                && r.imm == imm
                && got[..] == data[..1500],
        );
    }

    // Inline SEND.
    let rsge = [dst.sge(40960, 64)];
    p.b.post_recv(&[RecvWr {
        wr_id: 70,
        sges: &rsge,
    }])?;
    let s = post_one(
        p,
        7,
        SendOp::Send { imm: None },
        SendData::Inline(b"inline payload, no lkey"),
    )?;
    let r = wait_one(&mut p.cq_b)?;
    let mut got = [0u8; 23];
    dst.read(40960, &mut got)?;
    checks.check(
        "SEND inline",
        s.status == WcStatus::Success && r.byte_len == 23 && &got == b"inline payload, no lkey",
    );

    // Atomics on an 8-byte aligned word of the target.
    let word = 49152u64;
    // The driver puts the device in host-endian atomic mode (atomic_req_8B_endianness_mode),
    // as Linux does: the word is in CPU byte order.
    dst.write(word, &0x1111_2222_3333_4444u64.to_ne_bytes())?;
    let target = Remote {
        addr: dst.addr() + word,
        rkey: dst.rkey(),
    };
    let old = [src.sge(49152, 8)];
    let wc = post_one(
        p,
        8,
        SendOp::CompareSwap {
            remote: target,
            compare: 0x1111_2222_3333_4444,
            swap: 0x5555_6666_7777_8888,
        },
        SendData::Sges(&old),
    )?;
    let (prev, now) = (read_u64(src, 49152)?, read_u64(dst, word)?);
    checks.check(
        "ATOMIC_CMP_AND_SWP",
        wc.status == WcStatus::Success
            && prev == 0x1111_2222_3333_4444
            && now == 0x5555_6666_7777_8888,
    );
    let wc = post_one(
        p,
        9,
        SendOp::FetchAdd {
            remote: target,
            add: 5,
        },
        SendData::Sges(&old),
    )?;
    let (prev, now) = (read_u64(src, 49152)?, read_u64(dst, word)?);
    checks.check(
        "ATOMIC_FETCH_AND_ADD",
        wc.status == WcStatus::Success
            && prev == 0x5555_6666_7777_8888
            && now == 0x5555_6666_7777_888d,
    );

    // Unsignaled WRITEs followed by a signaled one: one completion, all data there, one doorbell.
    let remote = remote_of(dst);
    let s0 = [src.sge(0, 1024)];
    let wrs: Vec<SendWr<'_, H>> = (0..4)
        .map(|i| SendWr {
            wr_id: 100 + i,
            op: SendOp::Write {
                remote: Remote {
                    addr: remote.addr + 1024 * i,
                    rkey: remote.rkey,
                },
                imm: None,
            },
            data: SendData::Sges(&s0),
            flags: if i == 3 { SIG } else { SendFlags::NONE },
        })
        .collect();
    dst.write(0, &vec![0; 4096])?;
    p.a.post_send(&wrs)?;
    let wc = wait_one(&mut p.cq_a)?;
    let mut got = vec![0u8; 4096];
    dst.read(0, &mut got)?;
    let all_there = got.chunks(1024).all(|c| c == &data[..1024]);
    let mut extra = [WorkCompletion::default(); 4];
    let more = p.cq_a.poll(&mut extra)?;
    checks.check(
        "batch of 3 unsignaled + 1 signaled WRITE",
        wc.wr_id == 103 && all_there && more == 0,
    );
    Ok(())
}

fn read_u64<H: Hal>(mr: &Mr<H>, off: u64) -> R<u64> {
    let mut b = [0u8; 8];
    mr.read(off, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}
