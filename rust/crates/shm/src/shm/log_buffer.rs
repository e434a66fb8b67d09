//! Mapped log buffers in the Aeron layout: three term partitions followed by a metadata page,
//! a lock-free many-writer term appender, a term reader and scanner that only see committed
//! frames, and the cleaner that zeroes a partition before it is reused.
//!
//! ```text
//! +----------------------------+  0
//! |       term partition 0     |
//! +----------------------------+  term_length
//! |       term partition 1     |
//! +----------------------------+  2 * term_length
//! |       term partition 2     |
//! +----------------------------+  3 * term_length
//! |   metadata (LOG_META_DATA_LENGTH bytes, see `meta`)   |
//! +----------------------------+  file length (rounded up to page_size)
//! ```
//!
//! Appending: a writer reads the active term count, claims `aligned_length` bytes with one atomic
//! add on that partition's raw tail (`term_id << 32 | term_offset`), writes the frame header with
//! a negative length (in progress), the payload, and finally stores the positive frame length with
//! `Release`. Readers load the frame length with `Acquire` and stop at a length `<= 0`, so they never
//! see a half-written frame. A claim that crosses the end of the term writes a padding frame over
//! the rest of the term (if it started inside it) and rotates the log to the next partition; the
//! caller then retries ([`Offer::AdminAction`]).

use std::path::{Path, PathBuf};

use super::buffer::{align_up, Region, RegionReader, RegionWriter};
use super::error::ShmError;
use super::file;
use crate::limits::{self, MAX_TERM_LENGTH, MIN_TERM_LENGTH};
use crate::logbuffer::position::{
    align_frame, compute_position, fragmented_length, max_message_length, partition_index, position_bits,
    start_position, FRAME_ALIGNMENT, PARTITION_COUNT,
};
use crate::logbuffer::StreamIdentity;
use crate::wire::{flags, DataHeader, FrameType, DATA_HEADER_LENGTH};

/// What an offer into the log did (defined with the [`crate::logbuffer::SenderLog`] port, whose
/// `append` is this log's [`LogBuffer::offer`]).
use crate::logbuffer::Offer;

mod exclusive;
pub use exclusive::ExclusiveAppender;

/// Bytes of the metadata section at the end of a log (one minimum page).
pub const LOG_META_DATA_LENGTH: usize = 4096;
/// Smallest page size a log accepts.
pub const PAGE_MIN_SIZE: u32 = 4096;
/// Largest page size a log accepts.
pub const PAGE_MAX_SIZE: u32 = 1 << 30;
/// Identifies an affinity log buffer ("AFFLOG01" little-endian), at [`meta::MAGIC`].
pub const LOG_MAGIC: i64 = i64::from_le_bytes(*b"AFFLOG01");
/// Version of this layout, at [`meta::LAYOUT_VERSION`].
pub const LOG_LAYOUT_VERSION: i32 = 1;
/// Start of the name of every log memfd the driver creates (`/memfd:<name> (deleted)` in
/// `ls -l /proc/<driver pid>/fd`).
pub const LOG_NAME_PREFIX: &str = "affinity-";

/// Name of the memfd of the log of publication `registration_id` (IPC or network).
pub fn publication_log_name(registration_id: i64) -> String {
    format!("{LOG_NAME_PREFIX}publication-{registration_id}")
}

/// What a closing driver did not send: data appended to its network publications that never
/// left (the drain ended first, or no receiver was left to send it to). The driver computes it;
/// a client of an embedded driver hands it to its caller. Always empty with a standalone
/// driver, which keeps serving a closed client's publications after it has gone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsent {
    /// Messages whose first fragment was not sent (a fragmented message counts once).
    pub messages: u64,
    /// Log bytes not sent (frame headers and alignment included).
    pub bytes: u64,
}

impl Unsent {
    /// Whether everything was sent.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

/// Name of the memfd of network image `correlation_id`'s log.
pub fn image_log_name(correlation_id: i64) -> String {
    format!("{LOG_NAME_PREFIX}image-{correlation_id}")
}

/// One log of a running driver, found by [`driver_logs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverLog {
    /// Where a process of the same user opens it (`/proc/<pid>/fd/<fd>`).
    pub path: PathBuf,
    /// The memfd's name ([`publication_log_name`] or [`image_log_name`]).
    pub name: String,
}

/// The logs driver process `pid` holds open (its memfds named [`LOG_NAME_PREFIX`]...), for tools
/// and tests: the logs are not files of the driver directory.
pub fn driver_logs(pid: u32) -> std::io::Result<Vec<DriverLog>> {
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        // An fd closed meanwhile has no link any more: skip it.
        let Ok(target) = std::fs::read_link(&path) else { continue };
        let target = target.to_string_lossy();
        let Some(name) = target.strip_prefix("/memfd:") else { continue };
        let name = name.strip_suffix(" (deleted)").unwrap_or(name);
        if name.starts_with(LOG_NAME_PREFIX) {
            logs.push(DriverLog { path, name: name.to_string() });
        }
    }
    logs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(logs)
}

/// What a client knows of a log from the driver's answer (`ON_PUBLICATION_READY`,
/// `ON_AVAILABLE_IMAGE`): checked against the log's default frame header when it is opened, so
/// that a log name the driver has meanwhile given to another log (its fd number reused) is
/// refused instead of read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogIdentity {
    /// Session id of the stream.
    pub session_id: i32,
    /// Stream id.
    pub stream_id: i32,
}

/// Offsets inside the metadata section (Aeron's `LogBufferDescriptor` offsets for Aeron's fields).
pub mod meta {
    /// Raw tail counter of partition `i` at `TERM_TAIL_COUNTERS + 8 * i` (`i64`).
    pub const TERM_TAIL_COUNTERS: usize = 0;
    /// Count of terms since the initial term (`i32`); selects the active partition.
    pub const ACTIVE_TERM_COUNT: usize = 24;
    /// Position of the end of stream, `i64::MAX` while open.
    pub const END_OF_STREAM_POSITION: usize = 128;
    /// 1 when the publication has at least one connected subscriber (`i32`).
    pub const IS_CONNECTED: usize = 136;
    /// Number of connected transports (images) (`i32`).
    pub const ACTIVE_TRANSPORT_COUNT: usize = 140;
    /// Registration id of the publication or image owning this log (`i64`).
    pub const CORRELATION_ID: usize = 256;
    /// Term id of position 0 (`i32`).
    pub const INITIAL_TERM_ID: usize = 264;
    /// Length of the default frame header (`i32`, always 32).
    pub const DEFAULT_FRAME_HEADER_LENGTH: usize = 268;
    /// Maximum transmission unit (`i32`).
    pub const MTU_LENGTH: usize = 272;
    /// Term length (`i32`).
    pub const TERM_LENGTH: usize = 276;
    /// Page size the file length is aligned to (`i32`).
    pub const PAGE_SIZE: usize = 280;
    /// The DATA header every frame of this log starts from (32 bytes; 128 reserved).
    pub const DEFAULT_FRAME_HEADER: usize = 384;
    /// [`super::LOG_MAGIC`] (`i64`), written last when the log is created.
    pub const MAGIC: usize = 512;
    /// [`super::LOG_LAYOUT_VERSION`] (`i32`).
    pub const LAYOUT_VERSION: usize = 520;
}

/// Data header field offsets used by the appender (see `wire::data`).
mod frame {
    pub const LENGTH: usize = 0;
    pub const FLAGS: usize = 5;
    pub const TYPE: usize = 6;
    pub const TERM_OFFSET: usize = 8;
    pub const SESSION_ID: usize = 12;
    pub const STREAM_ID: usize = 16;
    pub const TERM_ID: usize = 20;
    pub const RESERVED_VALUE: usize = 24;
}

/// Parameters of a new log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogParams {
    /// Bytes per term: a power of two in `[64 KiB, 1 GiB]`.
    pub term_length: u32,
    /// Largest frame: a multiple of 32 in `[64, 65504]`.
    pub mtu: u32,
    /// Page size the file length is rounded to: a power of two in `[4 KiB, 1 GiB]`.
    pub page_size: u32,
    /// Term id of position 0.
    pub initial_term_id: i32,
    /// Session id written into every frame.
    pub session_id: i32,
    /// Stream id written into every frame.
    pub stream_id: i32,
    /// Registration id of the owner.
    pub correlation_id: i64,
}

impl LogParams {
    /// The parameters of a log for stream `identity` with frames of at most `mtu` bytes, the
    /// smallest page size and correlation id 0: what the sans-IO tests run the protocol state
    /// machines on (`LogBuffer::anonymous_at(&LogParams::for_stream(..), LogStart::at(..))`).
    pub fn for_stream(identity: &StreamIdentity, mtu: u32) -> Self {
        LogParams {
            term_length: identity.term_length,
            mtu,
            page_size: PAGE_MIN_SIZE,
            initial_term_id: identity.initial_term_id,
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            correlation_id: 0,
        }
    }

    /// Checks every parameter and returns the total file length.
    pub fn validate(&self) -> Result<usize, String> {
        check_term_length(self.term_length)?;
        check_mtu(self.mtu, self.term_length)?;
        check_page_size(self.page_size)?;
        log_length(self.term_length, self.page_size).ok_or_else(|| "log length overflows".to_string())
    }
}

fn check_term_length(term_length: u32) -> Result<(), String> {
    if !limits::is_valid_term_length(term_length.into()) {
        return Err(format!("term length {term_length} {}", limits::TERM_LENGTH_RULE));
    }
    Ok(())
}

fn check_mtu(mtu: u32, term_length: u32) -> Result<(), String> {
    if !limits::is_valid_mtu(mtu.into()) {
        return Err(format!("mtu {mtu} {}", limits::MTU_RULE));
    }
    if mtu > term_length {
        return Err(format!("mtu {mtu} must not exceed the term length {term_length}"));
    }
    Ok(())
}

fn check_page_size(page_size: u32) -> Result<(), String> {
    if !(PAGE_MIN_SIZE..=PAGE_MAX_SIZE).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!(
            "page size {page_size} must be a power of two between {PAGE_MIN_SIZE} and {PAGE_MAX_SIZE}"
        ));
    }
    Ok(())
}

/// Total bytes of a log file: three terms plus metadata, rounded up to the page size.
pub fn log_length(term_length: u32, page_size: u32) -> Option<usize> {
    let terms = (term_length as usize).checked_mul(PARTITION_COUNT)?;
    align_up(terms.checked_add(LOG_META_DATA_LENGTH)?, page_size as usize)
}

/// The raw tail value for `term_id` at `term_offset`.
pub fn pack_tail(term_id: i32, term_offset: u32) -> i64 {
    ((term_id as i64) << 32) | term_offset as i64
}

/// Term id part of a raw tail.
pub fn tail_term_id(raw_tail: i64) -> i32 {
    (raw_tail >> 32) as i32
}

/// Term offset part of a raw tail, capped at `term_length` (claims past the end keep adding).
pub fn tail_term_offset(raw_tail: i64, term_length: u32) -> u32 {
    ((raw_tail & 0xFFFF_FFFF) as u64).min(term_length as u64) as u32
}

/// Where the first append into a new log goes: term `term_id` at `term_offset` (Aeron's
/// `init-term-id|term-id|term-offset`, the initial term id being [`LogParams::initial_term_id`]).
/// The log starts at `(term_id - initial_term_id) * term_length + term_offset` (32-bit wrapping
/// term count); the terms before are never used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStart {
    /// The active term: at or after the initial term id (32-bit wrapping).
    pub term_id: i32,
    /// Offset in that term: a multiple of 32, at most the term length.
    pub term_offset: u32,
}

impl LogStart {
    /// Position 0: the initial term at offset 0.
    pub fn of(params: &LogParams) -> Self {
        LogStart { term_id: params.initial_term_id, term_offset: 0 }
    }

    /// Position `position` of stream `identity` (a term start is the next term at offset 0).
    pub fn at(identity: &StreamIdentity, position: i64) -> Self {
        LogStart { term_id: identity.term_id(position), term_offset: identity.term_offset(position) as u32 }
    }

    /// The position this start names in a log of `params`, checked
    /// (`logbuffer::position::start_position`).
    pub fn position(&self, params: &LogParams) -> Result<i64, String> {
        let offset = i32::try_from(self.term_offset).unwrap_or(-1);
        start_position(params.initial_term_id, self.term_id, offset, params.term_length)
            .map_err(|e| format!("start term id {} at term offset {}: {e}", self.term_id, self.term_offset))
    }
}

/// One committed fragment handed to a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Stream position of the frame's start.
    pub position: i64,
    /// BEGIN / END flags.
    pub flags: u8,
    /// The frame's reserved value.
    pub reserved_value: i64,
    /// Term id of the frame.
    pub term_id: i32,
    /// Offset of the frame in its term.
    pub term_offset: u32,
}

/// A mapped log buffer (publication or image).
#[derive(Clone, Debug)]
pub struct LogBuffer {
    terms: [Region; PARTITION_COUNT],
    meta: Region,
    term_length: u32,
    mtu: u32,
    initial_term_id: i32,
    position_bits: u32,
    default_header: [u8; DATA_HEADER_LENGTH],
    path: Option<PathBuf>,
}

impl LogBuffer {
    /// Creates a log file at `path` (must not exist; mode 0600; sparse), starting at position 0.
    pub fn create(path: &Path, params: &LogParams) -> Result<Self, ShmError> {
        Self::create_at(path, params, LogStart::of(params))
    }

