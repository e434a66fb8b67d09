//! The subject message: one record of the subject protocol, several packed per transport
//! message. Untrusted bytes in, typed [`SubjectRecord`]s or a [`SubjectError`] out.
//!
//! Layout (little-endian), `docs/subjects.md`:
//!
//! ```text
//!  0 version u8 (1) | 1 kind u8 | 2 flags u16 | 4 subject_length u16 | 6 reserved u16 (0)
//!  8 payload_length u32 | 12 reserved u32 (0) | 16 sender u64 | 24 subject | payload
//! ```
//!
//! A transport message holds one or more records back to back; [`Records`] walks them and
//! stops at the first malformed one (the rest of that message is dropped, counted once).
//!
//! With a router secret, every transport message is sealed by the control plane's
//! [`StreamAuth`](crate::control::StreamAuth) (`docs/control-plane.md`): the first record's
//! version byte becomes [`AUTHENTICATED_VERSION`] and a trailer follows the last record. The
//! runtime verifies and strips the trailer before [`Records`] walks the message, so the walk
//! accepts that version on the first record only.

use std::fmt;
use std::net::SocketAddr;

use crate::control::auth::AUTHENTICATED_VERSION;
use crate::control::limits::{MAX_PAYLOAD_LENGTH, MAX_SUBJECT_LENGTH};

/// Version byte of every record.
pub const SUBJECT_VERSION: u8 = 1;
/// Bytes before the subject.
pub const RECORD_HEADER_LENGTH: usize = 24;

/// DATA flag: the payload is a full image (initial state) of the subject.
pub const FLAG_IMAGE: u16 = 0x0001;
/// DATA flag: the payload is an update.
pub const FLAG_UPDATE: u16 = 0x0002;
/// DATA flag: NODATA with the Unavailable flag.
pub const FLAG_NODATA_UNAVAILABLE: u16 = 0x0004;
/// DATA flag: NODATA with the NotFound flag.
pub const FLAG_NODATA_NOTFOUND: u16 = 0x0008;
/// DATA flag: a status message from the router (the payload is UTF-8 text), e.g. after a move.
pub const FLAG_STATUS: u16 = 0x0010;
/// DATA flag, with [`FLAG_STATUS`] (router only): the router refused the subscriber's
/// SUBSCRIBE to the subject (the payload says which bound); it holds no subscription for it.
pub const FLAG_REFUSED: u16 = 0x0020;
/// DATA flag (xmlBlaster's publish): a source publishes a subject whether or not it was
/// requested from it. A router relays it to the subject's subscribers, or, at a cluster node
/// that is a slave of the subject's domain, hands it to the node to forward to the master
/// (`docs/cluster.md`, "Publish at a slave"). Between a router and its cluster node the
/// payload starts with the origin source's id ([`ORIGIN_LENGTH`] bytes, little-endian).
/// With [`FLAG_STATUS`] (cluster node to router to origin): the state of the origin's
/// forwarded publishes, [`FORWARD_WARNING`] text (with [`FLAG_REFUSED`]: one publish refused).
pub const FLAG_PUBLISH: u16 = 0x0040;
/// DATA flag: the subject is erased (xmlBlaster's erase): subscribers are told, the router
/// forgets its image; the subscriptions stay. Published with [`FLAG_PUBLISH`] by a source.
pub const FLAG_ERASE: u16 = 0x0080;
/// Every DATA flag defined.
/// DATA flag, with [`FLAG_PUBLISH`]: the publish names its message domain explicitly
/// (xmlBlaster's `<key domain=...>`): the payload starts with the domain ([`with_domain`]).
/// Routers strip it when relaying to subscribers; a record without it reads as before.
pub const FLAG_DOMAIN: u16 = 0x0100;
/// Longest explicit domain name (a cluster domain name: 1 to this many of `[A-Za-z0-9_.-]`).
pub const MAX_DOMAIN_LENGTH: usize = 64;
/// Flags of a DATA record.
pub const DATA_FLAGS: u16 = FLAG_IMAGE
    | FLAG_UPDATE
    | FLAG_NODATA_UNAVAILABLE
    | FLAG_NODATA_NOTFOUND
    | FLAG_STATUS
    | FLAG_REFUSED
    | FLAG_PUBLISH
    | FLAG_ERASE
    | FLAG_DOMAIN;
