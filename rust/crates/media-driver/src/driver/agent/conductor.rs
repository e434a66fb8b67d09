//! The media driver's conductor over shared memory (`shm/`): it owns a driver directory,
//! reads client commands from the cnc's to-driver ring, answers on the broadcast buffer, keeps
//! the counters, and runs `aeron:ipc` publications whose log files clients in other processes
//! map: publishers append with the lock-free term appender, subscribers read the same log and
//! write their own position counters; the conductor derives each publisher limit from the
//! slowest subscriber and cleans the log behind it. No lock is shared with any client.
//!
//! Liveness: the conductor beats in the cnc on every duty cycle; clients send keepalives, and a
//! client silent for the client timeout has its subscriptions removed and its publications
//! released (a released publication lingers until its subscribers have everything or the linger
//! timeout passes). Launched with agents ([`crate::driver::agent::MediaDriver`]), it also runs
//! `aeron:udp` publications and subscriptions: it binds their sockets, creates their shared
//! logs and counters, and hands them to the sender and receiver agents through queues
//! (`network` below); without agents (`DriverConductor::launch`) UDP channels are refused.
//!
//! This module imports nothing from `client/`.

use std::collections::HashMap;
use std::path::Path;

use super::unblocked_message;
use crate::channel::{ChannelUri, Media};
use crate::driver::clock::{CycleTime, DutyClock};
use crate::driver::DriverContext;
use crate::shm::broadcast::BroadcastTransmitter;
use crate::shm::cnc::{Cnc, CNC_FILE};
use crate::shm::command::{error_code, Command, Response};
use crate::shm::counters::{type_id, Counter, CountersManager};
use crate::shm::directory::{self, epoch_ms, PUBLICATIONS_DIR};
use crate::shm::error_log::ErrorLogWriter;
use crate::shm::log_buffer::{publication_log_name, LogBuffer, LogParams, LogStart, PAGE_MIN_SIZE};
use crate::shm::ring_buffer::ManyToOneRingBuffer;
use crate::shm::status::{
    bounded_text, ImageInfo, PublicationInfo, ReceiverInfo, IPC_FLOW_CONTROL, IPC_IMAGE_SOURCE, MAX_IMAGES_IN_STATUS,
    MAX_RECEIVERS_IN_STATUS,
};
use crate::shm::ShmError;

mod clients;
mod network;

use clients::QUEUED_BYTES_MAX;

/// Records read from the to-driver ring per duty cycle at most; they wait in their client's
/// queue for its turn ([`crate::driver::ClientQuotas::commands_per_cycle_per_client`]).
const RECORDS_PER_CYCLE: usize = 256;
/// A claim at the to-driver ring's head not committed within the client timeout divided by
/// this is padded over: well inside the client timeout, so the live clients whose keepalives
/// wait behind the stalled claim are not timed out (Aeron's clients beat in a counter instead).
const UNBLOCK_TIMEOUT_DIVISOR: i64 = 4;
/// How often clients' keepalives are checked, in milliseconds.
const CLIENT_CHECK_INTERVAL_MS: i64 = 100;
/// A gap between two client checks longer than `client_timeout / STALL_FRACTION` (and than
/// `STALL_MIN_CHECKS` check intervals) means the conductor itself stalled (a stopped, swapped-out
/// or starved process): clients are not timed out for a silence nobody listened to.
const STALL_FRACTION: i64 = 2;
/// See [`STALL_FRACTION`].
const STALL_MIN_CHECKS: i64 = 4;
/// Refusals are logged one by one while the error log is less than `1 / REFUSALS_LOG_SHARE`
/// full: the rest stays for the driver's own errors.
const REFUSALS_LOG_SHARE: usize = 2;
/// Longest refusal text written into the error log (its client's answer carries it whole).
const MAX_LOGGED_REFUSAL: usize = 512;
/// The one record of the refusals past [`REFUSALS_LOG_SHARE`] of the error log.
const REFUSALS_NOT_LOGGED: &str = "further refusals not logged one by one: they filled their share of the error log \
     (each was answered to its client and counted in invalid commands)";

use crate::shm::status::SystemCounter;

struct ClientState {
    last_keepalive_ms: i64,
    heartbeat: Counter,
    /// The close token of its first keepalive or close with one (`Command::ClientKeepalive`).
    token: Option<i64>,
}

struct ImageLink {
    subscription_id: i64,
    position: Counter,
    correlation_id: i64,
}

struct IpcPublication {
    registration_id: i64,
    session_id: i32,
    stream_id: i32,
    log: LogBuffer,
    log_file: String,
    limit: Counter,
    publisher_position: Counter,
    clean_position: i64,
    /// The value last written to `limit` (only the conductor writes it).
    publisher_limit: i64,
    /// The limit moves again once the proposed limit reaches this (last limit + trip gain), or
    /// sooner when the publisher is near its limit (`update_publications`).
    trip_limit: i64,
    /// Where the log started (`init-term-id|term-id|term-offset`, else 0): a later publisher
    /// naming a start must name this one.
    start_position: i64,
    /// Client id → number of publication handles it holds.
    owners: HashMap<i64, u32>,
    images: Vec<ImageLink>,
    released_at_ms: Option<i64>,
    /// An exclusive publication's log: one writer, never joined by another publication.
    exclusive: bool,
    /// Where the slowest subscriber stood, and since when (ms), while the tail lay beyond it
    /// (to pad over a claim no client commits).
    stalled: Option<(i64, i64)>,
}

struct SubscriptionState {
    registration_id: i64,
    client_id: i64,
    stream_id: i32,
}

/// The media driver's conductor (one thread runs [`DriverConductor::do_work`]): Aeron's
/// `DriverConductor`, over the driver directory.
pub struct DriverConductor {
    config: DriverContext,
    cnc: Cnc,
    ring: ManyToOneRingBuffer,
    transmitter: BroadcastTransmitter,
    counters: CountersManager,
    errors: ErrorLogWriter,
    system: Vec<Counter>,
    clients: HashMap<i64, ClientState>,
    /// Commands read from the ring and waiting, per client, for its turn (with their sizes).
    pending: HashMap<i64, std::collections::VecDeque<(Command, usize)>>,
    /// Bytes of the commands in `pending` (bounded by [`QUEUED_BYTES_MAX`]).
    pending_bytes: usize,
    /// Clients with commands waiting, in turn order.
    turns: std::collections::VecDeque<i64>,
    /// The ring's head when it last moved, and when (to unblock a claim never committed).
    ring_head: (i64, i64),
    /// When the last duty cycle ran (a long gap is a stall of this conductor, not of a client).
    last_cycle_ms: i64,
    publications: Vec<IpcPublication>,
    subscriptions: Vec<SubscriptionState>,
    scratch: Vec<u8>,
    next_session_id: i32,
    last_timeout_check_ms: i64,
    took_over: Option<String>,
    network: network::Network,
    /// What [`DriverConductor::do_work`] reads when the conductor runs its own cycles.
    clock: DutyClock,
}

/// The name of `log` the driver's answers carry: its `/proc/<pid>/fd/<fd>` (Aeron's answers
/// carry the log's file name; a client opens this one as it would open that).
pub(crate) fn log_file_name(log: &LogBuffer) -> String {
    log.path().map(|path| path.to_string_lossy().into_owned()).unwrap_or_default()
}

impl DriverConductor {
    /// Takes the directory (refusing a live driver, taking over a stale one), creates the cnc
    /// and the system counters.
    pub fn launch(config: DriverContext) -> Result<Self, ShmError> {
        let now = epoch_ms();
        let took_over = directory::prepare(&config.dir, config.driver_timeout.as_millis() as i64, now)?;
        // One memfd per log stays open in the driver (`docs/driver-protocol.md`).
        crate::shm::file::raise_open_file_limit();
        let publications = config.dir.join(PUBLICATIONS_DIR);
        std::fs::create_dir_all(&publications).map_err(|e| ShmError::io(&publications, "create directory", e))?;
        let mut cnc_params = config.cnc;
        cnc_params.client_liveness_timeout_ns = config.client_timeout.as_nanos() as i64;
        let cnc = Cnc::create(&config.dir.join(CNC_FILE), &cnc_params, std::process::id(), now)?;
        let (metadata, values) = cnc.counters_regions();
        let mut counters = CountersManager::new(metadata, values, config.counter_reuse.as_millis() as i64)?;
        let mut system = Vec::with_capacity(SystemCounter::ALL.len());
        for counter in SystemCounter::ALL {
            system.push(counters.allocate(type_id::SYSTEM, &[], counter.label(), 0, 0, now)?);
        }
        Ok(Self {
            ring: cnc.to_driver()?,
            transmitter: cnc.to_clients_transmitter()?,
            errors: ErrorLogWriter::new(cnc.error_log().clone()),
            cnc,
            counters,
            system,
            clients: HashMap::new(),
            pending: HashMap::new(),
            pending_bytes: 0,
            turns: std::collections::VecDeque::new(),
            ring_head: (0, now),
            last_cycle_ms: now,
            publications: Vec::new(),
            subscriptions: Vec::new(),
            scratch: Vec::new(),
            next_session_id: (now as i32) ^ (std::process::id() as i32).rotate_left(16),
            last_timeout_check_ms: now,
            took_over,
            network: network::Network::default(),
            clock: DutyClock::new(),
            config,
        })
    }

    /// Like [`DriverConductor::launch`], with the queues to the sender and receiver agents and
    /// from them: `aeron:udp` channels are then carried.
    pub fn launch_with_agents(
        config: DriverContext,
        to_sender: std::sync::mpsc::Sender<crate::driver::agent::SenderCommand>,
        to_receiver: std::sync::mpsc::Sender<crate::driver::agent::ReceiverCommand>,
        events: std::sync::mpsc::Receiver<crate::driver::agent::AgentEvent>,
    ) -> Result<Self, ShmError> {
        let mut driver = Self::launch(config)?;
        driver.network = network::Network::with_agents(to_sender, to_receiver, events);
        Ok(driver)
    }

    /// Why a stale directory was taken over, if it was.
    pub fn took_over(&self) -> Option<&str> {
        self.took_over.as_deref()
    }

    /// The driver directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// The cnc file's sections.
    pub fn cnc(&self) -> &Cnc {
        &self.cnc
    }

    fn system(&self, counter: SystemCounter) -> &Counter {
        // `system` holds one counter per `SystemCounter::ALL` entry, in that order.
        &self.system[counter as usize]
    }

    fn bump(&self, counter: SystemCounter) {
        let _ = self.system(counter).add(1);
    }

    /// A claim no client committed was padded over: counted, and recorded in the error log.
    fn claim_unblocked(&mut self, message: &str, now_ms: i64) {
        self.bump(SystemCounter::UnblockedPublications);
        self.error(message, now_ms);
    }

    /// Records an error in the error log (and counts it).
    fn error(&mut self, message: &str, now_ms: i64) {
        self.bump(SystemCounter::Errors);
        if !matches!(self.errors.record(message, now_ms), Ok(true)) {
            self.bump(SystemCounter::ErrorsDropped);
        }
    }

