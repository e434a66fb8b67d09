//! The receiver agent: reads the network on every receive endpoint, asks the conductor for an
//! image when a SETUP names a subscribed stream, writes received frames into the image's shared
//! log, and sends each image's status messages (window from the lowest subscriber position,
//! read from the subscribers' position counters) and NAKs.
//!
//! The hostile-input rules hold as in the embedded driver: SETUP fields are validated against
//! each other before an image is asked for; images per subscription are bounded (refusals
//! counted); a frame beyond the window is an overrun that moves nothing; end of stream only at
//! the fully received position; each outcome has its own counter.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use super::mmsg::{enable_receive_offload, ReceiveBatch};
use super::{AgentEvent, ImageCounters, ImageRequest, NewEndpoint, NewImage, ReceiverCommand};
use crate::logbuffer::position::compute_position;
use crate::logbuffer::StreamIdentity;
use crate::protocol::{DataRejection, Image, ImageConfig, ImageState};
use crate::shm::command::{error_code, Response};
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{LogBuffer, PopulateAhead};
use crate::shm::status::{ImageInfo, MAX_IMAGES_IN_STATUS};
use crate::shm::wake::DataWake;
use crate::time::{Instant, MonotonicClock};
use crate::wire::{flags, DataHeader, FrameHeader, FrameType, RttMeasurement, Setup, StatusMessage};

/// A session the receiver asked to SETUP, and when (do not ask again within 1 s).
const PENDING_SETUP_TIMEOUT: Duration = Duration::from_secs(1);
/// Status messages and NAKs one image may send per duty cycle.
const CONTROL_FRAMES_PER_CYCLE: usize = 4;
/// Sessions remembered as asked to SETUP at once (a flood cannot grow the table past this).
const MAX_PENDING_SETUPS: usize = 1024;
/// How long an image asked of the conductor blocks another request for the same session.
const PENDING_IMAGE_TIMEOUT: Duration = Duration::from_secs(1);

/// Settings an endpoint applies to the images it creates.
#[derive(Clone, Debug)]
pub struct ImageDefaults {
    /// Receiver window cap (`rcv-wnd`), further capped at term_length / 2.
    pub receiver_window: u32,
    /// Status message interval.
    pub status_interval: Duration,
    /// Unicast NAK delay.
    pub nak_delay: Duration,
    /// Random multicast NAK delay bound.
    pub multicast_nak_backoff: Duration,
    /// Image liveness timeout.
    pub liveness_timeout: Duration,
    /// Group tag for status messages (`gtag=`).
    pub group_tag: Option<i64>,
    /// Treat images as multicast for NAK timing.
    pub is_group: bool,
    /// The socket receive buffer: a SETUP whose MTU is larger is refused.
    pub socket_receive_buffer: usize,
    /// `reliable=false`: skip gaps instead of NAKing them.
    pub reliable: bool,
    /// Images one subscription may have at once; SETUPs beyond are refused and counted.
    pub max_images_per_subscription: usize,
}

impl ImageDefaults {
    /// The configuration of an image for `setup`, or `None` when the SETUP is refused (invalid,
    /// or an MTU larger than the receiver window or the socket receive buffer).
    pub fn image_config(&self, setup: &Setup, receiver_id: i64, random_seed: u64) -> Option<ImageConfig> {
        setup.validate().ok()?;
        let term_length = u32::try_from(setup.term_length).ok()?;
        let window = self.receiver_window.min(term_length / 2);
        let mtu = u32::try_from(setup.mtu).ok()?;
        if mtu > window || mtu as usize > self.socket_receive_buffer {
            return None;
        }
        let identity = StreamIdentity {
            session_id: setup.session_id,
            stream_id: setup.stream_id,
            initial_term_id: setup.initial_term_id,
            term_length,
        };
        let join_position =
            compute_position(setup.active_term_id, setup.term_offset, identity.position_bits(), setup.initial_term_id);
        Some(ImageConfig {
            identity,
            join_position,
            receiver_window: window,
            receiver_id,
            group_tag: self.group_tag,
            status_interval: self.status_interval,
            nak_delay: self.nak_delay,
            is_group: self.is_group || setup.flags & flags::SETUP_GROUP != 0,
            multicast_nak_backoff: self.multicast_nak_backoff,
            liveness_timeout: self.liveness_timeout,
            reliable: self.reliable,
            random_seed,
        })
    }
}

