//! The router, subscribers and sources over the client API (any [`ClientApi`]; [`Publication`],
//! [`Subscription`]), with the control plane's heartbeats for liveness.
//!
//! * The router listens on one channel (`--listen`, e.g. `aeron:udp?endpoint=127.0.0.1:40500`):
//!   heartbeats on [`CONTROL_STREAM_ID`], subject records on [`DATA_STREAM_ID`]. One thread
//!   runs the [`RouterCore`]: reads both streams (bounded per iteration), ticks the timers and
//!   sends every destination's queued records, packed, to that peer's inbox.
//! * Subscribers and sources have an inbox (a unicast subscription on an OS-chosen port,
//!   [`DATA_STREAM_ID`]) and a background thread that heartbeats to the router every interval
//!   and retries records the router's publication has not accepted yet. Their data path
//!   (`subscribe`, `publish`, `poll`) runs on the caller's thread.
//! * With a router secret every message, both ways, is sealed and verified by the control
//!   plane's [`StreamAuth`] (`docs/subjects.md`, "Authentication"): sealed when a transport
//!   message leaves (records packed, then sealed), opened before anything is decoded; refusals
//!   are counted ([`RouterRuntimeCounters::auth`], [`PeerCounters::auth`]) and dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::backlog::{Backlogs, MAX_BACKLOG_BYTES};
use super::codec::{
    alive_held, RecordKind, Records, SubjectError, SubjectRecord, FLAG_COVERAGE, FLAG_IMAGE, FLAG_NODATA_NOTFOUND,
    FLAG_NODATA_UNAVAILABLE, FLAG_REFUSED, FLAG_STATUS, FLAG_UPDATE,
};
use super::failover::{Restore, RestoreCheck, RouterWatch, Switch};
use super::faucet::Faucet;
use super::router::{LogEntry, RouterCore, RouterCounters, MAX_PENDING_LOG, MAX_SUBSCRIBERS};
use crate::client::{ClientApi, MessageBatch, PublicationHandle as Publication, SubscriptionHandle as Subscription};
use crate::control::limits::MAX_NAME_LENGTH;
use crate::control::member::{self, new_member_id, plain_heartbeat, InboxAddress, MemberError, Timing};
use crate::control::{
    parse_control, AuthCounters, ControlMessage, GroupSecret, Role, StreamAuth, CONTROL_STREAM_ID, DATA_STREAM_ID,
};
use crate::error::Error;
use crate::protocol::OfferError;
use crate::routing::{NoDataStatus, RoutingTable};
use crate::sync::lock;
use crate::time::{Instant, MonotonicClock};

/// Term length of every subject publication (largest message 128 KiB).
pub const SUBJECT_TERM_LENGTH: &str = "1m";
/// How long a stopping router keeps reading (and sends nothing more) after it told its peers
/// it stops, so the driver sends those records before the process closes its client.
pub const STOP_LINGER: Duration = Duration::from_millis(100);
/// Fragments read per stream per router iteration.
pub const FRAGMENTS_PER_ITERATION: usize = 1024;
/// How often the router runs its timers.
pub const TICK_INTERVAL: Duration = Duration::from_millis(10);
/// How long a thread sleeps when an iteration found nothing to do (the router thread: at most
/// that long, woken earlier when its in-process driver received data, `ClientApi::wait_for_data`).
pub const IDLE_SLEEP: Duration = Duration::from_micros(100);
/// Key-derivation stream of what the router sends to a peer's inbox (the namespace is that
/// peer's id): a message sealed for one peer verifies at no other peer, and not at the router.
/// What peers send to the router is keyed by the subjects' [`fingerprint`](super::fingerprint)
/// and the stream it travels on ([`DATA_STREAM_ID`], [`CONTROL_STREAM_ID`]).
pub const INBOX_AUTH_STREAM: i32 = 0x4146_5303;

/// Senders whose replay windows the router remembers, per stream: every subscriber it may hold
/// ([`MAX_SUBSCRIBERS`]) and as many more (sources, members that left), so no live member's
/// window is forgotten (a forgotten window would accept that member's old messages again).
pub const ROUTER_REPLAY_SENDERS: usize = 2 * MAX_SUBSCRIBERS;

/// Authentication of what peers send to the router on `stream`.
pub fn to_router_auth(secret: Option<&GroupSecret>, stream: i32) -> StreamAuth {
    StreamAuth::new(secret, super::fingerprint(), stream)
}

/// The router's verification of what its peers send on `stream` ([`to_router_auth`] keeping
/// [`ROUTER_REPLAY_SENDERS`] windows).
fn router_inbound_auth(secret: Option<&GroupSecret>, stream: i32) -> StreamAuth {
    to_router_auth(secret, stream).with_max_senders(ROUTER_REPLAY_SENDERS)
}

/// Authentication of what the router sends to the inbox of peer `peer`.
pub fn inbox_auth(secret: Option<&GroupSecret>, peer: u64) -> StreamAuth {
    StreamAuth::new(secret, peer, INBOX_AUTH_STREAM)
}

/// Offers `bytes` (whole records) to `publication`, sealed by `auth` (through `scratch`) when
/// it holds a secret. A refused message consumed a sequence: its retry is sealed anew.
fn offer_sealed(
    publication: &Publication,
    auth: &mut StreamAuth,
    scratch: &mut Vec<u8>,
    bytes: &[u8],
) -> Result<(), OfferError> {
    if !auth.is_authenticated() {
        return publication.try_offer(bytes).map(|_| ());
    }
    scratch.clear();
    scratch.extend_from_slice(bytes);
    auth.seal(scratch);
    publication.try_offer(scratch).map(|_| ())
}

/// Why a subject runtime operation failed.
#[derive(Debug)]
pub enum SubjectsError {
    /// The transport refused (channel, driver, closed client).
    Transport(Error),
    /// An invalid option (name, host, timing, channel).
    Config(String),
    /// A subject, payload or flags the codec refuses.
    Codec(SubjectError),
    /// The handle was closed.
    Closed,
}

impl std::fmt::Display for SubjectsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubjectsError::Transport(error) => write!(f, "{error}"),
            SubjectsError::Config(message) => f.write_str(message),
            SubjectsError::Codec(error) => write!(f, "{error}"),
            SubjectsError::Closed => f.write_str("closed"),
        }
    }
}

