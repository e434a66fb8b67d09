//! The router, sans-IO, on the seed's worked example (Transformer configuration) and a faucet.

use std::time::Duration;

use super::*;
use crate::control::Heartbeat;
use crate::routing::policy::builtin;
use crate::routing::{Selection, SourceGroupSpec};
use crate::subjects::codec::{
    alive_held, FLAG_COVERAGE, FLAG_IMAGE, FLAG_NODATA_NOTFOUND, FLAG_REFUSED, FLAG_STATUS, FLAG_STOPPING, FLAG_UPDATE,
};
use crate::subjects::faucet::{Announcements, FaucetConfig};

const LIVENESS: Duration = Duration::from_secs(2);
const ROUTER: u64 = 1;
const ALICE: u64 = 100;
const BOB: u64 = 101;
const TRADE: &str = "/PRIVATE/alice-0/FXTRADE";
const BLOTTER: &str = "/PRIVATE/alice/BLOTTER/TRADE";

fn spec(name: &str, labels: &[&str], rules: &[(&str, &str)]) -> SourceGroupSpec {
    SourceGroupSpec {
        name: name.into(),
        priority_groups: vec![labels.iter().map(|l| (*l).to_owned()).collect()],
        rules: rules.iter().map(|(k, p)| ((*k).to_owned(), (*p).to_owned())).collect(),
        selection: Selection::Modulo,
        policy: builtin("workload").unwrap(),
    }
}

/// The seed's Transformer configuration, plus a load-balanced service without affinity.
fn transformer() -> RoutingTable {
    let mut table = RoutingTable::new();
    let adapters = ["TradeAdapterA", "TradeAdapterB"];
    let channel = table.add_service("trade-messaging-channel", &["^/PRIVATE/([^/]+)/FXTRADE"]).unwrap();
    let rule = [("trading-adapters", "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE")];
    table.add_source_group(channel, spec("channel", &adapters, &rule)).unwrap();
    let container = table.add_service("trade-blotter-container", &["^/PRIVATE/([^/]+)/BLOTTER/TRADE"]).unwrap();
    let rule = [("trading-adapters", "^/PRIVATE/([^/]+)/BLOTTER/TRADE")];
    table.add_source_group(container, spec("live", &adapters, &rule)).unwrap();
    table.add_source_group(container, spec("initial", &["HistoricalAdapter"], &[])).unwrap();
    let prices = table.add_service("prices", &["^/PRICES/"]).unwrap();
    table.add_source_group(prices, spec("prices", &["PriceA", "PriceB"], &[])).unwrap();
    table
}

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// The inbox endpoint `ip:port` of member `id` (a valid port whatever the id).
fn inbox(id: u64) -> String {
    format!("127.0.0.1:{}", 40000 + id % 20000)
}

fn heartbeat(id: u64, role: Role, name: &str) -> Heartbeat {
    Heartbeat {
        fingerprint: crate::subjects::fingerprint(),
        member_id: id,
        leaving: false,
        role,
        name: name.into(),
        endpoint: inbox(id),
        index: 0,
        count: 0,
        pid: 1,
        claims: Vec::new(),
        figures: Vec::new(),
    }
}

fn record(kind: RecordKind, flags: u16, sender: u64, subject: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    SubjectRecord { kind, flags, sender, subject, payload }.emit(&mut out).unwrap();
    out
}

fn subscribe(router: &mut RouterCore, subscriber: u64, subject: &str, now: Instant) {
    let reply = format!("{}\nuser{subscriber}", inbox(subscriber));
    router.on_message(&record(RecordKind::Subscribe, 0, subscriber, subject, reply.as_bytes()), now);
}

/// `(to, kind, flags, subject, payload)` for everything queued, in order per destination.
fn sent(router: &mut RouterCore) -> Vec<(u64, RecordKind, u16, String, String)> {
    let mut out = Vec::new();
    router.outbox().drain(|to, bytes| {
        for r in Records::new(bytes) {
            let r = r.unwrap();
            out.push((to, r.kind, r.flags, r.subject.to_owned(), String::from_utf8_lossy(r.payload).into_owned()));
        }
    });
    out.sort_by_key(|entry| entry.0);
    out
}

struct Fixture {
    router: RouterCore,
    ids: HashMap<&'static str, u64>,
}

impl Fixture {
    fn new() -> Fixture {
        let mut router = RouterCore::new(ROUTER, transformer(), None, LIVENESS);
        let mut ids = HashMap::new();
        for (i, label) in ["TradeAdapterA", "TradeAdapterB", "HistoricalAdapter", "PriceA", "PriceB"].iter().enumerate()
        {
            let id = 10 + i as u64;
            router.on_heartbeat(heartbeat(id, Role::Source, label), at(0));
            ids.insert(*label, id);
        }
        router.drain_log();
        Fixture { router, ids }
    }

    fn id(&self, label: &str) -> u64 {
        self.ids[label]
    }

    /// Heartbeats from every source but `dead` at `now`.
    fn beat(&mut self, now: Instant, dead: &[&str]) {
        for (label, id) in self.ids.clone() {
            if !dead.contains(&label) {
                self.router.on_heartbeat(heartbeat(id, Role::Source, label), now);
            }
        }
        for id in [ALICE, BOB] {
            self.router.on_heartbeat(heartbeat(id, Role::Subscriber, "user"), now);
        }
    }
}

#[test]
fn a_new_subject_is_requested_from_one_peer_and_its_updates_reach_every_subscriber() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    let out = sent(&mut f.router);
    assert_eq!(out.len(), 1);
    let (adapter, kind, _, subject, _) = &out[0];
    assert_eq!((*kind, subject.as_str()), (RecordKind::Request, TRADE));
    assert!([f.id("TradeAdapterA"), f.id("TradeAdapterB")].contains(adapter));
    let adapter = *adapter;
    f.router.on_message(&record(RecordKind::Data, FLAG_IMAGE, adapter, TRADE, b"image"), at(2));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_IMAGE, TRADE.into(), "image".into())]);
    // A second subscriber gets the cached image at once, and no second request goes out.
    subscribe(&mut f.router, BOB, TRADE, at(3));
    assert_eq!(sent(&mut f.router), [(BOB, RecordKind::Data, FLAG_IMAGE, TRADE.into(), "image".into())]);
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, adapter, TRADE, b"u1"), at(4));
    let out = sent(&mut f.router);
    assert_eq!(out.iter().map(|e| e.0).collect::<Vec<_>>(), [ALICE, BOB]);
    assert!(out.iter().all(|e| e.2 == FLAG_UPDATE && e.4 == "u1"));
    assert_eq!(f.router.counters().relayed, 3);
}

#[test]
fn the_trade_channel_and_the_blotter_container_go_to_the_same_adapter_and_the_historical_one() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    subscribe(&mut f.router, ALICE, BLOTTER, at(1));
    let channel = f.router.serving(TRADE);
    let container = f.router.serving(BLOTTER);
    assert_eq!(channel.len(), 1);
    assert_eq!(container, [channel[0], "HistoricalAdapter"]);
    let log = f.router.drain_log();
    let bound = log.iter().filter(|e| matches!(e, LogEntry::Routing(ev) if ev.kind == EventKind::Bound)).count();
    assert!(bound >= 3);
}

