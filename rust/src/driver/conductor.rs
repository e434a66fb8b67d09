//! The conductor agent: turns client commands into publications, subscriptions and endpoints.

use std::net::SocketAddr;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use super::context::DriverContext;
use super::ipc::IpcAgent;
use super::receiver::{ImageDefaults, ReceiveEndpoint, ReceiverAgent};
use super::reply::Reply;
use super::sender::{SendEndpoint, SenderAgent};
use crate::channel::{ChannelUri, CongestionControl, Media};
use crate::client::{PublicationShared, SubscriptionShared};
use crate::error::{Error, Result};
use crate::flow_control::{build_checked, FlowControlSpec};
use crate::logbuffer::StreamIdentity;
use crate::media::udp::{bind_control_listener, bind_receiver, bind_sender, resolve_interface, SocketOptions};
use crate::protocol::{NetworkPublication, PublicationConfig};
use crate::time::Instant;

/// A request from a client to the driver.
pub enum DriverCommand {
    /// Create a publication.
    AddPublication {
        /// Channel URI.
        channel: String,
        /// Stream id.
        stream_id: i32,
        /// Where the answer goes.
        reply: Reply<Arc<PublicationShared>>,
    },
    /// Create a subscription.
    AddSubscription {
        /// Channel URI.
        channel: String,
        /// Stream id.
        stream_id: i32,
        /// Where the answer goes.
        reply: Reply<Arc<SubscriptionShared>>,
    },
    /// Close a subscription.
    RemoveSubscription {
        /// The subscription's id.
        id: u64,
    },
}

/// Session ids and receiver ids: random, so two drivers (or two runs) differ (not for security).
#[derive(Debug)]
pub struct IdGenerator(fastrand::Rng);

impl IdGenerator {
    /// Seeded from the operating system's entropy (through `fastrand`).
    pub fn from_entropy() -> Self {
        IdGenerator(fastrand::Rng::new())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// A session id outside Aeron's reserved range [-1, 1000].
    pub fn session_id(&mut self) -> i32 {
        loop {
            let id = self.0.i32(..);
            if !(-1..=1000).contains(&id) {
                return id;
            }
        }
    }
}

/// The conductor agent.
pub struct Conductor {
    context: DriverContext,
    commands: Receiver<DriverCommand>,
    ids: IdGenerator,
    next_registration: u64,
}

fn config_error(message: String) -> Error {
    Error::Config(message)
}

/// The local address `interface=` selects (a CIDR prefix picks the matching local interface).
fn interface_address(uri: &ChannelUri, channel: &str) -> Result<Option<std::net::IpAddr>> {
    match &uri.interface {
        None => Ok(None),
        Some(spec) => resolve_interface(spec.address, spec.prefix_length)
            .map(Some)
            .map_err(|e| config_error(format!("{channel}: interface={spec}: {e}"))),
    }
}

impl Conductor {
    /// A conductor reading `commands`.
    pub fn new(context: DriverContext, commands: Receiver<DriverCommand>) -> Self {
        Conductor { context, commands, ids: IdGenerator::from_entropy(), next_registration: 1 }
    }

    /// Handles pending commands; returns how many.
    ///
    /// A resource is installed (handed to the sender, receiver or IPC agent) only once its
    /// client has taken the answer; when the client gave up first, the prepared resource is
    /// dropped here, which closes its sockets: nothing is left behind.
    pub fn do_work(
        &mut self,
        now: Instant,
        sender: &mut SenderAgent,
        receiver: &mut ReceiverAgent,
        ipc: &mut IpcAgent,
    ) -> usize {
        let mut work = 0;
        while let Ok(command) = self.commands.try_recv() {
            work += 1;
            match command {
                DriverCommand::AddPublication { channel, stream_id, reply } => {
                    match self.add_publication(&channel, stream_id, now) {
                        Ok(prepared) => {
                            if reply.answer(Ok(prepared.shared().clone())).is_ok() {
                                prepared.install(sender, ipc, now);
                            }
                        }
                        // Nothing was created: whether the client still waits does not matter.
                        Err(error) => drop(reply.answer(Err(error))),
                    }
                }
                DriverCommand::AddSubscription { channel, stream_id, reply } => {
                    match self.add_subscription(&channel, stream_id, receiver) {
                        Ok(prepared) => {
                            if reply.answer(Ok(prepared.shared.clone())).is_ok() {
                                prepared.install(receiver, ipc, now);
                            }
                        }
                        Err(error) => drop(reply.answer(Err(error))),
                    }
                }
                DriverCommand::RemoveSubscription { id } => {
                    receiver.remove_subscription(id, now);
                    ipc.remove_subscription(id, now);
                }
            }
        }
        work
    }

