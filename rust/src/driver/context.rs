//! Every driver setting, defined once with its default.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::flow_control::FlowControlDefaults;
use crate::limits;
use crate::protocol::defaults;

/// The allowed values of one integer setting (inclusive bounds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingRange {
    /// The setting's name, as the Python `Client` spells it.
    pub name: &'static str,
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value.
    pub max: u64,
}

impl SettingRange {
    /// `value` if it lies in the range; otherwise an [`Error::Setting`] naming the setting and
    /// the range. Takes a wide integer so callers check before narrowing.
    pub fn check(&self, value: i128) -> Result<u64> {
        match u64::try_from(value) {
            Ok(value) if (self.min..=self.max).contains(&value) => Ok(value),
            _ => Err(self.out_of_range(value)),
        }
    }

    /// The error for a value outside the range (`value` as the caller spelled it).
    pub fn out_of_range(&self, value: impl std::fmt::Display) -> Error {
        Error::Setting(format!("{}={value}: must be between {} and {}", self.name, self.min, self.max))
    }
}

/// The ranges of the integer settings, defined once: [`DriverContext::validate`] and the
/// Python bindings check against them.
pub mod ranges {
    use super::SettingRange;
    use crate::limits;

    /// `term_length` (bytes; also a power of two: [`limits::term_length`]).
    pub const TERM_LENGTH: SettingRange =
        SettingRange { name: "term_length", min: limits::MIN_TERM_LENGTH as u64, max: limits::MAX_TERM_LENGTH as u64 };
    /// `mtu` (bytes; also a multiple of 32: [`limits::mtu`]).
    pub const MTU: SettingRange =
        SettingRange { name: "mtu", min: limits::MIN_MTU as u64, max: limits::MAX_MTU as u64 };
    /// `receiver_window` (bytes; also at least the MTU, or no SETUP is accepted).
    pub const RECEIVER_WINDOW: SettingRange = SettingRange {
        name: "receiver_window",
        min: limits::MIN_MTU as u64,
        max: (limits::MAX_TERM_LENGTH / 2) as u64,
    };
    /// `socket_receive_buffer` (bytes, `SO_RCVBUF`; also at least the MTU).
    pub const SOCKET_RECEIVE_BUFFER: SettingRange =
        SettingRange { name: "socket_receive_buffer", min: limits::MIN_MTU as u64, max: i32::MAX as u64 };
    /// `receiver_timeout_ms`: a publication forgets a silent receiver after this long.
    pub const RECEIVER_TIMEOUT_MS: SettingRange = SettingRange { name: "receiver_timeout_ms", min: 1, max: 3_600_000 };
    /// `command_timeout_ms`: how long a client waits for the driver to answer.
    pub const COMMAND_TIMEOUT_MS: SettingRange = SettingRange { name: "command_timeout_ms", min: 1, max: 3_600_000 };
    /// Every quota of [`super::ClientQuotas`] (a count; at least 1).
    pub const QUOTA_MAX: u64 = 1 << 20;
}

/// Per-client limits of a shared driver, so that one client (or a flood of invented client
/// ids) cannot starve the others: defined once here, with their defaults and the
/// `affinity driver` options that set them ([`ClientQuota::option`]). A command past a quota
/// is refused with `ON_ERROR` (code `QUOTA_EXCEEDED`) naming the quota and its limit, and the
/// driver's error log records it (one record per client and quota, its count repeats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientQuotas {
    /// Client ids the driver tracks at once (default 1,024): a command from a further id is
    /// refused (not tracked, no counter) until a tracked client closes or times out.
    pub max_clients: usize,
    /// Publication handles one client holds at once (default 1,024; each add counts, also
    /// of a stream already open).
    pub publications_per_client: usize,
    /// Subscriptions one client holds at once (default 1,024).
    pub subscriptions_per_client: usize,
    /// Counters allocated with one client as owner (heartbeat, publisher limits and positions,
    /// subscriber positions; default 2,048): checked before each add. Keep `max_clients` times
    /// a client's share below the cnc's counters (8,192) for a hard guarantee.
    pub counters_per_client: usize,
    /// Commands of one client the conductor processes per duty cycle (default 16): the clients
    /// with commands waiting take turns, so one flooder gets at most this share of a cycle.
    pub commands_per_cycle_per_client: usize,
    /// Commands of one client read from the to-driver ring and waiting for their turn (default
    /// 256): a further command is refused at once.
    pub queued_commands_per_client: usize,
}

