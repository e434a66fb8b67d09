//! The faucet (seed 003, AMPS "on manifold affinity"), sans-IO: publishers enlist on a control
//! topic, each concrete subscribed topic matching the subscription-topic pattern is assigned to
//! an eligible publisher with the fewest assigned topics (ties: first activated), sticky until
//! the topic loses all interest or its publisher leaves; `no_handlers` when no publisher is
//! eligible; outstanding topics are assigned when one enlists. Events are counted exactly as
//! the seed describes for the `default` and `all` announcement modes.
//!
//! Patterns are POSIX EREs searched anywhere in the topic (the seed says PCRE; the examples'
//! patterns mean the same in both).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::routing::PosixRegex;

/// Most enlistments one source holds: the distinct coverage patterns the faucet keeps for a
/// publisher, the ENLISTs a router keeps before the source's first heartbeat, and the
/// enlistments a source restores after a move (one per coverage pattern is all it needs).
pub const MAX_ENLISTMENTS_PER_SOURCE: usize = 1024;

/// How many events the faucet announces (the seed's `Announcements`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Announcements {
    /// The minimum to start and stop publishing: first subscriber `assign`, last `unassign`,
    /// publisher loss only the replacement `assign`, one `no_handlers` per topic.
    Default,
    /// Every transition per subscriber, with the subscriber's name and connection id.
    All,
}

impl Announcements {
    /// Parses `default` or `all`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Announcements::Default),
            "all" => Some(Announcements::All),
            _ => None,
        }
    }

    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            Announcements::Default => "default",
            Announcements::All => "all",
        }
    }
}

/// A `faucet` block of the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaucetConfig {
    /// The control topic publishers enlist on and events are published to.
    pub control_topic: String,
    /// The subscription-topic pattern: every concrete topic it matches is assigned on its own.
    pub subscription_topic: String,
    /// How many events are announced.
    pub announcements: Announcements,
    /// The coverage option name (`udo_coverage`); when set, an enlistment must carry a valid
    /// coverage pattern to count, and a publisher only gets topics its coverage matches.
    pub coverage_option: Option<String>,
}

/// Why a faucet configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaucetConfigError(pub String);

impl fmt::Display for FaucetConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaucetConfigError {}

/// The seed's `AMPS_AFFINITY_ACTION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaucetAction {
    /// Responsibility for a topic given to a publisher.
    Assign,
    /// Responsibility removed from a publisher.
    Unassign,
    /// Interest exists but no publisher is eligible.
    NoHandlers,
}

impl FaucetAction {
    /// The event spelling (`assign`, `unassign`, `no_handlers`).
    pub fn name(self) -> &'static str {
        match self {
            FaucetAction::Assign => "assign",
            FaucetAction::Unassign => "unassign",
            FaucetAction::NoHandlers => "no_handlers",
        }
    }
}

/// A client as events name it: client name and connection id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Party {
    /// Connection id (the member id).
    pub id: u64,
    /// Client name.
    pub name: Arc<str>,
}

/// One announcement, with the seed's variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaucetEvent {
    /// `AMPS_AFFINITY_ACTION`.
    pub action: FaucetAction,
    /// `AMPS_TOPIC`.
    pub topic: Arc<str>,
    /// `AMPS_CLIENT_NAME` / `AMPS_CONNECTION_NAME`; `None` for `no_handlers`.
    pub publisher: Option<Party>,
    /// `AMPS_SUBSCRIBER_CLIENT_NAME` / `AMPS_SUBSCRIBER_CONNECTION_NAME`; only in `all` mode.
    pub subscriber: Option<Party>,
}

#[derive(serde::Serialize)]
struct EventJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    client_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection_name: Option<String>,
    topic: &'a str,
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscriber_client_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscriber_connection_name: Option<String>,
}

impl FaucetEvent {
    /// The JSON published on the control topic: the seed's fields, those the seed omits left out.
    pub fn to_json(&self) -> String {
        let json = EventJson {
            client_name: self.publisher.as_ref().map(|p| &*p.name),
            connection_name: self.publisher.as_ref().map(|p| connection_name(p.id)),
            topic: &self.topic,
            event: self.action.name(),
            subscriber_client_name: self.subscriber.as_ref().map(|p| &*p.name),
            subscriber_connection_name: self.subscriber.as_ref().map(|p| connection_name(p.id)),
        };
        serde_json::to_string(&json).unwrap_or_default()
    }
}

/// The connection id as events spell it (16 hex digits).
pub fn connection_name(id: u64) -> String {
    format!("{id:016x}")
}

