//! A seeded, deterministic wire fault injector.
//!
//! # Spec grammar
//!
//! ```text
//! spec   = "" | "none" | item *( "," item )
//! item   = "drop=" rate | "dup=" rate | "corrupt=" rate
//!        | "reorder=" rate [ ":window=" n ]
//!        | "seed=" u64
//! rate   = a decimal number in [0, 1]       (probability per frame)
//! n      = an integer in 1..=64             (default 4)
//! u64    = decimal or 0x-prefixed hex       (default 0)
//! ```
//!
//! Example: `drop=0.01,dup=0.01,reorder=0.01:window=4,corrupt=0.001,seed=7`. Each key at most
//! once; whitespace around items is ignored. Parse errors are a typed [`FaultSpecError`] that
//! names the bad item or value.
//!
//! # What happens to a frame
//!
//! Faults are applied on **send**: they model the wire in this port's transmit direction (give
//! both ports of a link a spec to fault both directions). For every frame handed to
//! [`FaultInjector::apply`], in this order, with one draw of the generator per step whether
//! or not the step fires (so one frame's fate never shifts the next frame's draws):
//!
//! 1. **drop** with probability `drop`: the frame is gone; steps 2–4 are skipped.
//! 2. **corrupt** with probability `corrupt`: one byte is XORed with a non-zero value. For a
//!    RoCEv2 frame the byte lies between BTH byte 5 (DestQP) and the end of the ICRC: bytes
//!    the ICRC covers unmasked (or the ICRC itself), so the receiver's ICRC check fails and
//!    the frame is counted as an ICRC error, never mistaken for another drop reason. Any
//!    other frame gets a byte after its Ethernet header.
//! 3. **duplicate** with probability `dup`: the frame goes out twice, back to back.
//! 4. **reorder** with probability `reorder`: the frame (and its duplicate) is held back and
//!    sent after `k` further frames have gone out, `k` uniform in `1..=window`. A frame that
//!    is not held goes out at once; held frames whose count reaches zero follow it (a released
//!    frame counts as a frame that went out for the others still held).
//!
//! [`FaultInjector::flush`] releases every held frame (the port calls it on shutdown). The
//! generator is SplitMix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number
//! generators", OOPSLA 2014): the same seed and the same frames give the same output, run after
//! run and on every platform.

use std::fmt;

use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;

/// Default reorder window.
pub const DEFAULT_WINDOW: u32 = 4;
/// Largest reorder window.
pub const MAX_WINDOW: u32 = 64;

/// A parsed fault spec.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultSpec {
    /// Probability of dropping a frame.
    pub drop: f64,
    /// Probability of duplicating a frame.
    pub dup: f64,
    /// Probability of holding a frame back.
    pub reorder: f64,
    /// How many later frames a held frame may wait for (1..=[`MAX_WINDOW`]).
    pub window: u32,
    /// Probability of corrupting one byte.
    pub corrupt: f64,
    /// Generator seed.
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            window: DEFAULT_WINDOW,
            corrupt: 0.0,
            seed: 0,
        }
    }
}

/// Why a fault spec does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultSpecError {
    /// An item without `=`.
    MissingValue(String),
    /// A key the grammar does not have.
    UnknownKey(String),
    /// A key given twice.
    DuplicateKey(String),
    /// A rate that is not a number in [0, 1].
    BadRate {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
    },
    /// A reorder window that is not an integer in 1..=[`MAX_WINDOW`].
    BadWindow(String),
    /// A reorder option other than `window=`.
    BadReorderOption(String),
    /// A seed that is not a u64.
    BadSeed(String),
}

impl fmt::Display for FaultSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultSpecError::MissingValue(i) => write!(f, "wire fault item `{i}` has no `=value`"),
            FaultSpecError::UnknownKey(k) => write!(
                f,
                "unknown wire fault `{k}` (want drop, dup, reorder, corrupt, seed)"
            ),
            FaultSpecError::DuplicateKey(k) => write!(f, "wire fault `{k}` given twice"),
            FaultSpecError::BadRate { key, value } => {
                write!(
                    f,
                    "wire fault {key}={value}: rate must be a number in [0, 1]"
                )
            }
            FaultSpecError::BadWindow(v) => {
                write!(
                    f,
                    "reorder window={v}: must be an integer in 1..={MAX_WINDOW}"
                )
            }
            FaultSpecError::BadReorderOption(o) => {
                write!(f, "reorder option `{o}`: only `window=N` is known")
            }
            FaultSpecError::BadSeed(v) => write!(f, "seed={v}: not a 64-bit unsigned integer"),
        }
    }
}

