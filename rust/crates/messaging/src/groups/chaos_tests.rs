//! Sans-IO failover under a starved machine: a publisher and two consumers exchange real
//! encoded messages over links that are in order but slow, lossy (a back-pressured or not
//! connected offer drops a control message) and whose members freeze for seconds at a time
//! (a process that gets no CPU), while one consumer is killed half-way. Once the storm is over
//! the publisher must get everything acknowledged: retained records are resent and their
//! acknowledgements arrive, whatever interleaving the storm left behind.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use super::consumer::{ConsumerState, Delivery};
use super::publisher::PublisherState;
use super::GroupConfig;
use crate::control::Timing;
use crate::control::{parse_control, ControlMessage};
use crate::time::Instant;

const TICK: Duration = Duration::from_millis(10);
const PUBLISHER: usize = 0;
const IDS: [u64; 3] = [1000, 1, 2];

/// xorshift64*: reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.next() % 1000 < per_mille
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

enum Payload {
    Control(Vec<u8>),
    Data(Vec<u8>),
}

/// How rough the storm is (per mille per message / per tick).
#[derive(Clone, Copy)]
struct Storm {
    control_drop: u64,
    data_drop_after_commit: u64,
    data_refused: u64,
    freeze: u64,
    max_freeze_ms: u64,
    max_latency_ms: u64,
    max_ack_lag_ms: u64,
}

struct Member {
    consumer: Option<ConsumerState>,
    /// Delivered, acknowledged by the application once their time comes.
    unacked: VecDeque<(Instant, Delivery)>,
    alive: bool,
    frozen_until: Instant,
    last_heartbeat: Option<Instant>,
}

struct World {
    now: Instant,
    rng: Rng,
    publisher: PublisherState,
    members: Vec<Member>,
    /// links[from][to]: in order, each with the time it arrives.
    links: Vec<Vec<VecDeque<(Instant, Payload)>>>,
    storm: Option<Storm>,
    delivered: HashSet<(u32, u64)>,
    timing: Timing,
}

fn config() -> GroupConfig {
    GroupConfig::new("failover", "hp", 16, 4, 1 << 22).unwrap()
}

impl World {
    fn new(seed: u64) -> World {
        let now = Instant::from_nanos(1_000_000_000);
        let timing = Timing::new(Duration::from_millis(100), Duration::from_secs(1)).unwrap();
        let publisher = PublisherState::new(config(), IDS[PUBLISHER], timing, Duration::from_secs(1), now);
        let mut members = vec![Member {
            consumer: None,
            unacked: VecDeque::new(),
            alive: true,
            frozen_until: now,
            last_heartbeat: None,
        }];
        for index in 0..2u32 {
            let state =
                ConsumerState::new(config(), IDS[index as usize + 1], index, 2, timing, Duration::from_secs(2), now);
            members.push(Member {
                consumer: Some(state),
                unacked: VecDeque::new(),
                alive: true,
                frozen_until: now,
                last_heartbeat: None,
            });
        }
        let links = (0..3).map(|_| (0..3).map(|_| VecDeque::new()).collect()).collect();
        World {
            now,
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            publisher,
            members,
            links,
            storm: None,
            delivered: HashSet::new(),
            timing,
        }
    }

    fn send(&mut self, from: usize, to: usize, payload: Payload) {
        if !self.members[to].alive {
            return;
        }
        let mut at = self.now;
        if let Some(storm) = self.storm {
            if matches!(payload, Payload::Control(_)) && self.rng.chance(storm.control_drop) {
                return;
            }
            if matches!(payload, Payload::Data(_)) && self.rng.chance(storm.data_drop_after_commit) {
                return;
            }
            at = at + Duration::from_millis(self.rng.below(storm.max_latency_ms + 1));
        }
        let link = &mut self.links[from][to];
        let at = link.back().map_or(at, |(last, _)| (*last).max(at));
        link.push_back((at, payload));
    }

    fn receive(&mut self, to: usize) {
        for from in 0..3 {
            while self.links[from][to].front().is_some_and(|(at, _)| *at <= self.now) {
                let Some((_, payload)) = self.links[from][to].pop_front() else { break };
                let now = self.now;
                match payload {
                    Payload::Control(bytes) => match parse_control(&bytes).unwrap() {
                        ControlMessage::Heartbeat(heartbeat) => {
                            if to == PUBLISHER {
                                self.publisher.on_heartbeat(heartbeat, now);
                            } else if let Some(consumer) = &mut self.members[to].consumer {
                                consumer.on_heartbeat(heartbeat, now);
                            }
                        }
                        ControlMessage::Ack(ack) => {
                            if to == PUBLISHER {
                                self.publisher.on_ack(&ack, now);
                            }
                        }
                    },
                    Payload::Data(bytes) => {
                        if let Some(consumer) = &mut self.members[to].consumer {
                            consumer.on_data(&bytes, now).unwrap();
                        }
                    }
                }
            }
        }
    }

    fn heartbeat(&mut self, member: usize, force: bool) {
        let due = self.members[member]
            .last_heartbeat
            .is_none_or(|at| self.now.saturating_since(at) >= self.timing.heartbeat_interval);
        if !(due || force) {
            return;
        }
        self.members[member].last_heartbeat = Some(self.now);
        let bytes = match &self.members[member].consumer {
            Some(consumer) => consumer.heartbeat("c", "127.0.0.1:1", 1).to_bytes().unwrap(),
            None => self.publisher.heartbeat("p", "127.0.0.1:2", 2).to_bytes().unwrap(),
        };
        for to in (0..3).filter(|to| *to != member) {
            self.send(member, to, Payload::Control(bytes.clone()));
        }
    }