/// Bytes of the origin source's id before the payload of a [`FLAG_PUBLISH`] record between a
/// router and its cluster node.
pub const ORIGIN_LENGTH: usize = 8;
/// The text a source's forward status starts with while its publishes are queued at a slave.
pub const FORWARD_WARNING: &str = "FORWARD_WARNING";
/// The text a source's forward status starts with when its queued publishes were flushed.
pub const FORWARD_CLEARED: &str = "FORWARD_CLEARED";
/// The text of a forward status (for one subject) asking the source for a fresh image: a
/// mirrored master that missed its publishes of the subject is reachable again.
pub const FORWARD_RESYNC: &str = "FORWARD_RESYNC";

/// `origin` (as [`ORIGIN_LENGTH`] bytes) then `payload`.
pub fn with_origin(origin: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ORIGIN_LENGTH + payload.len());
    out.extend_from_slice(&origin.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The origin and the rest of a payload [`with_origin`] made; `None` when it is too short.
pub fn split_origin(payload: &[u8]) -> Option<(u64, &[u8])> {
    let (origin, rest) = payload.split_at_checked(ORIGIN_LENGTH)?;
    Some((u64::from_le_bytes(origin.try_into().ok()?), rest))
}
/// Why a name is not a domain name ([`with_domain`]); `None` when it is one.
pub fn domain_error(domain: &str) -> Option<String> {
    if domain.is_empty() || domain.len() > MAX_DOMAIN_LENGTH {
        return Some(format!("domain {domain:?}: must be 1 to {MAX_DOMAIN_LENGTH} characters, not {}", domain.len()));
    }
    let bad = domain.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))?;
    Some(format!("domain {domain:?}: {bad:?} is not one of A-Z a-z 0-9 _ . -"))
}

/// The payload of a publish naming `domain` ([`FLAG_DOMAIN`]): its length (one byte), the
/// domain, then `payload`; an error saying why when `domain` is not a domain name.
pub fn with_domain(domain: &str, payload: &[u8]) -> Result<Vec<u8>, String> {
    if let Some(error) = domain_error(domain) {
        return Err(error);
    }
    let mut out = Vec::with_capacity(1 + domain.len() + payload.len());
    out.push(domain.len() as u8); // at most MAX_DOMAIN_LENGTH: fits
    out.extend_from_slice(domain.as_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// The domain and the rest of a payload [`with_domain`] made; `None` when it is not one.
pub fn split_domain(payload: &[u8]) -> Option<(&str, &[u8])> {
    let (&length, rest) = payload.split_first()?;
    let (domain, rest) = rest.split_at_checked(usize::from(length))?;
    let domain = std::str::from_utf8(domain).ok()?;
    domain_error(domain).is_none().then_some((domain, rest))
}

/// ENLIST flag: the payload is a coverage pattern (without it, the enlistment names none).
pub const FLAG_COVERAGE: u16 = 0x0001;
/// ALIVE flag: the router is stopping cleanly; the payload, if not empty, is the channel of the
/// router its peers should move to (the seed's "forward a client").
pub const FLAG_STOPPING: u16 = 0x0001;
/// The subject of every ALIVE record (a subject is never empty).
pub const ALIVE_SUBJECT: &str = "*";
/// Length of the payload of an ALIVE without [`FLAG_STOPPING`] ([`alive_payload`]).
pub const ALIVE_HELD_LENGTH: usize = 4;

/// The payload of an ALIVE without [`FLAG_STOPPING`]: how many subscriptions and faucet
/// enlistments the router holds for the peer it goes to (little-endian u32). A peer that sent
/// them again after a move reads it ([`alive_held`]) to tell whether they arrived: a restarted
/// router's receiver may set up the image of the peer's publication only after the first
/// records were sent, and those are lost.
pub fn alive_payload(held: u32) -> [u8; ALIVE_HELD_LENGTH] {
    held.to_le_bytes()
}

/// What an ALIVE says the router holds for this peer ([`alive_payload`]); `None` when it is
/// stopping, or comes from a router that does not say (an empty payload).
pub fn alive_held(flags: u16, payload: &[u8]) -> Option<u32> {
    if flags & FLAG_STOPPING != 0 {
        return None;
    }
    Some(u32::from_le_bytes(payload.try_into().ok()?))
}

/// The subject of an ENLIST or DELIST meaning "this router's faucet control topic, whatever its
/// name".
pub const ANY_CONTROL_TOPIC: &str = "*";

/// What a record asks or carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// Subscriber → router: subscribe to `subject`; payload `endpoint\nname` (the reply inbox).
    Subscribe = 1,
    /// Subscriber → router: drop one subscription to `subject`.
    Unsubscribe = 2,
    /// Router → source: serve `subject` (send an image, then updates).
    Request = 3,
    /// Router → source: stop serving `subject`.
    Discard = 4,
    /// Source → router → subscribers: data for `subject` (flags say which).
    Data = 5,
    /// Source → router: enlist as a faucet publisher on control topic `subject`.
    Enlist = 6,
    /// Source → router: leave the faucet control topic `subject`.
    Delist = 7,
    /// Router → subscriber or source: the router is alive (sent every heartbeat interval to
    /// every peer it hears; the sender is the router's id, new at each start; the payload what
    /// it holds for that peer, [`alive_payload`]). With [`FLAG_STOPPING`] the router is
    /// stopping, the payload an optional forward channel.
    /// Added after kinds 1..=7 in the same record version: a peer that predates it counts the
    /// message malformed, a router refuses it (counted `refused`).
    Alive = 8,
}

impl RecordKind {
    /// The kind with wire code `code`.
    pub fn from_code(code: u8) -> Option<RecordKind> {
        Some(match code {
            1 => RecordKind::Subscribe,
            2 => RecordKind::Unsubscribe,
            3 => RecordKind::Request,
            4 => RecordKind::Discard,
            5 => RecordKind::Data,
            6 => RecordKind::Enlist,
            7 => RecordKind::Delist,
            8 => RecordKind::Alive,
            _ => return None,
        })
    }

    /// Upper-case name, as in `docs/subjects.md`.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Subscribe => "SUBSCRIBE",
            RecordKind::Unsubscribe => "UNSUBSCRIBE",
            RecordKind::Request => "REQUEST",
            RecordKind::Discard => "DISCARD",
            RecordKind::Data => "DATA",
            RecordKind::Enlist => "ENLIST",
            RecordKind::Delist => "DELIST",
            RecordKind::Alive => "ALIVE",
        }
    }

    fn allowed_flags(self) -> u16 {
        match self {
            RecordKind::Data => DATA_FLAGS,
            RecordKind::Enlist => FLAG_COVERAGE,
            RecordKind::Alive => FLAG_STOPPING,
            _ => 0,
        }
    }
}

