//! Placing, binding and moving: how the table chooses members and keeps its counts and events.

use std::sync::Arc;

use super::events::{EventKind, MoveReason, Reason};
use super::policy::{Candidate, Policy, PolicyError, Request, Workload};
use super::subjects::{Affinity, ClassifiedLeg, CompositeId, Leg};
use super::table::{Member, RoutingTable, SourceGroup};
use super::types::{GroupId, LegDecision, MemberId, Move};

/// A placement: the member, its zero-based priority group and why.
pub(super) type Placed = (MemberId, usize, Reason);

impl RoutingTable {
    pub(super) fn group_contains(&self, group: GroupId, member: MemberId) -> bool {
        self.groups[group.index()].priority_groups.iter().any(|g| g.contains(&member))
    }

    fn priority_of(&self, group: GroupId, member: MemberId) -> Option<usize> {
        self.groups[group.index()].priority_groups.iter().position(|g| g.contains(&member))
    }

    /// The sticky member of the leg's composite, else a fresh placement.
    pub(super) fn decide(&mut self, leg: ClassifiedLeg, subject: &str, commit: bool) -> LegDecision {
        if let Some(decision) = self.sticky(leg) {
            return decision;
        }
        let composite = leg.rule().map(|(_, id)| self.composites.name(id).clone());
        let key = composite.as_deref().unwrap_or(subject);
        let placed = self.place(leg.group, key, composite.is_some(), &[], commit);
        LegDecision {
            group: leg.group,
            member: placed.map(|p| p.0),
            priority_group: placed.map(|p| p.1),
            composite,
            rule: leg.rule().map(|(rule, _)| rule as usize),
            reason: placed.map_or(Reason::Unavailable, |p| p.2),
            since: None,
        }
    }

    /// Chooses among the up members (minus `exclude`) of the first priority group that has any:
    /// the affinity hash for composites, else the group's policy (workload if the policy fails).
    pub(super) fn place(
        &mut self,
        group: GroupId,
        key: &str,
        is_composite: bool,
        exclude: &[MemberId],
        commit: bool,
    ) -> Option<Placed> {
        let mut ids = std::mem::take(&mut self.scratch_members);
        let (placed, failure) =
            choose(&mut self.groups, &self.members, &mut ids, group, None, key, is_composite, exclude, commit);
        ids.clear();
        self.scratch_members = ids;
        if let Some(message) = failure {
            self.policy_error(Arc::from(key), is_composite, message);
        }
        placed
    }

    /// [`RoutingTable::place`] for the interned composite `id` that rule `rule` of `group`
    /// produced (nothing excluded), reading its name in its slot: a new subject's placement
    /// clones no `Arc` (an atomic increment and decrement) to hold the name, and hashes only
    /// the captured part of it.
    pub(super) fn place_composite(
        &mut self,
        group: GroupId,
        rule: u32,
        id: CompositeId,
        commit: bool,
    ) -> Option<Placed> {
        let mut ids = std::mem::take(&mut self.scratch_members);
        let key = self.composites.name(id);
        let (placed, failure) =
            choose(&mut self.groups, &self.members, &mut ids, group, Some(rule), key, true, &[], commit);
        ids.clear();
        self.scratch_members = ids;
        if let Some(message) = failure {
            self.policy_error(self.composites.name(id).clone(), true, message);
        }
        placed
    }

    /// Reports that a policy failed for `key` and the fallback decided.
    fn policy_error(&mut self, key: Arc<str>, is_composite: bool, message: String) {
        let mut event = self.event(EventKind::PolicyError);
        if is_composite {
            event.composite = Some(key);
        } else {
            event.subject = Some(key);
        }
        event.message = Some(message);
        self.events.push(event);
    }

    /// The leg of a new subscription for `leg` (its `since` still unset), and whether it
    /// follows a sticky affinity ([`RoutingTable::decide`] without building a [`LegDecision`]).
    pub(super) fn decide_leg(&mut self, leg: ClassifiedLeg, subject: &str) -> (Leg, bool) {
        let mut bound = Leg::new(leg);
        if let Some(affinity) = self.sticky_affinity(leg) {
            bound.member = affinity.member;
            bound.priority_group = affinity.priority_group;
            bound.reason = Reason::Sticky;
            bound.since = affinity.since;
            return (bound, true);
        }
        let placed = match leg.rule() {
            Some((rule, id)) => self.place_composite(leg.group, rule, id, true),
            None => self.place(leg.group, subject, false, &[], true),
        };
        if let Some((member, priority_group, reason)) = placed {
            bound.member = Some(member);
            bound.priority_group = Some(priority_group as u32);
            bound.reason = reason;
        }
        (bound, false)
    }

