//! Backlogs, sans-IO: the records queued for each destination that its publication has not
//! accepted yet, under one memory budget for all destinations together.
//!
//! A destination that does not keep up (slow, or a reply inbox nobody reads) keeps a backlog;
//! one destination holds at most [`MAX_BACKLOG_BYTES`] (past it, its new records are dropped
//! and counted), and all of them together at most the budget ([`Backlogs::new`], default
//! [`DEFAULT_BACKLOG_BUDGET`]). When a push would take the total over the budget, the evictable
//! destination whose backlog is largest is evicted: its backlog is freed, its records counted as
//! dropped, and the eviction reported ([`Backlogs::take_evictions`]) so the router drops that
//! subscriber. Destinations that are not evictable (the router's sources) are never evicted:
//! when only they are left, the new records are dropped and counted.
//!
//! Memory is counted as each backlog's allocation (`Vec` capacity), not its length; a drained
//! backlog keeps at most [`RETAINED_CAPACITY`] bytes of allocation.

use super::codec::{record_length_at, Records};
use crate::protocol::OfferError;
use crate::routing::FastMap;

/// Records are packed into transport messages of at most this many bytes (a larger record
/// goes alone).
pub const BATCH_BYTES: usize = 16 * 1024;
/// Bytes one destination's backlog may hold (less when the budget is smaller); past it the
/// destination's new records are dropped (counted).
pub const MAX_BACKLOG_BYTES: usize = 64 << 20;
/// Default budget of all of a router's backlogs together (`affinity router --backlog-budget`).
pub const DEFAULT_BACKLOG_BUDGET: usize = 256 << 20;
/// Smallest budget accepted: room for a few of the largest records.
pub const MIN_BACKLOG_BUDGET: usize = 4 << 20;
/// Allocation a backlog keeps once everything was sent (more is freed).
pub const RETAINED_CAPACITY: usize = 4 * BATCH_BYTES;

/// The bytes queued for one destination; `bytes[sent..]` is not accepted yet.
#[derive(Default)]
struct Backlog {
    bytes: Vec<u8>,
    sent: usize,
}

impl Backlog {
    fn held(&self) -> usize {
        self.bytes.capacity()
    }

    fn pending(&self) -> usize {
        self.bytes.len() - self.sent
    }

    /// The allocation after appending `more` bytes ([`Backlog::append`] grows exactly so).
    fn held_after(&self, more: usize) -> usize {
        let needed = self.pending() + more;
        let capacity = self.bytes.capacity();
        if needed <= capacity {
            capacity
        } else {
            needed.max(2 * capacity)
        }
    }

    fn append(&mut self, records: &[u8]) {
        if self.sent > 0 {
            self.bytes.drain(..self.sent);
            self.sent = 0;
        }
        let target = self.held_after(records.len());
        if target > self.bytes.capacity() {
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(records);
    }

    /// The end of the next transport message: whole records, at most [`BATCH_BYTES`] unless
    /// the first record alone is larger.
    fn batch_end(&self) -> usize {
        let mut end = self.sent;
        while end < self.bytes.len() {
            let Some(length) = record_length_at(&self.bytes, end) else {
                return self.bytes.len();
            };
            if end > self.sent && end - self.sent + length > BATCH_BYTES {
                break;
            }
            end += length;
        }
        end
    }

    /// Frees the sent bytes once nothing is pending (an allocation past
    /// [`RETAINED_CAPACITY`] is released).
    fn settle(&mut self) {
        if self.sent == self.bytes.len() {
            if self.bytes.capacity() > RETAINED_CAPACITY {
                self.bytes = Vec::new();
            } else {
                self.bytes.clear();
            }
            self.sent = 0;
        }
    }
}

struct Entry {
    backlog: Backlog,
    evictable: bool,
}

/// A destination evicted to keep the backlogs within their budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eviction {
    /// The destination (member id).
    pub id: u64,
    /// The bytes its backlog held.
    pub bytes: usize,
}

/// Counters of the backlogs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BacklogCounters {
    /// Transport messages accepted by the publications.
    pub messages: u64,
    /// Records dropped: a destination's backlog full, the budget exhausted by unevictable
    /// destinations, a destination evicted or removed with records pending, or a publication
    /// refusing them for good.
    pub dropped_records: u64,
    /// Destinations evicted for the budget.
    pub evictions: u64,
}

/// The backlogs of every destination: see the [module documentation](self).
pub struct Backlogs {
    entries: FastMap<u64, Entry>,
    budget: usize,
    per_destination: usize,
    held: usize,
    evictions: Vec<Eviction>,
    counters: BacklogCounters,
}

