//! Placeholder until this part of the bindings lands.

use pyo3::prelude::*;

pub(crate) fn register(_module: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
