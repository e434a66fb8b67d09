//! The xmlBlaster pictures, sans-IO: heron master of RUGBY_NEWS, golan master of STOCK_EXCHANGE,
//! avalon a slave of both, bilbo a slave of avalon (stratum 2).

use std::time::Duration;

use super::forward::QueueKey;
use super::mapping::{read_route, write_routes, Route};
use super::*;
use crate::subjects::codec::{FLAG_ERASE, FLAG_IMAGE, FLAG_UPDATE};
use crate::time::Instant;

fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

fn node(id: &str, master_of: &[&str], upstream: &[(&str, &str)]) -> NodeSpec {
    NodeSpec {
        id: id.into(),
        address: format!("aeron:udp?endpoint=10.9.0.{}:40500", id.len()),
        master_of: master_of.iter().map(|d| (*d).to_owned()).collect(),
        upstream: upstream.iter().map(|(d, n)| ((*d).to_owned(), (*n).to_owned())).collect(),
        backups: Vec::new(),
        accept_default: true,
        accept_other_default: false,
    }
}

fn domains() -> Vec<DomainSpec> {
    vec![
        DomainSpec { name: "STOCK_EXCHANGE".into(), include_patterns: vec!["^/STOCK/".into()] },
        DomainSpec { name: "RUGBY_NEWS".into(), include_patterns: vec!["^/RUGBY/".into()] },
    ]
}

fn picture_nodes() -> Vec<NodeSpec> {
    vec![
        node("heron", &["RUGBY_NEWS"], &[]),
        node("golan", &["STOCK_EXCHANGE"], &[]),
        node("avalon", &[], &[]),
        node("bilbo", &[], &[("STOCK_EXCHANGE", "avalon"), ("RUGBY_NEWS", "avalon")]),
    ]
}

fn model(this: &str) -> ClusterModel {
    ClusterModel::new(picture_nodes(), &domains(), this).unwrap()
}

#[test]
fn strata_and_parents_follow_the_xmlblaster_picture() {
    let m = model("bilbo");
    let (stock, rugby) = (m.domain_index("STOCK_EXCHANGE").unwrap(), m.domain_index("RUGBY_NEWS").unwrap());
    let id = |n: &str| m.node_index(n).unwrap();
    assert_eq!(m.stratum(id("golan"), stock), Some(0));
    assert_eq!(m.stratum(id("avalon"), stock), Some(1));
    assert_eq!(m.stratum(id("bilbo"), stock), Some(2));
    assert_eq!(m.stratum(id("golan"), rugby), Some(1), "golan is a slave of heron for rugby");
    assert_eq!(m.parent(id("bilbo"), stock), Some(id("avalon")));
    assert_eq!(m.parent(id("avalon"), stock), Some(id("golan")));
    assert_eq!(m.parent(id("golan"), stock), None);
    assert_eq!(m.domain_of("/STOCK/IBM"), Some(stock));
    assert_eq!(m.domain_of("/WEATHER/x"), None);
}

#[test]
fn a_loop_unknown_references_and_duplicates_are_refused() {
    let mut looped = picture_nodes();
    looped[2].upstream.push(("STOCK_EXCHANGE".into(), "bilbo".into()));
    let error = ClusterModel::new(looped, &domains(), "bilbo").err().unwrap();
    assert!(error.0.contains("upstream loop for STOCK_EXCHANGE"), "{error}");
    let mut unknown = picture_nodes();
    unknown[0].master_of.push("RADAR".into());
    assert!(ClusterModel::new(unknown, &domains(), "heron").err().unwrap().0.contains("master-of RADAR"));
    let mut twice = picture_nodes();
    twice[3].id = "heron".into();
    assert!(ClusterModel::new(twice, &domains(), "heron").err().unwrap().0.contains("defined twice"));
    assert!(ClusterModel::new(picture_nodes(), &domains(), "frodo").err().unwrap().0.contains("frodo"));
    let mut itself = picture_nodes();
    itself[3].upstream[0].1 = "bilbo".into();
    assert!(ClusterModel::new(itself, &domains(), "bilbo").is_err());
}

#[test]
fn domain_to_master_maps_by_explicit_domain_then_pattern_else_no_domain() {
    let m = model("avalon");
    let mapper = DomainToMaster;
    let stock = m.domain_index("STOCK_EXCHANGE").unwrap();
    assert_eq!(mapper.map(&m, "/STOCK/IBM", None), Mapping::Domain(stock));
    assert_eq!(mapper.map(&m, "/anything", Some("STOCK_EXCHANGE")), Mapping::Domain(stock));
    assert_eq!(mapper.map(&m, "/anything", None), Mapping::NoDomain);
    assert_eq!(mapper.map(&m, "/x", Some("RADAR")), Mapping::UnknownDomain("RADAR".into()));
    assert_eq!(mapper.name(), "domain");
}

