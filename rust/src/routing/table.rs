//! The routing table: members, data services, source groups, affinities and subscriptions.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::events::{Event, EventKind, MoveReason, Reason};
use super::hash::{composite, Selection};
use super::policy::{AffinityHash, Candidate, Policy, PolicyError, Request, Workload};
use super::posix_regex::{PosixRegex, RegexError};
use super::FastMap;

/// Past this many cached subject classifications the cache starts over (bounds memory).
const CLASSIFICATION_CACHE_LIMIT: usize = 1 << 20;

/// A member (peer), numbered in order of first appearance in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(u32);

impl MemberId {
    /// Zero-based position in the table's member list.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The 1-based peer number used in log lines (`from peer N (label)`).
    pub fn peer_index(self) -> u32 {
        self.0 + 1
    }
}

/// A data service, in the order added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceId(u32);

impl ServiceId {
    /// Zero-based position in the table's service list.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The service at zero-based position `index` (see [`RoutingTable::service_count`]).
    pub fn from_index(index: usize) -> Self {
        ServiceId(index as u32)
    }
}

/// A source group, in the order added (across all services).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(u32);

impl GroupId {
    /// Zero-based position in the table's source-group list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a table operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum RoutingError {
    /// No data service has an include-pattern matching the subject.
    NoService(String),
    /// The matching data service has no source group.
    NoSourceGroup(String),
    /// `unsubscribe` / `report_nodata` for a subject that is not subscribed.
    NotSubscribed(String),
    /// A member label the table does not know.
    UnknownMember(String),
    /// An invalid source group or data service definition.
    Config(String),
    /// A pattern glibc refused.
    Regex(RegexError),
}

impl fmt::Display for RoutingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoutingError::NoService(subject) => {
                write!(f, "no data service has an include-pattern matching {subject:?}")
            }
            RoutingError::NoSourceGroup(service) => {
                write!(f, "data service {service:?} has no source group")
            }
            RoutingError::NotSubscribed(subject) => write!(f, "{subject:?} is not subscribed"),
            RoutingError::UnknownMember(label) => write!(f, "unknown member {label:?}"),
            RoutingError::Config(message) => f.write_str(message),
            RoutingError::Regex(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for RoutingError {}

impl From<RegexError> for RoutingError {
    fn from(error: RegexError) -> Self {
        RoutingError::Regex(error)
    }
}

/// The flags of a NODATA answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoDataStatus {
    /// NODATA with the Unavailable flag.
    Unavailable,
    /// NODATA with the NotFound flag.
    NotFound,
    /// NODATA with neither flag.
    Other,
}

impl NoDataStatus {
    /// Parses `unavailable`, `notfound` or `other`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "unavailable" => Some(NoDataStatus::Unavailable),
            "notfound" | "not-found" => Some(NoDataStatus::NotFound),
            "other" => Some(NoDataStatus::Other),
            _ => None,
        }
    }

    /// The spelling used in events.
    pub fn name(self) -> &'static str {
        match self {
            NoDataStatus::Unavailable => "unavailable",
            NoDataStatus::NotFound => "notfound",
            NoDataStatus::Other => "other",
        }
    }
}

/// A source group to add: priority groups of labels, affinity rules, selection and policy.
pub struct SourceGroupSpec {
    /// Name used in explanations and errors.
    pub name: String,
    /// Ordered priority groups, each an ordered list of member labels.
    pub priority_groups: Vec<Vec<String>>,
    /// Ordered affinity rules: (affinity key, POSIX ERE with exactly one capture group).
    pub rules: Vec<(String, String)>,
    /// Hash selection function for composites.
    pub selection: Selection,
    /// Fallback policy for subjects no rule matches (and for composites if it
    /// [`Policy::decides_composites`]).
    pub policy: Box<dyn Policy>,
}

/// Where one source group of a subject's data service sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegDecision {
    /// The source group.
    pub group: GroupId,
    /// The member serving, `None` when no member is up.
    pub member: Option<MemberId>,
    /// Zero-based priority group of `member`.
    pub priority_group: Option<usize>,
    /// The composite, when an affinity rule matched.
    pub composite: Option<Arc<str>>,
    /// Zero-based index of the matching affinity rule.
    pub rule: Option<usize>,
    /// Why `member`.
    pub reason: Reason,
    /// Sequence number of the event that bound it (the affinity's, for a sticky composite).
    pub since: Option<u64>,
}

