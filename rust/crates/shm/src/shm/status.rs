//! What a client may learn about the driver's state, defined once for the driver and every
//! client: the JSON records carried by [`Response::PublicationStatus`],
//! [`Response::SubscriptionStatus`] and [`Response::DriverEvent`], and the driver-wide
//! [`SystemCounter`]s in the counters file.
//!
//! The Python bindings turn each into a record class with the same fields
//! (`rust/src/py/records.rs`: `PublicationCounters`, `ReceiverInfo`, `ImageInfo`,
//! `DriverEventInfo`), destructuring it field by field, so a field added here must be added there.
//!
//! Every record must fit one broadcast record (the broadcast buffer's maximum message
//! length, `capacity / 8`: 128 KiB with the default 1 MiB buffer): the driver truncates the
//! receiver lists to [`MAX_RECEIVERS_IN_STATUS`] entries and the image list to
//! [`MAX_IMAGES_IN_STATUS`] entries (the protocol's own bound on images per subscription), and
//! answers with an error if a record still does not fit.
//!
//! [`Response::PublicationStatus`]: super::command::Response::PublicationStatus
//! [`Response::SubscriptionStatus`]: super::command::Response::SubscriptionStatus
//! [`Response::DriverEvent`]: super::command::Response::DriverEvent

use serde::{Deserialize, Serialize};

use super::counters::{type_id, CountersReader};
use super::ShmError;

/// Receivers listed at most in each of [`PublicationInfo::receivers`] and
/// [`PublicationInfo::live_receivers`] (the lowest receiver ids are kept).
pub const MAX_RECEIVERS_IN_STATUS: usize = 64;

/// Images listed at most in a [`Response::SubscriptionStatus`](super::command::Response::SubscriptionStatus)
/// answer (the protocol's bound on images per subscription).
pub const MAX_IMAGES_IN_STATUS: usize = crate::protocol::defaults::MAX_IMAGES_PER_SUBSCRIPTION;

/// One receiver of a publication (Python: `affinity.records.ReceiverInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiverInfo {
    /// The receiver endpoint's id.
    pub receiver_id: i64,
    /// The group tag of its last status message.
    pub group_tag: Option<i64>,
    /// The consumption position of its last status message.
    pub position: i64,
    /// The window of its last status message.
    pub window: i32,
}

/// [`PublicationInfo::strategy`] of an `aeron:ipc` publication: the slowest subscriber paces it.
pub const IPC_FLOW_CONTROL: &str = "min";

/// A publication's positions, flow control, receivers and traffic counts
/// (Python: `affinity.records.PublicationCounters`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationInfo {
    /// Session id.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
    /// End of the last appended message (publisher position).
    pub position: i64,
    /// Bytes before this position have been sent at least once.
    pub sender_position: i64,
    /// The flow-control sender limit.
    pub sender_limit: i64,
    /// How far the application may append.
    pub publisher_limit: i64,
    /// Whether the application may publish.
    pub connected: bool,
    /// Whether the publication was closed.
    pub closed: bool,
    /// Flow-control strategy name: `unicast`, `max`, `min` or `tagged`.
    pub strategy: String,
    /// Group tag the strategy tracks (`tagged` only).
    pub group_tag: Option<i64>,
    /// Tracked receivers required before the publication is connected.
    pub group_min_size: u32,
    /// How long a silent receiver stays in the flow-control group, in milliseconds.
    pub receiver_timeout_ms: u64,
    /// Receivers in the flow-control group (at most [`MAX_RECEIVERS_IN_STATUS`]).
    pub receivers: Vec<ReceiverInfo>,
    /// Every receiver heard from within the connection timeout (at most
    /// [`MAX_RECEIVERS_IN_STATUS`]).
    pub live_receivers: Vec<ReceiverInfo>,
    /// Status messages processed.
    pub status_messages: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// NAKs dropped as out of range or over the resend limit.
    pub naks_ignored: u64,
    /// Datagrams resent.
    pub retransmits_sent: u64,
    /// Bytes resent.
    pub retransmitted_bytes: u64,
    /// DATA datagrams sent (first transmission).
    pub datagrams_sent: u64,
    /// Bytes sent (first transmission).
    pub bytes_sent: u64,
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// SETUP frames sent.
    pub setups_sent: u64,
    /// Error frames received.
    pub errors_received: u64,
    /// Malformed control frames for this publication, ignored.
    pub invalid_control_frames: u64,
}

