//! Line assembly for the serial console's input (`console::read_line`, on the image target), apart from the
//! UART so that the host tests can drive it.
//!
//! A line that is still arriving when the caller's deadline passes is kept, not dropped: the
//! bytes received so far stay in the [`LineAssembler`] and begin the line the next call
//! returns. (The Linux-peer apps read the launcher's `tcp HEX` lines with a deadline each;
//! a line cut at a deadline and dropped would lose the peer's bytes, and the rest of the line,
//! read by the next call, would be taken for a line of its own.)

/// The longest line kept (the launcher's `tcp HEX` lines carry 200 bytes, 404 characters).
pub const LINE_MAX: usize = 1024;

/// Why no line was returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLineError {
    /// The deadline passed before the line ended. `pending` bytes of it had arrived; they are
    /// kept and start the line of the next call.
    Timeout { pending: usize },
    /// A line of `len` bytes did not fit the caller's buffer (or [`LINE_MAX`]); it was read
    /// to its end and dropped, so the next call starts at the next line.
    TooLong { len: usize },
}

/// The line being received, kept across calls.
pub struct LineAssembler {
    buf: [u8; LINE_MAX],
    n: usize,
    /// Bytes of the current line beyond [`LINE_MAX`], counted, not kept.
    over: usize,
}

impl Default for LineAssembler {
    fn default() -> Self {
        Self::new()
    }
}

impl LineAssembler {
    pub const fn new() -> LineAssembler {
        LineAssembler {
            buf: [0; LINE_MAX],
            n: 0,
            over: 0,
        }
    }

    /// Bytes of an unfinished line held.
    pub fn pending(&self) -> usize {
        self.n + self.over
    }

    /// Reads one line into `buf` (without its end: `\n` or `\r`; empty lines are skipped).
    /// `next` yields a received byte or None when none is waiting; `expired` says whether the
    /// deadline passed, asked only when no byte is waiting. Returns the line's length.
    pub fn read_line(
        &mut self,
        buf: &mut [u8],
        mut next: impl FnMut() -> Option<u8>,
        mut expired: impl FnMut() -> bool,
    ) -> Result<usize, ReadLineError> {
        loop {
            let Some(b) = next() else {
                if expired() {
                    return Err(ReadLineError::Timeout {
                        pending: self.pending(),
                    });
                }
                continue;
            };
            match b {
                b'\n' | b'\r' if self.pending() == 0 => {}
                b'\n' | b'\r' => {
                    let len = self.pending();
                    let fits = self.over == 0 && len <= buf.len();
                    if fits {
                        buf[..len].copy_from_slice(&self.buf[..len]);
                    }
                    self.n = 0;
                    self.over = 0;
                    return if fits {
                        Ok(len)
                    } else {
                        Err(ReadLineError::TooLong { len })
                    };
                }
                _ if self.n < LINE_MAX => {
                    self.buf[self.n] = b;
                    self.n += 1;
                }
                _ => self.over += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that arrive in bursts: `read_line` sees the deadline after each burst.
    fn feed<'a>(bytes: &'a [u8]) -> (impl FnMut() -> Option<u8> + 'a, impl FnMut() -> bool) {
        let mut it = bytes.iter().copied();
        (move || it.next(), || true)
    }

    #[test]
    fn a_line_cut_by_the_deadline_is_kept_for_the_next_call() {
        let mut a = LineAssembler::new();
        let mut buf = [0u8; 64];
        let (next, exp) = feed(b"tcp 61");
        assert_eq!(
            a.read_line(&mut buf, next, exp),
            Err(ReadLineError::Timeout { pending: 6 })
        );
        let (next, exp) = feed(b"62\ntcp 63\n");
        let n = a.read_line(&mut buf, next, exp).unwrap();
        // The old read_line dropped "tcp 61" at the deadline and returned "62" next.
        assert_eq!(&buf[..n], b"tcp 6162");
        let (next, exp) = feed(b"");
        assert_eq!(
            a.read_line(&mut buf, next, exp),
            Err(ReadLineError::Timeout { pending: 0 })
        );
    }

    #[test]
    fn the_rest_of_a_burst_is_read_by_the_next_call() {
        let mut a = LineAssembler::new();
        let mut buf = [0u8; 64];
        let mut it = b"\r\nab\r\ncd\n".iter().copied();
        let n = a.read_line(&mut buf, || it.next(), || true).unwrap();
        assert_eq!(&buf[..n], b"ab");
        let n = a.read_line(&mut buf, || it.next(), || true).unwrap();
        assert_eq!(&buf[..n], b"cd");
    }

    #[test]
    fn a_line_longer_than_the_buffer_is_a_typed_error_and_the_next_line_is_whole() {
        let mut a = LineAssembler::new();
        let mut buf = [0u8; 4];
        let mut it = b"tcp 6162\ntcp\n".iter().copied();
        assert_eq!(
            a.read_line(&mut buf, || it.next(), || true),
            Err(ReadLineError::TooLong { len: 8 })
        );
        let n = a.read_line(&mut buf, || it.next(), || true).unwrap();
        assert_eq!(&buf[..n], b"tcp");
        let long = [b'x'; LINE_MAX + 5];
        let mut it = long.iter().copied().chain(*b"\ny\n");
        let mut big = [0u8; 2 * LINE_MAX];
        assert_eq!(
            a.read_line(&mut big, || it.next(), || true),
            Err(ReadLineError::TooLong { len: LINE_MAX + 5 })
        );
        let n = a.read_line(&mut big, || it.next(), || true).unwrap();
        assert_eq!(&big[..n], b"y");
    }
}
