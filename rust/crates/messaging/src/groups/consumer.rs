//! Sans-IO consumer state: which queues this consumer owns, and what it has delivered and
//! acknowledged per (producer, queue).
//!
//! Ownership of queue `q` (see `docs/groups.md`):
//!
//! ```text
//!  (none) --first live candidate, epoch = max seen + 1--> claiming
//!  claiming --settle period with no better claim--> active      (better claim: drop it)
//!             (none when no other live candidate could contend and the queue was held before)
//!  active --cycle, primary live / close()--> releasing          (higher epoch seen: lost)
//!  releasing --application acked all delivered--> released (final acks announced)
//! ```
//!
//! Candidates for a queue nobody holds are ranked by `((index - q % count) mod count, member
//! id)`; a claim beats another with a higher epoch, or the same epoch and a lower member id.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::GroupConfig;
use crate::control::codec::{RecordView, ACK_FLAG_RESEND};
use crate::control::limits::{MAX_ACKS_PER_CLAIM, MAX_CONTROL_MESSAGE_LENGTH};
use crate::control::Timing;
use crate::control::{
    Ack, AckEntry, Claim, ClaimState, ControlError, DataMessage, EpochGuard, Heartbeat, HeartbeatOutcome, MemberView,
    ProducerAck, Role,
};
use crate::time::Instant;

/// Most producers tracked per queue; the least recently active is forgotten beyond it.
pub const MAX_PRODUCERS_PER_QUEUE: usize = 4096;
/// A release still waiting for the application's acknowledgements after this many liveness
/// timeouts is forced: what was delivered but not acknowledged is redelivered by the next owner.
pub const RELEASE_TIMEOUT_LIVENESS: u32 = 5;
/// A gap is re-reported to the producer after this long.
pub const RESEND_REQUEST_INTERVAL: Duration = Duration::from_millis(50);

