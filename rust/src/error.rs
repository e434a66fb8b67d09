//! The crate's error type: one enum per layer, joined here.

use std::fmt;

/// Any error the crate reports to an application.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A channel URI or driver setting is invalid.
    Config(String),
    /// An operating-system call failed.
    Io(std::io::Error),
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
            Error::Config(message) => write!(f, "{message}"),
            Error::Io(error) => write!(f, "I/O error: {error}"),
            Error::Closed(what) => write!(f, "{what} is closed"),
            Error::Timeout(message) => write!(f, "timed out: {message}"),
            Error::Driver(message) => write!(f, "driver error: {message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Self {
        Error::Io(error)
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