    /// Parses `channel` and refuses what it asks for that this driver does not do, rather than
    /// ignoring it silently.
    fn parse(&self, channel: &str) -> Result<ChannelUri> {
        let uri = ChannelUri::parse(channel).map_err(|e| config_error(e.to_string()))?;
        let unsupported = |what: &str| Err(config_error(format!("{channel}: {what} is not supported by this driver")));
        if uri.spy {
            return unsupported("aeron-spy: (spy subscriptions)");
        }
        if uri.control.is_some() || uri.control_mode.is_some() {
            return unsupported("control / control-mode (multi-destination and response channels)");
        }
        if uri.tags.is_some() {
            return unsupported("tags (shared channel endpoints)");
        }
        if uri.congestion_control == Some(CongestionControl::Cubic) {
            return unsupported("cc=cubic (the receiver window is static)");
        }
        if uri.tether == Some(false) || uri.rejoin == Some(false) || uri.spies_simulate_connection == Some(true) {
            return unsupported("tether=false, rejoin=false or ssc=true");
        }
        Ok(uri)
    }

    fn udp_endpoint(uri: &ChannelUri, channel: &str) -> Result<SocketAddr> {
        uri.endpoint.ok_or_else(|| config_error(format!("{channel}: endpoint is required (endpoint=host:port)")))
    }

    fn add_publication(&mut self, channel: &str, stream_id: i32, now: Instant) -> Result<PreparedPublication> {
        let uri = self.parse(channel)?;
        let is_ipc = uri.media == Media::Ipc;
        let spec = match (&uri.flow_control, is_ipc) {
            (Some(value), _) => {
                Some(FlowControlSpec::parse(value).map_err(|e| config_error(format!("{channel}: {e}")))?)
            }
            // IPC subscribers are tethered: the slowest one paces the publisher.
            (None, true) => Some(FlowControlSpec::parse("min").map_err(|e| Error::Driver(e.to_string()))?),
            (None, false) => None,
        };
        let is_multicast = uri.is_multicast();
        let flow_control = build_checked(spec.as_ref(), is_multicast, &self.context.flow_control)
            .map_err(|e| config_error(format!("{channel}: {e}")))?;
        let term_length =
            uri.term_length.unwrap_or(if is_ipc { uri.term_length_or_default() } else { self.context.term_length });
        let mtu = uri.mtu.unwrap_or(self.context.mtu);
        let session_id = uri.session_id.unwrap_or_else(|| self.ids.session_id());
        let (initial_term_id, initial_position) = match uri.initial_position {
            Some(start) => {
                let identity =
                    StreamIdentity { session_id, stream_id, initial_term_id: start.initial_term_id, term_length };
                (start.initial_term_id, identity.position(start.term_id, start.term_offset))
            }
            None => (self.ids.next_u64() as i32, 0),
        };
        let identity = StreamIdentity { session_id, stream_id, initial_term_id, term_length };
        let config = PublicationConfig {
            identity,
            initial_position,
            mtu,
            publication_window: uri.publication_window.unwrap_or(term_length / 2),
            ttl: uri.ttl.unwrap_or(0),
            is_group: is_multicast,
            linger: uri.linger_or_default(),
            connection_timeout: self.context.publication_connection_timeout,
            retransmit_delay: self.context.retransmit_delay,
            retransmit_linger: self.context.retransmit_linger,
            max_resend: uri.max_resend_or_default() as usize,
            signal_eos: uri.eos.unwrap_or(true),
        };
        let publication = NetworkPublication::new(config, flow_control, now);
        let id = self.next_registration;
        self.next_registration += 1;
        let shared = Arc::new(PublicationShared::new(id, channel.to_owned(), publication));
        if is_ipc {
            return Ok(PreparedPublication::Ipc(shared));
        }
        let endpoint = Self::udp_endpoint(&uri, channel)?;
        let interface = interface_address(&uri, channel)?;
        let options = SocketOptions {
            receive_buffer: Some(uri.so_rcvbuf.unwrap_or(self.context.socket_receive_buffer)),
            send_buffer: uri.so_sndbuf.or(self.context.socket_send_buffer),
            multicast_ttl: uri.ttl.map(u32::from),
            interface,
        };
        let local = uri
            .interface
            .as_ref()
            .zip(interface)
            .map(|(spec, address)| SocketAddr::new(address, if is_multicast { 0 } else { spec.port.unwrap_or(0) }));
        let socket = bind_sender(endpoint, local, &options).map_err(|source| Error::Socket {
            context: format!("{channel}: cannot open sending socket for {endpoint}"),
            source,
        })?;
        let control_socket = match (is_multicast, uri.control_address()) {
            (true, Some(control)) => Some(bind_control_listener(control, &options).map_err(|source| {
                Error::Socket { context: format!("{channel}: cannot listen on control group {control}"), source }
            })?),
            _ => None,
        };
        Ok(PreparedPublication::Udp(SendEndpoint {
            publication: shared,
            socket,
            destination: endpoint,
            control_socket,
            last_idle: now,
        }))
    }