    /// Creates a log file at `path` whose first append goes to `start` (see [`LogStart`]).
    pub fn create_at(path: &Path, params: &LogParams, start: LogStart) -> Result<Self, ShmError> {
        let length = params.validate().map_err(ShmError::Parameter)?;
        start.position(params).map_err(ShmError::Parameter)?;
        let region = file::create_mapped(path, length)?;
        Self::initialise(region, params, start, Some(path))
    }

    /// Creates a log in anonymous memory (one process only), starting at position 0.
    pub fn anonymous(params: &LogParams) -> Result<Self, ShmError> {
        Self::anonymous_at(params, LogStart::of(params))
    }

    /// Creates a log in anonymous memory whose first append goes to `start`.
    pub fn anonymous_at(params: &LogParams, start: LogStart) -> Result<Self, ShmError> {
        let length = params.validate().map_err(ShmError::Parameter)?;
        start.position(params).map_err(ShmError::Parameter)?;
        Self::initialise(file::anonymous(length)?, params, start, None)
    }

    /// Creates a log in a sealed memfd named `name` (the driver's logs: no process can shrink
    /// it, see [`file::create_sealed`]) whose first append goes to `start`. Its
    /// [`Self::path`] is the `/proc/<pid>/fd/<fd>` name clients open while the log lives;
    /// the memfd closes when the last clone of this log is dropped.
    pub fn create_sealed(name: &str, params: &LogParams, start: LogStart) -> Result<Self, ShmError> {
        let length = params.validate().map_err(ShmError::Parameter)?;
        start.position(params).map_err(ShmError::Parameter)?;
        let (region, path) = file::create_sealed(name, length)?;
        Self::initialise(region, params, start, Some(&path))
    }

    /// Writes the metadata of a new log whose `start` was checked.
    fn initialise(region: Region, params: &LogParams, start: LogStart, path: Option<&Path>) -> Result<Self, ShmError> {
        let term_length = params.term_length as usize;
        let meta = region.slice(term_length * PARTITION_COUNT, LOG_META_DATA_LENGTH)?;
        // Aeron's `PublicationParams` start: the term count selects the active partition, whose
        // tail is the start; each following partition expects the term id three before the one
        // that will rotate into it, so the earlier terms are never used.
        let term_count = start.term_id.wrapping_sub(params.initial_term_id);
        let active = partition_index(i64::from(term_count));
        meta.put_i64(meta::TERM_TAIL_COUNTERS + 8 * active, pack_tail(start.term_id, start.term_offset))?;
        for step in 1..PARTITION_COUNT {
            let partition = (active + step) % PARTITION_COUNT;
            let term_id = start.term_id.wrapping_add(step as i32).wrapping_sub(PARTITION_COUNT as i32);
            meta.put_i64(meta::TERM_TAIL_COUNTERS + 8 * partition, pack_tail(term_id, 0))?;
        }
        meta.put_i32(meta::ACTIVE_TERM_COUNT, term_count)?;
        meta.put_i64(meta::END_OF_STREAM_POSITION, i64::MAX)?;
        meta.put_i64(meta::CORRELATION_ID, params.correlation_id)?;
        meta.put_i32(meta::INITIAL_TERM_ID, params.initial_term_id)?;
        meta.put_i32(meta::DEFAULT_FRAME_HEADER_LENGTH, DATA_HEADER_LENGTH as i32)?;
        meta.put_i32(meta::MTU_LENGTH, params.mtu as i32)?;
        meta.put_i32(meta::TERM_LENGTH, params.term_length as i32)?;
        meta.put_i32(meta::PAGE_SIZE, params.page_size as i32)?;
        meta.put_bytes(meta::DEFAULT_FRAME_HEADER, &default_header(params.session_id, params.stream_id))?;
        meta.put_i32(meta::LAYOUT_VERSION, LOG_LAYOUT_VERSION)?;
        meta.put_i64_release(meta::MAGIC, LOG_MAGIC)?;
        Self::from_region(region, path)
    }

