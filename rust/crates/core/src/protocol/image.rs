//! The receiving side of one publication (an *image*), as a sans-IO state machine.
//!
//! Inputs: DATA/PAD/heartbeat datagrams, consumer progress and the time. Outputs: status
//! messages and NAKs from [`Image::poll_transmit`], and complete frames for consumers through
//! [`Image::poll_fragments`]. See `shared/docs/wire-protocol.md` §6.4–§6.6 and §6.9.

use std::time::Duration;

use super::defaults;
use super::loss::LossDetector;
use crate::logbuffer::position::align_frame;
use crate::logbuffer::{ReceiverLog, StreamIdentity, CLEAN_STEP};
use crate::time::Instant;
use crate::wire::{data_frame_count, flags, DataFrames, DataHeader, FrameType, Nak, StatusMessage, WireError};

/// Settings of one image.
#[derive(Clone, Debug)]
pub struct ImageConfig {
    /// Session, stream, initial term id and term length (from the SETUP frame).
    pub identity: StreamIdentity,
    /// Where the receiver joined the stream.
    pub join_position: i64,
    /// Receiver window advertised in status messages.
    pub receiver_window: u32,
    /// The receiving endpoint's id, carried in status messages.
    pub receiver_id: i64,
    /// Group tag appended to status messages (`gtag=`).
    pub group_tag: Option<i64>,
    /// Status message interval.
    pub status_interval: Duration,
    /// Unicast NAK delay (retries use `nak_delay * 100`).
    pub nak_delay: Duration,
    /// Multicast NAK timing: a random delay below `multicast_nak_backoff`.
    pub is_group: bool,
    /// Upper bound of the random multicast NAK delay.
    pub multicast_nak_backoff: Duration,
    /// The image is closed when nothing arrived for this long.
    pub liveness_timeout: Duration,
    /// `false` (`reliable=false`): a gap is skipped (padded over and counted as loss) when its
    /// NAK would be sent, instead of being NAKed.
    pub reliable: bool,
    /// Seed for the NAK randomiser.
    pub random_seed: u64,
}

impl ImageConfig {
    /// A unicast image of `identity` joined at `join_position`, with the defaults: a window of
    /// min(128 KiB, term/2), no group tag, status messages every 100 ms, NAK delay 100 µs,
    /// multicast NAK backoff 10 ms, liveness timeout 10 s.
    pub fn new(identity: StreamIdentity, join_position: i64, receiver_id: i64) -> Self {
        ImageConfig {
            identity,
            join_position,
            receiver_window: defaults::RECEIVER_WINDOW.min(identity.term_length / 2),
            receiver_id,
            group_tag: None,
            status_interval: defaults::STATUS_MESSAGE_INTERVAL,
            nak_delay: defaults::NAK_UNICAST_DELAY,
            is_group: false,
            multicast_nak_backoff: defaults::NAK_MULTICAST_MAX_BACKOFF,
            liveness_timeout: defaults::IMAGE_LIVENESS_TIMEOUT,
            reliable: true,
            random_seed: receiver_id as u64,
        }
    }
}

/// Counters of one image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageCounters {
    /// DATA/PAD datagrams accepted.
    pub datagrams_received: u64,
    /// Bytes accepted.
    pub bytes_received: u64,
    /// Heartbeats received.
    pub heartbeats_received: u64,
    /// Datagrams entirely below the rebuild position (duplicates or late retransmits).
    pub duplicates: u64,
    /// Datagrams dropped for lying beyond the receiver window.
    pub overruns: u64,
    /// Malformed datagrams dropped.
    pub malformed: u64,
    /// Datagrams that arrived after the image stopped receiving (draining or closed).
    pub inactive: u64,
    /// End-of-stream heartbeats ignored because the image had not received everything up to
    /// their position, or had received beyond it.
    pub eos_rejected: u64,
    /// Distinct gaps detected.
    pub loss_gaps: u64,
    /// Gaps given up on because the publication had moved past its retransmit range; they
    /// were skipped (the data is lost and counted here, never delivered wrong).
    pub unrecoverable_gaps: u64,
    /// Bytes in those gaps.
    pub unrecoverable_bytes: u64,
    /// Bytes in those gaps.
    pub loss_bytes: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// Datagrams that filled a detected gap.
    pub retransmits_received: u64,
    /// Status messages sent.
    pub status_messages_sent: u64,
}