impl std::error::Error for FaultSpecError {}

fn rate(key: &str, v: &str) -> Result<f64, FaultSpecError> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(FaultSpecError::BadRate {
            key: key.into(),
            value: v.into(),
        }),
    }
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        let mut spec = FaultSpec::default();
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(spec);
        }
        let mut seen: Vec<String> = Vec::new();
        for item in s.split(',').map(str::trim) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FaultSpecError::MissingValue(item.into()))?;
            if seen.iter().any(|k| k == key) {
                return Err(FaultSpecError::DuplicateKey(key.into()));
            }
            match key {
                "drop" => spec.drop = rate(key, value)?,
                "dup" => spec.dup = rate(key, value)?,
                "corrupt" => spec.corrupt = rate(key, value)?,
                "reorder" => {
                    let mut parts = value.split(':');
                    spec.reorder = rate(key, parts.next().unwrap_or(""))?;
                    for opt in parts {
                        let w = opt
                            .strip_prefix("window=")
                            .ok_or_else(|| FaultSpecError::BadReorderOption(opt.into()))?;
                        spec.window = match w.parse::<u32>() {
                            Ok(n) if (1..=MAX_WINDOW).contains(&n) => n,
                            _ => return Err(FaultSpecError::BadWindow(w.into())),
                        };
                    }
                }
                "seed" => {
                    let parsed = match value.strip_prefix("0x") {
                        Some(h) => u64::from_str_radix(h, 16),
                        None => value.parse::<u64>(),
                    };
                    spec.seed = parsed.map_err(|_| FaultSpecError::BadSeed(value.into()))?;
                }
                _ => return Err(FaultSpecError::UnknownKey(key.into())),
            }
            seen.push(key.into());
        }
        Ok(spec)
    }
}

impl FaultSpec {
    /// Whether the spec does anything.
    pub fn is_active(&self) -> bool {
        self.drop > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.corrupt > 0.0
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drop={},dup={},reorder={}:window={},corrupt={},seed={}",
            self.drop, self.dup, self.reorder, self.window, self.corrupt, self.seed
        )
    }
}

/// The injector's draws from its SplitMix64 (rand_xoshiro's).
#[derive(Clone, Debug)]
struct Rng(SplitMix64);

impl Rng {
    /// True with probability `p` (53 random bits against `p`).
    fn chance(&mut self, p: f64) -> bool {
        let u = (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        u < p
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// What the injector did to one frame (for counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultEvents {
    /// The frame was dropped.
    pub dropped: bool,
    /// A byte was corrupted.
    pub corrupted: bool,
    /// The frame was duplicated.
    pub duplicated: bool,
    /// The frame was held back.
    pub reordered: bool,
}

struct Held {
    frame: Vec<u8>,
    /// Frames still to go out before this one.
    after: u32,
}

/// Applies a [`FaultSpec`] to a stream of outgoing frames.
pub struct FaultInjector {
    spec: FaultSpec,
    rng: Rng,
    held: Vec<Held>,
}

impl fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultInjector")
            .field("spec", &self.spec)
            .field("held", &self.held.len())
            .finish()
    }
}

/// Offset of the byte range a corruption may hit: from BTH byte 5 for RoCEv2 frames, from the
/// end of the Ethernet header otherwise. `None` when the frame has no byte there.
fn corrupt_start(f: &[u8]) -> Option<usize> {
    let start = match super::roce_bth_offset(f) {
        Some(bth) if bth + 5 < f.len() => bth + 5,
        _ => super::l3_offset(f)?,
    };
    (start < f.len()).then_some(start)
}

impl FaultInjector {
    /// An injector for `spec`.
    pub fn new(spec: FaultSpec) -> FaultInjector {
        FaultInjector {
            spec,
            rng: Rng(SplitMix64::seed_from_u64(spec.seed)),
            held: Vec::new(),
        }
    }

