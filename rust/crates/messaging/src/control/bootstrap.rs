//! BOOTSTRAP and BOOTSTRAP_REPLY: how a member that has no registry entry for its group learns
//! the group's definition and its current members from any live member (`docs/control-plane.md`,
//! "Bootstrap").
//!
//! Both travel on the CONTROL stream after the common header (`codec`). The header's
//! fingerprint field holds the group's [`bootstrap_namespace`] (derived from its name: the
//! asker does not know the definition yet), and both are sealed under that namespace on
//! [`BOOTSTRAP_AUTH_STREAM`] when the group has a secret.
//!
//! BOOTSTRAP (kind 4), asker → any member:
//!
//! ```text
//! +---------------+---------------+-------------------------------+
//! |  name_length  | endpoint_len  |          reserved (0)         | 24
//! +---------------+---------------+-------------------------------+
//! |                        reserved (0)                           | 28
//! |                  held fingerprint (u64, 0: none)              | 32
//! |                        nonce (u64)                            | 40
//! +---------------------------------------------------------------+
//! |  group name (UTF-8) | reply endpoint (UTF-8, ip:port)          48
//! +---------------------------------------------------------------+
//! ```
//!
//! BOOTSTRAP_REPLY (kind 5), member → the asker's reply endpoint:
//!
//! ```text
//! +-------------------------------+---------------+---------------+
//! |  definition version (u16)     |  name_length  | prefix_length | 24
//! +-------------------------------+---------------+---------------+
//! |                       hash count HC (u32)                     | 28
//! |                       queue count QC (u32)                    | 32
//! |                       member_count (u32)                      | 36
//! |                        reserved (0)                           | 40
//! |                      queue size QS (u64)                      | 44
//! |                 definition fingerprint (u64)                  | 52
//! |                   nonce (u64, the request's)                  | 60
//! +---------------------------------------------------------------+
//! |  group name | hash prefix | members...                           68
//! +---------------------------------------------------------------+
//! member (12 bytes + endpoint): member_id u64 | role u8 | endpoint_len u8 | reserved u16 | endpoint
//! ```

use super::codec::{check_length, limit, Header, Kind, Reader, Role, HEADER_LENGTH};
use super::error::ControlError;
use super::limits::{MAX_BOOTSTRAP_MEMBERS, MAX_ENDPOINT_LENGTH, MAX_NAME_LENGTH};
use crate::routing::hash::{fmix64, fnv1a64};

/// Version of the definition a BOOTSTRAP_REPLY carries (name, HP, HC, QC, QS and its
/// fingerprint); a reply of another version is refused, naming both.
pub const DEFINITION_VERSION: u16 = 1;
/// Stream id of the key that seals BOOTSTRAP and BOOTSTRAP_REPLY (they travel on the CONTROL
/// stream, but under the name's namespace, not the definition's).
pub const BOOTSTRAP_AUTH_STREAM: i32 = 0x4146_4203;
/// Length of the BOOTSTRAP fixed part (header included).
pub const BOOTSTRAP_FIXED_LENGTH: usize = 48;
/// Length of the BOOTSTRAP_REPLY fixed part (header included).
pub const BOOTSTRAP_REPLY_FIXED_LENGTH: usize = 68;
/// Length of one member of a BOOTSTRAP_REPLY without its endpoint.
pub const BOOTSTRAP_MEMBER_FIXED_LENGTH: usize = 12;

/// The namespace of group `name`'s bootstrap messages (the header's fingerprint field and the
/// authentication namespace): the asker knows the name only.
pub fn bootstrap_namespace(name: &str) -> u64 {
    let mut bytes = b"affinity-bootstrap\xff".to_vec();
    bytes.extend_from_slice(name.as_bytes());
    fmix64(fnv1a64(&bytes))
}

