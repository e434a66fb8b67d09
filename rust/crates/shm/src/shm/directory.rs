//! The driver directory: where it is, who may use it, and whether a driver is alive in it.
//!
//! Default location: `$AFFINITY_DIR`, else `/dev/shm/affinity-<user>`, else
//! `<temp dir>/affinity-<user>` where `/dev/shm` is missing; `<user>` is the login name of the
//! uid ([`user_name`]), never `$USER`. The directory is created 0700,
//! opened without following a symbolic link and must belong to the current user and not be
//! writable by group or others ([`crate::safe_fs::private_dir`]); files in it are 0600. A driver
//! is *live* when its pid exists and its heartbeat (the to-driver ring's consumer heartbeat) is
//! younger than the driver timeout; otherwise the directory is *stale* and a new driver takes it
//! over. A live *Aeron* media driver (a cnc file without our magic whose version, pid and
//! heartbeat sit at the same offsets) is recognised and refused, never taken over.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::cnc::{field, Cnc, CNC_FILE, CNC_MAGIC, META_DATA_LENGTH};
use super::error::ShmError;
use super::ring_buffer::TRAILER_LENGTH as RING_TRAILER;
use crate::safe_fs::{self, SafeFsError};

/// Environment variable naming the driver directory.
pub const ENV_DIR: &str = "AFFINITY_DIR";
/// Permission bits of the directory.
pub const DIR_MODE: u32 = 0o700;
/// Sub-directory of publication logs.
pub const PUBLICATIONS_DIR: &str = "publications";
/// Default driver timeout: a heartbeat older than this means the driver is dead (ms).
pub const DRIVER_TIMEOUT_MS: i64 = 10_000;
/// Default client liveness timeout: a client whose keepalives stop for this long is reclaimed
/// (the cnc header carries the driver's value to its clients).
pub const CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a client waits for the driver's answer to a command, attached or embedded (10 s,
/// as Aeron's client waits its driver timeout): the one default of both sides of the contract.
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(DRIVER_TIMEOUT_MS as u64);
/// Aeron's `ManyToOneRingBuffer.CONSUMER_HEARTBEAT_OFFSET`: where, inside the to-driver ring's
/// trailer (after the record capacity), an Aeron media driver writes its heartbeat (epoch ms).
pub const AERON_CONSUMER_HEARTBEAT_IN_TRAILER: usize = 640;

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
/// `<user>` is [`user_name`], so a driver, its clients and `affinity stat` of one user agree
/// whatever their environments say.
pub fn per_user_dir(suffix: &str) -> PathBuf {
    let name = format!("affinity-{}{suffix}", user_name());
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(name)
    } else {
        std::env::temp_dir().join(name)
    }
}

/// First size of the buffer `getpwuid_r` fills (names, home, shell); doubled on `ERANGE`.
const PASSWD_BUFFER_START: usize = 1024;
/// Largest buffer tried for one passwd entry before giving up on the name.
const PASSWD_BUFFER_MAX: usize = 1 << 20;

/// The `<user>` of every per-user path: the login name of this process's real uid (its passwd
/// entry; `$USER` is not read, as it may be unset or name someone else), or the uid in decimal
/// when the uid has no entry or its name cannot be a path component.
pub fn user_name() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    login_name(uid).unwrap_or_else(|| uid.to_string())
}

/// The login name of `uid` from the passwd database (`getpwuid_r`), when it has one that is a
/// valid path component.
fn login_name(uid: libc::uid_t) -> Option<String> {
    let mut buffer = vec![0u8; PASSWD_BUFFER_START];
    loop {
        // SAFETY: a zeroed passwd is a valid value of this plain C struct (null pointers, zeros).
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: entry, buffer and found outlive the call and buffer.len() is its size;
        // getpwuid_r writes the strings into buffer and sets found to null or to &entry.
        let code = unsafe { libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr().cast(), buffer.len(), &mut found) };
        if code == libc::ERANGE && buffer.len() < PASSWD_BUFFER_MAX {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if code != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: pw_name points at a NUL-terminated string inside buffer, still alive here.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) }.to_str().ok()?;
        return (!name.is_empty() && name != "." && name != ".." && !name.contains('/')).then(|| name.to_owned());
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
    /// A live Aeron media driver: a cnc file without our magic, whose pid exists and whose
    /// heartbeat (at Aeron's offsets) is younger than the driver timeout.
    AeronLive {
        /// Its pid.
        pid: i64,
        /// Its cnc version (`major << 16 | minor << 8 | patch`).
        version: i32,
        /// Milliseconds since its last heartbeat.
        heartbeat_age_ms: i64,
    },
    /// A cnc file whose driver is gone (or that cannot be read).
    Stale {
        /// Why it is considered stale.
        reason: String,
    },
}

