//! The sender agent: drains publications to the network, answers status messages and NAKs.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::events::{DriverEvent, EventLog};
use super::receiver::lock;
use super::transmit::TransmitBatch;
use crate::client::PublicationShared;
use crate::media::udp::is_would_block;
use crate::time::Instant;
use crate::wire::{parse_control, ControlFrame, FrameHeader, FrameType, StatusMessage};

/// Counters of the sender agent, shared with the [`Driver`](super::Driver) handle.
#[derive(Debug, Default)]
pub struct SenderCounters {
    /// Control datagrams that failed to decode, or status messages of a bad length, that
    /// could not be attributed to a publication.
    pub invalid_frames: AtomicU64,
    /// Send errors other than "would block".
    pub send_errors: AtomicU64,
}

/// One publication and the socket it sends from (which also receives its control frames).
pub struct SendEndpoint {
    /// The publication's shared state.
    pub publication: Arc<PublicationShared>,
    /// Data goes out of here; unicast status messages come back here.
    pub socket: UdpSocket,
    /// Where data goes (the endpoint, or the multicast group).
    pub destination: SocketAddr,
    /// Multicast: the socket joined to the control group that receives status messages.
    pub control_socket: Option<UdpSocket>,
    /// Time of the last idle callback.
    pub last_idle: Instant,
}

/// The sender agent.
pub struct SenderAgent {
    endpoints: Vec<SendEndpoint>,
    datagrams_per_cycle: usize,
    mtu_buffer: Vec<u8>,
    batch: TransmitBatch,
    receive_buffer: Vec<u8>,
    events: Arc<Mutex<EventLog>>,
    counters: Arc<SenderCounters>,
}

impl SenderAgent {
    /// An agent with no publications that drains publication events into `events`.
    pub fn with_event_log(datagrams_per_cycle: usize, events: Arc<Mutex<EventLog>>) -> Self {
        SenderAgent {
            endpoints: Vec::new(),
            datagrams_per_cycle,
            mtu_buffer: vec![0; 65536],
            batch: TransmitBatch::default(),
            receive_buffer: vec![0; 65536],
            events,
            counters: Arc::default(),
        }
    }

    /// The agent's counters (shared, readable from other threads).
    pub fn counters(&self) -> &Arc<SenderCounters> {
        &self.counters
    }

    /// Starts serving a publication.
    pub fn add(&mut self, endpoint: SendEndpoint) {
        self.endpoints.push(endpoint);
    }

    /// One duty cycle; returns the work done.
    pub fn do_work(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let mut index = 0;
        while index < self.endpoints.len() {
            work += self.service(index, now);
            if self.endpoints[index].publication.state().is_done() {
                self.endpoints.swap_remove(index);
                continue;
            }
            index += 1;
        }
        work
    }