/// [`ImageInfo::source`] (and the source identity announced) of an `aeron:ipc` image.
pub const IPC_IMAGE_SOURCE: &str = "ipc";

/// One image of a subscription (Python: `affinity.records.ImageInfo`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// Publication session.
    pub session_id: i32,
    /// Where the data comes from (`ipc` or the sender's socket address).
    pub source: String,
    /// The querying subscription's position in this image.
    pub position: i64,
    /// Everything before this has arrived.
    pub rebuild_position: i64,
    /// Highest position seen.
    pub hwm_position: i64,
    /// Whether the image is still receiving.
    pub active: bool,
    /// DATA/PAD datagrams accepted.
    pub datagrams_received: u64,
    /// Bytes accepted.
    pub bytes_received: u64,
    /// Heartbeats received.
    pub heartbeats_received: u64,
    /// Datagrams entirely below the rebuild position.
    pub duplicates: u64,
    /// Datagrams dropped for lying beyond the receiver window.
    pub overruns: u64,
    /// Malformed datagrams dropped.
    pub malformed: u64,
    /// Distinct gaps detected.
    pub loss_gaps: u64,
    /// Bytes in those gaps.
    pub loss_bytes: u64,
    /// Gaps given up on (skipped, counted).
    pub unrecoverable_gaps: u64,
    /// Bytes in those gaps.
    pub unrecoverable_bytes: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// Datagrams that filled a detected gap.
    pub retransmits_received: u64,
    /// Status messages sent.
    pub status_messages_sent: u64,
}

/// What a driver event is about, with the keys each kind carries (`kind` is the tag).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DriverEventKindInfo {
    /// A receiver joined a publication's flow-control group.
    ReceiverJoined {
        /// The receiver endpoint's id.
        receiver_id: i64,
        /// The group tag its status messages carry.
        group_tag: Option<i64>,
    },
    /// A receiver left a publication's flow-control group.
    ReceiverRemoved {
        /// The receiver endpoint's id.
        receiver_id: i64,
        /// The last group tag it sent.
        group_tag: Option<i64>,
        /// `timeout`, `end of stream` or `error`.
        reason: String,
    },
    /// The publication's connected flag changed.
    ConnectionChanged {
        /// The new value.
        connected: bool,
    },
    /// A receiver rejected the stream with an error frame.
    ReceiverError {
        /// The receiver endpoint's id.
        receiver_id: i64,
        /// The error code of the frame.
        code: i32,
        /// The frame's text.
        error: String,
    },
}

/// One driver event (Python: `affinity.records.DriverEventInfo`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriverEventInfo {
    /// Wall-clock time of the event, seconds since the Unix epoch.
    pub time: f64,
    /// `INFO`, or `WARN` for error frames.
    pub level: String,
    /// The publication's channel URI.
    pub channel: String,
    /// The publication's stream id.
    pub stream_id: i32,
    /// The publication's session id.
    pub session_id: i32,
    /// What happened.
    #[serde(flatten)]
    pub kind: DriverEventKindInfo,
    /// The event as one log line (`INFO receiver joined: receiver_id=... channel=...`).
    pub message: String,
}

/// Longest text (channel, error frame text, message) a [`DriverEventInfo`] carries; longer
/// text is cut at a character boundary, so an event always fits one broadcast record.
pub const MAX_EVENT_TEXT: usize = 4096;

