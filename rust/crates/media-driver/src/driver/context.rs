//! Every driver setting, defined once with its default: [`DriverContext`], the one settings
//! type of the media driver (Aeron's `MediaDriver.Context`). [`DriverContext::apply`] sets one
//! by name from text, the same names and values for `affinity driver --NAME VALUE`, the
//! `affinity-driver` binary and `affinity.Client(NAME=VALUE)`; sizes and durations are read
//! with the one grammar of [`crate::units`].

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::flow_control::{FlowControlDefaults, FlowControlSpec};
use crate::limits;
use crate::protocol::defaults;
use crate::shm::cnc::CncParams;
use crate::shm::directory;
use crate::units::{self, BareUnit, TimeUnit};

use super::cpu;
use super::idle::IdleStrategy;

/// Default `SO_RCVBUF` of the driver's UDP sockets (2 MiB; the OS caps it at `net.core.rmem_max`).
pub const DEFAULT_SOCKET_RECEIVE_BUFFER: usize = 2 << 20;
/// Default client liveness timeout: a client silent this long is reclaimed (the contract's
/// value, which the cnc header carries).
pub const DEFAULT_CLIENT_TIMEOUT: Duration = directory::CLIENT_TIMEOUT;
/// A publication's reader (the sender, or an IPC publication's slowest subscriber) that stands
/// at a claim no client commits for this many client timeouts has the claim padded over: its
/// client died while appending, and was reclaimed first (Aeron's publication unblock timeout,
/// 15 s against a 10 s client timeout).
pub const PUBLICATION_UNBLOCK_CLIENT_TIMEOUTS: u32 = 2;
/// Default wait before a freed counter id is reused.
pub const DEFAULT_COUNTER_REUSE: Duration = Duration::from_secs(1);
/// Default datagrams a sender or receiver handles per endpoint per duty cycle.
pub const DEFAULT_DATAGRAMS_PER_CYCLE: usize = 32;

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
    /// `client_timeout_ms`: a client silent this long is reclaimed.
    pub const CLIENT_TIMEOUT_MS: SettingRange = SettingRange { name: "client_timeout_ms", min: 1, max: 3_600_000 };
    /// `linger_ms`: how long a released publication waits for its subscribers at most.
    pub const LINGER_MS: SettingRange = SettingRange { name: "linger_ms", min: 0, max: 3_600_000 };
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

/// How the driver's agents (conductor, sender, receiver) get CPU time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Threading {
    /// One driver thread runs the three agents in turn (the default: right on 2 cores).
    #[default]
    Shared,
    /// The conductor on one thread, sender and receiver on another.
    SharedNetwork,
    /// Conductor, sender and receiver on a thread each.
    Dedicated,
    /// No driver thread: the embedder runs the duty cycle (`MediaDriver::do_work`,
    /// `Client.do_work()`, and any client call waiting for the driver). Embedded drivers only.
    Invoker,
}

impl Threading {
    /// Every mode, in the order errors list them.
    pub const ALL: [Threading; 4] =
        [Threading::Shared, Threading::SharedNetwork, Threading::Dedicated, Threading::Invoker];

    /// The mode's name (`--threading`, `Client(threading=...)`, `Client.threading`).
    pub fn name(self) -> &'static str {
        match self {
            Threading::Shared => "shared",
            Threading::SharedNetwork => "shared-network",
            Threading::Dedicated => "dedicated",
            Threading::Invoker => "invoker",
        }
    }
}

impl std::str::FromStr for Threading {
    type Err = String;
    fn from_str(value: &str) -> std::result::Result<Self, String> {
        Self::ALL.into_iter().find(|mode| mode.name() == value).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|mode| mode.name()).collect();
            format!("expected one of {}", names.join(", "))
        })
    }
}

/// The CPU each driver thread is pinned to (`None`: left to the scheduler, the default), as
/// Aeron's `aeron.conductor.cpu.affinity`, `aeron.sender.cpu.affinity` and
/// `aeron.receiver.cpu.affinity`. A mode with fewer threads uses the first agent's setting of
/// each thread: `shared` the conductor's, `shared-network`'s network thread the sender's; a
/// setting no thread of the mode takes is refused, never ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuAffinity {
    /// The conductor's thread (`shared`: the one driver thread).
    pub conductor: Option<usize>,
    /// The sender's thread (`shared-network`: the sender's and receiver's thread).
    pub sender: Option<usize>,
    /// The receiver's thread (`dedicated` only).
    pub receiver: Option<usize>,
}

