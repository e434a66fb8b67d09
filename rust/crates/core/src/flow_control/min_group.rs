//! The receiver group behind `min` and `tagged` flow control (wire-protocol.md §7.3–7.7).
//!
//! The two strategies differ only in which status messages *match* (every SM for `min`, SMs
//! carrying the group tag for `tagged`); the caller decides and passes `matches` in.

use std::collections::VecDeque;
use std::time::Duration;

use super::{FlowControlEvent, RemovalReason, StatusMessageInput, TrackedReceiver};
use crate::time::Instant;

/// One tracked receiver.
#[derive(Clone, Copy, Debug)]
struct Receiver {
    receiver_id: i64,
    group_tag: Option<i64>,
    last_position: i64,
    window: i32,
    /// `position + window` of the last SM (not of `last_position`: a receiver may move back).
    edge: i64,
    last_status_message: Instant,
    /// Set by an EOS SM or an ERR frame; the receiver is dropped at the next idle.
    leaving: Option<RemovalReason>,
}

/// The limit recorded at a SETUP emitted while a matching receiver was joining (§7.6).
#[derive(Clone, Copy, Debug)]
struct SetupHold {
    limit: i64,
    since: Instant,
}

/// Receivers, group minimum size, setup hold and pending events shared by `min` and `tagged`.
#[derive(Debug)]
pub(super) struct MinGroup {
    receivers: Vec<Receiver>,
    group_min_size: u32,
    receiver_timeout: Duration,
    has_required_receivers: bool,
    setup_hold: Option<SetupHold>,
    /// A matching SEND_SETUP SM arrived since the last SETUP.
    setup_triggered: bool,
    events: VecDeque<FlowControlEvent>,
}

impl MinGroup {
    /// An empty group; connected at once only if `group_min_size` is 0.
    pub(super) fn new(group_min_size: u32, receiver_timeout: Duration) -> Self {
        MinGroup {
            receivers: Vec::new(),
            group_min_size,
            receiver_timeout,
            has_required_receivers: group_min_size == 0,
            setup_hold: None,
            setup_triggered: false,
            events: VecDeque::new(),
        }
    }

    /// §7.3 "on SM": update or admit the sender of `sm`, return the new sender limit.
    pub(super) fn on_status_message(
        &mut self,
        sm: &StatusMessageInput,
        matches: bool,
        sender_limit: i64,
        now: Instant,
    ) -> i64 {
        let edge = sm.edge();
        let window = i64::from(sm.receiver_window);
        let mut min_edge = self.setup_hold_limit(now);
        let mut is_existing = false;
        for receiver in &mut self.receivers {
            if matches && receiver.receiver_id == sm.receiver_id {
                receiver.leaving = sm.end_of_stream.then_some(RemovalReason::EndOfStream);
                receiver.last_position = receiver.last_position.max(sm.consumption_position);
                receiver.window = sm.receiver_window;
                receiver.edge = edge;
                receiver.group_tag = sm.group_tag;
                receiver.last_status_message = now;
                is_existing = true;
            }
            min_edge = min_edge.min(receiver.edge);
        }

        // Admission: a newcomer more than one window behind the slowest edge would drag the
        // whole group back, so it waits until it has caught up.
        let admissible = self.receivers.is_empty() || edge >= min_edge.saturating_sub(window);
        if !is_existing && !sm.end_of_stream && matches && admissible {
            self.receivers.push(Receiver {
                receiver_id: sm.receiver_id,
                group_tag: sm.group_tag,
                last_position: sm.consumption_position,
                window: sm.receiver_window,
                edge,
                last_status_message: now,
                leaving: None,
            });
            min_edge = min_edge.min(edge);
            self.setup_hold = None;
            self.update_required_receivers();
            self.events
                .push_back(FlowControlEvent::ReceiverAdded { receiver_id: sm.receiver_id, group_tag: sm.group_tag });
        }

        if !self.has_enough_receivers() {
            sender_limit
        } else if self.receivers.is_empty() {
            // Only reachable with group_min_size 0 and a non-matching (or EOS) SM: behave like
            // max until a matching receiver appears (§7.4 rule 4).
            sender_limit.max(edge)
        } else {
            sender_limit.max(min_edge)
        }
    }

