//! The command-and-control (`cnc.dat`) file of a driver directory: a versioned header followed by
//! the to-driver ring buffer, the to-clients broadcast buffer, the counters (metadata and values)
//! and the error log (Aeron's `CncFileDescriptor` field offsets, plus an affinity magic).
//!
//! ```text
//! 0    cnc version                 i32  written last (Release): the file is ready
//! 4    to-driver buffer length     i32  ring records + 768-byte trailer
//! 8    to-clients buffer length    i32  broadcast records + 128-byte trailer
//! 12   counters metadata length    i32  512 bytes per counter
//! 16   counters values length      i32  128 bytes per counter
//! 20   error log length            i32
//! 24   client liveness timeout     i64  nanoseconds
//! 32   start timestamp             i64  epoch ms
//! 40   driver pid                  i64
//! 48   file page size              i32
//! 56   magic "AFFNCNC1"            i64
//! 128  to-driver buffer | to-clients buffer | counters metadata | counters values | error log
//! ```
//!
//! The driver's heartbeat is the to-driver ring's consumer heartbeat (epoch ms): a driver that has
//! not updated it within the driver timeout is dead, its directory stale.

use std::path::{Path, PathBuf};

use super::broadcast::{BroadcastReceiver, BroadcastTransmitter, TRAILER_LENGTH as BROADCAST_TRAILER};
use super::buffer::{align_up, Region};
use super::counters::{CountersReader, COUNTER_LENGTH, METADATA_LENGTH};
use super::error::ShmError;
use super::file;
use super::log_buffer::{PAGE_MAX_SIZE, PAGE_MIN_SIZE};
use super::ring_buffer::{ManyToOneRingBuffer, TRAILER_LENGTH as RING_TRAILER};

/// Name of the cnc file inside a driver directory.
pub const CNC_FILE: &str = "cnc.dat";
/// Layout version (major << 16 | minor << 8 | patch); a different major is refused.
pub const CNC_VERSION: i32 = 1 << 16;
/// Identifies an affinity cnc file.
pub const CNC_MAGIC: i64 = i64::from_le_bytes(*b"AFFNCNC1");
/// Bytes of the header before the first buffer.
pub const META_DATA_LENGTH: usize = 128;

/// Header field offsets.
pub mod field {
    /// Version, written last.
    pub const VERSION: usize = 0;
    /// To-driver buffer length.
    pub const TO_DRIVER_LENGTH: usize = 4;
    /// To-clients buffer length.
    pub const TO_CLIENTS_LENGTH: usize = 8;
    /// Counters metadata length.
    pub const COUNTERS_METADATA_LENGTH: usize = 12;
    /// Counters values length.
    pub const COUNTERS_VALUES_LENGTH: usize = 16;
    /// Error log length.
    pub const ERROR_LOG_LENGTH: usize = 20;
    /// Client liveness timeout (ns).
    pub const CLIENT_LIVENESS_TIMEOUT: usize = 24;
    /// Driver start time (epoch ms).
    pub const START_TIMESTAMP: usize = 32;
    /// Driver process id.
    pub const PID: usize = 40;
    /// Page size the file is aligned to.
    pub const FILE_PAGE_SIZE: usize = 48;
    /// Affinity magic.
    pub const MAGIC: usize = 56;
}

/// Sizes of a new cnc file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CncParams {
    /// Record bytes of the to-driver ring (power of two).
    pub to_driver_capacity: usize,
    /// Record bytes of the to-clients broadcast buffer (power of two).
    pub to_clients_capacity: usize,
    /// Number of counters.
    pub counters: usize,
    /// Bytes of the error log.
    pub error_log_length: usize,
    /// Client liveness timeout in nanoseconds.
    pub client_liveness_timeout_ns: i64,
    /// Page size the file length is rounded to.
    pub page_size: usize,
}

impl Default for CncParams {
    /// Aeron's defaults: 1 MiB ring and broadcast, 8192 counters (1 MiB values), 1 MiB error log.
    fn default() -> Self {
        Self {
            to_driver_capacity: 1 << 20,
            to_clients_capacity: 1 << 20,
            counters: 8192,
            error_log_length: 1 << 20,
            client_liveness_timeout_ns: super::directory::CLIENT_TIMEOUT.as_nanos() as i64,
            page_size: 4096,
        }
    }
}

/// The sections of a cnc file, validated.
#[derive(Clone, Debug)]
pub struct Cnc {
    header: Region,
    to_driver: Region,
    to_clients: Region,
    counters_metadata: Region,
    counters_values: Region,
    error_log: Region,
    path: Option<PathBuf>,
}