impl CpuAffinity {
    /// The settings' names: the conductor's, the sender's and the receiver's, the order in
    /// which the modes give the agents a thread of their own.
    pub const NAMES: [&'static str; 3] = ["conductor_cpu_affinity", "sender_cpu_affinity", "receiver_cpu_affinity"];

    /// The settings in the order of [`Self::NAMES`].
    fn values(&self) -> [Option<usize>; 3] {
        [self.conductor, self.sender, self.receiver]
    }

    /// The setting `name` (one of [`Self::NAMES`]).
    fn slot(&mut self, name: &str) -> Option<&mut Option<usize>> {
        let index = Self::NAMES.iter().position(|known| *known == name)?;
        [&mut self.conductor, &mut self.sender, &mut self.receiver].into_iter().nth(index)
    }

    /// The setting `name` as [`DriverContext::apply`] reads it (`none` or the CPU).
    fn show(&self, name: &str) -> Option<String> {
        let index = Self::NAMES.iter().position(|known| *known == name)?;
        Some(self.values()[index].map_or_else(|| "none".to_owned(), |cpu| cpu.to_string()))
    }

    /// Refuses a setting that `threading` starts no thread for, and a CPU this process may not
    /// run on (the error lists those it may).
    pub fn validate(&self, threading: Threading) -> Result<()> {
        let threads = match threading {
            Threading::Invoker => 0,
            Threading::Shared => 1,
            Threading::SharedNetwork => 2,
            Threading::Dedicated => 3,
        };
        for (index, (name, cpu)) in Self::NAMES.into_iter().zip(self.values()).enumerate() {
            let Some(cpu) = cpu else { continue };
            let why = if index >= threads {
                match threading {
                    Threading::Invoker => {
                        "threading invoker starts no driver thread: the application's threads run the agents".to_owned()
                    }
                    Threading::Shared => {
                        "threading shared runs every agent on one thread: set conductor_cpu_affinity".to_owned()
                    }
                    _ => "threading shared-network runs the receiver on the sender's thread: set sender_cpu_affinity"
                        .to_owned(),
                }
            } else {
                match cpu::allowed() {
                    Ok(allowed) if allowed.contains(&cpu) => continue,
                    Ok(allowed) => format!("this process may run on CPUs {} only", cpu::describe(&allowed)),
                    Err(error) => error.to_string(),
                }
            };
            return Err(Error::Setting(format!("{name}={cpu}: {why}")));
        }
        Ok(())
    }
}

/// What kind of value a setting takes (how [`DriverContext::apply`] reads it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingKind {
    /// A path.
    Path,
    /// One of a list of names.
    Choice,
    /// A size in bytes ([`units::parse_size`]): `65536`, `64k`, `16m`.
    Size,
    /// A duration ([`units::parse_duration`]): `500ms`, `2s`. The same setting with `_ms`
    /// appended takes a bare number of milliseconds (`command_timeout_ms=2000`).
    Duration,
    /// A flow-control specification (`min`, `tagged,g:7/2,t:2s`).
    FlowControl,
    /// `on` or `off` (also `true` / `false`).
    Switch,
    /// A whole number (a count).
    Count,
    /// A CPU number, or `none` (a thread's CPU affinity).
    Cpu,
}

/// One setting [`DriverContext::apply`] takes: its name (`affinity driver --NAME-WITH-DASHES`,
/// `affinity.Client(NAME=...)`), the kind of value and the help line of the usage text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The name, with underscores.
    pub name: &'static str,
    /// How the value is read.
    pub kind: SettingKind,
    /// The usage text's line (the default is appended from [`DriverContext::default`]).
    pub help: &'static str,
}

impl Setting {
    /// The command-line option (`--term-length`).
    pub fn option(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }
}

