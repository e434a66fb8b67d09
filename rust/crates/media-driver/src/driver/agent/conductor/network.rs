//! The conductor's half of `aeron:udp`: channel parsing, sockets, shared logs and counters of
//! network publications and images, handed to the sender and receiver agents by queue; their
//! events (status answers, driver events, finished publications, image requests and ends) come
//! back the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};

use super::{
    confirm_open_log, ipc_channel, log_file_name, log_start, start_on_subscription, DriverConductor, OpenLog,
    SystemCounter,
};
use crate::channel::{ChannelUri, Media, MISSING_ENDPOINT};
use crate::driver::agent::receiver::{ImageDefaults, ReceiverCounters};
use crate::driver::agent::sender::SenderCounters;
use crate::driver::agent::{
    AgentEvent, ImageCounters, ImageRequest, NewEndpoint, NewImage, NewPublication, PublicationStreamCounters,
    ReceiverCommand, SenderCommand,
};
use crate::flow_control::{build_checked, FlowControlSpec};
use crate::logbuffer::StreamIdentity;
use crate::media::udp::{bind_control_listener, bind_receiver, bind_sender, resolve_interface, SocketOptions};
use crate::protocol::defaults as protocol_defaults;
use crate::protocol::{Image, NetworkPublication, PublicationConfig};
use crate::shm::command::{error_code, Response};
use crate::shm::counters::{type_id, Counter};
use crate::shm::log_buffer::{image_log_name, publication_log_name, LogBuffer, LogParams, LogStart, PAGE_MIN_SIZE};
use crate::time::MonotonicClock;

/// Whether `channel` names UDP media (anything else goes the IPC way, which reports bad URIs).
pub(super) fn is_udp(channel: &str) -> bool {
    ChannelUri::parse(channel).is_ok_and(|uri| uri.media == Media::Udp)
}

/// Where a network publication sends from and to: publishers of one route and stream share one
/// publication, as Aeron's share a send channel endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SendRoute {
    destination: SocketAddr,
    /// The local address named by `interface=` (unicast: with its port), if any.
    local: Option<SocketAddr>,
    control: Option<SocketAddr>,
}

struct NetPublication {
    registration_id: i64,
    route: SendRoute,
    /// What its log was opened with (a later publisher's channel must agree).
    open: OpenLog,
    stream_id: i32,
    log_file: String,
    /// The driver's own mapping of the log (the sender has another): keeps its memfd, and so
    /// `log_file`, open until the publication is done.
    _log: LogBuffer,
    publisher_limit: Counter,
    counters: Vec<usize>,
    owners: HashMap<i64, u32>,
    released: bool,
    /// An exclusive publication's log: one writer, never joined by another publication.
    exclusive: bool,
}

struct NetSubscription {
    registration_id: i64,
    client_id: i64,
    endpoint: SocketAddr,
}

struct NetImage {
    correlation_id: i64,
    stream_id: i32,
    /// Keeps the image log's memfd, and so the name its announcements carry, open until the
    /// image is closed (the receiver holds another mapping).
    _log: LogBuffer,
    /// (subscription, position counter id, the correlation id this subscription knows the
    /// image by: one per subscription, as for IPC images, so a client with several
    /// subscriptions of one image tells their announcements apart).
    links: Vec<(i64, usize, i64)>,
    /// Ids of the image's own counters (`rcv-pos`, `rcv-hwm`).
    counters: [usize; 2],
}

/// Conductor state of the network side.
#[derive(Default)]
pub(super) struct Network {
    agents: Option<(Sender<SenderCommand>, Sender<ReceiverCommand>, Receiver<AgentEvent>)>,
    publications: Vec<NetPublication>,
    subscriptions: Vec<NetSubscription>,
    /// Endpoint address → subscriptions on it.
    endpoints: HashMap<SocketAddr, usize>,
    images: Vec<NetImage>,
    clock: MonotonicClock,
    rng: fastrand::Rng,
}