/// Everything known about how a subject is (or would be) routed by its primary source group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The data service whose include-pattern matched.
    pub service: ServiceId,
    /// How the primary source group routes it now (what `route` returns).
    pub decision: LegDecision,
    /// How the member was first chosen, when it is remembered (subscription or affinity).
    pub bound_reason: Option<Reason>,
    /// Whether the subject itself is subscribed.
    pub subscribed: bool,
    /// Subscriptions holding the composite (or the subject, without a composite).
    pub references: u32,
}

struct Member {
    label: String,
    up: bool,
    activation: u64,
    subscriptions: u64,
    assigned: u64,
}

struct Rule {
    key: String,
    regex: PosixRegex,
}

struct SourceGroup {
    name: String,
    service: ServiceId,
    priority_groups: Vec<Vec<MemberId>>,
    rules: Vec<Rule>,
    hash: AffinityHash,
    policy: Box<dyn Policy>,
}

struct Service {
    name: String,
    include: Vec<PosixRegex>,
    groups: Vec<GroupId>,
}

struct Affinity {
    member: Option<MemberId>,
    owner: GroupId,
    references: u32,
    since: u64,
    reason: Reason,
    priority_group: Option<usize>,
}

type ClassifiedLeg = (GroupId, Option<(usize, Arc<str>)>);

#[derive(Clone)]
struct Classified {
    service: ServiceId,
    legs: Vec<ClassifiedLeg>,
}

struct Leg {
    decision: LegDecision,
    tried: Vec<MemberId>,
}

struct Subscription {
    order: u64,
    references: u32,
    service: ServiceId,
    legs: Vec<Leg>,
}

/// The routing tables of one process: see the [module documentation](super).
///
/// Members are up when first named; [`RoutingTable::set_member_up`] changes that. Affinities are
/// keyed by composite, and the composite embeds the affinity key, so source groups sharing an
/// affinity key share affinity memory.
pub struct RoutingTable {
    members: Vec<Member>,
    member_index: HashMap<String, MemberId>,
    services: Vec<Service>,
    groups: Vec<SourceGroup>,
    affinities: FastMap<Arc<str>, Affinity>,
    subscriptions: FastMap<Arc<str>, Subscription>,
    cache: FastMap<Arc<str>, Classified>,
    events: Vec<Event>,
    sequence: u64,
    next_activation: u64,
    next_order: u64,
}

impl Default for RoutingTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RoutingTable {
    /// An empty table.
    pub fn new() -> Self {
        RoutingTable {
            members: Vec::new(),
            member_index: HashMap::new(),
            services: Vec::new(),
            groups: Vec::new(),
            affinities: FastMap::default(),
            subscriptions: FastMap::default(),
            cache: FastMap::default(),
            events: Vec::new(),
            sequence: 0,
            next_activation: 0,
            next_order: 0,
        }
    }

    // ---- configuration -------------------------------------------------------------------

    /// The member labelled `label`, registered (up) if new.
    pub fn member(&mut self, label: &str) -> MemberId {
        if let Some(&id) = self.member_index.get(label) {
            return id;
        }
        let id = MemberId(self.members.len() as u32);
        self.members.push(Member {
            label: label.to_owned(),
            up: true,
            activation: self.next_activation,
            subscriptions: 0,
            assigned: 0,
        });
        self.next_activation += 1;
        self.member_index.insert(label.to_owned(), id);
        id
    }

    /// Adds a data service; subjects go to the first service with a matching include-pattern.
    pub fn add_service(&mut self, name: &str, include_patterns: &[&str]) -> Result<ServiceId, RoutingError> {
        let include = include_patterns.iter().map(|p| PosixRegex::new(p)).collect::<Result<Vec<_>, _>>()?;
        self.services.push(Service { name: name.to_owned(), include, groups: Vec::new() });
        self.cache.clear();
        Ok(ServiceId(self.services.len() as u32 - 1))
    }