#[test]
fn reads_go_to_the_parent_writes_to_every_master_and_no_domain_stays_local() {
    let mut balancer = default_load_balancer();
    let bilbo = model("bilbo");
    let stock = Mapping::Domain(bilbo.domain_index("STOCK_EXCHANGE").unwrap());
    let avalon = bilbo.node_index("avalon").unwrap();
    assert_eq!(read_route(&bilbo, &stock, "/STOCK/IBM", balancer.as_mut()), Route::Node(avalon));
    assert_eq!(write_routes(&bilbo, &stock), [Route::Node(avalon)], "a publish climbs through avalon");
    let golan = model("golan");
    assert_eq!(read_route(&golan, &stock, "/STOCK/IBM", balancer.as_mut()), Route::Local);
    assert_eq!(read_route(&golan, &Mapping::NoDomain, "/x", balancer.as_mut()), Route::Local);
    assert_eq!(read_route(&golan, &Mapping::UnknownDomain("RADAR".into()), "/x", balancer.as_mut()), Route::Unknown);

    // accept-default false at bilbo: default messages go to a node accepting other defaults.
    let mut nodes = picture_nodes();
    nodes[3].accept_default = false;
    nodes[0].accept_other_default = true;
    let bilbo = ClusterModel::new(nodes, &domains(), "bilbo").unwrap();
    assert_eq!(write_routes(&bilbo, &Mapping::NoDomain), [Route::Node(bilbo.node_index("heron").unwrap())]);
}

#[test]
fn mirrored_masters_get_every_publish_and_subscriptions_alternate_round_robin() {
    let mut nodes = picture_nodes();
    nodes.push(node("heron2", &["RUGBY_NEWS"], &[]));
    let avalon = ClusterModel::new(nodes, &domains(), "avalon").unwrap();
    let rugby = Mapping::Domain(avalon.domain_index("RUGBY_NEWS").unwrap());
    let (heron, heron2) = (avalon.node_index("heron").unwrap(), avalon.node_index("heron2").unwrap());
    assert_eq!(write_routes(&avalon, &rugby), [Route::Node(heron), Route::Node(heron2)]);
    let mut balancer = default_load_balancer();
    let chosen: Vec<Route> =
        (0..4).map(|i| read_route(&avalon, &rugby, &format!("/RUGBY/{i}"), balancer.as_mut())).collect();
    assert_eq!(chosen, [Route::Node(heron), Route::Node(heron2), Route::Node(heron), Route::Node(heron2)]);
}

#[test]
fn connections_open_lazily_refuse_unknown_nodes_and_fall_back_to_polling() {
    let m = model("avalon");
    let mut connections = Connections::new(&m, Duration::from_secs(2));
    let golan = m.node_index("golan").unwrap();
    assert_eq!(connections.state(golan), None, "not needed yet: no connection");
    assert!(connections.need(golan));
    assert!(!connections.need(golan), "opened once");
    assert_eq!(connections.state(golan), Some(ConnectionState::Polling));
    assert_eq!(connections.heard(&m, "mallory", at(1)), None);
    assert_eq!(connections.heard(&m, "avalon", at(1)), None, "this node's own id is not a peer");
    assert_eq!(connections.not_allowed(), 2);
    assert_eq!(connections.state(m.this()), Some(ConnectionState::NotAllowed));
    assert_eq!(connections.heard(&m, "golan", at(10)), Some(golan));
    assert_eq!(connections.state(golan).map(ConnectionState::name), Some("logged-in"));
    assert!(connections.tick(at(2009)).is_empty());
    assert_eq!(connections.tick(at(2010)), [golan]);
    assert_eq!(connections.state(golan).map(ConnectionState::name), Some("polling"));
}

#[test]
fn publishes_for_an_unreachable_master_queue_in_order_within_the_bound_and_flush_when_it_is_back() {
    let mut queues = ForwardQueues::new(10);
    let golan = QueueKey::Node(1);
    let mut wire: Vec<Vec<u8>> = Vec::new();
    let mut send = |r: &[u8]| {
        wire.push(r.to_vec());
        true
    };
    assert_eq!(queues.publish(golan.clone(), 7, b"a", true, &mut send), Forwarded::Sent);
    assert_eq!(queues.publish(golan.clone(), 7, b"bbbb", false, &mut send), Forwarded::Queued);
    assert!(queues.is_queued(&golan), "the source sees forward_warning");
    // Reachable again, but older publishes wait: order is kept.
    assert_eq!(queues.publish(golan.clone(), 7, b"cccc", true, &mut send), Forwarded::Queued);
    assert_eq!(
        queues.publish(golan.clone(), 7, b"ddd", false, |_| true),
        Forwarded::Full,
        "past 10 bytes: back-pressure"
    );
    assert_eq!(queues.queued_bytes(&golan), 8);
    assert_eq!(
        queues.flush(&golan, |r| {
            wire.push(r.to_vec());
            true
        }),
        2
    );
    assert_eq!(wire, [b"a".to_vec(), b"bbbb".to_vec(), b"cccc".to_vec()]);
    assert!(!queues.is_queued(&golan));
    assert_eq!(queues.totals(), (2, 1));
    // Master unknown: queued under the domain, moved behind the master's queue once it appears.
    let radar = QueueKey::Domain("RADAR".into());
    assert_eq!(queues.publish(radar.clone(), 7, b"r1", false, |_| true), Forwarded::Queued);
    queues.assign("RADAR", &[1]);
    assert!(!queues.is_queued(&radar));
    assert_eq!(queues.queued_bytes(&golan), 2);
}