/// What the receiver did with one datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatagramOutcome {
    /// Taken (into an image, as a new image, or handled as control).
    Taken,
    /// Could not be decoded, or its fields contradict each other.
    Malformed,
    /// Everything in it had already been received.
    Duplicate,
    /// It lies beyond its image's receiver window.
    Overrun,
    /// Its image no longer receives (draining after end of stream or timeout).
    Inactive,
    /// A SETUP whose fields are invalid (term ids, offsets, lengths, MTU) or exceed local limits.
    SetupRefused,
    /// A SETUP refused because every matching subscription is at its image limit.
    ImageRefused,
}

/// The system counters the receiver writes (one writer each).
#[derive(Clone, Debug)]
pub struct ReceiverCounters {
    /// Malformed datagrams, and only those.
    pub invalid_data_frames: Counter,
    /// Datagrams already received.
    pub duplicate_data_frames: Counter,
    /// Datagrams beyond their image's window.
    pub overrun_data_frames: Counter,
    /// Datagrams for images no longer receiving.
    pub inactive_image_frames: Counter,
    /// SETUPs refused for invalid or locally unacceptable fields.
    pub setups_refused: Counter,
    /// SETUPs refused at the image limit.
    pub images_refused: Counter,
    /// Bytes received.
    pub bytes_received: Counter,
    /// NAKs sent.
    pub naks_sent: Counter,
    /// Status messages sent.
    pub status_messages_sent: Counter,
    /// Datagrams read from the endpoints.
    pub datagrams_received: Counter,
    /// Heartbeats received by images.
    pub heartbeats_received: Counter,
}

impl ReceiverCounters {
    fn count(&self, outcome: DatagramOutcome) {
        let counter = match outcome {
            DatagramOutcome::Taken => return,
            DatagramOutcome::Malformed => &self.invalid_data_frames,
            DatagramOutcome::Duplicate => &self.duplicate_data_frames,
            DatagramOutcome::Overrun => &self.overrun_data_frames,
            DatagramOutcome::Inactive => &self.inactive_image_frames,
            DatagramOutcome::SetupRefused => &self.setups_refused,
            DatagramOutcome::ImageRefused => &self.images_refused,
        };
        let _ = counter.add(1);
    }
}

struct SubscriptionEntry {
    registration_id: i64,
    stream_id: i32,
    session_filter: Option<i32>,
}

struct ImageEntry {
    correlation_id: i64,
    session_id: i32,
    stream_id: i32,
    control: SocketAddr,
    source: SocketAddr,
    image: Image<LogBuffer>,
    consumers: Vec<(i64, Counter)>,
    counters: ImageCounters,
    reported_naks: u64,
    reported_status_messages: u64,
    reported_heartbeats: u64,
    /// The log's pages mapped in ahead of the data received, from cycles that received nothing.
    populate: PopulateAhead,
}

/// A SETUP this endpoint asked of a sender because frames of a session it has no image of
/// arrived ([`ReceiveEndpoint::elicit_setup`]).
#[derive(Clone, Copy, Debug)]
struct PendingSetup {
    /// When it was last asked.
    since: Instant,
    /// Where the first frame seen of the session lay: `(term id, term offset)`.
    first_frame: (i32, i32),
}

