//! The one way a record crosses from Rust into Python: a `#[pyclass(frozen, get_all)]` class
//! declared with [`record!`], built from its Rust value by an exhaustive destructuring (no `..`).
//!
//! What keeps the three sides equal: a field added to a Rust record fails to compile here until
//! the class lists it; a class attribute the stub `python/affinity/_affinity.pyi` lacks fails
//! `python -m mypy.stubtest affinity._affinity` and `tests/test_records.py`. This file holds the
//! transport's records (`Client`, `Publication`, `Subscription`, `LossyRelay`); the routing and
//! subject records are declared with the same macro beside their bindings.

use std::sync::atomic::Ordering;

use pyo3::prelude::*;

use crate::client::ClientCounters;
use crate::media::relay::RelayStats as RustRelayStats;
use crate::shm::status;

/// Declares a record class: the struct (fields `pub(crate)`, each field's doc comment is its
/// attribute's docstring) as `#[pyclass(module = "affinity._affinity", frozen, get_all)]`, a
/// `__repr__` naming every field and an `__eq__` comparing them (records are not hashable: some
/// hold lists). Fields are listed once, here.
macro_rules! record {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident : $type:ty ),* $(,)?
        }
    ) => {
        #[pyclass(module = "affinity._affinity", frozen, get_all)]
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$field_meta])* pub(crate) $field: $type ),*
        }

        #[pymethods]
        impl $name {
            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                let mut fields: Vec<String> = Vec::new();
                for name in [$(stringify!($field)),*] {
                    fields.push(format!("{name}={}", slf.getattr(name)?.repr()?));
                }
                Ok(format!("{}({})", stringify!($name), fields.join(", ")))
            }

            fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                let py = slf.py();
                if !other.is_instance_of::<Self>() {
                    return Ok(py.NotImplemented());
                }
                for name in [$(stringify!($field)),*] {
                    if !slf.getattr(name)?.eq(other.getattr(name)?)? {
                        return Ok(pyo3::types::PyBool::new(py, false).to_owned().into_any().unbind());
                    }
                }
                Ok(pyo3::types::PyBool::new(py, true).to_owned().into_any().unbind())
            }
        }
    };
}
pub(crate) use record;

record! {
    /// `Client.counters()`: the driver-wide counts (`crate::client::ClientCounters`).
    #[derive(Clone)]
    pub struct DriverCounters {
        /// Malformed datagrams dropped (and only those).
        invalid_data_frames: i64,
        /// Data datagrams entirely below an image's rebuild position.
        duplicate_data_frames: i64,
        /// Data datagrams beyond an image's receiver window.
        overrun_data_frames: i64,
        /// Data datagrams for an image no longer receiving.
        inactive_image_frames: i64,
        /// SETUP frames refused (fields inconsistent with each other).
        setups_refused: i64,
        /// Images refused because the subscription holds the maximum.
        images_refused: i64,
        /// Images that ended with data missing.
        images_ended_incomplete: i64,
        /// Malformed control frames (SM, NAK, RTTM, ERR) dropped.
        invalid_control_frames: i64,
        /// Datagrams the socket refused to send.
        send_errors: i64,
        /// Driver events dropped (by the driver or by this client's full event log).
        dropped_events: i64,
    }
}

impl From<ClientCounters> for DriverCounters {
    fn from(counters: ClientCounters) -> Self {
        let ClientCounters {
            invalid_data_frames,
            duplicate_data_frames,
            overrun_data_frames,
            inactive_image_frames,
            setups_refused,
            images_refused,
            images_ended_incomplete,
            invalid_control_frames,
            send_errors,
            dropped_events,
        } = counters;
        DriverCounters {
            invalid_data_frames,
            duplicate_data_frames,
            overrun_data_frames,
            inactive_image_frames,
            setups_refused,
            images_refused,
            images_ended_incomplete,
            invalid_control_frames,
            send_errors,
            dropped_events,
        }
    }
}

record! {
    /// One receiver a publication hears from (`PublicationCounters.receivers` entries).
    #[derive(Clone)]
    pub struct ReceiverInfo {
        /// The receiver endpoint's id.
        receiver_id: i64,
        /// The group tag of its last status message.
        group_tag: Option<i64>,
        /// The consumption position of its last status message.
        position: i64,
        /// The window of its last status message.
        window: i32,
    }
}

impl From<status::ReceiverInfo> for ReceiverInfo {
    fn from(receiver: status::ReceiverInfo) -> Self {
        let status::ReceiverInfo { receiver_id, group_tag, position, window } = receiver;
        ReceiverInfo { receiver_id, group_tag, position, window }
    }
}

