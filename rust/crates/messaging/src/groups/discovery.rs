//! Discovery files: `<registry>/members/<group>/<member_id>.json`, one per live member.
//!
//! Written atomically (temporary file with mode 0600 created with `O_EXCL`, then `rename`),
//! removed on close. The folders must be this user's and not writable by others, and files are
//! read as regular files without following links or blocking (`crate::safe_fs`). A file is only a hint where to send heartbeats: liveness comes from
//! heartbeats alone. Files of processes that no longer exist on this host are removed.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use affinity_shm::shm::directory;
use serde::{Deserialize, Serialize};

use super::GroupError;
use crate::control::limits::{MAX_ENDPOINT_LENGTH, MAX_MEMBERS, MAX_NAME_LENGTH};
use crate::control::Role;
use crate::safe_fs;

/// Version of the member file format.
pub const MEMBER_FILE_VERSION: u32 = 1;
/// Largest member file read, in bytes.
pub const MAX_MEMBER_FILE_LENGTH: u64 = 4096;
/// Folder of the discovery files under the registry.
pub const MEMBERS_FOLDER: &str = "members";

/// The content of a discovery file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberFile {
    /// Format version ([`MEMBER_FILE_VERSION`]).
    pub version: u32,
    /// The member id (also the file name).
    pub member_id: u64,
    /// The group.
    pub group: String,
    /// Human-readable name.
    pub name: String,
    /// `publisher`, `consumer` or `observer`.
    pub role: String,
    /// Inbox endpoint `ip:port`.
    pub endpoint: String,
    /// Process id.
    pub pid: u32,
    /// Host name of the process.
    pub hostname: String,
}

impl MemberFile {
    /// Checks what a file read from disk says (it is untrusted).
    pub fn validate(&self) -> Result<Role, String> {
        if self.version != MEMBER_FILE_VERSION {
            return Err(format!("version {} is not {MEMBER_FILE_VERSION}", self.version));
        }
        if self.member_id == 0 {
            return Err("member_id 0".into());
        }
        if self.name.len() > MAX_NAME_LENGTH || self.endpoint.len() > MAX_ENDPOINT_LENGTH {
            return Err("name or endpoint too long".into());
        }
        if self.endpoint.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!("endpoint {:?} is not ip:port", self.endpoint));
        }
        Role::parse(&self.role).ok_or_else(|| format!("role {:?} unknown", self.role))
    }
}

/// `<registry>/members/<group>`.
pub fn members_dir(registry: &Path, group: &str) -> PathBuf {
    registry.join(MEMBERS_FOLDER).join(group)
}

fn registry_error(path: &Path, error: std::io::Error) -> GroupError {
    GroupError::Registry(format!("{}: {error}", path.display()))
}

/// Opens (creating 0700 where missing) the registry, its `members` folder and `dir` =
/// `<registry>/members/<group>`, each without following a symbolic link, and checks each belongs
/// to this user and is not writable by group or others: another user's registry is refused,
/// naming the path and its owner.
pub fn check_members_dir(dir: &Path) -> Result<(), GroupError> {
    let members = dir.parent().filter(|p| !p.as_os_str().is_empty());
    let registry = members.and_then(Path::parent).filter(|p| !p.as_os_str().is_empty());
    for path in [registry, members, Some(dir)].into_iter().flatten() {
        safe_fs::private_dir(path, true).map_err(|e| GroupError::Registry(e.to_string()))?;
    }
    Ok(())
}

/// Writes `file` as `<dir>/<member_id>.json` atomically, creating `dir` (0700) if needed; the
/// folders are checked first ([`check_members_dir`]).
pub fn write_member_file(dir: &Path, file: &MemberFile) -> Result<PathBuf, GroupError> {
    check_members_dir(dir)?;
    let text = serde_json::to_vec_pretty(file).map_err(|e| GroupError::Registry(e.to_string()))?;
    let path = dir.join(format!("{}.json", file.member_id));
    let temporary = dir.join(format!(".{}.{}.tmp", file.member_id, std::process::id()));
    let mut handle = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(|e| registry_error(&temporary, e))?;
    let written = handle.write_all(&text).and_then(|_| handle.sync_all());
    drop(handle);
    if let Err(error) = written.and_then(|_| fs::rename(&temporary, &path)) {
        let _ = fs::remove_file(&temporary);
        return Err(registry_error(&path, error));
    }
    Ok(path)
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Valid files (path, content, role).
    pub members: Vec<(PathBuf, MemberFile, Role)>,
    /// Files that could not be read or are invalid.
    pub invalid: u64,
}

