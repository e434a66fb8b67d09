//! Flow control: how far a publication's sender may run ahead (the *sender limit*).
//!
//! Every network publication owns one [`FlowControl`] strategy. The sender feeds it status
//! messages (SMs), idle duty cycles, SETUP emissions and ERR frames, each with the current
//! time, and gets back the new sender limit (wire-protocol.md §7). Strategies are sans-IO: no
//! clock reads, no sockets, no threads; tests drive them with a fake clock.
//!
//! | strategy | module | limit follows | tracks receivers |
//! |---|---|---|---|
//! | `unicast` | [`unicast`] | the (single) receiver's edge | no |
//! | `max` | [`max`] | the fastest receiver | no |
//! | `min` | [`min`] | the slowest live receiver | yes |
//! | `tagged` | [`tagged`] | the slowest live receiver carrying the group tag | yes |
//!
//! `min` and `tagged` share their machinery (the private `min_group` module); they differ only in which status
//! messages "match". The `fc=` URI value is parsed by [`FlowControlSpec::parse`] ([`spec`]) and
//! turned into a strategy by [`build`] / [`build_checked`].

use std::fmt;
use std::time::Duration;

use crate::time::Instant;

pub mod max;
pub mod min;
mod min_group;
pub mod spec;
pub mod tagged;
#[cfg(test)]
mod test_support;
pub mod unicast;

pub use max::MaxFlowControl;
pub use min::MinFlowControl;
pub use spec::{FlowControlDefaults, FlowControlError, FlowControlSpec, StrategyKind};

/// Receiver timeout used when neither `t:` nor the driver context sets one.
///
/// Aeron's default is 5 s; this project uses 2 s (status messages go out every 100 ms).
pub const DEFAULT_RECEIVER_TIMEOUT: Duration = Duration::from_secs(2);

/// Group tag a `tagged` strategy uses when built through the infallible [`build`] with neither
/// `g:<tag>` nor a driver default tag (Aeron's `AERON_FLOW_CONTROL_GROUP_TAG` default).
pub const FALLBACK_GROUP_TAG: i64 = -1;

/// The compile-time default receiver window the retransmit clip is based on (Aeron uses this
/// constant, not the configured window).
pub const DEFAULT_INITIAL_WINDOW_LENGTH: u32 = 128 * 1024;

/// Retransmit window multiple for unicast, min and tagged flow control.
pub const UNICAST_RETRANSMIT_WINDOW_MULTIPLE: usize = 16;

/// Retransmit window multiple for max flow control.
pub const MAX_RETRANSMIT_WINDOW_MULTIPLE: usize = 4;

/// What the sender learned from one status message (already decoded; positions computed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusMessageInput {
    /// The receiving channel endpoint's id (random 64-bit per driver, +1 per endpoint).
    pub receiver_id: i64,
    /// `compute_position(consumption_term_id, consumption_term_offset)`.
    pub consumption_position: i64,
    /// Bytes the sender may send beyond the consumption position.
    pub receiver_window: i32,
    /// The SM's group tag, present iff the frame was 44 bytes long.
    pub group_tag: Option<i64>,
    /// The SM carried the EOS flag (0x40): the receiver is leaving.
    pub end_of_stream: bool,
}

impl StatusMessageInput {
    /// The receiver's edge: consumption position plus window, saturating on hostile input.
    pub fn edge(&self) -> i64 {
        self.consumption_position.saturating_add(i64::from(self.receiver_window))
    }
}

/// A receiver tracked by a strategy (for counters and Python's `pub.counters()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackedReceiver {
    /// The receiver's id from its status messages.
    pub receiver_id: i64,
    /// The group tag of the SM that added (or last updated) the receiver.
    pub group_tag: Option<i64>,
    /// Highest consumption position the receiver reported.
    pub position: i64,
    /// Window of the receiver's last status message.
    pub window: i32,
    /// When the receiver's last status message arrived.
    pub last_status_message: Instant,
}

/// Why a receiver left a strategy's group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemovalReason {
    /// No status message within the receiver timeout.
    Timeout,
    /// The receiver sent a status message with the EOS flag.
    EndOfStream,
    /// The receiver sent an ERR frame (image rejected).
    Error,
}

