//! The sending side of one network publication, as a sans-IO state machine.
//!
//! Inputs: `offer` (from the application), status messages, NAKs, RTT measurements and error
//! frames (from receivers), and the time. Output: datagrams from [`NetworkPublication::poll_transmit`]
//! (SETUP until the first status message, data within the flow-control limit, retransmits,
//! heartbeats when idle). See `shared/docs/wire-protocol.md` §6 and §7.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::defaults;
use super::retransmit::{ResendRange, RetransmitHandler};
use crate::flow_control::{FlowControl, FlowControlEvent, StatusMessageInput, TrackedReceiver};
use crate::logbuffer::position::fragmented_length;
use crate::logbuffer::{Offer, SenderLog, StreamIdentity};
use crate::time::Instant;
use crate::wire::{
    flags, DataHeader, ErrorFrame, FrameType, Nak, RttMeasurement, Setup, StatusMessage, DATA_HEADER_LENGTH,
};

/// Fixed protocol timers (Aeron hard-codes these too).
pub const SETUP_INTERVAL: Duration = Duration::from_millis(100);
/// Idle time after which a heartbeat is sent.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// Why an `offer` did not append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferError {
    /// No receiver (or not enough of them for the flow-control group) is connected.
    NotConnected,
    /// The publication window is full: the receivers have not caught up yet.
    BackPressured,
    /// The term rotated; retry (kept for API parity, `offer` retries internally).
    AdminAction,
    /// The publication was closed.
    Closed,
    /// The stream reached its maximum position.
    MaxPositionExceeded,
    /// The message is longer than the term allows (`min(term_length / 8, 16 MiB)`).
    MessageTooLong {
        /// Bytes offered.
        length: usize,
        /// The maximum.
        max: usize,
    },
}

impl OfferError {
    /// The Aeron result code for this outcome (negative).
    pub fn code(self) -> i64 {
        match self {
            OfferError::NotConnected => -1,
            OfferError::BackPressured => -2,
            OfferError::AdminAction => -3,
            OfferError::Closed => -4,
            OfferError::MaxPositionExceeded => -5,
            OfferError::MessageTooLong { .. } => -6,
        }
    }
}

/// Settings of one publication, resolved from its channel URI and the driver defaults.
#[derive(Clone, Debug)]
pub struct PublicationConfig {
    /// Session, stream, initial term id and term length.
    pub identity: StreamIdentity,
    /// Position the stream starts at (non-zero with `init-term-id|term-id|term-offset`).
    pub initial_position: i64,
    /// Largest datagram, headers included.
    pub mtu: u32,
    /// How far the application may write ahead of the sender position.
    pub publication_window: u32,
    /// Multicast TTL copied into SETUP frames.
    pub ttl: u8,
    /// Group semantics (multicast): SETUP carries the GROUP flag.
    pub is_group: bool,
    /// How long the publication keeps serving retransmits after it was closed and drained.
    pub linger: Duration,
    /// A receiver is forgotten after this long without a status message.
    pub connection_timeout: Duration,
    /// Delay before resending a NAKed range.
    pub retransmit_delay: Duration,
    /// How long a resent range ignores further NAKs.
    pub retransmit_linger: Duration,
    /// Concurrent retransmit actions (`max-resend`, Aeron's 16 by default); NAKs beyond are
    /// ignored and counted, never replace an action.
    pub max_resend: usize,
    /// Whether heartbeats carry the EOS flag once closed and drained.
    pub signal_eos: bool,
    /// How long the sender may stand at a frame no writer commits, with the tail beyond it,
    /// before the claim is padded over ([`SenderLog::unblock`]; Aeron's publication unblock
    /// timeout): its writer died while appending. `None` where the publication's own process is
    /// the log's only writer (in-process); the media driver sets it from its client timeout.
    pub unblock_timeout: Option<Duration>,
}

