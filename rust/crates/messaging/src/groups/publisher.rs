//! Sans-IO publisher state: sequence numbers, retention (at most QS bytes per queue), the
//! acked floor, the owner of each queue and when to resend.
//!
//! Records are encoded once, when published, into a per-queue log; a DATA message is a header
//! followed by a contiguous run of that log, so packing and resending copy bytes only once.

use std::collections::VecDeque;
use std::time::Duration;

use super::{GroupConfig, GroupError, DATA_MESSAGE_TARGET};
use crate::control::codec::{emit_record, record_length, ACK_FLAG_RESEND, DATA_FIXED_LENGTH, RECORD_FIXED_LENGTH};
use crate::control::limits::{MAX_KEY_LENGTH, MAX_PAYLOAD_LENGTH, MAX_RECORDS_PER_DATA, MAX_SUBJECT_LENGTH};
use crate::control::Timing;
use crate::control::{
    Ack, ClaimState, DataHeader, EpochGuard, Heartbeat, HeartbeatOutcome, MemberView, QueueFigures, Role,
};
use crate::time::Instant;

/// Most bytes a queue's retention log reserves (at most QS) when it first retains a record:
/// the log fills that reservation in place, so retained records are written once onto pages
/// touched once, not copied to larger allocations as it grows (`docs/benchmarks.md`).
pub const LOG_RESERVE_MAX: u64 = 64 << 20;

/// Why `publish` refused a record (nothing was taken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No live consumer in the group at all.
    NotConnected,
    /// The queue's retention (QS bytes) is full.
    BackPressured,
    /// The publisher is closed.
    Closed,
}

impl Refusal {
    /// The transport's outcome code (`NOT_CONNECTED` -1, `BACK_PRESSURED` -2, `CLOSED` -4).
    pub fn code(self) -> i64 {
        match self {
            Refusal::NotConnected => -1,
            Refusal::BackPressured => -2,
            Refusal::Closed => -4,
        }
    }
}

/// Counters of hostile or stale input the publisher ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublisherCounters {
    /// ACK entries for a queue >= QC.
    pub acks_bad_queue: u64,
    /// ACK entries acknowledging beyond what was sent.
    pub acks_beyond_sent: u64,
    /// ACKs addressed to another producer.
    pub acks_misaddressed: u64,
    /// ACK entries (or acks repeated in a claim) from a member that is not the queue's owner
    /// in that epoch: only the current owner (or, until a new owner is active, the last one)
    /// acknowledges.
    pub acks_not_owner: u64,
    /// Claims whose epoch moved beyond the bounded step (`MAX_EPOCH_STEP`).
    pub epochs_refused: u64,
    /// Claims for a queue >= QC in heartbeats.
    pub claims_bad_queue: u64,
    /// Records resent (owner change, resend timeout or request).
    pub records_resent: u64,
    /// Owner changes seen.
    pub owner_changes: u64,
}

/// One queue's send side.
#[derive(Debug)]
struct QueueSend {
    /// Encoded records; `log[0]` is at logical offset `log_base`.
    log: Vec<u8>,
    log_base: u64,
    /// Logical start offset of every retained record; record `i` has sequence `acked + 1 + i`.
    starts: VecDeque<u64>,
    /// Highest sequence acknowledged.
    acked: u64,
    /// Next sequence to assign.
    next_sequence: u64,
    /// Next sequence to send to the owner.
    next_send: u64,
    /// Highest sequence ever sent (to any owner).
    high_sent: u64,
    /// The owner (member id, epoch) records go to.
    owner: Option<(u64, u64)>,
    /// The (member id, epoch) whose acknowledgements count: the owner, kept while it releases
    /// (no active owner) until the next owner is active.
    ack_authority: Option<(u64, u64)>,
    /// Highest sequence the owner reported received in its current epoch.
    received: u64,
    /// Last ack progress, owner change or resend.
    last_progress: Instant,
}

impl QueueSend {
    fn new(now: Instant) -> Self {
        QueueSend {
            log: Vec::new(),
            log_base: 0,
            starts: VecDeque::new(),
            acked: 0,
            next_sequence: 1,
            next_send: 1,
            high_sent: 0,
            owner: None,
            ack_authority: None,
            received: 0,
            last_progress: now,
        }
    }

    fn end_offset(&self) -> u64 {
        self.log_base + self.log.len() as u64
    }

