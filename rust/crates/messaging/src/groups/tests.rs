//! Sans-IO tests: a publisher and consumers wired by an instant, lossless "network" driven by
//! a fake clock. Heartbeats, ACKs and DATA go through the real codecs.

use std::collections::HashMap;
use std::time::Duration;

use super::consumer::{ConsumerState, Delivery};
use super::publisher::{PublisherState, Refusal};
use super::GroupConfig;
use crate::control::Timing;
use crate::control::{Ack, AckEntry, Claim, ClaimState, ControlError, DataHeader, Heartbeat, ProducerAck, Role};
use crate::time::Instant;

const STEP: Duration = Duration::from_millis(100);

fn config(queue_size: u64) -> GroupConfig {
    GroupConfig::new("orders", "hp", 64, 4, queue_size).unwrap()
}

struct Node {
    state: ConsumerState,
    log: Vec<Delivery>,
    /// The application acknowledges what it received at the next step.
    acking: bool,
    alive: bool,
}

struct Sim {
    now: Instant,
    publisher: PublisherState,
    nodes: Vec<Node>,
    /// Every delivery in time order, with the consumer that made it.
    timeline: Vec<(usize, Delivery)>,
    cycle: Duration,
    /// Consumers hear no other consumer (the publisher hears everyone): split views.
    partitioned: bool,
}

impl Sim {
    fn new(queue_size: u64, cycle: Duration) -> Sim {
        let now = Instant::from_nanos(1_000_000_000);
        let publisher = PublisherState::new(config(queue_size), 1000, Timing::default(), Duration::from_secs(1), now);
        Sim { now, publisher, nodes: Vec::new(), timeline: Vec::new(), cycle, partitioned: false }
    }

    fn add_consumer(&mut self, member_id: u64, index: u32, count: u32) -> usize {
        let state =
            ConsumerState::new(config(1 << 20), member_id, index, count, Timing::default(), self.cycle, self.now);
        self.nodes.push(Node { state, log: Vec::new(), acking: true, alive: true });
        self.nodes.len() - 1
    }

    fn heartbeats(&mut self) {
        let beats: Vec<Vec<u8>> = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.state.heartbeat("c", "127.0.0.1:1", 1).to_bytes().unwrap())
            .collect();
        for bytes in &beats {
            let hb = Heartbeat::parse(bytes).unwrap();
            self.publisher.on_heartbeat(hb.clone(), self.now);
            let partitioned = self.partitioned;
            for node in self.nodes.iter_mut().filter(|n| n.alive) {
                if !partitioned || node.state.member_id() == hb.member_id {
                    node.state.on_heartbeat(hb.clone(), self.now);
                }
            }
        }
    }

    fn send_data(&mut self) {
        let mut buffer = Vec::new();
        for queue in 0..4 {
            while let Some(transmit) = self.publisher.build_data(queue, &mut buffer) {
                if let Some(node) = self.nodes.iter_mut().find(|n| n.alive && n.state.member_id() == transmit.owner) {
                    node.state.on_data(&buffer, self.now).unwrap();
                }
                // A dead owner's data is lost in the network; the publisher still counts it sent.
                self.publisher.commit(queue, transmit.last_sequence);
            }
        }
    }

    fn applications(&mut self) {
        for (index, node) in self.nodes.iter_mut().enumerate().filter(|(_, n)| n.alive) {
            let mut out = Vec::new();
            node.state.deliver(usize::MAX, &mut out);
            for delivery in &out {
                if node.acking {
                    node.state.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
                }
                self.timeline.push((index, delivery.clone()));
            }
            node.log.extend(out);
            for ack in node.state.take_acks() {
                let bytes = ack.to_bytes().unwrap();
                self.publisher.on_ack(&Ack::parse(&bytes).unwrap(), self.now);
            }
        }
    }

    fn step(&mut self) {
        self.now = self.now + STEP;
        self.heartbeats();
        self.publisher.handle_timeout(self.now);
        for node in self.nodes.iter_mut().filter(|n| n.alive) {
            node.state.handle_timeout(self.now);
        }
        self.heartbeats();
        self.send_data();
        self.applications();
    }

    fn run(&mut self, duration: Duration) {
        let steps = duration.as_nanos() / STEP.as_nanos();
        for _ in 0..steps {
            self.step();
        }
    }

    fn publish_keys(&mut self, count: usize, round: usize) -> usize {
        let mut taken = 0;
        for key in 0..count {
            let payload = format!("{round}");
            match self.publisher.publish(format!("key-{key}").as_bytes(), None, payload.as_bytes()) {
                Ok(_) => taken += 1,
                Err(Ok(Refusal::BackPressured)) => {}
                Err(other) => panic!("unexpected refusal {other:?}"),
            }
        }
        taken
    }

    fn owned(&self, node: usize) -> Vec<u32> {
        self.nodes[node].state.owned_queues()
    }

    /// The claim state of `queue` at `node`, if it holds one.
    fn claim_state(&self, node: usize, queue: u32) -> Option<ClaimState> {
        self.nodes[node].state.owned().into_iter().find(|q| q.queue == queue).map(|q| q.state)
    }

    /// Steps until `node` claims `queue` (at most `steps` steps); the time of the claim.
    fn step_until_claiming(&mut self, node: usize, queue: u32, steps: usize) -> Instant {
        for _ in 0..steps {
            self.step();
            if self.claim_state(node, queue) == Some(ClaimState::Claiming) {
                return self.now;
            }
        }
        panic!("node {node} did not claim queue {queue} within {steps} steps");
    }

    /// Per queue, the consumers that delivered it.
    fn deliverers(&self, queue: u32) -> std::collections::BTreeSet<usize> {
        self.timeline.iter().filter(|(_, d)| d.queue == queue).map(|(node, _)| *node).collect()
    }

    /// Per (producer, queue): sequences strictly increasing in time order, across consumers.
    fn assert_no_duplicate_no_reorder(&self) {
        let mut last: HashMap<(u64, u32), u64> = HashMap::new();
        for (_, delivery) in &self.timeline {
            let previous = last.insert((delivery.producer, delivery.queue), delivery.sequence).unwrap_or(0);
            assert_eq!(delivery.sequence, previous + 1, "queue {} sequence {}", delivery.queue, delivery.sequence);
        }
    }

    fn delivered_set(&self) -> std::collections::HashSet<(u32, u64)> {
        self.timeline.iter().map(|(_, d)| (d.queue, d.sequence)).collect()
    }
}

