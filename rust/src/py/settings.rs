//! Bindings of the driver's settings and the one size/duration grammar: the defaults as
//! constants (`affinity.defaults` re-exports them), the setting names, and `parse_size` /
//! `parse_duration_ns` ([`crate::units`]) for the Python parsers.

use std::time::Duration;

use pyo3::prelude::*;

use super::args::{optional_str, str_argument};
use super::errors::config_error;
use crate::driver::context::{self, setting_names};
use crate::units::{self, BareUnit, TimeUnit};

/// Milliseconds of a default duration (every default here is far below `u64::MAX` ms).
const fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// Group members' default heartbeat interval (ms): the default of the PyO3 signatures.
pub(crate) const GROUP_HEARTBEAT_INTERVAL_MS: u64 = millis(crate::control::member::DEFAULT_HEARTBEAT_INTERVAL);
/// Group members' default liveness timeout (ms).
pub(crate) const GROUP_LIVENESS_TIMEOUT_MS: u64 = millis(crate::control::member::DEFAULT_LIVENESS_TIMEOUT);
/// A group publisher's default resend timeout (ms).
pub(crate) const GROUP_RESEND_TIMEOUT_MS: u64 = millis(crate::groups::DEFAULT_RESEND_TIMEOUT);
/// A group consumer's default primary/backup cycle (ms).
pub(crate) const GROUP_CYCLE_MS: u64 = millis(crate::groups::DEFAULT_CYCLE);
/// How long a group member given a bootstrap list waits for an answer by default (ms).
pub(crate) const GROUP_BOOTSTRAP_TIMEOUT_MS: u64 = millis(crate::groups::bootstrap::DEFAULT_BOOTSTRAP_TIMEOUT);

/// The size in bytes `text` gives (`65536`, `64k`, `16m`, `1g`); `ConfigError` naming the text
/// and what a size is otherwise.
#[pyfunction]
fn parse_size(text: &Bound<'_, PyAny>) -> PyResult<u64> {
    let text = str_argument("text", text)?;
    units::parse_size(text).map_err(|why| config_error(format!("{text:?}: {why}")))
}

/// The nanoseconds `text` gives (`500ms`, `1.5s`, `2m`); a bare number is in `bare_unit`
/// (`"ns"`, `"us"`, `"ms"`, `"s"`, `"m"`, `"h"`) or, without one, refused unless 0.
/// `ConfigError` naming the text and what a duration is otherwise.
#[pyfunction]
#[pyo3(signature = (text, bare_unit=None))]
fn parse_duration_ns(text: &Bound<'_, PyAny>, bare_unit: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    let text = str_argument("text", text)?;
    let bare = match optional_str("bare_unit", bare_unit)? {
        None => BareUnit::Refused,
        Some(suffix) => BareUnit::Is(
            TimeUnit::from_suffix(suffix)
                .ok_or_else(|| config_error(format!("bare_unit={suffix:?}: expected one of ns, us, ms, s, m, h")))?,
        ),
    };
    let duration = units::parse_duration(text, bare).map_err(|why| config_error(format!("{text:?}: {why}")))?;
    // At most 2^64 - 1 ns by the grammar.
    Ok(duration.as_nanos() as u64)
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    use crate::protocol::defaults;
    module.add_function(wrap_pyfunction!(parse_size, module)?)?;
    module.add_function(wrap_pyfunction!(parse_duration_ns, module)?)?;
    module.add("DRIVER_SETTINGS", setting_names())?;
    let constants: [(&str, u64); 15] = [
        ("DEFAULT_TERM_LENGTH_IPC", defaults::TERM_LENGTH_IPC.into()),
        ("DEFAULT_TERM_LENGTH_UDP", defaults::TERM_LENGTH_UDP.into()),
        ("DEFAULT_MTU", defaults::MTU.into()),
        ("DEFAULT_RECEIVER_WINDOW", defaults::RECEIVER_WINDOW.into()),
        ("DEFAULT_SOCKET_RECEIVE_BUFFER", context::DEFAULT_SOCKET_RECEIVE_BUFFER as u64),
        ("DEFAULT_RECEIVER_TIMEOUT_MS", millis(crate::flow_control::DEFAULT_RECEIVER_TIMEOUT)),
        ("DEFAULT_CLIENT_TIMEOUT_MS", millis(context::DEFAULT_CLIENT_TIMEOUT)),
        ("DEFAULT_COMMAND_TIMEOUT_MS", millis(crate::shm::directory::COMMAND_TIMEOUT)),
        ("DEFAULT_DRIVER_TIMEOUT_MS", crate::shm::directory::DRIVER_TIMEOUT_MS as u64),
        ("DEFAULT_LINGER_MS", millis(defaults::PUBLICATION_LINGER)),
        ("DEFAULT_GROUP_HEARTBEAT_INTERVAL_MS", GROUP_HEARTBEAT_INTERVAL_MS),
        ("DEFAULT_GROUP_LIVENESS_TIMEOUT_MS", GROUP_LIVENESS_TIMEOUT_MS),
        ("DEFAULT_GROUP_RESEND_TIMEOUT_MS", GROUP_RESEND_TIMEOUT_MS),
        ("DEFAULT_GROUP_CYCLE_MS", GROUP_CYCLE_MS),
        ("DEFAULT_GROUP_BOOTSTRAP_TIMEOUT_MS", GROUP_BOOTSTRAP_TIMEOUT_MS),
    ];
    for (name, value) in constants {
        module.add(name, value)?;
    }
    Ok(())
}
