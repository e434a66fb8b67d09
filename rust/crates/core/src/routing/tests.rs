//! Behaviour of the routing tables: the seed's stickiness, failover, recovery and NODATA rules.

use proptest::prelude::*;

use super::policy::{builtin, Policy, PolicyError, Request};
use super::*;

fn spec(name: &str, groups: &[&[&str]], rules: &[(&str, &str)]) -> SourceGroupSpec {
    SourceGroupSpec {
        name: name.to_owned(),
        priority_groups: groups.iter().map(|g| g.iter().map(|l| (*l).to_owned()).collect()).collect(),
        rules: rules.iter().map(|(k, p)| ((*k).to_owned(), (*p).to_owned())).collect(),
        selection: Selection::Modulo,
        policy: builtin("workload").unwrap(),
    }
}

const FOO: &str = "/PRIVATE/([^/]+)-[0-9]+/FOO";

/// The seed's "load-balanced set with failover": FooAdapter1/2, then FooAdapter3/4.
fn foo_table(groups: &[&[&str]]) -> RoutingTable {
    let mut table = RoutingTable::new();
    let service = table.add_service("foo", &["^/PRIVATE/"]).unwrap();
    table.add_source_group(service, spec("foo", groups, &[("foo-adapters", FOO)])).unwrap();
    table
}

fn member_of(table: &mut RoutingTable, subject: &str) -> Option<String> {
    table.route_primary(subject).unwrap().member.map(|m| table.label(m).to_owned())
}

#[test]
fn same_user_sticks_to_one_member_and_binds_once() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2"]]);
    let (_, first) = table.subscribe("/PRIVATE/alice-1/FOO").unwrap();
    let (_, second) = table.subscribe("/PRIVATE/alice-2/FOO").unwrap();
    assert_eq!(first[0].reason, Reason::Hashed);
    assert_eq!(second[0].reason, Reason::Sticky);
    assert_eq!(first[0].member, second[0].member);
    assert_eq!(first[0].composite.as_deref(), Some("foo-adapters:alice"));
    assert_eq!(table.affinity_count(), 1);
    let events = table.drain_events();
    assert_eq!(events.iter().filter(|e| e.kind == EventKind::Bound).count(), 2);
}

#[test]
fn cache_eviction_and_configuration_changes_keep_subscriptions_and_affinities() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2", "FooAdapter3"]]);
    let bound: Vec<_> =
        (0..20).map(|u| table.subscribe(&format!("/PRIVATE/u{u}-0/FOO")).unwrap().1[0].member).collect();
    // Far more distinct subjects than the cache holds under test (64): it is emptied many times.
    for i in 0..2_000 {
        let user = i % 40;
        let decision = table.route_primary(&format!("/PRIVATE/u{user}-{}/FOO", i + 1)).unwrap();
        if user < 20 {
            assert_eq!(decision.member, bound[user]);
            assert_eq!(decision.reason, Reason::Sticky);
        }
    }
    table.add_service("other", &["^/OTHER/"]).unwrap();
    for (user, member) in bound.iter().enumerate() {
        assert_eq!(table.route_primary(&format!("/PRIVATE/u{user}-0/FOO")).unwrap().member, *member);
        assert_eq!(table.route_primary(&format!("/PRIVATE/u{user}-9/FOO")).unwrap().member, *member);
    }
    for user in 0..20 {
        table.unsubscribe(&format!("/PRIVATE/u{user}-0/FOO")).unwrap();
    }
    assert_eq!(table.affinity_count(), 0);
    assert_eq!(table.subscription_total(), 0);
    let fresh = table.subscribe("/PRIVATE/u3-5/FOO").unwrap().1.remove(0);
    assert_eq!(fresh.reason, Reason::Hashed);
    assert_eq!(fresh.composite.as_deref(), Some("foo-adapters:u3"));
    assert_eq!(table.affinity("foo-adapters:u3"), fresh.member);
}

