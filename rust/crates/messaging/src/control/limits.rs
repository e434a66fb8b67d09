//! Every limit of the control plane, defined once. Decoders refuse larger values before
//! allocating; encoders refuse to produce them.

/// Largest member name, in bytes (a `u8` length on the wire).
pub const MAX_NAME_LENGTH: usize = 255;
/// Largest inbox endpoint (`host:port`), in bytes (a `u8` length on the wire).
pub const MAX_ENDPOINT_LENGTH: usize = 255;
/// Most queues a group may have (QC); also the most claims and figures in one heartbeat.
pub const MAX_QUEUE_COUNT: usize = 4096;
/// Most claims in one heartbeat.
pub const MAX_CLAIMS: usize = MAX_QUEUE_COUNT;
/// Most per-queue figures in one heartbeat.
pub const MAX_FIGURES: usize = MAX_QUEUE_COUNT;
/// Most producer positions in one claim (a `u16` count on the wire).
pub const MAX_ACKS_PER_CLAIM: usize = 1024;
/// Most entries in one ACK.
pub const MAX_ACK_ENTRIES: usize = MAX_QUEUE_COUNT;
/// Largest HEARTBEAT or ACK, in bytes.
pub const MAX_CONTROL_MESSAGE_LENGTH: usize = 1 << 20;
/// Most records in one DATA message.
pub const MAX_RECORDS_PER_DATA: usize = 1 << 16;
/// Largest key, in bytes.
pub const MAX_KEY_LENGTH: usize = 1 << 16;
/// Largest subject, in bytes (a `u16` length on the wire).
pub const MAX_SUBJECT_LENGTH: usize = 1024;
/// Largest record payload, in bytes.
pub const MAX_PAYLOAD_LENGTH: usize = 1 << 20;
/// Most members one process tracks in a group (peers beyond are ignored and counted).
pub const MAX_MEMBERS: usize = 1024;
/// Most members one BOOTSTRAP_REPLY lists.
pub const MAX_BOOTSTRAP_MEMBERS: usize = MAX_MEMBERS;
/// Most an accepted claim's epoch may exceed the highest epoch a member already accepted for
/// that queue. Legitimate claims move an epoch by one over the highest the claimer heard, so
/// only a member that missed more than this many claims of one queue would refuse a real one.
/// A claim beyond it is ignored and counted (`epochs_refused`): a forged claim cannot jump
/// (and saturate) the epoch.
pub const MAX_EPOCH_STEP: u64 = 1 << 16;
/// Highest epoch any claim may carry (also the first claim heard for a queue, whose baseline
/// is unknown): epochs stay far from `u64::MAX`, so `epoch + 1` never saturates.
pub const MAX_EPOCH: u64 = 1 << 48;
