//! Publishes at a slave forwarded to their master, queued while it is unreachable (or not
//! known yet), bounded in bytes, flushed in order when it is back.
//!
//! Every publish names its *origin* (the source that published it at this node). An origin
//! with publishes queued is told [`Notice::Warning`] once (its `forward_warning`), and
//! [`Notice::Cleared`] when its last one was flushed. A publish past the bound is refused
//! ([`Forwarded::Full`]: the runtime tells the origin, never a silent drop), and so is every
//! later publish of that origin until the queue makes room (a flush), so what an origin had
//! refused is always the tail of what it published: it stops (back-pressure) and publishes
//! that tail again once told [`Notice::Warning`] or [`Notice::Cleared`].

use std::collections::{HashMap, HashSet, VecDeque};

/// What became of a publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// Handed to the master's link at once.
    Sent,
    /// Queued for the master (unreachable or unknown): the source is told `FORWARD_WARNING`.
    Queued,
    /// Not taken: the queue holds its bound already (or the origin is blocked since its last
    /// refusal); the source must retry (back-pressure, never a silent drop).
    Full,
}

/// What an origin must be told (its publishes' state changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Its publishes are queued (first one queued, or room again after a refusal while some
    /// are still queued): `FORWARD_WARNING`.
    Warning,
    /// None of its publishes is queued any more (flushed; or room again after a refusal).
    Cleared,
}

/// The key of a queue: a master node (its index), or a domain without a master yet (its name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueueKey {
    /// A known master node.
    Node(usize),
    /// A domain no master is configured for yet.
    Domain(String),
}

/// Counters of the forward queues since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardCounters {
    /// Publishes handed to a master's link at once.
    pub sent: u64,
    /// Publishes queued.
    pub queued: u64,
    /// Queued publishes flushed to their master.
    pub flushed: u64,
    /// Publishes refused (back-pressure).
    pub refused: u64,
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

/// Queues of publishes per master under one bound each.
pub struct ForwardQueues {
    bound: usize,
    queues: HashMap<QueueKey, Queue>,
    /// Per origin: its publishes queued (an origin is here only while it has some).
    origins: HashMap<u64, usize>,
    /// Origins refused since the last flush (each is told once room is made).
    blocked: HashSet<u64>,
    notices: Vec<(u64, Notice)>,
    counters: ForwardCounters,
}

impl ForwardQueues {
    /// Queues of at most `bound` bytes each.
    pub fn new(bound: usize) -> ForwardQueues {
        ForwardQueues {
            bound,
            queues: HashMap::new(),
            origins: HashMap::new(),
            blocked: HashSet::new(),
            notices: Vec::new(),
            counters: ForwardCounters::default(),
        }
    }

    /// A publish (`record`, encoded) of `origin` for `key`: sent when `reachable` and nothing
    /// is queued before it (order is kept), else queued within the bound, else refused (and
    /// every later publish of `origin` until a flush makes room).
    pub fn publish(
        &mut self,
        key: QueueKey,
        origin: u64,
        record: &[u8],
        reachable: bool,
        mut send: impl FnMut(&[u8]),
    ) -> Forwarded {
        if self.blocked.contains(&origin) {
            self.counters.refused += 1;
            return Forwarded::Full;
        }
        let queued = self.queues.get(&key).is_some_and(|queue| !queue.entries.is_empty());
        if reachable && !queued {
            send(record);
            self.counters.sent += 1;
            return Forwarded::Sent;
        }
        let queue = self.queues.entry(key).or_default();
        if queue.bytes + record.len() > self.bound {
            // An origin id is one of the router's sources: as many as it tracks, no more.
            self.blocked.insert(origin);
            self.counters.refused += 1;
            return Forwarded::Full;
        }
        queue.bytes += record.len();
        queue.entries.push_back((origin, record.to_vec()));
        self.counters.queued += 1;
        let count = self.origins.entry(origin).or_default();
        *count += 1;
        if *count == 1 {
            self.notices.push((origin, Notice::Warning));
        }
        Forwarded::Queued
    }

