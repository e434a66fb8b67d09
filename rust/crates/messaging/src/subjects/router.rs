//! The router state machine, sans-IO: subscribe / unsubscribe requests in, a routing-table
//! decision, REQUEST / DISCARD to peers, every update relayed to every subscriber of its
//! subject; peer failure (control-plane liveness) moves subjects by the tables' rules and
//! re-requests them, subscribers get a STATUS then fresh data; NODATA under source affinity is
//! authoritative. Faucet topics go to the [`Faucet`] instead of the tables.
//!
//! The router heartbeats its peers: every subscriber and source it hears gets an ALIVE record
//! every [alive interval](RouterCore::with_alive_interval), saying how many subscriptions and
//! enlistments it holds for that peer (`codec::alive_payload`), and [`RouterCore::stopping`] tells
//! every peer heard or registered that it stops (with an optional forward channel), so they can
//! move to another router (`subjects::failover`).
//!
//! Inputs: [`RouterCore::on_message`] (records from the listen channel), [`RouterCore::on_heartbeat`]
//! (control plane), [`RouterCore::tick`] (time). Outputs: records queued per destination in the
//! [`Outbox`], and [`LogEntry`]s for the log. No socket, thread or clock here.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::cluster::{CLUSTER_SOURCE_PREFIX, MIRROR_SOURCE_LABEL, NODE_PREFIXES};
use super::codec::{
    alive_payload, check_endpoint, emit_unchecked, split_domain, split_origin, with_origin, RecordKind, Records,
    SubjectRecord, ALIVE_SUBJECT, ANY_CONTROL_TOPIC, FLAG_COVERAGE, FLAG_DOMAIN, FLAG_ERASE, FLAG_IMAGE,
    FLAG_NODATA_NOTFOUND, FLAG_NODATA_UNAVAILABLE, FLAG_PUBLISH, FLAG_REFUSED, FLAG_STATUS, FLAG_STOPPING, FLAG_UPDATE,
};
use super::faucet::{Faucet, FaucetEvent, Party, MAX_ENLISTMENTS_PER_SOURCE};
use crate::control::{Heartbeat, HeartbeatOutcome, MemberView, Role};
use crate::routing::{Event, EventKind, FastMap, MemberId, NoDataStatus, Reason, RoutingTable};
use crate::time::Instant;

/// Most log entries kept for the application to drain; older ones are dropped (counted).
pub const MAX_PENDING_LOG: usize = 65_536;
/// Members silent for this many liveness timeouts are forgotten by the view.
pub const FORGET_AFTER_TIMEOUTS: u32 = 5;
/// Most subscribers one router tracks (a SUBSCRIBE from a new id past it is refused, reported).
pub const MAX_SUBSCRIBERS: usize = 65_536;
/// Most subjects one subscriber may hold (a SUBSCRIBE past it is refused, reported).
pub const MAX_SUBJECTS_PER_SUBSCRIBER: usize = 65_536;
/// Most subjects one router holds (a SUBSCRIBE to a new subject past it is refused, reported).
pub const MAX_SUBJECTS: usize = 1 << 20;
/// Most refusal reports pending for ids that are not registered subscribers (their reply
/// inbox is kept for a liveness timeout, so the report can be sent); past it a refusal is
/// only counted. Bounds what a burst of forged SUBSCRIBEs can make the router send.
pub const MAX_REFUSAL_REPLIES: usize = 256;

/// Allocation an outbox buffer keeps between rounds (a larger one is freed once drained).
pub const OUTBOX_RETAINED_CAPACITY: usize = 64 << 10;

/// Records queued per destination member id, packed back to back; the runtime sends each
/// buffer as one or more transport messages.
#[derive(Default)]
pub struct Outbox {
    buffers: FastMap<u64, Vec<u8>>,
    dirty: Vec<u64>,
}

impl Outbox {
    #[inline]
    fn buffer(&mut self, to: u64) -> &mut Vec<u8> {
        let buffer = self.buffers.entry(to).or_default();
        if buffer.is_empty() {
            self.dirty.push(to);
        }
        buffer
    }

    fn push(&mut self, to: u64, kind: RecordKind, flags: u16, sender: u64, subject: &str, payload: &[u8]) {
        emit_unchecked(self.buffer(to), kind, flags, sender, subject, payload);
    }

    /// The destinations with queued records.
    pub fn destinations(&self) -> impl Iterator<Item = u64> + '_ {
        self.dirty.iter().copied()
    }

    /// Whether anything is queued.
    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty()
    }

    /// Hands every non-empty buffer to `send(destination, bytes)` and empties it (the
    /// allocation is kept for the next round, up to [`OUTBOX_RETAINED_CAPACITY`]).
    pub fn drain(&mut self, mut send: impl FnMut(u64, &[u8])) {
        for to in std::mem::take(&mut self.dirty) {
            if let Some(buffer) = self.buffers.get_mut(&to) {
                send(to, buffer);
                if buffer.capacity() > OUTBOX_RETAINED_CAPACITY {
                    *buffer = Vec::new();
                } else {
                    buffer.clear();
                }
            }
        }
    }

    /// How many destinations have a buffer (queued records or a kept allocation).
    #[cfg(test)]
    fn buffer_count(&self) -> usize {
        self.buffers.len()
    }

    /// Forgets a destination's buffer.
    fn remove(&mut self, to: u64) {
        self.buffers.remove(&to);
        self.dirty.retain(|&d| d != to);
    }

    /// Forgets the buffers of every destination `reachable` says no (records queued for them
    /// included: there is nowhere to send them).
    fn forget_unless(&mut self, reachable: impl Fn(u64) -> bool) {
        self.buffers.retain(|&to, _| reachable(to));
        let buffers = &self.buffers;
        self.dirty.retain(|to| buffers.contains_key(to));
    }
}

