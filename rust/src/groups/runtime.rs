//! Runs the sans-IO group state over the client API (any [`ClientApi`]: embedded or attached; [`Publication`],
//! [`Subscription`]), like an application would.
//!
//! Every member has one inbox: a unicast subscription `aeron:udp?endpoint=<ip>:<port>` (port
//! picked by the OS) with a CONTROL stream (heartbeats, acks) and, for consumers, a DATA
//! stream. It writes its discovery file, scans the group's folder for peers and keeps a
//! control publication to each peer's inbox (publishers also a data publication to each
//! consumer's). A background thread per member handles control messages, heartbeats, file
//! scans and timers, with bounded work per iteration; it stops on close and on drop. The data
//! path (publish, publish_batch, poll, ack) runs on the caller's thread.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::consumer::{ConsumerState, Delivery};
use super::discovery::{self, MemberFile, MEMBER_FILE_VERSION};
use super::publisher::{PublisherState, Refusal};
use super::{check_consumer, GroupConfig, GroupError, Timing};
use crate::client::{ClientApi, MessageBatch, PublicationHandle as Publication, SubscriptionHandle as Subscription};
use crate::control::auth::TRAILER_LENGTH;
use crate::control::limits::{MAX_MEMBERS, MAX_NAME_LENGTH};
use crate::control::{
    parse_control, Ack, AuthCounters, ClaimState, ControlMessage, GroupSecret, Heartbeat, MemberView, Role, StreamAuth,
    CONTROL_STREAM_ID, DATA_STREAM_ID,
};
use crate::error::Error;
use crate::protocol::OfferError;
use crate::sync::lock;
use crate::time::{Instant, MonotonicClock};

/// Term length of control publications (heartbeats up to 512 KiB).
pub const CONTROL_TERM_LENGTH: &str = "4m";
/// Control fragments handled per background iteration.
pub const CONTROL_FRAGMENTS_PER_ITERATION: usize = 64;
/// DATA messages the background thread sends per iteration.
pub const DATA_MESSAGES_PER_ITERATION: usize = 256;
/// DATA fragments read per `poll` round.
pub const DATA_FRAGMENTS_PER_POLL: usize = 1024;
/// How long the background thread sleeps when it found nothing to do.
pub const IDLE_SLEEP: Duration = Duration::from_millis(1);

/// Options every member takes.
#[derive(Clone, Debug)]
pub struct MemberOptions {
    /// The registry directory (discovery files live in `<registry>/members/<group>/`).
    pub registry_dir: PathBuf,
    /// Human-readable name (default: `<role>-<pid>-<id>`).
    pub name: Option<String>,
    /// Address of the inbox (default 127.0.0.1); must be reachable by peers.
    pub host: String,
    /// Optional extra control channel (multicast): heartbeats are also sent and read there.
    pub control: Option<String>,
    /// Heartbeat interval and liveness timeout.
    pub timing: Timing,
    /// The group's shared secret: every message sent is sealed and every message received
    /// must verify (`control::auth`). `None`: unauthenticated (one host, trusted users only).
    pub secret: Option<GroupSecret>,
}

impl MemberOptions {
    /// Defaults for `registry_dir`.
    pub fn new(registry_dir: impl Into<PathBuf>) -> Self {
        MemberOptions {
            registry_dir: registry_dir.into(),
            name: None,
            host: "127.0.0.1".into(),
            control: None,
            timing: Timing::default(),
            secret: None,
        }
    }
}

/// Counters of the runtime (transport-level drops).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeCounters {
    /// Control-stream messages that failed to decode.
    pub control_malformed: u64,
    /// Heartbeats from another group.
    pub foreign_group: u64,
    /// Discovery files that could not be read or were invalid (last scan).
    pub files_invalid: u64,
    /// Stale discovery files removed.
    pub files_removed: u64,
    /// Publications to peers that could not be created.
    pub peer_errors: u64,
    /// Control messages a peer's publication refused (not connected yet, back-pressure).
    pub control_send_refused: u64,
    /// Control and DATA messages refused by authentication (dropped before decoding).
    pub auth: AuthCounters,
}

pub(crate) fn new_member_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() & (i64::MAX as u64)).max(1)
}

fn resolve_host(host: &str) -> Result<IpAddr, GroupError> {
    let address = match host.parse::<IpAddr>() {
        Ok(address) => address,
        Err(_) => (host, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addresses| addresses.next())
            .map(|a| a.ip())
            .ok_or_else(|| GroupError::Definition(format!("host {host:?}: cannot resolve it to an address")))?,
    };
    if address.is_unspecified() {
        return Err(GroupError::Definition(format!(
            "host {host:?}: a wildcard address cannot be advertised to peers; give this host's address"
        )));
    }
    Ok(address)
}

/// A peer's inbox, as this member reaches it.
/// Publications to create for a peer.
struct PeerRequest {
    id: u64,
    endpoint: String,
    data: bool,
    on_disk: bool,
    requested: Instant,
}

struct Peer {
    control: Option<Publication>,
    data: Option<Publication>,
    discovered: Instant,
    on_disk: bool,
}