#[test]
fn a_slave_subscribes_once_upstream_answers_from_its_cache_and_expires_unused_entries() {
    let mut cache = SlaveCache::new(Duration::from_secs(60));
    let avalon = 2;
    assert_eq!(
        cache.subscribe("/STOCK/IBM", avalon, 2),
        Some(CacheAction::SubscribeAt { node: avalon, subject: "/STOCK/IBM".into() })
    );
    assert_eq!(cache.subscribe("/STOCK/IBM", avalon, 2), None, "once upstream; no image yet");
    assert!(cache.on_data(avalon, "/STOCK/IBM", FLAG_IMAGE, b"ibm 100"));
    assert!(!cache.on_data(7, "/STOCK/IBM", FLAG_UPDATE, b"forged"), "only from the parent");
    assert!(cache.on_data(avalon, "/STOCK/IBM", FLAG_UPDATE, b"ibm 101"));
    assert_eq!(
        cache.subscribe("/STOCK/IBM", avalon, 2),
        Some(CacheAction::Image { flags: FLAG_IMAGE, payload: b"ibm 100".to_vec() })
    );
    assert_eq!(cache.stratum("/STOCK/IBM"), Some(2));
    for _ in 0..3 {
        cache.unsubscribe("/STOCK/IBM", at(1000));
    }
    assert!(cache.tick(at(60_999)).is_empty());
    assert_eq!(cache.tick(at(61_000)), [CacheAction::UnsubscribeAt { node: avalon, subject: "/STOCK/IBM".into() }]);
    assert!(cache.is_empty());
}

#[test]
fn an_idle_entry_keeps_its_image_current_relays_nothing_and_forgets_it_on_an_erase() {
    let mut cache = SlaveCache::new(Duration::from_secs(60));
    let heron = 0;
    cache.subscribe("/RUGBY/x", heron, 1);
    assert!(cache.on_data(heron, "/RUGBY/x", FLAG_IMAGE, b"v1"));
    cache.unsubscribe("/RUGBY/x", at(0));
    assert_eq!(cache.idle(), 1);
    assert!(!cache.on_data(heron, "/RUGBY/x", FLAG_IMAGE, b"v2"), "idle: nothing to relay to");
    assert_eq!(
        cache.subscribe("/RUGBY/x", heron, 1),
        Some(CacheAction::Image { flags: FLAG_IMAGE, payload: b"v2".to_vec() })
    );
    assert_eq!(cache.idle(), 0);
    assert!(cache.on_data(heron, "/RUGBY/x", FLAG_ERASE, b""));
    assert_eq!(cache.subscribe("/RUGBY/x", heron, 1), None, "erased: no image to answer from");
    assert_eq!(cache.parent("/RUGBY/x"), Some(heron));
    assert_eq!(cache.forget("/RUGBY/x"), Some(heron));
    assert_eq!(
        cache.subscribe("/RUGBY/x", 1, 1),
        Some(CacheAction::SubscribeAt { node: 1, subject: "/RUGBY/x".into() })
    );
}

#[test]
fn a_lost_parent_moves_its_subjects_to_the_next_master_with_a_fresh_image() {
    let mut cache = SlaveCache::new(DEFAULT_CACHE_EXPIRY);
    cache.subscribe("/STOCK/B", 1, 1);
    cache.subscribe("/STOCK/A", 1, 1);
    cache.subscribe("/RUGBY/x", 0, 1);
    cache.on_data(1, "/STOCK/A", FLAG_IMAGE, b"old");
    let moved = cache.parent_lost(1, |_| Some((3, 1)));
    assert_eq!(
        moved,
        [
            CacheAction::SubscribeAt { node: 3, subject: "/STOCK/A".into() },
            CacheAction::SubscribeAt { node: 3, subject: "/STOCK/B".into() }
        ]
    );
    assert_eq!(cache.subscribe("/STOCK/A", 3, 1), None, "the old image is gone; the new master's follows");
    assert!(!cache.on_data(1, "/STOCK/A", FLAG_IMAGE, b"stale"));
}

#[test]
fn a_node_info_subject_names_its_node_and_nothing_else_does() {
    assert_eq!(node_info_subject("heron"), "__sys__cluster.node.info[heron]");
    assert_eq!(node_info_node("__sys__cluster.node.info[heron]"), Some("heron"));
    for other in ["__sys__cluster.node.info[]", "__sys__cluster.node.info[heron", "/STOCK/IBM", "node.info[heron]"] {
        assert_eq!(node_info_node(other), None, "{other}");
    }
}
