//! The publisher's runtime: [`GroupPublisher`] over the sans-IO [`PublisherState`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Brain, Core, Member, MemberOptions, RuntimeCounters};
use crate::client::{ClientApi, PublicationHandle as Publication};
use crate::control::auth::TRAILER_LENGTH;
use crate::control::member::{new_member_id, Peer};
use crate::control::{Ack, Heartbeat, MemberView, Role, StreamAuth};
use crate::groups::publisher::{PublisherState, Refusal};
use crate::groups::{GroupConfig, GroupError};
use crate::protocol::OfferError;
use crate::time::{Instant, MonotonicClock};

struct PublisherBrain {
    state: PublisherState,
    buffer: Vec<u8>,
    max_message_set: bool,
}

impl PublisherBrain {
    /// Sends what `queues` have unsent to their owners; returns DATA messages sent.
    fn pump_queues(
        &mut self,
        peers: &HashMap<u64, Peer>,
        queues: &mut dyn Iterator<Item = u32>,
        budget: usize,
        data_auth: &mut StreamAuth,
    ) -> usize {
        let mut sent = 0;
        let mut blocked: Vec<u64> = Vec::new();
        for queue in queues {
            while sent < budget {
                let Some(transmit) = self.state.build_data(queue, &mut self.buffer) else { break };
                // One MAC per DATA message (many records), not per record.
                data_auth.seal(&mut self.buffer);
                if blocked.contains(&transmit.owner) {
                    break;
                }
                let Some(publication) = peers.get(&transmit.owner).and_then(|peer| peer.data.as_ref()) else {
                    blocked.push(transmit.owner);
                    break;
                };
                match publication.try_offer(&self.buffer) {
                    Ok(_) => {
                        self.state.commit(queue, transmit.last_sequence);
                        sent += 1;
                    }
                    Err(OfferError::AdminAction) => continue,
                    Err(_) => {
                        blocked.push(transmit.owner);
                        break;
                    }
                }
            }
        }
        sent
    }
}

impl Brain for PublisherBrain {
    fn role(&self) -> Role {
        Role::Publisher
    }
    fn fingerprint(&self) -> u64 {
        self.state.fingerprint()
    }
    fn view(&self) -> &MemberView {
        self.state.view()
    }
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        self.state.on_heartbeat(heartbeat, now);
    }
    fn on_ack(&mut self, ack: &Ack, now: Instant) {
        self.state.on_ack(ack, now);
    }
    fn excuse_pause(&mut self, pause: Duration) {
        self.state.excuse_pause(pause);
    }
    fn handle_timeout(&mut self, now: Instant, _discovery_complete: bool) {
        self.state.handle_timeout(now);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        self.state.heartbeat(name, endpoint, pid)
    }
    fn wants_data_publication(&self, peer: Role) -> bool {
        peer == Role::Consumer
    }
    fn pump(&mut self, peers: &HashMap<u64, Peer>, budget: usize, data_auth: &mut StreamAuth) -> usize {
        let mut queues = 0..self.state.config().queue_count;
        self.pump_queues(peers, &mut queues, budget, data_auth)
    }
    fn on_data_publication(&mut self, publication: &Publication) {
        if !self.max_message_set {
            if let Ok(max) = publication.max_message_length() {
                // Room for the authentication trailer (sealed or not: one limit for both).
                self.state.set_max_message_length(max.saturating_sub(TRAILER_LENGTH));
                self.max_message_set = true;
            }
        }
    }
}

/// One queue's send figures, with the owner's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSendStatus {
    /// The queue.
    pub queue: u32,
    /// The owner records go to (0: none).
    pub owner_id: u64,
    /// The owner's name ("" when none).
    pub owner_name: String,
    /// The owner's epoch.
    pub epoch: u64,
    /// Highest sequence published.
    pub sent_sequence: u64,
    /// Highest sequence acknowledged.
    pub acked_sequence: u64,
    /// Bytes retained.
    pub retained_bytes: u64,
    /// Messages retained.
    pub retained_messages: u64,
}

/// A publisher's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublisherStatus {
    /// The producer id.
    pub producer_id: u64,
    /// The name.
    pub name: String,
    /// One entry per queue.
    pub queues: Vec<QueueSendStatus>,
    /// Whether this member authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// The outcome of one publish: a sequence number (> 0) or a refusal code (< 0).
pub type PublishCode = i64;

/// Publishes keyed records to a group.
pub struct GroupPublisher {
    member: Member<PublisherBrain>,
    producer_id: u64,
}