/// Why bytes are not a subject record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectError {
    /// Fewer bytes than the header or the declared lengths need.
    Truncated {
        /// Byte offset of the record in its message.
        offset: usize,
        /// Bytes needed from that offset.
        needed: usize,
        /// Bytes available from that offset.
        actual: usize,
    },
    /// The version byte is not [`SUBJECT_VERSION`].
    UnsupportedVersion(u8),
    /// The kind byte is unknown.
    UnknownKind(u8),
    /// Flags this kind does not define.
    UnknownFlags {
        /// The record's kind.
        kind: RecordKind,
        /// The flags that are not allowed.
        flags: u16,
    },
    /// A reserved field is not zero.
    Reserved {
        /// Byte offset of the field in the record.
        at: usize,
    },
    /// The subject is empty or longer than [`MAX_SUBJECT_LENGTH`].
    SubjectLength(usize),
    /// The payload is longer than [`MAX_PAYLOAD_LENGTH`].
    PayloadLength(u64),
    /// The subject is not UTF-8.
    SubjectNotUtf8,
    /// A SUBSCRIBE payload is not `endpoint\nname` in UTF-8.
    BadSubscribePayload,
    /// An inbox endpoint (a SUBSCRIBE's reply inbox, a heartbeat's) is not `ip:port`: it goes
    /// into a channel URI, so nothing else (URI parameters) is let through.
    BadEndpoint {
        /// Where it came from (`SUBSCRIBE record`, `heartbeat`).
        origin: &'static str,
        /// The endpoint as given (at most `MAX_ENDPOINT_LENGTH` bytes).
        endpoint: String,
    },
}