#[test]
fn a_failed_adapter_moves_its_subjects_to_the_survivor_status_first_and_nothing_moves_back() {
    let mut f = Fixture::new();
    f.beat(at(0), &[]);
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    subscribe(&mut f.router, BOB, BLOTTER, at(1));
    sent(&mut f.router);
    let first = f.router.serving(TRADE)[0].to_owned();
    let survivor = if first == "TradeAdapterA" { "TradeAdapterB" } else { "TradeAdapterA" };
    let dead: &str = if first == "TradeAdapterA" { "TradeAdapterA" } else { "TradeAdapterB" };
    // The adapter stops heartbeating; the others keep on.
    f.beat(at(1500), &[dead]);
    f.router.tick(at(1500));
    assert_eq!(sent(&mut f.router), []);
    f.beat(at(2100), &[dead]);
    f.router.tick(at(2100));
    let out = sent(&mut f.router);
    let survivor_id = f.id(survivor);
    assert_eq!(
        out,
        [
            (survivor_id, RecordKind::Request, 0, TRADE.into(), String::new()),
            (survivor_id, RecordKind::Request, 0, BLOTTER.into(), String::new()),
            (
                ALICE,
                RecordKind::Data,
                FLAG_STATUS,
                TRADE.into(),
                format!(
                    "moved from peer {} ({dead}) to peer {} ({survivor}): member-down",
                    if dead == "TradeAdapterA" { 1 } else { 2 },
                    if dead == "TradeAdapterA" { 2 } else { 1 }
                )
            ),
            (
                BOB,
                RecordKind::Data,
                FLAG_STATUS,
                BLOTTER.into(),
                format!(
                    "moved from peer {} ({dead}) to peer {} ({survivor}): member-down",
                    if dead == "TradeAdapterA" { 1 } else { 2 },
                    if dead == "TradeAdapterA" { 2 } else { 1 }
                )
            ),
        ]
    );
    assert_eq!(f.router.serving(TRADE), [survivor]);
    assert_eq!(f.router.serving(BLOTTER), ["HistoricalAdapter", survivor]);
    // Fresh data from the survivor flows; anything late from the dead one is dropped.
    f.router.on_message(&record(RecordKind::Data, FLAG_IMAGE, survivor_id, TRADE, b"fresh"), at(2200));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_IMAGE, TRADE.into(), "fresh".into())]);
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, f.id(dead), TRADE, b"late"), at(2200));
    assert_eq!(sent(&mut f.router), []);
    // The adapter comes back (new process, new id): nothing moves back.
    f.router.on_heartbeat(heartbeat(77, Role::Source, dead), at(2300));
    assert_eq!(sent(&mut f.router), []);
    assert_eq!(f.router.serving(TRADE), [survivor]);
    let log = f.router.drain_log();
    assert!(log.iter().any(|e| matches!(e, LogEntry::Routing(ev) if ev.kind == EventKind::MemberUp)));
    assert!(log
        .iter()
        .any(|e| matches!(e, LogEntry::Routing(ev) if ev.move_reason == Some(crate::routing::MoveReason::MemberDown))));
}

#[test]
fn nodata_notfound_under_source_affinity_is_forwarded_and_never_rerouted() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    let adapter = sent(&mut f.router)[0].0;
    f.router.on_message(&record(RecordKind::Data, FLAG_NODATA_NOTFOUND, adapter, TRADE, b""), at(2));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_NODATA_NOTFOUND, TRADE.into(), String::new())]);
    assert_eq!(f.router.serving(TRADE).len(), 1);
    // A later subscriber gets the authoritative NODATA too.
    subscribe(&mut f.router, BOB, TRADE, at(3));
    assert_eq!(sent(&mut f.router), [(BOB, RecordKind::Data, FLAG_NODATA_NOTFOUND, TRADE.into(), String::new())]);
}

#[test]
fn nodata_without_affinity_is_retried_on_another_peer_and_not_forwarded() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, "/PRICES/EURUSD", at(1));
    let first = sent(&mut f.router)[0].0;
    f.router.on_message(&record(RecordKind::Data, FLAG_NODATA_NOTFOUND, first, "/PRICES/EURUSD", b""), at(2));
    let out = sent(&mut f.router);
    let other = if first == f.id("PriceA") { f.id("PriceB") } else { f.id("PriceA") };
    assert!(out.contains(&(other, RecordKind::Request, 0, "/PRICES/EURUSD".into(), String::new())));
    assert!(out.contains(&(first, RecordKind::Discard, 0, "/PRICES/EURUSD".into(), String::new())));
    assert!(!out.iter().any(|e| e.0 == ALICE && e.2 == FLAG_NODATA_NOTFOUND));
}

#[test]
fn the_last_unsubscribe_discards_the_subject_at_every_serving_peer() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, BLOTTER, at(1));
    subscribe(&mut f.router, BOB, BLOTTER, at(1));
    assert_eq!(f.router.subscriber_count(), 2);
    sent(&mut f.router);
    f.router.on_message(&record(RecordKind::Unsubscribe, 0, ALICE, BLOTTER, b""), at(2));
    assert_eq!(sent(&mut f.router), []);
    f.router.on_message(&record(RecordKind::Unsubscribe, 0, BOB, BLOTTER, b""), at(3));
    let out = sent(&mut f.router);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|e| e.1 == RecordKind::Discard && e.3 == BLOTTER));
    assert_eq!(f.router.subject_count(), 0);
    assert_eq!(f.router.table().affinity_count(), 0);
}

#[test]
fn a_lost_subscriber_releases_its_subscriptions() {
    let mut f = Fixture::new();
    f.beat(at(0), &[]);
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    sent(&mut f.router);
    for ms in [1000, 2000, 2500] {
        for (label, id) in f.ids.clone() {
            f.router.on_heartbeat(heartbeat(id, Role::Source, label), at(ms));
        }
        f.router.tick(at(ms));
    }
    let out = sent(&mut f.router);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1, out[0].3.as_str()), (RecordKind::Discard, TRADE));
    assert_eq!(f.router.subject_count(), 0);
}

#[test]
fn a_duplicate_subscribe_is_idempotent_one_relay_per_subscriber_and_subject() {
    let mut f = Fixture::new();
    let reply = format!("{}\nuser{ALICE}", inbox(ALICE));
    let one = record(RecordKind::Subscribe, 0, ALICE, TRADE, reply.as_bytes());
    // 2,000 SUBSCRIBEs of one subject by one subscriber, packed as a hostile peer would.
    for _ in 0..20 {
        f.router.on_message(&one.repeat(100), at(1));
    }
    let requests = sent(&mut f.router);
    assert_eq!(requests.len(), 1, "one REQUEST: {requests:?}");
    let adapter = requests[0].0;
    assert_eq!(f.router.subscribers_of(TRADE), [ALICE]);
    assert_eq!(f.router.counters().duplicate_subscribes, 1_999);
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, adapter, TRADE, b"u1"), at(2));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_UPDATE, TRADE.into(), "u1".into())]);
    assert_eq!(f.router.counters().relayed, 1);
    // One UNSUBSCRIBE ends it: the subject is discarded at its adapter.
    f.router.on_message(&record(RecordKind::Unsubscribe, 0, ALICE, TRADE, b""), at(3));
    assert_eq!(sent(&mut f.router), [(adapter, RecordKind::Discard, 0, TRADE.into(), String::new())]);
    assert_eq!(f.router.subject_count(), 0);
    assert_eq!(f.router.table().subscription_total(), 0);
}