    /// Opens and validates an existing log: a driver's sealed memfd by its `/proc/<pid>/fd/<fd>`
    /// name (a link by nature, checked for its seals instead), or a regular file, never
    /// followed through a link.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let region = if path.to_str().and_then(file::parse_proc_fd_path).is_some() {
            file::open_sealed(path, "log buffer", LOG_META_DATA_LENGTH)?
        } else {
            file::open_mapped(path, "log buffer", LOG_META_DATA_LENGTH, true)?
        };
        Self::from_region(region, Some(path))
    }

    /// Opens the log a driver (process `driver_pid`) announced as `log_file`: it must be that
    /// driver's `/proc/<pid>/fd/<fd>`, a sealed memfd, a valid log, and of the stream `identity`.
    pub fn open_announced(driver_pid: i64, log_file: &str, identity: LogIdentity) -> Result<Self, ShmError> {
        let path = Path::new(log_file);
        match file::parse_proc_fd_path(log_file) {
            Some((pid, _)) if i64::from(pid) == driver_pid => {}
            _ => {
                return Err(ShmError::invalid(
                    "log buffer",
                    Some(path),
                    format!("the driver (pid {driver_pid}) named a log that is not one of its own: expected /proc/{driver_pid}/fd/<fd>"),
                ))
            }
        }
        let log = Self::from_region(file::open_sealed(path, "log buffer", LOG_META_DATA_LENGTH)?, Some(path))?;
        let found = log.identity();
        if found != identity {
            return Err(ShmError::invalid(
                "log buffer",
                Some(path),
                format!(
                    "session {} stream {} in its frame header, the driver announced session {} stream {} (the log is gone and its name reused)",
                    found.session_id, found.stream_id, identity.session_id, identity.stream_id
                ),
            ));
        }
        Ok(log)
    }

    /// Session and stream id of this log's frames (its default frame header).
    pub fn identity(&self) -> LogIdentity {
        let field = |at: usize| {
            i32::from_le_bytes([
                self.default_header[at],
                self.default_header[at + 1],
                self.default_header[at + 2],
                self.default_header[at + 3],
            ])
        };
        LogIdentity { session_id: field(frame::SESSION_ID), stream_id: field(frame::STREAM_ID) }
    }

    /// Validates a mapped log (magic, version, term length, MTU, page size, file length,
    /// default frame header, end of stream, active term count and tail counters).
    pub fn from_region(region: Region, path: Option<&Path>) -> Result<Self, ShmError> {
        let invalid = |detail: String| ShmError::invalid("log buffer", path, detail);
        let len = region.capacity();
        if len < LOG_META_DATA_LENGTH {
            return Err(invalid(format!("truncated: {len} bytes, at least {LOG_META_DATA_LENGTH} expected")));
        }
        // The metadata sits after three terms; find it from the term length stored in it, which
        // we can only read once we know where it is: try the one layout that matches the length.
        let term_length = find_term_length(&region).ok_or_else(|| {
            invalid(format!(
                "{len} bytes is not three power-of-two terms plus {LOG_META_DATA_LENGTH} bytes of metadata"
            ))
        })?;
        let meta = region.slice(term_length as usize * PARTITION_COUNT, LOG_META_DATA_LENGTH)?;
        let magic = meta.get_i64_acquire(meta::MAGIC)?;
        if magic != LOG_MAGIC {
            return Err(invalid(format!("magic {magic:#018x}, expected {LOG_MAGIC:#018x}")));
        }
        let version = meta.get_i32(meta::LAYOUT_VERSION)?;
        if version != LOG_LAYOUT_VERSION {
            return Err(invalid(format!("layout version {version}, this build reads {LOG_LAYOUT_VERSION}")));
        }
        let stored_term_length = meta.get_i32(meta::TERM_LENGTH)?;
        if stored_term_length as i64 != term_length as i64 {
            return Err(invalid(format!("term length {stored_term_length} does not match the file length {len}")));
        }
        let page_size = u32::try_from(meta.get_i32(meta::PAGE_SIZE)?).unwrap_or(0);
        check_page_size(page_size).map_err(&invalid)?;
        if log_length(term_length, page_size) != Some(len) {
            return Err(invalid(format!(
                "{len} bytes, expected {:?} for term length {term_length} and page size {page_size}",
                log_length(term_length, page_size)
            )));
        }
        let mtu = u32::try_from(meta.get_i32(meta::MTU_LENGTH)?).unwrap_or(0);
        check_mtu(mtu, term_length).map_err(&invalid)?;
        let header_length = meta.get_i32(meta::DEFAULT_FRAME_HEADER_LENGTH)?;
        if header_length != DATA_HEADER_LENGTH as i32 {
            return Err(invalid(format!("default frame header length {header_length}, expected {DATA_HEADER_LENGTH}")));
        }
        let mut default_header = [0u8; DATA_HEADER_LENGTH];
        meta.get_bytes(meta::DEFAULT_FRAME_HEADER, &mut default_header)?;
        let expected_type = FrameType::Data.code().to_le_bytes();
        if default_header[frame::TYPE..frame::TYPE + 2] != expected_type {
            return Err(invalid(format!(
                "default frame header type {:#06x}, expected DATA",
                i16::from_le_bytes([default_header[frame::TYPE], default_header[frame::TYPE + 1]])
            )));
        }
        let t = term_length as usize;
        let terms = [region.slice(0, t)?, region.slice(t, t)?, region.slice(2 * t, t)?];
        let log = Self {
            terms,
            initial_term_id: meta.get_i32(meta::INITIAL_TERM_ID)?,
            meta,
            term_length,
            mtu,
            position_bits: position_bits(term_length),
            default_header,
            path: path.map(Path::to_path_buf),
        };
        let end_of_stream = log.end_of_stream_position()?;
        if end_of_stream != i64::MAX && !(0..=log.max_position()).contains(&end_of_stream) {
            return Err(log.impossible(format!(
                "end-of-stream position {end_of_stream} is neither open ({}) nor a position in [0, {}]",
                i64::MAX,
                log.max_position()
            )));
        }
        log.check_tails()?;
        Ok(log)
    }

    /// Checks the active term count against the three tail counters (`docs/driver-protocol.md`,
    /// "What a corrupt peer can and cannot do"): with count `n` the active partition holds term
    /// `n`, the next one term `n - 2` (or already `n + 1` while a writer rotates), the one after
    /// it term `n - 1` (term counts relative to the initial term id). Writers rotating meanwhile
    /// change the count: read again, at most [`TAIL_CHECK_ATTEMPTS`] times.
    fn check_tails(&self) -> Result<(), ShmError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let count = self.active_term_count()?;
            let mut tails = [0i64; PARTITION_COUNT];
            for (partition, tail) in tails.iter_mut().enumerate() {
                *tail = self.raw_tail(partition)?;
            }
            if self.active_term_count()? != count && attempt < TAIL_CHECK_ATTEMPTS {
                continue;
            }
            if count < 0 {
                return Err(self.impossible(format!("active term count {count} is negative")));
            }
            let active = partition_index(i64::from(count));
            for step in 0..PARTITION_COUNT {
                let partition = (active + step) % PARTITION_COUNT;
                let term_count = tail_term_id(tails[partition]).wrapping_sub(self.initial_term_id);
                let allowed: &[i32] = match step {
                    0 => &[count],
                    1 => &[count.wrapping_sub(2), count.wrapping_add(1)],
                    _ => &[count.wrapping_sub(1)],
                };
                if !allowed.contains(&term_count) {
                    return Err(self.impossible(format!(
                        "tail counter of partition {partition} holds term id {} (term count {term_count}), \
                         but active term count {count} needs term count {}",
                        tail_term_id(tails[partition]),
                        allowed.iter().map(i32::to_string).collect::<Vec<_>>().join(" or ")
                    )));
                }
            }
            return Ok(());
        }
    }

    /// The error for metadata no well-behaved writer can produce: names the log (path,
    /// session and stream) and what is wrong.
    #[cold]
    fn impossible(&self, detail: String) -> ShmError {
        let LogIdentity { session_id, stream_id } = self.identity();
        ShmError::invalid(
            "log buffer",
            self.path.as_deref(),
            format!("{detail} (session {session_id}, stream {stream_id}): its metadata is corrupt"),
        )
    }

    /// The file this log is mapped from (`None` when anonymous).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Bytes per term.
    pub fn term_length(&self) -> u32 {
        self.term_length
    }

    /// Maximum transmission unit.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Term id of position 0.
    pub fn initial_term_id(&self) -> i32 {
        self.initial_term_id
    }

    /// The metadata section (tail counters, flags).
    pub fn metadata(&self) -> &Region {
        &self.meta
    }

    /// Term partition `index` (0..3).
    pub fn term(&self, index: usize) -> Option<&Region> {
        self.terms.get(index)
    }

    /// Term partition `index`, inlined into every claim; the error, out of line.
    #[inline]
    fn partition(&self, index: usize) -> Result<&Region, ShmError> {
        match self.terms.get(index) {
            Some(term) => Ok(term),
            None => Err(Self::bad_partition(index)),
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_partition(index: usize) -> ShmError {
        ShmError::corrupt("log metadata", 0, format!("partition index {index}"))
    }

    /// Largest message `offer` accepts: `min(term_length / 8, 16 MiB)`.
    pub fn max_message_length(&self) -> usize {
        max_message_length(self.term_length)
    }

    /// Largest stream position (`term_length * 2^31`).
    pub fn max_position(&self) -> i64 {
        crate::logbuffer::position::max_position(self.term_length)
    }

    /// Bytes a publisher may run ahead of its slowest consumer: half a term (Aeron's window).
    pub fn publication_window(&self) -> i64 {
        (self.term_length / 2) as i64
    }

    /// How far the slowest consumer must advance before the driver moves the publisher limit
    /// (and cleans behind it) again: an eighth of the window (Aeron's `tripGain`). Moving it on
    /// every duty cycle would keep the driver busy for as long as data flows.
    pub fn publication_trip_gain(&self) -> i64 {
        self.publication_window() / 8
    }

    /// The partition of the active term and its term count.
    pub fn active_term_count(&self) -> Result<i32, ShmError> {
        self.meta.get_i32_acquire(meta::ACTIVE_TERM_COUNT)
    }

    /// Raw tail (`term_id << 32 | offset`) of `partition`.
    pub fn raw_tail(&self, partition: usize) -> Result<i64, ShmError> {
        self.meta.get_i64_acquire(meta::TERM_TAIL_COUNTERS + 8 * partition)
    }

    /// The position the next append will claim (the producer position).
    pub fn tail_position(&self) -> Result<i64, ShmError> {
        let term_count = self.active_term_count()?;
        let raw = self.raw_tail(partition_index(term_count as i64))?;
        let offset = tail_term_offset(raw, self.term_length);
        Ok(compute_position(tail_term_id(raw), offset as i32, self.position_bits, self.initial_term_id))
    }

    /// Position of the end of stream (`i64::MAX` while open).
    pub fn end_of_stream_position(&self) -> Result<i64, ShmError> {
        self.meta.get_i64_acquire(meta::END_OF_STREAM_POSITION)
    }

    /// Marks the end of stream at `position` (driver side).
    pub fn set_end_of_stream_position(&self, position: i64) -> Result<(), ShmError> {
        self.meta.put_i64_release(meta::END_OF_STREAM_POSITION, position)
    }

    /// Whether a subscriber is connected (written by the driver).
    pub fn is_connected(&self) -> Result<bool, ShmError> {
        Ok(self.meta.get_i32_acquire(meta::IS_CONNECTED)? == 1)
    }

    /// Sets the connected flag (driver side).
    pub fn set_connected(&self, connected: bool) -> Result<(), ShmError> {
        self.meta.put_i32_release(meta::IS_CONNECTED, i32::from(connected))
    }

    /// Offers `payload` with `reserved_value` if the tail is below `limit` (the publisher limit).
    ///
    /// Many threads and processes may offer into one log at once. Messages longer than
    /// `mtu - 32` are fragmented; longer than [`Self::max_message_length`] is an error.
    #[inline]
    pub fn offer(&self, payload: &[u8], reserved_value: i64, limit: i64) -> Result<Offer, ShmError> {
        self.check_message_length(payload.len())?;
        if payload.len() <= self.mtu as usize - DATA_HEADER_LENGTH {
            // One frame: the appender without the batch bookkeeping, as `append` would pick.
            return self.append_frame(payload, reserved_value, limit);
        }
        Ok(self.append(std::slice::from_ref(&payload), reserved_value, limit)?.1)
    }

    /// Offers a batch: appends, in order and with one claim (one atomic add on the tail), the
    /// longest prefix of `messages` that fits below `limit` (at least the first message, as
    /// [`Self::offer`]) and before the end of the term. Returns how many were appended and the
    /// outcome: [`Offer::Appended`] with the position after the last one when at least one was,
    /// otherwise the refusal of the first ([`Offer::AdminAction`] at a term end: retry now).
    ///
    /// Every message is framed exactly as [`Self::offer`] frames it and committed on its own
    /// (frame length stored last, `Release`), so a reader sees a prefix of the batch, never a
    /// half-written frame. A message longer than [`Self::max_message_length`] is an error and
    /// nothing is appended. An empty batch appends nothing and reports the tail position.
    pub fn offer_batch(&self, messages: &[&[u8]], reserved_value: i64, limit: i64) -> Result<(usize, Offer), ShmError> {
        if messages.is_empty() {
            return Ok((0, Offer::Appended(self.tail_position()?)));
        }
        for message in messages {
            self.check_message_length(message.len())?;
        }
        self.append(messages, reserved_value, limit)
    }

    fn check_message_length(&self, length: usize) -> Result<(), ShmError> {
        if length > self.max_message_length() {
            return Err(ShmError::Parameter(format!(
                "message of {length} bytes exceeds the maximum of {} for term length {}",
                self.max_message_length(),
                self.term_length
            )));
        }
        Ok(())
    }

    /// Bytes `payload` occupies in the term: one aligned frame, or `mtu`-sized fragments.
    #[inline]
    fn framed_length(&self, payload: usize) -> usize {
        let max_payload = self.mtu as usize - DATA_HEADER_LENGTH;
        if payload <= max_payload {
            align_frame(payload + DATA_HEADER_LENGTH)
        } else {
            fragmented_length(payload, max_payload)
        }
    }

    /// Where the next claim would start: the active partition's tail counter, its term, and the
    /// position there; or the refusal when that position is at `limit` (or the term is being
    /// rotated).
    #[inline(always)]
    fn claim_start(&self, limit: i64) -> Result<Result<ClaimStart, Offer>, ShmError> {
        let term_count = self.active_term_count()?;
        let partition = partition_index(term_count as i64);
        let tail_counter = meta::TERM_TAIL_COUNTERS + 8 * partition;
        let raw = self.meta.get_i64_acquire(tail_counter)?;
        let term_id = tail_term_id(raw);
        if term_id.wrapping_sub(self.initial_term_id) != term_count || term_count < 0 {
            return self.check_stale_claim(term_count, partition, raw).map(Err);
        }
        let offset = tail_term_offset(raw, self.term_length);
        let position = compute_position(term_id, offset as i32, self.position_bits, self.initial_term_id);
        if position >= limit {
            return Ok(Err(self.refusal_at(position)));
        }
        Ok(Ok(ClaimStart { term_count, partition, tail_counter, offset, position }))
    }

    /// Why nothing can be appended at `position`, which reached the publisher limit: the stream's
    /// end ([`Offer::MaxPositionExceeded`]) or back pressure.
    #[inline]
    fn refusal_at(&self, position: i64) -> Offer {
        if position >= self.max_position() {
            Offer::MaxPositionExceeded
        } else {
            Offer::BackPressured
        }
    }

    /// Whether term `term_id` is the last one a position can address (Aeron's
    /// `handleEndOfLogCondition`): the log never rotates out of it, the stream ends there.
    fn is_last_term(&self, term_id: i32) -> bool {
        let term_end = compute_position(term_id, self.term_length as i32, self.position_bits, self.initial_term_id);
        term_end >= self.max_position()
    }

    /// The bytes of one claim for a prefix of a batch (`first`, then `rest`): the first message
    /// whatever its length (a single offer may cross the limit by one message, as Aeron's), then
    /// more while the sum stays within `budget`. Returns the bytes and how many messages.
    fn batch_claim_length(&self, first: &[u8], rest: &[&[u8]], budget: u64) -> (usize, usize) {
        let mut claimed = self.framed_length(first.len()) as u64;
        let mut count = 1;
        for message in rest {
            let length = self.framed_length(message.len()) as u64;
            if claimed + length > budget {
                break;
            }
            claimed += length;
            count += 1;
        }
        (claimed as usize, count)
    }

    /// Writes `messages` (framed, each committed on its own) into the `claimed` bytes at
    /// `term_offset` of `term` (term `term_id`), fetching the lines ahead of each.
    fn write_messages(
        &self,
        term: &Region,
        term_offset: usize,
        claimed: usize,
        term_id: i32,
        messages: &[&[u8]],
        reserved_value: i64,
    ) -> Result<(), ShmError> {
        let writer = term.writer(term_offset, claimed)?;
        let mut at = 0;
        for message in messages {
            prefetch_ahead(term, term_offset + at, self.framed_length(message.len()));
            at += self.write_message(&writer, at, term_offset + at, term_id, message, reserved_value)?;
        }
        Ok(())
    }

    /// The active partition's tail (`raw`) is not of the active term count read before it. A
    /// rotation writes the next partition's tail before it moves the count, and a partition's
    /// tail changes only once the count is two terms past it: a writer sees this only when the
    /// count moved since it read it ([`Offer::AdminAction`]: retry). The same count again means
    /// no writer can ever repair the log: an error naming the counters, instead of
    /// `AdminAction` for ever.
    #[cold]
    fn check_stale_claim(&self, term_count: i32, partition: usize, raw: i64) -> Result<Offer, ShmError> {
        if term_count < 0 {
            return Err(self.impossible(format!("active term count {term_count} is negative")));
        }
        if self.active_term_count()? != term_count {
            return Ok(Offer::AdminAction);
        }
        let term_id = tail_term_id(raw);
        Err(self.impossible(format!(
            "active term count {term_count} selects partition {partition}, whose tail counter holds term id {term_id} \
             (term count {}), not term id {}",
            term_id.wrapping_sub(self.initial_term_id),
            self.initial_term_id.wrapping_add(term_count)
        )))
    }

    /// Claims `claimed` bytes on the tail counter of `start` (one atomic add): the term id and
    /// offset of the claim, or [`Offer::AdminAction`] when it crossed the end of the term (the
    /// rest of the term padded when the claim started inside it, the log rotated), or
    /// [`Offer::MaxPositionExceeded`] when that term was the last one a position can address.
    #[inline(always)]
    fn claim(&self, start: &ClaimStart, claimed: usize) -> Result<Result<(&Region, i32, usize), Offer>, ShmError> {
        let raw = self.meta.get_and_add_i64(start.tail_counter, claimed as i64)?;
        let term_id = tail_term_id(raw);
        let term_offset = (raw & 0xFFFF_FFFF) as u64;
        let term = self.partition(start.partition)?;
        if term_offset + claimed as u64 > u64::from(self.term_length) {
            if term_offset < u64::from(self.term_length) {
                self.write_padding(term, term_offset as usize, term_id)?;
            }
            if self.is_last_term(term_id) {
                return Ok(Err(Offer::MaxPositionExceeded));
            }
            self.rotate(start.term_count, term_id)?;
            return Ok(Err(Offer::AdminAction));
        }
        Ok(Ok((term, term_id, term_offset as usize)))
    }

    /// The term appender for one message that fits one frame (`offer`'s usual case): the claim
    /// of [`Self::append`] without the batch bookkeeping.
    #[inline]
    fn append_frame(&self, payload: &[u8], reserved_value: i64, limit: i64) -> Result<Offer, ShmError> {
        let start = match self.claim_start(limit)? {
            Ok(start) => start,
            Err(refusal) => return Ok(refusal),
        };
        let aligned = align_frame(payload.len() + DATA_HEADER_LENGTH);
        let (term, term_id, term_offset) = match self.claim(&start, aligned)? {
            Ok(claim) => claim,
            Err(refusal) => return Ok(refusal),
        };
        prefetch_after_frame(term, term_offset, aligned);
        let writer = term.writer(term_offset, aligned)?;
        self.write_frame(&writer, 0, term_offset, term_id, flags::UNFRAGMENTED, payload, reserved_value)?;
        let end = (term_offset + aligned) as i32;
        Ok(Offer::Appended(compute_position(term_id, end, self.position_bits, self.initial_term_id)))
    }

    /// The term appender (`docs/driver-protocol.md`): one claim for a prefix of `messages`
    /// (non-empty, every length checked by the caller).
    fn append(&self, messages: &[&[u8]], reserved_value: i64, limit: i64) -> Result<(usize, Offer), ShmError> {
        let Some((first, rest)) = messages.split_first() else { return Ok((0, Offer::BackPressured)) };
        if rest.is_empty() && first.len() <= self.mtu as usize - DATA_HEADER_LENGTH {
            let outcome = self.append_frame(first, reserved_value, limit)?;
            return Ok((usize::from(matches!(outcome, Offer::Appended(_))), outcome));
        }
        let start = match self.claim_start(limit)? {
            Ok(start) => start,
            Err(refusal) => return Ok((0, refusal)),
        };
        // The claim: the first message whatever its length (a single offer may cross the limit by
        // one message, as Aeron's), then more while they stay below the limit and inside the term
        // as seen now; a tail moved on by other writers meanwhile only makes the claim cross the
        // term end, which pads and rotates as for one message.
        let budget = (limit.saturating_sub(start.position) as u64).min(u64::from(self.term_length - start.offset));
        let (claimed, count) = self.batch_claim_length(first, rest, budget);
        let (term, term_id, term_offset) = match self.claim(&start, claimed)? {
            Ok(claim) => claim,
            Err(refusal) => return Ok((0, refusal)),
        };
        self.write_messages(term, term_offset, claimed, term_id, &messages[..count], reserved_value)?;
        let end = (term_offset + claimed) as i32;
        Ok((count, Offer::Appended(compute_position(term_id, end, self.position_bits, self.initial_term_id))))
    }

    /// Writes one message (one frame or its fragments) at `at` in `writer`, which starts at
    /// `term_offset - at` in the term; returns the bytes written (aligned).
    #[inline]
    fn write_message(
        &self,
        writer: &RegionWriter<'_>,
        at: usize,
        term_offset: usize,
        term_id: i32,
        payload: &[u8],
        reserved_value: i64,
    ) -> Result<usize, ShmError> {
        let max_payload = self.mtu as usize - DATA_HEADER_LENGTH;
        if payload.len() <= max_payload {
            self.write_frame(writer, at, term_offset, term_id, flags::UNFRAGMENTED, payload, reserved_value)?;
            return Ok(align_frame(payload.len() + DATA_HEADER_LENGTH));
        }
        let mut written = 0;
        let mut chunks = payload.chunks(max_payload).peekable();
        let mut first = true;
        while let Some(chunk) = chunks.next() {
            let mut frame_flags = if first { flags::BEGIN } else { 0 };
            if chunks.peek().is_none() {
                frame_flags |= flags::END;
            }
            self.write_frame(writer, at + written, term_offset + written, term_id, frame_flags, chunk, reserved_value)?;
            written += align_frame(chunk.len() + DATA_HEADER_LENGTH);
            first = false;
        }
        Ok(written)
    }

    /// One frame: length negative (in progress), header bytes 4.., payload, then the positive
    /// length with `Release` (the commit).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn write_frame(
        &self,
        writer: &RegionWriter<'_>,
        at: usize,
        term_offset: usize,
        term_id: i32,
        frame_flags: u8,
        payload: &[u8],
        reserved_value: i64,
    ) -> Result<(), ShmError> {
        let frame_length = (payload.len() + DATA_HEADER_LENGTH) as i32;
        writer.put_i32_release(at + frame::LENGTH, -frame_length)?;
        let mut header = self.default_header;
        header[frame::FLAGS] = frame_flags;
        header[frame::TERM_OFFSET..frame::TERM_OFFSET + 4].copy_from_slice(&(term_offset as i32).to_le_bytes());
        header[frame::TERM_ID..frame::TERM_ID + 4].copy_from_slice(&term_id.to_le_bytes());
        header[frame::RESERVED_VALUE..frame::RESERVED_VALUE + 8].copy_from_slice(&reserved_value.to_le_bytes());
        // Bytes 4.. of the header (the length stays negative until the end).
        writer.put_bytes(at + 4, &header[4..])?;
        writer.put_bytes(at + DATA_HEADER_LENGTH, payload)?;
        writer.put_i32_release(at + frame::LENGTH, frame_length)
    }

    fn write_padding(&self, term: &Region, offset: usize, term_id: i32) -> Result<(), ShmError> {
        let length = (self.term_length as usize - offset) as i32;
        term.put_i32_release(offset + frame::LENGTH, -length)?;
        let mut header = self.default_header;
        header[frame::FLAGS] = flags::UNFRAGMENTED;
        header[frame::TYPE..frame::TYPE + 2].copy_from_slice(&FrameType::Pad.code().to_le_bytes());
        header[frame::TERM_OFFSET..frame::TERM_OFFSET + 4].copy_from_slice(&(offset as i32).to_le_bytes());
        header[frame::TERM_ID..frame::TERM_ID + 4].copy_from_slice(&term_id.to_le_bytes());
        term.put_bytes(offset + 4, &header[4..])?;
        term.put_i32_release(offset + frame::LENGTH, length)
    }

    /// Moves the log on to the term after `term_id` (Aeron's `rotateLog`); any writer that
    /// tripped the end of the term may call it, only the first one has an effect.
    fn rotate(&self, term_count: i32, term_id: i32) -> Result<bool, ShmError> {
        let next_term_id = term_id.wrapping_add(1);
        let next_term_count = term_count.wrapping_add(1);
        let next_partition = partition_index(next_term_count as i64);
        let expected_term_id = next_term_id.wrapping_sub(PARTITION_COUNT as i32);
        let tail_offset = meta::TERM_TAIL_COUNTERS + 8 * next_partition;
        loop {
            let raw = self.meta.get_i64_acquire(tail_offset)?;
            if tail_term_id(raw) != expected_term_id {
                break;
            }
            if self.meta.compare_and_set_i64(tail_offset, raw, pack_tail(next_term_id, 0))? {
                break;
            }
        }
        self.meta.compare_and_set_i32(meta::ACTIVE_TERM_COUNT, term_count, next_term_count)
    }

    /// Reads committed fragments from `position` (within one term) into `handler`, at most
    /// `fragment_limit` of them; returns the position after the last frame consumed (padding
    /// included). Stops at the first frame not yet committed.
    ///
    /// Frames are read in runs: the committed frame lengths are scanned (`Acquire`) up to
    /// [`READ_CHUNK`] bytes, the run is copied out of the mapping in one piece, and the handler
    /// gets slices of that private copy (shared memory is never handed out as a reference).
    pub fn read<F>(
        &self,
        position: i64,
        fragment_limit: usize,
        scratch: &mut Vec<u8>,
        mut handler: F,
    ) -> Result<i64, ShmError>
    where
        F: FnMut(&FragmentHeader, &[u8]),
    {
        let term_offset = (position & (self.term_length as i64 - 1)) as usize;
        let term_count = position >> self.position_bits;
        let term = self.partition(partition_index(term_count))?;
        let term_id = self.initial_term_id.wrapping_add(term_count as i32);
        let reader = term.reader(term_offset, self.term_length as usize - term_offset)?;
        let mut offset = 0;
        let mut fragments = 0;
        while fragments < fragment_limit && offset < reader.len() {
            // Scan a run of committed frames from `offset`: `data_end` is the end of the last
            // data frame, `end` includes a final padding frame (never copied).
            let run_start = offset;
            let mut end = offset;
            let mut data_end = offset;
            let mut run_fragments = 0;
            while fragments + run_fragments < fragment_limit && end < reader.len() && end - run_start < READ_CHUNK {
                if run_fragments >= READ_PREFETCH_AFTER {
                    term.prefetch_read(term_offset + end + READ_PREFETCH_DISTANCE);
                }
                let Some(aligned) = self.committed_frame(&reader, term_offset, end)? else { break };
                if frame_type(&reader, end)? == FrameType::Pad.code() {
                    end += aligned;
                    break;
                }
                end += aligned;
                data_end = end;
                run_fragments += 1;
            }
            if end == run_start {
                break;
            }
            if data_end > run_start {
                reader.copy_to(run_start, data_end - run_start, scratch)?;
                fragments +=
                    self.deliver(scratch, position + run_start as i64, term_offset + run_start, term_id, &mut handler)?;
            }
            offset = end;
        }
        Ok(position + offset as i64)
    }

    /// Hands the data frames of `run` (a private copy of committed frames that started at
    /// `term_offset` / `position`) to `handler`; returns how many. The copy is parsed again with
    /// every length checked against it, so a writer that changed the mapping after the scan
    /// yields an error, never an out-of-range slice.
    fn deliver<F>(
        &self,
        run: &[u8],
        position: i64,
        term_offset: usize,
        term_id: i32,
        handler: &mut F,
    ) -> Result<usize, ShmError>
    where
        F: FnMut(&FragmentHeader, &[u8]),
    {
        let mut at = 0;
        let mut delivered = 0;
        while at < run.len() {
            let corrupt =
                || ShmError::corrupt("term", term_offset + at, "frame changed after it was committed".to_string());
            let head = run.get(at..at + DATA_HEADER_LENGTH).ok_or_else(corrupt)?;
            let length = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let length = usize::try_from(length).map_err(|_| corrupt())?;
            let aligned = align_frame(length);
            if length < DATA_HEADER_LENGTH || aligned > run.len() - at {
                return Err(corrupt());
            }
            if i16::from_le_bytes([head[frame::TYPE], head[frame::TYPE + 1]]) != FrameType::Pad.code() {
                let mut reserved = [0u8; 8];
                reserved.copy_from_slice(&head[frame::RESERVED_VALUE..frame::RESERVED_VALUE + 8]);
                let header = FragmentHeader {
                    position: position + at as i64,
                    flags: head[frame::FLAGS],
                    reserved_value: i64::from_le_bytes(reserved),
                    term_id,
                    term_offset: (term_offset + at) as u32,
                };
                handler(&header, &run[at + DATA_HEADER_LENGTH..at + length]);
                delivered += 1;
            }
            at += aligned;
        }
        Ok(delivered)
    }

    /// The committed frame at `offset` of `reader` (which starts at `base` in its term): its
    /// aligned length, `None` when not yet committed; an error when the length cannot be a
    /// frame of this term.
    #[inline]
    fn committed_frame(
        &self,
        reader: &RegionReader<'_>,
        base: usize,
        offset: usize,
    ) -> Result<Option<usize>, ShmError> {
        let length = reader.get_i32_acquire(offset + frame::LENGTH)?;
        if length <= 0 {
            return Ok(None);
        }
        let length = length as usize;
        let aligned = align_frame(length);
        if length < DATA_HEADER_LENGTH || aligned > reader.len() - offset {
            return Err(ShmError::corrupt(
                "term",
                base + offset,
                format!("frame length {length} does not fit a term of {} bytes", self.term_length),
            ));
        }
        Ok(Some(aligned))
    }

    /// Bytes of committed frames available to send from `position`, at most `max_length`
    /// (Aeron's `TermScanner`): `(available, padding)`. A padding frame ends the scan; only its
    /// header counts as available, the rest is returned as `padding`.
    pub fn scan(&self, position: i64, max_length: usize) -> Result<(usize, usize), ShmError> {
        let term_offset = (position & (self.term_length as i64 - 1)) as usize;
        let term = self.partition(partition_index(position >> self.position_bits))?;
        let reader = term.reader(term_offset, self.term_length as usize - term_offset)?;
        let limit = max_length.min(reader.len());
        let mut available = 0;
        while available < limit {
            let Some(aligned) = self.committed_frame(&reader, term_offset, available)? else { break };
            if frame_type(&reader, available)? == FrameType::Pad.code() {
                if available + DATA_HEADER_LENGTH > max_length {
                    break;
                }
                return Ok((available + DATA_HEADER_LENGTH, aligned - DATA_HEADER_LENGTH));
            }
            if available + aligned > max_length {
                break;
            }
            available += aligned;
        }
        Ok((available, 0))
    }

    /// Zeroes the log from `*clean_position` towards `target` (at most to the end of a term per
    /// call), as Aeron's `cleanBufferTo`: the driver calls it with
    /// `min consumer position - term_length` so a partition is clean before writers rotate into it.
    pub fn clean_to(&self, clean_position: &mut i64, target: i64) -> Result<(), ShmError> {
        if target <= *clean_position {
            return Ok(());
        }
        let term = self.partition(partition_index(*clean_position >> self.position_bits))?;
        let offset = (*clean_position & (self.term_length as i64 - 1)) as usize;
        let length = ((target - *clean_position) as u64).min((self.term_length as usize - offset) as u64) as usize;
        // Everything but the first frame length, then that length last so a reader never sees a
        // stale frame start behind zeroed bytes.
        if length > 8 {
            // A term behind the slowest reader, these lines are next written two terms from
            // now: stream the zeros past the caches (and fence them before the Release below).
            term.zero_streaming(offset + 8, length - 8)?;
        }
        term.put_i64_release(offset, 0)?;
        *clean_position += length as i64;
        Ok(())
    }

    /// Pads over a claim at `blocked_position` that its writer never committed (a client that
    /// died between claiming and committing; Aeron's `LogBufferUnblocker`), so that the frames
    /// claimed after it can be sent and read. The caller calls it only once its position has
    /// stood at `blocked_position` for the unblock timeout while `tail` (as it last took it)
    /// lay beyond. Returns the bytes padded over, 0 when there was nothing to pad.
    ///
    /// What is padded: a frame its writer began (its length still negative) by the length it
    /// claimed; else the zeroed bytes up to the next frame a writer began or committed; else,
    /// when nothing lies beyond before the term's end or the tail, up to the term's end when the
    /// tail is in a later term (the claim crossed the term's end and its writer never padded
    /// it), or up to the tail when `writers_gone` (the publication is closed: no writer can
    /// claim there any more). A frame a writer began or committed is never padded over, and
    /// `blocked_position` must be where a frame starts, found by walking the committed frames
    /// from its term's start (an IPC subscriber's position, which a client writes, is untrusted).
    pub fn unblock(&self, blocked_position: i64, tail: i64, writers_gone: bool) -> Result<usize, ShmError> {
        if tail <= blocked_position {
            return Ok(0);
        }
        let (term, offset) = self.locate(blocked_position)?;
        let length = term.get_i32_acquire(offset + frame::LENGTH)?;
        // A frame starts there when the committed frames from the term's start lead exactly there.
        let term_start = blocked_position - offset as i64;
        if length > 0 || self.try_scan_complete(term_start, blocked_position)? != blocked_position {
            return Ok(0);
        }
        let term_length = self.term_length as usize;
        let to_tail = usize::try_from(tail - blocked_position).unwrap_or(usize::MAX);
        // The tail is written by clients: only whole frame alignments count.
        let end = offset.saturating_add(to_tail).min(term_length) / FRAME_ALIGNMENT * FRAME_ALIGNMENT;
        let begun = align_frame(length.unsigned_abs() as usize);
        let pad = if length < 0 && offset + begun <= end {
            begun
        } else {
            let mut next = offset + FRAME_ALIGNMENT;
            while next < end && term.get_i32_acquire(next + frame::LENGTH)? == 0 {
                next += FRAME_ALIGNMENT;
            }
            let tail_in_later_term = offset.saturating_add(to_tail) > term_length;
            if next < end || tail_in_later_term || writers_gone {
                next.min(end) - offset
            } else {
                return Ok(0);
            }
        };
        if pad < DATA_HEADER_LENGTH {
            // Less than a frame header before a forged tail: nothing a padding frame can cover.
            return Ok(0);
        }
        self.try_fill_gap(blocked_position, pad)?;
        Ok(pad)
    }
}