struct Lengths {
    to_driver: usize,
    to_clients: usize,
    counters_metadata: usize,
    counters_values: usize,
    error_log: usize,
}

impl Lengths {
    fn total(&self) -> Option<usize> {
        META_DATA_LENGTH
            .checked_add(self.to_driver)?
            .checked_add(self.to_clients)?
            .checked_add(self.counters_metadata)?
            .checked_add(self.counters_values)?
            .checked_add(self.error_log)
    }
}

impl Cnc {
    /// Creates `path` (must not exist, mode 0600) for driver `pid`, started at `now_ms`.
    pub fn create(path: &Path, params: &CncParams, pid: u32, now_ms: i64) -> Result<Self, ShmError> {
        let (lengths, total) = Self::plan(params)?;
        let region = file::create_mapped(path, total)?;
        Self::initialise(region, params, &lengths, pid, now_ms, Some(path))
    }

    /// An anonymous cnc (one process: tests).
    pub fn anonymous(params: &CncParams, pid: u32, now_ms: i64) -> Result<Self, ShmError> {
        let (lengths, total) = Self::plan(params)?;
        Self::initialise(file::anonymous(total)?, params, &lengths, pid, now_ms, None)
    }

    fn plan(params: &CncParams) -> Result<(Lengths, usize), ShmError> {
        let parameter = |detail: String| ShmError::Parameter(detail);
        for (name, capacity) in [("to-driver", params.to_driver_capacity), ("to-clients", params.to_clients_capacity)] {
            if !capacity.is_power_of_two() || !(1024..=1 << 30).contains(&capacity) {
                return Err(parameter(format!(
                    "{name} buffer capacity {capacity} must be a power of two in [1 KiB, 1 GiB]"
                )));
            }
        }
        if params.counters == 0 || params.counters > 1 << 20 {
            return Err(parameter(format!("counter count {} must be in [1, 1048576]", params.counters)));
        }
        if params.error_log_length > 1 << 30 {
            return Err(parameter(format!("error log length {} exceeds 1 GiB", params.error_log_length)));
        }
        if !params.page_size.is_power_of_two()
            || !(PAGE_MIN_SIZE as usize..=PAGE_MAX_SIZE as usize).contains(&params.page_size)
        {
            return Err(parameter(format!("page size {} must be a power of two in [4 KiB, 1 GiB]", params.page_size)));
        }
        let lengths = Lengths {
            to_driver: params.to_driver_capacity + RING_TRAILER,
            to_clients: params.to_clients_capacity + BROADCAST_TRAILER,
            counters_metadata: params.counters * METADATA_LENGTH,
            counters_values: params.counters * COUNTER_LENGTH,
            error_log: align_up(params.error_log_length, 64).unwrap_or(params.error_log_length),
        };
        let total = lengths
            .total()
            .and_then(|t| align_up(t, params.page_size))
            .ok_or_else(|| parameter("cnc length overflows".into()))?;
        Ok((lengths, total))
    }

    fn initialise(
        region: Region,
        params: &CncParams,
        lengths: &Lengths,
        pid: u32,
        now_ms: i64,
        path: Option<&Path>,
    ) -> Result<Self, ShmError> {
        let to_i32 =
            |v: usize| i32::try_from(v).map_err(|_| ShmError::Parameter(format!("section of {v} bytes too long")));
        region.put_i32(field::TO_DRIVER_LENGTH, to_i32(lengths.to_driver)?)?;
        region.put_i32(field::TO_CLIENTS_LENGTH, to_i32(lengths.to_clients)?)?;
        region.put_i32(field::COUNTERS_METADATA_LENGTH, to_i32(lengths.counters_metadata)?)?;
        region.put_i32(field::COUNTERS_VALUES_LENGTH, to_i32(lengths.counters_values)?)?;
        region.put_i32(field::ERROR_LOG_LENGTH, to_i32(lengths.error_log)?)?;
        region.put_i64(field::CLIENT_LIVENESS_TIMEOUT, params.client_liveness_timeout_ns)?;
        region.put_i64(field::START_TIMESTAMP, now_ms)?;
        region.put_i64(field::PID, i64::from(pid))?;
        region.put_i32(field::FILE_PAGE_SIZE, to_i32(params.page_size)?)?;
        region.put_i64(field::MAGIC, CNC_MAGIC)?;
        let cnc = Self::sections(region, lengths, path)?;
        cnc.to_driver()?.set_consumer_heartbeat(now_ms)?;
        cnc.header.put_i32_release(field::VERSION, CNC_VERSION)?;
        Ok(cnc)
    }

    /// Opens and validates `path` (magic, version, section lengths, file length).
    pub fn open(path: &Path, writable: bool) -> Result<Self, ShmError> {
        let region = file::open_mapped(path, "cnc", META_DATA_LENGTH, writable)?;
        Self::from_region(region, Some(path))
    }

