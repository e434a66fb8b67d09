//! Consumer groups found through a bootstrap list, without a shared registry: each member has
//! its own (empty or private) registry directory and its own embedded driver, over loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::ClientHandle;
use affinity::control::GroupSecret;
use affinity::control::Timing;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::bootstrap::parse_bootstrap_list;
use affinity::groups::runtime::bootstrap::fetch;
use affinity::groups::runtime::{GroupConsumer, GroupPublisher, MemberOptions};
use affinity::groups::GroupConfig;
use affinity::media::ports::free_udp_port;

#[path = "support/temp_dir.rs"]
mod temp_dir;

const HEARTBEAT: Duration = Duration::from_millis(50);
const LIVENESS: Duration = Duration::from_millis(1000);

fn client() -> Arc<ClientHandle> {
    Arc::new(ClientHandle::from(embedded::start(EmbeddedConfig::default()).unwrap()))
}

fn group(queue_count: u32) -> GroupConfig {
    GroupConfig::new("orders", "hp", 64, queue_count, 1 << 20).unwrap()
}

/// Options of a member with a private registry, listening at `listen`, asking `bootstrap`.
fn options(registry: &temp_dir::TempDir, listen: Option<SocketAddr>, bootstrap: &[SocketAddr]) -> MemberOptions {
    let mut options = MemberOptions::new(registry.path());
    options.timing = Timing::new(HEARTBEAT, LIVENESS).unwrap();
    options.listen = listen.map(|address| address.to_string());
    options.bootstrap = bootstrap.to_vec();
    options.bootstrap_timeout = Duration::from_secs(3);
    options
}

fn address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_udp_port().unwrap()))
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

fn no_registry_files(registry: &temp_dir::TempDir) -> bool {
    let members = registry.path().join("members").join("orders");
    std::fs::read_dir(members).map(|entries| entries.count() == 0).unwrap_or(true)
}

#[test]
fn members_with_private_registries_find_each_other_through_bootstrap_and_deliver_each_key_in_order() {
    let (registry_a, registry_b, registry_p) =
        (temp_dir::TempDir::new("boot-a"), temp_dir::TempDir::new("boot-b"), temp_dir::TempDir::new("boot-p"));
    let (at_a, at_b) = (address(), address());
    let seeds = [at_a, at_b];
    // Consumer 1 joins after consumer 0 holds every queue: its primaries come back within a cycle.
    let cycle = Duration::from_secs(1);
    // Consumer 0 starts first: nobody answers, it holds the definition, it starts alone.
    let (client_a, client_b, client_p) = (client(), client(), client());
    let a =
        GroupConsumer::new(client_a.clone(), group(4), 0, 2, &options(&registry_a, Some(at_a), &seeds), false, cycle)
            .unwrap();
    // The publisher learns the definition from whoever answers first, then joins with it.
    let learned =
        fetch(&*client_p, "orders", None, &seeds, &options(&registry_p, None, &seeds), Duration::from_secs(5)).unwrap();
    assert_eq!(learned.config, group(4));
    assert!(learned.members.iter().any(|member| member.endpoint == at_a.to_string()));
    let b =
        GroupConsumer::new(client_b.clone(), group(4), 1, 2, &options(&registry_b, Some(at_b), &seeds), false, cycle)
            .unwrap();
    // The publisher lists consumer 0 only: consumer 1 it knows from the answer's member list.
    let publisher = GroupPublisher::new(
        client_p.clone(),
        learned.config.clone(),
        &options(&registry_p, None, &[at_a]),
        Duration::from_millis(500),
    )
    .unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || a.owned_queues() == vec![0, 2] && b.owned_queues() == vec![1, 3]),
        "a {:?} b {:?}",
        a.owned_queues(),
        b.owned_queues()
    );
    assert!(wait_until(Duration::from_secs(10), || (0..4).all(|q| publisher.status().queues[q].owner_id != 0)));
    let (keys, per_key) = (20u32, 50u32);
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut received: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut owners: HashMap<u32, u64> = HashMap::new();
    while sent < keys * per_key && Instant::now() < deadline {
        let (key, n) = (sent % keys, sent / keys);
        if publisher.publish(format!("k{key}").as_bytes(), &n.to_le_bytes(), None).unwrap() > 0 {
            sent += 1;
        }
        for consumer in [&a, &b] {
            for delivery in consumer.poll(256, Duration::ZERO).unwrap() {
                let key: u32 = std::str::from_utf8(&delivery.key).unwrap()[1..].parse().unwrap();
                received.entry(key).or_default().push(u32::from_le_bytes(delivery.payload[..4].try_into().unwrap()));
                assert_eq!(
                    *owners.entry(key).or_insert(consumer.member_id()),
                    consumer.member_id(),
                    "one consumer per key"
                );
                consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
            }
        }
    }
    assert_eq!(sent, keys * per_key);
    while received.values().map(Vec::len).sum::<usize>() < (keys * per_key) as usize && Instant::now() < deadline {
        for consumer in [&a, &b] {
            for delivery in consumer.poll(256, Duration::from_millis(5)).unwrap() {
                let key: u32 = std::str::from_utf8(&delivery.key).unwrap()[1..].parse().unwrap();
                received.entry(key).or_default().push(u32::from_le_bytes(delivery.payload[..4].try_into().unwrap()));
                consumer.ack(delivery.queue, delivery.producer, delivery.sequence, delivery.epoch);
            }
        }
    }
    for key in 0..keys {
        assert_eq!(received.get(&key).cloned().unwrap_or_default(), (0..per_key).collect::<Vec<_>>(), "key {key}");
    }
    assert!(publisher.flush(Duration::from_secs(10)));
    // Nothing was written to any registry: the members found each other through the list.
    assert!(no_registry_files(&registry_a) && no_registry_files(&registry_b) && no_registry_files(&registry_p));
    publisher.close();
    b.close(Duration::from_secs(2));
    a.close(Duration::from_secs(2));
}

