//! Commands (client → driver, on the to-driver ring) and responses (driver → clients, on the
//! broadcast buffer): type ids and encodings after Aeron's control protocol. All integers
//! little-endian; strings are an `i32` length followed by UTF-8 bytes.
//!
//! Decoding takes untrusted bytes (another process wrote them) and returns a precise
//! [`CommandError`] for anything short, negative or not UTF-8.

use std::fmt;

/// Command and response type ids (Aeron's `ControlProtocolEvents` numbering).
pub mod type_id {
    /// [`super::Command::AddPublication`].
    pub const ADD_PUBLICATION: i32 = 0x01;
    /// [`super::Command::RemovePublication`].
    pub const REMOVE_PUBLICATION: i32 = 0x02;
    /// [`super::Command::AddPublication`] with `exclusive` (Aeron's `ADD_EXCLUSIVE_PUBLICATION`).
    pub const ADD_EXCLUSIVE_PUBLICATION: i32 = 0x03;
    /// [`super::Command::AddSubscription`].
    pub const ADD_SUBSCRIPTION: i32 = 0x04;
    /// [`super::Command::RemoveSubscription`].
    pub const REMOVE_SUBSCRIPTION: i32 = 0x05;
    /// [`super::Command::ClientKeepalive`].
    pub const CLIENT_KEEPALIVE: i32 = 0x06;
    /// [`super::Command::ClientClose`].
    pub const CLIENT_CLOSE: i32 = 0x0B;
    /// [`super::Command::QueryPublication`] (ours, beyond Aeron's numbering).
    pub const QUERY_PUBLICATION: i32 = 0x40;
    /// [`super::Command::QuerySubscription`] (ours, beyond Aeron's numbering).
    pub const QUERY_SUBSCRIPTION: i32 = 0x41;
    /// [`super::Response::Error`].
    pub const ON_ERROR: i32 = 0x0F01;
    /// [`super::Response::AvailableImage`].
    pub const ON_AVAILABLE_IMAGE: i32 = 0x0F02;
    /// [`super::Response::PublicationReady`].
    pub const ON_PUBLICATION_READY: i32 = 0x0F03;
    /// [`super::Response::OperationSuccess`].
    pub const ON_OPERATION_SUCCESS: i32 = 0x0F04;
    /// [`super::Response::UnavailableImage`].
    pub const ON_UNAVAILABLE_IMAGE: i32 = 0x0F05;
    /// [`super::Response::SubscriptionReady`].
    pub const ON_SUBSCRIPTION_READY: i32 = 0x0F07;
    /// [`super::Response::ClientTimeout`].
    pub const ON_CLIENT_TIMEOUT: i32 = 0x0F0A;
    /// [`super::Response::PublicationStatus`] (ours).
    pub const ON_PUBLICATION_STATUS: i32 = 0x0F40;
    /// [`super::Response::SubscriptionStatus`] (ours).
    pub const ON_SUBSCRIPTION_STATUS: i32 = 0x0F41;
    /// [`super::Response::DriverEvent`] (ours).
    pub const ON_DRIVER_EVENT: i32 = 0x0F42;
}

/// Error codes carried by [`Response::Error`] (Aeron's `ErrorCode` numbering).
pub mod error_code {
    /// Anything else.
    pub const GENERIC_ERROR: i32 = 0;
    /// The channel URI is invalid or unsupported.
    pub const INVALID_CHANNEL: i32 = 1;
    /// The subscription to remove does not exist.
    pub const UNKNOWN_SUBSCRIPTION: i32 = 2;
    /// The publication to remove does not exist.
    pub const UNKNOWN_PUBLICATION: i32 = 3;
    /// The command could not be decoded.
    pub const MALFORMED_COMMAND: i32 = 11;
    /// Out of a resource (counters, files).
    pub const STORAGE_SPACE: i32 = 12;
    /// The client reached one of its quotas (`driver::context::ClientQuotas`); the message
    /// names the quota and its limit (ours, beyond Aeron's numbering).
    pub const QUOTA_EXCEEDED: i32 = 0x0100;
    /// An operating-system call failed: the code is `OS_ERROR + errno` (ours, beyond Aeron's
    /// numbering), so the client can raise the error with its errno.
    pub const OS_ERROR: i32 = 0x1000;
}