record! {
    /// `Publication.counters()`: positions, flow control, receivers and traffic counts.
    pub struct PublicationCounters {
        /// Session id.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
        /// End of the last appended message (publisher position).
        position: i64,
        /// Bytes before this position have been sent at least once.
        sender_position: i64,
        /// The flow-control sender limit.
        sender_limit: i64,
        /// How far the application may append.
        publisher_limit: i64,
        /// Whether the application may publish.
        connected: bool,
        /// Whether the publication was closed.
        closed: bool,
        /// Flow-control strategy name: `unicast`, `max`, `min` or `tagged`.
        strategy: String,
        /// Group tag the strategy tracks (`tagged` only).
        group_tag: Option<i64>,
        /// Tracked receivers required before the publication is connected.
        group_min_size: u32,
        /// How long a silent receiver stays in the flow-control group, in milliseconds.
        receiver_timeout_ms: u64,
        /// Receivers in the flow-control group.
        receivers: Vec<ReceiverInfo>,
        /// Every receiver heard from within the connection timeout.
        live_receivers: Vec<ReceiverInfo>,
        /// Status messages processed.
        status_messages: u64,
        /// NAKs received.
        naks_received: u64,
        /// NAKs dropped as out of range or over the resend limit.
        naks_ignored: u64,
        /// Datagrams resent.
        retransmits_sent: u64,
        /// Bytes resent.
        retransmitted_bytes: u64,
        /// DATA datagrams sent (first transmission).
        datagrams_sent: u64,
        /// Bytes sent (first transmission).
        bytes_sent: u64,
        /// Heartbeats sent.
        heartbeats_sent: u64,
        /// SETUP frames sent.
        setups_sent: u64,
        /// Error frames received.
        errors_received: u64,
        /// Malformed control frames for this publication, ignored.
        invalid_control_frames: u64,
    }
}

impl From<status::PublicationInfo> for PublicationCounters {
    fn from(info: status::PublicationInfo) -> Self {
        let status::PublicationInfo {
            session_id,
            stream_id,
            position,
            sender_position,
            sender_limit,
            publisher_limit,
            connected,
            closed,
            strategy,
            group_tag,
            group_min_size,
            receiver_timeout_ms,
            receivers,
            live_receivers,
            status_messages,
            naks_received,
            naks_ignored,
            retransmits_sent,
            retransmitted_bytes,
            datagrams_sent,
            bytes_sent,
            heartbeats_sent,
            setups_sent,
            errors_received,
            invalid_control_frames,
        } = info;
        PublicationCounters {
            session_id,
            stream_id,
            position,
            sender_position,
            sender_limit,
            publisher_limit,
            connected,
            closed,
            strategy,
            group_tag,
            group_min_size,
            receiver_timeout_ms,
            receivers: receivers.into_iter().map(ReceiverInfo::from).collect(),
            live_receivers: live_receivers.into_iter().map(ReceiverInfo::from).collect(),
            status_messages,
            naks_received,
            naks_ignored,
            retransmits_sent,
            retransmitted_bytes,
            datagrams_sent,
            bytes_sent,
            heartbeats_sent,
            setups_sent,
            errors_received,
            invalid_control_frames,
        }
    }
}

record! {
    /// `Subscription.images()` entries: one image (one publication session) each.
    pub struct ImageInfo {
        /// Publication session.
        session_id: i32,
        /// Where the data comes from (`ipc` or the sender's socket address).
        source: String,
        /// The querying subscription's position in this image.
        position: i64,
        /// Everything before this has arrived.
        rebuild_position: i64,
        /// Highest position seen.
        hwm_position: i64,
        /// Whether the image is still receiving.
        active: bool,
        /// DATA/PAD datagrams accepted.
        datagrams_received: u64,
        /// Bytes accepted.
        bytes_received: u64,
        /// Heartbeats received.
        heartbeats_received: u64,
        /// Datagrams entirely below the rebuild position.
        duplicates: u64,
        /// Datagrams dropped for lying beyond the receiver window.
        overruns: u64,
        /// Malformed datagrams dropped.
        malformed: u64,
        /// Distinct gaps detected.
        loss_gaps: u64,
        /// Bytes in those gaps.
        loss_bytes: u64,
        /// Gaps given up on (skipped, counted).
        unrecoverable_gaps: u64,
        /// Bytes in those gaps.
        unrecoverable_bytes: u64,
        /// NAKs sent.
        naks_sent: u64,
        /// Datagrams that filled a detected gap.
        retransmits_received: u64,
        /// Status messages sent.
        status_messages_sent: u64,
    }
}