/// `text` cut to at most `max` bytes at a character boundary.
pub fn bounded_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Driver-wide counters, one per variant, allocated by the driver first and in this order: the
/// counter id of a variant is its position in [`SystemCounter::ALL`], its type id
/// [`type_id::SYSTEM`] and its label [`SystemCounter::label`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemCounter {
    /// Commands read from the ring.
    Commands,
    /// Commands that could not be decoded or were refused.
    InvalidCommands,
    /// Client keepalives received.
    ClientKeepalives,
    /// Clients timed out (died without closing).
    ClientTimeouts,
    /// Errors recorded in the error log.
    Errors,
    /// Distinct errors dropped because the error log was full.
    ErrorsDropped,
    /// Longest conductor duty cycle (ns).
    DutyCycleMaxNs,
    /// IPC publications currently open (including lingering ones).
    IpcPublications,
    /// Subscriptions currently open.
    Subscriptions,
    /// Clients currently attached.
    Clients,
    /// Malformed datagrams dropped (and only those: duplicates, overruns and frames for
    /// inactive images have their own counters). `Client.counters().invalid_data_frames`.
    InvalidDataFrames,
    /// Malformed control frames (SM, NAK, RTTM, ERR) dropped.
    InvalidControlFrames,
    /// Datagrams the socket refused to send.
    SendErrors,
    /// Driver events dropped because a client's event log was full or the broadcast refused them.
    DroppedEvents,
    /// Data datagrams entirely below an image's rebuild position.
    DuplicateDataFrames,
    /// Data datagrams beyond an image's receiver window.
    OverrunDataFrames,
    /// Data datagrams for an image no longer receiving.
    InactiveImageFrames,
    /// SETUP frames refused (fields inconsistent with each other).
    SetupsRefused,
    /// Images refused because the subscription holds the maximum.
    ImagesRefused,
    /// Images that ended with data missing.
    ImagesEndedIncomplete,
    /// Network (UDP) publications currently open (including lingering ones).
    NetworkPublications,
    /// Network images currently open.
    Images,
    /// Bytes sent on every UDP socket (data, retransmits, control).
    BytesSent,
    /// Bytes received on every UDP socket.
    BytesReceived,
    /// NAKs sent by images.
    NaksSent,
    /// NAKs received by publications.
    NaksReceived,
    /// Datagrams retransmitted.
    Retransmits,
    /// Status messages sent by images.
    StatusMessagesSent,
    /// Status messages received by publications.
    StatusMessagesReceived,
    /// Heartbeats sent by publications.
    HeartbeatsSent,
    /// Datagrams the sender agent handed to the kernel (data, retransmits, SETUP, heartbeats;
    /// a run sent with segmentation offload counts each datagram of it).
    DatagramsSent,
    /// Datagrams read from receive endpoints (data, SETUP, heartbeats; whatever their outcome).
    DatagramsReceived,
    /// Heartbeats received by images.
    HeartbeatsReceived,
    /// Claims no client committed, padded over after the publication unblock timeout so the
    /// frames after them flow again (Aeron's "Unblocked Publications").
    UnblockedPublications,
}

impl SystemCounter {
    /// Every system counter, in counter-id order.
    pub const ALL: [SystemCounter; 34] = [
        SystemCounter::Commands,
        SystemCounter::InvalidCommands,
        SystemCounter::ClientKeepalives,
        SystemCounter::ClientTimeouts,
        SystemCounter::Errors,
        SystemCounter::ErrorsDropped,
        SystemCounter::DutyCycleMaxNs,
        SystemCounter::IpcPublications,
        SystemCounter::Subscriptions,
        SystemCounter::Clients,
        SystemCounter::InvalidDataFrames,
        SystemCounter::InvalidControlFrames,
        SystemCounter::SendErrors,
        SystemCounter::DroppedEvents,
        SystemCounter::DuplicateDataFrames,
        SystemCounter::OverrunDataFrames,
        SystemCounter::InactiveImageFrames,
        SystemCounter::SetupsRefused,
        SystemCounter::ImagesRefused,
        SystemCounter::ImagesEndedIncomplete,
        SystemCounter::NetworkPublications,
        SystemCounter::Images,
        SystemCounter::BytesSent,
        SystemCounter::BytesReceived,
        SystemCounter::NaksSent,
        SystemCounter::NaksReceived,
        SystemCounter::Retransmits,
        SystemCounter::StatusMessagesSent,
        SystemCounter::StatusMessagesReceived,
        SystemCounter::HeartbeatsSent,
        SystemCounter::DatagramsSent,
        SystemCounter::DatagramsReceived,
        SystemCounter::HeartbeatsReceived,
        SystemCounter::UnblockedPublications,
    ];