/// Where an image whose SETUP was asked for joins: at the first frame seen of its session when
/// that lies behind the SETUP's position by at most the image's receiver window (the sender
/// still holds it and resends what the image NAKs), else at the SETUP's position, as Aeron does.
///
/// Why: a sender still connected to the receiver that ran here before (a restarted process,
/// within the publication's connection timeout) keeps sending; what it sent between the first
/// frame seen here and its SETUP would otherwise be lost, though it reached this receiver.
fn join_at_first_frame(config: &ImageConfig, first_frame: (i32, i32)) -> i64 {
    let identity = &config.identity;
    let (term_id, term_offset) = first_frame;
    if term_offset < 0 || term_offset as u32 >= identity.term_length {
        return config.join_position;
    }
    let first = compute_position(term_id, term_offset, identity.position_bits(), identity.initial_term_id);
    let behind = config.join_position - first;
    if first >= 0 && behind > 0 && behind <= i64::from(config.receiver_window) {
        first
    } else {
        config.join_position
    }
}

/// One bound receiving socket with its subscriptions and images.
pub struct ReceiveEndpoint {
    socket: UdpSocket,
    control_override: Option<SocketAddr>,
    address: SocketAddr,
    receiver_id: i64,
    defaults: ImageDefaults,
    subscriptions: Vec<SubscriptionEntry>,
    images: Vec<ImageEntry>,
    /// SETUPs asked of senders (status messages with the setup flag) for sessions without an
    /// image, by `(session, stream)`.
    pending_setups: HashMap<(i32, i32), PendingSetup>,
    /// Images asked of the conductor and not yet added: when, and for which subscriptions.
    pending_images: HashMap<(i32, i32), (Instant, Vec<i64>)>,
    seeds: fastrand::Rng,
}

impl ReceiveEndpoint {
    /// An endpoint over a bound socket (the socket is switched to non-blocking).
    pub fn new(new: NewEndpoint) -> Self {
        let _ = new.socket.set_nonblocking(true);
        ReceiveEndpoint {
            socket: new.socket,
            control_override: new.control_override,
            address: new.address,
            receiver_id: new.receiver_id,
            defaults: new.defaults,
            subscriptions: Vec::new(),
            images: Vec::new(),
            pending_setups: HashMap::new(),
            pending_images: HashMap::new(),
            seeds: fastrand::Rng::with_seed(new.receiver_id as u64),
        }
    }

    /// Images subscription `registration_id` has or was promised (asked of the conductor).
    fn image_count(&self, registration_id: i64) -> usize {
        let existing = self.images.iter().filter(|e| e.consumers.iter().any(|(id, _)| *id == registration_id)).count();
        let pending = self.pending_images.values().filter(|(_, ids)| ids.contains(&registration_id)).count();
        existing + pending
    }

    fn on_setup(
        &mut self,
        setup: &Setup,
        source: SocketAddr,
        now: Instant,
        events: &Sender<AgentEvent>,
    ) -> DatagramOutcome {
        let key = (setup.session_id, setup.stream_id);
        if self.images.iter().any(|e| e.session_id == setup.session_id && e.stream_id == setup.stream_id) {
            return DatagramOutcome::Taken;
        }
        if self.pending_images.get(&key).is_some_and(|(since, _)| now.saturating_since(*since) < PENDING_IMAGE_TIMEOUT)
        {
            return DatagramOutcome::Taken;
        }
        self.pending_images.retain(|_, (since, _)| now.saturating_since(*since) < PENDING_IMAGE_TIMEOUT);
        let matching: Vec<i64> = self
            .subscriptions
            .iter()
            .filter(|s| s.stream_id == setup.stream_id && s.session_filter.is_none_or(|id| id == setup.session_id))
            .map(|s| s.registration_id)
            .collect();
        if matching.is_empty() {
            return DatagramOutcome::Taken;
        }
        let limit = self.defaults.max_images_per_subscription;
        let matching: Vec<i64> = matching.into_iter().filter(|id| self.image_count(*id) < limit).collect();
        if matching.is_empty() {
            return DatagramOutcome::ImageRefused;
        }
        let Some(mut config) = self.defaults.image_config(setup, self.receiver_id, self.seeds.u64(..)) else {
            return DatagramOutcome::SetupRefused;
        };
        if let Some(pending) = self.pending_setups.get(&key) {
            config.join_position = join_at_first_frame(&config, pending.first_frame);
        }
        let Ok(mtu) = u32::try_from(setup.mtu) else { return DatagramOutcome::SetupRefused };
        if self.pending_images.len() >= MAX_PENDING_SETUPS {
            return DatagramOutcome::ImageRefused;
        }
        self.pending_setups.remove(&key);
        self.pending_images.insert(key, (now, matching.clone()));
        let request = ImageRequest { endpoint: self.address, config, mtu, source, subscriptions: matching };
        let _ = events.send(AgentEvent::CreateImage(Box::new(request)));
        DatagramOutcome::Taken
    }