#[test]
fn a_member_holding_another_definition_is_refused_naming_both_fingerprints() {
    let (registry_a, registry_b) = (temp_dir::TempDir::new("mismatch-a"), temp_dir::TempDir::new("mismatch-b"));
    let at_a = address();
    let client_a = client();
    let a = GroupConsumer::new(
        client_a.clone(),
        group(4),
        0,
        1,
        &options(&registry_a, Some(at_a), &[at_a]),
        true,
        Duration::from_secs(30),
    )
    .unwrap();
    let started = Instant::now();
    let error =
        match GroupPublisher::new(client(), group(8), &options(&registry_b, None, &[at_a]), Duration::from_millis(500))
        {
            Ok(_) => panic!("a publisher holding QC=8 joined a group of QC=4"),
            Err(error) => error.to_string(),
        };
    for needle in [
        format!("{:016x}", group(4).fingerprint()),
        format!("{:016x}", group(8).fingerprint()),
        at_a.to_string(),
        "another definition".into(),
    ] {
        assert!(error.contains(&needle), "{needle}: {error}");
    }
    assert!(started.elapsed() < Duration::from_secs(3), "refused at the first answer, not at a timeout");
    a.close(Duration::from_secs(1));
}

#[test]
fn an_unreachable_list_fails_after_the_timeout_naming_every_address() {
    let registry = temp_dir::TempDir::new("unreachable");
    let seeds = parse_bootstrap_list(&format!("{},{}", address(), address())).unwrap();
    let client = client();
    let started = Instant::now();
    let timeout = Duration::from_millis(1500);
    let error = fetch(&*client, "orders", None, &seeds, &options(&registry, None, &seeds), timeout).unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= timeout && waited < timeout + Duration::from_secs(3), "{waited:?}");
    let error = error.to_string();
    for seed in &seeds {
        assert!(error.contains(&seed.to_string()), "{seed}: {error}");
    }
    assert!(error.contains("no bootstrap member answered within 1.5 s"), "{error}");
}