/// Every setting [`DriverContext::apply`] takes, in the order the usage text lists them.
pub const SETTINGS: [Setting; 22] = [
    Setting { name: "dir", kind: SettingKind::Path, help: "driver directory" },
    Setting {
        name: "threading",
        kind: SettingKind::Choice,
        help: "shared: one thread; shared-network: conductor + network thread; dedicated: three; \
               invoker (embedded only): none",
    },
    Setting {
        name: "idle",
        kind: SettingKind::Choice,
        help: "idle strategy of the driver threads: busy-spin, yield or backoff",
    },
    Setting {
        name: CpuAffinity::NAMES[0],
        kind: SettingKind::Cpu,
        help: "CPU the conductor's thread runs on (threading shared: the one driver thread), or none",
    },
    Setting {
        name: CpuAffinity::NAMES[1],
        kind: SettingKind::Cpu,
        help: "CPU the sender's thread runs on (threading shared-network: the network thread), or none",
    },
    Setting {
        name: CpuAffinity::NAMES[2],
        kind: SettingKind::Cpu,
        help: "CPU the receiver's thread runs on (threading dedicated), or none",
    },
    Setting {
        name: "term_length",
        kind: SettingKind::Size,
        help: "term length of logs whose channel names none (aeron:ipc and aeron:udp alike)",
    },
    Setting { name: "mtu", kind: SettingKind::Size, help: "MTU of logs whose channel names none" },
    Setting {
        name: "receiver_window",
        kind: SettingKind::Size,
        help: "receiver window of images whose channel names none",
    },
    Setting {
        name: "socket_receive_buffer",
        kind: SettingKind::Size,
        help: "SO_RCVBUF of UDP sockets whose channel names none",
    },
    Setting {
        name: "flow_control",
        kind: SettingKind::FlowControl,
        help: "flow control of multicast publications whose channel names no fc= \
               (max, min, tagged,g:<tag>[/<min size>], with an optional ,t:<timeout>)",
    },
    Setting {
        name: "receiver_timeout",
        kind: SettingKind::Duration,
        help: "a publication forgets a silent receiver after this long",
    },
    Setting { name: "client_timeout", kind: SettingKind::Duration, help: "a client silent this long is reclaimed" },
    Setting {
        name: "linger",
        kind: SettingKind::Duration,
        help: "a released publication waits at most this long for its subscribers",
    },
    Setting {
        name: "command_timeout",
        kind: SettingKind::Duration,
        help: "an embedded client waits this long for the driver's answer",
    },
    Setting {
        name: "udp_offload",
        kind: SettingKind::Switch,
        help: "send runs of equal-sized datagrams as one send, receive them as one (Linux UDP GSO/GRO)",
    },
    Setting { name: "max_clients", kind: SettingKind::Count, help: "client ids the driver tracks at once" },
    Setting {
        name: "publications_per_client",
        kind: SettingKind::Count,
        help: "publication handles one client holds at once",
    },
    Setting {
        name: "subscriptions_per_client",
        kind: SettingKind::Count,
        help: "subscriptions one client holds at once",
    },
    Setting {
        name: "counters_per_client",
        kind: SettingKind::Count,
        help: "counters allocated for one client at once",
    },
    Setting {
        name: "commands_per_cycle_per_client",
        kind: SettingKind::Count,
        help: "commands of one client run per duty cycle; clients take turns",
    },
    Setting {
        name: "queued_commands_per_client",
        kind: SettingKind::Count,
        help: "commands of one client waiting for their turn; more are refused",
    },
];

/// The quota a setting name names, if any.
fn quota_named(name: &str) -> Option<ClientQuota> {
    ClientQuota::ALL.into_iter().find(|quota| quota.name() == name)
}

/// Every setting name [`DriverContext::apply`] takes (without the `_ms` forms of durations).
pub fn setting_names() -> Vec<&'static str> {
    SETTINGS.iter().map(|setting| setting.name).collect()
}

/// The kind of the setting `name` takes, `None` when [`DriverContext::apply`] knows no such
/// setting: one of [`SETTINGS`], or a duration's `_ms` form (a bare number of milliseconds).
pub fn setting_kind(name: &str) -> Option<SettingKind> {
    let kind = |name: &str| SETTINGS.iter().find(|setting| setting.name == name).map(|setting| setting.kind);
    match name.strip_suffix("_ms") {
        Some(base) if kind(base) == Some(SettingKind::Duration) => Some(SettingKind::Duration),
        _ => kind(name),
    }
}

