//! Control-plane message codecs: the common header, HEARTBEAT, ACK and DATA (with its records).
//!
//! Every message starts with the same 24-byte header. All integers are little-endian.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------+---------------+-------------------------------+
//! |  version (1)  |     kind      |             flags             |  0
//! +---------------+---------------+-------------------------------+
//! |                       reserved (0)                            |  4
//! +---------------------------------------------------------------+
//! |                    group fingerprint (u64)                    |  8
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                    sender member id (u64)                     | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! HEARTBEAT (kind 1; flags: 0x0001 LEAVING):
//!
//! ```text
//! +---------------+---------------+---------------+---------------+
//! |     role      |  name_length  | endpoint_len  |  reserved (0) | 24
//! +---------------+---------------+---------------+---------------+
//! |                        index (u32)                            | 28
//! |                        count (u32)                            | 32
//! |                        pid (u32)                              | 36
//! |                     claim_count (u32)                         | 40
//! |                     figure_count (u32)                        | 44
//! +---------------------------------------------------------------+
//! |  name (UTF-8) | endpoint (UTF-8) | claims... | figures...       48
//! +---------------------------------------------------------------+
//! claim (16 + 24 * ack_count bytes):
//!   queue u32 | state u8 | reserved u8 | ack_count u16 | epoch u64 |
//!   ack_count * (producer u64 | acked u64 | received u64)
//! figure (56 bytes, publishers):
//!   queue u32 | reserved u32 | owner u64 | epoch u64 | sent u64 | acked u64 |
//!   retained_bytes u64 | retained_messages u64
//! ```
//!
//! ACK (kind 2), consumer → producer:
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     producer id (u64)                         | 24
//! +---------------------------------------------------------------+
//! |                     entry_count (u32)                         | 32
//! |                     reserved (0)                              | 36
//! +---------------------------------------------------------------+
//! entry (32 bytes): queue u32 | flags u32 (0x1 RESEND) | epoch u64 | acked u64 | received u64
//! ```
//!
//! DATA (kind 3), producer → owner, on the DATA stream:
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                         queue (u32)                           | 24
//! |                      record_count (u32)                       | 28
//! +---------------------------------------------------------------+
//! |                         epoch (u64)                           | 32
//! |                  acked floor (u64, producer's view)           | 40
//! |                  first sequence (u64, >= 1)                   | 48
//! +---------------------------------------------------------------+
//! record (16 bytes + key + subject + payload; sequence = first + i):
//!   bucket u32 | key_length u32 | payload_length u32 | subject_length u16 | flags u16 (0x1 HAS_SUBJECT)
//! ```

use super::error::ControlError;
use super::limits::*;

/// The control-plane version this build speaks (the first byte of every message).
pub const VERSION: u8 = 1;
/// Length of the common header.
pub const HEADER_LENGTH: usize = 24;
/// Length of the HEARTBEAT fixed part (header included).
pub const HEARTBEAT_FIXED_LENGTH: usize = 48;
/// Length of one claim without its acks.
pub const CLAIM_FIXED_LENGTH: usize = 16;
/// Length of one producer ack inside a claim.
pub const CLAIM_ACK_LENGTH: usize = 24;
/// Length of one publisher queue figure.
pub const FIGURE_LENGTH: usize = 56;
/// Length of the ACK fixed part (header included).
pub const ACK_FIXED_LENGTH: usize = 40;
/// Length of one ACK entry.
pub const ACK_ENTRY_LENGTH: usize = 32;
/// Length of the DATA fixed part (header included).
pub const DATA_FIXED_LENGTH: usize = 56;
/// Length of a record's fixed part.
pub const RECORD_FIXED_LENGTH: usize = 16;

