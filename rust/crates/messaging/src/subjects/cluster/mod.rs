//! The cluster of routers, sans-IO (`docs/cluster.md`): master/slave per message domain as in
//! the xmlBlaster cluster, the decisions only; no socket, thread or clock here.
//!
//! * [`ClusterModel`] — the nodes and domains of the configuration's `add-cluster-node` /
//!   `add-domain` blocks (checked again here: unknown references, duplicate ids, a loop of
//!   `upstream`), strata and parents per domain.
//! * [`mapping`] — which master(s) a message belongs to: the [`MasterMapper`] plugin point
//!   (xmlBlaster's `I_MapMsgToMasterId`), default [`DomainToMaster`]; a message with no domain is
//!   handled locally (xmlBlaster's default master).
//! * The load balancer among mirrored masters is a routing [`Policy`] (xmlBlaster's
//!   `I_LoadBalancer`): `round-robin` by default, or any plugin the routing tables accept,
//!   through the same registry and entry points (`docs/policies.md`).
//! * [`connections`] — connection states to other nodes (`logged-in`, `polling`,
//!   `not-allowed`; an unknown node id is never let in), opened lazily.
//! * [`forward`] — publishes at a slave forwarded to the master, queued per master while it is
//!   unreachable or unknown, bounded in bytes (`FORWARD_WARNING`, back-pressure past the bound).
//! * [`cache`] — a slave's subscriptions at its parent: subscribed once, the image cached and
//!   served to later local subscribers, expired when unused.

pub mod cache;
pub mod connections;
pub mod forward;
pub mod mapping;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

pub use cache::{CacheAction, SlaveCache};
pub use connections::{ConnectionState, Connections};
pub use forward::{ForwardCounters, ForwardQueues, Forwarded, Notice, QueueEvent, QueueKey};
pub use mapping::{DomainToMaster, Mapping, MasterMapper};

use crate::routing::policy::Policy;
use crate::routing::PosixRegex;

/// Default load balancer among mirrored masters (a routing policy name).
pub const DEFAULT_LOAD_BALANCER: &str = "round-robin";
/// Default time a slave keeps a cached image nobody subscribes to.
pub const DEFAULT_CACHE_EXPIRY: Duration = Duration::from_secs(300);
/// Default bytes queued per unreachable (or unknown) master.
pub const DEFAULT_FORWARD_QUEUE_BYTES: usize = 64 << 20;
/// The subscriber name a node uses at another node (`node:avalon`): the router lets such a
/// subscriber in only when the id is one of its configured nodes (`not-allowed` otherwise).
pub const NODE_NAME_PREFIX: &str = "node:";
/// The source label of a node's PtP link at the next node (`ptp-link:avalon`).
pub const PTP_LINK_PREFIX: &str = "ptp-link:";
/// The source label under which a backup watches a node ahead of it (`node-watch:heron`).
pub const NODE_WATCH_PREFIX: &str = "node-watch:";
/// Every name prefix that claims to be another cluster node: a subscriber or a source so named
/// is let in only when the id after the prefix is one of the router's configured nodes.
pub const NODE_PREFIXES: [&str; 3] = [NODE_NAME_PREFIX, PTP_LINK_PREFIX, NODE_WATCH_PREFIX];
/// The system subject a node publishes its node info on is this prefix, the node id and
/// [`NODE_INFO_SUBJECT_SUFFIX`] (`__sys__cluster.node.info[heron]`, xmlBlaster's name): an
/// ordinary subject served by that node's router, so any subscriber at any node can follow it.
pub const NODE_INFO_SUBJECT_PREFIX: &str = "__sys__cluster.node.info[";
/// The end of a node info subject (after the node id).
pub const NODE_INFO_SUBJECT_SUFFIX: &str = "]";
/// The source label prefix of a cluster node's sources at its own router (`cluster.<DOMAIN>`,
/// one per domain it is a slave of): the router hands publishes of such a domain's subjects to
/// that source (to forward to the master) and lets only such sources send forward statuses.
pub const CLUSTER_SOURCE_PREFIX: &str = "cluster.";
/// The source label of a node that is a master of a domain with other (mirrored) masters, at
/// its own router: the router hands it a copy of every publish it relays from a local source
/// (not from another node), the origin's id first, for the node to forward to the other masters
/// (`docs/cluster.md`, "Mirrored masters kept in step"). `+` keeps it apart from any
/// `cluster.<DOMAIN>` label (a domain name has none).
pub const MIRROR_SOURCE_LABEL: &str = "cluster.+mirror";
/// Most nodes in one cluster.
pub const MAX_NODES: usize = 1024;
/// Most domains in one cluster.
pub const MAX_DOMAINS: usize = 4096;