/// How far ahead of its writer [`PopulateAhead`] keeps a log mapped in: the 16 pages a read
/// fault maps around itself when they exist, so a subscriber's mapping faults once per 16.
pub const POPULATE_AHEAD: i64 = 64 * 1024;
/// Bytes [`PopulateAhead::advance`] maps in per call: four pages (≈ 10 µs of allocating and
/// zeroing on the 2-core VMs of `docs/benchmarks.md`), once per 16 KiB of the stream. A 32 B
/// round trip moves 64 B each way: one in 256 round trips (0.4 %) meets a call on either
/// side, below its p99; a page per call met one in 64 (1.6 %).
const POPULATE_STEP: usize = 16 * 1024;

/// Maps a sparse log's pages in ahead of its writer during the first lap through its
/// partitions, from a cycle that had nothing else to do: otherwise the first write to each page
/// (the client's append, the receiver's rebuild) and the first read of it in every other mapping
/// take page faults on the data path, one after the other in the same message's path, every
/// 4 KiB of the stream. After a lap every page stays allocated (the log is cleaned by zeroing,
/// never given back) and this does nothing. Where populating is refused (a kernel before Linux
/// 5.14) it stops, and pages fault in as before.
#[derive(Clone, Copy, Debug)]
pub struct PopulateAhead {
    /// The position up to which the log is mapped in.
    next: i64,
    /// A lap from the first position: every byte of every partition.
    end: i64,
}

