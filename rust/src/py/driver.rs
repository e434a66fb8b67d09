//! Bindings of the standalone driver: `run_driver` (the `affinity driver` command runs it in the
//! foreground) and `driver_stat` (read-only snapshot for `affinity stat`).

use pyo3::prelude::*;

use super::args::{callable_argument, path_argument, strings_argument};
use super::errors::{ConfigError, DriverError};
use super::records::record;
use crate::embedded::{driver_command_usage, run_driver_command_with, DriverCommandError};
use crate::shm::counters::CounterInfo;
use crate::shm::error_log::ErrorRecord;
use crate::shm::{directory, stat};

/// What `companion(dir)` returned, closed (its `close()` called) before the driver closes.
struct PyCompanion(Py<PyAny>);

impl Drop for PyCompanion {
    fn drop(&mut self) {
        Python::attach(|py| {
            if let Err(error) = self.0.call_method0(py, "close") {
                error.print(py);
            }
        });
    }
}

/// Runs the standalone driver until SIGINT/SIGTERM; `argv` are the `affinity driver` options.
/// `companion`: called with the driver's directory once it is ready (`affinity driver
/// --router` starts the subject router there); what it returns is closed (`close()`) before the
/// driver closes; an exception it raises stops the driver and is reported as a DriverError.
#[pyfunction]
#[pyo3(signature = (argv, companion=None))]
fn run_driver(py: Python<'_>, argv: &Bound<'_, PyAny>, companion: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let argv = strings_argument("argv", argv)?;
    if let Some(companion) = companion {
        callable_argument("companion", companion)?;
    }
    let companion = companion.map(|c| c.clone().unbind());
    let start = move |dir: &std::path::Path| -> Result<crate::driver::standalone::Companion, String> {
        let Some(companion) = companion else { return Ok(Box::new(())) };
        Python::attach(|py| match companion.call1(py, (dir.to_string_lossy().into_owned(),)) {
            Ok(started) => Ok(Box::new(PyCompanion(started)) as crate::driver::standalone::Companion),
            Err(error) => Err(error.value(py).to_string()),
        })
    };
    match py.detach(|| run_driver_command_with(&argv, None, start)) {
        Ok(()) => Ok(()),
        Err(DriverCommandError::Usage(message)) => Err(ConfigError::new_err(message)),
        Err(DriverCommandError::Failed(message)) => Err(DriverError::new_err(message)),
    }
}

/// The driver directory used when none is given (`$AFFINITY_DIR`, else per user in /dev/shm).
#[pyfunction]
fn default_driver_dir() -> String {
    directory::default_dir().to_string_lossy().into_owned()
}

record! {
    /// One allocated counter of the driver's counters file (`DriverStatInfo.counters`).
    #[derive(Clone)]
    pub struct CounterValueInfo {
        /// Counter id (slot index).
        id: usize,
        /// Type id.
        type_id: i32,
        /// Label (empty when the record is corrupt).
        label: String,
        /// Current value.
        value: i64,
        /// Registration id of the resource it belongs to.
        registration_id: i64,
        /// Owning client (0 = the driver).
        owner_id: i64,
        /// What is wrong with the counter's record and where, when it is corrupt.
        problem: Option<String>,
    }
}

record! {
    /// One distinct error of the driver's error log (`DriverStatInfo.errors`); a corrupt record
    /// has `problem` set and the other fields 0 and empty.
    #[derive(Clone)]
    pub struct DriverErrorInfo {
        /// How many times it was observed.
        count: i32,
        /// First observation, epoch ms.
        first_ms: i64,
        /// Last observation, epoch ms.
        last_ms: i64,
        /// The error text.
        message: String,
        /// What is wrong with a corrupt record and where.
        problem: Option<String>,
    }
}

record! {
    /// `driver_stat`: a read-only snapshot of a driver directory (wrapped by
    /// `affinity.driver.DriverStat`).
    pub struct DriverStatInfo {
        /// The driver directory.
        dir: String,
        /// The driver's pid.
        pid: i64,
        /// When the driver started (epoch ms).
        start_ms: i64,
        /// Milliseconds since the driver's last heartbeat.
        heartbeat_age_ms: i64,
        /// cnc layout version.
        version: i32,
        /// Every allocated counter.
        counters: Vec<CounterValueInfo>,
        /// Every distinct error (or what is wrong with a corrupt record).
        errors: Vec<DriverErrorInfo>,
        /// Why the driver is dead; `None` while it is alive.
        dead: Option<String>,
    }
}

impl From<stat::Snapshot> for DriverStatInfo {
    fn from(snapshot: stat::Snapshot) -> Self {
        let stat::Snapshot { dir, pid, start_ms, heartbeat_age_ms, version, counters, errors, dead } = snapshot;
        let counters = counters
            .into_iter()
            .map(|stat::StatCounter { info, problem }| {
                // The key bytes stay in Rust: `affinity stat` shows the label.
                let CounterInfo { id, value, type_id, registration_id, owner_id, key: _, label } = info;
                CounterValueInfo { id, type_id, label, value, registration_id, owner_id, problem }
            })
            .collect();
        let errors = errors
            .into_iter()
            .map(|record| match record {
                Ok(ErrorRecord { count, first_ms, last_ms, message }) => {
                    DriverErrorInfo { count, first_ms, last_ms, message, problem: None }
                }
                Err(problem) => DriverErrorInfo {
                    count: 0,
                    first_ms: 0,
                    last_ms: 0,
                    message: String::new(),
                    problem: Some(problem),
                },
            })
            .collect();
        DriverStatInfo {
            dir: dir.to_string_lossy().into_owned(),
            pid,
            start_ms,
            heartbeat_age_ms,
            version,
            counters,
            errors,
            dead,
        }
    }
}

/// Snapshot of `dir` (read-only; the Python wrapper `affinity.driver_stat` types it).
#[pyfunction]
fn driver_stat(py: Python<'_>, directory: &Bound<'_, PyAny>) -> PyResult<DriverStatInfo> {
    let dir = path_argument("directory", directory)?;
    let snapshot = py.detach(|| stat::snapshot(&dir)).map_err(|e| DriverError::new_err(e.to_string()))?;
    Ok(DriverStatInfo::from(snapshot))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(run_driver, module)?)?;
    module.add_function(wrap_pyfunction!(default_driver_dir, module)?)?;
    module.add_function(wrap_pyfunction!(driver_stat, module)?)?;
    module.add_class::<DriverStatInfo>()?;
    module.add_class::<CounterValueInfo>()?;
    module.add_class::<DriverErrorInfo>()?;
    module.add("DRIVER_USAGE", driver_command_usage())?;
    Ok(())
}