/// Something to log, in order.
#[derive(Clone, Debug)]
pub enum LogEntry {
    /// A routing-table event (the seed's bound / request lines, moves with their reason, ...).
    Routing(Event),
    /// A faucet announcement (also published on the control topic as JSON).
    Faucet(FaucetEvent),
    /// A source (peer) joined or was lost: label, member id.
    SourceUp(Arc<str>, u64),
    /// A source was lost (liveness) or left.
    SourceDown(Arc<str>, u64),
    /// A source was not let in: label, member id, why (its label claims a cluster node that is
    /// not configured: `not-allowed`; its heartbeat's endpoint is not `ip:port`).
    SourceRefused(Arc<str>, u64, Arc<str>),
    /// A subscriber was dropped because the router's backlogs were over their budget and its
    /// backlog was the largest: name, member id, the bytes its backlog held.
    SubscriberEvicted(Arc<str>, u64, usize),
}

/// Counters of hostile, stale or refused input; every one is also ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterCounters {
    /// Transport messages holding a malformed record (the rest of the message is dropped).
    pub malformed: u64,
    /// Well-formed records of a kind the router never accepts (REQUEST, DISCARD) or from the
    /// wrong party (DATA from a non-source, ENLIST with no faucet, bad SUBSCRIBE payload or
    /// reply endpoint, an ENLIST past [`MAX_ENLISTMENTS_PER_SOURCE`] before its source is
    /// heard), and heartbeats whose endpoint is not `ip:port`.
    pub refused: u64,
    /// DATA for a subject nobody subscribes to, or from a source that does not serve it.
    pub stale_data: u64,
    /// UNSUBSCRIBEs for a subscription the subscriber does not hold.
    pub unknown_unsubscribes: u64,
    /// SUBSCRIBEs for subjects no data service covers (answered NODATA notfound).
    pub no_service: u64,
    /// Heartbeats from another namespace.
    pub foreign: u64,
    /// Log entries dropped because nobody drained them.
    pub log_dropped: u64,
    /// Updates relayed (one per subscriber delivery).
    pub relayed: u64,
    /// New subjects routed.
    pub routed: u64,
    /// SUBSCRIBEs refused by a bound ([`MAX_SUBSCRIBERS`], [`MAX_SUBJECTS_PER_SUBSCRIBER`],
    /// [`MAX_SUBJECTS`]); each is reported to its subscriber (DATA STATUS|REFUSED) while at
    /// most [`MAX_REFUSAL_REPLIES`] reports to unregistered ids are pending.
    pub refused_subscribes: u64,
    /// SUBSCRIBEs for a subject the subscriber already holds (ignored: one relay per
    /// subscriber and subject).
    pub duplicate_subscribes: u64,
    /// Subscribers dropped because the backlogs were over their budget
    /// ([`RouterCore::evict_subscriber`]).
    pub evicted_subscribers: u64,
    /// SUBSCRIBEs and heartbeats from a party claiming to be a cluster node (a subscriber or a
    /// source named with one of [`NODE_PREFIXES`], e.g. `node:<id>`) whose id is not one of
    /// this router's configured other nodes (`not-allowed`: a SUBSCRIBE is refused and told to
    /// its sender; a source is not let in, and logged when first heard).
    pub not_allowed: u64,
}

struct SubjectState {
    subscribers: Vec<u64>,
    /// Members currently requested (one per source group leg that has one).
    serving: Vec<MemberId>,
    faucet: bool,
    /// The last image or NODATA (flags, payload), replayed to later subscribers.
    image: Option<(u16, Vec<u8>)>,
}

struct SubscriberInfo {
    endpoint: Arc<str>,
    name: Arc<str>,
    registered: Instant,
    /// The subjects held: a set, so a duplicate SUBSCRIBE changes nothing.
    subjects: FastMap<Arc<str>, ()>,
}

struct SourceInfo {
    label: Arc<str>,
    endpoint: Arc<str>,
    member: Option<MemberId>,
}

/// The router: see the [module documentation](self).
pub struct RouterCore {
    id: u64,
    table: RoutingTable,
    faucet: Option<Faucet>,
    view: MemberView,
    /// Unkeyed fast hashing, as in the routing tables (see `docs/subjects.md`, limits).
    subjects: FastMap<Arc<str>, SubjectState>,
    subscribers: FastMap<u64, SubscriberInfo>,
    sources: HashMap<u64, SourceInfo>,
    /// Per table member: the live source serving that label.
    member_source: Vec<Option<u64>>,
    /// ENLISTs heard before their source's first heartbeat: when, and the distinct coverage
    /// values (at most [`MAX_ENLISTMENTS_PER_SOURCE`] per source).
    pending_enlist: HashMap<u64, (Instant, Vec<Option<String>>)>,
    /// Reply inboxes of unregistered ids a refusal is reported to, and when it was refused
    /// (at most [`MAX_REFUSAL_REPLIES`], each kept for a liveness timeout).
    refusal_replies: FastMap<u64, (Arc<str>, Instant)>,
    outbox: Outbox,
    log: VecDeque<LogEntry>,
    counters: RouterCounters,
    scratch: Vec<u8>,
    /// Every subscriber and source heard (and accepted by the bounded member view): its inbox
    /// and when it was last heard; forgotten after a liveness timeout or a LEAVING heartbeat.
    peers: FastMap<u64, (Arc<str>, Instant)>,
    /// How often each of `peers` gets an ALIVE (`None`: never).
    alive_interval: Option<Duration>,
    last_alive: Option<Instant>,
    /// Whether an endpoint (a peer's, a refusal reply inbox) was forgotten since the outbox
    /// was last rid of the buffers of destinations without one ([`RouterCore::tick`]).
    endpoints_forgotten: bool,
    /// The node ids other cluster nodes may subscribe as (`None`: this router is no cluster
    /// node, and refuses every node).
    cluster_nodes: Option<Vec<String>>,
    /// The cluster node's source labelled [`MIRROR_SOURCE_LABEL`], when one is live: local
    /// publishes relayed here go to it too (the node forwards them to the other masters).
    mirror_source: Option<u64>,
}

