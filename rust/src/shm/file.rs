//! Creating and opening the mapped files of a driver directory: created exclusively with mode
//! 0600, sized with `ftruncate` (sparse: a page costs memory only once written).

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

/// Opens an existing file and maps it (shared). The file must hold at least `min_len` bytes,
/// otherwise it is reported as truncated (`kind` names the file in the error).
pub fn open_mapped(path: &Path, kind: &'static str, min_len: usize, writable: bool) -> Result<Region, ShmError> {
    let file = OpenOptions::new().read(true).write(writable).open(path).map_err(|e| ShmError::io(path, "open", e))?;
    let len = file.metadata().map_err(|e| ShmError::io(path, "stat", e))?.len();
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