/// SUBSCRIBEs of `subjects` by `subscriber`, packed into messages of up to 1,000 records.
fn subscribe_many(router: &mut RouterCore, subscriber: u64, subjects: impl Iterator<Item = String>, now: Instant) {
    let reply = format!("{}\nuser{subscriber}", inbox(subscriber));
    let mut message = Vec::new();
    for (i, subject) in subjects.enumerate() {
        SubjectRecord {
            kind: RecordKind::Subscribe,
            flags: 0,
            sender: subscriber,
            subject: &subject,
            payload: reply.as_bytes(),
        }
        .emit(&mut message)
        .unwrap();
        if i % 1000 == 999 {
            router.on_message(&message, now);
            message.clear();
        }
    }
    router.on_message(&message, now);
}

#[test]
fn a_subscribe_past_the_subjects_of_one_subscriber_is_refused_and_reported_to_it() {
    let mut f = Fixture::new();
    subscribe_many(&mut f.router, ALICE, (0..=MAX_SUBJECTS_PER_SUBSCRIBER).map(|i| format!("/PRICES/{i}")), at(1));
    let refusals: Vec<_> =
        sent(&mut f.router).into_iter().filter(|e| e.0 == ALICE && e.2 == FLAG_STATUS | FLAG_REFUSED).collect();
    let last = format!("/PRICES/{MAX_SUBJECTS_PER_SUBSCRIBER}");
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].3, last);
    assert!(refusals[0].4.contains("65536 subjects"), "{}", refusals[0].4);
    assert_eq!(f.router.counters().refused_subscribes, 1);
    assert_eq!(f.router.subject_count(), MAX_SUBJECTS_PER_SUBSCRIBER);
    // A source cannot claim the refusal flag on its data.
    f.router
        .on_message(&record(RecordKind::Data, FLAG_STATUS | FLAG_REFUSED, f.id("PriceA"), "/PRICES/1", b"x"), at(2));
    assert!(sent(&mut f.router).is_empty());
}

#[test]
fn a_subscribe_from_a_new_id_past_the_subscribers_bound_is_reported_to_its_reply_inbox() {
    let mut f = Fixture::new();
    let subscribers = (0..MAX_SUBSCRIBERS as u64).map(|i| 1_000_000 + i);
    for id in subscribers {
        subscribe(&mut f.router, id, "/PRICES/shared", at(1));
    }
    sent(&mut f.router);
    assert_eq!(f.router.counters().refused_subscribes, 0);
    // A burst of new ids past the bound: each refusal is counted; the first
    // MAX_REFUSAL_REPLIES are reported to the inbox each SUBSCRIBE names.
    let burst = (0..MAX_REFUSAL_REPLIES as u64 + 50).map(|i| 5_000_000 + i).collect::<Vec<_>>();
    for &id in &burst {
        subscribe(&mut f.router, id, "/PRICES/shared", at(2));
    }
    let out = sent(&mut f.router);
    assert_eq!(out.len(), MAX_REFUSAL_REPLIES);
    assert!(out.iter().all(|e| e.2 == FLAG_STATUS | FLAG_REFUSED && e.4.contains("65536 subscribers")));
    assert_eq!(f.router.counters().refused_subscribes, burst.len() as u64);
    assert_eq!(f.router.endpoint(burst[0]).map(|e| &**e), Some(inbox(burst[0]).as_str()));
    // The reply inbox is kept for a liveness timeout only.
    f.router.tick(at(2) + LIVENESS);
    assert_eq!(f.router.endpoint(burst[0]), None);
}

#[test]
fn a_subscriber_evicted_for_the_backlog_budget_loses_its_subscriptions_logged_and_counted() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    subscribe(&mut f.router, BOB, TRADE, at(1));
    let adapter = sent(&mut f.router)[0].0;
    f.router.drain_log();
    assert!(f.router.evict_subscriber(ALICE, 1 << 20));
    assert_eq!(f.router.subscribers_of(TRADE), [BOB]);
    assert_eq!(f.router.endpoint(ALICE), None);
    assert_eq!(f.router.counters().evicted_subscribers, 1);
    let log = f.router.drain_log();
    assert!(matches!(log.as_slice(), [LogEntry::SubscriberEvicted(name, ALICE, 1048576)] if &**name == "user100"));
    // The last holder evicted: the subject is discarded at its adapter.
    assert!(f.router.evict_subscriber(BOB, 1));
    assert_eq!(sent(&mut f.router), [(adapter, RecordKind::Discard, 0, TRADE.into(), String::new())]);
    assert!(!f.router.evict_subscriber(BOB, 1));
    assert_eq!(f.router.counters().evicted_subscribers, 2);
}

#[test]
fn a_subject_no_service_covers_is_answered_nodata_notfound() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, "/NOWHERE", at(1));
    let out = sent(&mut f.router);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0, out[0].2), (ALICE, FLAG_NODATA_NOTFOUND));
    assert!(out[0].4.contains("no data service"));
    assert_eq!(f.router.counters().no_service, 1);
}

#[test]
fn hostile_records_are_counted_and_ignored() {
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, TRADE, at(1));
    let adapter = sent(&mut f.router)[0].0;
    f.router.on_message(&[1, 2, 3], at(2));
    f.router.on_message(&[0xFF; 64], at(2));
    let mut truncated = record(RecordKind::Data, FLAG_UPDATE, adapter, TRADE, b"payload");
    truncated.truncate(30);
    f.router.on_message(&truncated, at(2));
    assert_eq!(f.router.counters().malformed, 3);
    // Kinds the router never accepts, data from a non-source, a bad SUBSCRIBE payload.
    f.router.on_message(&record(RecordKind::Request, 0, ALICE, TRADE, b""), at(2));
    f.router.on_message(&record(RecordKind::Discard, 0, ALICE, TRADE, b""), at(2));
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, ALICE, TRADE, b"spoof"), at(2));
    f.router.on_message(&record(RecordKind::Subscribe, 0, 555, TRADE, b"no reply"), at(2));
    f.router.on_message(&record(RecordKind::Enlist, FLAG_COVERAGE, adapter, "ctl", b".*"), at(2));
    assert_eq!(f.router.counters().refused, 5);
    // Data from a source that does not serve the subject, or for nothing subscribed.
    let other = if adapter == f.id("TradeAdapterA") { f.id("TradeAdapterB") } else { f.id("TradeAdapterA") };
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, other, TRADE, b"x"), at(2));
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, adapter, "/PRIVATE/zed-0/FXTRADE", b"x"), at(2));
    f.router.on_message(&record(RecordKind::Data, FLAG_STATUS, adapter, TRADE, b"forged status"), at(2));
    assert_eq!(f.router.counters().stale_data, 3);
    f.router.on_message(&record(RecordKind::Unsubscribe, 0, BOB, TRADE, b""), at(2));
    assert_eq!(f.router.counters().unknown_unsubscribes, 1);
    // A foreign-namespace heartbeat is counted.
    let mut foreign = heartbeat(9, Role::Source, "TradeAdapterA");
    foreign.fingerprint ^= 1;
    f.router.on_heartbeat(foreign, at(2));
    assert_eq!(f.router.counters().foreign, 1);
    assert_eq!(sent(&mut f.router), []);
    assert_eq!(f.router.serving(TRADE).len(), 1);
}