    fn retained_bytes(&self) -> u64 {
        self.starts.front().map_or(0, |start| self.end_offset() - start)
    }

    fn retained_messages(&self) -> u64 {
        self.starts.len() as u64
    }

    fn start_of(&self, sequence: u64) -> Option<u64> {
        let index = sequence.checked_sub(self.acked + 1)?;
        self.starts.get(usize::try_from(index).ok()?).copied()
    }

    fn acknowledge(&mut self, acked: u64, now: Instant) {
        if acked <= self.acked {
            return;
        }
        let count = (acked - self.acked).min(self.starts.len() as u64) as usize;
        self.starts.drain(..count);
        self.acked = acked;
        self.next_send = self.next_send.max(acked + 1);
        self.received = self.received.max(acked);
        self.last_progress = now;
        // Drop the acknowledged prefix of the log once it is worth the copy.
        let live_from = self.starts.front().copied().unwrap_or(self.end_offset());
        let dead = (live_from - self.log_base) as usize;
        if dead > 0 && (self.starts.is_empty() || dead >= 64 * 1024 && dead * 2 >= self.log.len()) {
            self.log.drain(..dead);
            self.log_base = live_from;
        }
    }

    fn rewind(&mut self, from: u64) -> u64 {
        let from = from.max(self.acked + 1);
        if from < self.next_send {
            let count = self.next_send - from;
            self.next_send = from;
            count
        } else {
            0
        }
    }
}

/// What to send: a DATA message for `queue`'s owner, ready in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataTransmit {
    /// The owner to send to.
    pub owner: u64,
    /// The queue.
    pub queue: u32,
    /// Sequence of the last record in the message (pass to [`PublisherState::commit`]).
    pub last_sequence: u64,
}

/// A queue's send figures (for status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSendStatus {
    /// The queue.
    pub queue: u32,
    /// Owner (member id, epoch) if any.
    pub owner: Option<(u64, u64)>,
    /// Highest sequence published.
    pub sent_sequence: u64,
    /// Highest sequence acknowledged.
    pub acked_sequence: u64,
    /// Bytes retained.
    pub retained_bytes: u64,
    /// Messages retained.
    pub retained_messages: u64,
}

/// The publisher's state for one group.
#[derive(Debug)]
pub struct PublisherState {
    config: GroupConfig,
    fingerprint: u64,
    producer_id: u64,
    timing: Timing,
    resend_timeout: Duration,
    view: MemberView,
    epochs: EpochGuard,
    queues: Vec<QueueSend>,
    has_consumer: bool,
    closed: bool,
    counters: PublisherCounters,
    scratch: Vec<u8>,
    message_target: usize,
    max_message: usize,
}

impl PublisherState {
    /// A publisher with id `producer_id` (nonzero) of `config`.
    pub fn new(config: GroupConfig, producer_id: u64, timing: Timing, resend_timeout: Duration, now: Instant) -> Self {
        let queues: Vec<QueueSend> = (0..config.queue_count).map(|_| QueueSend::new(now)).collect();
        let queues_len = queues.len();
        let view = MemberView::new(producer_id, config.fingerprint(), timing.liveness_timeout);
        PublisherState {
            fingerprint: config.fingerprint(),
            config,
            producer_id,
            timing,
            resend_timeout,
            view,
            epochs: EpochGuard::new(queues_len),
            queues,
            has_consumer: false,
            closed: false,
            counters: PublisherCounters::default(),
            scratch: Vec::new(),
            message_target: DATA_MESSAGE_TARGET,
            max_message: DATA_FIXED_LENGTH
                + RECORD_FIXED_LENGTH
                + MAX_KEY_LENGTH
                + MAX_SUBJECT_LENGTH
                + MAX_PAYLOAD_LENGTH,
        }
    }

    /// The group definition.
    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// This producer's id.
    pub fn producer_id(&self) -> u64 {
        self.producer_id
    }

    /// The group fingerprint.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The member view.
    pub fn view(&self) -> &MemberView {
        &self.view
    }

    /// Excuses this member's own pause of `pause` ([`MemberView::excuse_pause`]).
    pub fn excuse_pause(&mut self, pause: Duration) {
        self.view.excuse_pause(pause);
    }

    /// Counters of ignored input.
    pub fn counters(&self) -> PublisherCounters {
        self.counters
    }

