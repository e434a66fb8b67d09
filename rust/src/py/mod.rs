//! PyO3 bindings: type conversion, GIL release and error mapping only. No logic lives here.

use pyo3::prelude::*;

mod args;
mod buffers;
mod driver;
mod errors;
mod groups;
mod records;
mod routing;
mod settings;
mod subjects;
mod transport;

/// The compiled module `affinity._affinity`.
#[pymodule]
fn _affinity(module: &Bound<'_, PyModule>) -> PyResult<()> {
    transport::register(module)?;
    records::register(module)?;
    routing::register(module)?;
    driver::register(module)?;
    settings::register(module)?;
    groups::register(module)?;
    subjects::register(module)?;
    Ok(())
}