fn faucet_router(announcements: Announcements) -> RouterCore {
    let faucet = Faucet::new(FaucetConfig {
        control_topic: "symbol_faucet_control".into(),
        subscription_topic: "/symbols/.*".into(),
        announcements,
        coverage_option: None,
    })
    .unwrap();
    RouterCore::new(ROUTER, RoutingTable::new(), Some(faucet), LIVENESS)
}

#[test]
fn faucet_topics_are_assigned_requested_announced_as_json_and_reassigned_on_publisher_loss() {
    let mut r = faucet_router(Announcements::All);
    let (p1, p2, watcher) = (20, 21, 30);
    subscribe(&mut r, watcher, "symbol_faucet_control", at(0));
    r.on_heartbeat(heartbeat(p1, Role::Source, "pub1"), at(0));
    r.on_message(&record(RecordKind::Enlist, 0, p1, "symbol_faucet_control", b""), at(0));
    // ENLIST before the heartbeat is kept until the source is heard.
    r.on_message(&record(RecordKind::Enlist, 0, p2, "symbol_faucet_control", b""), at(0));
    r.on_heartbeat(heartbeat(p2, Role::Source, "pub2"), at(1));
    subscribe(&mut r, ALICE, "/symbols/IBM", at(2));
    let out = sent(&mut r);
    assert!(out.contains(&(p1, RecordKind::Request, 0, "/symbols/IBM".into(), String::new())));
    let json = format!(
        r#"{{"client_name":"pub1","connection_name":"{:016x}","topic":"/symbols/IBM","event":"assign","subscriber_client_name":"user{ALICE}","subscriber_connection_name":"{ALICE:016x}"}}"#,
        p1
    );
    for to in [p1, p2, watcher] {
        assert!(
            out.contains(&(to, RecordKind::Data, FLAG_UPDATE, "symbol_faucet_control".into(), json.clone())),
            "{to}"
        );
    }
    r.on_message(&record(RecordKind::Data, FLAG_IMAGE, p1, "/symbols/IBM", b"100"), at(3));
    r.on_message(&record(RecordKind::Data, FLAG_IMAGE, p2, "/symbols/IBM", b"not assigned"), at(3));
    assert_eq!(sent(&mut r), [(ALICE, RecordKind::Data, FLAG_IMAGE, "/symbols/IBM".into(), "100".into())]);
    // pub1 goes silent: the topic goes to pub2, ALICE gets a status, events unassign then assign.
    for ms in [1000, 2100] {
        r.on_heartbeat(heartbeat(p2, Role::Source, "pub2"), at(ms));
        r.on_heartbeat(heartbeat(ALICE, Role::Subscriber, "a"), at(ms));
        r.on_heartbeat(heartbeat(watcher, Role::Subscriber, "w"), at(ms));
        r.tick(at(ms));
    }
    let out = sent(&mut r);
    assert!(out.contains(&(p2, RecordKind::Request, 0, "/symbols/IBM".into(), String::new())));
    assert!(out.iter().any(|e| e.0 == ALICE && e.2 == FLAG_STATUS));
    let events: Vec<&str> = out
        .iter()
        .filter(|e| e.0 == watcher)
        .map(|e| if e.4.contains(r#""event":"unassign""#) { "unassign" } else { "assign" })
        .collect();
    assert_eq!(events, ["unassign", "assign"]);
}

#[test]
fn the_router_heartbeats_every_peer_it_hears_and_says_where_to_go_when_it_stops() {
    let interval = Duration::from_millis(100);
    let mut router = RouterCore::new(ROUTER, transformer(), None, LIVENESS).with_alive_interval(interval);
    router.on_heartbeat(heartbeat(ALICE, Role::Subscriber, "alice"), at(0));
    router.on_heartbeat(heartbeat(10, Role::Source, "TradeAdapterA"), at(0));
    router.tick(at(1));
    let alive: Vec<_> = sent(&mut router).into_iter().filter(|r| r.1 == RecordKind::Alive).collect();
    assert_eq!(alive.iter().map(|r| (r.0, r.2)).collect::<Vec<_>>(), [(10, 0), (ALICE, 0)]);
    // Not again within the interval; again after it.
    router.tick(at(50));
    assert!(sent(&mut router).is_empty());
    router.tick(at(101));
    assert_eq!(sent(&mut router).len(), 2);
    // A peer that left, or went silent past the liveness timeout, hears nothing more.
    let mut leaving = heartbeat(ALICE, Role::Subscriber, "alice");
    leaving.leaving = true;
    router.on_heartbeat(leaving, at(150));
    router.tick(at(202));
    assert_eq!(sent(&mut router).iter().map(|r| r.0).collect::<Vec<_>>(), [10]);
    let late = at(202) + LIVENESS;
    router.tick(late);
    assert_eq!(router.peer_count(), 0);
    assert!(sent(&mut router).is_empty());
    // Stopping: every peer heard gets ALIVE|STOPPING with the forward channel, and so does a
    // subscriber known only by its SUBSCRIBE (its first heartbeat not heard yet).
    router.on_heartbeat(heartbeat(BOB, Role::Subscriber, "bob"), late);
    subscribe(&mut router, ALICE, TRADE, late);
    sent(&mut router);
    // The periodic ALIVE goes to those heard only: an id that only sent a SUBSCRIBE gets none.
    router.tick(late + interval);
    assert_eq!(sent(&mut router).iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), [(BOB, RecordKind::Alive)]);
    router.stopping(Some("aeron:udp?endpoint=127.0.0.1:40600"));
    let forward = "aeron:udp?endpoint=127.0.0.1:40600".to_owned();
    assert_eq!(
        sent(&mut router),
        [
            (ALICE, RecordKind::Alive, FLAG_STOPPING, "*".to_owned(), forward.clone()),
            (BOB, RecordKind::Alive, FLAG_STOPPING, "*".to_owned(), forward)
        ]
    );
    // An ALIVE sent to the router is refused.
    router.on_message(&record(RecordKind::Alive, 0, BOB, "*", b""), late);
    assert_eq!(router.counters().refused, 1);
}

#[test]
fn each_alive_says_how_many_subscriptions_the_router_holds_for_its_member() {
    let interval = Duration::from_millis(100);
    let mut router = RouterCore::new(ROUTER, transformer(), None, LIVENESS).with_alive_interval(interval);
    router.on_heartbeat(heartbeat(ALICE, Role::Subscriber, "alice"), at(0));
    router.on_heartbeat(heartbeat(BOB, Role::Subscriber, "bob"), at(0));
    subscribe(&mut router, ALICE, TRADE, at(0));
    subscribe(&mut router, ALICE, BLOTTER, at(0));
    subscribe(&mut router, ALICE, TRADE, at(0)); // a duplicate counts once
    sent(&mut router);
    router.tick(at(1));
    let mut held = Vec::new();
    router.outbox().drain(|to, bytes| {
        for r in Records::new(bytes) {
            let r = r.unwrap();
            if r.kind == RecordKind::Alive {
                held.push((to, alive_held(r.flags, r.payload)));
            }
        }
    });
    held.sort();
    assert_eq!(held, [(ALICE, Some(2)), (BOB, Some(0))]);
    assert_eq!(router.counters().duplicate_subscribes, 1);
}

fn subscribe_as(router: &mut RouterCore, subscriber: u64, name: &str, subject: &str, now: Instant) {
    let reply = format!("{}\n{name}", inbox(subscriber));
    router.on_message(&record(RecordKind::Subscribe, 0, subscriber, subject, reply.as_bytes()), now);
}

#[test]
fn a_node_id_that_is_not_configured_is_refused_not_allowed_and_a_configured_one_is_served() {
    let mut f = Fixture::new();
    f.router = std::mem::replace(&mut f.router, RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS))
        .with_cluster_nodes(vec!["avalon".into()]);
    subscribe_as(&mut f.router, ALICE, "node:frodo", "/PRICES/EURUSD", at(1));
    let out = sent(&mut f.router);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].0, out[0].2), (ALICE, FLAG_STATUS | FLAG_REFUSED));
    assert!(out[0].4.starts_with("not-allowed: node \"frodo\""), "{}", out[0].4);
    assert_eq!((f.router.counters().not_allowed, f.router.subscriber_count()), (1, 0));
    // A configured node, and a plain subscriber, are let in (the source is requested).
    subscribe_as(&mut f.router, BOB, "node:avalon", "/PRICES/EURUSD", at(2));
    subscribe(&mut f.router, ALICE + 10, "/PRICES/GBPUSD", at(2));
    assert_eq!((f.router.counters().not_allowed, f.router.subscriber_count()), (1, 2));
    // A router that is no cluster node refuses every node.
    let mut plain = Fixture::new();
    subscribe_as(&mut plain.router, BOB, "node:avalon", "/PRICES/EURUSD", at(1));
    assert_eq!(plain.router.counters().not_allowed, 1);
    assert!(sent(&mut plain.router)[0].4.contains("not a cluster node"));
}

