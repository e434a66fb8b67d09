//! Which master(s) a message belongs to (xmlBlaster's `I_MapMsgToMasterId`), and where this node
//! sends a subscription or a publish for it.

use super::ClusterModel;
use crate::routing::policy::{Candidate, Policy, Request};

/// What a [`MasterMapper`] says about a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// No domain: handled by the default master (this node, unless it does not accept default
    /// messages).
    NoDomain,
    /// The message belongs to this domain (an index of the model).
    Domain(usize),
    /// It names a domain the configuration does not know: accepted, queued until a master
    /// appears (xmlBlaster's "master unknown").
    UnknownDomain(String),
}

/// The plugin point that maps a message to its domain (xmlBlaster's `I_MapMsgToMasterId`).
pub trait MasterMapper: Send {
    /// Its configuration name (`master-mapper`).
    fn name(&self) -> &str;

    /// The domain of a message on `subject`, with the domain the publisher gave, if any.
    fn map(&self, model: &ClusterModel, subject: &str, domain: Option<&str>) -> Mapping;
}

/// The default mapper (xmlBlaster's `DomainToMaster`): an explicit domain wins, else the first
/// domain whose include-pattern matches the subject, else no domain.
#[derive(Clone, Copy, Debug, Default)]
pub struct DomainToMaster;

/// Configuration name of [`DomainToMaster`].
pub const DOMAIN_TO_MASTER: &str = "domain";

impl MasterMapper for DomainToMaster {
    fn name(&self) -> &str {
        DOMAIN_TO_MASTER
    }

    fn map(&self, model: &ClusterModel, subject: &str, domain: Option<&str>) -> Mapping {
        match domain.filter(|d| !d.is_empty()) {
            Some(name) => {
                model.domain_index(name).map_or_else(|| Mapping::UnknownDomain(name.to_owned()), Mapping::Domain)
            }
            None => model.domain_of(subject).map_or(Mapping::NoDomain, Mapping::Domain),
        }
    }
}

/// Where this node handles a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here: this node is its master (or the default master).
    Local,
    /// At node `node` (a master, an upstream node, or a node accepting other nodes' default
    /// messages).
    Node(usize),
    /// Nowhere yet: no master of the domain is known; publishes are queued.
    Unknown,
}

/// Where a read (subscribe) for `mapping` goes from this node: a master's domain is local;
/// a slave asks its parent, choosing among mirrored masters with `balancer` (a routing
/// policy: round robin by default) keyed by `subject`.
pub fn read_route(model: &ClusterModel, mapping: &Mapping, subject: &str, balancer: &mut dyn Policy) -> Route {
    let this = model.this();
    match *mapping {
        Mapping::NoDomain => default_route(model),
        Mapping::UnknownDomain(_) => Route::Unknown,
        Mapping::Domain(domain) => {
            let masters = model.masters(domain);
            if masters.contains(&this) {
                return Route::Local;
            }
            let upstream = model.node(this).upstream.iter().any(|(d, _)| d == model.domain_name(domain));
            if upstream || masters.len() <= 1 {
                return model.parent(this, domain).map_or(Route::Unknown, Route::Node);
            }
            Route::Node(masters[balance(model, masters, subject, balancer)])
        }
    }
}

/// Every node a write (publish, erase) for `mapping` goes to from this node: every master of
/// the domain (mirrored masters all get it) through this node's parent when it has an upstream.
pub fn write_routes(model: &ClusterModel, mapping: &Mapping) -> Vec<Route> {
    let this = model.this();
    match *mapping {
        Mapping::NoDomain => vec![default_route(model)],
        Mapping::UnknownDomain(_) => vec![Route::Unknown],
        Mapping::Domain(domain) => {
            let masters = model.masters(domain);
            if masters.is_empty() {
                return vec![Route::Unknown];
            }
            let upstream = model.node(this).upstream.iter().any(|(d, _)| d == model.domain_name(domain));
            if upstream {
                return model.parent(this, domain).map_or(vec![Route::Unknown], |p| vec![Route::Node(p)]);
            }
            let mut routes: Vec<Route> =
                masters.iter().map(|&m| if m == this { Route::Local } else { Route::Node(m) }).collect();
            routes.dedup();
            routes
        }
    }
}

/// A message without a domain: here when this node accepts default messages, else at the
/// first node accepting other nodes' default messages, else here anyway.
fn default_route(model: &ClusterModel) -> Route {
    let this = model.this();
    if model.node(this).accept_default {
        return Route::Local;
    }
    (0..model.node_count()).find(|&n| n != this && model.node(n).accept_other_default).map_or(Route::Local, Route::Node)
}

/// Index into `masters` the balancer chooses for `subject` (the first if it fails).
fn balance(model: &ClusterModel, masters: &[usize], subject: &str, balancer: &mut dyn Policy) -> usize {
    let candidates: Vec<Candidate<'_>> = masters
        .iter()
        .enumerate()
        .map(|(i, &m)| Candidate { label: &model.node(m).id, subscriptions: 0, assigned: 0, activation: i as u64 })
        .collect();
    let request = Request { key: subject, is_composite: false, candidates: &candidates };
    match balancer.select(&request) {
        Ok(index) if index < masters.len() => {
            balancer.selected(&request, index);
            index
        }
        _ => 0,
    }
}