    fn run_member(&mut self, member: usize) {
        self.receive(member);
        let now = self.now;
        if member == PUBLISHER {
            self.publisher.handle_timeout(now);
            self.heartbeat(member, false);
            let mut buffer = Vec::new();
            for queue in 0..4 {
                while let Some(transmit) = self.publisher.build_data(queue, &mut buffer) {
                    if self.storm.is_some_and(|storm| self.rng.chance(storm.data_refused)) {
                        break; // back-pressured or not connected: not committed, built again later
                    }
                    self.publisher.commit(queue, transmit.last_sequence);
                    let Some(to) = IDS.iter().position(|id| *id == transmit.owner) else { break };
                    self.send(PUBLISHER, to, Payload::Data(buffer.clone()));
                }
            }
            return;
        }
        let lag = self.storm.map_or(0, |storm| self.rng.below(storm.max_ack_lag_ms + 1));
        let Member { consumer, unacked, .. } = &mut self.members[member];
        let Some(consumer) = consumer else { return };
        consumer.handle_timeout(now);
        let announce = consumer.take_announce();
        let mut out: Vec<Delivery> = Vec::new();
        consumer.deliver(usize::MAX, &mut out);
        unacked.extend(out.iter().map(|d| (now + Duration::from_millis(lag), d.clone())));
        while unacked.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, delivery)) = unacked.pop_front() else { break };
            consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
        }
        let acks: Vec<Vec<u8>> = consumer.take_acks().iter().map(|ack| ack.to_bytes().unwrap()).collect();
        self.delivered.extend(out.iter().map(|d| (d.queue, d.sequence)));
        self.heartbeat(member, announce);
        for ack in acks {
            self.send(member, PUBLISHER, Payload::Control(ack));
        }
    }

    fn tick(&mut self) {
        self.now = self.now + TICK;
        for member in 0..3 {
            if !self.members[member].alive {
                continue;
            }
            if let Some(storm) = self.storm {
                if self.members[member].frozen_until <= self.now && self.rng.chance(storm.freeze) {
                    let ms = 1 + self.rng.below(storm.max_freeze_ms);
                    self.members[member].frozen_until = self.now + Duration::from_millis(ms);
                }
            }
            if self.members[member].frozen_until > self.now {
                continue;
            }
            self.run_member(member);
        }
    }

    fn run(&mut self, duration: Duration) {
        for _ in 0..(duration.as_nanos() / TICK.as_nanos()) {
            self.tick();
        }
    }

    fn publish(&mut self, key: usize, round: usize) -> bool {
        if self.members[PUBLISHER].frozen_until > self.now {
            return false;
        }
        let payload = format!("{round}");
        self.publisher.publish(format!("key-{key}").as_bytes(), None, payload.as_bytes()).is_ok()
    }

    fn sent(&self) -> u64 {
        self.publisher.queue_status().iter().map(|q| q.sent_sequence).sum()
    }
}

/// Runs one storm; returns a description of what was left unacknowledged, if anything.
fn failover_in_a_storm(seed: u64, storm: Storm) -> Option<String> {
    const KEYS: usize = 100;
    const ROUNDS: usize = 20;
    let mut world = World::new(seed);
    world.run(Duration::from_secs(2));
    assert_eq!(world.members[1].consumer.as_ref().unwrap().owned_queues(), vec![0, 2], "seed {seed}");
    world.storm = Some(storm);
    let mut next = 0;
    while next < KEYS * ROUNDS {
        if world.publish(next % KEYS, next / KEYS) {
            next += 1;
        }
        if next % 20 == 0 {
            world.tick();
        }
        if next == KEYS * ROUNDS / 2 && world.members[2].alive {
            world.members[2].alive = false; // SIGKILL consumer 1 (what it sent is still on its way)
            for from in 0..3 {
                world.links[from][2].clear();
            }
        }
    }
    world.run(Duration::from_secs(10));
    world.storm = None;
    for member in &mut world.members {
        member.frozen_until = world.now;
    }
    world.run(Duration::from_secs(30));
    let survivor = world.members[1].consumer.as_ref().unwrap();
    assert_eq!(survivor.owned_queues(), vec![0, 1, 2, 3], "seed {seed}: the survivor took every queue");
    assert!(world.publisher.counters().owner_changes >= 2, "seed {seed}: no failover happened");
    if world.publisher.all_acked() {
        assert_eq!(world.delivered.len() as u64, world.sent(), "seed {seed}: every record delivered at least once");
        return None;
    }
    let status = world.publisher.queue_status();
    let consumer = world.members[1].consumer.as_ref().unwrap();
    Some(format!(
        "seed {seed}: not everything acknowledged 30 s after the storm: publisher {status:?}, counters {:?}; \
         survivor owns {:?}, counters {:?}",
        world.publisher.counters(),
        consumer.owned(),
        consumer.counters(),
    ))
}

#[test]
fn a_failover_in_a_storm_of_freezes_and_dropped_messages_ends_with_everything_acknowledged() {
    let storm = Storm {
        control_drop: 150,
        data_drop_after_commit: 20,
        data_refused: 100,
        freeze: 5,
        max_freeze_ms: 2500,
        max_latency_ms: 300,
        max_ack_lag_ms: 300,
    };
    let failures: Vec<String> = (1..=60).filter_map(|seed| failover_in_a_storm(seed, storm)).collect();
    assert!(failures.is_empty(), "{} of 60 storms:\n{}", failures.len(), failures.join("\n"));
}