/// A command from a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Create (or join) a publication on `channel` / `stream_id`.
    AddPublication {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// Stream id.
        stream_id: i32,
        /// Channel URI.
        channel: String,
        /// An exclusive publication (Aeron's): a log of its own, with a session id of its own,
        /// that no other publication joins and only its one writer appends to.
        exclusive: bool,
    },
    /// Release a publication (its log lingers until drained).
    RemovePublication {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// The publication's registration id.
        registration_id: i64,
    },
    /// Create a subscription on `channel` / `stream_id`.
    AddSubscription {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// Stream id.
        stream_id: i32,
        /// Channel URI.
        channel: String,
    },
    /// Release a subscription.
    RemoveSubscription {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// The subscription's registration id.
        registration_id: i64,
    },
    /// The client is alive.
    ClientKeepalive {
        /// Sending client.
        client_id: i64,
        /// The client's random close token (Aeron's correlation id slot, 0 there): the driver
        /// binds the first non-zero token it sees for a client id and then ignores keepalives
        /// and closes of that id carrying another one (see `docs/driver-protocol.md`).
        token: i64,
    },
    /// The client is closing: release everything it owns.
    ClientClose {
        /// Sending client.
        client_id: i64,
        /// The token of the client's keepalives ([`Command::ClientKeepalive`]).
        token: i64,
    },
    /// Asks for a publication's status ([`Response::PublicationStatus`]): a network
    /// publication's positions, flow control, receivers and counters.
    QueryPublication {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// The publication's registration id.
        registration_id: i64,
    },
    /// Asks for a subscription's images ([`Response::SubscriptionStatus`]).
    QuerySubscription {
        /// Sending client.
        client_id: i64,
        /// Correlates the response.
        correlation_id: i64,
        /// The subscription's registration id.
        registration_id: i64,
    },
}

/// A response or notification from the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// A command failed.
    Error {
        /// The failed command's correlation id.
        correlation_id: i64,
        /// See [`error_code`].
        code: i32,
        /// What went wrong.
        message: String,
    },
    /// A publication's log is ready.
    PublicationReady {
        /// The command's correlation id.
        correlation_id: i64,
        /// The publication's registration id (shared by clients joining the same stream).
        registration_id: i64,
        /// Session id of the log.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
        /// Counter id of the publisher limit.
        publisher_limit_counter_id: i32,
        /// Log file name inside the driver directory.
        log_file: String,
    },
    /// A subscription is registered.
    SubscriptionReady {
        /// The command's correlation id.
        correlation_id: i64,
    },
    /// An image is available to a subscription.
    AvailableImage {
        /// The image's correlation id.
        correlation_id: i64,
        /// The subscription it belongs to.
        subscription_registration_id: i64,
        /// Session id.
        session_id: i32,
        /// Stream id.
        stream_id: i32,
        /// Counter id of this subscriber's position (written by the subscriber).
        subscriber_position_counter_id: i32,
        /// Log file name inside the driver directory.
        log_file: String,
        /// Where the data comes from (`ipc` or a socket address).
        source_identity: String,
    },
    /// An image went away (end of stream or timeout).
    UnavailableImage {
        /// The image's correlation id.
        correlation_id: i64,
        /// The subscription it belonged to.
        subscription_registration_id: i64,
        /// Stream id.
        stream_id: i32,
    },
    /// A remove or close command succeeded.
    OperationSuccess {
        /// The command's correlation id.
        correlation_id: i64,
    },
    /// The driver timed out a client (it missed keepalives).
    ClientTimeout {
        /// The client.
        client_id: i64,
    },
    /// Answer to [`Command::QueryPublication`]: `json` is a
    /// [`PublicationInfo`](super::status::PublicationInfo) as JSON.
    PublicationStatus {
        /// The query's correlation id.
        correlation_id: i64,
        /// `serde_json` of [`PublicationInfo`](super::status::PublicationInfo).
        json: String,
    },
    /// Answer to [`Command::QuerySubscription`]: `json` is a list of
    /// [`ImageInfo`](super::status::ImageInfo) as JSON.
    SubscriptionStatus {
        /// The query's correlation id.
        correlation_id: i64,
        /// `serde_json` of `Vec<ImageInfo>`.
        json: String,
    },
    /// A driver event of a network publication (receiver joined or removed, connection
    /// changed, receiver error), broadcast to every client as it happens.
    DriverEvent {
        /// The publication's registration id.
        publication_registration_id: i64,
        /// `serde_json` of [`DriverEventInfo`](super::status::DriverEventInfo).
        json: String,
    },
}