#[test]
fn two_consumers_split_the_queues_by_primary() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 2);
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.owned(0), vec![0, 2]);
    assert_eq!(sim.owned(1), vec![1, 3]);
    assert_eq!(sim.publish_keys(200, 0), 200);
    sim.run(Duration::from_millis(500));
    assert_eq!(sim.timeline.len(), 200);
    for (node, delivery) in &sim.timeline {
        assert_eq!(delivery.queue % 2, *node as u32);
    }
    sim.assert_no_duplicate_no_reorder();
    assert!(sim.publisher.all_acked());
}

#[test]
fn nothing_is_claimed_before_the_settle_period() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 1);
    sim.step();
    assert!(sim.owned(0).is_empty(), "claiming queues deliver nothing yet");
    sim.run(Duration::from_millis(400));
    assert_eq!(sim.owned(0), vec![0, 1, 2, 3]);
}

#[test]
fn failover_moves_a_silent_owners_queues_within_the_liveness_timeout_and_loses_nothing() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 2);
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(1));
    sim.publish_keys(100, 0);
    sim.step();
    // Consumer 1 processes but its acknowledgements never leave: it dies now.
    sim.nodes[1].acking = false;
    sim.publish_keys(100, 1);
    sim.step();
    sim.nodes[1].alive = false;
    let died = sim.now;
    sim.publish_keys(100, 2);
    let mut moved_at = None;
    for _ in 0..40 {
        sim.step();
        if moved_at.is_none() && sim.owned(0) == vec![0, 1, 2, 3] {
            moved_at = Some(sim.now);
        }
    }
    let moved_at = moved_at.expect("survivor took every queue");
    assert!(moved_at.saturating_since(died) <= Duration::from_secs(3), "{:?}", moved_at.saturating_since(died));
    let published: usize = sim.publisher.queue_status().iter().map(|q| q.sent_sequence as usize).sum();
    assert_eq!(published, 300);
    assert_eq!(sim.delivered_set().len(), 300, "nothing lost");
    assert!(sim.publisher.all_acked());
    // What the dead owner processed without acknowledging is redelivered to the survivor, once.
    let survivor: Vec<&Delivery> = sim.nodes[0].log.iter().collect();
    let mut seen = std::collections::HashSet::new();
    for delivery in survivor {
        assert!(seen.insert((delivery.queue, delivery.sequence)), "survivor saw a duplicate");
    }
}

#[test]
fn planned_handoff_returns_queues_to_their_primary_without_duplicate_or_reordering() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(2));
    sim.add_consumer(10, 0, 2);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.owned(0), vec![0, 1, 2, 3]);
    sim.add_consumer(11, 1, 2);
    for round in 0..40 {
        sim.publish_keys(50, round);
        sim.step();
    }
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.owned(0), vec![0, 2]);
    assert_eq!(sim.owned(1), vec![1, 3]);
    sim.assert_no_duplicate_no_reorder();
    assert_eq!(sim.delivered_set().len(), 2000);
    assert_eq!(sim.nodes[0].state.counters().releases, 2);
}

