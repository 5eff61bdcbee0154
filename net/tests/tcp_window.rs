//! A TCP peer that sends past the window the stack advertised, driven frame by frame by the
//! test (raw frames on one end of the loopback link, the stack on the other). smoltcp 0.12
//! took such bytes whenever its buffer had room (smoltcp PR #1079, "tcp: Reject bytes outside
//! the receive window"), and its next segment then panicked in `Socket::last_scaled_window`
//! ("attempt to subtract sequence numbers with underflow", smoltcp issue #1048): what killed
//! a thread of `cargo bench -p net --bench tcp`. Also: a closure of `both` that panics ends
//! the run instead of leaving the other thread polling for ever.

mod common;

use std::time::{Duration, Instant};

use common::*;
use net::loopback::{self, MemNic};
use net::{Nic, Stack, StackConfig};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

/// The peer's port, and the stack's.
const PEER_PORT: u16 = 40_000;
const PORT: u16 = 7;
/// The stack's receive buffer: 64 KiB, so its window is scaled by 1 (smoltcp
/// `Socket::new` takes the smallest shift that fits the buffer in 16 bits).
const RX_BUFFER: usize = 64 * 1024;

/// The raw peer on end A of the link: sends TCP segments from IP_A and reads the stack's.
struct Peer {
    nic: MemNic,
    seq: TcpSeqNumber,
}

impl Peer {
    /// Sends a segment with `control`, acknowledging `ack`, carrying `payload` from `seq`.
    fn send(&mut self, control: TcpControl, ack: Option<TcpSeqNumber>, payload: &[u8]) {
        let tcp = TcpRepr {
            src_port: PEER_PORT,
            dst_port: PORT,
            control,
            seq_number: self.seq,
            ack_number: ack,
            window_len: 65535,
            // Window scaling on (RFC 7323: both SYNs carry the option), our own shift 0.
            window_scale: (control == TcpControl::Syn).then_some(0),
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: IP_A,
            dst_addr: IP_B,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress(MAC_A),
            dst_addr: EthernetAddress(MAC_B),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut frame = vec![0; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
        let caps = ChecksumCapabilities::default();
        let mut f = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.emit(&mut f);
        let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
        ip.emit(&mut p, &caps);
        let (src, dst) = (IpAddress::Ipv4(IP_A), IpAddress::Ipv4(IP_B));
        tcp.emit(
            &mut TcpPacket::new_unchecked(p.payload_mut()),
            &src,
            &dst,
            &caps,
        );
        self.nic.send(&frame).expect("the link takes the frame");
        self.seq += payload.len() + (control == TcpControl::Syn) as usize;
    }

    /// The stack's TCP segments that reached us: (seq, ack, window, SYN).
    fn segments(&mut self) -> Vec<(TcpSeqNumber, Option<TcpSeqNumber>, u16, bool)> {
        let caps = ChecksumCapabilities::default();
        let mut out = Vec::new();
        while let Ok(Some(frame)) = self.nic.rx_frame() {
            let f = EthernetFrame::new_unchecked(frame);
            if f.ethertype() == EthernetProtocol::Ipv4 {
                let p = Ipv4Packet::new_unchecked(f.payload());
                let t = TcpPacket::new_unchecked(p.payload());
                let (src, dst) = (IpAddress::Ipv4(IP_B), IpAddress::Ipv4(IP_A));
                if let Ok(r) = TcpRepr::parse(&t, &src, &dst, &caps) {
                    let syn = r.control == TcpControl::Syn;
                    out.push((r.seq_number, r.ack_number, r.window_len, syn));
                }
            }
            let Ok(()) = self.nic.rx_done();
        }
        out
    }
}

/// The stack's last acknowledgement and the right edge of its window (the window scaled by
/// `shift`), polling the stack until it acknowledged `upto` or `deadline` passes.
fn acked<C: net::Clock>(
    b: &mut Stack<MemNic, C>,
    peer: &mut Peer,
    upto: TcpSeqNumber,
    last: &mut (TcpSeqNumber, TcpSeqNumber),
    deadline: Instant,
) {
    while Instant::now() < deadline {
        b.poll();
        for (_, ack, win, _) in peer.segments() {
            if let Some(ack) = ack {
                *last = (ack, ack + ((win as usize) << 1));
            }
        }
        if last.0 == upto {
            return;
        }
        std::thread::yield_now();
    }
    panic!("the stack did not acknowledge {upto} (last {last:?})");
}

/// The peer fills the stack's buffer within the windows it advertises until one byte of room
/// is left, which a window scaled by 1 advertises as 0; the byte it then sends past that
/// window is not taken (and the stack does not panic), the data before it all is.
#[test]
fn a_byte_past_the_advertised_window_is_not_taken() {
    let (na, nb, _link) = loopback::pair(MAC_A, MAC_B, MTU);
    let clock = StdClock(Instant::now());
    let cfg = StackConfig {
        tcp_rx_buffer: RX_BUFFER,
        ..StackConfig::new(IP_B, 24)
    };
    let mut b = Stack::new(nb, clock, &cfg).unwrap();
    b.add_neighbour(IP_A, MAC_A);
    let mut l = b.tcp_listen(PORT).unwrap();
    let mut peer = Peer {
        nic: na,
        seq: TcpSeqNumber(1000),
    };
    let deadline = Instant::now() + Duration::from_secs(30);

    peer.send(TcpControl::Syn, None, &[]);
    let mut syn_ack = None;
    while syn_ack.is_none() && Instant::now() < deadline {
        b.poll();
        syn_ack = peer.segments().into_iter().find(|s| s.3);
    }
    let (isn, _, _, _) = syn_ack.expect("SYN-ACK");
    let ours = isn + 1;
    peer.send(TcpControl::None, Some(ours), &[]);
    let c = b.tcp_accept(&mut l, after(&b, 1000)).unwrap();

    // Within the advertised windows: all but one byte of the buffer.
    let data = pattern(RX_BUFFER, 3);
    let mut last = (peer.seq, peer.seq + RX_BUFFER);
    let mut sent = 0;
    while sent < RX_BUFFER - 1 {
        let room = last.1 - peer.seq;
        let n = room.min(1460).min(RX_BUFFER - 1 - sent);
        assert!(n > 0, "window closed after {sent} bytes: {last:?}");
        peer.send(TcpControl::Psh, Some(ours), &data[sent..sent + n]);
        sent += n;
        let upto = peer.seq;
        acked(&mut b, &mut peer, upto, &mut last, deadline);
    }
    assert_eq!(
        last.1, last.0,
        "one byte of room is advertised as a zero window"
    );

    // One byte past it.
    peer.send(TcpControl::Psh, Some(ours), &data[sent..sent + 1]);
    for _ in 0..10 {
        b.poll();
    }
    let mut got = vec![0; RX_BUFFER];
    let n = b.tcp_recv(&c, &mut got, after(&b, 1000)).unwrap();
    assert_eq!(
        n,
        RX_BUFFER - 1,
        "only the bytes inside the window are taken"
    );
    assert!(got[..n] == data[..n]);
}

/// A closure of `both` that panics ends the run with its panic; the other thread stops
/// polling. Bounded: the run happens in a thread this test waits for at most 30 s.
#[test]
fn a_panic_in_one_thread_of_both_ends_the_run() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut a, mut b, _link) = stacks();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            both(&mut a, &mut b, |_| panic!("on purpose"), |_| ())
        }));
        let _ = tx.send(r.is_err());
    });
    let panicked = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("both() returned");
    assert!(panicked, "the panic reached the caller");
}