impl PublicationConfig {
    /// A unicast publication of `identity` starting at `initial_position` with the protocol's
    /// defaults: MTU 1408, a window of half a term, 5 s linger and connection timeout, resend
    /// at once and linger 10 ms, 16 retransmit actions, EOS on close.
    pub fn new(identity: StreamIdentity, initial_position: i64) -> Self {
        PublicationConfig {
            identity,
            initial_position,
            mtu: defaults::MTU,
            publication_window: identity.term_length / 2,
            ttl: 0,
            is_group: false,
            linger: defaults::PUBLICATION_LINGER,
            connection_timeout: defaults::PUBLICATION_CONNECTION_TIMEOUT,
            retransmit_delay: defaults::RETRANSMIT_DELAY,
            retransmit_linger: defaults::RETRANSMIT_LINGER,
            max_resend: defaults::MAX_RESEND as usize,
            signal_eos: true,
            unblock_timeout: None,
        }
    }
}

/// Events a publication reports to the driver's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicationEvent {
    /// The connected flag changed.
    ConnectionChanged {
        /// New value.
        connected: bool,
    },
    /// A flow-control group change (receiver added or removed).
    FlowControl(FlowControlEvent),
    /// A receiver rejected the stream with an error frame.
    ReceiverError {
        /// Receiver endpoint id.
        receiver_id: i64,
        /// Error code from the frame.
        code: i32,
        /// Error text.
        message: String,
    },
}

/// Counters of one publication.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PublicationCounters {
    /// Status messages processed.
    pub status_messages: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// Datagrams resent.
    pub retransmits_sent: u64,
    /// Bytes resent.
    pub retransmitted_bytes: u64,
    /// DATA datagrams sent (first transmission).
    pub datagrams_sent: u64,
    /// Bytes sent (first transmission).
    pub bytes_sent: u64,
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// SETUP frames sent.
    pub setups_sent: u64,
    /// NAKs dropped as out of range or over the resend limit.
    pub naks_ignored: u64,
    /// Error frames received.
    pub errors_received: u64,
    /// Control frames for this publication that were malformed (bad length, unknown group-tag
    /// length, negative receiver window) and ignored.
    pub invalid_control_frames: u64,
    /// Status messages from new receivers refused because the publication already tracks
    /// [`defaults::MAX_RECEIVERS_PER_PUBLICATION`] receivers.
    pub receivers_refused: u64,
    /// Claims padded over because their writer never committed them ([`SenderLog::unblock`]).
    pub unblocked_claims: u64,
    /// Bytes of log those claims covered (lost: their writers died while appending them).
    pub unblocked_bytes: u64,
}

/// A receiver the publication heard from within the connection timeout (any strategy, any
/// tag: this is the liveness set behind "connected", not the flow-control group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveReceiver {
    /// The receiver endpoint's id.
    pub receiver_id: i64,
    /// The group tag of its last status message.
    pub group_tag: Option<i64>,
    /// The consumption position of its last status message.
    pub position: i64,
    /// The window of its last status message.
    pub window: i32,
    /// When its last status message arrived.
    pub last_status_message: Instant,
}

/// A snapshot of a publication for counters and monitoring (`NetworkPublication::status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicationStatus {
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// End of the last appended message (publisher position).
    pub tail_position: i64,
    /// Bytes before this position have been sent at least once.
    pub sender_position: i64,
    /// The flow-control sender limit.
    pub sender_limit: i64,
    /// How far the application may append.
    pub publisher_limit: i64,
    /// Whether the application may publish (enough live receivers for the strategy).
    pub connected: bool,
    /// Whether the publication was closed.
    pub closed: bool,
    /// Flow-control strategy name: `unicast`, `max`, `min` or `tagged`.
    pub strategy: &'static str,
    /// Group tag the strategy tracks (`tagged` only).
    pub group_tag: Option<i64>,
    /// Tracked receivers required before the publication is connected.
    pub group_min_size: u32,
    /// How long a silent receiver stays in the flow-control group.
    pub receiver_timeout: Duration,
    /// Receivers in the flow-control group (empty for `unicast` and `max`, which track none).
    pub group_receivers: Vec<TrackedReceiver>,
    /// Every receiver heard from within the connection timeout, tagged or not, sorted by id.
    pub live_receivers: Vec<LiveReceiver>,
    /// The publication's counters.
    pub counters: PublicationCounters,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifecycle {
    Active,
    /// The application closed the publication at this final position.
    Draining {
        end_position: i64,
    },
    /// Everything was sent; retransmits are served until `until`.
    Lingering {
        end_position: i64,
        until: Instant,
    },
    /// Nothing more to do: the driver may free it.
    Done,
}