#[test]
fn releasing_waits_for_the_application_to_acknowledge() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(2));
    sim.add_consumer(10, 0, 2);
    sim.run(Duration::from_secs(1));
    sim.nodes[0].acking = false;
    sim.publish_keys(50, 0);
    sim.step();
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(3));
    // Consumer 0 is stuck releasing queues 1 and 3: nothing acknowledged.
    assert!(sim.owned(1).is_empty());
    let releasing: Vec<u32> =
        sim.nodes[0].state.owned().iter().filter(|q| q.state == ClaimState::Releasing).map(|q| q.queue).collect();
    assert_eq!(releasing, vec![1, 3]);
    let log = sim.nodes[0].log.clone();
    for delivery in &log {
        sim.nodes[0].state.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
    }
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.owned(1), vec![1, 3]);
    sim.assert_no_duplicate_no_reorder();
}

#[test]
fn a_release_the_application_never_acknowledges_is_forced_after_the_release_timeout() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(2));
    sim.add_consumer(10, 0, 2);
    sim.run(Duration::from_secs(1));
    sim.nodes[0].acking = false;
    sim.publish_keys(50, 0);
    sim.step();
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(8));
    assert!(sim.owned(1).is_empty(), "still waiting within the release timeout");
    sim.run(Duration::from_secs(5));
    assert_eq!(sim.owned(1), vec![1, 3], "forced after 5 liveness timeouts");
    // The unacknowledged records of queues 1 and 3 were redelivered to the new owner.
    let redelivered = sim.nodes[1].log.len();
    assert!(redelivered > 0);
    assert_eq!(sim.delivered_set().len(), 50);
}

#[test]
fn close_hands_every_queue_over_then_leaves() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 2);
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(1));
    sim.publish_keys(100, 0);
    sim.step();
    sim.nodes[1].state.begin_close(false, sim.now);
    assert!(!sim.nodes[1].state.close_complete(sim.now));
    sim.publish_keys(100, 1);
    sim.run(Duration::from_secs(1));
    assert!(sim.nodes[1].state.close_complete(sim.now));
    assert_eq!(sim.owned(0), vec![0, 1, 2, 3]);
    sim.assert_no_duplicate_no_reorder();
    assert_eq!(sim.delivered_set().len(), 200);
}