/// What differs between publisher, consumer and observer.
trait Brain: Send + 'static {
    fn role(&self) -> Role;
    fn fingerprint(&self) -> u64;
    fn view(&self) -> &MemberView;
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant);
    fn on_ack(&mut self, _ack: &Ack, _now: Instant) {}
    fn handle_timeout(&mut self, now: Instant, discovery_complete: bool);
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat;
    fn take_announce(&mut self) -> bool {
        false
    }
    fn take_acks(&mut self) -> Vec<Ack> {
        Vec::new()
    }
    fn wants_data_publication(&self, _peer: Role) -> bool {
        false
    }
    fn pump(&mut self, _peers: &HashMap<u64, Peer>, _budget: usize, _data_auth: &mut StreamAuth) -> usize {
        0
    }
    fn on_data_publication(&mut self, _publication: &Publication) {}
}

struct Core<B: Brain> {
    brain: B,
    client: Arc<dyn ClientApi>,
    clock: MonotonicClock,
    member_id: u64,
    name: String,
    group: String,
    endpoint: String,
    pid: u32,
    hostname: String,
    dir: PathBuf,
    own_file: Option<PathBuf>,
    member_file: MemberFile,
    timing: Timing,
    control_sub: Subscription,
    data_sub: Option<Subscription>,
    multicast: Option<(Publication, Subscription)>,
    peers: HashMap<u64, Peer>,
    wanted: Vec<PeerRequest>,
    last_heartbeat: Option<Instant>,
    last_scan: Option<Instant>,
    control_batch: MessageBatch,
    data_batch: MessageBatch,
    encode: Vec<u8>,
    counters: RuntimeCounters,
    /// Seals what this member sends and verifies what it receives on the CONTROL stream.
    control_auth: StreamAuth,
    /// The same for the DATA stream (publishers seal, consumers verify).
    data_auth: StreamAuth,
    closed: bool,
}

impl<B: Brain> Core<B> {
    fn open(
        client: Arc<dyn ClientApi>,
        group: &GroupConfig,
        options: &MemberOptions,
        member_id: u64,
        default_name: String,
        brain: B,
    ) -> Result<Core<B>, GroupError> {
        let name = options.name.clone().unwrap_or(default_name);
        if name.is_empty() || name.len() > MAX_NAME_LENGTH {
            return Err(GroupError::Definition(format!("name {name:?}: must be 1..={MAX_NAME_LENGTH} bytes")));
        }
        let address = resolve_host(&options.host)?;
        let with_data = brain.role() == Role::Consumer;
        let mut opened = None;
        let mut last_error = None;
        for _ in 0..16 {
            let probe = std::net::UdpSocket::bind(SocketAddr::new(address, 0))
                .map_err(|e| GroupError::Definition(format!("host {}: cannot bind an inbox: {e}", options.host)))?;
            let endpoint = probe.local_addr().map_err(|e| GroupError::Transport(Error::Io(e)))?;
            drop(probe);
            let channel = format!("aeron:udp?endpoint={endpoint}");
            match client.add_subscription_handle(&channel, CONTROL_STREAM_ID) {
                Ok(control) => {
                    let data =
                        if with_data { Some(client.add_subscription_handle(&channel, DATA_STREAM_ID)?) } else { None };
                    opened = Some((endpoint.to_string(), control, data));
                    break;
                }
                Err(Error::Driver(message)) => last_error = Some(Error::Driver(message)),
                Err(other) => return Err(other.into()),
            }
        }
        let Some((endpoint, control_sub, data_sub)) = opened else {
            return Err(GroupError::Transport(
                last_error.unwrap_or_else(|| Error::Driver("cannot open an inbox".into())),
            ));
        };
        let multicast = match &options.control {
            Some(channel) => Some((
                client.add_publication_handle(channel, CONTROL_STREAM_ID)?,
                client.add_subscription_handle(channel, CONTROL_STREAM_ID)?,
            )),
            None => None,
        };
        let dir = discovery::members_dir(&options.registry_dir, &group.name);
        let hostname = discovery::hostname();
        let file = MemberFile {
            version: MEMBER_FILE_VERSION,
            member_id,
            group: group.name.clone(),
            name: name.clone(),
            role: brain.role().name().to_owned(),
            endpoint: endpoint.clone(),
            pid: std::process::id(),
            hostname: hostname.clone(),
        };
        let own_file = discovery::write_member_file(&dir, &file)?;
        let member_file = file;
        let mut core = Core {
            brain,
            client,
            clock: MonotonicClock::new(),
            member_id,
            name,
            group: group.name.clone(),
            endpoint,
            pid: std::process::id(),
            hostname,
            dir,
            own_file: Some(own_file),
            member_file,
            timing: options.timing,
            control_sub,
            data_sub,
            multicast,
            peers: HashMap::new(),
            wanted: Vec::new(),
            last_heartbeat: None,
            last_scan: None,
            control_batch: MessageBatch::default(),
            data_batch: MessageBatch::default(),
            encode: Vec::new(),
            counters: RuntimeCounters::default(),
            control_auth: StreamAuth::new(options.secret.as_ref(), group.fingerprint(), CONTROL_STREAM_ID),
            data_auth: StreamAuth::new(options.secret.as_ref(), group.fingerprint(), DATA_STREAM_ID),
            closed: false,
        };
        let now = core.clock.now();
        core.scan(now);
        core.open_wanted_now();
        Ok(core)
    }

