//! The CQ commands: CREATE_CQ, DESTROY_CQ, MODIFY_CQ (resize), QUERY_CQ.

use mlx5_prm::{
    cmd_hca_cap, cmd_status, cq_modify, cqc, cqe, create_cq_in, create_cq_out, destroy_cq_in,
    modify_cq_in, query_cq_in, query_cq_out,
};

use std::sync::Arc;

use crate::control::caps::Caps;
use crate::control::result::{err, get, CmdResult};
use crate::front::pci::Intx;
use crate::memory::GuestMemory;
use crate::objects::eq::EqTable;
use crate::objects::mr::{PagedBuffer, PasError};
use crate::objects::Objects;

use super::{syndrome, Arm, Cq, Cqe, INDEX_MASK};

/// CREATE_CQ (opcode 0x400).
pub(crate) fn create_cq(
    caps: &Caps,
    objects: &mut Objects,
    eqs: &mut EqTable,
    _intx: &mut Intx,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let ctx = create_cq_in::CQ_CONTEXT
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    let bad = |s| err(cmd_status::BAD_PARAM_ERR, s);
    if get(input, create_cq_in::CQ_UMEM_VALID) != 0
        || get(ctx, cqc::DBR_UMEM_VALID) != 0
        || get(ctx, cqc::CC) != 0
        || get(ctx, cqc::CQE_COMP_EN) != 0
        || get(ctx, cqc::APU_CQ) != 0
    {
        return Err(bad(syndrome::UNSUPPORTED));
    }
    let stride = match get(ctx, cqc::CQE_SZ) as u8 {
        cqe::stride::CQE_STRIDE_64 => 64,
        cqe::stride::CQE_STRIDE_128 => 128,
        _ => return Err(bad(syndrome::BAD_CQE_SIZE)),
    };
    let log_size = get(ctx, cqc::LOG_CQ_SIZE);
    if log_size > caps.general(cmd_hca_cap::LOG_MAX_CQ_SZ) {
        return Err(bad(syndrome::SIZE_ABOVE_CAP));
    }
    let uar = get(ctx, cqc::UAR_PAGE);
    if !objects.uars.contains(uar) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_UAR));
    }
    let eqn = get(ctx, cqc::C_EQN_OR_APU_ELEMENT);
    if !u8::try_from(eqn).is_ok_and(|n| eqs.get(n).is_some()) {
        return Err(err(cmd_status::BAD_RES_ERR, syndrome::BAD_EQN));
    }
    let dbr_addr = cqc::DBR_ADDR.get64(ctx).unwrap_or(0);
    if !dbr_addr.is_multiple_of(8) {
        return Err(bad(syndrome::DBR_MISALIGNED));
    }
    let buf = PagedBuffer::new(
        &input[create_cq_in::BYTES..],
        get(ctx, cqc::LOG_PAGE_SIZE),
        get(ctx, cqc::PAGE_OFFSET),
        stride << log_size,
    )
    .map_err(|e| match e {
        PasError::TooFewPages => bad(syndrome::PAS_TOO_FEW),
        _ => bad(syndrome::PAS_BAD),
    })?;
    let log_max = caps.general(cmd_hca_cap::LOG_MAX_CQ).min(24);
    if objects.cqs.cqs.len() as u64 >= 1u64 << log_max {
        return Err(err(cmd_status::NO_RES_ERR, syndrome::TOO_MANY_CQS));
    }
    let cqn = objects.cqs.alloc_cqn();
    let mut saved = [0u8; cqc::BYTES];
    saved.copy_from_slice(&ctx[..cqc::BYTES]);
    objects.cqs.cqs.insert(
        cqn,
        Cq {
            cqn,
            log_size,
            stride,
            buf,
            eqn,
            uar,
            dbr_addr,
            overrun_ignore: get(ctx, cqc::OI) != 0,
            pi: 0,
            seen_ci: None,
            solicit_mark: 0,
            arm: Arm::Off,
            arm_sn: 0,
            arms: 0,
            last_notified: 0,
            in_error: false,
            users: 0,
            cqc: saved,
            ring_view: Default::default(),
            ring_win: Default::default(),
        },
    );
    let _ = create_cq_out::CQN.set(output, cqn);
    Ok(())
}