impl PopulateAhead {
    /// For `log`, whose first write is at `start`.
    pub fn new(log: &LogBuffer, start: i64) -> Self {
        let lap = PARTITION_COUNT as i64 * i64::from(log.term_length);
        // From the step `start` lies in (terms are whole steps, so positions and addresses are
        // aligned alike): every call maps in one whole step, or nothing.
        let first = start - start.rem_euclid(POPULATE_STEP as i64);
        PopulateAhead { next: first, end: first.saturating_add(lap) }
    }

    /// Maps in the next `POPULATE_STEP` bytes if they start below `position +
    /// POPULATE_AHEAD` (`position`: where the writer is); returns the bytes mapped in (0: far
    /// enough ahead, or done). A call that maps nothing makes no system call.
    pub fn advance(&mut self, log: &LogBuffer, position: i64) -> usize {
        let target = position.saturating_add(POPULATE_AHEAD).min(self.end);
        if target <= self.next {
            return 0;
        }
        // `next` is on a step, and a term is whole steps: the step lies in one term.
        let populated = log.locate(self.next).and_then(|(term, offset)| term.populate_for_write(offset, POPULATE_STEP));
        match populated {
            Ok(()) => {
                self.next += POPULATE_STEP as i64;
                POPULATE_STEP
            }
            Err(_) => {
                self.next = self.end;
                0
            }
        }
    }
}

/// How often [`LogBuffer::check_tails`] reads the counters again when writers rotate the log
/// while it checks them.
const TAIL_CHECK_ATTEMPTS: u32 = 3;

/// Bytes the reader copies out of the mapping per run of committed frames (fits the L1/L2 cache).
pub const READ_CHUNK: usize = 64 * 1024;
/// The start of a claim on the term tail ([`LogBuffer::claim_start`]).
struct ClaimStart {
    term_count: i32,
    partition: usize,
    tail_counter: usize,
    /// Term offset of the tail as read before the claim.
    offset: u32,
    /// Stream position of `offset`.
    position: i64,
}

/// Cache line size the appender prefetches by.
const CACHE_LINE: usize = 64;
/// Frames a read run must already have found committed before the reader fetches lines ahead of
/// it. A reader that has caught up would fetch the lines the publisher is about to write, and
/// every such line would then cross between the two cores once more before the publisher's write
/// completes (one message per `offer` at 32 B: 17 → 22-24 M msg/s without that prefetch,
/// `docs/benchmarks.md`, "Media driver"); a reader that finds a long run committed is behind, and
/// the lines ahead are committed too.
const READ_PREFETCH_AFTER: usize = 16;
/// How far ahead of the frame it scans a reader that is behind fetches lines.
const READ_PREFETCH_DISTANCE: usize = 4 * CACHE_LINE;

/// Shortest distance ahead of its writes at which the appender fetches lines for writing.
const LOOKAHEAD_MIN: usize = 4 * CACHE_LINE;
/// Longest such distance.
const LOOKAHEAD_MAX: usize = 64 * CACHE_LINE;

/// How far ahead of a write of `length` bytes the appender fetches the lines it will write next:
/// two such writes, between [`LOOKAHEAD_MIN`] and [`LOOKAHEAD_MAX`]. The lines were last written
/// by the cleaner a term ago and are usually not cached; a write waits for them (the next
/// claim's atomic add waits for every earlier store), so they are fetched early enough to arrive
/// while the writes before them are made (`docs/benchmarks.md`, "Media driver": 1 KiB offers).
///
/// The reader prefetches only far behind the publisher ([`READ_PREFETCH_AFTER`]).
#[inline]
fn lookahead(length: usize) -> usize {
    length.saturating_mul(2).clamp(LOOKAHEAD_MIN, LOOKAHEAD_MAX)
}

/// Before a write of `length` bytes at `offset` of `term`: fetches for writing the lines that
/// enter the look-ahead window with it (the window, [`lookahead`] bytes after the write, slides
/// on by `length`), so that in the steady state every line is fetched once, that far ahead of its
/// write (lines past the term's end are skipped).
#[inline]
fn prefetch_ahead(term: &Region, offset: usize, length: usize) {
    let entering = length.min(lookahead(length));
    let from = offset.saturating_add(length).saturating_add(lookahead(length) - entering);
    prefetch_lines(term, from, entering);
}

/// Before one frame of `aligned` bytes is written at `term_offset` of `term`: the first lines
/// after it, every time (a reader that has caught up spins on the next frame's first line and
/// takes it back; fetching it again now means the next offer's stores find it: 32 B offers,
/// 23 → 27-29 M msg/s against fetching it once), then, for frames longer than that window, the
/// lines entering the look-ahead window.
#[inline]
fn prefetch_after_frame(term: &Region, term_offset: usize, aligned: usize) {
    prefetch_lines(term, term_offset + aligned, LOOKAHEAD_MIN);
    if lookahead(aligned) > LOOKAHEAD_MIN {
        prefetch_ahead(term, term_offset, aligned);
    }
}

/// Fetches for writing the lines of `[from, from + length)` of `term` (lines past the term's end
/// are skipped).
#[inline]
fn prefetch_lines(term: &Region, from: usize, length: usize) {
    let end = from.saturating_add(length);
    let mut line = from & !(CACHE_LINE - 1);
    while line < end {
        term.prefetch_write(line);
        line += CACHE_LINE;
    }
}

/// Frame type of the committed frame at `offset` of `reader` (bytes 6..8: one 4-byte load of
/// version, flags and type).
#[inline]
fn frame_type(reader: &RegionReader<'_>, offset: usize) -> Result<i16, ShmError> {
    let word = reader.get_i32(offset + 4)?.to_le_bytes();
    Ok(i16::from_le_bytes([word[2], word[3]]))
}

/// The only term length a file of `region`'s size and page size can hold: the file is
/// `align(3 * term + 4096, page)`, so the term length is the largest power of two with
/// `3 * term + 4096 <= len`.
fn find_term_length(region: &Region) -> Option<u32> {
    let len = region.capacity();
    let mut term = MAX_TERM_LENGTH;
    while term >= MIN_TERM_LENGTH {
        let needed = (term as usize).checked_mul(PARTITION_COUNT)?.checked_add(LOG_META_DATA_LENGTH)?;
        if needed <= len && len - needed < (term as usize) {
            return Some(term);
        }
        term /= 2;
    }
    None
}

/// The DATA header every frame of a log starts from.
pub fn default_header(session_id: i32, stream_id: i32) -> [u8; DATA_HEADER_LENGTH] {
    let mut header = [0u8; DATA_HEADER_LENGTH];
    header[4] = crate::wire::CURRENT_VERSION;
    header[frame::FLAGS] = flags::UNFRAGMENTED;
    header[frame::TYPE..frame::TYPE + 2].copy_from_slice(&FrameType::Data.code().to_le_bytes());
    header[frame::SESSION_ID..frame::SESSION_ID + 4].copy_from_slice(&session_id.to_le_bytes());
    header[frame::STREAM_ID..frame::STREAM_ID + 4].copy_from_slice(&stream_id.to_le_bytes());
    header
}

/// Where `position` lies: its partition and its offset within the term.
impl LogBuffer {
    fn locate(&self, position: i64) -> Result<(&Region, usize), ShmError> {
        let term = self.partition(partition_index(position >> self.position_bits))?;
        Ok((term, (position & (self.term_length as i64 - 1)) as usize))
    }

    /// Frame length and type at `offset` of `term` (0 length: nothing written there).
    fn frame_at(term: &Region, offset: usize) -> Result<(i32, i16), ShmError> {
        let length = term.get_i32_acquire(offset + frame::LENGTH)?;
        let word = term.get_i32(offset + 4)?.to_le_bytes();
        Ok((length, i16::from_le_bytes([word[2], word[3]])))
    }

    fn try_scan_datagram(&self, position: i64, max: usize, out: &mut [u8]) -> Result<(usize, i64), ShmError> {
        let (term, start) = self.locate(position)?;
        let (available, padding) = self.scan(position, max.min(out.len()))?;
        if available == 0 {
            return Ok((0, 0));
        }
        term.get_bytes(start, &mut out[..available])?;
        Ok((available, (available + padding) as i64))
    }

    fn try_scan_frames(&self, position: i64, max: usize) -> Result<(usize, i64), ShmError> {
        let (available, padding) = self.scan(position, max)?;
        Ok(if available == 0 { (0, 0) } else { (available, (available + padding) as i64) })
    }

    /// The address of the `length` bytes of the log from `position` on, which must lie within
    /// one term (what [`crate::logbuffer::SenderLog::scan_frames`] named), for a send from the
    /// log as it lies. Valid while this log lives; never made into a Rust reference (clients
    /// may write the mapping concurrently).
    pub fn address_of(&self, position: i64, length: usize) -> Result<*const u8, ShmError> {
        let (term, offset) = self.locate(position)?;
        term.address_of(offset, length)
    }

    fn try_insert(&self, position: i64, datagram: &[u8]) -> Result<(), ShmError> {
        let (term, offset) = self.locate(position)?;
        let length = datagram.len().min(self.term_length as usize - offset);
        if length < 4 {
            return Ok(());
        }
        // The body first, the first frame's length last (Release): a subscriber reading this log
        // concurrently never sees a frame before its bytes.
        term.put_bytes(offset + 4, &datagram[4..length])?;
        let first = i32::from_le_bytes([datagram[0], datagram[1], datagram[2], datagram[3]]);
        term.put_i32_release(offset, first)
    }

    fn try_scan_complete(&self, position: i64, limit: i64) -> Result<i64, ShmError> {
        let term_length = self.term_length as i64;
        let (term, start) = self.locate(position)?;
        let start = start as i64;
        let end = (start + (limit - position)).min(term_length);
        let mut offset = start;
        while offset < end {
            let (frame_length, frame_type) = Self::frame_at(term, offset as usize)?;
            if frame_length <= 0 {
                break;
            }
            let aligned = align_frame(frame_length as usize) as i64;
            offset += if frame_type == FrameType::Pad.code() { aligned.min(term_length - offset) } else { aligned };
        }
        Ok(position + (offset.min(term_length) - start))
    }

    fn try_find_gap(&self, position: i64, limit: i64) -> Result<Option<(i64, usize)>, ShmError> {
        let complete = self.try_scan_complete(position, limit)?;
        if complete >= limit {
            return Ok(None);
        }
        let (term, start) = self.locate(complete)?;
        let start = start as i64;
        let end = (start + (limit - complete)).min(self.term_length as i64);
        let mut offset = start;
        while offset < end && term.get_i32_acquire(offset as usize)? == 0 {
            offset += crate::logbuffer::position::FRAME_ALIGNMENT as i64;
        }
        let length = (offset.min(end) - start) as usize;
        Ok((length > 0).then_some((complete, length)))
    }

    fn try_fill_gap(&self, position: i64, length: usize) -> Result<(), ShmError> {
        let (term, offset) = self.locate(position)?;
        if offset + DATA_HEADER_LENGTH > self.term_length as usize {
            return Ok(());
        }
        let term_id = self.initial_term_id.wrapping_add((position >> self.position_bits) as i32);
        let mut header = self.default_header;
        header[frame::FLAGS] = flags::UNFRAGMENTED;
        header[frame::TYPE..frame::TYPE + 2].copy_from_slice(&FrameType::Pad.code().to_le_bytes());
        header[frame::TERM_OFFSET..frame::TERM_OFFSET + 4].copy_from_slice(&(offset as i32).to_le_bytes());
        header[frame::TERM_ID..frame::TERM_ID + 4].copy_from_slice(&term_id.to_le_bytes());
        term.put_bytes(offset + 4, &header[4..])?;
        term.put_i32_release(offset, i32::try_from(length).unwrap_or(i32::MAX))
    }
}

