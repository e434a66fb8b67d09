//! The sender agent: serves network publications over shared logs. Clients append to a
//! publication's log; the sender sends the committed frames within the flow-control limit,
//! retransmits NAKed ranges, heartbeats and SETUPs, handles status messages, NAKs, RTT requests
//! and error frames, writes each publication's stream counters (publisher limit and position,
//! sender position and limit, flow-control receivers), and reports driver events and status answers to the conductor.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use super::mmsg::{Filled, SegmentOffload, SendBatch};
use super::{unblocked_message, AgentEvent, NewPublication, PublicationStreamCounters, SenderCommand};
use crate::driver::events::{reason_name, DriverEvent, DriverEventKind};
use crate::logbuffer::position::{align_frame, partition_index};
use crate::protocol::{NetworkPublication, PublicationCounters, Transmit};
use crate::shm::command::Response;
use crate::shm::counters::Counter;
use crate::shm::log_buffer::{LogBuffer, PopulateAhead, Unsent};
use crate::shm::status::{
    bounded_text, DriverEventInfo, DriverEventKindInfo, PublicationInfo, ReceiverInfo, MAX_EVENT_TEXT,
    MAX_RECEIVERS_IN_STATUS,
};
use crate::time::{Instant, MonotonicClock};
use crate::wire::{flags, parse_control, ControlFrame, FrameHeader, FrameType, StatusMessage};

/// How often a publication that keeps sending still gets its idle work.
const IDLE_INTERVAL: Duration = Duration::from_millis(1);
/// While a publication keeps sending, its sockets are read for control frames (status
/// messages, NAKs) on every this many duty cycles only, and at least every [`IDLE_INTERVAL`]; a
/// cycle after one that sent nothing always reads them. A read that finds nothing is still a
/// system call (two with a control socket), which a busy cycle of one `sendmmsg` would pay on
/// every cycle; a sender held by its flow-control window sends nothing and so reads at once.
/// Aeron's sender polls the same way (`aeron.send.to.sm.poll.ratio`, default 6).
const CONTROL_POLL_RATIO: u32 = 6;

/// The system counters the sender writes (one writer each).
#[derive(Clone, Debug)]
pub struct SenderCounters {
    /// Bytes sent.
    pub bytes_sent: Counter,
    /// Send errors other than "would block".
    pub send_errors: Counter,
    /// Malformed control frames.
    pub invalid_control_frames: Counter,
    /// NAKs received.
    pub naks_received: Counter,
    /// Datagrams retransmitted.
    pub retransmits: Counter,
    /// Status messages received.
    pub status_messages_received: Counter,
    /// Heartbeats sent.
    pub heartbeats_sent: Counter,
    /// Datagrams sent.
    pub datagrams_sent: Counter,
}

struct Served {
    registration_id: i64,
    channel: String,
    publication: NetworkPublication<LogBuffer>,
    socket: UdpSocket,
    destination: SocketAddr,
    control_socket: Option<UdpSocket>,
    stream_counters: PublicationStreamCounters,
    last_idle: Instant,
    reported: PublicationCounters,
    connected: bool,
    /// The log is zeroed up to here (a term behind the sender position), so a partition is
    /// clean before clients' appenders rotate into it again.
    clean_position: i64,
    /// Whether this publication's socket still sends runs of datagrams as one offloaded send.
    offload: SegmentOffload,
    /// When its sockets are next read for control frames ([`ControlPoll`]).
    control_poll: ControlPoll,
    /// The log's pages mapped in ahead of the clients' appends, from cycles that sent nothing.
    populate: PopulateAhead,
}

/// When a publication's sockets are read for control frames: on the cycle after one that sent
/// nothing, and otherwise every [`CONTROL_POLL_RATIO`] cycles or [`IDLE_INTERVAL`].
#[derive(Clone, Copy, Debug)]
struct ControlPoll {
    /// Duty cycles since the last read.
    cycles: u32,
    /// When they were last read.
    last: Instant,
    /// Whether the last cycle sent datagrams.
    sent: bool,
}