#[test]
fn the_classification_cache_stays_within_its_bytes_with_long_subjects_and_keeps_affinities() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2", "FooAdapter3"]]);
    // Users of 900 bytes: each cached subject holds ~900 bytes of name and ~900 of composite.
    let user = |u: usize| format!("u{u}{}", "x".repeat(900));
    let per_entry_names = 2 * 900;
    let held: Vec<_> =
        (0..4).map(|u| table.subscribe(&format!("/PRIVATE/{}-0/FOO", user(u))).unwrap().1[0].member).collect();
    let mut evicted = false;
    let mut previous = 0;
    for i in 0..600 {
        let u = i % 8;
        let subject = format!("/PRIVATE/{}-{}/FOO", user(u), i + 1);
        let decision = if i % 2 == 0 {
            let decision = table.subscribe(&subject).unwrap().1.remove(0);
            table.unsubscribe(&subject).unwrap();
            decision
        } else {
            table.route_primary(&subject).unwrap()
        };
        if u < 4 {
            // Evicted or not, a subject of a held affinity resolves to its member while it is up.
            assert_eq!(decision.member, held[u], "subject {i}");
        }
        let bytes = table.classification_cache_bytes();
        evicted |= bytes < previous;
        previous = bytes;
        assert!(bytes <= CLASSIFICATION_CACHE_BYTES + 4096, "{bytes} bytes cached after {i} subjects");
        // Independently of the accounting: the names the cached subjects hold.
        let names = table.subjects.cached_only() * per_entry_names;
        assert!(names <= CLASSIFICATION_CACHE_BYTES + 4096, "{names} bytes of names cached after {i} subjects");
    }
    assert!(evicted, "the cache never started over");
    assert_eq!(table.affinity_count(), 4);
    for (u, member) in held.iter().enumerate() {
        assert_eq!(table.route_primary(&format!("/PRIVATE/{}-0/FOO", user(u))).unwrap().member, *member);
    }
}

#[test]
fn failed_member_hands_affinities_to_survivor_and_recovery_moves_nothing_back() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2"]]);
    let users: Vec<String> = (0..40).map(|i| format!("/PRIVATE/user{i}-0/FOO")).collect();
    for subject in &users {
        table.subscribe(subject).unwrap();
    }
    let before: Vec<_> = users.iter().map(|s| member_of(&mut table, s)).collect();
    assert!(before.iter().any(|m| m.as_deref() == Some("FooAdapter1")));
    table.drain_events();
    table.set_member_up("FooAdapter1", false).unwrap();
    for subject in &users {
        assert_eq!(member_of(&mut table, subject).as_deref(), Some("FooAdapter2"));
    }
    let moved = table.drain_events();
    assert!(moved.iter().any(|e| e.kind == EventKind::Moved && e.move_reason == Some(MoveReason::MemberDown)));
    // explain says the subject moved, from whom and why (not only how the survivor was chosen);
    // one that never moved says nothing of a move. Unsubscribed subjects of a moved composite too.
    let one = table.member_id("FooAdapter1").unwrap();
    for (subject, was) in users.iter().zip(&before) {
        let explanation = table.explain(subject).unwrap();
        let expected =
            (was.as_deref() == Some("FooAdapter1")).then_some(Move { from: Some(one), why: MoveReason::MemberDown });
        assert_eq!(explanation.moved, expected, "{subject}");
        let sibling = subject.replace("-0/", "-1/");
        assert_eq!(table.explain(&sibling).unwrap().moved, expected, "{sibling}");
    }
    table.set_member_up("FooAdapter1", true).unwrap();
    for subject in &users {
        assert_eq!(member_of(&mut table, subject).as_deref(), Some("FooAdapter2"));
    }
    // New composites may go to the recovered member.
    let fresh: Vec<_> = (0..40)
        .map(|i| {
            let subject = format!("/PRIVATE/new{i}-0/FOO");
            table.subscribe(&subject).unwrap().1[0].member.unwrap()
        })
        .collect();
    let one = table.member_id("FooAdapter1").unwrap();
    assert!(fresh.contains(&one));
}

#[test]
fn failover_group_serves_until_first_group_recovers_then_only_new_keys_return() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2"], &["FooAdapter3", "FooAdapter4"]]);
    table.subscribe("/PRIVATE/alice-0/FOO").unwrap();
    table.set_member_up("FooAdapter1", false).unwrap();
    table.set_member_up("FooAdapter2", false).unwrap();
    let alice = table.route_primary("/PRIVATE/alice-0/FOO").unwrap();
    assert_eq!(alice.priority_group, Some(1));
    let bob = table.subscribe("/PRIVATE/bob-0/FOO").unwrap().1.remove(0);
    assert_eq!(bob.reason, Reason::Failover);
    table.set_member_up("FooAdapter2", true).unwrap();
    assert_eq!(table.route_primary("/PRIVATE/alice-1/FOO").unwrap().member, alice.member);
    assert_eq!(table.route_primary("/PRIVATE/bob-1/FOO").unwrap().member, bob.member);
    let carol = table.subscribe("/PRIVATE/carol-0/FOO").unwrap().1.remove(0);
    assert_eq!(table.label(carol.member.unwrap()), "FooAdapter2");
    assert_eq!(carol.reason, Reason::Hashed);
}

