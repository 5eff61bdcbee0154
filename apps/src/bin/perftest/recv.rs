//! The SEND receiver of ib_send_bw (`run_iter_bw_server`) and receive handling shared with ib_send_lat.

use super::*;

/// `ctx_set_recv_wqes`: posts perftest's `rx_depth` receives for `size`-byte SENDs, each in
/// a slot of its own when `rx_depth + 1` slots fit (else shared, see [`take_recv`]).
pub(crate) fn post_recvs(o: &Opts, r: &mut Res, size: u64) -> Result<RecvRing, Error<'static>> {
    let want = if o.duration.is_some() {
        u64::MAX
    } else {
        o.iters
    };
    let slots = r.lay.recv_slots(size, o.rx_depth);
    let mut ring = RecvRing::new(
        o.rx_depth,
        want,
        size as u32,
        r.lay.recv_base(),
        inc(size),
        slots,
    );
    if r.recv_dirty && ring.exclusive() {
        // An earlier size's shared slots left the peer's bytes: the pattern back where this
        // size's receives land, so that their checks mean something.
        fill(&r.mr, r.lay.recv_base(), slots * inc(size))?;
        r.recv_dirty = false;
    }
    {
        let (qp, mr) = r.qp_mr()?;
        ring.post_initial(qp, mr)
    }
    .map_err(|e| Error::PostRecvs(o.rx_depth, e))?;
    Ok(ring)
}

/// What the received messages showed: bytes that differ from the pattern they overwrote, of
/// how many checked; for lat the first message and how many differ from it; messages whose
/// bytes could not be checked (their slot was shared with a later receive).
pub(crate) struct RecvCheck {
    pub(crate) landed: u64,
    pub(crate) checked: u64,
    pub(crate) first: Option<Vec<u8>>,
    pub(crate) differ: u64,
    pub(crate) unchecked: u64,
}

impl RecvCheck {
    pub(crate) fn new() -> RecvCheck {
        RecvCheck {
            landed: 0,
            checked: 0,
            first: None,
            differ: 0,
            unchecked: 0,
        }
    }
}

/// Takes one received message as `run_iter_bw_server` does: first one receive is posted
/// again (while more are due), then the message is looked at: its length, and its bytes
/// against the pattern (bw: how many landed, then the pattern put back) or against the first
/// message (lat).
///
/// With fewer slots than `rx_depth + 1` (large messages, [`RecvRing::exclusive`] false) a
/// later receive may already be landing in this message's slot, so bw checks only the first
/// use of each slot (any peer bytes there, this message's or a later one's, differ from the
/// pattern) and puts no pattern back (the slots are then marked as holding no pattern, and
/// later shared runs check nothing there). Lat has one message in flight at a time (the peer waits
/// for this side's reply), so its slots are never written while looked at.
pub(crate) fn take_recv(
    o: &Opts,
    r: &mut Res,
    size: u64,
    wc: &WorkCompletion,
    ring: &mut RecvRing,
    chk: &mut RecvCheck,
) -> Result<(), Error<'static>> {
    ok_wc(wc, "receive")?;
    let (qp, mr) = r.qp_mr()?;
    let at = ring.complete(qp, mr, wc.wr_id).map_err(Error::Repost)?;
    if wc.byte_len as u64 != size {
        return Err(Error::Length {
            n: wc.wr_id,
            len: wc.byte_len,
            size,
        });
    }
    let own = ring.exclusive() || o.test == Test::Lat;
    if !own && (r.recv_dirty || wc.wr_id >= ring.slots()) {
        chk.unchecked += 1;
        return Ok(());
    }
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
        chk.landed += got[i..i + n]
            .iter()
            .zip(pat(at + i as u64, n))
            .filter(|(a, b)| a != b)
            .count() as u64;
        i += n;
    }
    chk.checked += size;
    if own {
        fill(&r.mr, at, size)?;
    }
    Ok(())
}

/// perftest's bytes are rand(): about 1/256 of them equal the pattern they overwrite.
pub(crate) fn enough_landed(landed: u64, total: u64) -> bool {
    landed + total / 64 + 4 >= total
}

/// Receives `-n` SENDs (or for `-D` seconds from the first), reposting each
/// (`run_iter_bw_server`).
pub(crate) fn receiver(
    o: &Opts,
    r: &mut Res,
    size: u64,
    mut ring: RecvRing,
) -> Result<(Report, String), Error<'static>> {
    let mut clock: Option<Clock> = None;
    let mut chk = RecvCheck::new();
    let (mut rcnt, mut sampled) = (0u64, 0u64);
    let mut t_first = 0u64;
    let mut t_last = 0u64;
    // Where the time goes: waiting for completions, and taking each message (repost, check,
    // pattern put back).
    let (mut in_wait, mut in_take) = (0u64, 0u64);
    loop {
        if o.duration.is_none() && rcnt == o.iters {
            break;
        }
        let tw = now();
        let Some(wc) = r.wait_recv(clock.as_ref())? else {
            break;
        };
        let t = now();
        in_wait += t - tw;
        if rcnt == 0 {
            t_first = t;
            if let Some((d, m)) = o.duration {
                clock = Some(Clock::start(d, m));
            }
        }
        t_last = t;
        take_recv(o, r, size, &wc, &mut ring, &mut chk)?;
        in_take += now() - t;
        if !ring.keeps_depth() {
            return Err(Error::DepthNotKept {
                after: rcnt,
                posted: ring.outstanding(),
                depth: ring.depth(),
            });
        }
        rcnt += 1;
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    if !ring.exclusive() && rcnt > 0 {
        r.recv_dirty = true;
    }
    let us = |t: u64| t as f64 / ticks_per_us();
    log::info!("perftest: receiver: {rcnt} messages: {:.0} us waiting for completions, {:.0} us taking them", us(in_wait), us(in_take));
    let total = size * rcnt;
    if !enough_landed(chk.landed, chk.checked) {
        return Err(Check::TooFewLanded {
            landed: chk.landed,
            of: chk.checked,
        }
        .into());
    }
    let rep = match &clock {
        Some(cl) => duration_report(size, sampled, cl),
        None => {
            // run_iter_bw_server: from the first message to the last, no peak.
            let secs = ((t_last - t_first) as f64 / ticks_per_us() / 1e6).max(1e-9);
            Report {
                size,
                iters: rcnt,
                peak: 0.0,
                avg: total as f64 / secs / MB,
                rate: rcnt as f64 / secs / 1e6,
            }
        }
    };
    let unchecked = match chk.unchecked {
        0 => String::new(),
        u => format!(" ({u} in shared slots not checked)"),
    };
    Ok((
        rep,
        format!(
            "{rcnt} messages of {size} B received with perftest's rx_depth {} kept posted, {} of {} bytes checked landed{unchecked}",
            ring.depth(),
            chk.landed,
            chk.checked
        ),
    ))
}
