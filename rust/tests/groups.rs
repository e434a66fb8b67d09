//! Consumer groups end to end in one process: several `Client`s (embedded drivers) over
//! loopback, each member with its own inbox, discovery through a temporary registry.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use affinity::client::{ClientApi, ClientHandle};
use affinity::control::Timing;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::consumer::Delivery;
use affinity::groups::runtime::{GroupConsumer, GroupPublisher, MemberOptions};
use affinity::groups::GroupConfig;

const HEARTBEAT: Duration = Duration::from_millis(50);
const LIVENESS: Duration = Duration::from_millis(1000);

struct Registry(std::path::PathBuf);

impl Registry {
    fn new(test: &str) -> Registry {
        let path = std::env::temp_dir().join(format!("affinity-groups-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Registry(path)
    }

    fn options(&self) -> MemberOptions {
        let mut options = MemberOptions::new(&self.0);
        options.timing = Timing::new(HEARTBEAT, LIVENESS).unwrap();
        options
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn client() -> Arc<ClientHandle> {
    Arc::new(ClientHandle::from(embedded::start(EmbeddedConfig::default()).unwrap()))
}

fn group(queue_size: u64) -> GroupConfig {
    GroupConfig::new("orders", "hp", 64, 4, queue_size).unwrap()
}

/// A consumer application on its own thread: polls, records, acknowledges.
struct App {
    consumer: Arc<Mutex<Option<GroupConsumer>>>,
    log: Arc<Mutex<Vec<(Instant, Delivery)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _client: Arc<ClientHandle>,
}

impl App {
    fn start(registry: &Registry, index: u32, count: u32, cycle: Duration) -> App {
        let client = client();
        let consumer =
            GroupConsumer::new(client.clone(), group(1 << 20), index, count, &registry.options(), false, cycle)
                .unwrap();
        let consumer = Arc::new(Mutex::new(Some(consumer)));
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (consumer, log, stop) = (consumer.clone(), log.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let guard = consumer.lock().unwrap();
                    let Some(consumer) = guard.as_ref() else { break };
                    let Ok(batch) = consumer.poll(500, Duration::from_millis(5)) else { break };
                    let now = Instant::now();
                    for delivery in &batch {
                        consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
                    }
                    drop(guard);
                    log.lock().unwrap().extend(batch.into_iter().map(|d| (now, d)));
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        App { consumer, log, stop, thread: Some(thread), _client: client }
    }

    fn owned(&self) -> Vec<u32> {
        self.consumer.lock().unwrap().as_ref().map(|c| c.owned_queues()).unwrap_or_default()
    }

    fn stop_polling(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }

    /// Clean leave with planned handoff.
    fn close(&mut self) {
        self.stop_polling();
        if let Some(consumer) = self.consumer.lock().unwrap().take() {
            consumer.close(Duration::from_secs(5));
        }
    }

    /// Simulated crash: no handoff, no leaving heartbeat.
    fn crash(&mut self) {
        self.stop_polling();
        drop(self.consumer.lock().unwrap().take());
    }

    fn deliveries(&self) -> Vec<(Instant, Delivery)> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop_polling();
    }
}

fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

fn publisher(registry: &Registry, queue_size: u64) -> (GroupPublisher, Arc<ClientHandle>) {
    let client = client();
    let publisher =
        GroupPublisher::new(client.clone(), group(queue_size), &registry.options(), Duration::from_millis(500))
            .unwrap();
    (publisher, client)
}

/// Publishes rounds over `keys` keys; the payload is `key:round`. Retries refusals (bounded).
fn publish_rounds(publisher: &GroupPublisher, keys: usize, rounds: std::ops::Range<usize>) {
    publish_paced(publisher, keys, rounds, Duration::ZERO);
}

/// [`publish_rounds`] with a pause after each round, so a run spans ownership changes.
fn publish_paced(publisher: &GroupPublisher, keys: usize, rounds: std::ops::Range<usize>, pause: Duration) {
    for round in rounds {
        std::thread::sleep(pause);
        for key in 0..keys {
            let payload = format!("k{key}:{round}");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let code = publisher.publish(format!("k{key}").as_bytes(), payload.as_bytes(), None).unwrap();
                if code > 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "publish kept refusing with {code}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

fn parse_payload(delivery: &Delivery) -> (String, usize) {
    let text = String::from_utf8(delivery.payload.clone()).unwrap();
    let (key, round) = text.split_once(':').unwrap();
    (key.to_owned(), round.parse().unwrap())
}

/// Per key, the rounds seen by the application in time order: each exactly once, in order.
fn assert_each_key_once_in_order(deliveries: &[(Instant, Delivery)], keys: usize, rounds: usize) {
    let mut sorted: Vec<&(Instant, Delivery)> = deliveries.iter().collect();
    sorted.sort_by_key(|(at, _)| *at);
    let mut next: HashMap<String, usize> = HashMap::new();
    for (_, delivery) in sorted {
        let (key, round) = parse_payload(delivery);
        let expected = next.entry(key.clone()).or_insert(0);
        assert_eq!(round, *expected, "key {key}: got round {round}, expected {expected}");
        *expected += 1;
    }
    assert_eq!(next.len(), keys);
    assert!(next.values().all(|&n| n == rounds), "every key saw every round");
}

fn wait_for_consumers(publisher: &GroupPublisher) {
    assert!(wait_until(Duration::from_secs(5), || publisher.has_consumer()));
}

#[test]
fn keyed_messages_reach_exactly_the_owner_in_order_per_key() {
    let registry = Registry::new("owner");
    let a = App::start(&registry, 0, 2, Duration::from_secs(2));
    let b = App::start(&registry, 1, 2, Duration::from_secs(2));
    let (publisher, _client) = publisher(&registry, 1 << 20);
    assert!(wait_until(Duration::from_secs(8), || a.owned() == vec![0, 2] && b.owned() == vec![1, 3]));
    wait_for_consumers(&publisher);
    publish_rounds(&publisher, 50, 0..20);
    assert!(publisher.flush(Duration::from_secs(10)), "everything acknowledged");
    let mut all = a.deliveries();
    for (_, delivery) in &all {
        assert!(delivery.queue % 2 == 0, "consumer 0 got queue {}", delivery.queue);
    }
    for (_, delivery) in &b.deliveries() {
        assert!(delivery.queue % 2 == 1, "consumer 1 got queue {}", delivery.queue);
    }
    all.extend(b.deliveries());
    assert_eq!(all.len(), 1000);
    assert_each_key_once_in_order(&all, 50, 20);
    let status = publisher.status();
    assert!(status.queues.iter().all(|q| q.retained_bytes == 0 && q.sent_sequence == q.acked_sequence));
}

#[test]
fn batches_are_packed_and_delivered_in_order() {
    let registry = Registry::new("batch");
    let a = App::start(&registry, 0, 1, Duration::from_secs(30));
    let (publisher, _client) = publisher(&registry, 16 << 20);
    assert!(wait_until(Duration::from_secs(5), || a.owned() == vec![0, 1, 2, 3]));
    wait_for_consumers(&publisher);
    let keys: Vec<Vec<u8>> = (0..10_000).map(|i| format!("k{}", i % 100).into_bytes()).collect();
    let payloads: Vec<Vec<u8>> = (0..10_000).map(|i| format!("k{}:{}", i % 100, i / 100).into_bytes()).collect();
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while offset < keys.len() {
        let taken = publisher
            .publish_batch(keys[offset..].iter().zip(&payloads[offset..]).map(|(k, p)| (k.as_slice(), p.as_slice())))
            .unwrap();
        offset += taken;
        assert!(Instant::now() < deadline);
        if taken == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(publisher.flush(Duration::from_secs(10)));
    assert_each_key_once_in_order(&a.deliveries(), 100, 100);
}

#[test]
fn clean_close_hands_queues_over_without_duplicate_or_reordering() {
    let registry = Registry::new("handoff");
    let a = App::start(&registry, 0, 2, Duration::from_secs(2));
    let mut b = App::start(&registry, 1, 2, Duration::from_secs(2));
    let (publisher, _client) = publisher(&registry, 1 << 20);
    assert!(wait_until(Duration::from_secs(8), || a.owned() == vec![0, 2] && b.owned() == vec![1, 3]));
    wait_for_consumers(&publisher);
    let publishing = std::thread::scope(|scope| {
        let handle = scope.spawn(|| publish_paced(&publisher, 40, 0..200, Duration::from_millis(5)));
        std::thread::sleep(Duration::from_millis(300));
        b.close();
        handle.join()
    });
    publishing.unwrap();
    assert!(wait_until(Duration::from_secs(5), || a.owned() == vec![0, 1, 2, 3]));
    assert!(publisher.flush(Duration::from_secs(10)), "everything acknowledged");
    let mut all = a.deliveries();
    all.extend(b.deliveries());
    assert!(!b.deliveries().is_empty(), "b consumed before leaving");
    assert_each_key_once_in_order(&all, 40, 200);
}

#[test]
fn crashed_consumer_loses_its_queues_within_liveness_plus_one_second_and_nothing_is_lost() {
    let registry = Registry::new("crash");
    let a = App::start(&registry, 0, 2, Duration::from_secs(2));
    let mut b = App::start(&registry, 1, 2, Duration::from_secs(2));
    let (publisher, _client) = publisher(&registry, 4 << 20);
    assert!(wait_until(Duration::from_secs(8), || a.owned() == vec![0, 2] && b.owned() == vec![1, 3]));
    wait_for_consumers(&publisher);
    publish_rounds(&publisher, 40, 0..10);
    assert!(publisher.flush(Duration::from_secs(10)));
    // b's application stops: records for its queues now sit unread in its inbox.
    b.stop_polling();
    publish_rounds(&publisher, 40, 10..15);
    b.crash();
    let crashed = Instant::now();
    publish_rounds(&publisher, 40, 15..20);
    assert!(wait_until(LIVENESS + Duration::from_secs(2), || a.owned() == vec![0, 1, 2, 3]));
    let took = crashed.elapsed();
    assert!(took <= LIVENESS + Duration::from_secs(1), "failover took {took:?}");
    assert!(publisher.flush(Duration::from_secs(10)), "the survivor acknowledged everything");
    // Nothing lost: every (key, round) was delivered once, in order per key: b acknowledged all
    // it processed (flush above), what it never read went to the survivor.
    let mut all = a.deliveries();
    all.extend(b.deliveries());
    assert_each_key_once_in_order(&all, 40, 20);
}

#[test]
fn full_retention_back_pressures_and_nothing_is_lost() {
    let registry = Registry::new("backpressure");
    let client = client();
    let consumer =
        GroupConsumer::new(client.clone(), group(1 << 20), 0, 1, &registry.options(), false, Duration::from_secs(30))
            .unwrap();
    let (publisher, _pclient) = publisher(&registry, 8192);
    assert!(wait_until(Duration::from_secs(5), || consumer.owned_queues() == vec![0, 1, 2, 3]));
    wait_for_consumers(&publisher);
    let mut accepted = 0;
    let mut code = 0;
    for i in 0..1000 {
        code = publisher.publish_to_queue(0, &[i as u8; 100], b"k").unwrap();
        if code < 0 {
            break;
        }
        accepted += 1;
    }
    assert_eq!(code, -2, "BACK_PRESSURED once 8 KiB are retained");
    assert!(accepted > 10 && accepted < 100, "{accepted}");
    assert!(publisher.status().queues[0].retained_bytes <= 8192);
    // The consumer drains and acknowledges: retention empties, publishing resumes.
    let mut received = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        for delivery in consumer.poll(1000, Duration::ZERO).unwrap() {
            consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
            received.push(delivery.sequence);
        }
        received.len() == accepted
    }));
    assert_eq!(received, (1..=accepted as u64).collect::<Vec<_>>());
    assert!(publisher.flush(Duration::from_secs(5)));
    assert!(publisher.publish_to_queue(0, b"more", b"k").unwrap() > 0);
}

#[test]
fn publish_without_consumers_is_not_connected_and_member_files_are_cleaned_up() {
    let registry = Registry::new("files");
    let (publisher, _client) = publisher(&registry, 1 << 20);
    assert_eq!(publisher.publish(b"k", b"p", None).unwrap(), -1);
    let dir = affinity::groups::runtime::group_members_dir(&registry.0, "orders");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 1);
    // A removed file is written again at the next scan.
    std::fs::remove_file(&files[0]).unwrap();
    assert!(wait_until(Duration::from_secs(2), || files[0].exists()));
    publisher.close();
    assert_eq!(publisher.publish(b"k", b"p", None).unwrap(), -4);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn a_registry_removed_under_a_running_member_is_not_recreated() {
    let registry = Registry::new("removed");
    let (publisher, _client) = publisher(&registry, 1 << 20);
    let dir = affinity::groups::runtime::group_members_dir(&registry.0, "orders");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // Its owner cleans up while the member still runs (a temporary registry removed first).
    std::fs::remove_dir_all(&registry.0).unwrap();
    std::thread::sleep(HEARTBEAT * 10);
    assert!(!registry.0.exists(), "the member wrote its file into a registry that was removed");
    publisher.close();
    assert!(!registry.0.exists());
}

#[test]
fn a_primary_that_joins_later_gets_its_queues_within_one_cycle_without_duplicate_or_reordering() {
    let registry = Registry::new("scaleup");
    let cycle = Duration::from_millis(1500);
    let a = App::start(&registry, 0, 2, cycle);
    let (publisher, _client) = publisher(&registry, 4 << 20);
    assert!(wait_until(Duration::from_secs(5), || a.owned() == vec![0, 1, 2, 3]));
    wait_for_consumers(&publisher);
    let mut b = None;
    let mut joined = Instant::now();
    std::thread::scope(|scope| {
        let handle = scope.spawn(|| publish_paced(&publisher, 40, 0..500, Duration::from_millis(5)));
        std::thread::sleep(Duration::from_millis(200));
        joined = Instant::now();
        b = Some(App::start(&registry, 1, 2, cycle));
        handle.join().unwrap();
    });
    let b = b.unwrap();
    let published_until = Instant::now();
    assert!(wait_until(cycle * 2 + Duration::from_secs(1), || a.owned() == vec![0, 2] && b.owned() == vec![1, 3]));
    let b_first = b.deliveries().first().map(|(at, _)| *at).expect("b received its queues");
    assert!(b_first < published_until, "the handoff happened while records were flowing");
    assert!(joined.elapsed() < cycle * 3, "primary took its queues back within a cycle");
    assert!(publisher.flush(Duration::from_secs(10)));
    let mut all = a.deliveries();
    all.extend(b.deliveries());
    assert_each_key_once_in_order(&all, 40, 500);
}

#[test]
fn hostile_control_datagrams_are_counted_and_ignored() {
    let registry = Registry::new("hostile");
    let consumer_client = client();
    let consumer = GroupConsumer::new(
        consumer_client.clone(),
        group(1 << 20),
        0,
        1,
        &registry.options(),
        true,
        Duration::from_secs(30),
    )
    .unwrap();
    let dir = affinity::groups::runtime::group_members_dir(&registry.0, "orders");
    let file = std::fs::read_dir(&dir).unwrap().flatten().next().unwrap().path();
    let member: serde_json::Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let endpoint = member["endpoint"].as_str().unwrap();
    let attacker = client();
    let channel = format!("aeron:udp?endpoint={endpoint}");
    let control = attacker.add_publication_handle(&channel, affinity::control::CONTROL_STREAM_ID).unwrap();
    let data = attacker.add_publication_handle(&channel, affinity::control::DATA_STREAM_ID).unwrap();
    assert!(wait_until(Duration::from_secs(5), || control.is_connected().unwrap() && data.is_connected().unwrap()));
    let garbage: Vec<Vec<u8>> = vec![vec![], vec![1, 1, 0, 0], vec![9; 64], {
        let mut bytes = vec![1u8, 1, 0, 0, 0, 0, 0, 0];
        bytes.extend_from_slice(&group(1 << 20).fingerprint().to_le_bytes());
        bytes.extend_from_slice(&7u64.to_le_bytes());
        bytes.extend_from_slice(&[2, 0, 0, 0]);
        bytes.extend_from_slice(&[0xff; 24]); // claim_count = 0xffffffff: refused before allocating
        bytes
    }];
    for bytes in &garbage {
        assert!(matches!(control.offer(bytes), Ok(Ok(_))));
        assert!(matches!(data.offer(bytes), Ok(Ok(_))));
    }
    assert!(wait_until(Duration::from_secs(5), || consumer.counters().1.control_malformed >= garbage.len() as u64));
    let _ = consumer.poll(100, Duration::from_millis(200)).unwrap();
    assert!(consumer.counters().0.malformed >= garbage.len() as u64);
    // Still a working consumer.
    let (publisher, _pclient) = publisher(&registry, 1 << 20);
    wait_for_consumers(&publisher);
    assert!(wait_until(Duration::from_secs(5), || consumer.owned_queues() == vec![0, 1, 2, 3]));
    assert!(publisher.publish(b"k", b"p", None).unwrap() > 0);
    let mut got = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        got.extend(consumer.poll(10, Duration::ZERO).unwrap());
        !got.is_empty()
    }));
    assert_eq!(got[0].payload, b"p");
}

#[test]
fn observer_reports_members_owners_and_publisher_figures() {
    let registry = Registry::new("observer");
    let a = App::start(&registry, 0, 2, Duration::from_secs(30));
    let b = App::start(&registry, 1, 2, Duration::from_secs(30));
    let (publisher, _client) = publisher(&registry, 1 << 20);
    assert!(wait_until(Duration::from_secs(8), || a.owned() == vec![0, 2] && b.owned() == vec![1, 3]));
    wait_for_consumers(&publisher);
    publish_rounds(&publisher, 20, 0..5);
    assert!(publisher.flush(Duration::from_secs(5)));
    let observer_client = client();
    let observer =
        affinity::groups::runtime::GroupObserver::new(observer_client, group(1 << 20), &registry.options()).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        let status = observer.status();
        status.members.len() == 3
            && status.queues.iter().all(|q| q.state == "active")
            && status.queues.iter().map(|q| q.acked_sequence).sum::<u64>() == 100
    }));
    let status = observer.status();
    let a_id = a.consumer.lock().unwrap().as_ref().unwrap().member_id();
    for queue in &status.queues {
        assert_eq!(queue.owner_id == a_id, queue.queue % 2 == 0, "{queue:?}");
        assert_eq!(queue.lag, 0);
    }
    let roles: HashSet<String> = status.members.iter().map(|m| m.role.clone()).collect();
    assert_eq!(roles, ["consumer", "publisher"].into_iter().map(String::from).collect());
    observer.close();
}
