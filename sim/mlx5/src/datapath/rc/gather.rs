//! A send WQE's gather list to a work request: its lkeys checked and its bytes' bus pieces,
//! with the last one-entry list remembered.

use super::*;

thread_local! {
    /// [`work_request`]'s scratch list of a gather list's bus pieces.
    static PIECES: RefCell<Vec<(u64, usize)>> = const { RefCell::new(Vec::new()) };
    /// [`work_request`]'s last one-entry gather list and its pieces (see [`LastGather`]).
    static LAST_GATHER: RefCell<Option<LastGather>> = const { RefCell::new(None) };
}

/// A gather list of one entry whose key [`work_request`] resolved, with the key table's
/// generation then: while the table keeps that generation, the same entry used the same way
/// by the same QP resolves to the same pieces (its key checks would pass again), so the next
/// WQE with that entry reuses them (and their allocation) instead of resolving the key again.
/// Each piece is still proved guest memory again for each WQE.
struct LastGather {
    generation: u64,
    lkey: u32,
    addr: u64,
    len: u64,
    access: Access,
    pd: u32,
    qpn: u32,
    pieces: Pieces,
}

/// Builds the work request of a parsed send WQE (lkeys checked), or the local error it
/// completes with.
pub(crate) fn work_request(
    hca: &Dp<'_>,
    qpn: u32,
    w: &SendWqe,
    raw: &[u8],
    wr_id: u64,
) -> Result<(WorkRequest, u32, WrPayload), (u8, u8)> {
    use mlx5_prm::wqe::opcode::*;
    let q = hca
        .objects
        .qps
        .get(qpn)
        .ok_or((cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE))?;
    let user = KeyUser { pd: q.pd, qpn };
    let prot = |f| (cqe::syndrome::LOCAL_PROT_ERR, lkey_vendor(f));
    let dma = (cqe::syndrome::LOCAL_PROT_ERR, vendor::DMA_FAULT);
    let total = w.total_len();
    // Every lkey checked and every piece proved guest memory, before any byte moves.
    // Collected in a reused scratch vector, then allocated once as the shared slice.
    let generation = hca.objects.mkeys.generation();
    let pieces_of = |gathers: &[Gather], access| -> Result<Pieces, (u8, u8)> {
        let one = match gathers {
            [Gather::Data { len, lkey, addr }] => Some((*len, *lkey, *addr)),
            _ => None,
        };
        if let Some((len, lkey, addr)) = one {
            let hit = LAST_GATHER.with(|c| {
                c.borrow().as_ref().and_then(|g| {
                    (g.generation == generation
                        && (g.lkey, g.addr, g.len, g.access, g.pd, g.qpn)
                            == (lkey, addr, len, access, user.pd, user.qpn))
                        .then(|| g.pieces.clone())
                })
            });
            if let Some(p) = hit {
                for &(bus, n) in p.iter() {
                    hca.mem.check(bus, n).map_err(|_| dma)?;
                }
                return Ok(p);
            }
        }
        let pieces = PIECES.with(|scratch| {
            let mut pieces = scratch.borrow_mut();
            pieces.clear();
            for g in gathers {
                if let Gather::Data { len, lkey, addr } = *g {
                    let r = hca
                        .objects
                        .mkeys
                        .resolve(lkey, addr, len, access, user)
                        .map_err(prot)?;
                    memory_pieces(&**hca.mem, &r, &mut pieces).map_err(|_| dma)?;
                }
            }
            Ok::<Pieces, (u8, u8)>(Arc::from(&pieces[..]))
        })?;
        if let Some((len, lkey, addr)) = one {
            LAST_GATHER.with(|c| {
                *c.borrow_mut() = Some(LastGather {
                    generation,
                    lkey,
                    addr,
                    len,
                    access,
                    pd: user.pd,
                    qpn: user.qpn,
                    pieces: pieces.clone(),
                })
            });
        }
        Ok(pieces)
    };
    let too_long = total > (1u64 << q.log_msg_max.min(31));
    let imm = matches!(w.opcode, SEND_IMM | RDMA_WRITE_IMM).then_some(w.imm);
    let (op, len, payload) = match w.opcode {
        SEND | SEND_IMM | SEND_INVAL | RDMA_WRITE | RDMA_WRITE_IMM | RDMA_READ => {
            if too_long {
                return Err((cqe::syndrome::LOCAL_LENGTH_ERR, vendor::MSG_TOO_LONG));
            }
            let op = match w.opcode {
                SEND | SEND_IMM | SEND_INVAL => WrOp::Send {
                    imm,
                    // MLX5_OPCODE_SEND_INVAL: the ctrl `imm` is the rkey to invalidate
                    // (rdma-core qp.c `send_ieth`).
                    invalidate: (w.opcode == SEND_INVAL).then_some(w.imm),
                },
                RDMA_READ => WrOp::Read {
                    raddr: w.raddr,
                    rkey: w.rkey,
                },
                _ => WrOp::Write {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    imm,
                },
            };
            let read = w.opcode == RDMA_READ;
            let access = if read {
                Access::LOCAL_WRITE
            } else {
                Access::LOCAL_READ
            };
            let pieces = pieces_of(w.gathers(), access)?;
            let inline = w
                .gathers()
                .iter()
                .any(|g| matches!(g, Gather::Inline { .. }));
            let payload = if inline && !read {
                // Inline bytes live in the SQ ring, which software may reuse once the WQE
                // completes: take the whole message now.
                let mut bytes = Vec::with_capacity(total as usize);
                let mut data = pieces.iter();
                for g in w.gathers() {
                    match *g {
                        Gather::Inline { at, len } => {
                            bytes.extend_from_slice(raw.get(at..at + len).ok_or(dma)?)
                        }
                        Gather::Data { len, .. } => {
                            let mut left = len as usize;
                            while left > 0 {
                                let &(bus, n) = data.next().ok_or(dma)?;
                                let k = bytes.len();
                                bytes.resize(k + n, 0);
                                hca.mem.read(bus, &mut bytes[k..]).map_err(|_| dma)?;
                                left = left.saturating_sub(n);
                            }
                        }
                    }
                }
                WrPayload::Bytes(bytes.into())
            } else {
                WrPayload::Pieces(pieces)
            };
            (op, total as u32, payload)
        }
        ATOMIC_CS | ATOMIC_FA => {
            let first = w.gathers().first().copied();
            let pieces = pieces_of(first.as_slice(), Access::LOCAL_WRITE)?;
            let op = if w.opcode == ATOMIC_FA {
                WrOp::FetchAdd {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    add: w.swap_add,
                }
            } else {
                WrOp::CmpSwap {
                    raddr: w.raddr,
                    rkey: w.rkey,
                    compare: w.compare,
                    swap: w.swap_add,
                }
            };
            (op, 8, WrPayload::Pieces(pieces))
        }
        _ => return Err((cqe::syndrome::LOCAL_QP_OP_ERR, vendor::MALFORMED_WQE)),
    };
    Ok((
        WorkRequest {
            wr_id,
            op,
            len,
            fence: w.fence != 0,
            solicited: w.solicited,
        },
        len,
        payload,
    ))
}
