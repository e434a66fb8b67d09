//! Finding a group without a shared registry: the sans-IO side of the bootstrap exchange
//! (`docs/groups.md`, "Across hosts: bootstrap").
//!
//! A member given `bootstrap="host:port,..."` sends BOOTSTRAP to every listed address, again
//! every [`BOOTSTRAP_RETRY`], until the first valid BOOTSTRAP_REPLY or its deadline
//! ([`BootstrapClient`]). Any live member answers with its definition and the members it knows
//! live ([`answer`]). The asker checks the definition (its version, its fingerprint recomputed)
//! and, if it holds one already, that both are the same: another definition is refused, naming
//! both fingerprints. Time is an input; the runtime (`runtime::bootstrap`) does the I/O.

use std::net::SocketAddr;
use std::time::Duration;

use super::{GroupConfig, GroupError};
use crate::control::bootstrap::{
    BootstrapMember, BootstrapReply, BootstrapRequest, DefinitionRecord, DEFINITION_VERSION,
};
use crate::control::limits::MAX_BOOTSTRAP_MEMBERS;
use crate::control::member::parse_address;
use crate::control::{MemberView, Role};
use crate::time::Instant;

/// The start of the error of an unanswered bootstrap (a member holding a definition starts as
/// the group's first member instead).
pub const NO_ANSWER: &str = "no bootstrap member answered";
/// How often an unanswered BOOTSTRAP is sent again to every listed address.
pub const BOOTSTRAP_RETRY: Duration = Duration::from_millis(200);
/// How long a member without a definition waits for the first answer before it fails, naming
/// the addresses it asked.
pub const DEFAULT_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(10);
/// Most addresses one bootstrap list may hold.
pub const MAX_BOOTSTRAP_ADDRESSES: usize = 64;

/// Parses `host:port,host:port,...` (IP addresses or host names; blanks around entries are
/// ignored, duplicates kept once). An empty list, an empty entry or an entry that is no
/// reachable `host:port` is refused, naming it.
pub fn parse_bootstrap_list(text: &str) -> Result<Vec<SocketAddr>, GroupError> {
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for (index, entry) in text.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(GroupError::Definition(format!(
                "bootstrap {text:?}: entry {} is empty (expected host:port,host:port,...)",
                index + 1
            )));
        }
        let address = parse_address(entry, "bootstrap entry", false)?;
        if address.port() == 0 {
            return Err(GroupError::Definition(format!("bootstrap entry {entry:?}: port 0 cannot be reached")));
        }
        if !addresses.contains(&address) {
            addresses.push(address);
        }
    }
    if addresses.len() > MAX_BOOTSTRAP_ADDRESSES {
        return Err(GroupError::Definition(format!(
            "bootstrap: {} addresses, at most {MAX_BOOTSTRAP_ADDRESSES}",
            addresses.len()
        )));
    }
    Ok(addresses)
}

/// What a member learned from the first answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The group's definition (validated, its fingerprint recomputed).
    pub config: GroupConfig,
    /// The members the answering member knew live, itself included.
    pub members: Vec<BootstrapMember>,
    /// The answering member's id.
    pub answered_by: u64,
}

/// Counters of one bootstrap exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootstrapCounters {
    /// Requests sent (each to every address).
    pub rounds: u64,
    /// Replies ignored: another nonce or another group (stale or misdirected).
    pub stale_replies: u64,
}

fn describe(fingerprint: u64, hash_prefix: &str, hash_count: u32, queue_count: u32) -> String {
    format!("fingerprint {fingerprint:016x}: HP={hash_prefix:?} HC={hash_count} QC={queue_count}")
}

/// Checks a definition received from `from` and builds the [`GroupConfig`] it describes.
pub fn check_definition(record: &DefinitionRecord, from: &str) -> Result<GroupConfig, GroupError> {
    if record.version != DEFINITION_VERSION {
        return Err(GroupError::Definition(format!(
            "group {:?}: bootstrap member {from} sent definition version {}, this member speaks version \
             {DEFINITION_VERSION}",
            record.name, record.version
        )));
    }
    let config =
        GroupConfig::new(&record.name, &record.hash_prefix, record.hash_count, record.queue_count, record.queue_size)
            .map_err(|e| GroupError::Definition(format!("bootstrap member {from} sent an invalid definition: {e}")))?;
    if config.fingerprint() != record.fingerprint {
        return Err(GroupError::Definition(format!(
            "group {:?}: bootstrap member {from} sent a definition whose fingerprint {:016x} is not its \
             content's ({})",
            record.name,
            record.fingerprint,
            describe(config.fingerprint(), &config.hash_prefix, config.hash_count, config.queue_count)
        )));
    }
    Ok(config)
}

