//! The subject router end to end in one process over loopback: a router, sources and a
//! subscriber, each on its own embedded driver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::ClientApi;
use affinity::client::ClientHandle;
use affinity::control::GroupSecret;
use affinity::control::Timing;
use affinity::control::DATA_STREAM_ID;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::routing::policy::builtin;
use affinity::routing::{RoutingTable, Selection, SourceGroupSpec};
use affinity::subjects::backlog::DEFAULT_BACKLOG_BUDGET;
use affinity::subjects::codec::{FLAG_IMAGE, FLAG_STATUS, FLAG_UPDATE};
use affinity::subjects::runtime::{
    inbox_auth, Delivery, PeerOptions, RouterOptions, RouterRuntime, SubjectPeer, SubjectSource, SubjectSubscriber,
};
use affinity::subjects::SubjectRecord;
use affinity::subjects::{Announcements, Faucet, FaucetConfig, RecordKind};

const HEARTBEAT: Duration = Duration::from_millis(50);
const LIVENESS: Duration = Duration::from_millis(600);
const DEADLINE: Duration = Duration::from_secs(10);

fn client() -> Arc<ClientHandle> {
    Arc::new(ClientHandle::from(embedded::start(EmbeddedConfig::default()).unwrap()))
}

fn timing() -> Timing {
    Timing::new(HEARTBEAT, LIVENESS).unwrap()
}

fn free_listen() -> String {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    format!("aeron:udp?endpoint={}", socket.local_addr().unwrap())
}

fn table() -> RoutingTable {
    let mut table = RoutingTable::new();
    let service = table.add_service("trade-messaging-channel", &["^/PRIVATE/([^/]+)/FXTRADE"]).unwrap();
    let spec = SourceGroupSpec {
        name: "adapters".into(),
        priority_groups: vec![vec!["TradeAdapterA".into(), "TradeAdapterB".into()]],
        rules: vec![("trading-adapters".into(), "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE".into())],
        selection: Selection::Modulo,
        policy: builtin("workload").unwrap(),
    };
    table.add_source_group(service, spec).unwrap();
    table
}

fn options(router: &str, name: &str) -> PeerOptions {
    PeerOptions {
        routers: vec![router.into()],
        name: name.into(),
        host: "127.0.0.1".into(),
        timing: timing(),
        secret: None,
    }
}