impl std::error::Error for SubjectsError {}

impl From<Error> for SubjectsError {
    fn from(error: Error) -> Self {
        SubjectsError::Transport(error)
    }
}

impl From<MemberError> for SubjectsError {
    fn from(error: MemberError) -> Self {
        match error {
            MemberError::Transport(error) => SubjectsError::Transport(error),
            other => SubjectsError::Config(other.to_string()),
        }
    }
}

impl From<SubjectError> for SubjectsError {
    fn from(error: SubjectError) -> Self {
        SubjectsError::Codec(error)
    }
}

/// The channel to a peer's inbox at `endpoint`: `ip:port`, as the router checked it where it
/// was heard (`codec::check_endpoint`), so it adds no channel parameters.
fn udp_channel(endpoint: &str) -> String {
    format!("aeron:udp?endpoint={endpoint}|term-length={SUBJECT_TERM_LENGTH}")
}

/// A subscriber's or source's publication to its router and the records it has not accepted
/// yet (one backlog of at most [`MAX_BACKLOG_BYTES`]), sealed as they leave.
struct PeerLink {
    publication: Publication,
    backlog: Backlogs,
    auth: StreamAuth,
    scratch: Vec<u8>,
}

/// The [`PeerLink`]'s only destination in its [`Backlogs`].
const TO_ROUTER: u64 = 0;

impl PeerLink {
    fn new(publication: Publication, auth: StreamAuth) -> PeerLink {
        let mut backlog = Backlogs::new(MAX_BACKLOG_BYTES);
        backlog.insert(TO_ROUTER, false);
        PeerLink { publication, backlog, auth, scratch: Vec::new() }
    }

    /// Queues `records`; `false` when the backlog is full and they were dropped (counted).
    fn push(&mut self, records: &[u8]) -> bool {
        self.backlog.push(TO_ROUTER, records)
    }

    fn pending(&self) -> bool {
        self.backlog.is_pending(TO_ROUTER)
    }

    fn flush(&mut self) {
        let PeerLink { publication, backlog, auth, scratch } = self;
        backlog.flush(TO_ROUTER, |bytes| offer_sealed(publication, auth, scratch, bytes));
        scratch_settle(scratch);
    }

    /// Drops what the router has not accepted (counted): after a move the peer sends its
    /// [`Restore`] instead.
    fn clear(&mut self) {
        self.backlog.remove(TO_ROUTER);
        self.backlog.insert(TO_ROUTER, false);
    }
}

/// A peer's links, one per router of its list (opened at start, so a move needs no client);
/// records go to the one in use.
struct PeerLinks {
    links: Vec<PeerLink>,
    current: usize,
}

impl PeerLinks {
    fn now(&mut self) -> &mut PeerLink {
        &mut self.links[self.current]
    }

    fn push(&mut self, records: &[u8]) -> bool {
        self.now().push(records)
    }

    fn pending(&self) -> bool {
        self.links[self.current].pending()
    }

    fn flush(&mut self) {
        self.now().flush();
    }

    fn dropped_records(&self) -> u64 {
        self.links.iter().map(|link| link.backlog.counters().dropped_records).sum()
    }
}

/// Frees a sealing scratch buffer grown past [`super::backlog::RETAINED_CAPACITY`] (one large
/// record), so an idle link keeps little memory.
fn scratch_settle(scratch: &mut Vec<u8>) {
    if scratch.capacity() > super::backlog::RETAINED_CAPACITY {
        *scratch = Vec::new();
    }
}

fn open_inbox(client: &dyn ClientApi, host: &str) -> Result<(String, Subscription), SubjectsError> {
    let inbox = member::open_inbox(client, &InboxAddress::new(host, None)?, &[DATA_STREAM_ID])?;
    let subscription = inbox.subscriptions.into_iter().next().ok_or(SubjectsError::Closed)?;
    Ok((inbox.endpoint, subscription))
}

fn check_name(name: &str) -> Result<(), SubjectsError> {
    if name.is_empty() || name.len() > MAX_NAME_LENGTH || name.contains('\n') {
        return Err(SubjectsError::Config(format!(
            "name {name:?}: must be 1..={MAX_NAME_LENGTH} bytes without a newline"
        )));
    }
    Ok(())
}

// ---- the router -------------------------------------------------------------------------------

/// Options of a router.
#[derive(Clone, Debug)]
pub struct RouterOptions {
    /// The channel subscribers and sources send to (`aeron:udp?endpoint=host:port`).
    pub listen: String,
    /// An optional extra channel heartbeats are read from (e.g. multicast).
    pub control: Option<String>,
    /// Liveness timeout of peers (the heartbeat interval is the peers' own).
    pub timing: Timing,
    /// Bytes all backlogs together may hold (default [`super::backlog::DEFAULT_BACKLOG_BUDGET`],
    /// at least [`super::backlog::MIN_BACKLOG_BUDGET`]); past it the subscriber with the largest
    /// backlog is dropped (counted, logged).
    pub backlog_budget: usize,
    /// The router secret: with it every message to and from the router is sealed and verified
    /// (`docs/subjects.md`, "Authentication"); without it the router is unauthenticated.
    pub secret: Option<GroupSecret>,
    /// The channel of another router its peers should move to when this one stops cleanly (the
    /// ALIVE record with the stopping flag carries it); `None`: the next of their own list.
    pub forward: Option<String>,
}

/// Counters of the router's runtime (transport level).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterRuntimeCounters {
    /// Control-stream messages that did not decode (or were not heartbeats).
    pub control_malformed: u64,
    /// Records for a destination whose endpoint is unknown or whose publication failed.
    pub unroutable: u64,
    /// Records dropped by the backlogs (backlog or budget full, destination evicted or gone,
    /// publication refused).
    pub dropped_records: u64,
    /// Transport messages sent.
    pub messages_sent: u64,
    /// Bytes all backlogs hold now (at most the budget).
    pub backlog_bytes: usize,
    /// Messages refused before decoding (unauthenticated, unverifiable, bad tag, replayed),
    /// data and control streams together.
    pub auth: AuthCounters,
}