/// The asking side of the exchange.
#[derive(Debug)]
pub struct BootstrapClient {
    group: String,
    addresses: Vec<SocketAddr>,
    held: Option<GroupConfig>,
    sender: u64,
    nonce: u64,
    deadline: Instant,
    timeout: Duration,
    last_sent: Option<Instant>,
    outcome: Option<Result<Learned, String>>,
    counters: BootstrapCounters,
}

impl BootstrapClient {
    /// Asks `addresses` about `group` as `sender` (a fresh id) with `nonce`, until `now +
    /// timeout`. `held`: the definition this member holds already (a reply with another one is
    /// refused).
    pub fn new(
        group: &str,
        addresses: Vec<SocketAddr>,
        held: Option<GroupConfig>,
        sender: u64,
        nonce: u64,
        timeout: Duration,
        now: Instant,
    ) -> BootstrapClient {
        BootstrapClient {
            group: group.to_owned(),
            addresses,
            held,
            sender,
            nonce,
            deadline: now + timeout,
            timeout,
            last_sent: None,
            outcome: None,
            counters: BootstrapCounters::default(),
        }
    }

    /// The addresses asked.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The request to send, naming `reply_to` (the asker's inbox).
    pub fn request(&self, reply_to: &str) -> BootstrapRequest {
        BootstrapRequest {
            sender: self.sender,
            group: self.group.clone(),
            reply_to: reply_to.to_owned(),
            held_fingerprint: self.held.as_ref().map_or(0, GroupConfig::fingerprint),
            nonce: self.nonce,
        }
    }

    /// Whether the request is due (again) to every address at `now`; marks it sent.
    pub fn take_due(&mut self, now: Instant) -> bool {
        if self.outcome.is_some() || self.last_sent.is_some_and(|at| now.saturating_since(at) < BOOTSTRAP_RETRY) {
            return false;
        }
        self.last_sent = Some(now);
        self.counters.rounds += 1;
        true
    }

    /// Takes a reply (already verified and decoded). The first reply to this request decides.
    pub fn on_reply(&mut self, reply: BootstrapReply) {
        if self.outcome.is_some() {
            return;
        }
        if reply.nonce != self.nonce || reply.definition.name != self.group {
            self.counters.stale_replies += 1;
            return;
        }
        let from = reply
            .members
            .iter()
            .find(|member| member.member_id == reply.sender)
            .map_or_else(|| format!("member {:x}", reply.sender), |member| member.endpoint.clone());
        let outcome = check_definition(&reply.definition, &from).map_err(|e| e.to_string()).and_then(|config| {
            if let Some(held) = &self.held {
                if held.fingerprint() != config.fingerprint() {
                    return Err(format!(
                        "group {:?}: bootstrap member {from} holds another definition ({}) than this member ({}); \
                         every member of a group needs the same HP, HC and QC",
                        self.group,
                        describe(config.fingerprint(), &config.hash_prefix, config.hash_count, config.queue_count),
                        describe(held.fingerprint(), &held.hash_prefix, held.hash_count, held.queue_count)
                    ));
                }
            }
            Ok(Learned { config, members: reply.members, answered_by: reply.sender })
        });
        self.outcome = Some(outcome);
    }

    /// The outcome once decided: the first answer, or at the deadline an error naming every
    /// address asked. `None`: keep asking.
    pub fn poll(&mut self, now: Instant) -> Option<Result<Learned, GroupError>> {
        if self.outcome.is_none() && now >= self.deadline {
            let asked: Vec<String> = self.addresses.iter().map(SocketAddr::to_string).collect();
            self.outcome = Some(Err(format!(
                "group {:?}: {NO_ANSWER} within {:.1} s (asked {}); start a member of the group \
                 with listen= at one of these addresses, or check the addresses and the group secret",
                self.group,
                self.timeout.as_secs_f64(),
                asked.join(", ")
            )));
        }
        self.outcome.clone().map(|outcome| outcome.map_err(GroupError::Definition))
    }

    /// The exchange's counters.
    pub fn counters(&self) -> BootstrapCounters {
        self.counters
    }
}