/// Why a cluster configuration cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterError(pub String);

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

/// One `add-cluster-node` block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSpec {
    /// The node id (its login name at other nodes).
    pub id: String,
    /// Its channel (`aeron:udp?endpoint=host:port`).
    pub address: String,
    /// The domains it is master of (stratum 0).
    pub master_of: Vec<String>,
    /// `(domain, node)`: for this domain it asks that node instead of the master.
    pub upstream: Vec<(String, String)>,
    /// Who takes over its domains when it fails, in order.
    pub backups: Vec<String>,
    /// Handles messages without a domain itself (default true).
    pub accept_default: bool,
    /// Accepts other nodes' messages without a domain (default false).
    pub accept_other_default: bool,
}

/// One `add-domain` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainSpec {
    /// The domain name.
    pub name: String,
    /// POSIX EREs; a subject matching one belongs to the domain.
    pub include_patterns: Vec<String>,
}

/// The checked cluster: nodes, domains (patterns compiled), and which node this is.
pub struct ClusterModel {
    nodes: Vec<NodeSpec>,
    index: HashMap<String, usize>,
    domains: Vec<(String, Vec<PosixRegex>)>,
    /// Per node and domain: the parent asked (`None` for a master or a domain without one).
    parents: Vec<Vec<Option<usize>>>,
    /// Per domain: the master nodes, in configuration order.
    masters: Vec<Vec<usize>>,
    this: usize,
}

impl ClusterModel {
    /// Checks `nodes` and `domains` and makes the model for node `this`.
    pub fn new(nodes: Vec<NodeSpec>, domains: &[DomainSpec], this: &str) -> Result<ClusterModel, ClusterError> {
        let fail = |message: String| Err(ClusterError(message));
        if nodes.len() > MAX_NODES || domains.len() > MAX_DOMAINS {
            return fail(format!("at most {MAX_NODES} nodes and {MAX_DOMAINS} domains"));
        }
        let mut index = HashMap::new();
        for (i, node) in nodes.iter().enumerate() {
            if index.insert(node.id.clone(), i).is_some() {
                return fail(format!("node-id {} defined twice", node.id));
            }
        }
        let mut compiled = Vec::new();
        let mut domain_index = HashMap::new();
        for (i, domain) in domains.iter().enumerate() {
            if domain_index.insert(domain.name.as_str(), i).is_some() {
                return fail(format!("domain {} defined twice", domain.name));
            }
            let mut patterns = Vec::new();
            for pattern in &domain.include_patterns {
                match PosixRegex::new(pattern) {
                    Ok(regex) => patterns.push(regex),
                    Err(e) => return fail(format!("domain {}: include-pattern {pattern:?}: {e}", domain.name)),
                }
            }
            compiled.push((domain.name.clone(), patterns));
        }
        let mut masters = vec![Vec::new(); domains.len()];
        for (i, node) in nodes.iter().enumerate() {
            for domain in &node.master_of {
                let Some(&d) = domain_index.get(domain.as_str()) else {
                    return fail(format!("node {}: master-of {domain}: no such domain", node.id));
                };
                masters[d].push(i);
            }
            for backup in &node.backups {
                if !index.contains_key(backup) || backup == &node.id {
                    return fail(format!("node {}: backup-node {backup}: not another node", node.id));
                }
            }
        }
        let mut parents = vec![vec![None; domains.len()]; nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            for (d, _) in domains.iter().enumerate() {
                if masters[d].contains(&i) {
                    continue;
                }
                parents[i][d] = masters[d].first().copied();
            }
            for (domain, parent) in &node.upstream {
                let Some(&d) = domain_index.get(domain.as_str()) else {
                    return fail(format!("node {}: upstream {domain}: no such domain", node.id));
                };
                match index.get(parent) {
                    Some(&p) if p != i && !masters[d].contains(&i) => parents[i][d] = Some(p),
                    _ => return fail(format!("node {}: upstream {domain} {parent}: not another node", node.id)),
                }
            }
        }
        let Some(&this) = index.get(this) else {
            return fail(format!("node {this}: not a node of the configuration"));
        };
        let model = ClusterModel { nodes, index, domains: compiled, parents, masters, this };
        for d in 0..model.domains.len() {
            for node in 0..model.nodes.len() {
                let (mut current, mut steps) = (node, 0);
                while let Some(parent) = model.parents[current][d] {
                    current = parent;
                    steps += 1;
                    if steps > model.nodes.len() {
                        let (name, id) = (&model.domains[d].0, &model.nodes[node].id);
                        return fail(format!("upstream loop for {name} through {id}"));
                    }
                }
            }
        }
        Ok(model)
    }