    /// Binds the new leg `leg` of `subject`'s subscription: event, counts, affinity; sets the
    /// leg's `since` unless it follows a `sticky` affinity (which keeps the affinity's).
    pub(super) fn bind(&mut self, subject: &Arc<str>, leg: &mut Leg, sticky: bool) {
        let kind = if leg.member.is_some() { EventKind::Bound } else { EventKind::NoMemberAvailable };
        let mut event = self.event(kind);
        let sequence = event.sequence;
        event.subject = Some(subject.clone());
        event.composite = leg.composite().map(|id| self.composites.name(id).clone());
        event.member = leg.member;
        event.reason = Some(leg.reason);
        self.events.push(event);
        let decision = &*leg;
        let composite = leg.composite();
        if let Some(member) = decision.member {
            self.members[member.index()].subscriptions += 1;
        }
        match composite {
            Some(id) => {
                // Checked first, not `if let ... else`: the guard borrows the composites until
                // the end of the whole statement.
                if self.composites.affinity(id).is_some() {
                    let mut affinity = self.composites.affinity_mut(id).expect("has an affinity");
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
                } else {
                    self.composites.insert_affinity(
                        id,
                        Affinity {
                            member: decision.member,
                            owner: decision.group(),
                            references: 1,
                            since: sequence,
                            reason: decision.reason,
                            priority_group: decision.priority_group,
                            moved: None,
                        },
                    );
                    if let Some(member) = decision.member {
                        self.members[member.index()].assigned += 1;
                    }
                }
            }
            None => {
                if let Some(member) = decision.member {
                    self.members[member.index()].assigned += 1;
                }
            }
        }
        if !sticky {
            leg.since = sequence;
        }
    }

    pub(super) fn release(&mut self, leg: &Leg) {
        let decision = leg;
        if let Some(member) = decision.member {
            let member = &mut self.members[member.index()];
            member.subscriptions = member.subscriptions.saturating_sub(1);
        }
        let Some(id) = leg.composite() else {
            if let Some(member) = decision.member {
                let member = &mut self.members[member.index()];
                member.assigned = member.assigned.saturating_sub(1);
            }
            return;
        };
        let Some(mut affinity) = self.composites.affinity_mut(id) else {
            return;
        };
        affinity.references = affinity.references.saturating_sub(1);
        let references = affinity.references;
        drop(affinity);
        if references > 0 {
            return;
        }
        let member = self.composites.remove_affinity(id).and_then(|a| a.member);
        if let Some(member) = member {
            let entry = &mut self.members[member.index()];
            entry.assigned = entry.assigned.saturating_sub(1);
        }
        let mut event = self.event(EventKind::Forgotten);
        event.composite = Some(self.composites.name(id).clone());
        event.member = member;
        self.events.push(event);
    }

