//! The order a client sees a publication's state in: once `is_connected()` says a subscriber
//! came or went, the `ConnectionChanged` event explaining it is already there to drain (the
//! driver broadcasts a publication's events before it writes the connected flag). A client that
//! saw the flag first and the event only later would log "connected" after acting on it.
//! Each round is a fresh publication; the race showed about once in seven rounds when the
//! driver wrote the flag first.

use std::time::{Duration, Instant};

use affinity::client::attached::AttachedClient;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::shm::status::DriverEventKindInfo;

use affinity::media::ports::free_udp_port;

const ROUNDS: usize = 30;

fn connection_changes(client: &AttachedClient) -> Vec<bool> {
    client
        .drain_events()
        .unwrap()
        .into_iter()
        .filter_map(|event| match event.kind {
            DriverEventKindInfo::ConnectionChanged { connected } => Some(connected),
            _ => None,
        })
        .collect()
}

fn wait(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn a_publication_seen_connected_or_disconnected_already_has_the_event_that_says_so() {
    let client = embedded::start(EmbeddedConfig::default()).unwrap();
    for round in 0..ROUNDS {
        let port = free_udp_port().unwrap();
        // A short receiver timeout so a subscriber that leaves without a word is dropped soon.
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}|fc=max,t:200ms");
        let publication = client.add_publication(&channel, 10).unwrap();
        assert!(connection_changes(&client).is_empty(), "round {round}: an event before any subscriber");
        let subscription = client.add_subscription(&channel, 10).unwrap();
        wait("connected", || publication.is_connected().unwrap());
        assert_eq!(connection_changes(&client), [true], "round {round}: connected without its event");
        drop(subscription);
        wait("disconnected", || !publication.is_connected().unwrap());
        assert_eq!(connection_changes(&client), [false], "round {round}: disconnected without its event");
    }
}