/// A record ready for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The queue.
    pub queue: u32,
    /// The key's bucket.
    pub bucket: u32,
    /// The producer.
    pub producer: u64,
    /// Sequence per (producer, queue).
    pub sequence: u64,
    /// The owner's epoch when it was received.
    pub epoch: u64,
    /// The key.
    pub key: Vec<u8>,
    /// The subject, if any.
    pub subject: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A record given to the application, borrowed from a [`DeliveryBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryRef<'a> {
    /// The queue.
    pub queue: u32,
    /// The key's bucket.
    pub bucket: u32,
    /// The producer.
    pub producer: u64,
    /// Sequence per (producer, queue).
    pub sequence: u64,
    /// The owner's epoch when it was received.
    pub epoch: u64,
    /// The key.
    pub key: &'a [u8],
    /// The subject, if any.
    pub subject: Option<&'a str>,
    /// The payload.
    pub payload: &'a [u8],
}

impl DeliveryRef<'_> {
    /// The same record with its bytes copied out.
    pub fn to_delivery(&self) -> Delivery {
        Delivery {
            queue: self.queue,
            bucket: self.bucket,
            producer: self.producer,
            sequence: self.sequence,
            epoch: self.epoch,
            key: self.key.to_vec(),
            subject: self.subject.map(str::to_owned),
            payload: self.payload.to_vec(),
        }
    }
}

/// A record's figures and where its key, subject and payload lie in a byte buffer (key,
/// subject, payload back to back from `start`).
#[derive(Clone, Copy, Debug)]
struct RecordSlot {
    queue: u32,
    bucket: u32,
    producer: u64,
    sequence: u64,
    epoch: u64,
    /// Offset of the key in the buffer (for the pending records: a logical offset, see
    /// `ConsumerState::pending_base`).
    start: u64,
    key_length: u32,
    /// `u32::MAX`: no subject.
    subject_length: u32,
    payload_length: u32,
}

impl RecordSlot {
    fn length(&self) -> usize {
        self.key_length as usize + self.subject_length() + self.payload_length as usize
    }

    fn subject_length(&self) -> usize {
        if self.subject_length == u32::MAX {
            0
        } else {
            self.subject_length as usize
        }
    }

    /// The record, its bytes read from `bytes` (which starts at the record's key).
    fn view<'a>(&self, bytes: &'a [u8]) -> Option<DeliveryRef<'a>> {
        let key_end = self.key_length as usize;
        let subject_end = key_end + self.subject_length();
        let subject = if self.subject_length == u32::MAX {
            None
        } else {
            Some(std::str::from_utf8(bytes.get(key_end..subject_end)?).ok()?)
        };
        Some(DeliveryRef {
            queue: self.queue,
            bucket: self.bucket,
            producer: self.producer,
            sequence: self.sequence,
            epoch: self.epoch,
            key: bytes.get(..key_end)?,
            subject,
            payload: bytes.get(subject_end..subject_end + self.payload_length as usize)?,
        })
    }
}

/// Records given to the application by one poll, their bytes in one buffer: filling it again
/// reuses its memory, so delivering costs no allocation per record ([`ConsumerState::deliver_batch`]).
#[derive(Debug, Default)]
pub struct DeliveryBatch {
    bytes: Vec<u8>,
    records: Vec<RecordSlot>,
}

impl DeliveryBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Empties the batch (its memory is kept for the next fill).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.records.clear();
    }

    /// Record `index`, in delivery order.
    pub fn get(&self, index: usize) -> Option<DeliveryRef<'_>> {
        let slot = self.records.get(index)?;
        slot.view(self.bytes.get(slot.start as usize..)?)
    }

    /// The records in delivery order.
    pub fn iter(&self) -> impl Iterator<Item = DeliveryRef<'_>> + '_ {
        (0..self.len()).filter_map(|index| self.get(index))
    }

    /// Appends `record` (its figures in `slot`, whose `start` is set here).
    fn push(&mut self, slot: RecordSlot, record: &RecordView<'_>) {
        let start = self.bytes.len() as u64;
        append_record(&mut self.bytes, record);
        self.records.push(RecordSlot { start, ..slot });
    }
}

/// Appends a record's key, subject and payload, back to back, to `bytes`.
fn append_record(bytes: &mut Vec<u8>, record: &RecordView<'_>) {
    bytes.extend_from_slice(record.key);
    if let Some(subject) = record.subject {
        bytes.extend_from_slice(subject.as_bytes());
    }
    bytes.extend_from_slice(record.payload);
}

/// Dead bytes at the front of the pending records' buffer worth moving the live ones down
/// (once they are also at least half of it): bounds the buffer when the application polls
/// fewer records than arrive, without a copy per poll.
const PENDING_COMPACT_BYTES: usize = 64 * 1024;

/// Counters of what the consumer dropped or ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumerCounters {
    /// Records delivered to the application.
    pub delivered: u64,
    /// Records dropped as already received.
    pub duplicates_dropped: u64,
    /// DATA messages for a queue not owned (actively) in that epoch.
    pub not_owned_dropped: u64,
    /// DATA messages that failed to decode (or from another group).
    pub malformed: u64,
    /// DATA messages or claims naming a queue >= QC.
    pub bad_queue: u64,
    /// DATA messages whose acked floor is not below their first sequence.
    pub bad_floor: u64,
    /// Gaps seen (a resend was requested).
    pub gaps: u64,
    /// Acks for messages of a queue no longer owned in that epoch.
    pub stale_acks: u64,
    /// Queues lost to a better claim while held.
    pub ownership_lost: u64,
    /// Claims started.
    pub claims: u64,
    /// Queues released (planned handoff).
    pub releases: u64,
    /// Claims whose epoch moved beyond the bounded step (`MAX_EPOCH_STEP`), ignored.
    pub epochs_refused: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// Highest sequence accepted in order (delivered or waiting).
    received: u64,
    /// Highest sequence given to the application.
    delivered: u64,
    /// Highest sequence the application acknowledged.
    acked: u64,
    /// A gap is open; when it was last reported.
    gap_reported: Option<Instant>,
    gap_open: bool,
    last_active: u64,
}

#[derive(Debug, Default)]
struct QueueOwn {
    state: Option<ClaimState>,
    epoch: u64,
    since: Instant,
    cursors: HashMap<u64, Cursor>,
    released_acks: Vec<ProducerAck>,
}

/// Per-queue ownership, for status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedQueue {
    /// The queue.
    pub queue: u32,
    /// Claim state.
    pub state: ClaimState,
    /// Epoch.
    pub epoch: u64,
}

/// The consumer's state for one group.
#[derive(Debug)]
pub struct ConsumerState {
    config: GroupConfig,
    fingerprint: u64,
    member_id: u64,
    index: u32,
    count: u32,
    timing: Timing,
    cycle: Duration,
    view: MemberView,
    epochs: EpochGuard,
    queues: Vec<QueueOwn>,
    max_epoch: Vec<u64>,
    known_acks: Vec<HashMap<u64, u64>>,
    /// Records accepted in order, waiting for the application; their bytes are in
    /// `pending_bytes`, whose first byte is at logical offset `pending_base`.
    pending: VecDeque<RecordSlot>,
    pending_bytes: Vec<u8>,
    pending_base: u64,
    next_cycle: Instant,
    closing: bool,
    discovery_complete: bool,
    ack_dirty: HashSet<u64>,
    announce: bool,
    activity: u64,
    counters: ConsumerCounters,
}

impl ConsumerState {
    /// A consumer `index` of `count` (already checked with [`super::check_consumer`]).
    pub fn new(
        config: GroupConfig,
        member_id: u64,
        index: u32,
        count: u32,
        timing: Timing,
        cycle: Duration,
        now: Instant,
    ) -> Self {
        let queue_count = config.queue_count as usize;
        let view = MemberView::new(member_id, config.fingerprint(), timing.liveness_timeout);
        ConsumerState {
            fingerprint: config.fingerprint(),
            config,
            member_id,
            index,
            count: count.max(1),
            timing,
            cycle,
            view,
            epochs: EpochGuard::new(queue_count),
            queues: (0..queue_count).map(|_| QueueOwn::default()).collect(),
            max_epoch: vec![0; queue_count],
            known_acks: (0..queue_count).map(|_| HashMap::new()).collect(),
            pending: VecDeque::new(),
            pending_bytes: Vec::new(),
            pending_base: 0,
            next_cycle: now + cycle,
            closing: false,
            discovery_complete: true,
            ack_dirty: HashSet::new(),
            announce: false,
            activity: 0,
            counters: ConsumerCounters::default(),
        }
    }

    /// The member id.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    /// The group definition.
    pub fn config(&self) -> &GroupConfig {
        &self.config
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

    /// Counters.
    pub fn counters(&self) -> ConsumerCounters {
        self.counters
    }

    /// Consumer index and count.
    pub fn index_count(&self) -> (u32, u32) {
        (self.index, self.count)
    }

    /// While `false`, the consumer claims nothing (peers found on disk are not heard yet).
    pub fn set_discovery_complete(&mut self, complete: bool) {
        self.discovery_complete = complete;
    }

    /// Whether a state change should be announced now (then cleared).
    pub fn take_announce(&mut self) -> bool {
        std::mem::take(&mut self.announce)
    }

    /// Queues held (claiming, active or releasing), ascending.
    pub fn owned(&self) -> Vec<OwnedQueue> {
        self.queues
            .iter()
            .enumerate()
            .filter_map(|(queue, own)| {
                let state = own.state?;
                state.holds().then_some(OwnedQueue { queue: queue as u32, state, epoch: own.epoch })
            })
            .collect()
    }

    /// Queues this consumer delivers (active or releasing), ascending.
    pub fn owned_queues(&self) -> Vec<u32> {
        self.owned()
            .into_iter()
            .filter(|q| matches!(q.state, ClaimState::Active | ClaimState::Releasing))
            .map(|q| q.queue)
            .collect()
    }

    fn rank_of(index: u32, count: u32, queue: u32) -> Option<u32> {
        if count == 0 || index >= count {
            return None;
        }
        let (index, count) = (u64::from(index), u64::from(count));
        let primary = u64::from(queue) % count;
        // u64: a hostile heartbeat may announce count = u32::MAX.
        Some(((index + count - primary) % count) as u32)
    }

    /// The first live candidate for `queue` (ourselves included unless closing).
    fn first_candidate(&self, queue: u32, now: Instant) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = if self.closing {
            None
        } else {
            Self::rank_of(self.index, self.count, queue).map(|rank| (rank, self.member_id))
        };
        for entry in self.view.live_with_role(Role::Consumer, now) {
            if !self.view.is_candidate(entry.id(), now) {
                continue;
            }
            let hb = &entry.heartbeat;
            let Some(rank) = Self::rank_of(hb.index, hb.count, queue) else { continue };
            let candidate = (rank, entry.id());
            if best.is_none_or(|b| candidate < b) {
                best = Some(candidate);
            }
        }
        best
    }

    /// How long a claim at `epoch` waits for a better claim before delivering.
    ///
    /// While the group starts up (epoch 1) the longer [`super::startup_settle`]: consumers
    /// started together come up some intervals apart, and later starters must still win their
    /// primaries. Above epoch 1 (a failover, or a handoff) a contending claim can only come from
    /// another live candidate consumer (a new one claims nothing before it has heard every member
    /// it discovered, and then sees our claim): with one in view, [`super::settle`]; with none,
    /// nobody can contend: no settle.
    fn settle_period(&self, epoch: u64, now: Instant) -> Duration {
        if epoch <= 1 {
            return super::startup_settle(&self.timing);
        }
        let contenders =
            self.view.live_with_role(Role::Consumer, now).any(|entry| self.view.is_candidate(entry.id(), now));
        if contenders {
            super::settle(&self.timing)
        } else {
            Duration::ZERO
        }
    }

    /// Whether a live consumer other than us is the primary (rank 0) of `queue`.
    fn other_primary_live(&self, queue: u32, now: Instant) -> bool {
        self.view.live_with_role(Role::Consumer, now).any(|entry| {
            self.view.is_candidate(entry.id(), now)
                && Self::rank_of(entry.heartbeat.index, entry.heartbeat.count, queue) == Some(0)
        })
    }

    /// The best claim by another live member that holds each queue: (epoch, member id).
    /// One pass over every claim heard.
    fn best_other_claims(&self, now: Instant) -> Vec<Option<(u64, u64)>> {
        let mut best: Vec<Option<(u64, u64)>> = vec![None; self.queues.len()];
        for entry in self.view.live_with_role(Role::Consumer, now) {
            for claim in entry.heartbeat.claims.iter().filter(|c| c.state.holds()) {
                let Some(slot) = best.get_mut(claim.queue as usize) else { continue };
                let candidate = (claim.epoch, entry.id());
                if slot.is_none_or(|current| Self::beats(candidate, current)) {
                    *slot = Some(candidate);
                }
            }
        }
        best
    }

    fn beats(other: (u64, u64), mine: (u64, u64)) -> bool {
        other.0 > mine.0 || (other.0 == mine.0 && other.1 < mine.1)
    }

    /// Handles a heartbeat from any member.
    /// Claims beyond the bounded epoch step are removed first (counted in `epochs_refused`).
    pub fn on_heartbeat(&mut self, mut heartbeat: Heartbeat, now: Instant) -> HeartbeatOutcome {
        if heartbeat.fingerprint == self.fingerprint && heartbeat.member_id != self.member_id {
            self.counters.epochs_refused += self.epochs.admit(&mut heartbeat.claims);
            for claim in &heartbeat.claims {
                let queue = claim.queue as usize;
                let (Some(max_epoch), Some(known)) = (self.max_epoch.get_mut(queue), self.known_acks.get_mut(queue))
                else {
                    self.counters.bad_queue += 1;
                    continue;
                };
                *max_epoch = (*max_epoch).max(claim.epoch);
                for ack in &claim.acks {
                    if known.len() < MAX_PRODUCERS_PER_QUEUE || known.contains_key(&ack.producer) {
                        let value = known.entry(ack.producer).or_insert(0);
                        *value = (*value).max(ack.acked);
                    }
                }
            }
        }
        self.view.on_heartbeat(heartbeat, now)
    }

    fn drop_pending(&mut self, queue: u32) {
        self.pending.retain(|d| d.queue != queue);
        self.reclaim_pending_bytes();
        if let Some(own) = self.queues.get_mut(queue as usize) {
            for cursor in own.cursors.values_mut() {
                cursor.received = cursor.delivered;
                cursor.gap_open = false;
            }
        }
    }

    fn lose(&mut self, queue: u32) {
        self.drop_pending(queue);
        if let Some(own) = self.queues.get_mut(queue as usize) {
            own.state = None;
            own.cursors.clear();
            own.released_acks.clear();
        }
        self.counters.ownership_lost += 1;
        self.announce = true;
    }

    fn claim(&mut self, queue: u32, now: Instant) {
        let q = queue as usize;
        let epoch = self.max_epoch.get(q).copied().unwrap_or(0).saturating_add(1);
        let floor: HashMap<u64, u64> = self.known_acks.get(q).cloned().unwrap_or_default();
        if let Some(own) = self.queues.get_mut(q) {
            own.state = Some(ClaimState::Claiming);
            own.epoch = epoch;
            own.since = now;
            own.released_acks.clear();
            own.cursors = floor
                .into_iter()
                .map(|(producer, acked)| {
                    (producer, Cursor { received: acked, delivered: acked, acked, ..Cursor::default() })
                })
                .collect();
            if let Some(max_epoch) = self.max_epoch.get_mut(q) {
                *max_epoch = epoch;
            }
            self.epochs.note(queue, epoch);
            self.ack_dirty.extend(own.cursors.keys().copied());
        }
        self.counters.claims += 1;
        self.announce = true;
    }

    fn start_release(&mut self, queue: u32, now: Instant) {
        self.drop_pending(queue);
        if let Some(own) = self.queues.get_mut(queue as usize) {
            if own.state == Some(ClaimState::Active) {
                own.state = Some(ClaimState::Releasing);
                own.since = now;
                self.announce = true;
            } else if own.state == Some(ClaimState::Claiming) {
                own.state = None;
                self.announce = true;
            }
        }
    }

    /// Announces `released` once the application acknowledged everything delivered (or at
    /// once when `force`: what was delivered but not acknowledged will be redelivered).
    fn finish_release(&mut self, queue: u32, force: bool) {
        let Some(own) = self.queues.get_mut(queue as usize) else { return };
        if own.state != Some(ClaimState::Releasing) {
            return;
        }
        if !force && own.cursors.values().any(|c| c.acked < c.delivered) {
            return;
        }
        own.released_acks = own
            .cursors
            .iter()
            .map(|(producer, c)| ProducerAck { producer: *producer, acked: c.acked, received: c.acked })
            .collect();
        if let Some(known) = self.known_acks.get_mut(queue as usize) {
            for ack in &own.released_acks {
                let value = known.entry(ack.producer).or_insert(0);
                *value = (*value).max(ack.acked);
            }
        }
        own.state = Some(ClaimState::Released);
        own.cursors.clear();
        self.counters.releases += 1;
        self.announce = true;
    }

    /// Timers: liveness, claims, settle, the primary/backup cycle and release completion.
    pub fn handle_timeout(&mut self, now: Instant) {
        let cycle_due = now >= self.next_cycle;
        if cycle_due {
            self.next_cycle = now + self.cycle;
        }
        let best_others = self.best_other_claims(now);
        for queue in 0..self.config.queue_count {
            let q = queue as usize;
            let Some(own) = self.queues.get(q) else { continue };
            let state = own.state;
            let mine = (own.epoch, self.member_id);
            let since = own.since;
            let other = best_others.get(q).copied().flatten();
            match state {
                None | Some(ClaimState::Released) => {
                    if state == Some(ClaimState::Released) && other.is_some_and(|o| o.0 > mine.0) {
                        if let Some(own) = self.queues.get_mut(q) {
                            own.state = None;
                            own.released_acks.clear();
                        }
                    }
                    if other.is_none()
                        && !self.closing
                        && self.discovery_complete
                        && self.first_candidate(queue, now).is_some_and(|(_, id)| id == self.member_id)
                    {
                        self.claim(queue, now);
                    }
                }
                Some(ClaimState::Claiming) => {
                    let yielded = self.first_candidate(queue, now).is_none_or(|(_, id)| id != self.member_id);
                    if yielded || other.is_some_and(|o| Self::beats(o, mine)) {
                        if let Some(own) = self.queues.get_mut(q) {
                            own.state = None;
                            own.cursors.clear();
                        }
                        self.announce = true;
                    } else if now.saturating_since(since) >= self.settle_period(mine.0, now) {
                        if let Some(own) = self.queues.get_mut(q) {
                            own.state = Some(ClaimState::Active);
                        }
                        self.announce = true;
                    }
                }
                Some(ClaimState::Active) | Some(ClaimState::Releasing) => {
                    if other.is_some_and(|o| Self::beats(o, mine)) {
                        self.lose(queue);
                        continue;
                    }
                    if state == Some(ClaimState::Active)
                        && cycle_due
                        && Self::rank_of(self.index, self.count, queue) != Some(0)
                        && self.other_primary_live(queue, now)
                    {
                        self.start_release(queue, now);
                    }
                    let overdue = state == Some(ClaimState::Releasing)
                        && now.saturating_since(since) >= self.timing.liveness_timeout * RELEASE_TIMEOUT_LIVENESS;
                    self.finish_release(queue, overdue);
                }
            }
        }
        self.view.expire(now, self.timing.liveness_timeout * 5);
    }

    /// Starts a clean leave: nothing new is delivered, every held queue is released once the
    /// application acknowledged what it has; the heartbeat says "leaving" from now on.
    pub fn begin_close(&mut self, auto_ack: bool, now: Instant) {
        if auto_ack {
            self.ack_all_delivered();
        }
        self.closing = true;
        for queue in 0..self.config.queue_count {
            self.start_release(queue, now);
            self.finish_release(queue, false);
        }
        self.announce = true;
    }

    /// Releases every queue still releasing, whatever was acknowledged.
    pub fn force_release(&mut self) {
        for queue in 0..self.config.queue_count {
            self.finish_release(queue, true);
        }
    }

    /// Whether a close has nothing left to wait for: no queue held, and every released queue
    /// taken over by another live member (or no other consumer is live to take it).
    pub fn close_complete(&self, now: Instant) -> bool {
        let others_live = self.view.live_with_role(Role::Consumer, now).any(|e| self.view.is_candidate(e.id(), now));
        let best_others = self.best_other_claims(now);
        self.queues.iter().zip(best_others).all(|(own, other)| match own.state {
            None => true,
            Some(ClaimState::Released) => !others_live || other.is_some_and(|(epoch, _)| epoch > own.epoch),
            Some(_) => false,
        })
    }

    /// Handles a DATA message; returns the records accepted for delivery.
    pub fn on_data(&mut self, bytes: &[u8], now: Instant) -> Result<usize, ControlError> {
        self.on_data_into(bytes, now, None)
    }

    /// Like [`Self::on_data`], delivering straight into `batch` (up to `max` records in it) the
    /// accepted records that [`Self::deliver_batch`] would give next: while no record is
    /// pending, each one is copied once, from the DATA message into the batch, and marked
    /// delivered; the rest wait as with [`Self::on_data`]. Order and acknowledgements are those
    /// of `on_data` followed by `deliver_batch`.
    pub fn on_data_batch(
        &mut self,
        bytes: &[u8],
        now: Instant,
        batch: &mut DeliveryBatch,
        max: usize,
    ) -> Result<usize, ControlError> {
        self.on_data_into(bytes, now, Some((batch, max)))
    }

    fn on_data_into(
        &mut self,
        bytes: &[u8],
        now: Instant,
        mut direct: Option<(&mut DeliveryBatch, usize)>,
    ) -> Result<usize, ControlError> {
        let message = match DataMessage::parse(bytes) {
            Ok(message) => message,
            Err(error) => {
                self.counters.malformed += 1;
                return Err(error);
            }
        };
        let header = message.header;
        if header.fingerprint != self.fingerprint {
            self.counters.malformed += 1;
            return Ok(0);
        }
        let Some(own) = self.queues.get_mut(header.queue as usize) else {
            self.counters.bad_queue += 1;
            return Ok(0);
        };
        if own.state != Some(ClaimState::Active) || own.epoch != header.epoch {
            self.counters.not_owned_dropped += 1;
            return Ok(0);
        }
        if header.acked_floor >= header.first_sequence {
            self.counters.bad_floor += 1;
            return Ok(0);
        }
        self.activity += 1;
        if !own.cursors.contains_key(&header.producer) && own.cursors.len() >= MAX_PRODUCERS_PER_QUEUE {
            if let Some(oldest) = own.cursors.iter().min_by_key(|(_, c)| c.last_active).map(|(p, _)| *p) {
                own.cursors.remove(&oldest);
            }
        }
        let floor = self.known_acks.get(header.queue as usize).and_then(|k| k.get(&header.producer)).copied();
        let cursor = own.cursors.entry(header.producer).or_insert_with(|| {
            let acked = floor.unwrap_or(0);
            Cursor { received: acked, delivered: acked, acked, ..Cursor::default() }
        });
        cursor.last_active = self.activity;
        if header.acked_floor > cursor.received {
            // Everything up to the producer's acked floor was processed by an earlier owner.
            cursor.received = header.acked_floor;
            cursor.delivered = cursor.delivered.max(header.acked_floor);
            cursor.acked = cursor.acked.max(header.acked_floor);
        }
        let mut accepted = 0;
        let mut duplicates = 0;
        let mut gap = false;
        for (sequence, record) in message.records() {
            if sequence <= cursor.received {
                duplicates += 1;
                continue;
            }
            if sequence != cursor.received + 1 {
                gap = true;
                break;
            }
            cursor.received = sequence;
            accepted += 1;
            // The codec bounds keys, subjects and payloads far below u32::MAX.
            let slot = RecordSlot {
                queue: header.queue,
                bucket: record.bucket,
                producer: header.producer,
                sequence,
                epoch: header.epoch,
                start: 0,
                key_length: record.key.len() as u32,
                subject_length: record.subject.map_or(u32::MAX, |subject| subject.len() as u32),
                payload_length: record.payload.len() as u32,
            };
            match direct.as_mut() {
                // Straight to the application while nothing older waits (the queue is held
                // in this epoch: checked above, as `next_deliverable` checks it).
                Some((batch, max)) if batch.len() < *max && self.pending.is_empty() => {
                    cursor.delivered = cursor.delivered.max(sequence);
                    self.counters.delivered += 1;
                    batch.push(slot, &record);
                }
                _ => {
                    let start = self.pending_base + self.pending_bytes.len() as u64;
                    append_record(&mut self.pending_bytes, &record);
                    self.pending.push_back(RecordSlot { start, ..slot });
                }
            }
        }
        if gap {
            if !cursor.gap_open {
                self.counters.gaps += 1;
            }
            cursor.gap_open = true;
            if cursor.gap_reported.is_none_or(|at| now.saturating_since(at) >= RESEND_REQUEST_INTERVAL) {
                cursor.gap_reported = Some(now);
                self.ack_dirty.insert(header.producer);
            }
        } else if accepted > 0 {
            cursor.gap_open = false;
        }
        if duplicates > 0 {
            self.counters.duplicates_dropped += duplicates;
            self.ack_dirty.insert(header.producer);
        }
        Ok(accepted)
    }

    /// Records waiting for the application.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Bytes held for the pending records (their keys, subjects and payloads, and dead bytes
    /// not yet reclaimed).
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes.len()
    }

    /// The next pending record the application may have (its queue still held in the epoch
    /// it was received in), marked delivered.
    fn next_deliverable(&mut self) -> Option<RecordSlot> {
        while let Some(slot) = self.pending.pop_front() {
            let Some(own) = self.queues.get_mut(slot.queue as usize) else { continue };
            if own.state != Some(ClaimState::Active) || own.epoch != slot.epoch {
                continue;
            }
            if let Some(cursor) = own.cursors.get_mut(&slot.producer) {
                cursor.delivered = cursor.delivered.max(slot.sequence);
            }
            self.counters.delivered += 1;
            return Some(slot);
        }
        None
    }

    /// The bytes of pending record `slot` (key first).
    fn pending_record(&self, slot: &RecordSlot) -> &[u8] {
        let from = (slot.start - self.pending_base) as usize;
        self.pending_bytes.get(from..from + slot.length()).unwrap_or_default()
    }

    /// Reclaims the pending buffer's dead front: all of it once nothing is pending, else once
    /// the dead part is [`PENDING_COMPACT_BYTES`] and at least half.
    fn reclaim_pending_bytes(&mut self) {
        let live_from = self.pending.front().map_or(self.pending_base + self.pending_bytes.len() as u64, |s| s.start);
        let dead = (live_from - self.pending_base) as usize;
        if dead > 0
            && (self.pending.is_empty() || dead >= PENDING_COMPACT_BYTES && dead * 2 >= self.pending_bytes.len())
        {
            self.pending_bytes.drain(..dead);
            self.pending_base = live_from;
        }
    }

    /// Gives up to `max` records to the application, in order per (producer, queue).
    pub fn deliver(&mut self, max: usize, out: &mut Vec<Delivery>) {
        while out.len() < max {
            let Some(slot) = self.next_deliverable() else { break };
            if let Some(view) = slot.view(self.pending_record(&slot)) {
                out.push(view.to_delivery());
            }
        }
        self.reclaim_pending_bytes();
    }

    /// Like [`Self::deliver`], into `batch` (appended to, up to `max` records in all): the
    /// records' bytes are copied into the batch's one buffer, no allocation per record.
    pub fn deliver_batch(&mut self, max: usize, batch: &mut DeliveryBatch) {
        while batch.len() < max {
            let Some(mut slot) = self.next_deliverable() else { break };
            let from = (slot.start - self.pending_base) as usize;
            let Some(bytes) = self.pending_bytes.get(from..from + slot.length()) else { continue };
            slot.start = batch.bytes.len() as u64;
            batch.bytes.extend_from_slice(bytes);
            batch.records.push(slot);
        }
        self.reclaim_pending_bytes();
    }

    /// The application acknowledges `sequence` of (`producer`, `queue`) received in `epoch`,
    /// and everything delivered before it. Returns `false` (and counts) when the queue is no
    /// longer held in that epoch.
    pub fn ack(&mut self, queue: u32, producer: u64, sequence: u64, epoch: u64) -> bool {
        let Some(own) = self.queues.get_mut(queue as usize) else {
            self.counters.stale_acks += 1;
            return false;
        };
        let held = matches!(own.state, Some(ClaimState::Active | ClaimState::Releasing)) && own.epoch == epoch;
        let Some(cursor) = own.cursors.get_mut(&producer).filter(|_| held) else {
            self.counters.stale_acks += 1;
            return false;
        };
        let acked = sequence.min(cursor.delivered);
        if acked > cursor.acked {
            cursor.acked = acked;
            self.ack_dirty.insert(producer);
        }
        true
    }

    /// Acknowledges everything delivered so far (`auto_ack`).
    pub fn ack_all_delivered(&mut self) {
        for own in &mut self.queues {
            if !matches!(own.state, Some(ClaimState::Active | ClaimState::Releasing)) {
                continue;
            }
            for (producer, cursor) in &mut own.cursors {
                if cursor.delivered > cursor.acked {
                    cursor.acked = cursor.delivered;
                    self.ack_dirty.insert(*producer);
                }
            }
        }
    }

    /// The ACKs to send now, one per producer with news (acks, or a gap to resend).
    pub fn take_acks(&mut self) -> Vec<Ack> {
        if self.ack_dirty.is_empty() {
            return Vec::new();
        }
        let producers: Vec<u64> = self.ack_dirty.drain().collect();
        producers.into_iter().filter_map(|producer| self.ack_for(producer)).collect()
    }

    fn ack_for(&self, producer: u64) -> Option<Ack> {
        let mut entries = Vec::new();
        for (queue, own) in self.queues.iter().enumerate() {
            let Some(state) = own.state else { continue };
            if state == ClaimState::Released {
                if let Some(ack) = own.released_acks.iter().find(|a| a.producer == producer) {
                    entries.push(AckEntry {
                        queue: queue as u32,
                        flags: 0,
                        epoch: own.epoch,
                        acked: ack.acked,
                        received: ack.acked,
                    });
                }
                continue;
            }
            if let Some(cursor) = own.cursors.get(&producer) {
                entries.push(AckEntry {
                    queue: queue as u32,
                    flags: if cursor.gap_open { ACK_FLAG_RESEND } else { 0 },
                    epoch: own.epoch,
                    acked: cursor.acked,
                    received: cursor.received,
                });
            }
        }
        (!entries.is_empty()).then_some(Ack {
            fingerprint: self.fingerprint,
            consumer: self.member_id,
            producer,
            entries,
        })
    }

    /// This consumer's heartbeat (claims with their acks, bounded in size).
    pub fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        let mut budget = MAX_CONTROL_MESSAGE_LENGTH / 2;
        let mut claims = Vec::new();
        for (queue, own) in self.queues.iter().enumerate() {
            let Some(state) = own.state else { continue };
            let mut acks: Vec<ProducerAck> = if state == ClaimState::Released {
                own.released_acks.clone()
            } else {
                own.cursors
                    .iter()
                    .map(|(producer, c)| ProducerAck { producer: *producer, acked: c.acked, received: c.received })
                    .collect()
            };
            let room = budget.saturating_sub(16) / 24;
            acks.truncate(room.min(MAX_ACKS_PER_CLAIM));
            budget = budget.saturating_sub(16 + 24 * acks.len());
            claims.push(Claim { queue: queue as u32, epoch: own.epoch, state, acks });
        }
        Heartbeat {
            fingerprint: self.fingerprint,
            member_id: self.member_id,
            leaving: self.closing,
            role: Role::Consumer,
            name: name.to_owned(),
            endpoint: endpoint.to_owned(),
            index: self.index,
            count: self.count,
            pid,
            claims,
            figures: Vec::new(),
        }
    }
}
