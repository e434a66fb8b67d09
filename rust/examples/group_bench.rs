//! Keyed group publishing vs a plain publication, same run, same bytes.
//!
//! ```text
//! cargo run --release --example group_bench [messages]
//! ```
//!
//! Plain: one unicast publication → one subscription polled by a thread, `offer_batch` of
//! 100-byte payloads. Keyed: one `GroupPublisher` → 8 queues → 2 `GroupConsumer`s (each on its
//! own thread and client, acknowledging every message), `publish_batch` of the same payloads
//! with 10,000 keys. Each figure is messages per second from the first publish to the last
//! message received (everything delivered); the keyed run also waits for every ack.
//! Prints the median of 3 runs of each and the ratio.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::attached::AttachedClient;
use affinity::client::{ClientHandle, MessageBatch};
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::runtime::{GroupConsumer, GroupPublisher, MemberOptions};
use affinity::groups::GroupConfig;

const PAYLOAD: usize = 100;
const KEYS: usize = 10_000;
const BATCH: usize = 1000;
const RUNS: usize = 3;

/// A client on a shared-memory driver of its own, in this process.
fn client() -> AttachedClient {
    embedded::start(EmbeddedConfig::default()).unwrap()
}

fn plain(messages: usize) -> f64 {
    let client = client();
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let subscription = client.add_subscription(&channel, 10).unwrap();
    let publication = client.add_publication(&channel, 10).unwrap();
    while !publication.is_connected().unwrap() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let payloads: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![i as u8; PAYLOAD]).collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut subscription = subscription;
            let mut batch = MessageBatch::default();
            while !done.load(Ordering::Acquire) {
                batch.clear();
                let _ = subscription.poll_into(&mut batch, 4096);
                received.fetch_add(batch.len() as u64, Ordering::Release);
                if received.load(Ordering::Acquire) >= messages as u64 {
                    break;
                }
            }
        });
        let mut sent = 0;
        while sent < messages {
            let want = (messages - sent).min(BATCH);
            let (taken, _) = publication.offer_batch(payloads[..want].iter().map(Vec::as_slice)).unwrap();
            sent += taken;
            if taken == 0 {
                std::thread::yield_now();
            }
        }
        while received.load(Ordering::Acquire) < messages as u64 {
            std::thread::yield_now();
        }
        done.store(true, Ordering::Release);
    });
    messages as f64 / start.elapsed().as_secs_f64()
}

fn keyed(messages: usize) -> f64 {
    let registry = std::env::temp_dir().join(format!("affinity-group-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&registry);
    let group = GroupConfig::new("bench", "hp", 64, 8, 64 << 20).unwrap();
    let options = MemberOptions::new(&registry);
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<(Arc<ClientHandle>, GroupConsumer)> = (0..2)
        .map(|index| {
            let client = Arc::new(ClientHandle::from(client()));
            let consumer =
                GroupConsumer::new(client.clone(), group.clone(), index, 2, &options, false, Duration::from_secs(30))
                    .unwrap();
            (client, consumer)
        })
        .collect();
    let client = Arc::new(ClientHandle::from(client()));
    let publisher = GroupPublisher::new(client, group, &options, Duration::from_secs(1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while consumers.iter().map(|(_, c)| c.owned_queues().len()).sum::<usize>() < 8 || !publisher.has_consumer() {
        assert!(Instant::now() < deadline, "consumers did not take the queues");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|i| format!("key-{i}").into_bytes()).collect();
    let payloads: Vec<Vec<u8>> = (0..BATCH).map(|i| vec![i as u8; PAYLOAD]).collect();
    let start = Instant::now();
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|scope| {
        for (_, consumer) in &consumers {
            let (received, done) = (&received, &done);
            scope.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let Ok(batch) = consumer.poll(4096, Duration::from_millis(1)) else { break };
                    if let Some(last) = batch.last() {
                        // Cumulative: acknowledges everything before it per (producer, queue).
                        for delivery in &batch {
                            consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
                        }
                        let _ = last;
                    }
                    received.fetch_add(batch.len() as u64, Ordering::Release);
                }
            });
        }
        let mut sent = 0;
        let mut key = 0;
        while sent < messages {
            let want = (messages - sent).min(BATCH);
            let records = (0..want).map(|i| (keys[(key + i) % KEYS].as_slice(), payloads[i].as_slice()));
            let taken = publisher.publish_batch(records).unwrap();
            sent += taken;
            key += taken;
            if taken == 0 {
                std::thread::yield_now();
            }
        }
        while received.load(Ordering::Acquire) < messages as u64 {
            std::thread::yield_now();
        }
        elapsed = start.elapsed();
        assert!(publisher.flush(Duration::from_secs(30)), "everything acknowledged");
        done.store(true, Ordering::Release);
    });
    publisher.close();
    for (_, consumer) in &consumers {
        consumer.close(Duration::from_secs(1));
    }
    let _ = std::fs::remove_dir_all(&registry);
    messages as f64 / elapsed.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let messages: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let plain_rate = median((0..RUNS).map(|_| plain(messages)).collect());
    let keyed_rate = median((0..RUNS).map(|_| keyed(messages)).collect());
    println!("| run ({messages} × {PAYLOAD} B, median of {RUNS}) | messages/s |");
    println!("|---|---:|");
    println!("| plain publication → 1 subscription | {plain_rate:.0} |");
    println!("| keyed publish_batch ({KEYS} keys) → 8 queues → 2 consumers | {keyed_rate:.0} |");
    println!("| ratio keyed / plain | {:.0}% |", keyed_rate / plain_rate * 100.0);
}