impl Backlogs {
    /// Backlogs holding at most `budget` bytes together (and each at most
    /// [`MAX_BACKLOG_BYTES`], or `budget` if smaller).
    pub fn new(budget: usize) -> Backlogs {
        Backlogs {
            entries: FastMap::default(),
            budget,
            per_destination: MAX_BACKLOG_BYTES.min(budget),
            held: 0,
            evictions: Vec::new(),
            counters: BacklogCounters::default(),
        }
    }

    /// Adds destination `id` (no-op if known); `evictable` when the budget may evict it.
    pub fn insert(&mut self, id: u64, evictable: bool) {
        self.entries.entry(id).or_insert_with(|| Entry { backlog: Backlog::default(), evictable });
    }

    /// Whether `id` is a destination.
    pub fn contains(&self, id: u64) -> bool {
        self.entries.contains_key(&id)
    }

    /// Forgets destination `id`; its pending records are counted as dropped.
    pub fn remove(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id) {
            self.release(&entry.backlog);
        }
    }

    fn release(&mut self, backlog: &Backlog) {
        self.held -= backlog.held();
        self.counters.dropped_records += Records::new(&backlog.bytes[backlog.sent..]).count() as u64;
    }

    /// Bytes held by every backlog together (at most the budget).
    pub fn held(&self) -> usize {
        self.held
    }

    /// The counters.
    pub fn counters(&self) -> BacklogCounters {
        self.counters
    }

    /// Whether `id` has records its publication has not accepted yet.
    pub fn is_pending(&self, id: u64) -> bool {
        self.entries.get(&id).is_some_and(|e| e.backlog.pending() > 0)
    }

    /// Destinations with records pending.
    pub fn pending_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.entries.iter().filter(|(_, e)| e.backlog.pending() > 0).map(|(&id, _)| id)
    }

    /// The evictions made since the last call.
    pub fn take_evictions(&mut self) -> Vec<Eviction> {
        std::mem::take(&mut self.evictions)
    }

    /// Queues `records` (whole encoded records) for `id`; whether they were queued. Evicts the
    /// largest evictable backlog (possibly `id`'s own) while the budget would be exceeded.
    pub fn push(&mut self, id: u64, records: &[u8]) -> bool {
        let Some(entry) = self.entries.get(&id) else {
            return false;
        };
        if entry.backlog.pending() + records.len() > self.per_destination {
            self.counters.dropped_records += Records::new(records).count() as u64;
            return false;
        }
        loop {
            let Some(entry) = self.entries.get(&id) else {
                // `id` itself was the largest and was evicted.
                self.counters.dropped_records += Records::new(records).count() as u64;
                return false;
            };
            let growth = entry.backlog.held_after(records.len()) - entry.backlog.held();
            if self.held + growth <= self.budget {
                break;
            }
            let victim = self
                .entries
                .iter()
                .filter(|(_, e)| e.evictable && e.backlog.held() > 0)
                .max_by_key(|(&other, e)| (e.backlog.held(), other == id))
                .map(|(&other, _)| other);
            let Some(victim) = victim else {
                self.counters.dropped_records += Records::new(records).count() as u64;
                return false;
            };
            if let Some(evicted) = self.entries.remove(&victim) {
                self.release(&evicted.backlog);
                self.counters.evictions += 1;
                self.evictions.push(Eviction { id: victim, bytes: evicted.backlog.held() });
            }
        }
        let Some(entry) = self.entries.get_mut(&id) else { return false };
        let before = entry.backlog.held();
        entry.backlog.append(records);
        self.held = self.held + entry.backlog.held() - before;
        true
    }

    /// Offers `id`'s pending records, packed, to `offer` until it refuses; returns the messages
    /// accepted. Back-pressure, not connected and admin action keep the records; any other
    /// refusal drops that message's records (counted).
    pub fn flush(&mut self, id: u64, mut offer: impl FnMut(&[u8]) -> Result<(), OfferError>) -> usize {
        let Some(entry) = self.entries.get_mut(&id) else { return 0 };
        let backlog = &mut entry.backlog;
        let before = backlog.held();
        let mut messages = 0;
        let mut dropped = 0;
        while backlog.pending() > 0 {
            let end = backlog.batch_end();
            match offer(&backlog.bytes[backlog.sent..end]) {
                Ok(()) => messages += 1,
                Err(OfferError::BackPressured | OfferError::NotConnected | OfferError::AdminAction) => break,
                Err(_) => dropped += Records::new(&backlog.bytes[backlog.sent..end]).count() as u64,
            }
            backlog.sent = end;
        }
        backlog.settle();
        self.held = self.held + backlog.held() - before;
        self.counters.messages += messages as u64;
        self.counters.dropped_records += dropped;
        messages
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::codec::{RecordKind, SubjectRecord, FLAG_UPDATE};

    fn update(size: usize) -> Vec<u8> {
        let payload = vec![7u8; size];
        let mut out = Vec::new();
        SubjectRecord { kind: RecordKind::Data, flags: FLAG_UPDATE, sender: 1, subject: "/a", payload: &payload }
            .emit(&mut out)
            .unwrap();
        out
    }

    fn unreachable(_: &[u8]) -> Result<(), OfferError> {
        Err(OfferError::NotConnected)
    }

    #[test]
    fn many_unreachable_destinations_stay_within_one_budget_the_largest_evicted_first() {
        let budget = MIN_BACKLOG_BUDGET * 2;
        let mut backlogs = Backlogs::new(budget);
        let record = update(4096);
        // 48 destinations that never accept anything, each sent every update.
        for id in 0..48 {
            backlogs.insert(id, true);
        }
        let mut evicted = Vec::new();
        for round in 0..2_000 {
            for id in 0..48u64 {
                if backlogs.contains(id) {
                    backlogs.push(id, &record);
                    backlogs.flush(id, unreachable);
                }
                // One destination that gets ahead: it is the largest, so it goes first.
                if id == 5 && round < 50 && backlogs.contains(5) {
                    backlogs.push(5, &record);
                }
            }
            assert!(backlogs.held() <= budget, "{} bytes held past a budget of {budget}", backlogs.held());
            evicted.extend(backlogs.take_evictions());
        }
        assert!(!evicted.is_empty());
        assert_eq!(evicted[0].id, 5);
        assert!(evicted.iter().all(|e| e.bytes > 0));
        assert_eq!(backlogs.counters().evictions, evicted.len() as u64);
        assert!(backlogs.counters().dropped_records > 0);
    }

    #[test]
    fn a_destination_that_keeps_up_is_never_evicted_and_keeps_little_memory() {
        let mut backlogs = Backlogs::new(MIN_BACKLOG_BUDGET);
        backlogs.insert(1, true);
        backlogs.insert(2, true);
        let record = update(8192);
        let mut delivered = 0usize;
        for _ in 0..10_000 {
            for id in [1, 2] {
                backlogs.push(id, &record);
            }
            backlogs.flush(1, |bytes| {
                delivered += Records::new(bytes).count();
                Ok(())
            });
            backlogs.flush(2, unreachable);
        }
        assert!(backlogs.contains(1));
        assert_eq!(delivered, 10_000);
        let evictions = backlogs.take_evictions();
        assert!(!evictions.is_empty() && evictions.iter().all(|e| e.id == 2));
        assert!(backlogs.held() <= RETAINED_CAPACITY, "{} bytes held", backlogs.held());
    }

    #[test]
    fn unevictable_destinations_drop_records_instead_and_one_destination_has_its_own_cap() {
        let mut backlogs = Backlogs::new(MIN_BACKLOG_BUDGET);
        backlogs.insert(9, false);
        let record = update(64 * 1024);
        let pushed = (0..200).filter(|_| backlogs.push(9, &record)).count();
        assert!(pushed < 200 && pushed > 0);
        assert!(backlogs.contains(9));
        assert!(backlogs.held() <= MIN_BACKLOG_BUDGET);
        assert_eq!(backlogs.counters().dropped_records, 200 - pushed as u64);
        assert!(backlogs.take_evictions().is_empty());
        // Everything pending goes out once the publication accepts, packed at record boundaries.
        let mut sizes = Vec::new();
        backlogs.flush(9, |bytes| {
            sizes.push(bytes.len());
            Ok(())
        });
        assert_eq!(sizes.len(), pushed);
        assert!(!backlogs.is_pending(9));
        assert!(backlogs.held() <= RETAINED_CAPACITY);
        let mut per_destination = Backlogs::new(MAX_BACKLOG_BYTES * 4);
        per_destination.insert(1, true);
        let large = update(1 << 20);
        let kept = (0..100).filter(|_| per_destination.push(1, &large)).count();
        assert_eq!(kept, MAX_BACKLOG_BYTES / large.len());
    }
}
