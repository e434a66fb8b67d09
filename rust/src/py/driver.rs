//! Bindings of the standalone driver: `run_driver` (the `affinity driver` command runs it in the
//! foreground) and `driver_stat` (read-only snapshot for `affinity stat`).

use pyo3::prelude::*;

use super::args::{path_argument, strings_argument};
use super::errors::{ConfigError, DriverError};
use crate::driver::standalone;
use crate::shm::{directory, stat};

/// Runs the standalone driver until SIGINT/SIGTERM; `argv` are the `affinity driver` options.
#[pyfunction]
fn run_driver(py: Python<'_>, argv: &Bound<'_, PyAny>) -> PyResult<()> {
    let argv = strings_argument("argv", argv)?;
    let context = standalone::parse_args(&argv).map_err(ConfigError::new_err)?;
    py.detach(|| standalone::run(context, None)).map_err(DriverError::new_err)
}

/// The driver directory used when none is given (`$AFFINITY_DIR`, else per user in /dev/shm).
#[pyfunction]
fn default_driver_dir() -> String {
    directory::default_dir().to_string_lossy().into_owned()
}

/// Counter row: (id, type_id, label, value, registration_id, owner_id, problem).
type CounterRow = (usize, i32, String, i64, i64, i64, Option<String>);
/// Error row: (count, first_ms, last_ms, message, problem); a corrupt record is
/// `(0, 0, 0, "", Some(what is wrong and where))`.
type ErrorRow = (i32, i64, i64, String, Option<String>);

/// Snapshot row: (dir, pid, start_ms, heartbeat_age_ms, version, counters, errors, dead).
type SnapshotRow = (String, i64, i64, i64, i32, Vec<CounterRow>, Vec<ErrorRow>, Option<String>);

/// Snapshot of `dir` (read-only; the Python wrapper `affinity.driver_stat` types it).
#[pyfunction]
fn driver_stat(py: Python<'_>, directory: &Bound<'_, PyAny>) -> PyResult<SnapshotRow> {
    let dir = path_argument("directory", directory)?;
    let snapshot = py.detach(|| stat::snapshot(&dir)).map_err(|e| DriverError::new_err(e.to_string()))?;
    Ok((
        snapshot.dir.to_string_lossy().into_owned(),
        snapshot.pid,
        snapshot.start_ms,
        snapshot.heartbeat_age_ms,
        snapshot.version,
        snapshot
            .counters
            .into_iter()
            .map(|c| {
                (
                    c.info.id,
                    c.info.type_id,
                    c.info.label,
                    c.info.value,
                    c.info.registration_id,
                    c.info.owner_id,
                    c.problem,
                )
            })
            .collect(),
        snapshot
            .errors
            .into_iter()
            .map(|e| match e {
                Ok(e) => (e.count, e.first_ms, e.last_ms, e.message, None),
                Err(problem) => (0, 0, 0, String::new(), Some(problem)),
            })
            .collect(),
        snapshot.dead,
    ))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(run_driver, module)?)?;
    module.add_function(wrap_pyfunction!(default_driver_dir, module)?)?;
    module.add_function(wrap_pyfunction!(driver_stat, module)?)?;
    module.add("DRIVER_USAGE", standalone::usage())?;
    Ok(())
}