    fn receive_control(&mut self, index: usize, now: Instant) -> usize {
        let mut work = 0;
        for use_control_socket in [false, true] {
            for _ in 0..self.datagrams_per_cycle {
                let endpoint = &self.endpoints[index];
                let socket = if use_control_socket {
                    match &endpoint.control_socket {
                        Some(socket) => socket,
                        None => break,
                    }
                } else {
                    &endpoint.socket
                };
                let length = match socket.recv_from(&mut self.receive_buffer) {
                    Ok((length, _)) => length,
                    Err(error) if is_would_block(&error) => break,
                    Err(_) => break,
                };
                work += 1;
                let datagram = &self.receive_buffer[..length];
                let frame = match parse_control(datagram) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => continue,
                    Err(_) => {
                        self.on_malformed(index, datagram);
                        continue;
                    }
                };
                if let ControlFrame::StatusMessage(_) = frame {
                    if !has_status_message_length(datagram) {
                        self.on_malformed(index, datagram);
                        continue;
                    }
                }
                let endpoint = &self.endpoints[index];
                let mut publication = endpoint.publication.state();
                let identity = *publication.identity();
                let matches =
                    |session: i32, stream: i32| session == identity.session_id && stream == identity.stream_id;
                match frame {
                    ControlFrame::StatusMessage(message) if matches(message.session_id, message.stream_id) => {
                        publication.on_status_message(&message, now)
                    }
                    ControlFrame::StatusMessage(message) if message.is_send_setup() && message.session_id == 0 => {
                        publication.on_status_message(&message, now)
                    }
                    ControlFrame::Nak(nak) if matches(nak.session_id, nak.stream_id) => publication.on_nak(&nak, now),
                    ControlFrame::Error(error) if matches(error.session_id, error.stream_id) => {
                        publication.on_error(&error, now)
                    }
                    ControlFrame::Rttm(request) if matches(request.session_id, request.stream_id) => {
                        if let Some(reply) = publication.on_rtt_measurement(&request) {
                            drop(publication);
                            let length = reply.emit(&mut self.mtu_buffer);
                            let _ = endpoint.socket.send_to(&self.mtu_buffer[..length], endpoint.destination);
                        }
                    }
                    _ => {}
                }
            }
        }
        work
    }

    /// A control datagram that failed validation: counted by the publication it names (when
    /// session and stream are readable and match), else by the agent; never processed.
    fn on_malformed(&self, index: usize, datagram: &[u8]) {
        let endpoint = &self.endpoints[index];
        if let (Some(session), Some(stream)) = (read_i32_at(datagram, 8), read_i32_at(datagram, 12)) {
            let mut publication = endpoint.publication.state();
            let identity = *publication.identity();
            if session == identity.session_id && stream == identity.stream_id {
                publication.on_malformed_control_frame();
                return;
            }
        }
        self.counters.invalid_frames.fetch_add(1, Ordering::Relaxed);
    }

    /// Moves the publication's queued events into the driver's event log.
    fn drain_events(&self, index: usize) {
        let endpoint = &self.endpoints[index];
        let mut publication = endpoint.publication.state();
        let Some(first) = publication.poll_event() else { return };
        let identity = *publication.identity();
        let mut log = lock(&self.events);
        let mut next = Some(first);
        while let Some(event) = next {
            log.push(DriverEvent {
                time: std::time::SystemTime::now(),
                publication_id: endpoint.publication.id,
                channel: endpoint.publication.channel.clone(),
                stream_id: identity.stream_id,
                session_id: identity.session_id,
                kind: event.into(),
            });
            next = publication.poll_event();
        }
    }

    fn service(&mut self, index: usize, now: Instant) -> usize {
        let mut work = self.receive_control(index, now);
        {
            let endpoint = &mut self.endpoints[index];
            let mut publication = endpoint.publication.state();
            self.batch.fill(&mut publication, now, &mut endpoint.last_idle, self.datagrams_per_cycle);
        }
        let endpoint = &self.endpoints[index];
        for datagram in self.batch.iter() {
            let result = if endpoint.control_socket.is_some() {
                endpoint.socket.send_to(datagram, endpoint.destination)
            } else {
                endpoint.socket.send(datagram)
            };
            match result {
                Ok(_) => work += 1,
                Err(error) if is_would_block(&error) => work += 1, // dropped: NAK repairs it
                Err(_) => {
                    self.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.drain_events(index);
        work
    }
}

impl SenderAgent {
    /// Whether a connected publication still has data it has not sent.
    pub fn has_undelivered(&self) -> bool {
        self.endpoints.iter().any(|endpoint| endpoint.publication.state().has_unsent_data())
    }
}

/// Whether a datagram carrying a status message has a valid SM length: frame_length 36 (no
/// group tag) or 44 (with tag). Aeron logs other lengths and treats them as untagged; we count
/// and ignore them so a malformed receiver cannot join a tagged group by accident.
fn has_status_message_length(datagram: &[u8]) -> bool {
    match FrameHeader::parse(datagram) {
        Ok(header) if header.frame_type == FrameType::StatusMessage => {
            header.frame_length == StatusMessage::LENGTH as i32
                || header.frame_length == StatusMessage::LENGTH_WITH_GROUP_TAG as i32
        }
        _ => false,
    }
}

fn read_i32_at(bytes: &[u8], offset: usize) -> Option<i32> {
    let field = bytes.get(offset..offset + 4)?;
    Some(i32::from_le_bytes([field[0], field[1], field[2], field[3]]))
}