#[test]
fn a_source_claiming_a_node_that_is_not_configured_is_not_let_in_and_its_publishes_are_refused() {
    let mut router =
        RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS).with_cluster_nodes(vec!["avalon".into()]);
    let refused_labels = ["node:frodo", "ptp-link:frodo", "node-watch:frodo"];
    for (i, label) in refused_labels.iter().enumerate() {
        let id = 200 + i as u64;
        router.on_heartbeat(heartbeat(id, Role::Source, label), at(1));
        router.on_heartbeat(heartbeat(id, Role::Source, label), at(2));
        let publish = record(RecordKind::Data, crate::subjects::codec::FLAG_PUBLISH, id, "/STOCK/IBM", b"forged");
        router.on_message(&publish, at(3));
    }
    // Each refused at every heartbeat, logged once, its publish refused as a stranger's.
    assert_eq!(router.counters().not_allowed, 6);
    assert_eq!(router.counters().refused, 3);
    let log = router.drain_log();
    let refused: Vec<_> = log
        .iter()
        .filter_map(|entry| match entry {
            LogEntry::SourceRefused(label, _, reason) => Some((label.to_string(), reason.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 3, "{log:?}");
    for ((label, reason), expected) in refused.iter().zip(refused_labels) {
        assert_eq!(label, expected);
        assert!(reason.starts_with("not-allowed: node \"frodo\" is not a configured node"), "{reason}");
    }
    assert!(!log.iter().any(|entry| matches!(entry, LogEntry::SourceUp(..))), "{log:?}");
    assert!(sent(&mut router).is_empty());
    // The configured node's sources are let in; a label merely containing a prefix is no claim.
    for (i, label) in ["node:avalon", "ptp-link:avalon", "node-watch:avalon", "feed-node:frodo"].iter().enumerate() {
        router.on_heartbeat(heartbeat(300 + i as u64, Role::Source, label), at(4));
    }
    let ups = router.drain_log().iter().filter(|entry| matches!(entry, LogEntry::SourceUp(..))).count();
    assert_eq!((ups, router.counters().not_allowed), (4, 6));
    // A router that is no cluster node lets in no source claiming a node.
    let mut plain = RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS);
    plain.on_heartbeat(heartbeat(400, Role::Source, "node:avalon"), at(1));
    assert_eq!(plain.counters().not_allowed, 1);
    assert!(
        matches!(&plain.drain_log()[..], [LogEntry::SourceRefused(_, 400, reason)] if reason.contains("not a cluster node"))
    );
}

/// A slave's table: `/STOCK/` served by the node's `cluster.STOCK_EXCHANGE` source.
fn slave_table() -> RoutingTable {
    let mut table = RoutingTable::new();
    let stock = table.add_service("cluster-STOCK_EXCHANGE", &["^/STOCK/"]).unwrap();
    table.add_source_group(stock, spec("cluster", &["cluster.STOCK_EXCHANGE"], &[])).unwrap();
    table
}

#[test]
fn a_publish_at_a_slave_goes_to_the_node_with_its_origin_and_the_node_status_goes_back_to_it() {
    use crate::subjects::codec::{split_origin, with_origin, FLAG_PUBLISH};
    const NODE: u64 = 20;
    const PUBLISHER: u64 = 21;
    let mut router = RouterCore::new(ROUTER, slave_table(), None, LIVENESS);
    router.on_heartbeat(heartbeat(NODE, Role::Source, "cluster.STOCK_EXCHANGE"), at(0));
    router.on_heartbeat(heartbeat(PUBLISHER, Role::Source, "stock-publisher"), at(0));
    subscribe(&mut router, ALICE, "/STOCK/IBM", at(1));
    sent(&mut router); // the REQUEST to the node
    let publish = FLAG_PUBLISH | FLAG_UPDATE;
    router.on_message(&record(RecordKind::Data, publish, PUBLISHER, "/STOCK/IBM", b"u1"), at(2));
    let mut out = Vec::new();
    router.outbox().drain(|to, bytes| {
        for r in Records::new(bytes) {
            let r = r.unwrap();
            out.push((to, r.flags, split_origin(r.payload).map(|(o, p)| (o, p.to_vec()))));
        }
    });
    // Only the node gets it (ALICE gets it back from the master), with the origin first.
    assert_eq!(out, [(NODE, publish, Some((PUBLISHER, b"u1".to_vec())))]);
    // The node's status for the origin is passed on to it, without the origin.
    let status = with_origin(PUBLISHER, b"FORWARD_WARNING: queued");
    router.on_message(&record(RecordKind::Data, FLAG_STATUS | FLAG_PUBLISH, NODE, "*", &status), at(3));
    assert_eq!(
        sent(&mut router),
        [(PUBLISHER, RecordKind::Data, FLAG_STATUS | FLAG_PUBLISH, "*".into(), "FORWARD_WARNING: queued".into())]
    );
    // A status from a source that is no cluster node's is refused; so is a publish by the node
    // itself (it never routes back to itself).
    let refused = router.counters().refused;
    router.on_message(&record(RecordKind::Data, FLAG_STATUS | FLAG_PUBLISH, PUBLISHER, "*", &status), at(4));
    router.on_message(&record(RecordKind::Data, publish, NODE, "/STOCK/IBM", b"loop"), at(4));
    assert!(sent(&mut router).is_empty());
    assert_eq!(router.counters().refused, refused + 2);
}

#[test]
fn a_publish_at_a_master_reaches_the_subscribers_and_an_erase_drops_the_image() {
    use crate::subjects::codec::{FLAG_ERASE, FLAG_PUBLISH};
    let mut f = Fixture::new();
    let router = std::mem::replace(&mut f.router, RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS));
    f.router = router.with_cluster_nodes(vec!["avalon".into()]);
    let forwarder = 30;
    f.router.on_heartbeat(heartbeat(forwarder, Role::Source, "node:avalon"), at(0));
    subscribe(&mut f.router, ALICE, "/PRICES/EUR", at(1));
    sent(&mut f.router);
    // Not requested from the forwarder: relayed all the same, the image cached, PUBLISH stripped.
    f.router.on_message(&record(RecordKind::Data, FLAG_PUBLISH | FLAG_IMAGE, forwarder, "/PRICES/EUR", b"i"), at(2));
    f.router.on_message(&record(RecordKind::Data, FLAG_PUBLISH | FLAG_UPDATE, forwarder, "/PRICES/EUR", b"u"), at(2));
    assert_eq!(
        sent(&mut f.router),
        [
            (ALICE, RecordKind::Data, FLAG_IMAGE, "/PRICES/EUR".into(), "i".into()),
            (ALICE, RecordKind::Data, FLAG_UPDATE, "/PRICES/EUR".into(), "u".into())
        ]
    );
    f.router.on_message(&record(RecordKind::Data, FLAG_PUBLISH | FLAG_ERASE, forwarder, "/PRICES/EUR", b""), at(3));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_ERASE, "/PRICES/EUR".into(), String::new())]);
    subscribe(&mut f.router, BOB, "/PRICES/EUR", at(4));
    assert!(sent(&mut f.router).is_empty(), "no image after the erase");
    // Without the PUBLISH flag, data a source was not asked for is still stale.
    let stale = f.router.counters().stale_data;
    f.router.on_message(&record(RecordKind::Data, FLAG_UPDATE, forwarder, "/PRICES/EUR", b"x"), at(5));
    assert!(sent(&mut f.router).is_empty());
    assert_eq!(f.router.counters().stale_data, stale + 1);
}

