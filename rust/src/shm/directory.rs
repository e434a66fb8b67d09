//! The driver directory: where it is, who may use it, and whether a driver is alive in it.
//!
//! Default location: `$AFFINITY_DIR`, else `/dev/shm/affinity-<user>`, else
//! `<temp dir>/affinity-<user>` where `/dev/shm` is missing. The directory is created 0700 and
//! must belong to the current user; files in it are 0600. A driver is *live* when its pid exists
//! and its heartbeat (the to-driver ring's consumer heartbeat) is younger than the driver timeout;
//! otherwise the directory is *stale* and a new driver takes it over.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::cnc::{Cnc, CNC_FILE};
use super::error::ShmError;

/// Environment variable naming the driver directory.
pub const ENV_DIR: &str = "AFFINITY_DIR";
/// Permission bits of the directory.
pub const DIR_MODE: u32 = 0o700;
/// Sub-directory of publication logs.
pub const PUBLICATIONS_DIR: &str = "publications";
/// Default driver timeout: a heartbeat older than this means the driver is dead (ms).
pub const DRIVER_TIMEOUT_MS: i64 = 10_000;

/// Milliseconds since the Unix epoch: the clock driver and clients compare heartbeats with.
pub fn epoch_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The directory to use when none is given.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(ENV_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    per_user_dir("")
}

/// `/dev/shm/affinity-<user><suffix>` (the temp dir where `/dev/shm` is missing): the default
/// driver directory (no suffix) and the parent of embedded drivers' private directories.
pub fn per_user_dir(suffix: &str) -> PathBuf {
    let user = std::env::var("USER").ok().filter(|u| !u.is_empty() && !u.contains('/'));
    // SAFETY: getuid has no preconditions and cannot fail.
    let name = format!("affinity-{}{suffix}", user.unwrap_or_else(|| unsafe { libc::getuid() }.to_string()));
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(name)
    } else {
        std::env::temp_dir().join(name)
    }
}

/// What a directory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryState {
    /// No cnc file.
    Absent,
    /// A driver is alive.
    Live {
        /// Its pid.
        pid: i64,
        /// Milliseconds since its last heartbeat.
        heartbeat_age_ms: i64,
    },
    /// A cnc file whose driver is gone (or that cannot be read).
    Stale {
        /// Why it is considered stale.
        reason: String,
    },
}

/// Whether process `pid` exists (it may belong to another user).
pub fn process_exists(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Why this process may not open the driver files in `dir`, if it may not: the OS error of
/// opening its cnc file for reading and writing, and the uid owning `dir` when that can be read
/// (a driver's directory is 0700: a process of another user is refused here). `None` when the
/// file opens or does not exist ([`inspect`] then says which).
pub fn access_denied(dir: &Path) -> Option<(std::io::Error, Option<u32>)> {
    match fs::OpenOptions::new().read(true).write(true).open(dir.join(CNC_FILE)) {
        Ok(_) => None,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => Some((error, fs::metadata(dir).ok().map(|meta| meta.uid()))),
    }
}

/// Looks at `dir`'s cnc file: absent, live (pid exists, heartbeat younger than
/// `driver_timeout_ms`) or stale.
pub fn inspect(dir: &Path, driver_timeout_ms: i64, now_ms: i64) -> DirectoryState {
    let path = dir.join(CNC_FILE);
    if !path.exists() {
        return DirectoryState::Absent;
    }
    let cnc = match Cnc::open(&path, false) {
        Ok(cnc) => cnc,
        Err(error) => return DirectoryState::Stale { reason: error.to_string() },
    };
    let (Ok(pid), Ok(heartbeat)) = (cnc.pid(), cnc.driver_heartbeat_ms()) else {
        return DirectoryState::Stale { reason: "unreadable header".into() };
    };
    let age = now_ms.saturating_sub(heartbeat);
    if !process_exists(pid) {
        return DirectoryState::Stale { reason: format!("driver pid {pid} no longer exists") };
    }
    if age >= driver_timeout_ms {
        return DirectoryState::Stale { reason: format!("driver pid {pid} has not beaten for {age} ms") };
    }
    DirectoryState::Live { pid, heartbeat_age_ms: age }
}

/// Makes `dir` ready for a new driver: creates it 0700 (or checks an existing one belongs to
/// this user and tightens it to 0700), refuses a live driver, and removes a stale one's files.
/// Returns the reason a stale directory was taken over, if it was.
pub fn prepare(dir: &Path, driver_timeout_ms: i64, now_ms: i64) -> Result<Option<String>, ShmError> {
    fs::create_dir_all(dir).map_err(|e| ShmError::io(dir, "create directory", e))?;
    check_owner(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE)).map_err(|e| ShmError::io(dir, "chmod", e))?;
    match inspect(dir, driver_timeout_ms, now_ms) {
        DirectoryState::Absent => Ok(None),
        DirectoryState::Live { pid, heartbeat_age_ms } => {
            Err(ShmError::DriverActive { dir: dir.to_path_buf(), pid, heartbeat_age_ms })
        }
        DirectoryState::Stale { reason } => {
            remove_driver_files(dir)?;
            Ok(Some(reason))
        }
    }
}