/// A change in the set of receivers a strategy tracks, drained with [`FlowControl::poll_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowControlEvent {
    /// A receiver joined the group.
    ReceiverAdded {
        /// The receiver's id.
        receiver_id: i64,
        /// The group tag of the SM that added it.
        group_tag: Option<i64>,
    },
    /// A receiver left the group.
    ReceiverRemoved {
        /// The receiver's id.
        receiver_id: i64,
        /// The receiver's last known group tag.
        group_tag: Option<i64>,
        /// Why it left.
        reason: RemovalReason,
    },
}

/// A flow-control strategy: maps status messages and idle ticks to the sender limit.
///
/// Every callback receives the time; none reads a clock. Limits are absolute stream positions.
pub trait FlowControl: Send + fmt::Debug {
    /// `"unicast"`, `"max"`, `"min"` or `"tagged"`.
    fn strategy_name(&self) -> &'static str;

    /// Every non-SEND_SETUP status message; returns the new sender limit.
    fn on_status_message(
        &mut self,
        sm: &StatusMessageInput,
        sender_limit: i64,
        sender_position: i64,
        now: Instant,
    ) -> i64;

    /// A duty cycle in which no data was sent; returns the new sender limit.
    ///
    /// `min`/`tagged` drop timed-out and EOS/ERR-flagged receivers here and may move the limit
    /// *down* to the slowest remaining receiver.
    fn on_idle(&mut self, now: Instant, sender_limit: i64, sender_position: i64, is_end_of_stream: bool) -> i64;

    /// A status message with the SEND_SETUP flag (a receiver joining).
    fn on_trigger_send_setup(&mut self, receiver_id: i64, group_tag: Option<i64>, now: Instant);

    /// The sender just emitted a SETUP frame; returns the sender limit (unchanged by all
    /// strategies, `min`/`tagged` may record it as a setup hold, §7.6).
    fn on_setup(&mut self, sender_limit: i64, sender_position: i64, now: Instant) -> i64;

    /// An ERR frame from a receiver (image rejected): mark it end-of-stream, it is removed at
    /// the next idle.
    fn on_error(&mut self, receiver_id: i64, group_tag: Option<i64>, now: Instant);

    /// `min`/`tagged`: tracked receivers >= group minimum size; `unicast`/`max`: always true.
    fn has_required_receivers(&self) -> bool;

    /// Retransmit clip: `min(resend_length, W*k, term_length - term_offset)` with
    /// `W = min(128 KiB, term_length/2)`, `k` = 16 (unicast/min/tagged) or 4 (max).
    fn max_retransmission_length(&self, term_offset: i32, resend_length: usize, term_length: u32, mtu: u32) -> usize;

    /// Receivers currently tracked (empty for `unicast`/`max`).
    fn receivers(&self) -> Vec<TrackedReceiver>;

    /// How many receivers [`FlowControl::receivers`] would list, without building the list
    /// (the `fc-receivers` counter, written every duty cycle).
    fn receiver_count(&self) -> usize;

    /// Tracked receivers required before the publication counts as connected (0 for
    /// `unicast`/`max`).
    fn group_min_size(&self) -> u32;

    /// The group tag receivers must carry (`tagged` only).
    fn group_tag(&self) -> Option<i64>;

    /// How long a receiver may stay silent before it is dropped (informational for
    /// `unicast`/`max`, which track no receivers).
    fn receiver_timeout(&self) -> Duration;

    /// The next receiver added/removed event, oldest first.
    fn poll_event(&mut self) -> Option<FlowControlEvent>;
}

/// The retransmit clip shared by every strategy (wire-protocol.md §6.7).
///
/// `min(resend_length, W * multiple, term_length - term_offset)` with
/// `W = min(DEFAULT_INITIAL_WINDOW_LENGTH, term_length / 2)`. An offset outside the term
/// clips to zero rather than panicking.
pub fn retransmission_length(term_offset: i32, resend_length: usize, term_length: u32, multiple: usize) -> usize {
    let window = DEFAULT_INITIAL_WINDOW_LENGTH.min(term_length / 2) as usize;
    let offset = u32::try_from(term_offset).unwrap_or(u32::MAX);
    let remaining = term_length.saturating_sub(offset) as usize;
    resend_length.min(window.saturating_mul(multiple)).min(remaining)
}

