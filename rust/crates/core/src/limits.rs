//! Protocol limits, defined once: the term lengths and MTUs a stream may have.
//!
//! The wire codecs (SETUP validation), the log buffers, the channel URI parser, the driver
//! settings and the Python bindings all check against these constants and with these functions,
//! so every layer accepts exactly the same values and reports them in the same words.

/// Frames start on 32-byte boundaries; the MTU and term offsets are multiples of it.
pub const FRAME_ALIGNMENT: u32 = 32;
/// Smallest term length (64 KiB).
pub const MIN_TERM_LENGTH: u32 = 64 * 1024;
/// Largest term length (1 GiB).
pub const MAX_TERM_LENGTH: u32 = 1024 * 1024 * 1024;
/// Smallest MTU: one 32-byte data header plus at least one aligned payload unit. The same bound
/// applies to a received SETUP's MTU: Aeron's `Configuration.validateMtuLength` refuses a sender
/// MTU not above the 32-byte header, so an Aeron peer never advertises less than 64.
pub const MIN_MTU: u32 = 2 * FRAME_ALIGNMENT;
/// Largest MTU: 64 KiB minus IP/UDP headers, rounded down to the frame alignment.
pub const MAX_MTU: u32 = 65504;

/// Why a term length is refused (without the name of the setting).
pub const TERM_LENGTH_RULE: &str = "must be a power of two between 65536 and 1073741824";
/// Why an MTU is refused (without the name of the setting).
pub const MTU_RULE: &str = "must be a multiple of 32 between 64 and 65504";

/// Whether `length` is a legal term length: a power of two in
/// [`MIN_TERM_LENGTH`]`..=`[`MAX_TERM_LENGTH`]. Takes any integer width, so callers can check
/// untrusted values before narrowing them.
pub fn is_valid_term_length(length: i128) -> bool {
    (i128::from(MIN_TERM_LENGTH)..=i128::from(MAX_TERM_LENGTH)).contains(&length) && length.count_ones() == 1
}

/// Whether `mtu` is a legal MTU: a multiple of [`FRAME_ALIGNMENT`] in
/// [`MIN_MTU`]`..=`[`MAX_MTU`].
pub fn is_valid_mtu(mtu: i128) -> bool {
    (i128::from(MIN_MTU)..=i128::from(MAX_MTU)).contains(&mtu) && mtu % i128::from(FRAME_ALIGNMENT) == 0
}

/// `length` as a term length, or the rule it breaks.
pub fn term_length(length: i128) -> Result<u32, &'static str> {
    match u32::try_from(length) {
        Ok(value) if is_valid_term_length(length) => Ok(value),
        _ => Err(TERM_LENGTH_RULE),
    }
}

/// `mtu` as an MTU, or the rule it breaks.
pub fn mtu(mtu: i128) -> Result<u32, &'static str> {
    match u32::try_from(mtu) {
        Ok(value) if is_valid_mtu(mtu) => Ok(value),
        _ => Err(MTU_RULE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_lengths_are_powers_of_two_within_bounds() {
        assert_eq!(term_length(65536), Ok(65536));
        assert_eq!(term_length(1 << 30), Ok(1 << 30));
        for bad in [0, 1000, 32768, 3 * 65536, 1 << 31, -65536, i128::MAX] {
            assert_eq!(term_length(bad), Err(TERM_LENGTH_RULE), "{bad}");
        }
    }

    #[test]
    fn mtus_are_aligned_within_bounds() {
        assert_eq!(mtu(64), Ok(64));
        assert_eq!(mtu(1408), Ok(1408));
        assert_eq!(mtu(65504), Ok(65504));
        for bad in [0, 32, 33, 1400, 65536, -32, i128::MIN] {
            assert_eq!(mtu(bad), Err(MTU_RULE), "{bad}");
        }
    }

    #[test]
    fn rules_state_the_constants() {
        assert!(TERM_LENGTH_RULE.contains(&MIN_TERM_LENGTH.to_string()));
        assert!(TERM_LENGTH_RULE.contains(&MAX_TERM_LENGTH.to_string()));
        assert!(MTU_RULE.contains(&MIN_MTU.to_string()) && MTU_RULE.contains(&MAX_MTU.to_string()));
        assert!(MTU_RULE.contains(&FRAME_ALIGNMENT.to_string()));
    }
}