/// Whether process `pid` exists (it may belong to another user) and is not a zombie: a
/// process killed but not yet reaped by its parent runs nothing, so what it held is stale.
pub fn process_exists(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let result = unsafe { libc::kill(pid, 0) };
    let exists = result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// Whether `pid` is a zombie (`/proc/<pid>/stat` says state `Z`); `false` when it cannot be read.
fn is_zombie(pid: libc::pid_t) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // `pid (comm) state ...`: comm may hold spaces and parentheses, so split at the last ')'.
    stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
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
/// `driver_timeout_ms`), a live Aeron driver, or stale.
pub fn inspect(dir: &Path, driver_timeout_ms: i64, now_ms: i64) -> DirectoryState {
    let path = dir.join(CNC_FILE);
    if !path.exists() {
        return DirectoryState::Absent;
    }
    let cnc = match Cnc::open(&path, false) {
        Ok(cnc) => cnc,
        Err(error) => {
            // Only a file we cannot read as ours is worth a second look: a live driver costs
            // no extra open.
            if let Some((pid, version, heartbeat_age_ms)) = live_aeron_driver(&path, driver_timeout_ms, now_ms) {
                return DirectoryState::AeronLive { pid, version, heartbeat_age_ms };
            }
            return DirectoryState::Stale { reason: error.to_string() };
        }
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

/// Reads `cnc` as Aeron's `CncFileDescriptor` (the same header offsets as ours: version at 0,
/// to-driver buffer length at 4, pid at 40; the heartbeat in the to-driver ring's trailer) and
/// returns `(pid, version, heartbeat age)` when it is not ours and its driver is alive.
fn live_aeron_driver(cnc: &Path, driver_timeout_ms: i64, now_ms: i64) -> Option<(i64, i32, i64)> {
    let file = safe_fs::open_regular(cnc, u64::MAX).ok()?;
    let mut header = [0u8; META_DATA_LENGTH];
    file.read_exact_at(&mut header, 0).ok()?;
    let i32_at = |offset: usize| header.get(offset..offset + 4).and_then(|b| b.try_into().ok()).map(i32::from_le_bytes);
    let i64_at = |offset: usize| header.get(offset..offset + 8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes);
    if i64_at(field::MAGIC)? == CNC_MAGIC {
        return None;
    }
    let version = i32_at(field::VERSION).filter(|&v| v > 0)?;
    let to_driver_length = usize::try_from(i32_at(field::TO_DRIVER_LENGTH)?).ok().filter(|&l| l >= RING_TRAILER)?;
    let pid = i64_at(field::PID)?;
    let heartbeat_offset = META_DATA_LENGTH + to_driver_length - RING_TRAILER + AERON_CONSUMER_HEARTBEAT_IN_TRAILER;
    let mut heartbeat = [0u8; 8];
    file.read_exact_at(&mut heartbeat, heartbeat_offset as u64).ok()?;
    let age = now_ms.saturating_sub(i64::from_le_bytes(heartbeat));
    ((0..driver_timeout_ms).contains(&age) && process_exists(pid)).then_some((pid, version, age))
}

/// `major.minor.patch` of a cnc version.
pub fn version_text(version: i32) -> String {
    format!("{}.{}.{}", version >> 16, (version >> 8) & 0xFF, version & 0xFF)
}

/// The error of a directory that is not private to this user (a symbolic link, another
/// user's, writable by others).
fn untrusted(error: SafeFsError) -> ShmError {
    match error {
        SafeFsError::Io { path, action, source } => ShmError::Io { path, action, source },
        SafeFsError::Untrusted { path, detail } => ShmError::Permissions { dir: path, detail },
    }
}

/// Opens driver directory `dir` (created 0700 when missing) without following a symbolic
/// link, and checks it belongs to this user and is not writable by group or others.
pub fn open_private(dir: &Path) -> Result<fs::File, ShmError> {
    safe_fs::private_dir(dir, true).map_err(untrusted)
}

/// Makes `dir` ready for a new driver: creates it 0700 (or checks an existing one is a real
/// directory of this user that no one else may write, and tightens it to 0700), refuses a live
/// driver (ours or Aeron's), removes a stale one's files and makes `publications/` 0700.
/// Returns the reason a stale directory was taken over, if it was.
pub fn prepare(dir: &Path, driver_timeout_ms: i64, now_ms: i64) -> Result<Option<String>, ShmError> {
    let handle = open_private(dir)?;
    handle.set_permissions(fs::Permissions::from_mode(DIR_MODE)).map_err(|e| ShmError::io(dir, "chmod", e))?;
    let took_over = match inspect(dir, driver_timeout_ms, now_ms) {
        DirectoryState::Absent => None,
        DirectoryState::Live { pid, heartbeat_age_ms } => {
            return Err(ShmError::DriverActive { dir: dir.to_path_buf(), pid, heartbeat_age_ms })
        }
        DirectoryState::AeronLive { pid, version, .. } => {
            return Err(ShmError::AeronDriverActive { dir: dir.to_path_buf(), pid, version })
        }
        DirectoryState::Stale { reason } => {
            remove_driver_files(dir)?;
            Some(reason)
        }
    };
    make_publications_dir(dir)?;
    Ok(took_over)
}

/// Creates `<dir>/publications` 0700, or tightens an existing one to 0700 (a directory left by
/// an older build may be 0755); anything else of that name is refused.
fn make_publications_dir(dir: &Path) -> Result<(), ShmError> {
    let publications = dir.join(PUBLICATIONS_DIR);
    match fs::DirBuilder::new().mode(DIR_MODE).create(&publications) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let handle = safe_fs::private_dir(&publications, false).map_err(untrusted)?;
            handle
                .set_permissions(fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| ShmError::io(&publications, "chmod", e))
        }
        Err(e) => Err(ShmError::io(&publications, "create directory", e)),
    }
}

/// Checks `dir` is a real directory (not a symbolic link) of the current user, not writable
/// by group or others.
pub fn check_owner(dir: &Path) -> Result<(), ShmError> {
    safe_fs::private_dir(dir, false).map(drop).map_err(untrusted)
}

/// File-name suffix of the log files a driver writes under [`PUBLICATIONS_DIR`].
pub const LOG_FILE_SUFFIX: &str = ".logbuffer";

/// Removes the driver's files from `dir`, keeping the directory: the cnc file and, under
/// `publications/`, the regular files named `*.logbuffer`; the folder goes only once empty.
/// Anything else (a link, a folder, a file of another name) is not ours and stays.
pub fn remove_driver_files(dir: &Path) -> Result<(), ShmError> {
    let publications = dir.join(PUBLICATIONS_DIR);
    if fs::symlink_metadata(&publications).is_ok_and(|meta| meta.is_dir()) {
        let entries = fs::read_dir(&publications).map_err(|e| ShmError::io(&publications, "list", e))?;
        for entry in entries.flatten() {
            let is_log = entry.file_name().to_str().is_some_and(|name| name.ends_with(LOG_FILE_SUFFIX));
            if is_log && entry.file_type().is_ok_and(|kind| kind.is_file()) {
                let path = entry.path();
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(ShmError::io(&path, "remove", e)),
                }
            }
        }
        // Not empty: what is left is not ours.
        let _ = fs::remove_dir(&publications);
    }
    let cnc = dir.join(CNC_FILE);
    match fs::remove_file(&cnc) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ShmError::io(&cnc, "remove", e)),
    }
}

