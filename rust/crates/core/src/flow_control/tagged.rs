//! `tagged` flow control: `min` over the receivers whose SMs carry the group tag (§7.4).

use std::time::Duration;

use super::min::MinFlowControl;
use super::min_group::MinGroup;

impl MinFlowControl {
    /// A `tagged` strategy for `group_tag`, waiting for `group_min_size` tagged receivers.
    ///
    /// Only status messages carrying `group_tag` add or update receivers; untagged (or
    /// differently tagged) receivers never hold the sender back. While no receiver is tracked
    /// and `group_min_size` is 0, a non-matching SM still raises the limit to its edge
    /// (max-like behaviour until a tagged receiver appears).
    pub fn tagged(group_tag: i64, group_min_size: u32, receiver_timeout: Duration) -> Self {
        MinFlowControl { group: MinGroup::new(group_min_size, receiver_timeout), required_tag: Some(group_tag) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_control::test_support::{at, eos, sm, tagged_sm, tracked};
    use crate::flow_control::{FlowControl, FlowControlEvent, RemovalReason};

    const TAG: i64 = 1001;
    const WINDOW: i32 = 1000;

    fn tagged(group_min_size: u32) -> MinFlowControl {
        MinFlowControl::tagged(TAG, group_min_size, Duration::from_secs(2))
    }

    #[test]
    fn tagged_ignores_untagged_receivers_which_never_hold_back() {
        let mut fc = tagged(0);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 5000, WINDOW), 0, 0, at(0));
        assert_eq!(limit, 6000);
        // A slow untagged receiver and a slow receiver with another tag: not tracked.
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(1));
        limit = fc.on_status_message(&tagged_sm(3, 7, 0, WINDOW), limit, 0, at(2));
        assert_eq!(limit, 6000);
        assert_eq!(fc.on_idle(at(3), limit, 0, false), 6000);
        let ids: Vec<i64> = fc.receivers().iter().map(|r| r.receiver_id).collect();
        assert_eq!(ids, vec![1]);
        assert_eq!(fc.receivers()[0].group_tag, Some(TAG));
        // The tagged receiver advances: the limit follows it alone.
        limit = fc.on_status_message(&tagged_sm(1, TAG, 9000, WINDOW), limit, 0, at(100));
        assert_eq!(limit, 10_000);
    }

    #[test]
    fn slow_tagged_receiver_holds_the_group() {
        let mut fc = tagged(0);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 5000, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(2, TAG, 4200, WINDOW), limit, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(1, TAG, 9000, WINDOW), limit, 0, at(100));
        assert_eq!(limit, 6000);
        assert_eq!(fc.on_idle(at(101), limit, 0, false), 5200);
    }

    #[test]
    fn untagged_status_message_raises_limit_while_no_tagged_receiver_is_tracked() {
        let mut fc = tagged(0);
        let limit = fc.on_status_message(&sm(2, 3000, WINDOW), 0, 0, at(0));
        assert_eq!(limit, 4000, "rule 4: max-like until a tagged receiver appears");
        assert!(fc.receivers().is_empty());
        assert_eq!(fc.on_idle(at(1), limit, 0, false), limit);
    }

    #[test]
    fn untagged_status_message_does_not_raise_limit_below_group_min_size() {
        let mut fc = tagged(1);
        assert_eq!(fc.on_status_message(&sm(2, 3000, WINDOW), 0, 0, at(0)), 0);
        assert!(!fc.has_required_receivers());
    }

    #[test]
    fn group_min_size_counts_only_tagged_receivers() {
        let mut fc = tagged(2);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&sm(2, 0, WINDOW), limit, 0, at(1));
        assert_eq!(limit, 0);
        assert!(!fc.has_required_receivers());
        limit = fc.on_status_message(&tagged_sm(3, TAG, 0, WINDOW), limit, 0, at(2));
        assert_eq!(limit, 1000);
        assert!(fc.has_required_receivers());
        // Receiver 3 times out: not connected again, then a new tagged receiver restores it.
        limit = fc.on_status_message(&tagged_sm(1, TAG, 100, WINDOW), limit, 0, at(1500));
        assert_eq!(fc.on_idle(at(2003), limit, 0, false), limit);
        assert!(!fc.has_required_receivers());
        fc.on_status_message(&tagged_sm(4, TAG, 100, WINDOW), limit, 0, at(2100));
        assert!(fc.has_required_receivers());
    }

    #[test]
    fn receiver_switching_to_untagged_status_messages_times_out() {
        let mut fc = tagged(0);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(2, TAG, 0, WINDOW), limit, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(1, TAG, 5000, WINDOW), limit, 0, at(1500));
        // Receiver 2 keeps reporting, but without its tag: those SMs do not refresh it.
        limit = fc.on_status_message(&sm(2, 5000, WINDOW), limit, 0, at(1600));
        assert_eq!(limit, 1000);
        assert_eq!(fc.on_idle(at(2001), limit, 0, false), 6000);
        assert_eq!(tracked(&fc), 1);
    }

    #[test]
    fn tagged_eos_and_error_remove_receivers_with_reasons() {
        let mut fc = tagged(0);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 0, WINDOW), 0, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(2, TAG, 0, WINDOW), limit, 0, at(0));
        limit = fc.on_status_message(&tagged_sm(3, TAG, 0, WINDOW), limit, 0, at(0));
        // An untagged EOS from receiver 1 is not a matching SM: ignored.
        fc.on_status_message(&eos(sm(1, 0, WINDOW)), limit, 0, at(1));
        fc.on_status_message(&eos(tagged_sm(2, TAG, 0, WINDOW)), limit, 0, at(1));
        fc.on_error(3, Some(TAG), at(1));
        let events: Vec<_> = std::iter::from_fn(|| fc.poll_event()).collect();
        assert_eq!(events.len(), 3, "three additions");
        fc.on_idle(at(2), limit, 0, false);
        let events: Vec<_> = std::iter::from_fn(|| fc.poll_event()).collect();
        assert_eq!(events.len(), 2);
        for (id, reason) in [(2, RemovalReason::EndOfStream), (3, RemovalReason::Error)] {
            let event = FlowControlEvent::ReceiverRemoved { receiver_id: id, group_tag: Some(TAG), reason };
            assert!(events.contains(&event), "{event:?} in {events:?}");
        }
        assert_eq!(tracked(&fc), 1);
    }

    #[test]
    fn only_matching_send_setup_arms_the_setup_hold() {
        let mut fc = tagged(0);
        let mut limit = fc.on_status_message(&tagged_sm(1, TAG, 0, WINDOW), 0, 0, at(0));
        fc.on_trigger_send_setup(2, None, at(1));
        fc.on_trigger_send_setup(3, Some(7), at(1));
        fc.on_setup(limit, 0, at(2));
        limit = fc.on_status_message(&tagged_sm(1, TAG, 3000, WINDOW), limit, 0, at(3));
        assert_eq!(limit, 4000, "no hold for untagged joiners");

        fc.on_trigger_send_setup(4, Some(TAG), at(4));
        fc.on_setup(limit, 0, at(5));
        limit = fc.on_status_message(&tagged_sm(1, TAG, 8000, WINDOW), limit, 0, at(6));
        assert_eq!(limit, 4000, "hold while the tagged joiner connects");
        limit = fc.on_status_message(&tagged_sm(4, TAG, 8000, WINDOW), limit, 0, at(7));
        assert_eq!(limit, 4000, "admitted in the SM that still saw the hold");
        limit = fc.on_status_message(&tagged_sm(1, TAG, 8000, WINDOW), limit, 0, at(8));
        assert_eq!(limit, 9000, "hold released once the joiner is admitted");
    }

    #[test]
    fn tagged_reports_its_configuration() {
        let fc = MinFlowControl::tagged(-1, 3, Duration::from_millis(500));
        assert_eq!(fc.strategy_name(), "tagged");
        assert_eq!(fc.group_tag(), Some(-1));
        assert_eq!(fc.group_min_size(), 3);
        assert_eq!(fc.receiver_timeout(), Duration::from_millis(500));
        assert!(!fc.has_required_receivers());
    }
}
