//! Directories and files another local user may have prepared: opened without following
//! symbolic links and without blocking, trusted only when they belong to this user.
//!
//! Every directory the crate creates or reuses (the driver directory, the embedded drivers'
//! root and private directories, the group registry's member folders) goes through
//! [`private_dir`]: its last component is opened `O_DIRECTORY | O_NOFOLLOW` and the open
//! descriptor is checked with `fstat` (owned by this user, not writable by group or others), so
//! what is checked is what was opened. A directory that passes cannot be swapped afterwards by
//! another user: they cannot write in it, and in a sticky parent such as `/dev/shm` or `/tmp`
//! they cannot rename or remove it either. Parents above the last component are not checked (a
//! path under a folder another user controls is the caller's choice).
//!
//! Files read from such directories (definitions, discovery files) go through
//! [`read_regular`]: `O_NOFOLLOW | O_NONBLOCK`, a regular file by `fstat`, at most a given
//! number of bytes: a symbolic link to `/dev/zero` or a FIFO gives an error at once.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Permission bits of every private directory the crate creates.
pub const PRIVATE_DIR_MODE: u32 = 0o700;
/// Permission bits of marker files the crate creates in its private directories.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Permission bits that, set on a directory, let another user change what it holds.
pub const UNTRUSTED_MODE_BITS: u32 = 0o022;

/// Why a directory or file was not used.
#[derive(Debug)]
pub enum SafeFsError {
    /// An operating-system call on `path` failed.
    Io {
        /// The directory or file.
        path: PathBuf,
        /// What was being done (`"create"`, `"open"`, `"read"`).
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// `path` exists but is not to be trusted: a symbolic link, another user's, writable by
    /// others, not a directory / regular file, or too large.
    Untrusted {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong, with the owner and mode found.
        detail: String,
    },
}

impl SafeFsError {
    /// The directory or file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            SafeFsError::Io { path, .. } | SafeFsError::Untrusted { path, .. } => path,
        }
    }

    /// What is wrong, without the path.
    pub fn detail(&self) -> String {
        match self {
            SafeFsError::Io { action, source, .. } => format!("cannot {action}: {source}"),
            SafeFsError::Untrusted { detail, .. } => detail.clone(),
        }
    }

    /// The OS error, for an `Io` error.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            SafeFsError::Io { source, .. } => Some(source),
            SafeFsError::Untrusted { .. } => None,
        }
    }
}

impl fmt::Display for SafeFsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.detail())
    }
}

impl std::error::Error for SafeFsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SafeFsError::Io { source, .. } => Some(source),
            SafeFsError::Untrusted { .. } => None,
        }
    }
}

/// This process's real user id.
pub fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn untrusted(path: &Path, detail: String) -> SafeFsError {
    SafeFsError::Untrusted { path: path.to_path_buf(), detail }
}

/// What `path` is when opening it without following links failed with `ELOOP` / `ENOTDIR`.
fn describe_not_opened(path: &Path, expected: &str, source: std::io::Error) -> SafeFsError {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(path).map(|t| format!(" to {}", t.display())).unwrap_or_default();
            untrusted(path, format!("is a symbolic link{target} owned by uid {}, not {expected}: refused", meta.uid()))
        }
        Ok(meta) => untrusted(path, format!("is not {expected} (owned by uid {}): refused", meta.uid())),
        Err(_) => SafeFsError::Io { path: path.to_path_buf(), action: "open", source },
    }
}

/// Checks an open directory's owner and mode.
fn check_private(path: &Path, meta: &std::fs::Metadata) -> Result<(), SafeFsError> {
    let uid = current_uid();
    if meta.uid() != uid {
        return Err(untrusted(path, format!("is owned by uid {}, not by this user (uid {uid}): refused", meta.uid())));
    }
    let mode = meta.mode() & 0o7777;
    if mode & UNTRUSTED_MODE_BITS != 0 {
        return Err(untrusted(
            path,
            format!("is writable by group or others (mode {mode:#o}, owner uid {}): refused", meta.uid()),
        ));
    }
    Ok(())
}

/// Opens directory `path` without following a symbolic link at its last component and checks
/// that it belongs to this user and is not writable by group or others. With `create`, a
/// missing directory is made first (mode [`PRIVATE_DIR_MODE`]; missing parents are made with
/// the default mode). The returned descriptor is the directory that was checked.
pub fn private_dir(path: &Path, create: bool) -> Result<File, SafeFsError> {
    if create {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.exists() {
                std::fs::DirBuilder::new().recursive(true).mode(PRIVATE_DIR_MODE).create(parent).map_err(|source| {
                    SafeFsError::Io { path: parent.to_path_buf(), action: "create directory", source }
                })?;
            }
        }
        match std::fs::DirBuilder::new().mode(PRIVATE_DIR_MODE).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(SafeFsError::Io { path: path.to_path_buf(), action: "create directory", source })
            }
        }
    }
    let dir = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => describe_not_opened(path, "a directory", source),
            _ => SafeFsError::Io { path: path.to_path_buf(), action: "open directory", source },
        })?;
    let meta = dir.metadata().map_err(|source| SafeFsError::Io { path: path.to_path_buf(), action: "stat", source })?;
    check_private(path, &meta)?;
    Ok(dir)
}