    /// The counter's label in the counters file.
    pub fn label(self) -> &'static str {
        match self {
            SystemCounter::Commands => "Commands received",
            SystemCounter::InvalidCommands => "Invalid commands",
            SystemCounter::ClientKeepalives => "Client keepalives",
            SystemCounter::ClientTimeouts => "Client timeouts",
            SystemCounter::Errors => "Errors",
            SystemCounter::ErrorsDropped => "Errors dropped (error log full)",
            SystemCounter::DutyCycleMaxNs => "Conductor duty cycle max time (ns)",
            SystemCounter::IpcPublications => "IPC publications",
            SystemCounter::Subscriptions => "Subscriptions",
            SystemCounter::Clients => "Clients",
            SystemCounter::InvalidDataFrames => "Invalid data frames",
            SystemCounter::InvalidControlFrames => "Invalid control frames",
            SystemCounter::SendErrors => "Send errors",
            SystemCounter::DroppedEvents => "Dropped driver events",
            SystemCounter::DuplicateDataFrames => "Duplicate data frames",
            SystemCounter::OverrunDataFrames => "Overrun data frames",
            SystemCounter::InactiveImageFrames => "Inactive image frames",
            SystemCounter::SetupsRefused => "SETUPs refused",
            SystemCounter::ImagesRefused => "Images refused",
            SystemCounter::ImagesEndedIncomplete => "Images ended with data missing",
            SystemCounter::NetworkPublications => "Network publications",
            SystemCounter::Images => "Network images",
            SystemCounter::BytesSent => "Bytes sent",
            SystemCounter::BytesReceived => "Bytes received",
            SystemCounter::NaksSent => "NAKs sent",
            SystemCounter::NaksReceived => "NAKs received",
            SystemCounter::Retransmits => "Retransmits sent",
            SystemCounter::StatusMessagesSent => "Status messages sent",
            SystemCounter::StatusMessagesReceived => "Status messages received",
            SystemCounter::HeartbeatsSent => "Heartbeats sent",
            SystemCounter::DatagramsSent => "Datagrams sent",
            SystemCounter::DatagramsReceived => "Datagrams received",
            SystemCounter::HeartbeatsReceived => "Heartbeats received",
            SystemCounter::UnblockedPublications => "Unblocked publications",
        }
    }

    /// The counter id this counter has in every driver's counters file.
    pub fn id(self) -> usize {
        self as usize
    }

    /// Reads this counter from a driver's counters, checking that the slot holds it (type and
    /// label), so a client of a driver with another layout gets an error, not a wrong number.
    pub fn read(self, counters: &CountersReader) -> Result<i64, ShmError> {
        let info = counters.info(self.id())?;
        match info {
            Some(info) if info.type_id == type_id::SYSTEM && info.label == self.label() => Ok(info.value),
            Some(info) => Err(ShmError::Parameter(format!(
                "counter {} is {:?} (type {}), not the system counter {:?}",
                self.id(),
                info.label,
                info.type_id,
                self.label()
            ))),
            None => Err(ShmError::Parameter(format!(
                "counter {} ({:?}) is not allocated: the driver predates it",
                self.id(),
                self.label()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication() -> PublicationInfo {
        PublicationInfo {
            session_id: 7,
            stream_id: 10,
            position: 4096,
            sender_position: 2048,
            sender_limit: 8192,
            publisher_limit: 34816,
            connected: true,
            closed: false,
            strategy: "unicast".into(),
            group_tag: None,
            group_min_size: 0,
            receiver_timeout_ms: 5000,
            receivers: vec![],
            live_receivers: vec![ReceiverInfo { receiver_id: 3, group_tag: Some(9), position: 2048, window: 65536 }],
            status_messages: 1,
            naks_received: 2,
            naks_ignored: 3,
            retransmits_sent: 4,
            retransmitted_bytes: 5,
            datagrams_sent: 6,
            bytes_sent: 7,
            heartbeats_sent: 8,
            setups_sent: 9,
            errors_received: 10,
            invalid_control_frames: 11,
        }
    }

    fn keys(json: &str) -> Vec<String> {
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    fn sorted(names: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn publication_info_has_exactly_the_python_keys_and_round_trips() {
        let record = publication();
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(
            keys(&json),
            sorted(&[
                "session_id",
                "stream_id",
                "position",
                "sender_position",
                "sender_limit",
                "publisher_limit",
                "connected",
                "closed",
                "strategy",
                "group_tag",
                "group_min_size",
                "receiver_timeout_ms",
                "receivers",
                "live_receivers",
                "status_messages",
                "naks_received",
                "naks_ignored",
                "retransmits_sent",
                "retransmitted_bytes",
                "datagrams_sent",
                "bytes_sent",
                "heartbeats_sent",
                "setups_sent",
                "errors_received",
                "invalid_control_frames",
            ])
        );
        assert!(json.contains(r#""live_receivers":[{"receiver_id":3,"group_tag":9,"position":2048,"window":65536}]"#));
        assert!(json.contains(r#""group_tag":null"#));
        assert_eq!(serde_json::from_str::<PublicationInfo>(&json).unwrap(), record);
    }

    #[test]
    fn image_info_has_exactly_the_python_keys() {
        let record = ImageInfo {
            session_id: 1,
            source: "127.0.0.1:4000".into(),
            position: 2,
            rebuild_position: 3,
            hwm_position: 4,
            active: true,
            datagrams_received: 5,
            bytes_received: 6,
            heartbeats_received: 7,
            duplicates: 8,
            overruns: 9,
            malformed: 10,
            loss_gaps: 11,
            loss_bytes: 12,
            unrecoverable_gaps: 13,
            unrecoverable_bytes: 14,
            naks_sent: 15,
            retransmits_received: 16,
            status_messages_sent: 17,
        };
        let json = serde_json::to_string(&vec![record.clone()]).unwrap();
        let list: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
        assert_eq!(
            keys(&list[0].to_string()),
            sorted(&[
                "session_id",
                "source",
                "position",
                "rebuild_position",
                "hwm_position",
                "active",
                "datagrams_received",
                "bytes_received",
                "heartbeats_received",
                "duplicates",
                "overruns",
                "malformed",
                "loss_gaps",
                "loss_bytes",
                "unrecoverable_gaps",
                "unrecoverable_bytes",
                "naks_sent",
                "retransmits_received",
                "status_messages_sent",
            ])
        );
        assert_eq!(serde_json::from_str::<Vec<ImageInfo>>(&json).unwrap(), vec![record]);
    }

    #[test]
    fn driver_events_carry_the_keys_of_their_kind() {
        let event = |kind| DriverEventInfo {
            time: 1.5,
            level: "INFO".into(),
            channel: "aeron:udp?endpoint=127.0.0.1:4000".into(),
            stream_id: 10,
            session_id: 7,
            kind,
            message: "INFO ...".into(),
        };
        let common = ["time", "level", "channel", "stream_id", "session_id", "kind", "message"];
        let cases = [
            (
                DriverEventKindInfo::ReceiverJoined { receiver_id: 1, group_tag: None },
                &["receiver_id", "group_tag"][..],
            ),
            (
                DriverEventKindInfo::ReceiverRemoved { receiver_id: 1, group_tag: Some(2), reason: "timeout".into() },
                &["receiver_id", "group_tag", "reason"][..],
            ),
            (DriverEventKindInfo::ConnectionChanged { connected: true }, &["connected"][..]),
            (
                DriverEventKindInfo::ReceiverError { receiver_id: 1, code: 3, error: "no".into() },
                &["receiver_id", "code", "error"][..],
            ),
        ];
        let kinds = ["receiver_joined", "receiver_removed", "connection_changed", "receiver_error"];
        for ((kind, extra), name) in cases.into_iter().zip(kinds) {
            let record = event(kind);
            let json = serde_json::to_string(&record).unwrap();
            let all: Vec<&str> = common.iter().chain(extra).copied().collect();
            assert_eq!(keys(&json), sorted(&all), "{json}");
            assert!(json.contains(&format!(r#""kind":"{name}""#)), "{json}");
            assert_eq!(serde_json::from_str::<DriverEventInfo>(&json).unwrap(), record);
        }
    }

    #[test]
    fn bounded_text_cuts_at_a_character_boundary() {
        assert_eq!(bounded_text("abc", 5), "abc");
        assert_eq!(bounded_text("aé", 2), "a");
        assert_eq!(bounded_text("abcdef", 3), "abc");
    }

    #[test]
    fn system_counters_are_read_by_id_and_checked_by_label() {
        use crate::shm::counters::{CountersManager, COUNTER_LENGTH, METADATA_LENGTH};
        use crate::shm::file::anonymous;
        let slots = 64;
        let metadata = anonymous(slots * METADATA_LENGTH).unwrap();
        let values = anonymous(slots * COUNTER_LENGTH).unwrap();
        let mut manager = CountersManager::new(metadata, values, 0).unwrap();
        let mut allocated = Vec::new();
        for counter in SystemCounter::ALL {
            allocated.push(manager.allocate(type_id::SYSTEM, &[], counter.label(), 0, 0, 0).unwrap());
        }
        allocated[SystemCounter::SendErrors.id()].set(42).unwrap();
        assert_eq!(SystemCounter::SendErrors.read(manager.reader()).unwrap(), 42);
        assert_eq!(SystemCounter::InvalidDataFrames.read(manager.reader()).unwrap(), 0);
        let labels: std::collections::HashSet<&str> = SystemCounter::ALL.iter().map(|c| c.label()).collect();
        assert_eq!(labels.len(), SystemCounter::ALL.len(), "labels are distinct");
        for (index, counter) in SystemCounter::ALL.iter().enumerate() {
            assert_eq!(counter.id(), index);
        }
    }
}
