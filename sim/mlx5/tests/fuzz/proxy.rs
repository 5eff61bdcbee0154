//! Target: the proxy socket.

use super::*;

/// What the probe (PCI_CFGREAD of dword 0) answers: device and vendor ID.
const PROBE: u64 = 0x1017_15b3;

pub(super) struct ProxyFuzz {
    conns: mpsc::Sender<UnixStream>,
    server: Option<std::thread::JoinHandle<Result<(), String>>>,
    client: Option<UnixStream>,
    ram: GuardedRam,
    files: Vec<File>,
}

impl ProxyFuzz {
    pub(super) fn new() -> ProxyFuzz {
        let (tx, rx) = mpsc::channel::<UnixStream>();
        let server = std::thread::Builder::new()
            .name("fuzz-proxy-server".into())
            .spawn(move || {
                let mut opts = Mlx5Options {
                    exec: ExecMode::Inline,
                    ..Default::default()
                };
                opts.init.init_delay = Duration::ZERO;
                let mut server = ProxyServer::new(Mlx5Function::with_options(opts));
                while let Ok(sock) = rx.recv() {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let _ = server.serve(&sock);
                    }));
                    if let Err(p) = r {
                        return Err(format!("server panicked: {}", panic_text(&p)));
                    }
                }
                Ok(())
            })
            .expect("spawn proxy server");
        ProxyFuzz {
            conns: tx,
            server: Some(server),
            client: None,
            ram: GuardedRam::new(1 << 20),
            files: Vec::new(),
        }
    }

    fn connect(&mut self) -> Result<&UnixStream, String> {
        if self.client.is_none() {
            let (a, b) = UnixStream::pair().map_err(|e| e.to_string())?;
            a.set_read_timeout(Some(STEP_DEADLINE)).unwrap();
            if self.conns.send(b).is_err() {
                return Err(self.server_gone());
            }
            self.client = Some(a);
        }
        Ok(self.client.as_ref().unwrap())
    }

    fn server_gone(&mut self) -> String {
        match self.server.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => "server thread died".into(),
            _ => "server gone".into(),
        }
    }

    fn random_fd(&mut self, rng: &mut Rng) -> RawFd {
        let f = match rng.below(4) {
            0 => {
                let name = std::ffi::CString::new("fuzz").unwrap();
                // SAFETY: valid name; result checked.
                let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: fresh descriptor.
                let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                f.set_len(rng.below(2 << 20)).unwrap();
                f
            }
            1 => {
                let flags = if rng.chance(500) {
                    0
                } else {
                    libc::EFD_NONBLOCK
                };
                // SAFETY: plain syscall; result checked.
                let fd = unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: fresh descriptor.
                let mut f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                if rng.chance(300) {
                    let _ = f.write_all(&(u64::MAX - 1).to_ne_bytes()); // full counter
                }
                f
            }
            2 => File::from(OwnedFd::from(self.ram.file.try_clone().unwrap())),
            _ => File::open("/dev/null").unwrap(),
        };
        let fd = f.as_raw_fd();
        self.files.push(f);
        fd
    }

    fn message(&mut self, rng: &mut Rng) -> (Vec<u8>, Vec<RawFd>) {
        let cmd: i32 = if rng.chance(900) {
            rng.below(8) as i32
        } else {
            rng.u32() as i32
        };
        let natural = match cmd {
            0 => 192,
            2 | 3 => 12,
            4 | 5 => 24,
            _ => 0,
        };
        let size: u64 = match rng.below(20) {
            0 => rng.interesting(),
            1 => rng.below(256),
            _ => natural,
        };
        let mut payload = vec![0u8; (size.min(256)) as usize];
        match cmd {
            0 => {
                for i in 0..8 {
                    let gpa = if rng.chance(600) {
                        BASE + rng.below(4) * (1 << 20)
                    } else {
                        rng.interesting()
                    };
                    let sz = if rng.chance(600) {
                        1u64 << rng.range(12, 21)
                    } else {
                        rng.interesting()
                    };
                    let off = if rng.chance(600) {
                        GUARD
                    } else {
                        rng.interesting()
                    };
                    for (k, v) in [(0, gpa), (64, sz), (128, off)] {
                        if k + i * 8 + 8 <= payload.len() {
                            payload[k + i * 8..k + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            4 | 5 => {
                let addr = if rng.chance(700) {
                    0xe000_0000u64 + rng.below(32 << 20)
                } else {
                    rng.interesting()
                };
                let val = rng.interesting();
                let sz = if rng.chance(850) {
                    rng.pick(&[1u32, 2, 4, 8])
                } else {
                    rng.u32()
                };
                let fields: [&[u8]; 3] =
                    [&addr.to_le_bytes(), &val.to_le_bytes(), &sz.to_le_bytes()];
                let mut at = 0;
                for f in fields {
                    let n = f.len().min(payload.len().saturating_sub(at));
                    if n > 0 {
                        payload[at..at + n].copy_from_slice(&f[..n]);
                    }
                    at += f.len();
                }
                if payload.len() > 20 {
                    payload[20] = rng.below(2) as u8;
                }
            }
            2 | 3 => {
                let addr = if rng.chance(800) {
                    rng.below(0x100) as u32
                } else {
                    rng.u32()
                };
                let val = if rng.chance(500) {
                    0xe000_0000u32
                } else {
                    rng.u32()
                };
                let len = if rng.chance(800) {
                    rng.pick(&[1i32, 2, 4])
                } else {
                    rng.u32() as i32
                };
                let mut b = Vec::new();
                b.extend_from_slice(&addr.to_le_bytes());
                b.extend_from_slice(&val.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                let n = b.len().min(payload.len());
                payload[..n].copy_from_slice(&b[..n]);
            }
            _ => rng.fill(&mut payload),
        }
        let nfds = match cmd {
            0 => rng.range(0, 3),
            6 => {
                if rng.chance(850) {
                    2
                } else {
                    rng.range(0, 3)
                }
            }
            _ => {
                if rng.chance(50) {
                    rng.range(1, 10)
                } else {
                    0
                }
            }
        };
        let fds = (0..nfds).map(|_| self.random_fd(rng)).collect();
        let mut msg = Vec::with_capacity(16 + payload.len());
        msg.extend_from_slice(&cmd.to_le_bytes());
        msg.extend_from_slice(&[0u8; 4]);
        msg.extend_from_slice(&size.to_le_bytes());
        msg.extend_from_slice(&payload);
        (msg, fds)
    }
}

fn proxy_msg(cmd: i32, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + payload.len());
    m.extend_from_slice(&cmd.to_le_bytes());
    m.extend_from_slice(&[0u8; 4]);
    m.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    m.extend_from_slice(payload);
    m
}

fn cfg_write_msg(addr: u32, val: u32, len: i32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend_from_slice(&val.to_le_bytes());
    p.extend_from_slice(&len.to_le_bytes());
    proxy_msg(2, &p)
}

fn bar_write_msg(addr: u64, val: u64, size: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&addr.to_le_bytes());
    p.extend_from_slice(&val.to_le_bytes());
    p.extend_from_slice(&size.to_le_bytes());
    p.extend_from_slice(&[1, 0, 0, 0]);
    proxy_msg(4, &p)
}

const PROXY_BAR0: u64 = 0xe000_0000;

impl ProxyFuzz {
    /// The SIGBUS attack of issue 7, with random variations: guest RAM shared, the command
    /// queue pointed into it, the file truncated (or not), the doorbell rung with random
    /// entries in place. The server must answer or drop the client, never die.
    fn attack(&mut self, rng: &mut Rng) -> Result<(), String> {
        self.client = None; // a fresh connection: a reset function
        self.ram = GuardedRam::new(1 << 20);
        let sock = self.connect()?.try_clone().map_err(|e| e.to_string())?;
        let mut sys = [0u8; 192];
        sys[0..8].copy_from_slice(&BASE.to_le_bytes());
        sys[64..72].copy_from_slice(&self.ram.size.to_le_bytes());
        sys[128..136].copy_from_slice(&GUARD.to_le_bytes());
        let fd = self.ram.file.as_raw_fd();
        let mut ok = send_with_fds(&sock, &proxy_msg(0, &sys), &[fd]);
        let cmdq = BASE + (rng.below(self.ram.size) & !0xfff);
        let entries = rng.bytes(4096);
        let _ = self.ram.file.write_all_at(&entries, GUARD + (cmdq - BASE));
        let mut msgs = vec![
            cfg_write_msg(0x10, PROXY_BAR0 as u32, 4),
            cfg_write_msg(0x04, 6, 2),
            bar_write_msg(
                PROXY_BAR0 + 0x10,
                u64::from(((cmdq >> 32) as u32).to_be()),
                4,
            ),
            bar_write_msg(PROXY_BAR0 + 0x14, u64::from((cmdq as u32).to_be()), 4),
        ];
        let truncate = rng.chance(700);
        for m in msgs.drain(..) {
            ok = ok && send_with_fds(&sock, &m, &[]);
        }
        if truncate {
            let _ = self.ram.file.set_len(GUARD + rng.below(cmdq - BASE + 64));
        }
        let mask = if rng.chance(800) {
            1u32 << rng.below(32)
        } else {
            rng.u32()
        };
        ok = ok
            && send_with_fds(
                &sock,
                &bar_write_msg(PROXY_BAR0 + 0x18, u64::from(mask.to_be()), 4),
                &[],
            );
        ok = ok
            && send_with_fds(
                &sock,
                &proxy_msg(3, &[0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0]),
                &[],
            );
        while ok {
            let mut hdr = [0u8; 24];
            match (&sock).read_exact(&mut hdr) {
                Ok(()) => {
                    if u64::from_le_bytes(hdr[16..24].try_into().unwrap()) == PROBE {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(format!("attack: no answer within {STEP_DEADLINE:?}"));
                }
                Err(_) => ok = false,
            }
        }
        self.client = None;
        self.ram = GuardedRam::new(1 << 20);
        if self.server.as_ref().is_some_and(|h| h.is_finished()) {
            return Err(self.server_gone());
        }
        Ok(())
    }
}

/// sendmsg with SCM_RIGHTS; false if the peer is gone.
fn send_with_fds(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> bool {
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut _,
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 16];
    let fds = &fds[..fds.len().min(12)];
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: msghdr is plain data (all-zero valid); iov points at a live slice that sendmsg
    // only reads; cbuf (128 bytes) holds CMSG_SPACE(48) and is filled through the libc macros.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(fd_bytes as u32) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    n >= 0
}

impl Epoch for ProxyFuzz {
    fn step(&mut self, rng: &mut Rng) -> Result<(), String> {
        if rng.chance(30) {
            return self.attack(rng);
        }
        let (mut msg, fds) = self.message(rng);
        let truncate_ram = rng.chance(30);
        // A message cut short, then the write side closed (a peer that dies mid-message; with
        // the write side open the server would rightly wait for the rest).
        let cut = rng.chance(20);
        if cut {
            msg.truncate(rng.below(msg.len() as u64) as usize);
        }
        let sock = self.connect()?.try_clone().map_err(|e| e.to_string())?;
        let mut alive = send_with_fds(&sock, &msg, &fds);
        self.files.clear(); // our copies of the descriptors
        if cut {
            let _ = sock.shutdown(std::net::Shutdown::Write);
            let mut rest = Vec::new();
            let _ = (&sock).read_to_end(&mut rest); // EOF once the server drops it
            self.client = None;
            return Ok(());
        }
        if truncate_ram {
            let _ = self.ram.file.set_len(GUARD + rng.below(1 << 20));
        }
        if alive {
            // A probe whose answer is known: CFGREAD of vendor and device ID.
            let mut p = Vec::new();
            p.extend_from_slice(&3i32.to_le_bytes());
            p.extend_from_slice(&[0u8; 4]);
            p.extend_from_slice(&12u64.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&4i32.to_le_bytes());
            alive = send_with_fds(&sock, &p, &[]);
        }
        // Read replies until the probe's (or EOF: the server dropped the connection).
        while alive {
            let mut hdr = [0u8; 24];
            match (&sock).read_exact(&mut hdr) {
                Ok(()) => {
                    let v = u64::from_le_bytes(hdr[16..24].try_into().unwrap());
                    if v == PROBE {
                        break;
                    }
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err(format!(
                        "server did not answer within {STEP_DEADLINE:?} (message {:?})",
                        &msg[..msg.len().min(40)]
                    ));
                }
                Err(_) => alive = false,
            }
        }
        if !alive || rng.chance(30) {
            self.client = None;
            if truncate_ram || rng.chance(100) {
                self.ram = GuardedRam::new(1 << 20);
            }
        }
        if self.server.as_ref().is_some_and(|h| h.is_finished()) {
            return Err(self.server_gone());
        }
        Ok(())
    }
    /// No guard check: the messages map any part of the file, guards included, as guest RAM.
    fn check(&mut self) -> Result<(), String> {
        Ok(())
    }
}

impl Drop for ProxyFuzz {
    fn drop(&mut self) {
        self.client = None;
        let (tx, _) = mpsc::channel();
        self.conns = tx; // closes the channel: the server thread ends
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
    }
}
