//! Message authentication for the control plane: one mechanism for every stream of every
//! member (consumer groups today; the subject router's members and cluster nodes can use the
//! same [`StreamAuth`] on their own streams).
//!
//! A member holding a shared secret seals every message it sends: the version byte becomes
//! [`AUTHENTICATED_VERSION`] and a trailer is appended (`docs/control-plane.md`):
//!
//! ```text
//! message (version 2, otherwise the version-1 layout) | sequence u64 | tag [32]
//! ```
//!
//! `tag` is BLAKE3 in keyed mode (the `blake3` crate) over every byte before it, under a key
//! derived from the secret, the namespace (a group's fingerprint) and the stream id, so a
//! message cannot be moved to another group or stream. `sequence` counts from 1 per sender
//! and stream; a receiver accepts each (sender, sequence) once, within a sliding window of
//! [`REPLAY_WINDOW`] (out-of-order delivery across two channels stays accepted). The sender id
//! is the header's (bytes 16..24), covered by the tag. Receivers verify before decoding.
//!
//! Sans-IO: no clock, no socket.

use std::collections::HashMap;
use std::fmt;

use super::codec::HEADER_LENGTH;
use super::error::ControlError;
use super::limits::MAX_MEMBERS;

/// The version byte of an authenticated message (the version-1 layout plus the trailer).
pub const AUTHENTICATED_VERSION: u8 = 2;
/// Length of the MAC tag (a full BLAKE3 output).
pub const TAG_LENGTH: usize = 32;
/// Length of the trailer: sequence (8) and tag.
pub const TRAILER_LENGTH: usize = 8 + TAG_LENGTH;
/// Shortest secret accepted, in bytes (128 bits).
pub const MIN_SECRET_LENGTH: usize = 16;
/// Longest secret accepted, in bytes.
pub const MAX_SECRET_LENGTH: usize = 1024;
/// Length of the secrets `affinity group create` generates, in bytes.
pub const GENERATED_SECRET_LENGTH: usize = 32;
/// Sequences this far below the highest accepted one (per sender and stream) are still
/// accepted once (reordering across channels); older ones are replays.
pub const REPLAY_WINDOW: u64 = 64;
/// Most senders whose replay window a receiver remembers; the least recently heard is
/// forgotten beyond it. Only authenticated senders (members holding the secret) create
/// entries, so a forger cannot flush them.
pub const MAX_REPLAY_SENDERS: usize = 4 * MAX_MEMBERS;
/// BLAKE3 key-derivation context (fixed: changing it changes every key).
const KEY_CONTEXT: &str = "affinity control-plane 2026-11 message MAC key v2";

/// A group's shared secret (never printed).
#[derive(Clone, PartialEq, Eq)]
pub struct GroupSecret(Vec<u8>);

impl GroupSecret {
    /// A secret of [`MIN_SECRET_LENGTH`]..=[`MAX_SECRET_LENGTH`] bytes.
    pub fn new(bytes: &[u8]) -> Result<GroupSecret, ControlError> {
        if bytes.len() > MAX_SECRET_LENGTH {
            return Err(ControlError::TooLong {
                what: "group secret",
                field: "length",
                value: bytes.len() as u64,
                max: MAX_SECRET_LENGTH as u64,
            });
        }
        if bytes.len() < MIN_SECRET_LENGTH {
            return Err(ControlError::Truncated {
                what: "group secret",
                needed: MIN_SECRET_LENGTH,
                actual: bytes.len(),
            });
        }
        Ok(GroupSecret(bytes.to_vec()))
    }
}

impl fmt::Debug for GroupSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GroupSecret({} bytes)", self.0.len())
    }
}

/// Why a received message was refused before decoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthError {
    /// A version-1 (unauthenticated) message at a member that holds a secret.
    Unauthenticated,
    /// An authenticated message at a member without a secret (it cannot verify it).
    Unverifiable,
    /// Too short for a header and a trailer.
    Truncated,
    /// The tag does not match (forged, corrupted, or another secret).
    BadTag,
    /// The (sender, sequence) was accepted before, or is older than the replay window.
    Replayed,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthError::Unauthenticated => "unauthenticated message (version 1) in a group with a secret",
            AuthError::Unverifiable => "authenticated message (version 2) at a member without the group secret",
            AuthError::Truncated => "authenticated message shorter than its header and trailer",
            AuthError::BadTag => "message authentication tag does not match",
            AuthError::Replayed => "message sequence already accepted or older than the replay window",
        })
    }
}

impl std::error::Error for AuthError {}

/// Messages a receiver refused, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthCounters {
    /// Version-1 messages while a secret is configured.
    pub unauthenticated: u64,
    /// Version-2 messages while no secret is configured.
    pub unverifiable: u64,
    /// Bad tags and truncated trailers.
    pub bad_tag: u64,
    /// Replays.
    pub replayed: u64,
}