    /// One duty cycle at the time of the conductor's own clock; returns the amount of work done
    /// (0 = idle).
    pub fn do_work(&mut self) -> usize {
        let time = self.clock.tick();
        self.do_work_at(time)
    }

    /// One duty cycle at `time`, the time the runner read for every agent of the cycle
    /// ([`DutyClock`]); returns the amount of work done (0 = idle).
    pub fn do_work_at(&mut self, time: CycleTime) -> usize {
        let now = time.epoch_ms;
        let mut work = 0;
        if let Err(e) = self.ring.set_consumer_heartbeat(now) {
            self.error(&format!("heartbeat: {e}"), now);
        }
        let mut records = Vec::new();
        let mut scratch = std::mem::take(&mut self.scratch);
        let limit = if self.pending_bytes < QUEUED_BYTES_MAX { RECORDS_PER_CYCLE } else { 0 };
        let read = self.ring.read(limit, &mut scratch, |msg_type_id, bytes| {
            records.push((Command::decode(msg_type_id, bytes), bytes.len()));
        });
        self.scratch = scratch;
        if let Err(e) = read {
            // Recovered already (skipped or reset, once): logged and counted once.
            self.bump(SystemCounter::InvalidCommands);
            self.error(&format!("to-driver ring: {e}"), now);
            work += 1;
        }
        for (record, length) in records {
            work += 1;
            self.bump(SystemCounter::Commands);
            match record {
                Ok(command) => self.admit(command, length, now),
                Err(e) => {
                    self.bump(SystemCounter::InvalidCommands);
                    self.error(&e.to_string(), now);
                }
            }
        }
        work += self.run_turns(now);
        if now.saturating_sub(self.last_cycle_ms) > CLIENT_CHECK_INTERVAL_MS * STALL_MIN_CHECKS {
            // This conductor did not run for a while: a claim it finds uncommitted may be one a
            // producer, stopped with it, is about to commit. Its time to commit starts now.
            self.ring_head.1 = now;
        }
        self.last_cycle_ms = now;
        work += self.unblock_stalled_ring(now);
        work += self.update_publications(now);
        work += self.on_agent_events(now);
        let since_check = now.saturating_sub(self.last_timeout_check_ms);
        if since_check >= CLIENT_CHECK_INTERVAL_MS {
            self.last_timeout_check_ms = now;
            let stall = (self.config.client_timeout.as_millis() as i64 / STALL_FRACTION)
                .max(CLIENT_CHECK_INTERVAL_MS * STALL_MIN_CHECKS);
            if since_check > stall {
                // This conductor did not run for a while (the process was stopped, swapped out or
                // starved): the clients' silence was not heard, not theirs. Each gets a full
                // timeout from now to speak before it is reclaimed.
                self.forgive_stall(now);
            }
            work += self.check_client_timeouts(now);
        }
        if work > 0 {
            // Only a cycle that did work is timed: an idle one reads the ring and the agents'
            // queues, and a second clock reading would cost it as much as that.
            let took = self.clock.now().saturating_since(time.now);
            let _ = self.system(SystemCounter::DutyCycleMaxNs).propose_max(took.as_nanos() as i64);
        }
        work
    }

    fn respond(&mut self, response: Response, now_ms: i64) {
        let (msg_type_id, bytes) = response.encode();
        if let Err(e) = self.transmitter.transmit(msg_type_id, &bytes) {
            self.error(&format!("to-clients broadcast: {e}"), now_ms);
        }
    }

    /// Answers a refused command with `message` (whole) and logs it: cut to
    /// [`MAX_LOGGED_REFUSAL`] bytes, and while refusals leave the driver's own errors their
    /// share of the error log ([`REFUSALS_LOG_SHARE`]); past it, as one [`REFUSALS_NOT_LOGGED`]
    /// record whose count grows. A refusal's text is the client's doing (ids, channels): a flood
    /// of distinct ones must not leave no room to log what goes wrong in the driver.
    fn refuse(&mut self, correlation_id: i64, code: i32, message: String, now_ms: i64) {
        self.bump(SystemCounter::InvalidCommands);
        let logged = bounded_text(&message, MAX_LOGGED_REFUSAL);
        let share = self.errors.capacity() / REFUSALS_LOG_SHARE;
        let fits = self.errors.used() + ErrorLogWriter::record_length(&logged) <= share;
        if fits || self.errors.contains(&logged) {
            self.error(&logged, now_ms);
        } else {
            self.error(REFUSALS_NOT_LOGGED, now_ms);
        }
        self.respond(Response::Error { correlation_id, code, message }, now_ms);
    }

    /// Aeron's blocked-command check: when the ring's head has not moved for a quarter of the
    /// client timeout ([`UNBLOCK_TIMEOUT_DIVISOR`]) while producers claimed past it, the claim at the head was never committed
    /// (its client died while writing it): pad over it ([`ManyToOneRingBuffer::unblock`]),
    /// log it once and go on.
    fn unblock_stalled_ring(&mut self, now_ms: i64) -> usize {
        let (Ok(head), Ok(tail)) = (self.ring.consumer_position(), self.ring.producer_position()) else { return 0 };
        let (last_head, moved_at) = self.ring_head;
        if head != last_head || tail <= head {
            self.ring_head = (head, now_ms);
            return 0;
        }
        let timeout = self.config.client_timeout.as_millis() as i64 / UNBLOCK_TIMEOUT_DIVISOR;
        if now_ms.saturating_sub(moved_at) <= timeout {
            return 0;
        }
        self.ring_head = (head, now_ms);
        match self.ring.unblock() {
            Ok(Some(bytes)) => {
                self.bump(SystemCounter::InvalidCommands);
                self.error(
                    &format!(
                        "to-driver ring: a command of {bytes} bytes claimed at position {head} was not committed \
                         within {timeout} ms (its client died while writing it?): padded over"
                    ),
                    now_ms,
                );
                1
            }
            Ok(None) => 0,
            Err(e) => {
                self.error(&format!("to-driver ring: unblock: {e}"), now_ms);
                0
            }
        }
    }

    fn touch_client(&mut self, client_id: i64, now_ms: i64) {
        if let Some(client) = self.clients.get_mut(&client_id) {
            client.last_keepalive_ms = now_ms;
            let _ = client.heartbeat.set(now_ms);
            return;
        }
        match self.counters.allocate(
            type_id::CLIENT_HEARTBEAT,
            &client_id.to_le_bytes(),
            &format!("client-heartbeat: {client_id}"),
            client_id,
            client_id,
            now_ms,
        ) {
            Ok(heartbeat) => {
                let _ = heartbeat.set(now_ms);
                self.clients.insert(client_id, ClientState { last_keepalive_ms: now_ms, heartbeat, token: None });
                let _ = self.system(SystemCounter::Clients).add(1);
            }
            Err(e) => self.error(&format!("client {client_id}: {e}"), now_ms),
        }
    }

    fn on_command(&mut self, command: Command, now_ms: i64) {
        if let Command::AddPublication { client_id, correlation_id, .. }
        | Command::AddSubscription { client_id, correlation_id, .. } = command
        {
            let publication = matches!(command, Command::AddPublication { .. });
            if let Err((code, message)) = self.check_add_quota(client_id, publication) {
                self.refuse(correlation_id, code, message, now_ms);
                return;
            }
            if self.registration_in_use(correlation_id) {
                let message = format!(
                    "correlation id {correlation_id} already names a publication or subscription: an add takes a \
                     fresh id from the ring's correlation counter"
                );
                self.refuse(correlation_id, error_code::GENERIC_ERROR, message, now_ms);
                return;
            }
        }
        match command {
            Command::AddPublication { client_id, correlation_id, stream_id, channel, exclusive }
                if network::is_udp(&channel) =>
            {
                if let Err((code, message)) =
                    self.add_network_publication(client_id, correlation_id, stream_id, &channel, exclusive, now_ms)
                {
                    self.refuse(correlation_id, code, message, now_ms);
                }
            }
            Command::AddSubscription { client_id, correlation_id, stream_id, channel } if network::is_udp(&channel) => {
                if let Err((code, message)) =
                    self.add_network_subscription(client_id, correlation_id, stream_id, &channel, now_ms)
                {
                    self.refuse(correlation_id, code, message, now_ms);
                }
            }
            Command::RemovePublication { client_id, correlation_id, registration_id }
                if self.is_network_publication(registration_id) =>
            {
                self.remove_network_publication(client_id, correlation_id, registration_id, now_ms)
            }
            Command::RemoveSubscription { client_id, correlation_id, registration_id }
                if self.is_network_subscription(registration_id) =>
            {
                self.remove_network_subscription(client_id, correlation_id, registration_id, now_ms)
            }
            Command::QueryPublication { client_id, correlation_id, registration_id }
                if self.network_publication_held(registration_id, client_id) =>
            {
                self.network.query_publication(registration_id, correlation_id)
            }
            Command::QuerySubscription { client_id, correlation_id, registration_id }
                if self.network_subscription_held(registration_id, client_id) =>
            {
                self.network.query_subscription(registration_id, correlation_id)
            }
            Command::AddPublication { client_id, correlation_id, stream_id, channel, exclusive } => {
                match self.add_publication(client_id, correlation_id, stream_id, &channel, exclusive, now_ms) {
                    Ok(()) => {}
                    Err((code, message)) => self.refuse(correlation_id, code, message, now_ms),
                }
            }
            Command::RemovePublication { client_id, correlation_id, registration_id } => {
                let found = self.publications.iter_mut().find(|p| {
                    p.registration_id == registration_id
                        && p.owners.contains_key(&client_id)
                        && p.released_at_ms.is_none()
                });
                match found {
                    Some(publication) => {
                        release_owner(publication, client_id, now_ms);
                        self.respond(Response::OperationSuccess { correlation_id }, now_ms);
                    }
                    None => self.refuse(
                        correlation_id,
                        error_code::UNKNOWN_PUBLICATION,
                        format!("client {client_id} holds no publication {registration_id}"),
                        now_ms,
                    ),
                }
            }
            Command::AddSubscription { client_id, correlation_id, stream_id, channel } => {
                if let Err(message) = ipc_channel(&channel).and_then(|uri| start_on_subscription(&uri, &channel)) {
                    self.refuse(correlation_id, error_code::INVALID_CHANNEL, message, now_ms);
                    return;
                }
                self.subscriptions.push(SubscriptionState { registration_id: correlation_id, client_id, stream_id });
                let _ = self.system(SystemCounter::Subscriptions).add(1);
                self.respond(Response::SubscriptionReady { correlation_id }, now_ms);
                for index in 0..self.publications.len() {
                    if self.publications[index].stream_id == stream_id
                        && self.publications[index].released_at_ms.is_none()
                    {
                        self.link_image(index, correlation_id, client_id, now_ms);
                    }
                }
            }
            Command::RemoveSubscription { client_id, correlation_id, registration_id } => {
                let before = self.subscriptions.len();
                self.subscriptions.retain(|s| !(s.registration_id == registration_id && s.client_id == client_id));
                if self.subscriptions.len() == before {
                    self.refuse(
                        correlation_id,
                        error_code::UNKNOWN_SUBSCRIPTION,
                        format!("client {client_id} holds no subscription {registration_id}"),
                        now_ms,
                    );
                    return;
                }
                let _ = self.system(SystemCounter::Subscriptions).add(-1);
                self.unlink_subscription(registration_id, now_ms);
                self.respond(Response::OperationSuccess { correlation_id }, now_ms);
            }
            // Applied when read (`admit`); never queued.
            Command::ClientKeepalive { .. } => {}
            // A close acts on the client it names, and only with that client's token.
            Command::ClientClose { client_id, token } => {
                if self.check_token(client_id, token, "close", now_ms) {
                    self.remove_client(client_id, now_ms);
                }
            }
            // Queries, like removals, name a registration the sending client holds.
            Command::QueryPublication { client_id, correlation_id, registration_id }
                if self
                    .publications
                    .iter()
                    .any(|p| p.registration_id == registration_id && p.owners.contains_key(&client_id)) =>
            {
                let response = self.ipc_publication_status(registration_id, correlation_id);
                self.respond(response, now_ms);
            }
            Command::QueryPublication { client_id, correlation_id, registration_id } => self.refuse(
                correlation_id,
                error_code::UNKNOWN_PUBLICATION,
                format!("client {client_id} holds no publication {registration_id}"),
                now_ms,
            ),
            Command::QuerySubscription { client_id, correlation_id, registration_id }
                if self
                    .subscriptions
                    .iter()
                    .any(|s| s.registration_id == registration_id && s.client_id == client_id) =>
            {
                let response = self.ipc_subscription_status(registration_id, correlation_id);
                self.respond(response, now_ms);
            }
            Command::QuerySubscription { client_id, correlation_id, registration_id } => self.refuse(
                correlation_id,
                error_code::UNKNOWN_SUBSCRIPTION,
                format!("client {client_id} holds no subscription {registration_id}"),
                now_ms,
            ),
        }
    }