impl RouterCore {
    /// A router with member id `id` over `table` (every member starts down until its source
    /// is heard) and an optional faucet; peers are live while heard within `liveness_timeout`.
    pub fn new(id: u64, mut table: RoutingTable, faucet: Option<Faucet>, liveness_timeout: Duration) -> RouterCore {
        let labels: Vec<String> = table.member_ids().map(|m| table.label(m).to_owned()).collect();
        for label in &labels {
            let _ = table.set_member_up(label, false);
        }
        table.drain_events();
        let member_source = vec![None; labels.len()];
        RouterCore {
            id,
            table,
            faucet,
            view: MemberView::new(id, super::fingerprint(), liveness_timeout),
            subjects: FastMap::default(),
            subscribers: FastMap::default(),
            sources: HashMap::new(),
            member_source,
            pending_enlist: HashMap::new(),
            refusal_replies: FastMap::default(),
            outbox: Outbox::default(),
            log: VecDeque::new(),
            counters: RouterCounters::default(),
            scratch: Vec::new(),
            peers: FastMap::default(),
            alive_interval: None,
            last_alive: None,
            endpoints_forgotten: false,
            cluster_nodes: None,
            mirror_source: None,
        }
    }

    /// Makes this router a cluster node that lets in subscriptions from the other nodes
    /// `nodes` (their node ids, this node's own excluded): a subscriber or a source named with
    /// one of [`NODE_PREFIXES`] (`node:<id>`, ...) and any other id is refused `not-allowed`
    /// (counted).
    pub fn with_cluster_nodes(mut self, nodes: Vec<String>) -> RouterCore {
        self.cluster_nodes = Some(nodes);
        self
    }

    /// Replaces the node ids let in (a reloaded cluster configuration): later subscriptions
    /// from a node no longer listed are refused `not-allowed`; what it holds already stays.
    pub fn set_cluster_nodes(&mut self, nodes: Vec<String>) {
        self.cluster_nodes = Some(nodes);
    }

    /// Why a subscriber or a source named `name` may not be let in here (a name claiming a
    /// cluster node, one of [`NODE_PREFIXES`], whose id is not configured), or `None`.
    fn node_refusal(&self, name: &str) -> Option<String> {
        let node = NODE_PREFIXES.iter().find_map(|prefix| name.strip_prefix(prefix))?;
        match &self.cluster_nodes {
            Some(nodes) if nodes.iter().any(|n| n == node) => None,
            Some(_) => Some(format!("not-allowed: node {node:?} is not a configured node of this cluster")),
            None => Some(format!("not-allowed: node {node:?}: this router is not a cluster node")),
        }
    }

    /// Sends every peer heard an ALIVE every `interval` (from [`RouterCore::tick`]), so
    /// subscribers and sources can tell the router is gone, or restarted (a new id).
    pub fn with_alive_interval(mut self, interval: Duration) -> RouterCore {
        self.alive_interval = Some(interval);
        self
    }

    /// Says to every peer heard that this router stops (ALIVE with [`FLAG_STOPPING`]), with
    /// `forward`, the channel of the router they should move to, if any.
    pub fn stopping(&mut self, forward: Option<&str>) {
        let payload = forward.unwrap_or("").as_bytes();
        for id in self.member_ids() {
            self.outbox.push(id, RecordKind::Alive, FLAG_STOPPING, self.id, ALIVE_SUBJECT, payload);
        }
    }

    /// How many subscriptions and faucet enlistments (one per enlisted source) this router
    /// holds for peer `id`: what its ALIVE records tell it ([`alive_payload`]).
    fn held_for(&self, id: u64) -> u32 {
        let subjects = self.subscribers.get(&id).map_or(0, |s| s.subjects.len());
        let enlisted = usize::from(self.faucet.as_ref().is_some_and(|f| f.is_publisher(id)));
        u32::try_from(subjects + enlisted).unwrap_or(u32::MAX)
    }