#[test]
fn last_unsubscribe_forgets_the_affinity() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2"]]);
    table.subscribe("/PRIVATE/alice-1/FOO").unwrap();
    table.subscribe("/PRIVATE/alice-2/FOO").unwrap();
    table.subscribe("/PRIVATE/alice-2/FOO").unwrap();
    table.unsubscribe("/PRIVATE/alice-1/FOO").unwrap();
    table.unsubscribe("/PRIVATE/alice-2/FOO").unwrap();
    assert_eq!(table.affinity_count(), 1);
    table.drain_events();
    table.unsubscribe("/PRIVATE/alice-2/FOO").unwrap();
    assert_eq!(table.affinity_count(), 0);
    let events = table.drain_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Forgotten);
    assert_eq!(events[0].composite.as_deref(), Some("foo-adapters:alice"));
    assert!(matches!(table.unsubscribe("/PRIVATE/alice-2/FOO"), Err(RoutingError::NotSubscribed(_))));
}

#[test]
fn nothing_up_waits_then_binds_when_a_member_comes_up() {
    let mut table = foo_table(&[&["FooAdapter1"]]);
    table.set_member_up("FooAdapter1", false).unwrap();
    let waiting = table.subscribe("/PRIVATE/alice-0/FOO").unwrap().1.remove(0);
    assert_eq!(waiting.member, None);
    assert_eq!(waiting.reason, Reason::Unavailable);
    table.drain_events();
    table.set_member_up("FooAdapter1", true).unwrap();
    let bound = table.route_primary("/PRIVATE/alice-0/FOO").unwrap();
    assert_eq!(bound.member, table.member_id("FooAdapter1"));
    assert_eq!(table.affinity("foo-adapters:alice"), table.member_id("FooAdapter1"));
    assert!(table.drain_events().iter().any(|e| e.kind == EventKind::Bound));
}

#[test]
fn shared_affinity_key_shares_memory_across_services() {
    let mut table = RoutingTable::new();
    let channel = table.add_service("trade-messaging-channel", &["^/PRIVATE/[^/]+/FXTRADE"]).unwrap();
    let blotter = table.add_service("trade-blotter-container", &["^/PRIVATE/[^/]+/BLOTTER/TRADE"]).unwrap();
    let adapters: &[&[&str]] = &[&["TradeAdapterA", "TradeAdapterB"]];
    table
        .add_source_group(channel, spec("c", adapters, &[("trading-adapters", "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE")]))
        .unwrap();
    table
        .add_source_group(blotter, spec("b", adapters, &[("trading-adapters", "^/PRIVATE/([^/]+)/BLOTTER/TRADE")]))
        .unwrap();
    table.add_source_group(blotter, spec("h", &[&["HistoricalAdapter"]], &[])).unwrap();
    for user in ["alice", "bob", "carol", "dave"] {
        let channel = table.subscribe(&format!("/PRIVATE/{user}-0/FXTRADE")).unwrap().1;
        let (service, blotter) = table.subscribe(&format!("/PRIVATE/{user}/BLOTTER/TRADE")).unwrap();
        assert_eq!(table.service_name(service), "trade-blotter-container");
        assert_eq!(channel[0].member, blotter[0].member, "{user}");
        assert_eq!(blotter[1].reason, Reason::Workload);
        assert_eq!(table.label(blotter[1].member.unwrap()), "HistoricalAdapter");
    }
}

