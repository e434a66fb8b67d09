//! `unicast` flow control: the sender limit follows the receiver's edge (§7.2).

use std::time::Duration;

use super::{
    retransmission_length, FlowControl, FlowControlEvent, StatusMessageInput, TrackedReceiver,
    UNICAST_RETRANSMIT_WINDOW_MULTIPLE,
};
use crate::time::Instant;

/// `snd_lmt = max(snd_lmt, edge)` on every SM; no receiver tracking, never gates connection.
#[derive(Debug, Clone)]
pub struct UnicastFlowControl {
    receiver_timeout: Duration,
}

impl UnicastFlowControl {
    /// A unicast strategy; `receiver_timeout` is only reported, never used.
    pub fn new(receiver_timeout: Duration) -> Self {
        UnicastFlowControl { receiver_timeout }
    }
}

impl FlowControl for UnicastFlowControl {
    fn strategy_name(&self) -> &'static str {
        "unicast"
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
        retransmission_length(term_offset, resend_length, term_length, UNICAST_RETRANSMIT_WINDOW_MULTIPLE)
    }

    fn receivers(&self) -> Vec<TrackedReceiver> {
        Vec::new()
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
    fn unicast_limit_follows_receiver_edge_and_never_goes_back() {
        let mut fc = UnicastFlowControl::new(Duration::from_secs(2));
        let now = Instant::ZERO;
        assert_eq!(fc.on_status_message(&sm(1, 0, 65_536), 0, 0, now), 65_536);
        assert_eq!(fc.on_status_message(&sm(1, 4096, 65_536), 65_536, 0, now), 69_632);
        assert_eq!(fc.on_status_message(&sm(1, 0, 1024), 69_632, 0, now), 69_632);
        assert_eq!(fc.on_idle(now, 69_632, 0, false), 69_632);
        assert_eq!(fc.on_setup(69_632, 0, now), 69_632);
    }

    #[test]
    fn unicast_tracks_nothing_and_is_always_connected() {
        let mut fc = UnicastFlowControl::new(Duration::from_secs(2));
        fc.on_status_message(&sm(1, 0, 1024), 0, 0, Instant::ZERO);
        fc.on_error(1, None, Instant::ZERO);
        assert!(fc.has_required_receivers());
        assert!(fc.receivers().is_empty());
        assert_eq!(fc.poll_event(), None);
        assert_eq!(fc.group_min_size(), 0);
    }
}