/// HEARTBEAT flag: the member is leaving (no longer a candidate for anything).
pub const FLAG_LEAVING: u16 = 0x0001;
/// ACK entry flag: the consumer saw a gap and asks for a resend from `received + 1`.
pub const ACK_FLAG_RESEND: u32 = 0x0001;
/// Record flag: a subject follows the key.
pub const RECORD_FLAG_SUBJECT: u16 = 0x0001;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: Field = 2..4;
    pub const FINGERPRINT: Field = 8..16;
    pub const SENDER: Field = 16..24;

    pub const HB_ROLE: usize = 24;
    pub const HB_NAME_LENGTH: usize = 25;
    pub const HB_ENDPOINT_LENGTH: usize = 26;
    pub const HB_INDEX: Field = 28..32;
    pub const HB_COUNT: Field = 32..36;
    pub const HB_PID: Field = 36..40;
    pub const HB_CLAIM_COUNT: Field = 40..44;
    pub const HB_FIGURE_COUNT: Field = 44..48;

    pub const ACK_PRODUCER: Field = 24..32;
    pub const ACK_ENTRY_COUNT: Field = 32..36;

    pub const DATA_QUEUE: Field = 24..28;
    pub const DATA_RECORD_COUNT: Field = 28..32;
    pub const DATA_EPOCH: Field = 32..40;
    pub const DATA_ACKED_FLOOR: Field = 40..48;
    pub const DATA_FIRST_SEQUENCE: Field = 48..56;

    pub const RECORD_BUCKET: Field = 0..4;
    pub const RECORD_KEY_LENGTH: Field = 4..8;
    pub const RECORD_PAYLOAD_LENGTH: Field = 8..12;
    pub const RECORD_SUBJECT_LENGTH: Field = 12..14;
    pub const RECORD_FLAGS: Field = 14..16;
}

/// The message kinds (second header byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Member announcement, liveness and claims.
    Heartbeat = 1,
    /// Consumer → producer acknowledgements.
    Ack = 2,
    /// Producer → owner records.
    Data = 3,
    /// A joining member asks for the group's definition and members (`control::bootstrap`).
    Bootstrap = 4,
    /// The answer to a BOOTSTRAP.
    BootstrapReply = 5,
}

impl Kind {
    fn from_code(code: u8) -> Option<Kind> {
        match code {
            1 => Some(Kind::Heartbeat),
            2 => Some(Kind::Ack),
            3 => Some(Kind::Data),
            4 => Some(Kind::Bootstrap),
            5 => Some(Kind::BootstrapReply),
            _ => None,
        }
    }

    /// Upper-case name, as in `docs/control-plane.md`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Heartbeat => "HEARTBEAT",
            Kind::Ack => "ACK",
            Kind::Data => "DATA",
            Kind::Bootstrap => "BOOTSTRAP",
            Kind::BootstrapReply => "BOOTSTRAP_REPLY",
        }
    }
}

/// The decoded common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message kind.
    pub kind: Kind,
    /// Kind-specific flags.
    pub flags: u16,
    /// Fingerprint of the group (namespace) the sender belongs to.
    pub fingerprint: u64,
    /// The sender's member id.
    pub sender: u64,
}

pub(super) fn check_length(what: &'static str, bytes: &[u8], needed: usize) -> Result<(), ControlError> {
    if bytes.len() < needed {
        return Err(ControlError::Truncated { what, needed, actual: bytes.len() });
    }
    Ok(())
}

fn array<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(source) = bytes.get(at..at + N) {
        out.copy_from_slice(source);
    }
    out
}

fn u16_at(bytes: &[u8], field: field::Field) -> u16 {
    u16::from_le_bytes(array(bytes, field.start))
}
fn u32_at(bytes: &[u8], field: field::Field) -> u32 {
    u32::from_le_bytes(array(bytes, field.start))
}
fn u64_at(bytes: &[u8], field: field::Field) -> u64 {
    u64::from_le_bytes(array(bytes, field.start))
}
fn byte_at(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

/// A bounds-checked cursor over the variable part of a message.
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
    pub(super) what: &'static str,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, length: usize) -> Result<&'a [u8], ControlError> {
        let end = self.at.saturating_add(length);
        let slice = self.bytes.get(self.at..end).ok_or(ControlError::Truncated {
            what: self.what,
            needed: end,
            actual: self.bytes.len(),
        })?;
        self.at = end;
        Ok(slice)
    }
    pub(super) fn u8(&mut self) -> Result<u8, ControlError> {
        Ok(byte_at(self.take(1)?, 0))
    }
    pub(super) fn u16(&mut self) -> Result<u16, ControlError> {
        Ok(u16::from_le_bytes(array(self.take(2)?, 0)))
    }
    pub(super) fn u32(&mut self) -> Result<u32, ControlError> {
        Ok(u32::from_le_bytes(array(self.take(4)?, 0)))
    }
    pub(super) fn u64(&mut self) -> Result<u64, ControlError> {
        Ok(u64::from_le_bytes(array(self.take(8)?, 0)))
    }
    pub(super) fn text(&mut self, length: usize, field: &'static str) -> Result<String, ControlError> {
        let bytes = self.take(length)?;
        std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| ControlError::NotUtf8 { what: self.what, field })
    }
    pub(super) fn finish(self) -> Result<(), ControlError> {
        let count = self.bytes.len().saturating_sub(self.at);
        if count > 0 {
            return Err(ControlError::TrailingBytes { what: self.what, count });
        }
        Ok(())
    }
}

