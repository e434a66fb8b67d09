//! Bounded log of distinct errors (Aeron's `DistinctErrorLog` layout): the same error observed
//! again only bumps its count and last-seen time; when the buffer is full new distinct errors
//! are dropped (counted by the caller), never the process.
//!
//! Records, aligned to [`RECORD_ALIGNMENT`]:
//!
//! ```text
//! 0   length                 i32  header + message bytes (written last, Release)
//! 4   observation count      i32
//! 8   last observation       i64  epoch ms
//! 16  first observation      i64  epoch ms
//! 24  message                UTF-8
//! ```

use std::collections::HashMap;

use super::buffer::Region;
use super::error::ShmError;

/// Records start on multiples of this.
pub const RECORD_ALIGNMENT: usize = 64;
/// Bytes before the message.
pub const HEADER_LENGTH: usize = 24;

mod field {
    pub const LENGTH: usize = 0;
    pub const COUNT: usize = 4;
    pub const LAST: usize = 8;
    pub const FIRST: usize = 16;
}

fn align(length: usize) -> usize {
    (length + RECORD_ALIGNMENT - 1) & !(RECORD_ALIGNMENT - 1)
}

/// One distinct error as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorRecord {
    /// How many times it was observed.
    pub count: i32,
    /// First observation, epoch ms.
    pub first_ms: i64,
    /// Last observation, epoch ms.
    pub last_ms: i64,
    /// The error text.
    pub message: String,
}

/// The driver's writer (one per error log).
#[derive(Debug)]
pub struct ErrorLogWriter {
    buffer: Region,
    next_offset: usize,
    index: HashMap<String, usize>,
}

impl ErrorLogWriter {
    /// Writes into a fresh zeroed region.
    pub fn new(buffer: Region) -> Self {
        Self { buffer, next_offset: 0, index: HashMap::new() }
    }

    /// Records `message` observed at `now_ms`; `Ok(false)` when the log is full (dropped).
    pub fn record(&mut self, message: &str, now_ms: i64) -> Result<bool, ShmError> {
        if let Some(&offset) = self.index.get(message) {
            let count = self.buffer.get_i32(offset + field::COUNT)?;
            self.buffer.put_i32_release(offset + field::COUNT, count.saturating_add(1))?;
            self.buffer.put_i64_release(offset + field::LAST, now_ms)?;
            return Ok(true);
        }
        let length = HEADER_LENGTH + message.len();
        let offset = self.next_offset;
        if align(length) > self.buffer.capacity().saturating_sub(offset) || length > i32::MAX as usize {
            return Ok(false);
        }
        self.buffer.put_bytes(offset + HEADER_LENGTH, message.as_bytes())?;
        self.buffer.put_i64(offset + field::FIRST, now_ms)?;
        self.buffer.put_i64(offset + field::LAST, now_ms)?;
        self.buffer.put_i32(offset + field::COUNT, 1)?;
        self.buffer.put_i32_release(offset + field::LENGTH, length as i32)?;
        self.next_offset = offset + align(length);
        self.index.insert(message.to_string(), offset);
        Ok(true)
    }
}

/// Reads every record of an error log (for `affinity stat --errors`).
pub fn read_errors(buffer: &Region) -> Result<Vec<ErrorRecord>, ShmError> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset + HEADER_LENGTH <= buffer.capacity() {
        let length = buffer.get_i32_acquire(offset + field::LENGTH)?;
        if length == 0 {
            break;
        }
        let length = usize::try_from(length)
            .ok()
            .filter(|&l| l >= HEADER_LENGTH && l <= buffer.capacity() - offset)
            .ok_or_else(|| ShmError::corrupt("error log", offset, format!("record length {length}")))?;
        let mut message = Vec::new();
        buffer.read_into(offset + HEADER_LENGTH, length - HEADER_LENGTH, &mut message)?;
        out.push(ErrorRecord {
            count: buffer.get_i32_acquire(offset + field::COUNT)?,
            first_ms: buffer.get_i64(offset + field::FIRST)?,
            last_ms: buffer.get_i64_acquire(offset + field::LAST)?,
            message: String::from_utf8_lossy(&message).into_owned(),
        });
        offset += align(length);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::file::anonymous;

    #[test]
    fn repeated_errors_are_counted_once_with_first_and_last_time() {
        let region = anonymous(4096).unwrap();
        let mut log = ErrorLogWriter::new(region.clone());
        assert!(log.record("bind failed: 127.0.0.1:40123", 10).unwrap());
        assert!(log.record("malformed command", 20).unwrap());
        assert!(log.record("bind failed: 127.0.0.1:40123", 30).unwrap());
        let records = read_errors(&region).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].count, records[0].first_ms, records[0].last_ms), (2, 10, 30));
        assert_eq!(records[1].message, "malformed command");
    }

    #[test]
    fn a_full_log_drops_new_errors_and_stays_readable() {
        let region = anonymous(4096).unwrap();
        let mut log = ErrorLogWriter::new(region.clone());
        let mut kept = 0;
        for i in 0..200 {
            if log.record(&format!("error number {i}"), i).unwrap() {
                kept += 1;
            }
        }
        assert_eq!(kept, 4096 / 64);
        assert_eq!(read_errors(&region).unwrap().len(), kept);
        region.put_i32(0, 100_000).unwrap();
        assert!(matches!(read_errors(&region), Err(ShmError::Corrupt { .. })));
    }
}