    /// Sets the transport's largest message: DATA messages are packed to at most
    /// `min(DATA_MESSAGE_TARGET, max_message)` bytes and a record must fit in `max_message`.
    pub fn set_max_message_length(&mut self, max_message: usize) {
        self.max_message = max_message.max(DATA_FIXED_LENGTH + RECORD_FIXED_LENGTH);
        self.message_target = DATA_MESSAGE_TARGET.min(self.max_message - DATA_FIXED_LENGTH);
    }

    /// Refuses every further publish.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Whether any consumer is live (as of the last heartbeat or timeout handling).
    pub fn has_consumer(&self) -> bool {
        self.has_consumer
    }

    fn admit(&self) -> Result<(), Refusal> {
        if self.closed {
            Err(Refusal::Closed)
        } else if !self.has_consumer {
            Err(Refusal::NotConnected)
        } else {
            Ok(())
        }
    }

    /// Publishes a keyed record: hashes `key` to its bucket and queue, retains it and returns
    /// its sequence number (per queue, from 1). `Err(Ok(refusal))` took nothing; `Err(Err(_))`
    /// is a record the group can never carry.
    pub fn publish(
        &mut self,
        key: &[u8],
        topic: Option<&str>,
        payload: &[u8],
    ) -> Result<(u32, u64), Result<Refusal, GroupError>> {
        let bucket = self.config.bucket(key);
        let queue = self.config.queue_of_bucket(bucket);
        let subject = topic.map(|topic| self.config.subject(bucket, topic));
        self.append(queue, bucket, key, subject.as_deref(), payload).map(|sequence| (queue, sequence))
    }

    /// Publishes a record to `queue` directly (its bucket is reported as `queue`).
    pub fn publish_to_queue(
        &mut self,
        queue: u32,
        key: &[u8],
        payload: &[u8],
    ) -> Result<u64, Result<Refusal, GroupError>> {
        if queue >= self.config.queue_count {
            return Err(Err(GroupError::Definition(format!(
                "queue {queue}: must be less than the queue count QC={}",
                self.config.queue_count
            ))));
        }
        self.append(queue, queue, key, None, payload)
    }

    fn append(
        &mut self,
        queue: u32,
        bucket: u32,
        key: &[u8],
        subject: Option<&str>,
        payload: &[u8],
    ) -> Result<u64, Result<Refusal, GroupError>> {
        self.admit().map_err(Ok)?;
        let length = record_length(key, subject, payload);
        let max = (self.config.queue_size as usize).min(self.max_message.saturating_sub(DATA_FIXED_LENGTH));
        if length > max || payload.len() > MAX_PAYLOAD_LENGTH || key.len() > MAX_KEY_LENGTH {
            return Err(Err(GroupError::RecordTooLong { length, max }));
        }
        let queue_size = self.config.queue_size;
        let Some(state) = self.queues.get_mut(queue as usize) else {
            return Err(Err(GroupError::Definition(format!("queue {queue} out of range"))));
        };
        if state.retained_bytes() + length as u64 > queue_size {
            return Err(Ok(Refusal::BackPressured));
        }
        if state.log.capacity() == 0 {
            // Address space only: pages are backed as records are written. Without it, the
            // log grows by reallocation, copying what it holds onto fresh pages each time.
            // Refused (strict overcommit): the log grows as it needs.
            let _ = state.log.try_reserve_exact(queue_size.min(LOG_RESERVE_MAX) as usize);
        }
        let start = state.end_offset();
        emit_record(&mut state.log, bucket, key, subject, payload)
            .map_err(|e| Err(GroupError::Definition(e.to_string())))?;
        state.starts.push_back(start);
        let sequence = state.next_sequence;
        state.next_sequence += 1;
        Ok(sequence)
    }

    /// Whether `queue` has records not yet sent to a known owner.
    pub fn has_unsent(&self, queue: u32) -> bool {
        self.queues.get(queue as usize).is_some_and(|q| q.owner.is_some() && q.next_send < q.next_sequence)
    }