    /// `Publication.counters()` of an `aeron:ipc` publication: no sender (everything appended is
    /// readable: sender position = position), the slowest subscriber paces (`min`), each
    /// subscription a receiver (its registration id, read position and the publication window),
    /// none timed out by silence (receiver timeout 0), no traffic counts.
    fn ipc_publication_status(&self, registration_id: i64, correlation_id: i64) -> Response {
        let status = || -> Result<PublicationInfo, ShmError> {
            let Some(publication) = self.publications.iter().find(|p| p.registration_id == registration_id) else {
                return Err(ShmError::Parameter(format!("no publication {registration_id}")));
            };
            let tail = publication.log.tail_position()?;
            let limit = publication.limit.get()?;
            let window = i32::try_from(publication.log.publication_window()).unwrap_or(i32::MAX);
            let mut receivers = Vec::new();
            for link in publication.images.iter().take(MAX_RECEIVERS_IN_STATUS) {
                let position = link.position.get()?;
                receivers.push(ReceiverInfo { receiver_id: link.subscription_id, group_tag: None, position, window });
            }
            let closed = publication.released_at_ms.is_some();
            Ok(PublicationInfo {
                session_id: publication.session_id,
                stream_id: publication.stream_id,
                position: tail,
                sender_position: tail,
                sender_limit: limit,
                publisher_limit: limit,
                connected: !closed && !publication.images.is_empty(),
                closed,
                strategy: IPC_FLOW_CONTROL.to_string(),
                live_receivers: receivers.clone(),
                receivers,
                ..PublicationInfo::default()
            })
        };
        Response::publication_status(correlation_id, registration_id, status().map_err(|e| e.to_string()))
    }

    /// `Subscription.images()` of an `aeron:ipc` subscription: one record per publication log it
    /// reads (source `ipc`; no datagrams, so the traffic and loss counters are 0).
    fn ipc_subscription_status(&self, registration_id: i64, correlation_id: i64) -> Response {
        let images = || -> Result<Vec<ImageInfo>, ShmError> {
            let mut images = Vec::new();
            for publication in &self.publications {
                for link in publication.images.iter().filter(|link| link.subscription_id == registration_id) {
                    if images.len() >= MAX_IMAGES_IN_STATUS {
                        return Ok(images);
                    }
                    // Everything the publisher appended is in the shared log: nothing to rebuild.
                    let tail = publication.log.tail_position()?;
                    images.push(ImageInfo {
                        session_id: publication.session_id,
                        source: IPC_IMAGE_SOURCE.to_string(),
                        position: link.position.get()?,
                        rebuild_position: tail,
                        hwm_position: tail,
                        active: publication.released_at_ms.is_none(),
                        ..ImageInfo::default()
                    });
                }
            }
            Ok(images)
        };
        Response::subscription_status(correlation_id, registration_id, images().map_err(|e| e.to_string()))
    }

