//! The public vocabulary of the routing tables: identifiers, errors, decisions, explanations.

use std::fmt;
use std::sync::Arc;

use super::events::{MoveReason, Reason};
use super::hash::Selection;
use super::policy::Policy;
use super::posix_regex::RegexError;

/// A member (peer), numbered in order of first appearance in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub(super) u32);

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
pub struct ServiceId(pub(super) u32);

impl ServiceId {
    /// Zero-based position in the table's service list.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The service at zero-based position `index` (see [`RoutingTable::service_count`](super::RoutingTable::service_count)).
    pub fn from_index(index: usize) -> Self {
        ServiceId(index as u32)
    }
}

/// A source group, in the order added (across all services).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub(super) u32);

impl GroupId {
    /// Zero-based position in the table's source-group list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a table operation failed.
#[derive(Debug)]
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
    /// The last move of the remembered binding (subscription or affinity) to its member, when it
    /// moved after it was first bound: why, and from which member when that is kept.
    pub moved: Option<Move>,
}

/// A remembered binding moved to another member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The member it moved from (kept for affinities: subjects with a composite).
    pub from: Option<MemberId>,
    /// Why it moved.
    pub why: MoveReason,
}
