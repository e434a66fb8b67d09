//! Protocol defaults, defined once. The channel URI parser, the driver settings
//! (`affinity::driver::DriverContext`) and the state-machine constructors all read them here.

use std::time::Duration;

/// Largest datagram, headers included (`AERON_MTU_LENGTH`).
pub const MTU: u32 = 1408;
/// Term length of UDP publications (`AERON_TERM_BUFFER_LENGTH`, 16 MiB).
pub const TERM_LENGTH_UDP: u32 = 16 * 1024 * 1024;
/// Term length of IPC publications (`AERON_IPC_TERM_BUFFER_LENGTH`, 64 MiB).
pub const TERM_LENGTH_IPC: u32 = 64 * 1024 * 1024;
/// Receiver window cap before `min(.., term_length / 2)`: 1 MiB, half the media driver's
/// default `SO_RCVBUF` (2 MiB), so a full window still fits the socket buffer. Aeron's
/// `AERON_RCV_INITIAL_WINDOW_LENGTH` is 128 KiB; with it a UDP stream through the standalone
/// driver moves one window per round of subscriber → receiver → status message → sender, and
/// on two busy cores each round waits for the scheduler (`docs/benchmarks.md`, "UDP through
/// the standalone driver"). The channel URI's `rcv-wnd` and the driver's `receiver_window`
/// setting override it.
pub const RECEIVER_WINDOW: u32 = 1024 * 1024;
/// Aeron's default receiver window (`AERON_RCV_INITIAL_WINDOW_LENGTH`, 128 KiB): the least
/// the default [`RECEIVER_WINDOW`] is cut to where the OS grants a socket less receive buffer
/// than asked ([`default_receiver_window`]).
pub const AERON_RECEIVER_WINDOW: u32 = 128 * 1024;

/// The receiver window an endpoint advertises when neither `rcv-wnd` nor the driver's
/// `receiver_window` setting names one: [`RECEIVER_WINDOW`], cut to half the receive buffer the
/// OS granted the socket (`granted`, bytes; Linux caps `SO_RCVBUF` at `net.core.rmem_max`), so a
/// full window still fits the buffer, but never below [`AERON_RECEIVER_WINDOW`].
pub fn default_receiver_window(granted: usize) -> u32 {
    let half = u32::try_from(granted / 2).unwrap_or(u32::MAX);
    RECEIVER_WINDOW.min(half.max(AERON_RECEIVER_WINDOW))
}
/// Status message interval: 100 ms, as the design document says (Aeron uses 200 ms).
pub const STATUS_MESSAGE_INTERVAL: Duration = Duration::from_millis(100);
/// Unicast NAK delay; retries wait 100× that (`AERON_NAK_UNICAST_DELAY`).
pub const NAK_UNICAST_DELAY: Duration = Duration::from_micros(100);
/// Upper bound of the random multicast NAK delay (`AERON_NAK_MULTICAST_MAX_BACKOFF`).
pub const NAK_MULTICAST_MAX_BACKOFF: Duration = Duration::from_millis(10);
/// An image closes after this long without data or heartbeats (`AERON_IMAGE_LIVENESS_TIMEOUT`).
pub const IMAGE_LIVENESS_TIMEOUT: Duration = Duration::from_secs(10);
/// A publication forgets a receiver silent for this long (`AERON_PUBLICATION_CONNECTION_TIMEOUT`).
pub const PUBLICATION_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a closed, drained publication keeps serving retransmits (`AERON_PUBLICATION_LINGER_TIMEOUT`).
pub const PUBLICATION_LINGER: Duration = Duration::from_secs(5);
/// Delay before a NAKed range is resent (`AERON_RETRANSMIT_UNICAST_DELAY`).
pub const RETRANSMIT_DELAY: Duration = Duration::ZERO;
/// How long a resent range ignores further NAKs (`AERON_RETRANSMIT_UNICAST_LINGER`).
pub const RETRANSMIT_LINGER: Duration = Duration::from_millis(10);
/// Concurrent retransmit actions of one publication (`AERON_MAX_RESEND`); the channel URI's
/// `max-resend` overrides it.
pub const MAX_RESEND: u32 = 16;
/// An image gives up on a gap (pads it over, counts it as unrecoverable) once the gap has been
/// NAKed this long without repair while the publication's frames kept arriving beyond the
/// receiver window: the publication has moved past its retransmit range. Frames beyond the
/// window never move the image's positions, so one forged frame cannot make a gap look old.
pub const UNRECOVERABLE_GAP_TIMEOUT: Duration = Duration::from_millis(200);
/// Images one subscription may have at once; SETUPs beyond are refused and counted.
pub const MAX_IMAGES_PER_SUBSCRIPTION: usize = 128;
/// Receivers a multicast (group) publication tracks at once; status messages from further
/// receiver ids are refused and counted. A unicast publication keeps one.
pub const MAX_RECEIVERS_PER_PUBLICATION: usize = 1024;

#[cfg(test)]
mod receiver_window_tests {
    use super::*;

    #[test]
    fn the_default_window_fits_half_the_granted_buffer_and_never_falls_below_aerons() {
        assert_eq!(default_receiver_window(2 << 20), RECEIVER_WINDOW);
        assert_eq!(default_receiver_window(8 << 20), RECEIVER_WINDOW);
        assert_eq!(default_receiver_window(1 << 20), 512 * 1024);
        // Linux's default net.core.rmem_max (208 KiB): Aeron's window, as Aeron would use.
        assert_eq!(default_receiver_window(212_992), AERON_RECEIVER_WINDOW);
        assert_eq!(default_receiver_window(0), AERON_RECEIVER_WINDOW);
    }
}