/// A snapshot of the router.
#[derive(Clone, Debug, Default)]
pub struct RouterStatus {
    /// The router's counters (hostile and stale input, relays).
    pub counters: RouterCounters,
    /// The runtime's counters.
    pub runtime: RouterRuntimeCounters,
    /// Subscribed subjects.
    pub subjects: usize,
    /// Subscribers tracked.
    pub subscribers: usize,
    /// Remembered affinities.
    pub affinities: usize,
    /// Per table member: (label, up).
    pub members: Vec<(String, bool)>,
    /// Whether the router holds a secret (seals and verifies every message).
    pub authenticated: bool,
}

struct RouterShared {
    stop: AtomicBool,
    log: Mutex<VecDeque<LogEntry>>,
    log_dropped: AtomicU64,
    status: Mutex<RouterStatus>,
    /// Node ids to let in from the next tick on ([`RouterRuntime::set_cluster_nodes`]).
    cluster_nodes: Mutex<Option<Vec<String>>>,
}

/// A running router: one thread over a [`RouterCore`]; stops on [`RouterRuntime::close`] or drop.
pub struct RouterRuntime {
    id: u64,
    labels: Vec<String>,
    shared: Arc<RouterShared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The router's publication to one destination and the sealing of what it sends there.
struct Link {
    publication: Publication,
    auth: StreamAuth,
}

struct RouterLoop {
    core: RouterCore,
    client: Arc<dyn ClientApi>,
    clock: MonotonicClock,
    data: Subscription,
    control: Vec<Subscription>,
    /// Verifies what peers send on the data stream.
    data_auth: StreamAuth,
    /// Verifies the peers' heartbeats.
    control_auth: StreamAuth,
    secret: Option<GroupSecret>,
    /// Publications to destinations, by member id; their records queue in `backlogs`.
    links: HashMap<u64, Link>,
    /// Sealing buffer of the message being sent.
    scratch: Vec<u8>,
    backlogs: Backlogs,
    batch: MessageBatch,
    counters: RouterRuntimeCounters,
    shared: Arc<RouterShared>,
    /// Where peers should go when this router stops ([`RouterOptions::forward`]).
    forward: Option<String>,
}

impl RouterRuntime {
    /// Starts a router over `table` (and `faucet`) on `options.listen`.
    pub fn start(
        client: Arc<dyn ClientApi>,
        table: RoutingTable,
        faucet: Option<Faucet>,
        options: &RouterOptions,
    ) -> Result<RouterRuntime, SubjectsError> {
        RouterRuntime::start_node(client, table, faucet, options, None)
    }

    /// [`RouterRuntime::start`] as a cluster node when `cluster_nodes` names the other nodes
    /// (their node ids) that may subscribe here ([`RouterCore::with_cluster_nodes`]).
    pub fn start_node(
        client: Arc<dyn ClientApi>,
        table: RoutingTable,
        faucet: Option<Faucet>,
        options: &RouterOptions,
        cluster_nodes: Option<Vec<String>>,
    ) -> Result<RouterRuntime, SubjectsError> {
        if options.backlog_budget < super::backlog::MIN_BACKLOG_BUDGET {
            return Err(SubjectsError::Config(format!(
                "backlog budget {} bytes: must be at least {} bytes",
                options.backlog_budget,
                super::backlog::MIN_BACKLOG_BUDGET
            )));
        }
        let id = new_member_id();
        let labels: Vec<String> = table.member_ids().map(|m| table.label(m).to_owned()).collect();
        let data = client.add_subscription_handle(&options.listen, DATA_STREAM_ID)?;
        let mut control = vec![client.add_subscription_handle(&options.listen, CONTROL_STREAM_ID)?];
        if let Some(channel) = &options.control {
            control.push(client.add_subscription_handle(channel, CONTROL_STREAM_ID)?);
        }
        let shared = Arc::new(RouterShared {
            stop: AtomicBool::new(false),
            log: Mutex::new(VecDeque::new()),
            log_dropped: AtomicU64::new(0),
            status: Mutex::new(RouterStatus::default()),
            cluster_nodes: Mutex::new(None),
        });
        let mut state = RouterLoop {
            core: {
                let core = RouterCore::new(id, table, faucet, options.timing.liveness_timeout)
                    .with_alive_interval(options.timing.heartbeat_interval);
                match cluster_nodes {
                    Some(nodes) => core.with_cluster_nodes(nodes),
                    None => core,
                }
            },
            forward: options.forward.clone(),
            client,
            clock: MonotonicClock::new(),
            data,
            control,
            data_auth: router_inbound_auth(options.secret.as_ref(), DATA_STREAM_ID),
            control_auth: router_inbound_auth(options.secret.as_ref(), CONTROL_STREAM_ID),
            secret: options.secret.clone(),
            links: HashMap::new(),
            scratch: Vec::new(),
            backlogs: Backlogs::new(options.backlog_budget),
            batch: MessageBatch::default(),
            counters: RouterRuntimeCounters::default(),
            shared: shared.clone(),
        };
        state.publish_status();
        let thread = std::thread::Builder::new()
            .name("affinity-router".into())
            .spawn(move || state.run())
            .map_err(|e| SubjectsError::Transport(Error::Io(e)))?;
        Ok(RouterRuntime { id, labels, shared, thread: Mutex::new(Some(thread)) })
    }

    /// The router's member id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The routing tables' member labels, by member index.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Takes the log entries made since the last call (at most [`MAX_PENDING_LOG`] are kept); an
    /// entry is here before any message it explains has left the router.
    pub fn drain_log(&self) -> Vec<LogEntry> {
        lock(&self.shared.log).drain(..).collect()
    }

    /// The latest snapshot (refreshed every [`TICK_INTERVAL`]).
    pub fn status(&self) -> RouterStatus {
        let mut status = lock(&self.shared.status).clone();
        status.counters.log_dropped += self.shared.log_dropped.load(Ordering::Relaxed);
        status
    }

    /// Replaces the node ids other cluster nodes may subscribe as (a reloaded configuration),
    /// from the router thread's next tick ([`RouterCore::set_cluster_nodes`]).
    pub fn set_cluster_nodes(&self, nodes: Vec<String>) {
        *lock(&self.shared.cluster_nodes) = Some(nodes);
    }