#[test]
fn a_status_from_the_node_serving_a_subject_reaches_its_subscribers_and_the_image_stays() {
    const NODE: u64 = 20;
    let mut router = RouterCore::new(ROUTER, slave_table(), None, LIVENESS);
    router.on_heartbeat(heartbeat(NODE, Role::Source, "cluster.STOCK_EXCHANGE"), at(0));
    subscribe(&mut router, ALICE, "/STOCK/IBM", at(1));
    sent(&mut router); // the REQUEST to the node
    router.on_message(&record(RecordKind::Data, FLAG_IMAGE, NODE, "/STOCK/IBM", b"i0"), at(2));
    sent(&mut router);
    // The node's link to its parent moved to a backup: its subscribers hear it.
    let moved = b"router golan lost; subscribed again at heron";
    router.on_message(&record(RecordKind::Data, FLAG_STATUS, NODE, "/STOCK/IBM", moved), at(3));
    assert_eq!(
        sent(&mut router),
        [(ALICE, RecordKind::Data, FLAG_STATUS, "/STOCK/IBM".into(), String::from_utf8_lossy(moved).into_owned())]
    );
    // The status is not an image: a later subscriber is answered with the cached one.
    subscribe(&mut router, BOB, "/STOCK/IBM", at(4));
    assert_eq!(sent(&mut router), [(BOB, RecordKind::Data, FLAG_IMAGE, "/STOCK/IBM".into(), "i0".into())]);
    // A refusal from the node, and a status from a source that is no cluster node's, are not relayed.
    let stale = router.counters().stale_data;
    router.on_message(&record(RecordKind::Data, FLAG_STATUS | FLAG_REFUSED, NODE, "/STOCK/IBM", b"x"), at(5));
    let mut f = Fixture::new();
    subscribe(&mut f.router, ALICE, "/PRICES/EUR", at(1));
    let out = sent(&mut f.router);
    let serving = out.iter().find(|entry| entry.1 == RecordKind::Request).map(|entry| entry.0).unwrap();
    let before = f.router.counters().stale_data;
    f.router.on_message(&record(RecordKind::Data, FLAG_STATUS, serving, "/PRICES/EUR", b"x"), at(2));
    assert!(sent(&mut router).is_empty() && sent(&mut f.router).is_empty());
    assert_eq!((router.counters().stale_data, f.router.counters().stale_data), (stale + 1, before + 1));
}

#[test]
fn a_reloaded_node_list_lets_a_new_node_in_and_refuses_a_removed_one() {
    let mut router = RouterCore::new(ROUTER, slave_table(), None, LIVENESS).with_cluster_nodes(vec!["golan".into()]);
    subscribe_as(&mut router, ALICE, "node:bilbo", "/STOCK/IBM", at(1));
    assert!(sent(&mut router)[0].4.starts_with("not-allowed: node \"bilbo\""));
    router.set_cluster_nodes(vec!["bilbo".into()]);
    subscribe_as(&mut router, ALICE, "node:bilbo", "/STOCK/IBM", at(2));
    subscribe_as(&mut router, BOB, "node:golan", "/STOCK/IBM", at(2));
    assert_eq!((router.counters().not_allowed, router.subscriber_count()), (2, 1));
}