impl From<status::ImageInfo> for ImageInfo {
    fn from(info: status::ImageInfo) -> Self {
        let status::ImageInfo {
            session_id,
            source,
            position,
            rebuild_position,
            hwm_position,
            active,
            datagrams_received,
            bytes_received,
            heartbeats_received,
            duplicates,
            overruns,
            malformed,
            loss_gaps,
            loss_bytes,
            unrecoverable_gaps,
            unrecoverable_bytes,
            naks_sent,
            retransmits_received,
            status_messages_sent,
        } = info;
        ImageInfo {
            session_id,
            source,
            position,
            rebuild_position,
            hwm_position,
            active,
            datagrams_received,
            bytes_received,
            heartbeats_received,
            duplicates,
            overruns,
            malformed,
            loss_gaps,
            loss_bytes,
            unrecoverable_gaps,
            unrecoverable_bytes,
            naks_sent,
            retransmits_received,
            status_messages_sent,
        }
    }
}

record! {
    /// `Client.events()` entries: one driver event of this client's publications. The fields
    /// after `kind` are set for the kinds that carry them and `None` otherwise.
    pub struct DriverEventInfo {
        /// Wall-clock time of the event, seconds since the Unix epoch.
        time: f64,
        /// `INFO`, or `WARN` for error frames.
        level: String,
        /// The publication's channel URI.
        channel: String,
        /// The publication's stream id.
        stream_id: i32,
        /// The publication's session id.
        session_id: i32,
        /// `receiver_joined`, `receiver_removed`, `connection_changed` or `receiver_error`.
        kind: &'static str,
        /// The event as one log line.
        message: String,
        /// The receiver endpoint's id (receiver events).
        receiver_id: Option<i64>,
        /// The group tag the receiver sent (`receiver_joined`, `receiver_removed`).
        group_tag: Option<i64>,
        /// Why the receiver left (`receiver_removed`: `timeout`, `end of stream` or `error`).
        reason: Option<String>,
        /// The new connected flag (`connection_changed`).
        connected: Option<bool>,
        /// The error frame's code (`receiver_error`).
        code: Option<i32>,
        /// The error frame's text (`receiver_error`).
        error: Option<String>,
    }
}

impl From<status::DriverEventInfo> for DriverEventInfo {
    fn from(event: status::DriverEventInfo) -> Self {
        use status::DriverEventKindInfo as Kind;
        let status::DriverEventInfo { time, level, channel, stream_id, session_id, kind, message } = event;
        let mut info = DriverEventInfo {
            time,
            level,
            channel,
            stream_id,
            session_id,
            kind: "",
            message,
            receiver_id: None,
            group_tag: None,
            reason: None,
            connected: None,
            code: None,
            error: None,
        };
        match kind {
            Kind::ReceiverJoined { receiver_id, group_tag } => {
                (info.kind, info.receiver_id, info.group_tag) = ("receiver_joined", Some(receiver_id), group_tag);
            }
            Kind::ReceiverRemoved { receiver_id, group_tag, reason } => {
                info.kind = "receiver_removed";
                (info.receiver_id, info.group_tag, info.reason) = (Some(receiver_id), group_tag, Some(reason));
            }
            Kind::ConnectionChanged { connected } => {
                (info.kind, info.connected) = ("connection_changed", Some(connected));
            }
            Kind::ReceiverError { receiver_id, code, error } => {
                info.kind = "receiver_error";
                (info.receiver_id, info.code, info.error) = (Some(receiver_id), Some(code), Some(error));
            }
        }
        info
    }
}

record! {
    /// `LossyRelay.stats()`: datagram counts.
    pub struct RelayStats {
        /// Datagrams received on either side.
        received: u64,
        /// Datagrams dropped.
        dropped: u64,
        /// Datagrams duplicated.
        duplicated: u64,
        /// Datagrams reordered.
        reordered: u64,
    }
}

impl From<&RustRelayStats> for RelayStats {
    fn from(stats: &RustRelayStats) -> Self {
        let RustRelayStats { received, dropped, duplicated, reordered } = stats;
        RelayStats {
            received: received.load(Ordering::Relaxed),
            dropped: dropped.load(Ordering::Relaxed),
            duplicated: duplicated.load(Ordering::Relaxed),
            reordered: reordered.load(Ordering::Relaxed),
        }
    }
}

/// Adds the transport's record classes to the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<DriverCounters>()?;
    module.add_class::<ReceiverInfo>()?;
    module.add_class::<PublicationCounters>()?;
    module.add_class::<ImageInfo>()?;
    module.add_class::<DriverEventInfo>()?;
    module.add_class::<RelayStats>()?;
    Ok(())
}