    /// Stops the thread (idempotent).
    pub fn close(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RouterRuntime {
    fn drop(&mut self) {
        self.close();
    }
}

impl RouterLoop {
    fn run(mut self) {
        let mut last_tick = self.clock.now();
        while !self.shared.stop.load(Ordering::Acquire) && !self.client.client_closed() {
            let mut work = self.poll_control();
            work += self.poll_data();
            let now = self.clock.now();
            if now.saturating_since(last_tick) >= TICK_INTERVAL {
                last_tick = now;
                self.core.tick(now);
                if let Some(nodes) = lock(&self.shared.cluster_nodes).take() {
                    self.core.set_cluster_nodes(nodes);
                }
                self.publish_status();
            }
            // Every iteration, before anything is sent: a log entry is visible to
            // `drain_log` before the message it explains can reach a peer.
            self.forward_log();
            work += self.send();
            if work == 0 {
                self.client.wait_for_data(IDLE_SLEEP);
            }
        }
        if self.client.client_closed() {
            return;
        }
        // A clean stop: every peer heard is told (and where to go), so none waits for a
        // timeout. Offered once on each peer's link, past its backlog (what the backlogs still
        // hold is dropped as before); then the router lingers, reading but sending nothing
        // more, so the driver sends those records before the process closes its client.
        self.core.stopping(self.forward.as_deref());
        {
            let RouterLoop { core, links, scratch, .. } = &mut self;
            core.outbox().drain(|to, bytes| {
                if let Some(Link { publication, auth }) = links.get_mut(&to) {
                    let _ = offer_sealed(publication, auth, scratch, bytes);
                }
            });
        }
        let lingering = self.clock.now();
        while self.clock.now().saturating_since(lingering) < STOP_LINGER && !self.client.client_closed() {
            if self.poll_control() + self.poll_data() == 0 {
                std::thread::sleep(IDLE_SLEEP);
            }
        }
    }

    fn poll_control(&mut self) -> usize {
        let RouterLoop { control, batch, clock, control_auth, core, counters, .. } = self;
        let mut work = 0;
        for subscription in control.iter() {
            batch.clear();
            work += subscription.poll_into(batch, FRAGMENTS_PER_ITERATION).unwrap_or(0);
            let now = clock.now();
            for index in 0..batch.len() {
                // Verified before anything is decoded; refusals are counted by the StreamAuth.
                let Ok(body) = control_auth.open(batch.message(index)) else { continue };
                match parse_control(body) {
                    Ok(ControlMessage::Heartbeat(heartbeat)) => core.on_heartbeat(heartbeat, now),
                    _ => counters.control_malformed += 1,
                }
            }
        }
        work
    }

    fn poll_data(&mut self) -> usize {
        self.batch.clear();
        let work = self.data.poll_into(&mut self.batch, FRAGMENTS_PER_ITERATION).unwrap_or(0);
        let now = self.clock.now();
        for index in 0..self.batch.len() {
            // Verified before anything is decoded; refusals are counted by the StreamAuth.
            let Ok(body) = self.data_auth.open(self.batch.message(index)) else { continue };
            self.core.on_message(body, now);
            // Into the backlogs, under their budget, after each message: the outbox never holds
            // more than what one message fans out to.
            self.queue();
        }
        work
    }

    /// Moves the core's queued records into the backlogs (opening links to new destinations)
    /// and drops the subscribers the budget evicted. Sends nothing.
    fn queue(&mut self) {
        let RouterLoop { core, client, links, backlogs, counters, secret, .. } = self;
        // Links for new destinations first (endpoints come from the core), then the records.
        let new: Vec<u64> = core.outbox().destinations().filter(|to| !links.contains_key(to)).collect();
        for to in new {
            let Some(endpoint) = core.endpoint(to) else { continue };
            if let Ok(publication) = client.add_publication_handle(&udp_channel(endpoint), DATA_STREAM_ID) {
                links.insert(to, Link { publication, auth: inbox_auth(secret.as_ref(), to) });
                backlogs.insert(to, !core.is_source(to));
            }
        }
        core.outbox().drain(|to, bytes| {
            if !backlogs.contains(to) {
                counters.unroutable += Records::new(bytes).count() as u64;
            } else {
                backlogs.push(to, bytes);
            }
        });
        // Subscribers evicted for the budget: their link closes, the core drops them (logged).
        for eviction in backlogs.take_evictions() {
            if let Some(link) = links.remove(&eviction.id) {
                link.publication.close();
            }
            core.evict_subscriber(eviction.id, eviction.bytes);
        }
    }

    fn send(&mut self) -> usize {
        self.queue();
        let RouterLoop { core, links, backlogs, scratch, .. } = self;
        let mut work = 0;
        let pending: Vec<u64> = backlogs.pending_ids().collect();
        for id in pending {
            if let Some(Link { publication, auth }) = links.get_mut(&id) {
                work += backlogs.flush(id, |bytes| offer_sealed(publication, auth, scratch, bytes));
            }
        }
        scratch_settle(scratch);
        // Links to peers the router forgot (no endpoint any more) are closed, whatever they
        // still hold (counted as dropped): a peer that is gone keeps no memory.
        links.retain(|id, link| {
            let keep = core.endpoint(*id).is_some();
            if !keep {
                backlogs.remove(*id);
                link.publication.close();
            }
            keep
        });
        work
    }

    fn forward_log(&mut self) {
        let entries = self.core.drain_log();
        if entries.is_empty() {
            return;
        }
        let mut log = lock(&self.shared.log);
        for entry in entries {
            if log.len() >= MAX_PENDING_LOG {
                log.pop_front();
                self.shared.log_dropped.fetch_add(1, Ordering::Relaxed);
            }
            log.push_back(entry);
        }
    }

    fn publish_status(&mut self) {
        let table = self.core.table();
        let members = table.member_ids().map(|m| (table.label(m).to_owned(), table.is_up(m))).collect();
        let mut runtime = self.counters;
        let backlogs = self.backlogs.counters();
        runtime.dropped_records += backlogs.dropped_records;
        runtime.messages_sent += backlogs.messages;
        runtime.backlog_bytes = self.backlogs.held();
        runtime.auth = self.data_auth.counters();
        runtime.auth.add(&self.control_auth.counters());
        *lock(&self.shared.status) = RouterStatus {
            authenticated: self.data_auth.is_authenticated(),
            counters: self.core.counters(),
            runtime,
            subjects: self.core.subject_count(),
            subscribers: self.core.subscriber_count(),
            affinities: table.affinity_count(),
            members,
        };
    }
}

// ---- subscribers and sources ------------------------------------------------------------------

/// Options of a subscriber or a source.
#[derive(Clone, Debug)]
pub struct PeerOptions {
    /// The routers' listen channels (1..=[`super::failover::MAX_ROUTERS`], distinct): the first
    /// is used first, the next when it is lost (`subjects::failover`).
    pub routers: Vec<String>,
    /// The client name (a source's label: it must match a `remote-label` of the router's
    /// configuration to be routed to).
    pub name: String,
    /// Address of the inbox (default 127.0.0.1); must be reachable by the router.
    pub host: String,
    /// Heartbeat interval and liveness timeout.
    pub timing: Timing,
    /// The router secret (the router's own): every message to and from the router is sealed
    /// and verified; without it the peer is unauthenticated (and so must its router be).
    pub secret: Option<GroupSecret>,
}

/// One record received by a subscriber or a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// What it is (DATA, REQUEST, DISCARD).
    pub kind: RecordKind,
    /// DATA flags.
    pub flags: u16,
    /// The subject.
    pub subject: String,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Counters of a subscriber or source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCounters {
    /// Inbox messages holding a malformed record.
    pub malformed: u64,
    /// Records received and handed to the caller (the router's ALIVE records are not counted).
    pub received: u64,
    /// Records dropped because the router's publication never accepted them (or were still
    /// queued for a router the peer moved away from).
    pub dropped_records: u64,
    /// Moves to another router, or restores at a restarted one (`subjects::failover`).
    pub router_switches: u64,
    /// Inbox messages refused before decoding (unauthenticated, unverifiable, bad tag,
    /// replayed).
    pub auth: AuthCounters,
}

struct PeerShared {
    id: u64,
    name: String,
    endpoint: String,
    role: Role,
    link: Mutex<PeerLinks>,
    /// Heartbeat publications, one per router; the one at `current` is used.
    heartbeats: Vec<Publication>,
    current: AtomicUsize,
    heartbeat_auth: Mutex<StreamAuth>,
    timing: Timing,
    stop: AtomicBool,
}

impl PeerShared {
    fn send_heartbeat(&self, leaving: bool) {
        let heartbeat = plain_heartbeat(super::fingerprint(), self.id, self.role, &self.name, &self.endpoint, leaving);
        let mut bytes = Vec::new();
        if member::seal_into(&mut bytes, &mut lock(&self.heartbeat_auth), |out| heartbeat.emit(out)).is_ok() {
            member::offer_to_all(&bytes, [&self.heartbeats[self.current.load(Ordering::Acquire)]]);
        }
    }

    fn run(self: Arc<Self>) {
        let clock = MonotonicClock::new();
        let mut last = None;
        while !self.stop.load(Ordering::Acquire) {
            let now = clock.now();
            if self.timing.heartbeat_due(last, now) {
                last = Some(now);
                self.send_heartbeat(false);
            }
            let pending = {
                let mut link = lock(&self.link);
                if link.pending() {
                    link.flush();
                }
                link.pending()
            };
            std::thread::sleep(if pending { IDLE_SLEEP } else { Duration::from_millis(1) });
        }
    }
}

/// What subscribers and sources share: an inbox, a link to the router, a heartbeat thread.
pub struct SubjectPeer {
    shared: Arc<PeerShared>,
    inbox: Subscription,
    /// Verifies what the router sends to the inbox.
    inbox_auth: Mutex<StreamAuth>,
    batch: Mutex<MessageBatch>,
    counters: Mutex<PeerCounters>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    /// Which router is in use and whether it is alive.
    watch: Mutex<RouterWatch>,
    /// What is sent again after a move.
    restore: Mutex<Restore>,
    /// Whether the router holds what was sent again ([`RestoreCheck`]).
    restore_check: Mutex<RestoreCheck>,
    clock: MonotonicClock,
}

impl SubjectPeer {
    fn open(client: &dyn ClientApi, role: Role, options: &PeerOptions) -> Result<SubjectPeer, SubjectsError> {
        check_name(&options.name)?;
        let clock = MonotonicClock::new();
        let watch = RouterWatch::new(options.routers.clone(), options.timing.liveness_timeout, clock.now())
            .map_err(SubjectsError::Config)?;
        let (endpoint, inbox) = open_inbox(client, &options.host)?;
        let id = new_member_id();
        let secret = options.secret.as_ref();
        let (mut links, mut heartbeats) = (Vec::new(), Vec::new());
        for router in &options.routers {
            let to_router = client.add_publication_handle(router, DATA_STREAM_ID)?;
            links.push(PeerLink::new(to_router, to_router_auth(secret, DATA_STREAM_ID)));
            heartbeats.push(client.add_publication_handle(router, CONTROL_STREAM_ID)?);
        }
        let shared = Arc::new(PeerShared {
            id,
            name: options.name.clone(),
            endpoint,
            role,
            link: Mutex::new(PeerLinks { links, current: 0 }),
            heartbeats,
            current: AtomicUsize::new(0),
            heartbeat_auth: Mutex::new(to_router_auth(secret, CONTROL_STREAM_ID)),
            timing: options.timing,
            stop: AtomicBool::new(false),
        });
        let runner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("affinity-subject-peer".into())
            .spawn(move || runner.run())
            .map_err(|e| SubjectsError::Transport(Error::Io(e)))?;
        Ok(SubjectPeer {
            shared,
            inbox,
            inbox_auth: Mutex::new(inbox_auth(secret, id)),
            batch: Mutex::new(MessageBatch::default()),
            counters: Mutex::new(PeerCounters::default()),
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
            watch: Mutex::new(watch),
            restore: Mutex::new(Restore::default()),
            restore_check: Mutex::new(RestoreCheck::default()),
            clock,
        })
    }

    /// The channel of the router in use.
    pub fn router(&self) -> String {
        let watch = lock(&self.watch);
        watch.routers()[watch.current()].clone()
    }

    /// Moves to the router `switch` names: drops what the old link still held, sends the
    /// [`Restore`] and a heartbeat there; returns the subjects whose subscribers get a STATUS.
    fn apply(&self, switch: Switch) -> Vec<String> {
        let (bytes, subjects) = self.restore_records();
        {
            let mut links = lock(&self.shared.link);
            links.links[switch.from].clear();
            links.current = switch.to;
            links.now().clear();
            self.shared.current.store(switch.to, Ordering::Release);
            if !bytes.is_empty() {
                links.push(&bytes);
                lock(&self.restore_check).sent(self.clock.now());
            }
            links.flush();
        }
        self.shared.send_heartbeat(false);
        subjects
    }

    /// Applies `switch` ([`Self::apply`]) and hands `handler` a STATUS naming it for each
    /// subject subscribed; returns how many.
    fn switch_to(&self, switch: Switch, handler: &mut impl FnMut(&SubjectRecord<'_>)) -> u64 {
        let text = {
            let watch = lock(&self.watch);
            switch.describe(watch.routers(), watch.liveness_timeout())
        };
        let mut statuses = 0;
        for subject in self.apply(switch) {
            statuses += 1;
            let status = SubjectRecord {
                kind: RecordKind::Data,
                flags: FLAG_STATUS,
                sender: 0,
                subject: &subject,
                payload: text.as_bytes(),
            };
            handler(&status);
        }
        statuses
    }

    /// The [`Restore`] encoded (SUBSCRIBE per subject, then ENLIST per enlistment), and the
    /// subjects it subscribes.
    fn restore_records(&self) -> (Vec<u8>, Vec<String>) {
        let restore = lock(&self.restore);
        let mut bytes = Vec::new();
        let id = self.shared.id;
        let reply = format!("{}\n{}", self.shared.endpoint, self.shared.name);
        let mut subjects = Vec::new();
        for subject in restore.subjects() {
            let record =
                SubjectRecord { kind: RecordKind::Subscribe, flags: 0, sender: id, subject, payload: reply.as_bytes() };
            if record.emit(&mut bytes).is_ok() {
                subjects.push(subject.to_owned());
            }
        }
        for (topic, coverage) in restore.enlistments() {
            let (flags, payload) = coverage.map_or((0, &[][..]), |c| (FLAG_COVERAGE, c.as_bytes()));
            let _ =
                SubjectRecord { kind: RecordKind::Enlist, flags, sender: id, subject: topic, payload }.emit(&mut bytes);
        }
        (bytes, subjects)
    }

    /// An ALIVE from the router in use said it holds `held` for this peer: sends the restore
    /// again if it was lost ([`RestoreCheck`]).
    fn check_restore(&self, held: Option<u32>, now: Instant) {
        let expected = lock(&self.restore).expected_held();
        let resend_after = self.shared.timing.heartbeat_interval;
        if !lock(&self.restore_check).on_alive(held, expected, now, resend_after) {
            return;
        }
        let (bytes, _) = self.restore_records();
        if !bytes.is_empty() {
            let mut links = lock(&self.shared.link);
            links.push(&bytes);
            links.flush();
        }
    }

    /// This peer's member id (its connection id).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The inbox endpoint (`host:port`).
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// Whether this peer holds a router secret (seals and verifies every message).
    pub fn is_authenticated(&self) -> bool {
        lock(&self.inbox_auth).is_authenticated()
    }

    /// Whether the router in use was heard (an ALIVE or any record) since the last move and
    /// within the liveness timeout: what a cluster node calls its master reachable.
    pub fn is_router_live(&self) -> bool {
        lock(&self.watch).is_live(self.clock.now())
    }

    /// Whether the listen channel of the router in use accepted the connection.
    pub fn is_connected(&self) -> bool {
        lock(&self.shared.link).now().publication.is_connected().unwrap_or(false)
    }

    fn send(&self, kind: RecordKind, flags: u16, subject: &str, payload: &[u8]) -> Result<bool, SubjectsError> {
        self.send_all(std::iter::once((kind, flags, subject, payload)))
    }

    /// Encodes every record (refusing the whole batch if one is invalid), queues them and sends
    /// what the publication accepts, packed. `Ok(false)`: the link to the router already holds
    /// [`MAX_BACKLOG_BYTES`] it has not accepted, and the records were dropped (counted).
    fn send_all<'a>(
        &self,
        records: impl IntoIterator<Item = (RecordKind, u16, &'a str, &'a [u8])>,
    ) -> Result<bool, SubjectsError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SubjectsError::Closed);
        }
        let mut bytes = Vec::new();
        for (kind, flags, subject, payload) in records {
            SubjectRecord { kind, flags, sender: self.shared.id, subject, payload }.emit(&mut bytes)?;
        }
        let mut link = lock(&self.shared.link);
        let queued = link.push(&bytes);
        link.flush();
        Ok(queued)
    }

