//! Creating and opening the mapped files of a driver directory: created exclusively with mode
//! 0600 (`O_EXCL` never follows a link), sized with `ftruncate` (sparse: a page costs memory
//! only once written); opened without following a link or blocking, regular files only; and the
//! sealed memfds the driver's log buffers live in (`docs/driver-protocol.md`, "Log buffers are
//! sealed memfds"), which no process can shrink or grow.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rustix::fs::{MemfdFlags, SealFlags};

use super::buffer::{Mapping, Region};
use super::error::ShmError;

/// Permission bits of every file the driver creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` (which must not exist) with mode 0600, sets its length to `len` without
/// writing (sparse), and maps it shared read-write.
pub fn create_mapped(path: &Path, len: usize) -> Result<Region, ShmError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(|e| ShmError::io(path, "create", e))?;
    let len_u64 = u64::try_from(len).map_err(|_| ShmError::Parameter(format!("file length {len} too large")))?;
    file.set_len(len_u64).map_err(|e| ShmError::io(path, "size", e))?;
    map(&file, path, true)
}

/// The seals of every sealed memfd: its length can never change again (truncating it, which
/// would raise `SIGBUS` in every process that maps it, fails with `EPERM`), nor its seals.
/// Writes stay allowed: clients append to logs.
pub const LOG_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW).union(SealFlags::SEAL);

/// Where processes of the same user open file descriptor `fd` of process `pid`.
pub fn proc_fd_path(pid: u32, fd: i32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/fd/{fd}"))
}

/// The `(pid, fd)` a [`proc_fd_path`] names; `None` for any other string.
pub fn parse_proc_fd_path(path: &str) -> Option<(u32, i32)> {
    let rest = path.strip_prefix("/proc/")?;
    let (pid, fd) = rest.split_once("/fd/")?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(fd) {
        return None;
    }
    Some((pid.parse().ok()?, fd.parse().ok()?))
}

/// Creates a memfd named `name` (close-on-exec), sizes it to `len` without writing (sparse, as
/// a file), seals it with [`LOG_SEALS`] and maps it shared read-write. The region keeps the
/// memfd open: it lives as long as any mapping of it, and is gone (nothing left anywhere) once
/// the last process unmaps it. Returns the region and the [`proc_fd_path`] that names it while
/// this process keeps it.
pub fn create_sealed(name: &str, len: usize) -> Result<(Region, PathBuf), ShmError> {
    let label = PathBuf::from(format!("memfd:{name}"));
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| ShmError::io(&label, "create", e.into()))?;
    let file = File::from(fd);
    let len_u64 = u64::try_from(len).map_err(|_| ShmError::Parameter(format!("file length {len} too large")))?;
    file.set_len(len_u64).map_err(|e| ShmError::io(&label, "size", e))?;
    // 0600 as every file of the directory (a memfd starts 0777; `/proc/<pid>/fd` is only
    // reachable by the same user anyway).
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(FILE_MODE))
        .map_err(|e| ShmError::io(&label, "chmod", e))?;
    rustix::fs::fcntl_add_seals(&file, LOG_SEALS).map_err(|e| ShmError::io(&label, "seal", e.into()))?;
    let path = proc_fd_path(std::process::id(), file.as_raw_fd());
    let inode = file.metadata().map_err(|e| ShmError::io(&label, "stat", e))?;
    let mapping = Arc::new(Mapping::map_file(&file, true).map_err(|e| ShmError::io(&label, "map", e))?);
    let mut created = CREATED_SEALED.lock().unwrap_or_else(PoisonError::into_inner);
    created.retain(|(_, mapping)| mapping.strong_count() > 0);
    created.push(((inode.dev(), inode.ino()), Arc::downgrade(&mapping)));
    Ok((Region::keeping_open(mapping, file), path))
}

/// The mappings of the sealed memfds this process created and still maps, by `(device, inode)`:
/// [`open_sealed`] of one of them (the client of a driver in this process opening a log it
/// announced) shares its mapping instead of mapping the file again, so each page is mapped,
/// and faulted in, once per process, and the pages the driver populates ahead of a writer
/// (`log_buffer::PopulateAhead`) are populated for its clients too.
static CREATED_SEALED: Mutex<Vec<(Inode, Weak<Mapping>)>> = Mutex::new(Vec::new());

/// A file's `(device, inode)`.
type Inode = (u64, u64);

