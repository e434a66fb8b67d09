//! The seed's two faucet configurations, event by event.

use super::*;

fn party(id: u64, name: &str) -> Party {
    Party { id, name: Arc::from(name) }
}

fn symbols(announcements: Announcements) -> Faucet {
    Faucet::new(FaucetConfig {
        control_topic: "symbol_faucet_control".into(),
        subscription_topic: "/symbols/.*".into(),
        announcements,
        coverage_option: None,
    })
    .unwrap()
}

fn space() -> Faucet {
    Faucet::new(FaucetConfig {
        control_topic: "space_faucet_control".into(),
        subscription_topic: "/space/.*".into(),
        announcements: Announcements::Default,
        coverage_option: Some("udo_coverage".into()),
    })
    .unwrap()
}

/// `action topic [publisher] [<subscriber]`, one string per event.
fn events(faucet: &mut Faucet) -> Vec<String> {
    faucet
        .drain_events()
        .into_iter()
        .map(|e| {
            let mut line = format!("{} {}", e.action.name(), e.topic);
            if let Some(p) = e.publisher {
                line += &format!(" {}", p.name);
            }
            if let Some(s) = e.subscriber {
                line += &format!(" <{}", s.name);
            }
            line
        })
        .collect()
}

const P1: u64 = 1;
const P2: u64 = 2;
const S1: u64 = 11;
const S2: u64 = 12;

#[test]
fn default_mode_announces_first_assign_last_unassign_only() {
    let mut f = symbols(Announcements::Default);
    assert!(f.enlist(party(P1, "pub1"), None));
    f.subscribe("/symbols/IBM", party(S1, "s1"));
    assert_eq!(events(&mut f), ["assign /symbols/IBM pub1"]);
    f.subscribe("/symbols/IBM", party(S2, "s2"));
    assert_eq!(events(&mut f), Vec::<String>::new());
    f.unsubscribe("/symbols/IBM", S1);
    assert_eq!(events(&mut f), Vec::<String>::new());
    f.unsubscribe("/symbols/IBM", S2);
    assert_eq!(events(&mut f), ["unassign /symbols/IBM pub1"]);
    assert_eq!(f.assigned_count(P1), 0);
    assert_eq!(f.assignment("/symbols/IBM"), None);
}

#[test]
fn all_mode_announces_every_subscriber_transition_with_the_subscriber() {
    let mut f = symbols(Announcements::All);
    f.enlist(party(P1, "pub1"), None);
    f.subscribe("/symbols/IBM", party(S1, "s1"));
    assert_eq!(events(&mut f), ["assign /symbols/IBM pub1 <s1"]);
    f.subscribe("/symbols/IBM", party(S2, "s2"));
    assert_eq!(events(&mut f), ["assign /symbols/IBM pub1 <s2"]);
    f.unsubscribe("/symbols/IBM", S1);
    assert_eq!(events(&mut f), ["unassign /symbols/IBM pub1 <s1"]);
    f.unsubscribe("/symbols/IBM", S2);
    assert_eq!(events(&mut f), ["unassign /symbols/IBM pub1 <s2"]);
}

#[test]
fn publisher_loss_in_default_mode_announces_only_the_replacement_assign() {
    let mut f = symbols(Announcements::Default);
    f.enlist(party(P1, "pub1"), None);
    f.enlist(party(P2, "pub2"), None);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/A", party(S2, "s2"));
    events(&mut f);
    assert_eq!(f.assignment("/symbols/A"), Some(P1));
    f.remove_publisher(P1);
    assert_eq!(events(&mut f), ["assign /symbols/A pub2"]);
    assert_eq!(
        f.drain_changes().last(),
        Some(&AssignmentChange { topic: "/symbols/A".into(), from: Some(P1), to: Some(P2) })
    );
}

#[test]
fn publisher_loss_in_all_mode_announces_unassign_before_reassignment_per_subscriber() {
    let mut f = symbols(Announcements::All);
    f.enlist(party(P1, "pub1"), None);
    f.enlist(party(P2, "pub2"), None);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/A", party(S2, "s2"));
    events(&mut f);
    f.remove_publisher(P1);
    assert_eq!(
        events(&mut f),
        [
            "unassign /symbols/A pub1 <s1",
            "unassign /symbols/A pub1 <s2",
            "assign /symbols/A pub2 <s1",
            "assign /symbols/A pub2 <s2"
        ]
    );
}

#[test]
fn losing_the_only_publisher_announces_no_handlers_once_or_per_subscriber() {
    let mut f = symbols(Announcements::Default);
    f.enlist(party(P1, "pub1"), None);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/A", party(S2, "s2"));
    events(&mut f);
    f.remove_publisher(P1);
    assert_eq!(events(&mut f), ["no_handlers /symbols/A"]);

    let mut f = symbols(Announcements::All);
    f.enlist(party(P1, "pub1"), None);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/A", party(S2, "s2"));
    events(&mut f);
    f.remove_publisher(P1);
    assert_eq!(
        events(&mut f),
        [
            "unassign /symbols/A pub1 <s1",
            "unassign /symbols/A pub1 <s2",
            "no_handlers /symbols/A <s1",
            "no_handlers /symbols/A <s2"
        ]
    );
}

