//! The bandwidth requester (`run_iter_bw`): WRITE, READ, SEND and atomics.

use super::*;

/// Work requests in flight at most (this side's send queue is 64 deep), and bytes.
pub(crate) const OUTSTANDING: u64 = 32;
pub(crate) const IN_FLIGHT: u64 = 1 << 20;
/// perftest_resources.h `ATOMIC_ADD_VALUE` (FETCH_AND_ADD adds 1; CMP_AND_SWAP compares
/// with 0, the WR's zeroed `compare_add`, and swaps in `ATOMIC_SWAP_VALUE` 0).
pub(crate) const ATOMIC_ADD: u64 = 1;
/// WRITE, READ, SEND or atomics of `size` bytes, `-n` times or for `-D` seconds, up to
/// [`OUTSTANDING`] at a time, each signaled (`run_iter_bw`); checks what came back.
pub(crate) fn bw_requester(
    o: &Opts,
    r: &mut Res,
    remote: Remote,
    size: u64,
) -> Result<(Report, String), Error<'static>> {
    let lay = r.lay;
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    // At most IN_FLIGHT bytes outstanding: Linux under TCG acknowledges slowly, and each ACK
    // timeout resends everything unacknowledged (go-back-N), which slows it further.
    let depth = OUTSTANDING.min((IN_FLIGHT / size).max(1));
    let depth = match o.verb {
        Verb::Read | Verb::Atomic => depth.min(lay.nslots(size)),
        _ => depth,
    };
    let mut tp: Vec<u64> = Vec::new();
    let mut tc: Vec<u64> = Vec::new();
    let (mut posted, mut done, mut sampled) = (0u64, 0u64, 0u64);
    let mut first_read: Option<Vec<u8>> = None;
    let mut mismatches = 0u64;
    // Atomics: the last value seen at each of perftest's 64 addresses of the cycle buffer.
    let steps = CYCLE_BUFFER / inc(8);
    let mut last: Vec<Option<u64>> = alloc::vec![None; steps as usize];
    let mut ended = false;
    while done < posted || (!ended && posted < n) {
        if let Some(cl) = &clock {
            if cl.phase() == Phase::End {
                ended = true;
            }
        }
        while !ended && posted < n && posted - done < depth {
            let k = posted;
            let local;
            let op = match o.verb {
                Verb::Write => {
                    local = [r.mr.sge(0, size as u32)];
                    SendOp::Write { remote, imm: None }
                }
                Verb::Send => {
                    local = [r.mr.sge(0, size as u32)];
                    SendOp::Send { imm: None }
                }
                Verb::Read => {
                    local = [r.mr.sge(lay.slot(size, k), size as u32)];
                    SendOp::Read { remote }
                }
                Verb::Atomic => {
                    local = [r.mr.sge(lay.slot(64, k), 8)];
                    // increase_rem_addr: the next cache line of the cycle buffer each time.
                    let at = Remote {
                        addr: remote.addr + (k % steps) * inc(8),
                        rkey: remote.rkey,
                    };
                    match o.atomic {
                        AtomicOp::FetchAdd => SendOp::FetchAdd {
                            remote: at,
                            add: ATOMIC_ADD,
                        },
                        AtomicOp::CmpSwap => SendOp::CompareSwap {
                            remote: at,
                            compare: 0,
                            swap: 0,
                        },
                    }
                }
            };
            let wr = SendWr {
                wr_id: k,
                op,
                data: SendData::Sges(&local),
                flags: SendFlags::SIGNALED,
            };
            if clock.is_none() {
                tp.push(now());
            }
            test_qp(&mut r.qp, &mut r.link)?
                .post_send(&[wr])
                .map_err(|e| Error::PostSend(k, e))?;
            posted += 1;
        }
        if done == posted {
            continue;
        }
        let wc = r.wait_send()?;
        ok_wc(&wc, "work request")?;
        if clock.is_none() {
            tc.push(now());
        }
        if wc.wr_id != done {
            return Err(Error::OutOfOrder {
                got: wc.wr_id,
                due: done,
            });
        }
        match o.verb {
            Verb::Read => {
                let got = read(&r.mr, lay.slot(size, wc.wr_id), size)?;
                match &first_read {
                    None => first_read = Some(got),
                    Some(f) if *f != got => mismatches += 1,
                    Some(_) => {}
                }
            }
            Verb::Atomic => {
                let b = read(&r.mr, lay.slot(64, wc.wr_id), 8)?;
                let got = u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                let s = (wc.wr_id % steps) as usize;
                if let Some(prev) = last[s] {
                    let want = match o.atomic {
                        AtomicOp::FetchAdd => prev.wrapping_add(ATOMIC_ADD),
                        AtomicOp::CmpSwap => prev,
                    };
                    if got != want {
                        mismatches += 1;
                    }
                }
                last[s] = Some(got);
            }
            _ => {}
        }
        done += 1;
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    let rep = match &clock {
        Some(cl) => duration_report(size, sampled, cl),
        None => bw_report(size, &tp, &tc),
    };
    let count = if clock.is_some() {
        format!("{done} (over -D)")
    } else {
        format!("{done}")
    };
    let note = match o.verb {
        Verb::Read if mismatches > 0 => return Err(Check::ReadsDiffer { bad: mismatches, of: done, size }.into()),
        Verb::Read => format!("every byte of {count} READs of {size} B equals the first READ"),
        Verb::Atomic if mismatches > 0 => return Err(Check::Atomics { bad: mismatches, of: done, op: o.atomic }.into()),
        Verb::Atomic => match o.atomic {
            AtomicOp::FetchAdd => format!("{count} FETCH_AND_ADDs over {steps} words: each fetched value is the previous one at its word + 1"),
            AtomicOp::CmpSwap => format!("{count} CMP_AND_SWAPs (0 -> 0) over {steps} words: each fetched value equals the word's first"),
        },
        _ => format!("{count} {} of {size} B from the known pattern", if o.verb == Verb::Send { "SENDs" } else { "WRITEs" }),
    };
    Ok((rep, note))
}