    /// §7.3 "on idle": drop timed-out and leaving receivers, return the new sender limit
    /// (the slowest edge, directly, so it may move down).
    pub(super) fn on_idle(&mut self, now: Instant, sender_limit: i64) -> i64 {
        let mut min_edge = self.setup_hold_limit(now);
        let timeout = self.receiver_timeout;
        let before = self.receivers.len();
        let events = &mut self.events;
        self.receivers.retain(|receiver| {
            let reason = receiver.leaving.or_else(|| {
                (now.saturating_since(receiver.last_status_message) > timeout).then_some(RemovalReason::Timeout)
            });
            match reason {
                Some(reason) => {
                    events.push_back(FlowControlEvent::ReceiverRemoved {
                        receiver_id: receiver.receiver_id,
                        group_tag: receiver.group_tag,
                        reason,
                    });
                    false
                }
                None => {
                    min_edge = min_edge.min(receiver.edge);
                    true
                }
            }
        });
        if self.receivers.len() != before {
            self.update_required_receivers();
        }

        if !self.has_enough_receivers() || self.receivers.is_empty() {
            sender_limit
        } else {
            min_edge
        }
    }

    /// A SEND_SETUP SM; `matches` as for status messages.
    pub(super) fn on_trigger_send_setup(&mut self, matches: bool) {
        self.setup_triggered |= matches;
    }

    /// A SETUP went out: if a matching receiver asked for it while others are tracked, hold
    /// the group at the current limit until the newcomer is admitted or the timeout passes.
    pub(super) fn on_setup(&mut self, sender_limit: i64, now: Instant) -> i64 {
        if self.setup_triggered && !self.receivers.is_empty() {
            self.setup_hold = Some(SetupHold { limit: sender_limit, since: now });
        }
        self.setup_triggered = false;
        sender_limit
    }

    /// An ERR frame: the receiver leaves at the next idle.
    pub(super) fn on_error(&mut self, receiver_id: i64) {
        for receiver in &mut self.receivers {
            if receiver.receiver_id == receiver_id {
                receiver.leaving = Some(RemovalReason::Error);
            }
        }
    }

    pub(super) fn has_required_receivers(&self) -> bool {
        self.has_required_receivers
    }

    pub(super) fn group_min_size(&self) -> u32 {
        self.group_min_size
    }

    pub(super) fn receiver_timeout(&self) -> Duration {
        self.receiver_timeout
    }

    pub(super) fn receiver_count(&self) -> usize {
        self.receivers.len()
    }

    pub(super) fn receivers(&self) -> Vec<TrackedReceiver> {
        self.receivers
            .iter()
            .map(|receiver| TrackedReceiver {
                receiver_id: receiver.receiver_id,
                group_tag: receiver.group_tag,
                position: receiver.last_position,
                window: receiver.window,
                last_status_message: receiver.last_status_message,
            })
            .collect()
    }

    pub(super) fn poll_event(&mut self) -> Option<FlowControlEvent> {
        self.events.pop_front()
    }

    /// The setup-hold ceiling, or `i64::MAX` when none is active (expiring it if due).
    fn setup_hold_limit(&mut self, now: Instant) -> i64 {
        match self.setup_hold {
            Some(hold) if now.saturating_since(hold.since) > self.receiver_timeout => {
                self.setup_hold = None;
                i64::MAX
            }
            Some(hold) => hold.limit,
            None => i64::MAX,
        }
    }

    fn has_enough_receivers(&self) -> bool {
        self.receivers.len() >= self.group_min_size as usize
    }

    fn update_required_receivers(&mut self) {
        self.has_required_receivers = self.has_enough_receivers();
    }
}