pub(super) fn limit(what: &'static str, field: &'static str, value: usize, max: usize) -> Result<(), ControlError> {
    if value > max {
        return Err(ControlError::TooLong { what, field, value: value as u64, max: max as u64 });
    }
    Ok(())
}

impl Header {
    /// Decodes the common header of any control-plane message.
    pub fn parse(bytes: &[u8]) -> Result<Header, ControlError> {
        check_length("header", bytes, HEADER_LENGTH)?;
        let version = byte_at(bytes, field::VERSION);
        // Version 2 is version 1 sealed (control::auth); the trailer is stripped before decoding.
        if version != VERSION && version != super::auth::AUTHENTICATED_VERSION {
            return Err(ControlError::UnsupportedVersion(version));
        }
        let code = byte_at(bytes, field::KIND);
        let kind = Kind::from_code(code).ok_or(ControlError::WrongKind { expected: "known kind", actual: code })?;
        Ok(Header {
            kind,
            flags: u16_at(bytes, field::FLAGS),
            fingerprint: u64_at(bytes, field::FINGERPRINT),
            sender: u64_at(bytes, field::SENDER),
        })
    }

    pub(super) fn parse_kind(bytes: &[u8], expected: Kind) -> Result<Header, ControlError> {
        let header = Header::parse(bytes)?;
        if header.kind != expected {
            return Err(ControlError::WrongKind { expected: expected.name(), actual: header.kind as u8 });
        }
        Ok(header)
    }

    /// Appends the 24 header bytes to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.fingerprint.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
    }
}

/// What a member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Publishes keyed records.
    Publisher = 1,
    /// Owns queues and delivers their records.
    Consumer = 2,
    /// Watches the control plane (status tools); owns nothing.
    Observer = 3,
    /// A subject router (`crate::subjects`).
    Router = 4,
    /// A data source (adapter peer or faucet publisher) of a subject router.
    Source = 5,
    /// A subscriber of a subject router.
    Subscriber = 6,
}

impl Role {
    /// Decodes a role byte.
    pub fn from_code(code: u8) -> Option<Role> {
        match code {
            1 => Some(Role::Publisher),
            2 => Some(Role::Consumer),
            3 => Some(Role::Observer),
            4 => Some(Role::Router),
            5 => Some(Role::Source),
            6 => Some(Role::Subscriber),
            _ => None,
        }
    }

    /// Lower-case name (`publisher`, `consumer`, `observer`), as in member files and status.
    pub fn name(self) -> &'static str {
        match self {
            Role::Publisher => "publisher",
            Role::Consumer => "consumer",
            Role::Observer => "observer",
            Role::Router => "router",
            Role::Source => "source",
            Role::Subscriber => "subscriber",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(name: &str) -> Option<Role> {
        [Role::Publisher, Role::Consumer, Role::Observer, Role::Router, Role::Source, Role::Subscriber]
            .into_iter()
            .find(|role| role.name() == name)
    }
}

/// The state of a consumer's claim on a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimState {
    /// Claimed; waiting for the settle period before delivering.
    Claiming = 1,
    /// Delivering.
    Active = 2,
    /// Delivering nothing new; waiting for the application to acknowledge what it has.
    Releasing = 3,
    /// Given up; the acks are final.
    Released = 4,
}

impl ClaimState {
    /// Decodes a state byte.
    pub fn from_code(code: u8) -> Option<ClaimState> {
        match code {
            1 => Some(ClaimState::Claiming),
            2 => Some(ClaimState::Active),
            3 => Some(ClaimState::Releasing),
            4 => Some(ClaimState::Released),
            _ => None,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ClaimState::Claiming => "claiming",
            ClaimState::Active => "active",
            ClaimState::Releasing => "releasing",
            ClaimState::Released => "released",
        }
    }

    /// Whether a claim in this state keeps others from claiming the queue.
    pub fn holds(self) -> bool {
        !matches!(self, ClaimState::Released)
    }
}

/// One producer's positions on a claimed queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerAck {
    /// The producer's member id.
    pub producer: u64,
    /// Highest sequence the application acknowledged (cumulative).
    pub acked: u64,
    /// Highest sequence received in order.
    pub received: u64,
}

/// A consumer's claim on one queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The queue.
    pub queue: u32,
    /// The claim's epoch.
    pub epoch: u64,
    /// The claim's state.
    pub state: ClaimState,
    /// Per-producer positions (bounded by [`MAX_ACKS_PER_CLAIM`]).
    pub acks: Vec<ProducerAck>,
}