    fn elicit_setup(&mut self, header: &DataHeader, source: SocketAddr, now: Instant, buffer: &mut [u8]) {
        if header.is_end_of_stream() || !self.subscriptions.iter().any(|s| s.stream_id == header.stream_id) {
            return;
        }
        let key = (header.session_id, header.stream_id);
        if self.pending_images.contains_key(&key) {
            return;
        }
        let first_frame = match self.pending_setups.get(&key) {
            Some(pending) if now.saturating_since(pending.since) < PENDING_SETUP_TIMEOUT => return,
            Some(pending) => pending.first_frame,
            None => (header.term_id, header.term_offset),
        };
        if self.pending_setups.len() >= MAX_PENDING_SETUPS {
            self.pending_setups.retain(|_, pending| now.saturating_since(pending.since) < PENDING_SETUP_TIMEOUT);
            if self.pending_setups.len() >= MAX_PENDING_SETUPS {
                return;
            }
        }
        self.pending_setups.insert(key, PendingSetup { since: now, first_frame });
        let message = StatusMessage {
            flags: flags::SM_SEND_SETUP,
            session_id: header.session_id,
            stream_id: header.stream_id,
            consumption_term_id: 0,
            consumption_term_offset: 0,
            receiver_window: 0,
            receiver_id: self.receiver_id,
            group_tag: self.defaults.group_tag,
        };
        let length = message.emit(buffer);
        let _ = self.socket.send_to(&buffer[..length], self.control_override.unwrap_or(source));
    }

    /// Handles one received datagram.
    fn on_datagram(
        &mut self,
        datagram: &[u8],
        source: SocketAddr,
        now: Instant,
        scratch: &mut [u8],
        events: &Sender<AgentEvent>,
    ) -> DatagramOutcome {
        let Ok(header) = FrameHeader::parse(datagram) else { return DatagramOutcome::Malformed };
        match header.frame_type {
            FrameType::Data | FrameType::Pad => {
                let Ok(data) = DataHeader::parse(datagram) else { return DatagramOutcome::Malformed };
                match self.images.iter_mut().find(|e| e.session_id == data.session_id && e.stream_id == data.stream_id)
                {
                    Some(entry) => {
                        let result = entry.image.on_data(datagram, now);
                        if result.is_ok() && self.control_override.is_none() {
                            // Only a frame the image took may redirect its status messages.
                            entry.control = source;
                        }
                        match result {
                            Ok(()) => DatagramOutcome::Taken,
                            Err(DataRejection::Malformed(_)) => DatagramOutcome::Malformed,
                            Err(DataRejection::Duplicate) => DatagramOutcome::Duplicate,
                            Err(DataRejection::Overrun) => DatagramOutcome::Overrun,
                            Err(DataRejection::Inactive) => DatagramOutcome::Inactive,
                        }
                    }
                    None => {
                        self.elicit_setup(&data, source, now, scratch);
                        DatagramOutcome::Taken
                    }
                }
            }
            FrameType::Setup => match Setup::parse(datagram) {
                Ok(setup) => self.on_setup(&setup, source, now, events),
                Err(_) => DatagramOutcome::Malformed,
            },
            FrameType::Rttm => {
                if let Ok(request) = RttMeasurement::parse(datagram) {
                    if request.is_reply_requested()
                        && (request.receiver_id == 0 || request.receiver_id == self.receiver_id)
                    {
                        let length = request.reply(0).emit(scratch);
                        let _ = self.socket.send_to(&scratch[..length], source);
                    }
                }
                DatagramOutcome::Taken
            }
            _ => DatagramOutcome::Taken,
        }
    }