impl AuthCounters {
    /// Every refused message.
    pub fn total(&self) -> u64 {
        self.unauthenticated + self.unverifiable + self.bad_tag + self.replayed
    }

    /// Adds `other`.
    pub fn add(&mut self, other: &AuthCounters) {
        self.unauthenticated += other.unauthenticated;
        self.unverifiable += other.unverifiable;
        self.bad_tag += other.bad_tag;
        self.replayed += other.replayed;
    }
}

/// RFC 4303-style anti-replay window: the highest sequence and a bitmap of the 64 below it.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    highest: u64,
    seen: u64,
    last_used: u64,
}

impl Window {
    fn check(&self, sequence: u64) -> bool {
        if sequence == 0 {
            return false;
        }
        if sequence > self.highest {
            return true;
        }
        let behind = self.highest - sequence;
        behind < REPLAY_WINDOW && self.seen & (1u64 << behind) == 0
    }

    fn accept(&mut self, sequence: u64) {
        if sequence > self.highest {
            let shift = sequence - self.highest;
            self.seen = if shift >= REPLAY_WINDOW { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.highest = sequence;
        } else {
            self.seen |= 1u64 << (self.highest - sequence);
        }
    }
}

/// Authentication of one stream of one member: seals what it sends, verifies what it
/// receives. Without a secret it seals nothing and passes version-1 messages through.
pub struct StreamAuth {
    key: Option<[u8; 32]>,
    next_sequence: u64,
    windows: HashMap<u64, Window>,
    max_senders: usize,
    uses: u64,
    counters: AuthCounters,
}

impl fmt::Debug for StreamAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamAuth")
            .field("authenticated", &self.key.is_some())
            .field("senders", &self.windows.len())
            .field("counters", &self.counters)
            .finish()
    }
}

impl StreamAuth {
    /// Authentication of `stream` in `namespace` (a group's fingerprint) with `secret`, or
    /// none.
    pub fn new(secret: Option<&GroupSecret>, namespace: u64, stream: i32) -> StreamAuth {
        let key = secret.map(|secret| {
            let mut material = Vec::with_capacity(secret.0.len() + 12);
            material.extend_from_slice(&secret.0);
            material.extend_from_slice(&namespace.to_le_bytes());
            material.extend_from_slice(&stream.to_le_bytes());
            blake3::derive_key(KEY_CONTEXT, &material)
        });
        StreamAuth {
            key,
            next_sequence: 1,
            windows: HashMap::new(),
            max_senders: MAX_REPLAY_SENDERS,
            uses: 0,
            counters: AuthCounters::default(),
        }
    }

    /// Remembers the replay windows of up to `max_senders` senders (default
    /// [`MAX_REPLAY_SENDERS`]): a receiver with more live senders than that (a subject
    /// router's subscribers) would otherwise forget live senders, whose old messages could
    /// then be replayed.
    pub fn with_max_senders(mut self, max_senders: usize) -> StreamAuth {
        self.max_senders = max_senders.max(1);
        self
    }

    /// Whether a secret is configured.
    pub fn is_authenticated(&self) -> bool {
        self.key.is_some()
    }

    /// Refusals so far.
    pub fn counters(&self) -> AuthCounters {
        self.counters
    }

    /// Seals the encoded message in `message` (version byte to 2, trailer appended). A no-op
    /// without a secret, or for a message shorter than a header.
    pub fn seal(&mut self, message: &mut Vec<u8>) {
        let Some(key) = &self.key else { return };
        if message.len() < HEADER_LENGTH {
            return;
        }
        message[0] = AUTHENTICATED_VERSION;
        message.extend_from_slice(&self.next_sequence.to_le_bytes());
        self.next_sequence += 1;
        let tag = blake3::keyed_hash(key, message);
        message.extend_from_slice(tag.as_bytes());
    }