    /// Validates a mapped cnc.
    pub fn from_region(region: Region, path: Option<&Path>) -> Result<Self, ShmError> {
        let invalid = |detail: String| ShmError::invalid("cnc", path, detail);
        if region.capacity() < META_DATA_LENGTH {
            return Err(invalid(format!(
                "truncated: {} bytes, at least {META_DATA_LENGTH} expected",
                region.capacity()
            )));
        }
        let version = region.get_i32_acquire(field::VERSION)?;
        if version == 0 {
            return Err(invalid(
                "not initialised yet (version 0): the driver is starting or died while starting".into(),
            ));
        }
        let magic = region.get_i64(field::MAGIC)?;
        if magic != CNC_MAGIC {
            return Err(invalid(format!("magic {magic:#018x}, expected {CNC_MAGIC:#018x}")));
        }
        if version >> 16 != CNC_VERSION >> 16 {
            return Err(invalid(format!(
                "version {}.{}.{}, this build reads {}.x",
                version >> 16,
                (version >> 8) & 0xFF,
                version & 0xFF,
                CNC_VERSION >> 16
            )));
        }
        let length = |offset: usize, name: &str| -> Result<usize, ShmError> {
            let value = region.get_i32(offset)?;
            usize::try_from(value).map_err(|_| invalid(format!("{name} length {value} is negative")))
        };
        let lengths = Lengths {
            to_driver: length(field::TO_DRIVER_LENGTH, "to-driver buffer")?,
            to_clients: length(field::TO_CLIENTS_LENGTH, "to-clients buffer")?,
            counters_metadata: length(field::COUNTERS_METADATA_LENGTH, "counters metadata")?,
            counters_values: length(field::COUNTERS_VALUES_LENGTH, "counters values")?,
            error_log: length(field::ERROR_LOG_LENGTH, "error log")?,
        };
        let total = lengths.total().ok_or_else(|| invalid("section lengths overflow".into()))?;
        if total > region.capacity() {
            return Err(invalid(format!("truncated: sections need {total} bytes, the file has {}", region.capacity())));
        }
        for (name, value) in [
            ("to-driver buffer", lengths.to_driver),
            ("to-clients buffer", lengths.to_clients),
            ("counters metadata", lengths.counters_metadata),
            ("counters values", lengths.counters_values),
            ("error log", lengths.error_log),
        ] {
            if value % 8 != 0 {
                return Err(invalid(format!("{name} length {value} is not a multiple of 8")));
            }
        }
        let cnc = Self::sections(region, &lengths, path).map_err(|e| match e {
            ShmError::Invalid { detail, .. } => invalid(detail),
            other => other,
        })?;
        // Validates the ring, broadcast and counters geometry.
        cnc.to_driver().map_err(|e| invalid(e.to_string()))?;
        BroadcastReceiver::new(cnc.to_clients.clone()).map_err(|e| invalid(e.to_string()))?;
        cnc.counters().map_err(|e| invalid(e.to_string()))?;
        Ok(cnc)
    }

    fn sections(region: Region, lengths: &Lengths, path: Option<&Path>) -> Result<Self, ShmError> {
        let mut offset = META_DATA_LENGTH;
        let mut next = |len: usize| {
            let section = region.slice(offset, len);
            offset += len;
            section
        };
        Ok(Self {
            to_driver: next(lengths.to_driver)?,
            to_clients: next(lengths.to_clients)?,
            counters_metadata: next(lengths.counters_metadata)?,
            counters_values: next(lengths.counters_values)?,
            error_log: next(lengths.error_log)?,
            header: region.slice(0, META_DATA_LENGTH)?,
            path: path.map(Path::to_path_buf),
        })
    }

    /// The file, when mapped from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Commands from clients to the driver.
    pub fn to_driver(&self) -> Result<ManyToOneRingBuffer, ShmError> {
        ManyToOneRingBuffer::new(self.to_driver.clone())
    }

    /// The driver's transmitter of responses (one per driver).
    pub fn to_clients_transmitter(&self) -> Result<BroadcastTransmitter, ShmError> {
        BroadcastTransmitter::new(self.to_clients.clone())
    }

    /// A client's receiver of responses, joined at the current tail.
    pub fn to_clients_receiver(&self) -> Result<BroadcastReceiver, ShmError> {
        BroadcastReceiver::new(self.to_clients.clone())
    }

    /// The counters' metadata and values regions.
    pub fn counters_regions(&self) -> (Region, Region) {
        (self.counters_metadata.clone(), self.counters_values.clone())
    }