    fn add_subscription(
        &mut self,
        channel: &str,
        stream_id: i32,
        receiver: &mut ReceiverAgent,
    ) -> Result<PreparedSubscription> {
        let uri = self.parse(channel)?;
        let id = self.next_registration;
        self.next_registration += 1;
        let shared = Arc::new(SubscriptionShared::new(id, channel.to_owned(), stream_id));
        let receive_buffer = uri.so_rcvbuf.unwrap_or(self.context.socket_receive_buffer);
        let defaults = ImageDefaults {
            receiver_window: uri.rcv_wnd.unwrap_or(self.context.receiver_window),
            status_interval: self.context.status_message_interval,
            nak_delay: uri.nak_delay.unwrap_or(self.context.nak_unicast_delay),
            multicast_nak_backoff: self.context.nak_multicast_max_backoff,
            liveness_timeout: self.context.image_liveness_timeout,
            group_tag: uri.group_tag,
            is_group: uri.group.unwrap_or(uri.is_multicast()),
            socket_receive_buffer: receive_buffer,
            reliable: uri.reliable.unwrap_or(true),
            max_images_per_subscription: self.context.max_images_per_subscription,
        };
        let session_filter = uri.session_id;
        let prepared = |target| PreparedSubscription { shared: shared.clone(), stream_id, session_filter, target };
        if uri.media == Media::Ipc {
            let receiver_id = self.ids.next_u64() as i64;
            return Ok(prepared(SubscriptionTarget::Ipc { receiver_id, defaults }));
        }
        let endpoint = Self::udp_endpoint(&uri, channel)?;
        if receiver.endpoint_mut(endpoint).is_some() {
            return Ok(prepared(SubscriptionTarget::Existing(endpoint)));
        }
        let options = SocketOptions {
            receive_buffer: Some(receive_buffer),
            send_buffer: uri.so_sndbuf.or(self.context.socket_send_buffer),
            multicast_ttl: uri.ttl.map(u32::from),
            interface: interface_address(&uri, channel)?,
        };
        let socket = bind_receiver(endpoint, &options).map_err(|source| Error::Socket {
            context: format!("{channel}: cannot bind receiving socket {endpoint}"),
            source,
        })?;
        let control = if uri.is_multicast() { uri.control_address() } else { None };
        let endpoint_state = ReceiveEndpoint::new(socket, endpoint, control, self.ids.next_u64() as i64, defaults);
        Ok(prepared(SubscriptionTarget::New(Box::new(endpoint_state))))
    }
}

/// A publication created (sockets bound) but not yet served: installed once the client took it.
enum PreparedPublication {
    Ipc(Arc<PublicationShared>),
    Udp(SendEndpoint),
}

impl PreparedPublication {
    fn shared(&self) -> &Arc<PublicationShared> {
        match self {
            PreparedPublication::Ipc(shared) => shared,
            PreparedPublication::Udp(endpoint) => &endpoint.publication,
        }
    }