    /// Builds the next DATA message for `queue` into `out` (cleared first): the records from
    /// the next unsent one, packed up to [`DATA_MESSAGE_TARGET`] bytes (at least one record).
    /// Returns `None` when there is nothing to send or no owner. Call [`Self::commit`] once the
    /// transport took it; otherwise the same records are built again next time.
    pub fn build_data(&self, queue: u32, out: &mut Vec<u8>) -> Option<DataTransmit> {
        let state = self.queues.get(queue as usize)?;
        let (owner, epoch) = state.owner?;
        if state.next_send >= state.next_sequence {
            return None;
        }
        let first = state.next_send;
        let start = state.start_of(first)?;
        let mut last = first;
        let mut end = state.start_of(first + 1).unwrap_or(state.end_offset());
        while last + 1 < state.next_sequence && ((last + 1 - first) as usize) < MAX_RECORDS_PER_DATA {
            let next_end = state.start_of(last + 2).unwrap_or(state.end_offset());
            if (next_end - start) as usize > self.message_target {
                break;
            }
            last += 1;
            end = next_end;
        }
        out.clear();
        DataHeader {
            fingerprint: self.fingerprint,
            producer: self.producer_id,
            queue,
            record_count: (last - first + 1) as u32,
            epoch,
            acked_floor: state.acked,
            first_sequence: first,
        }
        .emit(out);
        let from = (start - state.log_base) as usize;
        let to = (end - state.log_base) as usize;
        out.extend_from_slice(state.log.get(from..to)?);
        Some(DataTransmit { owner, queue, last_sequence: last })
    }

    /// The transport took the message ending at `last_sequence`.
    pub fn commit(&mut self, queue: u32, last_sequence: u64) {
        if let Some(state) = self.queues.get_mut(queue as usize) {
            if last_sequence >= state.next_send && last_sequence < state.next_sequence {
                state.next_send = last_sequence + 1;
                state.high_sent = state.high_sent.max(last_sequence);
            }
        }
    }

    /// Handles an ACK from a consumer.
    pub fn on_ack(&mut self, ack: &Ack, now: Instant) {
        if ack.producer != self.producer_id || ack.fingerprint != self.fingerprint {
            self.counters.acks_misaddressed += 1;
            return;
        }
        for entry in &ack.entries {
            let Some(state) = self.queues.get_mut(entry.queue as usize) else {
                self.counters.acks_bad_queue += 1;
                continue;
            };
            // Only the owner in its epoch acknowledges; checked before anything is applied.
            if state.ack_authority != Some((ack.consumer, entry.epoch)) {
                self.counters.acks_not_owner += 1;
                continue;
            }
            if entry.acked > state.high_sent || entry.received > state.high_sent {
                self.counters.acks_beyond_sent += 1;
                continue;
            }
            state.acknowledge(entry.acked, now);
            if state.owner == Some((ack.consumer, entry.epoch)) {
                if entry.received > state.received {
                    state.received = entry.received;
                    state.last_progress = now;
                }
                if entry.flags & ACK_FLAG_RESEND != 0 {
                    self.counters.records_resent += state.rewind(entry.received + 1);
                }
            }
        }
    }

    /// Handles a heartbeat: membership, owners and the acks repeated in claims.
    /// Claims beyond the bounded epoch step are removed first (counted in `epochs_refused`).
    pub fn on_heartbeat(&mut self, mut heartbeat: Heartbeat, now: Instant) -> HeartbeatOutcome {
        if heartbeat.fingerprint == self.fingerprint && heartbeat.member_id != self.producer_id {
            self.counters.epochs_refused += self.epochs.admit(&mut heartbeat.claims);
        }
        let outcome = self.view.on_heartbeat(heartbeat, now);
        if matches!(outcome, HeartbeatOutcome::Joined | HeartbeatOutcome::Refreshed) {
            self.refresh(now);
        }
        outcome
    }