/// A joining member's question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapRequest {
    /// The asker's id (any random id; the header's sender).
    pub sender: u64,
    /// The group asked about.
    pub group: String,
    /// Where the reply goes (`ip:port`, the asker's CONTROL stream).
    pub reply_to: String,
    /// The fingerprint of the definition the asker holds (0: none).
    pub held_fingerprint: u64,
    /// Echoed in the reply.
    pub nonce: u64,
}

impl BootstrapRequest {
    /// Appends the encoded request to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), ControlError> {
        const WHAT: &str = "BOOTSTRAP";
        limit(WHAT, "name_length", self.group.len(), MAX_NAME_LENGTH)?;
        limit(WHAT, "endpoint_length", self.reply_to.len(), MAX_ENDPOINT_LENGTH)?;
        let fingerprint = bootstrap_namespace(&self.group);
        Header { kind: Kind::Bootstrap, flags: 0, fingerprint, sender: self.sender }.emit(out);
        out.extend_from_slice(&[self.group.len() as u8, self.reply_to.len() as u8, 0, 0]);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.held_fingerprint.to_le_bytes());
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out.extend_from_slice(self.group.as_bytes());
        out.extend_from_slice(self.reply_to.as_bytes());
        Ok(())
    }

    /// Decodes a request from untrusted bytes (the namespace must be the group name's).
    pub fn parse(bytes: &[u8]) -> Result<BootstrapRequest, ControlError> {
        const WHAT: &str = "BOOTSTRAP";
        let header = Header::parse_kind(bytes, Kind::Bootstrap)?;
        check_length(WHAT, bytes, BOOTSTRAP_FIXED_LENGTH)?;
        let mut reader = Reader { bytes, at: HEADER_LENGTH, what: WHAT };
        let name_length = usize::from(reader.u8()?);
        let endpoint_length = usize::from(reader.u8()?);
        reader.take(6)?;
        let held_fingerprint = reader.u64()?;
        let nonce = reader.u64()?;
        let group = reader.text(name_length, "group name")?;
        let reply_to = reader.text(endpoint_length, "reply endpoint")?;
        reader.finish()?;
        if header.fingerprint != bootstrap_namespace(&group) {
            return Err(ControlError::Invalid { what: WHAT, field: "namespace", value: header.fingerprint });
        }
        if reply_to.parse::<std::net::SocketAddr>().is_err() {
            return Err(ControlError::Invalid { what: WHAT, field: "reply endpoint", value: endpoint_length as u64 });
        }
        Ok(BootstrapRequest { sender: header.sender, group, reply_to, held_fingerprint, nonce })
    }
}

/// A member as a BOOTSTRAP_REPLY lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapMember {
    /// Its member id.
    pub member_id: u64,
    /// What it is.
    pub role: Role,
    /// Its inbox (`ip:port`).
    pub endpoint: String,
}

/// A group definition as it travels (the asker validates it before use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefinitionRecord {
    /// [`DEFINITION_VERSION`] of the sender.
    pub version: u16,
    /// Group name.
    pub name: String,
    /// Hash prefix HP.
    pub hash_prefix: String,
    /// Hash count HC.
    pub hash_count: u32,
    /// Queue count QC.
    pub queue_count: u32,
    /// Queue size QS.
    pub queue_size: u64,
    /// The sender's fingerprint of the definition (the asker recomputes and compares it).
    pub fingerprint: u64,
}

/// The answer: the definition and the members the answering member knows live (itself first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootstrapReply {
    /// The answering member's id (the header's sender).
    pub sender: u64,
    /// The request's nonce.
    pub nonce: u64,
    /// The group's definition.
    pub definition: DefinitionRecord,
    /// At most [`MAX_BOOTSTRAP_MEMBERS`].
    pub members: Vec<BootstrapMember>,
}