    /// A reader of the counters.
    pub fn counters(&self) -> Result<CountersReader, ShmError> {
        CountersReader::new(self.counters_metadata.clone(), self.counters_values.clone())
    }

    /// The error log region.
    pub fn error_log(&self) -> &Region {
        &self.error_log
    }

    /// The driver's process id.
    pub fn pid(&self) -> Result<i64, ShmError> {
        self.header.get_i64(field::PID)
    }

    /// When the driver started (epoch ms).
    pub fn start_timestamp_ms(&self) -> Result<i64, ShmError> {
        self.header.get_i64(field::START_TIMESTAMP)
    }

    /// The client liveness timeout the driver applies (ns).
    pub fn client_liveness_timeout_ns(&self) -> Result<i64, ShmError> {
        self.header.get_i64(field::CLIENT_LIVENESS_TIMEOUT)
    }

    /// Layout version.
    pub fn version(&self) -> Result<i32, ShmError> {
        self.header.get_i32_acquire(field::VERSION)
    }

    /// The driver's last heartbeat (epoch ms).
    pub fn driver_heartbeat_ms(&self) -> Result<i64, ShmError> {
        self.to_driver()?.consumer_heartbeat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::test_support::{small_cnc as small, tempdir};

    #[test]
    fn a_created_cnc_opens_with_the_same_sections() {
        let dir = tempdir();
        let path = dir.join(CNC_FILE);
        let cnc = Cnc::create(&path, &small(), 4242, 1_000).unwrap();
        cnc.to_driver().unwrap().write(3, b"hello").unwrap();
        let opened = Cnc::open(&path, true).unwrap();
        assert_eq!(opened.pid().unwrap(), 4242);
        assert_eq!(opened.driver_heartbeat_ms().unwrap(), 1_000);
        assert_eq!(opened.counters().unwrap().capacity(), 16);
        let mut scratch = Vec::new();
        let mut got = Vec::new();
        opened.to_driver().unwrap().read(10, &mut scratch, |t, p| got.push((t, p.to_vec()))).unwrap();
        assert_eq!(got, vec![(3, b"hello".to_vec())]);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    #[test]
    fn corrupt_and_truncated_files_are_clear_errors() {
        let dir = tempdir();
        let path = dir.join(CNC_FILE);
        Cnc::create(&path, &small(), 1, 0).unwrap();
        let good = std::fs::read(&path).unwrap();
        let check = |bytes: &[u8], expected: &str| {
            let broken = dir.join("broken");
            let _ = std::fs::remove_file(&broken);
            std::fs::write(&broken, bytes).unwrap();
            let error = Cnc::open(&broken, false).unwrap_err().to_string();
            assert!(error.contains(expected), "{expected:?} not in {error:?}");
            assert!(error.contains("broken"), "the error names the file: {error}");
        };
        check(&good[..100], "truncated");
        check(&good[..good.len() - 4096], "truncated: sections need");
        check(&[], "truncated");
        let mut bad = good.clone();
        bad[56] ^= 0xFF;
        check(&bad, "magic");
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&(2i32 << 16).to_le_bytes());
        check(&bad, "version 2.0.0");
        let mut bad = good.clone();
        bad[0..4].copy_from_slice(&0i32.to_le_bytes());
        check(&bad, "not initialised");
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&(-5i32).to_le_bytes());
        check(&bad, "negative");
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&(1000i32 + 768).to_le_bytes());
        check(&bad, "power-of-two");
        let mut bad = good.clone();
        bad[16..20].copy_from_slice(&(17 * 128i32).to_le_bytes());
        check(&bad, "");
    }

    #[test]
    fn random_headers_never_panic() {
        use proptest::prelude::*;
        let dir = tempdir();
        let path = dir.join(CNC_FILE);
        Cnc::create(&path, &small(), 1, 0).unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut runner =
            proptest::test_runner::TestRunner::new(proptest::test_runner::Config { cases: 200, ..Default::default() });
        runner
            .run(&(proptest::collection::vec(any::<u8>(), META_DATA_LENGTH), 0..good.len()), |(header, cut)| {
                let mut bytes = good.clone();
                bytes[..META_DATA_LENGTH].copy_from_slice(&header);
                // Keep version and magic so the section lengths are what gets exercised.
                bytes[..4].copy_from_slice(&CNC_VERSION.to_le_bytes());
                bytes[56..64].copy_from_slice(&CNC_MAGIC.to_le_bytes());
                bytes.truncate(cut.max(1));
                let region = crate::shm::file::anonymous(bytes.len()).unwrap();
                region.put_bytes(0, &bytes).unwrap();
                let _ = Cnc::from_region(region, None);
                Ok(())
            })
            .unwrap();
    }
}
