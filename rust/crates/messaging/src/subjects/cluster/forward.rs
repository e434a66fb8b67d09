//! Publishes at a slave forwarded to their master, queued while it is unreachable (or not
//! known yet), bounded in bytes, flushed in order when it is back.

use std::collections::{HashMap, VecDeque};

/// What became of a publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// Handed to the master's link at once.
    Sent,
    /// Queued for the master (unreachable or unknown): the source is told `FORWARD_WARNING`.
    Queued,
    /// Not taken: the queue holds its bound already; the source must retry (back-pressure,
    /// never a silent drop).
    Full,
}

/// The key of a queue: a master node (its index), or a domain without a master yet (its name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QueueKey {
    /// A known master node.
    Node(usize),
    /// A domain no master is configured for yet.
    Domain(String),
}

/// Queues of publishes per master under one bound each.
pub struct ForwardQueues {
    bound: usize,
    queues: HashMap<QueueKey, (VecDeque<Vec<u8>>, usize)>,
    queued_total: u64,
    refused_total: u64,
}

impl ForwardQueues {
    /// Queues of at most `bound` bytes each.
    pub fn new(bound: usize) -> ForwardQueues {
        ForwardQueues { bound, queues: HashMap::new(), queued_total: 0, refused_total: 0 }
    }

    /// A publish (`record`, encoded) for `key`: sent when `reachable` and nothing is queued
    /// before it (order is kept), else queued within the bound, else refused.
    pub fn publish(&mut self, key: QueueKey, record: &[u8], reachable: bool, mut send: impl FnMut(&[u8])) -> Forwarded {
        let queued = self.queues.get(&key).is_some_and(|(queue, _)| !queue.is_empty());
        if reachable && !queued {
            send(record);
            return Forwarded::Sent;
        }
        let (queue, bytes) = self.queues.entry(key).or_default();
        if *bytes + record.len() > self.bound {
            self.refused_total += 1;
            return Forwarded::Full;
        }
        *bytes += record.len();
        queue.push_back(record.to_vec());
        self.queued_total += 1;
        Forwarded::Queued
    }

    /// The master behind `key` is reachable: hands every queued publish to `send`, in order,
    /// while it accepts (`send` returns `false` to stop); returns how many went.
    pub fn flush(&mut self, key: &QueueKey, mut send: impl FnMut(&[u8]) -> bool) -> usize {
        let Some((queue, bytes)) = self.queues.get_mut(key) else { return 0 };
        let mut sent = 0;
        while let Some(record) = queue.front() {
            if !send(record) {
                break;
            }
            *bytes -= record.len();
            queue.pop_front();
            sent += 1;
        }
        if queue.is_empty() {
            self.queues.remove(key);
        }
        sent
    }

    /// A domain got a master: its queue moves to that master's (behind what is there).
    pub fn assign(&mut self, domain: &str, master: usize) {
        let Some((moved, moved_bytes)) = self.queues.remove(&QueueKey::Domain(domain.to_owned())) else { return };
        let (queue, bytes) = self.queues.entry(QueueKey::Node(master)).or_default();
        queue.extend(moved);
        *bytes += moved_bytes;
    }

    /// Bytes queued for `key`.
    pub fn queued_bytes(&self, key: &QueueKey) -> usize {
        self.queues.get(key).map_or(0, |(_, bytes)| *bytes)
    }

    /// Whether anything is queued for `key` (the source's `forward_warning`).
    pub fn is_queued(&self, key: &QueueKey) -> bool {
        self.queued_bytes(key) > 0
    }

    /// Publishes queued since start, and refused because a queue was full.
    pub fn totals(&self) -> (u64, u64) {
        (self.queued_total, self.refused_total)
    }
}
