//! Connection states between nodes (xmlBlaster's three): a node connects to another lazily, the
//! first time a request needs it.

use std::time::Duration;

use super::ClusterModel;
use crate::time::Instant;

/// The state of this node's connection to another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// The other node is heard (within the liveness timeout).
    LoggedIn,
    /// We have its address and are trying it (needed, not heard yet, or gone silent).
    Polling,
    /// We know the node but may not use it (this node itself, or refused by configuration).
    NotAllowed,
}

impl ConnectionState {
    /// Every state, in the order they are listed to users.
    pub const ALL: [ConnectionState; 3] =
        [ConnectionState::LoggedIn, ConnectionState::Polling, ConnectionState::NotAllowed];

    /// The name `affinity router status` shows.
    pub fn name(self) -> &'static str {
        match self {
            ConnectionState::LoggedIn => "logged-in",
            ConnectionState::Polling => "polling",
            ConnectionState::NotAllowed => "not-allowed",
        }
    }
}

/// Per configured node: its connection state (`None`: never needed yet), and when it was
/// last heard. Heartbeats from node ids not in the configuration are never let in (counted).
pub struct Connections {
    states: Vec<Option<(ConnectionState, Option<Instant>)>>,
    liveness_timeout: Duration,
    not_allowed: u64,
}

impl Connections {
    /// No connection yet to any of `model`'s nodes; this node itself is `NotAllowed`.
    pub fn new(model: &ClusterModel, liveness_timeout: Duration) -> Connections {
        let mut states = vec![None; model.node_count()];
        states[model.this()] = Some((ConnectionState::NotAllowed, None));
        Connections { states, liveness_timeout, not_allowed: 0 }
    }

    /// A request needs node `node`: `true` when the runtime must open a link to it now (the
    /// first time), the state becomes `Polling` until it is heard.
    pub fn need(&mut self, node: usize) -> bool {
        match self.states.get_mut(node) {
            Some(slot @ None) => {
                *slot = Some((ConnectionState::Polling, None));
                true
            }
            _ => false,
        }
    }

    /// A heartbeat (login) from node id `id` at `now`: its index when it is a configured node
    /// other than this one; `None` (counted `not_allowed`) for any other id.
    pub fn heard(&mut self, model: &ClusterModel, id: &str, now: Instant) -> Option<usize> {
        let node = model.node_index(id).filter(|&n| n != model.this());
        let Some(node) = node else {
            self.not_allowed += 1;
            return None;
        };
        self.states[node] = Some((ConnectionState::LoggedIn, Some(now)));
        Some(node)
    }

    /// Nodes logged in but silent for the liveness timeout go back to `Polling`; returns them.
    pub fn tick(&mut self, now: Instant) -> Vec<usize> {
        let mut lost = Vec::new();
        for (node, slot) in self.states.iter_mut().enumerate() {
            if let Some((state @ ConnectionState::LoggedIn, Some(heard))) = slot {
                if now.saturating_since(*heard) >= self.liveness_timeout {
                    *state = ConnectionState::Polling;
                    lost.push(node);
                }
            }
        }
        lost
    }

    /// The state of the connection to `node` (`None`: never needed).
    pub fn state(&self, node: usize) -> Option<ConnectionState> {
        self.states.get(node).copied().flatten().map(|(state, _)| state)
    }

    /// Logins refused because the node id is not configured (or is this node's).
    pub fn not_allowed(&self) -> u64 {
        self.not_allowed
    }
}
