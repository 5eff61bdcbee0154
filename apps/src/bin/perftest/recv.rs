//! The SEND receiver of ib_send_bw (`run_iter_bw_server`) and receive handling shared with ib_send_lat.

use super::*;

/// Posts the first receives for `size`-byte SENDs (`ctx_set_recv_wqes`); how many.
pub(crate) fn post_recvs<H: Hal>(o: &Opts, r: &mut Res<H>, size: u64) -> Result<u64, String> {
    let want = if o.duration.is_some() { u64::MAX } else { o.iters };
    let k = r.lay.nslots(size).min(want).min(64);
    for i in 0..k {
        let s = [r.mr.sge(r.lay.slot(size, i), size as u32)];
        r.qp.post_recv(&[RecvWr { wr_id: i, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
    }
    Ok(k)
}

/// Takes one received message: its length, and its bytes against the pattern (bw: how many
/// landed, the pattern put back) or against the first message (lat). Reposts the slot while
/// more are due.
pub(crate) struct RecvCheck {
    pub(crate) landed: u64,
    pub(crate) first: Option<Vec<u8>>,
    pub(crate) differ: u64,
}

pub(crate) fn take_recv<H: Hal>(
    o: &Opts,
    r: &mut Res<H>,
    size: u64,
    wc: &WorkCompletion,
    posted: &mut u64,
    chk: &mut RecvCheck,
) -> Result<(), String> {
    ok_wc(wc, "receive")?;
    if wc.byte_len as u64 != size {
        return Err(format!("message {}: {} bytes, not {size}", wc.wr_id, wc.byte_len));
    }
    let at = r.lay.slot(size, wc.wr_id);
    let got = read(&r.mr, at, size)?;
    if o.test == Test::Lat {
        match &chk.first {
            None => chk.first = Some(got.clone()),
            Some(f) if *f != got => chk.differ += 1,
            Some(_) => {}
        }
    }
    let mut i = 0usize;
    while i < got.len() {
        let n = (got.len() - i).min(CHUNK);
        chk.landed += got[i..i + n].iter().zip(pat(at + i as u64, n)).filter(|(a, b)| a != b).count() as u64;
        i += n;
    }
    fill(&r.mr, at, size)?;
    let want = if o.duration.is_some() { u64::MAX } else { o.iters };
    if *posted < want {
        let s = [r.mr.sge(at, size as u32)];
        r.qp.post_recv(&[RecvWr { wr_id: *posted, sges: &s }]).map_err(|e| format!("post_recv: {e:?}"))?;
        *posted += 1;
    }
    Ok(())
}

/// perftest's bytes are rand(): about 1/256 of them equal the pattern they overwrite.
pub(crate) fn enough_landed(landed: u64, total: u64) -> bool {
    landed + total / 64 + 4 >= total
}

/// Receives `-n` SENDs (or for `-D` seconds from the first), reposting each
/// (`run_iter_bw_server`).
pub(crate) fn receiver<H: Hal>(o: &Opts, r: &mut Res<H>, size: u64, mut posted: u64) -> Result<(Report, String), String> {
    let mut clock: Option<Clock> = None;
    let mut chk = RecvCheck { landed: 0, first: None, differ: 0 };
    let (mut rcnt, mut sampled) = (0u64, 0u64);
    let mut t_first = 0u64;
    let mut t_last = 0u64;
    loop {
        if o.duration.is_none() && rcnt == o.iters {
            break;
        }
        let Some(wc) = wait_cq(&mut r.rcq, r.rch.as_ref(), &mut r.events, clock.as_ref())? else { break };
        let t = now();
        if rcnt == 0 {
            t_first = t;
            if let Some((d, m)) = o.duration {
                clock = Some(Clock::start(d, m));
            }
        }
        t_last = t;
        take_recv(o, r, size, &wc, &mut posted, &mut chk)?;
        rcnt += 1;
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    let total = size * rcnt;
    if !enough_landed(chk.landed, total) {
        return Err(format!("only {} of {total} received bytes differ from the pattern they overwrote", chk.landed));
    }
    let rep = match &clock {
        Some(cl) => duration_report(size, sampled, cl),
        None => {
            // run_iter_bw_server: from the first message to the last, no peak.
            let secs = ((t_last - t_first) as f64 / ticks_per_us() / 1e6).max(1e-9);
            Report { size, iters: rcnt, peak: 0.0, avg: total as f64 / secs / MB, rate: rcnt as f64 / secs / 1e6 }
        }
    };
    Ok((rep, format!("{rcnt} messages of {size} B received, {} of {total} bytes landed", chk.landed)))
}