#[test]
fn no_handlers_then_late_enlistment_assigns_outstanding_topics_in_both_modes() {
    let mut f = symbols(Announcements::Default);
    f.subscribe("/symbols/A", party(S1, "s1"));
    assert_eq!(events(&mut f), ["no_handlers /symbols/A"]);
    f.subscribe("/symbols/A", party(S2, "s2"));
    f.subscribe("/symbols/B", party(S1, "s1"));
    assert_eq!(events(&mut f), ["no_handlers /symbols/B"]);
    f.enlist(party(P1, "pub1"), None);
    assert_eq!(events(&mut f), ["assign /symbols/A pub1", "assign /symbols/B pub1"]);

    let mut f = symbols(Announcements::All);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/A", party(S2, "s2"));
    assert_eq!(events(&mut f), ["no_handlers /symbols/A <s1", "no_handlers /symbols/A <s2"]);
    f.enlist(party(P1, "pub1"), None);
    assert_eq!(events(&mut f), ["assign /symbols/A pub1 <s1", "assign /symbols/A pub1 <s2"]);
}

#[test]
fn least_assigned_wins_and_ties_go_to_the_first_activated() {
    let mut f = symbols(Announcements::Default);
    f.enlist(party(P2, "second-id-first-activated"), None);
    f.enlist(party(P1, "first-id-second-activated"), None);
    f.subscribe("/symbols/A", party(S1, "s1"));
    f.subscribe("/symbols/B", party(S1, "s1"));
    f.subscribe("/symbols/C", party(S1, "s1"));
    assert_eq!(
        events(&mut f),
        [
            "assign /symbols/A second-id-first-activated",
            "assign /symbols/B first-id-second-activated",
            "assign /symbols/C second-id-first-activated"
        ]
    );
    // Sticky: a newcomer with nothing assigned takes no existing topic, only the next new one.
    f.enlist(party(3, "third"), None);
    assert_eq!(events(&mut f), Vec::<String>::new());
    f.subscribe("/symbols/D", party(S1, "s1"));
    assert_eq!(events(&mut f), ["assign /symbols/D third"]);
    assert_eq!(f.assignment("/symbols/A"), Some(P2));
}

#[test]
fn coverage_limits_a_publisher_to_its_subset() {
    let mut f = space();
    assert!(f.enlist(party(P1, "cpub"), Some("/space/C.*")));
    for topic in ["/space/C", "/space/COBALT", "/space/A", "/space/E"] {
        f.subscribe(topic, party(S1, "s1"));
    }
    assert_eq!(
        events(&mut f),
        ["assign /space/C cpub", "assign /space/COBALT cpub", "no_handlers /space/A", "no_handlers /space/E"]
    );
}

#[test]
fn coverage_is_the_union_of_enlistments_and_invalid_or_missing_ones_are_ignored() {
    let mut f = space();
    assert!(!f.enlist(party(P1, "p"), None));
    assert!(!f.enlist(party(P1, "p"), Some("/space/(")));
    assert_eq!(f.counters().enlistments_ignored, 2);
    f.subscribe("/space/A", party(S1, "s1"));
    assert_eq!(events(&mut f), ["no_handlers /space/A"]);
    assert!(f.enlist(party(P1, "p"), Some("/space/C.*")));
    assert_eq!(events(&mut f), Vec::<String>::new());
    assert!(f.enlist(party(P1, "p"), Some("/space/A.*")));
    assert_eq!(events(&mut f), ["assign /space/A p"]);
}

#[test]
fn the_subscription_pattern_selects_faucet_topics_and_never_the_control_topic() {
    let f = symbols(Announcements::Default);
    assert!(f.matches("/symbols/IBM"));
    assert!(!f.matches("/other/IBM"));
    assert!(!f.matches("symbol_faucet_control"));
    let clash = Faucet::new(FaucetConfig {
        control_topic: "/symbols/control".into(),
        subscription_topic: "/symbols/.*".into(),
        announcements: Announcements::Default,
        coverage_option: None,
    });
    assert!(clash.is_err());
}

#[test]
fn json_events_carry_the_seed_fields() {
    let event = FaucetEvent {
        action: FaucetAction::Assign,
        topic: "/symbols/IBM".into(),
        publisher: Some(party(0x1f, "pub1")),
        subscriber: Some(party(2, "s1")),
    };
    assert_eq!(
        event.to_json(),
        r#"{"client_name":"pub1","connection_name":"000000000000001f","topic":"/symbols/IBM","event":"assign","subscriber_client_name":"s1","subscriber_connection_name":"0000000000000002"}"#
    );
    let none = FaucetEvent { action: FaucetAction::NoHandlers, topic: "/a".into(), publisher: None, subscriber: None };
    assert_eq!(none.to_json(), r#"{"topic":"/a","event":"no_handlers"}"#);
}

#[test]
fn unsubscribing_what_was_never_subscribed_is_counted_and_changes_nothing() {
    let mut f = symbols(Announcements::All);
    f.enlist(party(P1, "pub1"), None);
    assert!(!f.unsubscribe("/symbols/A", S1));
    f.subscribe("/symbols/A", party(S1, "s1"));
    events(&mut f);
    assert!(!f.unsubscribe("/symbols/A", S2));
    assert_eq!(f.counters().unknown_unsubscribes, 2);
    assert_eq!(events(&mut f), Vec::<String>::new());
    assert_eq!(f.assignment("/symbols/A"), Some(P1));
}
