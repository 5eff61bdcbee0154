//! Fault injection: plain switches the tests and the binary flip at runtime.
//!
//! Command-side switches are acted on by [`crate::control::cmd`] and [`crate::hca`]; data-side switches
//! are read by the data plane ([`crate::objects::cq`], [`crate::datapath`]).

/// The fault switches. `Default` = a healthy device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Commands are swallowed: the entry stays owned by hardware (ownership bit set) and no
    /// completion event is posted, as when firmware hangs. Persistent until cleared.
    pub swallow_commands: bool,
    /// The next command completes with this delivery status (`status_own >> 1`) instead of being
    /// executed. One-shot: cleared when used.
    pub next_delivery_status: Option<u8>,
    /// The next command completes normally but its entry's `output_length` field is overwritten
    /// with [`GARBLED_OUTPUT_LENGTH`]. One-shot.
    pub garble_next_output_length: bool,
    /// The next command completes normally but its entry's `token` field is changed (xor
    /// 0xff). One-shot.
    pub garble_next_token: bool,
    /// Fatal firmware error: the health buffer reports this syndrome (with `rfr` set), the
    /// health counter freezes, an INTERNAL_ERROR event goes to subscribed EQs and no command
    /// completes any more. Persistent until device reset.
    pub fatal_health: Option<u8>,
    /// A surprise page request: the device changes its page demand by this many pages (> 0 it
    /// wants more, < 0 it returns pages) and posts a PAGE_REQUEST event as soon as an EQ
    /// subscribed to it exists (after INIT_HCA). One-shot: cleared when the event is posted.
    pub page_request: Option<i32>,
    /// Data plane: CQEs of this CQ are written without flipping the ownership bit.
    pub stuck_cq_owner: Option<u32>,
    /// Data plane: the next CQE gets a garbage opcode/syndrome. One-shot (cleared by the data plane).
    pub corrupt_next_cqe: bool,
    /// Data plane: the next CQE is written twice. One-shot (cleared by the data plane).
    pub duplicate_next_cqe: bool,
}

/// What [`Faults::garble_next_output_length`] writes into the entry's `output_length`.
pub const GARBLED_OUTPUT_LENGTH: u32 = 0xdead_beef;

/// Why a fault specification could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultSpecError(pub String);

impl std::fmt::Display for FaultSpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad fault spec: {}", self.0)
    }
}

impl std::error::Error for FaultSpecError {}

fn parse_num(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let v = match s.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok()?,
        None => s.parse().ok()?,
    };
    Some(if neg { -v } else { v })
}

impl Faults {
    /// Applies a comma-separated list of switches, as the binary's `--fault` option and the
    /// `MLX5_SIM_FAULTS` variable take them:
    /// `swallow-commands`, `delivery-status=N`, `garble-output-length`, `garble-token`, `fatal-health=SYND`,
    /// `page-request=N` (N may be negative), `stuck-cq-owner=CQN`, `corrupt-next-cqe`,
    /// `duplicate-next-cqe`.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), FaultSpecError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (item, None),
            };
            let num = |lo: i64, hi: i64| -> Result<i64, FaultSpecError> {
                let v = value
                    .and_then(parse_num)
                    .ok_or_else(|| FaultSpecError(format!("{name} needs a number")))?;
                if v < lo || v > hi {
                    return Err(FaultSpecError(format!("{name}={v} out of range")));
                }
                Ok(v)
            };
            match name {
                "swallow-commands" => self.swallow_commands = true,
                "delivery-status" => self.next_delivery_status = Some(num(0, 0x7f)? as u8),
                "garble-output-length" => self.garble_next_output_length = true,
                "garble-token" => self.garble_next_token = true,
                "fatal-health" => self.fatal_health = Some(num(1, 0xff)? as u8),
                "page-request" => self.page_request = Some(num(-(1 << 20), 1 << 20)? as i32),
                "stuck-cq-owner" => self.stuck_cq_owner = Some(num(0, 0xff_ffff)? as u32),
                "corrupt-next-cqe" => self.corrupt_next_cqe = true,
                "duplicate-next-cqe" => self.duplicate_next_cqe = true,
                _ => return Err(FaultSpecError(format!("unknown fault {name}"))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parsing() {
        let mut f = Faults::default();
        f.apply_spec("swallow-commands, delivery-status=0x9,page-request=-3,fatal-health=8")
            .unwrap();
        assert!(f.swallow_commands);
        assert_eq!(f.next_delivery_status, Some(9));
        assert_eq!(f.page_request, Some(-3));
        assert_eq!(f.fatal_health, Some(8));
        assert!(f.apply_spec("nonsense").is_err());
        assert!(f.apply_spec("fatal-health=0").is_err());
        assert!(f.apply_spec("stuck-cq-owner").is_err());
    }
}