/// The media driver's settings, one type for the standalone process and the embedded driver
/// (Aeron's `MediaDriver.Context`). `Default` gives the documented defaults; [`Self::apply`]
/// sets one by name; [`Self::validate`] checks them together (the driver does at launch).
#[derive(Clone, Debug)]
pub struct DriverContext {
    /// The driver directory (`$AFFINITY_DIR`, else `/dev/shm/affinity-<login name>`; an
    /// embedded driver uses a private directory instead).
    pub dir: PathBuf,
    /// How the agents get CPU time ([`Threading::Shared`]).
    pub threading: Threading,
    /// What an agent thread does when idle (backoff).
    pub idle: IdleStrategy,
    /// The CPU each driver thread is pinned to (none: the scheduler's choice).
    pub cpu_affinity: CpuAffinity,
    /// Sizes of the cnc file.
    pub cnc: CncParams,
    /// A client silent this long is dead ([`DEFAULT_CLIENT_TIMEOUT`]).
    pub client_timeout: Duration,
    /// A driver heartbeat older than this marks a directory stale (10 s).
    pub driver_timeout: Duration,
    /// How long a client of this driver waits for an answer to a command
    /// ([`directory::COMMAND_TIMEOUT`], the one default of every client).
    pub command_timeout: Duration,
    /// How long a released publication waits for its subscribers at most (5 s).
    pub publication_linger: Duration,
    /// How long a freed counter id waits before reuse ([`DEFAULT_COUNTER_REUSE`]).
    pub counter_reuse: Duration,
    /// Term length of `aeron:ipc` logs whose channel names none (64 MiB).
    pub ipc_term_length: u32,
    /// Term length of `aeron:udp` logs whose channel names none (16 MiB).
    pub term_length: u32,
    /// MTU of logs whose channel names none (1408).
    pub mtu: u32,
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
    /// Default receiver window (`protocol::defaults::RECEIVER_WINDOW`, 1 MiB, capped at
    /// term_length / 2).
    pub receiver_window: u32,
    /// Default `SO_RCVBUF` ([`DEFAULT_SOCKET_RECEIVE_BUFFER`]).
    pub socket_receive_buffer: usize,
    /// Default `SO_SNDBUF` (OS default when `None`).
    pub socket_send_buffer: Option<usize>,
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

/// A whole number as written (`-1`, forty digits): wide enough that a number out of its
/// setting's range is reported by that range, never as unreadable. `None` for other text.
fn whole_number(value: &str) -> Option<i128> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i128>().unwrap_or(i128::MAX);
    Some(if value.starts_with('-') { -magnitude } else { magnitude })
}

impl DriverContext {
    /// The defaults for the driver directory `dir`.
    pub fn new(dir: PathBuf) -> Self {
        DriverContext { dir, ..DriverContext::default() }
    }

    /// How long a publication's reader stands at a claim no client commits before the driver
    /// pads it over ([`PUBLICATION_UNBLOCK_CLIENT_TIMEOUTS`] client timeouts).
    pub fn publication_unblock_timeout(&self) -> Duration {
        self.client_timeout.saturating_mul(PUBLICATION_UNBLOCK_CLIENT_TIMEOUTS)
    }