    fn add_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        exclusive: bool,
        now_ms: i64,
    ) -> Result<(), (i32, String)> {
        let uri = ipc_channel(channel).map_err(|m| (error_code::INVALID_CHANNEL, m))?;
        // Publishers of one IPC stream share one log (Aeron's non-exclusive publications); an
        // exclusive publication gets a log of its own, which no publication joins.
        let joined = (!exclusive)
            .then(|| {
                self.publications
                    .iter_mut()
                    .find(|p| p.stream_id == stream_id && !p.exclusive && p.released_at_ms.is_none())
            })
            .flatten();
        if let Some(publication) = joined {
            let open = OpenLog {
                term_length: publication.log.term_length(),
                mtu: publication.log.mtu(),
                initial_term_id: publication.log.initial_term_id(),
                start_position: publication.start_position,
                session_id: publication.session_id,
            };
            let shared = format!("the aeron:ipc publication already open on stream {stream_id}");
            confirm_open_log(&uri, channel, &shared, &open).map_err(|m| (error_code::INVALID_CHANNEL, m))?;
            *publication.owners.entry(client_id).or_insert(0) += 1;
            let response = Response::PublicationReady {
                correlation_id,
                registration_id: publication.registration_id,
                session_id: publication.session_id,
                stream_id,
                publisher_limit_counter_id: publication.limit.id() as i32,
                log_file: publication.log_file.clone(),
            };
            self.respond(response, now_ms);
            return Ok(());
        }
        let storage = |e: ShmError| (error_code::STORAGE_SPACE, e.to_string());
        self.next_session_id = self.next_session_id.wrapping_add(1);
        let session_id = self.next_session_id;
        let term_length = uri.term_length.unwrap_or(self.config.ipc_term_length);
        // init-term-id|term-id|term-offset: the shared log starts there (Aeron allows it on IPC).
        let start_position = uri
            .start_position(channel, term_length)
            .map_err(|e| (error_code::INVALID_CHANNEL, format!("{channel}: {e}")))?;
        let params = LogParams {
            term_length,
            mtu: uri.mtu.unwrap_or(self.config.mtu),
            page_size: PAGE_MIN_SIZE,
            initial_term_id: uri.initial_position.map_or(session_id.rotate_left(8), |start| start.initial_term_id),
            session_id,
            stream_id,
            correlation_id,
        };
        params.validate().map_err(|m| (error_code::INVALID_CHANNEL, format!("{channel}: {m}")))?;
        let start = log_start(&uri, &params);
        // A sealed memfd no client can shrink (`docs/driver-protocol.md`): clients open it by
        // the `/proc/<pid>/fd/<fd>` name in the answer; it goes when the last mapping does.
        let log = LogBuffer::create_sealed(&publication_log_name(correlation_id), &params, start).map_err(storage)?;
        let log_file = log_file_name(&log);
        let key = [session_id.to_le_bytes(), stream_id.to_le_bytes()].concat();
        let label = format!("{session_id} {stream_id} {channel}");
        let limit = self
            .counters
            .allocate(type_id::PUBLISHER_LIMIT, &key, &format!("pub-lmt: {label}"), correlation_id, client_id, now_ms)
            .map_err(storage)?;
        let publisher_position = match self.counters.allocate(
            type_id::PUBLISHER_POSITION,
            &key,
            &format!("pub-pos: {label}"),
            correlation_id,
            client_id,
            now_ms,
        ) {
            Ok(counter) => counter,
            Err(e) => {
                let _ = self.counters.free(limit.id(), now_ms);
                return Err(storage(e));
            }
        };
        // Until the first duty cycle: clients see the start, not 0.
        let _ = limit.set(start_position);
        let _ = publisher_position.set(start_position);
        self.publications.push(IpcPublication {
            registration_id: correlation_id,
            session_id,
            stream_id,
            log,
            log_file: log_file.clone(),
            limit,
            publisher_position,
            // Nothing before the start was ever written: cleaning starts there.
            clean_position: start_position,
            publisher_limit: start_position,
            // The first subscriber's limit (its position + the window) passes it at once.
            trip_limit: start_position,
            start_position,
            owners: HashMap::from([(client_id, 1)]),
            images: Vec::new(),
            released_at_ms: None,
            exclusive,
            stalled: None,
        });
        let _ = self.system(SystemCounter::IpcPublications).add(1);
        let index = self.publications.len() - 1;
        let publisher_limit_counter_id = self.publications[index].limit.id() as i32;
        self.respond(
            Response::PublicationReady {
                correlation_id,
                registration_id: correlation_id,
                session_id,
                stream_id,
                publisher_limit_counter_id,
                log_file,
            },
            now_ms,
        );
        let subscribers: Vec<(i64, i64)> = self
            .subscriptions
            .iter()
            .filter(|s| s.stream_id == stream_id)
            .map(|s| (s.registration_id, s.client_id))
            .collect();
        for (subscription_id, subscriber) in subscribers {
            self.link_image(index, subscription_id, subscriber, now_ms);
        }
        Ok(())
    }

    /// Gives subscription `subscription_id` an image of publication `index`, joining at its tail.
    fn link_image(&mut self, index: usize, subscription_id: i64, client_id: i64, now_ms: i64) {
        let publication = &self.publications[index];
        let join = publication.log.tail_position().unwrap_or(0);
        let key = [publication.session_id.to_le_bytes(), publication.stream_id.to_le_bytes()].concat();
        let label =
            format!("sub-pos: {} {} {} ipc @{join}", subscription_id, publication.session_id, publication.stream_id);
        let position = match self.counters.allocate(
            type_id::SUBSCRIBER_POSITION,
            &key,
            &label,
            subscription_id,
            client_id,
            now_ms,
        ) {
            Ok(counter) => counter,
            Err(e) => {
                self.error(&format!("subscription {subscription_id}: {e}"), now_ms);
                return;
            }
        };
        let _ = position.set(join);
        // Image correlation ids: unique per (publication, subscription) pair.
        let correlation_id = match self.ring.next_correlation_id() {
            Ok(id) => id,
            Err(e) => {
                self.error(&format!("correlation id: {e}"), now_ms);
                return;
            }
        };
        let publication = &mut self.publications[index];
        let response = Response::AvailableImage {
            correlation_id,
            subscription_registration_id: subscription_id,
            session_id: publication.session_id,
            stream_id: publication.stream_id,
            subscriber_position_counter_id: position.id() as i32,
            log_file: publication.log_file.clone(),
            source_identity: IPC_IMAGE_SOURCE.into(),
        };
        publication.images.push(ImageLink { subscription_id, position, correlation_id });
        // The limit before the connected flag: a publisher that sees itself connected may append
        // at once (not be refused as back-pressured until the next duty cycle).
        let min = slowest_subscriber(publication, join).unwrap_or(join);
        raise_limit(publication, min, join);
        let _ = publication.log.set_connected(true);
        self.respond(response, now_ms);
    }

    /// Whether `id` already names a publication or subscription, of any client. Honest clients
    /// take ids from the ring's shared counter and never reuse one; a forged add reusing another
    /// client's id would let removals by that id reach the other client's registration.
    fn registration_in_use(&self, id: i64) -> bool {
        self.publications.iter().any(|p| p.registration_id == id)
            || self.subscriptions.iter().any(|s| s.registration_id == id)
            || self.is_network_publication(id)
            || self.is_network_subscription(id)
    }

    fn unlink_subscription(&mut self, subscription_id: i64, now_ms: i64) {
        let mut freed = Vec::new();
        for publication in &mut self.publications {
            publication.images.retain(|image| {
                if image.subscription_id == subscription_id {
                    freed.push(image.position.id());
                    false
                } else {
                    true
                }
            });
            if publication.images.is_empty() {
                let _ = publication.log.set_connected(false);
            }
        }
        for id in freed {
            let _ = self.counters.free(id, now_ms);
        }
    }

    /// Publisher limits from the slowest subscriber, cleaning, and the end of released
    /// publications. Returns the work done.
    ///
    /// The limit moves (and the log is cleaned behind the slowest subscriber) only when the
    /// proposed limit passes the trip limit, an eighth of the window beyond the last one, as
    /// Aeron's `IpcPublication` does: while data flows, the conductor works once per trip gain
    /// of progress (a few hundred times a second at 40 M × 32 B messages/s on 64 MiB terms)
    /// instead of whenever a subscriber moved, and its idle strategy backs off between. A
    /// publisher within a trip gain of its limit is, or is about to be, back-pressured: its
    /// limit moves as soon as the slowest subscriber frees any space.
    fn update_publications(&mut self, now_ms: i64) -> usize {
        let mut work = 0;
        let mut finished = Vec::new();
        let mut unblocked = Vec::new();
        let unblock_timeout = self.config.publication_unblock_timeout().as_millis() as i64;
        for (index, publication) in self.publications.iter_mut().enumerate() {
            let tail = publication.log.tail_position().unwrap_or(0);
            let _ = publication.publisher_position.set(tail);
            let min_position = slowest_subscriber(publication, tail);
            match min_position {
                Some(min) => {
                    if raise_limit(publication, min, tail) {
                        work += 1;
                    }
                    if let Some(bytes) = unblock_if_stalled(publication, min, tail, now_ms, unblock_timeout) {
                        unblocked.push(unblocked_message(
                            "aeron:ipc",
                            publication.session_id,
                            publication.stream_id,
                            min,
                            bytes as u64,
                        ));
                    }
                }
                None => {
                    // No subscriber: hold the publisher where it is (offers report "not
                    // connected"), and let the next subscriber's limit move at once.
                    if publication.publisher_limit != tail {
                        let _ = publication.limit.set(tail);
                        publication.publisher_limit = tail;
                    }
                    publication.trip_limit = tail;
                }
            }
            if let Some(released) = publication.released_at_ms {
                let delivered = min_position.is_none_or(|min| min >= tail);
                let expired = now_ms.saturating_sub(released) >= self.config.publication_linger.as_millis() as i64;
                if delivered || expired {
                    finished.push(index);
                }
            }
        }
        for index in finished.into_iter().rev() {
            self.close_publication(index, now_ms);
            work += 1;
        }
        for message in unblocked {
            self.claim_unblocked(&message, now_ms);
            work += 1;
        }
        work
    }

    /// Ends publication `index`: end of stream in its log, images unavailable, counters freed,
    /// log file removed (mappings in clients stay valid until they unmap).
    fn close_publication(&mut self, index: usize, now_ms: i64) {
        let publication = self.publications.swap_remove(index);
        let tail = publication.log.tail_position().unwrap_or(0);
        let _ = publication.log.set_end_of_stream_position(tail);
        for image in &publication.images {
            self.respond(
                Response::UnavailableImage {
                    correlation_id: image.correlation_id,
                    subscription_registration_id: image.subscription_id,
                    stream_id: publication.stream_id,
                },
                now_ms,
            );
            let _ = self.counters.free(image.position.id(), now_ms);
        }
        let _ = self.counters.free(publication.limit.id(), now_ms);
        let _ = self.counters.free(publication.publisher_position.id(), now_ms);
        // Dropping the publication closes the driver's memfd of its log: nothing to remove.
        drop(publication);
        let _ = self.system(SystemCounter::IpcPublications).add(-1);
    }

    /// Restarts every client's keepalive clock at `now_ms` (after a stall of the conductor).
    fn forgive_stall(&mut self, now_ms: i64) {
        for client in self.clients.values_mut() {
            client.last_keepalive_ms = client.last_keepalive_ms.max(now_ms);
        }
    }

    fn check_client_timeouts(&mut self, now_ms: i64) -> usize {
        let timeout = self.config.client_timeout.as_millis() as i64;
        let dead: Vec<i64> = self
            .clients
            .iter()
            .filter(|(_, c)| now_ms.saturating_sub(c.last_keepalive_ms) > timeout)
            .map(|(&id, _)| id)
            .collect();
        for &client_id in &dead {
            self.bump(SystemCounter::ClientTimeouts);
            self.remove_client(client_id, now_ms);
            self.respond(Response::ClientTimeout { client_id }, now_ms);
        }
        dead.len()
    }

    /// Releases everything `client_id` holds: subscriptions go now, publications linger.
    fn remove_client(&mut self, client_id: i64, now_ms: i64) {
        if let Some(queue) = self.pending.remove(&client_id) {
            self.pending_bytes -= queue.iter().map(|(_, length)| length).sum::<usize>();
        }
        let subscriptions: Vec<i64> =
            self.subscriptions.iter().filter(|s| s.client_id == client_id).map(|s| s.registration_id).collect();
        self.subscriptions.retain(|s| s.client_id != client_id);
        for subscription_id in subscriptions {
            let _ = self.system(SystemCounter::Subscriptions).add(-1);
            self.unlink_subscription(subscription_id, now_ms);
        }
        for publication in &mut self.publications {
            if publication.owners.remove(&client_id).is_some() && publication.owners.is_empty() {
                publication.released_at_ms.get_or_insert(now_ms);
            }
        }
        self.remove_network_client(client_id, now_ms);
        if let Some(client) = self.clients.remove(&client_id) {
            let _ = self.counters.free(client.heartbeat.id(), now_ms);
            let _ = self.system(SystemCounter::Clients).add(-1);
        }
    }

    /// Clean shutdown: end of stream on every log, images unavailable to their subscribers,
    /// every file removed.
    pub fn shutdown(mut self) -> Result<(), ShmError> {
        let now = epoch_ms();
        while !self.publications.is_empty() {
            self.close_publication(self.publications.len() - 1, now);
        }
        directory::remove_driver_files(&self.config.dir)
    }
}

/// The slowest subscriber's position, each taken as at most `tail`: clients write these
/// counters, and one past the tail (forged, or left from another log) must neither lift the limit
/// for good (it only ever rises) nor let the log be cleaned under frames no one has read.
fn slowest_subscriber(publication: &IpcPublication, tail: i64) -> Option<i64> {
    publication.images.iter().filter_map(|image| image.position.get().ok()).map(|position| position.min(tail)).min()
}

/// Moves `publication`'s limit to `min` (the slowest subscriber) + the window when that reaches
/// the trip limit, or sooner when the publisher (at `tail`) is near its limit; cleans behind
/// `min` first. Whether it moved.
fn raise_limit(publication: &mut IpcPublication, min: i64, tail: i64) -> bool {
    let trip_gain = publication.log.publication_trip_gain();
    let proposed = min.saturating_add(publication.log.publication_window());
    let near_limit = tail.saturating_add(trip_gain) >= publication.publisher_limit;
    if proposed >= publication.trip_limit || (near_limit && proposed > publication.publisher_limit) {
        // Clean first: the new limit lets writers into the partition behind it.
        clean_behind(publication, min);
        let _ = publication.limit.propose_max(proposed);
        publication.publisher_limit = publication.publisher_limit.max(proposed);
        publication.trip_limit = proposed.saturating_add(trip_gain);
        return true;
    }
    false
}

/// Pads over the claim at `min` (the slowest subscriber) once the subscribers have stood there
/// for `timeout` ms with the tail beyond: the bytes padded over, when any. The log decides what
/// is a claim no client commits ([`LogBuffer::unblock`]); a subscriber that merely stopped
/// reading stands at a committed frame, which is left alone.
fn unblock_if_stalled(
    publication: &mut IpcPublication,
    min: i64,
    tail: i64,
    now_ms: i64,
    timeout: i64,
) -> Option<usize> {
    if tail <= min {
        publication.stalled = None;
        return None;
    }
    match publication.stalled {
        Some((at, since)) if at == min => {
            if now_ms.saturating_sub(since) < timeout {
                return None;
            }
            publication.stalled = Some((min, now_ms));
            let writers_gone = publication.owners.is_empty();
            publication.log.unblock(min, tail, writers_gone).ok().filter(|&bytes| bytes > 0)
        }
        _ => {
            publication.stalled = Some((min, now_ms));
            None
        }
    }
}

/// Zeroes the log up to a term behind `min` (the slowest subscriber), where writers may next
/// rotate into; `clean_to` stops at each term end, so a trip that crosses one takes two calls.
fn clean_behind(publication: &mut IpcPublication, min: i64) {
    let target = min.saturating_sub(i64::from(publication.log.term_length()));
    // At most one partition boundary per trip (trip gain < term); the bound only guards a
    // subscriber position that jumped.
    for _ in 0..4 {
        if publication.clean_position >= target
            || publication.log.clean_to(&mut publication.clean_position, target).is_err()
        {
            break;
        }
    }
}

fn release_owner(publication: &mut IpcPublication, client_id: i64, now_ms: i64) {
    if let Some(count) = publication.owners.get_mut(&client_id) {
        *count -= 1;
        if *count == 0 {
            publication.owners.remove(&client_id);
        }
    }
    if publication.owners.is_empty() {
        publication.released_at_ms.get_or_insert(now_ms);
    }
}

/// Parses `channel` and accepts only `aeron:ipc` (what this driver carries today).
fn ipc_channel(channel: &str) -> Result<ChannelUri, String> {
    let uri = ChannelUri::parse(channel).map_err(|e| format!("{channel}: {e}"))?;
    if uri.media != Media::Ipc {
        return Err(format!(
            "{channel}: this driver runs without network agents and carries aeron:ipc channels only \
             (launch it as a MediaDriver to carry aeron:udp)"
        ));
    }
    // As on aeron:udp (conductor/network.rs): never silently ignored.
    if uri.session_id.is_some() {
        return Err(format!(
            "{channel}: session-id is not supported on aeron:ipc by this driver \
             (the publishers of one stream share one log and its session)"
        ));
    }
    Ok(uri)
}

