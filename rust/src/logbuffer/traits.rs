//! What the protocol state machines need of a log, so that they run on heap terms (the sans-IO
//! tests, the embedded driver of old) and on the shared-memory logs of the media driver
//! ([`crate::shm::log_buffer::LogBuffer`]) alike.
//!
//! A network publication's sender reads committed frames ([`SenderLog`]); the application
//! appends them (on heap terms through `NetworkPublication::offer`, in shared memory through the
//! client's term appender). An image's receiver writes received frames and scans for gaps
//! ([`ReceiverLog`]); subscribers read what was rebuilt.
//!
//! Implementations never panic on any position: positions the state machines pass are within
//! the stream, and a log that cannot be accessed (a shared file gone wrong) reads as empty.

/// The log a network publication's sender reads frames from.
pub trait SenderLog {
    /// The largest message a publication on this log may carry.
    fn max_message_length(&self) -> usize;

    /// Copies whole committed frames starting at `position`, at most `max` bytes and never past
    /// the end of the term, into `out` (at least `max` bytes long). Returns the datagram length
    /// and the log bytes it covers: a padding frame at `position` is sent as its header alone
    /// and covers the rest of its length. `(0, 0)` when no complete frame is there yet.
    fn scan_datagram(&self, position: i64, max: usize, out: &mut [u8]) -> (usize, i64);
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

    /// Zeroes the term that held `position` so its partition can hold a later term.
    fn clean_term(&mut self, position: i64);
}