/// A publisher's figures for one queue (for `group status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueFigures {
    /// The queue.
    pub queue: u32,
    /// The owner the publisher sends to (0: none).
    pub owner: u64,
    /// The owner's epoch.
    pub epoch: u64,
    /// Highest sequence published.
    pub sent: u64,
    /// Highest sequence acknowledged.
    pub acked: u64,
    /// Bytes retained (not yet acknowledged).
    pub retained_bytes: u64,
    /// Messages retained.
    pub retained_messages: u64,
}

/// A HEARTBEAT: who the member is, that it is alive, and what it claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Group (namespace) fingerprint.
    pub fingerprint: u64,
    /// The sender.
    pub member_id: u64,
    /// The member is leaving: never a candidate again.
    pub leaving: bool,
    /// The sender's role.
    pub role: Role,
    /// Human-readable name (≤ [`MAX_NAME_LENGTH`] bytes).
    pub name: String,
    /// The sender's inbox endpoint `host:port` (≤ [`MAX_ENDPOINT_LENGTH`] bytes).
    pub endpoint: String,
    /// Consumer index (0 for other roles).
    pub index: u32,
    /// Consumer count (0 for other roles).
    pub count: u32,
    /// Process id of the sender.
    pub pid: u32,
    /// Claims (consumers).
    pub claims: Vec<Claim>,
    /// Per-queue figures (publishers).
    pub figures: Vec<QueueFigures>,
}

impl Heartbeat {
    /// Encoded length.
    pub fn encoded_length(&self) -> usize {
        HEARTBEAT_FIXED_LENGTH
            + self.name.len()
            + self.endpoint.len()
            + self.claims.iter().map(|c| CLAIM_FIXED_LENGTH + CLAIM_ACK_LENGTH * c.acks.len()).sum::<usize>()
            + FIGURE_LENGTH * self.figures.len()
    }