    /// Adds a source group to `service`; its labels are registered as members.
    pub fn add_source_group(&mut self, service: ServiceId, spec: SourceGroupSpec) -> Result<GroupId, RoutingError> {
        if service.index() >= self.services.len() {
            return Err(RoutingError::Config(format!("unknown data service #{}", service.0)));
        }
        if spec.priority_groups.is_empty() || spec.priority_groups.iter().any(Vec::is_empty) {
            return Err(RoutingError::Config(format!(
                "source group {:?}: every priority group needs at least one label",
                spec.name
            )));
        }
        let mut rules = Vec::with_capacity(spec.rules.len());
        for (key, pattern) in &spec.rules {
            let regex = PosixRegex::new(pattern)?;
            if regex.group_count() != 1 {
                return Err(RoutingError::Config(format!(
                    "source group {:?}: affinity {key} {pattern:?} must have exactly one capture \
                     group (has {})",
                    spec.name,
                    regex.group_count()
                )));
            }
            rules.push(Rule { key: key.clone(), regex });
        }
        let priority_groups =
            spec.priority_groups.iter().map(|labels| labels.iter().map(|label| self.member(label)).collect()).collect();
        let id = GroupId(self.groups.len() as u32);
        self.groups.push(SourceGroup {
            name: spec.name,
            service,
            priority_groups,
            rules,
            hash: AffinityHash { selection: spec.selection },
            policy: spec.policy,
        });
        self.services[service.index()].groups.push(id);
        self.cache.clear();
        Ok(id)
    }

    // ---- accessors -----------------------------------------------------------------------

    /// The member labelled `label`, if known.
    pub fn member_id(&self, label: &str) -> Option<MemberId> {
        self.member_index.get(label).copied()
    }