    /// The spec.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// Frames held back for reordering.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Applies the faults to `frame` and calls `out` for every frame that goes on the wire now,
    /// in order (none, the frame, its duplicate, held frames whose turn came).
    pub fn apply(&mut self, mut frame: Vec<u8>, mut out: impl FnMut(Vec<u8>)) -> FaultEvents {
        let s = self.spec;
        let mut ev = FaultEvents::default();
        let drop = self.rng.chance(s.drop);
        let corrupt = self.rng.chance(s.corrupt);
        let corrupt_at = self.rng.0.next_u64();
        let corrupt_xor = 1 + self.rng.below(255) as u8;
        let dup = self.rng.chance(s.dup);
        let reorder = self.rng.chance(s.reorder);
        let delay = 1 + self.rng.below(s.window as u64) as u32;
        if drop {
            ev.dropped = true;
            return ev;
        }
        if corrupt {
            if let Some(start) = corrupt_start(&frame) {
                let at = start + (corrupt_at % (frame.len() - start) as u64) as usize;
                frame[at] ^= corrupt_xor;
                ev.corrupted = true;
            }
        }
        let copy = dup.then(|| frame.clone());
        ev.duplicated = copy.is_some();
        let mut now: Vec<Vec<u8>> = Vec::with_capacity(2);
        if reorder {
            ev.reordered = true;
            self.held.push(Held {
                frame,
                after: delay,
            });
            if let Some(c) = copy {
                self.held.push(Held {
                    frame: c,
                    after: delay,
                });
            }
        } else {
            now.push(frame);
            now.extend(copy);
        }
        for f in now {
            out(f);
            self.one_went_out(&mut out);
        }
        ev
    }

    /// A frame went out: count down the held ones and send those whose turn came.
    fn one_went_out(&mut self, out: &mut impl FnMut(Vec<u8>)) {
        for h in &mut self.held {
            h.after = h.after.saturating_sub(1);
        }
        while let Some(i) = self.held.iter().position(|h| h.after == 0) {
            let h = self.held.remove(i);
            out(h.frame);
            // Released frames count as frames that went out for the others.
            for h in &mut self.held {
                h.after = h.after.saturating_sub(1);
            }
        }
    }