/// What the log that the publishers of one stream share was opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenLog {
    term_length: u32,
    mtu: u32,
    initial_term_id: i32,
    /// Where the log started (`init-term-id|term-id|term-offset`, else 0).
    start_position: i64,
    session_id: i32,
}

/// Refuses a publisher whose `channel` names a setting the open log (`shared`, e.g. "the
/// aeron:ipc publication already open on stream 5") cannot honour, naming both values: a
/// `term-length`, `mtu` or `session-id` of its own, or a start position other than the log's
/// (Aeron's `confirmMatch`). A setting the channel does not name is the open log's.
fn confirm_open_log(uri: &ChannelUri, channel: &str, shared: &str, open: &OpenLog) -> Result<(), String> {
    let named = [
        ("term-length", uri.term_length.map(i64::from), i64::from(open.term_length)),
        ("mtu", uri.mtu.map(i64::from), i64::from(open.mtu)),
        ("session-id", uri.session_id.map(i64::from), i64::from(open.session_id)),
    ];
    if let Some((key, Some(asked), actual)) =
        named.into_iter().find(|(_, asked, actual)| asked.is_some_and(|a| a != *actual))
    {
        return Err(format!(
            "{channel}: {key}={asked} differs from the {actual} of {shared} (publishers of one stream share its log)"
        ));
    }
    if let Some(start) = uri.initial_position {
        let asked = uri.start_position(channel, open.term_length).map_err(|e| format!("{channel}: {e}"))?;
        if start.initial_term_id != open.initial_term_id || asked != open.start_position {
            return Err(format!(
                "{channel}: init-term-id={}|term-id={}|term-offset={} (start position {asked}) differs from {shared}, \
                 which started at init-term-id={}, position {} (publishers of one stream share its log)",
                start.initial_term_id, start.term_id, start.term_offset, open.initial_term_id, open.start_position
            ));
        }
    }
    Ok(())
}

/// Where a new log of `params` starts: the channel's `init-term-id|term-id|term-offset`, else at
/// position 0 of `params.initial_term_id`.
fn log_start(uri: &ChannelUri, params: &LogParams) -> LogStart {
    match uri.initial_position {
        // Non-negative: `start_position` checked it (a bad value would be refused by the log).
        Some(start) => {
            LogStart { term_id: start.term_id, term_offset: u32::try_from(start.term_offset).unwrap_or(u32::MAX) }
        }
        None => LogStart::of(params),
    }
}

