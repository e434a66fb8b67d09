//! The numbered test messages of the multicast tests, shared by `tests/multicast.rs` and the
//! role binary `src/bin/multicast_test_role.rs` (included by path in both).

/// Size of the messages the multicast tests publish.
pub const SIZE: usize = 200;

/// Message `index`: its index (8 bytes, little-endian), then `index % 251` repeated.
pub fn message(index: u64, size: usize) -> Vec<u8> {
    let mut bytes = vec![(index % 251) as u8; size.max(8)];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes
}

/// The index a message carries.
pub fn index_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?))
}
