//! The unikernel of a `--peer linux` run ([`Serving`]): booted once with its emulated HCA
//! listening on the wire, which Linux guests join one after the other (the HCA's link is
//! QEMU's `server=on`: one peer at a time, listening again once that peer is gone).

use std::fs;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::run::{linux_side, unikernel_cmdline, PeerRun};
use super::{fmt_mac, lines, Running, UNIKERNEL_MAC};
use crate::linux_guest::{cache_dir, prepare_peer_image, skip, PeerImage, Skip};

/// The unikernel (KVM) with the emulated HCA on a fresh wire socket, and the Linux image its
/// peers boot. Killed when dropped.
pub struct Serving {
    /// The unikernel's app (from [`unikernel_cmdline`]).
    pub app: String,
    child: Child,
    prepared: crate::run::Prepared,
    rx: mpsc::Receiver<String>,
    readers: Vec<JoinHandle<()>>,
    seen: String,
    wire: PathBuf,
    image: PeerImage,
    echo: bool,
}

impl Serving {
    /// Boots the unikernel of `run` (its app and command line as [`unikernel_cmdline`] makes
    /// them) and waits until its HCA listens on the wire. Linux's image is the NVMe one when
    /// `run`'s command needs it ([`crate::linux_guest::nvme::uses_nvme`]), else the peer image.
    pub fn start(run: &PeerRun) -> Result<Serving, Skip> {
        let (app, cmdline) = unikernel_cmdline(run)?;
        let image = {
            let _step = crate::progress::Step::start("preparing the Linux peer image");
            if crate::linux_guest::nvme::uses_nvme(&run.cmd) {
                crate::linux_guest::prepare_nvme_image()?
            } else {
                prepare_peer_image()?
            }
        };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let work = cache_dir()
            .join("runs")
            .join(format!("peer-{}-{n}", std::process::id()));
        fs::create_dir_all(&work).map_err(|e| skip(format!("{}: {e}", work.display())))?;
        let wire = work.join("wire.sock");
        let _ = fs::remove_file(&wire);

        // The unikernel: its app, role and identity; its HCA listens on the link.
        let mut hca_args = run.unikernel.hca_args.clone();
        hca_args.extend([
            "--wire-listen".into(),
            format!("unix:{}", wire.display()),
            "--mac".into(),
            fmt_mac(&UNIKERNEL_MAC),
        ]);
        let opts = crate::Options {
            app: Some(app.clone()),
            cmdline,
            hca: Some(crate::Hca::Sim),
            hca_args,
            memory: if run.unikernel.memory == crate::Options::default().memory {
                "1G".into()
            } else {
                run.unikernel.memory.clone()
            },
            timeout: run.timeout,
            ..run.unikernel.clone()
        };
        let mut prepared =
            crate::prepare(&opts).map_err(|e| skip(format!("the unikernel: {e}")))?;
        let echo = run.unikernel.echo;
        // The unikernel first: its HCA's listener must exist before Linux's QEMU connects.
        let mut child = prepared
            .cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| skip(format!("starting QEMU for the unikernel: {e}")))?;
        let (tx, rx) = mpsc::channel::<String>();
        let readers = vec![
            lines(
                child.stdout.take().expect("piped"),
                tx.clone(),
                "unikernel| ",
                echo,
            ),
            lines(child.stderr.take().expect("piped"), tx, "unikernel| ", echo),
        ];
        let mut s = Serving {
            app,
            child,
            prepared,
            rx,
            readers,
            seen: String::new(),
            wire,
            image,
            echo,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !s.wire.exists() {
            if Instant::now() > deadline || s.try_wait().is_some() {
                let wire = s.wire.display().to_string();
                let out = s.finish();
                return Err(skip(format!(
                    "the emulated HCA never listened on {wire} (an mlx5-sim without RoCEv2 frames?):\n{out}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    /// Boots a Linux guest on the wire that runs `run`'s command ([`linux_side`]); its console
    /// lines are tagged `tag` when echoed.
    pub fn join(&self, run: &PeerRun, tag: &'static str) -> Result<Running, Skip> {
        linux_side(run, self.wire.clone()).spawn(&self.image, tag, self.echo)
    }

    /// The unikernel's exit status once its QEMU has ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Drains the console lines seen so far; the unikernel's console up to now.
    pub fn console(&mut self) -> &str {
        self.seen.extend(self.rx.try_iter());
        &self.seen
    }

    /// Stops the unikernel's QEMU now (if it still runs).
    pub fn kill(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Stops the unikernel (if it still runs) and its HCA; its whole console.
    pub fn finish(mut self) -> String {
        self.halt();
        std::mem::take(&mut self.seen)
    }

    fn halt(&mut self) {
        self.kill();
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        self.prepared.cleanup();
        self.seen.extend(self.rx.try_iter());
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.halt();
    }
}