    /// Sends every held frame, oldest first.
    pub fn flush(&mut self, mut out: impl FnMut(Vec<u8>)) {
        for h in self.held.drain(..) {
            out(h.frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let s: FaultSpec = "drop=0.01,dup=0.01,reorder=0.01:window=4,corrupt=0.001,seed=7"
            .parse()
            .unwrap();
        assert_eq!(
            s,
            FaultSpec {
                drop: 0.01,
                dup: 0.01,
                reorder: 0.01,
                window: 4,
                corrupt: 0.001,
                seed: 7
            }
        );
        assert_eq!(s.to_string().parse::<FaultSpec>().unwrap(), s);
        assert_eq!("".parse::<FaultSpec>().unwrap(), FaultSpec::default());
        assert_eq!("none".parse::<FaultSpec>().unwrap(), FaultSpec::default());
        assert!(!FaultSpec::default().is_active());
        let s: FaultSpec = " reorder=1 , seed=0x10 ".parse().unwrap();
        assert_eq!((s.reorder, s.window, s.seed), (1.0, DEFAULT_WINDOW, 16));
    }

    #[test]
    fn parse_errors_name_the_bad_value() {
        let e = |s: &str| s.parse::<FaultSpec>().unwrap_err();
        assert_eq!(
            e("drop=2"),
            FaultSpecError::BadRate {
                key: "drop".into(),
                value: "2".into()
            }
        );
        assert_eq!(
            e("dup=-0.1"),
            FaultSpecError::BadRate {
                key: "dup".into(),
                value: "-0.1".into()
            }
        );
        assert_eq!(
            e("corrupt=x"),
            FaultSpecError::BadRate {
                key: "corrupt".into(),
                value: "x".into()
            }
        );
        assert_eq!(
            e("drop=NaN").to_string(),
            "wire fault drop=NaN: rate must be a number in [0, 1]"
        );
        assert_eq!(
            e("reorder=0.1:window=0"),
            FaultSpecError::BadWindow("0".into())
        );
        assert_eq!(
            e("reorder=0.1:window=65"),
            FaultSpecError::BadWindow("65".into())
        );
        assert_eq!(
            e("reorder=0.1:depth=3"),
            FaultSpecError::BadReorderOption("depth=3".into())
        );
        assert_eq!(e("seed=-1"), FaultSpecError::BadSeed("-1".into()));
        assert_eq!(e("flip=0.1"), FaultSpecError::UnknownKey("flip".into()));
        assert_eq!(e("drop"), FaultSpecError::MissingValue("drop".into()));
        assert_eq!(
            e("drop=0.1,drop=0.2"),
            FaultSpecError::DuplicateKey("drop".into())
        );
        assert_eq!(e("drop=0.1,"), FaultSpecError::MissingValue("".into()));
    }

    fn frames(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| (i as u32).to_be_bytes().repeat(16))
            .collect()
    }

    fn run(spec: &str, input: &[Vec<u8>]) -> (Vec<Vec<u8>>, [u64; 4]) {
        let mut inj = FaultInjector::new(spec.parse().unwrap());
        let mut out = Vec::new();
        let mut n = [0u64; 4];
        for f in input {
            let ev = inj.apply(f.clone(), |f| out.push(f));
            n[0] += ev.dropped as u64;
            n[1] += ev.duplicated as u64;
            n[2] += ev.reordered as u64;
            n[3] += ev.corrupted as u64;
        }
        inj.flush(|f| out.push(f));
        (out, n)
    }

    #[test]
    fn deterministic_per_seed_and_rates_roughly_hold() {
        let input = frames(20_000);
        let spec = "drop=0.05,dup=0.03,reorder=0.02:window=4,corrupt=0.01,seed=7";
        let (a, na) = run(spec, &input);
        let (b, nb) = run(spec, &input);
        assert_eq!(a, b, "same seed, same frames: same output");
        assert_eq!(na, nb);
        let (c, _) = run(&spec.replace("seed=7", "seed=8"), &input);
        assert_ne!(a, c, "another seed gives another fault pattern");
        // Expected counts 1000 / ~570 / ~380 / ~190: within ±25% (many standard deviations).
        let within = |got: u64, want: f64| (got as f64) > want * 0.75 && (got as f64) < want * 1.25;
        assert!(within(na[0], 1000.0), "dropped {}", na[0]);
        assert!(within(na[1], 0.03 * 19_000.0), "duplicated {}", na[1]);
        assert!(within(na[2], 0.02 * 19_000.0), "reordered {}", na[2]);
        assert!(within(na[3], 0.01 * 19_000.0), "corrupted {}", na[3]);
        assert_eq!(a.len() as u64, 20_000 - na[0] + na[1]);
    }

    #[test]
    fn reorder_stays_within_the_window_and_loses_nothing() {
        let input = frames(5_000);
        let (out, n) = run("reorder=0.3:window=3,seed=1", &input);
        assert_eq!(out.len(), 5_000);
        assert!(n[2] > 1_000);
        let idx: Vec<usize> = out
            .iter()
            .map(|f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize)
            .collect();
        let mut sorted = idx.clone();
        sorted.sort();
        assert_eq!(sorted, (0..5_000).collect::<Vec<_>>());
        let moved = idx.iter().enumerate().filter(|(p, i)| *p != **i).count();
        assert!(moved > 0);
        // A held frame waits for at most `window` frames, but released frames also count, so
        // displacement stays small; bound it generously.
        for (pos, &i) in idx.iter().enumerate() {
            assert!(pos.abs_diff(i) <= 3 * 8, "frame {i} came out at {pos}");
        }
    }

    #[test]
    fn no_spec_passes_everything_through() {
        let input = frames(100);
        let (out, n) = run("seed=3", &input);
        assert_eq!(out, input);
        assert_eq!(n, [0; 4]);
    }

    #[test]
    fn corrupt_hits_only_icrc_covered_bytes_of_roce() {
        // A minimal IPv4/UDP 4791 frame: corruption starts at BTH byte 5.
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 4];
        f[12] = 0x08;
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[34 + 2..34 + 4].copy_from_slice(&4791u16.to_be_bytes());
        assert_eq!(corrupt_start(&f), Some(42 + 5));
        // Not RoCE (UDP 53): anything after the Ethernet header.
        f[34 + 2..34 + 4].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(corrupt_start(&f), Some(14));
        // ARP.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(corrupt_start(&arp), Some(14));
        assert_eq!(corrupt_start(&[0; 14]), None);
        assert_eq!(corrupt_start(&[0; 3]), None);
        let orig = f.clone();
        let mut inj = FaultInjector::new("corrupt=1,seed=9".parse().unwrap());
        for _ in 0..200 {
            let mut got = Vec::new();
            let ev = inj.apply(orig.clone(), |x| got.push(x));
            assert!(ev.corrupted);
            let diff: Vec<usize> = (0..orig.len()).filter(|&i| got[0][i] != orig[i]).collect();
            assert_eq!(diff.len(), 1);
            assert!(diff[0] >= 14);
        }
    }
}