    /// Number of subscribers and sources heard (each gets ALIVE records).
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Every member a stopping notice goes to: those heard, and the subscribers and sources
    /// registered before their first heartbeat was heard (a SUBSCRIBE carries its inbox), in
    /// id order. (The periodic ALIVE goes to those heard only: SUBSCRIBEs from ids that never
    /// heartbeat must not make the router send more.)
    fn member_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> =
            self.peers.keys().chain(self.subscribers.keys()).chain(self.sources.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// This router's member id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The routing tables (read-only: labels, affinities, counts).
    pub fn table(&self) -> &RoutingTable {
        &self.table
    }

    /// The faucet, if configured.
    pub fn faucet(&self) -> Option<&Faucet> {
        self.faucet.as_ref()
    }

    /// The counters.
    pub fn counters(&self) -> RouterCounters {
        self.counters
    }

    /// Records queued for peers.
    pub fn outbox(&mut self) -> &mut Outbox {
        &mut self.outbox
    }

    /// Takes the log entries made since the last call.
    pub fn drain_log(&mut self) -> Vec<LogEntry> {
        self.log.drain(..).collect()
    }

    /// The reply endpoint (`host:port`) of a subscriber or source (or of an unregistered id a
    /// refusal is being reported to).
    pub fn endpoint(&self, id: u64) -> Option<&Arc<str>> {
        self.subscribers
            .get(&id)
            .map(|s| &s.endpoint)
            .or_else(|| self.sources.get(&id).map(|s| &s.endpoint))
            .or_else(|| self.peers.get(&id).map(|(endpoint, _)| endpoint))
            .or_else(|| self.refusal_replies.get(&id).map(|(endpoint, _)| endpoint))
    }

    /// Whether `id` is a live source (a peer the backlog budget never evicts).
    pub fn is_source(&self, id: u64) -> bool {
        self.sources.contains_key(&id)
    }

    /// Drops subscriber `id` (all its subscriptions, as if it was lost) because the backlogs
    /// are over their budget and its backlog, holding `backlog_bytes`, is the largest; logged
    /// and counted. Also forgets a pending refusal report to `id`. Whether `id` was known.
    pub fn evict_subscriber(&mut self, id: u64, backlog_bytes: usize) -> bool {
        let refusal = self.refusal_replies.remove(&id).is_some();
        self.endpoints_forgotten |= refusal;
        let Some(name) = self.subscribers.get(&id).map(|s| s.name.clone()) else {
            return refusal;
        };
        self.subscriber_lost(id);
        self.counters.evicted_subscribers += 1;
        self.push_log(LogEntry::SubscriberEvicted(name, id, backlog_bytes));
        true
    }

    /// Subscribers of `subject` (ids, one per subscription).
    pub fn subscribers_of(&self, subject: &str) -> &[u64] {
        self.subjects.get(subject).map_or(&[], |s| &s.subscribers)
    }

    /// Labels of the members currently requested for `subject`.
    pub fn serving(&self, subject: &str) -> Vec<&str> {
        self.subjects.get(subject).map_or(Vec::new(), |s| s.serving.iter().map(|&m| self.table.label(m)).collect())
    }

    /// Number of subscribed subjects.
    pub fn subject_count(&self) -> usize {
        self.subjects.len()
    }

    /// Number of subscribers the router tracks (each holding one or more subscriptions).
    pub fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    // ---- inputs ----------------------------------------------------------------------------

    /// Handles one transport message from the listen channel (one or more records), as
    /// [`StreamAuth::open`](crate::control::StreamAuth::open) returned it (verified, trailer
    /// stripped).
    pub fn on_message(&mut self, message: &[u8], now: Instant) {
        for record in Records::opened(message) {
            match record {
                Ok(record) => self.on_record(record, now),
                Err(_) => self.counters.malformed += 1,
            }
        }
    }

    /// Handles a heartbeat from the control plane.
    pub fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        let (id, role) = (heartbeat.member_id, heartbeat.role);
        let label: Arc<str> = Arc::from(heartbeat.name.as_str());
        let endpoint: Arc<str> = Arc::from(heartbeat.endpoint.as_str());
        let leaving = heartbeat.leaving;
        let outcome = self.view.on_heartbeat(heartbeat, now);
        match outcome {
            HeartbeatOutcome::ForeignGroup | HeartbeatOutcome::Full => {
                self.counters.foreign += 1;
                return;
            }
            HeartbeatOutcome::Own => return,
            HeartbeatOutcome::Joined | HeartbeatOutcome::Refreshed => {}
        }
        if leaving {
            self.endpoints_forgotten |= self.peers.remove(&id).is_some();
            return;
        }
        let joined = outcome == HeartbeatOutcome::Joined;
        if matches!(role, Role::Source | Role::Subscriber)
            && self.refuse_bad_endpoint(id, role, &label, &endpoint, joined)
        {
            return;
        }
        if role == Role::Source && !self.sources.contains_key(&id) {
            if let Some(reason) = self.node_refusal(&label) {
                // Counted at every heartbeat it keeps sending; logged once, when first heard.
                self.counters.not_allowed += 1;
                if outcome == HeartbeatOutcome::Joined {
                    self.push_log(LogEntry::SourceRefused(label, id, Arc::from(reason.as_str())));
                }
                return;
            }
        }
        if matches!(role, Role::Source | Role::Subscriber) {
            self.peers.insert(id, (endpoint.clone(), now));
        }
        match role {
            Role::Source => {
                if !self.sources.contains_key(&id) {
                    let member = self.table.member_id(&label);
                    self.sources.insert(id, SourceInfo { label: label.clone(), endpoint, member });
                    self.push_log(LogEntry::SourceUp(label.clone(), id));
                    if &*label == MIRROR_SOURCE_LABEL {
                        self.mirror_source = Some(id);
                    }
                    if let Some(member) = member {
                        let slot = &mut self.member_source[member.index()];
                        if slot.is_none() {
                            *slot = Some(id);
                            let _ = self.table.set_member_up(&label, true);
                            self.apply_routing_events();
                        }
                    }
                }
                if let Some((_, pending)) = self.pending_enlist.remove(&id) {
                    for coverage in pending {
                        self.enlist(id, coverage);
                    }
                }
            }
            Role::Subscriber => {
                if let Some(subscriber) = self.subscribers.get_mut(&id) {
                    subscriber.endpoint = endpoint;
                    subscriber.name = label;
                }
            }
            _ => {}
        }
    }

    /// Whether the inbox `endpoint` of a heartbeat from `id` is refused (not `ip:port`,
    /// [`check_endpoint`]): counted `refused`, and a source is logged when first heard
    /// (`joined`). Such a member is neither a peer nor a source.
    fn refuse_bad_endpoint(&mut self, id: u64, role: Role, label: &Arc<str>, endpoint: &str, joined: bool) -> bool {
        let Err(error) = check_endpoint(endpoint, "heartbeat") else { return false };
        self.counters.refused += 1;
        if role == Role::Source && joined {
            self.push_log(LogEntry::SourceRefused(label.clone(), id, Arc::from(error.to_string())));
        }
        true
    }