#[test]
fn conflicting_equal_epoch_claims_are_won_by_the_lower_member_id() {
    // `a` is consumer 0 of 1: it ranks first for every queue when alone.
    let mut a = ConsumerState::new(config(1 << 20), 5, 0, 1, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    a.handle_timeout(Instant::ZERO);
    assert_eq!(a.owned().len(), 4);
    // A rival with a lower id, consumer 1 of 2: primary of queues 1 and 3 (a tie on rank that
    // its lower id wins), backup of 0 and 2. It claims queue 0 at the same epoch as `a`.
    let rival = Heartbeat {
        fingerprint: config(1 << 20).fingerprint(),
        member_id: 3,
        leaving: false,
        role: Role::Consumer,
        name: "rival".into(),
        endpoint: "127.0.0.1:2".into(),
        index: 1,
        count: 2,
        pid: 2,
        claims: vec![Claim { queue: 0, epoch: 1, state: ClaimState::Claiming, acks: vec![] }],
        figures: vec![],
    };
    let t = Instant::ZERO + Duration::from_millis(100);
    a.on_heartbeat(rival.clone(), t);
    a.handle_timeout(t);
    let held: Vec<u32> = a.owned().iter().map(|q| q.queue).collect();
    assert_eq!(held, vec![2], "queue 0 lost at equal epoch to the lower id; 1 and 3 yielded to their primary");
    let t = t + Duration::from_millis(400);
    a.on_heartbeat(rival.clone(), t);
    a.handle_timeout(t);
    assert_eq!(a.owned_queues(), vec![2]);
    // A higher epoch takes an active queue away.
    let mut stronger = rival;
    stronger.claims = vec![Claim { queue: 2, epoch: 7, state: ClaimState::Active, acks: vec![] }];
    a.on_heartbeat(stronger, t);
    a.handle_timeout(t);
    assert!(a.owned_queues().is_empty());
    assert_eq!(a.counters().ownership_lost, 1);
}

#[test]
fn full_retention_back_pressures_and_loses_nothing() {
    let mut sim = Sim::new(4096, Duration::from_secs(30));
    sim.add_consumer(10, 0, 1);
    sim.run(Duration::from_secs(1));
    sim.nodes[0].acking = false;
    let mut refused = 0;
    let mut accepted = 0;
    for key in 0..400 {
        match sim.publisher.publish_to_queue(0, format!("k{key}").as_bytes(), &[7u8; 100]) {
            Ok(_) => accepted += 1,
            Err(Ok(Refusal::BackPressured)) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(refused > 0 && accepted > 0);
    assert!(sim.publisher.queue_status()[0].retained_bytes <= 4096);
    sim.run(Duration::from_millis(500));
    assert_eq!(sim.nodes[0].log.len(), accepted);
    sim.nodes[0].acking = true;
    let log = sim.nodes[0].log.clone();
    for delivery in &log {
        sim.nodes[0].state.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
    }
    sim.run(Duration::from_millis(300));
    assert!(sim.publisher.all_acked());
    assert!(sim.publisher.publish_to_queue(0, b"k", &[7u8; 100]).is_ok());
}

#[test]
fn publish_without_any_live_consumer_is_not_connected() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    assert!(matches!(sim.publisher.publish(b"k", None, b"p"), Err(Ok(Refusal::NotConnected))));
    sim.add_consumer(10, 0, 1);
    sim.step();
    assert!(sim.publisher.publish(b"k", None, b"p").is_ok());
}

#[test]
fn hostile_acks_and_claims_are_counted_and_ignored() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 1);
    sim.run(Duration::from_secs(1));
    sim.nodes[0].acking = false;
    sim.publish_keys(20, 0);
    sim.step();
    let fingerprint = config(1 << 20).fingerprint();
    let beyond = Ack {
        fingerprint,
        consumer: 10,
        producer: 1000,
        entries: vec![
            AckEntry { queue: 0, flags: 0, epoch: 1, acked: 1_000_000, received: 0 },
            AckEntry { queue: 99, flags: 0, epoch: 1, acked: 1, received: 1 },
        ],
    };
    sim.publisher.on_ack(&beyond, sim.now);
    let counters = sim.publisher.counters();
    assert_eq!(counters.acks_beyond_sent, 1);
    assert_eq!(counters.acks_bad_queue, 1);
    assert!(!sim.publisher.all_acked(), "nothing was acknowledged by the hostile ack");
    let hostile = Heartbeat {
        fingerprint,
        member_id: 66,
        leaving: false,
        role: Role::Consumer,
        name: "x".into(),
        endpoint: "127.0.0.1:3".into(),
        index: 0,
        count: 1,
        pid: 3,
        claims: vec![Claim {
            queue: 4,
            epoch: 1,
            state: ClaimState::Active,
            acks: vec![ProducerAck { producer: 1000, acked: 5, received: 5 }],
        }],
        figures: vec![],
    };
    sim.publisher.on_heartbeat(hostile.clone(), sim.now);
    sim.nodes[0].state.on_heartbeat(hostile, sim.now);
    assert_eq!(sim.publisher.counters().claims_bad_queue, 1);
    assert_eq!(sim.nodes[0].state.counters().bad_queue, 1);
    // DATA for a queue >= QC, or with an acked floor at or beyond its records, is dropped.
    let mut bytes = Vec::new();
    DataHeader { fingerprint, producer: 1000, queue: 9, record_count: 0, epoch: 1, acked_floor: 0, first_sequence: 1 }
        .emit(&mut bytes);
    assert_eq!(sim.nodes[0].state.on_data(&bytes, sim.now), Ok(0));
    assert_eq!(sim.nodes[0].state.counters().bad_queue, 2);
    assert!(matches!(sim.nodes[0].state.on_data(&bytes[..30], sim.now), Err(ControlError::Truncated { .. })));
    assert_eq!(sim.nodes[0].state.counters().malformed, 1);
}

#[test]
fn data_for_an_unowned_queue_or_old_epoch_is_dropped() {
    let mut consumer =
        ConsumerState::new(config(1 << 20), 10, 0, 2, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    let mut bytes = Vec::new();
    let fingerprint = config(1 << 20).fingerprint();
    DataHeader { fingerprint, producer: 1, queue: 0, record_count: 1, epoch: 1, acked_floor: 0, first_sequence: 1 }
        .emit(&mut bytes);
    crate::control::codec::emit_record(&mut bytes, 0, b"k", None, b"p").unwrap();
    assert_eq!(consumer.on_data(&bytes, Instant::ZERO), Ok(0));
    assert_eq!(consumer.counters().not_owned_dropped, 1);
}

#[test]
fn a_gap_is_not_delivered_and_asks_for_a_resend() {
    let mut consumer =
        ConsumerState::new(config(1 << 20), 10, 0, 1, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    consumer.handle_timeout(Instant::ZERO);
    let t = Instant::ZERO + Duration::from_secs(1);
    consumer.handle_timeout(t);
    assert_eq!(consumer.owned_queues(), vec![0, 1, 2, 3]);
    let fingerprint = config(1 << 20).fingerprint();
    let message = |first: u64| {
        let mut bytes = Vec::new();
        DataHeader {
            fingerprint,
            producer: 1,
            queue: 0,
            record_count: 1,
            epoch: 1,
            acked_floor: 0,
            first_sequence: first,
        }
        .emit(&mut bytes);
        crate::control::codec::emit_record(&mut bytes, 0, b"k", None, b"p").unwrap();
        bytes
    };
    assert_eq!(consumer.on_data(&message(1), t), Ok(1));
    assert_eq!(consumer.on_data(&message(3), t), Ok(0));
    let acks = consumer.take_acks();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].entries[0].flags, crate::control::codec::ACK_FLAG_RESEND);
    assert_eq!(acks[0].entries[0].received, 1);
    assert_eq!(consumer.on_data(&message(2), t), Ok(1));
    assert_eq!(consumer.on_data(&message(2), t), Ok(0));
    assert_eq!(consumer.counters().duplicates_dropped, 1);
}