/// A change of a topic's publisher, for the router (REQUEST to `to`, DISCARD to `from`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignmentChange {
    /// The topic.
    pub topic: Arc<str>,
    /// The publisher it leaves, if any.
    pub from: Option<u64>,
    /// The publisher it goes to, if any.
    pub to: Option<u64>,
}

/// Counters of the faucet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaucetCounters {
    /// Enlistments ignored (coverage missing, not a valid pattern, or a new pattern of a
    /// publisher holding [`MAX_ENLISTMENTS_PER_SOURCE`] already).
    pub enlistments_ignored: u64,
    /// Unsubscribes for topics the subscriber did not hold.
    pub unknown_unsubscribes: u64,
}

struct Publisher {
    party: Party,
    activation: u64,
    eligible: bool,
    coverage: Vec<PosixRegex>,
    assigned: u64,
}

/// What one enlistment does to its publisher's coverage patterns.
enum CoverageChange {
    /// Nothing to add: no coverage option, or a pattern the publisher holds already.
    Unchanged,
    /// A new valid pattern.
    Added(PosixRegex),
    /// The enlistment is ignored: no pattern, an invalid one, or one past
    /// [`MAX_ENLISTMENTS_PER_SOURCE`].
    Ignored,
}

struct Topic {
    order: u64,
    subscribers: Vec<Party>,
    publisher: Option<u64>,
}

/// The faucet state: see the [module documentation](self).
pub struct Faucet {
    config: FaucetConfig,
    pattern: PosixRegex,
    publishers: Vec<Publisher>,
    topics: HashMap<Arc<str>, Topic>,
    next_activation: u64,
    next_order: u64,
    events: Vec<FaucetEvent>,
    changes: Vec<AssignmentChange>,
    counters: FaucetCounters,
}

