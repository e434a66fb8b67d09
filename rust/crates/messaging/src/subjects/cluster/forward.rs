//! Publishes at a slave forwarded to their master, queued while it is unreachable (or not
//! known yet), bounded in bytes, flushed in order when it is back.
//!
//! Every publish names its *origin* (the source that published it at this node). An origin
//! with publishes queued is told [`Notice::Warning`] once (its `forward_warning`), and
//! [`Notice::Cleared`] when its last one was flushed. A publish is sent only when the link
//! takes it (`send` returns `true`); one the link does not take (full) is queued as for an
//! unreachable master. A publish past the bound is refused ([`Forwarded::Full`]: the runtime
//! tells the origin, never a silent drop), and so is every later publish of that origin *for
//! that queue* until the queue makes room (a flush, its domain getting masters, its queue
//! dropped), so what an origin had refused is always the tail of what it published for that
//! master (or domain without one): it stops (back-pressure) and publishes that tail again once
//! told [`Notice::Warning`] or [`Notice::Cleared`]. Its publishes for other queues are not
//! refused for it: a domain without a master never blocks an origin's other domains.
//!
//! Mirrored masters ([`ForwardQueues::publish_all`]): a master that is unreachable while
//! another master of the domain is reachable does not back-pressure the source. When its queue
//! would pass the bound, that queue is dropped (counted in `dropped`) and the master is marked
//! *stale*: publishes for it are dropped (counted) instead of queued until it is reachable
//! again, when it gets the publishes made from then on ([`QueueEvent`] says when either
//! happens, once each). While no master of the domain is reachable, the bound back-pressures
//! the source as for one master: nothing is dropped that no master got. At a master forwarding
//! its own publishes to the other masters (`taken_here`), this node got each one, so any other
//! master past its bound is dropped and stale and the source is never refused.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::subjects::codec::SubjectRecord;

/// Most `(origin, subject)` pairs remembered per stale master, to ask for fresh images when it
/// is back ([`QueueEvent::Back`]); past it the rest are only counted (`unlisted`).
pub const MAX_RESYNC_SUBJECTS: usize = 4096;

/// What became of a publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// Handed to the master's link at once (the link took it).
    Sent,
    /// Queued for the master (unreachable, unknown, or its link full): the source is told
    /// `FORWARD_WARNING`.
    Queued,
    /// Not taken: the queue holds its bound already (or the origin is blocked for that queue
    /// since its last refusal there); the source must retry (back-pressure, never a silent drop).
    Full,
    /// Not sent to this master, which is stale (its queue was dropped while another master of
    /// the domain took the publish): counted in `dropped`.
    Dropped,
}

/// A change of a master's queue the runtime reports (logged once per outage).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueEvent {
    /// The queue for this unreachable master was dropped (`publishes` in it) because it would
    /// pass the bound while another master of the domain was reachable: the master is stale.
    Dropped {
        /// The master whose queue was dropped.
        key: QueueKey,
        /// Publishes the dropped queue held.
        publishes: u64,
    },
    /// A stale master is reachable again: it gets the publishes made from now on; `missed`
    /// publishes (the dropped queue and every publish while stale) never reach it. `resync`
    /// names, per origin, the subjects it missed publishes of (at most
    /// [`MAX_RESYNC_SUBJECTS`], in the order first missed): their sources are asked for a
    /// fresh image; `unlisted` more pairs were past that bound.
    Back {
        /// The master reachable again.
        key: QueueKey,
        /// Publishes it missed since its queue was dropped.
        missed: u64,
        /// `(origin, subject)` pairs it missed publishes of.
        resync: Vec<(u64, String)>,
        /// Pairs past [`MAX_RESYNC_SUBJECTS`], not listed.
        unlisted: u64,
    },
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
    /// Publishes dropped for a stale mirrored master (another master of the domain took them).
    pub dropped: u64,
}

/// What a stale master missed: publishes, and which origin's subjects (bounded).
#[derive(Default)]
struct Missed {
    publishes: u64,
    pairs: Vec<(u64, String)>,
    seen: HashSet<(u64, String)>,
    unlisted: u64,
}