/// The live mapping of a sealed memfd this process created, if `file` is one.
fn created_mapping(file: &std::fs::Metadata) -> Option<Arc<Mapping>> {
    let created = CREATED_SEALED.lock().unwrap_or_else(PoisonError::into_inner);
    created.iter().filter(|(inode, _)| *inode == (file.dev(), file.ino())).find_map(|(_, mapping)| mapping.upgrade())
}

/// Opens a sealed memfd of another process (through its [`proc_fd_path`]) read-write and maps
/// it, after checking that it holds at least `min_len` bytes and is sealed against shrinking
/// (anything else is not a log the driver made). One this process created is not mapped again:
/// the region shares the creator's mapping (`CREATED_SEALED`).
pub fn open_sealed(path: &Path, kind: &'static str, min_len: usize) -> Result<Region, ShmError> {
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(|e| ShmError::io(path, "open", e))?;
    let seals = match rustix::fs::fcntl_get_seals(&file) {
        Ok(seals) => seals,
        // Only memfds (and shmem files) have seals; anything else cannot be sealed at all.
        Err(rustix::io::Errno::INVAL) => SealFlags::empty(),
        Err(e) => return Err(ShmError::io(path, "read the seals of", e.into())),
    };
    if !seals.contains(SealFlags::SHRINK) {
        return Err(ShmError::invalid(kind, Some(path), format!("not sealed against shrinking (seals {seals:?})")));
    }
    let meta = file.metadata().map_err(|e| ShmError::io(path, "stat", e))?;
    check_length(meta.len(), path, kind, min_len)?;
    match created_mapping(&meta) {
        Some(mapping) => Ok(Region::whole(mapping)),
        None => map(&file, path, true),
    }
}

/// Raises this process's soft limit of open files to its hard limit: the driver keeps one
/// memfd open per log (publication and image), beside its sockets. Best effort: the limit
/// stays as it was if it cannot be read or set (a log beyond it is refused with `EMFILE`).
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

/// Opens an existing file and maps it (shared). The file is opened without following a
/// symbolic link and without blocking (a FIFO in its place neither hangs the open nor is
/// mapped) and must be a regular file holding at least `min_len` bytes, otherwise it is
/// reported as invalid (`kind` names the file in the error).
pub fn open_mapped(path: &Path, kind: &'static str, min_len: usize, writable: bool) -> Result<Region, ShmError> {
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => ShmError::invalid(kind, Some(path), "is a symbolic link: refused"),
            _ => ShmError::io(path, "open", e),
        })?;
    let meta = file.metadata().map_err(|e| ShmError::io(path, "stat", e))?;
    if !meta.file_type().is_file() {
        return Err(ShmError::invalid(kind, Some(path), "is not a regular file: refused"));
    }
    check_length(meta.len(), path, kind, min_len)?;
    map(&file, path, writable)
}

fn check_length(len: u64, path: &Path, kind: &'static str, min_len: usize) -> Result<(), ShmError> {
    if len < min_len as u64 {
        return Err(ShmError::invalid(
            kind,
            Some(path),
            format!("truncated: {len} bytes, at least {min_len} expected"),
        ));
    }
    if usize::try_from(len).is_err() {
        return Err(ShmError::invalid(kind, Some(path), format!("{len} bytes cannot be mapped")));
    }
    Ok(())
}

fn map(file: &File, path: &Path, writable: bool) -> Result<Region, ShmError> {
    Ok(Mapping::map_file(file, writable).map_err(|e| ShmError::io(path, "map", e))?.into_region())
}

/// An anonymous zero-filled mapping of `len` bytes (single process: tests, embedded use).
pub fn anonymous(len: usize) -> Result<Region, ShmError> {
    Ok(Mapping::anonymous(len)
        .map_err(|e| ShmError::Io { path: "<anonymous>".into(), action: "map", source: e })?
        .into_region())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_or_a_fifo_in_place_of_a_mapped_file_is_refused_at_once() {
        let dir = crate::shm::test_support::tempdir();
        let real = dir.join("real");
        drop(create_mapped(&real, 4096).unwrap());
        let link = dir.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let error = open_mapped(&link, "cnc", 128, false).unwrap_err().to_string();
        assert!(error.contains("is a symbolic link: refused"), "{error}");
        let fifo = dir.join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let error = open_mapped(&fifo, "cnc", 128, false).unwrap_err().to_string();
        assert!(error.contains("is not a regular file: refused"), "{error}");
        assert!(open_mapped(&real, "cnc", 128, true).is_ok());
    }
}