    /// Recomputes owners and the live-consumer flag; applies acks repeated in heartbeats.
    fn refresh(&mut self, now: Instant) {
        let queue_count = self.config.queue_count as usize;
        let mut best: Vec<Option<(u64, u64, ClaimState)>> = vec![None; queue_count];
        // (queue, member, epoch, acked): applied only from the ack authority of the queue.
        let mut repeated_acks: Vec<(usize, u64, u64, u64)> = Vec::new();
        let mut has_consumer = false;
        let mut bad_queue = 0;
        for entry in self.view.live_with_role(Role::Consumer, now) {
            has_consumer = true;
            for claim in &entry.heartbeat.claims {
                let Some(slot) = best.get_mut(claim.queue as usize) else {
                    bad_queue += 1;
                    continue;
                };
                for ack in claim.acks.iter().filter(|ack| ack.producer == self.producer_id) {
                    repeated_acks.push((claim.queue as usize, entry.id(), claim.epoch, ack.acked));
                }
                if !claim.state.holds() {
                    continue;
                }
                let candidate = (entry.id(), claim.epoch, claim.state);
                let better = match slot {
                    None => true,
                    Some((id, epoch, _)) => claim.epoch > *epoch || (claim.epoch == *epoch && entry.id() < *id),
                };
                if better {
                    *slot = Some(candidate);
                }
            }
        }
        self.counters.claims_bad_queue += bad_queue;
        self.has_consumer = has_consumer;
        // The acks of the previous authority (a released owner's final acks) still count in
        // the refresh that hands the queue to its next owner.
        let previous: Vec<Option<(u64, u64)>> = self.queues.iter().map(|q| q.ack_authority).collect();
        for (state, best) in self.queues.iter_mut().zip(best) {
            let owner = best.filter(|(_, _, claim)| *claim == ClaimState::Active).map(|(id, epoch, _)| (id, epoch));
            if owner.is_some() {
                state.ack_authority = owner;
            }
            if owner != state.owner {
                state.owner = owner;
                state.received = state.acked;
                state.last_progress = now;
                if owner.is_some() {
                    self.counters.owner_changes += 1;
                    self.counters.records_resent += state.rewind(state.acked + 1);
                }
            }
        }
        for (queue, member, epoch, acked) in repeated_acks {
            let Some(state) = self.queues.get_mut(queue) else { continue };
            let from = Some((member, epoch));
            // Not counted: every claim repeats its acks each heartbeat, a released one long after.
            if from != state.ack_authority && from != previous.get(queue).copied().flatten() {
                continue;
            }
            if acked <= state.high_sent {
                state.acknowledge(acked, now);
            } else {
                self.counters.acks_beyond_sent += 1;
            }
        }
    }

    /// Timers: liveness expiry (owners may change) and the resend timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.refresh(now);
        self.view.expire(now, self.timing.liveness_timeout * 5);
        for state in &mut self.queues {
            if state.owner.is_none() || state.high_sent <= state.acked {
                continue;
            }
            if now.saturating_since(state.last_progress) < self.resend_timeout {
                continue;
            }
            state.last_progress = now;
            if state.received < state.high_sent {
                self.counters.records_resent += state.rewind(state.acked.max(state.received) + 1);
            }
        }
    }

    /// Whether everything published has been acknowledged.
    pub fn all_acked(&self) -> bool {
        self.queues.iter().all(|q| q.acked + 1 == q.next_sequence)
    }

    /// Per-queue figures (for status and heartbeats).
    pub fn queue_status(&self) -> Vec<QueueSendStatus> {
        self.queues
            .iter()
            .enumerate()
            .map(|(queue, state)| QueueSendStatus {
                queue: queue as u32,
                owner: state.owner,
                sent_sequence: state.next_sequence - 1,
                acked_sequence: state.acked,
                retained_bytes: state.retained_bytes(),
                retained_messages: state.retained_messages(),
            })
            .collect()
    }

    /// This publisher's heartbeat.
    pub fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        let figures = self
            .queue_status()
            .into_iter()
            .filter(|q| q.sent_sequence > 0)
            .map(|q| QueueFigures {
                queue: q.queue,
                owner: q.owner.map_or(0, |(id, _)| id),
                epoch: q.owner.map_or(0, |(_, epoch)| epoch),
                sent: q.sent_sequence,
                acked: q.acked_sequence,
                retained_bytes: q.retained_bytes,
                retained_messages: q.retained_messages,
            })
            .collect();
        Heartbeat {
            fingerprint: self.fingerprint,
            member_id: self.producer_id,
            leaving: self.closed,
            role: Role::Publisher,
            name: name.to_owned(),
            endpoint: endpoint.to_owned(),
            index: 0,
            count: 0,
            pid,
            claims: Vec::new(),
            figures,
        }
    }

    /// A scratch buffer callers may use for [`Self::build_data`].
    pub fn take_scratch(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.scratch)
    }

    /// Returns the scratch buffer.
    pub fn put_scratch(&mut self, buffer: Vec<u8>) {
        self.scratch = buffer;
    }
}