    /// Verifies `message` and returns it without its trailer (ready for the codec), or why it
    /// was refused (counted). Without a secret, version-1 messages pass unchanged.
    pub fn open<'a>(&mut self, message: &'a [u8]) -> Result<&'a [u8], AuthError> {
        let result = self.verify(message);
        if let Err(error) = result {
            let counter = match error {
                AuthError::Unauthenticated => &mut self.counters.unauthenticated,
                AuthError::Unverifiable => &mut self.counters.unverifiable,
                AuthError::Truncated | AuthError::BadTag => &mut self.counters.bad_tag,
                AuthError::Replayed => &mut self.counters.replayed,
            };
            *counter += 1;
        }
        result
    }

    fn verify<'a>(&mut self, message: &'a [u8]) -> Result<&'a [u8], AuthError> {
        let authenticated = message.first() == Some(&AUTHENTICATED_VERSION);
        let Some(key) = &self.key else {
            return if authenticated { Err(AuthError::Unverifiable) } else { Ok(message) };
        };
        if !authenticated {
            return Err(AuthError::Unauthenticated);
        }
        if message.len() < HEADER_LENGTH + TRAILER_LENGTH {
            return Err(AuthError::Truncated);
        }
        let (signed, tag) = message.split_at(message.len() - TAG_LENGTH);
        let tag: [u8; TAG_LENGTH] = tag.try_into().map_err(|_| AuthError::Truncated)?;
        // blake3::Hash compares in constant time.
        if blake3::keyed_hash(key, signed) != blake3::Hash::from_bytes(tag) {
            return Err(AuthError::BadTag);
        }
        let body_length = signed.len() - 8;
        let sequence = u64::from_le_bytes(signed[body_length..].try_into().map_err(|_| AuthError::Truncated)?);
        let sender = u64::from_le_bytes(message[16..24].try_into().map_err(|_| AuthError::Truncated)?);
        self.uses += 1;
        let uses = self.uses;
        if !self.windows.contains_key(&sender) && self.windows.len() >= self.max_senders {
            if let Some(oldest) = self.windows.iter().min_by_key(|(_, w)| w.last_used).map(|(id, _)| *id) {
                self.windows.remove(&oldest);
            }
        }
        let window = self.windows.entry(sender).or_default();
        if !window.check(sequence) {
            return Err(AuthError::Replayed);
        }
        window.accept(sequence);
        window.last_used = uses;
        Ok(&message[..body_length])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::codec::VERSION;

    fn message(sender: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 40];
        bytes[0] = VERSION;
        bytes[1] = 2;
        bytes[16..24].copy_from_slice(&sender.to_le_bytes());
        bytes
    }

    fn secret(byte: u8) -> GroupSecret {
        GroupSecret::new(&[byte; 32]).unwrap()
    }

    #[test]
    fn sealed_messages_open_once_and_forgeries_are_refused() {
        let mut alice = StreamAuth::new(Some(&secret(1)), 7, 1);
        let mut bob = StreamAuth::new(Some(&secret(1)), 7, 1);
        let mut sealed = message(5);
        alice.seal(&mut sealed);
        assert_eq!(sealed.len(), 40 + TRAILER_LENGTH);
        assert_eq!(sealed[0], AUTHENTICATED_VERSION);
        assert_eq!(bob.open(&sealed).map(<[u8]>::len), Ok(40));
        assert_eq!(bob.open(&sealed), Err(AuthError::Replayed), "a replay is refused");
        let mut tampered = sealed.clone();
        tampered[30] ^= 1;
        assert_eq!(bob.open(&tampered), Err(AuthError::BadTag));
        assert_eq!(bob.open(&message(5)), Err(AuthError::Unauthenticated));
        assert_eq!(bob.open(&sealed[..30]), Err(AuthError::Truncated));
        // Another secret, another group or another stream: the tag does not verify.
        for mut other in [
            StreamAuth::new(Some(&secret(2)), 7, 1),
            StreamAuth::new(Some(&secret(1)), 8, 1),
            StreamAuth::new(Some(&secret(1)), 7, 2),
        ] {
            let mut forged = message(5);
            other.seal(&mut forged);
            assert_eq!(bob.open(&forged), Err(AuthError::BadTag));
        }
        let counters = bob.counters();
        assert_eq!((counters.replayed, counters.bad_tag, counters.unauthenticated), (1, 5, 1));
        // Without a secret: version 1 passes, version 2 cannot be verified.
        let mut open = StreamAuth::new(None, 7, 1);
        assert_eq!(open.open(&message(5)).map(<[u8]>::len), Ok(40));
        assert_eq!(open.open(&sealed), Err(AuthError::Unverifiable));
    }

    #[test]
    fn the_replay_window_accepts_reordering_once_and_refuses_what_is_older() {
        let mut alice = StreamAuth::new(Some(&secret(1)), 7, 1);
        let mut bob = StreamAuth::new(Some(&secret(1)), 7, 1);
        let sealed: Vec<Vec<u8>> = (0..100)
            .map(|_| {
                let mut bytes = message(5);
                alice.seal(&mut bytes);
                bytes
            })
            .collect();
        assert!(bob.open(&sealed[99]).is_ok());
        assert!(bob.open(&sealed[50]).is_ok(), "49 behind: inside the window");
        assert_eq!(bob.open(&sealed[50]), Err(AuthError::Replayed));
        assert_eq!(bob.open(&sealed[10]), Err(AuthError::Replayed), "89 behind: outside the window");
    }

    #[test]
    fn secrets_are_bounded_and_never_printed() {
        assert!(GroupSecret::new(&[0; MIN_SECRET_LENGTH - 1]).is_err());
        assert!(GroupSecret::new(&[0; MAX_SECRET_LENGTH + 1]).is_err());
        assert_eq!(format!("{:?}", secret(0x41)), "GroupSecret(32 bytes)");
    }
}
