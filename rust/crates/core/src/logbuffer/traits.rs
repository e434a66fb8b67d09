//! What the protocol state machines need of a log: the port through which `protocol/` (sans-IO,
//! no OS dependency) reaches the one log implementation, the shared-memory
//! `affinity_shm::shm::log_buffer::LogBuffer` (in a sealed memfd in the media driver, in an anonymous
//! mapping in the sans-IO tests).
//!
//! A network publication's sender reads committed frames ([`SenderLog`]); the application
//! appends them (in the driver through the client's term appender, in-process through
//! `NetworkPublication::offer`, which calls the same appender). An image's receiver writes
//! received frames and scans for gaps ([`ReceiverLog`]); subscribers read what was rebuilt.
//!
//! Implementations never panic on any position: positions the state machines pass are within
//! the stream, and a log that cannot be accessed (a shared file gone wrong) reads as empty.

use crate::wire::DataHeader;

/// Result of an offer into a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Written; the value is the position after the message.
    Appended(i64),
    /// The publisher limit was reached (`position >= limit`): retry later.
    BackPressured,
    /// The term was filled and the log rotated (or a rotation was in progress): retry now.
    AdminAction,
    /// The stream reached its largest position.
    MaxPositionExceeded,
}

/// The log of a network publication: the application appends, the sender reads.
pub trait SenderLog {
    /// The largest message a publication on this log may carry.
    fn max_message_length(&self) -> usize;

    /// Appends one message (at most [`Self::max_message_length`] bytes) with `reserved_value`
    /// if the tail is below `limit`, fragmenting it into frames of the log's MTU; at the end of
    /// a term, pads the rest of the term, rotates and returns [`Offer::AdminAction`]. A log
    /// that cannot be written (corrupt metadata) appends nothing and answers
    /// [`Offer::AdminAction`] too, so the caller's bounded retry gives up.
    fn append(&mut self, payload: &[u8], reserved_value: i64, limit: i64) -> Offer;

    /// Copies whole committed frames starting at `position`, at most `max` bytes and never past
    /// the end of the term, into `out` (at least `max` bytes long). Returns the datagram length
    /// and the log bytes it covers: a padding frame is sent as its header alone and covers the
    /// rest of its length. `(0, 0)` when no complete frame is there yet.
    fn scan_datagram(&self, position: i64, max: usize, out: &mut [u8]) -> (usize, i64);

    /// What [`Self::scan_datagram`] would copy, without copying: the datagram length and the
    /// log bytes it covers, for a sender that sends the frames from the log as they lie.
    fn scan_frames(&self, position: i64, max: usize) -> (usize, i64);

    /// Pads over a claim at `position` its writer never committed (a client that died while
    /// appending), once the sender has stood there for the unblock timeout with `tail` beyond;
    /// `writers_gone` once the publication is closed. Returns the bytes padded over (0: nothing
    /// was blocked there, or only bytes a live writer may still write).
    fn unblock(&mut self, position: i64, tail: i64, writers_gone: bool) -> usize;
}

/// The log an image's receiver writes frames into.
pub trait ReceiverLog {
    /// Copies a received DATA/PAD datagram (validated, within one term) into the log at
    /// `position`, the first frame's length last so readers never see a frame before its body.
    fn insert(&mut self, position: i64, datagram: &[u8]);

    /// The position after the last complete frame scanning forward from `position`, bounded by
    /// `limit` and the end of the term.
    fn scan_complete(&self, position: i64, limit: i64) -> i64;

    /// The first gap (unwritten 32-byte slots) between `position` and `limit` within the term
    /// of `position`: `(gap position, gap length)`.
    fn find_gap(&self, position: i64, limit: i64) -> Option<(i64, usize)>;

    /// Covers `length` bytes at `position` (a gap given up on) with a padding frame.
    fn fill_gap(&mut self, position: i64, length: usize);

    /// Zeroes the log from `*clean_position` towards `target` (at most to the end of that
    /// term) so its partition can hold a later term, and moves `*clean_position` past what it
    /// zeroed; a range it cannot zero is passed over (it always moves forward).
    fn clean_to(&mut self, clean_position: &mut i64, target: i64);

    /// Reads the committed DATA frames from `position` on, within its term, for a consumer in
    /// this process (subscribers elsewhere read the shared log themselves): hands each frame's
    /// header, payload and the position after it to `handler`, at most `fragment_limit` frames,
    /// and returns the position after the last frame consumed (padding passed over included).
    /// Stops before a frame that cannot be read.
    fn read_frames(
        &self,
        position: i64,
        fragment_limit: usize,
        handler: &mut dyn FnMut(&DataHeader, &[u8], i64),
    ) -> i64;
}