/// Where an image is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageState {
    /// Receiving.
    Active,
    /// End of stream (or timeout): sending EOS status messages until `until`.
    Draining {
        /// When the image closes.
        until: Instant,
    },
    /// Finished; the driver removes it.
    Closed,
}

/// One consumer of an image (a subscription).
#[derive(Clone, Copy, Debug)]
struct Consumer {
    id: u64,
    position: i64,
}

/// A frame handed to a consumer.
#[derive(Clone, Copy, Debug)]
pub struct Fragment<'a> {
    /// The frame's header.
    pub header: DataHeader,
    /// The payload bytes.
    pub payload: &'a [u8],
    /// Stream position after this frame.
    pub position: i64,
}

/// The receiving side of one publication, over a log `L`: the media driver's shared log, which
/// subscribers in other processes read, reporting their positions through counters
/// ([`Image::set_consumer_position`]); or, in-process, a log its consumers poll
/// ([`Image::poll_fragments`]).
pub struct Image<L> {
    config: ImageConfig,
    log: L,
    rebuild_position: i64,
    hwm_position: i64,
    /// The gap at the rebuild position being NAKed: its position, since when, and the overrun
    /// count then (overruns since show the publication has moved on; see
    /// [`defaults::UNRECOVERABLE_GAP_TIMEOUT`]).
    stalled_gap: Option<(i64, Instant, u64)>,
    /// Data arrived beyond the end-of-stream position after the image stopped.
    data_after_end: bool,
    /// The end of the furthest DATA frame taken (heartbeats excluded).
    data_hwm_position: i64,
    consumers: Vec<Consumer>,
    /// The log is zeroed from here on up to a term behind the lowest consumer.
    cleaned_position: i64,
    last_sm_position: i64,
    last_sm_time: Option<Instant>,
    last_packet_time: Instant,
    end_of_stream_position: Option<i64>,
    state: ImageState,
    loss: LossDetector,
    counters: ImageCounters,
}

impl<L> std::fmt::Debug for Image<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("identity", &self.config.identity)
            .field("rebuild_position", &self.rebuild_position)
            .field("hwm_position", &self.hwm_position)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Why a datagram was not taken into the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataRejection {
    /// It could not be decoded.
    Malformed(WireError),
    /// It lies beyond the receiver window.
    Overrun,
    /// Everything in it had already been received.
    Duplicate,
    /// The image is no longer active.
    Inactive,
}