impl BootstrapReply {
    /// Appends the encoded reply to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), ControlError> {
        const WHAT: &str = "BOOTSTRAP_REPLY";
        let definition = &self.definition;
        limit(WHAT, "name_length", definition.name.len(), MAX_NAME_LENGTH)?;
        limit(WHAT, "prefix_length", definition.hash_prefix.len(), MAX_NAME_LENGTH)?;
        limit(WHAT, "member_count", self.members.len(), MAX_BOOTSTRAP_MEMBERS)?;
        for member in &self.members {
            limit(WHAT, "endpoint_length", member.endpoint.len(), MAX_ENDPOINT_LENGTH)?;
        }
        let fingerprint = bootstrap_namespace(&definition.name);
        Header { kind: Kind::BootstrapReply, flags: 0, fingerprint, sender: self.sender }.emit(out);
        out.extend_from_slice(&definition.version.to_le_bytes());
        out.extend_from_slice(&[definition.name.len() as u8, definition.hash_prefix.len() as u8]);
        for value in [definition.hash_count, definition.queue_count, self.members.len() as u32, 0] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        for value in [definition.queue_size, definition.fingerprint, self.nonce] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(definition.name.as_bytes());
        out.extend_from_slice(definition.hash_prefix.as_bytes());
        for member in &self.members {
            out.extend_from_slice(&member.member_id.to_le_bytes());
            out.extend_from_slice(&[member.role as u8, member.endpoint.len() as u8, 0, 0]);
            out.extend_from_slice(member.endpoint.as_bytes());
        }
        Ok(())
    }

    /// Decodes a reply from untrusted bytes.
    pub fn parse(bytes: &[u8]) -> Result<BootstrapReply, ControlError> {
        const WHAT: &str = "BOOTSTRAP_REPLY";
        let header = Header::parse_kind(bytes, Kind::BootstrapReply)?;
        check_length(WHAT, bytes, BOOTSTRAP_REPLY_FIXED_LENGTH)?;
        let mut reader = Reader { bytes, at: HEADER_LENGTH, what: WHAT };
        let version = reader.u16()?;
        let name_length = usize::from(reader.u8()?);
        let prefix_length = usize::from(reader.u8()?);
        let hash_count = reader.u32()?;
        let queue_count = reader.u32()?;
        let member_count = reader.u32()? as usize;
        reader.take(4)?;
        limit(WHAT, "member_count", member_count, MAX_BOOTSTRAP_MEMBERS)?;
        let queue_size = reader.u64()?;
        let fingerprint = reader.u64()?;
        let nonce = reader.u64()?;
        let name = reader.text(name_length, "group name")?;
        let hash_prefix = reader.text(prefix_length, "hash prefix")?;
        if header.fingerprint != bootstrap_namespace(&name) {
            return Err(ControlError::Invalid { what: WHAT, field: "namespace", value: header.fingerprint });
        }
        // Bounded by the bytes present, not by the declared count.
        let mut members = Vec::with_capacity(member_count.min(bytes.len() / BOOTSTRAP_MEMBER_FIXED_LENGTH));
        for _ in 0..member_count {
            let member_id = reader.u64()?;
            let role_code = reader.u8()?;
            let endpoint_length = usize::from(reader.u8()?);
            reader.take(2)?;
            let endpoint = reader.text(endpoint_length, "member endpoint")?;
            let role = Role::from_code(role_code).ok_or(ControlError::Invalid {
                what: WHAT,
                field: "member role",
                value: u64::from(role_code),
            })?;
            if member_id == 0 || endpoint.parse::<std::net::SocketAddr>().is_err() {
                return Err(ControlError::Invalid { what: WHAT, field: "member", value: member_id });
            }
            members.push(BootstrapMember { member_id, role, endpoint });
        }
        reader.finish()?;
        let definition =
            DefinitionRecord { version, name, hash_prefix, hash_count, queue_count, queue_size, fingerprint };
        Ok(BootstrapReply { sender: header.sender, nonce, definition, members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply() -> BootstrapReply {
        BootstrapReply {
            sender: 7,
            nonce: 99,
            definition: DefinitionRecord {
                version: DEFINITION_VERSION,
                name: "orders".into(),
                hash_prefix: "hp".into(),
                hash_count: 64,
                queue_count: 8,
                queue_size: 1 << 20,
                fingerprint: 0x1234,
            },
            members: vec![
                BootstrapMember { member_id: 7, role: Role::Consumer, endpoint: "10.0.0.1:4000".into() },
                BootstrapMember { member_id: 8, role: Role::Publisher, endpoint: "10.0.0.2:4100".into() },
            ],
        }
    }

    fn request() -> BootstrapRequest {
        BootstrapRequest {
            sender: 5,
            group: "orders".into(),
            reply_to: "10.0.0.3:4200".into(),
            held_fingerprint: 0,
            nonce: 99,
        }
    }

    #[test]
    fn request_and_reply_round_trip_with_their_documented_lengths() {
        let mut bytes = Vec::new();
        request().emit(&mut bytes).unwrap();
        assert_eq!(bytes.len(), BOOTSTRAP_FIXED_LENGTH + 6 + 13);
        assert_eq!(BootstrapRequest::parse(&bytes).unwrap(), request());
        let mut bytes = Vec::new();
        reply().emit(&mut bytes).unwrap();
        assert_eq!(bytes.len(), BOOTSTRAP_REPLY_FIXED_LENGTH + 6 + 2 + 2 * 12 + 13 + 13);
        assert_eq!(BootstrapReply::parse(&bytes).unwrap(), reply());
        assert!(super::super::parse_control(&bytes).is_err(), "not a HEARTBEAT or ACK");
    }

    #[test]
    fn every_truncation_and_every_trailing_byte_is_refused() {
        for message in [
            {
                let mut b = Vec::new();
                request().emit(&mut b).unwrap();
                b
            },
            {
                let mut b = Vec::new();
                reply().emit(&mut b).unwrap();
                b
            },
        ] {
            let parse = |bytes: &[u8]| {
                if message[1] == Kind::Bootstrap as u8 {
                    BootstrapRequest::parse(bytes).map(|_| ())
                } else {
                    BootstrapReply::parse(bytes).map(|_| ())
                }
            };
            for length in 0..message.len() {
                assert!(parse(&message[..length]).is_err(), "length {length}");
            }
            let mut longer = message.clone();
            longer.push(0);
            assert!(matches!(parse(&longer), Err(ControlError::TrailingBytes { .. })));
        }
    }

    #[test]
    fn hostile_fields_are_named() {
        let mut bytes = Vec::new();
        reply().emit(&mut bytes).unwrap();
        // A member count past the limit, before anything is allocated.
        let mut huge = bytes.clone();
        huge[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        let error = BootstrapReply::parse(&huge).unwrap_err();
        assert!(matches!(error, ControlError::TooLong { field: "member_count", .. }), "{error}");
        // Another group's namespace in the header.
        let mut moved = bytes.clone();
        moved[8] ^= 1;
        let error = BootstrapReply::parse(&moved).unwrap_err();
        assert!(matches!(error, ControlError::Invalid { field: "namespace", .. }), "{error}");
        // An unknown role.
        let mut role = bytes.clone();
        role[BOOTSTRAP_REPLY_FIXED_LENGTH + 8 + 8] = 9;
        let error = BootstrapReply::parse(&role).unwrap_err();
        assert!(matches!(error, ControlError::Invalid { field: "member role", .. }), "{error}");
        // A reply endpoint that is no address.
        let mut asked = request();
        asked.reply_to = "not-an-address".into();
        let mut bytes = Vec::new();
        asked.emit(&mut bytes).unwrap();
        let error = BootstrapRequest::parse(&bytes).unwrap_err();
        assert!(matches!(error, ControlError::Invalid { field: "reply endpoint", .. }), "{error}");
    }

    #[test]
    fn namespaces_differ_by_name() {
        assert_ne!(bootstrap_namespace("orders"), bootstrap_namespace("orders2"));
        assert_eq!(bootstrap_namespace("orders"), bootstrap_namespace("orders"));
    }
}