/// The media driver's sender reads a network publication's shared log (clients append to it).
impl crate::logbuffer::SenderLog for LogBuffer {
    fn max_message_length(&self) -> usize {
        LogBuffer::max_message_length(self)
    }

    fn append(&mut self, payload: &[u8], reserved_value: i64, limit: i64) -> Offer {
        self.offer(payload, reserved_value, limit).unwrap_or(Offer::AdminAction)
    }

    fn scan_datagram(&self, position: i64, max: usize, out: &mut [u8]) -> (usize, i64) {
        // A log that cannot be read (a corrupt frame a client wrote) sends nothing.
        self.try_scan_datagram(position, max, out).unwrap_or((0, 0))
    }

    fn scan_frames(&self, position: i64, max: usize) -> (usize, i64) {
        // As `scan_datagram`: a log that cannot be read sends nothing.
        self.try_scan_frames(position, max).unwrap_or((0, 0))
    }

    fn unblock(&mut self, position: i64, tail: i64, writers_gone: bool) -> usize {
        LogBuffer::unblock(self, position, tail, writers_gone).unwrap_or(0)
    }
}

/// The media driver's receiver writes an image's shared log (subscribers read it).
impl crate::logbuffer::ReceiverLog for LogBuffer {
    fn insert(&mut self, position: i64, datagram: &[u8]) {
        let _ = self.try_insert(position, datagram);
    }

    fn scan_complete(&self, position: i64, limit: i64) -> i64 {
        self.try_scan_complete(position, limit).unwrap_or(position)
    }

    fn find_gap(&self, position: i64, limit: i64) -> Option<(i64, usize)> {
        self.try_find_gap(position, limit).unwrap_or(None)
    }

    fn fill_gap(&mut self, position: i64, length: usize) {
        let _ = self.try_fill_gap(position, length);
    }

    fn clean_to(&mut self, clean_position: &mut i64, target: i64) {
        let start = *clean_position;
        if LogBuffer::clean_to(self, clean_position, target).is_err() || *clean_position <= start {
            *clean_position = target.max(start);
        }
    }

    fn read_frames(
        &self,
        position: i64,
        fragment_limit: usize,
        handler: &mut dyn FnMut(&DataHeader, &[u8], i64),
    ) -> i64 {
        let LogIdentity { session_id, stream_id } = self.identity();
        let mut scratch = Vec::new();
        let mut consumed = position;
        let read = self.read(position, fragment_limit, &mut scratch, |fragment, payload| {
            let frame_length = DATA_HEADER_LENGTH + payload.len();
            consumed = fragment.position + align_frame(frame_length) as i64;
            let header = DataHeader {
                frame_length: frame_length as i32,
                flags: fragment.flags,
                frame_type: FrameType::Data,
                term_offset: fragment.term_offset as i32,
                session_id,
                stream_id,
                term_id: fragment.term_id,
                reserved_value: fragment.reserved_value,
            };
            handler(&header, payload, consumed);
        });
        // A frame that cannot be read stops the reader after the frames it delivered.
        read.unwrap_or(consumed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::test_support::tempdir;

    pub(super) fn params(term_length: u32) -> LogParams {
        LogParams {
            term_length,
            mtu: 1408,
            page_size: 4096,
            initial_term_id: 7,
            session_id: 11,
            stream_id: 1001,
            correlation_id: 3,
        }
    }

    /// Every byte of the three terms and the metadata.
    pub(super) fn log_bytes(log: &LogBuffer) -> Vec<u8> {
        let mut bytes = vec![0u8; log.metadata().capacity()];
        log.metadata().get_bytes(0, &mut bytes).unwrap();
        for index in 0..PARTITION_COUNT {
            let term = log.term(index).unwrap();
            let mut part = vec![0u8; term.capacity()];
            term.get_bytes(0, &mut part).unwrap();
            bytes.extend_from_slice(&part);
        }
        bytes
    }

    /// Claims `length` bytes on the active partition's tail and writes nothing there, as a client
    /// that died right after its claim did; returns where the claim starts.
    fn claim_and_die(log: &LogBuffer, length: i64) -> i64 {
        let partition = partition_index(i64::from(log.active_term_count().unwrap()));
        let before = log.tail_position().unwrap();
        log.metadata().get_and_add_i64(meta::TERM_TAIL_COUNTERS + 8 * partition, length).unwrap();
        before
    }

    /// The payloads a reader gets from `from` on, and where it stops.
    fn payloads_from(log: &LogBuffer, from: i64) -> (Vec<Vec<u8>>, i64) {
        let (frames, end) = read_all(log, from);
        (frames.into_iter().map(|(_, payload)| payload).collect(), end)
    }

    fn appended(log: &LogBuffer, payload: &[u8]) -> i64 {
        match log.offer(payload, 0, i64::MAX).unwrap() {
            Offer::Appended(position) => position,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claim_never_committed_is_padded_over_up_to_the_next_frame_and_the_frames_after_it_are_read() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let first = appended(&log, &[1; 100]);
        let dead = claim_and_die(&log, 1056);
        let last = appended(&log, &[2; 100]);
        assert_eq!(payloads_from(&log, 0), (vec![vec![1; 100]], first), "the reader stops at the claim");
        assert_eq!(log.unblock(first + 1056, last, false).unwrap(), 0, "a committed frame is left alone");
        assert_eq!(log.unblock(dead, last, false).unwrap(), 1056);
        assert_eq!(payloads_from(&log, 0), (vec![vec![1; 100], vec![2; 100]], last));
        assert_eq!(log.unblock(dead, last, false).unwrap(), 0, "padded once");
    }

    #[test]
    fn a_position_inside_a_committed_frame_is_never_padded_even_where_its_bytes_are_zero() {
        // An IPC subscriber's position is written by a client: one pointing into a frame of
        // zeros must not make the driver write a padding header over the frame's payload.
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let end = appended(&log, &[0; 1000]);
        claim_and_die(&log, 64);
        let tail = log.tail_position().unwrap();
        for inside in [32, 64, 512, end - 32] {
            assert_eq!(log.unblock(inside, tail, true).unwrap(), 0, "at {inside}");
        }
        assert_eq!(payloads_from(&log, 0), (vec![vec![0; 1000]], end));
        assert_eq!(log.unblock(end, tail, true).unwrap(), 64, "the frame's end is a frame start");
    }

    #[test]
    fn a_forged_tail_inside_a_frame_alignment_pads_nothing_and_whole_alignments_only() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        assert_eq!(log.unblock(0, 8, true).unwrap(), 0, "less than a frame header");
        assert_eq!(log.unblock(0, 100, true).unwrap(), 96, "cut to whole alignments");
        assert_eq!(read_all(&log, 0), (vec![], 96));
    }

    #[test]
    fn a_frame_its_writer_began_is_padded_over_by_the_length_it_claimed() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let dead = claim_and_die(&log, 1056);
        // The writer's first store: its frame length, negative until it commits (1,032 bytes).
        log.term(0).unwrap().put_i32_release(0, -1032).unwrap();
        assert_eq!(log.unblock(dead, 1056, false).unwrap(), 1056, "nothing after it, yet its length is known");
        let last = appended(&log, &[3; 10]);
        assert_eq!(payloads_from(&log, 0), (vec![vec![3; 10]], last));
    }

    #[test]
    fn a_claim_at_the_tail_is_padded_over_only_once_the_publication_is_closed() {
        // Zeroed bytes up to the tail may be a live writer's claim it has not begun to write:
        // they are padded only once no writer can claim any more.
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let first = appended(&log, &[1; 100]);
        let dead = claim_and_die(&log, 2112);
        let tail = log.tail_position().unwrap();
        assert_eq!(log.unblock(dead, tail, false).unwrap(), 0);
        assert_eq!(log.unblock(dead, tail, true).unwrap(), 2112);
        assert_eq!(payloads_from(&log, 0), (vec![vec![1; 100]], tail));
        assert_eq!(first, dead);
    }

    #[test]
    fn a_claim_across_the_term_end_never_padded_is_padded_to_the_end_once_the_log_moved_on() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let term = 64 * 1024;
        while log.tail_position().unwrap() + 2 * 1056 < term {
            appended(&log, &[1; 1000]);
        }
        let committed = log.tail_position().unwrap();
        // The claim crosses the term's end; its writer dies before padding the term.
        let dead = claim_and_die(&log, 2 * 1056 + 64);
        assert_eq!(dead, committed);
        assert_eq!(log.unblock(dead, term, false).unwrap(), 0, "the tail has not left the term");
        // The next writer finds the term ended and rotates into the next one.
        assert_eq!(log.offer(&[2; 100], 0, i64::MAX).unwrap(), Offer::AdminAction);
        let last = appended(&log, &[2; 100]);
        assert!(last > term);
        assert_eq!(log.unblock(dead, last, false).unwrap(), (term - dead) as usize);
        let (payloads, end) = payloads_from(&log, dead);
        assert_eq!((payloads, end), (vec![vec![2; 100]], last));
    }

    #[test]
    fn a_single_offer_writes_exactly_what_a_batch_of_one_writes() {
        // `offer` takes the one-frame appender directly; `offer_batch` of one message goes
        // through `append`. Same messages (one frame, exactly the largest unfragmented payload,
        // fragmented ones), through back pressure, padding and rotation: the same outcomes and
        // the same bytes, metadata included.
        let single = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let batch = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let max_unfragmented = single.mtu() as usize - DATA_HEADER_LENGTH;
        let lengths = [0, 1, 32, 100, max_unfragmented, max_unfragmented + 1, 3 * max_unfragmented + 7];
        let (mut cleaned, mut limit) = ([0i64; 2], 0);
        let mut rotations = 0;
        for round in 0..2_000usize {
            let payload = vec![round as u8; lengths[round % lengths.len()]];
            if round % 97 == 0 {
                // Back pressure now and then: the limit moves only every 97 offers.
                let tail = single.tail_position().unwrap();
                limit = tail + single.publication_window();
                for (log, clean) in [&single, &batch].into_iter().zip(&mut cleaned) {
                    let target = tail - log.term_length() as i64;
                    while *clean < target {
                        log.clean_to(clean, target).unwrap();
                    }
                }
            }
            let a = single.offer(&payload, round as i64, limit).unwrap();
            let (taken, b) = batch.offer_batch(&[&payload], round as i64, limit).unwrap();
            assert_eq!(a, b, "outcome of offer {round} ({} bytes)", payload.len());
            assert_eq!(taken, usize::from(matches!(b, Offer::Appended(_))));
            rotations += usize::from(a == Offer::AdminAction);
        }
        assert!(rotations >= 3, "must rotate through the partitions, rotated {rotations} times");
        assert!(log_bytes(&single) == log_bytes(&batch), "the logs differ");
        let too_long = vec![0u8; single.max_message_length() + 1];
        let expected = format!("{:?}", batch.offer_batch(&[&too_long], 0, i64::MAX).unwrap_err());
        assert_eq!(format!("{:?}", single.offer(&too_long, 0, i64::MAX).unwrap_err()), expected);
    }