impl ControlPoll {
    fn new(now: Instant) -> Self {
        ControlPoll { cycles: 0, last: now, sent: false }
    }

    /// Whether this cycle reads the sockets; a read is recorded as done.
    fn due(&mut self, now: Instant) -> bool {
        self.cycles += 1;
        let due = !self.sent || self.cycles >= CONTROL_POLL_RATIO || now.saturating_since(self.last) >= IDLE_INTERVAL;
        if due {
            self.cycles = 0;
            self.last = now;
        }
        due
    }
}

/// The sender agent.
pub struct SenderAgent {
    publications: Vec<Served>,
    commands: Receiver<SenderCommand>,
    events: Sender<AgentEvent>,
    counters: SenderCounters,
    datagrams_per_cycle: usize,
    /// Whether new publications send with segmentation offload ([`SegmentOffload`]).
    udp_offload: bool,
    /// A cycle's datagrams of one publication, sent with one system call.
    batch: SendBatch,
    out: Vec<u8>,
    input: Vec<u8>,
    clock: MonotonicClock,
}

impl SenderAgent {
    /// An agent reading `commands`, reporting to `events`, counting into `counters`, sending at
    /// most `datagrams_per_cycle` datagrams per publication per duty cycle, with segmentation
    /// offload while `udp_offload` and the socket allow it.
    pub fn new(
        commands: Receiver<SenderCommand>,
        events: Sender<AgentEvent>,
        counters: SenderCounters,
        datagrams_per_cycle: usize,
        udp_offload: bool,
    ) -> Self {
        SenderAgent {
            publications: Vec::new(),
            commands,
            events,
            counters,
            datagrams_per_cycle,
            udp_offload,
            batch: SendBatch::default(),
            out: vec![0; 65536],
            input: vec![0; 65536],
            clock: MonotonicClock::new(),
        }
    }

    /// Whether any publication is still served (draining or lingering included).
    pub fn has_publications(&self) -> bool {
        !self.publications.is_empty()
    }

    /// Whether a publication still has a live receiver to drain to or to serve retransmits to:
    /// shutdown waits only for those (a publication nobody receives has nothing to deliver).
    pub fn has_receivers_to_drain(&self) -> bool {
        self.publications
            .iter()
            .any(|served| !served.publication.is_done() && !served.publication.status().live_receivers.is_empty())
    }

    /// What the publications still served have not sent: from each one's sender position to the
    /// tail its clients appended to (as far as the publication accepted it: never beyond the
    /// publisher limit it gave).
    pub fn unsent(&self) -> Unsent {
        let mut unsent = Unsent::default();
        for served in &self.publications {
            let publication = &served.publication;
            let (from, to) = (publication.sender_position(), publication.tail_position());
            if to > from {
                let (messages, end) = frames_between(publication.log(), from, to);
                unsent.messages += messages;
                unsent.bytes += (end.max(to) - from) as u64;
            }
        }
        unsent
    }

    /// Closes every publication (shutdown): each drains, signals end of stream and lingers.
    pub fn close_all(&mut self) {
        for served in &mut self.publications {
            close(served);
        }
    }

    /// Adds the descriptor of every socket the sender reads (status messages, NAKs) to `out`
    /// (what an idle sender parks on, [`crate::driver::idle::Idler::idle_or_readable`]).
    pub fn readable_fds(&self, out: &mut Vec<RawFd>) {
        for served in &self.publications {
            out.push(served.socket.as_raw_fd());
            out.extend(served.control_socket.as_ref().map(|s| s.as_raw_fd()));
        }
    }

    /// One duty cycle at the time of the agent's own clock; returns the work done.
    pub fn do_work(&mut self) -> usize {
        self.do_work_at(self.clock.now())
    }

