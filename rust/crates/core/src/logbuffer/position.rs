//! 64-bit stream positions from term id and term offset, with 32-bit wrapping term ids, and
//! the identity of a stream that positions are computed for.

/// Number of term partitions in a log: the term `term_count` terms after the initial one lives
/// in partition `term_count % PARTITION_COUNT`.
pub const PARTITION_COUNT: usize = 3;

/// Every frame starts on a multiple of [`crate::limits::FRAME_ALIGNMENT`] (as `usize`).
pub const FRAME_ALIGNMENT: usize = crate::limits::FRAME_ALIGNMENT as usize;

/// Rounds `length` up to the next multiple of [`FRAME_ALIGNMENT`].
pub const fn align_frame(length: usize) -> usize {
    (length + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// `log2(term_length)`; the term length must be a power of two.
pub const fn position_bits(term_length: u32) -> u32 {
    term_length.trailing_zeros()
}

/// The position of `term_offset` in term `term_id` of a stream that started at `initial_term_id`.
pub fn compute_position(term_id: i32, term_offset: i32, position_bits: u32, initial_term_id: i32) -> i64 {
    let term_count = term_id.wrapping_sub(initial_term_id) as i64;
    (term_count << position_bits) + term_offset as i64
}

/// The largest position a stream of `term_length`-byte terms can reach: `term_length * 2^31`
/// (term counts are non-negative `i32`s). Fits an `i64` for every term length up to 2^32.
pub const fn max_position(term_length: u32) -> i64 {
    (term_length as i64) << 31
}

/// Why a start position (Aeron's `init-term-id|term-id|term-offset`) is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError {
    /// The term id is behind the initial term id (their 32-bit wrapping difference is negative).
    TermIdBehind,
    /// The term offset is negative or not a multiple of the frame alignment.
    UnalignedOffset,
    /// The term offset is past the end of the term.
    OffsetPastTerm,
    /// The position is past [`max_position`].
    PastMaxPosition,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StartError::TermIdBehind => {
                "more than 2^31 - 1 terms after the initial term id (32-bit wrapping difference is negative)"
            }
            StartError::UnalignedOffset => "the term offset must be a non-negative multiple of the frame alignment",
            StartError::OffsetPastTerm => "the term offset must not exceed the term length",
            StartError::PastMaxPosition => "the position passes the largest position of the stream",
        })
    }
}

/// The position of a stream that starts in term `term_id` at `term_offset` (Aeron's
/// `init-term-id|term-id|term-offset`), checked: the term count `term_id - initial_term_id`
/// (32-bit wrapping) is non-negative, the offset a multiple of [`FRAME_ALIGNMENT`] and at most
/// `term_length` (Aeron's rule: an offset equal to the term length is a full term, the first
/// append rotates), the position at most [`max_position`]. The one place these rules live: the
/// channel URI parser, the driver and the log buffer all call it.
pub fn start_position(
    initial_term_id: i32,
    term_id: i32,
    term_offset: i32,
    term_length: u32,
) -> Result<i64, StartError> {
    let term_count = term_id.wrapping_sub(initial_term_id);
    if term_count < 0 {
        return Err(StartError::TermIdBehind);
    }
    if term_offset < 0 || term_offset as usize % FRAME_ALIGNMENT != 0 {
        return Err(StartError::UnalignedOffset);
    }
    if term_offset as u32 > term_length {
        return Err(StartError::OffsetPastTerm);
    }
    match i64::from(term_count).checked_mul(i64::from(term_length)).and_then(|p| p.checked_add(term_offset.into())) {
        Some(position) if position <= max_position(term_length) => Ok(position),
        _ => Err(StartError::PastMaxPosition),
    }
}

/// The term id that holds `position`.
pub fn term_id_of(position: i64, position_bits: u32, initial_term_id: i32) -> i32 {
    initial_term_id.wrapping_add((position >> position_bits) as i32)
}

/// The offset of `position` inside its term.
pub fn term_offset_of(position: i64, term_length: u32) -> i32 {
    (position & (term_length as i64 - 1)) as i32
}

