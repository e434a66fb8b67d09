//! The client ↔ driver contract in shared memory: the structures a media driver and its clients
//! share across a process boundary, in Aeron's layouts (see `docs/driver-protocol.md`).
//!
//! * [`log_buffer`] — a publication's or image's log: three term partitions and a metadata
//!   page in one sparse sealed memfd (clients open it as `/proc/<driver pid>/fd/<fd>`); a
//!   lock-free many-writer term appender, a reader and a scanner that never see a half-written
//!   frame, the cleaner that readies a partition for reuse.
//! * [`counters`] — 64-bit counters with labels and type ids, one writer each (positions,
//!   limits, system counters); allocated and freed by the driver only.
//! * [`ring_buffer`] — many-to-one ring buffer (client commands → driver).
//! * [`broadcast`] — one-to-many broadcast buffer (driver responses → every client).
//! * [`error_log`] — bounded log of distinct errors with counts and first/last time.
//! * [`cnc`] — the `cnc.dat` file that holds the ring, broadcast buffer, counters and error log
//!   behind a versioned header with the driver's pid and heartbeat.
//! * [`command`] — the commands and responses carried by the ring and the broadcast buffer.
//! * [`directory`] — the driver directory: default location, 0700, live / stale driver detection.
//! * [`status`] — the JSON records of status answers and driver events, and the system
//!   counters' ids and labels, defined once for the driver and its clients.
//! * [`stat`] — a read-only snapshot (header, counters, errors) for `affinity stat`.
//! * [`buffer`], [`mod@file`] — the mapping primitives: every access is bounds- and
//!   alignment-checked; files are created 0600 and sized with `ftruncate` (sparse).
//!
//! Every file is validated when opened (magic, version, lengths, alignment): a corrupt or
//! truncated file is a [`ShmError`] naming the file and the field, never a panic. Log buffers
//! are sealed memfds of the driver ([`file::create_sealed`]): no process can truncate one while
//! it is mapped. `cnc.dat` truncated by another process *while mapped* still raises `SIGBUS` on
//! access, as with any `mmap`; the driver directory's 0700 permissions keep other users out.
//!
//! Integers are stored in native byte order; the layouts assume little-endian (like Aeron's and
//! the wire format), which the build enforces.

#[cfg(target_endian = "big")]
compile_error!("the shared-memory layouts are little-endian");

pub mod broadcast;
pub mod buffer;
pub mod cnc;
pub mod command;
pub mod counters;
pub mod directory;
pub mod error;
pub mod error_log;
pub mod file;
pub mod log_buffer;
pub mod ring_buffer;
pub mod stat;
pub mod status;
/// Helpers for the unit tests of this crate and of the crates above (feature `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod wake;

pub use error::ShmError;