#[test]
fn hostile_heartbeat_extremes_do_not_overflow() {
    let mut consumer =
        ConsumerState::new(config(1 << 20), 10, 0, 1, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    let hostile = Heartbeat {
        fingerprint: config(1 << 20).fingerprint(),
        member_id: 1,
        leaving: false,
        role: Role::Consumer,
        name: "x".into(),
        endpoint: "127.0.0.1:1".into(),
        index: u32::MAX - 1,
        count: u32::MAX,
        pid: 1,
        claims: vec![Claim {
            queue: 0,
            epoch: u64::MAX,
            state: ClaimState::Released,
            acks: vec![ProducerAck { producer: 5, acked: u64::MAX, received: u64::MAX }],
        }],
        figures: vec![],
    };
    consumer.on_heartbeat(hostile, Instant::ZERO);
    for step in 0..10 {
        consumer.handle_timeout(Instant::ZERO + STEP * step);
    }
    assert_eq!(consumer.owned_queues(), vec![0, 1, 2, 3]);
    let mut bytes = Vec::new();
    DataHeader {
        fingerprint: config(1 << 20).fingerprint(),
        producer: 5,
        queue: 0,
        record_count: 1,
        epoch: u64::MAX,
        acked_floor: 0,
        first_sequence: u64::MAX - 1,
    }
    .emit(&mut bytes);
    crate::control::codec::emit_record(&mut bytes, 0, b"k", None, b"p").unwrap();
    assert_eq!(consumer.on_data(&bytes, Instant::ZERO + STEP * 10), Ok(0), "at or below the floor: duplicate");
}

#[test]
fn a_lone_survivor_delivers_a_dead_owners_queues_without_a_settle_period() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 2);
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(1));
    sim.publish_keys(100, 0);
    sim.step();
    sim.nodes[1].alive = false;
    let died = sim.now;
    sim.publish_keys(100, 1);
    let claimed = sim.step_until_claiming(0, 1, 40);
    assert!(claimed.saturating_since(died) <= Timing::default().liveness_timeout + STEP);
    // Nobody else is live to contend: the next timer tick (1 ms later) delivers.
    sim.nodes[0].state.handle_timeout(claimed + Duration::from_millis(1));
    assert_eq!(sim.claim_state(0, 1), Some(ClaimState::Active));
    assert_eq!(sim.claim_state(0, 3), Some(ClaimState::Active));
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.delivered_set().len(), 200, "nothing lost");
    sim.assert_no_duplicate_no_reorder();
    assert!(sim.publisher.all_acked());
}

#[test]
fn a_claim_another_live_consumer_could_contend_settles_for_one_heartbeat_interval() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    for (id, index) in [(10, 0), (11, 1), (12, 2)] {
        sim.add_consumer(id, index, 3);
    }
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.owned(1), vec![1]);
    sim.publish_keys(100, 0);
    sim.step();
    sim.nodes[1].alive = false;
    sim.publish_keys(100, 1);
    // Queue 1's next candidate is consumer 2 (rank 1); consumer 0 (rank 2) stays out.
    let claimed = sim.step_until_claiming(2, 1, 40);
    sim.nodes[2].state.handle_timeout(claimed + Duration::from_millis(1));
    assert_eq!(sim.claim_state(2, 1), Some(ClaimState::Claiming), "consumer 0 is live: settle");
    assert_eq!(sim.claim_state(0, 1), None);
    sim.step();
    assert_eq!(sim.claim_state(2, 1), Some(ClaimState::Active), "one heartbeat interval later");
    assert_eq!(sim.claim_state(0, 1), None);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.delivered_set().len(), 200);
    sim.assert_no_duplicate_no_reorder();
}

#[test]
fn a_consumer_rejoining_during_the_settle_takes_its_primary_with_one_owner_at_a_time() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    for (id, index) in [(10, 0), (11, 1), (12, 2)] {
        sim.add_consumer(id, index, 3);
    }
    sim.run(Duration::from_secs(1));
    sim.publish_keys(100, 0);
    sim.step();
    sim.nodes[1].alive = false;
    sim.publish_keys(100, 1);
    sim.step_until_claiming(2, 1, 40);
    // Consumer 1 comes back (a new member) while consumer 2 settles; it claims nothing until
    // it has heard the members it discovered.
    let rejoined = sim.add_consumer(13, 1, 3);
    sim.nodes[rejoined].state.set_discovery_complete(false);
    sim.step();
    assert_eq!(sim.claim_state(2, 1), None, "the claimer yields to the live primary");
    sim.nodes[rejoined].state.set_discovery_complete(true);
    for _ in 0..10 {
        sim.step();
        assert_ne!(sim.claim_state(2, 1), Some(ClaimState::Active));
    }
    assert_eq!(sim.owned(rejoined), vec![1]);
    sim.publish_keys(100, 2);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.delivered_set().len(), 300, "nothing lost");
    sim.assert_no_duplicate_no_reorder();
    assert!(!sim.deliverers(1).contains(&2), "consumer 2 never delivered queue 1");
}