/// Builds the strategy for a publication, never failing.
///
/// Unicast channels use `unicast` unless `fc=` is given (then the named strategy applies:
/// several receivers may send SMs to one unicast publication); multicast channels use `fc=` or
/// `defaults.multicast_strategy`. Options absent from `fc=` come from `defaults`; `max` ignores
/// them all and `min` ignores the group tag. A `tagged` strategy with no tag anywhere falls
/// back to [`FALLBACK_GROUP_TAG`] like Aeron; use [`build_checked`] to reject that instead.
pub fn build(
    spec: Option<&FlowControlSpec>,
    is_multicast: bool,
    defaults: &FlowControlDefaults,
) -> Box<dyn FlowControl> {
    match effective_spec(spec, is_multicast, defaults) {
        Some(spec) => instantiate(&spec, defaults),
        None => Box::new(MaxFlowControl::unicast(defaults.receiver_timeout)),
    }
}

/// Like [`build`], but rejects a `tagged` strategy that has neither `g:<tag>` nor a driver
/// default group tag (see [`FlowControlSpec::validate_with`]).
pub fn build_checked(
    spec: Option<&FlowControlSpec>,
    is_multicast: bool,
    defaults: &FlowControlDefaults,
) -> Result<Box<dyn FlowControl>, FlowControlError> {
    match effective_spec(spec, is_multicast, defaults) {
        Some(spec) => {
            spec.validate_with(defaults)?;
            Ok(instantiate(&spec, defaults))
        }
        None => Ok(Box::new(MaxFlowControl::unicast(defaults.receiver_timeout))),
    }
}

/// The spec that applies to a publication, or `None` for plain unicast.
fn effective_spec(
    spec: Option<&FlowControlSpec>,
    is_multicast: bool,
    defaults: &FlowControlDefaults,
) -> Option<FlowControlSpec> {
    match spec {
        Some(spec) => Some(spec.clone()),
        None if is_multicast => Some(FlowControlSpec::new(defaults.multicast_strategy)),
        None => None,
    }
}