    /// Appends the encoded heartbeat to `out`; refuses lists and strings over their limits.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), ControlError> {
        const WHAT: &str = "HEARTBEAT";
        limit(WHAT, "name_length", self.name.len(), MAX_NAME_LENGTH)?;
        limit(WHAT, "endpoint_length", self.endpoint.len(), MAX_ENDPOINT_LENGTH)?;
        limit(WHAT, "claim_count", self.claims.len(), MAX_CLAIMS)?;
        limit(WHAT, "figure_count", self.figures.len(), MAX_FIGURES)?;
        for claim in &self.claims {
            limit(WHAT, "ack_count", claim.acks.len(), MAX_ACKS_PER_CLAIM)?;
        }
        limit(WHAT, "length", self.encoded_length(), MAX_CONTROL_MESSAGE_LENGTH)?;
        out.reserve(self.encoded_length());
        let flags = if self.leaving { FLAG_LEAVING } else { 0 };
        Header { kind: Kind::Heartbeat, flags, fingerprint: self.fingerprint, sender: self.member_id }.emit(out);
        out.extend_from_slice(&[self.role as u8, self.name.len() as u8, self.endpoint.len() as u8, 0]);
        for value in [self.index, self.count, self.pid, self.claims.len() as u32, self.figures.len() as u32] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(self.endpoint.as_bytes());
        for claim in &self.claims {
            out.extend_from_slice(&claim.queue.to_le_bytes());
            out.extend_from_slice(&[claim.state as u8, 0]);
            out.extend_from_slice(&(claim.acks.len() as u16).to_le_bytes());
            out.extend_from_slice(&claim.epoch.to_le_bytes());
            for ack in &claim.acks {
                for value in [ack.producer, ack.acked, ack.received] {
                    out.extend_from_slice(&value.to_le_bytes());
                }
            }
        }
        for figure in &self.figures {
            out.extend_from_slice(&figure.queue.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            for value in
                [figure.owner, figure.epoch, figure.sent, figure.acked, figure.retained_bytes, figure.retained_messages]
            {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Encodes into a new buffer.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ControlError> {
        let mut out = Vec::new();
        self.emit(&mut out)?;
        Ok(out)
    }

    /// Decodes a heartbeat from untrusted bytes.
    pub fn parse(bytes: &[u8]) -> Result<Heartbeat, ControlError> {
        const WHAT: &str = "HEARTBEAT";
        let header = Header::parse_kind(bytes, Kind::Heartbeat)?;
        limit(WHAT, "length", bytes.len(), MAX_CONTROL_MESSAGE_LENGTH)?;
        check_length(WHAT, bytes, HEARTBEAT_FIXED_LENGTH)?;
        let role_code = byte_at(bytes, field::HB_ROLE);
        let role = Role::from_code(role_code).ok_or(ControlError::Invalid {
            what: WHAT,
            field: "role",
            value: u64::from(role_code),
        })?;
        let name_length = usize::from(byte_at(bytes, field::HB_NAME_LENGTH));
        let endpoint_length = usize::from(byte_at(bytes, field::HB_ENDPOINT_LENGTH));
        let claim_count = u32_at(bytes, field::HB_CLAIM_COUNT) as usize;
        let figure_count = u32_at(bytes, field::HB_FIGURE_COUNT) as usize;
        limit(WHAT, "claim_count", claim_count, MAX_CLAIMS)?;
        limit(WHAT, "figure_count", figure_count, MAX_FIGURES)?;
        let mut reader = Reader { bytes, at: HEARTBEAT_FIXED_LENGTH, what: WHAT };
        let name = reader.text(name_length, "name")?;
        let endpoint = reader.text(endpoint_length, "endpoint")?;
        let mut claims = Vec::with_capacity(claim_count.min(64));
        reader.what = "HEARTBEAT claim";
        for _ in 0..claim_count {
            let queue = reader.u32()?;
            let state_code = reader.u8()?;
            let state = ClaimState::from_code(state_code).ok_or(ControlError::Invalid {
                what: "HEARTBEAT claim",
                field: "state",
                value: u64::from(state_code),
            })?;
            reader.u8()?;
            let ack_count = usize::from(reader.u16()?);
            limit("HEARTBEAT claim", "ack_count", ack_count, MAX_ACKS_PER_CLAIM)?;
            let epoch = reader.u64()?;
            let mut acks = Vec::with_capacity(ack_count.min(64));
            for _ in 0..ack_count {
                acks.push(ProducerAck { producer: reader.u64()?, acked: reader.u64()?, received: reader.u64()? });
            }
            claims.push(Claim { queue, epoch, state, acks });
        }
        reader.what = "HEARTBEAT figure";
        let mut figures = Vec::with_capacity(figure_count.min(64));
        for _ in 0..figure_count {
            let queue = reader.u32()?;
            reader.u32()?;
            figures.push(QueueFigures {
                queue,
                owner: reader.u64()?,
                epoch: reader.u64()?,
                sent: reader.u64()?,
                acked: reader.u64()?,
                retained_bytes: reader.u64()?,
                retained_messages: reader.u64()?,
            });
        }
        reader.finish()?;
        Ok(Heartbeat {
            fingerprint: header.fingerprint,
            member_id: header.sender,
            leaving: header.flags & FLAG_LEAVING != 0,
            role,
            name,
            endpoint,
            index: u32_at(bytes, field::HB_INDEX),
            count: u32_at(bytes, field::HB_COUNT),
            pid: u32_at(bytes, field::HB_PID),
            claims,
            figures,
        })
    }
}

/// One queue's acknowledgement inside an ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AckEntry {
    /// The queue.
    pub queue: u32,
    /// Flags ([`ACK_FLAG_RESEND`]).
    pub flags: u32,
    /// The consumer's epoch for the queue.
    pub epoch: u64,
    /// Highest sequence the application acknowledged (cumulative).
    pub acked: u64,
    /// Highest sequence received in order.
    pub received: u64,
}

/// An ACK: a consumer's positions for one producer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// Group fingerprint.
    pub fingerprint: u64,
    /// The consumer sending it.
    pub consumer: u64,
    /// The producer it is for.
    pub producer: u64,
    /// One entry per queue (≤ [`MAX_ACK_ENTRIES`]).
    pub entries: Vec<AckEntry>,
}

impl Ack {
    /// Appends the encoded ACK to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), ControlError> {
        limit("ACK", "entry_count", self.entries.len(), MAX_ACK_ENTRIES)?;
        Header { kind: Kind::Ack, flags: 0, fingerprint: self.fingerprint, sender: self.consumer }.emit(out);
        out.extend_from_slice(&self.producer.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for entry in &self.entries {
            out.extend_from_slice(&entry.queue.to_le_bytes());
            out.extend_from_slice(&entry.flags.to_le_bytes());
            for value in [entry.epoch, entry.acked, entry.received] {
                out.extend_from_slice(&value.to_le_bytes());
            }
        }
        Ok(())
    }

    /// Encodes into a new buffer.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ControlError> {
        let mut out = Vec::new();
        self.emit(&mut out)?;
        Ok(out)
    }