impl Network {
    pub(super) fn with_agents(
        to_sender: Sender<SenderCommand>,
        to_receiver: Sender<ReceiverCommand>,
        events: Receiver<AgentEvent>,
    ) -> Self {
        Network { agents: Some((to_sender, to_receiver, events)), ..Network::default() }
    }

    fn send(&self, command: SenderCommand) {
        if let Some((sender, _, _)) = &self.agents {
            let _ = sender.send(command);
        }
    }

    fn receive(&self, command: ReceiverCommand) {
        if let Some((_, receiver, _)) = &self.agents {
            let _ = receiver.send(command);
        }
    }

    pub(super) fn query_publication(&self, registration_id: i64, correlation_id: i64) {
        self.send(SenderCommand::Query { registration_id, correlation_id });
    }

    pub(super) fn query_subscription(&self, registration_id: i64, correlation_id: i64) {
        self.receive(ReceiverCommand::Query { registration_id, correlation_id });
    }
}

type Refusal = (i32, String);

fn invalid(channel: &str, what: impl std::fmt::Display) -> Refusal {
    (error_code::INVALID_CHANNEL, format!("{channel}: {what}"))
}

/// Parses a UDP channel and refuses what this driver does not do, rather than ignoring it
/// ([`ChannelUri::unsupported_udp`], which clients check too).
fn parse(channel: &str) -> Result<ChannelUri, Refusal> {
    let uri = ChannelUri::parse(channel).map_err(|e| invalid(channel, e))?;
    match uri.unsupported_udp() {
        Some(what) => Err(invalid(channel, what)),
        None => Ok(uri),
    }
}

fn interface_address(uri: &ChannelUri, channel: &str) -> Result<Option<std::net::IpAddr>, Refusal> {
    match &uri.interface {
        None => Ok(None),
        Some(spec) => resolve_interface(spec.address, spec.prefix_length)
            .map(Some)
            .map_err(|e| invalid(channel, format!("interface={spec}: {e}"))),
    }
}

fn endpoint_of(uri: &ChannelUri, channel: &str) -> Result<SocketAddr, Refusal> {
    uri.endpoint.ok_or_else(|| invalid(channel, MISSING_ENDPOINT))
}

fn socket_error(channel: &str, what: String, error: std::io::Error) -> Refusal {
    let code = error.raw_os_error().and_then(|errno| error_code::OS_ERROR.checked_add(errno));
    (code.unwrap_or(error_code::GENERIC_ERROR), format!("{channel}: {what}: {error}"))
}

impl DriverConductor {
    /// The counters the sender agent writes.
    pub fn sender_counters(&self) -> SenderCounters {
        let c = |counter: SystemCounter| self.system(counter).clone();
        SenderCounters {
            bytes_sent: c(SystemCounter::BytesSent),
            send_errors: c(SystemCounter::SendErrors),
            invalid_control_frames: c(SystemCounter::InvalidControlFrames),
            naks_received: c(SystemCounter::NaksReceived),
            retransmits: c(SystemCounter::Retransmits),
            status_messages_received: c(SystemCounter::StatusMessagesReceived),
            heartbeats_sent: c(SystemCounter::HeartbeatsSent),
            datagrams_sent: c(SystemCounter::DatagramsSent),
        }
    }

    /// The counters the receiver agent writes.
    pub fn receiver_counters(&self) -> ReceiverCounters {
        let c = |counter: SystemCounter| self.system(counter).clone();
        ReceiverCounters {
            invalid_data_frames: c(SystemCounter::InvalidDataFrames),
            duplicate_data_frames: c(SystemCounter::DuplicateDataFrames),
            overrun_data_frames: c(SystemCounter::OverrunDataFrames),
            inactive_image_frames: c(SystemCounter::InactiveImageFrames),
            setups_refused: c(SystemCounter::SetupsRefused),
            images_refused: c(SystemCounter::ImagesRefused),
            bytes_received: c(SystemCounter::BytesReceived),
            naks_sent: c(SystemCounter::NaksSent),
            status_messages_sent: c(SystemCounter::StatusMessagesSent),
            datagrams_received: c(SystemCounter::DatagramsReceived),
            heartbeats_received: c(SystemCounter::HeartbeatsReceived),
        }
    }

