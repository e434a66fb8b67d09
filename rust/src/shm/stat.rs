//! A read-only snapshot of a driver directory for `affinity stat`: the cnc header, every
//! allocated counter and the error log. Maps the cnc read-only; never writes, never sends a
//! command, so it cannot disturb the driver.

use std::path::{Path, PathBuf};

use super::cnc::{Cnc, CNC_FILE};
use super::counters::CounterInfo;
use super::directory::epoch_ms;
use super::error::ShmError;
use super::error_log::{read_errors, ErrorRecord};

/// What `affinity stat` shows.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The driver directory.
    pub dir: PathBuf,
    /// The driver's pid.
    pub pid: i64,
    /// When the driver started (epoch ms).
    pub start_ms: i64,
    /// Milliseconds since the driver's last heartbeat.
    pub heartbeat_age_ms: i64,
    /// cnc layout version.
    pub version: i32,
    /// Every allocated counter.
    pub counters: Vec<CounterInfo>,
    /// Every distinct error.
    pub errors: Vec<ErrorRecord>,
}

/// Reads `dir`'s cnc read-only.
pub fn snapshot(dir: &Path) -> Result<Snapshot, ShmError> {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false)?;
    Ok(Snapshot {
        dir: dir.to_path_buf(),
        pid: cnc.pid()?,
        start_ms: cnc.start_timestamp_ms()?,
        heartbeat_age_ms: epoch_ms().saturating_sub(cnc.driver_heartbeat_ms()?),
        version: cnc.version()?,
        counters: cnc.counters()?.allocated()?,
        errors: read_errors(cnc.error_log())?,
    })
}