    #[test]
    fn appended_messages_are_read_back_in_order_across_term_rotation() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let (mut clean, mut read_position) = (0, 0);
        let mut scratch = Vec::new();
        let (mut sent, mut received) = (0u32, 0u32);
        let mut attempts = 0;
        while sent < 5_000 && attempts < 20_000 {
            attempts += 1;
            let payload = sent.to_le_bytes().repeat(1 + sent as usize % 50);
            log.clean_to(&mut clean, read_position - log.term_length() as i64).unwrap();
            match log.offer(&payload, 0, read_position + log.publication_window()).unwrap() {
                Offer::Appended(_) => sent += 1,
                Offer::AdminAction | Offer::BackPressured => {}
                Offer::MaxPositionExceeded => panic!("max position"),
            }
            read_position = log
                .read(read_position, usize::MAX, &mut scratch, |_, p| {
                    assert_eq!(p, received.to_le_bytes().repeat(1 + received as usize % 50));
                    received += 1;
                })
                .unwrap();
        }
        assert_eq!((sent, received), (5_000, 5_000));
        assert!(read_position > 3 * 64 * 1024, "must rotate through all partitions, end {read_position}");
        assert_eq!(read_position, log.tail_position().unwrap());
    }

    #[test]
    fn a_log_created_at_a_start_position_appends_there_and_rotates_through_every_partition() {
        // unicast_rollover.json's start: initial term id 100, term 102 at 63488 (64 KiB terms),
        // 2048 bytes before the term end.
        let params = LogParams { initial_term_id: 100, ..params(64 * 1024) };
        let log = LogBuffer::anonymous_at(&params, LogStart { term_id: 102, term_offset: 63488 }).unwrap();
        let start = 2 * 65536 + 63488;
        assert_eq!((log.initial_term_id(), log.active_term_count().unwrap()), (100, 2));
        assert_eq!(log.raw_tail(2).unwrap(), pack_tail(102, 63488));
        // The partitions after the active one expect the ids rotation will look for.
        assert_eq!((tail_term_id(log.raw_tail(0).unwrap()), tail_term_id(log.raw_tail(1).unwrap())), (100, 101));
        assert_eq!(log.tail_position().unwrap(), start);
        assert_eq!(log.offer(&[1; 100], 0, start).unwrap(), Offer::BackPressured);
        // 1000-byte messages (1056 framed): the second one does not fit the term and rotates.
        let (mut clean, mut read_position) = (start, start);
        let mut scratch = Vec::new();
        let (mut sent, mut received) = (0u32, 0u32);
        let mut attempts = 0;
        while received < 400 && attempts < 10_000 {
            attempts += 1;
            log.clean_to(&mut clean, read_position - log.term_length() as i64).unwrap();
            if sent < 400 {
                let payload = sent.to_le_bytes().repeat(250);
                match log.offer(&payload, 0, read_position + log.publication_window()).unwrap() {
                    Offer::Appended(end) => {
                        if sent == 0 {
                            assert_eq!(end, start + 1056);
                        }
                        sent += 1;
                    }
                    Offer::AdminAction | Offer::BackPressured => {}
                    Offer::MaxPositionExceeded => panic!("max position"),
                }
            }
            read_position = log
                .read(read_position, usize::MAX, &mut scratch, |_, p| {
                    assert_eq!(p, received.to_le_bytes().repeat(250), "message {received}");
                    received += 1;
                })
                .unwrap();
        }
        assert_eq!(received, 400);
        assert!(read_position > start + 3 * 65536, "rotated through every partition: {read_position}");
        assert_eq!(read_position, log.tail_position().unwrap());
    }

    #[test]
    fn a_start_position_that_does_not_fit_is_refused() {
        let params = LogParams { initial_term_id: 100, ..params(64 * 1024) };
        for (term_id, term_offset, why) in [
            (99, 0, "more than 2^31 - 1 terms"),
            (100, 33, "multiple of the frame alignment"),
            (100, 65568, "must not exceed the term length"),
            (100, u32::MAX, "multiple of the frame alignment"),
        ] {
            let error = LogBuffer::anonymous_at(&params, LogStart { term_id, term_offset }).unwrap_err();
            assert!(error.to_string().contains(why), "{term_id} {term_offset}: {error}");
        }
        // A full term is a legal start (Aeron's rule): the first append rotates.
        let log = LogBuffer::anonymous_at(&params, LogStart { term_id: 100, term_offset: 65536 }).unwrap();
        assert_eq!(log.tail_position().unwrap(), 65536);
        assert_eq!(log.offer(&[1; 10], 0, i64::MAX).unwrap(), Offer::AdminAction);
        assert_eq!(log.offer(&[1; 10], 0, i64::MAX).unwrap(), Offer::Appended(65536 + 64));
    }

    #[test]
    fn offer_at_the_limit_is_back_pressured() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        assert_eq!(log.offer(&[1; 100], 0, 0).unwrap(), Offer::BackPressured);
        assert_eq!(log.offer(&[1; 100], 0, 1).unwrap(), Offer::Appended(160));
        assert_eq!(log.offer(&[1; 100], 0, 160).unwrap(), Offer::BackPressured);
    }

    #[test]
    fn offers_at_the_end_of_the_last_addressable_term_report_the_max_position_and_do_not_rotate() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        // The last term a position can address (term count i32::MAX), 96 bytes short of its end.
        let term_count = i32::MAX;
        let partition = partition_index(i64::from(term_count));
        let term_id = 7i32.wrapping_add(term_count);
        let tail = meta::TERM_TAIL_COUNTERS + 8 * partition;
        log.metadata().put_i64(tail, pack_tail(term_id, 64 * 1024 - 96)).unwrap();
        log.metadata().put_i32(meta::ACTIVE_TERM_COUNT, term_count).unwrap();
        let short: &[u8] = &[1; 10]; // 64 bytes framed
        let long = vec![2u8; 3000]; // fragmented: the batch appender's path
        assert_eq!(log.offer(short, 0, i64::MAX).unwrap(), Offer::Appended(log.max_position() - 32));
        assert_eq!(log.offer(short, 0, i64::MAX).unwrap(), Offer::MaxPositionExceeded);
        assert_eq!(log.offer(&long, 0, i64::MAX).unwrap(), Offer::MaxPositionExceeded);
        assert_eq!(log.offer_batch(&[short, short], 0, i64::MAX).unwrap(), (0, Offer::MaxPositionExceeded));
        assert_eq!(log.offer(short, 0, 1).unwrap(), Offer::MaxPositionExceeded);
        assert_eq!(log.active_term_count().unwrap(), term_count, "the last term is not rotated out of");
        assert_eq!(log.tail_position().unwrap(), log.max_position());
        // The 32 bytes left after the first frame were padded, so a reader reaches the end.
        let mut scratch = Vec::new();
        let from = log.max_position() - 96;
        let (mut frames, mut position) = (0, from);
        for _ in 0..3 {
            position = log.read(position, usize::MAX, &mut scratch, |_, _| frames += 1).unwrap();
        }
        assert_eq!((frames, position), (1, log.max_position()));
    }

    #[test]
    fn large_messages_are_fragmented_with_begin_and_end_flags() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let payload: Vec<u8> = (0..4000u32).map(|i| i as u8).collect();
        assert!(matches!(log.offer(&payload, 9, i64::MAX).unwrap(), Offer::Appended(_)));
        let mut scratch = Vec::new();
        let mut frames = Vec::new();
        log.read(0, usize::MAX, &mut scratch, |h, p| frames.push((h.flags, h.reserved_value, p.to_vec()))).unwrap();
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[0].0, flags::BEGIN);
        assert_eq!(frames[1].0, 0);
        assert_eq!(frames[2].0, flags::END);
        assert!(frames.iter().all(|f| f.1 == 9));
        let joined: Vec<u8> = frames.into_iter().flat_map(|f| f.2).collect();
        assert_eq!(joined, payload);
        let max = log.max_message_length();
        let tail = log.tail_position().unwrap();
        let too_long = vec![0; max + 1];
        match log.offer(&too_long, 0, i64::MAX) {
            Err(ShmError::Parameter(message)) => assert_eq!(
                message,
                format!(
                    "message of {} bytes exceeds the maximum of {max} for term length {}",
                    max + 1,
                    log.term_length()
                )
            ),
            other => panic!("a message one byte over the maximum: {other:?}"),
        }
        assert_eq!(log.tail_position().unwrap(), tail, "nothing is appended");
    }

    #[test]
    fn a_frame_in_progress_is_not_read_and_not_scanned() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        log.offer(&[5; 40], 0, i64::MAX).unwrap();
        // Simulate a writer that has claimed and not yet committed the second frame.
        let term = log.term(0).unwrap();
        term.put_i32_release(96, -64).unwrap();
        let mut scratch = Vec::new();
        let mut count = 0;
        let position = log.read(0, usize::MAX, &mut scratch, |_, _| count += 1).unwrap();
        assert_eq!((count, position), (1, 96));
        assert_eq!(log.scan(0, 4096).unwrap(), (96, 0));
    }

    #[test]
    fn a_corrupt_frame_length_is_an_error_not_a_panic() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let term = log.term(0).unwrap();
        term.put_i32_release(0, 70_000).unwrap();
        let mut scratch = Vec::new();
        assert!(matches!(log.read(0, 10, &mut scratch, |_, _| {}), Err(ShmError::Corrupt { .. })));
        term.put_i32_release(0, 8).unwrap();
        assert!(matches!(log.scan(0, 4096), Err(ShmError::Corrupt { .. })));
    }

    #[test]
    fn the_term_end_is_padded_and_the_scanner_reports_the_padding() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let payload = [1u8; 1000];
        let mut position = 0;
        for _ in 0..200 {
            match log.offer(&payload, 0, i64::MAX).unwrap() {
                Offer::Appended(p) => position = p,
                Offer::AdminAction => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(log.active_term_count().unwrap(), 1);
        let (available, padding) = log.scan(position, 64 * 1024).unwrap();
        assert_eq!(available, DATA_HEADER_LENGTH);
        assert_eq!(position as usize + DATA_HEADER_LENGTH + padding, 64 * 1024);
        assert_eq!(log.tail_position().unwrap(), 64 * 1024);
    }

    pub(super) fn numbered(count: u32, length: usize) -> Vec<Vec<u8>> {
        (0..count).map(|i| i.to_le_bytes().iter().copied().cycle().take(length.max(4)).collect()).collect()
    }

    pub(super) fn read_all(log: &LogBuffer, from: i64) -> (Vec<(u8, Vec<u8>)>, i64) {
        let mut scratch = Vec::new();
        let mut frames = Vec::new();
        let mut position = from;
        loop {
            let next = log.read(position, usize::MAX, &mut scratch, |h, p| frames.push((h.flags, p.to_vec()))).unwrap();
            if next == position {
                return (frames, position);
            }
            position = next;
        }
    }

    #[test]
    fn a_batch_is_appended_with_one_claim_and_read_back_in_order() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let messages = numbered(100, 40);
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        let (taken, outcome) = log.offer_batch(&slices, 5, i64::MAX).unwrap();
        assert_eq!((taken, outcome), (100, Offer::Appended(100 * 96)));
        assert_eq!(log.tail_position().unwrap(), 100 * 96);
        let (frames, end) = read_all(&log, 0);
        assert_eq!(end, 100 * 96);
        let payloads: Vec<Vec<u8>> = frames.iter().map(|f| f.1.clone()).collect();
        assert_eq!(payloads, messages);
        assert!(frames.iter().all(|f| f.0 == flags::UNFRAGMENTED));
        // Same frames as one offer each: header fields included.
        let single = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        for message in &messages {
            single.offer(message, 5, i64::MAX).unwrap();
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        log.term(0).unwrap().read_into(0, 100 * 96, &mut a).unwrap();
        single.term(0).unwrap().read_into(0, 100 * 96, &mut b).unwrap();
        assert_eq!(a, b, "a batch writes exactly the frames single offers write");
    }

    #[test]
    fn a_batch_stops_at_the_publisher_limit_but_takes_at_least_one_message() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let messages = numbered(10, 100); // 160 bytes framed
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        assert_eq!(log.offer_batch(&slices, 0, 0).unwrap(), (0, Offer::BackPressured));
        assert_eq!(log.offer_batch(&slices, 0, 1).unwrap(), (1, Offer::Appended(160)));
        assert_eq!(log.offer_batch(&slices[1..], 0, 160 + 3 * 160).unwrap(), (3, Offer::Appended(640)));
        assert_eq!(log.offer_batch(&slices[4..], 0, 640 + 3 * 160 - 1).unwrap(), (2, Offer::Appended(960)));
        assert_eq!(log.offer_batch(&[], 0, 0).unwrap(), (0, Offer::Appended(960)));
        let (frames, _) = read_all(&log, 0);
        assert_eq!(frames.into_iter().map(|f| f.1).collect::<Vec<_>>(), messages[..6].to_vec());
    }

    #[test]
    fn a_batch_fills_the_term_then_the_rest_follows_after_the_rotation() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let messages = numbered(1500, 60); // 96 bytes framed: 682 fit a term
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        let mut taken = 0;
        let mut admin = 0;
        while taken < slices.len() {
            let (n, outcome) = log.offer_batch(&slices[taken..], 0, i64::MAX).unwrap();
            taken += n;
            match outcome {
                Offer::Appended(_) => assert!(n > 0),
                Offer::AdminAction => admin += 1,
                other => panic!("{other:?}"),
            }
            assert!(admin < 10);
        }
        assert_eq!(admin, 2, "two term ends: padding and rotation each time");
        let (frames, end) = read_all(&log, 0);
        assert_eq!(end, log.tail_position().unwrap());
        assert!(end > 2 * 64 * 1024);
        assert_eq!(frames.into_iter().map(|f| f.1).collect::<Vec<_>>(), messages);
    }

    #[test]
    fn a_batch_fragments_long_messages_and_refuses_too_long_ones_whole() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let long: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let short = b"short".to_vec();
        let (taken, _) = log.offer_batch(&[&short, &long, &short], 3, i64::MAX).unwrap();
        assert_eq!(taken, 3);
        let (frames, _) = read_all(&log, 0);
        let kinds: Vec<u8> = frames.iter().map(|f| f.0).collect();
        assert_eq!(kinds, [flags::UNFRAGMENTED, flags::BEGIN, 0, flags::END, flags::UNFRAGMENTED]);
        let joined: Vec<u8> = frames[1..4].iter().flat_map(|f| f.1.clone()).collect();
        assert_eq!(joined, long);
        let tail = log.tail_position().unwrap();
        let too_long = vec![0; log.max_message_length() + 1];
        assert!(matches!(log.offer_batch(&[&short, &too_long], 0, i64::MAX), Err(ShmError::Parameter(_))));
        assert_eq!(log.tail_position().unwrap(), tail, "nothing of a refused batch is appended");
    }

    #[test]
    fn a_reader_stops_inside_a_batch_at_the_first_frame_not_committed() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let messages = numbered(4, 40);
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        log.offer_batch(&slices, 0, i64::MAX).unwrap();
        // The third frame of the claim still in progress (negative length): the reader delivers
        // the first two only, and the fourth after the third is committed.
        let term = log.term(0).unwrap();
        term.put_i32_release(2 * 96, -72).unwrap();
        let (frames, end) = read_all(&log, 0);
        assert_eq!((frames.len(), end), (2, 2 * 96));
        term.put_i32_release(2 * 96, 72).unwrap();
        let (frames, end) = read_all(&log, end);
        assert_eq!((frames.len(), end), (2, 4 * 96));
        assert_eq!(frames[1].1, messages[3]);
    }

    #[test]
    fn reads_in_runs_respect_the_fragment_limit_and_cross_many_runs() {
        let log = LogBuffer::anonymous(&params(1 << 20)).unwrap();
        let messages = numbered(3000, 200); // 256 bytes framed: 750 KiB, several read runs
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        assert_eq!(log.offer_batch(&slices, 0, i64::MAX).unwrap().0, 3000);
        let mut scratch = Vec::new();
        let mut got = Vec::new();
        let position = log.read(0, 7, &mut scratch, |h, p| got.push((h.position, p.to_vec()))).unwrap();
        assert_eq!((got.len(), position), (7, 7 * 256));
        assert_eq!(got[6].0, 6 * 256);
        let position = log.read(position, usize::MAX, &mut scratch, |h, p| got.push((h.position, p.to_vec()))).unwrap();
        assert_eq!(position, 3000 * 256);
        assert_eq!(got.into_iter().map(|g| g.1).collect::<Vec<_>>(), messages);
    }

    #[test]
    fn open_validates_the_file() {
        let dir = tempdir();
        let path = dir.join("log");
        let log = LogBuffer::create(&path, &params(64 * 1024)).unwrap();
        log.offer(b"persisted", 0, i64::MAX).unwrap();
        let reopened = LogBuffer::open(&path).unwrap();
        assert_eq!(reopened.tail_position().unwrap(), 64);
        assert_eq!(reopened.initial_term_id(), 7);
        // Sparse: three 64 KiB terms plus metadata, but only touched pages are allocated.
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len() as usize, 3 * 64 * 1024 + 4096);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 64 * 1024, "{} bytes allocated", meta.blocks() * 512);
        assert_eq!(meta.mode() & 0o777, 0o600);

        // Truncated.
        let short = dir.join("short");
        std::fs::write(&short, vec![0u8; 1000]).unwrap();
        let error = LogBuffer::open(&short).unwrap_err().to_string();
        assert!(error.contains("truncated"), "{error}");
        // Right length, no magic.
        let zero = dir.join("zero");
        std::fs::write(&zero, vec![0u8; 3 * 64 * 1024 + 4096]).unwrap();
        let error = LogBuffer::open(&zero).unwrap_err().to_string();
        assert!(error.contains("magic"), "{error}");
        // Length that is not three terms plus metadata.
        let odd = dir.join("odd");
        std::fs::write(&odd, vec![0u8; 5000]).unwrap();
        assert!(LogBuffer::open(&odd).unwrap_err().to_string().contains("not three power-of-two terms"));
        // Corrupt MTU.
        log.metadata().put_i32(meta::MTU_LENGTH, 33).unwrap();
        assert!(LogBuffer::open(&path).unwrap_err().to_string().contains("mtu 33"));
    }

    #[test]
    fn a_sealed_log_cannot_be_shrunk_or_grown_and_opens_only_as_announced() {
        // A registration id no other test of this process uses: tests run in parallel, and the
        // conductor's tests make logs of small ids in this same process.
        let registration_id = 0x5ea1_ed10;
        let log_name = publication_log_name(registration_id);
        let log = LogBuffer::create_sealed(&log_name, &params(64 * 1024), LogStart::of(&params(64 * 1024))).unwrap();
        let path = log.path().unwrap().to_path_buf();
        let name = path.to_str().unwrap().to_string();
        assert_eq!(name, format!("/proc/{}/fd/{}", std::process::id(), path.file_name().unwrap().to_str().unwrap()));
        assert!(driver_logs(std::process::id()).unwrap().iter().any(|l| l.path == path && l.name == log_name));
        // What a hostile client can do with the name it was given: open it read-write, then try
        // to change its length. Both are refused (EPERM); before the seals, shrinking it raised
        // SIGBUS in every process that touched the lost pages.
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let length = file.metadata().unwrap().len();
        for len in [0, 4096, length + 4096] {
            let error = file.set_len(len).unwrap_err();
            assert_eq!(error.raw_os_error(), Some(libc::EPERM), "set_len({len}): {error}");
        }
        assert_eq!(file.metadata().unwrap().len(), length);
        assert!(matches!(log.offer(b"still here", 0, i64::MAX).unwrap(), Offer::Appended(64)));

        let identity = LogIdentity { session_id: 11, stream_id: 1001 };
        let pid = i64::from(std::process::id());
        let opened = LogBuffer::open_announced(pid, &name, identity).unwrap();
        assert_eq!(opened.tail_position().unwrap(), 64);
        let other = LogIdentity { session_id: 12, stream_id: 1001 };
        let error = LogBuffer::open_announced(pid, &name, other).unwrap_err().to_string();
        assert!(error.contains("session 11 stream 1001") && error.contains("announced session 12"), "{error}");
        for foreign in [format!("/proc/{}/fd/0", pid + 1), "publications/3.logbuffer".into(), "/proc/self/fd/3".into()]
        {
            let error = LogBuffer::open_announced(pid, &foreign, identity).unwrap_err().to_string();
            assert!(error.contains(&format!("expected /proc/{pid}/fd/<fd>")), "{foreign}: {error}");
        }
        // A plain file of the right layout is not a log the driver made.
        let dir = tempdir();
        let plain = dir.join("plain");
        LogBuffer::create(&plain, &params(64 * 1024)).unwrap();
        let held = std::fs::File::open(&plain).unwrap();
        use std::os::fd::AsRawFd;
        let plain_name = format!("/proc/{pid}/fd/{}", held.as_raw_fd());
        let error = LogBuffer::open_announced(pid, &plain_name, identity).unwrap_err().to_string();
        assert!(error.contains("not sealed against shrinking"), "{error}");
        // Closed with its last mapping: the name is gone.
        drop((log, opened, file));
        assert!(!driver_logs(std::process::id()).unwrap().iter().any(|l| l.name == log_name));
    }

    #[test]
    fn open_refuses_impossible_term_counts_tails_and_end_of_stream() {
        let dir = tempdir();
        let path = dir.join("log");
        let log = LogBuffer::create(&path, &params(64 * 1024)).unwrap();
        let meta = log.metadata();
        let error = || LogBuffer::open(&path).unwrap_err().to_string();
        meta.put_i32(meta::ACTIVE_TERM_COUNT, -1).unwrap();
        let text = error();
        assert!(
            text.contains("active term count -1 is negative") && text.contains("session 11, stream 1001"),
            "{text}"
        );
        assert!(text.contains(&path.display().to_string()), "{text}");
        meta.put_i32(meta::ACTIVE_TERM_COUNT, 1).unwrap();
        let text = error();
        assert!(text.contains("tail counter of partition 1 holds term id 5 (term count -2)"), "{text}");
        meta.put_i32(meta::ACTIVE_TERM_COUNT, 0).unwrap();
        meta.put_i64(meta::TERM_TAIL_COUNTERS + 16, pack_tail(7 + 40, 0)).unwrap();
        let text = error();
        assert!(text.contains("partition 2 holds term id 47") && text.contains("needs term count -1"), "{text}");
        meta.put_i64(meta::TERM_TAIL_COUNTERS + 16, pack_tail(6, 0)).unwrap();
        meta.put_i64(meta::END_OF_STREAM_POSITION, -5).unwrap();
        assert!(error().contains("end-of-stream position -5"), "{}", error());
        meta.put_i64(meta::END_OF_STREAM_POSITION, i64::MAX).unwrap();
        // Repaired: it opens again; a rotation in progress (the next partition already holds
        // the next term) is a state writers produce, not corruption.
        LogBuffer::open(&path).unwrap();
        meta.put_i64(meta::TERM_TAIL_COUNTERS + 8, pack_tail(8, 0)).unwrap();
        LogBuffer::open(&path).unwrap();
    }

    #[test]
    fn an_offer_into_a_log_whose_term_count_and_tail_disagree_is_an_error_not_admin_action_for_ever() {
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        assert!(matches!(log.offer(b"before", 0, i64::MAX).unwrap(), Offer::Appended(_)));
        // The count moved to a partition whose tail holds a term no rotation leads to.
        log.metadata().put_i32(meta::ACTIVE_TERM_COUNT, 4).unwrap();
        for _ in 0..3 {
            let error = log.offer(b"x", 0, i64::MAX).unwrap_err().to_string();
            assert!(
                error.contains("active term count 4 selects partition 1, whose tail counter holds term id 5"),
                "{error}"
            );
            assert!(error.contains("not term id 11") && error.contains("corrupt"), "{error}");
        }
        let batch: [&[u8]; 2] = [b"a", b"b"];
        assert!(log.offer_batch(&batch, 0, i64::MAX).is_err());
        log.metadata().put_i32(meta::ACTIVE_TERM_COUNT, -7).unwrap();
        let error = log.offer(b"x", 0, i64::MAX).unwrap_err().to_string();
        assert!(error.contains("active term count -7 is negative"), "{error}");
        // Repaired, it appends again.
        log.metadata().put_i32(meta::ACTIVE_TERM_COUNT, 0).unwrap();
        assert!(matches!(log.offer(b"after", 0, i64::MAX).unwrap(), Offer::Appended(_)));
    }

    #[test]
    fn parameters_out_of_range_are_refused() {
        assert!(LogBuffer::anonymous(&LogParams { term_length: 100_000, ..params(65536) }).is_err());
        assert!(LogBuffer::anonymous(&LogParams { mtu: 100, ..params(65536) }).is_err());
        assert!(LogBuffer::anonymous(&LogParams { page_size: 1000, ..params(65536) }).is_err());
    }

    /// This thread's minor page faults so far.
    fn minor_faults() -> i64 {
        // SAFETY: an all-zero rusage is valid, and getrusage only writes it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is valid for the call to write.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt
    }

    #[test]
    fn appends_into_pages_populated_ahead_take_no_page_fault_and_a_lap_ends_the_populating() {
        let registration_id = 0x9091_a7e0;
        let term = 64 * 1024;
        let log = LogBuffer::create_sealed(
            &publication_log_name(registration_id),
            &params(term),
            LogStart::of(&params(term)),
        )
        .unwrap();
        let mut populate = PopulateAhead::new(&log, 0);
        let mut populated = 0;
        while let step @ 1.. = populate.advance(&log, 0) {
            assert!(step <= POPULATE_STEP);
            populated += step;
        }
        assert_eq!(populated as i64, POPULATE_AHEAD);
        // The first term (POPULATE_AHEAD long) fills without a fault; the second, not populated,
        // faults on its first page.
        let payload = [0x5a; 992];
        let appends = term as usize / (payload.len() + DATA_HEADER_LENGTH);
        let before = minor_faults();
        for _ in 0..appends {
            assert!(matches!(log.offer(&payload, 0, i64::MAX).unwrap(), Offer::Appended(_)));
        }
        assert_eq!(minor_faults() - before, 0, "appends into populated pages faulted");
        assert!(matches!(log.offer(&payload, 0, i64::MAX).unwrap(), Offer::AdminAction));
        let before = minor_faults();
        assert!(matches!(log.offer(&payload, 0, i64::MAX).unwrap(), Offer::Appended(_)));
        assert!(minor_faults() - before > 0, "the first append into a page not populated faults");
        // A writer moving on maps the next step in as `POPULATE_AHEAD` past it enters that step,
        // then nothing until the step after (no system call per message).
        assert_eq!(populate.advance(&log, 64), POPULATE_STEP);
        populated += POPULATE_STEP;
        for position in (128..=4096).step_by(64) {
            assert_eq!(populate.advance(&log, position), 0, "at {position}");
        }
        // Toward the end of the lap and past it: at most the rest of the three partitions.
        let lap = PARTITION_COUNT as i64 * i64::from(term);
        while let step @ 1.. = populate.advance(&log, lap) {
            populated += step;
        }
        assert_eq!(populated as i64, lap);
        assert_eq!(populate.advance(&log, 10 * lap), 0);
    }

    #[test]
    fn a_log_opened_in_the_process_that_created_it_shares_its_pages_but_not_its_name() {
        let registration_id = 0x9091_a7e1;
        let term = 64 * 1024;
        let log_name = publication_log_name(registration_id);
        let log = LogBuffer::create_sealed(&log_name, &params(term), LogStart::of(&params(term))).unwrap();
        let mut populate = PopulateAhead::new(&log, 0);
        while populate.advance(&log, 0) > 0 {}
        // A client of the driver in this process: its appends land in the pages the driver
        // populated, in the same mapping (a mapping of its own would fault on each page).
        let identity = LogIdentity { session_id: 11, stream_id: 1001 };
        let name = log.path().unwrap().to_str().unwrap().to_string();
        let opened = LogBuffer::open_announced(i64::from(std::process::id()), &name, identity).unwrap();
        let payload = [0x5a; 992];
        let before = minor_faults();
        for _ in 0..term as usize / (payload.len() + DATA_HEADER_LENGTH) {
            assert!(matches!(opened.offer(&payload, 0, i64::MAX).unwrap(), Offer::Appended(_)));
        }
        assert_eq!(minor_faults() - before, 0, "the client's appends faulted: not the driver's mapping");
        assert_eq!(log.tail_position().unwrap(), i64::from(term));
        // The driver lets go: the name is gone with its handles, the client still reads.
        drop(log);
        assert!(!driver_logs(std::process::id()).unwrap().iter().any(|l| l.name == log_name));
        assert_eq!(opened.tail_position().unwrap(), i64::from(term));
    }
}