#[test]
fn split_views_let_only_the_best_claim_receive_and_heal_without_duplicates() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.partitioned = true;
    sim.add_consumer(10, 0, 2);
    sim.add_consumer(11, 1, 2);
    sim.run(Duration::from_secs(1));
    // Each consumer believes itself alone and holds every queue at epoch 1...
    assert_eq!(sim.owned(0), vec![0, 1, 2, 3]);
    assert_eq!(sim.owned(1), vec![0, 1, 2, 3]);
    sim.publish_keys(200, 0);
    sim.run(Duration::from_millis(500));
    // ...but the publisher sends each queue only to the best claim (equal epochs: lower id).
    assert_eq!(sim.delivered_set().len(), 200);
    for queue in 0..4 {
        assert_eq!(sim.deliverers(queue), [0].into_iter().collect(), "queue {queue}");
    }
    sim.partitioned = false;
    sim.publish_keys(200, 1);
    sim.run(Duration::from_secs(1));
    assert!(sim.owned(1).is_empty(), "the worse claims are lost once heard");
    assert_eq!(sim.delivered_set().len(), 400);
    sim.assert_no_duplicate_no_reorder();
    assert!(sim.publisher.all_acked());
}

/// A consumer `member_id` claiming `queue` at `epoch` in `state`, acknowledging `acked` of
/// producer 1000 (as a forger would build it).
fn forged_claim(member_id: u64, queue: u32, epoch: u64, state: ClaimState, acked: u64) -> Heartbeat {
    Heartbeat {
        fingerprint: config(1 << 20).fingerprint(),
        member_id,
        leaving: false,
        role: Role::Consumer,
        name: "forger".into(),
        endpoint: "127.0.0.1:9".into(),
        index: 0,
        count: 1,
        pid: 9,
        claims: vec![Claim { queue, epoch, state, acks: vec![ProducerAck { producer: 1000, acked, received: acked }] }],
        figures: vec![],
    }
}

fn acked_of(sim: &Sim, queue: u32) -> u64 {
    sim.publisher.queue_status()[queue as usize].acked_sequence
}

#[test]
fn acks_from_a_non_owner_or_a_stale_epoch_move_nothing() {
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 1);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.publisher.queue_status()[0].owner, Some((10, 1)));
    sim.nodes[0].acking = false;
    sim.publish_keys(40, 0);
    sim.step();
    let sent = sim.publisher.queue_status()[0].sent_sequence;
    assert!(sent > 0 && acked_of(&sim, 0) == 0);
    let fingerprint = config(1 << 20).fingerprint();
    let forged = |consumer: u64, epoch: u64| Ack {
        fingerprint,
        consumer,
        producer: 1000,
        entries: vec![AckEntry { queue: 0, flags: 0, epoch, acked: sent, received: sent }],
    };
    // Another member, in the owner's epoch: nothing moves.
    sim.publisher.on_ack(&forged(66, 1), sim.now);
    // The owner itself, in an epoch it does not own the queue in: nothing moves.
    sim.publisher.on_ack(&forged(10, 0), sim.now);
    sim.publisher.on_ack(&forged(10, 2), sim.now);
    assert_eq!(acked_of(&sim, 0), 0, "a forged ack acknowledged records");
    assert_eq!(sim.publisher.counters().acks_not_owner, 3);
    // Acks repeated in a (released) claim of a non-owner do not count either.
    sim.publisher.on_heartbeat(forged_claim(66, 0, 1, ClaimState::Released, sent), sim.now);
    sim.publisher.handle_timeout(sim.now);
    assert_eq!(acked_of(&sim, 0), 0, "acks repeated in a non-owner's claim acknowledged records");
    // The owner in its epoch does.
    sim.publisher.on_ack(&forged(10, 1), sim.now);
    assert_eq!(acked_of(&sim, 0), sent);
}