    /// Receives up to `fragment_limit` fragments' worth of records, each handed to `handler`
    /// without a copy; returns the number of records.
    pub fn poll_with(
        &self,
        fragment_limit: usize,
        mut handler: impl FnMut(&SubjectRecord<'_>),
    ) -> Result<usize, SubjectsError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SubjectsError::Closed);
        }
        let mut batch = lock(&self.batch);
        batch.clear();
        self.inbox.poll_into(&mut batch, fragment_limit)?;
        let mut auth = lock(&self.inbox_auth);
        let (mut received, mut malformed) = (0u64, 0u64);
        let now = self.clock.now();
        let mut switched = false;
        let mut router_holds = None;
        for index in 0..batch.len() {
            // Verified before anything is decoded; refusals are counted by the StreamAuth.
            let Ok(body) = auth.open(batch.message(index)) else { continue };
            for record in Records::opened(body) {
                match record {
                    Ok(record) => {
                        let seen =
                            lock(&self.watch).on_record(record.sender, record.kind, record.flags, record.payload, now);
                        if let Some(switch) = seen {
                            // The STATUS comes before anything from the router moved to (its
                            // fresh image included), as the move happened before it.
                            switched = true;
                            received += self.switch_to(switch, &mut handler);
                        }
                        if record.kind == RecordKind::Alive {
                            // The router's own liveness, nothing for the caller.
                            if seen.is_none() && lock(&self.watch).is_current(record.sender) {
                                router_holds = Some(alive_held(record.flags, record.payload));
                            }
                            continue;
                        }
                        received += 1;
                        if record.kind == RecordKind::Data && record.flags & FLAG_REFUSED != 0 {
                            lock(&self.restore).unsubscribed(record.subject);
                        }
                        handler(&record);
                    }
                    Err(_) => malformed += 1,
                }
            }
        }
        drop(auth);
        drop(batch);
        if let (false, Some(held)) = (switched, router_holds) {
            self.check_restore(held, now);
        }
        let silent = lock(&self.watch).check(now);
        if let Some(switch) = silent {
            received += self.switch_to(switch, &mut handler);
        }
        let mut counters = lock(&self.counters);
        counters.received += received;
        counters.malformed += malformed;
        Ok(received as usize)
    }

    /// Receives up to `fragment_limit` fragments' worth of records, copied out.
    pub fn poll(&self, fragment_limit: usize) -> Result<Vec<Delivery>, SubjectsError> {
        let mut out = Vec::new();
        self.poll_with(fragment_limit, |r| {
            out.push(Delivery {
                kind: r.kind,
                flags: r.flags,
                subject: r.subject.to_owned(),
                payload: r.payload.to_vec(),
            })
        })?;
        Ok(out)
    }

    /// The counters.
    pub fn counters(&self) -> PeerCounters {
        let mut counters = *lock(&self.counters);
        counters.dropped_records = lock(&self.shared.link).dropped_records();
        counters.router_switches = lock(&self.watch).switches();
        counters.auth = lock(&self.inbox_auth).counters();
        counters
    }

    /// Sends a last heartbeat saying "leaving" and stops the thread (idempotent).
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let mut link = lock(&self.shared.link);
            link.flush();
        }
        self.shared.send_heartbeat(true);
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Drop for SubjectPeer {
    fn drop(&mut self) {
        self.close();
    }
}