/// Instantiates `spec`, filling absent options from `defaults`.
fn instantiate(spec: &FlowControlSpec, defaults: &FlowControlDefaults) -> Box<dyn FlowControl> {
    let timeout = spec.receiver_timeout.unwrap_or(defaults.receiver_timeout);
    let min_size = spec.group_min_size.unwrap_or(defaults.group_min_size);
    match spec.strategy {
        StrategyKind::Max => Box::new(MaxFlowControl::new(timeout)),
        StrategyKind::Min => Box::new(MinFlowControl::new(min_size, timeout)),
        StrategyKind::Tagged => {
            let tag = spec.group_tag.or(defaults.group_tag).unwrap_or(FALLBACK_GROUP_TAG);
            Box::new(MinFlowControl::tagged(tag, min_size, timeout))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> FlowControlDefaults {
        FlowControlDefaults::default()
    }

    #[test]
    fn unicast_channel_without_fc_uses_unicast() {
        let strategy = build(None, false, &defaults());
        assert_eq!(strategy.strategy_name(), "unicast");
        assert!(strategy.has_required_receivers());
    }

    #[test]
    fn multicast_channel_without_fc_uses_default_max() {
        let strategy = build(None, true, &defaults());
        assert_eq!(strategy.strategy_name(), "max");
    }

    #[test]
    fn multicast_default_strategy_comes_from_driver_defaults() {
        let defaults = FlowControlDefaults { multicast_strategy: StrategyKind::Min, group_min_size: 2, ..defaults() };
        let strategy = build(None, true, &defaults);
        assert_eq!(strategy.strategy_name(), "min");
        assert_eq!(strategy.group_min_size(), 2);
        assert!(!strategy.has_required_receivers());
    }

    #[test]
    fn fc_on_unicast_channel_applies_the_named_strategy() {
        let spec = FlowControlSpec::parse("min,g:/3,t:1000ms").unwrap();
        let strategy = build(Some(&spec), false, &defaults());
        assert_eq!(strategy.strategy_name(), "min");
        assert_eq!(strategy.group_min_size(), 3);
        assert_eq!(strategy.receiver_timeout(), Duration::from_secs(1));
        assert_eq!(strategy.group_tag(), None);
    }

    #[test]
    fn tagged_spec_builds_tagged_with_its_tag_size_and_timeout() {
        let spec = FlowControlSpec::parse("tagged,g:1001/3,t:1s").unwrap();
        let strategy = build_checked(Some(&spec), true, &defaults()).unwrap();
        assert_eq!(strategy.strategy_name(), "tagged");
        assert_eq!(strategy.group_tag(), Some(1001));
        assert_eq!(strategy.group_min_size(), 3);
        assert_eq!(strategy.receiver_timeout(), Duration::from_secs(1));
    }

    #[test]
    fn receiver_timeout_defaults_to_two_seconds() {
        let spec = FlowControlSpec::parse("min").unwrap();
        let strategy = build(Some(&spec), true, &defaults());
        assert_eq!(strategy.receiver_timeout(), Duration::from_secs(2));
        assert_eq!(DEFAULT_RECEIVER_TIMEOUT, Duration::from_secs(2));
    }

    #[test]
    fn tagged_without_any_tag_is_rejected_by_build_checked() {
        let spec = FlowControlSpec::parse("tagged").unwrap();
        let error = build_checked(Some(&spec), true, &defaults()).unwrap_err();
        assert_eq!(error.reason, "tagged flow control needs a group tag (g:<tag>)");
        assert_eq!(error.to_string(), "fc=tagged: tagged flow control needs a group tag (g:<tag>)");
    }

    #[test]
    fn tagged_default_strategy_without_default_tag_is_rejected_by_build_checked() {
        let defaults = FlowControlDefaults { multicast_strategy: StrategyKind::Tagged, ..defaults() };
        assert!(build_checked(None, true, &defaults).is_err());
        assert_eq!(build(None, true, &defaults).group_tag(), Some(FALLBACK_GROUP_TAG));
    }

    #[test]
    fn tagged_without_tag_uses_driver_default_tag() {
        let defaults = FlowControlDefaults { group_tag: Some(7), ..defaults() };
        let spec = FlowControlSpec::parse("tagged,g:/2").unwrap();
        let strategy = build_checked(Some(&spec), true, &defaults).unwrap();
        assert_eq!(strategy.group_tag(), Some(7));
        assert_eq!(strategy.group_min_size(), 2);
    }

    #[test]
    fn retransmit_clip_uses_sixteen_windows_for_unicast_min_and_tagged() {
        let term_length = 16 * 1024 * 1024;
        let defaults = defaults();
        let min_spec = FlowControlSpec::parse("min").unwrap();
        let tagged_spec = FlowControlSpec::parse("tagged,g:1").unwrap();
        let strategies = [
            build(None, false, &defaults),
            build(Some(&min_spec), true, &defaults),
            build(Some(&tagged_spec), true, &defaults),
        ];
        for strategy in &strategies {
            assert_eq!(
                strategy.max_retransmission_length(0, usize::MAX, term_length, 1408),
                16 * 128 * 1024,
                "{}",
                strategy.strategy_name()
            );
        }
    }

    #[test]
    fn retransmit_clip_uses_four_windows_for_max() {
        let strategy = build(None, true, &defaults());
        assert_eq!(strategy.max_retransmission_length(0, usize::MAX, 16 << 20, 1408), 4 << 17);
        assert_eq!(strategy.max_retransmission_length(0, 768, 16 << 20, 1408), 768);
    }

    #[test]
    fn retransmit_clip_stops_at_end_of_term() {
        assert_eq!(retransmission_length(65_000, 10_000, 65_536, 16), 536);
        assert_eq!(retransmission_length(65_536, 10_000, 65_536, 16), 0);
        assert_eq!(retransmission_length(-5, 10_000, 65_536, 16), 0);
        assert_eq!(retransmission_length(i32::MAX, 10_000, 65_536, 16), 0);
    }

    #[test]
    fn retransmit_clip_window_is_half_a_small_term() {
        // term 64 KiB → W = 32 KiB; k = 4 → 128 KiB, but the term end clips first.
        assert_eq!(retransmission_length(0, usize::MAX, 64 * 1024, 4), 64 * 1024);
        // term 16 KiB → W = 8 KiB; k = 1 → 8 KiB.
        assert_eq!(retransmission_length(0, usize::MAX, 16 * 1024, 1), 8 * 1024);
    }

    #[test]
    fn status_message_edge_saturates() {
        let sm = StatusMessageInput {
            receiver_id: 1,
            consumption_position: i64::MAX,
            receiver_window: i32::MAX,
            group_tag: None,
            end_of_stream: false,
        };
        assert_eq!(sm.edge(), i64::MAX);
    }
}