#[test]
fn authoritative_nodata_is_not_retried_but_plain_nodata_is() {
    let mut table = foo_table(&[&["FooAdapter1", "FooAdapter2"]]);
    let service = table.add_service("other", &["^/OTHER/"]).unwrap();
    table.add_source_group(service, spec("o", &[&["FooAdapter1", "FooAdapter2"]], &[])).unwrap();
    let alice = table.subscribe("/PRIVATE/alice-0/FOO").unwrap().1.remove(0);
    let answer = table.report_nodata("/PRIVATE/alice-0/FOO", NoDataStatus::NotFound).unwrap();
    assert_eq!(answer.reason, Reason::NoData);
    assert_eq!(answer.member, alice.member);
    let plain = table.subscribe("/OTHER/x").unwrap().1.remove(0);
    let retried = table.report_nodata("/OTHER/x", NoDataStatus::Unavailable).unwrap();
    assert_eq!(retried.reason, Reason::Retry);
    assert_ne!(retried.member, plain.member);
    let exhausted = table.report_nodata("/OTHER/x", NoDataStatus::Unavailable).unwrap();
    assert_eq!(exhausted.reason, Reason::NoData);
}

#[test]
fn no_matching_service_is_an_error() {
    let mut table = foo_table(&[&["FooAdapter1"]]);
    assert!(matches!(table.route_primary("/PUBLIC/x"), Err(RoutingError::NoService(_))));
}

#[test]
fn rules_need_exactly_one_capture_group() {
    let mut table = RoutingTable::new();
    let service = table.add_service("s", &["^/"]).unwrap();
    let error = table.add_source_group(service, spec("g", &[&["a"]], &[("k", "^/(a)/(b)")]));
    assert!(matches!(error, Err(RoutingError::Config(_))));
    let error = table.add_source_group(service, spec("g", &[&["a"]], &[("k", "^/(a")]));
    assert!(matches!(error, Err(RoutingError::Regex(_))));
}

struct Broken;

impl Policy for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn reason(&self) -> Reason {
        Reason::Policy
    }
    fn select(&self, _request: &Request<'_>) -> Result<usize, PolicyError> {
        Err(PolicyError("boom".to_owned()))
    }
    fn decides_composites(&self) -> bool {
        true
    }
}

#[test]
fn failing_policy_falls_back_to_workload_with_an_event() {
    let mut table = RoutingTable::new();
    let service = table.add_service("s", &["^/"]).unwrap();
    let mut group = spec("g", &[&["a", "b"]], &[("k", "^/u/([^/]+)")]);
    group.policy = Box::new(Broken);
    table.add_source_group(service, group).unwrap();
    let decision = table.subscribe("/u/alice").unwrap().1.remove(0);
    assert_eq!(decision.reason, Reason::Fallback);
    assert_eq!(table.label(decision.member.unwrap()), "a");
    let events = table.drain_events();
    assert_eq!(events[0].kind, EventKind::PolicyError);
    assert!(events[0].message.as_deref().unwrap().contains("boom"));
}

#[test]
fn round_robin_and_least_assigned_fallbacks() {
    let mut table = RoutingTable::new();
    let service = table.add_service("s", &["^/"]).unwrap();
    let mut group = spec("g", &[&["a", "b", "c"]], &[]);
    group.policy = builtin("round-robin").unwrap();
    table.add_source_group(service, group).unwrap();
    let labels: Vec<String> = (0..6)
        .map(|i| {
            let member = table.subscribe(&format!("/s{i}")).unwrap().1[0].member.unwrap();
            table.label(member).to_owned()
        })
        .collect();
    assert_eq!(labels, ["a", "b", "c", "a", "b", "c"]);
}

// ---- properties -------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Subscribe(u8, u8),
    Unsubscribe(u8, u8),
    Down(u8),
    Up(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0u8..3).prop_map(|(u, s)| Op::Subscribe(u, s)),
        2 => (0u8..12, 0u8..3).prop_map(|(u, s)| Op::Unsubscribe(u, s)),
        1 => (0u8..5).prop_map(Op::Down),
        1 => (0u8..5).prop_map(Op::Up),
    ]
}

const LABELS: [&str; 5] = ["m0", "m1", "m2", "m3", "m4"];

fn prop_table(selection: Selection) -> RoutingTable {
    let mut table = RoutingTable::new();
    let service = table.add_service("s", &["^/"]).unwrap();
    let mut group = spec("g", &[&LABELS[..3], &LABELS[3..]], &[("k", "^/u/([^/]+)/")]);
    group.selection = selection;
    table.add_source_group(service, group).unwrap();
    table
}

