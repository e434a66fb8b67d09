//! Runs the sans-IO group state over the client API (any [`ClientApi`]: embedded or attached; [`Publication`],
//! [`Subscription`]), like an application would: the shared member runtime here, one module per
//! role ([`publisher`], [`consumer`], [`observer`]), the inbox, heartbeats and peer table from
//! [`crate::control::member`].
//!
//! Every member has one inbox: a unicast subscription `aeron:udp?endpoint=<ip>:<port>` (port
//! picked by the OS) with a CONTROL stream (heartbeats, acks) and, for consumers, a DATA
//! stream. It writes its discovery file, scans the group's folder for peers and keeps a
//! control publication to each peer's inbox (publishers also a data publication to each
//! consumer's). A background thread per member handles control messages, heartbeats, file
//! scans and timers, with bounded work per iteration; it stops on close and on drop. The data
//! path (publish, publish_batch, poll, ack) runs on the caller's thread.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use self::bootstrap::{answer_message, bootstrap_auth, control_channel, Answered, Replies};
use super::bootstrap::DEFAULT_BOOTSTRAP_TIMEOUT;
use super::discovery::{self, MemberFile, MEMBER_FILE_VERSION};
use super::{GroupConfig, GroupError};
use crate::client::{ClientApi, MessageBatch, PublicationHandle as Publication, SubscriptionHandle as Subscription};
use crate::control::bootstrap::{BootstrapMember, BootstrapReply, BootstrapRequest};
use crate::control::codec::Kind;
use crate::control::limits::MAX_NAME_LENGTH;
use crate::control::member::{self, InboxAddress, Peer, PeerRequest, PeerTable};
use crate::control::Timing;
use crate::control::{
    parse_control, Ack, AuthCounters, ControlMessage, GroupSecret, Heartbeat, MemberView, Role, StreamAuth,
    CONTROL_STREAM_ID, DATA_STREAM_ID,
};
use crate::error::Error;
use crate::sync::lock;
use crate::time::{Instant, MonotonicClock};

pub mod bootstrap;
pub mod consumer;
pub mod observer;
pub mod publisher;
pub mod responder;

pub use consumer::{ConsumerStatus, GroupConsumer};
pub use observer::{GroupObserver, GroupStatus, MemberStatus, QueueStatus};
pub use publisher::{GroupPublisher, PublishCode, PublisherStatus, QueueSendStatus};

/// Term length of control publications (heartbeats up to 512 KiB).
pub use crate::control::member::CONTROL_TERM_LENGTH;
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
    /// Where the inbox listens (`host:port`; a wildcard address advertises `host`); `None`: a
    /// port the OS picks on `host`.
    pub listen: Option<String>,
    /// Members to ask for the group's definition and members (`host:port` of their inboxes,
    /// see [`crate::groups::bootstrap`]). Non-empty: no registry files are read or written,
    /// and heartbeats also go to these addresses, so members started in any order find
    /// each other.
    pub bootstrap: Vec<SocketAddr>,
    /// How long a member waits for a bootstrap answer.
    pub bootstrap_timeout: Duration,
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
            listen: None,
            bootstrap: Vec::new(),
            bootstrap_timeout: DEFAULT_BOOTSTRAP_TIMEOUT,
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
    /// BOOTSTRAP requests answered.
    pub bootstrap_answered: u64,
    /// BOOTSTRAP requests about another group, or dropped with too many answers in flight;
    /// refresh answers of another definition or request.
    pub bootstrap_ignored: u64,
    /// Members found through refresh answers (not in the first answer, not heard yet).
    pub bootstrap_learned: u64,
    /// Pauses of this member's own thread longer than a heartbeat interval, excused
    /// ([`MemberView::excuse_pause`]).
    pub own_pauses_excused: u64,
}