#[test]
fn a_publish_naming_its_domain_goes_to_that_domains_node_source_or_is_relayed_here_without_it() {
    use crate::subjects::codec::{split_origin, with_domain, FLAG_DOMAIN, FLAG_PUBLISH};
    const STOCK_NODE: u64 = 20;
    const PINNED_NODE: u64 = 22;
    const PUBLISHER: u64 = 21;
    let mut router = RouterCore::new(ROUTER, slave_table(), None, LIVENESS);
    router.on_heartbeat(heartbeat(STOCK_NODE, Role::Source, "cluster.STOCK_EXCHANGE"), at(0));
    router.on_heartbeat(heartbeat(PINNED_NODE, Role::Source, "cluster.PINNED"), at(0));
    router.on_heartbeat(heartbeat(PUBLISHER, Role::Source, "stock-publisher"), at(0));
    subscribe(&mut router, ALICE, "/STOCK/IBM", at(1));
    sent(&mut router); // the REQUEST to the STOCK node
    let flags = FLAG_PUBLISH | FLAG_UPDATE | FLAG_DOMAIN;
    let pinned = with_domain("PINNED", b"u1").unwrap();
    router.on_message(&record(RecordKind::Data, flags, PUBLISHER, "/STOCK/IBM", &pinned), at(2));
    let mut out = Vec::new();
    router.outbox().drain(|to, bytes| {
        for r in Records::new(bytes) {
            let r = r.unwrap();
            out.push((to, r.flags, split_origin(r.payload).map(|(o, p)| (o, p.to_vec()))));
        }
    });
    // By its domain, not its subject's pattern: the PINNED node, origin first, domain kept.
    assert_eq!(out, [(PINNED_NODE, flags, Some((PUBLISHER, pinned.clone())))]);
    // A domain no node source serves here (this node its master, or no node defines it):
    // relayed to the subscribers, without the domain.
    let own = with_domain("OWN", b"u2").unwrap();
    router.on_message(&record(RecordKind::Data, flags, PUBLISHER, "/STOCK/IBM", &own), at(3));
    assert_eq!(sent(&mut router), [(ALICE, RecordKind::Data, FLAG_UPDATE, "/STOCK/IBM".into(), "u2".into())]);
    // A malformed domain, or the node's own publish back to itself: refused, counted.
    let refused = router.counters().refused;
    router.on_message(&record(RecordKind::Data, flags, PUBLISHER, "/STOCK/IBM", b"\x09PIN"), at(4));
    router.on_message(&record(RecordKind::Data, flags, PINNED_NODE, "/STOCK/IBM", &pinned), at(4));
    assert!(sent(&mut router).is_empty());
    assert_eq!(router.counters().refused, refused + 2);
    // Without the flag, the same bytes are an ordinary payload, routed by the subject.
    router.on_message(&record(RecordKind::Data, FLAG_PUBLISH | FLAG_UPDATE, PUBLISHER, "/STOCK/IBM", &own), at(5));
    let to: Vec<u64> = sent(&mut router).into_iter().map(|(to, ..)| to).collect();
    assert_eq!(to, [STOCK_NODE]);
}

/// A record the router sent: to whom, its flags, subject, and origin and payload when it has one.
type SentWithOrigin = (u64, u16, String, Option<(u64, Vec<u8>)>);

/// What the router sent, with each payload split at its origin when it has one.
fn sent_with_origin(router: &mut RouterCore) -> Vec<SentWithOrigin> {
    use crate::subjects::codec::split_origin;
    let mut out = Vec::new();
    router.outbox().drain(|to, bytes| {
        for r in Records::new(bytes) {
            let r = r.unwrap();
            out.push((to, r.flags, r.subject.to_owned(), split_origin(r.payload).map(|(o, p)| (o, p.to_vec()))));
        }
    });
    out.sort_by_key(|entry| entry.0);
    out
}

#[test]
fn a_local_publish_at_a_master_goes_to_the_mirror_source_too_but_never_one_from_another_node() {
    use crate::subjects::cluster::MIRROR_SOURCE_LABEL;
    use crate::subjects::codec::{with_domain, with_origin, FLAG_DOMAIN, FLAG_ERASE, FLAG_PUBLISH};
    const MIRROR: u64 = 40;
    const PUBLISHER: u64 = 41;
    const FROM_NODE: u64 = 42;
    const NODE_INFO: u64 = 43;
    let mut f = Fixture::new();
    let router = std::mem::replace(&mut f.router, RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS));
    f.router = router.with_cluster_nodes(vec!["hobbit".into()]);
    let publish = FLAG_PUBLISH | FLAG_UPDATE;
    // No mirror source yet: relayed here only (a master without other masters).
    f.router.on_heartbeat(heartbeat(PUBLISHER, Role::Source, "rugby-publisher"), at(0));
    subscribe(&mut f.router, ALICE, "/PRICES/EUR", at(1));
    sent(&mut f.router);
    f.router.on_message(&record(RecordKind::Data, publish, PUBLISHER, "/PRICES/EUR", b"u0"), at(2));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_UPDATE, "/PRICES/EUR".into(), "u0".into())]);
    // The node's mirror source is up: a local publish is relayed here AND handed to it, origin
    // first, flags kept; so are an image, an erase and a subject nobody subscribes to here.
    f.router.on_heartbeat(heartbeat(MIRROR, Role::Source, MIRROR_SOURCE_LABEL), at(3));
    f.router.on_message(&record(RecordKind::Data, publish, PUBLISHER, "/PRICES/EUR", b"u1"), at(4));
    assert_eq!(
        sent_with_origin(&mut f.router),
        [
            (MIRROR, publish, "/PRICES/EUR".into(), Some((PUBLISHER, b"u1".to_vec()))),
            (ALICE, FLAG_UPDATE, "/PRICES/EUR".into(), None)
        ]
    );
    let image = FLAG_PUBLISH | FLAG_IMAGE;
    f.router.on_message(&record(RecordKind::Data, image, PUBLISHER, "/PRICES/GBP", b"i"), at(5));
    f.router.on_message(&record(RecordKind::Data, FLAG_PUBLISH | FLAG_ERASE, PUBLISHER, "/PRICES/EUR", b""), at(5));
    let mirrored: Vec<(u64, u16, String)> =
        sent_with_origin(&mut f.router).into_iter().map(|(to, flags, subject, _)| (to, flags, subject)).collect();
    assert_eq!(
        mirrored,
        [
            (MIRROR, image, "/PRICES/GBP".into()),
            (MIRROR, FLAG_PUBLISH | FLAG_ERASE, "/PRICES/EUR".into()),
            (ALICE, FLAG_ERASE, "/PRICES/EUR".into())
        ]
    );
    // A publish naming its domain that is relayed here goes to the mirror with its domain.
    let named = with_domain("RUGBY_NEWS", b"u2").unwrap();
    f.router.on_message(&record(RecordKind::Data, publish | FLAG_DOMAIN, PUBLISHER, "/PRICES/EUR", &named), at(6));
    assert_eq!(
        sent_with_origin(&mut f.router),
        [
            (MIRROR, publish | FLAG_DOMAIN, "/PRICES/EUR".into(), Some((PUBLISHER, named.clone()))),
            (ALICE, FLAG_UPDATE, "/PRICES/EUR".into(), None)
        ]
    );
    // From another node (its origin sent it to every master) or from the node's own sources:
    // relayed here only, never handed on (no loop, no duplicate).
    f.router.on_heartbeat(heartbeat(FROM_NODE, Role::Source, "node:hobbit"), at(7));
    f.router.on_heartbeat(heartbeat(NODE_INFO, Role::Source, "cluster.node-info"), at(7));
    f.router.on_message(&record(RecordKind::Data, publish, FROM_NODE, "/PRICES/EUR", b"u3"), at(8));
    f.router.on_message(&record(RecordKind::Data, publish, NODE_INFO, "/PRICES/EUR", b"u4"), at(8));
    assert_eq!(
        sent(&mut f.router),
        [
            (ALICE, RecordKind::Data, FLAG_UPDATE, "/PRICES/EUR".into(), "u3".into()),
            (ALICE, RecordKind::Data, FLAG_UPDATE, "/PRICES/EUR".into(), "u4".into())
        ]
    );
    // The mirror's forward status for the origin is passed on to it.
    let status = with_origin(PUBLISHER, b"FORWARD_WARNING: queued");
    f.router.on_message(&record(RecordKind::Data, FLAG_STATUS | FLAG_PUBLISH, MIRROR, "*", &status), at(9));
    assert_eq!(
        sent(&mut f.router),
        [(PUBLISHER, RecordKind::Data, FLAG_STATUS | FLAG_PUBLISH, "*".into(), "FORWARD_WARNING: queued".into())]
    );
    // The mirror source gone (silent past the liveness timeout): relayed here only again.
    f.router.on_heartbeat(heartbeat(PUBLISHER, Role::Source, "rugby-publisher"), at(2500));
    f.router.on_heartbeat(heartbeat(ALICE, Role::Subscriber, "user"), at(2500));
    f.router.tick(at(2500));
    sent(&mut f.router);
    f.router.on_message(&record(RecordKind::Data, publish, PUBLISHER, "/PRICES/EUR", b"u5"), at(2501));
    assert_eq!(sent(&mut f.router), [(ALICE, RecordKind::Data, FLAG_UPDATE, "/PRICES/EUR".into(), "u5".into())]);
}