/// Which of the [`PARTITION_COUNT`] term partitions holds the term `term_count` terms after the
/// initial one. (`rem_euclid`: a negative count, say a corrupt one read from shared memory,
/// still names a partition, never an index out of range.)
pub fn partition_index(term_count: i64) -> usize {
    term_count.rem_euclid(PARTITION_COUNT as i64) as usize
}

/// Bytes a message of `length` bytes takes in the log once fragmented for `max_payload`-byte frames.
pub fn fragmented_length(length: usize, max_payload: usize) -> usize {
    let whole = length / max_payload;
    let rest = length % max_payload;
    let tail = if rest > 0 { align_frame(rest + 32) } else { 0 };
    whole * align_frame(max_payload + 32) + tail
}

/// The largest message a term of `term_length` bytes accepts: `min(term_length / 8, 16 MiB)`.
pub fn max_message_length(term_length: u32) -> usize {
    ((term_length / 8) as usize).min(16 * 1024 * 1024)
}

/// The identity of one stream instance: what every data header of its log carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamIdentity {
    /// Publication session.
    pub session_id: i32,
    /// Application-chosen stream.
    pub stream_id: i32,
    /// Term id of position 0.
    pub initial_term_id: i32,
    /// Bytes per term, a power of two.
    pub term_length: u32,
}

impl StreamIdentity {
    /// `log2(term_length)`.
    pub fn position_bits(&self) -> u32 {
        position_bits(self.term_length)
    }

    /// The stream position of `(term_id, term_offset)`.
    pub fn position(&self, term_id: i32, term_offset: i32) -> i64 {
        compute_position(term_id, term_offset, self.position_bits(), self.initial_term_id)
    }

    /// The term id holding `position`.
    pub fn term_id(&self, position: i64) -> i32 {
        term_id_of(position, self.position_bits(), self.initial_term_id)
    }

    /// The offset of `position` within its term.
    pub fn term_offset(&self, position: i64) -> i32 {
        term_offset_of(position, self.term_length)
    }

    /// The largest position this stream can reach (`term_length * 2^31`).
    pub fn max_position(&self) -> i64 {
        max_position(self.term_length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_positions_are_checked() {
        assert_eq!(start_position(100, 102, 63488, 65536), Ok(194560));
        assert_eq!(start_position(7, 7, 0, 65536), Ok(0));
        // Wrapping term ids: one term after i32::MAX.
        assert_eq!(start_position(i32::MAX, i32::MIN, 32, 65536), Ok(65536 + 32));
        assert_eq!(start_position(0, 0, 65536, 65536), Ok(65536), "a full first term");
        assert_eq!(start_position(0, i32::MAX, 1 << 30, 1 << 30), Ok(max_position(1 << 30)));
        assert_eq!(start_position(5, 4, 0, 65536), Err(StartError::TermIdBehind));
        assert_eq!(start_position(0, i32::MIN, 0, 65536), Err(StartError::TermIdBehind));
        assert_eq!(start_position(0, 0, 33, 65536), Err(StartError::UnalignedOffset));
        assert_eq!(start_position(0, 0, -32, 65536), Err(StartError::UnalignedOffset));
        assert_eq!(start_position(0, 0, 65568, 65536), Err(StartError::OffsetPastTerm));
    }

    #[test]
    fn captured_rollover_join_position() {
        // unicast_rollover.json: initial 100, term 102, offset 63488, term length 65536.
        let bits = position_bits(65536);
        assert_eq!(compute_position(102, 63488, bits, 100), 194560);
        assert_eq!(term_id_of(194560, bits, 100), 102);
        assert_eq!(term_offset_of(194560, 65536), 63488);
    }

    #[test]
    fn term_ids_wrap_around() {
        let bits = position_bits(1 << 16);
        let position = compute_position(i32::MIN, 32, bits, i32::MAX);
        assert_eq!(position, (1 << 16) + 32);
        assert_eq!(term_id_of(position, bits, i32::MAX), i32::MIN);
    }

    #[test]
    fn fragmented_length_matches_captured_message() {
        // 3000 bytes at MTU 1408: frames of 1408, 1408 and 280 (aligned 288).
        assert_eq!(fragmented_length(3000, 1376), 1408 + 1408 + 288);
        assert_eq!(fragmented_length(0, 1376), 0);
        assert_eq!(fragmented_length(26, 1376), 64);
    }
}