impl fmt::Display for SubjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubjectError::Truncated { offset, needed, actual } => {
                write!(f, "truncated subject record at byte {offset}: need {needed} bytes, got {actual}")
            }
            SubjectError::UnsupportedVersion(v) => write!(f, "unsupported subject record version {v}"),
            SubjectError::UnknownKind(k) => write!(f, "unknown subject record kind {k}"),
            SubjectError::UnknownFlags { kind, flags } => {
                write!(f, "{} record: undefined flags {flags:#06x}", kind.name())
            }
            SubjectError::Reserved { at } => write!(f, "subject record: reserved field at byte {at} is not zero"),
            SubjectError::SubjectLength(n) => {
                write!(f, "subject record: subject length {n} is not within 1..={MAX_SUBJECT_LENGTH}")
            }
            SubjectError::PayloadLength(n) => {
                write!(f, "subject record: payload length {n} exceeds the limit of {MAX_PAYLOAD_LENGTH}")
            }
            SubjectError::SubjectNotUtf8 => f.write_str("subject record: subject is not UTF-8"),
            SubjectError::BadSubscribePayload => {
                f.write_str("SUBSCRIBE record: payload is not `endpoint\\nname` in UTF-8")
            }
            SubjectError::BadEndpoint { origin, endpoint } => {
                write!(f, "{origin}: endpoint {endpoint:?} is not ip:port (an IPv4 or [IPv6] address and a port)")
            }
        }
    }
}

impl std::error::Error for SubjectError {}

/// One decoded record, borrowing the message bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubjectRecord<'a> {
    /// What it is.
    pub kind: RecordKind,
    /// Kind-specific flags (checked against the kind).
    pub flags: u16,
    /// The sender's member id.
    pub sender: u64,
    /// The subject (1..=[`MAX_SUBJECT_LENGTH`] bytes of UTF-8).
    pub subject: &'a str,
    /// The payload (≤ [`MAX_PAYLOAD_LENGTH`] bytes).
    pub payload: &'a [u8],
}

impl<'a> SubjectRecord<'a> {
    /// The encoded length of this record.
    pub fn encoded_length(&self) -> usize {
        RECORD_HEADER_LENGTH + self.subject.len() + self.payload.len()
    }

    /// Appends the record to `out`; refuses a subject, payload or flags the decoder would refuse.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), SubjectError> {
        check_subject_length(self.subject.len())?;
        if self.payload.len() > MAX_PAYLOAD_LENGTH {
            return Err(SubjectError::PayloadLength(self.payload.len() as u64));
        }
        let undefined = self.flags & !self.kind.allowed_flags();
        if undefined != 0 {
            return Err(SubjectError::UnknownFlags { kind: self.kind, flags: undefined });
        }
        emit_unchecked(out, self.kind, self.flags, self.sender, self.subject, self.payload);
        Ok(())
    }

    /// Decodes the record at the start of `bytes`; returns it and its encoded length.
    pub fn parse(bytes: &'a [u8]) -> Result<(SubjectRecord<'a>, usize), SubjectError> {
        parse_at(bytes, 0, false)
    }

    /// The `(endpoint, name)` of a SUBSCRIBE payload; the endpoint is `ip:port`
    /// ([`check_endpoint`]).
    pub fn subscribe_reply(&self) -> Result<(&'a str, &'a str), SubjectError> {
        let text = std::str::from_utf8(self.payload).map_err(|_| SubjectError::BadSubscribePayload)?;
        let (endpoint, name) = text.split_once('\n').ok_or(SubjectError::BadSubscribePayload)?;
        if endpoint.is_empty() || endpoint.len() > crate::control::limits::MAX_ENDPOINT_LENGTH {
            return Err(SubjectError::BadSubscribePayload);
        }
        if name.len() > crate::control::limits::MAX_NAME_LENGTH {
            return Err(SubjectError::BadSubscribePayload);
        }
        check_endpoint(endpoint, "SUBSCRIBE record")?;
        Ok((endpoint, name))
    }
}

/// Checks that an inbox `endpoint` heard from `origin` (`SUBSCRIBE record`, `heartbeat`) is
/// `ip:port`, as members advertise it: the router puts it into a channel URI
/// (`aeron:udp?endpoint=...`), where anything else could add channel parameters.
pub fn check_endpoint(endpoint: &str, origin: &'static str) -> Result<SocketAddr, SubjectError> {
    endpoint.parse().map_err(|_| SubjectError::BadEndpoint { origin, endpoint: endpoint.to_owned() })
}

fn check_subject_length(length: usize) -> Result<(), SubjectError> {
    if length == 0 || length > MAX_SUBJECT_LENGTH {
        return Err(SubjectError::SubjectLength(length));
    }
    Ok(())
}

