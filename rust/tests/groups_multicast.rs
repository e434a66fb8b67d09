//! Consumer groups with a multicast control channel (`control=`): members in different
//! registries (no shared discovery files) find each other through multicast heartbeats alone.
//!
//! Multicast must never leave the machine: the test re-executes itself inside a private network
//! namespace (`unshare -n`, loopback only, multicast routed to `lo`), as `multicast.rs` does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::ClientHandle;
use affinity::control::Timing;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::runtime::{GroupConsumer, GroupPublisher, MemberOptions};
use affinity::groups::GroupConfig;

#[path = "support/netns.rs"]
mod netns;
#[path = "support/temp_dir.rs"]
mod temp_dir;

use netns::in_private_netns;
use temp_dir::TempDir;

const CONTROL: &str = "aeron:udp?endpoint=224.20.30.41:24410|interface=127.0.0.1";
fn options(registry: &std::path::Path) -> MemberOptions {
    let mut options = MemberOptions::new(registry);
    options.control = Some(CONTROL.to_owned());
    options.timing = Timing::new(Duration::from_millis(50), Duration::from_secs(1)).unwrap();
    options
}

#[test]
fn members_in_separate_registries_meet_through_the_multicast_control_channel() {
    if !in_private_netns("members_in_separate_registries_meet_through_the_multicast_control_channel") {
        return;
    }
    let root = TempDir::new("groups-mcast");
    let group = GroupConfig::new("orders", "hp", 16, 2, 1 << 20).unwrap();
    let consumer_client = Arc::new(ClientHandle::from(embedded::start(EmbeddedConfig::default()).unwrap()));
    let consumer = GroupConsumer::new(
        consumer_client,
        group.clone(),
        0,
        1,
        &options(&root.join("a")),
        true,
        Duration::from_secs(30),
    )
    .unwrap();
    let publisher_client = Arc::new(ClientHandle::from(embedded::start(EmbeddedConfig::default()).unwrap()));
    let publisher =
        GroupPublisher::new(publisher_client, group, &options(&root.join("b")), Duration::from_secs(1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(publisher.has_consumer() && consumer.owned_queues() == vec![0, 1]) {
        assert!(Instant::now() < deadline, "members never heard each other over multicast");
        std::thread::sleep(Duration::from_millis(10));
    }
    for i in 0..100u32 {
        while publisher.publish(&i.to_le_bytes(), &i.to_le_bytes(), None).unwrap() < 0 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut received = 0;
    while received < 100 {
        assert!(Instant::now() < deadline, "received {received} of 100");
        received += consumer.poll(1000, Duration::from_millis(10)).unwrap().len();
    }
    // auto_ack: the next poll acknowledges what the previous one delivered.
    assert!(consumer.poll(1000, Duration::ZERO).unwrap().is_empty());
    assert!(publisher.flush(Duration::from_secs(5)), "acks travel to the publisher found by multicast");
    publisher.close();
    consumer.close(Duration::from_secs(1));
}
