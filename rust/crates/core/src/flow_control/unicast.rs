//! `unicast` flow control: the sender limit follows the receiver's edge (§7.2).

use std::time::Duration;

use super::max::MaxFlowControl;
use super::UNICAST_RETRANSMIT_WINDOW_MULTIPLE;

impl MaxFlowControl {
    /// The unicast strategy: `snd_lmt = max(snd_lmt, edge)` on every SM, like `max`, with the
    /// unicast retransmit clip (16 windows); no receiver tracking, never gates connection.
    /// `receiver_timeout` is only reported, never used.
    pub fn unicast(receiver_timeout: Duration) -> Self {
        MaxFlowControl { name: "unicast", retransmit_multiple: UNICAST_RETRANSMIT_WINDOW_MULTIPLE, receiver_timeout }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_control::test_support::sm;
    use crate::flow_control::FlowControl;
    use crate::time::Instant;

    #[test]
    fn unicast_limit_follows_receiver_edge_and_never_goes_back() {
        let mut fc = MaxFlowControl::unicast(Duration::from_secs(2));
        let now = Instant::ZERO;
        assert_eq!(fc.on_status_message(&sm(1, 0, 65_536), 0, 0, now), 65_536);
        assert_eq!(fc.on_status_message(&sm(1, 4096, 65_536), 65_536, 0, now), 69_632);
        assert_eq!(fc.on_status_message(&sm(1, 0, 1024), 69_632, 0, now), 69_632);
        assert_eq!(fc.on_idle(now, 69_632, 0, false), 69_632);
        assert_eq!(fc.on_setup(69_632, 0, now), 69_632);
    }

    #[test]
    fn unicast_tracks_nothing_and_is_always_connected() {
        let mut fc = MaxFlowControl::unicast(Duration::from_secs(2));
        fc.on_status_message(&sm(1, 0, 1024), 0, 0, Instant::ZERO);
        fc.on_error(1, None, Instant::ZERO);
        assert!(fc.has_required_receivers());
        assert!(fc.receivers().is_empty());
        assert_eq!(fc.poll_event(), None);
        assert_eq!(fc.group_min_size(), 0);
    }
}