impl GroupPublisher {
    /// Joins `group` as a publisher through `client`.
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        options: &MemberOptions,
        resend_timeout: Duration,
    ) -> Result<GroupPublisher, GroupError> {
        if resend_timeout < Duration::from_millis(1) {
            return Err(GroupError::Definition("resend timeout: must be at least 1 ms".into()));
        }
        let producer_id = new_member_id();
        let clock_start = MonotonicClock::new().now();
        let state = PublisherState::new(group.clone(), producer_id, options.timing, resend_timeout, clock_start);
        let brain = PublisherBrain { state, buffer: Vec::new(), max_message_set: false };
        let name = format!("publisher-{}-{:x}", std::process::id(), producer_id & 0xffff);
        let core = Core::open(client, &group, options, producer_id, name, brain)?;
        Ok(GroupPublisher { member: Member::start(core)?, producer_id })
    }

    /// This producer's id.
    pub fn producer_id(&self) -> u64 {
        self.producer_id
    }

    fn finish(
        core: &mut Core<PublisherBrain>,
        result: Result<(u32, u64), Result<Refusal, GroupError>>,
    ) -> Result<PublishCode, GroupError> {
        match result {
            Ok((queue, sequence)) => {
                let Core { brain, peers, data_auth, .. } = core;
                brain.pump_queues(peers.peers(), &mut std::iter::once(queue), usize::MAX, data_auth);
                Ok(sequence as i64)
            }
            Err(Ok(refusal)) => Ok(refusal.code()),
            Err(Err(error)) => Err(error),
        }
    }

    /// Publishes one keyed record; returns its sequence number (> 0) or a refusal code:
    /// `NOT_CONNECTED` (-1, no live consumer), `BACK_PRESSURED` (-2, retention full),
    /// `CLOSED` (-4). `topic` travels as the subject `HP/bucket/topic`.
    pub fn publish(&self, key: &[u8], payload: &[u8], topic: Option<&str>) -> Result<PublishCode, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(Refusal::Closed.code());
        }
        let result = core.brain.state.publish(key, topic, payload);
        Self::finish(&mut core, result)
    }

    /// Publishes one record to `queue` directly (Spark row groups, markers).
    pub fn publish_to_queue(&self, queue: u32, payload: &[u8], key: &[u8]) -> Result<PublishCode, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(Refusal::Closed.code());
        }
        let result = core.brain.state.publish_to_queue(queue, key, payload).map(|sequence| (queue, sequence));
        Self::finish(&mut core, result)
    }

    /// Publishes keyed records in order until one is refused; returns how many were taken.
    /// Records are packed several to a transport message.
    pub fn publish_batch<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<usize, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(0);
        }
        let queue_count = core.brain.state.config().queue_count as usize;
        let mut touched = vec![false; queue_count];
        let mut taken = 0;
        for (key, payload) in records {
            match core.brain.state.publish(key, None, payload) {
                Ok((queue, _)) => {
                    if let Some(flag) = touched.get_mut(queue as usize) {
                        *flag = true;
                    }
                    taken += 1;
                }
                Err(Ok(_)) => break,
                Err(Err(error)) => {
                    if taken == 0 {
                        return Err(error);
                    }
                    break;
                }
            }
        }
        let Core { brain, peers, data_auth, .. } = &mut *core;
        let mut queues = touched.iter().enumerate().filter(|(_, t)| **t).map(|(q, _)| q as u32);
        brain.pump_queues(peers.peers(), &mut queues, usize::MAX, data_auth);
        Ok(taken)
    }

    /// Waits until everything published is acknowledged; `false` on timeout, or at once when
    /// the member or its client is closed (nothing more can be sent or acknowledged).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let mut core = self.member.core();
                if core.closed || core.client.client_closed() {
                    return core.brain.state.all_acked();
                }
                let Core { brain, peers, data_auth, .. } = &mut *core;
                brain.pump(peers.peers(), usize::MAX, data_auth);
                if brain.state.all_acked() {
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Per-queue figures.
    pub fn status(&self) -> PublisherStatus {
        let core = self.member.core();
        let view = core.brain.state.view();
        let queues = core
            .brain
            .state
            .queue_status()
            .into_iter()
            .map(|q| QueueSendStatus {
                queue: q.queue,
                owner_id: q.owner.map_or(0, |(id, _)| id),
                owner_name: q
                    .owner
                    .and_then(|(id, _)| view.get(id))
                    .map(|entry| entry.heartbeat.name.clone())
                    .unwrap_or_default(),
                epoch: q.owner.map_or(0, |(_, epoch)| epoch),
                sent_sequence: q.sent_sequence,
                acked_sequence: q.acked_sequence,
                retained_bytes: q.retained_bytes,
                retained_messages: q.retained_messages,
            })
            .collect();
        PublisherStatus {
            producer_id: self.producer_id,
            name: core.name.clone(),
            queues,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Counters of the sans-IO state and the runtime.
    pub fn counters(&self) -> (crate::groups::publisher::PublisherCounters, RuntimeCounters) {
        let core = self.member.core();
        (core.brain.state.counters(), core.runtime_counters())
    }

    /// Whether at least one consumer is live.
    pub fn has_consumer(&self) -> bool {
        self.member.core().brain.state.has_consumer()
    }

    /// Stops publishing: a last heartbeat (leaving), then the member leaves. Unacknowledged
    /// records are not waited for (call [`Self::flush`] first).
    pub fn close(&self) {
        {
            let mut core = self.member.core();
            if core.closed {
                return;
            }
            core.brain.state.close();
            let now = core.clock.now();
            core.send_heartbeat(now);
        }
        self.member.stop();
    }
}
