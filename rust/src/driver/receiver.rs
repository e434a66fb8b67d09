//! The receiver agent: reads the network, creates images from SETUP frames, fills them, and
//! sends their status messages and NAKs.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use super::lock;
use crate::client::{ImageHandle, SubscriptionShared};
use crate::media::udp::is_would_block;
use crate::protocol::{DataRejection, Image, ImageState};
use crate::time::Instant;
use crate::wire::{flags, DataHeader, FrameHeader, FrameType, RttMeasurement, Setup, StatusMessage};

/// A session the receiver asked to SETUP, and when (do not ask again within 1 s).
const PENDING_SETUP_TIMEOUT: Duration = Duration::from_secs(1);
/// Status messages and NAKs one image may send per duty cycle.
const CONTROL_FRAMES_PER_CYCLE: usize = 4;
/// Bytes of scratch buffer per control frame (a status message with group tag is 48 bytes).
const CONTROL_FRAME_SLOT: usize = 256;
/// Sessions remembered as asked to SETUP at once (a flood of unknown sessions cannot grow the
/// table past this; beyond it, no SETUP is asked for until old entries expire).
const MAX_PENDING_SETUPS: usize = 1024;

pub use super::agent::receiver::{DatagramOutcome, ImageDefaults};

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
    /// Seeds for the images' loss detectors, from a generator seeded with the receiver id.
    seeds: fastrand::Rng,
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
            seeds: fastrand::Rng::with_seed(receiver_id as u64),
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

    fn on_setup(&mut self, setup: &Setup, source: SocketAddr, now: Instant) -> DatagramOutcome {
        if self.images.iter().any(|e| e.session_id == setup.session_id && e.stream_id == setup.stream_id) {
            return DatagramOutcome::Taken;
        }
        let matching: Vec<Arc<SubscriptionShared>> = self
            .subscriptions
            .iter()
            .filter(|s| s.stream_id == setup.stream_id && s.session_filter.is_none_or(|id| id == setup.session_id))
            .map(|s| s.shared.clone())
            .collect();
        if matching.is_empty() {
            return DatagramOutcome::Taken;
        }
        // A subscription at its image limit takes no new image; when none can, refuse.
        let limit = self.defaults.max_images_per_subscription;
        let matching: Vec<Arc<SubscriptionShared>> =
            matching.into_iter().filter(|s| self.image_count(s.id) < limit).collect();
        if matching.is_empty() {
            return DatagramOutcome::ImageRefused;
        }
        let Some(config) = self.defaults.image_config(setup, self.receiver_id, self.seeds.u64(..)) else {
            return DatagramOutcome::SetupRefused;
        };
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
        DatagramOutcome::Taken
    }

    /// Images subscription `id` consumes on this endpoint.
    fn image_count(&self, id: u64) -> usize {
        self.images.iter().filter(|e| lock(&e.image).consumer_position(id).is_some()).count()
    }

    /// The images of this endpoint (for tests and tools).
    pub fn images(&self) -> Vec<Arc<Mutex<Image>>> {
        self.images.iter().map(|e| e.image.clone()).collect()
    }

    fn elicit_setup(&mut self, header: &DataHeader, source: SocketAddr, now: Instant, buffer: &mut [u8]) {
        if header.is_end_of_stream() || !self.subscriptions.iter().any(|s| s.stream_id == header.stream_id) {
            return;
        }
        let key = (header.session_id, header.stream_id);
        if self.pending_setups.get(&key).is_some_and(|since| now.saturating_since(*since) < PENDING_SETUP_TIMEOUT) {
            return;
        }
        if self.pending_setups.len() >= MAX_PENDING_SETUPS {
            self.pending_setups.retain(|_, since| now.saturating_since(*since) < PENDING_SETUP_TIMEOUT);
            if self.pending_setups.len() >= MAX_PENDING_SETUPS {
                return;
            }
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

    /// Handles one received datagram (what [`ReceiveEndpoint::do_work`] does with each one read;
    /// public so tests and fuzzers can drive the whole receiving side without a network).
    pub fn on_datagram(
        &mut self,
        datagram: &[u8],
        source: SocketAddr,
        now: Instant,
        scratch: &mut [u8],
    ) -> DatagramOutcome {
        let Ok(header) = FrameHeader::parse(datagram) else { return DatagramOutcome::Malformed };
        match header.frame_type {
            FrameType::Data | FrameType::Pad => {
                let Ok(data) = DataHeader::parse(datagram) else { return DatagramOutcome::Malformed };
                match self.images.iter_mut().find(|e| e.session_id == data.session_id && e.stream_id == data.stream_id)
                {
                    Some(entry) => {
                        let result = lock(&entry.image).on_data(datagram, now);
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
                Ok(setup) => self.on_setup(&setup, source, now),
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

    /// Reads up to `budget` datagrams, then services every image. Returns work done; every
    /// datagram's outcome is counted in `counters`.
    pub fn do_work(
        &mut self,
        now: Instant,
        budget: usize,
        buffer: &mut [u8],
        scratch: &mut [u8],
        counters: &ReceiverCounters,
    ) -> usize {
        let mut work = 0;
        for _ in 0..budget {
            match self.socket.recv_from(buffer) {
                Ok((length, source)) => {
                    work += 1;
                    counters.count(self.on_datagram(&buffer[..length], source, now, scratch));
                }
                Err(error) if is_would_block(&error) => break,
                Err(_) => break,
            }
        }
        work + self.service_images(now, scratch, counters)
    }

    /// Time-driven work of every image (liveness, status messages, NAKs); removes closed images.
    pub fn service_images(&mut self, now: Instant, scratch: &mut [u8], counters: &ReceiverCounters) -> usize {
        let mut work = 0;
        let mut index = 0;
        while index < self.images.len() {
            let entry = &self.images[index];
            // Control frames are written into `scratch` under the image lock (which
            // subscriptions also take) and sent after it is released: no I/O under that lock.
            let mut lengths = [0usize; CONTROL_FRAMES_PER_CYCLE];
            let mut count = 0;
            let (closed, incomplete) = {
                let mut image = lock(&entry.image);
                image.on_tick(now);
                for (slot, length) in scratch.chunks_mut(CONTROL_FRAME_SLOT).zip(lengths.iter_mut()) {
                    match image.poll_transmit(now, slot) {
                        Some(written) => {
                            *length = written;
                            count += 1;
                        }
                        None => break,
                    }
                }
                (image.state() == ImageState::Closed, image.ended_with_data_missing())
            };
            for (slot, length) in scratch.chunks(CONTROL_FRAME_SLOT).zip(&lengths[..count]) {
                work += 1;
                let _ = self.socket.send_to(&slot[..*length], entry.control);
            }
            if closed {
                if incomplete {
                    counters.images_ended_incomplete.fetch_add(1, Ordering::Relaxed);
                }
                let entry = self.images.swap_remove(index);
                for subscription in &self.subscriptions {
                    subscription.shared.remove_image(&entry.image);
                }
                continue;
            }
            index += 1;
        }
        work
    }
}

/// Counters of the receiver agent, shared with the [`Driver`](super::Driver) handle.
#[derive(Debug, Default)]
pub struct ReceiverCounters {
    /// Datagrams that failed to decode (bad header, truncated, inconsistent frames), and only those.
    pub invalid_frames: AtomicU64,
    /// DATA datagrams already received (retransmits that crossed, duplicated datagrams).
    pub duplicate_frames: AtomicU64,
    /// DATA/heartbeat datagrams beyond their image's receiver window (ignored).
    pub overrun_frames: AtomicU64,
    /// Datagrams for images that no longer receive.
    pub inactive_image_frames: AtomicU64,
    /// SETUPs refused for invalid or locally unacceptable fields.
    pub setups_refused: AtomicU64,
    /// SETUPs refused because the subscriptions were at their image limit.
    pub images_refused: AtomicU64,
    /// Images that ended with data missing (skipped gaps, data seen but never rebuilt, data
    /// after a false end of stream).
    pub images_ended_incomplete: AtomicU64,
}

impl ReceiverCounters {
    /// Counts one datagram's outcome.
    pub fn count(&self, outcome: DatagramOutcome) {
        let counter = match outcome {
            DatagramOutcome::Taken => return,
            DatagramOutcome::Malformed => &self.invalid_frames,
            DatagramOutcome::Duplicate => &self.duplicate_frames,
            DatagramOutcome::Overrun => &self.overrun_frames,
            DatagramOutcome::Inactive => &self.inactive_image_frames,
            DatagramOutcome::SetupRefused => &self.setups_refused,
            DatagramOutcome::ImageRefused => &self.images_refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
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
            work +=
                endpoint.do_work(now, self.datagrams_per_cycle, &mut self.buffer, &mut self.scratch, &self.counters);
        }
        self.endpoints.retain(|e| !e.subscriptions.is_empty() || !e.images.is_empty());
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::DataHeader;

    const TERM: i32 = 64 * 1024;

    fn defaults(max_images: usize) -> ImageDefaults {
        ImageDefaults {
            receiver_window: 128 * 1024,
            status_interval: Duration::from_millis(100),
            nak_delay: Duration::from_micros(100),
            multicast_nak_backoff: Duration::from_millis(10),
            liveness_timeout: Duration::from_secs(10),
            group_tag: None,
            is_group: false,
            socket_receive_buffer: 2 << 20,
            reliable: true,
            max_images_per_subscription: max_images,
        }
    }

    fn endpoint(max_images: usize) -> (ReceiveEndpoint, Arc<SubscriptionShared>) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let address = socket.local_addr().unwrap();
        let mut endpoint = ReceiveEndpoint::new(socket, address, None, 77, defaults(max_images));
        let shared = Arc::new(SubscriptionShared::new(1, "test".into(), 10));
        endpoint.add_subscription(10, None, shared.clone());
        (endpoint, shared)
    }

    fn setup(session_id: i32, initial_term_id: i32, active_term_id: i32, term_offset: i32) -> Vec<u8> {
        let mut bytes = vec![0u8; Setup::LENGTH];
        Setup {
            flags: 0,
            term_offset,
            session_id,
            stream_id: 10,
            initial_term_id,
            active_term_id,
            term_length: TERM,
            mtu: 1408,
            ttl: 0,
        }
        .emit(&mut bytes);
        bytes
    }

    fn source() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn a_setup_whose_active_term_precedes_the_initial_term_is_refused_and_the_receiver_lives_on() {
        let (mut endpoint, _shared) = endpoint(8);
        let counters = ReceiverCounters::default();
        let mut scratch = vec![0u8; 65536];
        let now = Instant::ZERO;
        // The reported crash: initial term id 1000, active 999, 64 KiB terms.
        let outcome = endpoint.on_datagram(&setup(5, 1000, 999, 0), source(), now, &mut scratch);
        counters.count(outcome);
        endpoint.service_images(now, &mut scratch, &counters);
        assert_eq!(outcome, DatagramOutcome::SetupRefused);
        assert_eq!(counters.setups_refused.load(Ordering::Relaxed), 1);
        assert!(endpoint.images().is_empty());
        // A valid SETUP afterwards still makes an image.
        let outcome = endpoint.on_datagram(&setup(6, 1000, 1002, 4096), source(), now, &mut scratch);
        assert_eq!(outcome, DatagramOutcome::Taken);
        endpoint.service_images(now, &mut scratch, &counters);
        assert_eq!(endpoint.images().len(), 1);
    }

    #[test]
    fn setup_fields_that_contradict_each_other_are_refused() {
        let (mut endpoint, _shared) = endpoint(8);
        let mut scratch = vec![0u8; 65536];
        for bad in [setup(5, 0, -1, 0), setup(5, i32::MIN, i32::MAX, 0), setup(5, 0, 0, TERM + 32), setup(5, 0, 0, -32)]
        {
            assert_eq!(
                endpoint.on_datagram(&bad, source(), Instant::ZERO, &mut scratch),
                DatagramOutcome::SetupRefused
            );
        }
        assert!(endpoint.images().is_empty());
    }

    #[test]
    fn a_setup_flood_is_bounded_per_subscription_and_counted() {
        let (mut endpoint, _shared) = endpoint(8);
        let counters = ReceiverCounters::default();
        let mut scratch = vec![0u8; 65536];
        for session in 0..5_000 {
            counters.count(endpoint.on_datagram(&setup(session, 0, 0, 0), source(), Instant::ZERO, &mut scratch));
        }
        assert_eq!(endpoint.images().len(), 8);
        assert_eq!(counters.images_refused.load(Ordering::Relaxed), 4_992);
    }

    #[test]
    fn an_image_that_times_out_with_a_gap_is_counted_as_ended_incomplete() {
        let (mut endpoint, _shared) = endpoint(8);
        let counters = ReceiverCounters::default();
        let mut scratch = vec![0u8; 65536];
        let start = Instant::ZERO;
        endpoint.on_datagram(&setup(5, 0, 0, 0), source(), start, &mut scratch);
        let mut frame = vec![0u8; 64];
        DataHeader {
            frame_length: 64,
            flags: flags::UNFRAGMENTED,
            frame_type: FrameType::Data,
            term_offset: 64,
            session_id: 5,
            stream_id: 10,
            term_id: 0,
            reserved_value: 0,
        }
        .emit(&mut frame);
        assert_eq!(endpoint.on_datagram(&frame, source(), start, &mut scratch), DatagramOutcome::Taken);
        for seconds in [1, 11, 12] {
            endpoint.service_images(start + Duration::from_secs(seconds), &mut scratch, &counters);
        }
        assert!(endpoint.images().is_empty(), "the image timed out and was removed");
        assert_eq!(counters.images_ended_incomplete.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn duplicates_overruns_and_malformed_frames_are_counted_apart() {
        let (mut endpoint, _shared) = endpoint(8);
        let counters = ReceiverCounters::default();
        let mut scratch = vec![0u8; 65536];
        let now = Instant::ZERO;
        counters.count(endpoint.on_datagram(&setup(5, 0, 0, 0), source(), now, &mut scratch));
        let frame = |term_id: i32, term_offset: i32| {
            let mut bytes = vec![0u8; 64];
            DataHeader {
                frame_length: 64,
                flags: flags::UNFRAGMENTED,
                frame_type: FrameType::Data,
                term_offset,
                session_id: 5,
                stream_id: 10,
                term_id,
                reserved_value: 0,
            }
            .emit(&mut bytes);
            bytes
        };
        for datagram in [frame(0, 0), frame(0, 0), frame(0, 0), frame(100, 0), frame(0, 64)[..40].to_vec(), vec![1, 2]]
        {
            counters.count(endpoint.on_datagram(&datagram, source(), now, &mut scratch));
        }
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        assert_eq!(load(&counters.duplicate_frames), 2);
        assert_eq!(load(&counters.overrun_frames), 1);
        assert_eq!(load(&counters.invalid_frames), 2);
        assert_eq!(load(&counters.inactive_image_frames), 0);
    }
}