/// A subscriber: subscribes to subjects through a router and receives their data.
pub struct SubjectSubscriber {
    peer: SubjectPeer,
}

impl SubjectSubscriber {
    /// Opens an inbox and starts heartbeating to the first of `options.routers`.
    pub fn new(client: &dyn ClientApi, options: &PeerOptions) -> Result<SubjectSubscriber, SubjectsError> {
        Ok(SubjectSubscriber { peer: SubjectPeer::open(client, Role::Subscriber, options)? })
    }

    /// The common part (id, poll, counters, close).
    pub fn peer(&self) -> &SubjectPeer {
        &self.peer
    }

    /// Subscribes to `subject` (the router holds one subscription per subscriber and subject:
    /// a second SUBSCRIBE changes nothing). `Ok(false)`: not sent, the link to the router is
    /// full ([`MAX_BACKLOG_BYTES`] not accepted yet): a refusal the caller must report.
    pub fn subscribe(&self, subject: &str) -> Result<bool, SubjectsError> {
        let reply = format!("{}\n{}", self.peer.shared.endpoint, self.peer.shared.name);
        let sent = self.peer.send(RecordKind::Subscribe, 0, subject, reply.as_bytes())?;
        if sent {
            lock(&self.peer.restore).subscribed(subject);
        }
        Ok(sent)
    }

