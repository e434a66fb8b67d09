//! A read-only snapshot of a driver directory for `affinity stat`: the cnc header, every
//! allocated counter, the error log and whether the driver is alive. Maps the cnc read-only;
//! never writes, never sends a command, so it cannot disturb the driver.
//!
//! One corrupt counter label or error record does not hide the rest: it is shown marked with
//! what is wrong and where (see [`CountersReader::inspect`](super::counters::CountersReader::inspect)
//! and [`scan_errors`]).

use std::path::{Path, PathBuf};

use super::cnc::{Cnc, CNC_FILE};
use super::counters::CounterInfo;
use super::directory::{epoch_ms, process_exists, DRIVER_TIMEOUT_MS};
use super::error::ShmError;
use super::error_log::{scan_errors, ErrorRecord};

/// One allocated counter as `affinity stat` shows it.
#[derive(Clone, Debug)]
pub struct StatCounter {
    /// What could be read (an empty label when the label is corrupt).
    pub info: CounterInfo,
    /// What is wrong with the counter's record and where, if it is corrupt.
    pub problem: Option<String>,
}

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
    pub counters: Vec<StatCounter>,
    /// Every distinct error, or what is wrong with a corrupt record and where.
    pub errors: Vec<Result<ErrorRecord, String>>,
    /// Why the driver is dead (its pid is gone, or its heartbeat is older than
    /// [`DRIVER_TIMEOUT_MS`]); `None` while it is alive.
    pub dead: Option<String>,
}

/// Why the driver with `pid` whose heartbeat is `heartbeat_age_ms` old is dead, if it is.
fn dead_reason(pid: i64, heartbeat_age_ms: i64) -> Option<String> {
    if !process_exists(pid) {
        return Some(format!("driver pid {pid} no longer exists (last heartbeat {heartbeat_age_ms} ms ago)"));
    }
    (heartbeat_age_ms >= DRIVER_TIMEOUT_MS).then(|| {
        format!("driver pid {pid} has not beaten for {heartbeat_age_ms} ms (a live driver beats within {DRIVER_TIMEOUT_MS} ms)")
    })
}

/// Reads `dir`'s cnc read-only.
pub fn snapshot(dir: &Path) -> Result<Snapshot, ShmError> {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false)?;
    let pid = cnc.pid()?;
    let heartbeat_age_ms = epoch_ms().saturating_sub(cnc.driver_heartbeat_ms()?);
    let counters = cnc.counters()?.inspect_allocated()?;
    Ok(Snapshot {
        dir: dir.to_path_buf(),
        pid,
        start_ms: cnc.start_timestamp_ms()?,
        heartbeat_age_ms,
        version: cnc.version()?,
        counters: counters
            .into_iter()
            .map(|(info, problem)| StatCounter { info, problem: problem.map(|p| p.to_string()) })
            .collect(),
        errors: scan_errors(cnc.error_log()).into_iter().map(|r| r.map_err(|e| e.to_string())).collect(),
        dead: dead_reason(pid, heartbeat_age_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_is_dead_when_its_pid_is_gone_or_its_heartbeat_is_old() {
        let me = i64::from(std::process::id());
        assert_eq!(dead_reason(me, 0), None);
        assert!(dead_reason(me, DRIVER_TIMEOUT_MS).unwrap().contains("has not beaten for"));
        let gone = i64::from(i32::MAX);
        assert!(dead_reason(gone, 0).unwrap().contains(&format!("driver pid {gone} no longer exists")));
    }
}