/// Appends a record whose subject and payload lengths the caller already checked (the relay's
/// hot path: it re-emits records it decoded, which are within the limits by construction).
pub(crate) fn emit_unchecked(
    out: &mut Vec<u8>,
    kind: RecordKind,
    flags: u16,
    sender: u64,
    subject: &str,
    payload: &[u8],
) {
    out.reserve(RECORD_HEADER_LENGTH + subject.len() + payload.len());
    out.push(SUBJECT_VERSION);
    out.push(kind as u8);
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&(subject.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&sender.to_le_bytes());
    out.extend_from_slice(subject.as_bytes());
    out.extend_from_slice(payload);
}

/// The length of the record starting at `offset` of bytes this process encoded, read from its
/// header; `None` if the header is not there.
pub fn record_length_at(bytes: &[u8], offset: usize) -> Option<usize> {
    let header = bytes.get(offset..offset.checked_add(RECORD_HEADER_LENGTH)?)?;
    let subject = usize::from(u16::from_le_bytes(le(header, 4)));
    let payload = u32::from_le_bytes(le(header, 8)) as usize;
    Some(RECORD_HEADER_LENGTH + subject + payload)
}

fn le<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(source) = bytes.get(at..at.saturating_add(N)) {
        out.copy_from_slice(source);
    }
    out
}

/// Decodes the record at `offset` of `message`; `opened`: the message was verified and its
/// trailer stripped, so its first record may carry [`AUTHENTICATED_VERSION`].
fn parse_at(message: &[u8], offset: usize, opened: bool) -> Result<(SubjectRecord<'_>, usize), SubjectError> {
    let bytes = message.get(offset..).unwrap_or(&[]);
    if bytes.len() < RECORD_HEADER_LENGTH {
        return Err(SubjectError::Truncated { offset, needed: RECORD_HEADER_LENGTH, actual: bytes.len() });
    }
    let version = bytes.first().copied().unwrap_or(0);
    let sealed_first = opened && offset == 0 && version == AUTHENTICATED_VERSION;
    if version != SUBJECT_VERSION && !sealed_first {
        return Err(SubjectError::UnsupportedVersion(version));
    }
    let code = bytes.get(1).copied().unwrap_or(0);
    let kind = RecordKind::from_code(code).ok_or(SubjectError::UnknownKind(code))?;
    let flags = u16::from_le_bytes(le(bytes, 2));
    let undefined = flags & !kind.allowed_flags();
    if undefined != 0 {
        return Err(SubjectError::UnknownFlags { kind, flags: undefined });
    }
    let subject_length = usize::from(u16::from_le_bytes(le(bytes, 4)));
    if u16::from_le_bytes(le(bytes, 6)) != 0 {
        return Err(SubjectError::Reserved { at: 6 });
    }
    let payload_length = u32::from_le_bytes(le(bytes, 8));
    if u32::from_le_bytes(le(bytes, 12)) != 0 {
        return Err(SubjectError::Reserved { at: 12 });
    }
    let sender = u64::from_le_bytes(le(bytes, 16));
    check_subject_length(subject_length)?;
    if payload_length as usize > MAX_PAYLOAD_LENGTH {
        return Err(SubjectError::PayloadLength(u64::from(payload_length)));
    }
    let subject_end = RECORD_HEADER_LENGTH + subject_length;
    let end = subject_end + payload_length as usize;
    let (Some(subject), Some(payload)) = (bytes.get(RECORD_HEADER_LENGTH..subject_end), bytes.get(subject_end..end))
    else {
        return Err(SubjectError::Truncated { offset, needed: end, actual: bytes.len() });
    };
    let subject = std::str::from_utf8(subject).map_err(|_| SubjectError::SubjectNotUtf8)?;
    Ok((SubjectRecord { kind, flags, sender, subject, payload }, end))
}

/// The records of one transport message, in order; yields one error and stops at the first
/// malformed record.
pub struct Records<'a> {
    message: &'a [u8],
    offset: usize,
    failed: bool,
    opened: bool,
}

impl<'a> Records<'a> {
    /// Walks `message` (every record version 1).
    pub fn new(message: &'a [u8]) -> Self {
        Records { message, offset: 0, failed: false, opened: false }
    }

