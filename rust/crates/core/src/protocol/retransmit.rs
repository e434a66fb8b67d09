//! Retransmission of NAKed ranges on the sending side, with duplicate-NAK suppression.
//!
//! A NAK opens an action for `(term_id, term_offset, length)`. The action waits `delay`
//! (zero by default), is handed out once for resending, then lingers for `linger` during which
//! NAKs that fall inside it are ignored: many receivers NAKing the same gap on a multicast
//! channel cause one resend.

use std::time::Duration;

use crate::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ActionState {
    Delayed { until: Instant },
    Lingering { until: Instant },
}

#[derive(Clone, Copy, Debug)]
struct Action {
    term_id: i32,
    term_offset: i32,
    length: usize,
    state: ActionState,
}

impl Action {
    /// Whether `[term_offset, term_offset + length)` of `term_id` overlaps this action's range.
    fn overlaps(&self, term_id: i32, term_offset: i32, length: usize) -> bool {
        let (start, end) = (i64::from(term_offset), i64::from(term_offset).saturating_add(length as i64));
        let (own_start, own_end) = (i64::from(self.term_offset), i64::from(self.term_offset) + self.length as i64);
        self.term_id == term_id && start < own_end && own_start < end
    }
}

/// A range to resend now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResendRange {
    /// Term of the range.
    pub term_id: i32,
    /// Start of the range within the term.
    pub term_offset: i32,
    /// Bytes to resend.
    pub length: usize,
}

/// Tracks retransmit actions of one publication.
#[derive(Debug)]
pub struct RetransmitHandler {
    actions: Vec<Action>,
    max_actions: usize,
    delay: Duration,
    linger: Duration,
    overflows: u64,
}

impl RetransmitHandler {
    /// A handler keeping at most `max_actions` concurrent actions (`max-resend`).
    pub fn new(max_actions: usize, delay: Duration, linger: Duration) -> Self {
        RetransmitHandler { actions: Vec::new(), max_actions: max_actions.max(1), delay, linger, overflows: 0 }
    }

    /// A NAK arrived. Returns whether it opened a new action.
    ///
    /// A NAK overlapping a delayed or lingering action is ignored (each range is resent at
    /// most once per delay + linger, however many NAKs ask for it); with `max_actions` active,
    /// further NAKs are ignored and counted, never replace an action.
    pub fn on_nak(&mut self, term_id: i32, term_offset: i32, length: usize, now: Instant) -> bool {
        self.expire(now);
        if length == 0 || self.actions.iter().any(|action| action.overlaps(term_id, term_offset, length)) {
            return false;
        }
        if self.actions.len() >= self.max_actions {
            self.overflows += 1;
            return false;
        }
        let state = ActionState::Delayed { until: now + self.delay };
        self.actions.push(Action { term_id, term_offset, length, state });
        true
    }

    /// The next range whose delay has passed; the action then lingers.
    pub fn poll_due(&mut self, now: Instant) -> Option<ResendRange> {
        for action in &mut self.actions {
            if let ActionState::Delayed { until } = action.state {
                if now >= until {
                    action.state = ActionState::Lingering { until: now + self.linger };
                    return Some(ResendRange {
                        term_id: action.term_id,
                        term_offset: action.term_offset,
                        length: action.length,
                    });
                }
            }
        }
        None
    }

    /// Drops actions whose linger has ended.
    pub fn expire(&mut self, now: Instant) {
        self.actions.retain(|action| match action.state {
            ActionState::Lingering { until } => now < until,
            ActionState::Delayed { .. } => true,
        });
    }

    /// NAKs dropped because `max_actions` were already active.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Instant {
        Instant::from_nanos(value * 1_000_000)
    }

    #[test]
    fn duplicate_naks_within_linger_are_ignored() {
        let mut handler = RetransmitHandler::new(16, Duration::ZERO, Duration::from_millis(10));
        assert!(handler.on_nak(5, 1024, 512, ms(0)));
        assert!(handler.poll_due(ms(0)).is_some());
        assert!(!handler.on_nak(5, 1024, 512, ms(9)));
        assert!(!handler.on_nak(5, 1056, 32, ms(9)));
        assert!(handler.poll_due(ms(9)).is_none());
        assert!(handler.on_nak(5, 1024, 512, ms(11)));
        assert_eq!(handler.poll_due(ms(11)).map(|r| r.length), Some(512));
    }

    #[test]
    fn multicast_actions_overflow_is_counted() {
        let mut handler = RetransmitHandler::new(2, Duration::ZERO, Duration::from_millis(10));
        assert!(handler.on_nak(1, 0, 32, ms(0)));
        assert!(handler.on_nak(1, 64, 32, ms(0)));
        assert!(!handler.on_nak(1, 128, 32, ms(0)));
        assert_eq!(handler.overflows(), 1);
    }

    #[test]
    fn a_full_handler_ignores_new_ranges_until_an_action_expires() {
        let mut handler = RetransmitHandler::new(1, Duration::ZERO, Duration::from_millis(10));
        assert!(handler.on_nak(1, 0, 32, ms(0)));
        handler.poll_due(ms(0));
        assert!(!handler.on_nak(1, 64, 32, ms(1)), "a new range must not replace a lingering action");
        assert_eq!(handler.overflows(), 1);
        assert!(handler.on_nak(1, 64, 32, ms(10)));
        assert_eq!(handler.poll_due(ms(10)).map(|r| r.term_offset), Some(64));
    }

    #[test]
    fn a_nak_overlapping_an_action_from_below_is_ignored() {
        let mut handler = RetransmitHandler::new(16, Duration::ZERO, Duration::from_millis(10));
        assert!(handler.on_nak(1, 1024, 512, ms(0)));
        assert!(!handler.on_nak(1, 0, 1056, ms(1)));
        assert!(handler.on_nak(1, 0, 1024, ms(1)), "adjacent, not overlapping");
    }

    #[test]
    fn delayed_actions_wait_for_their_time() {
        let mut handler = RetransmitHandler::new(4, Duration::from_millis(5), Duration::from_millis(10));
        handler.on_nak(1, 0, 32, ms(0));
        assert!(handler.poll_due(ms(4)).is_none());
        assert!(handler.poll_due(ms(5)).is_some());
    }
}