/// A datagram a publication has to send ([`NetworkPublication::poll_transmit_in_place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transmit {
    /// This many bytes were written into the caller's buffer (a SETUP or a heartbeat).
    Written(usize),
    /// The datagram is `length` bytes of the log from `position` on, whole frames of one term,
    /// to be sent as they lie (a padding frame is its header alone).
    Log {
        /// Where the datagram starts in the stream.
        position: i64,
        /// Its length in bytes.
        length: usize,
    },
}

impl Transmit {
    /// The datagram's length in bytes.
    pub fn length(&self) -> usize {
        match *self {
            Transmit::Written(length) | Transmit::Log { length, .. } => length,
        }
    }
}

/// The sending side of one publication, over a log `L` (the media driver's shared log, which
/// clients append to and whose tail the driver passes on with [`NetworkPublication::on_tail`];
/// or, in-process, a log the publication appends to itself with [`NetworkPublication::offer`]).
pub struct NetworkPublication<L> {
    config: PublicationConfig,
    log: L,
    tail: i64,
    sender_position: i64,
    sender_limit: i64,
    flow_control: Box<dyn FlowControl>,
    has_initial_connection: bool,
    should_send_setup: bool,
    last_setup: Option<Instant>,
    last_send: Instant,
    receivers: HashMap<i64, LiveReceiver>,
    connected: bool,
    retransmits: RetransmitHandler,
    resend_cursor: Option<(i64, i64)>,
    lifecycle: Lifecycle,
    counters: PublicationCounters,
    events: VecDeque<PublicationEvent>,
    /// Where the sender stood, and since when, while the tail lay beyond it (to unblock a claim
    /// never committed).
    stalled: Option<(i64, Instant)>,
}

impl<L> std::fmt::Debug for NetworkPublication<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkPublication")
            .field("identity", &self.config.identity)
            .field("tail", &self.tail)
            .field("sender_position", &self.sender_position)
            .field("sender_limit", &self.sender_limit)
            .field("connected", &self.connected)
            .finish_non_exhaustive()
    }
}

impl<L: SenderLog> NetworkPublication<L> {
    /// Appends one message through the log's appender (the application in this process is the
    /// log's only writer); returns the new stream position.
    pub fn offer(&mut self, payload: &[u8], reserved_value: i64) -> Result<i64, OfferError> {
        if self.lifecycle != Lifecycle::Active {
            return Err(OfferError::Closed);
        }
        if !self.connected {
            return Err(OfferError::NotConnected);
        }
        let max = self.log.max_message_length();
        if payload.len() > max {
            return Err(OfferError::MessageTooLong { length: payload.len(), max });
        }
        let limit = self.publisher_limit();
        let max_payload = self.config.mtu as usize - DATA_HEADER_LENGTH;
        let needed = fragmented_length(payload.len(), max_payload).max(DATA_HEADER_LENGTH) as i64;
        let term_mask = i64::from(self.config.identity.term_length) - 1;
        for _ in 0..2 {
            // The whole message within the window (the log's own check lets one message cross it).
            if self.tail + needed > limit {
                return Err(OfferError::BackPressured);
            }
            match self.log.append(payload, reserved_value, limit) {
                Offer::Appended(tail) => {
                    self.tail = tail;
                    return Ok(tail);
                }
                // The rest of the term was padded and the log rotated: the next term starts there.
                Offer::AdminAction => self.tail = (self.tail + term_mask) & !term_mask,
                Offer::BackPressured => return Err(OfferError::BackPressured),
                Offer::MaxPositionExceeded => return Err(OfferError::MaxPositionExceeded),
            }
        }
        Err(OfferError::AdminAction)
    }

    /// A new publication over `log` (whose geometry matches `config.identity`) that will start
    /// announcing itself with SETUP frames.
    pub fn with_log(config: PublicationConfig, log: L, flow_control: Box<dyn FlowControl>, now: Instant) -> Self {
        let start = config.initial_position;
        let retransmits = RetransmitHandler::new(config.max_resend, config.retransmit_delay, config.retransmit_linger);
        NetworkPublication {
            log,
            tail: start,
            sender_position: start,
            sender_limit: start,
            flow_control,
            has_initial_connection: false,
            should_send_setup: false,
            last_setup: None,
            last_send: now,
            receivers: HashMap::new(),
            connected: false,
            retransmits,
            resend_cursor: None,
            lifecycle: Lifecycle::Active,
            counters: PublicationCounters::default(),
            events: VecDeque::new(),
            stalled: None,
            config,
        }
    }