    /// Time-driven work of every image: subscriber positions in, liveness, status messages and
    /// NAKs out; closed images are reported to the conductor and dropped.
    fn service_images(
        &mut self,
        now: Instant,
        scratch: &mut [u8],
        counters: &ReceiverCounters,
        events: &Sender<AgentEvent>,
    ) -> usize {
        let mut work = 0;
        let mut index = 0;
        while index < self.images.len() {
            let entry = &mut self.images[index];
            for (id, counter) in &entry.consumers {
                if let Ok(position) = counter.get() {
                    entry.image.set_consumer_position(*id as u64, position);
                }
            }
            entry.image.on_tick(now);
            for _ in 0..CONTROL_FRAMES_PER_CYCLE {
                let Some(length) = entry.image.poll_transmit(now, scratch) else { break };
                work += 1;
                let _ = self.socket.send_to(&scratch[..length], entry.control);
            }
            let image_counters = entry.image.counters();
            let _ = counters.naks_sent.add(image_counters.naks_sent.saturating_sub(entry.reported_naks) as i64);
            let _ = counters
                .status_messages_sent
                .add(image_counters.status_messages_sent.saturating_sub(entry.reported_status_messages) as i64);
            let _ = counters
                .heartbeats_received
                .add(image_counters.heartbeats_received.saturating_sub(entry.reported_heartbeats) as i64);
            entry.reported_naks = image_counters.naks_sent;
            entry.reported_status_messages = image_counters.status_messages_sent;
            entry.reported_heartbeats = image_counters.heartbeats_received;
            let _ = entry.counters.receiver_position.set(entry.image.rebuild_position());
            let _ = entry.counters.receiver_hwm.set(entry.image.hwm_position());
            if entry.image.state() == ImageState::Closed {
                let entry = self.images.swap_remove(index);
                // Subscribers read up to here, then drop the image.
                let _ = entry.image.log().set_end_of_stream_position(entry.image.rebuild_position());
                let incomplete = entry.image.ended_with_data_missing();
                let _ = events.send(AgentEvent::ImageClosed { correlation_id: entry.correlation_id, incomplete });
                continue;
            }
            index += 1;
        }
        work
    }

    fn image_info(&self, entry: &ImageEntry, registration_id: i64) -> ImageInfo {
        let image = &entry.image;
        let c = image.counters();
        let position = entry
            .consumers
            .iter()
            .find(|(id, _)| *id == registration_id)
            .and_then(|(_, counter)| counter.get().ok())
            .unwrap_or(0);
        ImageInfo {
            session_id: entry.session_id,
            source: entry.source.to_string(),
            position,
            rebuild_position: image.rebuild_position(),
            hwm_position: image.hwm_position(),
            active: image.state() == ImageState::Active,
            datagrams_received: c.datagrams_received,
            bytes_received: c.bytes_received,
            heartbeats_received: c.heartbeats_received,
            duplicates: c.duplicates,
            overruns: c.overruns,
            malformed: c.malformed,
            loss_gaps: c.loss_gaps,
            loss_bytes: c.loss_bytes,
            unrecoverable_gaps: c.unrecoverable_gaps,
            unrecoverable_bytes: c.unrecoverable_bytes,
            naks_sent: c.naks_sent,
            retransmits_received: c.retransmits_received,
            status_messages_sent: c.status_messages_sent,
        }
    }
}

