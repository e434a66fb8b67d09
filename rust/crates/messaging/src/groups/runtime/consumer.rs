//! The consumer's runtime: [`GroupConsumer`] over the sans-IO [`ConsumerState`].

use std::sync::Arc;
use std::time::Duration;

use super::{Brain, Core, Member, MemberOptions, RuntimeCounters, DATA_FRAGMENTS_PER_POLL};
use crate::client::ClientApi;
use crate::control::member::new_member_id;
use crate::control::{Ack, Heartbeat, MemberView, Role};
use crate::groups::consumer::{ConsumerState, Delivery, DeliveryBatch};
use crate::groups::{check_consumer, GroupConfig, GroupError};
use crate::time::{Instant, MonotonicClock};

struct ConsumerBrain {
    state: ConsumerState,
}

impl Brain for ConsumerBrain {
    fn role(&self) -> Role {
        Role::Consumer
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
    fn excuse_pause(&mut self, pause: Duration) {
        self.state.excuse_pause(pause);
    }
    fn handle_timeout(&mut self, now: Instant, discovery_complete: bool) {
        self.state.set_discovery_complete(discovery_complete);
        self.state.handle_timeout(now);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        self.state.heartbeat(name, endpoint, pid)
    }
    fn take_announce(&mut self) -> bool {
        self.state.take_announce()
    }
    fn take_acks(&mut self) -> Vec<Ack> {
        self.state.take_acks()
    }
}

/// Where a poll puts the records: owned [`Delivery`] values or a [`DeliveryBatch`].
trait DeliverySink {
    fn count(&self) -> usize;
    fn take_from(&mut self, state: &mut ConsumerState, max: usize);
    /// Hands a DATA message's body to `state` (a batch takes records straight from it).
    fn take_data(&mut self, state: &mut ConsumerState, body: &[u8], now: Instant, max: usize);
}

impl DeliverySink for Vec<Delivery> {
    fn count(&self) -> usize {
        self.len()
    }
    fn take_from(&mut self, state: &mut ConsumerState, max: usize) {
        state.deliver(max, self);
    }
    fn take_data(&mut self, state: &mut ConsumerState, body: &[u8], now: Instant, _max: usize) {
        // Malformed or stale messages are counted by the state.
        let _ = state.on_data(body, now);
    }
}

impl DeliverySink for DeliveryBatch {
    fn count(&self) -> usize {
        self.len()
    }
    fn take_from(&mut self, state: &mut ConsumerState, max: usize) {
        state.deliver_batch(max, self);
    }
    fn take_data(&mut self, state: &mut ConsumerState, body: &[u8], now: Instant, max: usize) {
        // Malformed or stale messages are counted by the state.
        let _ = state.on_data_batch(body, now, self, max);
    }
}

/// A consumer's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerStatus {
    /// Member id.
    pub member_id: u64,
    /// Name.
    pub name: String,
    /// Index.
    pub index: u32,
    /// Count.
    pub count: u32,
    /// Queues delivered by this consumer.
    pub owned: Vec<u32>,
    /// Records delivered.
    pub delivered: u64,
    /// Duplicates dropped.
    pub duplicates_dropped: u64,
    /// Whether this member authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// Consumes the queues this member owns.
pub struct GroupConsumer {
    member: Member<ConsumerBrain>,
    member_id: u64,
    auto_ack: bool,
}

impl GroupConsumer {
    /// Joins `group` as consumer `index` of `count`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        index: u32,
        count: u32,
        options: &MemberOptions,
        auto_ack: bool,
        cycle: Duration,
    ) -> Result<GroupConsumer, GroupError> {
        check_consumer(index, count, group.queue_count)?;
        if cycle < options.timing.heartbeat_interval {
            return Err(GroupError::Definition(format!(
                "cycle {} ms: must be at least one heartbeat interval",
                cycle.as_millis()
            )));
        }
        let member_id = new_member_id();
        let now = MonotonicClock::new().now();
        let state = ConsumerState::new(group.clone(), member_id, index, count, options.timing, cycle, now);
        let name = format!("consumer-{index}-{}-{:x}", std::process::id(), member_id & 0xffff);
        let core = Core::open(client, &group, options, member_id, name, ConsumerBrain { state })?;
        Ok(GroupConsumer { member: Member::start(core)?, member_id, auto_ack })
    }