    fn install(self, sender: &mut SenderAgent, ipc: &mut IpcAgent, now: Instant) {
        match self {
            PreparedPublication::Ipc(shared) => ipc.add_publication(shared, now),
            PreparedPublication::Udp(endpoint) => sender.add(endpoint),
        }
    }
}

/// Where a prepared subscription goes.
enum SubscriptionTarget {
    Ipc {
        receiver_id: i64,
        defaults: ImageDefaults,
    },
    /// An endpoint the receiver already serves.
    Existing(SocketAddr),
    /// A newly bound endpoint.
    New(Box<ReceiveEndpoint>),
}

/// A subscription created (socket bound if new) but not yet installed.
struct PreparedSubscription {
    shared: Arc<SubscriptionShared>,
    stream_id: i32,
    session_filter: Option<i32>,
    target: SubscriptionTarget,
}

impl PreparedSubscription {
    fn install(self, receiver: &mut ReceiverAgent, ipc: &mut IpcAgent, now: Instant) {
        let PreparedSubscription { shared, stream_id, session_filter, target } = self;
        match target {
            SubscriptionTarget::Ipc { receiver_id, defaults } => {
                ipc.add_subscription(stream_id, session_filter, receiver_id, shared, defaults, now)
            }
            SubscriptionTarget::Existing(address) => {
                if let Some(existing) = receiver.endpoint_mut(address) {
                    existing.add_subscription(stream_id, session_filter, shared);
                }
            }
            SubscriptionTarget::New(mut endpoint) => {
                endpoint.add_subscription(stream_id, session_filter, shared);
                receiver.add(*endpoint);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::sync::{mpsc, Mutex};

    use super::*;
    use crate::driver::events::EventLog;
    use crate::driver::reply::ReplySlot;

    struct Agents {
        conductor: Conductor,
        commands: mpsc::Sender<DriverCommand>,
        sender: SenderAgent,
        receiver: ReceiverAgent,
        ipc: IpcAgent,
    }

    impl Agents {
        fn new() -> Self {
            let (commands, queue) = mpsc::channel();
            Agents {
                conductor: Conductor::new(DriverContext::default(), queue),
                commands,
                sender: SenderAgent::with_event_log(4, Arc::new(Mutex::new(EventLog::default()))),
                receiver: ReceiverAgent::new(4),
                ipc: IpcAgent::new(4),
            }
        }

        fn run(&mut self) {
            self.conductor.do_work(Instant::ZERO, &mut self.sender, &mut self.receiver, &mut self.ipc);
        }

        fn subscribe(&mut self, channel: &str, abandon: bool) -> Reply<Arc<SubscriptionShared>> {
            let reply = ReplySlot::new();
            let command =
                DriverCommand::AddSubscription { channel: channel.to_owned(), stream_id: 1, reply: reply.clone() };
            self.commands.send(command).unwrap();
            if abandon {
                assert!(reply.abandon().unwrap().is_none());
            }
            self.run();
            reply
        }
    }

    fn free_port() -> u16 {
        UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn abandoned_subscription_leaves_no_socket_behind() {
        let mut agents = Agents::new();
        let port = free_port();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
        let reply = agents.subscribe(&channel, true);
        assert!(reply.try_take().unwrap().is_none());
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_ok(), "the abandoned subscription kept its socket");
        assert!(agents.receiver.endpoint_mut(format!("127.0.0.1:{port}").parse().unwrap()).is_none());
    }

    #[test]
    fn answered_subscription_is_installed_and_holds_its_socket() {
        let mut agents = Agents::new();
        let port = free_port();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
        let reply = agents.subscribe(&channel, false);
        let shared = reply.try_take().unwrap().expect("answered").expect("subscribed");
        assert_eq!(shared.channel, channel);
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_err(), "the subscription's socket is not bound");
        assert!(agents.receiver.endpoint_mut(format!("127.0.0.1:{port}").parse().unwrap()).is_some());
    }

    #[test]
    fn abandoned_publication_leaves_no_socket_behind() {
        let mut agents = Agents::new();
        let publish = |agents: &mut Agents, port: u16, abandon: bool| {
            let reply = ReplySlot::new();
            let channel = format!("aeron:udp?endpoint=127.0.0.1:9|interface=127.0.0.1:{port}|term-length=64k");
            let command = DriverCommand::AddPublication { channel, stream_id: 1, reply: reply.clone() };
            agents.commands.send(command).unwrap();
            if abandon {
                assert!(reply.abandon().unwrap().is_none());
            }
            agents.run();
            reply.try_take().unwrap()
        };
        let port = free_port();
        assert!(publish(&mut agents, port, true).is_none());
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_ok(), "the abandoned publication kept its socket");
        let port = free_port();
        assert!(matches!(publish(&mut agents, port, false), Some(Ok(_))));
        assert!(UdpSocket::bind(("127.0.0.1", port)).is_err(), "the publication's socket is not bound");
    }
}
