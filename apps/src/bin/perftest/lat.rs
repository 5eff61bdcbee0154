//! The latency tools: `run_iter_lat_write`, `run_iter_lat` (READ), `run_iter_lat_send`.

use super::*;

/// Waits until the byte at `off` reads `want` (or the clock ended): `run_iter_lat_write`'s
/// poll of the last byte of its buffer.
pub(crate) fn poll_byte<H: Hal>(
    mr: &MemoryRegion<H>,
    off: u64,
    want: u8,
    clock: Option<&Clock>,
    link: &mut Link,
) -> Result<bool, Error<'static>> {
    let deadline = Deadline::after(WAIT);
    let mut spins = 0u32;
    loop {
        if mr
            .read_volatile_u8(off)
            .map_err(|e| Error::Verbs("read", e))?
            == want
        {
            return Ok(true);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) {
            link.tick();
            if clock.is_some_and(|c| c.phase() == Phase::End) {
                return Ok(false);
            }
            if deadline.expired() {
                return Err(Error::NeverBecame { off, want });
            }
        }
        core::hint::spin_loop();
    }
}

/// `run_iter_lat_write`: the server writes first; each side polls the last byte of its
/// buffer for the count, then writes its own count in the last byte of its message.
pub(crate) fn write_lat(
    o: &Opts,
    r: &mut Res,
    remote: Remote,
    size: u64,
) -> Result<String, Error<'static>> {
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    let server = !o.client;
    let poll_at = r.lay.target() + size - 1;
    let post_at = size - 1;
    let (mut scnt, mut ccnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64, 0u64);
    let mut tp: Vec<u64> = Vec::with_capacity(if clock.is_some() { 0 } else { n as usize });
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase() == Phase::End);
    while (scnt < n || ccnt < n || rcnt < n) && !ended(&clock) {
        if rcnt < n && !(scnt < 1 && server) {
            rcnt += 1;
            if !poll_byte(&r.mr, poll_at, rcnt as u8, clock.as_ref(), &mut r.link)? {
                break;
            }
        }
        if scnt < n {
            if clock.is_none() {
                tp.push(now());
            }
            scnt += 1;
            r.mr.write(post_at, &[scnt as u8])
                .map_err(|e| Error::Verbs("write", e))?;
            let local = [r.mr.sge(0, size as u32)];
            let wr = SendWr {
                wr_id: scnt,
                op: SendOp::Write { remote, imm: None },
                data: SendData::Sges(&local),
                flags: SendFlags::SIGNALED,
            };
            test_qp(&mut r.qp, &mut r.link)?
                .post_send(&[wr])
                .map_err(|e| Error::PostSend(scnt, e))?;
        }
        if ccnt < n {
            let wc = r.wait_send()?;
            ok_wc(&wc, "WRITE")?;
            ccnt += 1;
            if clock.is_some_and(|c| c.phase() == Phase::Sample) {
                sampled += 1;
            }
        }
    }
    // Back to the pattern byte of the source for the next size.
    fill(&r.mr, post_at, 1)?;
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 2.0),
        None => print_lat(size, n, &tp, 2.0),
    }
    Ok(format!(
        "{scnt} WRITEs of {size} B ping-ponged, each count seen in the last byte"
    ))
}

/// The WRITE target after ib_write_lat: perftest's buffer is zeros, so every byte the peer
/// wrote is 0 but the polled last byte, which holds the final count; nothing beyond changed.
pub(crate) fn check_write_lat_target(o: &Opts, r: &Res) -> Result<String, Error<'static>> {
    let s = o.sizes().into_iter().max().unwrap_or(o.size);
    let t = r.lay.target();
    let last =
        r.mr.read_volatile_u8(t + s - 1)
            .map_err(|e| Error::Verbs("read", e))?;
    if o.duration.is_none() && last != o.iters as u8 {
        return Err(Check::LastByte {
            got: last,
            want: o.iters as u8,
        }
        .into());
    }
    let mut nonzero = None;
    scan(&r.mr, t, s - 1, |i, x| {
        if x != 0 && nonzero.is_none() {
            nonzero = Some(i - t);
        }
    })?;
    if let Some(i) = nonzero {
        return Err(Check::NotZero(i).into());
    }
    if let Some(i) = first_changed(&r.mr, t + s, r.lay.half - s)? {
        return Err(Check::Beyond(i - t).into());
    }
    Ok(format!(
        "the peer's {s} B landed as perftest's zeros, last byte {last}, nothing beyond"
    ))
}