    /// The member id.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    /// Up to `max` records (waiting up to `timeout` for the first). With `auto_ack`,
    /// everything delivered by the previous poll is acknowledged first.
    pub fn poll(&self, max: usize, timeout: Duration) -> Result<Vec<Delivery>, GroupError> {
        let mut out = Vec::new();
        self.poll_with(max, timeout, &mut out)?;
        Ok(out)
    }

    /// [`Self::poll`] into `batch` (cleared first; its memory is reused, so a poll costs no
    /// allocation per record). Returns how many records it holds.
    pub fn poll_batch(&self, max: usize, timeout: Duration, batch: &mut DeliveryBatch) -> Result<usize, GroupError> {
        batch.clear();
        self.poll_with(max, timeout, batch)?;
        Ok(batch.len())
    }

    fn poll_with(&self, max: usize, timeout: Duration, out: &mut impl DeliverySink) -> Result<(), GroupError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut first = true;
        loop {
            {
                let mut core = self.member.core();
                if core.closed || core.client.client_closed() {
                    return Err(GroupError::Closed);
                }
                if first && self.auto_ack {
                    core.brain.state.ack_all_delivered();
                    core.send_acks();
                }
                first = false;
                out.take_from(&mut core.brain.state, max);
                if out.count() < max {
                    let now = core.clock.now();
                    let Core { brain, data_sub, data_batch, data_auth, .. } = &mut *core;
                    data_batch.clear();
                    if let Some(subscription) = data_sub {
                        let _ = subscription.poll_into(data_batch, DATA_FRAGMENTS_PER_POLL);
                    }
                    for index in 0..data_batch.len() {
                        // Verified (one MAC per message) before decoding; refusals are counted.
                        if let Ok(body) = data_auth.open(data_batch.message(index)) {
                            out.take_data(&mut brain.state, body, now, max);
                        }
                    }
                    out.take_from(&mut brain.state, max);
                }
            }
            if out.count() > 0 || max == 0 || std::time::Instant::now() >= deadline {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Acknowledges `delivery` and everything delivered before it from the same producer and
    /// queue. `false` if the queue is no longer held in that epoch (counted).
    pub fn ack(&self, queue: u32, producer: u64, sequence: u64, epoch: u64) -> bool {
        self.member.core().brain.state.ack(queue, producer, sequence, epoch)
    }

    /// Queues this consumer delivers now.
    pub fn owned_queues(&self) -> Vec<u32> {
        self.member.core().brain.state.owned_queues()
    }

    /// The consumer's status.
    pub fn status(&self) -> ConsumerStatus {
        let core = self.member.core();
        let (index, count) = core.brain.state.index_count();
        let counters = core.brain.state.counters();
        ConsumerStatus {
            member_id: self.member_id,
            name: core.name.clone(),
            index,
            count,
            owned: core.brain.state.owned_queues(),
            delivered: counters.delivered,
            duplicates_dropped: counters.duplicates_dropped,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Counters of the sans-IO state and the runtime.
    pub fn counters(&self) -> (crate::groups::consumer::ConsumerCounters, RuntimeCounters) {
        let core = self.member.core();
        (core.brain.state.counters(), core.runtime_counters())
    }

    /// Clean leave: every held queue is released once the application acknowledged what it
    /// was given (with `auto_ack`, everything delivered counts as acknowledged), handed over,
    /// then the member leaves. After `timeout / 2` queues are released whatever was
    /// acknowledged (the rest is redelivered to the next owner); after `timeout` it leaves.
    pub fn close(&self, timeout: Duration) {
        let start = std::time::Instant::now();
        {
            let mut core = self.member.core();
            if core.closed {
                return;
            }
            let now = core.clock.now();
            core.brain.state.begin_close(self.auto_ack, now);
            core.send_heartbeat(now);
            core.send_acks();
        }
        let mut forced = false;
        loop {
            {
                let mut core = self.member.core();
                let now = core.clock.now();
                if core.brain.state.close_complete(now) {
                    break;
                }
                if !forced && start.elapsed() >= timeout / 2 {
                    core.brain.state.force_release();
                    core.send_heartbeat(now);
                    forced = true;
                }
            }
            if start.elapsed() >= timeout {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        {
            let mut core = self.member.core();
            let now = core.clock.now();
            core.send_acks();
            core.send_heartbeat(now);
        }
        self.member.stop();
    }
}
