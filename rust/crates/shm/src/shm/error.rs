//! Errors of the shared-memory layer: every one names the file or structure and what is wrong.

use std::fmt;
use std::path::PathBuf;

/// What went wrong with a mapped file or a structure inside one.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShmError {
    /// An operating-system call on `path` failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done (`"create"`, `"open"`, `"map"`, ...).
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file failed validation on open (wrong magic, version, length, alignment...).
    Invalid {
        /// Which kind of file (`"cnc"`, `"log buffer"`, ...).
        file: &'static str,
        /// Its path, when it has one (anonymous mappings have none).
        path: Option<PathBuf>,
        /// What is wrong, with the values found.
        detail: String,
    },
    /// A parameter given to create a structure is out of range.
    Parameter(String),
    /// A record or frame inside a structure is inconsistent (corrupted memory or a broken peer).
    Corrupt {
        /// Which structure (`"ring buffer"`, `"term"`, ...).
        structure: &'static str,
        /// Byte offset of the bad record inside the structure.
        offset: usize,
        /// What is wrong.
        detail: String,
    },
    /// An access `[index, index + size)` falls outside a region of `capacity` bytes.
    OutOfBounds {
        /// First byte accessed.
        index: usize,
        /// Bytes accessed.
        size: usize,
        /// Bytes in the region.
        capacity: usize,
    },
    /// An atomic access at `index` is not aligned to `align` bytes.
    Misaligned {
        /// Offset of the access.
        index: usize,
        /// Required alignment.
        align: usize,
    },
    /// A write to a region mapped read-only.
    ReadOnly,
    /// A live driver already uses the directory.
    DriverActive {
        /// The directory.
        dir: PathBuf,
        /// The live driver's process id.
        pid: i64,
        /// Age of its last heartbeat in milliseconds.
        heartbeat_age_ms: i64,
    },
    /// A live Aeron media driver uses the directory (its cnc file has Aeron's layout, not our
    /// magic).
    AeronDriverActive {
        /// The directory.
        dir: PathBuf,
        /// The Aeron driver's process id.
        pid: i64,
        /// Its cnc version (`major << 16 | minor << 8 | patch`).
        version: i32,
    },
    /// The directory is not private to this user.
    Permissions {
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl ShmError {
    pub(crate) fn invalid(file: &'static str, path: Option<&std::path::Path>, detail: impl Into<String>) -> Self {
        ShmError::Invalid { file, path: path.map(|p| p.to_path_buf()), detail: detail.into() }
    }

    pub(crate) fn corrupt(structure: &'static str, offset: usize, detail: impl Into<String>) -> Self {
        ShmError::Corrupt { structure, offset, detail: detail.into() }
    }

    /// An I/O failure: `action` (e.g. "create directory") on `path`.
    pub fn io(path: &std::path::Path, action: &'static str, source: std::io::Error) -> Self {
        ShmError::Io { path: path.to_path_buf(), action, source }
    }
}

impl fmt::Display for ShmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmError::Io { path, action, source } => write!(f, "cannot {action} {}: {source}", path.display()),
            ShmError::Invalid { file, path: Some(path), detail } => {
                write!(f, "invalid {file} file {}: {detail}", path.display())
            }
            ShmError::Invalid { file, path: None, detail } => write!(f, "invalid {file}: {detail}"),
            ShmError::Parameter(detail) => write!(f, "{detail}"),
            ShmError::Corrupt { structure, offset, detail } => {
                write!(f, "corrupt {structure} at offset {offset}: {detail}")
            }
            ShmError::OutOfBounds { index, size, capacity } => {
                write!(f, "access of {size} bytes at offset {index} is outside a region of {capacity} bytes")
            }
            ShmError::Misaligned { index, align } => {
                write!(f, "access at offset {index} is not aligned to {align} bytes")
            }
            ShmError::ReadOnly => write!(f, "write to a region mapped read-only"),
            ShmError::DriverActive { dir, pid, heartbeat_age_ms } => write!(
                f,
                "a driver (pid {pid}) is running on {} (heartbeat {heartbeat_age_ms} ms ago); stop it or use another directory",
                dir.display()
            ),
            ShmError::AeronDriverActive { dir, pid, version } => write!(
                f,
                "directory {} holds a live Aeron media driver (pid {pid}, cnc version {}); stop it or use another directory",
                dir.display(),
                super::directory::version_text(*version)
            ),
            ShmError::Permissions { dir, detail } => write!(f, "driver directory {}: {detail}", dir.display()),
        }
    }
}

impl std::error::Error for ShmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShmError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ShmError> for crate::error::Error {
    fn from(error: ShmError) -> Self {
        match error {
            ShmError::Parameter(detail) => crate::error::Error::Config(detail),
            other => crate::error::Error::Driver(other.to_string()),
        }
    }
}