    /// Sets the setting `name` (one of [`setting_names`], or a duration's `_ms` form) from
    /// `value` as a user wrote it. The error ([`Error::Setting`]) names the setting and the
    /// value as given and says what is allowed: `mtu=33: must be a multiple of 32 between 64
    /// and 65504`. Checks the value alone; [`Self::validate`] checks the settings together.
    pub fn apply(&mut self, name: &str, value: &str) -> Result<()> {
        let bad = |why: &dyn std::fmt::Display| Error::Setting(format!("{name}={value}: {why}"));
        let (base, bare) = match name.strip_suffix("_ms") {
            Some(base) => (base, BareUnit::Is(TimeUnit::Milliseconds)),
            None => (name, BareUnit::Refused),
        };
        let kind = setting_kind(name).ok_or_else(|| unknown_setting(name))?;
        match kind {
            SettingKind::Path if value.is_empty() => return Err(bad(&"must not be empty")),
            SettingKind::Path => self.dir = PathBuf::from(value),
            SettingKind::Choice if name == "threading" => {
                self.threading = value.parse().map_err(|e: String| bad(&e))?
            }
            SettingKind::Choice => {
                self.idle = value.parse().map_err(|_| bad(&"expected one of busy-spin, yield, backoff"))?
            }
            SettingKind::Size => {
                let size = match whole_number(value) {
                    Some(number) => number,
                    None => units::parse_size(value).map(i128::from).map_err(|e| bad(&e))?,
                };
                match name {
                    "term_length" => {
                        let length = limits::term_length(size).map_err(|e| bad(&e))?;
                        (self.ipc_term_length, self.term_length) = (length, length);
                    }
                    "mtu" => self.mtu = limits::mtu(size).map_err(|e| bad(&e))?,
                    "receiver_window" => self.receiver_window = checked(&ranges::RECEIVER_WINDOW, size, &bad)? as u32,
                    _ => self.socket_receive_buffer = checked(&ranges::SOCKET_RECEIVE_BUFFER, size, &bad)? as usize,
                }
            }
            SettingKind::FlowControl => {
                let spec = FlowControlSpec::parse(value).map_err(|e| bad(&e.reason))?;
                let flow = &mut self.flow_control;
                flow.multicast_strategy = spec.strategy;
                flow.group_tag = spec.group_tag.or(flow.group_tag);
                flow.group_min_size = spec.group_min_size.unwrap_or(flow.group_min_size);
                if let Some(timeout) = spec.receiver_timeout {
                    flow.receiver_timeout = timeout;
                }
            }
            SettingKind::Duration => {
                let range = match base {
                    "receiver_timeout" => ranges::RECEIVER_TIMEOUT_MS,
                    "client_timeout" => ranges::CLIENT_TIMEOUT_MS,
                    "linger" => ranges::LINGER_MS,
                    _ => ranges::COMMAND_TIMEOUT_MS,
                };
                let duration = duration_in(&range, value, bare, &bad)?;
                match base {
                    "receiver_timeout" => self.flow_control.receiver_timeout = duration,
                    "client_timeout" => self.client_timeout = duration,
                    "linger" => self.publication_linger = duration,
                    _ => self.command_timeout = duration,
                }
            }
            SettingKind::Switch => {
                self.udp_offload = match value {
                    "on" | "true" => true,
                    "off" | "false" => false,
                    _ => return Err(bad(&"expected on or off")),
                }
            }
            SettingKind::Cpu => {
                let cpu = match value {
                    "none" => None,
                    _ => match whole_number(value) {
                        Some(number) if (0..=cpu::MAX_CPU as i128).contains(&number) => Some(number as usize),
                        _ => {
                            return Err(bad(&format_args!(
                                "expected a CPU number between 0 and {}, or none",
                                cpu::MAX_CPU
                            )))
                        }
                    },
                };
                *self.cpu_affinity.slot(name).ok_or_else(|| unknown_setting(name))? = cpu;
            }
            SettingKind::Count => {
                let quota = quota_named(name).ok_or_else(|| unknown_setting(name))?;
                let number = whole_number(value).ok_or_else(|| bad(&"expected a whole number"))?;
                *quota.of(&mut self.quotas) = checked(&quota.range(), number, &bad)? as usize;
            }
        }
        Ok(())
    }

    /// Checks every setting against its range ([`ranges`]) and against the others (a receiver
    /// window or socket buffer smaller than the MTU would refuse every SETUP: nothing would ever
    /// connect). The error names the setting and its allowed range.
    pub fn validate(&self) -> Result<()> {
        let rule = |name: &str, value: u32, rule: &str| Error::Setting(format!("{name}={value}: {rule}"));
        for term_length in [self.term_length, self.ipc_term_length] {
            limits::term_length(i128::from(term_length))
                .map_err(|why| rule(ranges::TERM_LENGTH.name, term_length, why))?;
        }
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
        ranges::COMMAND_TIMEOUT_MS.check(self.command_timeout.as_millis() as i128)?;
        ranges::CLIENT_TIMEOUT_MS.check(self.client_timeout.as_millis() as i128)?;
        ranges::LINGER_MS.check(self.publication_linger.as_millis() as i128)?;
        for quota in ClientQuota::ALL {
            quota.range().check(quota.get(&self.quotas) as i128)?;
        }
        self.cpu_affinity.validate(self.threading)
    }

