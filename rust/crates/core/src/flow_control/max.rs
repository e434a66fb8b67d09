//! `max` flow control (the multicast default): the limit follows the fastest receiver (§7.2).

use std::time::Duration;

use super::{
    retransmission_length, FlowControl, FlowControlEvent, StatusMessageInput, TrackedReceiver,
    MAX_RETRANSMIT_WINDOW_MULTIPLE,
};
use crate::time::Instant;

/// `snd_lmt = max(snd_lmt, edge)` on every SM from any receiver, so slow receivers may fall
/// behind and must recover by NAK; no receiver tracking, never gates connection.
///
/// The `unicast` strategy is the same rule with another name and retransmit clip
/// (see [`MaxFlowControl::unicast`]).
#[derive(Debug, Clone)]
pub struct MaxFlowControl {
    pub(super) name: &'static str,
    pub(super) retransmit_multiple: usize,
    pub(super) receiver_timeout: Duration,
}

impl MaxFlowControl {
    /// A max strategy; `receiver_timeout` is only reported, never used.
    pub fn new(receiver_timeout: Duration) -> Self {
        MaxFlowControl { name: "max", retransmit_multiple: MAX_RETRANSMIT_WINDOW_MULTIPLE, receiver_timeout }
    }
}

impl FlowControl for MaxFlowControl {
    fn strategy_name(&self) -> &'static str {
        self.name
    }

    fn on_status_message(
        &mut self,
        sm: &StatusMessageInput,
        sender_limit: i64,
        _sender_position: i64,
        _now: Instant,
    ) -> i64 {
        sender_limit.max(sm.edge())
    }

    fn on_idle(&mut self, _now: Instant, sender_limit: i64, _: i64, _: bool) -> i64 {
        sender_limit
    }

    fn on_trigger_send_setup(&mut self, _: i64, _: Option<i64>, _: Instant) {}

    fn on_setup(&mut self, sender_limit: i64, _sender_position: i64, _now: Instant) -> i64 {
        sender_limit
    }

    fn on_error(&mut self, _: i64, _: Option<i64>, _: Instant) {}

    fn has_required_receivers(&self) -> bool {
        true
    }

    fn max_retransmission_length(&self, term_offset: i32, resend_length: usize, term_length: u32, _mtu: u32) -> usize {
        retransmission_length(term_offset, resend_length, term_length, self.retransmit_multiple)
    }

    fn receivers(&self) -> Vec<TrackedReceiver> {
        Vec::new()
    }

    fn receiver_count(&self) -> usize {
        0
    }

    fn group_min_size(&self) -> u32 {
        0
    }

    fn group_tag(&self) -> Option<i64> {
        None
    }

    fn receiver_timeout(&self) -> Duration {
        self.receiver_timeout
    }

    fn poll_event(&mut self) -> Option<FlowControlEvent> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_control::test_support::sm;

    #[test]
    fn max_follows_the_fastest_receiver() {
        let mut fc = MaxFlowControl::new(Duration::from_secs(2));
        let now = Instant::ZERO;
        let mut limit = 0;
        limit = fc.on_status_message(&sm(1, 1000, 4096), limit, 0, now);
        assert_eq!(limit, 5096);
        limit = fc.on_status_message(&sm(2, 9000, 4096), limit, 0, now);
        assert_eq!(limit, 13_096);
        // The slow receiver reporting again does not pull the limit back.
        limit = fc.on_status_message(&sm(1, 1100, 4096), limit, 0, now);
        assert_eq!(limit, 13_096);
        // Idle never moves it, not even after a long silence.
        limit = fc.on_idle(now + Duration::from_secs(60), limit, 13_096, false);
        assert_eq!(limit, 13_096);
    }

    #[test]
    fn max_ignores_tags_eos_and_errors() {
        let mut fc = MaxFlowControl::new(Duration::from_secs(2));
        let now = Instant::ZERO;
        let eos = StatusMessageInput { end_of_stream: true, group_tag: Some(5), ..sm(1, 100, 100) };
        assert_eq!(fc.on_status_message(&eos, 0, 0, now), 200);
        fc.on_trigger_send_setup(2, None, now);
        assert_eq!(fc.on_setup(200, 0, now), 200);
        fc.on_error(1, None, now);
        assert!(fc.has_required_receivers());
        assert!(fc.receivers().is_empty());
        assert_eq!(fc.poll_event(), None);
        assert_eq!(fc.strategy_name(), "max");
    }

    #[test]
    fn max_limit_saturates_on_hostile_positions() {
        let mut fc = MaxFlowControl::new(Duration::from_secs(2));
        let limit = fc.on_status_message(&sm(1, i64::MAX - 1, i32::MAX), 0, 0, Instant::ZERO);
        assert_eq!(limit, i64::MAX);
    }
}