    /// Session, stream and term geometry.
    pub fn identity(&self) -> &StreamIdentity {
        &self.config.identity
    }

    /// The configuration the publication was created with.
    pub fn config(&self) -> &PublicationConfig {
        &self.config
    }

    /// Whether enough receivers are live for the application to publish.
    pub fn is_connected(&self) -> bool {
        self.connected && self.lifecycle == Lifecycle::Active
    }

    /// Whether the application closed the publication.
    pub fn is_closed(&self) -> bool {
        self.lifecycle != Lifecycle::Active
    }

    /// Whether the driver can free the publication.
    pub fn is_done(&self) -> bool {
        self.lifecycle == Lifecycle::Done
    }

    /// The end of the last appended message.
    pub fn tail_position(&self) -> i64 {
        self.tail
    }

    /// Bytes before this position have been sent at least once.
    pub fn sender_position(&self) -> i64 {
        self.sender_position
    }

    /// The flow-control limit: data may be sent up to here.
    pub fn sender_limit(&self) -> i64 {
        self.sender_limit
    }

    /// How far the application may append: sender position + publication window.
    pub fn publisher_limit(&self) -> i64 {
        if self.is_connected() {
            self.sender_position + self.config.publication_window as i64
        } else {
            self.sender_position
        }
    }

    /// The flow-control strategy (for counters).
    pub fn flow_control(&self) -> &dyn FlowControl {
        self.flow_control.as_ref()
    }

    /// The counters.
    pub fn counters(&self) -> PublicationCounters {
        let mut counters = self.counters;
        counters.naks_ignored += self.retransmits.overflows();
        counters
    }

    /// Whether appended data has not been sent yet while some receiver is still listening (a
    /// closing driver keeps working until this is false, within a bound).
    pub fn has_unsent_data(&self) -> bool {
        !self.receivers.is_empty() && self.sender_position < self.tail
    }

    /// Number of receivers heard from within the connection timeout.
    pub fn live_receivers(&self) -> usize {
        self.receivers.len()
    }

    /// A snapshot of positions, strategy, receivers and counters.
    pub fn status(&self) -> PublicationStatus {
        let mut live_receivers: Vec<LiveReceiver> = self.receivers.values().copied().collect();
        live_receivers.sort_by_key(|receiver| receiver.receiver_id);
        let flow_control = self.flow_control.as_ref();
        PublicationStatus {
            session_id: self.config.identity.session_id,
            stream_id: self.config.identity.stream_id,
            tail_position: self.tail,
            sender_position: self.sender_position,
            sender_limit: self.sender_limit,
            publisher_limit: self.publisher_limit(),
            connected: self.is_connected(),
            closed: self.is_closed(),
            strategy: flow_control.strategy_name(),
            group_tag: flow_control.group_tag(),
            group_min_size: flow_control.group_min_size(),
            receiver_timeout: flow_control.receiver_timeout(),
            group_receivers: flow_control.receivers(),
            live_receivers,
            counters: self.counters(),
        }
    }