/// 10,000 SUBSCRIBEs from fresh ids claiming a node at a router that is no cluster node,
/// spread over 40 liveness timeouts.
#[test]
fn the_buffers_of_refused_ids_are_forgotten_with_their_reply_inboxes() {
    let mut router = RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS);
    let mut now = at(1);
    for window in 0..40u64 {
        for i in 0..250u64 {
            subscribe_as(&mut router, 1_000_000 + window * 250 + i, "node:x", "/PRICES/EURUSD", now);
        }
        assert_eq!(sent(&mut router).len(), 250);
        now = now + LIVENESS;
        router.tick(now);
    }
    assert_eq!(router.counters().not_allowed, 10_000);
    let buffers = router.outbox().buffer_count();
    assert!(buffers <= MAX_REFUSAL_REPLIES, "{buffers} outbox buffers kept");
}

/// 10,000 subscribers heard once each (an ALIVE each), 250 at a time.
#[test]
fn the_buffers_of_silent_peers_are_forgotten_with_them() {
    let interval = Duration::from_millis(100);
    let mut router = RouterCore::new(ROUTER, RoutingTable::new(), None, LIVENESS).with_alive_interval(interval);
    let mut now = at(1);
    for window in 0..40u64 {
        for i in 0..250u64 {
            router.on_heartbeat(heartbeat(1_000_000 + window * 250 + i, Role::Subscriber, "user"), now);
        }
        router.tick(now + interval);
        assert_eq!(sent(&mut router).len(), 250);
        // Past the view's memory too, so the next ids are heard.
        now = now + LIVENESS * FORGET_AFTER_TIMEOUTS;
        router.tick(now);
    }
    assert_eq!(router.peer_count(), 0);
    let buffers = router.outbox().buffer_count();
    assert_eq!(buffers, 0, "{buffers} outbox buffers kept");
}

fn coverage_router() -> RouterCore {
    let faucet = Faucet::new(FaucetConfig {
        control_topic: "space_faucet_control".into(),
        subscription_topic: "/space/.*".into(),
        announcements: Announcements::Default,
        coverage_option: Some("udo_coverage".into()),
    })
    .unwrap();
    RouterCore::new(ROUTER, RoutingTable::new(), Some(faucet), LIVENESS)
}

fn enlist_many(router: &mut RouterCore, source: u64, patterns: impl Iterator<Item = String>, now: Instant) {
    for pattern in patterns {
        let enlist = record(RecordKind::Enlist, FLAG_COVERAGE, source, "space_faucet_control", pattern.as_bytes());
        router.on_message(&enlist, now);
    }
}

#[test]
fn enlistments_heard_before_a_source_are_kept_up_to_the_bound_without_duplicates() {
    const SOURCE: u64 = 20;
    let mut router = coverage_router();
    enlist_many(&mut router, SOURCE, (0..10_000).map(|i| format!("^/space/{i}$")), at(1));
    enlist_many(&mut router, SOURCE, (0..10).map(|_| "^/space/0$".to_owned()), at(1));
    router.on_heartbeat(heartbeat(SOURCE, Role::Source, "pub"), at(2));
    let faucet = router.faucet().unwrap();
    assert_eq!(faucet.coverage_count(SOURCE), MAX_ENLISTMENTS_PER_SOURCE);
    assert_eq!(router.counters().refused, 10_000 - MAX_ENLISTMENTS_PER_SOURCE as u64);
}

#[test]
fn a_live_source_repeating_enlist_keeps_one_pattern_each_up_to_the_bound() {
    const SOURCE: u64 = 20;
    let mut router = coverage_router();
    router.on_heartbeat(heartbeat(SOURCE, Role::Source, "pub"), at(1));
    enlist_many(&mut router, SOURCE, (0..10_000).map(|_| "^/space/0$".to_owned()), at(1));
    assert_eq!(router.faucet().unwrap().coverage_count(SOURCE), 1);
    enlist_many(&mut router, SOURCE, (0..10_000).map(|i| format!("^/space/{i}$")), at(1));
    let faucet = router.faucet().unwrap();
    assert_eq!(faucet.coverage_count(SOURCE), MAX_ENLISTMENTS_PER_SOURCE);
    assert_eq!(faucet.counters().enlistments_ignored, 10_000 - MAX_ENLISTMENTS_PER_SOURCE as u64);
}

#[test]
fn a_subscribe_whose_reply_endpoint_is_not_ip_port_is_refused() {
    let mut f = Fixture::new();
    let forged = b"127.0.0.1:9|interface=203.0.113.5|mtu=1408\nbob";
    f.router.on_message(&record(RecordKind::Subscribe, 0, BOB, "/PRICES/EURUSD", forged), at(1));
    f.router.on_message(&record(RecordKind::Subscribe, 0, BOB, "/PRICES/EURUSD", b"localhost:9\nbob"), at(1));
    assert_eq!(f.router.counters().refused, 2);
    assert_eq!((f.router.subscriber_count(), f.router.endpoint(BOB)), (0, None));
    assert!(sent(&mut f.router).is_empty());
}

#[test]
fn a_heartbeat_whose_endpoint_is_not_ip_port_is_not_heard() {
    let mut router = RouterCore::new(ROUTER, transformer(), None, LIVENESS);
    let mut forged = heartbeat(BOB, Role::Subscriber, "bob");
    forged.endpoint = "127.0.0.1:9|mtu=1408".into();
    router.on_heartbeat(forged, at(1));
    let mut source = heartbeat(10, Role::Source, "TradeAdapterA");
    source.endpoint = "127.0.0.1:9|ttl=9".into();
    router.on_heartbeat(source, at(1));
    assert_eq!((router.peer_count(), router.is_source(10), router.endpoint(BOB)), (0, false, None));
    assert_eq!(router.counters().refused, 2);
    let log = router.drain_log();
    assert!(
        matches!(log.as_slice(), [LogEntry::SourceRefused(label, 10, why)] if &**label == "TradeAdapterA" && why.contains("127.0.0.1:9|ttl=9")),
        "{log:?}"
    );
}
