//! The control plane's state: capabilities, firmware pages, health, fault switches, the trace
//! and the host endianness register. One part of [`crate::hca::Hca`] (the command queue
//! engine is [`crate::control::cmd`], what command handlers return [`crate::control::result`],
//! the lifecycle and dispatch [`crate::hca`]).

pub mod caps;
pub mod cmd;
pub mod faults;
pub mod pages;
pub mod result;
pub mod syndrome;
pub mod trace;

use std::sync::Arc;

use crate::control::caps::Caps;
use crate::control::faults::Faults;
use crate::control::pages::Pages;
use crate::control::trace::Trace;
use crate::front::init_seg::HealthState;

/// The control plane's state.
pub(crate) struct Control {
    pub(crate) caps: Caps,
    pub(crate) pages: Pages,
    /// Fault switches.
    pub(crate) faults: Faults,
    pub(crate) health: Arc<HealthState>,
    pub(crate) trace: Trace,
    /// Host endianness register `he` bit (ACCESS_REGISTER HOST_ENDIANNESS; 0 = little-endian).
    pub(crate) host_endianness: u8,
}

impl Control {
    /// Power-on state, health reported through `health`.
    pub(crate) fn new(health: Arc<HealthState>) -> Control {
        Control {
            caps: Caps::connectx5(),
            pages: Pages::new(),
            faults: Faults::default(),
            health,
            trace: Trace::from_env(),
            host_endianness: 0,
        }
    }

    /// A field of the CURRENT capabilities of `cap_type` (0 if the type is not answered).
    pub(crate) fn cap_of(&self, cap_type: u16, field: mlx5_prm::Field) -> u32 {
        self.caps
            .page(cap_type)
            .and_then(|p| field.get(&p.cur[..]).ok())
            .unwrap_or(0)
    }

    /// Firmware is dead (fatal health): no command completes, no event is posted.
    pub(crate) fn dead(&self) -> bool {
        self.faults.fatal_health.is_some()
    }
}