    /// Decodes an ACK from untrusted bytes.
    pub fn parse(bytes: &[u8]) -> Result<Ack, ControlError> {
        const WHAT: &str = "ACK";
        let header = Header::parse_kind(bytes, Kind::Ack)?;
        check_length(WHAT, bytes, ACK_FIXED_LENGTH)?;
        let count = u32_at(bytes, field::ACK_ENTRY_COUNT) as usize;
        limit(WHAT, "entry_count", count, MAX_ACK_ENTRIES)?;
        let mut reader = Reader { bytes, at: ACK_FIXED_LENGTH, what: WHAT };
        let mut entries = Vec::with_capacity(count.min(64));
        for _ in 0..count {
            entries.push(AckEntry {
                queue: reader.u32()?,
                flags: reader.u32()?,
                epoch: reader.u64()?,
                acked: reader.u64()?,
                received: reader.u64()?,
            });
        }
        reader.finish()?;
        Ok(Ack {
            fingerprint: header.fingerprint,
            consumer: header.sender,
            producer: u64_at(bytes, field::ACK_PRODUCER),
            entries,
        })
    }
}

/// The fixed part of a DATA message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// Group fingerprint.
    pub fingerprint: u64,
    /// The producer.
    pub producer: u64,
    /// The queue.
    pub queue: u32,
    /// Records in the message.
    pub record_count: u32,
    /// The owner's epoch the producer sends for.
    pub epoch: u64,
    /// Highest sequence the producer knows to be acknowledged for this queue.
    pub acked_floor: u64,
    /// Sequence of the first record (the others follow consecutively).
    pub first_sequence: u64,
}

impl DataHeader {
    /// Appends the 56-byte fixed part to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        Header { kind: Kind::Data, flags: 0, fingerprint: self.fingerprint, sender: self.producer }.emit(out);
        out.extend_from_slice(&self.queue.to_le_bytes());
        out.extend_from_slice(&self.record_count.to_le_bytes());
        for value in [self.epoch, self.acked_floor, self.first_sequence] {
            out.extend_from_slice(&value.to_le_bytes());
        }
    }
}

/// One record of a DATA message, borrowed from the message bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Bucket of the key (`hash(key) % HC`).
    pub bucket: u32,
    /// The key.
    pub key: &'a [u8],
    /// The subject, if the record carries one.
    pub subject: Option<&'a str>,
    /// The payload.
    pub payload: &'a [u8],
}

