//! The subject router end to end in one process over loopback: a router, sources and a
//! subscriber, each on its own embedded driver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::ClientHandle;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::groups::Timing;
use affinity::routing::policy::builtin;
use affinity::routing::{RoutingTable, Selection, SourceGroupSpec};
use affinity::subjects::backlog::DEFAULT_BACKLOG_BUDGET;
use affinity::subjects::codec::{FLAG_IMAGE, FLAG_STATUS, FLAG_UPDATE};
use affinity::subjects::runtime::{
    Delivery, PeerOptions, RouterOptions, RouterRuntime, SubjectPeer, SubjectSource, SubjectSubscriber,
};
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
    PeerOptions { router: router.into(), name: name.into(), host: "127.0.0.1".into(), timing: timing() }
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
