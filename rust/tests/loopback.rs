//! End-to-end over loopback UDP and IPC: publication and subscription in one process, on the
//! shared-memory media driver run in process (`embedded::start`).

use std::time::{Duration, Instant};

use affinity::client::attached::AttachedClient;
use affinity::client::MessageBatch;
use affinity::embedded::{self, EmbeddedConfig, EmbeddedThreading};
use affinity::media::relay::{Impairment, LossyRelay};
use affinity::protocol::OfferError;

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn message(index: u64) -> Vec<u8> {
    let size = match index % 100 {
        0 => 3000 + (index % 5000) as usize,
        n => (n as usize * 13) % 1024,
    };
    let mut bytes = vec![(index % 251) as u8; size.max(8)];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes
}

fn client() -> AttachedClient {
    embedded::start(EmbeddedConfig::default()).unwrap()
}

fn transfer(client: &AttachedClient, pub_channel: &str, sub_channel: &str, count: u64) {
    let mut subscription = client.add_subscription(sub_channel, 10).unwrap();
    let publication = client.add_publication(pub_channel, 10).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !publication.is_connected().unwrap() {
        client.do_work().unwrap();
        assert!(Instant::now() < deadline, "never connected");
    }
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut batch = MessageBatch::default();
    while received < count {
        assert!(Instant::now() < deadline, "stalled at sent={sent} received={received}");
        while sent < count {
            match publication.try_offer(&message(sent)).unwrap() {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured | OfferError::AdminAction) => break,
                Err(error) => panic!("offer failed: {error:?}"),
            }
        }
        batch.clear();
        subscription.poll_into(&mut batch, 256).unwrap();
        for index in 0..batch.len() {
            assert_eq!(batch.message(index), &message(received)[..], "message {received}");
            received += 1;
        }
    }
}

#[test]
fn delivers_in_order_over_loopback() {
    let client = client();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    transfer(&client, &channel, &channel, 20_000);
}

#[test]
fn delivers_in_order_in_invoker_mode() {
    let client =
        embedded::start(EmbeddedConfig { threading: EmbeddedThreading::Invoker, ..EmbeddedConfig::default() }).unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_port());
    transfer(&client, &channel, &channel, 20_000);
}

#[test]
fn repairs_loss_duplication_and_reordering_through_a_relay() {
    let client = client();
    let target: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let impairment = Impairment { loss: 0.05, duplicate: 0.01, reorder: 0.02 };
    let relay = LossyRelay::start("127.0.0.1:0".parse().unwrap(), target, impairment, 7).unwrap();
    let pub_channel = format!("aeron:udp?endpoint={}", relay.front_address());
    let sub_channel = format!("aeron:udp?endpoint={target}");
    transfer(&client, &pub_channel, &sub_channel, 20_000);
    assert!(relay.stats().dropped.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[test]
fn delivers_in_order_over_ipc_without_sockets() {
    let client = client();
    transfer(&client, "aeron:ipc?term-length=65536", "aeron:ipc", 20_000);
}

#[test]
fn ipc_subscribers_all_receive_everything_including_a_late_one() {
    let client = client();
    let mut early = client.add_subscription("aeron:ipc", 4).unwrap();
    let publication = client.add_publication("aeron:ipc?term-length=65536", 4).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !publication.is_connected().unwrap() {
        assert!(Instant::now() < deadline, "never connected");
    }
    let mut late = client.add_subscription("aeron:ipc", 4).unwrap();
    while late.image_count().unwrap() == 0 {
        assert!(Instant::now() < deadline, "late subscriber never joined");
    }
    let mut sent = 0u64;
    let (mut early_got, mut late_got) = (Vec::new(), Vec::new());
    let mut batch = MessageBatch::default();
    while early_got.len() < 5_000 || late_got.len() < 5_000 {
        assert!(Instant::now() < deadline, "stalled: early {} late {}", early_got.len(), late_got.len());
        while sent < 5_000 && matches!(publication.try_offer(&message(sent)), Ok(Ok(_))) {
            sent += 1;
        }
        for (subscription, got) in [(&mut early, &mut early_got), (&mut late, &mut late_got)] {
            batch.clear();
            subscription.poll_into(&mut batch, 64).unwrap();
            got.extend((0..batch.len()).map(|i| batch.message(i).to_vec()));
        }
    }
    let expected: Vec<Vec<u8>> = (0..5_000).map(message).collect();
    assert_eq!(early_got, expected);
    assert_eq!(late_got, expected, "the late subscriber joined before the first offer");
}
