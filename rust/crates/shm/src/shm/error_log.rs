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

    /// Bytes the records written so far take (of [`ErrorLogWriter::capacity`]).
    pub fn used(&self) -> usize {
        self.next_offset
    }

    /// Bytes the log holds in all.
    pub fn capacity(&self) -> usize {
        self.buffer.capacity()
    }

    /// Bytes a record of `message` takes once written (its header, aligned).
    pub fn record_length(message: &str) -> usize {
        align(HEADER_LENGTH + message.len())
    }

    /// Whether `message` has a record already (recording it again only counts it).
    pub fn contains(&self, message: &str) -> bool {
        self.index.contains_key(message)
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

/// Reads every record of an error log; a corrupt record is an error (see [`scan_errors`] for a
/// reader that goes on past it).
pub fn read_errors(buffer: &Region) -> Result<Vec<ErrorRecord>, ShmError> {
    scan_errors(buffer).into_iter().collect()
}

/// Reads every record of an error log for `affinity stat --errors`: a record whose header is
/// impossible comes back as the error saying what is wrong and where, and reading goes on at
/// the next [`RECORD_ALIGNMENT`] boundary holding a plausible record (the writer never leaves
/// a gap, so everything between is the corrupt record's). Bounded: each step moves at least
/// one alignment through the buffer.
pub fn scan_errors(buffer: &Region) -> Vec<Result<ErrorRecord, ShmError>> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset + HEADER_LENGTH <= buffer.capacity() {
        match record_at(buffer, offset) {
            Ok(None) => break,
            Ok(Some((record, length))) => {
                out.push(Ok(record));
                offset += align(length);
            }
            Err(problem) => {
                out.push(Err(problem));
                offset = resume_after(buffer, offset);
            }
        }
    }
    out
}

/// The record at `offset` and its length; `None` at the end of the log (a zero length).
fn record_at(buffer: &Region, offset: usize) -> Result<Option<(ErrorRecord, usize)>, ShmError> {
    let raw = buffer.get_i32_acquire(offset + field::LENGTH)?;
    if raw == 0 {
        return Ok(None);
    }
    let capacity = buffer.capacity();
    let length =
        usize::try_from(raw).ok().filter(|&l| l >= HEADER_LENGTH && l <= capacity - offset).ok_or_else(|| {
            let room = capacity - offset;
            ShmError::corrupt("error log", offset, format!("record length {raw} (must be {HEADER_LENGTH}..={room})"))
        })?;
    let count = buffer.get_i32_acquire(offset + field::COUNT)?;
    if count < 1 {
        return Err(ShmError::corrupt("error log", offset, format!("observation count {count} (must be >= 1)")));
    }
    let mut message = Vec::new();
    buffer.read_into(offset + HEADER_LENGTH, length - HEADER_LENGTH, &mut message)?;
    let record = ErrorRecord {
        count,
        first_ms: buffer.get_i64(offset + field::FIRST)?,
        last_ms: buffer.get_i64_acquire(offset + field::LAST)?,
        message: String::from_utf8_lossy(&message).into_owned(),
    };
    Ok(Some((record, length)))
}

/// The next aligned offset after the corrupt record at `offset` that holds a plausible record
/// or the end of the log (a zero length); the capacity when there is none.
fn resume_after(buffer: &Region, offset: usize) -> usize {
    let mut next = offset + RECORD_ALIGNMENT;
    while next + HEADER_LENGTH <= buffer.capacity() {
        match buffer.get_i32_acquire(next + field::LENGTH) {
            Ok(0) => return next,
            Ok(_) if record_at(buffer, next).is_ok() => return next,
            Ok(_) => next += RECORD_ALIGNMENT,
            Err(_) => break,
        }
    }
    buffer.capacity()
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

    #[test]
    fn a_corrupt_record_is_reported_where_it_is_and_the_records_after_it_are_read() {
        let region = anonymous(4096).unwrap();
        let mut log = ErrorLogWriter::new(region.clone());
        log.record("first", 1).unwrap();
        log.record(&"a long second error that spans two alignments ".repeat(2), 2).unwrap();
        log.record("third", 3).unwrap();
        region.put_i32(64 + field::LENGTH, 1_000_000).unwrap();
        let read = scan_errors(&region);
        assert_eq!(read.len(), 3, "{read:?}");
        assert_eq!(read[0].as_ref().unwrap().message, "first");
        let problem = read[1].as_ref().unwrap_err().to_string();
        assert!(problem.contains("error log at offset 64") && problem.contains("record length 1000000"), "{problem}");
        assert_eq!(read[2].as_ref().unwrap().message, "third");
        region.put_i32(64 + field::LENGTH, (HEADER_LENGTH + 94) as i32).unwrap();
        region.put_i32(192 + field::COUNT, 0).unwrap();
        let read = scan_errors(&region);
        assert_eq!(read.len(), 3, "nothing after the last record: {read:?}");
        assert!(read[1].as_ref().unwrap().message.starts_with("a long second"));
        assert!(read[2].as_ref().unwrap_err().to_string().contains("offset 192: observation count 0"));
    }
}
