//! `min` flow control: the limit follows the slowest live receiver (§7.3, §7.5–7.7).

use std::time::Duration;

use super::min_group::MinGroup;
use super::{
    retransmission_length, FlowControl, FlowControlEvent, StatusMessageInput, TrackedReceiver,
    UNICAST_RETRANSMIT_WINDOW_MULTIPLE,
};
use crate::time::Instant;

/// Tracks every receiver that sends status messages and holds the sender at the slowest one.
///
/// A receiver silent for longer than the receiver timeout, or that sent an EOS SM or an ERR
/// frame, is dropped at the next idle and the limit jumps to the next slowest. Until
/// `group_min_size` receivers are tracked the limit does not advance.
///
/// The `tagged` strategy is the same machinery restricted to one group tag
/// (see [`MinFlowControl::tagged`]).
#[derive(Debug)]
pub struct MinFlowControl {
    pub(super) group: MinGroup,
    /// `None` for `min` (every receiver counts), the group tag for `tagged`.
    pub(super) required_tag: Option<i64>,
}

impl MinFlowControl {
    /// A `min` strategy waiting for `group_min_size` receivers.
    pub fn new(group_min_size: u32, receiver_timeout: Duration) -> Self {
        MinFlowControl { group: MinGroup::new(group_min_size, receiver_timeout), required_tag: None }
    }

    fn matches(&self, group_tag: Option<i64>) -> bool {
        self.required_tag.is_none() || group_tag == self.required_tag
    }
}