/// DESTROY_CQ (opcode 0x401).
pub(crate) fn destroy_cq(
    _caps: &Caps,
    objects: &mut Objects,
    _eqs: &mut EqTable,
    _intx: &mut Intx,
    _mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let cqn = get(input, destroy_cq_in::CQN);
    let cq = objects
        .cqs
        .cqs
        .get(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    if cq.users != 0 {
        return Err(err(cmd_status::RES_BUSY, syndrome::CQ_IN_USE));
    }
    objects.cqs.cqs.remove(&cqn);
    Ok(())
}

/// MODIFY_CQ (opcode 0x403), op_mod RESIZE: the CQ moves to the buffer in `pas[]` with the new
/// `log_cq_size` / `log_page_size` / `page_offset` (Linux ib/cq.c `mlx5_ib_resize_cq` selects
/// LOG_SIZE | PG_OFFSET | PG_SIZE). A RESIZE CQE goes to the old buffer at the producer index
/// first; later CQEs go to the new buffer.
pub(crate) fn modify_cq(
    caps: &Caps,
    objects: &mut Objects,
    _eqs: &mut EqTable,
    _intx: &mut Intx,
    mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    _output: &mut [u8],
) -> CmdResult {
    let bad = |s| err(cmd_status::BAD_PARAM_ERR, s);
    let op_mod = get(input, modify_cq_in::OP_MOD) as u16;
    let select = get(input, modify_cq_in::MODIFY_FIELD_SELECT_RESIZE_FIELD_SELECT);
    let known = cq_modify::MASK_LOG_SIZE | cq_modify::MASK_PG_OFFSET | cq_modify::MASK_PG_SIZE;
    if op_mod != cq_modify::OPMOD_RESIZE
        || select & cq_modify::MASK_LOG_SIZE == 0
        || select & !known != 0
    {
        return Err(bad(syndrome::MODIFY_UNSUPPORTED));
    }
    if caps.general(cmd_hca_cap::CQ_RESIZE) == 0 {
        return Err(err(cmd_status::BAD_OP_ERR, syndrome::RESIZE_NOT_CAPABLE));
    }
    if get(input, modify_cq_in::CQ_UMEM_VALID) != 0 {
        return Err(bad(syndrome::UNSUPPORTED));
    }
    let ctx = modify_cq_in::CQ_CONTEXT
        .bytes(input)
        .map_err(|_| err(cmd_status::BAD_INP_LEN_ERR, syndrome::INPUT_TOO_SHORT))?;
    let cqn = get(input, modify_cq_in::CQN);
    let log_max = caps.general(cmd_hca_cap::LOG_MAX_CQ_SZ);
    let mem = mem.clone();
    let cq = objects
        .cqs
        .cqs
        .get_mut(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    if cq.in_error {
        return Err(err(
            cmd_status::BAD_RES_STATE_ERR,
            syndrome::RESIZE_IN_ERROR,
        ));
    }
    let stride: u64 = match get(ctx, cqc::CQE_SZ) as u8 {
        cqe::stride::CQE_STRIDE_64 => 64,
        cqe::stride::CQE_STRIDE_128 => 128,
        _ => return Err(bad(syndrome::BAD_CQE_SIZE)),
    };
    if stride != cq.stride {
        return Err(bad(syndrome::RESIZE_CQE_SIZE));
    }
    let log_size = get(ctx, cqc::LOG_CQ_SIZE);
    if log_size > log_max {
        return Err(bad(syndrome::SIZE_ABOVE_CAP));
    }
    // Fields not selected keep their value.
    let pick = |mask: u32, f| {
        if select & mask != 0 {
            get(ctx, f)
        } else {
            get(&cq.cqc[..], f)
        }
    };
    let log_page_size = pick(cq_modify::MASK_PG_SIZE, cqc::LOG_PAGE_SIZE);
    let page_offset = pick(cq_modify::MASK_PG_OFFSET, cqc::PAGE_OFFSET);
    let pas = input.get(modify_cq_in::BYTES..).unwrap_or(&[]);
    let buf = PagedBuffer::new(pas, log_page_size, page_offset, stride << log_size).map_err(
        |e| match e {
            PasError::TooFewPages => bad(syndrome::PAS_TOO_FEW),
            _ => bad(syndrome::PAS_BAD),
        },
    )?;
    // The CQEs not consumed yet must fit the new ring, and the old one must have room for the
    // RESIZE CQE (MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR, "bad size too many outstanding CQEs",
    // Linux include/linux/mlx5/device.h).
    let outs = |code| err(cmd_status::BAD_SIZE_OUTS_CQES_ERR, code);
    let outstanding = match cq.consumer_index(&*mem) {
        Ok(ci) => cq.pi.wrapping_sub(ci) & INDEX_MASK,
        Err(_) => return Err(outs(syndrome::RESIZE_OUTSTANDING)),
    };
    if outstanding >= cq.size() || outstanding >= 1u32 << log_size {
        return Err(outs(syndrome::RESIZE_OUTSTANDING));
    }
    // The RESIZE CQE, in the old buffer with the old owner bit.
    let mut c = Cqe([0; cqe::SIZE]);
    c.0[cqe::offset::OP_OWN] = cqe::opcode::RESIZE_CQ << 4;
    let mut bytes = c.0;
    let owner = ((cq.pi >> cq.log_size) & 1) as u8;
    bytes[cqe::offset::OP_OWN] |= owner;
    let slot = (cq.pi & (cq.size() - 1)) as u64 * cq.stride + (cq.stride - 64);
    let wrote = cq
        .buf
        .write(&*mem, slot, &bytes[..cqe::offset::OP_OWN])
        .and_then(|_| {
            cq.buf.write(
                &*mem,
                slot + cqe::offset::OP_OWN as u64,
                &bytes[cqe::offset::OP_OWN..],
            )
        });
    if wrote.is_err() {
        return Err(err(cmd_status::INT_ERR, syndrome::RESIZE_CQE_WRITE));
    }
    cq.pi = cq.pi.wrapping_add(1);
    cq.buf = buf;
    cq.ring_win.clear();
    cq.log_size = log_size;
    let _ = cqc::LOG_CQ_SIZE.set(&mut cq.cqc, log_size);
    let _ = cqc::LOG_PAGE_SIZE.set(&mut cq.cqc, log_page_size);
    let _ = cqc::PAGE_OFFSET.set(&mut cq.cqc, page_offset);
    Ok(())
}

/// QUERY_CQ (opcode 0x402): the cqc with the current state and counters, and the page list.
pub(crate) fn query_cq(
    _caps: &Caps,
    objects: &mut Objects,
    _eqs: &mut EqTable,
    _intx: &mut Intx,
    mem: &Arc<dyn GuestMemory>,
    input: &[u8],
    output: &mut [u8],
) -> CmdResult {
    let cqn = get(input, query_cq_in::CQN);
    let cq = objects
        .cqs
        .cqs
        .get(&cqn)
        .ok_or(err(cmd_status::BAD_RES_ERR, syndrome::UNKNOWN_CQ))?;
    let ctx = cq.query_context(&**mem);
    let _ = query_cq_out::CQ_CONTEXT.write_bytes(output, &ctx);
    // pas[] as far as the driver's output buffer reaches.
    let room = output.len().saturating_sub(query_cq_out::BYTES) / 8;
    for (i, a) in cq.buf.pas().iter().take(room).enumerate() {
        let at = query_cq_out::BYTES + i * 8;
        output[at..at + 8].copy_from_slice(&a.to_be_bytes());
    }
    Ok(())
}