/// Checks `dir` belongs to the current user and is not open to others.
pub fn check_owner(dir: &Path) -> Result<(), ShmError> {
    let meta = fs::metadata(dir).map_err(|e| ShmError::io(dir, "stat", e))?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(ShmError::Permissions {
            dir: dir.to_path_buf(),
            detail: format!("owned by uid {}, not by this user (uid {uid})", meta.uid()),
        });
    }
    Ok(())
}

/// Removes the driver's files (cnc and logs) from `dir`, keeping the directory.
pub fn remove_driver_files(dir: &Path) -> Result<(), ShmError> {
    let publications = dir.join(PUBLICATIONS_DIR);
    if publications.exists() {
        fs::remove_dir_all(&publications).map_err(|e| ShmError::io(&publications, "remove", e))?;
    }
    let cnc = dir.join(CNC_FILE);
    match fs::remove_file(&cnc) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ShmError::io(&cnc, "remove", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::test_support::{small_cnc as small, tempdir};

    #[test]
    fn a_live_driver_is_refused_with_its_pid() {
        let dir = tempdir();
        assert_eq!(prepare(&dir, 10_000, 0).unwrap(), None);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let pid = std::process::id();
        Cnc::create(&dir.join(CNC_FILE), &small(), pid, 1_000).unwrap();
        let error = prepare(&dir, 10_000, 1_500).unwrap_err().to_string();
        assert!(error.contains(&format!("pid {pid}")), "{error}");
        assert_eq!(inspect(&dir, 10_000, 1_500), DirectoryState::Live { pid: pid as i64, heartbeat_age_ms: 500 });
    }

    #[test]
    fn a_stale_directory_is_taken_over() {
        let dir = tempdir();
        prepare(&dir, 10_000, 0).unwrap();
        // Heartbeat too old.
        Cnc::create(&dir.join(CNC_FILE), &small(), std::process::id(), 1_000).unwrap();
        fs::create_dir(dir.join(PUBLICATIONS_DIR)).unwrap();
        let reason = prepare(&dir, 10_000, 20_000).unwrap().unwrap();
        assert!(reason.contains("has not beaten"), "{reason}");
        assert!(!dir.join(CNC_FILE).exists() && !dir.join(PUBLICATIONS_DIR).exists());
        // Pid gone (pid i32::MAX cannot exist on Linux: pid_max is at most 2^22).
        Cnc::create(&dir.join(CNC_FILE), &small(), i32::MAX as u32, 1_000).unwrap();
        assert!(prepare(&dir, 10_000, 1_001).unwrap().unwrap().contains("no longer exists"));
        // Garbage cnc.
        fs::write(dir.join(CNC_FILE), b"garbage").unwrap();
        assert!(prepare(&dir, 10_000, 0).unwrap().unwrap().contains("truncated"));
    }

    #[test]
    fn an_open_directory_is_tightened_to_0700() {
        let dir = tempdir();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir, 10_000, 0).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }
}