    /// Walks a message [`StreamAuth::open`](crate::control::StreamAuth::open) returned: its
    /// first record may carry [`AUTHENTICATED_VERSION`] (sealed), the others version 1.
    pub fn opened(message: &'a [u8]) -> Self {
        Records { message, offset: 0, failed: false, opened: true }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<SubjectRecord<'a>, SubjectError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.message.len() {
            return None;
        }
        match parse_at(self.message, self.offset, self.opened) {
            Ok((record, length)) => {
                self.offset += length;
                Some(Ok(record))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_explicit_domain_goes_before_the_payload_and_only_a_domain_name_is_taken() {
        let payload = with_domain("PINNED", b"body").unwrap();
        assert_eq!(payload, b"\x06PINNEDbody");
        assert_eq!(split_domain(&payload), Some(("PINNED", &b"body"[..])));
        assert_eq!(split_domain(b"\x06PINNE"), None, "truncated");
        assert_eq!(split_domain(b""), None);
        assert_eq!(split_domain(b"\x02a/rest"), None, "'/' is no domain character");
        assert_eq!(split_domain(b"\x00rest"), None, "empty");
        assert!(with_domain("", b"").unwrap_err().contains("1 to 64 characters, not 0"));
        assert!(with_domain(&"D".repeat(65), b"").unwrap_err().contains("not 65"));
        assert!(with_domain("RUGBY NEWS", b"").unwrap_err().contains("' ' is not one of A-Z a-z 0-9 _ . -"));
    }

    use super::*;
    use proptest::prelude::*;

    fn data<'a>(subject: &'a str, payload: &'a [u8]) -> SubjectRecord<'a> {
        SubjectRecord { kind: RecordKind::Data, flags: FLAG_IMAGE, sender: 7, subject, payload }
    }

    #[test]
    fn a_record_round_trips_with_its_documented_layout() {
        let record = data("/PRIVATE/alice-0/FXTRADE", b"price=1");
        let mut out = Vec::new();
        record.emit(&mut out).unwrap();
        assert_eq!(out.len(), 24 + 24 + 7);
        assert_eq!(out.len(), record.encoded_length());
        assert_eq!(&out[..2], &[1, 5]);
        assert_eq!(u16::from_le_bytes([out[4], out[5]]), 24);
        assert_eq!(u64::from_le_bytes(out[16..24].try_into().unwrap()), 7);
        assert_eq!(SubjectRecord::parse(&out).unwrap(), (record, out.len()));
    }

    #[test]
    fn several_records_pack_into_one_message_and_walk_in_order() {
        let mut out = Vec::new();
        data("/a", b"1").emit(&mut out).unwrap();
        data("/b", b"22").emit(&mut out).unwrap();
        let subjects: Vec<_> = Records::new(&out).map(|r| r.unwrap().subject).collect();
        assert_eq!(subjects, ["/a", "/b"]);
    }

    #[test]
    fn a_malformed_record_stops_the_walk_with_one_error() {
        let mut out = Vec::new();
        data("/a", b"1").emit(&mut out).unwrap();
        out.extend_from_slice(&[9; 30]);
        let results: Vec<_> = Records::new(&out).collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1], Err(SubjectError::UnsupportedVersion(9)));
    }

    #[test]
    fn each_defect_has_its_own_error() {
        let mut good = Vec::new();
        data("/a", b"xy").emit(&mut good).unwrap();
        let mutate = |at: usize, value: u8| {
            let mut bytes = good.clone();
            bytes[at] = value;
            SubjectRecord::parse(&bytes).map(|_| ()).unwrap_err()
        };
        assert_eq!(mutate(0, 2), SubjectError::UnsupportedVersion(2));
        assert_eq!(mutate(1, 99), SubjectError::UnknownKind(99));
        assert_eq!(mutate(3, 0x80), SubjectError::UnknownFlags { kind: RecordKind::Data, flags: 0x8001 & !DATA_FLAGS });
        assert_eq!(mutate(6, 1), SubjectError::Reserved { at: 6 });
        assert_eq!(mutate(12, 1), SubjectError::Reserved { at: 12 });
        assert_eq!(mutate(4, 0), SubjectError::SubjectLength(0));
        assert!(matches!(mutate(8, 200), SubjectError::Truncated { offset: 0, .. }));
        assert_eq!(mutate(24, 0xFF), SubjectError::SubjectNotUtf8);
        let mut huge = good.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(SubjectRecord::parse(&huge).unwrap_err(), SubjectError::PayloadLength(u64::from(u32::MAX)));
        assert!(matches!(SubjectRecord::parse(&good[..10]), Err(SubjectError::Truncated { needed: 24, .. })));
    }

