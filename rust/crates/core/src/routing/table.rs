//! The routing table: members, data services, source groups, and the public operations.
//!
//! Placement, binding and moves live in `placement.rs`; per-subject and per-composite memory in
//! `subjects.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use super::events::{Event, EventKind, MoveReason, Reason};
use super::hash::{fnv1a64, Selection};
use super::policy::{AffinityHash, Policy};
use super::posix_regex::PosixRegex;
use super::subjects::{
    cached_bytes, Affinity, Classified, ClassifiedLeg, Composites, Leg, Lookup, Subjects, Subscription,
};
use super::types::{
    Explanation, GroupId, LegDecision, MemberId, Move, NoDataStatus, RoutingError, ServiceId, SourceGroupSpec,
};

/// Bytes the classifications of unsubscribed subjects may hold (subject names, composites they
/// interned, map buckets: `subjects::cached_bytes`); past it the cache starts over: every
/// unsubscribed subject is forgotten at once, and re-classified when seen again. Affinities
/// live in the subscriptions, not in the cache, so a re-classified subject finds its composite's
/// affinity (the same member while it is up). The cache holds at most this plus one entry.
/// Small under test, so eviction runs.
#[cfg(not(test))]
pub const CLASSIFICATION_CACHE_BYTES: usize = 64 << 20;
/// Under test: small, so eviction runs.
#[cfg(test)]
pub const CLASSIFICATION_CACHE_BYTES: usize = 16 << 10;

pub(super) struct Member {
    pub label: String,
    pub up: bool,
    pub activation: u64,
    pub subscriptions: u64,
    pub assigned: u64,
}

pub(super) struct Rule {
    pub key: String,
    pub regex: PosixRegex,
    /// `key:`, the beginning of every composite of this rule, and its FNV-1a state: placing a
    /// new composite hashes only the captured part ([`Selection::select_indexed_after`]).
    pub prefix: String,
    pub prefix_state: u64,
}

pub(super) struct SourceGroup {
    pub name: String,
    pub service: ServiceId,
    pub priority_groups: Vec<Vec<MemberId>>,
    pub rules: Vec<Rule>,
    pub hash: AffinityHash,
    pub policy: Box<dyn Policy>,
}

pub(super) struct Service {
    pub name: String,
    pub include: Vec<PosixRegex>,
    pub groups: Vec<GroupId>,
}