/// Polls `peer` until `want` accepts a delivery (bounded by [`DEADLINE`]); returns everything
/// seen, the accepted delivery last (the rest of its batch is dropped).
fn until(peer: &SubjectPeer, mut want: impl FnMut(&Delivery) -> bool) -> Vec<Delivery> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < DEADLINE {
        for delivery in peer.poll(256).unwrap() {
            let done = want(&delivery);
            seen.push(delivery);
            if done {
                return seen;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out; saw {seen:?}");
}

/// Polls `peer` until every predicate accepted some delivery; returns everything seen.
fn until_all(peer: &SubjectPeer, wants: &[&dyn Fn(&Delivery) -> bool]) -> Vec<Delivery> {
    let start = Instant::now();
    let mut seen: Vec<Delivery> = Vec::new();
    while start.elapsed() < DEADLINE {
        seen.extend(peer.poll(256).unwrap());
        if wants.iter().all(|want| seen.iter().any(want)) {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out; saw {seen:?}");
}

#[test]
fn a_subscription_is_requested_from_the_hashed_adapter_and_its_data_relayed_then_moved_on_close() {
    let listen = free_listen();
    let router_client = client();
    let router = RouterRuntime::start(
        router_client.clone(),
        table(),
        None,
        &RouterOptions {
            listen: listen.clone(),
            control: None,
            timing: timing(),
            backlog_budget: DEFAULT_BACKLOG_BUDGET,
            secret: None,
            forward: None,
        },
    )
    .unwrap();
    let source_client = client();
    let a = SubjectSource::new(&source_client, &options(&listen, "TradeAdapterA")).unwrap();
    let b = SubjectSource::new(&source_client, &options(&listen, "TradeAdapterB")).unwrap();
    let start = Instant::now();
    while router.status().members.iter().any(|(_, up)| !up) {
        assert!(start.elapsed() < DEADLINE, "sources never heard: {:?}", router.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    let subscriber_client = client();
    let subscriber = SubjectSubscriber::new(&subscriber_client, &options(&listen, "alice")).unwrap();
    let subject = "/PRIVATE/alice-0/FXTRADE";
    assert!(subscriber.subscribe(subject).unwrap());
    // Whichever adapter the hash picked gets the request.
    let (served, other) = loop {
        assert!(start.elapsed() < DEADLINE * 2);
        if a.peer().poll(64).unwrap().iter().any(|d| d.kind == RecordKind::Request) {
            break (&a, &b);
        }
        if b.peer().poll(64).unwrap().iter().any(|d| d.kind == RecordKind::Request) {
            break (&b, &a);
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    served.publish(subject, b"image-1", true).unwrap();
    let seen = until(subscriber.peer(), |d| d.flags == FLAG_IMAGE);
    assert_eq!(seen.last().unwrap().payload, b"image-1");
    served.publish(subject, b"update-1", false).unwrap();
    let seen = until(subscriber.peer(), |d| d.flags == FLAG_UPDATE);
    assert_eq!(seen.last().unwrap().payload, b"update-1");
    // The serving adapter leaves: the subject moves to the other, the subscriber gets a status,
    // then the other adapter's fresh data.
    served.peer().close();
    until(other.peer(), |d| d.kind == RecordKind::Request && d.subject == subject);
    let status = until(subscriber.peer(), |d| d.flags == FLAG_STATUS);
    assert!(String::from_utf8_lossy(&status.last().unwrap().payload).contains("member-down"));
    other.publish(subject, b"fresh", true).unwrap();
    let seen = until(subscriber.peer(), |d| d.flags == FLAG_IMAGE);
    assert_eq!(seen.last().unwrap().payload, b"fresh");
    let lines: Vec<_> = router.drain_log();
    assert!(!lines.is_empty());
    router.close();
}

#[test]
fn a_faucet_publisher_is_assigned_a_topic_publishes_it_and_sees_the_json_events() {
    let listen = free_listen();
    let router_client = client();
    let faucet = Faucet::new(FaucetConfig {
        control_topic: "symbol_faucet_control".into(),
        subscription_topic: "/symbols/.*".into(),
        announcements: Announcements::All,
        coverage_option: None,
    })
    .unwrap();
    let router = RouterRuntime::start(
        router_client.clone(),
        RoutingTable::new(),
        Some(faucet),
        &RouterOptions {
            listen: listen.clone(),
            control: None,
            timing: timing(),
            backlog_budget: DEFAULT_BACKLOG_BUDGET,
            secret: None,
            forward: None,
        },
    )
    .unwrap();
    let source_client = client();
    let publisher = SubjectSource::new(&source_client, &options(&listen, "pub1")).unwrap();
    publisher.enlist("*", None).unwrap();
    let subscriber_client = client();
    let subscriber = SubjectSubscriber::new(&subscriber_client, &options(&listen, "s1")).unwrap();
    assert!(subscriber.subscribe("/symbols/IBM").unwrap());
    let seen = until_all(
        publisher.peer(),
        &[&|d| d.kind == RecordKind::Request && d.subject == "/symbols/IBM", &|d| d.subject == "symbol_faucet_control"],
    );
    let event = seen.iter().find(|d| d.subject == "symbol_faucet_control").unwrap();
    let json = String::from_utf8_lossy(&event.payload).into_owned();
    assert!(json.contains(r#""event":"assign""#) && json.contains(r#""subscriber_client_name":"s1""#), "{json}");
    publisher.publish("/symbols/IBM", b"101.5", true).unwrap();
    let seen = until(subscriber.peer(), |d| d.flags == FLAG_IMAGE);
    assert_eq!(seen.last().unwrap().payload, b"101.5");
    router.close();
}

fn secret(byte: u8) -> GroupSecret {
    GroupSecret::new(&[byte; 32]).unwrap()
}

#[test]
fn with_a_router_secret_members_are_heard_and_a_peer_with_another_secret_is_refused_and_counted() {
    let listen = free_listen();
    let router_client = client();
    let router = RouterRuntime::start(
        router_client.clone(),
        table(),
        None,
        &RouterOptions {
            listen: listen.clone(),
            control: None,
            timing: timing(),
            backlog_budget: DEFAULT_BACKLOG_BUDGET,
            secret: Some(secret(1)),
            forward: None,
        },
    )
    .unwrap();
    assert!(router.status().authenticated);
    let with = |name: &str, byte: Option<u8>| PeerOptions { secret: byte.map(secret), ..options(&listen, name) };
    let source_client = client();
    let a = SubjectSource::new(&source_client, &with("TradeAdapterA", Some(1))).unwrap();
    let b = SubjectSource::new(&source_client, &with("TradeAdapterB", Some(1))).unwrap();
    assert!(a.peer().is_authenticated());
    let start = Instant::now();
    while router.status().members.iter().any(|(_, up)| !up) {
        assert!(start.elapsed() < DEADLINE, "sources never heard: {:?}", router.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    // A subscriber with another secret, and one with none: their heartbeats and SUBSCRIBEs
    // are refused before decoding and counted; the router holds nothing for them.
    let other_client = client();
    let forger = SubjectSubscriber::new(&other_client, &with("mallory", Some(2))).unwrap();
    let plain = SubjectSubscriber::new(&other_client, &with("eve", None)).unwrap();
    assert!(forger.subscribe("/PRIVATE/mallory-0/FXTRADE").unwrap());
    assert!(plain.subscribe("/PRIVATE/eve-0/FXTRADE").unwrap());
    while router.status().runtime.auth.bad_tag < 2 || router.status().runtime.auth.unauthenticated < 2 {
        assert!(start.elapsed() < DEADLINE, "refusals not counted: {:?}", router.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(router.status().subjects, 0, "a refused SUBSCRIBE subscribes nothing");
    // The real subscriber gets the real source's data, sealed both ways.
    let subscriber_client = client();
    let subscriber = SubjectSubscriber::new(&subscriber_client, &with("alice", Some(1))).unwrap();
    let subject = "/PRIVATE/alice-0/FXTRADE";
    assert!(subscriber.subscribe(subject).unwrap());
    let served = loop {
        assert!(start.elapsed() < DEADLINE * 2);
        if a.peer().poll(64).unwrap().iter().any(|d| d.kind == RecordKind::Request) {
            break &a;
        }
        if b.peer().poll(64).unwrap().iter().any(|d| d.kind == RecordKind::Request) {
            break &b;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    served.publish(subject, b"image-1", true).unwrap();
    let seen = until(subscriber.peer(), |d| d.flags == FLAG_IMAGE);
    assert_eq!(seen.last().unwrap().payload, b"image-1");
    assert_eq!(subscriber.peer().counters().auth.total(), 0);
    // The status is the snapshot the router thread refreshes: wait for the one after the image.
    while router.status().subjects != 1 {
        assert!(start.elapsed() < DEADLINE * 2, "the subject never showed in {:?}", router.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    // Straight to the subscriber's inbox, bypassing the router: DATA claiming the router's id,
    // unsealed and sealed with another secret, is refused by the subscriber and counted.
    let forger_client = client();
    let channel = format!("aeron:udp?endpoint={}", subscriber.peer().endpoint());
    let raw = forger_client.add_publication_handle(&channel, DATA_STREAM_ID).unwrap();
    let mut forged = Vec::new();
    let record =
        SubjectRecord { kind: RecordKind::Data, flags: FLAG_UPDATE, sender: router.id(), subject, payload: b"forged" };
    record.emit(&mut forged).unwrap();
    let mut wrong = forged.clone();
    inbox_auth(Some(&secret(2)), subscriber.peer().id()).seal(&mut wrong);
    let mut sent = 0;
    while sent < 2 {
        assert!(start.elapsed() < DEADLINE * 2, "the forger's publication never connected");
        let message = if sent == 0 { &forged } else { &wrong };
        if raw.try_offer(message).is_ok() {
            sent += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Both forgeries are refused (counted) when they arrive, and never delivered.
    let mut seen = Vec::new();
    while subscriber.peer().counters().auth.total() < 2 {
        assert!(start.elapsed() < DEADLINE * 2, "{:?}", subscriber.peer().counters());
        seen.extend(subscriber.peer().poll(64).unwrap());
        std::thread::sleep(Duration::from_millis(1));
    }
    served.publish(subject, b"update-2", false).unwrap();
    seen.extend(until(subscriber.peer(), |d| d.payload == b"update-2"));
    assert!(seen.iter().all(|d| d.payload != b"forged"), "a forged record was delivered: {seen:?}");
    let auth = subscriber.peer().counters().auth;
    assert_eq!((auth.unauthenticated, auth.bad_tag), (1, 1));
    router.close();
}

fn start_router(client: &Arc<ClientHandle>, listen: &str, forward: Option<&str>) -> RouterRuntime {
    let options = RouterOptions {
        listen: listen.into(),
        control: None,
        timing: timing(),
        backlog_budget: DEFAULT_BACKLOG_BUDGET,
        secret: None,
        forward: forward.map(str::to_owned),
    };
    RouterRuntime::start(client.clone(), table(), None, &options).unwrap()
}

/// Serves every REQUEST `source` has with an image `image:<subject>`; whether one came.
fn serve(source: &SubjectSource) -> bool {
    let requests: Vec<Delivery> =
        source.peer().poll(64).unwrap().into_iter().filter(|d| d.kind == RecordKind::Request).collect();
    for request in &requests {
        source.publish(&request.subject, format!("image:{}", request.subject).as_bytes(), true).unwrap();
    }
    !requests.is_empty()
}

#[test]
fn a_router_stopping_sends_its_subscriber_to_the_next_router_which_restores_the_subscription() {
    let (first, second) = (free_listen(), free_listen());
    let router_client = client();
    let first_router = start_router(&router_client, &first, Some(&second));
    let second_router = start_router(&router_client, &second, None);
    let source_client = client();
    // One adapter per router, as DataSource peers connect to every router.
    let at_first = SubjectSource::new(&source_client, &options(&first, "TradeAdapterA")).unwrap();
    let at_second = SubjectSource::new(&source_client, &options(&second, "TradeAdapterA")).unwrap();
    let start = Instant::now();
    while ![&first_router, &second_router].iter().all(|r| r.status().members.iter().any(|(_, up)| *up)) {
        assert!(start.elapsed() < DEADLINE, "sources never heard");
        std::thread::sleep(Duration::from_millis(5));
    }
    let subscriber_client = client();
    let mut list = options(&first, "alice");
    list.routers.push(second.clone());
    // A liveness timeout no step waits for: only the stopping router's word moves it.
    list.timing = Timing::new(HEARTBEAT, DEADLINE * 6).unwrap();
    let subscriber = SubjectSubscriber::new(&subscriber_client, &list).unwrap();
    let subject = "/PRIVATE/alice-0/FXTRADE";
    assert!(subscriber.subscribe(subject).unwrap());
    while !serve(&at_first) {
        assert!(start.elapsed() < DEADLINE * 2, "never requested at the first router");
        std::thread::sleep(Duration::from_millis(1));
    }
    until(subscriber.peer(), |d| d.flags == FLAG_IMAGE);
    assert_eq!(subscriber.peer().router(), first);

    first_router.close();
    let stopped = Instant::now();
    let mut seen = Vec::new();
    while !seen.iter().any(|d: &Delivery| d.flags == FLAG_IMAGE) {
        assert!(stopped.elapsed() < DEADLINE, "no fresh image after the move; saw {seen:?}");
        serve(&at_second);
        seen.extend(subscriber.peer().poll(256).unwrap());
        std::thread::sleep(Duration::from_millis(1));
    }
    let status = seen.iter().position(|d| d.flags == FLAG_STATUS).expect("a STATUS first");
    let image = seen.iter().position(|d| d.flags == FLAG_IMAGE).unwrap();
    assert!(status < image, "{seen:?}");
    assert!(String::from_utf8_lossy(&seen[status].payload).contains("stopped; subscribed again at"));
    assert_eq!(seen[image].payload, format!("image:{subject}").into_bytes());
    assert_eq!(subscriber.peer().router(), second);
    assert_eq!(subscriber.peer().counters().router_switches, 1);
    assert!(seen.iter().all(|d| d.kind != RecordKind::Alive), "ALIVE records are not handed out");
    second_router.close();
}