/// Appends one encoded record to `out`; refuses fields over their limits.
pub fn emit_record(
    out: &mut Vec<u8>,
    bucket: u32,
    key: &[u8],
    subject: Option<&str>,
    payload: &[u8],
) -> Result<(), ControlError> {
    const WHAT: &str = "DATA record";
    limit(WHAT, "key_length", key.len(), MAX_KEY_LENGTH)?;
    limit(WHAT, "payload_length", payload.len(), MAX_PAYLOAD_LENGTH)?;
    let subject_bytes = subject.map(str::as_bytes).unwrap_or(b"");
    limit(WHAT, "subject_length", subject_bytes.len(), MAX_SUBJECT_LENGTH)?;
    let flags = if subject.is_some() { RECORD_FLAG_SUBJECT } else { 0 };
    out.reserve(RECORD_FIXED_LENGTH + key.len() + subject_bytes.len() + payload.len());
    out.extend_from_slice(&bucket.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&(subject_bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(subject_bytes);
    out.extend_from_slice(payload);
    Ok(())
}

/// Encoded length of a record.
pub fn record_length(key: &[u8], subject: Option<&str>, payload: &[u8]) -> usize {
    RECORD_FIXED_LENGTH + key.len() + subject.map_or(0, str::len) + payload.len()
}

/// Decodes the record at the start of `bytes`; returns it and its encoded length.
pub fn parse_record(bytes: &[u8]) -> Result<(RecordView<'_>, usize), ControlError> {
    const WHAT: &str = "DATA record";
    check_length(WHAT, bytes, RECORD_FIXED_LENGTH)?;
    let key_length = u32_at(bytes, field::RECORD_KEY_LENGTH) as usize;
    let payload_length = u32_at(bytes, field::RECORD_PAYLOAD_LENGTH) as usize;
    let subject_length = usize::from(u16_at(bytes, field::RECORD_SUBJECT_LENGTH));
    let flags = u16_at(bytes, field::RECORD_FLAGS);
    limit(WHAT, "key_length", key_length, MAX_KEY_LENGTH)?;
    limit(WHAT, "payload_length", payload_length, MAX_PAYLOAD_LENGTH)?;
    limit(WHAT, "subject_length", subject_length, MAX_SUBJECT_LENGTH)?;
    let has_subject = flags & RECORD_FLAG_SUBJECT != 0;
    if !has_subject && subject_length != 0 {
        return Err(ControlError::Invalid { what: WHAT, field: "subject_length", value: subject_length as u64 });
    }
    let mut reader = Reader { bytes, at: RECORD_FIXED_LENGTH, what: WHAT };
    let key = reader.take(key_length)?;
    let subject_bytes = reader.take(subject_length)?;
    let payload = reader.take(payload_length)?;
    let subject = if has_subject {
        Some(std::str::from_utf8(subject_bytes).map_err(|_| ControlError::NotUtf8 { what: WHAT, field: "subject" })?)
    } else {
        None
    };
    Ok((RecordView { bucket: u32_at(bytes, field::RECORD_BUCKET), key, subject, payload }, reader.at))
}

/// A validated DATA message: header plus records that are known to decode.
#[derive(Clone, Copy, Debug)]
pub struct DataMessage<'a> {
    /// The fixed part.
    pub header: DataHeader,
    records: &'a [u8],
}

impl<'a> DataMessage<'a> {
    /// Decodes and validates every record of a DATA message from untrusted bytes.
    pub fn parse(bytes: &'a [u8]) -> Result<DataMessage<'a>, ControlError> {
        const WHAT: &str = "DATA";
        let header = Header::parse_kind(bytes, Kind::Data)?;
        check_length(WHAT, bytes, DATA_FIXED_LENGTH)?;
        let record_count = u32_at(bytes, field::DATA_RECORD_COUNT);
        limit(WHAT, "record_count", record_count as usize, MAX_RECORDS_PER_DATA)?;
        let first_sequence = u64_at(bytes, field::DATA_FIRST_SEQUENCE);
        if first_sequence == 0 {
            return Err(ControlError::Invalid { what: WHAT, field: "first_sequence", value: 0 });
        }
        if first_sequence.checked_add(u64::from(record_count)).is_none() {
            return Err(ControlError::Invalid { what: WHAT, field: "first_sequence", value: first_sequence });
        }
        let records = bytes.get(DATA_FIXED_LENGTH..).unwrap_or(&[]);
        let mut at = 0usize;
        for _ in 0..record_count {
            let (_, length) = parse_record(records.get(at..).unwrap_or(&[]))?;
            at += length;
        }
        if at != records.len() {
            return Err(ControlError::TrailingBytes { what: WHAT, count: records.len() - at });
        }
        Ok(DataMessage {
            header: DataHeader {
                fingerprint: header.fingerprint,
                producer: header.sender,
                queue: u32_at(bytes, field::DATA_QUEUE),
                record_count,
                epoch: u64_at(bytes, field::DATA_EPOCH),
                acked_floor: u64_at(bytes, field::DATA_ACKED_FLOOR),
                first_sequence,
            },
            records,
        })
    }

    /// The records with their sequence numbers, in order.
    pub fn records(&self) -> impl Iterator<Item = (u64, RecordView<'a>)> + 'a {
        let records = self.records;
        let first = self.header.first_sequence;
        let mut at = 0usize;
        let mut sequence = first;
        std::iter::from_fn(move || {
            let (record, length) = parse_record(records.get(at..)?).ok()?;
            at += length;
            let current = sequence;
            sequence = sequence.saturating_add(1);
            Some((current, record))
        })
        .take(self.header.record_count as usize)
    }
}

/// Any control-plane message, decoded.
#[derive(Clone, Debug)]
pub enum ControlMessage {
    /// A heartbeat.
    Heartbeat(Heartbeat),
    /// An acknowledgement.
    Ack(Ack),
}

/// Decodes a message from the CONTROL stream (HEARTBEAT or ACK).
pub fn parse_control(bytes: &[u8]) -> Result<ControlMessage, ControlError> {
    match Header::parse(bytes)?.kind {
        Kind::Heartbeat => Heartbeat::parse(bytes).map(ControlMessage::Heartbeat),
        Kind::Ack => Ack::parse(bytes).map(ControlMessage::Ack),
        other @ (Kind::Data | Kind::Bootstrap | Kind::BootstrapReply) => {
            Err(ControlError::WrongKind { expected: "HEARTBEAT or ACK", actual: other as u8 })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat() -> Heartbeat {
        Heartbeat {
            fingerprint: 0x1122_3344_5566_7788,
            member_id: 42,
            leaving: true,
            role: Role::Consumer,
            name: "consumer-é".into(),
            endpoint: "127.0.0.1:40123".into(),
            index: 1,
            count: 2,
            pid: 777,
            claims: vec![Claim {
                queue: 3,
                epoch: 9,
                state: ClaimState::Releasing,
                acks: vec![ProducerAck { producer: 5, acked: 10, received: 12 }],
            }],
            figures: vec![QueueFigures {
                queue: 1,
                owner: 2,
                epoch: 3,
                sent: 4,
                acked: 5,
                retained_bytes: 6,
                retained_messages: 7,
            }],
        }
    }

    #[test]
    fn heartbeat_round_trips_and_has_its_documented_length() {
        let hb = heartbeat();
        let bytes = hb.to_bytes().unwrap();
        assert_eq!(bytes.len(), hb.encoded_length());
        assert_eq!(bytes.len(), 48 + 11 + 15 + 16 + 24 + 56);
        assert_eq!(bytes[0], VERSION);
        assert_eq!(Heartbeat::parse(&bytes).unwrap(), hb);
        assert!(matches!(parse_control(&bytes), Ok(ControlMessage::Heartbeat(_))));
    }

    #[test]
    fn every_truncation_of_a_heartbeat_is_rejected() {
        let bytes = heartbeat().to_bytes().unwrap();
        for length in 0..bytes.len() {
            assert!(Heartbeat::parse(&bytes[..length]).is_err(), "length {length}");
        }
    }

    #[test]
    fn heartbeat_with_oversize_claim_count_is_refused_before_allocating() {
        let mut bytes = heartbeat().to_bytes().unwrap();
        bytes[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Heartbeat::parse(&bytes), Err(ControlError::TooLong { field: "claim_count", .. })));
    }

    #[test]
    fn unknown_version_and_kind_are_typed_errors() {
        let mut bytes = heartbeat().to_bytes().unwrap();
        bytes[0] = 3;
        assert_eq!(Heartbeat::parse(&bytes), Err(ControlError::UnsupportedVersion(3)));
        bytes[0] = VERSION;
        bytes[1] = 9;
        assert!(matches!(Header::parse(&bytes), Err(ControlError::WrongKind { actual: 9, .. })));
    }

    #[test]
    fn emit_refuses_an_oversize_name() {
        let mut hb = heartbeat();
        hb.name = "x".repeat(MAX_NAME_LENGTH + 1);
        assert!(matches!(hb.to_bytes(), Err(ControlError::TooLong { field: "name_length", .. })));
    }

    #[test]
    fn ack_round_trips() {
        let ack = Ack {
            fingerprint: 1,
            consumer: 2,
            producer: 3,
            entries: vec![AckEntry { queue: 4, flags: ACK_FLAG_RESEND, epoch: 5, acked: 6, received: 7 }],
        };
        let bytes = ack.to_bytes().unwrap();
        assert_eq!(bytes.len(), ACK_FIXED_LENGTH + ACK_ENTRY_LENGTH);
        assert_eq!(Ack::parse(&bytes).unwrap(), ack);
        for length in 0..bytes.len() {
            assert!(Ack::parse(&bytes[..length]).is_err());
        }
    }

    #[test]
    fn data_round_trips_with_consecutive_sequences() {
        let mut bytes = Vec::new();
        let header = DataHeader {
            fingerprint: 1,
            producer: 2,
            queue: 3,
            record_count: 2,
            epoch: 4,
            acked_floor: 5,
            first_sequence: 6,
        };
        header.emit(&mut bytes);
        assert_eq!(bytes.len(), DATA_FIXED_LENGTH);
        emit_record(&mut bytes, 7, b"key", Some("hp/7/topic"), b"payload").unwrap();
        emit_record(&mut bytes, 8, b"", None, b"").unwrap();
        let message = DataMessage::parse(&bytes).unwrap();
        assert_eq!(message.header, header);
        let records: Vec<_> = message.records().collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].0, 6);
        assert_eq!(records[0].1.key, b"key");
        assert_eq!(records[0].1.subject, Some("hp/7/topic"));
        assert_eq!(records[1], (7, RecordView { bucket: 8, key: b"", subject: None, payload: b"" }));
        for length in DATA_FIXED_LENGTH..bytes.len() {
            assert!(DataMessage::parse(&bytes[..length]).is_err());
        }
    }

    #[test]
    fn data_with_a_wrong_record_count_is_rejected() {
        let mut bytes = Vec::new();
        let header = DataHeader {
            fingerprint: 1,
            producer: 2,
            queue: 3,
            record_count: 3,
            epoch: 4,
            acked_floor: 0,
            first_sequence: 1,
        };
        header.emit(&mut bytes);
        emit_record(&mut bytes, 0, b"a", None, b"b").unwrap();
        assert!(DataMessage::parse(&bytes).is_err());
    }
}