    /// One duty cycle at `now`, the time the runner read for every agent of the cycle
    /// ([`crate::driver::clock::DutyClock`]); returns the work done.
    pub fn do_work_at(&mut self, now: Instant) -> usize {
        let mut work = 0;
        while let Ok(command) = self.commands.try_recv() {
            work += 1;
            self.on_command(command, now);
        }
        let mut index = 0;
        while index < self.publications.len() {
            work += self.service(index, now);
            if self.publications[index].publication.is_done() {
                let served = self.publications.swap_remove(index);
                let _ = served.stream_counters.publisher_limit.set(served.publication.sender_position());
                let _ = self.events.send(AgentEvent::PublicationDone { registration_id: served.registration_id });
                continue;
            }
            index += 1;
        }
        work
    }

    fn on_command(&mut self, command: SenderCommand, now: Instant) {
        match command {
            SenderCommand::Add(new) => {
                let NewPublication {
                    registration_id,
                    channel,
                    publication,
                    socket,
                    destination,
                    control_socket,
                    counters: stream_counters,
                } = *new;
                // Nothing before the start position was ever written: cleaning starts there.
                let clean_position = publication.config().initial_position;
                let populate = PopulateAhead::new(publication.log(), clean_position);
                self.publications.push(Served {
                    registration_id,
                    channel,
                    publication,
                    socket,
                    destination,
                    control_socket,
                    stream_counters,
                    last_idle: now,
                    reported: PublicationCounters::default(),
                    connected: false,
                    clean_position,
                    offload: if self.udp_offload { SegmentOffload::default() } else { SegmentOffload::disabled() },
                    control_poll: ControlPoll::new(now),
                    populate,
                });
            }
            SenderCommand::Close { registration_id } => {
                if let Some(served) = self.publications.iter_mut().find(|p| p.registration_id == registration_id) {
                    close(served);
                }
            }
            SenderCommand::Query { registration_id, correlation_id } => {
                let response = match self.publications.iter().find(|p| p.registration_id == registration_id) {
                    Some(served) => Response::publication_status(
                        correlation_id,
                        registration_id,
                        Ok(publication_info(&served.publication)),
                    ),
                    None => Response::Error {
                        correlation_id,
                        code: crate::shm::command::error_code::UNKNOWN_PUBLICATION,
                        message: format!("no network publication {registration_id}"),
                    },
                };
                let _ = self.events.send(AgentEvent::Respond(response));
            }
            SenderCommand::CloseAll => self.close_all(),
        }
    }