    /// This node's index.
    pub fn this(&self) -> usize {
        self.this
    }

    /// Node `node`'s specification.
    pub fn node(&self, node: usize) -> &NodeSpec {
        &self.nodes[node]
    }

    /// The index of node `id`, if configured.
    pub fn node_index(&self, id: &str) -> Option<usize> {
        self.index.get(id).copied()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The index of domain `name`.
    pub fn domain_index(&self, name: &str) -> Option<usize> {
        self.domains.iter().position(|(n, _)| n == name)
    }

    /// Domain `domain`'s name.
    pub fn domain_name(&self, domain: usize) -> &str {
        &self.domains[domain].0
    }

    /// The first domain (configuration order) one of whose patterns matches `subject`.
    pub fn domain_of(&self, subject: &str) -> Option<usize> {
        self.domains.iter().position(|(_, patterns)| patterns.iter().any(|p| p.is_match(subject)))
    }

    /// The masters of `domain`, in configuration order (several: mirrored masters).
    pub fn masters(&self, domain: usize) -> &[usize] {
        &self.masters[domain]
    }

    /// The node `node` asks for `domain` (its upstream, else the first master); `None` for a
    /// master or a domain without one.
    pub fn parent(&self, node: usize, domain: usize) -> Option<usize> {
        self.parents[node][domain]
    }

    /// Distance of `node` from a master of `domain` (0: a master); `None` without a master
    /// reachable.
    pub fn stratum(&self, node: usize, domain: usize) -> Option<u32> {
        let (mut current, mut depth) = (node, 0u32);
        for _ in 0..=self.nodes.len() {
            if self.masters[domain].contains(&current) {
                return Some(depth);
            }
            current = self.parents[current][domain]?;
            depth += 1;
        }
        None
    }
}

/// The node info subject of node `id` (`__sys__cluster.node.info[id]`).
pub fn node_info_subject(id: &str) -> String {
    format!("{NODE_INFO_SUBJECT_PREFIX}{id}{NODE_INFO_SUBJECT_SUFFIX}")
}

/// The node id a node info subject names (`None` for any other subject).
pub fn node_info_node(subject: &str) -> Option<&str> {
    let id = subject.strip_prefix(NODE_INFO_SUBJECT_PREFIX)?.strip_suffix(NODE_INFO_SUBJECT_SUFFIX)?;
    (!id.is_empty()).then_some(id)
}

/// The default load balancer (a new instance of the `round-robin` routing policy).
pub fn default_load_balancer() -> Box<dyn Policy> {
    crate::routing::policy::builtin(DEFAULT_LOAD_BALANCER)
        .unwrap_or_else(|| Box::new(crate::routing::policy::RoundRobin::default()))
}