impl Missed {
    fn add(&mut self, record: &[u8]) {
        self.publishes += 1;
        // Records here are the runtime's own encodings: one that does not parse names nothing.
        let Ok((record, _)) = SubjectRecord::parse(record) else { return };
        let pair = (record.sender, record.subject.to_owned());
        if self.seen.contains(&pair) {
            return;
        }
        if self.pairs.len() >= MAX_RESYNC_SUBJECTS {
            self.unlisted += 1;
            return;
        }
        self.seen.insert(pair.clone());
        self.pairs.push(pair);
    }
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
    /// Per queue, the origins refused for it since it last made room (each is told once it
    /// does); an origin blocked for one queue is not for the others.
    blocked: HashMap<QueueKey, HashSet<u64>>,
    notices: Vec<(u64, Notice)>,
    counters: ForwardCounters,
    /// The same counters per master node (by index: configured nodes, bounded) and per domain
    /// without a master (bounded by the domains and the mapper's names).
    per_node: Vec<ForwardCounters>,
    per_domain: HashMap<String, ForwardCounters>,
    /// Stale masters: what each missed since its queue was dropped.
    stale: HashMap<QueueKey, Missed>,
    events: Vec<QueueEvent>,
}

impl ForwardQueues {
    /// Queues of at most `bound` bytes each.
    pub fn new(bound: usize) -> ForwardQueues {
        ForwardQueues {
            bound,
            queues: HashMap::new(),
            origins: HashMap::new(),
            blocked: HashMap::new(),
            notices: Vec::new(),
            counters: ForwardCounters::default(),
            per_node: Vec::new(),
            per_domain: HashMap::new(),
            stale: HashMap::new(),
            events: Vec::new(),
        }
    }

    fn count<F: Fn(&mut ForwardCounters) -> &mut u64>(&mut self, key: &QueueKey, field: F, by: u64) {
        *field(&mut self.counters) += by;
        *field(self.counters_mut(key)) += by;
    }

    /// `key`'s counters (a node index is one of the configured nodes: the vector stays small).
    fn counters_mut(&mut self, key: &QueueKey) -> &mut ForwardCounters {
        match key {
            QueueKey::Node(index) => {
                if self.per_node.len() <= *index {
                    self.per_node.resize(index + 1, ForwardCounters::default());
                }
                &mut self.per_node[*index]
            }
            QueueKey::Domain(domain) => self.per_domain.entry(domain.clone()).or_default(),
        }
    }

    /// Whether `origin` was refused for `key` since its queue last made room.
    fn is_blocked(&self, origin: u64, key: &QueueKey) -> bool {
        self.blocked.get(key).is_some_and(|origins| origins.contains(&origin))
    }

    /// A publish (`record`, encoded) of `origin` for `key`: sent when `reachable`, nothing is
    /// queued before it (order is kept) and the link takes it (`send` returns `false` when it
    /// is full), else queued within the bound, else refused (and every later publish of
    /// `origin` for `key` until its queue makes room).
    pub fn publish(
        &mut self,
        key: QueueKey,
        origin: u64,
        record: &[u8],
        reachable: bool,
        send: impl FnMut(&[u8]) -> bool,
    ) -> Forwarded {
        if self.is_blocked(origin, &key) {
            self.count(&key, |c| &mut c.refused, 1);
            return Forwarded::Full;
        }
        self.enqueue(key, origin, record, reachable, send)
    }

    /// [`ForwardQueues::publish`] for an origin that is not blocked: sent, queued, or refused
    /// past the bound.
    fn enqueue(
        &mut self,
        key: QueueKey,
        origin: u64,
        record: &[u8],
        reachable: bool,
        mut send: impl FnMut(&[u8]) -> bool,
    ) -> Forwarded {
        if reachable {
            self.back(&key);
        }
        let queued = self.queues.get(&key).is_some_and(|queue| !queue.entries.is_empty());
        // A link that is full did not take it: queued (or refused) as for an unreachable master.
        if reachable && !queued && send(record) {
            self.count(&key, |c| &mut c.sent, 1);
            return Forwarded::Sent;
        }
        let queue = self.queues.entry(key.clone()).or_default();
        if queue.bytes + record.len() > self.bound {
            // An origin id is one of the router's sources and a key one of the configured nodes
            // or a domain: as many as those, no more.
            self.count(&key, |c| &mut c.refused, 1);
            self.blocked.entry(key).or_default().insert(origin);
            return Forwarded::Full;
        }
        queue.bytes += record.len();
        queue.entries.push_back((origin, record.to_vec()));
        self.count(&key, |c| &mut c.queued, 1);
        let count = self.origins.entry(origin).or_default();
        *count += 1;
        if *count == 1 {
            self.notices.push((origin, Notice::Warning));
        }
        Forwarded::Queued
    }