impl<L: ReceiverLog> Image<L> {
    /// Hands complete frames to consumer `id` (a consumer in this process), at most
    /// `fragment_limit` DATA frames; returns how many were handed out.
    pub fn poll_fragments<F>(&mut self, id: u64, fragment_limit: usize, mut handler: F) -> usize
    where
        F: FnMut(Fragment<'_>),
    {
        let Some(index) = self.consumers.iter().position(|c| c.id == id) else { return 0 };
        let mut position = self.consumers[index].position;
        let mut count = 0;
        // One term per read: frames are complete up to the rebuild position, where the first
        // gap (or the high-water mark) stops the reader.
        while count < fragment_limit && position < self.rebuild_position {
            let next = self.log.read_frames(position, fragment_limit - count, &mut |header, payload, end| {
                handler(Fragment { header: *header, payload, position: end });
                count += 1;
            });
            if next == position {
                break;
            }
            position = next;
        }
        self.consumers[index].position = position;
        self.clean_behind();
        count
    }

    /// An image over `log` (whose geometry matches `config.identity`) joined at
    /// `config.join_position`; it will send a status message at once.
    pub fn with_log(config: ImageConfig, log: L, now: Instant) -> Self {
        let join = config.join_position;
        let loss =
            LossDetector::new(config.nak_delay, config.is_group, config.multicast_nak_backoff, config.random_seed);
        Image {
            log,
            rebuild_position: join,
            hwm_position: join,
            stalled_gap: None,
            data_after_end: false,
            data_hwm_position: join,
            consumers: Vec::new(),
            // Nothing before the join position was ever written: cleaning starts there.
            cleaned_position: join,
            last_sm_position: join,
            last_sm_time: None,
            last_packet_time: now,
            end_of_stream_position: None,
            state: ImageState::Active,
            loss,
            counters: ImageCounters::default(),
            config,
        }
    }

    /// Session, stream and term geometry.
    pub fn identity(&self) -> &StreamIdentity {
        &self.config.identity
    }

    /// The image's settings.
    pub fn config(&self) -> &ImageConfig {
        &self.config
    }

    /// Everything before this position has arrived.
    pub fn rebuild_position(&self) -> i64 {
        self.rebuild_position
    }

    /// The highest position seen (data or heartbeat).
    pub fn hwm_position(&self) -> i64 {
        self.hwm_position
    }

    /// Where the image is in its life.
    pub fn state(&self) -> ImageState {
        self.state
    }

    /// The counters.
    pub fn counters(&self) -> ImageCounters {
        self.counters
    }

    /// Whether the image stopped receiving with data missing: a gap was skipped, data beyond the
    /// rebuild position had been seen, or data arrived after it stopped.
    pub fn ended_with_data_missing(&self) -> bool {
        self.state != ImageState::Active
            && (self.counters.unrecoverable_gaps > 0
                || self.rebuild_position < self.hwm_position
                || self.data_after_end)
    }

    /// Whether the publication signalled end of stream and every consumer read up to it.
    /// Like Aeron, only once nothing was seen beyond the end (rebuild = high-water mark).
    pub fn is_end_of_stream(&self) -> bool {
        self.end_of_stream_position.is_some_and(|end| {
            self.rebuild_position >= end && self.hwm_position <= end && self.min_consumer_position() >= end
        })
    }

    /// Adds a consumer starting at the current rebuild position... or at the join position.
    pub fn add_consumer(&mut self, id: u64) {
        let position = self.consumers.iter().map(|c| c.position).min().unwrap_or(self.config.join_position);
        self.consumers.push(Consumer { id, position });
    }

    /// Removes a consumer; returns whether any remain.
    pub fn remove_consumer(&mut self, id: u64) -> bool {
        self.consumers.retain(|c| c.id != id);
        !self.consumers.is_empty()
    }

    /// A consumer's position.
    pub fn consumer_position(&self, id: u64) -> Option<i64> {
        self.consumers.iter().find(|c| c.id == id).map(|c| c.position)
    }

    fn min_consumer_position(&self) -> i64 {
        self.consumers.iter().map(|c| c.position).min().unwrap_or(self.rebuild_position)
    }

    /// A DATA, PAD or heartbeat datagram for this image.
    ///
    /// Nothing beyond the receiver window (the lowest consumer position + term/2) is taken:
    /// such a frame is an overrun, counted and ignored, and moves no position. End of stream
    /// is accepted only at the position everything has been received up to (as Aeron does).
    pub fn on_data(&mut self, datagram: &[u8], now: Instant) -> Result<(), DataRejection> {
        let header = DataHeader::parse(datagram).map_err(|e| self.malformed(e))?;
        let identity = self.config.identity;
        let term_length = i64::from(identity.term_length);
        let is_heartbeat = DataHeader::is_heartbeat_datagram(datagram);
        if header.term_offset % 32 != 0 {
            return Err(self.malformed(WireError::Misaligned { term_offset: header.term_offset }));
        }
        let length = datagram.len() as i64;
        // Whether every frame is a DATA frame (no padding, whose length reaches past the datagram).
        let mut data_only = true;
        // Validate every frame before touching the log: plain DATA frames (what publications
        // send) in one pass over the fields that matter; anything else frame by frame, which
        // names what is wrong and checks PADs.
        if !is_heartbeat && data_frame_count(datagram).is_none() {
            let mut frames = 0;
            for frame in DataFrames::new(datagram) {
                let (frame, _) = frame.map_err(|e| self.malformed(e))?;
                data_only &= frame.frame_type == FrameType::Data;
                // A PAD's length covers the term past its 32-byte header: it must end inside
                // the term (readers would otherwise skip past the term's end, into nothing).
                if frame.frame_type == FrameType::Pad
                    && i64::from(frame.term_offset) + i64::from(frame.frame_length) > term_length
                {
                    return Err(self.malformed(WireError::BadFrameLength {
                        frame: "PAD",
                        frame_length: frame.frame_length,
                        datagram_length: usize::try_from(term_length - i64::from(frame.term_offset)).unwrap_or(0),
                    }));
                }
                frames += 1;
            }
            if frames == 0 {
                return Err(self.malformed(WireError::Misaligned { term_offset: header.term_offset }));
            }
        }
        let in_term = if is_heartbeat { 0 } else { length };
        if header.term_offset < 0 || i64::from(header.term_offset) + in_term > term_length {
            return Err(self.malformed(WireError::BadFrameLength {
                frame: "DATA",
                frame_length: header.frame_length,
                datagram_length: datagram.len(),
            }));
        }
        // |position| < 2^61 (term count < 2^31, term length ≤ 2^30): no sum below can overflow.
        let position = identity.position(header.term_id, header.term_offset);
        let proposed = position + in_term;
        // Past the end: data beyond it, or a heartbeat without EOS at or beyond it (a
        // publication that ended sends only EOS heartbeats).
        let past_end = self
            .end_of_stream_position
            .is_some_and(|end| proposed > end || (is_heartbeat && !header.is_end_of_stream() && position >= end));
        if matches!(self.state, ImageState::Draining { .. }) && past_end && proposed <= self.window_limit() {
            // Draining after an end of stream, yet the publication goes on: that end of stream
            // was not its own (Aeron's rule, "EOS only where everything has arrived", cannot
            // tell a forged EOS at the live position). Receive again instead of losing the rest.
            self.state = ImageState::Active;
            self.end_of_stream_position = None;
            self.counters.eos_rejected += 1;
            self.last_sm_time = None;
        }
        if self.state != ImageState::Active {
            self.counters.inactive += 1;
            if past_end {
                self.data_after_end = true;
            }
            return Err(DataRejection::Inactive);
        }
        if proposed > self.window_limit() {
            self.counters.overruns += 1;
            return Err(DataRejection::Overrun);
        }
        if is_heartbeat {
            self.last_packet_time = now;
            self.counters.heartbeats_received += 1;
            if header.is_end_of_stream() {
                if position == self.rebuild_position && self.data_hwm_position <= position {
                    // Everything up to here arrived and nothing beyond: heartbeat-only hwm
                    // beyond it was never data.
                    self.end_of_stream_position = Some(position);
                    self.hwm_position = position;
                    return Ok(());
                } else {
                    self.counters.eos_rejected += 1;
                }
            }
            self.hwm_position = self.hwm_position.max(position);
            return Ok(());
        }
        if position < self.rebuild_position && proposed <= self.rebuild_position {
            self.last_packet_time = now;
            self.counters.duplicates += 1;
            return Err(DataRejection::Duplicate);
        }
        self.last_packet_time = now;
        if self.end_of_stream_position.is_some_and(|end| proposed > end) {
            // Data past the end of stream: that end of stream was not the publication's.
            self.end_of_stream_position = None;
            self.counters.eos_rejected += 1;
        }
        // Everything before the rebuild position was received (or the image joined there): a
        // frame that starts before it and ends after it cannot belong to the stream (it would
        // leave readers at the rebuild position in the middle of a frame); frames wholly
        // before it are not written again.
        let mut start = position;
        let mut skip = 0usize;
        if position < self.rebuild_position {
            let rebuild_offset = self.rebuild_position - position;
            for (frame, _) in DataFrames::new(datagram).flatten() {
                let frame_start = i64::from(frame.term_offset) - i64::from(header.term_offset);
                let frame_end = frame_start + align_frame(usize::try_from(frame.frame_length).unwrap_or(0)) as i64;
                if frame_start < rebuild_offset && frame_end > rebuild_offset {
                    return Err(self.malformed(WireError::Misaligned { term_offset: frame.term_offset }));
                }
            }
            start = self.rebuild_position;
            skip = rebuild_offset as usize;
        }
        if position < self.hwm_position {
            self.counters.retransmits_received += 1;
        }
        self.log.insert(start, &datagram[skip..]);
        self.counters.datagrams_received += 1;
        self.counters.bytes_received += length as u64;
        self.hwm_position = self.hwm_position.max(proposed);
        self.data_hwm_position = self.data_hwm_position.max(proposed);
        if start == self.rebuild_position && data_only {
            // In order: the DATA frames just written tile the datagram (validated above) and
            // start at a frame boundary, so the rebuild position passes them without reading
            // them back; the scan below goes on from there (data that arrived ahead of them).
            self.rebuild_position = proposed;
        }
        self.advance_rebuild();
        Ok(())
    }

    /// The furthest position a frame may reach: the lowest consumer position plus half a term
    /// (what the log can hold without overwriting unread data).
    fn window_limit(&self) -> i64 {
        self.min_consumer_position() + i64::from(self.config.identity.term_length / 2)
    }

    fn malformed(&mut self, error: WireError) -> DataRejection {
        self.counters.malformed += 1;
        DataRejection::Malformed(error)
    }

    fn advance_rebuild(&mut self) {
        let term_length = self.config.identity.term_length as i64;
        // Nothing lies at or past the high-water mark (every frame written, a gap's padding
        // included, ends at or before it): with the rebuild position there, as after every
        // in-order datagram, there is nothing to scan, and reading the slot after the last frame
        // would only stall on memory the next datagram's copy writes anyway.
        while self.rebuild_position < self.hwm_position {
            let next = self.log.scan_complete(self.rebuild_position, self.hwm_position);
            let moved = next != self.rebuild_position;
            self.rebuild_position = next;
            self.hwm_position = self.hwm_position.max(next);
            if !moved || next % term_length != 0 || next >= self.hwm_position {
                break;
            }
        }
    }

    /// The log the image writes.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// A consumer reading the log elsewhere (a subscriber in another process) reports its
    /// position. The value is untrusted (the subscriber writes it): it never moves a consumer
    /// back, nor past the rebuild position. The status-message window and the cleaning of old
    /// terms follow the lowest consumer.
    pub fn set_consumer_position(&mut self, id: u64, position: i64) {
        let rebuild = self.rebuild_position;
        if let Some(consumer) = self.consumers.iter_mut().find(|c| c.id == id) {
            consumer.position = consumer.position.max(position.min(rebuild));
        }
        self.clean_behind();
    }

    /// The image's own view of its lowest consumer position (the rebuild position when it has
    /// no consumer).
    pub fn min_consumer(&self) -> i64 {
        self.min_consumer_position()
    }

    /// Zeroes the log up to a term behind the lowest consumer, as Aeron's `cleanBufferTo`: a
    /// partition is clean before the image writes a later term into it. The zeroing follows the
    /// consumers [`CLEAN_STEP`] by [`CLEAN_STEP`], not a whole term at once when they enter the
    /// next (a 16 MiB term is milliseconds of the receiver's time in which it reads nothing).
    fn clean_behind(&mut self) {
        let term_length = self.config.identity.term_length as i64;
        let behind = self.min_consumer_position() - term_length;
        let target = behind - behind.rem_euclid(CLEAN_STEP);
        while self.cleaned_position < target {
            self.log.clean_to(&mut self.cleaned_position, target);
        }
    }

    /// Time-driven work: loss detection, liveness, end of stream.
    pub fn on_tick(&mut self, now: Instant) {
        match self.state {
            ImageState::Active
                if self.is_end_of_stream()
                    || now.saturating_since(self.last_packet_time) >= self.config.liveness_timeout =>
            {
                self.state = ImageState::Draining { until: now + self.config.status_interval * 5 };
            }
            ImageState::Draining { until } if now >= until => self.state = ImageState::Closed,
            _ => {}
        }
    }

    /// Closes the image because its last consumer left: EOS status messages, then closed.
    pub fn close(&mut self, now: Instant) {
        if self.state == ImageState::Active {
            self.state = ImageState::Draining { until: now + self.config.status_interval * 5 };
        }
    }

    /// The first gap between the rebuild position and the high-water mark, within one term.
    fn find_current_gap(&self) -> Option<(i64, usize)> {
        let term_length = self.config.identity.term_length as i64;
        let term_end = (self.rebuild_position & !(term_length - 1)) + term_length;
        self.log.find_gap(self.rebuild_position, self.hwm_position.min(term_end))
    }

    /// Whether the gap at `position` has been NAKed without repair for
    /// [`defaults::UNRECOVERABLE_GAP_TIMEOUT`] while frames beyond the window kept arriving: the
    /// publication has moved past its retransmit range. Tracks the gap as a side effect.
    fn is_unrecoverable(&mut self, position: i64, now: Instant) -> bool {
        match self.stalled_gap {
            Some((tracked, since, overruns)) if tracked == position => {
                now.saturating_since(since) >= defaults::UNRECOVERABLE_GAP_TIMEOUT && self.counters.overruns > overruns
            }
            _ => {
                self.stalled_gap = Some((position, now, self.counters.overruns));
                false
            }
        }
    }

    /// The next control frame to send to the publication (status message or NAK).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if self.state == ImageState::Closed {
            return None;
        }
        if self.state == ImageState::Active {
            let mut gap = self.find_current_gap();
            // Skip a gap the publication can no longer resend.
            if let Some((position, length)) = gap {
                if self.is_unrecoverable(position, now) {
                    self.log.fill_gap(position, length);
                    self.counters.unrecoverable_gaps += 1;
                    self.counters.unrecoverable_bytes += length as u64;
                    self.stalled_gap = None;
                    self.advance_rebuild();
                    gap = self.find_current_gap();
                }
            }
            if let Some(nak) = self.loss.poll(gap, now) {
                if nak.is_new_gap {
                    self.counters.loss_gaps += 1;
                    self.counters.loss_bytes += nak.length as u64;
                }
                if nak.send && !self.config.reliable {
                    self.log.fill_gap(nak.position, nak.length);
                    self.counters.unrecoverable_gaps += 1;
                    self.counters.unrecoverable_bytes += nak.length as u64;
                    self.advance_rebuild();
                } else if nak.send {
                    self.counters.naks_sent += 1;
                    let identity = self.config.identity;
                    let frame = Nak {
                        session_id: identity.session_id,
                        stream_id: identity.stream_id,
                        term_id: identity.term_id(nak.position),
                        term_offset: identity.term_offset(nak.position),
                        length: nak.length as i32,
                    };
                    return Some(frame.emit(out));
                }
            }
        }
        let consumption = self.min_consumer_position();
        let threshold = (self.config.receiver_window / 4) as i64;
        let due = match self.last_sm_time {
            None => true,
            Some(last) => {
                now.saturating_since(last) >= self.config.status_interval
                    || consumption - self.last_sm_position >= threshold
            }
        };
        if !due {
            return None;
        }
        self.last_sm_time = Some(now);
        self.last_sm_position = consumption;
        self.counters.status_messages_sent += 1;
        let identity = self.config.identity;
        let draining = matches!(self.state, ImageState::Draining { .. });
        let message = StatusMessage {
            flags: if draining { flags::SM_EOS } else { 0 },
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            consumption_term_id: identity.term_id(consumption),
            consumption_term_offset: identity.term_offset(consumption),
            receiver_window: self.config.receiver_window as i32,
            receiver_id: self.config.receiver_id,
            group_tag: self.config.group_tag,
        };
        Some(message.emit(out))
    }
}