    /// Runs the timers: sources and subscribers not heard for the liveness timeout are gone.
    pub fn tick(&mut self, now: Instant) {
        let liveness = self.view.liveness_timeout();
        let lost_sources: Vec<u64> =
            self.sources.keys().copied().filter(|&id| !self.view.is_candidate(id, now)).collect();
        for id in lost_sources {
            self.source_lost(id);
        }
        let lost_subscribers: Vec<u64> = self
            .subscribers
            .iter()
            .filter(|(&id, s)| !self.view.is_candidate(id, now) && now.saturating_since(s.registered) >= liveness)
            .map(|(&id, _)| id)
            .collect();
        for id in lost_subscribers {
            self.subscriber_lost(id);
        }
        self.pending_enlist.retain(|_, (heard, _)| now.saturating_since(*heard) < liveness);
        let peers = self.peers.len();
        self.peers.retain(|_, (_, heard)| now.saturating_since(*heard) < liveness);
        if let Some(interval) = self.alive_interval {
            if self.last_alive.is_none_or(|at| now.saturating_since(at) >= interval) {
                self.last_alive = Some(now);
                let ids: Vec<u64> = self.peers.keys().copied().collect();
                for id in ids {
                    let held = alive_payload(self.held_for(id));
                    self.outbox.push(id, RecordKind::Alive, 0, self.id, ALIVE_SUBJECT, &held);
                }
            }
        }
        let refusal_replies = self.refusal_replies.len();
        self.refusal_replies.retain(|_, (_, refused)| now.saturating_since(*refused) < liveness);
        self.endpoints_forgotten |= self.peers.len() < peers || self.refusal_replies.len() < refusal_replies;
        if std::mem::take(&mut self.endpoints_forgotten) {
            self.forget_unreachable_destinations();
        }
        self.view.expire(now, liveness * FORGET_AFTER_TIMEOUTS);
    }

    /// Drops the outbox buffers of destinations the router has no endpoint for any more (a
    /// refused id whose reply inbox expired, a peer gone silent or leaving): nothing queued
    /// for them can be sent, and ids never heard again must not grow the outbox for ever.
    fn forget_unreachable_destinations(&mut self) {
        let RouterCore { outbox, subscribers, sources, peers, refusal_replies, .. } = self;
        outbox.forget_unless(|id| {
            subscribers.contains_key(&id)
                || sources.contains_key(&id)
                || peers.contains_key(&id)
                || refusal_replies.contains_key(&id)
        });
    }

    // ---- records ---------------------------------------------------------------------------

    fn on_record(&mut self, record: SubjectRecord<'_>, now: Instant) {
        match record.kind {
            RecordKind::Data => self.on_data(record),
            RecordKind::Subscribe => self.on_subscribe(record, now),
            RecordKind::Unsubscribe => self.unsubscribe(record.sender, record.subject),
            RecordKind::Enlist => {
                let coverage =
                    (record.flags & FLAG_COVERAGE != 0).then(|| String::from_utf8_lossy(record.payload).into_owned());
                if !self.is_control_topic(record.subject, true) {
                    self.counters.refused += 1;
                } else if self.sources.contains_key(&record.sender) {
                    self.enlist(record.sender, coverage);
                } else {
                    self.keep_pending_enlist(record.sender, coverage, now);
                }
            }
            RecordKind::Delist => {
                let control = self.is_control_topic(record.subject, true);
                match &mut self.faucet {
                    Some(faucet) if control => {
                        faucet.remove_publisher(record.sender);
                        self.apply_faucet();
                    }
                    _ => self.counters.refused += 1,
                }
            }
            RecordKind::Request | RecordKind::Discard | RecordKind::Alive => self.counters.refused += 1,
        }
    }

    /// Whether `subject` names the faucet's control topic (or, when `wildcard`, is
    /// [`ANY_CONTROL_TOPIC`] and a faucet is configured).
    fn is_control_topic(&self, subject: &str, wildcard: bool) -> bool {
        self.faucet
            .as_ref()
            .is_some_and(|f| f.config().control_topic == subject || (wildcard && subject == ANY_CONTROL_TOPIC))
    }

    /// Keeps an ENLIST heard before its source's first heartbeat, until it is heard (for a
    /// liveness timeout); a duplicate is kept once. Refused (counted) from a new sender past
    /// [`MAX_SUBSCRIBERS`] senders, or past [`MAX_ENLISTMENTS_PER_SOURCE`] from one sender.
    fn keep_pending_enlist(&mut self, id: u64, coverage: Option<String>, now: Instant) {
        if !self.pending_enlist.contains_key(&id) && self.pending_enlist.len() >= MAX_SUBSCRIBERS {
            self.counters.refused += 1;
            return;
        }
        let (_, pending) = self.pending_enlist.entry(id).or_insert_with(|| (now, Vec::new()));
        if pending.contains(&coverage) {
            return;
        }
        if pending.len() >= MAX_ENLISTMENTS_PER_SOURCE {
            self.counters.refused += 1;
            return;
        }
        pending.push(coverage);
    }

    fn enlist(&mut self, id: u64, coverage: Option<String>) {
        let Some(source) = self.sources.get(&id) else { return };
        let party = Party { id, name: source.label.clone() };
        if let Some(faucet) = &mut self.faucet {
            faucet.enlist(party, coverage.as_deref());
            self.apply_faucet();
        }
    }

    fn on_subscribe(&mut self, record: SubjectRecord<'_>, now: Instant) {
        let Ok((endpoint, name)) = record.subscribe_reply() else {
            self.counters.refused += 1;
            return;
        };
        let sender = record.sender;
        if !self.subscribers.contains_key(&sender) {
            if self.sources.contains_key(&sender) {
                self.counters.refused += 1;
                return;
            }
            if let Some(reason) = self.node_refusal(name) {
                self.counters.not_allowed += 1;
                self.refuse_subscribe(sender, Some((endpoint, now)), record.subject, &reason);
                return;
            }
            if self.subscribers.len() >= MAX_SUBSCRIBERS {
                let reason = format!("subscribe refused: the router tracks {MAX_SUBSCRIBERS} subscribers already");
                self.refuse_subscribe(sender, Some((endpoint, now)), record.subject, &reason);
                return;
            }
            self.subscribers.insert(
                sender,
                SubscriberInfo {
                    endpoint: Arc::from(endpoint),
                    name: Arc::from(name),
                    registered: now,
                    subjects: FastMap::default(),
                },
            );
        }
        self.subscribe(sender, record.subject);
    }

