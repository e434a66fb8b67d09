//! One duty cycle's worth of a publication's datagrams, shared by the UDP sender and the IPC
//! agent so both drain publications (and run their idle work) the same way.

use std::time::Duration;

use crate::protocol::NetworkPublication;
use crate::time::Instant;

/// How often a publication that keeps sending still gets its idle work (flow-control
/// receiver expiry, lifecycle).
const IDLE_INTERVAL: Duration = Duration::from_millis(1);

/// Datagrams stored back to back, with their lengths.
#[derive(Debug)]
pub struct TransmitBatch {
    bytes: Vec<u8>,
    lengths: Vec<usize>,
    scratch: Vec<u8>,
}

impl Default for TransmitBatch {
    fn default() -> Self {
        TransmitBatch { bytes: Vec::new(), lengths: Vec::new(), scratch: vec![0; 65536] }
    }
}

impl TransmitBatch {
    /// Replaces the batch with up to `budget` datagrams from `publication`, then runs its idle
    /// work when it had nothing to send or `last_idle` is older than a millisecond.
    pub fn fill(&mut self, publication: &mut NetworkPublication, now: Instant, last_idle: &mut Instant, budget: usize) {
        self.bytes.clear();
        self.lengths.clear();
        for _ in 0..budget {
            match publication.poll_transmit(now, &mut self.scratch) {
                Some(length) => {
                    self.bytes.extend_from_slice(&self.scratch[..length]);
                    self.lengths.push(length);
                }
                None => break,
            }
        }
        if self.lengths.is_empty() || now.saturating_since(*last_idle) >= IDLE_INTERVAL {
            publication.on_idle(now);
            *last_idle = now;
        }
    }

    /// Datagrams in the batch.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The datagrams, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.lengths.iter().scan(0usize, move |offset, &length| {
            let datagram = &self.bytes[*offset..*offset + length];
            *offset += length;
            Some(datagram)
        })
    }
}