/// The routing tables of one process: see the [module documentation](super).
///
/// Members are up when first named; [`RoutingTable::set_member_up`] changes that. Affinities are
/// keyed by composite, and the composite embeds the affinity key, so source groups sharing an
/// affinity key share affinity memory.
pub struct RoutingTable {
    pub(super) members: Vec<Member>,
    pub(super) member_index: HashMap<String, MemberId>,
    pub(super) services: Vec<Service>,
    pub(super) groups: Vec<SourceGroup>,
    pub(super) composites: Composites,
    pub(super) subjects: Subjects,
    pub(super) events: Vec<Event>,
    pub(super) sequence: u64,
    pub(super) next_activation: u64,
    pub(super) next_order: u64,
    /// Reused buffer for building composites of new subjects.
    pub(super) scratch: String,
    /// Reused buffer for the up members of a priority group.
    pub(super) scratch_members: Vec<MemberId>,
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
            composites: Composites::default(),
            subjects: Subjects::default(),
            events: Vec::new(),
            sequence: 0,
            next_activation: 0,
            next_order: 0,
            scratch: String::new(),
            scratch_members: Vec::new(),
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
        self.forget_classifications();
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
            let prefix = format!("{key}:");
            let prefix_state = fnv1a64(prefix.as_bytes());
            rules.push(Rule { key: key.clone(), regex, prefix, prefix_state });
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
        self.forget_classifications();
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
        self.composites.find(composite).and_then(|id| self.composites.affinity(id)).and_then(|a| a.member)
    }

    /// Number of remembered affinities.
    pub fn affinity_count(&self) -> usize {
        self.composites.affinity_count()
    }

    /// Number of subscribed subjects.
    pub fn subscription_total(&self) -> usize {
        self.subjects.subscribed()
    }

    /// Takes the events reported since the last call.
    pub fn drain_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    // ---- routing -------------------------------------------------------------------------

    /// What [`RoutingTable::subscribe`] would answer for the primary (first) source group,
    /// without binding anything. The hot path: a subject seen before costs one hash-map probe
    /// (plus, with a composite, an index into the interned composites).
    pub fn route_primary(&mut self, subject: &str) -> Result<LegDecision, RoutingError> {
        let leg = match self.subjects.find(subject) {
            Some((Some(subscription), _)) => return Ok(current(subscription.primary.decision(&self.composites))),
            Some((None, Some(classified))) => classified.primary,
            _ => self.classify(subject)?.primary,
        };
        if let Some(decision) = self.sticky(leg) {
            return Ok(decision);
        }
        Ok(self.decide(leg, subject, false))
    }

    /// The member [`RoutingTable::route_primary`] would answer (`decision.member`), with the same
    /// effects (classification cache, policy errors) but no [`LegDecision`]: a sticky lookup
    /// clones no `Arc` and touches no composite name.
    #[inline]
    pub fn route_member(&mut self, subject: &str) -> Result<Option<MemberId>, RoutingError> {
        let leg = match self.subjects.find(subject) {
            Some((Some(subscription), _)) => return Ok(subscription.primary.member),
            Some((None, Some(classified))) => classified.primary,
            _ => self.classify(subject)?.primary,
        };
        if let Some(member) = self.sticky_member(leg) {
            return Ok(Some(member));
        }
        Ok(self.decide(leg, subject, false).member)
    }

    /// What [`RoutingTable::subscribe`] would answer, one decision per source group of the
    /// subject's data service, without binding anything.
    pub fn route(&mut self, subject: &str) -> Result<(ServiceId, Vec<LegDecision>), RoutingError> {
        if let Some(subscription) = self.subjects.subscription(subject) {
            let legs = subscription.legs().map(|leg| current(leg.decision(&self.composites))).collect();
            return Ok((subscription.service, legs));
        }
        let classified = self.classify(subject)?;
        let legs = classified.legs().map(|leg| self.decide(leg, subject, false)).collect();
        Ok((classified.service, legs))
    }

    /// Subscribes to `subject`: binds it in every source group of its data service (reference
    /// counted: a second subscribe to the same subject only counts).
    pub fn subscribe(&mut self, subject: &str) -> Result<(ServiceId, Vec<LegDecision>), RoutingError> {
        let mut decisions = Vec::new();
        let (service, _) = self.subscribe_into(subject, Some(&mut decisions))?;
        Ok((service, decisions))
    }

    /// [`RoutingTable::subscribe`] answering only the member of the primary source group
    /// (`decisions[0].member`), with the same effects and events; builds no decisions to return.
    pub fn subscribe_member(&mut self, subject: &str) -> Result<Option<MemberId>, RoutingError> {
        self.subscribe_into(subject, None).map(|(_, member)| member)
    }

    /// Makes room for `additional` more subjects (and their composites and events) ahead of a
    /// batch of subscriptions or lookups; a hint, it changes no answer.
    pub fn reserve(&mut self, additional: usize) {
        self.subjects.reserve(additional);
        self.composites.reserve(additional);
        self.events.reserve(additional);
    }

    /// The body of [`RoutingTable::subscribe`]: the data service and the primary leg's member;
    /// pushes the current decisions onto `decisions` when given.
    fn subscribe_into(
        &mut self,
        subject: &str,
        decisions: Option<&mut Vec<LegDecision>>,
    ) -> Result<(ServiceId, Option<MemberId>), RoutingError> {
        // One hash of the subject for its lookup and its insertion. A subject seen before shares
        // the map's copy of its name with the subscription and the events; a new one is
        // classified without caching (the subscription stores it).
        let hash = self.subjects.hash(subject);
        let (subject, classified) = match self.subjects.lookup(hash, subject) {
            Lookup::Subscribed(subscription) => {
                subscription.references += 1;
                if let Some(decisions) = decisions {
                    decisions.extend(subscription.legs().map(|leg| current(leg.decision(&self.composites))));
                }
                return Ok((subscription.service, subscription.primary.member));
            }
            Lookup::Cached(subject, classified) => (subject, classified),
            Lookup::Unknown => (Arc::from(subject), self.classify_uncached(subject)?),
        };
        let cached = match self.subjects.classified(&subject) {
            Some(classified) => cached_bytes(&subject, classified, &self.composites),
            None => 0,
        };
        let mut decisions = decisions;
        if let Some(decisions) = decisions.as_deref_mut() {
            decisions.reserve(classified.leg_count());
        }
        let primary = self.bind_new_leg(classified.primary, &subject, decisions.as_deref_mut());
        let mut others = None;
        if let Some(legs) = classified.others.as_deref() {
            let mut bound = Vec::with_capacity(legs.len());
            for &leg in legs {
                bound.push(self.bind_new_leg(leg, &subject, decisions.as_deref_mut()));
            }
            others = Some(Box::new(bound));
        }
        let order = self.next_order;
        self.next_order += 1;
        let service = classified.service;
        let member = primary.member;
        self.subjects.subscribe(
            hash,
            subject,
            classified,
            Subscription { order, references: 1, service, primary, others },
            cached,
        );
        Ok((service, member))
    }

    /// Decides and binds one leg of a new subscription to `subject` (pushing its decision onto
    /// `decisions` when given).
    fn bind_new_leg(
        &mut self,
        leg: ClassifiedLeg,
        subject: &Arc<str>,
        decisions: Option<&mut Vec<LegDecision>>,
    ) -> Leg {
        let (mut bound, sticky) = self.decide_leg(leg, subject);
        self.bind(subject, &mut bound, sticky);
        if let Some(decisions) = decisions {
            decisions.push(bound.decision(&self.composites));
        }
        bound
    }

    /// Drops one reference to `subject`; at zero the subscription is discarded and so is every
    /// affinity it was the last holder of ([`EventKind::Forgotten`]).
    pub fn unsubscribe(&mut self, subject: &str) -> Result<(), RoutingError> {
        let subscription =
            self.subjects.subscription_mut(subject).ok_or_else(|| RoutingError::NotSubscribed(subject.to_owned()))?;
        subscription.references -= 1;
        if subscription.references > 0 {
            return Ok(());
        }
        let Some(subscription) = self.subjects.unsubscribe(subject) else {
            return Ok(());
        };
        for leg in subscription.legs() {
            self.release(leg);
        }
        if let Some(classified) = self.subjects.classified(subject) {
            let bytes = cached_bytes(subject, classified, &self.composites);
            self.subjects.note_cached(bytes);
        }
        // After the legs are released: no composite id is held outside the maps here.
        if self.subjects.cached_bytes() > CLASSIFICATION_CACHE_BYTES {
            self.evict_classifications();
        }
        Ok(())
    }

    /// Bytes held by the cached classifications of unsubscribed subjects (at most
    /// [`CLASSIFICATION_CACHE_BYTES`] plus one entry).
    pub fn classification_cache_bytes(&self) -> usize {
        self.subjects.cached_bytes()
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
        let Some(subscription) = self.subjects.subscription(subject) else {
            return Err(RoutingError::NotSubscribed(subject.to_owned()));
        };
        let leg = &subscription.primary;
        let decision = leg.decision(&self.composites);
        let mut tried = leg.tried().to_vec();
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
            if let Some(subscription) = self.subjects.subscription_mut(subject) {
                subscription.primary.set_tried(tried);
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
        if let Some(subscription) = self.subjects.subscription_mut(subject) {
            let leg = &mut subscription.primary;
            leg.member = Some(member);
            leg.priority_group = Some(priority_group as u32);
            leg.reason = Reason::Retry;
            leg.since = since;
            leg.set_tried(tried);
        }
        Ok(updated)
    }

    /// Forgets every subscription and affinity (members keep their up/down state).
    pub fn reset(&mut self) {
        self.subjects.clear();
        self.composites.clear();
        for member in &mut self.members {
            member.subscriptions = 0;
            member.assigned = 0;
        }
        let event = self.event(EventKind::Reset);
        self.events.push(event);
    }

    /// How `subject` is (or would be) routed by its primary source group, and why.
    pub fn explain(&mut self, subject: &str) -> Result<Explanation, RoutingError> {
        if let Some(subscription) = self.subjects.subscription(subject) {
            let leg = &subscription.primary;
            let references = match leg.composite() {
                Some(id) => self.composites.affinity(id).map_or(0, |a| a.references),
                None => subscription.references,
            };
            let of_leg = leg.moved.map(|why| Move { from: None, why });
            let moved = match leg.composite() {
                Some(id) => self.composites.affinity(id).and_then(|a| a.moved).or(of_leg),
                None => of_leg,
            };
            return Ok(Explanation {
                service: subscription.service,
                decision: current(leg.decision(&self.composites)),
                bound_reason: Some(leg.reason),
                subscribed: true,
                references,
                moved,
            });
        }
        let leg = self.classify(subject)?.primary;
        let service = self.groups[leg.group.index()].service;
        let decision = self.decide(leg, subject, false);
        let affinity = leg.rule().and_then(|(_, id)| self.composites.affinity(id));
        Ok(Explanation {
            service,
            bound_reason: affinity.filter(|_| decision.reason == Reason::Sticky).map(|a| a.reason),
            moved: affinity.filter(|_| decision.reason == Reason::Sticky).and_then(|a| a.moved),
            references: affinity.map_or(0, |a| a.references),
            decision,
            subscribed: false,
        })
    }

    // ---- internals -----------------------------------------------------------------------

    pub(super) fn event(&mut self, kind: EventKind) -> Event {
        self.sequence += 1;
        Event::new(self.sequence, kind)
    }

    /// The data service and per-source-group rule matches of an unsubscribed subject, cached.
    fn classify(&mut self, subject: &str) -> Result<Classified, RoutingError> {
        if let Some(classified) = self.subjects.classified(subject) {
            return Ok(classified.clone());
        }
        let classified = self.classify_uncached(subject)?;
        let bytes = cached_bytes(subject, &classified, &self.composites);
        self.subjects.cache(subject, classified.clone(), bytes);
        Ok(classified)
    }

    /// Classifies a subject the cache does not hold; the caller stores the result.
    fn classify_uncached(&mut self, subject: &str) -> Result<Classified, RoutingError> {
        // Evict before interning: eviction frees composites no cached classification names.
        if self.subjects.cached_bytes() >= CLASSIFICATION_CACHE_BYTES {
            self.evict_classifications();
        }
        let service = self
            .services
            .iter()
            .position(|service| service.include.iter().any(|p| p.is_match(subject)))
            .ok_or_else(|| RoutingError::NoService(subject.to_owned()))?;
        let service_entry = &self.services[service];
        let Some((&primary, others)) = service_entry.groups.split_first() else {
            return Err(RoutingError::NoSourceGroup(service_entry.name.clone()));
        };
        let groups = &self.groups;
        let composites = &mut self.composites;
        let scratch = &mut self.scratch;
        let mut classify_leg = |group: GroupId| {
            let rule = groups[group.index()].rules.iter().enumerate().find_map(|(index, rule)| {
                rule.regex.capture(subject).map(|captured| {
                    // The composite `affinity_key:captured` (`hash::composite`), without allocating.
                    scratch.clear();
                    scratch.push_str(&rule.key);
                    scratch.push(':');
                    scratch.push_str(captured);
                    (index as u32, composites.intern(scratch))
                })
            });
            ClassifiedLeg::new(group, rule)
        };
        let primary = classify_leg(primary);
        let others = (!others.is_empty()).then(|| Box::new(others.iter().map(|&group| classify_leg(group)).collect()));
        Ok(Classified { service: ServiceId(service as u32), primary, others })
    }

    /// Forgets every unsubscribed subject and frees the composites only they named (the
    /// cache's eviction; subscriptions and affinities stay).
    fn evict_classifications(&mut self) {
        self.subjects.evict_unsubscribed();
        self.composites.collect(self.subjects.referenced_composites());
    }

    /// Drops every cached classification (the configuration changed).
    fn forget_classifications(&mut self) {
        self.subjects.forget_classifications();
        self.composites.collect(self.subjects.referenced_composites());
    }

    /// The member of [`RoutingTable::sticky`]'s decision, without building it.
    #[inline]
    fn sticky_member(&self, leg: ClassifiedLeg) -> Option<MemberId> {
        let (_, id) = leg.rule()?;
        let member = self.composites.member(id)?;
        (self.members[member.index()].up && self.group_contains(leg.group, member)).then_some(member)
    }

    /// The affinity of `leg`'s composite when it has an up member of the leg's source group
    /// (its `member` is then set).
    #[inline]
    pub(super) fn sticky_affinity(&self, leg: ClassifiedLeg) -> Option<&Affinity> {
        let (_, id) = leg.rule()?;
        let affinity = self.composites.affinity(id)?;
        let member = affinity.member?;
        (self.members[member.index()].up && self.group_contains(leg.group, member)).then_some(affinity)
    }

    /// The decision for `leg` when its composite has an affinity to an up member of the leg's
    /// source group: no allocation, no hashing.
    #[inline]
    pub(super) fn sticky(&self, leg: ClassifiedLeg) -> Option<LegDecision> {
        let (rule, id) = leg.rule()?;
        let affinity = self.sticky_affinity(leg)?;
        Some(LegDecision {
            group: leg.group,
            member: affinity.member,
            priority_group: affinity.priority_group.map(|p| p as usize),
            composite: Some(self.composites.name(id).clone()),
            rule: Some(rule as usize),
            reason: Reason::Sticky,
            since: Some(affinity.since),
        })
    }
}

/// A remembered leg as `route` reports it now.
fn current(decision: LegDecision) -> LegDecision {
    LegDecision { reason: if decision.member.is_some() { Reason::Sticky } else { Reason::Unavailable }, ..decision }
}
