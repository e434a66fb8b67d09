//! The receiver agent: reads the network, creates images from SETUP frames, fills them, and
//! sends their status messages and NAKs.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use super::lock;
use crate::client::{ImageHandle, SubscriptionShared};
use crate::logbuffer::position::compute_position;
use crate::logbuffer::StreamIdentity;
use crate::media::udp::is_would_block;
use crate::protocol::{Image, ImageConfig, ImageState};
use crate::time::Instant;
use crate::wire::{flags, DataHeader, FrameHeader, FrameType, RttMeasurement, Setup, StatusMessage};

/// A session the receiver asked to SETUP, and when (do not ask again within 1 s).
const PENDING_SETUP_TIMEOUT: Duration = Duration::from_secs(1);

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
}

impl ImageDefaults {
    /// The configuration of an image for `setup`, or `None` when the SETUP is refused (invalid,
    /// or an MTU larger than the receiver window or the socket receive buffer).
    pub fn image_config(&self, setup: &Setup, receiver_id: i64, random_seed: u64) -> Option<ImageConfig> {
        setup.validate().ok()?;
        let term_length = setup.term_length as u32;
        let window = self.receiver_window.min(term_length / 2);
        if setup.mtu as u32 > window || setup.mtu as usize > self.socket_receive_buffer {
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

struct SubscriptionEntry {
    stream_id: i32,
    session_filter: Option<i32>,
    shared: Arc<SubscriptionShared>,
}

struct ImageEntry {
    session_id: i32,
    stream_id: i32,
    control: SocketAddr,
    image: Arc<Mutex<Image>>,
}

/// One bound receiving socket with its subscriptions and images.
pub struct ReceiveEndpoint {
    socket: UdpSocket,
    /// Multicast: status messages go to the control group instead of the data source.
    control_override: Option<SocketAddr>,
    bind_address: SocketAddr,
    receiver_id: i64,
    defaults: ImageDefaults,
    subscriptions: Vec<SubscriptionEntry>,
    images: Vec<ImageEntry>,
    pending_setups: HashMap<(i32, i32), Instant>,
    next_seed: u64,
}

impl ReceiveEndpoint {
    /// An endpoint reading `socket`.
    pub fn new(
        socket: UdpSocket,
        bind_address: SocketAddr,
        control_override: Option<SocketAddr>,
        receiver_id: i64,
        defaults: ImageDefaults,
    ) -> Self {
        ReceiveEndpoint {
            socket,
            control_override,
            bind_address,
            receiver_id,
            defaults,
            subscriptions: Vec::new(),
            images: Vec::new(),
            pending_setups: HashMap::new(),
            next_seed: receiver_id as u64,
        }
    }

    /// The address the endpoint is bound to (the channel's endpoint).
    pub fn bind_address(&self) -> SocketAddr {
        self.bind_address
    }

    /// Adds a subscription to `stream_id` (optionally one session only).
    pub fn add_subscription(&mut self, stream_id: i32, session_filter: Option<i32>, shared: Arc<SubscriptionShared>) {
        self.subscriptions.push(SubscriptionEntry { stream_id, session_filter, shared });
    }

    /// Removes a subscription; its images lose their consumer (and close when it was the last).
    pub fn remove_subscription(&mut self, subscription_id: u64, now: Instant) {
        self.subscriptions.retain(|entry| entry.shared.id != subscription_id);
        for entry in &self.images {
            let mut image = lock(&entry.image);
            if !image.remove_consumer(subscription_id) {
                image.close(now);
            }
        }
    }

    fn on_setup(&mut self, setup: &Setup, source: SocketAddr, now: Instant) {
        if self.images.iter().any(|e| e.session_id == setup.session_id && e.stream_id == setup.stream_id) {
            return;
        }
        let matching: Vec<Arc<SubscriptionShared>> = self
            .subscriptions
            .iter()
            .filter(|s| s.stream_id == setup.stream_id && s.session_filter.is_none_or(|id| id == setup.session_id))
            .map(|s| s.shared.clone())
            .collect();
        if matching.is_empty() {
            return;
        }
        self.next_seed = self.next_seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let Some(config) = self.defaults.image_config(setup, self.receiver_id, self.next_seed) else { return };
        self.pending_setups.remove(&(setup.session_id, setup.stream_id));
        let mut image = Image::new(config, now);
        for subscription in &matching {
            image.add_consumer(subscription.id);
        }
        let image = Arc::new(Mutex::new(image));
        let control = self.control_override.unwrap_or(source);
        for subscription in &matching {
            subscription.add_image(ImageHandle {
                session_id: setup.session_id,
                stream_id: setup.stream_id,
                source: source.to_string(),
                image: image.clone(),
            });
        }
        self.images.push(ImageEntry { session_id: setup.session_id, stream_id: setup.stream_id, control, image });
    }

    fn elicit_setup(&mut self, header: &DataHeader, source: SocketAddr, now: Instant, buffer: &mut [u8]) {
        if header.is_end_of_stream() || !self.subscriptions.iter().any(|s| s.stream_id == header.stream_id) {
            return;
        }
        let key = (header.session_id, header.stream_id);
        if self.pending_setups.get(&key).is_some_and(|since| now.saturating_since(*since) < PENDING_SETUP_TIMEOUT) {
            return;
        }
        self.pending_setups.insert(key, now);
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
    fn on_datagram(&mut self, datagram: &[u8], source: SocketAddr, now: Instant, scratch: &mut [u8]) -> bool {
        let Ok(header) = FrameHeader::parse(datagram) else { return false };
        match header.frame_type {
            FrameType::Data | FrameType::Pad => {
                let Ok(data) = DataHeader::parse(datagram) else { return false };
                match self.images.iter_mut().find(|e| e.session_id == data.session_id && e.stream_id == data.stream_id)
                {
                    Some(entry) => {
                        if self.control_override.is_none() {
                            entry.control = source;
                        }
                        lock(&entry.image).on_data(datagram, now).is_ok()
                    }
                    None => {
                        self.elicit_setup(&data, source, now, scratch);
                        true
                    }
                }
            }
            FrameType::Setup => match Setup::parse(datagram) {
                Ok(setup) => {
                    self.on_setup(&setup, source, now);
                    true
                }
                Err(_) => false,
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
                true
            }
            _ => true,
        }
    }

    /// Reads up to `budget` datagrams, then services every image. Returns work done and the
    /// number of malformed datagrams seen.
    pub fn do_work(&mut self, now: Instant, budget: usize, buffer: &mut [u8], scratch: &mut [u8]) -> (usize, u64) {
        let mut work = 0;
        let mut malformed = 0;
        for _ in 0..budget {
            match self.socket.recv_from(buffer) {
                Ok((length, source)) => {
                    work += 1;
                    if !self.on_datagram(&buffer[..length], source, now, scratch) {
                        malformed += 1;
                    }
                }
                Err(error) if is_would_block(&error) => break,
                Err(_) => break,
            }
        }
        let mut index = 0;
        while index < self.images.len() {
            let entry = &self.images[index];
            let closed = {
                let mut image = lock(&entry.image);
                image.on_tick(now);
                for _ in 0..4 {
                    match image.poll_transmit(now, scratch) {
                        Some(length) => {
                            work += 1;
                            let _ = self.socket.send_to(&scratch[..length], entry.control);
                        }
                        None => break,
                    }
                }
                image.state() == ImageState::Closed
            };
            if closed {
                let entry = self.images.swap_remove(index);
                for subscription in &self.subscriptions {
                    subscription.shared.remove_image(&entry.image);
                }
                continue;
            }
            index += 1;
        }
        (work, malformed)
    }
}

/// Counters of the receiver agent, shared with the [`Driver`](super::Driver) handle.
#[derive(Debug, Default)]
pub struct ReceiverCounters {
    /// Datagrams that failed to decode (bad header, truncated, inconsistent frames).
    pub invalid_frames: std::sync::atomic::AtomicU64,
}

/// The receiver agent: every receive endpoint of the driver.
pub struct ReceiverAgent {
    endpoints: Vec<ReceiveEndpoint>,
    datagrams_per_cycle: usize,
    buffer: Vec<u8>,
    scratch: Vec<u8>,
    counters: Arc<ReceiverCounters>,
}

impl ReceiverAgent {
    /// An agent with no endpoints.
    pub fn new(datagrams_per_cycle: usize) -> Self {
        ReceiverAgent {
            endpoints: Vec::new(),
            datagrams_per_cycle,
            buffer: vec![0; 65536],
            scratch: vec![0; 65536],
            counters: Arc::default(),
        }
    }

    /// The agent's counters (shared, readable from other threads).
    pub fn counters(&self) -> &Arc<ReceiverCounters> {
        &self.counters
    }

    /// The endpoint bound to `address`, if any.
    pub fn endpoint_mut(&mut self, address: SocketAddr) -> Option<&mut ReceiveEndpoint> {
        self.endpoints.iter_mut().find(|e| e.bind_address() == address)
    }

    /// Adds an endpoint.
    pub fn add(&mut self, endpoint: ReceiveEndpoint) {
        self.endpoints.push(endpoint);
    }

    /// Removes a subscription from every endpoint, closing endpoints left without any.
    pub fn remove_subscription(&mut self, subscription_id: u64, now: Instant) {
        for endpoint in &mut self.endpoints {
            endpoint.remove_subscription(subscription_id, now);
        }
    }

    /// One duty cycle; returns the work done.
    pub fn do_work(&mut self, now: Instant) -> usize {
        let mut work = 0;
        for endpoint in &mut self.endpoints {
            let (done, malformed) =
                endpoint.do_work(now, self.datagrams_per_cycle, &mut self.buffer, &mut self.scratch);
            work += done;
            self.counters.invalid_frames.fetch_add(malformed, std::sync::atomic::Ordering::Relaxed);
        }
        self.endpoints.retain(|e| !e.subscriptions.is_empty() || !e.images.is_empty());
        work
    }
}