trait Brain: Send + 'static {
    fn role(&self) -> Role;
    fn fingerprint(&self) -> u64;
    fn view(&self) -> &MemberView;
    fn on_heartbeat(&mut self, heartbeat: Heartbeat, now: Instant);
    fn on_ack(&mut self, _ack: &Ack, _now: Instant) {}
    fn handle_timeout(&mut self, now: Instant, discovery_complete: bool);
    /// Excuses a pause of this member's own thread (see [`MemberView::excuse_pause`]).
    fn excuse_pause(&mut self, pause: Duration);
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
    definition: GroupConfig,
    endpoint: String,
    pid: u32,
    hostname: String,
    dir: PathBuf,
    own_file: Option<PathBuf>,
    member_file: MemberFile,
    /// Whether discovery uses the registry (no bootstrap list).
    registry: bool,
    /// Publications to the bootstrap addresses: heartbeats go there too.
    seeds: Vec<Publication>,
    /// Members the bootstrap answer listed, kept while live or young (as registry files are).
    seed_ids: HashSet<u64>,
    /// Verifies BOOTSTRAP requests and seals the answers.
    bootstrap_auth: StreamAuth,
    /// Answers in flight.
    replies: Replies,
    /// When the member started (seeds have a liveness timeout to speak up).
    started: Instant,
    /// When the member last asked the bootstrap addresses for the members they hear.
    last_refresh: Instant,
    /// The nonce of those requests (answers with another are ignored).
    refresh_nonce: u64,
    timing: Timing,
    control_sub: Subscription,
    data_sub: Option<Subscription>,
    multicast: Option<(Publication, Subscription)>,
    peers: PeerTable,
    last_heartbeat: Option<Instant>,
    last_scan: Option<Instant>,
    /// When the last background iteration ran: a longer gap than a heartbeat interval is a
    /// pause of this member's own (its process stopped, or not scheduled), excused.
    last_cycle: Option<Instant>,
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
        let address = InboxAddress::new(&options.host, options.listen.as_deref())?;
        let streams: &[i32] =
            if brain.role() == Role::Consumer { &[CONTROL_STREAM_ID, DATA_STREAM_ID] } else { &[CONTROL_STREAM_ID] };
        let inbox = member::open_inbox(&*client, &address, streams)?;
        let endpoint = inbox.endpoint;
        let mut subscriptions = inbox.subscriptions.into_iter();
        let (Some(control_sub), data_sub) = (subscriptions.next(), subscriptions.next()) else {
            return Err(GroupError::Transport(Error::Driver("inbox opened without its CONTROL stream".into())));
        };
        let multicast = match &options.control {
            Some(channel) => Some((
                client.add_publication_handle(channel, CONTROL_STREAM_ID)?,
                client.add_subscription_handle(channel, CONTROL_STREAM_ID)?,
            )),
            None => None,
        };
        let registry = options.bootstrap.is_empty();
        let learned = if registry {
            None
        } else {
            // Holding a definition already: no answer within a liveness timeout means this
            // member is the first (it keeps heartbeating the addresses); another definition is
            // refused, naming both.
            let wait = options.bootstrap_timeout.min(options.timing.liveness_timeout);
            let asked = bootstrap::fetch(&*client, &group.name, Some(group), &options.bootstrap, options, wait);
            match asked {
                Ok(learned) => Some(learned),
                Err(GroupError::Definition(message)) if message.contains(bootstrap::NO_ANSWER) => None,
                Err(error) => {
                    control_sub.close();
                    if let Some(data) = &data_sub {
                        data.close();
                    }
                    return Err(error);
                }
            }
        };
        let seeds = options
            .bootstrap
            .iter()
            .map(|address| address.to_string())
            .filter(|address| *address != endpoint)
            .filter_map(|address| client.add_publication_handle(&control_channel(&address), CONTROL_STREAM_ID).ok())
            .collect();
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
        let own_file = if registry { Some(discovery::write_member_file(&dir, &file)?) } else { None };
        let member_file = file;
        let clock = MonotonicClock::new();
        let started = clock.now();
        let mut core = Core {
            brain,
            client,
            clock,
            member_id,
            name,
            group: group.name.clone(),
            definition: group.clone(),
            endpoint,
            pid: std::process::id(),
            hostname,
            dir,
            own_file,
            member_file,
            registry,
            seeds,
            seed_ids: HashSet::new(),
            bootstrap_auth: bootstrap_auth(options.secret.as_ref(), &group.name),
            replies: Replies::default(),
            started,
            last_refresh: started,
            refresh_nonce: member::new_member_id(),
            timing: options.timing,
            control_sub,
            data_sub,
            multicast,
            peers: PeerTable::new(),
            last_heartbeat: None,
            last_scan: None,
            last_cycle: None,
            control_batch: MessageBatch::default(),
            data_batch: MessageBatch::default(),
            encode: Vec::new(),
            counters: RuntimeCounters::default(),
            control_auth: StreamAuth::new(options.secret.as_ref(), group.fingerprint(), CONTROL_STREAM_ID),
            data_auth: StreamAuth::new(options.secret.as_ref(), group.fingerprint(), DATA_STREAM_ID),
            closed: false,
        };
        let now = core.clock.now();
        // Observers are not peers to wait for: they receive heartbeats once heard, and a
        // bootstrap responder (`responder`, listed as an observer) never heartbeats at all.
        for member in learned.map(|learned| learned.members).unwrap_or_default() {
            if member.member_id != member_id && member.role != Role::Observer {
                core.seed_ids.insert(member.member_id);
                core.add_peer(member.member_id, &member.endpoint, member.role, true, now);
            }
        }
        core.scan(now);
        core.open_wanted_now();
        Ok(core)
    }

    /// Asks for publications to a peer; they are created outside the member's lock (a driver
    /// round trip) and installed by [`Self::install`].
    fn add_peer(&mut self, id: u64, endpoint: &str, role: Role, listed: bool, now: Instant) {
        let data = self.brain.wants_data_publication(role);
        if !self.peers.request(id, endpoint, data, listed, now) {
            self.counters.peer_errors += 1;
        }
    }

    fn install(&mut self, request: PeerRequest, control: Option<Publication>, data: Option<Publication>) {
        if let Some(publication) = &data {
            self.brain.on_data_publication(publication);
        }
        if control.is_none() {
            self.counters.peer_errors += 1;
        }
        self.peers.install(request, control, data);
    }

    /// Resolves pending peer requests at once (start-up, before the thread runs).
    fn open_wanted_now(&mut self) {
        let requests = self.peers.take_requests();
        for (request, control, data) in PeerTable::open(&*self.client, requests) {
            self.install(request, control, data);
        }
    }

    fn scan(&mut self, now: Instant) {
        self.last_scan = Some(now);
        if !self.registry {
            // Bootstrap: the answer's members count as listed while live or young.
            let (view, liveness, started) = (self.brain.view(), self.timing.liveness_timeout, self.started);
            self.seed_ids.retain(|id| view.is_live(*id, now) || now.saturating_since(started) < liveness);
            self.peers.retain(&self.seed_ids, self.brain.view(), liveness, now);
            return;
        }
        if let Some(own) = &self.own_file {
            // Someone removed our file (a mistaken clean-up): write it again. A group folder that
            // is gone means the registry was removed (its owner cleaned up): it is not recreated.
            if !own.exists() && self.dir.is_dir() {
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
            if !self.peers.mark_listed(file.member_id) {
                self.add_peer(file.member_id, &file.endpoint, role, true, now);
            }
        }
        self.peers.retain(&on_disk, self.brain.view(), self.timing.liveness_timeout, now);
    }

    /// Peers found on disk are all heard (or have had a liveness timeout to speak up).
    fn discovery_complete(&self, now: Instant) -> bool {
        self.peers.discovery_complete(self.brain.view(), self.timing.liveness_timeout, now)
    }

    fn handle_control(&mut self, bytes_index: usize, now: Instant) {
        match self.control_batch.message(bytes_index).get(1) {
            Some(kind) if *kind == Kind::Bootstrap as u8 => return self.handle_bootstrap(bytes_index, now),
            Some(kind) if *kind == Kind::BootstrapReply as u8 => return self.handle_refresh(bytes_index, now),
            _ => {}
        }
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
                    && !self.peers.knows(heartbeat.member_id)
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

    /// Answers a BOOTSTRAP (verified under the group name's namespace before decoding).
    fn handle_bootstrap(&mut self, bytes_index: usize, now: Instant) {
        let own =
            BootstrapMember { member_id: self.member_id, role: self.brain.role(), endpoint: self.endpoint.clone() };
        let message = self.control_batch.message(bytes_index);
        let (request, bytes) =
            match answer_message(&mut self.bootstrap_auth, message, &self.definition, own, self.brain.view(), now) {
                Answered::Reply { request, bytes } => (request, bytes),
                Answered::Refused => return,
                Answered::Malformed => {
                    self.counters.control_malformed += 1;
                    return;
                }
                Answered::OtherGroup => {
                    self.counters.bootstrap_ignored += 1;
                    return;
                }
            };
        self.counters.bootstrap_answered += 1;
        // A peer refreshing its members is answered on the publication it already has.
        let known = self.peers.get(request.sender).and_then(|peer| peer.control.as_ref());
        if known.is_some_and(|publication| publication.try_offer(&bytes).is_ok()) {
            return;
        }
        let dropped = self.replies.dropped;
        self.replies.queue(request.reply_to, bytes, now);
        self.counters.bootstrap_ignored += self.replies.dropped - dropped;
    }

    /// Every liveness timeout a member with a bootstrap list asks those addresses again for the
    /// members they hear (every member heartbeats them, so they hear everyone): a member that
    /// joined after this one's first answer, and that does not list this one, is found so.
    fn send_refresh(&mut self, now: Instant) {
        self.last_refresh = now;
        let request = BootstrapRequest {
            sender: self.member_id,
            group: self.group.clone(),
            reply_to: self.endpoint.clone(),
            held_fingerprint: self.definition.fingerprint(),
            nonce: self.refresh_nonce,
        };
        if member::seal_into(&mut self.encode, &mut self.bootstrap_auth, |out| request.emit(out)).is_ok() {
            member::offer_to_all(&self.encode, self.seeds.iter());
        }
    }

    /// Adds the members an answer to [`Self::send_refresh`] lists that this member does not know.
    fn handle_refresh(&mut self, bytes_index: usize, now: Instant) {
        let Ok(body) = self.bootstrap_auth.open(self.control_batch.message(bytes_index)) else { return };
        let Ok(reply) = BootstrapReply::parse(body) else {
            self.counters.control_malformed += 1;
            return;
        };
        if reply.nonce != self.refresh_nonce || reply.definition.fingerprint != self.definition.fingerprint() {
            self.counters.bootstrap_ignored += 1;
            return;
        }
        for found in reply.members {
            if found.member_id != self.member_id && !self.peers.knows(found.member_id) {
                self.counters.bootstrap_learned += 1;
                self.add_peer(found.member_id, &found.endpoint, found.role, false, now);
            }
        }
    }

    /// The runtime counters, authentication refusals of both streams included.
    fn runtime_counters(&self) -> RuntimeCounters {
        let mut counters = self.counters;
        counters.auth = self.control_auth.counters();
        counters.auth.add(&self.data_auth.counters());
        counters.auth.add(&self.bootstrap_auth.counters());
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
        if member::seal_into(&mut self.encode, &mut self.control_auth, |out| heartbeat.emit(out)).is_err() {
            self.counters.control_malformed += 1;
            return;
        }
        self.counters.control_send_refused += member::offer_to_all(&self.encode, self.peers.control_publications());
        // Bootstrap addresses where nobody listens yet refuse: not counted.
        member::offer_to_all(&self.encode, self.seeds.iter());
        if let Some((publication, _)) = &self.multicast {
            let _ = publication.try_offer(&self.encode);
        }
    }

    fn send_acks(&mut self) {
        for ack in self.brain.take_acks() {
            if member::seal_into(&mut self.encode, &mut self.control_auth, |out| ack.emit(out)).is_err() {
                continue;
            }
            let sent = self
                .peers
                .get(ack.producer)
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
        // Before anything is judged: the time this member itself was not running is nobody's
        // silence (a process resumed after SIGSTOP would otherwise find every peer silent for
        // the whole stop, before its transport hands over what they sent meanwhile).
        if let Some(pause) = self.last_cycle.map(|last| now.saturating_since(last)) {
            if pause > self.timing.heartbeat_interval {
                self.brain.excuse_pause(pause);
                self.counters.own_pauses_excused += 1;
            }
        }
        self.last_cycle = Some(now);
        let mut work = self.poll_control(now);
        if self.timing.heartbeat_due(self.last_scan, now) {
            self.scan(now);
        }
        let complete = self.discovery_complete(now);
        self.brain.handle_timeout(now, complete);
        if !self.seeds.is_empty() && now.saturating_since(self.last_refresh) >= self.timing.liveness_timeout {
            self.send_refresh(now);
        }
        let due = self.timing.heartbeat_due(self.last_heartbeat, now);
        if self.brain.take_announce() || due {
            self.send_heartbeat(now);
            work += 1;
        }
        self.send_acks();
        work += self.brain.pump(self.peers.peers(), DATA_MESSAGES_PER_ITERATION, &mut self.data_auth);
        work += self.replies.pump(now);
        work
    }

    /// Leaves: a last heartbeat, publications and subscriptions closed, the file removed.
    fn shut(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.peers.clear();
        self.replies.clear();
        self.seeds.drain(..).for_each(|publication| publication.close());
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
                    let (work, requests, replies, client) = {
                        let mut core = lock(&background.core);
                        let work = core.duty_cycle();
                        (work, core.peers.take_requests(), core.replies.take_wanted(), core.client.clone())
                    };
                    if !replies.is_empty() {
                        // Publications to askers, created without the lock like the peers'.
                        let opened: Vec<_> = replies
                            .into_iter()
                            .filter_map(|endpoint| {
                                let channel = control_channel(&endpoint);
                                client.add_publication_handle(&channel, CONTROL_STREAM_ID).ok().map(|p| (endpoint, p))
                            })
                            .collect();
                        let mut core = lock(&background.core);
                        for (endpoint, publication) in opened {
                            core.replies.install(&endpoint, publication);
                        }
                    }
                    if !requests.is_empty() {
                        // Driver round trips happen without the lock: the data path never waits on them.
                        let opened = PeerTable::open(&*client, requests);
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

/// The registry's discovery folder of `group` (for tools).
pub fn group_members_dir(registry: &Path, group: &str) -> PathBuf {
    discovery::members_dir(registry, group)
}
