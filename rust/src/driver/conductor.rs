//! The conductor agent: turns client commands into publications, subscriptions and endpoints.

use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use super::context::DriverContext;
use super::ipc::IpcAgent;
use super::receiver::{ImageDefaults, ReceiveEndpoint, ReceiverAgent};
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
        reply: Sender<Result<Arc<PublicationShared>>>,
    },
    /// Create a subscription.
    AddSubscription {
        /// Channel URI.
        channel: String,
        /// Stream id.
        stream_id: i32,
        /// Where the answer goes.
        reply: Sender<Result<Arc<SubscriptionShared>>>,
    },
    /// Close a subscription.
    RemoveSubscription {
        /// The subscription's id.
        id: u64,
    },
}

/// A small seeded generator for session ids and receiver ids (not for security).
#[derive(Debug)]
pub struct IdGenerator(u64);

impl IdGenerator {
    /// Seeded from the time and the process id, so two drivers differ.
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        IdGenerator(nanos ^ ((std::process::id() as u64) << 32) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A session id outside Aeron's reserved range [-1, 1000].
    pub fn session_id(&mut self) -> i32 {
        loop {
            let id = self.next_u64() as i32;
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
                    let _ = reply.send(self.add_publication(&channel, stream_id, now, sender, ipc));
                }
                DriverCommand::AddSubscription { channel, stream_id, reply } => {
                    let _ = reply.send(self.add_subscription(&channel, stream_id, now, receiver, ipc));
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

    fn add_publication(
        &mut self,
        channel: &str,
        stream_id: i32,
        now: Instant,
        sender: &mut SenderAgent,
        ipc: &mut IpcAgent,
    ) -> Result<Arc<PublicationShared>> {
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
            ipc.add_publication(shared.clone(), now);
            return Ok(shared);
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
        let socket = bind_sender(endpoint, local, &options)
            .map_err(|e| Error::Driver(format!("{channel}: cannot open sending socket for {endpoint}: {e}")))?;
        let control_socket = match (is_multicast, uri.control_address()) {
            (true, Some(control)) => Some(
                bind_control_listener(control, &options)
                    .map_err(|e| Error::Driver(format!("{channel}: cannot listen on control group {control}: {e}")))?,
            ),
            _ => None,
        };
        sender.add(SendEndpoint {
            publication: shared.clone(),
            socket,
            destination: endpoint,
            control_socket,
            last_idle: now,
        });
        Ok(shared)
    }

    fn add_subscription(
        &mut self,
        channel: &str,
        stream_id: i32,
        now: Instant,
        receiver: &mut ReceiverAgent,
        ipc: &mut IpcAgent,
    ) -> Result<Arc<SubscriptionShared>> {
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
        if uri.media == Media::Ipc {
            let receiver_id = self.ids.next_u64() as i64;
            ipc.add_subscription(stream_id, uri.session_id, receiver_id, shared.clone(), defaults, now);
            return Ok(shared);
        }
        let endpoint = Self::udp_endpoint(&uri, channel)?;
        if let Some(existing) = receiver.endpoint_mut(endpoint) {
            existing.add_subscription(stream_id, uri.session_id, shared.clone());
            return Ok(shared);
        }
        let options = SocketOptions {
            receive_buffer: Some(receive_buffer),
            send_buffer: uri.so_sndbuf.or(self.context.socket_send_buffer),
            multicast_ttl: uri.ttl.map(u32::from),
            interface: interface_address(&uri, channel)?,
        };
        let socket = bind_receiver(endpoint, &options)
            .map_err(|e| Error::Driver(format!("{channel}: cannot bind receiving socket {endpoint}: {e}")))?;
        let control = if uri.is_multicast() { uri.control_address() } else { None };
        let mut endpoint_state = ReceiveEndpoint::new(socket, endpoint, control, self.ids.next_u64() as i64, defaults);
        endpoint_state.add_subscription(stream_id, uri.session_id, shared.clone());
        receiver.add(endpoint_state);
        Ok(shared)
    }
}