impl Faucet {
    /// A faucet for `config`; refuses an invalid subscription-topic pattern or an empty name.
    pub fn new(config: FaucetConfig) -> Result<Faucet, FaucetConfigError> {
        if config.control_topic.is_empty() {
            return Err(FaucetConfigError("faucet: control-topic is empty".into()));
        }
        let pattern = PosixRegex::new(&config.subscription_topic).map_err(|e| {
            FaucetConfigError(format!("faucet: subscription-topic {:?}: {}", config.subscription_topic, e.message))
        })?;
        if pattern.is_match(&config.control_topic) {
            return Err(FaucetConfigError(format!(
                "faucet: subscription-topic {:?} matches the control topic {:?}",
                config.subscription_topic, config.control_topic
            )));
        }
        Ok(Faucet {
            config,
            pattern,
            publishers: Vec::new(),
            topics: HashMap::new(),
            next_activation: 0,
            next_order: 0,
            events: Vec::new(),
            changes: Vec::new(),
            counters: FaucetCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FaucetConfig {
        &self.config
    }

    /// Whether `topic` is a faucet topic (matches the subscription-topic pattern).
    pub fn matches(&self, topic: &str) -> bool {
        topic != self.config.control_topic && self.pattern.is_match(topic)
    }

    /// Whether `id` enlisted (eligible or not).
    pub fn is_publisher(&self, id: u64) -> bool {
        self.publishers.iter().any(|p| p.party.id == id)
    }

    /// The enlisted publishers' ids, in activation order.
    pub fn publisher_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.publishers.iter().map(|p| p.party.id)
    }

    /// The publisher a topic is assigned to.
    pub fn assignment(&self, topic: &str) -> Option<u64> {
        self.topics.get(topic).and_then(|t| t.publisher)
    }

    /// Topics assigned to publisher `id`.
    pub fn assigned_count(&self, id: u64) -> u64 {
        self.publishers.iter().find(|p| p.party.id == id).map_or(0, |p| p.assigned)
    }

    /// How many coverage patterns publisher `id` holds (distinct, at most
    /// [`MAX_ENLISTMENTS_PER_SOURCE`]).
    pub fn coverage_count(&self, id: u64) -> usize {
        self.publishers.iter().find(|p| p.party.id == id).map_or(0, |p| p.coverage.len())
    }

    /// The counters.
    pub fn counters(&self) -> FaucetCounters {
        self.counters
    }

    /// Takes the announcements made since the last call.
    pub fn drain_events(&mut self) -> Vec<FaucetEvent> {
        std::mem::take(&mut self.events)
    }

    /// Takes the assignment changes made since the last call.
    pub fn drain_changes(&mut self) -> Vec<AssignmentChange> {
        std::mem::take(&mut self.changes)
    }

    /// One enlistment (a control subscription) of publisher `party`, with its coverage option
    /// value if it gave one. Returns whether the enlistment counts (a pattern the publisher
    /// holds already counts and is kept once). Outstanding topics are assigned afterwards.
    pub fn enlist(&mut self, party: Party, coverage: Option<&str>) -> bool {
        let pattern = match self.coverage_change(party.id, coverage) {
            CoverageChange::Unchanged => None,
            CoverageChange::Added(regex) => Some(regex),
            CoverageChange::Ignored => {
                self.counters.enlistments_ignored += 1;
                return false;
            }
        };
        let index = match self.publishers.iter().position(|p| p.party.id == party.id) {
            Some(index) => index,
            None => {
                self.publishers.push(Publisher {
                    party,
                    activation: self.next_activation,
                    eligible: false,
                    coverage: Vec::new(),
                    assigned: 0,
                });
                self.next_activation += 1;
                self.publishers.len() - 1
            }
        };
        let publisher = &mut self.publishers[index];
        publisher.eligible = true;
        publisher.coverage.extend(pattern);
        self.assign_outstanding();
        true
    }

    /// What an enlistment of publisher `id` with `coverage` does to its coverage. Compiles the
    /// pattern only when it is new: a repeated ENLIST keeps one copy of its pattern.
    fn coverage_change(&self, id: u64, coverage: Option<&str>) -> CoverageChange {
        if self.config.coverage_option.is_none() {
            return CoverageChange::Unchanged;
        }
        let Some(text) = coverage else { return CoverageChange::Ignored };
        let held = self.publishers.iter().find(|p| p.party.id == id).map_or(&[][..], |p| &p.coverage[..]);
        if held.iter().any(|regex| regex.pattern() == text) {
            return CoverageChange::Unchanged;
        }
        if held.len() >= MAX_ENLISTMENTS_PER_SOURCE {
            return CoverageChange::Ignored;
        }
        PosixRegex::new(text).map_or(CoverageChange::Ignored, CoverageChange::Added)
    }

    /// Publisher `id` left the control topic (or was lost): its topics are reassigned.
    pub fn remove_publisher(&mut self, id: u64) {
        let Some(index) = self.publishers.iter().position(|p| p.party.id == id) else {
            return;
        };
        let lost = self.publishers.remove(index);
        let mut topics: Vec<(u64, Arc<str>)> = self
            .topics
            .iter()
            .filter(|(_, t)| t.publisher == Some(id))
            .map(|(name, t)| (t.order, name.clone()))
            .collect();
        topics.sort();
        for (_, name) in topics {
            let replacement = self.choose(&name);
            let Some(topic) = self.topics.get_mut(&name) else { continue };
            topic.publisher = replacement;
            self.changes.push(AssignmentChange { topic: name.clone(), from: Some(id), to: replacement });
            let all = self.config.announcements == Announcements::All;
            if all {
                for subscriber in &topic.subscribers {
                    self.events.push(FaucetEvent {
                        action: FaucetAction::Unassign,
                        topic: name.clone(),
                        publisher: Some(lost.party.clone()),
                        subscriber: Some(subscriber.clone()),
                    });
                }
            }
            let publisher = replacement.and_then(|id| self.publishers.iter_mut().find(|p| p.party.id == id));
            let publisher = publisher.map(|p| {
                p.assigned += 1;
                p.party.clone()
            });
            let action = if publisher.is_some() { FaucetAction::Assign } else { FaucetAction::NoHandlers };
            if all {
                for subscriber in &topic.subscribers {
                    self.events.push(FaucetEvent {
                        action,
                        topic: name.clone(),
                        publisher: publisher.clone(),
                        subscriber: Some(subscriber.clone()),
                    });
                }
            } else {
                self.events.push(FaucetEvent { action, topic: name.clone(), publisher, subscriber: None });
            }
        }
    }

    /// `subscriber` subscribed to `topic` (which [`Faucet::matches`]).
    pub fn subscribe(&mut self, topic: &str, subscriber: Party) {
        let all = self.config.announcements == Announcements::All;
        let (name, first) = match self.topics.get_key_value(topic) {
            Some((name, _)) => (name.clone(), false),
            None => (Arc::from(topic), true),
        };
        if first {
            let publisher = self.choose(&name);
            self.topics.insert(name.clone(), Topic { order: self.next_order, subscribers: Vec::new(), publisher });
            self.next_order += 1;
            if let Some(id) = publisher {
                self.changes.push(AssignmentChange { topic: name.clone(), from: None, to: Some(id) });
                if let Some(p) = self.publishers.iter_mut().find(|p| p.party.id == id) {
                    p.assigned += 1;
                }
            }
        }
        let Some(entry) = self.topics.get_mut(&name) else { return };
        entry.subscribers.push(subscriber.clone());
        if !first && !all {
            return;
        }
        let publisher = entry.publisher.and_then(|id| self.publishers.iter().find(|p| p.party.id == id));
        let action = if publisher.is_some() { FaucetAction::Assign } else { FaucetAction::NoHandlers };
        self.events.push(FaucetEvent {
            action,
            topic: name,
            publisher: publisher.map(|p| p.party.clone()),
            subscriber: all.then_some(subscriber),
        });
    }

    /// `subscriber` dropped one subscription to `topic`. Returns false if it held none.
    pub fn unsubscribe(&mut self, topic: &str, subscriber: u64) -> bool {
        let all = self.config.announcements == Announcements::All;
        let Some((name, entry)) = self.topics.get_key_value(topic) else {
            self.counters.unknown_unsubscribes += 1;
            return false;
        };
        let name = name.clone();
        let Some(position) = entry.subscribers.iter().position(|s| s.id == subscriber) else {
            self.counters.unknown_unsubscribes += 1;
            return false;
        };
        let publisher = entry.publisher.and_then(|id| self.publishers.iter().find(|p| p.party.id == id));
        let publisher = publisher.map(|p| p.party.clone());
        let Some(entry) = self.topics.get_mut(&name) else { return false };
        let gone = entry.subscribers.remove(position);
        let last = entry.subscribers.is_empty();
        if let Some(publisher) = publisher {
            if all || last {
                self.events.push(FaucetEvent {
                    action: FaucetAction::Unassign,
                    topic: name.clone(),
                    publisher: Some(publisher.clone()),
                    subscriber: all.then_some(gone),
                });
            }
            if last {
                if let Some(p) = self.publishers.iter_mut().find(|p| p.party.id == publisher.id) {
                    p.assigned = p.assigned.saturating_sub(1);
                }
                self.changes.push(AssignmentChange { topic: name.clone(), from: Some(publisher.id), to: None });
            }
        }
        if last {
            self.topics.remove(&name);
        }
        true
    }

    /// Every topic `subscriber` subscribed to (for dropping a lost subscriber), in topic order.
    pub fn topics_of(&self, subscriber: u64) -> Vec<Arc<str>> {
        let mut found: Vec<(u64, Arc<str>, usize)> = self
            .topics
            .iter()
            .map(|(name, t)| (t.order, name.clone(), t.subscribers.iter().filter(|s| s.id == subscriber).count()))
            .filter(|(_, _, count)| *count > 0)
            .collect();
        found.sort();
        found.into_iter().flat_map(|(_, name, count)| std::iter::repeat_n(name, count)).collect()
    }

    fn covers(&self, publisher: &Publisher, topic: &str) -> bool {
        publisher.eligible
            && (self.config.coverage_option.is_none() || publisher.coverage.iter().any(|c| c.is_match(topic)))
    }

    /// The eligible publisher with the fewest assigned topics, ties by first activation.
    fn choose(&self, topic: &str) -> Option<u64> {
        self.publishers
            .iter()
            .filter(|p| self.covers(p, topic))
            .min_by_key(|p| (p.assigned, p.activation))
            .map(|p| p.party.id)
    }

    fn assign_outstanding(&mut self) {
        let mut outstanding: Vec<(u64, Arc<str>)> = self
            .topics
            .iter()
            .filter(|(_, t)| t.publisher.is_none())
            .map(|(name, t)| (t.order, name.clone()))
            .collect();
        outstanding.sort();
        let all = self.config.announcements == Announcements::All;
        for (_, name) in outstanding {
            let Some(id) = self.choose(&name) else { continue };
            let Some(publisher) = self.publishers.iter_mut().find(|p| p.party.id == id) else { continue };
            publisher.assigned += 1;
            let party = publisher.party.clone();
            let Some(topic) = self.topics.get_mut(&name) else { continue };
            topic.publisher = Some(id);
            self.changes.push(AssignmentChange { topic: name.clone(), from: None, to: Some(id) });
            if all {
                for subscriber in &topic.subscribers {
                    self.events.push(FaucetEvent {
                        action: FaucetAction::Assign,
                        topic: name.clone(),
                        publisher: Some(party.clone()),
                        subscriber: Some(subscriber.clone()),
                    });
                }
            } else {
                self.events.push(FaucetEvent {
                    action: FaucetAction::Assign,
                    topic: name.clone(),
                    publisher: Some(party),
                    subscriber: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests;