impl Default for ClientQuotas {
    fn default() -> Self {
        ClientQuotas {
            max_clients: 1024,
            publications_per_client: 1024,
            subscriptions_per_client: 1024,
            counters_per_client: 2048,
            commands_per_cycle_per_client: 16,
            queued_commands_per_client: 256,
        }
    }
}

/// One of [`ClientQuotas`], by the name its errors and options use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientQuota {
    /// [`ClientQuotas::max_clients`].
    MaxClients,
    /// [`ClientQuotas::publications_per_client`].
    PublicationsPerClient,
    /// [`ClientQuotas::subscriptions_per_client`].
    SubscriptionsPerClient,
    /// [`ClientQuotas::counters_per_client`].
    CountersPerClient,
    /// [`ClientQuotas::commands_per_cycle_per_client`].
    CommandsPerCyclePerClient,
    /// [`ClientQuotas::queued_commands_per_client`].
    QueuedCommandsPerClient,
}

impl ClientQuota {
    /// Every quota.
    pub const ALL: [ClientQuota; 6] = [
        ClientQuota::MaxClients,
        ClientQuota::PublicationsPerClient,
        ClientQuota::SubscriptionsPerClient,
        ClientQuota::CountersPerClient,
        ClientQuota::CommandsPerCyclePerClient,
        ClientQuota::QueuedCommandsPerClient,
    ];

    /// Its name in errors (`max_clients`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ClientQuota::MaxClients => "max_clients",
            ClientQuota::PublicationsPerClient => "publications_per_client",
            ClientQuota::SubscriptionsPerClient => "subscriptions_per_client",
            ClientQuota::CountersPerClient => "counters_per_client",
            ClientQuota::CommandsPerCyclePerClient => "commands_per_cycle_per_client",
            ClientQuota::QueuedCommandsPerClient => "queued_commands_per_client",
        }
    }

    /// The `affinity driver` option that sets it (`--max-clients`, ...).
    pub fn option(self) -> String {
        format!("--{}", self.name().replace('_', "-"))
    }

    /// Its field in `quotas`.
    pub fn of(self, quotas: &mut ClientQuotas) -> &mut usize {
        match self {
            ClientQuota::MaxClients => &mut quotas.max_clients,
            ClientQuota::PublicationsPerClient => &mut quotas.publications_per_client,
            ClientQuota::SubscriptionsPerClient => &mut quotas.subscriptions_per_client,
            ClientQuota::CountersPerClient => &mut quotas.counters_per_client,
            ClientQuota::CommandsPerCyclePerClient => &mut quotas.commands_per_cycle_per_client,
            ClientQuota::QueuedCommandsPerClient => &mut quotas.queued_commands_per_client,
        }
    }

    /// Its value in `quotas`.
    pub fn get(self, quotas: &ClientQuotas) -> usize {
        let mut copy = *quotas;
        *self.of(&mut copy)
    }

    /// The text of a refusal: `client 7: quota publications_per_client=1024 reached
    /// (affinity driver --publications-per-client)`.
    pub fn exceeded(self, client_id: i64, quotas: &ClientQuotas) -> String {
        format!(
            "client {client_id}: quota {}={} reached (affinity driver {})",
            self.name(),
            self.get(quotas),
            self.option()
        )
    }

    /// The range every quota takes.
    pub fn range(self) -> SettingRange {
        SettingRange { name: self.name(), min: 1, max: ranges::QUOTA_MAX }
    }
}

/// Driver settings. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct DriverContext {
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
    /// UDP segmentation and receive offload (Linux GSO / GRO; on): a run of equal-sized
    /// datagrams crosses the kernel as one send and, on the same host, one delivery. The
    /// datagrams on the wire are the same; off sends and receives each alone.
    pub udp_offload: bool,
    /// Images one subscription may have at once (128); further SETUPs are refused and counted
    /// (`images_refused`), so a flood of forged sessions cannot exhaust memory.
    pub max_images_per_subscription: usize,
    /// Per-client limits of a shared driver ([`ClientQuotas`]).
    pub quotas: ClientQuotas,
}