    /// The value of a setting of [`setting_names`] as [`Self::apply`] reads it back (the usage
    /// text shows the defaults with it).
    pub fn value_of(&self, name: &str) -> Option<String> {
        let size = |bytes: u64| match bytes {
            b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}m", b >> 20),
            b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}k", b >> 10),
            b => b.to_string(),
        };
        let switch = |on: bool| if on { "on" } else { "off" }.to_string();
        Some(match name {
            "dir" => self.dir.display().to_string(),
            "threading" => self.threading.name().to_string(),
            "idle" => self.idle.name().to_string(),
            "term_length" => {
                format!("aeron:ipc {}, aeron:udp {}", size(self.ipc_term_length.into()), size(self.term_length.into()))
            }
            "mtu" => self.mtu.to_string(),
            "receiver_window" => size(self.receiver_window.into()),
            "socket_receive_buffer" => size(self.socket_receive_buffer as u64),
            "flow_control" => FlowControlSpec {
                strategy: self.flow_control.multicast_strategy,
                group_tag: self.flow_control.group_tag,
                group_min_size: Some(self.flow_control.group_min_size).filter(|size| *size > 0),
                receiver_timeout: None,
            }
            .to_string(),
            "receiver_timeout" => units::format_duration(self.flow_control.receiver_timeout),
            "client_timeout" => units::format_duration(self.client_timeout),
            "linger" => units::format_duration(self.publication_linger),
            "command_timeout" => units::format_duration(self.command_timeout),
            "udp_offload" => switch(self.udp_offload),
            other => match self.cpu_affinity.show(other) {
                Some(cpu) => cpu,
                None => quota_named(other)?.get(&self.quotas).to_string(),
            },
        })
    }
}

/// `value` in `range`, or the error naming the range.
fn checked(range: &SettingRange, value: i128, bad: &dyn Fn(&dyn std::fmt::Display) -> Error) -> Result<u64> {
    range.check(value).map_err(|_| bad(&format_args!("must be between {} and {}", range.min, range.max)))
}

/// A duration setting's value in its range of milliseconds: a bare number is in `bare`
/// (milliseconds for a `_ms` name; refused for a name that gives no unit). The range is shown
/// in milliseconds for a `_ms` name, with units otherwise.
fn duration_in(
    range: &SettingRange,
    value: &str,
    bare: BareUnit,
    bad: &dyn Fn(&dyn std::fmt::Display) -> Error,
) -> Result<Duration> {
    let out_of_range = || match bare {
        BareUnit::Is(_) => bad(&format_args!("must be between {} and {}", range.min, range.max)),
        BareUnit::Refused => bad(&format_args!(
            "must be between {} and {}",
            units::format_duration(Duration::from_millis(range.min)),
            units::format_duration(Duration::from_millis(range.max))
        )),
    };
    if let (Some(number), BareUnit::Is(_)) = (whole_number(value), bare) {
        // A whole number of milliseconds: any one out of range says the range.
        let millis = range.check(number).map_err(|_| out_of_range())?;
        return Ok(Duration::from_millis(millis));
    }
    let duration = units::parse_duration(value, bare).map_err(|e| bad(&e))?;
    let (min, max) = (Duration::from_millis(range.min), Duration::from_millis(range.max));
    if duration < min || duration > max {
        return Err(out_of_range());
    }
    Ok(duration)
}

fn unknown_setting(name: &str) -> Error {
    Error::Setting(format!("unknown setting {name:?} (known: {})", setting_names().join(", ")))
}