    /// A publish of `origin` for every master of a domain (mirrored masters): `targets` are
    /// `(key, reachable)`, one per master. Each is sent (`send(index, record)`) or queued as
    /// [`ForwardQueues::publish`] would; but when the origin is blocked, or any target that
    /// would queue it has no room, it is refused for all of them (counted once), so what an
    /// origin had refused is the same tail at every master and publishing it again duplicates
    /// nothing. The answer has one [`Forwarded`] per target.
    pub fn publish_all(
        &mut self,
        targets: &[(QueueKey, bool)],
        origin: u64,
        record: &[u8],
        mut send: impl FnMut(usize, &[u8]),
    ) -> Vec<Forwarded> {
        let refused = self.blocked.contains(&origin)
            || targets.iter().any(|(key, reachable)| {
                let queue = self.queues.get(key);
                let queued = queue.is_some_and(|queue| !queue.entries.is_empty());
                let bytes = queue.map_or(0, |queue| queue.bytes);
                (queued || !*reachable) && bytes + record.len() > self.bound
            });
        if refused {
            self.blocked.insert(origin);
            self.counters.refused += 1;
            return vec![Forwarded::Full; targets.len()];
        }
        targets
            .iter()
            .enumerate()
            .map(|(index, (key, reachable))| {
                self.publish(key.clone(), origin, record, *reachable, |bytes| send(index, bytes))
            })
            .collect()
    }

    /// The master behind `key` is reachable: hands every queued publish to `send`, in order,
    /// while it accepts (`send` returns `false` to stop); returns how many went.
    pub fn flush(&mut self, key: &QueueKey, mut send: impl FnMut(&[u8]) -> bool) -> usize {
        let Some(queue) = self.queues.get_mut(key) else { return 0 };
        let mut sent = 0;
        while let Some((origin, record)) = queue.entries.front() {
            if !send(record) {
                break;
            }
            let origin = *origin;
            queue.bytes -= record.len();
            queue.entries.pop_front();
            sent += 1;
            if let Some(count) = self.origins.get_mut(&origin) {
                *count -= 1;
                if *count == 0 {
                    self.origins.remove(&origin);
                    self.blocked.remove(&origin);
                    self.notices.push((origin, Notice::Cleared));
                }
            }
        }
        if queue.entries.is_empty() {
            self.queues.remove(key);
        }
        self.counters.flushed += sent as u64;
        if sent > 0 {
            for origin in std::mem::take(&mut self.blocked) {
                let notice = if self.origins.contains_key(&origin) { Notice::Warning } else { Notice::Cleared };
                self.notices.push((origin, notice));
            }
        }
        sent
    }

    /// A domain got a master: its queue moves to that master's (behind what is there).
    pub fn assign(&mut self, domain: &str, master: usize) {
        let Some(moved) = self.queues.remove(&QueueKey::Domain(domain.to_owned())) else { return };
        let queue = self.queues.entry(QueueKey::Node(master)).or_default();
        queue.entries.extend(moved.entries);
        queue.bytes += moved.bytes;
    }

    /// Bytes queued for `key`.
    pub fn queued_bytes(&self, key: &QueueKey) -> usize {
        self.queues.get(key).map_or(0, |queue| queue.bytes)
    }

    /// Publishes queued for `key`.
    pub fn queued_count(&self, key: &QueueKey) -> usize {
        self.queues.get(key).map_or(0, |queue| queue.entries.len())
    }

    /// Whether anything is queued for `key`.
    pub fn is_queued(&self, key: &QueueKey) -> bool {
        self.queued_count(key) > 0
    }

    /// Whether `origin` has publishes queued (its `forward_warning`).
    pub fn is_warned(&self, origin: u64) -> bool {
        self.origins.contains_key(&origin)
    }

    /// What origins must be told since the last call, in order.
    pub fn take_notices(&mut self) -> Vec<(u64, Notice)> {
        std::mem::take(&mut self.notices)
    }

    /// The counters since start.
    pub fn counters(&self) -> ForwardCounters {
        self.counters
    }

