//! The AckReq bits of a run of MIDDLE packets handed to a loopback link at once.

use super::*;

/// Where packet `k` of `n` sits in its message.
pub(super) fn position(k: u32, n: u32) -> Position {
    match (k == 0, k + 1 == n) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    }
}

/// The AckReq bits (bit `i` for packet `i`) and the final no-AckReq count of a run of `n`
/// (<= 64) MIDDLE packets from `psn`, exactly as [`run_ack_bits_each`] computes them packet by
/// packet (the rule [`Requester::emit`] applies): AckReq when `ack_req_every` packets went
/// without one, or when the packet fills the window of `max_unacked_psns` PSNs.
pub(super) fn run_ack_bits(
    noack: u32,
    n: u32,
    psn: u32,
    comp_psn: u32,
    every: u32,
    max_unacked: u32,
) -> (u64, u32) {
    let used0 = psn_diff(psn, comp_psn);
    // The usual case in closed form: no PSN wrap in `used0 + 1 ..= used0 + n` (all of it
    // below 2^23 - 1, where `psn_diff(psn + i + 1, comp)` is `used0 + i + 1`), and the run
    // within the window (`used0 + n <= max_unacked`), so only packet `n - 1` can fill it.
    let fits = used0 >= 0
        && (used0 as i64 + n as i64) < (1i64 << 23) - 1
        && used0 as i64 + n as i64 <= max_unacked as i64
        && n <= 64;
    if !fits || n == 0 {
        return run_ack_bits_each(noack, n, psn, comp_psn, every, max_unacked);
    }
    let (mut acks, mut left) = (0u64, noack);
    if every <= 1 {
        // `noack + 1 >= every` at every packet.
        acks = u64::MAX >> (64 - n);
        left = 0;
    } else {
        // Packet `i` gets it when `noack + i + 1 - (packets up to the last one that got it)`
        // reaches `every`: first at `every - 1 - noack` (0 if `noack` already reached it),
        // then every `every` packets.
        let mut i = (every - 1).saturating_sub(noack);
        let mut last = None;
        while i < n {
            acks |= 1 << i;
            last = Some(i);
            i += every;
        }
        left = match last {
            Some(l) => n - 1 - l,
            None => left + n,
        };
    }
    if used0 as i64 + n as i64 >= max_unacked as i64 {
        acks |= 1 << (n - 1);
        left = 0;
    }
    (acks, left)
}

/// [`run_ack_bits`] packet by packet (the reference, and the path for runs near a PSN wrap).
pub(super) fn run_ack_bits_each(
    mut noack: u32,
    n: u32,
    psn: u32,
    comp_psn: u32,
    every: u32,
    max_unacked: u32,
) -> (u64, u32) {
    let mut acks = 0u64;
    for i in 0..n {
        noack += 1;
        let used_after = psn_diff(psn_add(psn, i + 1), comp_psn);
        if noack >= every || used_after >= max_unacked as i32 {
            acks |= 1 << i;
            noack = 0;
        }
    }
    (acks, noack)
}

#[cfg(test)]
mod run_ack_tests {
    use super::*;

    /// The closed form gives every packet of a run the AckReq the per-packet rule gives it.
    #[test]
    fn run_ack_bits_match_the_per_packet_rule() {
        let psns = [0u32, 5, 0xff_fff0, 0x7f_fff0, 0x80_0005];
        for every in [0u32, 1, 2, 3, 7, 66] {
            for max in [1u32, 4, 16, 128, (1 << 23) - 1, 1 << 23] {
                for noack in [0u32, 1, 2, 5, 65, 66, 70] {
                    for n in [0u32, 1, 2, 3, 14, 63, 64] {
                        for &psn in &psns {
                            for back in [0u32, 1, 3, 100, (1 << 23) - 20, 1 << 23, 0xff_fff0] {
                                let comp = psn.wrapping_sub(back) & crate::roce::PSN_MASK;
                                assert_eq!(
                                    run_ack_bits(noack, n, psn, comp, every, max),
                                    run_ack_bits_each(noack, n, psn, comp, every, max),
                                    "every {every} max {max} noack {noack} n {n} psn {psn:#x} comp {comp:#x}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