    /// Subscribes to several subjects at once (packed into as few messages as possible);
    /// nothing is sent if one subject is invalid, or (`Ok(false)`) if the link to the router is
    /// full.
    pub fn subscribe_batch<'a>(&self, subjects: impl IntoIterator<Item = &'a str>) -> Result<bool, SubjectsError> {
        let reply = format!("{}\n{}", self.peer.shared.endpoint, self.peer.shared.name);
        let reply = reply.as_bytes();
        let subjects: Vec<&str> = subjects.into_iter().collect();
        let sent = self.peer.send_all(subjects.iter().map(|&subject| (RecordKind::Subscribe, 0, subject, reply)))?;
        if sent {
            let mut restore = lock(&self.peer.restore);
            for subject in subjects {
                restore.subscribed(subject);
            }
        }
        Ok(sent)
    }

    /// Drops the subscription to `subject`.
    pub fn unsubscribe(&self, subject: &str) -> Result<(), SubjectsError> {
        lock(&self.peer.restore).unsubscribed(subject);
        self.peer.send(RecordKind::Unsubscribe, 0, subject, &[]).map(|_| ())
    }
}

/// A source: serves the subjects the router requests, or the faucet topics it is assigned.
pub struct SubjectSource {
    peer: SubjectPeer,
}

impl SubjectSource {
    /// Opens an inbox and starts heartbeating to the first of `options.routers` with label
    /// `options.name`.
    pub fn new(client: &dyn ClientApi, options: &PeerOptions) -> Result<SubjectSource, SubjectsError> {
        Ok(SubjectSource { peer: SubjectPeer::open(client, Role::Source, options)? })
    }

    /// The common part (id, poll, counters, close).
    pub fn peer(&self) -> &SubjectPeer {
        &self.peer
    }

    /// Enlists as a faucet publisher on `control_topic` ([`super::codec::ANY_CONTROL_TOPIC`]: the router's own),
    /// with an optional coverage pattern; each call is one more enlistment (coverage unions).
    pub fn enlist(&self, control_topic: &str, coverage: Option<&str>) -> Result<(), SubjectsError> {
        lock(&self.peer.restore).enlisted(control_topic, coverage);
        match coverage {
            Some(pattern) => self.peer.send(RecordKind::Enlist, FLAG_COVERAGE, control_topic, pattern.as_bytes()),
            None => self.peer.send(RecordKind::Enlist, 0, control_topic, &[]),
        }
        .map(|_| ())
    }

    /// Leaves the faucet.
    pub fn delist(&self, control_topic: &str) -> Result<(), SubjectsError> {
        lock(&self.peer.restore).delisted(control_topic);
        self.peer.send(RecordKind::Delist, 0, control_topic, &[]).map(|_| ())
    }