    fn service(&mut self, index: usize, now: Instant) -> usize {
        let mut work = 0;
        if self.publications[index].control_poll.due(now) {
            work += self.receive_control(index, now);
        }
        let budget = self.datagrams_per_cycle;
        let served = &mut self.publications[index];
        if let Ok(tail) = served.publication.log().tail_position() {
            served.publication.on_tail(tail);
        }
        self.batch.clear();
        for _ in 0..budget {
            let publication = &mut served.publication;
            let fill = |slot: &mut [u8]| match publication.poll_transmit_in_place(now, slot)? {
                Transmit::Written(length) => Some(Filled::Written(length)),
                // Log frames are sent from the log as they lie: no copy into the batch.
                Transmit::Log { position, length } => {
                    publication.log().address_of(position, length).ok().map(|address| Filled::Mapped(address, length))
                }
            };
            // SAFETY: the frames named lie in this publication's log, which `served` keeps mapped
            // through the send below; they are committed (clients never rewrite them) and the
            // log is cleaned only a term behind the sender position, after the send.
            if !unsafe { self.batch.push_or_map(fill) } {
                break;
            }
        }
        let sent = self.batch.len();
        if sent > 0 {
            // An unconnected socket (a control address to listen on) names the destination.
            let destination = served.control_socket.is_some().then_some(served.destination);
            // Datagrams that would block are dropped: a NAK repairs them.
            let outcome = self.batch.send(&served.socket, destination, &mut served.offload);
            let _ = self.counters.bytes_sent.add(outcome.bytes as i64);
            let _ = self.counters.datagrams_sent.add(outcome.datagrams as i64);
            if outcome.errors > 0 {
                let _ = self.counters.send_errors.add(outcome.errors as i64);
            }
            if let Some(errno) = outcome.offload_refused {
                let error = std::io::Error::from_raw_os_error(errno);
                let _ = self.events.send(AgentEvent::Error(format!(
                    "{}: UDP segmentation offload refused ({error}); sending one datagram at a time",
                    served.channel
                )));
            }
        }
        work += sent;
        served.control_poll.sent = sent > 0;
        if sent == 0 || now.saturating_since(served.last_idle) >= IDLE_INTERVAL {
            served.publication.on_idle(now);
            served.last_idle = now;
        }
        if sent == 0 {
            served.populate.advance(served.publication.log(), served.publication.tail_position());
        }
        let publication = &served.publication;
        let term_length = i64::from(publication.identity().term_length);
        let _ = publication.log().clean_to(&mut served.clean_position, publication.sender_position() - term_length);
        let stream = &served.stream_counters;
        let _ = stream.publisher_limit.set(publication.publisher_limit());
        let _ = stream.sender_position.set(publication.sender_position());
        let _ = stream.publisher_position.set(publication.tail_position());
        let _ = stream.sender_limit.set(publication.sender_limit());
        let _ = stream.flow_control_receivers.set(publication.flow_control().receiver_count() as i64);
        let connected = publication.is_connected();
        let changed = (connected != served.connected).then(|| publication.log().clone());
        served.connected = connected;
        let counters = publication.counters();
        let delta = |now: u64, before: u64| now.saturating_sub(before) as i64;
        let _ = self.counters.retransmits.add(delta(counters.retransmits_sent, served.reported.retransmits_sent));
        let _ = self.counters.heartbeats_sent.add(delta(counters.heartbeats_sent, served.reported.heartbeats_sent));
        if counters.unblocked_claims > served.reported.unblocked_claims {
            let identity = publication.identity();
            let _ = self.events.send(AgentEvent::ClaimUnblocked(unblocked_message(
                &served.channel,
                identity.session_id,
                identity.stream_id,
                publication.sender_position(),
                counters.unblocked_bytes - served.reported.unblocked_bytes,
            )));
        }
        served.reported = counters;
        // Events first, then the flag (through the same queue): whoever sees the flag change
        // finds the events that explain it already broadcast.
        self.drain_events(index);
        if let Some(log) = changed {
            let _ = self.events.send(AgentEvent::SetConnected { log, connected });
        }
        work
    }

    fn receive_control(&mut self, index: usize, now: Instant) -> usize {
        let mut work = 0;
        for use_control_socket in [false, true] {
            for _ in 0..self.datagrams_per_cycle {
                let served = &mut self.publications[index];
                let socket = match (use_control_socket, &served.control_socket) {
                    (false, _) => &served.socket,
                    (true, Some(socket)) => socket,
                    (true, None) => break,
                };
                let length = match socket.recv_from(&mut self.input) {
                    Ok((length, _)) => length,
                    Err(_) => break,
                };
                work += 1;
                let datagram = &self.input[..length];
                let frame = match parse_control(datagram) {
                    Ok(Some(frame)) => frame,
                    Ok(None) => continue,
                    Err(_) => {
                        on_malformed(served, datagram, &self.counters);
                        continue;
                    }
                };
                if matches!(frame, ControlFrame::StatusMessage(_)) && !has_status_message_length(datagram) {
                    on_malformed(served, datagram, &self.counters);
                    continue;
                }
                let identity = *served.publication.identity();
                let matches =
                    |session: i32, stream: i32| session == identity.session_id && stream == identity.stream_id;
                let publication = &mut served.publication;
                match frame {
                    ControlFrame::StatusMessage(message)
                        if matches(message.session_id, message.stream_id)
                            || (message.is_send_setup() && message.session_id == 0) =>
                    {
                        let _ = self.counters.status_messages_received.add(1);
                        publication.on_status_message(&message, now)
                    }
                    ControlFrame::Nak(nak) if matches(nak.session_id, nak.stream_id) => {
                        let _ = self.counters.naks_received.add(1);
                        publication.on_nak(&nak, now)
                    }
                    ControlFrame::Error(error) if matches(error.session_id, error.stream_id) => {
                        publication.on_error(&error, now)
                    }
                    ControlFrame::Rttm(request) if matches(request.session_id, request.stream_id) => {
                        if let Some(reply) = publication.on_rtt_measurement(&request) {
                            let length = reply.emit(&mut self.out);
                            let _ = served.socket.send_to(&self.out[..length], served.destination);
                        }
                    }
                    _ => {}
                }
            }
        }
        work
    }

