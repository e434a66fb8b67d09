//! The one mapping from Rust errors to Python exceptions: one arm per error variant, each to a
//! class of `affinity.exceptions` (every one derives from `AffinityError`).

use pyo3::prelude::*;

use crate::error::Error;
use crate::groups::GroupError;
use crate::protocol::OfferError;
use crate::routing::policy::PolicyError as RustPolicyError;
use crate::routing::{RegexError, RoutingError as RustRoutingError};
use crate::subjects::runtime::SubjectsError;

pyo3::import_exception!(affinity.exceptions, AffinityOSError);
pyo3::import_exception!(affinity.exceptions, ArgumentTypeError);
pyo3::import_exception!(affinity.exceptions, ChannelUriError);
pyo3::import_exception!(affinity.exceptions, ClosedError);
pyo3::import_exception!(affinity.exceptions, ConfigError);
pyo3::import_exception!(affinity.exceptions, DataLossWarning);
pyo3::import_exception!(affinity.exceptions, DriverError);
pyo3::import_exception!(affinity.exceptions, DriverTimeoutError);
pyo3::import_exception!(affinity.exceptions, InvalidArgumentError);
pyo3::import_exception!(affinity.exceptions, MessageTooLongError);
pyo3::import_exception!(affinity.exceptions, PolicyError);
pyo3::import_exception!(affinity.exceptions, RoutingError);

/// An operating-system error as `AffinityOSError(errno, message)`, so `.errno` is set.
fn os_error(context: Option<&str>, error: &std::io::Error) -> PyErr {
    let message = match context {
        Some(context) => format!("{context}: {error}"),
        None => error.to_string(),
    };
    match error.raw_os_error() {
        Some(errno) => AffinityOSError::new_err((errno, message)),
        None => AffinityOSError::new_err(message),
    }
}

/// The exception for a transport error.
pub(crate) fn transport_error(error: Error) -> PyErr {
    match &error {
        Error::Config(_) => ChannelUriError::new_err(error.to_string()),
        Error::Setting(_) => ConfigError::new_err(error.to_string()),
        Error::Io(source) => os_error(None, source),
        Error::Os { context, source } => os_error(Some(context), source),
        Error::Closed(_) => ClosedError::new_err(error.to_string()),
        Error::Timeout(_) => DriverTimeoutError::new_err(error.to_string()),
        Error::Driver(_) => DriverError::new_err(error.to_string()),
    }
}

/// The exception for a consumer-group error.
pub(crate) fn group_error(error: GroupError) -> PyErr {
    match error {
        GroupError::Definition(message) => ConfigError::new_err(message),
        GroupError::RecordTooLong { .. } => MessageTooLongError::new_err(error.to_string()),
        GroupError::Closed => ClosedError::new_err(error.to_string()),
        GroupError::Transport(error) => transport_error(error),
        GroupError::Registry(message) => AffinityOSError::new_err(message),
    }
}

/// The exception for a subject router, subscriber or source error.
pub(crate) fn subjects_error(error: SubjectsError) -> PyErr {
    match error {
        SubjectsError::Transport(error) => transport_error(error),
        SubjectsError::Config(message) => ConfigError::new_err(message),
        SubjectsError::Codec(error) => ConfigError::new_err(error.to_string()),
        SubjectsError::Closed => ClosedError::new_err("subject peer is closed"),
    }
}

/// The exception for an offer refused as misuse; `None` for the outcomes `offer` returns as
/// negative codes (back-pressure, not connected, closed, ...).
pub(crate) fn offer_error(error: OfferError) -> Option<PyErr> {
    match error {
        OfferError::MessageTooLong { length, max } => Some(MessageTooLongError::new_err(format!(
            "message of {length} bytes exceeds the maximum of {max} bytes for this term length"
        ))),
        OfferError::NotConnected
        | OfferError::BackPressured
        | OfferError::AdminAction
        | OfferError::Closed
        | OfferError::MaxPositionExceeded => None,
    }
}

/// The exception for a routing-table error.
pub(crate) fn routing_error(error: RustRoutingError) -> PyErr {
    match error {
        RustRoutingError::NoService(_)
        | RustRoutingError::NoSourceGroup(_)
        | RustRoutingError::NotSubscribed(_)
        | RustRoutingError::UnknownMember(_) => RoutingError::new_err(error.to_string()),
        RustRoutingError::Config(message) => ConfigError::new_err(message),
        RustRoutingError::Regex(regex) => regex_error(regex),
    }
}

/// The exception for a pattern glibc refused (or one over the compile budget).
pub(crate) fn regex_error(error: RegexError) -> PyErr {
    ConfigError::new_err(format!("invalid POSIX extended regular expression: {}", error.message))
}

/// The exception for a policy that cannot be used.
pub(crate) fn policy_error(error: RustPolicyError) -> PyErr {
    PolicyError::new_err(error.0)
}

/// An invalid setting or configuration value (`ConfigError`, also a `ValueError`).
pub(crate) fn config_error(message: impl Into<String>) -> PyErr {
    ConfigError::new_err(message.into())
}

/// A malformed argument value (`InvalidArgumentError`, also a `ValueError`).
pub(crate) fn invalid_argument(message: impl Into<String>) -> PyErr {
    InvalidArgumentError::new_err(message.into())
}

/// An argument of the wrong type (`ArgumentTypeError`, also a `TypeError`).
pub(crate) fn wrong_type(message: impl Into<String>) -> PyErr {
    ArgumentTypeError::new_err(message.into())
}

/// Whether `error` is an `AffinityError` already (so wrappers keep it as it is).
pub(crate) fn is_affinity_error(py: Python<'_>, error: &PyErr) -> bool {
    error.is_instance_of::<AffinityError>(py)
}

pyo3::import_exception!(affinity.exceptions, AffinityError);