    pub(super) fn is_network_publication(&self, registration_id: i64) -> bool {
        self.network.publications.iter().any(|p| p.registration_id == registration_id)
    }

    pub(super) fn is_network_subscription(&self, registration_id: i64) -> bool {
        self.network.subscriptions.iter().any(|s| s.registration_id == registration_id)
    }

    /// Whether network publication `registration_id` exists and `client_id` holds it.
    pub(super) fn network_publication_held(&self, registration_id: i64, client_id: i64) -> bool {
        self.network
            .publications
            .iter()
            .any(|p| p.registration_id == registration_id && p.owners.contains_key(&client_id))
    }

    /// Whether network subscription `registration_id` exists and is `client_id`'s.
    pub(super) fn network_subscription_held(&self, registration_id: i64, client_id: i64) -> bool {
        self.network.subscriptions.iter().any(|s| s.registration_id == registration_id && s.client_id == client_id)
    }

    /// Network publication handles `client_id` holds (for its quota).
    pub(super) fn network_publications_of(&self, client_id: i64) -> usize {
        self.network.publications.iter().filter_map(|p| p.owners.get(&client_id)).map(|&n| n as usize).sum()
    }

    /// Network subscriptions of `client_id` (for its quota).
    pub(super) fn network_subscriptions_of(&self, client_id: i64) -> usize {
        self.network.subscriptions.iter().filter(|s| s.client_id == client_id).count()
    }

    fn require_agents(&self, channel: &str) -> Result<(), Refusal> {
        if self.network.agents.is_none() {
            return Err((error_code::INVALID_CHANNEL, ipc_channel(channel).err().unwrap_or_default()));
        }
        Ok(())
    }

    fn allocate(
        &mut self,
        kind: i32,
        key: &[u8],
        label: String,
        (registration_id, client_id): (i64, i64),
        now_ms: i64,
        allocated: &mut Vec<usize>,
    ) -> Result<Counter, Refusal> {
        match self.counters.allocate(kind, key, &label, registration_id, client_id, now_ms) {
            Ok(counter) => {
                allocated.push(counter.id());
                Ok(counter)
            }
            Err(e) => {
                for id in allocated.drain(..) {
                    let _ = self.counters.free(id, now_ms);
                }
                Err((error_code::STORAGE_SPACE, e.to_string()))
            }
        }
    }