    /// Asks for publications to a peer; they are created outside the member's lock (a driver
    /// round trip) and installed by [`Self::install`].
    fn add_peer(&mut self, id: u64, endpoint: &str, role: Role, on_disk: bool, now: Instant) {
        if self.peers.contains_key(&id) || self.wanted.iter().any(|request| request.id == id) {
            return;
        }
        if self.peers.len() + self.wanted.len() >= MAX_MEMBERS {
            self.counters.peer_errors += 1;
            return;
        }
        let data = self.brain.wants_data_publication(role);
        self.wanted.push(PeerRequest { id, endpoint: endpoint.to_owned(), data, on_disk, requested: now });
    }

    fn install(&mut self, request: PeerRequest, control: Option<Publication>, data: Option<Publication>) {
        if let Some(publication) = &data {
            self.brain.on_data_publication(publication);
        }
        if control.is_none() {
            self.counters.peer_errors += 1;
        }
        let peer = Peer { control, data, discovered: request.requested, on_disk: request.on_disk };
        self.peers.insert(request.id, peer);
    }

    /// Creates the publications asked for (called without the lock in the background thread).
    fn open_peers(
        client: &dyn ClientApi,
        requests: Vec<PeerRequest>,
    ) -> Vec<(PeerRequest, Option<Publication>, Option<Publication>)> {
        requests
            .into_iter()
            .map(|request| {
                let control = client
                    .add_publication_handle(
                        &format!("aeron:udp?endpoint={}|term-length={CONTROL_TERM_LENGTH}", request.endpoint),
                        CONTROL_STREAM_ID,
                    )
                    .ok();
                let data = if request.data {
                    client
                        .add_publication_handle(&format!("aeron:udp?endpoint={}", request.endpoint), DATA_STREAM_ID)
                        .ok()
                } else {
                    None
                };
                (request, control, data)
            })
            .collect()
    }

    /// Resolves pending peer requests at once (start-up, before the thread runs).
    fn open_wanted_now(&mut self) {
        let requests = std::mem::take(&mut self.wanted);
        for (request, control, data) in Self::open_peers(&self.client, requests) {
            self.install(request, control, data);
        }
    }

    fn scan(&mut self, now: Instant) {
        self.last_scan = Some(now);
        if let Some(own) = &self.own_file {
            if !own.exists() {
                // Someone removed our file (a mistaken clean-up): write it again.
                if let Ok(path) = discovery::write_member_file(&self.dir, &self.member_file) {
                    self.own_file = Some(path);
                }
            }
        }
        let found = discovery::scan(&self.dir, &self.group);
        self.counters.files_invalid = found.invalid;
        let mut on_disk = HashSet::new();
        for (path, file, role) in found.members {
            if file.member_id == self.member_id {
                continue;
            }
            if discovery::is_stale(&file, &self.hostname) && !self.brain.view().is_live(file.member_id, now) {
                if std::fs::remove_file(&path).is_ok() {
                    self.counters.files_removed += 1;
                }
                continue;
            }
            on_disk.insert(file.member_id);
            match self.peers.get_mut(&file.member_id) {
                Some(peer) => peer.on_disk = true,
                None => self.add_peer(file.member_id, &file.endpoint, role, true, now),
            }
        }
        let liveness = self.timing.liveness_timeout;
        let view = self.brain.view();
        self.peers.retain(|id, peer| {
            peer.on_disk = on_disk.contains(id);
            peer.on_disk || view.is_live(*id, now) || now.saturating_since(peer.discovered) < liveness
        });
    }

    /// Peers found on disk are all heard (or have had a liveness timeout to speak up).
    fn discovery_complete(&self, now: Instant) -> bool {
        let view = self.brain.view();
        let settled = |id: u64, on_disk: bool, since: Instant| {
            !on_disk || view.get(id).is_some() || now.saturating_since(since) >= self.timing.liveness_timeout
        };
        self.peers.iter().all(|(id, peer)| settled(*id, peer.on_disk, peer.discovered))
            && self.wanted.iter().all(|request| settled(request.id, request.on_disk, request.requested))
    }

    fn handle_control(&mut self, bytes_index: usize, now: Instant) {
        // Verified before anything is decoded; refusals are counted by the StreamAuth.
        let Ok(body) = self.control_auth.open(self.control_batch.message(bytes_index)) else { return };
        let message = parse_control(body);
        match message {
            Ok(ControlMessage::Heartbeat(heartbeat)) => {
                if heartbeat.fingerprint != self.brain_fingerprint() {
                    self.counters.foreign_group += 1;
                    return;
                }
                if heartbeat.member_id != self.member_id
                    && !heartbeat.leaving
                    && !self.peers.contains_key(&heartbeat.member_id)
                    && heartbeat.endpoint.parse::<SocketAddr>().is_ok()
                {
                    let endpoint = heartbeat.endpoint.clone();
                    self.add_peer(heartbeat.member_id, &endpoint, heartbeat.role, false, now);
                }
                self.brain.on_heartbeat(heartbeat, now);
            }
            Ok(ControlMessage::Ack(ack)) => self.brain.on_ack(&ack, now),
            Err(_) => self.counters.control_malformed += 1,
        }
    }

    /// The runtime counters, authentication refusals of both streams included.
    fn runtime_counters(&self) -> RuntimeCounters {
        let mut counters = self.counters;
        counters.auth = self.control_auth.counters();
        counters.auth.add(&self.data_auth.counters());
        counters
    }

    /// Whether this member authenticates its messages (a secret is configured).
    fn authenticated(&self) -> bool {
        self.control_auth.is_authenticated()
    }

    fn brain_fingerprint(&self) -> u64 {
        self.brain.fingerprint()
    }