    /// A publish of `origin` for every master of a domain (mirrored masters): `targets` are
    /// `(key, reachable)`, one per master. Each is sent (`send(index, record)`, `false` when
    /// that master's link is full) or queued as [`ForwardQueues::publish`] would, with two
    /// exceptions:
    ///
    /// * a target that is not reachable, whose queue would pass the bound, while another target
    ///   is reachable: its queue is dropped and it is marked stale ([`QueueEvent::Dropped`]);
    ///   a stale target that is not reachable gets [`Forwarded::Dropped`] (counted), so a dead
    ///   mirror never back-pressures the source while another master takes its publishes;
    /// * when any other target that would queue it has no room, or the origin is blocked for
    ///   it (every master unreachable, or a reachable one still flushing), it is refused for
    ///   all of them (counted once; blocked for those without room), so what an origin had
    ///   refused is the same tail at every master and publishing it again duplicates nothing.
    ///
    /// A stale target that is reachable again is no longer stale ([`QueueEvent::Back`]). When
    /// every target is stale they are all treated as not stale (queued, back-pressured). The
    /// answer has one [`Forwarded`] per target.
    ///
    /// `taken_here`: this node is itself a master of the domain and its router relayed the
    /// publish already (mirrored masters kept in step): a reachable master that is never stale,
    /// and the publish is never refused (refused and published again, it would reach this
    /// master's subscribers twice): any other master whose queue would pass its bound, dead or
    /// still flushing, has its queue dropped and is stale until it is reachable again.
    pub fn publish_all(
        &mut self,
        targets: &[(QueueKey, bool)],
        origin: u64,
        record: &[u8],
        taken_here: bool,
        mut send: impl FnMut(usize, &[u8]) -> bool,
    ) -> Vec<Forwarded> {
        for (key, reachable) in targets {
            if *reachable {
                self.back(key);
            }
        }
        if !taken_here && !self.stale.is_empty() && targets.iter().all(|(key, _)| self.stale.contains_key(key)) {
            for (key, _) in targets {
                self.back(key);
            }
        }
        let any_reachable = taken_here || targets.iter().any(|(_, reachable)| *reachable);
        // Refused for a target since it last made room: refused still, unless that target would
        // not refuse now (a dead mirror beside a live master is dropped past its bound instead).
        let mut refused = !taken_here
            && targets.iter().any(|(key, reachable)| (*reachable || !any_reachable) && self.is_blocked(origin, key));
        let mut full = Vec::new();
        let mut overflowing = Vec::new();
        for (key, reachable) in targets {
            if !self.stale.is_empty() && self.stale.contains_key(key) {
                continue;
            }
            let queue = self.queues.get(key);
            let queued = queue.is_some_and(|queue| !queue.entries.is_empty());
            let bytes = queue.map_or(0, |queue| queue.bytes);
            if (queued || !*reachable) && bytes + record.len() > self.bound {
                if taken_here || (!*reachable && any_reachable) {
                    overflowing.push(key.clone());
                } else {
                    refused = true;
                    full.push(key.clone());
                }
            }
        }
        if refused {
            for key in full {
                self.blocked.entry(key).or_default().insert(origin);
            }
            self.counters.refused += 1;
            for (key, _) in targets {
                self.counters_mut(key).refused += 1;
            }
            return vec![Forwarded::Full; targets.len()];
        }
        for key in overflowing {
            self.drop_queue(key);
        }
        targets
            .iter()
            .enumerate()
            .map(|(index, (key, reachable))| {
                if let Some(missed) = self.stale.get_mut(key) {
                    missed.add(record);
                    self.count(key, |c| &mut c.dropped, 1);
                    return Forwarded::Dropped;
                }
                if taken_here {
                    self.enqueue(key.clone(), origin, record, *reachable, |bytes| send(index, bytes))
                } else {
                    self.publish(key.clone(), origin, record, *reachable, |bytes| send(index, bytes))
                }
            })
            .collect()
    }

    /// Drops the queue for `key` (an unreachable mirrored master past its bound) and marks it
    /// stale; origins left with nothing queued are told [`Notice::Cleared`], and origins
    /// refused for it are told too (room is made).
    fn drop_queue(&mut self, key: QueueKey) {
        let queue = self.queues.remove(&key).unwrap_or_default();
        let publishes = queue.entries.len() as u64;
        let mut missed = Missed::default();
        for (_, record) in &queue.entries {
            missed.add(record);
        }
        for (origin, _) in &queue.entries {
            self.dequeued(&key, *origin);
        }
        self.unblock(&key);
        self.count(&key, |c| &mut c.dropped, publishes);
        self.stale.insert(key.clone(), missed);
        self.events.push(QueueEvent::Dropped { key, publishes });
    }

    /// `key` is reachable: no longer stale (reported once).
    fn back(&mut self, key: &QueueKey) {
        if self.stale.is_empty() {
            return;
        }
        if let Some(missed) = self.stale.remove(key) {
            let (resync, unlisted) = (missed.pairs, missed.unlisted);
            self.events.push(QueueEvent::Back { key: key.clone(), missed: missed.publishes, resync, unlisted });
        }
    }

