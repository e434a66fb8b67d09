//! The crate's error type: one enum per layer, joined here.

use std::fmt;

/// Any error the crate reports to an application.
#[derive(Debug)]
pub enum Error {
    /// A channel URI is invalid or asks for something this driver does not do.
    Config(String),
    /// A driver setting is out of its range; the message names the setting and the range.
    Setting(String),
    /// An operating-system call failed.
    Io(std::io::Error),
    /// An operating-system call failed on something `context` names: a channel's socket and
    /// address, or a driver directory.
    Os {
        /// What was being done, for example `aeron:udp?endpoint=...: cannot bind 127.0.0.1:40123`
        /// or `cannot attach to the driver in /dev/shm/affinity-alice (...)`.
        context: String,
        /// The operating system's error (its `errno` reaches Python's `OSError.errno`).
        source: std::io::Error,
    },
    /// The object (client, publication, subscription) was closed.
    Closed(&'static str),
    /// The driver did not answer in time.
    Timeout(String),
    /// Anything else that went wrong inside the driver.
    Driver(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(message) | Error::Setting(message) => write!(f, "{message}"),
            Error::Io(error) => write!(f, "I/O error: {error}"),
            Error::Os { context, source } => write!(f, "{context}: {source}"),
            Error::Closed(what) => write!(f, "{what} is closed"),
            Error::Timeout(message) => write!(f, "timed out: {message}"),
            Error::Driver(message) => write!(f, "driver error: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(error) | Error::Os { source: error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Self {
        Error::Io(error)
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