    /// All members in peer order.
    pub fn member_ids(&self) -> impl Iterator<Item = MemberId> + '_ {
        (0..self.members.len() as u32).map(MemberId)
    }

    /// A member's label.
    pub fn label(&self, member: MemberId) -> &str {
        &self.members[member.index()].label
    }

    /// Whether a member is up.
    pub fn is_up(&self, member: MemberId) -> bool {
        self.members[member.index()].up
    }

    /// Subscriptions a member currently serves.
    pub fn subscription_count(&self, member: MemberId) -> u64 {
        self.members[member.index()].subscriptions
    }

    /// Keys (affinities and non-affinity subjects) assigned to a member.
    pub fn assigned_count(&self, member: MemberId) -> u64 {
        self.members[member.index()].assigned
    }

    /// Number of data services.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// A data service's name.
    pub fn service_name(&self, service: ServiceId) -> &str {
        &self.services[service.index()].name
    }

    /// A source group's name.
    pub fn group_name(&self, group: GroupId) -> &str {
        &self.groups[group.index()].name
    }

    /// The data service a source group belongs to.
    pub fn group_service(&self, group: GroupId) -> ServiceId {
        self.groups[group.index()].service
    }

    /// A source group's fallback policy name.
    pub fn group_policy(&self, group: GroupId) -> &str {
        self.groups[group.index()].policy.name()
    }

    /// A source group's selection function.
    pub fn group_selection(&self, group: GroupId) -> Selection {
        self.groups[group.index()].hash.selection
    }

    /// A source group's rule: (affinity key, pattern).
    pub fn rule(&self, group: GroupId, rule: usize) -> (&str, &str) {
        let rule = &self.groups[group.index()].rules[rule];
        (&rule.key, rule.regex.pattern())
    }

    /// The member a composite has an affinity to (`None` if unknown or waiting for a member).
    pub fn affinity(&self, composite: &str) -> Option<MemberId> {
        self.affinities.get(composite).and_then(|a| a.member)
    }

    /// Number of remembered affinities.
    pub fn affinity_count(&self) -> usize {
        self.affinities.len()
    }

    /// Number of subscribed subjects.
    pub fn subscription_total(&self) -> usize {
        self.subscriptions.len()
    }

    /// Takes the events reported since the last call.
    pub fn drain_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    // ---- routing -------------------------------------------------------------------------

    /// What [`RoutingTable::subscribe`] would answer for the primary (first) source group,
    /// without binding anything. The hot path: a subject seen before costs hash-map lookups.
    pub fn route_primary(&mut self, subject: &str) -> Result<LegDecision, RoutingError> {
        if let Some(subscription) = self.subscriptions.get(subject) {
            return Ok(current(&subscription.legs[0].decision));
        }
        let (group, rule) = match self.cache.get(subject) {
            Some(classified) => classified.legs[0].clone(),
            None => self.classify(subject)?.legs[0].clone(),
        };
        Ok(self.decide(group, subject, rule, false))
    }

    /// What [`RoutingTable::subscribe`] would answer, one decision per source group of the
    /// subject's data service, without binding anything.
    pub fn route(&mut self, subject: &str) -> Result<(ServiceId, Vec<LegDecision>), RoutingError> {
        if let Some(subscription) = self.subscriptions.get(subject) {
            let legs = subscription.legs.iter().map(|leg| current(&leg.decision)).collect();
            return Ok((subscription.service, legs));
        }
        let classified = self.classify(subject)?;
        let legs = classified.legs.into_iter().map(|(group, rule)| self.decide(group, subject, rule, false)).collect();
        Ok((classified.service, legs))
    }

    /// Subscribes to `subject`: binds it in every source group of its data service (reference
    /// counted: a second subscribe to the same subject only counts).
    pub fn subscribe(&mut self, subject: &str) -> Result<(ServiceId, Vec<LegDecision>), RoutingError> {
        if let Some(subscription) = self.subscriptions.get_mut(subject) {
            subscription.references += 1;
            let legs = subscription.legs.iter().map(|leg| current(&leg.decision)).collect();
            return Ok((subscription.service, legs));
        }
        let classified = self.classify(subject)?;
        let subject: Arc<str> = Arc::from(subject);
        let mut legs = Vec::with_capacity(classified.legs.len());
        for (group, rule) in classified.legs {
            let mut decision = self.decide(group, &subject, rule, true);
            self.bind(&subject, &mut decision);
            legs.push(Leg { decision, tried: Vec::new() });
        }
        let decisions = legs.iter().map(|leg| leg.decision.clone()).collect();
        let order = self.next_order;
        self.next_order += 1;
        self.subscriptions.insert(subject, Subscription { order, references: 1, service: classified.service, legs });
        Ok((classified.service, decisions))
    }

    /// Drops one reference to `subject`; at zero the subscription is discarded and so is every
    /// affinity it was the last holder of ([`EventKind::Forgotten`]).
    pub fn unsubscribe(&mut self, subject: &str) -> Result<(), RoutingError> {
        let subscription =
            self.subscriptions.get_mut(subject).ok_or_else(|| RoutingError::NotSubscribed(subject.to_owned()))?;
        subscription.references -= 1;
        if subscription.references > 0 {
            return Ok(());
        }
        let Some(subscription) = self.subscriptions.remove(subject) else {
            return Ok(());
        };
        for leg in subscription.legs {
            self.release(&leg.decision);
        }
        Ok(())
    }

    /// Marks a member up or down. Down: its affinities and subscriptions move to survivors
    /// (same selection over the remaining members). Up: nothing moves back; subscriptions that
    /// were waiting for any member are bound.
    pub fn set_member_up(&mut self, label: &str, up: bool) -> Result<MemberId, RoutingError> {
        let member = self.member_id(label).ok_or_else(|| RoutingError::UnknownMember(label.to_owned()))?;
        if self.members[member.index()].up == up {
            return Ok(member);
        }
        self.members[member.index()].up = up;
        let mut event = self.event(if up { EventKind::MemberUp } else { EventKind::MemberDown });
        event.member = Some(member);
        self.events.push(event);
        if up {
            self.bind_waiting();
        } else {
            self.evacuate(member);
        }
        Ok(member)
    }

    /// Reports a NODATA answer for `subject` from its primary source group's member.
    ///
    /// Unavailable/NotFound on an affinity subject is authoritative for the whole source group:
    /// nothing is retried (reason [`Reason::NoData`]). Otherwise the request moves to another
    /// up member not yet tried (reason [`Reason::Retry`]), or ends when all were tried.
    pub fn report_nodata(&mut self, subject: &str, status: NoDataStatus) -> Result<LegDecision, RoutingError> {
        let Some(subscription) = self.subscriptions.get(subject) else {
            return Err(RoutingError::NotSubscribed(subject.to_owned()));
        };
        let leg = &subscription.legs[0];
        let decision = leg.decision.clone();
        let mut tried = leg.tried.clone();
        tried.extend(decision.member);
        let subject_arc: Arc<str> = Arc::from(subject);
        let authoritative =
            decision.composite.is_some() && matches!(status, NoDataStatus::Unavailable | NoDataStatus::NotFound);
        let retry = if authoritative { None } else { self.place(decision.group, subject, false, &tried, true) };
        let Some((member, priority_group, _)) = retry else {
            let mut event = self.event(EventKind::NoData);
            event.subject = Some(subject_arc);
            event.composite = decision.composite.clone();
            event.member = decision.member;
            event.reason = Some(Reason::NoData);
            event.message = Some(if authoritative {
                format!(
                    "NODATA ({}) is authoritative for source group {}: not retried",
                    status.name(),
                    self.groups[decision.group.index()].name
                )
            } else {
                format!(
                    "NODATA ({}) from every member of source group {}",
                    status.name(),
                    self.groups[decision.group.index()].name
                )
            });
            self.events.push(event);
            if let Some(subscription) = self.subscriptions.get_mut(subject) {
                subscription.legs[0].tried = tried;
            }
            return Ok(LegDecision { reason: Reason::NoData, ..decision });
        };
        let previous = decision.member;
        self.transfer_subscription(previous, Some(member), decision.composite.is_none());
        let mut event = self.event(EventKind::Moved);
        let since = event.sequence;
        event.subject = Some(subject_arc);
        event.composite = decision.composite.clone();
        event.member = Some(member);
        event.previous = previous;
        event.reason = Some(Reason::Retry);
        event.move_reason = Some(MoveReason::NoDataRetry);
        self.events.push(event);
        let updated = LegDecision {
            member: Some(member),
            priority_group: Some(priority_group),
            reason: Reason::Retry,
            since: Some(since),
            ..decision
        };
        if let Some(subscription) = self.subscriptions.get_mut(subject) {
            subscription.legs[0] = Leg { decision: updated.clone(), tried };
        }
        Ok(updated)
    }

    /// Forgets every subscription and affinity (members keep their up/down state).
    pub fn reset(&mut self) {
        self.subscriptions.clear();
        self.affinities.clear();
        self.cache.clear();
        for member in &mut self.members {
            member.subscriptions = 0;
            member.assigned = 0;
        }
        let event = self.event(EventKind::Reset);
        self.events.push(event);
    }

    /// How `subject` is (or would be) routed by its primary source group, and why.
    pub fn explain(&mut self, subject: &str) -> Result<Explanation, RoutingError> {
        if let Some(subscription) = self.subscriptions.get(subject) {
            let leg = &subscription.legs[0].decision;
            let references = match &leg.composite {
                Some(c) => self.affinities.get(c).map_or(0, |a| a.references),
                None => subscription.references,
            };
            return Ok(Explanation {
                service: subscription.service,
                decision: current(leg),
                bound_reason: Some(leg.reason),
                subscribed: true,
                references,
            });
        }
        let (group, rule) = self.classify(subject)?.legs[0].clone();
        let service = self.groups[group.index()].service;
        let decision = self.decide(group, subject, rule, false);
        let affinity = decision.composite.as_ref().and_then(|c| self.affinities.get(c));
        Ok(Explanation {
            service,
            bound_reason: affinity.filter(|_| decision.reason == Reason::Sticky).map(|a| a.reason),
            references: affinity.map_or(0, |a| a.references),
            decision,
            subscribed: false,
        })
    }

    // ---- internals -----------------------------------------------------------------------

    fn event(&mut self, kind: EventKind) -> Event {
        self.sequence += 1;
        Event::new(self.sequence, kind)
    }

    fn classify(&mut self, subject: &str) -> Result<Classified, RoutingError> {
        if let Some(classified) = self.cache.get(subject) {
            return Ok(classified.clone());
        }
        let service = self
            .services
            .iter()
            .position(|service| service.include.iter().any(|p| p.is_match(subject)))
            .ok_or_else(|| RoutingError::NoService(subject.to_owned()))?;
        let service_entry = &self.services[service];
        if service_entry.groups.is_empty() {
            return Err(RoutingError::NoSourceGroup(service_entry.name.clone()));
        }
        let legs = service_entry
            .groups
            .iter()
            .map(|&group| {
                let rule = self.groups[group.index()].rules.iter().enumerate().find_map(|(index, rule)| {
                    rule.regex.capture(subject).map(|captured| (index, Arc::from(composite(&rule.key, captured))))
                });
                (group, rule)
            })
            .collect();
        let classified = Classified { service: ServiceId(service as u32), legs };
        if self.cache.len() >= CLASSIFICATION_CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.insert(Arc::from(subject), classified.clone());
        Ok(classified)
    }

    fn group_contains(&self, group: GroupId, member: MemberId) -> bool {
        self.groups[group.index()].priority_groups.iter().any(|g| g.contains(&member))
    }

    fn priority_of(&self, group: GroupId, member: MemberId) -> Option<usize> {
        self.groups[group.index()].priority_groups.iter().position(|g| g.contains(&member))
    }

    /// The sticky member of `rule`'s composite, else a fresh placement.
    fn decide(&mut self, group: GroupId, subject: &str, rule: Option<(usize, Arc<str>)>, commit: bool) -> LegDecision {
        let (rule_index, composite) = match rule {
            Some((index, composite)) => (Some(index), Some(composite)),
            None => (None, None),
        };
        if let Some(composite) = &composite {
            if let Some(affinity) = self.affinities.get(composite) {
                if let Some(member) = affinity.member {
                    if self.members[member.index()].up && self.group_contains(group, member) {
                        return LegDecision {
                            group,
                            member: Some(member),
                            priority_group: affinity.priority_group,
                            composite: Some(composite.clone()),
                            rule: rule_index,
                            reason: Reason::Sticky,
                            since: Some(affinity.since),
                        };
                    }
                }
            }
        }
        let key = composite.as_deref().unwrap_or(subject);
        let placed = self.place(group, key, composite.is_some(), &[], commit);
        LegDecision {
            group,
            member: placed.map(|p| p.0),
            priority_group: placed.map(|p| p.1),
            composite,
            rule: rule_index,
            reason: placed.map_or(Reason::Unavailable, |p| p.2),
            since: None,
        }
    }

    /// Chooses among the up members (minus `exclude`) of the first priority group that has any:
    /// the affinity hash for composites, else the group's policy (workload if the policy fails).
    fn place(
        &mut self,
        group: GroupId,
        key: &str,
        is_composite: bool,
        exclude: &[MemberId],
        commit: bool,
    ) -> Option<(MemberId, usize, Reason)> {
        let source_group = &self.groups[group.index()];
        let members = &self.members;
        let (priority_group, ids) = source_group.priority_groups.iter().enumerate().find_map(|(index, ids)| {
            let up: Vec<MemberId> =
                ids.iter().copied().filter(|m| members[m.index()].up && !exclude.contains(m)).collect();
            (!up.is_empty()).then_some((index, up))
        })?;
        let candidates: Vec<Candidate<'_>> = ids
            .iter()
            .map(|m| {
                let member = &members[m.index()];
                Candidate {
                    label: &member.label,
                    subscriptions: member.subscriptions,
                    assigned: member.assigned,
                    activation: member.activation,
                }
            })
            .collect();
        let request = Request { key, is_composite, candidates: &candidates };
        let source_group = &mut self.groups[group.index()];
        let mut failure = None;
        let (index, reason) = if is_composite && !source_group.policy.decides_composites() {
            (source_group.hash.place(key, &candidates).unwrap_or(0), Reason::Hashed)
        } else {
            let chosen = source_group.policy.select(&request).and_then(|index| {
                if index < candidates.len() {
                    Ok(index)
                } else {
                    Err(PolicyError(format!("answered candidate #{index} of {}", candidates.len())))
                }
            });
            match chosen {
                Ok(index) => {
                    if commit {
                        source_group.policy.selected(&request, index);
                    }
                    (index, source_group.policy.reason())
                }
                Err(error) => {
                    failure = Some(format!(
                        "routing policy {:?} failed for {key:?}: {error}; using the fallback \
                         policy workload",
                        source_group.policy.name()
                    ));
                    (Workload.select(&request).unwrap_or(0), Reason::Fallback)
                }
            }
        };
        drop(candidates);
        if let Some(message) = failure {
            let mut event = self.event(EventKind::PolicyError);
            event.composite = is_composite.then(|| Arc::from(key));
            event.subject = (!is_composite).then(|| Arc::from(key));
            event.message = Some(message);
            self.events.push(event);
        }
        let reason = if priority_group > 0 && reason != Reason::Fallback { Reason::Failover } else { reason };
        Some((ids[index], priority_group, reason))
    }

    fn bind(&mut self, subject: &Arc<str>, decision: &mut LegDecision) {
        let kind = if decision.member.is_some() { EventKind::Bound } else { EventKind::NoMemberAvailable };
        let mut event = self.event(kind);
        let sequence = event.sequence;
        event.subject = Some(subject.clone());
        event.composite = decision.composite.clone();
        event.member = decision.member;
        event.reason = Some(decision.reason);
        self.events.push(event);
        if let Some(member) = decision.member {
            self.members[member.index()].subscriptions += 1;
        }
        match &decision.composite {
            Some(composite) => match self.affinities.get_mut(composite) {
                Some(affinity) => {
                    affinity.references += 1;
                    if affinity.member.is_none() && decision.member.is_some() {
                        affinity.member = decision.member;
                        affinity.reason = decision.reason;
                        affinity.priority_group = decision.priority_group;
                        affinity.since = sequence;
                        if let Some(member) = decision.member {
                            self.members[member.index()].assigned += 1;
                        }
                    }
                }
                None => {
                    self.affinities.insert(
                        composite.clone(),
                        Affinity {
                            member: decision.member,
                            owner: decision.group,
                            references: 1,
                            since: sequence,
                            reason: decision.reason,
                            priority_group: decision.priority_group,
                        },
                    );
                    if let Some(member) = decision.member {
                        self.members[member.index()].assigned += 1;
                    }
                }
            },
            None => {
                if let Some(member) = decision.member {
                    self.members[member.index()].assigned += 1;
                }
            }
        }
        if decision.since.is_none() {
            decision.since = Some(sequence);
        }
    }

    fn release(&mut self, decision: &LegDecision) {
        if let Some(member) = decision.member {
            let member = &mut self.members[member.index()];
            member.subscriptions = member.subscriptions.saturating_sub(1);
        }
        let Some(composite) = &decision.composite else {
            if let Some(member) = decision.member {
                let member = &mut self.members[member.index()];
                member.assigned = member.assigned.saturating_sub(1);
            }
            return;
        };
        let Some(affinity) = self.affinities.get_mut(composite) else {
            return;
        };
        affinity.references = affinity.references.saturating_sub(1);
        if affinity.references > 0 {
            return;
        }
        let member = affinity.member;
        self.affinities.remove(composite);
        if let Some(member) = member {
            let entry = &mut self.members[member.index()];
            entry.assigned = entry.assigned.saturating_sub(1);
        }
        let mut event = self.event(EventKind::Forgotten);
        event.composite = Some(composite.clone());
        event.member = member;
        self.events.push(event);
    }

    /// Moves one subscription's count (and its key, without a composite) between members.
    fn transfer_subscription(&mut self, from: Option<MemberId>, to: Option<MemberId>, moves_key: bool) {
        if let Some(from) = from {
            let member = &mut self.members[from.index()];
            member.subscriptions = member.subscriptions.saturating_sub(1);
            if moves_key {
                member.assigned = member.assigned.saturating_sub(1);
            }
        }
        if let Some(to) = to {
            let member = &mut self.members[to.index()];
            member.subscriptions += 1;
            if moves_key {
                member.assigned += 1;
            }
        }
    }

    fn evacuate(&mut self, down: MemberId) {
        let mut composites: Vec<(u64, Arc<str>)> =
            self.affinities.iter().filter(|(_, a)| a.member == Some(down)).map(|(c, a)| (a.since, c.clone())).collect();
        composites.sort();
        for (_, composite) in composites {
            let owner = self.affinities[&composite].owner;
            let placed = self.place(owner, &composite, true, &[], true);
            let member = placed.map(|p| p.0);
            let kind = if member.is_some() { EventKind::Moved } else { EventKind::NoMemberAvailable };
            let mut event = self.event(kind);
            let sequence = event.sequence;
            event.composite = Some(composite.clone());
            event.member = member;
            event.previous = Some(down);
            event.reason = Some(placed.map_or(Reason::Unavailable, |p| p.2));
            event.move_reason = Some(MoveReason::MemberDown);
            self.events.push(event);
            if let Some(affinity) = self.affinities.get_mut(&composite) {
                affinity.member = member;
                affinity.since = sequence;
                affinity.reason = placed.map_or(Reason::Unavailable, |p| p.2);
                affinity.priority_group = placed.map(|p| p.1);
            }
            let entry = &mut self.members[down.index()];
            entry.assigned = entry.assigned.saturating_sub(1);
            if let Some(member) = member {
                self.members[member.index()].assigned += 1;
            }
        }
        self.rebind_legs(|leg| leg.member == Some(down), Some(MoveReason::MemberDown));
    }

    fn bind_waiting(&mut self) {
        self.rebind_legs(|leg| leg.member.is_none(), None);
    }

    /// Re-places every subscription leg selected by `filter`, in subscription order: a leg with
    /// a composite follows its affinity (placing the affinity first if it has no member).
    fn rebind_legs(&mut self, filter: impl Fn(&LegDecision) -> bool, why: Option<MoveReason>) {
        let mut subjects: Vec<(u64, Arc<str>)> = self
            .subscriptions
            .iter()
            .filter(|(_, s)| s.legs.iter().any(|leg| filter(&leg.decision)))
            .map(|(subject, s)| (s.order, subject.clone()))
            .collect();
        subjects.sort();
        for (_, subject) in subjects {
            let count = self.subscriptions[&subject].legs.len();
            for index in 0..count {
                let old = self.subscriptions[&subject].legs[index].decision.clone();
                if !filter(&old) {
                    continue;
                }
                let placed = match &old.composite {
                    Some(composite) => self.follow_affinity(old.group, composite),
                    None => self.place(old.group, &subject, false, &[], true),
                };
                if placed.is_none() && old.member.is_none() {
                    continue; // still waiting
                }
                let member = placed.map(|p| p.0);
                self.transfer_subscription(old.member, member, old.composite.is_none());
                let kind = match (why, member) {
                    (_, None) => EventKind::NoMemberAvailable,
                    (Some(_), Some(_)) => EventKind::Moved,
                    (None, Some(_)) => EventKind::Bound,
                };
                let reason = placed.map_or(Reason::Unavailable, |p| p.2);
                let mut event = self.event(kind);
                let sequence = event.sequence;
                event.subject = Some(subject.clone());
                event.composite = old.composite.clone();
                event.member = member;
                event.previous = old.member;
                event.reason = Some(reason);
                event.move_reason = why;
                self.events.push(event);
                if let Some(subscription) = self.subscriptions.get_mut(&subject) {
                    let leg = &mut subscription.legs[index];
                    leg.decision.member = member;
                    leg.decision.priority_group = placed.map(|p| p.1);
                    leg.decision.reason = reason;
                    leg.decision.since = Some(sequence);
                    leg.tried.clear();
                }
            }
        }
    }

    /// The member of `composite`'s affinity for a leg in `group`, placing the affinity if it
    /// has no (up) member yet.
    fn follow_affinity(&mut self, group: GroupId, composite: &Arc<str>) -> Option<(MemberId, usize, Reason)> {
        let current = self.affinities.get(composite).and_then(|a| a.member);
        if let Some(member) = current {
            if self.members[member.index()].up {
                let reason = self.affinities[composite].reason;
                if let Some(priority_group) = self.priority_of(group, member) {
                    return Some((member, priority_group, reason));
                }
                // Misconfiguration (same key, different members): place this leg on its own.
                return self.place(group, composite, true, &[], true);
            }
        }
        let placed = self.place(group, composite, true, &[], true)?;
        let mut event = self.event(EventKind::Bound);
        let sequence = event.sequence;
        event.composite = Some(composite.clone());
        event.member = Some(placed.0);
        event.reason = Some(placed.2);
        self.events.push(event);
        if let Some(affinity) = self.affinities.get_mut(composite) {
            affinity.member = Some(placed.0);
            affinity.reason = placed.2;
            affinity.priority_group = Some(placed.1);
            affinity.since = sequence;
        }
        self.members[placed.0.index()].assigned += 1;
        Some(placed)
    }
}

/// A remembered leg as `route` reports it now.
fn current(decision: &LegDecision) -> LegDecision {
    LegDecision {
        reason: if decision.member.is_some() { Reason::Sticky } else { Reason::Unavailable },
        ..decision.clone()
    }
}