/// Reads every `*.json` file in `dir` (at most [`MAX_MEMBERS`], each a regular file of at most
/// [`MAX_MEMBER_FILE_LENGTH`] bytes, opened without following a link or blocking: a FIFO or a
/// link to `/dev/zero` counts as invalid at once). A missing folder is an empty scan; a folder
/// that is not private to this user ([`safe_fs::private_dir`]) is not read (one invalid).
pub fn scan(dir: &Path, group: &str) -> Scan {
    let mut result = Scan::default();
    match safe_fs::private_dir(dir, false) {
        Ok(_) => {}
        Err(error) if error.io_error().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => return result,
        Err(_) => {
            result.invalid = 1;
            return result;
        }
    }
    let Ok(entries) = fs::read_dir(dir) else { return result };
    for entry in entries.flatten().take(MAX_MEMBERS * 2) {
        let path = entry.path();
        let is_json = path.extension().is_some_and(|e| e == "json")
            && !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !is_json {
            continue;
        }
        let parsed = safe_fs::read_regular(&path, MAX_MEMBER_FILE_LENGTH)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<MemberFile>(&bytes).ok())
            .and_then(|file| {
                let role = file.validate().ok()?;
                (file.group == group).then_some((file, role))
            });
        match parsed {
            Some((file, role)) if result.members.len() < MAX_MEMBERS => result.members.push((path, file, role)),
            Some(_) => {}
            None => result.invalid += 1,
        }
    }
    result
}

/// This host's name.
pub fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and we stop at the first NUL or the end.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if rc != 0 {
        return String::from("localhost");
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// Whether process `pid` exists on this host (a zombie does not): [`directory::process_exists`].
pub fn process_exists(pid: u32) -> bool {
    directory::process_exists(i64::from(pid))
}

/// Whether `file` belongs to a process of this host that no longer exists.
pub fn is_stale(file: &MemberFile, own_hostname: &str) -> bool {
    file.hostname == own_hostname && !process_exists(file.pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(id: u64, pid: u32) -> MemberFile {
        MemberFile {
            version: MEMBER_FILE_VERSION,
            member_id: id,
            group: "orders".into(),
            name: "n".into(),
            role: "consumer".into(),
            endpoint: "127.0.0.1:4000".into(),
            pid,
            hostname: hostname(),
        }
    }

    #[test]
    fn member_files_are_written_0600_and_scanned_back() {
        let root = crate::test_temp_dir::TempDir::new("discovery");
        let dir = members_dir(&root, "orders");
        let path = write_member_file(&dir, &file(7, std::process::id())).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        fs::write(dir.join("junk.json"), b"{not json").unwrap();
        let mut other = file(8, 1);
        other.group = "other".into();
        write_member_file(&dir, &other).unwrap();
        let found = scan(&dir, "orders");
        assert_eq!(found.members.len(), 1);
        assert_eq!(found.members[0].1.member_id, 7);
        assert_eq!(found.invalid, 2, "junk and the other group's file");
    }

    #[test]
    fn links_fifos_and_other_users_folders_are_not_read() {
        let root = crate::test_temp_dir::TempDir::new("discovery-hostile");
        let dir = members_dir(&root, "orders");
        write_member_file(&dir, &file(7, std::process::id())).unwrap();
        let real = dir.join("7.json");
        std::os::unix::fs::symlink(&real, dir.join("8.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("9.json")).unwrap();
        let fifo = std::ffi::CString::new(dir.join("10.json").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let found = scan(&dir, "orders");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "a FIFO must not block the scan");
        assert_eq!((found.members.len(), found.invalid), (1, 3));
        // The group folder as a link to another folder: refused when written, not read.
        let elsewhere = crate::test_temp_dir::TempDir::new("discovery-elsewhere");
        let linked = members_dir(&root, "linked");
        std::os::unix::fs::symlink(&*elsewhere, &linked).unwrap();
        let error = write_member_file(&linked, &file(11, std::process::id())).unwrap_err().to_string();
        assert!(error.contains("is a symbolic link"), "{error}");
        assert_eq!(scan(&linked, "orders").invalid, 1);
        assert!(fs::read_dir(&*elsewhere).unwrap().next().is_none(), "nothing written through the link");
        // A registry writable by others is refused.
        fs::set_permissions(&*root, fs::Permissions::from_mode(0o777)).unwrap();
        let error = write_member_file(&dir, &file(12, std::process::id())).unwrap_err().to_string();
        assert!(error.contains("writable by group or others"), "{error}");
    }

    #[test]
    fn files_of_dead_processes_on_this_host_are_stale() {
        assert!(!is_stale(&file(1, std::process::id()), &hostname()));
        assert!(is_stale(&file(1, i32::MAX as u32 - 1), &hostname()));
        let mut remote = file(1, i32::MAX as u32 - 1);
        remote.hostname = "elsewhere.invalid".into();
        assert!(!is_stale(&remote, &hostname()));
    }

    #[test]
    fn a_killed_unreaped_child_is_stale() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(process_exists(pid));
        child.kill().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while process_exists(pid) {
            assert!(std::time::Instant::now() < deadline, "zombie still counted as alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        child.wait().unwrap();
    }

    #[test]
    fn invalid_files_are_refused() {
        let mut bad = file(1, 1);
        bad.endpoint = "not-an-endpoint".into();
        assert!(bad.validate().is_err());
        bad = file(0, 1);
        assert!(bad.validate().is_err());
        bad = file(1, 1);
        bad.role = "boss".into();
        assert!(bad.validate().is_err());
    }
}