    /// Publishes queued since start, and refused because a queue was full.
    pub fn totals(&self) -> (u64, u64) {
        (self.counters.queued, self.counters.refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: u64 = 7;
    const OTHER: u64 = 8;

    fn accept(wire: &mut Vec<Vec<u8>>) -> impl FnMut(&[u8]) -> bool + '_ {
        |record| {
            wire.push(record.to_vec());
            true
        }
    }

    #[test]
    fn an_origin_is_warned_once_while_queued_and_cleared_when_its_last_publish_is_flushed() {
        let mut queues = ForwardQueues::new(100);
        let golan = QueueKey::Node(1);
        let mut wire = Vec::new();
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"a", true, |r| wire.push(r.to_vec())), Forwarded::Sent);
        assert!(queues.take_notices().is_empty(), "sent at once: nothing to tell");
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"x", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning), (OTHER, Notice::Warning)], "once each");
        assert!(queues.is_warned(SOURCE) && queues.is_warned(OTHER));
        // Only the first two go: SOURCE is cleared, OTHER still waits.
        let mut budget = 2;
        let sent = queues.flush(&golan, |r| {
            budget -= 1;
            if budget >= 0 {
                wire.push(r.to_vec());
            }
            budget >= 0
        });
        assert_eq!(sent, 2);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)]);
        assert!(!queues.is_warned(SOURCE) && queues.is_warned(OTHER));
        assert_eq!(queues.flush(&golan, accept(&mut wire)), 1);
        assert_eq!(queues.take_notices(), [(OTHER, Notice::Cleared)]);
        assert_eq!(wire, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"x".to_vec()], "in order, once");
        assert_eq!(queues.counters(), ForwardCounters { sent: 1, queued: 3, flushed: 3, refused: 0 });
    }

    #[test]
    fn past_the_bound_an_origin_is_refused_until_a_flush_makes_room_so_its_refusals_are_a_tail() {
        let mut queues = ForwardQueues::new(6);
        let golan = QueueKey::Node(1);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"aaa", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"bbbb", false, |_| {}), Forwarded::Full);
        // "c" would fit (3 + 1 <= 6) but SOURCE is blocked: its refusals stay a tail.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", false, |_| {}), Forwarded::Full);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"xyz", false, |_| {}), Forwarded::Queued, "others fit");
        assert_eq!(queues.queued_bytes(&golan), 6);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning), (OTHER, Notice::Warning)]);
        let mut wire = Vec::new();
        assert_eq!(queues.flush(&golan, accept(&mut wire)), 2);
        let mut notices = queues.take_notices();
        notices.sort_by_key(|&(origin, _)| origin);
        assert_eq!(notices, [(SOURCE, Notice::Cleared), (OTHER, Notice::Cleared)]);
        // Room again: SOURCE publishes its refused tail, in order.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"bbbb", true, |r| wire.push(r.to_vec())), Forwarded::Sent);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", true, |r| wire.push(r.to_vec())), Forwarded::Sent);
        assert_eq!(wire, [b"aaa".to_vec(), b"xyz".to_vec(), b"bbbb".to_vec(), b"c".to_vec()]);
        assert_eq!(queues.counters().refused, 2);
    }

    #[test]
    fn a_publish_for_mirrored_masters_goes_to_every_one_or_is_refused_for_all() {
        let mut queues = ForwardQueues::new(4);
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let mut wire: Vec<(usize, Vec<u8>)> = Vec::new();
        let both = [(heron.clone(), true), (golan.clone(), false)];
        let outcome = queues.publish_all(&both, SOURCE, b"aa", |index, r| wire.push((index, r.to_vec())));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Queued], "sent to the live one, queued for the other");
        assert_eq!(wire, [(0, b"aa".to_vec())]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        // golan's queue has room for 2 more bytes: "bbb" would fit heron (live) but not golan.
        let outcome = queues.publish_all(&both, SOURCE, b"bbb", |index, r| wire.push((index, r.to_vec())));
        assert_eq!(outcome, [Forwarded::Full, Forwarded::Full], "refused for both, sent to neither");
        assert_eq!(wire.len(), 1);
        assert_eq!(queues.counters().refused, 1);
        let outcome = queues.publish_all(&both, SOURCE, b"c", |_, _| {});
        assert_eq!(outcome, [Forwarded::Full, Forwarded::Full], "blocked until a flush makes room");
        let mut flushed = Vec::new();
        assert_eq!(queues.flush(&golan, accept(&mut flushed)), 1);
        let outcome = queues.publish_all(&both, SOURCE, b"bbb", |index, r| wire.push((index, r.to_vec())));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Queued], "the refused tail goes again");
        assert_eq!(queues.counters(), ForwardCounters { sent: 2, queued: 2, flushed: 1, refused: 2 });
    }

    #[test]
    fn a_blocked_origin_with_publishes_still_queued_is_warned_when_room_is_made() {
        let mut queues = ForwardQueues::new(4);
        let golan = QueueKey::Node(1);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"xx", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"aa", false, |_| {}), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| {}), Forwarded::Full);
        queues.take_notices();
        let mut once = true;
        assert_eq!(queues.flush(&golan, |_| std::mem::take(&mut once)), 1, "only OTHER's went");
        assert_eq!(queues.take_notices(), [(OTHER, Notice::Cleared), (SOURCE, Notice::Warning)]);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| {}), Forwarded::Queued, "unblocked");
    }
}