fn subject(user: u8, session: u8) -> String {
    format!("/u/user{user}/s{session}")
}

proptest! {
    #[test]
    fn stickiness_invariants_hold_under_random_membership(
        ops in proptest::collection::vec(op(), 1..120),
        rendezvous in any::<bool>(),
    ) {
        let selection = if rendezvous { Selection::Rendezvous } else { Selection::Modulo };
        let mut table = prop_table(selection);
        let mut twin = prop_table(selection);
        let mut subscribed: std::collections::HashMap<String, u32> = Default::default();
        for op in ops {
            let before: Vec<(String, Option<MemberId>)> = (0..12u8)
                .map(|u| format!("k:user{u}"))
                .map(|c| { let m = table.affinity(&c); (c, m) })
                .collect();
            match &op {
                Op::Subscribe(u, s) => {
                    let a = table.subscribe(&subject(*u, *s)).unwrap().1;
                    if s % 2 == 0 {
                        let b = twin.subscribe(&subject(*u, *s)).unwrap().1;
                        prop_assert_eq!(&a, &b, "determinism across two tables");
                    } else {
                        // The member-only call has the same effects and answer.
                        let b = twin.subscribe_member(&subject(*u, *s)).unwrap();
                        prop_assert_eq!(a[0].member, b);
                    }
                    *subscribed.entry(subject(*u, *s)).or_default() += 1;
                }
                Op::Unsubscribe(u, s) => {
                    let key = subject(*u, *s);
                    let expected = subscribed.get(&key).copied().unwrap_or(0) > 0;
                    prop_assert_eq!(table.unsubscribe(&key).is_ok(), expected);
                    let _ = twin.unsubscribe(&key);
                    if expected { *subscribed.get_mut(&key).unwrap() -= 1; }
                }
                Op::Down(m) | Op::Up(m) => {
                    let up = matches!(op, Op::Up(_));
                    table.set_member_up(LABELS[*m as usize], up).unwrap();
                    twin.set_member_up(LABELS[*m as usize], up).unwrap();
                }
            }
            // Never an affinity to a down member.
            for u in 0..12u8 {
                if let Some(member) = table.affinity(&format!("k:user{u}")) {
                    prop_assert!(table.is_up(member));
                }
            }
            // Recovery moves nothing; subscribe/unsubscribe only moves its own composite.
            if let Op::Up(_) = op {
                for (composite, member) in &before {
                    if member.is_some() {
                        prop_assert_eq!(table.affinity(composite), *member);
                    }
                }
            }
            if let Op::Down(m) = op {
                for (composite, member) in &before {
                    if member.is_some() && *member != table.member_id(LABELS[m as usize]) {
                        prop_assert_eq!(table.affinity(composite), *member);
                    }
                }
            }
            // Reference counting: an affinity exists iff a subscription of that user is held.
            for u in 0..12u8 {
                let held = (0..3u8).any(|s| subscribed.get(&subject(u, s)).copied().unwrap_or(0) > 0);
                let any_up = LABELS.iter().any(|l| table.is_up(table.member_id(l).unwrap()));
                let composite = format!("k:user{u}");
                if !held {
                    prop_assert_eq!(table.affinity(&composite), None);
                } else if any_up {
                    prop_assert!(table.affinity(&composite).is_some());
                }
            }
            // Subscriptions always follow their user's affinity.
            for (key, count) in &subscribed {
                if *count > 0 {
                    let decision = table.route_primary(key).unwrap();
                    let composite = decision.composite.clone().unwrap();
                    prop_assert_eq!(decision.member, table.affinity(&composite));
                    prop_assert_eq!(table.route_member(key).unwrap(), decision.member);
                }
            }
            // Member-only lookups agree with full decisions, subscribed or not.
            for u in 0..12u8 {
                let key = subject(u, 7);
                prop_assert_eq!(table.route_member(&key).unwrap(), table.route_primary(&key).unwrap().member);
            }
            prop_assert_eq!(table.drain_events(), twin.drain_events());
        }
        let total: u64 = table.member_ids().map(|m| table.subscription_count(m)).sum();
        let live = subscribed.values().filter(|c| **c > 0).count() as u64;
        let any_up = LABELS.iter().any(|l| table.is_up(table.member_id(l).unwrap()));
        if any_up {
            prop_assert_eq!(total, live);
        }
    }
}
