//! Creating and opening the mapped files of a driver directory: created exclusively with mode
//! 0600 (`O_EXCL` never follows a link), sized with `ftruncate` (sparse: a page costs memory
//! only once written); opened without following a link or blocking, regular files only.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
    let len = meta.len();
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
    map(&file, path, writable)
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