/// The receiver agent: every receive endpoint of the driver.
pub struct ReceiverAgent {
    endpoints: Vec<ReceiveEndpoint>,
    commands: Receiver<ReceiverCommand>,
    events: Sender<AgentEvent>,
    counters: ReceiverCounters,
    /// Up to a cycle's datagrams of one endpoint, read with one system call.
    batch: ReceiveBatch,
    /// Whether new endpoints take runs of datagrams whole ([`enable_receive_offload`]).
    udp_offload: bool,
    scratch: Vec<u8>,
    clock: MonotonicClock,
    /// Woken after a cycle that received datagrams ([`ReceiverAgent::set_data_wake`]).
    data_wake: Option<Arc<DataWake>>,
}

impl ReceiverAgent {
    /// An agent reading `commands`, reporting to `events`, counting into `counters`, reading at
    /// most `datagrams_per_cycle` deliveries per endpoint per duty cycle, each a run of datagrams
    /// kept together by the kernel while `udp_offload` and the kernel allow it.
    pub fn new(
        commands: Receiver<ReceiverCommand>,
        events: Sender<AgentEvent>,
        counters: ReceiverCounters,
        datagrams_per_cycle: usize,
        udp_offload: bool,
    ) -> Self {
        ReceiverAgent {
            endpoints: Vec::new(),
            commands,
            events,
            counters,
            batch: ReceiveBatch::new(datagrams_per_cycle),
            udp_offload,
            scratch: vec![0; 65536],
            clock: MonotonicClock::new(),
            data_wake: None,
        }
    }

    /// After a cycle that received datagrams (written into the image logs), `wake` is woken:
    /// what a client thread of this process waiting for data parks on.
    pub fn set_data_wake(&mut self, wake: Option<Arc<DataWake>>) {
        self.data_wake = wake;
    }

    /// Ends every image (shutdown).
    pub fn close_all(&mut self) {
        let now = self.clock.now();
        for endpoint in &mut self.endpoints {
            for entry in &mut endpoint.images {
                entry.image.close(now);
            }
        }
    }

    /// Handles one datagram as if `source` had sent it to the endpoint bound to `endpoint`
    /// (tests and fuzzers drive the whole receiving side without a network). `None` when no
    /// such endpoint exists.
    pub fn on_datagram(
        &mut self,
        endpoint: SocketAddr,
        datagram: &[u8],
        source: SocketAddr,
    ) -> Option<DatagramOutcome> {
        let now = self.clock.now();
        let endpoint = self.endpoints.iter_mut().find(|e| e.address == endpoint)?;
        let outcome = endpoint.on_datagram(datagram, source, now, &mut self.scratch, &self.events);
        self.counters.count(outcome);
        let _ = self.counters.datagrams_received.add(1);
        Some(outcome)
    }

    /// Adds the descriptor of every receiving socket to `out` (what an idle receiver parks on,
    /// [`crate::driver::idle::Idler::idle_or_readable`]).
    pub fn readable_fds(&self, out: &mut Vec<RawFd>) {
        out.extend(self.endpoints.iter().map(|e| e.socket.as_raw_fd()));
    }

    /// One duty cycle at the time of the agent's own clock; returns the work done.
    pub fn do_work(&mut self) -> usize {
        self.do_work_at(self.clock.now())
    }

    /// One duty cycle at `now`, the time the runner read for every agent of the cycle
    /// ([`crate::driver::clock::DutyClock`]); returns the work done.
    pub fn do_work_at(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let mut received = false;
        while let Ok(command) = self.commands.try_recv() {
            work += 1;
            self.on_command(command, now);
        }
        for endpoint in &mut self.endpoints {
            let arrived = self.batch.receive(&endpoint.socket) > 0;
            if arrived {
                received = true;
                let mut bytes = 0;
                let mut datagrams = 0;
                for (datagram, source) in self.batch.datagrams() {
                    datagrams += 1;
                    bytes += datagram.len();
                    let outcome = endpoint.on_datagram(datagram, source, now, &mut self.scratch, &self.events);
                    self.counters.count(outcome);
                }
                work += datagrams;
                let _ = self.counters.bytes_received.add(bytes as i64);
                let _ = self.counters.datagrams_received.add(datagrams as i64);
            }
            work += endpoint.service_images(now, &mut self.scratch, &self.counters, &self.events);
            if !arrived {
                for entry in &mut endpoint.images {
                    entry.populate.advance(entry.image.log(), entry.image.hwm_position());
                }
            }
        }
        self.endpoints.retain(|e| !e.subscriptions.is_empty() || !e.images.is_empty());
        if received {
            if let Some(wake) = &self.data_wake {
                wake.wake();
            }
        }
        work
    }

