//! The kernel command line: space-separated `key=value` or bare `flag` words.

#[derive(Clone, Copy, Debug)]
pub struct Cmdline<'a>(pub &'a str);

impl<'a> Cmdline<'a> {
    /// The value of the last `key=value` word (later words override earlier ones).
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.0
            .split_ascii_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
            .next_back()
    }

    /// Whether a bare `flag` word is present.
    pub fn flag(&self, flag: &str) -> bool {
        self.0.split_ascii_whitespace().any(|w| w == flag)
    }

    /// The node's IPv4 identity, `ip=A.B.C.D/LEN` (the prefix length optional, 32 when
    /// absent): `Ok(None)` without `ip=`, an error for a value that is not one.
    pub fn ipv4(&self) -> Result<Option<Ipv4Identity>, CmdlineError<'a>> {
        let Some(v) = self.get("ip") else {
            return Ok(None);
        };
        let bad = CmdlineError::BadValue {
            key: "ip",
            value: v,
        };
        let (addr, len) = match v.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad)?),
            None => (v, 32),
        };
        if len > 32 {
            return Err(bad);
        }
        let addr: core::net::Ipv4Addr = addr.parse().map_err(|_| bad)?;
        Ok(Some(Ipv4Identity {
            addr: addr.octets(),
            prefix_len: len,
        }))
    }

    /// The node's MAC, `mac=aa:bb:cc:dd:ee:ff`: `Ok(None)` without `mac=`.
    pub fn mac(&self) -> Result<Option<[u8; 6]>, CmdlineError<'a>> {
        let Some(v) = self.get("mac") else {
            return Ok(None);
        };
        parse_mac(v).map(Some).ok_or(CmdlineError::BadValue {
            key: "mac",
            value: v,
        })
    }

    /// The `log=` level, `info` when absent or unknown.
    pub fn log_level(&self) -> log::LevelFilter {
        match self.get("log") {
            Some("off") => log::LevelFilter::Off,
            Some("error") => log::LevelFilter::Error,
            Some("warn") => log::LevelFilter::Warn,
            Some("debug") => log::LevelFilter::Debug,
            Some("trace") => log::LevelFilter::Trace,
            _ => log::LevelFilter::Info,
        }
    }
}

/// A MAC address written `aa:bb:cc:dd:ee:ff` (two hex digits each), None if `v` is not one.
pub fn parse_mac(v: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = v.split(':');
    for b in out.iter_mut() {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// An IPv4 address with its prefix length (`ip=10.0.0.2/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Identity {
    /// The address.
    pub addr: [u8; 4],
    /// The prefix length (0..=32).
    pub prefix_len: u8,
}

/// A cmdline value that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdlineError<'a> {
    /// `key=value` with a value of the wrong form.
    BadValue {
        /// The key.
        key: &'static str,
        /// The value given.
        value: &'a str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_flags_and_levels() {
        let c = Cmdline("log=debug  pages=2m verbose log=trace x=");
        assert_eq!(c.get("pages"), Some("2m"));
        assert_eq!(c.get("log"), Some("trace"));
        assert_eq!(c.get("x"), Some(""));
        assert_eq!(c.get("missing"), None);
        assert!(c.flag("verbose"));
        assert!(!c.flag("pages"));
        assert_eq!(c.log_level(), log::LevelFilter::Trace);
        assert_eq!(Cmdline("").log_level(), log::LevelFilter::Info);
    }

    #[test]
    fn parses_the_ip_identity_and_mac() {
        let c = Cmdline("role=server ip=10.0.0.2/24 mac=02:00:00:00:00:0a");
        assert_eq!(
            c.ipv4(),
            Ok(Some(Ipv4Identity {
                addr: [10, 0, 0, 2],
                prefix_len: 24
            }))
        );
        assert_eq!(c.mac(), Ok(Some([2, 0, 0, 0, 0, 10])));
        assert_eq!(
            Cmdline("ip=192.168.1.9")
                .ipv4()
                .unwrap()
                .unwrap()
                .prefix_len,
            32
        );
        assert_eq!(Cmdline("").ipv4(), Ok(None));
        assert_eq!(Cmdline("").mac(), Ok(None));
        for bad in ["ip=10.0.0/24", "ip=10.0.0.2/33", "ip=10.0.0.2/x", "ip=host"] {
            assert!(Cmdline(bad).ipv4().is_err(), "{bad}");
        }
        for bad in [
            "mac=02:00:00:00:00",
            "mac=02:00:00:00:00:0a:0b",
            "mac=2:0:0:0:0:a",
        ] {
            assert!(Cmdline(bad).mac().is_err(), "{bad}");
        }
    }
}