    /// The master behind `key` is reachable: hands every queued publish to `send`, in order,
    /// while it accepts (`send` returns `false` to stop); returns how many went.
    pub fn flush(&mut self, key: &QueueKey, mut send: impl FnMut(&[u8]) -> bool) -> usize {
        self.back(key);
        // Out of the map while flushing: each publish that goes updates its origin's count.
        let Some(mut queue) = self.queues.remove(key) else { return 0 };
        let mut sent = 0;
        while let Some((origin, record)) = queue.entries.front() {
            if !send(record) {
                break;
            }
            let origin = *origin;
            queue.bytes -= record.len();
            queue.entries.pop_front();
            sent += 1;
            self.dequeued(key, origin);
        }
        if !queue.entries.is_empty() {
            self.queues.insert(key.clone(), queue);
        }
        self.count(key, |c| &mut c.flushed, sent as u64);
        if sent > 0 {
            self.unblock(key);
        }
        sent
    }

    /// One publish of `origin` left `key`'s queue (flushed or dropped); when it was its last
    /// one queued anywhere, it is told [`Notice::Cleared`] (and is no longer refused for `key`:
    /// told already).
    fn dequeued(&mut self, key: &QueueKey, origin: u64) {
        let Some(count) = self.origins.get_mut(&origin) else { return };
        *count -= 1;
        if *count == 0 {
            self.origins.remove(&origin);
            if let Some(blocked) = self.blocked.get_mut(key) {
                blocked.remove(&origin);
            }
            self.notices.push((origin, Notice::Cleared));
        }
    }

    /// `key`'s queue made room (a flush sent some, it moved to its domain's masters, it was
    /// dropped): origins refused for it are no longer, each told [`Notice::Warning`] (some of
    /// its publishes are still queued) or [`Notice::Cleared`] (none is) to publish its refused
    /// tail again. Origins refused for other queues stay refused for those.
    fn unblock(&mut self, key: &QueueKey) {
        let Some(origins) = self.blocked.remove(key) else { return };
        for origin in origins {
            let notice = if self.origins.contains_key(&origin) { Notice::Warning } else { Notice::Cleared };
            self.notices.push((origin, notice));
        }
    }

