//! Driver events: receivers joining and leaving flow-control groups, connection changes and
//! receiver errors.
//!
//! Publications queue [`PublicationEvent`]s; the media driver's sender agent drains them every
//! duty cycle and broadcasts each as a `DriverEventInfo` record (`shm::status`) to the clients.

use std::fmt;
use std::time::SystemTime;

use crate::flow_control::{FlowControlEvent, RemovalReason};
use crate::protocol::PublicationEvent;

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverEventKind {
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
        /// Timeout, end of stream or error frame.
        reason: RemovalReason,
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
        message: String,
    },
}

impl From<PublicationEvent> for DriverEventKind {
    fn from(event: PublicationEvent) -> Self {
        match event {
            PublicationEvent::ConnectionChanged { connected } => DriverEventKind::ConnectionChanged { connected },
            PublicationEvent::FlowControl(FlowControlEvent::ReceiverAdded { receiver_id, group_tag }) => {
                DriverEventKind::ReceiverJoined { receiver_id, group_tag }
            }
            PublicationEvent::FlowControl(FlowControlEvent::ReceiverRemoved { receiver_id, group_tag, reason }) => {
                DriverEventKind::ReceiverRemoved { receiver_id, group_tag, reason }
            }
            PublicationEvent::ReceiverError { receiver_id, code, message } => {
                DriverEventKind::ReceiverError { receiver_id, code, message }
            }
        }
    }
}

/// One entry of the event log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverEvent {
    /// Wall-clock time the sender agent took the event from the publication.
    pub time: SystemTime,
    /// The publication's registration id within its driver.
    pub publication_id: u64,
    /// The publication's channel URI.
    pub channel: String,
    /// The publication's stream id.
    pub stream_id: i32,
    /// The publication's session id.
    pub session_id: i32,
    /// What happened.
    pub kind: DriverEventKind,
}

impl DriverEvent {
    /// The level the event is logged at (`INFO`, or `WARN` for error frames).
    pub fn level(&self) -> &'static str {
        match self.kind {
            DriverEventKind::ReceiverError { .. } => "WARN",
            _ => "INFO",
        }
    }
}

/// How a removal reason reads in log lines and Python event dicts.
pub fn reason_name(reason: RemovalReason) -> &'static str {
    match reason {
        RemovalReason::Timeout => "timeout",
        RemovalReason::EndOfStream => "end of stream",
        RemovalReason::Error => "error",
    }
}

struct Tag(Option<i64>);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(tag) => write!(f, "{tag}"),
            None => f.write_str("none"),
        }
    }
}

impl fmt::Display for DriverEvent {
    /// `INFO receiver joined: receiver_id=... group_tag=1001 channel=... stream=... session=...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.level())?;
        match &self.kind {
            DriverEventKind::ReceiverJoined { receiver_id, group_tag } => {
                write!(f, "receiver joined: receiver_id={receiver_id} group_tag={}", Tag(*group_tag))?
            }
            DriverEventKind::ReceiverRemoved { receiver_id, group_tag, reason } => write!(
                f,
                "receiver removed ({}): receiver_id={receiver_id} group_tag={}",
                reason_name(*reason),
                Tag(*group_tag)
            )?,
            DriverEventKind::ConnectionChanged { connected } => write!(f, "publication connected={connected}:")?,
            DriverEventKind::ReceiverError { receiver_id, code, message } => {
                write!(f, "receiver error: receiver_id={receiver_id} code={code} message={message:?}")?
            }
        }
        write!(f, " channel={} stream={} session={}", self.channel, self.stream_id, self.session_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: DriverEventKind) -> DriverEvent {
        DriverEvent {
            time: SystemTime::UNIX_EPOCH,
            publication_id: 1,
            channel: "aeron:udp?endpoint=224.20.30.39:24326".into(),
            stream_id: 10,
            session_id: 77,
            kind,
        }
    }

    #[test]
    fn formats_join_and_timeout_removal() {
        let joined = event(DriverEventKind::ReceiverJoined { receiver_id: 5, group_tag: Some(1001) });
        assert_eq!(
            joined.to_string(),
            "INFO receiver joined: receiver_id=5 group_tag=1001 channel=aeron:udp?endpoint=224.20.30.39:24326 \
             stream=10 session=77"
        );
        let removed = event(DriverEventKind::ReceiverRemoved {
            receiver_id: -3,
            group_tag: None,
            reason: RemovalReason::Timeout,
        });
        assert!(removed.to_string().starts_with("INFO receiver removed (timeout): receiver_id=-3 group_tag=none "));
    }

    #[test]
    fn converts_publication_events() {
        let kind: DriverEventKind = PublicationEvent::FlowControl(FlowControlEvent::ReceiverRemoved {
            receiver_id: 9,
            group_tag: Some(1),
            reason: RemovalReason::EndOfStream,
        })
        .into();
        assert_eq!(
            kind,
            DriverEventKind::ReceiverRemoved { receiver_id: 9, group_tag: Some(1), reason: RemovalReason::EndOfStream }
        );
    }
}