    /// Publishes data for `subject` (an image when `image`, else an update).
    pub fn publish(&self, subject: &str, payload: &[u8], image: bool) -> Result<(), SubjectsError> {
        self.peer.send(RecordKind::Data, if image { FLAG_IMAGE } else { FLAG_UPDATE }, subject, payload).map(|_| ())
    }

    /// Sends DATA for `subject` with `flags` (any of the codec's DATA flags: a publish of a
    /// subject not requested from it carries `FLAG_PUBLISH`, an erase `FLAG_ERASE`).
    /// `Ok(false)`: not sent, the link to the router is full (counted in `dropped_records`).
    pub fn send_data(&self, subject: &str, flags: u16, payload: &[u8]) -> Result<bool, SubjectsError> {
        self.peer.send(RecordKind::Data, flags, subject, payload)
    }

    /// Publishes several updates (`image` false) or images at once, packed into as few
    /// transport messages as possible; nothing is sent if one record is invalid.
    pub fn publish_batch<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        image: bool,
    ) -> Result<(), SubjectsError> {
        let flags = if image { FLAG_IMAGE } else { FLAG_UPDATE };
        self.peer
            .send_all(records.into_iter().map(|(subject, payload)| (RecordKind::Data, flags, subject, payload)))
            .map(|_| ())
    }

    /// Answers NODATA for `subject` (`Unavailable` or `NotFound`; the record has no flag for
    /// any other NODATA).
    pub fn nodata(&self, subject: &str, status: NoDataStatus) -> Result<(), SubjectsError> {
        let flags = match status {
            NoDataStatus::NotFound => FLAG_NODATA_NOTFOUND,
            NoDataStatus::Unavailable => FLAG_NODATA_UNAVAILABLE,
            NoDataStatus::Other => {
                return Err(SubjectsError::Config("nodata: status must be unavailable or notfound".into()))
            }
        };
        self.peer.send(RecordKind::Data, flags, subject, &[]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::AuthError;

    fn secret(byte: u8) -> GroupSecret {
        GroupSecret::new(&[byte; 32]).unwrap()
    }

    fn records(sender: u64, subject: &str) -> Vec<u8> {
        let mut bytes = Vec::new();
        SubjectRecord { kind: RecordKind::Data, flags: FLAG_UPDATE, sender, subject, payload: b"p" }
            .emit(&mut bytes)
            .unwrap();
        SubjectRecord { kind: RecordKind::Data, flags: FLAG_UPDATE, sender, subject: "/second", payload: b"q" }
            .emit(&mut bytes)
            .unwrap();
        bytes
    }

    #[test]
    fn a_sealed_message_of_packed_records_opens_once_and_walks_every_record() {
        let (source, router) = (7u64, 9u64);
        let mut seal = to_router_auth(Some(&secret(1)), DATA_STREAM_ID);
        let mut open = to_router_auth(Some(&secret(1)), DATA_STREAM_ID);
        let mut bytes = records(source, "/first");
        seal.seal(&mut bytes);
        let body = open.open(&bytes).unwrap();
        let subjects: Vec<_> = Records::opened(body).map(|r| r.unwrap().subject).collect();
        assert_eq!(subjects, ["/first", "/second"]);
        assert_eq!(open.open(&bytes), Err(AuthError::Replayed));
        // The router's messages to one peer verify at that peer only, never at the router
        // (its inbound key) nor at another peer.
        let mut to_peer = inbox_auth(Some(&secret(1)), source);
        let mut reply = records(router, "/first");
        to_peer.seal(&mut reply);
        assert!(inbox_auth(Some(&secret(1)), source).open(&reply).is_ok());
        assert_eq!(inbox_auth(Some(&secret(1)), source + 1).open(&reply), Err(AuthError::BadTag));
        assert_eq!(to_router_auth(Some(&secret(1)), DATA_STREAM_ID).open(&reply), Err(AuthError::BadTag));
        // A heartbeat key is not a data key, another secret is not this one.
        assert_eq!(to_router_auth(Some(&secret(1)), CONTROL_STREAM_ID).open(&bytes), Err(AuthError::BadTag));
        assert_eq!(to_router_auth(Some(&secret(2)), DATA_STREAM_ID).open(&bytes), Err(AuthError::BadTag));
    }

    #[test]
    fn the_router_remembers_every_subscribers_window_so_an_old_message_is_never_accepted_again() {
        // More senders than the control plane's default window count, as a router with many
        // subscribers has: the first sender's message replayed at the end is still refused.
        let senders = crate::control::auth::MAX_REPLAY_SENDERS as u64 + 100;
        let mut router = router_inbound_auth(Some(&secret(1)), DATA_STREAM_ID);
        let mut first = None;
        for sender in 1..=senders {
            let mut member = to_router_auth(Some(&secret(1)), DATA_STREAM_ID);
            let mut bytes = records(sender, "/s");
            member.seal(&mut bytes);
            assert!(router.open(&bytes).is_ok());
            first.get_or_insert(bytes);
        }
        assert_eq!(router.open(&first.unwrap()), Err(AuthError::Replayed));
    }

    #[test]
    fn without_a_secret_records_pass_unchanged_and_sealed_ones_are_refused() {
        let mut plain = to_router_auth(None, DATA_STREAM_ID);
        let mut bytes = records(7, "/first");
        let unsealed = bytes.clone();
        plain.seal(&mut bytes);
        assert_eq!(bytes, unsealed, "no secret: nothing is sealed");
        assert_eq!(plain.open(&bytes), Ok(&unsealed[..]));
        let mut sealed = unsealed.clone();
        to_router_auth(Some(&secret(1)), DATA_STREAM_ID).seal(&mut sealed);
        assert_eq!(plain.open(&sealed), Err(AuthError::Unverifiable));
        // And a router with a secret refuses the plain records.
        let mut strict = to_router_auth(Some(&secret(1)), DATA_STREAM_ID);
        assert_eq!(strict.open(&unsealed), Err(AuthError::Unauthenticated));
        assert_eq!(strict.counters().unauthenticated, 1);
    }
}