    /// A domain got its master(s): its queue moves to each one's (behind what is there), so it
    /// flushes in order when that master is reachable; returns how many publishes moved. With
    /// several masters each gets a copy (an origin stays warned until its last copy went).
    /// Origins refused for the domain are no longer (told, to publish their tail again).
    pub fn assign(&mut self, domain: &str, masters: &[usize]) -> usize {
        let key = QueueKey::Domain(domain.to_owned());
        if !masters.is_empty() {
            self.unblock(&key);
        }
        let Some(moved) = self.queues.remove(&key) else { return 0 };
        let count = moved.entries.len();
        for (index, &master) in masters.iter().enumerate() {
            if index > 0 {
                for (origin, _) in &moved.entries {
                    *self.origins.entry(*origin).or_default() += 1;
                }
            }
            let queue = self.queues.entry(QueueKey::Node(master)).or_default();
            queue.entries.extend(moved.entries.iter().cloned());
            queue.bytes += moved.bytes;
        }
        if masters.is_empty() {
            self.queues.insert(QueueKey::Domain(domain.to_owned()), moved);
            return 0;
        }
        count
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

    /// The counters since start (each master's copy of a publish counts; a publish refused
    /// for every master counts once in `refused`).
    pub fn counters(&self) -> ForwardCounters {
        self.counters
    }

    /// The counters of `key`'s queue since start (a publish refused for every master counts
    /// in each one's `refused`).
    pub fn counters_for(&self, key: &QueueKey) -> ForwardCounters {
        match key {
            QueueKey::Node(index) => self.per_node.get(*index).copied().unwrap_or_default(),
            QueueKey::Domain(domain) => self.per_domain.get(domain).copied().unwrap_or_default(),
        }
    }

    /// Whether `key` is a stale mirrored master (its queue dropped, not reachable since).
    pub fn is_stale(&self, key: &QueueKey) -> bool {
        self.stale.contains_key(key)
    }

    /// Queues dropped and stale masters back since the last call, in order.
    pub fn take_events(&mut self) -> Vec<QueueEvent> {
        std::mem::take(&mut self.events)
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

    fn accept_at(wire: &mut Vec<(usize, Vec<u8>)>) -> impl FnMut(usize, &[u8]) -> bool + '_ {
        |index, record| {
            wire.push((index, record.to_vec()));
            true
        }
    }

    #[test]
    fn an_origin_is_warned_once_while_queued_and_cleared_when_its_last_publish_is_flushed() {
        let mut queues = ForwardQueues::new(100);
        let golan = QueueKey::Node(1);
        let mut wire = Vec::new();
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"a", true, accept(&mut wire)), Forwarded::Sent);
        assert!(queues.take_notices().is_empty(), "sent at once: nothing to tell");
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"x", false, |_| true), Forwarded::Queued);
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
        assert_eq!(queues.counters(), ForwardCounters { sent: 1, queued: 3, flushed: 3, refused: 0, dropped: 0 });
    }

    #[test]
    fn past_the_bound_an_origin_is_refused_until_a_flush_makes_room_so_its_refusals_are_a_tail() {
        let mut queues = ForwardQueues::new(6);
        let golan = QueueKey::Node(1);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"aaa", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"bbbb", false, |_| true), Forwarded::Full);
        // "c" would fit (3 + 1 <= 6) but SOURCE is blocked: its refusals stay a tail.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", false, |_| true), Forwarded::Full);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"xyz", false, |_| true), Forwarded::Queued, "others fit");
        assert_eq!(queues.queued_bytes(&golan), 6);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning), (OTHER, Notice::Warning)]);
        let mut wire = Vec::new();
        assert_eq!(queues.flush(&golan, accept(&mut wire)), 2);
        let mut notices = queues.take_notices();
        notices.sort_by_key(|&(origin, _)| origin);
        assert_eq!(notices, [(SOURCE, Notice::Cleared), (OTHER, Notice::Cleared)]);
        // Room again: SOURCE publishes its refused tail, in order.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"bbbb", true, accept(&mut wire)), Forwarded::Sent);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"c", true, accept(&mut wire)), Forwarded::Sent);
        assert_eq!(wire, [b"aaa".to_vec(), b"xyz".to_vec(), b"bbbb".to_vec(), b"c".to_vec()]);
        assert_eq!(queues.counters().refused, 2);
    }

    #[test]
    fn with_no_mirrored_master_reachable_a_publish_is_refused_for_all_and_never_dropped() {
        let mut queues = ForwardQueues::new(4);
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let mut wire: Vec<(usize, Vec<u8>)> = Vec::new();
        let none = [(heron.clone(), false), (golan.clone(), false)];
        let outcome = queues.publish_all(&none, SOURCE, b"aa", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Queued, Forwarded::Queued]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        let outcome = queues.publish_all(&none, SOURCE, b"bbb", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Full, Forwarded::Full], "refused for both, queued for neither");
        let outcome = queues.publish_all(&none, SOURCE, b"c", false, |_, _| true);
        assert_eq!(outcome, [Forwarded::Full, Forwarded::Full], "blocked until a flush makes room");
        assert!(wire.is_empty() && queues.take_events().is_empty(), "nothing sent, nothing dropped");
        assert_eq!(queues.queued_count(&heron), 1);
        // A live master still flushing its queue back-pressures too (it is not dead).
        let mut flushed = Vec::new();
        assert_eq!(queues.flush(&golan, |_| false), 0);
        let flushing = [(heron.clone(), true), (golan.clone(), true)];
        assert_eq!(
            queues.publish_all(&flushing, OTHER, b"bbb", false, |_, _| true),
            [Forwarded::Full, Forwarded::Full]
        );
        assert_eq!(queues.flush(&golan, accept(&mut flushed)), 1);
        assert_eq!(queues.flush(&heron, accept(&mut flushed)), 1);
        let outcome = queues.publish_all(&flushing, SOURCE, b"bbb", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Sent], "the refused tail goes again");
        assert_eq!(queues.counters(), ForwardCounters { sent: 2, queued: 2, flushed: 2, refused: 3, dropped: 0 });
        assert_eq!(
            queues.counters_for(&golan),
            ForwardCounters { sent: 1, queued: 1, flushed: 1, refused: 3, dropped: 0 }
        );
    }

    #[test]
    fn a_dead_mirrors_queue_past_its_bound_is_dropped_while_another_master_takes_the_publishes() {
        let mut queues = ForwardQueues::new(4);
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let mut wire: Vec<(usize, Vec<u8>)> = Vec::new();
        let heron_only = [(heron.clone(), true), (golan.clone(), false)];
        let outcome = queues.publish_all(&heron_only, SOURCE, b"aa", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Queued], "sent to the live one, queued for the other");
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        // golan's queue has room for 2 more bytes: "bbb" does not fit, heron takes it.
        let outcome = queues.publish_all(&heron_only, SOURCE, b"bbb", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Dropped], "the source is not refused");
        assert_eq!(queues.take_events(), [QueueEvent::Dropped { key: golan.clone(), publishes: 1 }]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)], "nothing of it queued any more");
        assert!(queues.is_stale(&golan) && !queues.is_queued(&golan));
        let outcome = queues.publish_all(&heron_only, SOURCE, b"c", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Dropped]);
        assert!(queues.take_events().is_empty(), "reported once per outage");
        assert_eq!(wire, [(0, b"aa".to_vec()), (0, b"bbb".to_vec()), (0, b"c".to_vec())]);
        // golan back: it gets what is published from now on; what it missed is counted.
        assert_eq!(queues.flush(&golan, |_| true), 0, "its queue was dropped: nothing to flush");
        let back = QueueEvent::Back { key: golan.clone(), missed: 3, resync: Vec::new(), unlisted: 0 };
        assert_eq!(queues.take_events(), [back], "these records name no subject: nothing to resync");
        let both = [(heron.clone(), true), (golan.clone(), true)];
        let outcome = queues.publish_all(&both, SOURCE, b"d", false, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Sent]);
        assert_eq!(wire[3..], [(0, b"d".to_vec()), (1, b"d".to_vec())]);
        assert_eq!(
            queues.counters_for(&golan),
            ForwardCounters { sent: 1, queued: 1, flushed: 0, refused: 0, dropped: 3 }
        );
        assert_eq!(queues.counters_for(&heron), ForwardCounters { sent: 4, ..ForwardCounters::default() });
        // Now heron dies too and golan with it: the mirror rule gives way to back-pressure.
        let none = [(heron.clone(), false), (golan.clone(), false)];
        assert_eq!(
            queues.publish_all(&none, SOURCE, b"eeee", false, |_, _| true),
            [Forwarded::Queued, Forwarded::Queued]
        );
        assert_eq!(queues.publish_all(&none, SOURCE, b"f", false, |_, _| true), [Forwarded::Full, Forwarded::Full]);
        assert!(queues.take_events().is_empty(), "no master reachable: nothing dropped");
    }

    fn encoded(origin: u64, subject: &str) -> Vec<u8> {
        use crate::subjects::codec::RecordKind;
        let record = SubjectRecord { kind: RecordKind::Data, flags: 0, sender: origin, subject, payload: b"x" };
        let mut bytes = Vec::new();
        record.emit(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_stale_master_back_names_each_origins_subjects_it_missed_once_and_bounded() {
        let record = encoded(SOURCE, "/RUGBY/a");
        let mut queues = ForwardQueues::new(record.len());
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let heron_only = [(heron.clone(), true), (golan.clone(), false)];
        assert_eq!(queues.publish_all(&heron_only, SOURCE, &record, false, |_, _| true)[1], Forwarded::Queued);
        for (origin, subject) in [(SOURCE, "/RUGBY/b"), (OTHER, "/RUGBY/a"), (SOURCE, "/RUGBY/a")] {
            assert_eq!(
                queues.publish_all(&heron_only, origin, &encoded(origin, subject), false, |_, _| true)[1],
                Forwarded::Dropped
            );
        }
        for n in 0..MAX_RESYNC_SUBJECTS + 5 {
            queues.publish_all(&heron_only, OTHER, &encoded(OTHER, &format!("/RUGBY/n{n}")), false, |_, _| true);
        }
        queues.take_events();
        assert_eq!(queues.flush(&golan, |_| true), 0);
        let [QueueEvent::Back { missed, resync, unlisted, .. }] = &queues.take_events()[..] else { panic!("one Back") };
        assert_eq!(*missed, 4 + MAX_RESYNC_SUBJECTS as u64 + 5);
        assert_eq!(resync.len(), MAX_RESYNC_SUBJECTS, "bounded");
        assert_eq!(*unlisted, 8, "the pairs past the bound are counted");
        let first: Vec<(u64, &str)> = resync[..3].iter().map(|(o, s)| (*o, s.as_str())).collect();
        assert_eq!(first, [(SOURCE, "/RUGBY/a"), (SOURCE, "/RUGBY/b"), (OTHER, "/RUGBY/a")], "once each, in order");
    }

    #[test]
    fn at_a_master_its_dead_mirrors_queue_is_dropped_past_the_bound_as_beside_any_live_master() {
        let mut queues = ForwardQueues::new(4);
        let hobbit = QueueKey::Node(1);
        let dead = [(hobbit.clone(), false)];
        // This node takes every publish itself (taken_here): hobbit's queue fills, then drops.
        assert_eq!(queues.publish_all(&dead, SOURCE, b"aa", true, |_, _| true), [Forwarded::Queued]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        assert_eq!(queues.publish_all(&dead, SOURCE, b"bbb", true, |_, _| true), [Forwarded::Dropped]);
        assert_eq!(queues.take_events(), [QueueEvent::Dropped { key: hobbit.clone(), publishes: 1 }]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)]);
        // Stale, and the only target: it stays stale (this node is the live master), no back-pressure.
        assert_eq!(queues.publish_all(&dead, SOURCE, b"cccc", true, |_, _| true), [Forwarded::Dropped]);
        assert_eq!(queues.counters_for(&hobbit), ForwardCounters { queued: 1, dropped: 3, ..Default::default() });
        // The same publishes without a master here back-pressure instead (a slave's rule).
        let mut slave = ForwardQueues::new(4);
        assert_eq!(slave.publish_all(&dead, SOURCE, b"aa", false, |_, _| true), [Forwarded::Queued]);
        assert_eq!(slave.publish_all(&dead, SOURCE, b"bbb", false, |_, _| true), [Forwarded::Full]);
        // hobbit back: sent at once again; it missed three publishes.
        let mut wire = Vec::new();
        let live = [(hobbit.clone(), true)];
        let outcome = queues.publish_all(&live, SOURCE, b"d", true, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent]);
        assert!(matches!(queues.take_events()[..], [QueueEvent::Back { missed: 3, .. }]));
        assert_eq!(wire, [(0, b"d".to_vec())]);
        // Reachable but still flushing a full queue: dropped too, never refused (the publish is
        // relayed here already); an origin blocked even for hobbit is not refused for the mirrors.
        assert_eq!(queues.publish_all(&dead, SOURCE, b"eeee", true, |_, _| true), [Forwarded::Queued]);
        assert_eq!(queues.publish_all(&live, SOURCE, b"f", true, |_, _| true), [Forwarded::Dropped]);
        assert!(queues.is_stale(&hobbit) && queues.counters().refused == 0);
        queues.take_events();
        queues.blocked.entry(hobbit.clone()).or_default().insert(OTHER);
        let outcome = queues.publish_all(&live, OTHER, b"g", true, accept_at(&mut wire));
        assert_eq!(outcome, [Forwarded::Sent], "back, and sent though OTHER is blocked");
        assert!(matches!(queues.take_events()[..], [QueueEvent::Back { missed: 2, .. }]));
    }

    #[test]
    fn a_domain_getting_masters_hands_each_its_queue_in_order() {
        let mut queues = ForwardQueues::new(100);
        let radar = QueueKey::Domain("RADAR".to_owned());
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"r1", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"r2", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        assert_eq!(queues.assign("RADAR", &[]), 0, "no master: stays queued under the domain");
        assert_eq!(queues.queued_count(&radar), 2);
        assert_eq!(queues.assign("RADAR", &[0, 1]), 2);
        assert!(!queues.is_queued(&radar));
        let (mut at_0, mut at_1) = (Vec::new(), Vec::new());
        assert_eq!(queues.flush(&QueueKey::Node(0), accept(&mut at_0)), 2);
        assert_eq!(queues.take_notices(), [], "still queued for the other master");
        assert_eq!(queues.flush(&QueueKey::Node(1), accept(&mut at_1)), 2);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)]);
        assert_eq!(at_0, [b"r1".to_vec(), b"r2".to_vec()]);
        assert_eq!(at_0, at_1);
    }

    #[test]
    fn a_blocked_origin_with_publishes_still_queued_is_warned_when_room_is_made() {
        let mut queues = ForwardQueues::new(4);
        let golan = QueueKey::Node(1);
        assert_eq!(queues.publish(golan.clone(), OTHER, b"xx", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"aa", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| true), Forwarded::Full);
        queues.take_notices();
        let mut once = true;
        assert_eq!(queues.flush(&golan, |_| std::mem::take(&mut once)), 1, "only OTHER's went");
        assert_eq!(queues.take_notices(), [(OTHER, Notice::Cleared), (SOURCE, Notice::Warning)]);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", false, |_| true), Forwarded::Queued, "unblocked");
    }

    #[test]
    fn a_publish_a_full_link_does_not_take_is_queued_and_counted_queued_not_sent() {
        let mut queues = ForwardQueues::new(4);
        let golan = QueueKey::Node(1);
        let mut wire = Vec::new();
        // Live and nothing queued, but the link is full: queued (the origin warned), not lost.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"aa", true, |_| false), Forwarded::Queued);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        // Order is kept: the next one waits behind it though the link takes it now.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"b", true, accept(&mut wire)), Forwarded::Queued);
        assert!(wire.is_empty());
        // Still full and no room: refused (back-pressure), never a silent drop.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"cc", true, |_| false), Forwarded::Full);
        assert_eq!(queues.flush(&golan, accept(&mut wire)), 2);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)]);
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"cc", true, accept(&mut wire)), Forwarded::Sent);
        assert_eq!(wire, [b"aa".to_vec(), b"b".to_vec(), b"cc".to_vec()], "in order, once");
        assert_eq!(queues.counters(), ForwardCounters { sent: 1, queued: 2, flushed: 2, refused: 1, dropped: 0 });
    }

    #[test]
    fn a_mirrored_master_whose_full_link_does_not_take_a_publish_gets_it_queued() {
        let mut queues = ForwardQueues::new(4);
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let both = [(heron.clone(), true), (golan.clone(), true)];
        let mut wire: Vec<(usize, Vec<u8>)> = Vec::new();
        let golan_full = |index: usize, record: &[u8], wire: &mut Vec<(usize, Vec<u8>)>| {
            wire.push((index, record.to_vec()));
            index == 0
        };
        let outcome = queues.publish_all(&both, SOURCE, b"aa", false, |i, r| golan_full(i, r, &mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Queued], "golan's link did not take it");
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        assert_eq!(queues.queued_count(&golan), 1);
        // At a master (taken_here) the same: queued for the mirror, neither dropped nor refused.
        let outcome = queues.publish_all(&both, OTHER, b"x", true, |i, r| golan_full(i, r, &mut wire));
        assert_eq!(outcome, [Forwarded::Sent, Forwarded::Queued]);
        assert_eq!(queues.counters_for(&golan), ForwardCounters { queued: 2, ..ForwardCounters::default() });
        assert_eq!(queues.counters_for(&heron), ForwardCounters { sent: 2, ..ForwardCounters::default() });
    }

    #[test]
    fn an_origin_refused_for_a_domain_without_a_master_still_publishes_to_other_masters() {
        let mut queues = ForwardQueues::new(4);
        let radar = QueueKey::Domain("RADAR".to_owned());
        let golan = QueueKey::Node(1);
        let mut wire = Vec::new();
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"aaa", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"bb", false, |_| true), Forwarded::Full);
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"c", false, |_| true), Forwarded::Full, "a tail");
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        // Another master, live with nothing queued: sent, RADAR's refusal does not block it.
        assert_eq!(queues.publish(golan.clone(), SOURCE, b"x", true, accept(&mut wire)), Forwarded::Sent);
        let mirrors = [(QueueKey::Node(0), true), (golan.clone(), true)];
        assert_eq!(queues.publish_all(&mirrors, SOURCE, b"y", false, |_, _| true), [Forwarded::Sent; 2]);
        // A flush elsewhere makes no room at RADAR: the origin is not told to publish again.
        assert_eq!(queues.publish(golan.clone(), OTHER, b"o", false, |_| true), Forwarded::Queued);
        assert_eq!(queues.flush(&golan, accept(&mut wire)), 1);
        assert_eq!(queues.take_notices(), [(OTHER, Notice::Warning), (OTHER, Notice::Cleared)]);
        assert_eq!(queues.publish(radar.clone(), SOURCE, b"c", false, |_| true), Forwarded::Full, "still blocked");
        // RADAR gets a master: room is made, the origin is warned (its "aaa" is queued there).
        assert_eq!(queues.assign("RADAR", &[2]), 1);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        assert_eq!(queues.publish(QueueKey::Node(2), SOURCE, b"b", false, |_| true), Forwarded::Queued);
        assert_eq!(wire, [b"x".to_vec(), b"o".to_vec()]);
    }

    #[test]
    fn a_mirror_dropped_as_stale_makes_room_for_the_origins_it_had_refused() {
        let mut queues = ForwardQueues::new(4);
        let (heron, golan) = (QueueKey::Node(0), QueueKey::Node(1));
        let none = [(heron.clone(), false), (golan.clone(), false)];
        assert_eq!(queues.publish_all(&none, SOURCE, b"aaa", false, |_, _| true), [Forwarded::Queued; 2]);
        assert_eq!(queues.publish_all(&none, SOURCE, b"bb", false, |_, _| true), [Forwarded::Full; 2]);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)]);
        // heron back and flushed: room at heron, SOURCE told; golan still full, still dead.
        assert_eq!(queues.flush(&heron, |_| true), 1);
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Warning)], "still queued for golan");
        let heron_only = [(heron.clone(), true), (golan.clone(), false)];
        // golan's queue would pass its bound while heron takes it: dropped, SOURCE unblocked.
        assert_eq!(
            queues.publish_all(&heron_only, SOURCE, b"bb", false, |_, _| true),
            [Forwarded::Sent, Forwarded::Dropped]
        );
        assert_eq!(queues.take_notices(), [(SOURCE, Notice::Cleared)]);
        assert!(queues.blocked.is_empty(), "no origin is left blocked for a dropped queue");
    }
}