    fn on_command(&mut self, command: ReceiverCommand, now: Instant) {
        match command {
            ReceiverCommand::AddEndpoint(new) => {
                let endpoint = ReceiveEndpoint::new(*new);
                // The endpoint's socket is read only through `self.batch`, which cuts runs apart.
                if self.udp_offload {
                    enable_receive_offload(&endpoint.socket);
                }
                self.endpoints.push(endpoint);
            }
            ReceiverCommand::AddSubscription { endpoint, registration_id, stream_id, session_filter } => {
                if let Some(endpoint) = self.endpoints.iter_mut().find(|e| e.address == endpoint) {
                    endpoint.subscriptions.push(SubscriptionEntry { registration_id, stream_id, session_filter });
                }
            }
            ReceiverCommand::RemoveSubscription { registration_id } => {
                for endpoint in &mut self.endpoints {
                    endpoint.subscriptions.retain(|s| s.registration_id != registration_id);
                    for entry in &mut endpoint.images {
                        let before = entry.consumers.len();
                        entry.consumers.retain(|(id, _)| *id != registration_id);
                        if entry.consumers.len() != before && !entry.image.remove_consumer(registration_id as u64) {
                            entry.image.close(now);
                        }
                    }
                }
            }
            ReceiverCommand::AddImage(new) => {
                let NewImage { endpoint, correlation_id, image, source, consumers, counters } = *new;
                let identity = *image.identity();
                let Some(endpoint) = self.endpoints.iter_mut().find(|e| e.address == endpoint) else {
                    let _ = self.events.send(AgentEvent::ImageClosed { correlation_id, incomplete: false });
                    return;
                };
                endpoint.pending_images.remove(&(identity.session_id, identity.stream_id));
                let control = endpoint.control_override.unwrap_or(source);
                let populate = PopulateAhead::new(image.log(), image.rebuild_position());
                endpoint.images.push(ImageEntry {
                    correlation_id,
                    session_id: identity.session_id,
                    stream_id: identity.stream_id,
                    control,
                    source,
                    image,
                    consumers,
                    counters,
                    reported_naks: 0,
                    reported_status_messages: 0,
                    reported_heartbeats: 0,
                    populate,
                });
            }
            ReceiverCommand::ImageRefused { endpoint, session_id, stream_id } => {
                if let Some(endpoint) = self.endpoints.iter_mut().find(|e| e.address == endpoint) {
                    endpoint.pending_images.remove(&(session_id, stream_id));
                }
            }
            ReceiverCommand::Query { registration_id, correlation_id } => {
                let mut images = Vec::new();
                let mut known = false;
                for endpoint in &self.endpoints {
                    known |= endpoint.subscriptions.iter().any(|s| s.registration_id == registration_id);
                    for entry in &endpoint.images {
                        if images.len() < MAX_IMAGES_IN_STATUS
                            && entry.consumers.iter().any(|(id, _)| *id == registration_id)
                        {
                            images.push(endpoint.image_info(entry, registration_id));
                        }
                    }
                }
                let response = if !known {
                    Response::Error {
                        correlation_id,
                        code: error_code::UNKNOWN_SUBSCRIPTION,
                        message: format!("no network subscription {registration_id}"),
                    }
                } else {
                    Response::subscription_status(correlation_id, registration_id, Ok(images))
                };
                let _ = self.events.send(AgentEvent::Respond(response));
            }
            ReceiverCommand::CloseAll => self.close_all(),
        }
    }
}
