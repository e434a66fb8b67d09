//! What the routing tables report: binds, moves, forgets, unavailability, liveness changes.
//!
//! The tables append [`Event`]s to a queue that the caller drains
//! ([`crate::routing::RoutingTable::drain_events`]); each carries a sequence number that also
//! serves as the table's notion of "since when" (the tables never read a clock).

use std::sync::Arc;

use super::MemberId;

/// Why a member was chosen for a subject or a composite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A remembered affinity (or an existing subscription) decided.
    Sticky,
    /// The affinity hash chose among the up members of the first priority group.
    Hashed,
    /// The first priority group had no up member: a later group served (hash or policy).
    Failover,
    /// Fallback policy `workload`: fewest current subscriptions.
    Workload,
    /// Fallback policy `least-assigned`: fewest assigned keys.
    LeastAssigned,
    /// Fallback policy `round-robin`.
    RoundRobin,
    /// A policy plugin chose.
    Policy,
    /// A policy plugin failed; the `workload` policy chose instead.
    Fallback,
    /// A NODATA answer ended the request (authoritative, or every member was tried).
    NoData,
    /// A non-authoritative NODATA answer: the request was routed to another member.
    Retry,
    /// No member was up.
    Unavailable,
}

impl Reason {
    /// The spelling used by the Python API and the logs.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Sticky => "sticky",
            Reason::Hashed => "hashed",
            Reason::Failover => "failover",
            Reason::Workload => "workload",
            Reason::LeastAssigned => "least-assigned",
            Reason::RoundRobin => "round-robin",
            Reason::Policy => "policy",
            Reason::Fallback => "fallback",
            Reason::NoData => "nodata",
            Reason::Retry => "retry",
            Reason::Unavailable => "unavailable",
        }
    }
}

/// Why a subscription or an affinity moved to another member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveReason {
    /// Its member went down; the same selection ran over the survivors.
    MemberDown,
    /// A non-authoritative NODATA answer sent the request to another member.
    NoDataRetry,
    /// An explicit rebalance (reserved: the tables never rebalance on their own, recovery moves
    /// nothing back).
    Rebalance,
}

impl MoveReason {
    /// The spelling used by the Python API and the logs.
    pub fn name(self) -> &'static str {
        match self {
            MoveReason::MemberDown => "member-down",
            MoveReason::NoDataRetry => "nodata-retry",
            MoveReason::Rebalance => "rebalance",
        }
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A subscription was bound to a member (for an affinity subject: to its composite's member).
    Bound,
    /// A subscription (`subject` set) or an affinity (`subject` unset) moved to `member`.
    Moved,
    /// The last subscription holding `composite` was discarded: the affinity is forgotten.
    Forgotten,
    /// No member of the source group is up; the subscription waits for one.
    NoMemberAvailable,
    /// A member came up (nothing moves back to it).
    MemberUp,
    /// A member went down (its subscriptions and affinities moved: see the `Moved` events).
    MemberDown,
    /// A NODATA answer was reported for `subject` by `member`.
    NoData,
    /// A policy plugin raised or answered an unknown member; the fallback policy decided.
    PolicyError,
    /// The table was reset: every subscription and affinity forgotten.
    Reset,
}

impl EventKind {
    /// The spelling used by the Python API.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Bound => "bound",
            EventKind::Moved => "moved",
            EventKind::Forgotten => "forgotten",
            EventKind::NoMemberAvailable => "no-member-available",
            EventKind::MemberUp => "member-up",
            EventKind::MemberDown => "member-down",
            EventKind::NoData => "nodata",
            EventKind::PolicyError => "policy-error",
            EventKind::Reset => "reset",
        }
    }
}

/// One thing the routing tables did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Strictly increasing per table, starting at 1.
    pub sequence: u64,
    /// What happened.
    pub kind: EventKind,
    /// The subject concerned, if any.
    pub subject: Option<Arc<str>>,
    /// The composite (`affinity_key:captured`) concerned, if any.
    pub composite: Option<Arc<str>>,
    /// The member now serving (or the member the event is about).
    pub member: Option<MemberId>,
    /// For `Moved`: the member it moved from.
    pub previous: Option<MemberId>,
    /// How `member` was chosen (`Bound`, `Moved`), or the NODATA outcome.
    pub reason: Option<Reason>,
    /// For `Moved`: why.
    pub move_reason: Option<MoveReason>,
    /// For `PolicyError` and `NoData`: a human-readable detail.
    pub message: Option<String>,
}

impl Event {
    /// An event of `kind` with every optional field unset.
    pub fn new(sequence: u64, kind: EventKind) -> Self {
        Event {
            sequence,
            kind,
            subject: None,
            composite: None,
            member: None,
            previous: None,
            reason: None,
            move_reason: None,
            message: None,
        }
    }
}