    #[test]
    fn an_opened_message_may_carry_the_sealed_version_on_its_first_record_only() {
        let mut out = Vec::new();
        data("/a", b"1").emit(&mut out).unwrap();
        let second = out.len();
        data("/b", b"22").emit(&mut out).unwrap();
        out[0] = AUTHENTICATED_VERSION;
        let subjects: Vec<_> = Records::opened(&out).map(|r| r.unwrap().subject).collect();
        assert_eq!(subjects, ["/a", "/b"]);
        // Not opened (never verified): version 2 is refused as before.
        assert_eq!(Records::new(&out).next(), Some(Err(SubjectError::UnsupportedVersion(AUTHENTICATED_VERSION))));
        // Version 2 on any other record is refused even in an opened message.
        out[0] = SUBJECT_VERSION;
        out[second] = AUTHENTICATED_VERSION;
        let results: Vec<_> = Records::opened(&out).collect();
        assert_eq!(results[1], Err(SubjectError::UnsupportedVersion(AUTHENTICATED_VERSION)));
    }

    #[test]
    fn the_encoder_refuses_what_the_decoder_would_refuse() {
        let long = "x".repeat(MAX_SUBJECT_LENGTH + 1);
        assert_eq!(data(&long, b"").emit(&mut Vec::new()), Err(SubjectError::SubjectLength(long.len())));
        assert_eq!(data("", b"").emit(&mut Vec::new()), Err(SubjectError::SubjectLength(0)));
        let flags =
            SubjectRecord { kind: RecordKind::Request, flags: FLAG_IMAGE, sender: 1, subject: "/a", payload: b"" };
        assert!(matches!(flags.emit(&mut Vec::new()), Err(SubjectError::UnknownFlags { .. })));
    }

    #[test]
    fn a_subscribe_payload_names_the_reply_inbox_and_the_client() {
        let record = SubjectRecord {
            kind: RecordKind::Subscribe,
            flags: 0,
            sender: 1,
            subject: "/a",
            payload: b"127.0.0.1:4000\nalice",
        };
        assert_eq!(record.subscribe_reply(), Ok(("127.0.0.1:4000", "alice")));
        let bad = SubjectRecord { payload: b"no-newline", ..record };
        assert_eq!(bad.subscribe_reply(), Err(SubjectError::BadSubscribePayload));
        let empty = SubjectRecord { payload: b"\nname", ..record };
        assert_eq!(empty.subscribe_reply(), Err(SubjectError::BadSubscribePayload));
        let ipv6 = SubjectRecord { payload: b"[::1]:4000\nalice", ..record };
        assert_eq!(ipv6.subscribe_reply(), Ok(("[::1]:4000", "alice")));
    }

    #[test]
    fn a_subscribe_reply_endpoint_with_channel_parameters_is_refused_naming_it() {
        let forged = b"127.0.0.1:9|interface=203.0.113.5|mtu=1408\nbob";
        let record = SubjectRecord { kind: RecordKind::Subscribe, flags: 0, sender: 1, subject: "/a", payload: forged };
        let error = record.subscribe_reply().unwrap_err();
        let endpoint = "127.0.0.1:9|interface=203.0.113.5|mtu=1408".to_owned();
        assert_eq!(error, SubjectError::BadEndpoint { origin: "SUBSCRIBE record", endpoint });
        assert_eq!(
            error.to_string(),
            "SUBSCRIBE record: endpoint \"127.0.0.1:9|interface=203.0.113.5|mtu=1408\" is not ip:port \
             (an IPv4 or [IPv6] address and a port)"
        );
        let host = SubjectRecord { payload: b"localhost:9\nbob", ..record };
        assert!(matches!(host.subscribe_reply(), Err(SubjectError::BadEndpoint { .. })));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            for record in Records::new(&bytes) {
                let _ = record.map(|r| r.subscribe_reply());
            }
        }

        #[test]
        fn mutated_records_never_panic_and_valid_ones_round_trip(
            subject in "/[a-zA-Z0-9/é]{1,40}",
            payload in proptest::collection::vec(any::<u8>(), 0..64),
            flips in proptest::collection::vec((0usize..128, any::<u8>()), 0..4),
        ) {
            let record = data(&subject, &payload);
            let mut bytes = Vec::new();
            record.emit(&mut bytes).unwrap();
            prop_assert_eq!(SubjectRecord::parse(&bytes).unwrap(), (record, bytes.len()));
            for (at, value) in flips {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            for record in Records::new(&bytes) {
                let _ = record;
            }
        }
    }
}
