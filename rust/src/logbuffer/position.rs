//! 64-bit stream positions from term id and term offset, with 32-bit wrapping term ids.

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

/// The term id that holds `position`.
pub fn term_id_of(position: i64, position_bits: u32, initial_term_id: i32) -> i32 {
    initial_term_id.wrapping_add((position >> position_bits) as i32)
}

/// The offset of `position` inside its term.
pub fn term_offset_of(position: i64, term_length: u32) -> i32 {
    (position & (term_length as i64 - 1)) as i32
}

/// Which of the three term partitions holds the term `term_count` terms after the initial one.
/// (`rem_euclid`: a negative count still names a partition, never an index out of range.)
pub fn partition_index(term_count: i64) -> usize {
    term_count.rem_euclid(3) as usize
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

#[cfg(test)]
mod tests {
    use super::*;

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