impl Default for DriverContext {
    fn default() -> Self {
        DriverContext {
            dir: directory::default_dir(),
            threading: Threading::default(),
            idle: IdleStrategy::default(),
            cpu_affinity: CpuAffinity::default(),
            cnc: CncParams::default(),
            client_timeout: DEFAULT_CLIENT_TIMEOUT,
            driver_timeout: Duration::from_millis(directory::DRIVER_TIMEOUT_MS as u64),
            command_timeout: directory::COMMAND_TIMEOUT,
            publication_linger: defaults::PUBLICATION_LINGER,
            counter_reuse: DEFAULT_COUNTER_REUSE,
            ipc_term_length: defaults::TERM_LENGTH_IPC,
            term_length: defaults::TERM_LENGTH_UDP,
            mtu: defaults::MTU,
            flow_control: FlowControlDefaults::default(),
            status_message_interval: defaults::STATUS_MESSAGE_INTERVAL,
            nak_unicast_delay: defaults::NAK_UNICAST_DELAY,
            nak_multicast_max_backoff: defaults::NAK_MULTICAST_MAX_BACKOFF,
            image_liveness_timeout: defaults::IMAGE_LIVENESS_TIMEOUT,
            publication_connection_timeout: defaults::PUBLICATION_CONNECTION_TIMEOUT,
            retransmit_delay: defaults::RETRANSMIT_DELAY,
            retransmit_linger: defaults::RETRANSMIT_LINGER,
            receiver_window: defaults::RECEIVER_WINDOW,
            socket_receive_buffer: DEFAULT_SOCKET_RECEIVE_BUFFER,
            socket_send_buffer: None,
            datagrams_per_cycle: DEFAULT_DATAGRAMS_PER_CYCLE,
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
    fn cpu_settings_take_a_cpu_number_or_none_and_read_back() {
        let mut context = DriverContext::default();
        context.apply("sender_cpu_affinity", "1").unwrap();
        assert_eq!(context.cpu_affinity.sender, Some(1));
        assert_eq!(context.value_of("sender_cpu_affinity").as_deref(), Some("1"));
        context.apply("sender_cpu_affinity", "none").unwrap();
        assert_eq!(context.cpu_affinity, CpuAffinity::default());
        assert_eq!(context.value_of("receiver_cpu_affinity").as_deref(), Some("none"));
        for bad in ["-1", "1024", "first", ""] {
            let error = context.apply("conductor_cpu_affinity", bad).unwrap_err().to_string();
            assert!(
                error.ends_with(&format!(
                    "conductor_cpu_affinity={bad}: expected a CPU number between 0 and 1023, or none"
                )),
                "{error}"
            );
        }
    }

    #[test]
    fn the_default_receiver_window_fits_half_the_default_socket_buffer() {
        // A full window in flight must fit the kernel's receive buffer with room to spare
        // (a datagram's buffer accounting exceeds its bytes), or a lagging receiver drops it.
        let context = DriverContext::default();
        assert!(
            context.receiver_window as usize <= context.socket_receive_buffer / 2,
            "receiver_window {} > SO_RCVBUF {} / 2",
            context.receiver_window,
            context.socket_receive_buffer
        );
    }

    #[test]
    fn settings_that_would_never_connect_are_refused_with_their_range() {
        let zero_window = setting_error(DriverContext { receiver_window: 0, ..DriverContext::default() });
        assert_eq!(zero_window, "receiver_window=0: must be between 64 and 536870912");
        let small_window = setting_error(DriverContext { receiver_window: 1024, ..DriverContext::default() });
        assert_eq!(small_window, "receiver_window=1024: must be between the mtu (1408) and 536870912");
        let no_buffer = setting_error(DriverContext { socket_receive_buffer: 0, ..DriverContext::default() });
        assert!(no_buffer.starts_with("socket_receive_buffer=0: must be between"), "{no_buffer}");
        let no_time = setting_error(DriverContext { command_timeout: Duration::ZERO, ..DriverContext::default() });
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

    fn applied(name: &str, value: &str) -> Result<DriverContext> {
        let mut context = DriverContext::default();
        context.apply(name, value)?;
        Ok(context)
    }

    fn refusal(name: &str, value: &str) -> String {
        match applied(name, value) {
            Err(Error::Setting(message)) => message,
            other => panic!("{name}={value}: expected a setting error, got {other:?}"),
        }
    }

    #[test]
    fn apply_sets_each_setting_from_text() {
        let ms = Duration::from_millis;
        assert_eq!(applied("dir", "/tmp/d").unwrap().dir, PathBuf::from("/tmp/d"));
        assert_eq!(applied("threading", "invoker").unwrap().threading, Threading::Invoker);
        assert_eq!(applied("idle", "yield").unwrap().idle, IdleStrategy::Yield);
        let terms = applied("term_length", "1m").unwrap();
        assert_eq!((terms.ipc_term_length, terms.term_length), (1 << 20, 1 << 20));
        assert_eq!(applied("mtu", "8k").unwrap().mtu, 8192);
        assert_eq!(applied("mtu", "4096").unwrap().mtu, 4096);
        assert_eq!(applied("receiver_window", "256k").unwrap().receiver_window, 256 << 10);
        assert_eq!(applied("socket_receive_buffer", "4m").unwrap().socket_receive_buffer, 4 << 20);
        let flow = applied("flow_control", "tagged,g:7/2,t:3s").unwrap().flow_control;
        assert_eq!((flow.group_tag, flow.group_min_size, flow.receiver_timeout), (Some(7), 2, ms(3000)));
        assert_eq!(applied("receiver_timeout", "1.5s").unwrap().flow_control.receiver_timeout, ms(1500));
        assert_eq!(applied("receiver_timeout_ms", "1500").unwrap().flow_control.receiver_timeout, ms(1500));
        assert_eq!(applied("client_timeout", "2m").unwrap().client_timeout, ms(120_000));
        assert_eq!(applied("client_timeout_ms", "250").unwrap().client_timeout, ms(250));
        assert_eq!(applied("linger", "0").unwrap().publication_linger, Duration::ZERO);
        assert_eq!(applied("command_timeout_ms", "2000").unwrap().command_timeout, ms(2000));
        assert!(!applied("udp_offload", "off").unwrap().udp_offload);
        assert!(applied("udp_offload", "true").unwrap().udp_offload);
        for quota in ClientQuota::ALL {
            assert_eq!(quota.get(&applied(quota.name(), "7").unwrap().quotas), 7, "{}", quota.name());
        }
    }

    #[test]
    fn every_setting_reads_back_what_it_was_given_and_has_a_default() {
        let defaults = DriverContext::default();
        for name in setting_names() {
            let value = defaults.value_of(name).unwrap_or_else(|| panic!("{name} has no default shown"));
            if name != "term_length" {
                let mut context = DriverContext::default();
                context.apply(name, &value).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
                assert_eq!(context.value_of(name), Some(value), "{name}");
            }
        }
        assert_eq!(setting_names().len(), SETTINGS.len());
    }

    #[test]
    fn every_refusal_names_the_setting_the_value_and_what_is_allowed() {
        let cases = [
            ("dir", "", "dir=: must not be empty"),
            ("threading", "both", "threading=both: expected one of shared, shared-network, dedicated, invoker"),
            ("idle", "nap", "idle=nap: expected one of busy-spin, yield, backoff"),
            ("term_length", "1000", "term_length=1000: must be a power of two between 65536 and 1073741824"),
            ("term_length", "-1", "term_length=-1: must be a power of two between 65536 and 1073741824"),
            ("term_length", "64kb", "term_length=64kb: expected a size: digits with an optional k, m or g suffix (64k, 16m, 1g)"),
            ("mtu", "33", "mtu=33: must be a multiple of 32 between 64 and 65504"),
            ("mtu", &"9".repeat(50), &format!("mtu={}: must be a multiple of 32 between 64 and 65504", "9".repeat(50))),
            ("receiver_window", "0", "receiver_window=0: must be between 64 and 536870912"),
            ("socket_receive_buffer", "4g", "socket_receive_buffer=4g: must be between 64 and 2147483647"),
            ("flow_control", "most", "flow_control=most: unknown flow control strategy \"most\" (expected max, min or tagged)"),
            ("receiver_timeout", "0s", "receiver_timeout=0s: must be between 1ms and 3600s"),
            ("receiver_timeout", "2", "receiver_timeout=2: a bare number is ambiguous here: give a unit ns, us, ms, s, m or h (e.g. 2s)"),
            ("receiver_timeout_ms", "0", "receiver_timeout_ms=0: must be between 1 and 3600000"),
            ("command_timeout_ms", "-1", "command_timeout_ms=-1: must be between 1 and 3600000"),
            ("command_timeout_ms", "18446744073709551616", "command_timeout_ms=18446744073709551616: must be between 1 and 3600000"),
            ("client_timeout", "2h", "client_timeout=2h: must be between 1ms and 3600s"),
            ("client_timeout", "soon", "client_timeout=soon: expected a duration: a number with a unit ns, us, ms, s, m or h (500ms, 1.5s, 2m)"),
            ("linger_ms", "0.0000001", "linger_ms=0.0000001: finer than a nanosecond (the smallest step of a duration)"),
            ("udp_offload", "yes", "udp_offload=yes: expected on or off"),
            ("max_clients", "0", "max_clients=0: must be between 1 and 1048576"),
            ("max_clients", "1k", "max_clients=1k: expected a whole number"),
        ];
        for (name, value, expected) in cases {
            assert_eq!(refusal(name, value), expected, "{name}={value}");
        }
        let unknown = refusal("mtu_ms", "5");
        assert!(unknown.starts_with("unknown setting \"mtu_ms\" (known: dir, threading, idle,"), "{unknown}");
        assert!(refusal("bogus", "1").starts_with("unknown setting \"bogus\""));
    }

    #[test]
    fn a_refused_value_leaves_the_setting_as_it_was() {
        let mut context = DriverContext::default();
        context.apply("mtu", "4096").unwrap();
        assert!(context.apply("mtu", "33").is_err());
        assert_eq!(context.mtu, 4096);
    }
}