impl FlowControl for MinFlowControl {
    fn strategy_name(&self) -> &'static str {
        if self.required_tag.is_some() {
            "tagged"
        } else {
            "min"
        }
    }

    fn on_status_message(
        &mut self,
        sm: &StatusMessageInput,
        sender_limit: i64,
        _sender_position: i64,
        now: Instant,
    ) -> i64 {
        let matches = self.matches(sm.group_tag);
        self.group.on_status_message(sm, matches, sender_limit, now)
    }

    fn on_idle(&mut self, now: Instant, sender_limit: i64, _: i64, _: bool) -> i64 {
        self.group.on_idle(now, sender_limit)
    }

    fn on_trigger_send_setup(&mut self, _receiver_id: i64, group_tag: Option<i64>, _now: Instant) {
        let matches = self.matches(group_tag);
        self.group.on_trigger_send_setup(matches);
    }

    fn on_setup(&mut self, sender_limit: i64, _sender_position: i64, now: Instant) -> i64 {
        self.group.on_setup(sender_limit, now)
    }

    /// Only matching receivers are tracked, so the receiver id alone identifies the one to drop
    /// (as in Aeron, the ERR frame's tag is not checked).
    fn on_error(&mut self, receiver_id: i64, _group_tag: Option<i64>, _now: Instant) {
        self.group.on_error(receiver_id);
    }

    fn has_required_receivers(&self) -> bool {
        self.group.has_required_receivers()
    }

    fn max_retransmission_length(&self, term_offset: i32, resend_length: usize, term_length: u32, _mtu: u32) -> usize {
        retransmission_length(term_offset, resend_length, term_length, UNICAST_RETRANSMIT_WINDOW_MULTIPLE)
    }

    fn receivers(&self) -> Vec<TrackedReceiver> {
        self.group.receivers()
    }

    fn receiver_count(&self) -> usize {
        self.group.receiver_count()
    }

    fn group_min_size(&self) -> u32 {
        self.group.group_min_size()
    }

    fn group_tag(&self) -> Option<i64> {
        self.required_tag
    }

    fn receiver_timeout(&self) -> Duration {
        self.group.receiver_timeout()
    }

    fn poll_event(&mut self) -> Option<FlowControlEvent> {
        self.group.poll_event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_control::test_support::{at, eos, sm, tracked};
    use crate::flow_control::RemovalReason;

    const WINDOW: i32 = 1000;

    fn min(group_min_size: u32) -> MinFlowControl {
        MinFlowControl::new(group_min_size, Duration::from_secs(2))
    }

    fn drain(fc: &mut dyn FlowControl) -> Vec<FlowControlEvent> {
        std::iter::from_fn(|| fc.poll_event()).collect()
    }

    fn removed(receiver_id: i64, reason: RemovalReason) -> FlowControlEvent {
        FlowControlEvent::ReceiverRemoved { receiver_id, group_tag: None, reason }
    }

    fn added(receiver_id: i64) -> FlowControlEvent {
        FlowControlEvent::ReceiverAdded { receiver_id, group_tag: None }
    }

    #[test]
    fn first_receiver_sets_the_limit_to_its_edge() {
        let mut fc = min(0);
        assert!(fc.has_required_receivers());
        assert_eq!(fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0)), 1000);
        assert_eq!(tracked(&fc), 1);
        assert_eq!(fc.strategy_name(), "min");
    }

    #[test]
    fn slow_receiver_holds_min_group() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(1));
        assert_eq!(limit, 1000);
        // The fast receiver runs ahead; the slow one still holds the limit.
        limit = fc.on_status_message(&sm(1, 5000, WINDOW), limit, 0, at(100));
        assert_eq!(limit, 1000);
        assert_eq!(fc.on_idle(at(101), limit, 1000, false), 1000);
        // The slow one advances: the limit follows it, not the fast one.
        limit = fc.on_status_message(&sm(2, 2000, WINDOW), limit, 0, at(200));
        assert_eq!(limit, 3000);
        assert_eq!(fc.on_idle(at(201), limit, 3000, false), 3000);
    }

    #[test]
    fn silent_receiver_is_dropped_after_default_two_second_timeout_and_limit_jumps() {
        let mut fc = min(0);
        assert_eq!(fc.receiver_timeout(), Duration::from_secs(2));
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(0));
        drain(&mut fc);
        // Receiver 1 keeps reporting every 100 ms; receiver 2 goes silent at t = 0.
        for tick in 1..=20 {
            limit = fc.on_status_message(&sm(1, tick * 500, WINDOW), limit, 0, at(tick as u64 * 100));
        }
        assert_eq!(fc.on_idle(at(2000), limit, 0, false), 1000, "exactly 2 s: still tracked");
        assert_eq!(tracked(&fc), 2);
        assert_eq!(fc.on_idle(at(2001), limit, 0, false), 11_000, "jumps to receiver 1");
        assert_eq!(tracked(&fc), 1);
        assert_eq!(drain(&mut fc), vec![removed(2, RemovalReason::Timeout)]);
    }

    #[test]
    fn receiver_timeout_override_drops_sooner() {
        let mut fc = MinFlowControl::new(0, Duration::from_millis(500));
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(0));
        limit = fc.on_status_message(&sm(1, 4000, WINDOW), limit, 0, at(400));
        assert_eq!(fc.on_idle(at(500), limit, 0, false), 1000);
        assert_eq!(fc.on_idle(at(501), limit, 0, false), 5000);
    }

    #[test]
    fn last_receiver_timing_out_leaves_the_limit_unchanged() {
        let mut fc = min(0);
        let limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        assert_eq!(fc.on_idle(at(5000), limit, 0, false), limit);
        assert!(fc.receivers().is_empty());
        assert!(fc.has_required_receivers());
    }

    #[test]
    fn receiver_more_than_a_window_behind_is_not_admitted_until_it_catches_up() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 9000, WINDOW), 0, 0, at(0));
        assert_eq!(limit, 10_000);
        // Edge 8999 < 10_000 - 1000: rejected, limit untouched.
        limit = fc.on_status_message(&sm(2, 7999, WINDOW), limit, 0, at(1));
        assert_eq!(limit, 10_000);
        assert_eq!(tracked(&fc), 1);
        // Edge 9000 == 10_000 - 1000: admitted.
        limit = fc.on_status_message(&sm(2, 8000, WINDOW), limit, 0, at(2));
        assert_eq!(tracked(&fc), 2);
        assert_eq!(limit, 10_000, "an SM never moves the limit back");
        // On idle the limit moves down to the newcomer.
        assert_eq!(fc.on_idle(at(3), limit, 9000, false), 9000);
    }

    #[test]
    fn group_min_size_gates_the_limit_and_has_required_receivers() {
        let mut fc = min(2);
        assert!(!fc.has_required_receivers());
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        assert_eq!(limit, 0, "one of two receivers: the sender does not advance");
        assert!(!fc.has_required_receivers());
        assert_eq!(fc.on_idle(at(1), limit, 0, false), 0);
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(2));
        assert_eq!(limit, 1000);
        assert!(fc.has_required_receivers());
        // Receiver 2 times out: below the minimum again.
        limit = fc.on_status_message(&sm(1, 500, WINDOW), limit, 0, at(1900));
        assert_eq!(fc.on_idle(at(2003), limit, 0, false), limit);
        assert!(!fc.has_required_receivers());
        assert_eq!(fc.on_status_message(&sm(1, 3000, WINDOW), limit, 0, at(2100)), limit);
        // A new receiver brings the group back up to size.
        assert_eq!(fc.on_status_message(&sm(3, 3000, WINDOW), limit, 0, at(2200)), 4000);
        assert!(fc.has_required_receivers());
    }

    #[test]
    fn eos_status_message_removes_the_receiver_at_next_idle() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 5000, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 4500, WINDOW), limit, 0, at(0));
        assert_eq!(fc.on_idle(at(1), limit, 0, false), 5500);
        limit = fc.on_status_message(&eos(sm(2, 4500, WINDOW)), 5500, 0, at(2));
        assert_eq!(tracked(&fc), 2, "still tracked until idle");
        drain(&mut fc);
        assert_eq!(fc.on_idle(at(3), limit, 0, false), 6000);
        assert_eq!(drain(&mut fc), vec![removed(2, RemovalReason::EndOfStream)]);
    }

    #[test]
    fn eos_status_message_from_unknown_receiver_is_not_admitted() {
        let mut fc = min(0);
        let limit = fc.on_status_message(&sm(1, 5000, WINDOW), 0, 0, at(0));
        fc.on_status_message(&eos(sm(2, 5000, WINDOW)), limit, 0, at(1));
        assert_eq!(tracked(&fc), 1);
    }

    #[test]
    fn later_regular_status_message_cancels_eos() {
        let mut fc = min(0);
        let limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        fc.on_status_message(&eos(sm(1, 0, WINDOW)), limit, 0, at(1));
        fc.on_status_message(&sm(1, 0, WINDOW), limit, 0, at(2));
        fc.on_idle(at(3), limit, 0, false);
        assert_eq!(tracked(&fc), 1);
    }

    #[test]
    fn error_frame_removes_the_receiver_at_next_idle() {
        let mut fc = min(1);
        let mut limit = fc.on_status_message(&sm(1, 5000, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 4500, WINDOW), limit, 0, at(0));
        fc.on_error(2, None, at(1));
        fc.on_error(99, None, at(1));
        assert_eq!(tracked(&fc), 2);
        drain(&mut fc);
        assert_eq!(fc.on_idle(at(2), limit, 0, false), 6000);
        assert_eq!(drain(&mut fc), vec![removed(2, RemovalReason::Error)]);
        fc.on_error(1, None, at(3));
        assert_eq!(fc.on_idle(at(4), 6000, 0, false), 6000);
        assert!(!fc.has_required_receivers(), "below min size 1 after the error removal");
    }

    #[test]
    fn events_report_additions_and_removals_in_order() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(0));
        limit = fc.on_status_message(&sm(1, 0, WINDOW), limit, 0, at(1));
        assert_eq!(drain(&mut fc), vec![added(1), added(2)]);
        fc.on_status_message(&eos(sm(1, 0, WINDOW)), limit, 0, at(2));
        fc.on_idle(at(3000), limit, 0, false);
        let events = drain(&mut fc);
        assert_eq!(events.len(), 2);
        assert!(events.contains(&removed(1, RemovalReason::EndOfStream)));
        assert!(events.contains(&removed(2, RemovalReason::Timeout)));
        assert_eq!(fc.poll_event(), None);
    }

    #[test]
    fn tracked_receivers_report_position_window_and_time() {
        let mut fc = min(0);
        fc.on_status_message(&sm(7, 3000, WINDOW), 0, 0, at(5));
        fc.on_status_message(&sm(7, 2000, 500), 0, 0, at(9));
        let receivers = fc.receivers();
        assert_eq!(receivers.len(), 1);
        assert_eq!(receivers[0].receiver_id, 7);
        assert_eq!(receivers[0].position, 3000, "highest position reported");
        assert_eq!(receivers[0].window, 500);
        assert_eq!(receivers[0].last_status_message, at(9));
    }

    #[test]
    fn setup_hold_caps_the_group_while_a_receiver_joins() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        fc.on_trigger_send_setup(2, None, at(10));
        assert_eq!(fc.on_setup(limit, 0, at(11)), 1000);
        // Receiver 1 advances but the hold keeps the group at the limit seen at SETUP.
        limit = fc.on_status_message(&sm(1, 4000, WINDOW), limit, 0, at(100));
        assert_eq!(limit, 1000);
        assert_eq!(fc.on_idle(at(101), limit, 0, false), 1000);
        // The newcomer is admitted (that SM still saw the hold), which releases the hold.
        limit = fc.on_status_message(&sm(2, 500, WINDOW), limit, 0, at(200));
        assert_eq!(limit, 1000);
        assert_eq!(fc.on_idle(at(201), limit, 0, false), 1500);
        limit = fc.on_status_message(&sm(2, 4000, WINDOW), limit, 0, at(300));
        assert_eq!(limit, 5000);
    }

    #[test]
    fn setup_hold_expires_after_the_receiver_timeout() {
        let mut fc = min(0);
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(0));
        fc.on_trigger_send_setup(2, None, at(0));
        fc.on_setup(limit, 0, at(0));
        limit = fc.on_status_message(&sm(1, 4000, WINDOW), limit, 0, at(1999));
        assert_eq!(limit, 1000);
        assert_eq!(fc.on_idle(at(2001), limit, 0, false), 5000);
    }

    #[test]
    fn setup_without_trigger_or_without_receivers_does_not_hold() {
        let mut fc = min(0);
        fc.on_trigger_send_setup(1, None, at(0));
        fc.on_setup(0, 0, at(0));
        let mut limit = fc.on_status_message(&sm(1, 0, WINDOW), 0, 0, at(1));
        fc.on_setup(limit, 0, at(2));
        limit = fc.on_status_message(&sm(1, 3000, WINDOW), limit, 0, at(3));
        assert_eq!(limit, 4000);
    }
}