    /// Moves one subscription's count (and its key, without a composite) between members.
    pub(super) fn transfer_subscription(&mut self, from: Option<MemberId>, to: Option<MemberId>, moves_key: bool) {
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

    pub(super) fn evacuate(&mut self, down: MemberId) {
        let mut composites: Vec<(u64, Arc<str>, CompositeId)> = self
            .composites
            .affinities()
            .filter(|(_, a)| a.member == Some(down))
            .map(|(id, a)| (a.since, self.composites.name(id).clone(), id))
            .collect();
        composites.sort();
        for (_, composite, id) in composites {
            let Some(owner) = self.composites.affinity(id).map(|a| a.owner) else {
                continue;
            };
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
            if let Some(mut affinity) = self.composites.affinity_mut(id) {
                affinity.member = member;
                affinity.since = sequence;
                affinity.reason = placed.map_or(Reason::Unavailable, |p| p.2);
                affinity.priority_group = placed.map(|p| p.1 as u32);
                affinity.moved = Some(Move { from: Some(down), why: MoveReason::MemberDown });
            }
            let entry = &mut self.members[down.index()];
            entry.assigned = entry.assigned.saturating_sub(1);
            if let Some(member) = member {
                self.members[member.index()].assigned += 1;
            }
        }
        self.rebind_legs(|leg| leg.member == Some(down), Some(MoveReason::MemberDown));
    }

    pub(super) fn bind_waiting(&mut self) {
        self.rebind_legs(|leg| leg.member.is_none(), None);
    }

    /// Re-places every subscription leg selected by `filter`, in subscription order: a leg with
    /// a composite follows its affinity (placing the affinity first if it has no member).
    fn rebind_legs(&mut self, filter: impl Fn(&Leg) -> bool, why: Option<MoveReason>) {
        let mut subjects: Vec<(u64, Arc<str>)> = self
            .subjects
            .subscriptions()
            .filter(|(_, s)| s.legs().any(&filter))
            .map(|(subject, s)| (s.order, subject.clone()))
            .collect();
        subjects.sort();
        for (_, subject) in subjects {
            let count = self.subjects.subscription(&subject).map_or(0, |s| s.leg_count());
            for index in 0..count {
                let Some(leg) = self.subjects.subscription(&subject).and_then(|s| s.leg(index)) else {
                    continue;
                };
                if !filter(leg) {
                    continue;
                }
                let (group, previous, composite) = (leg.group(), leg.member, leg.composite());
                let placed = match composite {
                    Some(id) => self.follow_affinity(group, id),
                    None => self.place(group, &subject, false, &[], true),
                };
                if placed.is_none() && previous.is_none() {
                    continue; // still waiting
                }
                let member = placed.map(|p| p.0);
                self.transfer_subscription(previous, member, composite.is_none());
                let kind = match (why, member) {
                    (_, None) => EventKind::NoMemberAvailable,
                    (Some(_), Some(_)) => EventKind::Moved,
                    (None, Some(_)) => EventKind::Bound,
                };
                let reason = placed.map_or(Reason::Unavailable, |p| p.2);
                let mut event = self.event(kind);
                let sequence = event.sequence;
                event.subject = Some(subject.clone());
                event.composite = composite.map(|id| self.composites.name(id).clone());
                event.member = member;
                event.previous = previous;
                event.reason = Some(reason);
                event.move_reason = why;
                self.events.push(event);
                if let Some(leg) = self.subjects.subscription_mut(&subject).and_then(|s| s.leg_mut(index)) {
                    leg.member = member;
                    leg.priority_group = placed.map(|p| p.1 as u32);
                    leg.reason = reason;
                    leg.since = sequence;
                    if why.is_some() && previous.is_some() {
                        leg.moved = why;
                    }
                    leg.set_tried(Vec::new());
                }
            }
        }
    }

    /// The member of the composite's affinity for a leg in `group`, placing the affinity if it
    /// has no (up) member yet.
    fn follow_affinity(&mut self, group: GroupId, id: CompositeId) -> Option<Placed> {
        let composite = self.composites.name(id).clone();
        let current = self.composites.affinity(id).and_then(|a| a.member);
        if let Some(member) = current {
            if self.members[member.index()].up {
                let reason = self.composites.affinity(id).map_or(Reason::Sticky, |a| a.reason);
                if let Some(priority_group) = self.priority_of(group, member) {
                    return Some((member, priority_group, reason));
                }
                // Misconfiguration (same key, different members): place this leg on its own.
                return self.place(group, &composite, true, &[], true);
            }
        }
        let placed = self.place(group, &composite, true, &[], true)?;
        let mut event = self.event(EventKind::Bound);
        let sequence = event.sequence;
        event.composite = Some(composite);
        event.member = Some(placed.0);
        event.reason = Some(placed.2);
        self.events.push(event);
        if let Some(mut affinity) = self.composites.affinity_mut(id) {
            affinity.member = Some(placed.0);
            affinity.reason = placed.2;
            affinity.priority_group = Some(placed.1 as u32);
            affinity.since = sequence;
        }
        self.members[placed.0.index()].assigned += 1;
        Some(placed)
    }
}

/// The placement of `key` in source group `group` ([`RoutingTable::place`]) and, when the
/// group's policy failed and the fallback decided, the message of the policy-error event to
/// report. A function of the fields it needs, not a method: the key may be a composite's name
/// borrowed from the table's own slots.
#[allow(clippy::too_many_arguments)] // the table's fields, split for the borrow checker
fn choose(
    groups: &mut [SourceGroup],
    members: &[Member],
    ids: &mut Vec<MemberId>,
    group: GroupId,
    rule: Option<u32>,
    key: &str,
    is_composite: bool,
    exclude: &[MemberId],
    commit: bool,
) -> (Option<Placed>, Option<String>) {
    let source_group = &groups[group.index()];
    let Some(priority_group) = source_group.priority_groups.iter().enumerate().find_map(|(index, group_ids)| {
        ids.clear();
        ids.extend(group_ids.iter().copied().filter(|m| members[m.index()].up && !exclude.contains(m)));
        (!ids.is_empty()).then_some(index)
    }) else {
        return (None, None);
    };
    if is_composite && !source_group.policy.decides_composites() {
        // The affinity hash needs only the labels: no candidate list is built. A composite of
        // a known rule begins with the rule's `key:`, whose hash state is kept.
        let selection = source_group.hash.selection;
        let label = |i: usize| members[ids[i].index()].label.as_str();
        let prefixed = rule
            .and_then(|rule| source_group.rules.get(rule as usize))
            .and_then(|rule| key.strip_prefix(rule.prefix.as_str()).map(|rest| (rule.prefix_state, rest)));
        let index = match prefixed {
            Some((state, rest)) => selection.select_indexed_after(state, rest, key, ids.len(), label),
            None => selection.select_indexed(key, ids.len(), label),
        }
        .unwrap_or(0);
        let reason = if priority_group > 0 { Reason::Failover } else { Reason::Hashed };
        return (Some((ids[index], priority_group, reason)), None);
    }
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
    let source_group = &mut groups[group.index()];
    let mut failure = None;
    let chosen = source_group.policy.select(&request).and_then(|index| {
        if index < candidates.len() {
            Ok(index)
        } else {
            Err(PolicyError(format!("answered candidate #{index} of {}", candidates.len())))
        }
    });
    let (index, reason) = match chosen {
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
    };
    let reason = if priority_group > 0 && reason != Reason::Fallback { Reason::Failover } else { reason };
    (Some((ids[index], priority_group, reason)), failure)
}