#[cfg(test)]
impl MinGroup {
    /// Edges of the tracked receivers, for property tests.
    fn edges(&self) -> Vec<i64> {
        self.receivers.iter().map(|receiver| receiver.edge).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One input to the group, as a random sequence element.
    #[derive(Clone, Debug)]
    enum Op {
        StatusMessage { receiver: i64, delta: i64, window: i32, matches: bool, eos: bool },
        Idle { advance_ms: u64 },
        TriggerSendSetup { matches: bool },
        Setup,
        Error { receiver: i64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..5i64, -2000..4000i64, 1..4000i32, prop::bool::weighted(0.8),
                  prop::bool::weighted(0.05))
                .prop_map(|(receiver, delta, window, matches, eos)| Op::StatusMessage {
                    receiver, delta, window, matches, eos
                }),
            3 => (0..1500u64).prop_map(|advance_ms| Op::Idle { advance_ms }),
            1 => any::<bool>().prop_map(|matches| Op::TriggerSendSetup { matches }),
            1 => Just(Op::Setup),
            1 => (0..5i64).prop_map(|receiver| Op::Error { receiver }),
        ]
    }

    fn hostile_sm() -> impl Strategy<Value = StatusMessageInput> {
        (any::<i64>(), any::<i64>(), any::<i32>(), any::<Option<i64>>(), any::<bool>()).prop_map(
            |(receiver_id, consumption_position, receiver_window, group_tag, end_of_stream)| StatusMessageInput {
                receiver_id: receiver_id % 4,
                consumption_position,
                receiver_window,
                group_tag,
                end_of_stream,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn min_limit_never_exceeds_slowest_tracked_receiver_after_idle(
            ops in prop::collection::vec(op(), 1..120),
            group_min_size in 0..3u32,
        ) {
            let mut group = MinGroup::new(group_min_size, Duration::from_secs(1));
            let mut positions = [0i64; 5];
            let mut now = Instant::ZERO;
            let mut limit = 0i64;
            for op in ops {
                now = now + Duration::from_millis(1);
                match op {
                    Op::StatusMessage { receiver, delta, window, matches, eos } => {
                        let slot = receiver as usize;
                        positions[slot] = (positions[slot] + delta).max(0);
                        let sm = StatusMessageInput {
                            receiver_id: receiver,
                            consumption_position: positions[slot],
                            receiver_window: window,
                            group_tag: None,
                            end_of_stream: eos,
                        };
                        let next = group.on_status_message(&sm, matches, limit, now);
                        prop_assert!(next >= limit, "an SM never lowers the limit");
                        let edges = group.edges();
                        if group.has_enough_receivers() && !edges.is_empty() {
                            let slowest = *edges.iter().min().unwrap();
                            prop_assert!(next <= limit.max(slowest));
                        }
                        limit = next;
                    }
                    Op::Idle { advance_ms } => {
                        now = now + Duration::from_millis(advance_ms);
                        limit = group.on_idle(now, limit);
                        let edges = group.edges();
                        if let Some(slowest) = edges.iter().min() {
                            if group.has_enough_receivers() {
                                prop_assert!(limit <= *slowest, "{limit} > slowest {slowest}");
                            }
                        }
                    }
                    Op::TriggerSendSetup { matches } => group.on_trigger_send_setup(matches),
                    Op::Setup => prop_assert_eq!(group.on_setup(limit, now), limit),
                    Op::Error { receiver } => group.on_error(receiver),
                }
                prop_assert_eq!(
                    group.has_required_receivers(),
                    group.receivers.len() >= group_min_size as usize
                );
                let mut ids: Vec<i64> = group.receivers.iter().map(|r| r.receiver_id).collect();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), group.receivers.len(), "a receiver is tracked once");
            }
        }

        #[test]
        fn hostile_inputs_never_panic_or_overflow(
            steps in prop::collection::vec(
                (hostile_sm(), any::<i64>(), any::<u64>(), any::<bool>()), 1..60),
            group_min_size in 0..3u32,
            timeout_ns in any::<u64>(),
        ) {
            let mut group = MinGroup::new(group_min_size, Duration::from_nanos(timeout_ns));
            let mut now = Instant::ZERO;
            for (sm, limit, advance, matches) in steps {
                now = now + Duration::from_nanos(advance);
                let next = group.on_status_message(&sm, matches, limit, now);
                prop_assert!(next >= limit);
                group.on_trigger_send_setup(matches);
                group.on_setup(next, now);
                group.on_idle(now, next);
            }
        }
    }
}