/// A command or response that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandError {
    /// Type id of the record.
    pub type_id: i32,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed message of type {:#06x}: {}", self.type_id, self.detail)
    }
}

impl std::error::Error for CommandError {}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn i32(mut self, value: i32) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    fn i64(mut self, value: i64) -> Self {
        self.0.extend_from_slice(&value.to_le_bytes());
        self
    }
    fn string(self, value: &str) -> Self {
        // Strings longer than i32::MAX cannot occur: records are bounded by the ring capacity.
        let mut this = self.i32(i32::try_from(value.len()).unwrap_or(i32::MAX));
        this.0.extend_from_slice(value.as_bytes());
        this
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    type_id: i32,
}

impl<'a> Reader<'a> {
    fn error(&self, detail: String) -> CommandError {
        CommandError { type_id: self.type_id, detail }
    }
    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], CommandError> {
        if self.bytes.len() < n {
            return Err(self.error(format!("{field}: {} bytes left, {n} needed", self.bytes.len())));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn i32(&mut self, field: &str) -> Result<i32, CommandError> {
        let bytes = self.take(4, field)?;
        Ok(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
    fn i64(&mut self, field: &str) -> Result<i64, CommandError> {
        let bytes = self.take(8, field)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(i64::from_le_bytes(array))
    }
    fn string(&mut self, field: &str) -> Result<String, CommandError> {
        let length = self.i32(field)?;
        let length = usize::try_from(length).map_err(|_| self.error(format!("{field}: negative length {length}")))?;
        let bytes = self.take(length, field)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.error(format!("{field}: not UTF-8")))
    }
}

impl Command {
    /// Type id and encoded payload.
    pub fn encode(&self) -> (i32, Vec<u8>) {
        let w = Writer::default();
        match self {
            Command::AddPublication { client_id, correlation_id, stream_id, channel, exclusive } => {
                let type_id = if *exclusive { type_id::ADD_EXCLUSIVE_PUBLICATION } else { type_id::ADD_PUBLICATION };
                (type_id, w.i64(*client_id).i64(*correlation_id).i32(*stream_id).string(channel).0)
            }
            Command::RemovePublication { client_id, correlation_id, registration_id } => {
                (type_id::REMOVE_PUBLICATION, w.i64(*client_id).i64(*correlation_id).i64(*registration_id).0)
            }
            Command::AddSubscription { client_id, correlation_id, stream_id, channel } => {
                // Aeron's layout keeps a registration correlation id (-1: none) before the stream id.
                (
                    type_id::ADD_SUBSCRIPTION,
                    w.i64(*client_id).i64(*correlation_id).i64(-1).i32(*stream_id).string(channel).0,
                )
            }
            Command::RemoveSubscription { client_id, correlation_id, registration_id } => {
                (type_id::REMOVE_SUBSCRIPTION, w.i64(*client_id).i64(*correlation_id).i64(*registration_id).0)
            }
            Command::ClientKeepalive { client_id, token } => {
                (type_id::CLIENT_KEEPALIVE, w.i64(*client_id).i64(*token).0)
            }
            Command::ClientClose { client_id, token } => (type_id::CLIENT_CLOSE, w.i64(*client_id).i64(*token).0),
            Command::QueryPublication { client_id, correlation_id, registration_id } => {
                (type_id::QUERY_PUBLICATION, w.i64(*client_id).i64(*correlation_id).i64(*registration_id).0)
            }
            Command::QuerySubscription { client_id, correlation_id, registration_id } => {
                (type_id::QUERY_SUBSCRIPTION, w.i64(*client_id).i64(*correlation_id).i64(*registration_id).0)
            }
        }
    }

    /// Decodes a command read from the ring.
    pub fn decode(type_id: i32, bytes: &[u8]) -> Result<Self, CommandError> {
        let mut r = Reader { bytes, type_id };
        let client_id = r.i64("client id")?;
        let correlation_id = r.i64("correlation id")?;
        Ok(match type_id {
            type_id::ADD_PUBLICATION | type_id::ADD_EXCLUSIVE_PUBLICATION => Command::AddPublication {
                client_id,
                correlation_id,
                stream_id: r.i32("stream id")?,
                channel: r.string("channel")?,
                exclusive: type_id == type_id::ADD_EXCLUSIVE_PUBLICATION,
            },
            type_id::REMOVE_PUBLICATION => {
                Command::RemovePublication { client_id, correlation_id, registration_id: r.i64("registration id")? }
            }
            type_id::ADD_SUBSCRIPTION => {
                r.i64("registration correlation id")?;
                Command::AddSubscription {
                    client_id,
                    correlation_id,
                    stream_id: r.i32("stream id")?,
                    channel: r.string("channel")?,
                }
            }
            type_id::REMOVE_SUBSCRIPTION => {
                Command::RemoveSubscription { client_id, correlation_id, registration_id: r.i64("registration id")? }
            }
            type_id::CLIENT_KEEPALIVE => Command::ClientKeepalive { client_id, token: correlation_id },
            type_id::CLIENT_CLOSE => Command::ClientClose { client_id, token: correlation_id },
            type_id::QUERY_PUBLICATION => {
                Command::QueryPublication { client_id, correlation_id, registration_id: r.i64("registration id")? }
            }
            type_id::QUERY_SUBSCRIPTION => {
                Command::QuerySubscription { client_id, correlation_id, registration_id: r.i64("registration id")? }
            }
            other => return Err(r.error(format!("unknown command type {other:#06x}"))),
        })
    }

    /// The client that sent the command.
    pub fn client_id(&self) -> i64 {
        match self {
            Command::AddPublication { client_id, .. }
            | Command::RemovePublication { client_id, .. }
            | Command::AddSubscription { client_id, .. }
            | Command::RemoveSubscription { client_id, .. }
            | Command::ClientKeepalive { client_id, .. }
            | Command::ClientClose { client_id, .. }
            | Command::QueryPublication { client_id, .. }
            | Command::QuerySubscription { client_id, .. } => *client_id,
        }
    }

    /// The correlation id its answer carries (keepalive and close are not answered).
    pub fn correlation_id(&self) -> Option<i64> {
        match self {
            Command::AddPublication { correlation_id, .. }
            | Command::RemovePublication { correlation_id, .. }
            | Command::AddSubscription { correlation_id, .. }
            | Command::RemoveSubscription { correlation_id, .. }
            | Command::QueryPublication { correlation_id, .. }
            | Command::QuerySubscription { correlation_id, .. } => Some(*correlation_id),
            Command::ClientKeepalive { .. } | Command::ClientClose { .. } => None,
        }
    }
}

/// A status record as JSON, or the error naming `what` and its registration id.
fn encode_status<T: serde::Serialize>(
    what: &str,
    registration_id: i64,
    status: Result<T, String>,
) -> Result<String, String> {
    let status = status.map_err(|e| format!("{what} {registration_id}: {e}"))?;
    serde_json::to_string(&status).map_err(|e| format!("{what} {registration_id}: status not encodable: {e}"))
}

impl Response {
    /// The answer to a publication status query: the record as JSON, or an error naming the
    /// publication (`status` already failed, or the record is not encodable).
    pub fn publication_status<T: serde::Serialize>(
        correlation_id: i64,
        registration_id: i64,
        status: Result<T, String>,
    ) -> Response {
        match encode_status("publication", registration_id, status) {
            Ok(json) => Response::PublicationStatus { correlation_id, json },
            Err(message) => Response::Error { correlation_id, code: error_code::GENERIC_ERROR, message },
        }
    }

    /// The answer to a subscription status query (its image records), as
    /// [`Self::publication_status`].
    pub fn subscription_status<T: serde::Serialize>(
        correlation_id: i64,
        registration_id: i64,
        status: Result<T, String>,
    ) -> Response {
        match encode_status("subscription", registration_id, status) {
            Ok(json) => Response::SubscriptionStatus { correlation_id, json },
            Err(message) => Response::Error { correlation_id, code: error_code::GENERIC_ERROR, message },
        }
    }

    /// Type id and encoded payload.
    pub fn encode(&self) -> (i32, Vec<u8>) {
        let w = Writer::default();
        match self {
            Response::Error { correlation_id, code, message } => {
                (type_id::ON_ERROR, w.i64(*correlation_id).i32(*code).string(message).0)
            }
            Response::PublicationReady {
                correlation_id,
                registration_id,
                session_id,
                stream_id,
                publisher_limit_counter_id,
                log_file,
            } => (
                type_id::ON_PUBLICATION_READY,
                w.i64(*correlation_id)
                    .i64(*registration_id)
                    .i32(*session_id)
                    .i32(*stream_id)
                    .i32(*publisher_limit_counter_id)
                    .i32(-1)
                    .string(log_file)
                    .0,
            ),
            Response::SubscriptionReady { correlation_id } => {
                (type_id::ON_SUBSCRIPTION_READY, w.i64(*correlation_id).i32(-1).0)
            }
            Response::AvailableImage {
                correlation_id,
                subscription_registration_id,
                session_id,
                stream_id,
                subscriber_position_counter_id,
                log_file,
                source_identity,
            } => (
                type_id::ON_AVAILABLE_IMAGE,
                w.i64(*correlation_id)
                    .i64(*subscription_registration_id)
                    .i32(*session_id)
                    .i32(*stream_id)
                    .i32(*subscriber_position_counter_id)
                    .string(log_file)
                    .string(source_identity)
                    .0,
            ),
            Response::UnavailableImage { correlation_id, subscription_registration_id, stream_id } => (
                type_id::ON_UNAVAILABLE_IMAGE,
                w.i64(*correlation_id).i64(*subscription_registration_id).i32(*stream_id).string("").0,
            ),
            Response::OperationSuccess { correlation_id } => (type_id::ON_OPERATION_SUCCESS, w.i64(*correlation_id).0),
            Response::ClientTimeout { client_id } => (type_id::ON_CLIENT_TIMEOUT, w.i64(*client_id).0),
            Response::PublicationStatus { correlation_id, json } => {
                (type_id::ON_PUBLICATION_STATUS, w.i64(*correlation_id).string(json).0)
            }
            Response::SubscriptionStatus { correlation_id, json } => {
                (type_id::ON_SUBSCRIPTION_STATUS, w.i64(*correlation_id).string(json).0)
            }
            Response::DriverEvent { publication_registration_id, json } => {
                (type_id::ON_DRIVER_EVENT, w.i64(*publication_registration_id).string(json).0)
            }
        }
    }

    /// Decodes a response received from the broadcast buffer.
    pub fn decode(type_id: i32, bytes: &[u8]) -> Result<Self, CommandError> {
        let mut r = Reader { bytes, type_id };
        Ok(match type_id {
            type_id::ON_ERROR => Response::Error {
                correlation_id: r.i64("correlation id")?,
                code: r.i32("error code")?,
                message: r.string("message")?,
            },
            type_id::ON_PUBLICATION_READY => {
                let correlation_id = r.i64("correlation id")?;
                let registration_id = r.i64("registration id")?;
                let session_id = r.i32("session id")?;
                let stream_id = r.i32("stream id")?;
                let publisher_limit_counter_id = r.i32("publisher limit counter id")?;
                r.i32("channel status indicator id")?;
                Response::PublicationReady {
                    correlation_id,
                    registration_id,
                    session_id,
                    stream_id,
                    publisher_limit_counter_id,
                    log_file: r.string("log file")?,
                }
            }
            type_id::ON_SUBSCRIPTION_READY => {
                let correlation_id = r.i64("correlation id")?;
                r.i32("channel status indicator id")?;
                Response::SubscriptionReady { correlation_id }
            }
            type_id::ON_AVAILABLE_IMAGE => Response::AvailableImage {
                correlation_id: r.i64("correlation id")?,
                subscription_registration_id: r.i64("subscription registration id")?,
                session_id: r.i32("session id")?,
                stream_id: r.i32("stream id")?,
                subscriber_position_counter_id: r.i32("subscriber position counter id")?,
                log_file: r.string("log file")?,
                source_identity: r.string("source identity")?,
            },
            type_id::ON_UNAVAILABLE_IMAGE => {
                let correlation_id = r.i64("correlation id")?;
                let subscription_registration_id = r.i64("subscription registration id")?;
                let stream_id = r.i32("stream id")?;
                r.string("channel")?;
                Response::UnavailableImage { correlation_id, subscription_registration_id, stream_id }
            }
            type_id::ON_OPERATION_SUCCESS => Response::OperationSuccess { correlation_id: r.i64("correlation id")? },
            type_id::ON_CLIENT_TIMEOUT => Response::ClientTimeout { client_id: r.i64("client id")? },
            type_id::ON_PUBLICATION_STATUS => {
                Response::PublicationStatus { correlation_id: r.i64("correlation id")?, json: r.string("status")? }
            }
            type_id::ON_SUBSCRIPTION_STATUS => {
                Response::SubscriptionStatus { correlation_id: r.i64("correlation id")?, json: r.string("status")? }
            }
            type_id::ON_DRIVER_EVENT => Response::DriverEvent {
                publication_registration_id: r.i64("publication registration id")?,
                json: r.string("event")?,
            },
            other => return Err(r.error(format!("unknown response type {other:#06x}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_responses_round_trip() {
        let commands = [
            Command::AddPublication {
                client_id: 1,
                correlation_id: 2,
                stream_id: 3,
                channel: "aeron:ipc".into(),
                exclusive: false,
            },
            Command::AddPublication {
                client_id: 1,
                correlation_id: 3,
                stream_id: 3,
                channel: "aeron:ipc".into(),
                exclusive: true,
            },
            Command::RemovePublication { client_id: 1, correlation_id: 4, registration_id: 2 },
            Command::AddSubscription {
                client_id: 1,
                correlation_id: 5,
                stream_id: 3,
                channel: "aeron:ipc?term-length=64k".into(),
            },
            Command::RemoveSubscription { client_id: 1, correlation_id: 6, registration_id: 5 },
            Command::ClientKeepalive { client_id: 1, token: -5 },
            Command::ClientClose { client_id: 1, token: 77 },
            Command::QueryPublication { client_id: 1, correlation_id: 7, registration_id: 2 },
            Command::QuerySubscription { client_id: 1, correlation_id: 8, registration_id: 5 },
        ];
        for command in commands {
            let (id, bytes) = command.encode();
            assert_eq!(Command::decode(id, &bytes).unwrap(), command);
        }
        let exclusive = Command::AddPublication {
            client_id: 1,
            correlation_id: 3,
            stream_id: 3,
            channel: "aeron:ipc".into(),
            exclusive: true,
        };
        assert_eq!(exclusive.encode().0, type_id::ADD_EXCLUSIVE_PUBLICATION, "Aeron's type id");
        let responses = [
            Response::Error { correlation_id: 2, code: error_code::INVALID_CHANNEL, message: "bad".into() },
            Response::PublicationReady {
                correlation_id: 2,
                registration_id: 2,
                session_id: -7,
                stream_id: 3,
                publisher_limit_counter_id: 12,
                log_file: "publications/2.logbuffer".into(),
            },
            Response::SubscriptionReady { correlation_id: 5 },
            Response::AvailableImage {
                correlation_id: 9,
                subscription_registration_id: 5,
                session_id: -7,
                stream_id: 3,
                subscriber_position_counter_id: 13,
                log_file: "publications/2.logbuffer".into(),
                source_identity: "ipc".into(),
            },
            Response::UnavailableImage { correlation_id: 9, subscription_registration_id: 5, stream_id: 3 },
            Response::OperationSuccess { correlation_id: 6 },
            Response::ClientTimeout { client_id: 1 },
            Response::AvailableImage {
                correlation_id: 10,
                subscription_registration_id: 5,
                session_id: 11,
                stream_id: 3,
                subscriber_position_counter_id: 14,
                log_file: "images/10.logbuffer".into(),
                source_identity: "127.0.0.1:40123".into(),
            },
            Response::PublicationStatus { correlation_id: 7, json: r#"{"session_id":1}"#.into() },
            Response::SubscriptionStatus { correlation_id: 8, json: "[]".into() },
            Response::DriverEvent { publication_registration_id: 2, json: r#"{"kind":"connection_changed"}"#.into() },
        ];
        for response in responses {
            let (id, bytes) = response.encode();
            assert_eq!(Response::decode(id, &bytes).unwrap(), response);
        }
    }

    #[test]
    fn truncated_or_hostile_records_are_precise_errors() {
        let (id, bytes) = Command::AddPublication {
            client_id: 1,
            correlation_id: 2,
            stream_id: 3,
            channel: "aeron:ipc".into(),
            exclusive: false,
        }
        .encode();
        for cut in 0..bytes.len() {
            let error = Command::decode(id, &bytes[..cut]).unwrap_err();
            assert!(error.detail.contains("needed"), "{error}");
        }
        let mut negative = bytes.clone();
        negative[20..24].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(Command::decode(id, &negative).unwrap_err().detail.contains("negative length"));
        let mut not_utf8 = bytes.clone();
        let last = not_utf8.len() - 1;
        not_utf8[last] = 0xFF;
        assert!(Command::decode(id, &not_utf8).unwrap_err().detail.contains("UTF-8"));
        assert!(Command::decode(0x77, &bytes).unwrap_err().to_string().contains("unknown command type 0x0077"));
        assert!(Response::decode(0x0F99, &[]).is_err());
    }

    #[test]
    fn truncated_queries_and_status_records_are_precise_errors() {
        let (id, bytes) = Command::QueryPublication { client_id: 1, correlation_id: 2, registration_id: 3 }.encode();
        for cut in 0..bytes.len() {
            assert!(Command::decode(id, &bytes[..cut]).unwrap_err().detail.contains("needed"));
        }
        let (id, bytes) = Response::DriverEvent { publication_registration_id: 2, json: "{}".into() }.encode();
        for cut in 0..bytes.len() {
            assert!(Response::decode(id, &bytes[..cut]).unwrap_err().detail.contains("needed"));
        }
        let (id, mut bytes) = Response::SubscriptionStatus { correlation_id: 8, json: "[]".into() }.encode();
        bytes[8..12].copy_from_slice(&(-5i32).to_le_bytes());
        assert!(Response::decode(id, &bytes).unwrap_err().detail.contains("negative length"));
    }
}