#[test]
fn with_a_secret_only_members_holding_it_are_answered() {
    let (registry_a, registry_b) = (temp_dir::TempDir::new("secret-a"), temp_dir::TempDir::new("secret-b"));
    let at_a = address();
    let secret = GroupSecret::new(&[7u8; 32]).unwrap();
    let mut with_secret = options(&registry_a, Some(at_a), &[at_a]);
    with_secret.secret = Some(secret.clone());
    let a = GroupConsumer::new(client(), group(4), 0, 1, &with_secret, true, Duration::from_secs(30)).unwrap();
    let client_b = client();
    let mut asker = options(&registry_b, None, &[at_a]);
    asker.secret = Some(secret);
    let learned = fetch(&*client_b, "orders", None, &[at_a], &asker, Duration::from_secs(5)).unwrap();
    assert_eq!(learned.config, group(4));
    // A retry still in flight when the answer came is answered too: let it land first.
    std::thread::sleep(Duration::from_millis(500));
    let answered = a.counters().1.bootstrap_answered;
    assert!(answered >= 1);
    asker.secret = Some(GroupSecret::new(&[8u8; 32]).unwrap());
    let error = fetch(&*client_b, "orders", None, &[at_a], &asker, Duration::from_millis(800)).unwrap_err();
    assert!(error.to_string().contains("no bootstrap member answered"), "{error}");
    asker.secret = None;
    let error = fetch(&*client_b, "orders", None, &[at_a], &asker, Duration::from_millis(800)).unwrap_err();
    assert!(error.to_string().contains("no bootstrap member answered"), "{error}");
    let (_, runtime) = a.counters();
    assert!(runtime.auth.total() >= 2, "refused requests are counted: {runtime:?}");
    // Answered (each unanswered round is asked again, so maybe more than once) only while the
    // asker held the secret.
    assert_eq!(runtime.bootstrap_answered, answered, "{runtime:?}");
    a.close(Duration::from_secs(1));
}

#[test]
fn a_flood_of_requests_keeps_at_most_the_bounded_answers_in_flight() {
    use affinity::client::ClientApi;
    use affinity::control::bootstrap::BootstrapRequest;
    use affinity::control::CONTROL_STREAM_ID;
    use affinity::groups::runtime::bootstrap::{control_channel, MAX_PENDING_REPLIES};

    let registry = temp_dir::TempDir::new("flood");
    let at_a = address();
    let a = GroupConsumer::new(
        client(),
        group(4),
        0,
        1,
        &options(&registry, Some(at_a), &[at_a]),
        true,
        Duration::from_secs(30),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || a.owned_queues() == vec![0, 1, 2, 3]));
    let attacker = client();
    let publication = attacker.add_publication_handle(&control_channel(&at_a.to_string()), CONTROL_STREAM_ID).unwrap();
    assert!(wait_until(Duration::from_secs(5), || publication.is_connected().unwrap_or(false)));
    // Its own first requests to its own inbox, sent before its thread ran, are answered by now.
    std::thread::sleep(Duration::from_millis(500));
    let before = a.counters().1.bootstrap_answered;
    let requests = 200u64;
    let mut bytes = Vec::new();
    for n in 0..requests {
        // Every request names another reply endpoint nobody listens at.
        let request = BootstrapRequest {
            sender: 1000 + n,
            group: "orders".into(),
            reply_to: format!("127.0.0.1:{}", 20000 + n),
            held_fingerprint: 0,
            nonce: n,
        };
        bytes.clear();
        request.emit(&mut bytes).unwrap();
        while publication.try_offer(&bytes).is_err() {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let answered = wait_until(Duration::from_secs(10), || a.counters().1.bootstrap_answered >= before + requests);
    assert!(answered, "{:?}", a.counters().1);
    let (_, runtime) = a.counters();
    // Sent within the answers' linger: all but the bounded few in flight were dropped, counted.
    assert!(runtime.bootstrap_ignored >= requests - 2 * MAX_PENDING_REPLIES as u64, "{runtime:?}");
    // The member goes on: still the owner of every queue, and answering once the flood is over.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(a.owned_queues(), vec![0, 1, 2, 3]);
    let learned =
        fetch(&*attacker, "orders", None, &[at_a], &options(&registry, None, &[at_a]), Duration::from_secs(5)).unwrap();
    assert_eq!(learned.config, group(4));
    a.close(Duration::from_secs(1));
}