    /// Sends the publication's queued events to the conductor as [`Response::DriverEvent`]s.
    fn drain_events(&mut self, index: usize) {
        let served = &mut self.publications[index];
        while let Some(event) = served.publication.poll_event() {
            let identity = *served.publication.identity();
            let event = DriverEvent {
                time: std::time::SystemTime::now(),
                publication_id: served.registration_id as u64,
                channel: served.channel.clone(),
                stream_id: identity.stream_id,
                session_id: identity.session_id,
                kind: event.into(),
            };
            match serde_json::to_string(&event_info(&event)) {
                Ok(json) => {
                    let response = Response::DriverEvent { publication_registration_id: served.registration_id, json };
                    let _ = self.events.send(AgentEvent::Respond(response));
                }
                Err(e) => {
                    let _ = self.events.send(AgentEvent::Error(format!("driver event not encodable: {e}")));
                }
            }
        }
    }
}

/// Messages whose first fragment lies in `[from, to)` of `log`, and where the last frame
/// starting before `to` ends (the publication's tail is bounded by its window, which may cut the
/// last message). Client-written frame lengths are untrusted: each step moves at least one frame
/// alignment, so the walk is bounded by `(to - from) / FRAME_ALIGNMENT` (and `to - from` by the
/// publication window); it stops at the first frame not committed.
fn frames_between(log: &LogBuffer, from: i64, to: i64) -> (u64, i64) {
    let term_length = i64::from(log.term_length());
    let position_bits = term_length.trailing_zeros();
    let mut position = from;
    let mut messages = 0;
    while position < to {
        let offset = (position & (term_length - 1)) as usize;
        let Some(term) = log.term(partition_index(position >> position_bits)) else { break };
        let (Ok(length), Ok(word)) = (term.get_i32_acquire(offset), term.get_i32(offset + 4)) else { break };
        let Ok(length) = usize::try_from(length) else { break };
        // Not committed yet, or a length no frame can have (frames never cross a term's end).
        if length == 0 || offset + align_frame(length) > term_length as usize {
            break;
        }
        let [_version, frame_flags, type_low, type_high] = word.to_le_bytes();
        if i16::from_le_bytes([type_low, type_high]) != FrameType::Pad.code() && frame_flags & flags::BEGIN != 0 {
            messages += 1;
        }
        position = position.saturating_add(align_frame(length) as i64);
    }
    (messages, position)
}

fn close(served: &mut Served) {
    if let Ok(tail) = served.publication.log().tail_position() {
        served.publication.on_tail(tail);
    }
    served.publication.close();
}

/// A control datagram that failed validation: counted by the publication it names (when
/// session and stream are readable and match), and by the driver; never processed.
fn on_malformed(served: &mut Served, datagram: &[u8], counters: &SenderCounters) {
    let _ = counters.invalid_control_frames.add(1);
    if let (Some(session), Some(stream)) = (read_i32_at(datagram, 8), read_i32_at(datagram, 12)) {
        let identity = *served.publication.identity();
        if session == identity.session_id && stream == identity.stream_id {
            served.publication.on_malformed_control_frame();
        }
    }
}

/// Whether a status message has a valid length: 36 (no group tag) or 44 (with tag).
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
    let field = bytes.get(offset..offset.checked_add(4)?)?;
    Some(i32::from_le_bytes([field[0], field[1], field[2], field[3]]))
}