/// Removes `dir` itself when it is empty: after a clean stop has removed the driver's files
/// ([`remove_driver_files`]), no empty folder is left behind. A folder still holding anything
/// (not ours), or a symbolic link, stays; returns whether `dir` was removed.
pub fn remove_if_empty(dir: &Path) -> bool {
    fs::remove_dir(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_name_is_the_uids_login_name_whatever_user_says() {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let expected = login_name(uid).unwrap_or_else(|| uid.to_string());
        assert_eq!(user_name(), expected);
        if uid == 0 {
            assert_eq!(login_name(0).as_deref(), Some("root"));
        }
        // No process here changes $USER (tests run threaded): the name never reads it.
        assert!(per_user_dir("-x").to_string_lossy().ends_with(&format!("affinity-{expected}-x")));
        assert_eq!(login_name(libc::uid_t::MAX - 1), None, "a uid without an entry has no name");
    }

    #[test]
    fn a_cleanly_stopped_directory_goes_when_only_our_files_were_in_it() {
        let root = tempdir();
        let ours = root.join("ours");
        prepare(&ours, 10_000, 0).unwrap();
        Cnc::create(&ours.join(CNC_FILE), &small(), std::process::id(), 0).unwrap();
        fs::write(ours.join(PUBLICATIONS_DIR).join("7.logbuffer"), b"log").unwrap();
        remove_driver_files(&ours).unwrap();
        assert!(remove_if_empty(&ours) && !ours.exists());
        let shared = root.join("shared");
        prepare(&shared, 10_000, 0).unwrap();
        fs::write(shared.join("notes.txt"), b"not ours").unwrap();
        remove_driver_files(&shared).unwrap();
        assert!(!remove_if_empty(&shared) && shared.join("notes.txt").exists());
        let target = root.join("target");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, root.join("link")).unwrap();
        assert!(!remove_if_empty(&root.join("link")) && target.is_dir());
    }
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
        let old_log = dir.join(PUBLICATIONS_DIR).join("1.logbuffer");
        fs::write(&old_log, b"log").unwrap();
        let reason = prepare(&dir, 10_000, 20_000).unwrap().unwrap();
        assert!(reason.contains("has not beaten"), "{reason}");
        assert!(!dir.join(CNC_FILE).exists() && !old_log.exists());
        // Pid gone (pid i32::MAX cannot exist on Linux: pid_max is at most 2^22).
        Cnc::create(&dir.join(CNC_FILE), &small(), i32::MAX as u32, 1_000).unwrap();
        assert!(prepare(&dir, 10_000, 1_001).unwrap().unwrap().contains("no longer exists"));
        // Garbage cnc.
        fs::write(dir.join(CNC_FILE), b"garbage").unwrap();
        assert!(prepare(&dir, 10_000, 0).unwrap().unwrap().contains("truncated"));
    }

    #[test]
    fn a_symlinked_directory_is_refused_and_its_target_neither_chmodded_nor_emptied() {
        let root = tempdir();
        let target = root.join("photos");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
        Cnc::create(&target.join(CNC_FILE), &small(), i32::MAX as u32, 0).unwrap();
        fs::create_dir(target.join(PUBLICATIONS_DIR)).unwrap();
        let link = root.join("driver");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = prepare(&link, 10_000, 0).unwrap_err().to_string();
        assert!(error.contains(&format!("driver directory {}: is a symbolic link", link.display())), "{error}");
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o777, 0o755);
        assert!(target.join(CNC_FILE).exists() && target.join(PUBLICATIONS_DIR).exists());
    }

    #[test]
    fn a_takeover_removes_only_our_log_files() {
        let dir = tempdir();
        prepare(&dir, 10_000, 0).unwrap();
        Cnc::create(&dir.join(CNC_FILE), &small(), i32::MAX as u32, 0).unwrap();
        let publications = dir.join(PUBLICATIONS_DIR);
        fs::write(publications.join("7.logbuffer"), b"log").unwrap();
        fs::write(publications.join("notes.txt"), b"mine").unwrap();
        let elsewhere = tempdir();
        fs::write(elsewhere.join("8.logbuffer"), b"not in here").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("8.logbuffer"), publications.join("8.logbuffer")).unwrap();
        fs::create_dir(publications.join("9.logbuffer")).unwrap();
        assert!(prepare(&dir, 10_000, 1).unwrap().is_some());
        assert!(!publications.join("7.logbuffer").exists() && !dir.join(CNC_FILE).exists());
        assert!(publications.join("notes.txt").exists() && publications.join("9.logbuffer").is_dir());
        assert!(
            fs::symlink_metadata(publications.join("8.logbuffer")).is_ok() && elsewhere.join("8.logbuffer").exists()
        );
    }

    #[test]
    fn a_directory_writable_by_others_is_refused() {
        let dir = tempdir();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let error = prepare(&dir, 10_000, 0).unwrap_err().to_string();
        assert!(error.contains("writable by group or others (mode 0o777"), "{error}");
    }

    #[test]
    fn publications_is_made_0700_and_an_old_open_one_tightened() {
        let dir = tempdir();
        prepare(&dir, 10_000, 0).unwrap();
        assert_eq!(fs::metadata(dir.join(PUBLICATIONS_DIR)).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(dir.join(PUBLICATIONS_DIR), fs::Permissions::from_mode(0o755)).unwrap();
        prepare(&dir, 10_000, 0).unwrap();
        assert_eq!(fs::metadata(dir.join(PUBLICATIONS_DIR)).unwrap().mode() & 0o777, 0o700);
    }

    /// Writes an Aeron-like cnc (Aeron's `CncFileDescriptor` header, version 0.2.0, no magic)
    /// with driver `pid` and heartbeat `heartbeat_ms` in the to-driver ring's trailer.
    fn aeron_cnc(path: &Path, pid: i64, heartbeat_ms: i64) {
        let to_driver = 1024 + RING_TRAILER;
        let mut bytes = vec![0u8; META_DATA_LENGTH + to_driver + 4096];
        bytes[field::VERSION..field::VERSION + 4].copy_from_slice(&(2i32 << 8).to_le_bytes());
        bytes[field::TO_DRIVER_LENGTH..field::TO_DRIVER_LENGTH + 4].copy_from_slice(&(to_driver as i32).to_le_bytes());
        bytes[field::PID..field::PID + 8].copy_from_slice(&pid.to_le_bytes());
        let heartbeat = META_DATA_LENGTH + 1024 + AERON_CONSUMER_HEARTBEAT_IN_TRAILER;
        bytes[heartbeat..heartbeat + 8].copy_from_slice(&heartbeat_ms.to_le_bytes());
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_live_aeron_driver_is_recognised_and_refused_and_a_dead_one_taken_over() {
        let dir = tempdir();
        let pid = i64::from(std::process::id());
        aeron_cnc(&dir.join(CNC_FILE), pid, 1_000);
        assert_eq!(
            inspect(&dir, 10_000, 1_500),
            DirectoryState::AeronLive { pid, version: 0x200, heartbeat_age_ms: 500 }
        );
        let error = prepare(&dir, 10_000, 1_500).unwrap_err().to_string();
        assert!(
            error.contains(&format!(
                "directory {} holds a live Aeron media driver (pid {pid}, cnc version 0.2.0)",
                dir.display()
            )),
            "{error}"
        );
        assert!(dir.join(CNC_FILE).exists(), "Aeron's files are left alone");
        // Heartbeat too old, or pid gone: stale, taken over like any other.
        assert!(matches!(inspect(&dir, 10_000, 20_000), DirectoryState::Stale { .. }));
        aeron_cnc(&dir.join(CNC_FILE), i64::from(i32::MAX), 1_000);
        assert!(matches!(inspect(&dir, 10_000, 1_500), DirectoryState::Stale { .. }));
    }

    #[test]
    fn an_open_directory_is_tightened_to_0700() {
        let dir = tempdir();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750)).unwrap();
        prepare(&dir, 10_000, 0).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }
}