    pub(super) fn add_network_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        exclusive: bool,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        self.require_agents(channel)?;
        let uri = parse(channel)?;
        let is_multicast = uri.is_multicast();
        let destination = endpoint_of(&uri, channel)?;
        let interface = interface_address(&uri, channel)?;
        let local = uri
            .interface
            .as_ref()
            .zip(interface)
            .map(|(spec, address)| SocketAddr::new(address, if is_multicast { 0 } else { spec.port.unwrap_or(0) }));
        let route = SendRoute { destination, local, control: uri.control_address() };
        // Publishers of one route and stream share one log (Aeron's non-exclusive publications),
        // whatever else their channels say; a setting that log cannot honour is refused. An
        // exclusive publication gets a log of its own, which no publication joins.
        let joined = (!exclusive)
            .then(|| {
                self.network
                    .publications
                    .iter_mut()
                    .find(|p| p.route == route && p.stream_id == stream_id && !p.exclusive && !p.released)
            })
            .flatten();
        if let Some(publication) = joined {
            let shared = format!("the aeron:udp publication already open to {destination} on stream {stream_id}");
            confirm_open_log(&uri, channel, &shared, &publication.open)
                .map_err(|m| (error_code::INVALID_CHANNEL, m))?;
            *publication.owners.entry(client_id).or_insert(0) += 1;
            let response = Response::PublicationReady {
                correlation_id,
                registration_id: publication.registration_id,
                session_id: publication.open.session_id,
                stream_id,
                publisher_limit_counter_id: publication.publisher_limit.id() as i32,
                log_file: publication.log_file.clone(),
            };
            self.respond(response, now_ms);
            return Ok(());
        }
        let context = self.config.clone();
        let spec = match &uri.flow_control {
            Some(value) => Some(FlowControlSpec::parse(value).map_err(|e| invalid(channel, e))?),
            None => None,
        };
        let flow_control =
            build_checked(spec.as_ref(), is_multicast, &context.flow_control).map_err(|e| invalid(channel, e))?;
        let term_length = uri.term_length.unwrap_or(context.term_length);
        let mtu = uri.mtu.unwrap_or(context.mtu);
        let session_id = match uri.session_id {
            Some(id) => id,
            None => loop {
                let id = self.network.rng.i32(..);
                if !(-1..=1000).contains(&id) {
                    break id;
                }
            },
        };
        // init-term-id|term-id|term-offset: the log, its counters and the SETUP start there
        // (Aeron's publication params); checked against the term length this log really gets.
        let initial_term_id = match uri.initial_position {
            Some(start) => start.initial_term_id,
            None => self.network.rng.i32(..),
        };
        let initial_position = uri.start_position(channel, term_length).map_err(|e| invalid(channel, e))?;
        let params = LogParams {
            term_length,
            mtu,
            page_size: PAGE_MIN_SIZE,
            initial_term_id,
            session_id,
            stream_id,
            correlation_id,
        };
        params.validate().map_err(|m| invalid(channel, m))?;
        let start = log_start(&uri, &params);
        let options = SocketOptions {
            receive_buffer: Some(uri.so_rcvbuf.unwrap_or(context.socket_receive_buffer)),
            send_buffer: uri.so_sndbuf.or(context.socket_send_buffer),
            multicast_ttl: uri.ttl.map(u32::from),
            interface,
        };
        let socket = bind_sender(destination, local, &options)
            .map_err(|e| socket_error(channel, format!("cannot open sending socket for {destination}"), e))?;
        let _ = socket.set_nonblocking(true);
        let control_socket = match (is_multicast, uri.control_address()) {
            (true, Some(control)) => {
                let socket = bind_control_listener(control, &options)
                    .map_err(|e| socket_error(channel, format!("cannot listen on control group {control}"), e))?;
                let _ = socket.set_nonblocking(true);
                Some(socket)
            }
            _ => None,
        };
        let log = LogBuffer::create_sealed(&publication_log_name(correlation_id), &params, start)
            .map_err(|e| (error_code::STORAGE_SPACE, e.to_string()))?;
        let log_file = log_file_name(&log);
        let key = [session_id.to_le_bytes(), stream_id.to_le_bytes()].concat();
        let label = format!("{session_id} {stream_id} {channel}");
        let mut allocated = Vec::new();
        let counters = (|| {
            let mut counter = |kind: i32, name: &str| {
                self.allocate(
                    kind,
                    &key,
                    format!("{name}: {label}"),
                    (correlation_id, client_id),
                    now_ms,
                    &mut allocated,
                )
            };
            Ok::<_, Refusal>(PublicationStreamCounters {
                publisher_limit: counter(type_id::PUBLISHER_LIMIT, "pub-lmt")?,
                sender_position: counter(type_id::SENDER_POSITION, "snd-pos")?,
                publisher_position: counter(type_id::PUBLISHER_POSITION, "pub-pos")?,
                sender_limit: counter(type_id::SENDER_LIMIT, "snd-lmt")?,
                flow_control_receivers: counter(type_id::FLOW_CONTROL_RECEIVERS, "fc-receivers")?,
            })
        })();
        // A refusal drops `log`, and so its memfd: nothing to remove.
        let stream_counters = counters?;
        // Until the sender's first duty cycle: clients see the start, not 0.
        for counter in [
            &stream_counters.publisher_limit,
            &stream_counters.sender_position,
            &stream_counters.publisher_position,
            &stream_counters.sender_limit,
        ] {
            let _ = counter.set(initial_position);
        }
        let publisher_limit = stream_counters.publisher_limit.clone();
        let identity = StreamIdentity { session_id, stream_id, initial_term_id, term_length };
        let config = PublicationConfig {
            identity,
            initial_position,
            mtu,
            publication_window: uri.publication_window.unwrap_or(term_length / 2).min(term_length / 2),
            ttl: uri.ttl.unwrap_or(0),
            is_group: is_multicast,
            linger: uri.linger.unwrap_or(self.config.publication_linger),
            connection_timeout: context.publication_connection_timeout,
            retransmit_delay: context.retransmit_delay,
            retransmit_linger: context.retransmit_linger,
            max_resend: uri.max_resend_or_default() as usize,
            signal_eos: uri.eos.unwrap_or(true),
            unblock_timeout: Some(context.publication_unblock_timeout()),
        };
        let kept = log.clone();
        let publication = NetworkPublication::with_log(config, log, flow_control, self.network.clock.now());
        self.network.send(SenderCommand::Add(Box::new(NewPublication {
            registration_id: correlation_id,
            channel: channel.to_owned(),
            publication,
            socket,
            destination,
            control_socket,
            counters: stream_counters,
        })));
        self.network.publications.push(NetPublication {
            registration_id: correlation_id,
            route,
            open: OpenLog { term_length, mtu, initial_term_id, start_position: initial_position, session_id },
            stream_id,
            log_file: log_file.clone(),
            _log: kept,
            publisher_limit: publisher_limit.clone(),
            counters: allocated,
            owners: HashMap::from([(client_id, 1)]),
            released: false,
            exclusive,
        });
        let _ = self.system(SystemCounter::NetworkPublications).add(1);
        self.respond(
            Response::PublicationReady {
                correlation_id,
                registration_id: correlation_id,
                session_id,
                stream_id,
                publisher_limit_counter_id: publisher_limit.id() as i32,
                log_file,
            },
            now_ms,
        );
        Ok(())
    }

    pub(super) fn remove_network_publication(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        now_ms: i64,
    ) {
        let found = self
            .network
            .publications
            .iter_mut()
            .find(|p| p.registration_id == registration_id && p.owners.contains_key(&client_id) && !p.released);
        let Some(publication) = found else {
            self.refuse(
                correlation_id,
                error_code::UNKNOWN_PUBLICATION,
                format!("client {client_id} holds no publication {registration_id}"),
                now_ms,
            );
            return;
        };
        if let Some(count) = publication.owners.get_mut(&client_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                publication.owners.remove(&client_id);
            }
        }
        if publication.owners.is_empty() {
            publication.released = true;
            self.network.send(SenderCommand::Close { registration_id });
        }
        self.respond(Response::OperationSuccess { correlation_id }, now_ms);
    }

    pub(super) fn add_network_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        stream_id: i32,
        channel: &str,
        _now_ms: i64,
    ) -> Result<(), Refusal> {
        self.require_agents(channel)?;
        let uri = parse(channel)?;
        start_on_subscription(&uri, channel).map_err(|m| (error_code::INVALID_CHANNEL, m))?;
        let context = self.config.clone();
        let endpoint = endpoint_of(&uri, channel)?;
        if !self.network.endpoints.contains_key(&endpoint) {
            let receive_buffer = uri.so_rcvbuf.unwrap_or(context.socket_receive_buffer);
            let mut defaults = ImageDefaults {
                receiver_window: uri.rcv_wnd.unwrap_or(context.receiver_window),
                status_interval: context.status_message_interval,
                nak_delay: uri.nak_delay.unwrap_or(context.nak_unicast_delay),
                multicast_nak_backoff: context.nak_multicast_max_backoff,
                liveness_timeout: context.image_liveness_timeout,
                group_tag: uri.group_tag,
                is_group: uri.group.unwrap_or(uri.is_multicast()),
                socket_receive_buffer: receive_buffer,
                reliable: uri.reliable.unwrap_or(true),
                max_images_per_subscription: context.max_images_per_subscription,
            };
            let options = SocketOptions {
                receive_buffer: Some(receive_buffer),
                send_buffer: uri.so_sndbuf.or(context.socket_send_buffer),
                multicast_ttl: uri.ttl.map(u32::from),
                interface: interface_address(&uri, channel)?,
            };
            let socket = bind_receiver(endpoint, &options)
                .map_err(|e| socket_error(channel, format!("cannot bind receiving socket {endpoint}"), e))?;
            if uri.rcv_wnd.is_none() && context.receiver_window == protocol_defaults::RECEIVER_WINDOW {
                // The default window must fit the buffer the OS granted (Linux reports twice
                // what it granted, its bookkeeping included); a window set by hand is as given.
                let granted = socket2::SockRef::from(&socket).recv_buffer_size().map_or(receive_buffer, |b| b / 2);
                defaults.receiver_window = protocol_defaults::default_receiver_window(granted);
            }
            let control_override = if uri.is_multicast() { uri.control_address() } else { None };
            let receiver_id = self.network.rng.i64(..);
            self.network.receive(ReceiverCommand::AddEndpoint(Box::new(NewEndpoint {
                socket,
                address: endpoint,
                control_override,
                receiver_id,
                defaults,
            })));
        }
        *self.network.endpoints.entry(endpoint).or_insert(0) += 1;
        self.network.receive(ReceiverCommand::AddSubscription {
            endpoint,
            registration_id: correlation_id,
            stream_id,
            session_filter: uri.session_id,
        });
        self.network.subscriptions.push(NetSubscription { registration_id: correlation_id, client_id, endpoint });
        let _ = self.system(SystemCounter::Subscriptions).add(1);
        self.respond(Response::SubscriptionReady { correlation_id }, _now_ms);
        Ok(())
    }

    pub(super) fn remove_network_subscription(
        &mut self,
        client_id: i64,
        correlation_id: i64,
        registration_id: i64,
        now_ms: i64,
    ) {
        if !self.network.subscriptions.iter().any(|s| s.registration_id == registration_id && s.client_id == client_id)
        {
            self.refuse(
                correlation_id,
                error_code::UNKNOWN_SUBSCRIPTION,
                format!("client {client_id} holds no subscription {registration_id}"),
                now_ms,
            );
            return;
        }
        self.drop_network_subscription(registration_id, now_ms);
        self.respond(Response::OperationSuccess { correlation_id }, now_ms);
    }

    fn drop_network_subscription(&mut self, registration_id: i64, now_ms: i64) {
        let Some(index) = self.network.subscriptions.iter().position(|s| s.registration_id == registration_id) else {
            return;
        };
        let subscription = self.network.subscriptions.swap_remove(index);
        if let Some(count) = self.network.endpoints.get_mut(&subscription.endpoint) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.network.endpoints.remove(&subscription.endpoint);
            }
        }
        self.network.receive(ReceiverCommand::RemoveSubscription { registration_id });
        let mut freed = Vec::new();
        for image in &mut self.network.images {
            image.links.retain(|(subscription, counter, _)| {
                let keep = *subscription != registration_id;
                if !keep {
                    freed.push(*counter);
                }
                keep
            });
        }
        for id in freed {
            let _ = self.counters.free(id, now_ms);
        }
        let _ = self.system(SystemCounter::Subscriptions).add(-1);
    }

    /// A client went away: its network subscriptions go now, its publications linger.
    pub(super) fn remove_network_client(&mut self, client_id: i64, now_ms: i64) {
        let subscriptions: Vec<i64> =
            self.network.subscriptions.iter().filter(|s| s.client_id == client_id).map(|s| s.registration_id).collect();
        for registration_id in subscriptions {
            self.drop_network_subscription(registration_id, now_ms);
        }
        let mut closing = Vec::new();
        for publication in &mut self.network.publications {
            if publication.owners.remove(&client_id).is_some() && publication.owners.is_empty() && !publication.released
            {
                publication.released = true;
                closing.push(publication.registration_id);
            }
        }
        for registration_id in closing {
            self.network.send(SenderCommand::Close { registration_id });
        }
    }

    /// Handles what the sender and receiver reported; returns how many events.
    pub(super) fn on_agent_events(&mut self, now_ms: i64) -> usize {
        let mut events = Vec::new();
        if let Some((_, _, receiver)) = &self.network.agents {
            while let Ok(event) = receiver.try_recv() {
                events.push(event);
                if events.len() >= 1024 {
                    break;
                }
            }
        }
        let work = events.len();
        for event in events {
            match event {
                AgentEvent::Respond(response) => {
                    let is_event = matches!(response, Response::DriverEvent { .. });
                    let (msg_type_id, bytes) = response.encode();
                    if let Err(e) = self.transmitter.transmit(msg_type_id, &bytes) {
                        if is_event {
                            self.bump(SystemCounter::DroppedEvents);
                        } else {
                            self.error(&format!("to-clients broadcast: {e}"), now_ms);
                        }
                    }
                }
                AgentEvent::PublicationDone { registration_id } => self.publication_done(registration_id, now_ms),
                AgentEvent::CreateImage(request) => self.create_image(*request, now_ms),
                AgentEvent::ImageClosed { correlation_id, incomplete } => {
                    self.image_closed(correlation_id, incomplete, now_ms)
                }
                AgentEvent::Error(message) => self.error(&message, now_ms),
                AgentEvent::ClaimUnblocked(message) => self.claim_unblocked(&message, now_ms),
                AgentEvent::SetConnected { log, connected } => {
                    let _ = log.set_connected(connected);
                }
            }
        }
        work
    }

    fn publication_done(&mut self, registration_id: i64, now_ms: i64) {
        let Some(index) = self.network.publications.iter().position(|p| p.registration_id == registration_id) else {
            return;
        };
        let publication = self.network.publications.swap_remove(index);
        for id in &publication.counters {
            let _ = self.counters.free(*id, now_ms);
        }
        // Dropping `publication` closes the driver's last mapping of the log (the sender's went
        // first), and so its memfd: nothing to remove.
        let _ = self.system(SystemCounter::NetworkPublications).add(-1);
    }

    fn create_image(&mut self, request: ImageRequest, now_ms: i64) {
        let ImageRequest { endpoint, config, mtu, source, subscriptions } = request;
        let identity = config.identity;
        let refuse = |driver: &mut DriverConductor, why: String| {
            driver.error(&why, now_ms);
            driver.network.receive(ReceiverCommand::ImageRefused {
                endpoint,
                session_id: identity.session_id,
                stream_id: identity.stream_id,
            });
        };
        let subscriptions: Vec<(i64, i64)> = subscriptions
            .into_iter()
            .filter_map(|id| {
                self.network.subscriptions.iter().find(|s| s.registration_id == id).map(|s| (id, s.client_id))
            })
            .collect();
        if subscriptions.is_empty() {
            refuse(self, format!("image of session {} from {source}: its subscriptions are gone", identity.session_id));
            return;
        }
        let correlation_id = match self.ring.next_correlation_id() {
            Ok(id) => id,
            Err(e) => return refuse(self, format!("correlation id: {e}")),
        };
        let params = LogParams {
            term_length: identity.term_length,
            mtu,
            page_size: PAGE_MIN_SIZE,
            initial_term_id: identity.initial_term_id,
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            correlation_id,
        };
        let log = match LogBuffer::create_sealed(&image_log_name(correlation_id), &params, LogStart::of(&params)) {
            Ok(log) => log,
            Err(e) => return refuse(self, format!("image of session {} from {source}: {e}", identity.session_id)),
        };
        let log_file = log_file_name(&log);
        let join = config.join_position;
        let key = [identity.session_id.to_le_bytes(), identity.stream_id.to_le_bytes()].concat();
        let stream_label = format!("{correlation_id} {} {} {source}", identity.session_id, identity.stream_id);
        let mut image_counter_ids = Vec::new();
        let image_counters = (|| {
            let mut counter = |kind: i32, name: &str| {
                let label = format!("{name}: {stream_label}");
                self.allocate(kind, &key, label, (correlation_id, 0), now_ms, &mut image_counter_ids)
            };
            Ok::<_, Refusal>(ImageCounters {
                receiver_position: counter(type_id::RECEIVER_POSITION, "rcv-pos")?,
                receiver_hwm: counter(type_id::RECEIVER_HWM, "rcv-hwm")?,
            })
        })();
        let image_counters = match image_counters {
            Ok(counters) => counters,
            Err((_, why)) => {
                return refuse(self, format!("image of session {} from {source}: {why}", identity.session_id));
            }
        };
        for counter in [&image_counters.receiver_position, &image_counters.receiver_hwm] {
            let _ = counter.set(join);
        }
        let mut consumers = Vec::new();
        let mut links = Vec::new();
        let kept = log.clone();
        let mut image = Image::with_log(config, log, self.network.clock.now());
        for (subscription_id, client_id) in subscriptions {
            let label =
                format!("sub-pos: {subscription_id} {} {} {source} @{join}", identity.session_id, identity.stream_id);
            match self.counters.allocate(type_id::SUBSCRIBER_POSITION, &key, &label, subscription_id, client_id, now_ms)
            {
                Ok(counter) => {
                    let link_id = match self.ring.next_correlation_id() {
                        Ok(id) => id,
                        Err(e) => {
                            self.error(&format!("correlation id: {e}"), now_ms);
                            let _ = self.counters.free(counter.id(), now_ms);
                            continue;
                        }
                    };
                    let _ = counter.set(join);
                    image.add_consumer(subscription_id as u64);
                    links.push((subscription_id, counter.id(), link_id));
                    consumers.push((subscription_id, counter));
                }
                Err(e) => self.error(&format!("subscription {subscription_id}: {e}"), now_ms),
            }
        }
        if consumers.is_empty() {
            for id in image_counter_ids {
                let _ = self.counters.free(id, now_ms);
            }
            return refuse(self, format!("image of session {}: no counter for any subscriber", identity.session_id));
        }
        for ((subscription_id, counter), (_, _, link_id)) in consumers.iter().zip(&links) {
            self.respond(
                Response::AvailableImage {
                    correlation_id: *link_id,
                    subscription_registration_id: *subscription_id,
                    session_id: identity.session_id,
                    stream_id: identity.stream_id,
                    subscriber_position_counter_id: counter.id() as i32,
                    log_file: log_file.clone(),
                    source_identity: source.to_string(),
                },
                now_ms,
            );
        }
        let counters = [image_counters.receiver_position.id(), image_counters.receiver_hwm.id()];
        self.network.images.push(NetImage {
            correlation_id,
            stream_id: identity.stream_id,
            _log: kept,
            links,
            counters,
        });
        let _ = self.system(SystemCounter::Images).add(1);
        self.network.receive(ReceiverCommand::AddImage(Box::new(NewImage {
            endpoint,
            correlation_id,
            image,
            source,
            consumers,
            counters: image_counters,
        })));
    }

    fn image_closed(&mut self, correlation_id: i64, incomplete: bool, now_ms: i64) {
        if incomplete {
            self.bump(SystemCounter::ImagesEndedIncomplete);
        }
        let Some(index) = self.network.images.iter().position(|i| i.correlation_id == correlation_id) else {
            return;
        };
        let image = self.network.images.swap_remove(index);
        for (subscription_id, counter, link_id) in &image.links {
            self.respond(
                Response::UnavailableImage {
                    correlation_id: *link_id,
                    subscription_registration_id: *subscription_id,
                    stream_id: image.stream_id,
                },
                now_ms,
            );
            let _ = self.counters.free(*counter, now_ms);
        }
        for id in image.counters {
            let _ = self.counters.free(id, now_ms);
        }
        // Subscribers keep their mapping until they have read to the end of stream; dropping
        // `image` closes the driver's memfd of the log: nothing to remove.
        let _ = self.system(SystemCounter::Images).add(-1);
    }
}
