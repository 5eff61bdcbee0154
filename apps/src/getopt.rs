//! POSIX `getopt(3)` over the tool words of a cmdline, for the apps that take the options of
//! rdma-core's librdmacm examples (`rping`, `ucmatose`, `udaddy`), which parse theirs with
//! `getopt(argc, argv, "a:I:Pp:C:S:t:scvVdq")` and the like: single-letter options, grouped
//! (`-vV`), a value attached (`-C10`) or in the next word (`-C 10`), `--` ending the options.

use alloc::vec::Vec;

/// One option of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opt<'a> {
    /// A letter of the spec, with its value when the spec gives it one (`x:`).
    Flag(char, Option<&'a str>),
    /// A word that is not an option (getopt leaves these in argv; the tools take none).
    Operand(&'a str),
}

/// Why the command line does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetoptError {
    /// A letter the spec does not name (getopt's `?`).
    Unknown(char),
    /// A letter that takes a value, at the end of the line.
    NeedsValue(char),
}

impl core::fmt::Display for GetoptError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GetoptError::Unknown(c) => write!(f, "unknown option -{c}"),
            GetoptError::NeedsValue(c) => write!(f, "-{c} needs a value"),
        }
    }
}

/// Why a tool's options were refused: the line itself, a value, or an option not supported here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptError<'a> {
    /// The line does not parse.
    Getopt(GetoptError),
    /// An option's value is not what it takes.
    Value {
        /// The option.
        opt: char,
        /// Its value.
        value: &'a str,
        /// What it takes.
        want: &'static str,
    },
    /// An option (with its value, if any) this side does not support: why.
    Unsupported {
        /// The option.
        opt: char,
        /// Its value ("" if none).
        value: &'a str,
        /// Why, or "not supported".
        why: &'static str,
    },
    /// Neither the options nor the launcher's `role=` say which side this is.
    NoRole,
    /// The launcher's `role=` is neither `server` nor `client`.
    Role(crate::oob::RoleError<'a>),
}

impl core::fmt::Display for OptError<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OptError::Getopt(e) => write!(f, "{e}"),
            OptError::Value { opt, value, want } => write!(f, "-{opt} {value}: not {want}"),
            OptError::Unsupported { opt, value, why } => {
                let sep = if value.is_empty() { "" } else { " " };
                write!(f, "-{opt}{sep}{value}: {why}")
            }
            OptError::NoRole => write!(f, "need -s or -c (or role=)"),
            OptError::Role(e) => write!(f, "{e}"),
        }
    }
}

/// The options of `args` by `spec` (getopt's optstring: a letter, `:` after it when it takes a
/// value), in order.
pub fn getopt<'a>(args: &[&'a str], spec: &str) -> Result<Vec<Opt<'a>>, GetoptError> {
    let takes = |c: char| -> Option<bool> {
        let i = spec.find(c).filter(|_| c != ':')?;
        Some(spec[i + c.len_utf8()..].starts_with(':'))
    };
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(&w) = it.next() {
        if w == "--" {
            out.extend(it.map(|w| Opt::Operand(w)));
            break;
        }
        let Some(letters) = w.strip_prefix('-').filter(|l| !l.is_empty()) else {
            out.push(Opt::Operand(w));
            continue;
        };
        for (i, c) in letters.char_indices() {
            match takes(c) {
                None => return Err(GetoptError::Unknown(c)),
                Some(false) => out.push(Opt::Flag(c, None)),
                Some(true) => {
                    let rest = &letters[i + c.len_utf8()..];
                    let v = if rest.is_empty() {
                        *it.next().ok_or(GetoptError::NeedsValue(c))?
                    } else {
                        rest
                    };
                    out.push(Opt::Flag(c, Some(v)));
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// `args` without the option `-letter` where its value is missing: the launcher's Linux-peer
/// runs hand the app the Linux tool's words with the `$SERVER` operand taken out
/// (`rping -c -a $SERVER` reaches the unikernel server as `rping -c -a`), so the option that
/// named the server is left without its value.
pub fn drop_valueless<'a>(args: &[&'a str], letter: char) -> Vec<&'a str> {
    let mut flag = [0u8; 4];
    let flag = &*letter.encode_utf8(&mut flag);
    let mut out = Vec::with_capacity(args.len());
    for (i, &w) in args.iter().enumerate() {
        let bare = w.strip_prefix('-') == Some(flag);
        let next = args.get(i + 1);
        if bare && next.is_none_or(|n| n.starts_with('-')) {
            continue;
        }
        out.push(w);
    }
    out
}

/// A count option's value: a decimal number (the tools' `atoi`, without its silent zero for
/// garbage).
pub fn count(v: &str) -> Option<u32> {
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_group_take_values_both_ways_and_unknown_ones_are_named() {
        let args = ["-s", "-vV", "-C10", "-S", "100", "-a", "10.0.0.1", "x"];
        assert_eq!(
            getopt(&args, "a:I:Pp:C:S:t:scvVdq"),
            Ok(alloc::vec![
                Opt::Flag('s', None),
                Opt::Flag('v', None),
                Opt::Flag('V', None),
                Opt::Flag('C', Some("10")),
                Opt::Flag('S', Some("100")),
                Opt::Flag('a', Some("10.0.0.1")),
                Opt::Operand("x"),
            ])
        );
        assert_eq!(getopt(&["-vx"], "a:v"), Err(GetoptError::Unknown('x')));
        assert_eq!(getopt(&["-a"], "a:v"), Err(GetoptError::NeedsValue('a')));
        assert_eq!(getopt(&["-:"], "a:v"), Err(GetoptError::Unknown(':')));
        assert_eq!(
            getopt(&["-v", "--", "-a"], "a:v"),
            Ok(alloc::vec![Opt::Flag('v', None), Opt::Operand("-a")])
        );
        assert_eq!(
            drop_valueless(&["-c", "-a", "-v", "-C", "10", "-a"], 'a'),
            alloc::vec!["-c", "-v", "-C", "10"]
        );
        assert_eq!(
            drop_valueless(&["-a", "10.0.0.1", "-v"], 'a'),
            alloc::vec!["-a", "10.0.0.1", "-v"]
        );
        assert_eq!(count("12"), Some(12));
        assert_eq!(count("x"), None);
    }
}
