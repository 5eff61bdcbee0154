//! This side as the target of the peer's WRITEs, READs and atomics: perftest's addressing was hit, nothing else.

use super::*;

/// This side as the target of the peer's WRITEs, READs or atomics (`iters` = what the peer
/// reported, 0 if unknown), after the peer is done: exactly perftest's addressing was hit.
pub(crate) fn check_target(o: &Opts, r: &Res, iters: u64) -> Result<String, Error<'static>> {
    let t = r.lay.target();
    let half = r.lay.half;
    match o.verb {
        Verb::Read => {
            if let Some(i) = first_changed(&r.mr, t, half)? {
                return Err(Check::ReadChanged(i - t).into());
            }
            Ok(format!(
                "this side's {half} B unchanged by the peer's READs"
            ))
        }
        Verb::Atomic => {
            // increase_rem_addr: op k hits the word at INC(8) * (k mod cycle_buffer / INC(8)).
            let steps = CYCLE_BUFFER / inc(8);
            let mut hits = alloc::vec![0u64; steps as usize];
            for s in 0..steps {
                let at = t + s * inc(8);
                let b = read(&r.mr, at, 8)?;
                let now = u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                hits[s as usize] = now.wrapping_sub(pattern_u64(at));
            }
            if o.atomic == AtomicOp::CmpSwap && hits.iter().any(|&h| h != 0) {
                return Err(Check::SwapChanged.into());
            }
            // FETCH_AND_ADD: the words round-robin, so counts fall by at most one, once.
            let total: u64 = hits.iter().sum();
            let want = |s: u64| total / steps + u64::from(s < total % steps);
            if o.atomic == AtomicOp::FetchAdd {
                if let Some(s) = (0..steps).find(|&s| hits[s as usize] != want(s)) {
                    return Err(Check::WordAdds {
                        word: s,
                        got: hits[s as usize],
                        want: want(s),
                        total,
                    }
                    .into());
                }
                if iters != 0 && o.duration.is_none() && total != iters {
                    return Err(Check::AddsLanded {
                        total,
                        reported: iters,
                    }
                    .into());
                }
            }
            // Nothing else changed: between the words, and beyond the cycle buffer.
            let mut bad = None;
            scan(&r.mr, t, half, |i, x| {
                let rel = i - t;
                let in_word = rel < CYCLE_BUFFER && rel % inc(8) < 8;
                if !in_word && bad.is_none() && x != pat_of(i as usize) {
                    bad = Some(rel);
                }
            })?;
            if let Some(b) = bad {
                return Err(Check::AtomicsOutside(b).into());
            }
            Ok(match o.atomic {
                AtomicOp::FetchAdd => format!("{total} FETCH_AND_ADDs of 1 landed round-robin on {steps} words, nothing else changed"),
                AtomicOp::CmpSwap => format!("{steps} words unchanged by CMP_AND_SWAP (0 -> 0), nothing else changed"),
            })
        }
        Verb::Write => {
            // Where perftest's WRITEs go: for each size, op k at INC(size) * (k mod
            // cycle_buffer / INC(size)) when size <= cycle_buffer / 2, else at 0.
            let many = if o.duration.is_some() || iters == 0 {
                u64::MAX
            } else {
                iters
            };
            let mut written = alloc::vec![false; half as usize];
            for s in o.sizes() {
                let spots = if s <= CYCLE_BUFFER / 2 {
                    (CYCLE_BUFFER / inc(s)).min(many)
                } else {
                    1
                };
                for k in 0..spots {
                    let at = if s <= CYCLE_BUFFER / 2 { k * inc(s) } else { 0 };
                    for w in written.iter_mut().skip(at as usize).take(s as usize) {
                        *w = true;
                    }
                }
            }
            let (mut landed, mut total, mut stray) = (0u64, 0u64, None);
            scan(&r.mr, t, half, |i, x| {
                let rel = (i - t) as usize;
                let same = x == pat_of(i as usize);
                if written[rel] {
                    total += 1;
                    landed += u64::from(!same);
                } else if !same && stray.is_none() {
                    stray = Some(rel);
                }
            })?;
            if let Some(b) = stray {
                return Err(Check::WritesOutside(b as u64).into());
            }
            if o.duration.is_none() && !enough_landed(landed, total) {
                return Err(Check::WritesLanded { landed, total }.into());
            }
            Ok(format!("the peer's WRITEs landed where perftest aims them ({landed} of {total} bytes changed), nothing elsewhere"))
        }
        Verb::Send => Ok(String::new()),
    }
}