    /// Reports a refused SUBSCRIBE to `subscriber` (DATA STATUS|REFUSED with `reason`) and
    /// counts it. `reply` is the inbox (and time) of an id that is not a registered subscriber:
    /// kept for the report while fewer than [`MAX_REFUSAL_REPLIES`] are.
    fn refuse_subscribe(&mut self, subscriber: u64, reply: Option<(&str, Instant)>, subject: &str, reason: &str) {
        self.counters.refused_subscribes += 1;
        if !self.subscribers.contains_key(&subscriber) {
            let Some((endpoint, now)) = reply else { return };
            if !self.refusal_replies.contains_key(&subscriber) {
                if self.refusal_replies.len() >= MAX_REFUSAL_REPLIES {
                    return;
                }
                self.refusal_replies.insert(subscriber, (Arc::from(endpoint), now));
            }
        }
        self.outbox.push(subscriber, RecordKind::Data, FLAG_STATUS | FLAG_REFUSED, self.id, subject, reason.as_bytes());
    }

    /// Subscribes `subscriber` (already registered) to `subject`; a duplicate changes nothing.
    fn subscribe(&mut self, subscriber: u64, subject: &str) {
        let Some(info) = self.subscribers.get(&subscriber) else { return };
        if info.subjects.contains_key(subject) {
            self.counters.duplicate_subscribes += 1;
            return;
        }
        if info.subjects.len() >= MAX_SUBJECTS_PER_SUBSCRIBER {
            let reason =
                format!("subscribe refused: this subscriber holds {MAX_SUBJECTS_PER_SUBSCRIBER} subjects already");
            self.refuse_subscribe(subscriber, None, subject, &reason);
            return;
        }
        let subject: Arc<str> = match self.subjects.get_key_value(subject) {
            Some((key, _)) => key.clone(),
            None if self.subjects.len() >= MAX_SUBJECTS => {
                let reason = format!("subscribe refused: the router holds {MAX_SUBJECTS} subjects already");
                self.refuse_subscribe(subscriber, None, subject, &reason);
                return;
            }
            None => Arc::from(subject),
        };
        let Some(info) = self.subscribers.get_mut(&subscriber) else { return };
        let name = info.name.clone();
        info.subjects.insert(subject.clone(), ());
        let control_topic = self.is_control_topic(&subject, false);
        let is_faucet = self.faucet.as_ref().is_some_and(|f| f.matches(&subject));
        if let Some(state) = self.subjects.get_mut(&subject) {
            state.subscribers.push(subscriber);
            if let Some((flags, payload)) = &state.image {
                self.outbox.push(subscriber, RecordKind::Data, *flags, self.id, &subject, payload);
            }
            if is_faucet {
                if let Some(faucet) = &mut self.faucet {
                    faucet.subscribe(&subject, Party { id: subscriber, name });
                }
                self.apply_faucet();
            } else if !control_topic {
                let _ = self.table.subscribe_member(&subject);
                self.apply_routing_events();
            }
            return;
        }
        self.subjects.insert(
            subject.clone(),
            SubjectState { subscribers: vec![subscriber], serving: Vec::new(), faucet: is_faucet, image: None },
        );
        if control_topic {
            return;
        }
        self.counters.routed += 1;
        if is_faucet {
            if let Some(faucet) = &mut self.faucet {
                faucet.subscribe(&subject, Party { id: subscriber, name });
            }
            self.apply_faucet();
            return;
        }
        let routed = self.table.subscribe_member(&subject);
        self.apply_routing_events();
        if let Err(error) = routed {
            self.counters.no_service += 1;
            self.subjects.remove(&subject);
            if let Some(info) = self.subscribers.get_mut(&subscriber) {
                info.subjects.remove(&subject);
            }
            let text = error.to_string();
            self.outbox.push(subscriber, RecordKind::Data, FLAG_NODATA_NOTFOUND, self.id, &subject, text.as_bytes());
        }
    }

    /// Drops the subscription of `subscriber` to `subject`.
    fn unsubscribe(&mut self, subscriber: u64, subject: &str) {
        let held = self.subscribers.get_mut(&subscriber).and_then(|info| info.subjects.remove(subject));
        let Some(state) = held.and_then(|_| self.subjects.get_mut(subject)) else {
            self.counters.unknown_unsubscribes += 1;
            return;
        };
        if let Some(position) = state.subscribers.iter().position(|&s| s == subscriber) {
            state.subscribers.remove(position);
        }
        let last = state.subscribers.is_empty();
        let faucet_topic = state.faucet;
        let control_topic = self.is_control_topic(subject, false);
        if faucet_topic {
            if let Some(faucet) = &mut self.faucet {
                faucet.unsubscribe(subject, subscriber);
            }
            self.apply_faucet();
        } else if !control_topic {
            let _ = self.table.unsubscribe(subject);
            if last {
                let serving = self.subjects.get(subject).map(|s| s.serving.clone()).unwrap_or_default();
                for member in serving {
                    self.send_to_member(member, RecordKind::Discard, subject);
                }
            }
            self.apply_routing_events();
        }
        if last {
            self.subjects.remove(subject);
        }
    }

    fn on_data(&mut self, record: SubjectRecord<'_>) {
        let sender = record.sender;
        let Some(source) = self.sources.get(&sender) else {
            self.counters.refused += 1;
            return;
        };
        let member = source.member;
        if record.flags & FLAG_PUBLISH != 0 {
            self.on_publish(record);
            return;
        }
        let Some(state) = self.subjects.get(record.subject) else {
            self.counters.stale_data += 1;
            return;
        };
        let allowed = if state.faucet {
            self.faucet.as_ref().and_then(|f| f.assignment(record.subject)) == Some(sender)
        } else {
            member.is_some_and(|m| state.serving.contains(&m))
        };
        // A STATUS from a cluster node's source serving the subject (its parent moved to a
        // backup) is relayed to the subscribers, so they hear of the move before the fresh
        // image; any other STATUS or refusal from a source is not for subscribers.
        let node_status = record.flags & (FLAG_STATUS | FLAG_REFUSED) == FLAG_STATUS
            && source.label.starts_with(CLUSTER_SOURCE_PREFIX);
        if !allowed || (record.flags & (FLAG_STATUS | FLAG_REFUSED) != 0 && !node_status) {
            self.counters.stale_data += 1;
            return;
        }
        let nodata = match record.flags {
            f if f & FLAG_NODATA_NOTFOUND != 0 => Some(NoDataStatus::NotFound),
            f if f & FLAG_NODATA_UNAVAILABLE != 0 => Some(NoDataStatus::Unavailable),
            _ => None,
        };
        if let (Some(status), false, Some(member)) = (nodata, state.faucet, member) {
            let primary = self.table.route_member(record.subject).ok().flatten();
            if primary == Some(member) {
                let decision = self.table.report_nodata(record.subject, status);
                self.apply_routing_events();
                if decision.is_ok_and(|d| d.reason == Reason::Retry) {
                    return;
                }
            }
        }
        self.relay(record);
    }