#[test]
fn a_claim_beyond_the_epoch_step_is_ignored_and_counted() {
    use crate::control::limits::MAX_EPOCH_STEP;
    let mut sim = Sim::new(1 << 20, Duration::from_secs(30));
    sim.add_consumer(10, 0, 1);
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.publisher.queue_status()[0].owner, Some((10, 1)));
    for epoch in [u64::MAX, 2 + MAX_EPOCH_STEP] {
        let forged = forged_claim(66, 0, epoch, ClaimState::Active, 0);
        sim.publisher.on_heartbeat(forged.clone(), sim.now);
        sim.nodes[0].state.on_heartbeat(forged, sim.now);
        sim.step();
    }
    sim.run(Duration::from_secs(1));
    assert_eq!(sim.publisher.queue_status()[0].owner, Some((10, 1)), "the forged claim took the queue");
    assert_eq!(sim.owned(0), vec![0, 1, 2, 3], "the real consumer lost a queue");
    assert_eq!(sim.publisher.counters().epochs_refused, 2);
    assert_eq!(sim.nodes[0].state.counters().epochs_refused, 2);
    // Within the step a claim is heard as before (without authentication, the owner and epoch
    // rules alone cannot tell a forger that knows the epoch from a member).
    let within = forged_claim(66, 0, 1 + MAX_EPOCH_STEP, ClaimState::Active, 0);
    sim.publisher.on_heartbeat(within, sim.now);
    assert_eq!(sim.publisher.queue_status()[0].owner, Some((66, 1 + MAX_EPOCH_STEP)));
}