/// Opens `path` for reading without following a symbolic link and without blocking, and
/// checks it is a regular file of at most `max_len` bytes.
pub fn open_regular(path: &Path, max_len: u64) -> Result<File, SafeFsError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(libc::ELOOP) => describe_not_opened(path, "a regular file", source),
            _ => SafeFsError::Io { path: path.to_path_buf(), action: "open", source },
        })?;
    let meta =
        file.metadata().map_err(|source| SafeFsError::Io { path: path.to_path_buf(), action: "stat", source })?;
    if !meta.file_type().is_file() {
        return Err(untrusted(path, format!("is not a regular file ({}): refused", kind(&meta))));
    }
    if meta.len() > max_len {
        return Err(untrusted(path, format!("is {} bytes, more than the limit of {max_len}: refused", meta.len())));
    }
    Ok(file)
}

/// Reads a regular file opened as [`open_regular`] does; at most `max_len` bytes (a file
/// growing past it while read is refused too).
pub fn read_regular(path: &Path, max_len: u64) -> Result<Vec<u8>, SafeFsError> {
    let file = open_regular(path, max_len)?;
    let mut bytes = Vec::new();
    file.take(max_len.saturating_add(1)).read_to_end(&mut bytes).map_err(|source| SafeFsError::Io {
        path: path.to_path_buf(),
        action: "read",
        source,
    })?;
    if bytes.len() as u64 > max_len {
        return Err(untrusted(path, format!("grew past the limit of {max_len} bytes while read: refused")));
    }
    Ok(bytes)
}

/// The kind of a file that is not a regular one, for messages.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let file_type = meta.file_type();
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_directory_is_created_0700_and_reopened() {
        let root = crate::test_temp_dir::TempDir::new("safe-fs-create");
        let dir = root.join("a").join("b");
        private_dir(&dir, true).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, PRIVATE_DIR_MODE);
        private_dir(&dir, true).unwrap();
        private_dir(&dir, false).unwrap();
    }

    #[test]
    fn a_symlinked_directory_is_refused_naming_its_owner_and_nothing_is_changed() {
        let root = crate::test_temp_dir::TempDir::new("safe-fs-link");
        let target = root.join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for create in [false, true] {
            let error = private_dir(&link, create).unwrap_err().to_string();
            assert!(
                error.contains("is a symbolic link") && error.contains(&format!("uid {}", current_uid())),
                "{error}"
            );
            assert!(error.starts_with(&link.display().to_string()), "{error}");
        }
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o755);
    }

    #[test]
    fn a_directory_writable_by_others_or_a_file_is_refused() {
        let root = crate::test_temp_dir::TempDir::new("safe-fs-mode");
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = private_dir(&open, true).unwrap_err().to_string();
        assert!(error.contains("writable by group or others (mode 0o777"), "{error}");
        std::fs::write(root.join("file"), b"x").unwrap();
        let error = private_dir(&root.join("file"), false).unwrap_err().to_string();
        assert!(error.contains("is not a directory"), "{error}");
    }

    #[test]
    fn another_users_directory_is_refused_with_its_uid() {
        if current_uid() != 0 {
            return; // chown needs root; CI runs as root
        }
        let root = crate::test_temp_dir::TempDir::new("safe-fs-owner");
        let dir = root.join("theirs");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        let error = private_dir(&dir, true).unwrap_err().to_string();
        assert!(error.contains("is owned by uid 65534, not by this user (uid 0)"), "{error}");
    }

    #[test]
    fn files_are_read_only_when_regular_small_and_not_links() {
        let root = crate::test_temp_dir::TempDir::new("safe-fs-files");
        let file = root.join("ok.json");
        std::fs::write(&file, b"{}").unwrap();
        assert_eq!(read_regular(&file, 16).unwrap(), b"{}");
        std::fs::write(&file, [b' '; 17]).unwrap();
        assert!(read_regular(&file, 16).unwrap_err().to_string().contains("17 bytes, more than the limit of 16"));
        let zero = root.join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let error = read_regular(&zero, 16).unwrap_err().to_string();
        assert!(error.contains("is a symbolic link to /dev/zero"), "{error}");
        let fifo = root.join("fifo.json");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let error = read_regular(&fifo, 16).unwrap_err().to_string();
        assert!(error.contains("is not a regular file (a FIFO)"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