    fn poll_control(&mut self, now: Instant) -> usize {
        let mut work = 0;
        self.control_batch.clear();
        if let Ok(fragments) = self.control_sub.poll_into(&mut self.control_batch, CONTROL_FRAGMENTS_PER_ITERATION) {
            work += fragments;
        }
        if let Some((_, subscription)) = &self.multicast {
            if let Ok(fragments) = subscription.poll_into(&mut self.control_batch, CONTROL_FRAGMENTS_PER_ITERATION) {
                work += fragments;
            }
        }
        for index in 0..self.control_batch.len() {
            self.handle_control(index, now);
        }
        work
    }

    fn send_heartbeat(&mut self, now: Instant) {
        self.last_heartbeat = Some(now);
        let heartbeat = self.brain.heartbeat(&self.name, &self.endpoint, self.pid);
        self.encode.clear();
        if heartbeat.emit(&mut self.encode).is_err() {
            self.counters.control_malformed += 1;
            return;
        }
        self.control_auth.seal(&mut self.encode);
        for peer in self.peers.values() {
            if let Some(publication) = &peer.control {
                if publication.try_offer(&self.encode).is_err() {
                    self.counters.control_send_refused += 1;
                }
            }
        }
        if let Some((publication, _)) = &self.multicast {
            let _ = publication.try_offer(&self.encode);
        }
    }

    fn send_acks(&mut self) {
        for ack in self.brain.take_acks() {
            self.encode.clear();
            if ack.emit(&mut self.encode).is_err() {
                continue;
            }
            self.control_auth.seal(&mut self.encode);
            let sent = self
                .peers
                .get(&ack.producer)
                .and_then(|peer| peer.control.as_ref())
                .is_some_and(|publication| publication.try_offer(&self.encode).is_ok());
            if !sent {
                self.counters.control_send_refused += 1;
            }
        }
    }

    /// One background iteration; returns the work done.
    fn duty_cycle(&mut self) -> usize {
        if self.closed {
            return 0;
        }
        let now = self.clock.now();
        let mut work = self.poll_control(now);
        if self.last_scan.is_none_or(|at| now.saturating_since(at) >= self.timing.heartbeat_interval) {
            self.scan(now);
        }
        let complete = self.discovery_complete(now);
        self.brain.handle_timeout(now, complete);
        let due = self.last_heartbeat.is_none_or(|at| now.saturating_since(at) >= self.timing.heartbeat_interval);
        if self.brain.take_announce() || due {
            self.send_heartbeat(now);
            work += 1;
        }
        self.send_acks();
        work += self.brain.pump(&self.peers, DATA_MESSAGES_PER_ITERATION, &mut self.data_auth);
        work
    }