/// A subscription has no start position to take (an image joins where the publication is):
/// `init-term-id|term-id|term-offset` on one is refused rather than ignored (IPC and UDP).
fn start_on_subscription(uri: &ChannelUri, channel: &str) -> Result<(), String> {
    if uri.initial_position.is_some() {
        return Err(format!(
            "{channel}: init-term-id / term-id / term-offset apply to publications only \
             (a subscription joins where the publication is)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logbuffer::Offer;
    use crate::shm::cnc::CncParams;
    use crate::shm::test_support::{tempdir, SILENT_CLIENT_TIMEOUT};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    /// Client ids the tests' wire hands out at once (1 to this).
    const TEST_CLIENT_IDS: i64 = 100;

    /// The test's side of a driver's cnc: commands onto the to-driver ring, answers from the
    /// to-clients broadcast after one duty cycle.
    struct CncWire {
        ring: crate::shm::ring_buffer::ManyToOneRingBuffer,
        receiver: crate::shm::broadcast::BroadcastReceiver,
        scratch: Vec<u8>,
    }

    impl CncWire {
        fn new(driver: &DriverConductor) -> Self {
            let ring = driver.cnc().to_driver().unwrap();
            // The driver serves only client ids it handed out: the tests' clients are 1 to 100.
            for _ in 0..TEST_CLIENT_IDS {
                ring.next_correlation_id().unwrap();
            }
            let receiver = driver.cnc().to_clients_receiver().unwrap();
            CncWire { ring, receiver, scratch: Vec::new() }
        }

        /// Client 1 subscribes (correlation id 10), then client 2 publishes (11), both to
        /// `aeron:ipc` stream 7.
        fn add_ipc_subscriber_then_publisher(&self) {
            self.send(Command::AddSubscription {
                client_id: 1,
                correlation_id: 10,
                stream_id: 7,
                channel: "aeron:ipc".into(),
            });
            self.send(Command::AddPublication {
                client_id: 2,
                correlation_id: 11,
                stream_id: 7,
                channel: "aeron:ipc".into(),
                exclusive: false,
            });
        }

        fn send(&self, command: Command) {
            let (id, bytes) = command.encode();
            self.ring.write(id, &bytes).unwrap();
        }

        /// Runs one duty cycle and returns what the driver broadcast.
        fn responses(&mut self, driver: &mut DriverConductor) -> Vec<Response> {
            driver.do_work();
            let mut out = Vec::new();
            while let crate::shm::broadcast::Received::Message(id) = self.receiver.receive(&mut self.scratch).unwrap() {
                out.push(Response::decode(id, &self.scratch).unwrap());
            }
            out
        }
    }

    fn small_config(dir: PathBuf) -> DriverContext {
        DriverContext {
            client_timeout: SILENT_CLIENT_TIMEOUT,
            cnc: CncParams {
                to_driver_capacity: 64 * 1024,
                to_clients_capacity: 64 * 1024,
                counters: 128,
                error_log_length: 4096,
                ..CncParams::default()
            },
            ipc_term_length: 64 * 1024,
            ..DriverContext::new(dir)
        }
    }

    #[test]
    fn a_start_position_is_taken_by_ipc_publications_and_refused_on_subscriptions() {
        let channel = "aeron:ipc?term-length=64k|init-term-id=7|term-id=8|term-offset=64";
        let uri = ipc_channel(channel).expect("a start position on an IPC publication");
        let message = start_on_subscription(&uri, channel).expect_err("a start position on a subscription");
        assert!(message.starts_with(channel), "{message}");
        assert!(message.contains("init-term-id / term-id / term-offset apply to publications only"), "{message}");
        assert!(ipc_channel("aeron:ipc?term-length=64k").is_ok());
        let message = ipc_channel("aeron:ipc?session-id=5").expect_err("a session id on a shared IPC log");
        assert!(message.contains("session-id is not supported on aeron:ipc"), "{message}");
    }

    #[test]
    fn an_ipc_publication_paces_on_its_slowest_subscriber_and_lingers_until_drained() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        wire.add_ipc_subscriber_then_publisher();
        wire.send(Command::AddPublication {
            client_id: 3,
            correlation_id: 12,
            stream_id: 7,
            channel: "aeron:udp?endpoint=127.0.0.1:1".into(),
            exclusive: false,
        });
        let answers = wire.responses(&mut driver);
        assert!(matches!(answers[0], Response::SubscriptionReady { correlation_id: 10 }));
        let Response::PublicationReady { publisher_limit_counter_id, ref log_file, .. } = answers[1] else {
            panic!("{answers:?}")
        };
        let Response::AvailableImage { subscriber_position_counter_id, .. } = answers[2] else { panic!("{answers:?}") };
        assert!(
            matches!(&answers[3], Response::Error { correlation_id: 12, message, .. } if message.contains("aeron:ipc channels only"))
        );
        let log = LogBuffer::open(&dir.join(log_file)).unwrap();
        let limit = counters.counter(publisher_limit_counter_id as usize).unwrap();
        let position = counters.counter(subscriber_position_counter_id as usize).unwrap();
        wire.responses(&mut driver);
        assert_eq!(limit.get().unwrap(), 32 * 1024, "limit = slowest subscriber + half a term");
        // Fill to the limit: back-pressured until the subscriber moves.
        let mut appended = 0;
        while let Offer::Appended(_) = log.offer(&[1; 224], 0, limit.get().unwrap()).unwrap() {
            appended += 1;
        }
        assert_eq!(appended, 32 * 1024 / 256);
        position.set(16 * 1024).unwrap();
        wire.responses(&mut driver);
        assert_eq!(limit.get().unwrap(), 48 * 1024);
        // The publisher's client goes away: the publication lingers until the subscriber has all.
        wire.send(Command::ClientClose { client_id: 2, token: 0 });
        wire.responses(&mut driver);
        assert!(dir.join(log_file).exists(), "lingers while undelivered");
        position.set(32 * 1024).unwrap();
        let answers = wire.responses(&mut driver);
        assert!(
            matches!(answers[..], [Response::UnavailableImage { subscription_registration_id: 10, .. }]),
            "{answers:?}"
        );
        assert!(!dir.join(log_file).exists());
        assert_eq!(log.end_of_stream_position().unwrap(), 32 * 1024);
        driver.shutdown().unwrap();
        assert!(!dir.join(CNC_FILE).exists());
    }

    #[test]
    fn an_exclusive_ipc_publication_gets_a_log_and_session_of_its_own_that_no_publication_joins() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let mut wire = CncWire::new(&driver);
        wire.add_ipc_subscriber_then_publisher();
        let add = |correlation_id: i64, exclusive: bool| Command::AddPublication {
            client_id: 3,
            correlation_id,
            stream_id: 7,
            channel: "aeron:ipc".into(),
            exclusive,
        };
        for (correlation_id, exclusive) in [(12, true), (13, true), (14, false)] {
            wire.send(add(correlation_id, exclusive));
        }
        let answers = wire.responses(&mut driver);
        let ready: Vec<(i64, i64, i32, String)> = answers
            .iter()
            .filter_map(|answer| match answer {
                Response::PublicationReady { correlation_id, registration_id, session_id, log_file, .. } => {
                    Some((*correlation_id, *registration_id, *session_id, log_file.clone()))
                }
                _ => None,
            })
            .collect();
        let registrations: Vec<(i64, i64)> = ready.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(registrations, [(11, 11), (12, 12), (13, 13), (14, 11)], "only the shared one is joined");
        let sessions: std::collections::HashSet<i32> = ready.iter().map(|r| r.2).collect();
        let logs: std::collections::HashSet<&str> = ready.iter().map(|r| r.3.as_str()).collect();
        assert_eq!((sessions.len(), logs.len()), (3, 3), "{ready:?}");
        let images = answers.iter().filter(|a| matches!(a, Response::AvailableImage { .. })).count();
        assert_eq!(images, 3, "the subscriber gets one image per log: {answers:?}");
        // Its one writer appends with the exclusive appender; the driver sees its position.
        let mut appender =
            crate::shm::log_buffer::ExclusiveAppender::new(LogBuffer::open(&dir.join(&ready[1].3)).unwrap()).unwrap();
        assert_eq!(appender.offer(b"only mine", 0, i64::MAX).unwrap(), Offer::Appended(64));
        // Released, it goes; the others stay.
        wire.send(Command::RemovePublication { client_id: 3, correlation_id: 15, registration_id: 12 });
        let answers = wire.responses(&mut driver);
        assert!(answers.contains(&Response::OperationSuccess { correlation_id: 15 }), "{answers:?}");
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_publication_is_connected_only_once_its_limit_lets_it_append() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        wire.send(Command::AddPublication {
            client_id: 2,
            correlation_id: 11,
            stream_id: 7,
            channel: "aeron:ipc".into(),
            exclusive: false,
        });
        let answers = wire.responses(&mut driver);
        let Response::PublicationReady { publisher_limit_counter_id, ref log_file, .. } = answers[0] else {
            panic!("{answers:?}")
        };
        let log = LogBuffer::open(&dir.join(log_file)).unwrap();
        let limit = counters.counter(publisher_limit_counter_id as usize).unwrap();
        assert!(!log.is_connected().unwrap());
        // The subscription's command alone, no duty cycle after it: a publisher reading the
        // flag at that moment must find room below the limit (it was refused as back-pressured).
        let subscribe =
            Command::AddSubscription { client_id: 1, correlation_id: 10, stream_id: 7, channel: "aeron:ipc".into() };
        driver.on_command(subscribe, crate::shm::directory::epoch_ms());
        assert!(log.is_connected().unwrap());
        assert_eq!(limit.get().unwrap(), 32 * 1024, "the limit moved with the connected flag");
        driver.shutdown().unwrap();
    }

    #[test]
    fn distinct_refusals_fill_at_most_their_share_of_the_error_log_and_the_drivers_own_errors_find_room() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let count = |counter: SystemCounter| counter.read(&counters).unwrap();
        let mut wire = CncWire::new(&driver);
        let refused = |i: i64| Command::AddPublication {
            client_id: 1,
            correlation_id: 100 + i,
            stream_id: 7,
            channel: format!("aeron:ipc?term-length={}", 1000 + i),
            exclusive: false,
        };
        // 200 distinct refusals: far more than the 4 KiB error log holds.
        for i in 0..200 {
            wire.send(refused(i));
        }
        let mut answered = 0;
        for _ in 0..100 {
            answered += wire.responses(&mut driver).len();
            if answered >= 200 {
                break;
            }
        }
        assert_eq!(answered, 200, "every refusal answered");
        assert_eq!((count(SystemCounter::Errors), count(SystemCounter::ErrorsDropped)), (200, 0));
        let log = error_log(&driver);
        let (one_by_one, rest) = log.split_at(log.len() - 1);
        assert!(one_by_one.iter().all(|(count, m)| *count == 1 && m.contains("term-length")), "{log:?}");
        assert_eq!(rest[0], (200 - one_by_one.len() as i32, REFUSALS_NOT_LOGGED.to_string()));
        let used: usize = log.iter().map(|(_, m)| ErrorLogWriter::record_length(m)).sum();
        assert!(used <= 4096 / REFUSALS_LOG_SHARE + ErrorLogWriter::record_length(REFUSALS_NOT_LOGGED), "{used}");
        // A repeat of a refusal logged one by one counts in its record.
        wire.send(refused(0));
        wire.responses(&mut driver);
        assert_eq!(error_log(&driver)[0].0, 2);
        // The driver's own error (a corrupt ring record) still finds room.
        let tail = wire.ring.producer_position().unwrap() as usize;
        wire.send(subscribe(1, 10));
        wire.ring.region().put_i32(tail, 3).unwrap();
        wire.responses(&mut driver);
        assert!(error_log(&driver).iter().any(|(_, m)| m.contains("record length 3")));
        assert_eq!(count(SystemCounter::ErrorsDropped), 0);
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_released_ipc_publication_whose_subscriber_stalls_is_closed_when_its_linger_passes() {
        let dir = tempdir();
        let linger = Duration::from_millis(200);
        let config = DriverContext { publication_linger: linger, ..small_config(dir.to_path_buf()) };
        let mut driver = DriverConductor::launch(config).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        wire.add_ipc_subscriber_then_publisher();
        let answers = wire.responses(&mut driver);
        let Response::PublicationReady { publisher_limit_counter_id, ref log_file, .. } = answers[1] else {
            panic!("{answers:?}")
        };
        let log = LogBuffer::open(&dir.join(log_file)).unwrap();
        let limit = counters.counter(publisher_limit_counter_id as usize).unwrap();
        wire.responses(&mut driver);
        assert!(matches!(log.offer(&[1; 224], 0, limit.get().unwrap()).unwrap(), Offer::Appended(_)));
        // The publisher's client goes; the subscriber never reads (its position stays at 0).
        wire.send(Command::ClientClose { client_id: 2, token: 0 });
        let released = Instant::now();
        wire.responses(&mut driver);
        assert!(dir.join(log_file).exists(), "lingers while undelivered");
        let mut answers = Vec::new();
        while dir.join(log_file).exists() && released.elapsed() < linger * 20 {
            std::thread::sleep(Duration::from_millis(5));
            answers.extend(wire.responses(&mut driver));
        }
        let lingered = released.elapsed();
        assert!(!dir.join(log_file).exists(), "still there after {lingered:?}");
        // The conductor's clock counts whole milliseconds.
        let resolution = Duration::from_millis(2);
        assert!(lingered + resolution >= linger, "closed after {lingered:?}, before its linger of {linger:?}");
        assert!(
            matches!(answers[..], [Response::UnavailableImage { subscription_registration_id: 10, .. }]),
            "{answers:?}"
        );
        // What was appended stays readable up to the end of stream the driver set.
        assert_eq!(log.end_of_stream_position().unwrap(), 256);
        driver.shutdown().unwrap();
    }

    /// A driver with one `aeron:ipc` publication (terms of `term_length`: window half a term,
    /// trip gain an eighth of that) and one subscriber: the driver, the log, the publisher-limit
    /// counter and the subscriber's position counter.
    fn one_publication_one_subscriber(dir: &Path, term_length: u32) -> (DriverConductor, LogBuffer, Counter, Counter) {
        let config = DriverContext { ipc_term_length: term_length, ..small_config(dir.to_path_buf()) };
        let mut driver = DriverConductor::launch(config).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        wire.add_ipc_subscriber_then_publisher();
        let (mut limit, mut position, mut log) = (None, None, None);
        for response in wire.responses(&mut driver) {
            match response {
                Response::PublicationReady { publisher_limit_counter_id, log_file, .. } => {
                    limit = Some(counters.counter(publisher_limit_counter_id as usize).unwrap());
                    log = Some(LogBuffer::open(&dir.join(log_file)).unwrap());
                }
                Response::AvailableImage { subscriber_position_counter_id, .. } => {
                    position = Some(counters.counter(subscriber_position_counter_id as usize).unwrap());
                }
                _ => {}
            }
        }
        (driver, log.unwrap(), limit.unwrap(), position.unwrap())
    }

    #[test]
    fn a_subscriber_position_written_past_the_tail_counts_as_the_tail() {
        let dir = tempdir();
        let (mut driver, log, limit, position) = one_publication_one_subscriber(&dir, 64 * 1024);
        let window = log.publication_window();
        let mut scratch = Vec::new();
        // Every committed frame from `from` on (reads stop at each term's end), with a check of
        // each payload: where the reading ended and how many frames it found.
        let mut read_all = |from: i64| {
            let (mut at, mut frames) = (from, 0);
            loop {
                let next = log
                    .read(at, usize::MAX, &mut scratch, |_, bytes| {
                        assert_eq!(bytes, [5; 224]);
                        frames += 1;
                    })
                    .unwrap();
                if next == at {
                    return (at, frames);
                }
                at = next;
            }
        };
        // A term and a half appended and read, then more not read yet.
        let mut read = 0;
        while log.tail_position().unwrap() < 104 * 1024 {
            while let Offer::Appended(_) = log.offer(&[5; 224], 0, limit.get().unwrap()).unwrap() {}
            if log.tail_position().unwrap() <= 96 * 1024 {
                read = read_all(read).0;
                position.set(read).unwrap();
            }
            driver.do_work();
        }
        let (tail, unread) = (log.tail_position().unwrap(), read);
        assert!(tail > unread, "frames at {unread}..{tail} not read yet");
        // The subscriber's client writes a position far past the tail.
        position.set(i64::MAX).unwrap();
        for _ in 0..4 {
            driver.do_work();
        }
        assert!(limit.get().unwrap() <= tail + window, "limit {} past tail {tail} + window", limit.get().unwrap());
        // Nothing it has not read was cleaned: the frames from its last real position are intact.
        let (end, frames) = read_all(unread);
        assert_eq!((end, frames), (tail, (tail - unread) / 256));
        // The position comes back: the limit follows it again, from the tail not from i64::MAX.
        position.set(unread).unwrap();
        driver.do_work();
        assert!(limit.get().unwrap() <= tail + window);
        driver.shutdown().unwrap();
    }

    #[test]
    fn the_limit_moves_by_trips_and_at_once_for_a_back_pressured_publisher() {
        let dir = tempdir();
        let (mut driver, log, limit, position) = one_publication_one_subscriber(&dir, 64 * 1024);
        let (window, trip) = (log.publication_window(), log.publication_trip_gain());
        assert_eq!((window, trip), (32 * 1024, 4 * 1024));
        assert_eq!(limit.get().unwrap(), window);
        // 8 KiB appended, far below the limit: the subscriber's progress short of a trip moves
        // nothing, and the conductor reports no work (so its idle strategy may back off).
        for _ in 0..32 {
            assert!(matches!(log.offer(&[1; 224], 0, limit.get().unwrap()).unwrap(), Offer::Appended(_)));
        }
        position.set(trip - 256).unwrap();
        for _ in 0..10 {
            assert_eq!(driver.do_work(), 0, "no trip, no work");
        }
        assert_eq!(limit.get().unwrap(), window);
        // A full trip: the limit follows the subscriber.
        position.set(trip).unwrap();
        assert!(driver.do_work() > 0);
        assert_eq!(limit.get().unwrap(), trip + window);
        position.set(trip + 256).unwrap();
        assert_eq!(driver.do_work(), 0);
        assert_eq!(limit.get().unwrap(), trip + window);
        // The publisher fills up to the limit and is back-pressured; one 256-byte frame read
        // releases it on the next duty cycle, well short of a trip.
        loop {
            match log.offer(&[2; 224], 0, limit.get().unwrap()).unwrap() {
                Offer::Appended(_) | Offer::AdminAction => {}
                Offer::BackPressured => break,
                Offer::MaxPositionExceeded => unreachable!(),
            }
        }
        assert_eq!(log.tail_position().unwrap(), trip + window);
        position.set(trip + 512).unwrap();
        assert!(driver.do_work() > 0, "a back-pressured publisher is released at once");
        assert_eq!(limit.get().unwrap(), trip + 512 + window, "never beyond the slowest subscriber + window");
        // The limit had stayed at the last trip (`trip`), so two frames' room opened.
        for _ in 0..2 {
            assert!(matches!(log.offer(&[3; 224], 0, limit.get().unwrap()).unwrap(), Offer::Appended(_)));
        }
        assert_eq!(log.offer(&[3; 224], 0, limit.get().unwrap()).unwrap(), Offer::BackPressured);
        driver.shutdown().unwrap();
    }

    /// A seeded walk of a publisher and a subscriber with uneven speeds through many term
    /// rotations: every message arrives once, in order and intact (so the log was clean
    /// wherever writers rotated into it), the limit never passes the slowest subscriber + the
    /// window, a back-pressured publisher is released by the first duty cycle after the
    /// subscriber moves, and while the subscriber keeps up the conductor works about once per
    /// trip gain of progress, not on every duty cycle. With 64 KiB terms most cleans are shorter
    /// than `STREAMING_ZERO_MIN` (memset); with 1 MiB terms every trip cleans 64 KiB with
    /// streaming stores.
    #[test]
    fn a_seeded_walk_delivers_everything_and_the_conductor_works_once_per_trip() {
        seeded_walk(64 * 1024);
        seeded_walk(1024 * 1024);
    }

    fn seeded_walk(term_length: u32) {
        let dir = tempdir();
        let (mut driver, log, limit, position) = one_publication_one_subscriber(&dir, term_length);
        let (window, trip) = (log.publication_window(), log.publication_trip_gain());
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let (mut sent, mut received, mut read_position) = (0u64, 0u64, 0i64);
        let mut scratch = Vec::new();
        let payload = |sequence: u64| sequence.to_le_bytes().repeat(1 + (sequence % 24) as usize);
        // Phase 1, uneven: bursts of up to 64 offers, reads of up to 64 fragments.
        for _ in 0..20_000 {
            let mut refused = false;
            for _ in 0..next(64) {
                match log.offer(&payload(sent), 0, limit.get().unwrap()).unwrap() {
                    Offer::Appended(_) => sent += 1,
                    Offer::AdminAction => {}
                    Offer::BackPressured => {
                        refused = true;
                        break;
                    }
                    Offer::MaxPositionExceeded => unreachable!(),
                }
            }
            let before = position.get().unwrap();
            read_position = log
                .read(read_position, next(64) as usize, &mut scratch, |_, bytes| {
                    assert_eq!(bytes, payload(received), "message {received}");
                    received += 1;
                })
                .unwrap();
            position.set(read_position).unwrap();
            let limit_before = limit.get().unwrap();
            driver.do_work();
            let now = limit.get().unwrap();
            assert!(now <= read_position + window, "limit {now} beyond {read_position} + window");
            if refused && read_position > before {
                assert!(now > limit_before, "a back-pressured publisher waits although the subscriber moved");
            }
        }
        assert!(read_position > 3 * i64::from(term_length), "rotated through every partition: {read_position}");
        // Phase 2, steady: the subscriber has caught up and reads everything on each cycle;
        // one 64-byte frame per cycle.
        while read_position < log.tail_position().unwrap() {
            read_position = log
                .read(read_position, usize::MAX, &mut scratch, |_, bytes| {
                    assert_eq!(bytes, payload(received), "message {received}");
                    received += 1;
                })
                .unwrap();
        }
        position.set(read_position).unwrap();
        driver.do_work();
        let (mut working, cycles) = (0i64, 20_000i64);
        for _ in 0..cycles {
            while !matches!(log.offer(&[4; 32], 0, limit.get().unwrap()).unwrap(), Offer::Appended(_)) {}
            sent += 1;
            while read_position < log.tail_position().unwrap() {
                read_position = log.read(read_position, usize::MAX, &mut scratch, |_, _| received += 1).unwrap();
            }
            position.set(read_position).unwrap();
            if driver.do_work() > 0 {
                working += 1;
            }
        }
        assert_eq!(received, sent);
        assert!(working <= cycles * 64 / trip + 2, "{working} working cycles of {cycles}");
        driver.shutdown().unwrap();
    }

    /// The driver's error log: (count, message) of each distinct error.
    fn error_log(driver: &DriverConductor) -> Vec<(i32, String)> {
        let records = crate::shm::error_log::read_errors(driver.cnc().error_log()).unwrap();
        records.into_iter().map(|record| (record.count, record.message)).collect()
    }

    fn subscribe(client_id: i64, correlation_id: i64) -> Command {
        Command::AddSubscription { client_id, correlation_id, stream_id: 7, channel: "aeron:ipc".into() }
    }

    #[test]
    fn a_command_claimed_and_never_committed_is_padded_over_after_a_quarter_of_the_client_timeout_and_logged_once() {
        let dir = tempdir();
        let timeout = Duration::from_millis(200);
        let config = DriverContext { client_timeout: timeout * 4, ..small_config(dir.to_path_buf()) };
        let mut driver = DriverConductor::launch(config).unwrap();
        let mut wire = CncWire::new(&driver);
        // A client claims a record and dies before committing it (its header written, length
        // negative: the ring's own write, cut short): everything behind it waits.
        let (id, bytes) = subscribe(1, 10).encode();
        let tail = wire.ring.claim_and_die(id, bytes.len()).unwrap();
        let claimed = (bytes.len() as i64 + 8 + 7) & !7;
        wire.send(subscribe(2, 11));
        let started = Instant::now();
        let mut answers = Vec::new();
        while answers.is_empty() && started.elapsed() < timeout * 20 {
            answers = wire.responses(&mut driver);
            std::thread::sleep(Duration::from_millis(5));
        }
        let waited = started.elapsed();
        assert!(
            matches!(answers[..], [Response::SubscriptionReady { correlation_id: 11 }]),
            "{answers:?} after {waited:?}"
        );
        assert!(waited + Duration::from_millis(2) >= timeout, "unblocked after {waited:?}, before the timeout");
        for _ in 0..20 {
            wire.responses(&mut driver);
        }
        let log = error_log(&driver);
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(log[0].0, 1, "logged once: {log:?}");
        assert!(log[0].1.contains(&format!("a command of {claimed} bytes claimed at position {tail}")), "{log:?}");
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_claim_found_after_the_conductor_itself_stalled_gets_its_full_time_before_it_is_padded_over() {
        // A process stopped with its conductor and a producer half-way through a command: when
        // both run again, the producer is about to commit, so the claim is not padded over at
        // once for the time nobody ran.
        let dir = tempdir();
        let timeout = Duration::from_millis(200);
        let config = DriverContext { client_timeout: timeout * 4, ..small_config(dir.to_path_buf()) };
        let mut driver = DriverConductor::launch(config).unwrap();
        let mut wire = CncWire::new(&driver);
        let (id, bytes) = subscribe(1, 10).encode();
        wire.ring.claim_and_die(id, bytes.len()).unwrap();
        std::thread::sleep(timeout * 3);
        let resumed = Instant::now();
        assert_eq!(wire.responses(&mut driver), []);
        assert!(error_log(&driver).is_empty(), "padded over at once after the stall: {:?}", error_log(&driver));
        while error_log(&driver).is_empty() && resumed.elapsed() < timeout * 20 {
            wire.responses(&mut driver);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(resumed.elapsed() + Duration::from_millis(2) >= timeout, "padded over {:?} after", resumed.elapsed());
        assert_eq!(error_log(&driver).len(), 1);
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_malformed_record_length_is_skipped_logged_once_and_counted() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        let tail = wire.ring.producer_position().unwrap() as usize;
        wire.send(subscribe(1, 10));
        wire.ring.region().put_i32(tail, 3).unwrap();
        for _ in 0..100 {
            assert_eq!(wire.responses(&mut driver), []);
        }
        let log = error_log(&driver);
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(log[0].0, 1, "logged once, not on every duty cycle: {log:?}");
        assert!(log[0].1.contains(&format!("offset {tail}: record length 3")), "{log:?}");
        assert_eq!(SystemCounter::InvalidCommands.read(&counters).unwrap(), 1);
        // The ring carries commands again.
        wire.send(subscribe(1, 12));
        assert!(matches!(wire.responses(&mut driver)[..], [Response::SubscriptionReady { correlation_id: 12 }]));
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_close_naming_another_live_client_is_ignored_and_commands_act_only_on_the_senders_resources() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let subscriptions =
            |counters: &crate::shm::counters::CountersReader| SystemCounter::Subscriptions.read(counters).unwrap();
        let mut wire = CncWire::new(&driver);
        wire.send(Command::ClientKeepalive { client_id: 1, token: 0x5eed });
        wire.send(subscribe(1, 10));
        assert!(matches!(wire.responses(&mut driver)[..], [Response::SubscriptionReady { correlation_id: 10 }]));
        // Another process names client 1: a close without its token, a removal and a query of
        // its subscription under another client id.
        wire.send(Command::ClientClose { client_id: 1, token: 0 });
        wire.send(Command::ClientClose { client_id: 1, token: 0x0bad });
        wire.send(Command::RemoveSubscription { client_id: 2, correlation_id: 20, registration_id: 10 });
        wire.send(Command::QuerySubscription { client_id: 2, correlation_id: 21, registration_id: 10 });
        let answers = wire.responses(&mut driver);
        assert!(
            matches!(&answers[..], [
                Response::Error { correlation_id: 20, code: error_code::UNKNOWN_SUBSCRIPTION, message: removed },
                Response::Error { correlation_id: 21, code: error_code::UNKNOWN_SUBSCRIPTION, message: queried },
            ] if removed == "client 2 holds no subscription 10" && queried == "client 2 holds no subscription 10"),
            "{answers:?}"
        );
        assert_eq!(subscriptions(&counters), 1, "client 1 keeps its subscription");
        let log = error_log(&driver);
        let ignored = log.iter().find(|(_, m)| m.starts_with("client-close for client 1 ignored")).expect("logged");
        assert_eq!(ignored.0, 2, "{log:?}");
        // A keepalive with another token does not keep client 1 alive either.
        wire.send(Command::ClientKeepalive { client_id: 1, token: 0x0bad });
        wire.responses(&mut driver);
        assert!(error_log(&driver).iter().any(|(_, m)| m.starts_with("client-keepalive for client 1 ignored")));
        // An id the driver never handed out is refused, naming it.
        wire.send(subscribe(TEST_CLIENT_IDS + 1_000, 30));
        let answers = wire.responses(&mut driver);
        assert!(
            matches!(&answers[..], [Response::Error { correlation_id: 30, message, .. }]
                if message == &format!("client id {} was never handed out by this driver (ids 1 to {TEST_CLIENT_IDS} so far)", TEST_CLIENT_IDS + 1_000)),
            "{answers:?}"
        );
        assert!(error_log(&driver).iter().any(|(_, m)| m == "commands from client ids never handed out refused"));
        // Its own close, with its token, closes it.
        wire.send(Command::ClientClose { client_id: 1, token: 0x5eed });
        wire.responses(&mut driver);
        assert_eq!(subscriptions(&counters), 0);
        driver.shutdown().unwrap();
    }

    #[test]
    fn an_add_reusing_another_clients_registration_id_is_refused_and_cannot_remove_it() {
        let dir = tempdir();
        let mut driver = DriverConductor::launch(small_config(dir.to_path_buf())).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        wire.add_ipc_subscriber_then_publisher();
        let answers = wire.responses(&mut driver);
        assert!(matches!(answers[..], [_, _, Response::AvailableImage { .. }]), "{answers:?}");
        // Client 3 adds a subscription and a publication under the ids of clients 1 and 2 (both
        // are in the broadcast every client reads), then removes them as its own.
        wire.send(subscribe(3, 10));
        wire.send(Command::AddPublication {
            client_id: 3,
            correlation_id: 11,
            stream_id: 7,
            channel: "aeron:ipc".into(),
            exclusive: false,
        });
        wire.send(Command::RemoveSubscription { client_id: 3, correlation_id: 30, registration_id: 10 });
        wire.send(Command::RemovePublication { client_id: 3, correlation_id: 31, registration_id: 11 });
        let answers = wire.responses(&mut driver);
        let reused = |id: i64| {
            format!(
                "correlation id {id} already names a publication or subscription: an add takes a fresh id from the \
                 ring's correlation counter"
            )
        };
        assert!(
            matches!(&answers[..], [
                Response::Error { correlation_id: 10, message: subscription, .. },
                Response::Error { correlation_id: 11, message: publication, .. },
                Response::Error { correlation_id: 30, code: error_code::UNKNOWN_SUBSCRIPTION, .. },
                Response::Error { correlation_id: 31, code: error_code::UNKNOWN_PUBLICATION, .. },
            ] if *subscription == reused(10) && *publication == reused(11)),
            "{answers:?}"
        );
        // Client 1's image of client 2's publication is still there.
        assert_eq!(SystemCounter::Subscriptions.read(&counters).unwrap(), 1);
        assert!(driver.publications[0].images.iter().any(|image| image.subscription_id == 10));
        driver.shutdown().unwrap();
    }

    #[test]
    fn past_a_quota_a_client_is_refused_with_an_error_naming_it_and_the_others_go_on() {
        use crate::driver::ClientQuotas;
        let dir = tempdir();
        let mut config = small_config(dir.to_path_buf());
        config.quotas = ClientQuotas {
            max_clients: 4,
            publications_per_client: 2,
            subscriptions_per_client: 3,
            counters_per_client: 64,
            commands_per_cycle_per_client: 2,
            queued_commands_per_client: 8,
        };
        let mut driver = DriverConductor::launch(config).unwrap();
        let counters = driver.cnc().counters().unwrap();
        let mut wire = CncWire::new(&driver);
        let quota_error = |answers: &[Response], correlation_id: i64, text: &str| {
            answers.iter().any(|a| {
                matches!(a, Response::Error { correlation_id: c, code: error_code::QUOTA_EXCEEDED, message }
                if *c == correlation_id && message == text)
            })
        };
        // Client 1 floods: 20 subscriptions at once; client 2 sends one command after them.
        for i in 0..20 {
            wire.send(subscribe(1, 100 + i));
        }
        wire.send(subscribe(2, 200));
        let answers = wire.responses(&mut driver);
        // The flooder's share of the cycle is 2 commands; client 2 is answered in the same cycle.
        assert!(
            answers.iter().any(|a| matches!(a, Response::SubscriptionReady { correlation_id: 200 })),
            "{answers:?}"
        );
        let ready = |answers: &[Response]| {
            answers.iter().filter(|a| matches!(a, Response::SubscriptionReady { correlation_id: 100..=119 })).count()
        };
        assert_eq!(ready(&answers), 2);
        // Past 8 queued commands, client 1's are refused at once, naming the quota.
        let queued =
            "client 1: quota queued_commands_per_client=8 reached (affinity driver --queued-commands-per-client)";
        assert!(quota_error(&answers, 119, queued), "{answers:?}");
        let mut answers = answers;
        for _ in 0..10 {
            answers.extend(wire.responses(&mut driver));
        }
        assert_eq!(ready(&answers), 3, "{answers:?}");
        let held = "client 1: quota subscriptions_per_client=3 reached (affinity driver --subscriptions-per-client)";
        assert!(quota_error(&answers, 103, held), "{answers:?}");
        // Publications: two handles, then refused.
        for i in 0..3 {
            wire.send(Command::AddPublication {
                client_id: 3,
                correlation_id: 300 + i,
                stream_id: 7,
                channel: "aeron:ipc".into(),
                exclusive: false,
            });
        }
        let mut answers = wire.responses(&mut driver);
        answers.extend(wire.responses(&mut driver));
        let publications =
            "client 3: quota publications_per_client=2 reached (affinity driver --publications-per-client)";
        assert!(quota_error(&answers, 302, publications), "{answers:?}");
        // Invented client ids: at most 4 tracked (1, 2 and 3 are), the rest refused.
        for client_id in 10..40 {
            wire.send(Command::ClientKeepalive { client_id, token: 1 });
        }
        wire.send(subscribe(50, 500));
        let answers = wire.responses(&mut driver);
        assert_eq!(SystemCounter::Clients.read(&counters).unwrap(), 4);
        let max = "client 50: quota max_clients=4 reached (affinity driver --max-clients)";
        assert!(quota_error(&answers, 500, max), "{answers:?}");
        let log = error_log(&driver);
        for text in [queued, held, publications] {
            assert!(log.iter().any(|(_, m)| m == text), "{text} not in {log:?}");
        }
        // 29 invented ids and client 50: one record, counted 30 times.
        let flood =
            "quota max_clients=4 reached: commands of further client ids refused (affinity driver --max-clients)";
        assert!(log.iter().any(|(count, m)| m == flood && *count == 30), "{log:?}");
        // Counters: a client at its share of counters adds nothing more.
        driver.config.quotas.counters_per_client = 2;
        wire.send(subscribe(2, 201));
        let answers = wire.responses(&mut driver);
        let counted = "client 2: quota counters_per_client=2 reached (affinity driver --counters-per-client)";
        assert!(quota_error(&answers, 201, counted), "{answers:?}");
        driver.shutdown().unwrap();
    }

    #[test]
    fn the_queued_commands_of_all_clients_together_are_bounded_in_bytes() {
        use crate::driver::ClientQuotas;
        let dir = tempdir();
        let mut config = small_config(dir.to_path_buf());
        config.quotas = ClientQuotas {
            commands_per_cycle_per_client: 1,
            queued_commands_per_client: 100_000,
            ..ClientQuotas::default()
        };
        let mut driver = DriverConductor::launch(config).unwrap();
        let wire = CncWire::new(&driver);
        // Four clients write 7 commands of ~8 KiB per duty cycle; 4 run per cycle: the queues grow.
        let channel = format!("aeron:ipc?alias={}", "x".repeat(wire.ring.max_message_length() - 64));
        let mut cycles = 0;
        while driver.pending_bytes < QUEUED_BYTES_MAX {
            for i in 0..7 {
                wire.send(Command::AddSubscription {
                    client_id: 1 + i % 4,
                    correlation_id: 1,
                    stream_id: 7,
                    channel: channel.clone(),
                });
            }
            driver.do_work();
            cycles += 1;
            assert!(cycles < 10_000, "the queues never filled");
        }
        let most = QUEUED_BYTES_MAX + 256 * wire.ring.max_message_length();
        assert!(driver.pending_bytes <= most, "{} bytes queued", driver.pending_bytes);
        // Past the bound the ring is not read: what the clients wrote waits there.
        wire.send(subscribe(5, 2));
        let waiting = wire.ring.size().unwrap();
        driver.do_work();
        assert_eq!(wire.ring.size().unwrap(), waiting, "read although the queues are full");
        // The turns drain the queues; then the ring is read again.
        for _ in 0..100_000 {
            if wire.ring.size().unwrap() == 0 {
                break;
            }
            driver.do_work();
        }
        assert_eq!(wire.ring.size().unwrap(), 0);
        let queued: usize = driver.pending.values().flatten().map(|(_, length)| length).sum();
        assert_eq!(driver.pending_bytes, queued, "the byte count follows the queues");
        driver.shutdown().unwrap();
    }

    /// A driver with the given client timeout and one client (an id it handed out) that
    /// subscribed to `aeron:ipc` once and then says nothing more.
    fn driver_with_one_silent_client(dir: &std::path::Path, client_timeout: Duration) -> DriverConductor {
        let config = DriverContext { client_timeout, ..small_config(dir.to_path_buf()) };
        let mut driver = DriverConductor::launch(config).unwrap();
        let ring = driver.cnc().to_driver().unwrap();
        let client_id = ring.next_correlation_id().unwrap();
        let (id, bytes) = Command::AddSubscription {
            client_id,
            correlation_id: client_id + 1,
            stream_id: 1,
            channel: "aeron:ipc".into(),
        }
        .encode();
        ring.write(id, &bytes).unwrap();
        driver.do_work();
        driver
    }

    #[test]
    fn a_silent_client_is_reclaimed_after_the_client_timeout() {
        let dir = tempdir();
        let mut driver = driver_with_one_silent_client(&dir, Duration::from_millis(200));
        let counters = driver.cnc().counters().unwrap();
        let value = |counter: SystemCounter| counters.value(counter as usize).unwrap();
        assert_eq!((value(SystemCounter::Clients), value(SystemCounter::Subscriptions)), (1, 1));
        let start = Instant::now();
        while value(SystemCounter::ClientTimeouts) == 0 && start.elapsed() < Duration::from_secs(5) {
            driver.do_work();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(start.elapsed() >= Duration::from_millis(150), "not before the timeout");
        assert_eq!(
            (value(SystemCounter::ClientTimeouts), value(SystemCounter::Clients), value(SystemCounter::Subscriptions)),
            (1, 0, 0)
        );
        driver.shutdown().unwrap();
    }

    #[test]
    fn a_stalled_conductor_does_not_time_out_its_clients_for_the_silence_it_did_not_hear() {
        // A process frozen longer than the client timeout (SIGSTOP, swap, a starved machine):
        // when it runs again, its conductor must not reclaim the clients it could not hear, or an
        // embedded driver kills its own process's publications (issue 25: a group consumer went
        // silent for ever after a long stall while still believing it owned its queues).
        let dir = tempdir();
        let mut driver = driver_with_one_silent_client(&dir, Duration::from_millis(300));
        let counters = driver.cnc().counters().unwrap();
        let value = |counter: SystemCounter| counters.value(counter as usize).unwrap();
        assert_eq!(value(SystemCounter::Clients), 1);
        // The conductor does not run for three client timeouts, then runs again.
        std::thread::sleep(Duration::from_millis(900));
        for _ in 0..3 {
            driver.do_work();
        }
        assert_eq!((value(SystemCounter::ClientTimeouts), value(SystemCounter::Clients)), (0, 1), "forgiven");
        // A client that stays silent while the conductor runs is still reclaimed.
        let start = Instant::now();
        while value(SystemCounter::ClientTimeouts) == 0 && start.elapsed() < Duration::from_secs(5) {
            driver.do_work();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(start.elapsed() >= Duration::from_millis(250), "a full timeout after the stall");
        assert_eq!((value(SystemCounter::ClientTimeouts), value(SystemCounter::Clients)), (1, 0));
        driver.shutdown().unwrap();
    }
}