impl DriverContext {
    /// Checks every setting against its range ([`ranges`]) and against the others (a receiver
    /// window or socket buffer smaller than the MTU would refuse every SETUP: nothing would ever
    /// connect). The error names the setting and its allowed range.
    pub fn validate(&self) -> Result<()> {
        let rule = |name: &str, value: u32, rule: &str| Error::Setting(format!("{name}={value}: {rule}"));
        limits::term_length(i128::from(self.term_length))
            .map_err(|why| rule(ranges::TERM_LENGTH.name, self.term_length, why))?;
        limits::mtu(i128::from(self.mtu)).map_err(|why| rule(ranges::MTU.name, self.mtu, why))?;
        let mtu = u64::from(self.mtu);
        let at_least_mtu = |range: SettingRange, value: u64| {
            range.check(i128::from(value))?;
            if value < mtu {
                return Err(Error::Setting(format!(
                    "{}={value}: must be between the mtu ({mtu}) and {}",
                    range.name, range.max
                )));
            }
            Ok(())
        };
        at_least_mtu(ranges::RECEIVER_WINDOW, u64::from(self.receiver_window))?;
        at_least_mtu(ranges::SOCKET_RECEIVE_BUFFER, self.socket_receive_buffer as u64)?;
        ranges::RECEIVER_TIMEOUT_MS.check(self.flow_control.receiver_timeout.as_millis() as i128)?;
        ranges::COMMAND_TIMEOUT_MS.check(self.client_command_timeout.as_millis() as i128)?;
        for quota in ClientQuota::ALL {
            quota.range().check(quota.get(&self.quotas) as i128)?;
        }
        Ok(())
    }
}

impl Default for DriverContext {
    fn default() -> Self {
        DriverContext {
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
            udp_offload: true,
            max_images_per_subscription: defaults::MAX_IMAGES_PER_SUBSCRIPTION,
            quotas: ClientQuotas::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting_error(context: DriverContext) -> String {
        match context.validate() {
            Err(Error::Setting(message)) => message,
            other => panic!("expected a setting error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        DriverContext::default().validate().unwrap();
    }

    #[test]
    fn settings_that_would_never_connect_are_refused_with_their_range() {
        let zero_window = setting_error(DriverContext { receiver_window: 0, ..DriverContext::default() });
        assert_eq!(zero_window, "receiver_window=0: must be between 64 and 536870912");
        let small_window = setting_error(DriverContext { receiver_window: 1024, ..DriverContext::default() });
        assert_eq!(small_window, "receiver_window=1024: must be between the mtu (1408) and 536870912");
        let no_buffer = setting_error(DriverContext { socket_receive_buffer: 0, ..DriverContext::default() });
        assert!(no_buffer.starts_with("socket_receive_buffer=0: must be between"), "{no_buffer}");
        let no_time =
            setting_error(DriverContext { client_command_timeout: Duration::ZERO, ..DriverContext::default() });
        assert_eq!(no_time, "command_timeout_ms=0: must be between 1 and 3600000");
        let quotas = ClientQuotas { commands_per_cycle_per_client: 0, ..ClientQuotas::default() };
        let no_turn = setting_error(DriverContext { quotas, ..DriverContext::default() });
        assert_eq!(no_turn, "commands_per_cycle_per_client=0: must be between 1 and 1048576");
    }

    #[test]
    fn a_quota_refusal_names_the_quota_its_limit_and_its_option() {
        let quotas = ClientQuotas::default();
        assert_eq!(
            ClientQuota::PublicationsPerClient.exceeded(7, &quotas),
            "client 7: quota publications_per_client=1024 reached (affinity driver --publications-per-client)"
        );
        assert_eq!(ClientQuota::MaxClients.option(), "--max-clients");
    }

    #[test]
    fn term_length_and_mtu_use_the_protocol_limits() {
        let term = setting_error(DriverContext { term_length: 1000, ..DriverContext::default() });
        assert_eq!(term, format!("term_length=1000: {}", limits::TERM_LENGTH_RULE));
        let mtu = setting_error(DriverContext { mtu: 33, ..DriverContext::default() });
        assert_eq!(mtu, format!("mtu=33: {}", limits::MTU_RULE));
    }

    #[test]
    fn range_check_takes_values_wider_than_the_setting() {
        assert!(ranges::COMMAND_TIMEOUT_MS.check(-1).is_err());
        assert!(ranges::COMMAND_TIMEOUT_MS.check(i128::MAX).is_err());
        assert_eq!(ranges::COMMAND_TIMEOUT_MS.check(5000).unwrap(), 5000);
    }
}