    /// Leaves: a last heartbeat, publications and subscriptions closed, the file removed.
    fn shut(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.peers.clear();
        self.control_sub.close();
        if let Some(data) = &self.data_sub {
            data.close();
        }
        if let Some((publication, subscription)) = &self.multicast {
            publication.close();
            subscription.close();
        }
        if let Some(path) = self.own_file.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct Shared<B: Brain> {
    core: Mutex<Core<B>>,
    stop: AtomicBool,
}

/// A member: the shared core and its background thread.
struct Member<B: Brain> {
    shared: Arc<Shared<B>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<B: Brain> Member<B> {
    fn start(core: Core<B>) -> Result<Member<B>, GroupError> {
        let shared = Arc::new(Shared { core: Mutex::new(core), stop: AtomicBool::new(false) });
        let background = shared.clone();
        let thread = std::thread::Builder::new()
            .name("affinity-group".into())
            .spawn(move || {
                while !background.stop.load(Ordering::Acquire) {
                    let (work, requests, client) = {
                        let mut core = lock(&background.core);
                        let work = core.duty_cycle();
                        (work, std::mem::take(&mut core.wanted), core.client.clone())
                    };
                    if !requests.is_empty() {
                        // Driver round trips happen without the lock: the data path never waits on them.
                        let opened = Core::<B>::open_peers(&client, requests);
                        let mut core = lock(&background.core);
                        for (request, control, data) in opened {
                            if !core.closed {
                                core.install(request, control, data);
                            }
                        }
                        continue;
                    }
                    if work == 0 {
                        std::thread::sleep(IDLE_SLEEP);
                    }
                }
            })
            .map_err(|e| GroupError::Transport(Error::Io(e)))?;
        Ok(Member { shared, thread: Mutex::new(Some(thread)) })
    }

    fn core(&self) -> MutexGuard<'_, Core<B>> {
        lock(&self.shared.core)
    }

    fn stop_thread(&self) {
        self.shared.stop.store(true, Ordering::Release);
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    fn stop(&self) {
        self.stop_thread();
        self.core().shut();
    }
}

impl<B: Brain> Drop for Member<B> {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Publisher

struct PublisherBrain {
    state: PublisherState,
    buffer: Vec<u8>,
    max_message_set: bool,
}

impl PublisherBrain {
    /// Sends what `queues` have unsent to their owners; returns DATA messages sent.
    fn pump_queues(
        &mut self,
        peers: &HashMap<u64, Peer>,
        queues: &mut dyn Iterator<Item = u32>,
        budget: usize,
        data_auth: &mut StreamAuth,
    ) -> usize {
        let mut sent = 0;
        let mut blocked: Vec<u64> = Vec::new();
        for queue in queues {
            while sent < budget {
                let Some(transmit) = self.state.build_data(queue, &mut self.buffer) else { break };
                // One MAC per DATA message (many records), not per record.
                data_auth.seal(&mut self.buffer);
                if blocked.contains(&transmit.owner) {
                    break;
                }
                let Some(publication) = peers.get(&transmit.owner).and_then(|peer| peer.data.as_ref()) else {
                    blocked.push(transmit.owner);
                    break;
                };
                match publication.try_offer(&self.buffer) {
                    Ok(_) => {
                        self.state.commit(queue, transmit.last_sequence);
                        sent += 1;
                    }
                    Err(OfferError::AdminAction) => continue,
                    Err(_) => {
                        blocked.push(transmit.owner);
                        break;
                    }
                }
            }
        }
        sent
    }
}

impl Brain for PublisherBrain {
    fn role(&self) -> Role {
        Role::Publisher
    }
    fn fingerprint(&self) -> u64 {
        self.state.fingerprint()
    }
    fn view(&self) -> &MemberView {
        self.state.view()
    }
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        self.state.on_heartbeat(heartbeat, now);
    }
    fn on_ack(&mut self, ack: &Ack, now: Instant) {
        self.state.on_ack(ack, now);
    }
    fn handle_timeout(&mut self, now: Instant, _discovery_complete: bool) {
        self.state.handle_timeout(now);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        self.state.heartbeat(name, endpoint, pid)
    }
    fn wants_data_publication(&self, peer: Role) -> bool {
        peer == Role::Consumer
    }
    fn pump(&mut self, peers: &HashMap<u64, Peer>, budget: usize, data_auth: &mut StreamAuth) -> usize {
        let mut queues = 0..self.state.config().queue_count;
        self.pump_queues(peers, &mut queues, budget, data_auth)
    }
    fn on_data_publication(&mut self, publication: &Publication) {
        if !self.max_message_set {
            if let Ok(max) = publication.max_message_length() {
                // Room for the authentication trailer (sealed or not: one limit for both).
                self.state.set_max_message_length(max.saturating_sub(TRAILER_LENGTH));
                self.max_message_set = true;
            }
        }
    }
}

/// One queue's send figures, with the owner's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSendStatus {
    /// The queue.
    pub queue: u32,
    /// The owner records go to (0: none).
    pub owner_id: u64,
    /// The owner's name ("" when none).
    pub owner_name: String,
    /// The owner's epoch.
    pub epoch: u64,
    /// Highest sequence published.
    pub sent_sequence: u64,
    /// Highest sequence acknowledged.
    pub acked_sequence: u64,
    /// Bytes retained.
    pub retained_bytes: u64,
    /// Messages retained.
    pub retained_messages: u64,
}

/// A publisher's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublisherStatus {
    /// The producer id.
    pub producer_id: u64,
    /// The name.
    pub name: String,
    /// One entry per queue.
    pub queues: Vec<QueueSendStatus>,
    /// Whether this member authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// The outcome of one publish: a sequence number (> 0) or a refusal code (< 0).
pub type PublishCode = i64;

/// Publishes keyed records to a group.
pub struct GroupPublisher {
    member: Member<PublisherBrain>,
    producer_id: u64,
}

impl GroupPublisher {
    /// Joins `group` as a publisher through `client`.
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        options: &MemberOptions,
        resend_timeout: Duration,
    ) -> Result<GroupPublisher, GroupError> {
        if resend_timeout < Duration::from_millis(1) {
            return Err(GroupError::Definition("resend timeout: must be at least 1 ms".into()));
        }
        let producer_id = new_member_id();
        let clock_start = MonotonicClock::new().now();
        let state = PublisherState::new(group.clone(), producer_id, options.timing, resend_timeout, clock_start);
        let brain = PublisherBrain { state, buffer: Vec::new(), max_message_set: false };
        let name = format!("publisher-{}-{:x}", std::process::id(), producer_id & 0xffff);
        let core = Core::open(client, &group, options, producer_id, name, brain)?;
        Ok(GroupPublisher { member: Member::start(core)?, producer_id })
    }

    /// This producer's id.
    pub fn producer_id(&self) -> u64 {
        self.producer_id
    }

    fn finish(
        core: &mut Core<PublisherBrain>,
        result: Result<(u32, u64), Result<Refusal, GroupError>>,
    ) -> Result<PublishCode, GroupError> {
        match result {
            Ok((queue, sequence)) => {
                let Core { brain, peers, data_auth, .. } = core;
                brain.pump_queues(peers, &mut std::iter::once(queue), usize::MAX, data_auth);
                Ok(sequence as i64)
            }
            Err(Ok(refusal)) => Ok(refusal.code()),
            Err(Err(error)) => Err(error),
        }
    }

    /// Publishes one keyed record; returns its sequence number (> 0) or a refusal code:
    /// `NOT_CONNECTED` (-1, no live consumer), `BACK_PRESSURED` (-2, retention full),
    /// `CLOSED` (-4). `topic` travels as the subject `HP/bucket/topic`.
    pub fn publish(&self, key: &[u8], payload: &[u8], topic: Option<&str>) -> Result<PublishCode, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(Refusal::Closed.code());
        }
        let result = core.brain.state.publish(key, topic, payload);
        Self::finish(&mut core, result)
    }

    /// Publishes one record to `queue` directly (Spark row groups, markers).
    pub fn publish_to_queue(&self, queue: u32, payload: &[u8], key: &[u8]) -> Result<PublishCode, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(Refusal::Closed.code());
        }
        let result = core.brain.state.publish_to_queue(queue, key, payload).map(|sequence| (queue, sequence));
        Self::finish(&mut core, result)
    }

    /// Publishes keyed records in order until one is refused; returns how many were taken.
    /// Records are packed several to a transport message.
    pub fn publish_batch<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<usize, GroupError> {
        let mut core = self.member.core();
        if core.closed || core.client.client_closed() {
            return Ok(0);
        }
        let queue_count = core.brain.state.config().queue_count as usize;
        let mut touched = vec![false; queue_count];
        let mut taken = 0;
        for (key, payload) in records {
            match core.brain.state.publish(key, None, payload) {
                Ok((queue, _)) => {
                    if let Some(flag) = touched.get_mut(queue as usize) {
                        *flag = true;
                    }
                    taken += 1;
                }
                Err(Ok(_)) => break,
                Err(Err(error)) => {
                    if taken == 0 {
                        return Err(error);
                    }
                    break;
                }
            }
        }
        let Core { brain, peers, data_auth, .. } = &mut *core;
        let mut queues = touched.iter().enumerate().filter(|(_, t)| **t).map(|(q, _)| q as u32);
        brain.pump_queues(peers, &mut queues, usize::MAX, data_auth);
        Ok(taken)
    }

    /// Waits until everything published is acknowledged; `false` on timeout, or at once when
    /// the member or its client is closed (nothing more can be sent or acknowledged).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            {
                let mut core = self.member.core();
                if core.closed || core.client.client_closed() {
                    return core.brain.state.all_acked();
                }
                let Core { brain, peers, data_auth, .. } = &mut *core;
                brain.pump(peers, usize::MAX, data_auth);
                if brain.state.all_acked() {
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Per-queue figures.
    pub fn status(&self) -> PublisherStatus {
        let core = self.member.core();
        let view = core.brain.state.view();
        let queues = core
            .brain
            .state
            .queue_status()
            .into_iter()
            .map(|q| QueueSendStatus {
                queue: q.queue,
                owner_id: q.owner.map_or(0, |(id, _)| id),
                owner_name: q
                    .owner
                    .and_then(|(id, _)| view.get(id))
                    .map(|entry| entry.heartbeat.name.clone())
                    .unwrap_or_default(),
                epoch: q.owner.map_or(0, |(_, epoch)| epoch),
                sent_sequence: q.sent_sequence,
                acked_sequence: q.acked_sequence,
                retained_bytes: q.retained_bytes,
                retained_messages: q.retained_messages,
            })
            .collect();
        PublisherStatus {
            producer_id: self.producer_id,
            name: core.name.clone(),
            queues,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Counters of the sans-IO state and the runtime.
    pub fn counters(&self) -> (super::publisher::PublisherCounters, RuntimeCounters) {
        let core = self.member.core();
        (core.brain.state.counters(), core.runtime_counters())
    }

    /// Whether at least one consumer is live.
    pub fn has_consumer(&self) -> bool {
        self.member.core().brain.state.has_consumer()
    }

    /// Stops publishing: a last heartbeat (leaving), then the member leaves. Unacknowledged
    /// records are not waited for (call [`Self::flush`] first).
    pub fn close(&self) {
        {
            let mut core = self.member.core();
            if core.closed {
                return;
            }
            core.brain.state.close();
            let now = core.clock.now();
            core.send_heartbeat(now);
        }
        self.member.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Consumer

struct ConsumerBrain {
    state: ConsumerState,
}

impl Brain for ConsumerBrain {
    fn role(&self) -> Role {
        Role::Consumer
    }
    fn fingerprint(&self) -> u64 {
        self.state.fingerprint()
    }
    fn view(&self) -> &MemberView {
        self.state.view()
    }
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        self.state.on_heartbeat(heartbeat, now);
    }
    fn handle_timeout(&mut self, now: Instant, discovery_complete: bool) {
        self.state.set_discovery_complete(discovery_complete);
        self.state.handle_timeout(now);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        self.state.heartbeat(name, endpoint, pid)
    }
    fn take_announce(&mut self) -> bool {
        self.state.take_announce()
    }
    fn take_acks(&mut self) -> Vec<Ack> {
        self.state.take_acks()
    }
}

/// A consumer's status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerStatus {
    /// Member id.
    pub member_id: u64,
    /// Name.
    pub name: String,
    /// Index.
    pub index: u32,
    /// Count.
    pub count: u32,
    /// Queues delivered by this consumer.
    pub owned: Vec<u32>,
    /// Records delivered.
    pub delivered: u64,
    /// Duplicates dropped.
    pub duplicates_dropped: u64,
    /// Whether this member authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// Consumes the queues this member owns.
pub struct GroupConsumer {
    member: Member<ConsumerBrain>,
    member_id: u64,
    auto_ack: bool,
}

impl GroupConsumer {
    /// Joins `group` as consumer `index` of `count`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        index: u32,
        count: u32,
        options: &MemberOptions,
        auto_ack: bool,
        cycle: Duration,
    ) -> Result<GroupConsumer, GroupError> {
        check_consumer(index, count, group.queue_count)?;
        if cycle < options.timing.heartbeat_interval {
            return Err(GroupError::Definition(format!(
                "cycle {} ms: must be at least one heartbeat interval",
                cycle.as_millis()
            )));
        }
        let member_id = new_member_id();
        let now = MonotonicClock::new().now();
        let state = ConsumerState::new(group.clone(), member_id, index, count, options.timing, cycle, now);
        let name = format!("consumer-{index}-{}-{:x}", std::process::id(), member_id & 0xffff);
        let core = Core::open(client, &group, options, member_id, name, ConsumerBrain { state })?;
        Ok(GroupConsumer { member: Member::start(core)?, member_id, auto_ack })
    }

    /// The member id.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }

    /// Up to `max` records (waiting up to `timeout` for the first). With `auto_ack`,
    /// everything delivered by the previous poll is acknowledged first.
    pub fn poll(&self, max: usize, timeout: Duration) -> Result<Vec<Delivery>, GroupError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::new();
        let mut first = true;
        loop {
            {
                let mut core = self.member.core();
                if core.closed || core.client.client_closed() {
                    return Err(GroupError::Closed);
                }
                if first && self.auto_ack {
                    core.brain.state.ack_all_delivered();
                    core.send_acks();
                }
                first = false;
                core.brain.state.deliver(max, &mut out);
                if out.len() < max {
                    let now = core.clock.now();
                    let Core { brain, data_sub, data_batch, data_auth, .. } = &mut *core;
                    data_batch.clear();
                    if let Some(subscription) = data_sub {
                        let _ = subscription.poll_into(data_batch, DATA_FRAGMENTS_PER_POLL);
                    }
                    for index in 0..data_batch.len() {
                        // Verified (one MAC per message) before decoding; refusals are counted.
                        if let Ok(body) = data_auth.open(data_batch.message(index)) {
                            let _ = brain.state.on_data(body, now);
                        }
                    }
                    brain.state.deliver(max, &mut out);
                }
            }
            if !out.is_empty() || max == 0 || std::time::Instant::now() >= deadline {
                return Ok(out);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Acknowledges `delivery` and everything delivered before it from the same producer and
    /// queue. `false` if the queue is no longer held in that epoch (counted).
    pub fn ack(&self, queue: u32, producer: u64, sequence: u64, epoch: u64) -> bool {
        self.member.core().brain.state.ack(queue, producer, sequence, epoch)
    }

    /// Queues this consumer delivers now.
    pub fn owned_queues(&self) -> Vec<u32> {
        self.member.core().brain.state.owned_queues()
    }

    /// The consumer's status.
    pub fn status(&self) -> ConsumerStatus {
        let core = self.member.core();
        let (index, count) = core.brain.state.index_count();
        let counters = core.brain.state.counters();
        ConsumerStatus {
            member_id: self.member_id,
            name: core.name.clone(),
            index,
            count,
            owned: core.brain.state.owned_queues(),
            delivered: counters.delivered,
            duplicates_dropped: counters.duplicates_dropped,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Counters of the sans-IO state and the runtime.
    pub fn counters(&self) -> (super::consumer::ConsumerCounters, RuntimeCounters) {
        let core = self.member.core();
        (core.brain.state.counters(), core.runtime_counters())
    }

    /// Clean leave: every held queue is released once the application acknowledged what it
    /// was given (with `auto_ack`, everything delivered counts as acknowledged), handed over,
    /// then the member leaves. After `timeout / 2` queues are released whatever was
    /// acknowledged (the rest is redelivered to the next owner); after `timeout` it leaves.
    pub fn close(&self, timeout: Duration) {
        let start = std::time::Instant::now();
        {
            let mut core = self.member.core();
            if core.closed {
                return;
            }
            let now = core.clock.now();
            core.brain.state.begin_close(self.auto_ack, now);
            core.send_heartbeat(now);
            core.send_acks();
        }
        let mut forced = false;
        loop {
            {
                let mut core = self.member.core();
                let now = core.clock.now();
                if core.brain.state.close_complete(now) {
                    break;
                }
                if !forced && start.elapsed() >= timeout / 2 {
                    core.brain.state.force_release();
                    core.send_heartbeat(now);
                    forced = true;
                }
            }
            if start.elapsed() >= timeout {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        {
            let mut core = self.member.core();
            let now = core.clock.now();
            core.send_acks();
            core.send_heartbeat(now);
        }
        self.member.stop();
    }
}

// ---------------------------------------------------------------------------------------------
// Observer

struct ObserverBrain {
    view: MemberView,
    fingerprint: u64,
    member_id: u64,
}

impl Brain for ObserverBrain {
    fn role(&self) -> Role {
        Role::Observer
    }
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
    fn view(&self) -> &MemberView {
        &self.view
    }
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant) {
        self.view.on_heartbeat(heartbeat, now);
    }
    fn handle_timeout(&mut self, now: Instant, _discovery_complete: bool) {
        let forget = self.view.liveness_timeout() * 5;
        self.view.expire(now, forget);
    }
    fn heartbeat(&self, name: &str, endpoint: &str, pid: u32) -> Heartbeat {
        Heartbeat {
            fingerprint: self.fingerprint,
            member_id: self.member_id,
            leaving: false,
            role: Role::Observer,
            name: name.to_owned(),
            endpoint: endpoint.to_owned(),
            index: 0,
            count: 0,
            pid,
            claims: Vec::new(),
            figures: Vec::new(),
        }
    }
}

/// A member as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// Member id.
    pub member_id: u64,
    /// Name.
    pub name: String,
    /// `publisher`, `consumer` or `observer`.
    pub role: String,
    /// Consumer index (0 otherwise).
    pub index: u32,
    /// Consumer count (0 otherwise).
    pub count: u32,
    /// Inbox endpoint.
    pub endpoint: String,
    /// Milliseconds since its last heartbeat.
    pub last_heard_ms: u64,
}

/// A queue as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueStatus {
    /// The queue.
    pub queue: u32,
    /// Owner member id (0: none).
    pub owner_id: u64,
    /// Owner name ("" when none).
    pub owner_name: String,
    /// Epoch of the owner's claim (or the highest seen).
    pub epoch: u64,
    /// `claiming`, `active`, `releasing`, or `unowned`.
    pub state: String,
    /// Sum over live publishers of their acknowledged sequence for the queue.
    pub acked_sequence: u64,
    /// Sum over live publishers of their published sequence for the queue.
    pub sent_sequence: u64,
    /// Sum over live publishers of bytes retained for the queue.
    pub retained_bytes: u64,
    /// `sent_sequence - acked_sequence`.
    pub lag: u64,
}

/// The group as the observer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// Members heard recently (live, or silent for less than five liveness timeouts), by id.
    pub members: Vec<MemberStatus>,
    /// One entry per queue.
    pub queues: Vec<QueueStatus>,
    /// Whether the observer authenticates its messages (a group secret is configured).
    pub authenticated: bool,
    /// Messages refused by authentication (unauthenticated, bad tag, replayed, unverifiable).
    pub auth_refused: u64,
}

/// Joins a group's control plane to watch it (for `affinity group status`); owns nothing.
pub struct GroupObserver {
    member: Member<ObserverBrain>,
    queue_count: u32,
}

impl GroupObserver {
    /// Joins `group` as an observer.
    pub fn new(
        client: Arc<dyn ClientApi>,
        group: GroupConfig,
        options: &MemberOptions,
    ) -> Result<GroupObserver, GroupError> {
        let member_id = new_member_id();
        let brain = ObserverBrain {
            view: MemberView::new(member_id, group.fingerprint(), options.timing.liveness_timeout),
            fingerprint: group.fingerprint(),
            member_id,
        };
        let name = format!("observer-{}-{:x}", std::process::id(), member_id & 0xffff);
        let queue_count = group.queue_count;
        let core = Core::open(client, &group, options, member_id, name, brain)?;
        Ok(GroupObserver { member: Member::start(core)?, queue_count })
    }

    /// What the observer knows now.
    pub fn status(&self) -> GroupStatus {
        let core = self.member.core();
        let now = core.clock.now();
        let view = &core.brain.view;
        let mut members: Vec<MemberStatus> = view
            .all()
            .map(|entry| MemberStatus {
                member_id: entry.id(),
                name: entry.heartbeat.name.clone(),
                role: entry.heartbeat.role.name().to_owned(),
                index: entry.heartbeat.index,
                count: entry.heartbeat.count,
                endpoint: entry.heartbeat.endpoint.clone(),
                last_heard_ms: now.saturating_since(entry.last_heard).as_millis() as u64,
            })
            .collect();
        members.sort_by_key(|m| m.member_id);
        let queues = (0..self.queue_count)
            .map(|queue| {
                let mut owner: Option<(u64, u64, ClaimState, String)> = None;
                let mut max_epoch = 0;
                for entry in view.live_with_role(Role::Consumer, now) {
                    for claim in entry.heartbeat.claims.iter().filter(|c| c.queue == queue) {
                        max_epoch = max_epoch.max(claim.epoch);
                        if !claim.state.holds() {
                            continue;
                        }
                        let better = owner.as_ref().is_none_or(|(id, epoch, _, _)| {
                            claim.epoch > *epoch || (claim.epoch == *epoch && entry.id() < *id)
                        });
                        if better {
                            owner = Some((entry.id(), claim.epoch, claim.state, entry.heartbeat.name.clone()));
                        }
                    }
                }
                let (mut sent, mut acked, mut retained) = (0u64, 0u64, 0u64);
                for entry in view.live_with_role(Role::Publisher, now) {
                    for figure in entry.heartbeat.figures.iter().filter(|f| f.queue == queue) {
                        sent = sent.saturating_add(figure.sent);
                        acked = acked.saturating_add(figure.acked);
                        retained = retained.saturating_add(figure.retained_bytes);
                    }
                }
                let (owner_id, epoch, state, owner_name) = match owner {
                    Some((id, epoch, state, name)) => (id, epoch, state.name().to_owned(), name),
                    None => (0, max_epoch, "unowned".to_owned(), String::new()),
                };
                QueueStatus {
                    queue,
                    owner_id,
                    owner_name,
                    epoch,
                    state,
                    acked_sequence: acked,
                    sent_sequence: sent,
                    retained_bytes: retained,
                    lag: sent.saturating_sub(acked),
                }
            })
            .collect();
        GroupStatus {
            members,
            queues,
            authenticated: core.authenticated(),
            auth_refused: core.runtime_counters().auth.total(),
        }
    }

    /// Leaves the control plane.
    pub fn close(&self) {
        self.member.stop();
    }
}

/// The registry's discovery folder of `group` (for tools).
pub fn group_members_dir(registry: &Path, group: &str) -> PathBuf {
    discovery::members_dir(registry, group)
}
