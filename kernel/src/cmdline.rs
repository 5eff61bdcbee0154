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
}