    /// A publish (DATA with [`FLAG_PUBLISH`], xmlBlaster's publish: any source, any subject,
    /// requested from it or not). With [`FLAG_STATUS`] from a cluster node's source: a forward
    /// status for the origin named in the payload, passed on to it. Else, when the subject
    /// routes to a cluster node's source (this node is a slave of its domain) other than the
    /// sender: handed to it, the origin's id before the payload, to forward to the master;
    /// otherwise relayed to the subject's subscribers here (erase included) and, when it comes
    /// from a local source, handed to the node's mirror source too ([`RouterCore::mirror`]).
    ///
    /// A publish naming its domain ([`FLAG_DOMAIN`]) goes by that domain, not the subject:
    /// handed to the cluster node's source `cluster.<domain>` when there is one (this node is a
    /// slave of the domain, or it has no master yet), with the domain kept for the node; else
    /// relayed here without it (this node is the domain's master, or no node defines it: the
    /// default master). A malformed domain is refused (counted).
    fn on_publish(&mut self, record: SubjectRecord<'_>) {
        let from_cluster = self.sources.get(&record.sender).is_some_and(|s| s.label.starts_with(CLUSTER_SOURCE_PREFIX));
        if record.flags & FLAG_STATUS != 0 {
            match split_origin(record.payload) {
                Some((origin, text)) if from_cluster && self.sources.contains_key(&origin) => {
                    let flags = record.flags & (FLAG_STATUS | FLAG_REFUSED | FLAG_PUBLISH);
                    self.outbox.push(origin, RecordKind::Data, flags, self.id, record.subject, text);
                }
                _ => self.counters.refused += 1,
            }
            return;
        }
        if record.flags & FLAG_REFUSED != 0 {
            self.counters.refused += 1;
            return;
        }
        if record.flags & FLAG_DOMAIN != 0 {
            let Some((domain, body)) = split_domain(record.payload) else {
                self.counters.refused += 1;
                return;
            };
            let node = self.sources.iter().find_map(|(&id, source)| {
                let label = source.label.strip_prefix(CLUSTER_SOURCE_PREFIX)?;
                (label == domain).then_some(id)
            });
            match node {
                Some(node) if node != record.sender => {
                    let payload = with_origin(record.sender, record.payload);
                    self.outbox.push(node, RecordKind::Data, record.flags, self.id, record.subject, &payload);
                }
                Some(_) => self.counters.refused += 1,
                None => {
                    self.mirror(&record);
                    if self.subjects.contains_key(record.subject) {
                        self.relay(SubjectRecord { flags: record.flags & !FLAG_DOMAIN, payload: body, ..record });
                    } else {
                        self.counters.stale_data += 1;
                    }
                }
            }
            return;
        }
        let routed = self.table.route_member(record.subject).ok().flatten();
        if let Some(member) = routed.filter(|&m| self.table.label(m).starts_with(CLUSTER_SOURCE_PREFIX)) {
            match self.member_source.get(member.index()).copied().flatten() {
                Some(node) if node != record.sender => {
                    let payload = with_origin(record.sender, record.payload);
                    self.outbox.push(node, RecordKind::Data, record.flags, self.id, record.subject, &payload);
                }
                // The node's own forwarder never publishes here; a node not up yet: refused.
                _ => self.counters.refused += 1,
            }
            return;
        }
        self.mirror(&record);
        if !self.subjects.contains_key(record.subject) {
            self.counters.stale_data += 1; // nobody subscribes here: nothing to relay
            return;
        }
        self.relay(record);
    }

    /// Hands a publish relayed here to the node's mirror source ([`MIRROR_SOURCE_LABEL`]), the
    /// origin's id before the payload (domain included), when there is one and the publish
    /// comes from a local source: one from another node (`node:<id>`, its origin sent it to
    /// every master already) or from the node's own sources is never handed on (no loop).
    fn mirror(&mut self, record: &SubjectRecord<'_>) {
        let Some(mirror) = self.mirror_source else { return };
        let Some(sender) = self.sources.get(&record.sender) else { return };
        let label = &*sender.label;
        if label.starts_with(CLUSTER_SOURCE_PREFIX) || NODE_PREFIXES.iter().any(|p| label.starts_with(p)) {
            return;
        }
        let payload = with_origin(record.sender, record.payload);
        self.outbox.push(mirror, RecordKind::Data, record.flags, self.id, record.subject, &payload);
    }

    /// Relays DATA for a subscribed subject to its subscribers (keeping its image).
    fn relay(&mut self, record: SubjectRecord<'_>) {
        let Some(state) = self.subjects.get_mut(record.subject) else { return };
        if record.flags & FLAG_ERASE != 0 {
            state.image = None;
        } else if record.flags & (FLAG_IMAGE | FLAG_NODATA_NOTFOUND | FLAG_NODATA_UNAVAILABLE) != 0 {
            match &mut state.image {
                Some((flags, payload)) => {
                    *flags = record.flags;
                    payload.clear();
                    payload.extend_from_slice(record.payload);
                }
                None => state.image = Some((record.flags, record.payload.to_vec())),
            }
        }
        let flags = match record.flags & !FLAG_PUBLISH {
            0 => FLAG_UPDATE,
            flags => flags,
        };
        self.counters.relayed += state.subscribers.len() as u64;
        // One encoding, copied into each subscriber's buffer.
        self.scratch.clear();
        emit_unchecked(&mut self.scratch, RecordKind::Data, flags, self.id, record.subject, record.payload);
        for &subscriber in &state.subscribers {
            let buffer = self.outbox.buffer(subscriber);
            buffer.extend_from_slice(&self.scratch);
        }
    }