    /// A control frame naming this publication failed validation; it is counted and ignored.
    pub fn on_malformed_control_frame(&mut self) {
        self.counters.invalid_control_frames += 1;
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<PublicationEvent> {
        while let Some(event) = self.flow_control.poll_event() {
            self.events.push_back(PublicationEvent::FlowControl(event));
        }
        self.events.pop_front()
    }

    /// The largest message `offer` accepts.
    pub fn max_message_length(&self) -> usize {
        self.log.max_message_length()
    }

    /// The log's tail moved (clients appended to a shared log): frames up to `tail` may be
    /// committed. The tail is untrusted (clients write it): it never moves back, and never past
    /// what the publisher limit allowed: `sender position + publication window`, plus the
    /// longest message, since an offer that starts below the limit may end past it (Aeron's
    /// rule). Were the tail cut inside that last message, a publication closed right after it
    /// would drain to a position no frame ends at, and never send the message.
    pub fn on_tail(&mut self, tail: i64) {
        if self.lifecycle != Lifecycle::Active {
            return;
        }
        let max_payload = self.config.mtu as usize - DATA_HEADER_LENGTH;
        let longest_claim = fragmented_length(self.log.max_message_length(), max_payload) as i64;
        let bound = self
            .sender_position
            .saturating_add(i64::from(self.config.publication_window))
            .saturating_add(longest_claim);
        self.tail = self.tail.max(tail.min(bound));
    }

    /// The log the publication reads.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The application closed the publication: drain what was appended, then signal EOS.
    pub fn close(&mut self) {
        if self.lifecycle == Lifecycle::Active {
            self.lifecycle = Lifecycle::Draining { end_position: self.tail };
        }
    }

    /// A status message for this session and stream.
    pub fn on_status_message(&mut self, message: &StatusMessage, now: Instant) {
        if message.flags & flags::SM_SEND_SETUP != 0 {
            if self.lifecycle == Lifecycle::Active {
                self.should_send_setup = true;
                self.flow_control.on_trigger_send_setup(message.receiver_id, message.group_tag, now);
            }
            return;
        }
        let term_length = self.config.identity.term_length as i64;
        if message.receiver_window < 0
            || message.consumption_term_offset < 0
            || i64::from(message.consumption_term_offset) > term_length
        {
            // A negative window would drag min/tagged limits backwards; hostile or broken.
            self.counters.invalid_control_frames += 1;
            return;
        }
        let end_of_stream = message.flags & flags::SM_EOS != 0;
        let is_new = !self.receivers.contains_key(&message.receiver_id);
        if is_new && !end_of_stream {
            if !self.config.is_group {
                // Unicast: one receiver; a new one replaces it.
                self.receivers.clear();
            } else if self.receivers.len() >= defaults::MAX_RECEIVERS_PER_PUBLICATION {
                self.counters.receivers_refused += 1;
                return;
            }
        }
        self.counters.status_messages += 1;
        // Aeron's largest receiver window: a quarter of the term.
        let window = message.receiver_window.min((term_length / 4) as i32);
        let identity = self.config.identity;
        let position = identity.position(message.consumption_term_id, message.consumption_term_offset);
        if end_of_stream {
            self.receivers.remove(&message.receiver_id);
        } else {
            self.receivers.insert(
                message.receiver_id,
                LiveReceiver {
                    receiver_id: message.receiver_id,
                    group_tag: message.group_tag,
                    position,
                    window,
                    last_status_message: now,
                },
            );
        }
        let input = StatusMessageInput {
            receiver_id: message.receiver_id,
            consumption_position: position,
            receiver_window: window,
            group_tag: message.group_tag,
            end_of_stream,
        };
        self.sender_limit = self.flow_control.on_status_message(&input, self.sender_limit, self.sender_position, now);
        self.has_initial_connection = true;
        if end_of_stream && !self.config.is_group && self.receivers.is_empty() {
            // Unicast: the only receiver left; stop lingering early.
            if let Lifecycle::Lingering { end_position, .. } = self.lifecycle {
                self.lifecycle = Lifecycle::Lingering { end_position, until: now };
            }
        }
        self.update_connected();
    }

    /// A NAK for this session and stream.
    pub fn on_nak(&mut self, nak: &Nak, now: Instant) {
        self.counters.naks_received += 1;
        let term_length = self.config.identity.term_length;
        if nak.term_offset < 0 || nak.term_offset as i64 > term_length as i64 - 32 || nak.length <= 0 {
            self.counters.naks_ignored += 1;
            return;
        }
        let position = self.config.identity.position(nak.term_id, nak.term_offset);
        let lowest = self.sender_position - (term_length / 2) as i64 - self.log.max_message_length() as i64;
        if position < lowest.max(self.config.initial_position) || position >= self.sender_position {
            self.counters.naks_ignored += 1;
            return;
        }
        let length = self.flow_control.max_retransmission_length(
            nak.term_offset,
            nak.length as usize,
            term_length,
            self.config.mtu,
        );
        self.retransmits.on_nak(nak.term_id, nak.term_offset, length, now);
    }

    /// An RTT measurement request: the reply to send back, if one is asked for.
    pub fn on_rtt_measurement(&mut self, frame: &RttMeasurement) -> Option<RttMeasurement> {
        (frame.flags & flags::RTTM_REPLY != 0).then_some(RttMeasurement {
            flags: 0,
            session_id: frame.session_id,
            stream_id: frame.stream_id,
            echo_timestamp_ns: frame.echo_timestamp_ns,
            reception_delta_ns: 0,
            receiver_id: frame.receiver_id,
        })
    }

    /// An error frame from a receiver (it rejected the image).
    pub fn on_error(&mut self, frame: &ErrorFrame, now: Instant) {
        self.counters.errors_received += 1;
        self.receivers.remove(&frame.receiver_id);
        self.flow_control.on_error(frame.receiver_id, frame.group_tag(), now);
        self.events.push_back(PublicationEvent::ReceiverError {
            receiver_id: frame.receiver_id,
            code: frame.error_code,
            message: String::from_utf8_lossy(&frame.message).into_owned(),
        });
        self.update_connected();
    }

    /// Periodic work when nothing was sent: flow-control idle, receiver expiry, lifecycle.
    pub fn on_idle(&mut self, now: Instant) {
        let is_end_of_stream = !matches!(self.lifecycle, Lifecycle::Active);
        self.sender_limit = self.flow_control.on_idle(now, self.sender_limit, self.sender_position, is_end_of_stream);
        let timeout = self.config.connection_timeout;
        self.receivers.retain(|_, receiver| now.saturating_since(receiver.last_status_message) < timeout);
        self.retransmits.expire(now);
        self.update_connected();
        self.unblock_if_stalled(now);
        match self.lifecycle {
            Lifecycle::Draining { end_position } if self.sender_position >= end_position => {
                self.lifecycle = Lifecycle::Lingering { end_position, until: now + self.config.linger };
            }
            Lifecycle::Lingering { until, .. } if now >= until => self.lifecycle = Lifecycle::Done,
            _ => {}
        }
    }

    /// Pads over the claim at the sender position once the sender has stood there for the
    /// unblock timeout with the tail beyond it and the frame there still uncommitted (the log
    /// decides: a committed frame the sender waits to send, say for flow control, is left alone).
    fn unblock_if_stalled(&mut self, now: Instant) {
        let Some(timeout) = self.config.unblock_timeout else { return };
        let position = self.sender_position;
        let end = match self.lifecycle {
            Lifecycle::Draining { end_position } | Lifecycle::Lingering { end_position, .. } => end_position,
            _ => self.tail,
        };
        if end <= position {
            self.stalled = None;
            return;
        }
        match self.stalled {
            Some((at, since)) if at == position => {
                if now.saturating_since(since) >= timeout {
                    let padded = self.log.unblock(position, end, self.is_closed());
                    if padded > 0 {
                        self.counters.unblocked_claims += 1;
                        self.counters.unblocked_bytes += padded as u64;
                    }
                    self.stalled = Some((position, now));
                }
            }
            _ => self.stalled = Some((position, now)),
        }
    }

    fn update_connected(&mut self) {
        let connected = !self.receivers.is_empty() && self.flow_control.has_required_receivers();
        if connected != self.connected {
            self.connected = connected;
            self.events.push_back(PublicationEvent::ConnectionChanged { connected });
        }
    }

    /// The next datagram to send, written into `out` (at least `mtu` bytes); returns its length.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        match self.next_transmit(now, out, false)? {
            Transmit::Written(length) => Some(length),
            // Not produced when copying; a log range would have been copied into `out`.
            Transmit::Log { length, .. } => Some(length),
        }
    }

    /// The next datagram to send, as [`Self::poll_transmit`], except that a datagram of log
    /// frames (new data or a retransmit) is not copied: it is named as the range of the log
    /// that holds it ([`Transmit::Log`]), for a caller that sends it from the log as it lies.
    /// SETUPs and heartbeats are still written into `out` ([`Transmit::Written`]).
    pub fn poll_transmit_in_place(&mut self, now: Instant, out: &mut [u8]) -> Option<Transmit> {
        self.next_transmit(now, out, true)
    }

    fn next_transmit(&mut self, now: Instant, out: &mut [u8], in_place: bool) -> Option<Transmit> {
        if self.lifecycle == Lifecycle::Done {
            return None;
        }
        let setup_due = self.last_setup.is_none_or(|last| now.saturating_since(last) >= SETUP_INTERVAL);
        if (!self.has_initial_connection || self.should_send_setup) && setup_due && self.lifecycle == Lifecycle::Active
        {
            return Some(Transmit::Written(self.emit_setup(now, out)));
        }
        if !self.has_initial_connection {
            return None;
        }
        if let Some(transmit) = self.poll_retransmit(now, out, in_place) {
            return Some(transmit);
        }
        let available = self.tail.min(self.sender_limit) - self.sender_position;
        if available > 0 {
            let position = self.sender_position;
            let (transmit, advance) = self.scan_datagram(position, available, out, in_place);
            if advance > 0 {
                self.sender_position += advance;
                self.last_send = now;
                self.counters.datagrams_sent += 1;
                self.counters.bytes_sent += transmit.length() as u64;
                return Some(transmit);
            }
        }
        if now.saturating_since(self.last_send) >= HEARTBEAT_INTERVAL {
            self.last_send = now;
            self.counters.heartbeats_sent += 1;
            return Some(Transmit::Written(self.emit_heartbeat(out)));
        }
        None
    }

    fn emit_setup(&mut self, now: Instant, out: &mut [u8]) -> usize {
        let identity = self.config.identity;
        let setup = Setup {
            flags: if self.config.is_group { flags::SETUP_GROUP } else { 0 },
            term_offset: identity.term_offset(self.sender_position),
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            initial_term_id: identity.initial_term_id,
            active_term_id: identity.term_id(self.sender_position),
            term_length: identity.term_length as i32,
            mtu: self.config.mtu as i32,
            ttl: self.config.ttl as i32,
        };
        self.last_setup = Some(now);
        self.counters.setups_sent += 1;
        if self.should_send_setup && !self.receivers.is_empty() {
            self.should_send_setup = false;
        }
        self.sender_limit = self.flow_control.on_setup(self.sender_limit, self.sender_position, now);
        setup.emit(out)
    }

    fn emit_heartbeat(&self, out: &mut [u8]) -> usize {
        let identity = self.config.identity;
        let eos = self.config.signal_eos
            && match self.lifecycle {
                Lifecycle::Draining { end_position } | Lifecycle::Lingering { end_position, .. } => {
                    self.sender_position >= end_position
                }
                _ => false,
            };
        let header = DataHeader {
            frame_length: 0,
            flags: if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED },
            frame_type: FrameType::Data,
            term_offset: identity.term_offset(self.sender_position),
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            term_id: identity.term_id(self.sender_position),
            reserved_value: 0,
        };
        header.emit(&mut out[..DATA_HEADER_LENGTH]);
        DATA_HEADER_LENGTH
    }

    fn poll_retransmit(&mut self, now: Instant, out: &mut [u8], in_place: bool) -> Option<Transmit> {
        if self.resend_cursor.is_none() {
            let ResendRange { term_id, term_offset, length } = self.retransmits.poll_due(now)?;
            let start = self.config.identity.position(term_id, term_offset);
            let end = (start + length as i64).min(self.sender_position);
            self.resend_cursor = Some((start, end));
        }
        let (start, end) = self.resend_cursor?;
        let (transmit, advance) =
            if start < end { self.scan_datagram(start, end - start, out, in_place) } else { (Transmit::Written(0), 0) };
        if advance == 0 {
            self.resend_cursor = None;
            return None;
        }
        self.resend_cursor = (start + advance < end).then_some((start + advance, end));
        self.counters.retransmits_sent += 1;
        self.counters.retransmitted_bytes += transmit.length() as u64;
        Some(transmit)
    }

    /// The whole frames starting at `position` (at most `available` bytes of log and one MTU
    /// of datagram): copied into `out`, or with `in_place` named as a log range. Returns the
    /// datagram and the log bytes it covers.
    fn scan_datagram(&self, position: i64, available: i64, out: &mut [u8], in_place: bool) -> (Transmit, i64) {
        let limit = available.min(i64::from(self.config.mtu)).max(0) as usize;
        if in_place {
            let (length, advance) = self.log.scan_frames(position, limit);
            (Transmit::Log { position, length }, advance)
        } else {
            let (length, advance) = self.log.scan_datagram(position, limit, out);
            (Transmit::Written(length), advance)
        }
    }
}