/// A consumer of `config(1 << 20)` holding its four queues (epoch 1), and a DATA message maker:
/// `records` records of `producer` to `queue` from sequence `first` (every third with a subject).
fn holding_consumer() -> (ConsumerState, Instant) {
    let mut consumer =
        ConsumerState::new(config(1 << 20), 10, 0, 1, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    consumer.handle_timeout(Instant::ZERO);
    let t = Instant::ZERO + Duration::from_secs(1);
    consumer.handle_timeout(t);
    assert_eq!(consumer.owned_queues(), vec![0, 1, 2, 3]);
    (consumer, t)
}

fn data_message(producer: u64, queue: u32, first: u64, records: u32) -> Vec<u8> {
    data_message_above(producer, queue, first, records, first - 1)
}

/// A DATA message of `records` records from `first`, with the producer's acked floor `floor`.
fn data_message_above(producer: u64, queue: u32, first: u64, records: u32, floor: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    DataHeader {
        fingerprint: config(1 << 20).fingerprint(),
        producer,
        queue,
        record_count: records,
        epoch: 1,
        acked_floor: floor,
        first_sequence: first,
    }
    .emit(&mut bytes);
    for sequence in first..first + u64::from(records) {
        let key = format!("key-{producer}-{queue}-{sequence}");
        let subject = (sequence % 3 == 0).then(|| format!("topic-{sequence}"));
        let payload = vec![sequence as u8; 100 + (sequence % 7) as usize];
        crate::control::codec::emit_record(&mut bytes, queue, key.as_bytes(), subject.as_deref(), &payload).unwrap();
    }
    bytes
}

#[test]
fn batch_delivery_gives_the_same_records_in_the_same_order_as_owned_delivery() {
    let (mut owned, t) = holding_consumer();
    let (mut batched, _) = holding_consumer();
    let mut expected_count = 0;
    let mut by_owned: Vec<Delivery> = Vec::new();
    let mut by_batch: Vec<Delivery> = Vec::new();
    let mut batch = super::consumer::DeliveryBatch::new();
    let mut next = HashMap::new();
    for round in 0..60u32 {
        let (producer, queue) = (u64::from(round % 2) + 1, round % 4);
        let first = *next.entry((producer, queue)).or_insert(1u64);
        let records = 1 + round % 9;
        next.insert((producer, queue), first + u64::from(records));
        let message = data_message(producer, queue, first, records);
        assert_eq!(owned.on_data(&message, t), Ok(records as usize));
        assert_eq!(batched.on_data(&message, t), Ok(records as usize));
        expected_count += records as usize;
        // Fewer than arrive per round: records wait across rounds.
        let mut out = Vec::new();
        owned.deliver(3, &mut out);
        by_owned.extend(out);
        batch.clear();
        batched.deliver_batch(3, &mut batch);
        assert!(batch.len() <= 3);
        by_batch.extend(batch.iter().map(|d| d.to_delivery()));
    }
    let mut out = Vec::new();
    owned.deliver(usize::MAX, &mut out);
    by_owned.extend(out);
    batch.clear();
    batched.deliver_batch(usize::MAX, &mut batch);
    by_batch.extend(batch.iter().map(|d| d.to_delivery()));
    assert_eq!(by_owned.len(), expected_count);
    assert_eq!(by_batch, by_owned);
    assert!(by_batch.iter().any(|d| d.subject.is_some()) && by_batch.iter().any(|d| d.subject.is_none()));
    let third = &by_batch[2];
    assert_eq!(third.key, format!("key-{}-{}-{}", third.producer, third.queue, third.sequence).into_bytes());
    assert_eq!(third.payload, vec![third.sequence as u8; 100 + (third.sequence % 7) as usize]);
    assert_eq!(batched.counters().delivered, expected_count as u64);
    assert_eq!(batched.pending_len(), 0);
    assert_eq!(batched.pending_bytes(), 0, "nothing pending: the buffer is emptied");
}

#[test]
fn records_waiting_across_polls_do_not_grow_the_pending_buffer_without_bound() {
    let (mut consumer, t) = holding_consumer();
    let mut batch = super::consumer::DeliveryBatch::new();
    let mut first = 1;
    let mut delivered = 0;
    // 20 records arrive per round, 19 are delivered: a backlog that never empties.
    for _ in 0..2000 {
        consumer.on_data(&data_message(1, 0, first, 20), t).unwrap();
        first += 20;
        batch.clear();
        consumer.deliver_batch(19, &mut batch);
        delivered += batch.len();
        assert!(consumer.pending_len() > 0);
        // Each record is at most 16 + 12 + 106 bytes: live bytes, plus at most as many dead
        // ones, plus the compaction threshold.
        let live = consumer.pending_len() * 134;
        assert!(
            consumer.pending_bytes() <= 2 * live + 64 * 1024 + 20 * 134,
            "pending buffer {} bytes for {} pending records",
            consumer.pending_bytes(),
            consumer.pending_len()
        );
    }
    assert_eq!(delivered, 2000 * 19);
    batch.clear();
    consumer.deliver_batch(usize::MAX, &mut batch);
    assert_eq!(batch.len(), 2000);
    let sequences: Vec<u64> = batch.iter().map(|d| d.sequence).collect();
    assert_eq!(sequences, (38_001..=40_000).collect::<Vec<u64>>());
}

#[test]
fn records_taken_straight_into_the_batch_match_pending_then_batch_delivery() {
    // A poll of the runtime: the batch takes what waits, then each DATA message (straight
    // into the batch while nothing waits), then what waits again. The reference consumer
    // queues every record as pending first. Same records, order, counters and acks.
    let (mut reference, t) = holding_consumer();
    let (mut direct, _) = holding_consumer();
    let mut by_reference = super::consumer::DeliveryBatch::new();
    let mut by_direct = super::consumer::DeliveryBatch::new();
    let mut next = HashMap::new();
    let mut straight_rounds = 0;
    for round in 0..80u32 {
        let max = [5, 40, 1, 200][round as usize % 4];
        let mut messages = Vec::new();
        for part in 0..1 + round % 3 {
            let (producer, queue) = (u64::from((round + part) % 2) + 1, (round + part) % 4);
            let first = *next.entry((producer, queue)).or_insert(1u64);
            let records = 1 + (round + part) % 9;
            if round % 7 == 3 && first > 3 {
                // A resend of records already received: duplicates, dropped by both.
                messages.push(data_message_above(producer, queue, first - 3, 3, 0));
            }
            if round % 11 == 5 {
                // Out of order: a gap (kept out), then the missing message.
                messages.push(data_message_above(producer, queue, first + u64::from(records), 2, 0));
            }
            messages.push(data_message_above(producer, queue, first, records, 0));
            next.insert((producer, queue), first + u64::from(records));
        }
        messages.push(data_message(1, 9, 1, 2));
        by_reference.clear();
        by_direct.clear();
        if round % 5 != 4 {
            // Otherwise records still wait when the messages come: they go first.
            reference.deliver_batch(max, &mut by_reference);
            direct.deliver_batch(max, &mut by_direct);
        }
        let waiting_before = direct.pending_len();
        for message in &messages {
            let accepted = reference.on_data(message, t);
            assert_eq!(direct.on_data_batch(message, t, &mut by_direct, max), accepted);
        }
        if waiting_before == 0 && by_direct.len() < max && !by_direct.is_empty() {
            assert_eq!(direct.pending_len(), 0, "round {round}: everything went straight to the batch");
            straight_rounds += 1;
        }
        reference.deliver_batch(max, &mut by_reference);
        direct.deliver_batch(max, &mut by_direct);
        let expected: Vec<Delivery> = by_reference.iter().map(|d| d.to_delivery()).collect();
        let got: Vec<Delivery> = by_direct.iter().map(|d| d.to_delivery()).collect();
        assert_eq!(got, expected, "round {round}");
        assert_eq!(direct.counters(), reference.counters(), "round {round}");
        assert_eq!(direct.pending_len(), reference.pending_len(), "round {round}");
        reference.ack_all_delivered();
        direct.ack_all_delivered();
        let mut expected_acks = reference.take_acks();
        let mut got_acks = direct.take_acks();
        expected_acks.sort_by_key(|ack| ack.producer);
        got_acks.sort_by_key(|ack| ack.producer);
        assert_eq!(got_acks, expected_acks, "round {round}");
    }
    assert!(straight_rounds > 10, "the straight path was taken in {straight_rounds} rounds");
    let counters = direct.counters();
    assert!(counters.duplicates_dropped > 0 && counters.gaps > 0 && counters.bad_queue > 0, "{counters:?}");
    assert!(counters.delivered > 500, "{counters:?}");
}