/// A live member's answer to `request`: its definition and the members it knows live, itself
/// first (`own`). `None` when the request is about another group.
pub fn answer(
    request: &BootstrapRequest,
    config: &GroupConfig,
    own: BootstrapMember,
    view: &MemberView,
    now: Instant,
) -> Option<BootstrapReply> {
    if request.group != config.name {
        return None;
    }
    let sender = own.member_id;
    let mut members = vec![own];
    for entry in view.live(now) {
        if members.len() >= MAX_BOOTSTRAP_MEMBERS {
            break;
        }
        let heartbeat = &entry.heartbeat;
        if entry.id() == request.sender || heartbeat.role == Role::Observer {
            continue;
        }
        if heartbeat.endpoint.parse::<SocketAddr>().is_ok() {
            members.push(BootstrapMember {
                member_id: entry.id(),
                role: heartbeat.role,
                endpoint: heartbeat.endpoint.clone(),
            });
        }
    }
    Some(BootstrapReply {
        sender,
        nonce: request.nonce,
        definition: DefinitionRecord {
            version: DEFINITION_VERSION,
            name: config.name.clone(),
            hash_prefix: config.hash_prefix.clone(),
            hash_count: config.hash_count,
            queue_count: config.queue_count,
            queue_size: config.queue_size,
            fingerprint: config.fingerprint(),
        },
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Heartbeat;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn orders(queue_count: u32) -> GroupConfig {
        GroupConfig::new("orders", "hp", 64, queue_count, 1 << 20).unwrap()
    }

    fn own() -> BootstrapMember {
        BootstrapMember { member_id: 10, role: Role::Consumer, endpoint: "10.0.0.1:4000".into() }
    }

    fn heartbeat(id: u64, role: Role, endpoint: &str, fingerprint: u64) -> Heartbeat {
        Heartbeat {
            fingerprint,
            member_id: id,
            leaving: false,
            role,
            name: format!("m{id}"),
            endpoint: endpoint.into(),
            index: 0,
            count: 0,
            pid: 1,
            claims: Vec::new(),
            figures: Vec::new(),
        }
    }

    fn addresses() -> Vec<SocketAddr> {
        parse_bootstrap_list("10.0.0.1:4000, 10.0.0.2:4000").unwrap()
    }

    /// The reply a member holding `config` with `view` gives to `client`'s request.
    fn exchange(client: &BootstrapClient, config: &GroupConfig, view: &MemberView, now: Instant) -> BootstrapReply {
        let request = client.request("10.0.0.3:4200");
        // Through the codec both ways, as on the wire.
        let mut bytes = Vec::new();
        request.emit(&mut bytes).unwrap();
        let request = BootstrapRequest::parse(&bytes).unwrap();
        let reply = answer(&request, config, own(), view, now).unwrap();
        let mut bytes = Vec::new();
        reply.emit(&mut bytes).unwrap();
        BootstrapReply::parse(&bytes).unwrap()
    }

    #[test]
    fn lists_are_parsed_and_bad_entries_named() {
        assert_eq!(addresses().len(), 2);
        assert_eq!(parse_bootstrap_list("10.0.0.1:4000,10.0.0.1:4000").unwrap().len(), 1);
        for (text, expected) in [
            ("", "entry 1 is empty"),
            ("10.0.0.1:4000,", "entry 2 is empty"),
            ("10.0.0.1", "host:port"),
            ("10.0.0.1:99999", "99999"),
            ("0.0.0.0:4000", "wildcard"),
            ("10.0.0.1:0", "port 0"),
        ] {
            let error = parse_bootstrap_list(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let many: Vec<String> = (0..=MAX_BOOTSTRAP_ADDRESSES).map(|i| format!("10.0.1.{}:4000", i % 250 + 1)).collect();
        let many: Vec<String> =
            many.iter().enumerate().map(|(i, a)| a.replace(":4000", &format!(":{}", 4000 + i))).collect();
        assert!(parse_bootstrap_list(&many.join(",")).unwrap_err().to_string().contains("at most"));
    }

    #[test]
    fn a_member_without_a_definition_learns_it_and_the_live_members() {
        let config = orders(8);
        let mut view = MemberView::new(10, config.fingerprint(), Duration::from_secs(2));
        view.on_heartbeat(heartbeat(11, Role::Publisher, "10.0.0.2:4100", config.fingerprint()), at(0));
        view.on_heartbeat(heartbeat(12, Role::Consumer, "10.0.0.4:4000", config.fingerprint()), at(0));
        view.on_heartbeat(heartbeat(13, Role::Observer, "10.0.0.5:4000", config.fingerprint()), at(0));
        view.on_heartbeat(heartbeat(14, Role::Consumer, "10.0.0.6:4000", config.fingerprint()), at(0));
        let mut client = BootstrapClient::new("orders", addresses(), None, 99, 7, Duration::from_secs(5), at(0));
        assert!(client.take_due(at(0)));
        assert!(!client.take_due(at(100)), "retried only every BOOTSTRAP_RETRY");
        assert!(client.take_due(at(200)));
        assert!(client.poll(at(300)).is_none());
        // Member 14 went silent: not listed.
        let reply = exchange(&client, &config, &view, at(2500 - 1));
        let mut view_late = MemberView::new(10, config.fingerprint(), Duration::from_secs(2));
        for id in [11, 12] {
            let endpoint = if id == 11 { "10.0.0.2:4100" } else { "10.0.0.4:4000" };
            let role = if id == 11 { Role::Publisher } else { Role::Consumer };
            view_late.on_heartbeat(heartbeat(id, role, endpoint, config.fingerprint()), at(2000));
        }
        view_late.on_heartbeat(heartbeat(14, Role::Consumer, "10.0.0.6:4000", config.fingerprint()), at(0));
        let reply_late = exchange(&client, &config, &view_late, at(2500));
        let ids: Vec<u64> = reply_late.members.iter().map(|m| m.member_id).collect();
        assert_eq!(ids[0], 10, "the answering member first");
        let mut others = ids[1..].to_vec();
        others.sort_unstable();
        assert_eq!(others, vec![11, 12], "live members only, no observer: {ids:?}");
        client.on_reply(reply);
        let learned = client.poll(at(400)).unwrap().unwrap();
        assert_eq!(learned.config, config);
        assert_eq!(learned.answered_by, 10);
        // Decided: later replies and rounds change nothing.
        client.on_reply(reply_late);
        assert!(!client.take_due(at(1000)));
        assert_eq!(client.poll(at(10_000)).unwrap().unwrap(), learned);
    }

    #[test]
    fn another_definition_is_refused_naming_both_fingerprints() {
        let theirs = orders(8);
        let ours = orders(4);
        let view = MemberView::new(10, theirs.fingerprint(), Duration::from_secs(2));
        let mut client =
            BootstrapClient::new("orders", addresses(), Some(ours.clone()), 99, 7, Duration::from_secs(5), at(0));
        let reply = exchange(&client, &theirs, &view, at(0));
        client.on_reply(reply);
        let error = client.poll(at(1)).unwrap().unwrap_err().to_string();
        for needle in [
            format!("{:016x}", theirs.fingerprint()),
            format!("{:016x}", ours.fingerprint()),
            "10.0.0.1:4000".into(),
            "QC=8".into(),
            "QC=4".into(),
        ] {
            assert!(error.contains(&needle), "{needle}: {error}");
        }
        // The same definition is accepted.
        let mut client =
            BootstrapClient::new("orders", addresses(), Some(theirs.clone()), 99, 7, Duration::from_secs(5), at(0));
        client.on_reply(exchange(&client, &theirs, &view, at(0)));
        assert_eq!(client.poll(at(1)).unwrap().unwrap().config, theirs);
    }

    #[test]
    fn nobody_answering_fails_at_the_deadline_naming_every_address() {
        let mut client = BootstrapClient::new("orders", addresses(), None, 99, 7, Duration::from_secs(3), at(0));
        assert!(client.poll(at(2999)).is_none());
        let error = client.poll(at(3000)).unwrap().unwrap_err().to_string();
        assert!(
            error.contains("10.0.0.1:4000") && error.contains("10.0.0.2:4000") && error.contains("3.0 s"),
            "{error}"
        );
    }

    #[test]
    fn stale_forged_and_foreign_replies_are_ignored_or_refused() {
        let config = orders(8);
        let view = MemberView::new(10, config.fingerprint(), Duration::from_secs(2));
        let mut client = BootstrapClient::new("orders", addresses(), None, 99, 7, Duration::from_secs(5), at(0));
        // Another request's nonce: ignored, counted.
        let mut stale = exchange(&client, &config, &view, at(0));
        stale.nonce = 8;
        client.on_reply(stale);
        assert_eq!(client.counters().stale_replies, 1);
        assert!(client.poll(at(1)).is_none());
        // A fingerprint that is not the content's: refused.
        let mut forged = exchange(&client, &config, &view, at(0));
        forged.definition.fingerprint ^= 1;
        client.on_reply(forged);
        let error = client.poll(at(1)).unwrap().unwrap_err().to_string();
        assert!(error.contains("is not its content's"), "{error}");
        // Another version: refused, naming both.
        let mut client = BootstrapClient::new("orders", addresses(), None, 99, 7, Duration::from_secs(5), at(0));
        let mut newer = exchange(&client, &config, &view, at(0));
        newer.definition.version = DEFINITION_VERSION + 1;
        client.on_reply(newer);
        let error = client.poll(at(1)).unwrap().unwrap_err().to_string();
        assert!(error.contains("definition version 2") && error.contains("version 1"), "{error}");
        // An invalid definition (QC > HC): refused with the definition's own error.
        let mut client = BootstrapClient::new("orders", addresses(), None, 99, 7, Duration::from_secs(5), at(0));
        let mut invalid = exchange(&client, &config, &view, at(0));
        invalid.definition.queue_count = 128;
        client.on_reply(invalid);
        let error = client.poll(at(1)).unwrap().unwrap_err().to_string();
        assert!(error.contains("invalid definition") && error.contains("HC >= QC"), "{error}");
        // A request about another group gets no answer.
        let mut other = client.request("10.0.0.3:4200");
        other.group = "payments".into();
        assert!(answer(&other, &config, own(), &view, at(0)).is_none());
    }
}