/// The status record of a publication (the receiver lists bounded).
pub fn publication_info<L: crate::logbuffer::SenderLog>(publication: &NetworkPublication<L>) -> PublicationInfo {
    let status = publication.status();
    let receivers = status
        .group_receivers
        .iter()
        .take(MAX_RECEIVERS_IN_STATUS)
        .map(|r| ReceiverInfo {
            receiver_id: r.receiver_id,
            group_tag: r.group_tag,
            position: r.position,
            window: r.window,
        })
        .collect();
    let live_receivers = status
        .live_receivers
        .iter()
        .take(MAX_RECEIVERS_IN_STATUS)
        .map(|r| ReceiverInfo {
            receiver_id: r.receiver_id,
            group_tag: r.group_tag,
            position: r.position,
            window: r.window,
        })
        .collect();
    let c = status.counters;
    PublicationInfo {
        session_id: status.session_id,
        stream_id: status.stream_id,
        position: status.tail_position,
        sender_position: status.sender_position,
        sender_limit: status.sender_limit,
        publisher_limit: status.publisher_limit,
        connected: status.connected,
        closed: status.closed,
        strategy: status.strategy.to_owned(),
        group_tag: status.group_tag,
        group_min_size: status.group_min_size,
        receiver_timeout_ms: status.receiver_timeout.as_millis() as u64,
        receivers,
        live_receivers,
        status_messages: c.status_messages,
        naks_received: c.naks_received,
        naks_ignored: c.naks_ignored,
        retransmits_sent: c.retransmits_sent,
        retransmitted_bytes: c.retransmitted_bytes,
        datagrams_sent: c.datagrams_sent,
        bytes_sent: c.bytes_sent,
        heartbeats_sent: c.heartbeats_sent,
        setups_sent: c.setups_sent,
        errors_received: c.errors_received,
        invalid_control_frames: c.invalid_control_frames,
    }
}

/// The record of a driver event (texts bounded).
pub fn event_info(event: &DriverEvent) -> DriverEventInfo {
    let kind = match &event.kind {
        DriverEventKind::ReceiverJoined { receiver_id, group_tag } => {
            DriverEventKindInfo::ReceiverJoined { receiver_id: *receiver_id, group_tag: *group_tag }
        }
        DriverEventKind::ReceiverRemoved { receiver_id, group_tag, reason } => DriverEventKindInfo::ReceiverRemoved {
            receiver_id: *receiver_id,
            group_tag: *group_tag,
            reason: reason_name(*reason).to_owned(),
        },
        DriverEventKind::ConnectionChanged { connected } => {
            DriverEventKindInfo::ConnectionChanged { connected: *connected }
        }
        DriverEventKind::ReceiverError { receiver_id, code, message } => DriverEventKindInfo::ReceiverError {
            receiver_id: *receiver_id,
            code: *code,
            error: bounded_text(message, MAX_EVENT_TEXT),
        },
    };
    DriverEventInfo {
        time: event.time.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0),
        level: event.level().to_owned(),
        channel: bounded_text(&event.channel, MAX_EVENT_TEXT),
        stream_id: event.stream_id,
        session_id: event.session_id,
        kind,
        message: bounded_text(&event.to_string(), 3 * MAX_EVENT_TEXT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_is_read_after_an_idle_cycle_and_every_ratio_cycles_while_sending() {
        let start = Instant::from_nanos(1_000_000);
        let mut poll = ControlPoll::new(start);
        // Nothing sent yet: every cycle reads.
        assert!(poll.due(start));
        assert!(poll.due(start));
        poll.sent = true;
        let reads: Vec<bool> = (0..2 * CONTROL_POLL_RATIO).map(|_| poll.due(start)).collect();
        let expected: Vec<bool> = (1..=2 * CONTROL_POLL_RATIO).map(|cycle| cycle % CONTROL_POLL_RATIO == 0).collect();
        assert_eq!(reads, expected, "a sending publication reads once per {CONTROL_POLL_RATIO} cycles");
        // A cycle that sent nothing: the next one reads at once.
        assert!(!poll.due(start));
        poll.sent = false;
        assert!(poll.due(start));
        // Still sending, but the interval passed since the last read: it reads.
        poll.sent = true;
        assert!(!poll.due(start + IDLE_INTERVAL / 2));
        assert!(poll.due(start + IDLE_INTERVAL));
        assert!(!poll.due(start + IDLE_INTERVAL));
    }
}