    // ---- effects ---------------------------------------------------------------------------

    fn send_to_member(&mut self, member: MemberId, kind: RecordKind, subject: &str) {
        if let Some(Some(source)) = self.member_source.get(member.index()) {
            self.outbox.push(*source, kind, 0, self.id, subject, &[]);
        }
    }

    fn status(&mut self, subject: &str, text: &str) {
        let Some(state) = self.subjects.get_mut(subject) else { return };
        state.image = None;
        for &subscriber in &state.subscribers {
            self.outbox.push(subscriber, RecordKind::Data, FLAG_STATUS, self.id, subject, text.as_bytes());
        }
    }

    fn push_log(&mut self, entry: LogEntry) {
        if self.log.len() >= MAX_PENDING_LOG {
            self.log.pop_front();
            self.counters.log_dropped += 1;
        }
        self.log.push_back(entry);
    }

    fn peer(&self, member: MemberId) -> String {
        format!("peer {} ({})", member.peer_index(), self.table.label(member))
    }

    /// Acts on the routing tables' events: REQUEST on a bind, STATUS + DISCARD + REQUEST on a
    /// move, STATUS when no peer is left.
    fn apply_routing_events(&mut self) {
        for event in self.table.drain_events() {
            if let Some(subject) = event.subject.clone() {
                match event.kind {
                    EventKind::Bound => {
                        if let (Some(member), Some(state)) = (event.member, self.subjects.get_mut(&subject)) {
                            if !state.serving.contains(&member) {
                                state.serving.push(member);
                                self.send_to_member(member, RecordKind::Request, &subject);
                            }
                        }
                    }
                    EventKind::Moved => {
                        if let (Some(member), Some(state)) = (event.member, self.subjects.get_mut(&subject)) {
                            state.serving.retain(|&m| Some(m) != event.previous);
                            if !state.serving.contains(&member) {
                                state.serving.push(member);
                            }
                            let reason = event.move_reason.map_or("moved", |r| r.name());
                            let text = match event.previous {
                                Some(previous) => {
                                    format!("moved from {} to {}: {reason}", self.peer(previous), self.peer(member))
                                }
                                None => format!("moved to {}: {reason}", self.peer(member)),
                            };
                            if let Some(previous) = event.previous {
                                self.send_to_member(previous, RecordKind::Discard, &subject);
                            }
                            self.status(&subject, &text);
                            self.send_to_member(member, RecordKind::Request, &subject);
                        }
                    }
                    EventKind::NoMemberAvailable => {
                        if let Some(state) = self.subjects.get_mut(&subject) {
                            state.serving.retain(|&m| Some(m) != event.previous);
                            self.status(&subject, "no peer available");
                        }
                    }
                    _ => {}
                }
            }
            self.push_log(LogEntry::Routing(event));
        }
    }

    /// Publishes the faucet's announcements on the control topic (to its subscribers and to
    /// every enlisted publisher) and acts on its assignment changes.
    fn apply_faucet(&mut self) {
        let Some(faucet) = &mut self.faucet else { return };
        let events = faucet.drain_events();
        let changes = faucet.drain_changes();
        let control = faucet.config().control_topic.clone();
        let mut audience: Vec<u64> = faucet.publisher_ids().collect();
        audience.extend(self.subjects.get(control.as_str()).map_or(&[][..], |s| &s.subscribers));
        for event in events {
            let json = event.to_json();
            for &to in &audience {
                self.outbox.push(to, RecordKind::Data, FLAG_UPDATE, self.id, &control, json.as_bytes());
            }
            self.push_log(LogEntry::Faucet(event));
        }
        for change in changes {
            if let Some(from) = change.from {
                if self.sources.contains_key(&from) {
                    self.outbox.push(from, RecordKind::Discard, 0, self.id, &change.topic, &[]);
                }
                if change.to.is_some() {
                    self.status(&change.topic, "publisher lost: reassigned");
                }
            }
            if let Some(to) = change.to {
                self.outbox.push(to, RecordKind::Request, 0, self.id, &change.topic, &[]);
            }
        }
    }

    fn source_lost(&mut self, id: u64) {
        let Some(source) = self.sources.remove(&id) else { return };
        self.outbox.remove(id);
        self.push_log(LogEntry::SourceDown(source.label.clone(), id));
        if self.mirror_source == Some(id) {
            self.mirror_source = None;
        }
        if let Some(member) = source.member {
            if self.member_source.get(member.index()) == Some(&Some(id)) {
                // Another live source with the same label takes over, else the member is down.
                let heir = self.sources.iter().find(|(_, s)| s.member == Some(member)).map(|(&id, _)| id);
                self.member_source[member.index()] = heir;
                if heir.is_none() {
                    let _ = self.table.set_member_up(&source.label, false);
                    self.apply_routing_events();
                }
            }
        }
        if self.faucet.as_ref().is_some_and(|f| f.is_publisher(id)) {
            if let Some(faucet) = &mut self.faucet {
                faucet.remove_publisher(id);
            }
            self.apply_faucet();
        }
    }

    fn subscriber_lost(&mut self, id: u64) {
        let Some(info) = self.subscribers.get(&id) else { return };
        let held: Vec<Arc<str>> = info.subjects.keys().cloned().collect();
        for subject in held {
            self.unsubscribe(id, &subject);
        }
        self.subscribers.remove(&id);
        self.outbox.remove(id);
    }
}

#[cfg(test)]
mod tests;
