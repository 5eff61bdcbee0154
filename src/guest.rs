use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::run::{decode_exit, Verdict};
use crate::LaunchError;

/// A running QEMU whose output is being collected.
pub(crate) struct Guest {
    child: Child,
    rx: mpsc::Receiver<String>,
    readers: Vec<std::thread::JoinHandle<()>>,
    start: Instant,
}

impl Guest {
    /// Waits for QEMU to exit (killing it at `deadline`) and decodes the verdict.
    pub(crate) fn finish(
        mut self,
        deadline: Instant,
    ) -> Result<(Verdict, String, Duration), LaunchError> {
        let status = loop {
            if let Some(st) = self
                .child
                .try_wait()
                .map_err(|e| LaunchError::Io(e.to_string()))?
            {
                break Some(st);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for r in self.readers {
            let _ = r.join();
        }
        let output: String = self.rx.try_iter().collect();
        let verdict = match status {
            Some(st) => decode_exit(st, &output),
            None => Verdict::TimedOut,
        };
        Ok((verdict, output, self.start.elapsed()))
    }
}

/// Starts QEMU with its serial output collected (and echoed with `tag`); no serial input.
pub(crate) fn spawn_guest(
    cmd: &mut Command,
    echo: bool,
    tag: &'static str,
) -> Result<Guest, LaunchError> {
    let start = Instant::now();
    let mut child: Child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LaunchError::Io(format!("starting QEMU: {e}")))?;
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let readers = vec![
        spawn_reader(stdout, tx.clone(), echo, false, tag),
        spawn_reader(stderr, tx, echo, true, tag),
    ];
    Ok(Guest {
        child,
        rx,
        readers,
        start,
    })
}

fn spawn_reader(
    src: impl Read + Send + 'static,
    tx: mpsc::Sender<String>,
    echo: bool,
    to_stderr: bool,
    tag: &'static str,
) -> std::thread::JoinHandle<()> {
    console_lines(src, move |text| {
        if echo {
            let shown = format!("{tag}{text}");
            if to_stderr {
                let _ = std::io::stderr().write_all(shown.as_bytes());
            } else {
                echo_stdout(&shown);
            }
        }
        let _ = tx.send(text);
    })
}

/// A thread reading `src` (a guest's console) to its end, handing each line to `each` with
/// its `\n` kept and any `\r` removed (invalid UTF-8 replaced).
pub(crate) fn console_lines(
    src: impl Read + Send + 'static,
    mut each: impl FnMut(String) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(src);
        let mut line = Vec::new();
        while reader
            .read_until(b'\n', &mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            each(String::from_utf8_lossy(&line).replace('\r', ""));
            line.clear();
        }
    })
}

/// Writes `shown` to stdout at once and flushes it (console echo; errors ignored).
pub(crate) fn echo_stdout(shown: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(shown.as_bytes());
    let _ = out.flush();
}
