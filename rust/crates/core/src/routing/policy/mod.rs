//! Routing policies: one small trait, one file per strategy.
//!
//! A policy picks one of the up members of a priority group (the candidates, in label order).
//! Affinity subjects are placed by [`AffinityHash`] unless the source group's policy
//! [`Policy::decides_composites`] (plugins do); every other subject is placed by the source
//! group's fallback policy (`workload` by default). The tables cache every decision: a policy
//! is consulted once per new subject or composite, never per message.

mod affinity_hash;
mod least_assigned;
mod round_robin;
mod workload;

use std::fmt;

pub use affinity_hash::AffinityHash;
pub use least_assigned::LeastAssigned;
pub use round_robin::RoundRobin;
pub use workload::Workload;

use super::Reason;

/// One up member a policy may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The member's label.
    pub label: &'a str,
    /// Subscriptions it currently serves.
    pub subscriptions: u64,
    /// Keys (affinities and non-affinity subjects) currently assigned to it.
    pub assigned: u64,
    /// Order in which members first became up (0 first).
    pub activation: u64,
}

/// What a policy is asked.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The composite (`affinity_key:captured`) for an affinity subject, else the subject.
    pub key: &'a str,
    /// Whether `key` is a composite.
    pub is_composite: bool,
    /// The up members of the first priority group that has any, in label order; never empty.
    pub candidates: &'a [Candidate<'a>],
}

/// A policy could not decide (a plugin raised or answered a member that is not a candidate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError(pub String);

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PolicyError {}

/// A routing strategy.
pub trait Policy: Send + Sync {
    /// The configuration spelling (`workload`, `round-robin`, a plugin's name, ...).
    fn name(&self) -> &str;

    /// The reason reported for a member this policy chose.
    fn reason(&self) -> Reason;

    /// Index into `request.candidates` of the chosen member.
    fn select(&self, request: &Request<'_>) -> Result<usize, PolicyError>;

    /// Called when a choice of [`Policy::select`] was bound (not for dry-run routes), so
    /// stateful policies such as round-robin advance only on real binds.
    fn selected(&mut self, _request: &Request<'_>, _index: usize) {}

    /// Whether this policy also places affinity composites instead of the affinity hash
    /// (plugins do; built-in fallback policies do not).
    fn decides_composites(&self) -> bool {
        false
    }
}

/// Makes a new instance of a built-in policy.
pub type PolicyConstructor = fn() -> Box<dyn Policy>;

/// The registry of built-in fallback policies: configuration name and constructor, in
/// documentation order. The one list: the Python package and the configuration checks read
/// the names from here (`affinity._affinity.BUILTIN_POLICIES`).
pub const BUILTIN_POLICIES: [(&str, PolicyConstructor); 3] =
    [("workload", workload), ("least-assigned", least_assigned), ("round-robin", round_robin)];

fn workload() -> Box<dyn Policy> {
    Box::new(Workload)
}

fn least_assigned() -> Box<dyn Policy> {
    Box::new(LeastAssigned)
}

fn round_robin() -> Box<dyn Policy> {
    Box::new(RoundRobin::default())
}

/// The names of the built-in fallback policies, in registry order.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN_POLICIES.iter().map(|(name, _)| *name)
}

/// A new instance of the built-in fallback policy `name`, if there is one.
pub fn builtin(name: &str) -> Option<Box<dyn Policy>> {
    BUILTIN_POLICIES.iter().find(|(known, _)| *known == name).map(|(_, make)| make())
}

/// Index of the candidate with the smallest `key`, the first in label order on a tie.
fn minimum_by<K: Ord>(candidates: &[Candidate<'_>], key: impl Fn(&Candidate<'_>) -> K) -> usize {
    let mut best = 0;
    for index in 1..candidates.len() {
        if key(&candidates[index]) < key(&candidates[best]) {
            best = index;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates() -> Vec<Candidate<'static>> {
        vec![
            Candidate { label: "a", subscriptions: 3, assigned: 1, activation: 2 },
            Candidate { label: "b", subscriptions: 1, assigned: 1, activation: 0 },
            Candidate { label: "c", subscriptions: 1, assigned: 4, activation: 1 },
        ]
    }

    fn request<'a>(candidates: &'a [Candidate<'a>]) -> Request<'a> {
        Request { key: "/X", is_composite: false, candidates }
    }

    #[test]
    fn workload_picks_fewest_subscriptions_first_label_on_tie() {
        let c = candidates();
        assert_eq!(Workload.select(&request(&c)), Ok(1));
    }

    #[test]
    fn least_assigned_breaks_ties_by_activation_order() {
        let c = candidates();
        assert_eq!(LeastAssigned.select(&request(&c)), Ok(1));
        let mut c = candidates();
        c[1].activation = 5;
        assert_eq!(LeastAssigned.select(&request(&c)), Ok(0));
    }

    #[test]
    fn round_robin_advances_only_on_bind() {
        let c = candidates();
        let mut policy = RoundRobin::default();
        let r = request(&c);
        assert_eq!(policy.select(&r), Ok(0));
        assert_eq!(policy.select(&r), Ok(0));
        policy.selected(&r, 0);
        assert_eq!(policy.select(&r), Ok(1));
        policy.selected(&r, 1);
        policy.selected(&r, 2);
        assert_eq!(policy.select(&r), Ok(0));
    }

    #[test]
    fn every_registered_policy_is_constructed_under_its_name() {
        for name in builtin_names() {
            assert_eq!(builtin(name).unwrap().name(), name);
        }
        assert_eq!(builtin_names().count(), 3);
        assert!(builtin("nope").is_none());
    }
}
