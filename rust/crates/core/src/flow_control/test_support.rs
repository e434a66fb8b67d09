//! Builders shared by the strategy tests: status messages and a millisecond fake clock.

use super::StatusMessageInput;
use crate::time::Instant;

/// An untagged, non-EOS status message.
pub(super) fn sm(receiver_id: i64, position: i64, window: i32) -> StatusMessageInput {
    StatusMessageInput {
        receiver_id,
        consumption_position: position,
        receiver_window: window,
        group_tag: None,
        end_of_stream: false,
    }
}

/// A status message carrying `tag`.
pub(super) fn tagged_sm(receiver_id: i64, tag: i64, position: i64, window: i32) -> StatusMessageInput {
    StatusMessageInput { group_tag: Some(tag), ..sm(receiver_id, position, window) }
}

/// The same status message with the EOS flag.
pub(super) fn eos(sm: StatusMessageInput) -> StatusMessageInput {
    StatusMessageInput { end_of_stream: true, ..sm }
}

/// `millis` milliseconds after the fake epoch.
pub(super) fn at(millis: u64) -> Instant {
    Instant::from_nanos(millis * 1_000_000)
}

/// How many receivers `fc` tracks, after checking its cheap count agrees with its list.
pub(super) fn tracked(fc: &dyn super::FlowControl) -> usize {
    assert_eq!(fc.receiver_count(), fc.receivers().len(), "receiver_count and receivers() disagree");
    fc.receiver_count()
}