/// `run_iter_lat`: one signaled READ at a time; every READ of the same remote bytes must
/// return the same bytes.
pub(crate) fn read_lat(
    o: &Opts,
    r: &mut Res,
    remote: Remote,
    size: u64,
) -> Result<String, Error<'static>> {
    let clock = o.duration.map(|(d, m)| Clock::start(d, m));
    let n = if clock.is_some() { u64::MAX } else { o.iters };
    let mut tp: Vec<u64> = Vec::new();
    let (mut scnt, mut sampled, mut mismatches) = (0u64, 0u64, 0u64);
    let mut first: Option<Vec<u8>> = None;
    while scnt < n {
        if clock.is_some_and(|c| c.phase() == Phase::End) {
            break;
        }
        if clock.is_none() {
            tp.push(now());
        }
        let at = r.lay.slot(size, scnt);
        let local = [r.mr.sge(at, size as u32)];
        let wr = SendWr {
            wr_id: scnt,
            op: SendOp::Read { remote },
            data: SendData::Sges(&local),
            flags: SendFlags::SIGNALED,
        };
        test_qp(&mut r.qp, &mut r.link)?
            .post_send(&[wr])
            .map_err(|e| Error::PostSend(scnt, e))?;
        scnt += 1;
        let wc = r.wait_send()?;
        ok_wc(&wc, "READ")?;
        let got = read(&r.mr, at, size)?;
        match &first {
            None => first = Some(got),
            Some(f) if *f != got => mismatches += 1,
            Some(_) => {}
        }
        if clock.is_some_and(|c| c.phase() == Phase::Sample) {
            sampled += 1;
        }
    }
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 1.0),
        None => print_lat(size, n, &tp, 1.0),
    }
    if mismatches > 0 {
        return Err(Check::ReadsDiffer {
            bad: mismatches,
            of: scnt,
            size,
        }
        .into());
    }
    Ok(format!(
        "every byte of {scnt} READs of {size} B equals the first READ"
    ))
}

/// `run_iter_lat_send`: the client sends first; each side waits for the peer's message, then
/// sends its own.
pub(crate) fn send_lat(
    o: &Opts,
    r: &mut Res,
    size: u64,
    mut ring: RecvRing,
) -> Result<String, Error<'static>> {
    let client = o.client;
    let mut clock: Option<Clock> = None;
    let n = if o.duration.is_some() {
        u64::MAX
    } else {
        o.iters
    };
    let (mut scnt, mut rcnt, mut sampled) = (0u64, 0u64, 0u64);
    let mut tp: Vec<u64> = Vec::new();
    let mut chk = RecvCheck::new();
    let ended = |c: &Option<Clock>| c.is_some_and(|c| c.phase() == Phase::End);
    while (scnt < n || rcnt < n) && !ended(&clock) {
        if rcnt < n && !(scnt < 1 && client) {
            let Some(wc) = r.wait_recv(clock.as_ref())? else {
                break;
            };
            if rcnt == 0 {
                // set_on_first_rx_packet: the duration starts with the first message.
                if let Some((d, m)) = o.duration {
                    clock = Some(Clock::start(d, m));
                }
            }
            take_recv(o, r, size, &wc, &mut ring, &mut chk)?;
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
        if scnt < n && !ended(&clock) {
            if o.duration.is_none() {
                tp.push(now());
            }
            scnt += 1;
            let local = [r.mr.sge(0, size as u32)];
            let wr = SendWr {
                wr_id: scnt,
                op: SendOp::Send { imm: None },
                data: SendData::Sges(&local),
                flags: SendFlags::SIGNALED,
            };
            test_qp(&mut r.qp, &mut r.link)?
                .post_send(&[wr])
                .map_err(|e| Error::PostSend(scnt, e))?;
            let wc = r.wait_send()?;
            ok_wc(&wc, "SEND")?;
        }
    }
    match &clock {
        Some(cl) => print_lat_duration(size, sampled, cl, 2.0),
        None => print_lat(size, n, &tp, 2.0),
    }
    if chk.differ > 0 {
        return Err(Check::MessagesDiffer {
            differ: chk.differ,
            of: rcnt,
            size,
        }
        .into());
    }
    if size >= 8 && chk.landed == 0 && rcnt > 0 {
        return Err(Check::NothingLanded { size }.into());
    }
    Ok(format!(
        "{rcnt} messages of {size} B received, each equal to the first, {scnt} sent"
    ))
}
