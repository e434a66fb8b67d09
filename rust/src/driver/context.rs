//! Every driver setting, defined once with its default.

use std::time::Duration;

use super::idle::IdleStrategy;
use crate::flow_control::FlowControlDefaults;
use crate::protocol::defaults;

/// How the driver's agents get CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadingMode {
    /// One driver thread runs conductor, sender and receiver in turn (the default: it leaves
    /// the second core of a 2-core machine to the application).
    Shared,
    /// No driver thread: the application calls [`super::Driver::do_work`] (or the client does it
    /// inside `offer`/`poll`). Best throughput and latency when the application busy-polls.
    Invoker,
}

impl std::str::FromStr for ThreadingMode {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "shared" => Ok(ThreadingMode::Shared),
            "invoker" => Ok(ThreadingMode::Invoker),
            other => Err(format!("threading mode {other:?} is not one of: shared, invoker")),
        }
    }
}

/// Driver settings. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct DriverContext {
    /// Threads of the driver.
    pub threading_mode: ThreadingMode,
    /// How the driver thread waits when it has nothing to do.
    pub idle_strategy: IdleStrategy,
    /// Flow control for publications whose URI has no `fc=`.
    pub flow_control: FlowControlDefaults,
    /// Interval of status messages per image (100 ms, as the design document says).
    pub status_message_interval: Duration,
    /// Unicast NAK delay (100 µs; retries at 100× that).
    pub nak_unicast_delay: Duration,
    /// Upper bound of the random multicast NAK delay (10 ms).
    pub nak_multicast_max_backoff: Duration,
    /// An image closes after this long without data or heartbeats (10 s).
    pub image_liveness_timeout: Duration,
    /// A publication forgets a receiver after this long without status messages (5 s).
    pub publication_connection_timeout: Duration,
    /// Delay before a NAKed range is resent (0).
    pub retransmit_delay: Duration,
    /// How long a resent range ignores NAKs (10 ms).
    pub retransmit_linger: Duration,
    /// Default term length for UDP publications (16 MiB).
    pub term_length: u32,
    /// Default MTU (1408).
    pub mtu: u32,
    /// Default receiver window (128 KiB, capped at term_length / 2).
    pub receiver_window: u32,
    /// Default `SO_RCVBUF` (2 MiB; the OS caps it at `net.core.rmem_max`).
    pub socket_receive_buffer: usize,
    /// Default `SO_SNDBUF` (OS default when `None`).
    pub socket_send_buffer: Option<usize>,
    /// How long a client waits for the driver to answer a command (5 s).
    pub client_command_timeout: Duration,
    /// Datagrams a sender or receiver handles per endpoint per duty cycle.
    pub datagrams_per_cycle: usize,
    /// Shared mode: a client call that finds nothing to do (an empty poll, a refused offer)
    /// yields the CPU once, so an application busy loop does not starve the driver thread
    /// on a machine with fewer cores than busy threads (true).
    pub client_yields_when_idle: bool,
    /// Images one subscription may have at once (128); further SETUPs are refused and counted
    /// (`images_refused`), so a flood of forged sessions cannot exhaust memory.
    pub max_images_per_subscription: usize,
}

impl Default for DriverContext {
    fn default() -> Self {
        DriverContext {
            threading_mode: ThreadingMode::Shared,
            idle_strategy: IdleStrategy::default(),
            flow_control: FlowControlDefaults::default(),
            status_message_interval: defaults::STATUS_MESSAGE_INTERVAL,
            nak_unicast_delay: defaults::NAK_UNICAST_DELAY,
            nak_multicast_max_backoff: defaults::NAK_MULTICAST_MAX_BACKOFF,
            image_liveness_timeout: defaults::IMAGE_LIVENESS_TIMEOUT,
            publication_connection_timeout: defaults::PUBLICATION_CONNECTION_TIMEOUT,
            retransmit_delay: defaults::RETRANSMIT_DELAY,
            retransmit_linger: defaults::RETRANSMIT_LINGER,
            term_length: defaults::TERM_LENGTH_UDP,
            mtu: defaults::MTU,
            receiver_window: defaults::RECEIVER_WINDOW,
            socket_receive_buffer: 2 * 1024 * 1024,
            socket_send_buffer: None,
            client_command_timeout: Duration::from_secs(5),
            datagrams_per_cycle: 32,
            client_yields_when_idle: true,
            max_images_per_subscription: defaults::MAX_IMAGES_PER_SUBSCRIPTION,
        }
    }
}
