//! Memory mappings shared between processes, and bounds-checked atomic access to them.
//!
//! A [`Mapping`] owns one `mmap` (a file opened with `MAP_SHARED`, or an anonymous region for
//! tests and single-process use). A [`Region`] is a window into a mapping; every accessor checks
//! the index against the window and the natural alignment of the value, and returns
//! [`ShmError::OutOfBounds`] / [`ShmError::Misaligned`] instead of touching memory outside it.
//!
//! Shared memory is never turned into a Rust reference (`&[u8]`): another process may write it at
//! any moment. Integers are read and written through atomics (`Acquire` / `Release` where the
//! protocol orders them, `Relaxed` elsewhere), payload bytes through raw copies. The protocols
//! above only copy bytes that their writer has published (frame or record length stored last with
//! `Release`), so a well-behaved peer never races a copy.

use std::fs::File;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use super::error::ShmError;

/// One memory mapping and whether it may be written.
#[derive(Debug)]
pub struct Mapping {
    raw: MmapRaw,
    writable: bool,
}

impl Mapping {
    /// Maps all of `file` shared; `writable` selects `PROT_WRITE`.
    pub fn map_file(file: &File, writable: bool) -> std::io::Result<Self> {
        let raw =
            if writable { MmapOptions::new().map_raw(file)? } else { MmapOptions::new().map_raw_read_only(file)? };
        Ok(Self { raw, writable })
    }

    /// An anonymous, zero-filled, private mapping of `len` bytes (pages appear on first touch).
    pub fn anonymous(len: usize) -> std::io::Result<Self> {
        let map = MmapOptions::new().len(len).map_anon()?;
        Ok(Self { raw: MmapRaw::from(map), writable: true })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the mapping is empty (never, for the files this layer creates).
    pub fn is_empty(&self) -> bool {
        self.raw.len() == 0
    }

    /// A region covering the whole mapping.
    pub fn into_region(self) -> Region {
        Region::whole(Arc::new(self))
    }
}

/// A bounds-checked window into a [`Mapping`]; cheap to clone (shares the mapping).
///
/// The window's first byte and the mapping's writability are copied in when the region is made,
/// so that an access reaches the memory through one pointer, not through the shared mapping (the
/// appender and the reader make several checked accesses per message).
#[derive(Clone, Debug)]
pub struct Region {
    /// Keeps the mapping alive for as long as `base` is used.
    map: Arc<Mapping>,
    /// The file this region and its windows keep open: a sealed memfd log of the driver
    /// (`file::create_sealed`), whose `/proc/<pid>/fd/<fd>` name clients open while it is. A
    /// region sharing the mapping without it (a client in the driver's process) does not keep
    /// the name alive.
    file: Option<Arc<File>>,
    /// The window's first byte: the mapping's start plus `offset`.
    base: *mut u8,
    /// The mapping's writability (`Mapping::writable`).
    writable: bool,
    offset: usize,
    len: usize,
}

// SAFETY: all access to the mapped memory goes through atomics or raw copies; the mapping lives as
// long as any region (Arc), `base` points into it, and `MmapRaw` itself is Send + Sync.
unsafe impl Send for Region {}
// SAFETY: as above; `&Region` only allows atomic access and raw copies.
unsafe impl Sync for Region {}

impl Region {
    /// A region covering the whole of `map`, which other regions may share.
    pub fn whole(map: Arc<Mapping>) -> Region {
        let len = map.raw.len();
        let base = map.raw.as_mut_ptr();
        let writable = map.writable;
        Region { map, file: None, base, writable, offset: 0, len }
    }

    /// A region covering the whole of `map` that keeps `file` open for as long as it or a
    /// window of it lives.
    pub fn keeping_open(map: Arc<Mapping>, file: File) -> Region {
        Region { file: Some(Arc::new(file)), ..Region::whole(map) }
    }

    /// Bytes in this window.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Whether the underlying mapping may be written.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// A sub-window `[offset, offset + len)` of this one.
    pub fn slice(&self, offset: usize, len: usize) -> Result<Region, ShmError> {
        self.check(offset, len, 1)?;
        Ok(Region {
            map: Arc::clone(&self.map),
            file: self.file.clone(),
            base: self.base.wrapping_add(offset),
            writable: self.writable,
            offset: self.offset + offset,
            len,
        })
    }

    #[inline]
    fn check(&self, index: usize, size: usize, align: usize) -> Result<(), ShmError> {
        match index.checked_add(size) {
            Some(end) if end <= self.len => {}
            _ => return Err(ShmError::OutOfBounds { index, size, capacity: self.len }),
        }
        // The mapping starts on a page boundary, so alignment of the absolute offset is alignment
        // of the address.
        if (self.offset + index) % align != 0 {
            return Err(ShmError::Misaligned { index, align });
        }
        Ok(())
    }

    #[inline]
    fn ptr(&self, index: usize) -> *mut u8 {
        // In bounds: callers ran `check` first.
        self.base.wrapping_add(index)
    }

    #[inline]
    fn check_write(&self, index: usize, size: usize, align: usize) -> Result<*mut u8, ShmError> {
        if !self.writable {
            return Err(ShmError::ReadOnly);
        }
        self.check(index, size, align)?;
        Ok(self.ptr(index))
    }

    #[inline]
    fn i64_at(&self, index: usize) -> Result<&AtomicI64, ShmError> {
        self.check(index, 8, 8)?;
        // SAFETY: in bounds and 8-aligned (checked), the mapping outlives `&self`, and every
        // access to shared integers in this layer is atomic.
        Ok(unsafe { AtomicI64::from_ptr(self.ptr(index).cast::<i64>()) })
    }

    #[inline]
    fn i32_at(&self, index: usize) -> Result<&AtomicI32, ShmError> {
        self.check(index, 4, 4)?;
        // SAFETY: as in `i64_at`, 4-aligned.
        Ok(unsafe { AtomicI32::from_ptr(self.ptr(index).cast::<i32>()) })
    }

    #[inline]
    fn i64_at_mut(&self, index: usize) -> Result<&AtomicI64, ShmError> {
        self.check_write(index, 8, 8)?;
        self.i64_at(index)
    }

    #[inline]
    fn i32_at_mut(&self, index: usize) -> Result<&AtomicI32, ShmError> {
        self.check_write(index, 4, 4)?;
        self.i32_at(index)
    }

    /// Reads an `i64` with `Acquire` ordering.
    #[inline]
    pub fn get_i64_acquire(&self, index: usize) -> Result<i64, ShmError> {
        Ok(self.i64_at(index)?.load(Ordering::Acquire))
    }

    /// Reads an `i64` with no ordering.
    #[inline]
    pub fn get_i64(&self, index: usize) -> Result<i64, ShmError> {
        Ok(self.i64_at(index)?.load(Ordering::Relaxed))
    }

    /// Writes an `i64` with `Release` ordering.
    #[inline]
    pub fn put_i64_release(&self, index: usize, value: i64) -> Result<(), ShmError> {
        self.i64_at_mut(index)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Writes an `i64` with no ordering.
    #[inline]
    pub fn put_i64(&self, index: usize, value: i64) -> Result<(), ShmError> {
        self.i64_at_mut(index)?.store(value, Ordering::Relaxed);
        Ok(())
    }

    /// Atomically adds `delta` (wrapping, as the hardware does) and returns the previous value.
    #[inline]
    pub fn get_and_add_i64(&self, index: usize, delta: i64) -> Result<i64, ShmError> {
        Ok(self.i64_at_mut(index)?.fetch_add(delta, Ordering::AcqRel))
    }

    /// Atomically replaces `expected` by `new`; `true` when it did.
    pub fn compare_and_set_i64(&self, index: usize, expected: i64, new: i64) -> Result<bool, ShmError> {
        Ok(self.i64_at_mut(index)?.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire).is_ok())
    }

    /// Reads an `i32` with `Acquire` ordering.
    #[inline]
    pub fn get_i32_acquire(&self, index: usize) -> Result<i32, ShmError> {
        Ok(self.i32_at(index)?.load(Ordering::Acquire))
    }

    /// Reads an `i32` with no ordering.
    #[inline]
    pub fn get_i32(&self, index: usize) -> Result<i32, ShmError> {
        Ok(self.i32_at(index)?.load(Ordering::Relaxed))
    }

    /// Writes an `i32` with `Release` ordering.
    #[inline]
    pub fn put_i32_release(&self, index: usize, value: i32) -> Result<(), ShmError> {
        self.i32_at_mut(index)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Writes an `i32` with no ordering.
    #[inline]
    pub fn put_i32(&self, index: usize, value: i32) -> Result<(), ShmError> {
        self.i32_at_mut(index)?.store(value, Ordering::Relaxed);
        Ok(())
    }

    /// Atomically replaces `expected` by `new`; `true` when it did.
    pub fn compare_and_set_i32(&self, index: usize, expected: i32, new: i32) -> Result<bool, ShmError> {
        Ok(self.i32_at_mut(index)?.compare_exchange(expected, new, Ordering::AcqRel, Ordering::Acquire).is_ok())
    }

    /// Copies `bytes` into the region at `index`.
    #[inline]
    pub fn put_bytes(&self, index: usize, bytes: &[u8]) -> Result<(), ShmError> {
        let dst = self.check_write(index, bytes.len(), 1)?;
        // SAFETY: `dst .. dst + len` is inside the writable mapping (checked); `bytes` is ordinary
        // memory that cannot overlap a mapping we only reach through raw pointers.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        Ok(())
    }

    /// The address of `len` bytes starting at `index` (bounds checked), for a system call that
    /// reads them (a socket send from the mapping). The pointer stays valid while this region or
    /// another one of its mapping lives; the bytes may change under it when another process
    /// writes them, so it is never turned into a Rust reference.
    #[inline]
    pub fn address_of(&self, index: usize, len: usize) -> Result<*const u8, ShmError> {
        self.check(index, len, 1)?;
        Ok(self.ptr(index).cast_const())
    }

    /// Copies `out.len()` bytes starting at `index` into `out`.
    #[inline]
    pub fn get_bytes(&self, index: usize, out: &mut [u8]) -> Result<(), ShmError> {
        self.check(index, out.len(), 1)?;
        // SAFETY: the source range is inside the mapping (checked) and `out` is ordinary memory.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(index), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Appends `len` bytes starting at `index` to `out`.
    #[inline]
    pub fn read_into(&self, index: usize, len: usize, out: &mut Vec<u8>) -> Result<(), ShmError> {
        self.check(index, len, 1)?;
        out.reserve(len);
        let start = out.len();
        // SAFETY: the source range is inside the mapping (checked); `reserve` made room for `len`
        // bytes after `start`, which are initialised by the copy before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr(index), out.as_mut_ptr().add(start), len);
            out.set_len(start + len);
        }
        Ok(())
    }

    /// Sets `len` bytes starting at `index` to `value`.
    pub fn set_memory(&self, index: usize, len: usize, value: u8) -> Result<(), ShmError> {
        let dst = self.check_write(index, len, 1)?;
        // SAFETY: inside the writable mapping (checked).
        unsafe { std::ptr::write_bytes(dst, value, len) };
        Ok(())
    }

    /// Maps the pages under `[index, index + len)` in writable before anything writes them
    /// (`MADV_POPULATE_WRITE`: a page of a sparse file is allocated, zeroed and mapped as a first
    /// write would, without writing it): the writer and the readers of this mapping take no
    /// page fault there. The bytes are not touched, so a concurrent writer is no hazard. An error
    /// when the kernel lacks it (before Linux 5.14) or memory is short.
    pub fn populate_for_write(&self, index: usize, len: usize) -> Result<(), ShmError> {
        let start = self.check_write(index, len, 1)? as usize;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let first = start - start % page;
        let end = (start + len).div_ceil(page) * page;
        // SAFETY: the range is checked to lie in this mapping, and widening it to whole pages stays
        // in it (a mapping starts on a page and spans whole pages); no byte is changed.
        let result = unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_POPULATE_WRITE) };
        if result != 0 {
            return Err(ShmError::io(std::path::Path::new("<mapping>"), "populate", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Zeroes `len` bytes starting at `index` for memory nobody will touch soon (a log cleaned a
    /// term behind its readers): from [`STREAMING_ZERO_MIN`] bytes on, x86-64 writes whole
    /// lines with non-temporal stores, which skip reading each line from memory before
    /// overwriting it and leave the caches to the publisher and subscribers; shorter ranges and
    /// other targets use `memset`. Every store is visible to other threads before any store
    /// after this returns (a fence), so a Release store that follows publishes the zeros.
    pub fn zero_streaming(&self, index: usize, len: usize) -> Result<(), ShmError> {
        let dst = self.check_write(index, len, 1)?;
        #[cfg(target_arch = "x86_64")]
        if len >= STREAMING_ZERO_MIN {
            // SAFETY: `[dst, dst + len)` is inside the writable mapping (checked).
            unsafe { zero_streaming_x86_64(dst, len) };
            return Ok(());
        }
        // SAFETY: inside the writable mapping (checked).
        unsafe { std::ptr::write_bytes(dst, 0, len) };
        Ok(())
    }
}

/// Below this many bytes [`Region::zero_streaming`] is a plain `memset`: partial lines and
/// short ranges gain nothing from bypassing the cache.
pub const STREAMING_ZERO_MIN: usize = 16 * 1024;

/// Zeroes `[dst, dst + len)`: `memset` up to the first 64-byte line, non-temporal 16-byte
/// stores (SSE2, always present on x86-64) over whole lines, `memset` for the rest, then a
/// store fence (non-temporal stores are not ordered by later ordinary or Release stores).
///
/// # Safety
/// `[dst, dst + len)` must be valid for writes.
#[cfg(target_arch = "x86_64")]
unsafe fn zero_streaming_x86_64(dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_setzero_si128, _mm_sfence, _mm_stream_si128};
    const LINE: usize = 64;
    let head = dst.align_offset(LINE).min(len);
    let lines = (len - head) / LINE;
    // SAFETY: every pointer below stays inside `[dst, dst + len)` (the caller's range); the
    // streamed ones are 16-aligned (line-aligned base + multiples of 16).
    unsafe {
        std::ptr::write_bytes(dst, 0, head);
        let zero = _mm_setzero_si128();
        let mut line = dst.add(head);
        for _ in 0..lines {
            for part in 0..LINE / 16 {
                _mm_stream_si128(line.add(part * 16).cast::<__m128i>(), zero);
            }
            line = line.add(LINE);
        }
        std::ptr::write_bytes(line, 0, len - head - lines * LINE);
        _mm_sfence();
    }
}

impl Region {
    /// A writable window `[index, index + len)` of this region, checked once (bounds, 8-byte
    /// alignment of `index`, writable), for a sequence of writes whose own checks are then only
    /// against `len` (the appender writes a whole claim through one window).
    #[inline]
    pub fn writer(&self, index: usize, len: usize) -> Result<RegionWriter<'_>, ShmError> {
        let base = self.check_write(index, len, 8)?;
        Ok(RegionWriter { base, len, _region: std::marker::PhantomData })
    }

    /// A read window `[index, index + len)` of this region, checked once (bounds, 8-byte
    /// alignment of `index`), for a sequence of reads checked only against `len`.
    #[inline]
    pub fn reader(&self, index: usize, len: usize) -> Result<RegionReader<'_>, ShmError> {
        self.check(index, len, 8)?;
        Ok(RegionReader { base: self.ptr(index), len, _region: std::marker::PhantomData })
    }

    /// Hints the CPU to fetch the cache line holding `index` for writing (a no-op outside the
    /// region, on read-only mappings and on CPUs without the instruction).
    #[inline]
    pub fn prefetch_write(&self, index: usize) {
        if index < self.len && self.writable {
            prefetch_write(self.ptr(index));
        }
    }

    /// Hints the CPU to fetch the cache line holding `index` for reading (a no-op outside the
    /// region).
    #[inline]
    pub fn prefetch_read(&self, index: usize) {
        if index < self.len {
            prefetch_read(self.ptr(index));
        }
    }
}

#[inline]
fn prefetch_write(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` never faults and has no visible effect on memory (CPUs without it run
    // it as a no-op); it reads no register but its address operand and writes none.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) ptr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[inline]
fn prefetch_read(ptr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no visible effect on memory.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// A checked writable window of a [`Region`] (see [`Region::writer`]): each access checks only
/// its offset against the window's length and the value's alignment.
#[derive(Debug)]
pub struct RegionWriter<'a> {
    base: *mut u8,
    len: usize,
    _region: std::marker::PhantomData<&'a Region>,
}

impl RegionWriter<'_> {
    /// Bytes in this window.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn at(&self, index: usize, size: usize, align: usize) -> Result<*mut u8, ShmError> {
        match index.checked_add(size) {
            Some(end) if end <= self.len && index % align == 0 => Ok(self.base.wrapping_add(index)),
            Some(end) if end <= self.len => Err(ShmError::Misaligned { index, align }),
            _ => Err(ShmError::OutOfBounds { index, size, capacity: self.len }),
        }
    }

    /// Writes an `i32` with `Release` ordering.
    #[inline]
    pub fn put_i32_release(&self, index: usize, value: i32) -> Result<(), ShmError> {
        let ptr = self.at(index, 4, 4)?;
        // SAFETY: inside the window (checked), 4-aligned (the window start is 8-aligned and
        // `index` is checked), the mapping outlives the borrowed region.
        unsafe { AtomicI32::from_ptr(ptr.cast::<i32>()) }.store(value, Ordering::Release);
        Ok(())
    }

    /// Copies `bytes` into the window at `index`.
    #[inline]
    pub fn put_bytes(&self, index: usize, bytes: &[u8]) -> Result<(), ShmError> {
        let dst = self.at(index, bytes.len(), 1)?;
        // SAFETY: inside the writable window (checked); `bytes` is ordinary memory.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        Ok(())
    }
}

/// A checked read window of a [`Region`] (see [`Region::reader`]).
#[derive(Debug)]
pub struct RegionReader<'a> {
    base: *mut u8,
    len: usize,
    _region: std::marker::PhantomData<&'a Region>,
}

impl RegionReader<'_> {
    /// Bytes in this window.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn at(&self, index: usize, size: usize, align: usize) -> Result<*mut u8, ShmError> {
        match index.checked_add(size) {
            Some(end) if end <= self.len && index % align == 0 => Ok(self.base.wrapping_add(index)),
            Some(end) if end <= self.len => Err(ShmError::Misaligned { index, align }),
            _ => Err(ShmError::OutOfBounds { index, size, capacity: self.len }),
        }
    }

    /// Reads an `i32` with `Acquire` ordering.
    #[inline]
    pub fn get_i32_acquire(&self, index: usize) -> Result<i32, ShmError> {
        let ptr = self.at(index, 4, 4)?;
        // SAFETY: inside the window, 4-aligned (checked); the mapping outlives the region.
        Ok(unsafe { AtomicI32::from_ptr(ptr.cast::<i32>()) }.load(Ordering::Acquire))
    }

    /// Reads an `i32` with no ordering.
    #[inline]
    pub fn get_i32(&self, index: usize) -> Result<i32, ShmError> {
        let ptr = self.at(index, 4, 4)?;
        // SAFETY: as in `get_i32_acquire`.
        Ok(unsafe { AtomicI32::from_ptr(ptr.cast::<i32>()) }.load(Ordering::Relaxed))
    }

    /// Replaces the contents of `out` by the `len` bytes at `index`.
    #[inline]
    pub fn copy_to(&self, index: usize, len: usize, out: &mut Vec<u8>) -> Result<(), ShmError> {
        let src = self.at(index, len, 1)?;
        out.clear();
        out.reserve(len);
        // SAFETY: the source is inside the window (checked); `reserve` made room for `len` bytes,
        // initialised by the copy before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Ok(())
    }
}

/// Rounds `value` up to a multiple of `alignment` (a power of two); `None` on overflow.
pub fn align_up(value: usize, alignment: usize) -> Option<usize> {
    let mask = alignment.checked_sub(1)?;
    Some(value.checked_add(mask)? & !mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_and_misaligned_access_is_an_error() {
        let region = Mapping::anonymous(4096).unwrap().into_region();
        assert!(matches!(region.get_i64(4096), Err(ShmError::OutOfBounds { .. })));
        assert!(matches!(region.get_i64(4092), Err(ShmError::OutOfBounds { .. })));
        assert!(matches!(region.get_i64(4), Err(ShmError::Misaligned { .. })));
        assert!(matches!(region.get_i32(usize::MAX - 1), Err(ShmError::OutOfBounds { .. })));
        assert!(matches!(region.put_bytes(4090, &[0; 8]), Err(ShmError::OutOfBounds { .. })));
        let window = region.slice(1024, 64).unwrap();
        assert!(matches!(window.get_i64(64), Err(ShmError::OutOfBounds { .. })));
        window.put_i64(56, 7).unwrap();
        assert_eq!(region.get_i64(1080).unwrap(), 7);
        assert!(region.slice(4000, 200).is_err());
    }

    #[test]
    fn nested_windows_reach_the_bytes_they_name() {
        let region = Mapping::anonymous(4096).unwrap().into_region();
        let outer = region.slice(512, 1024).unwrap();
        let inner = outer.slice(256, 128).unwrap();
        inner.put_i64_release(120, 0x1122).unwrap();
        assert_eq!(region.get_i64(512 + 256 + 120).unwrap(), 0x1122);
        assert_eq!(outer.get_i64_acquire(256 + 120).unwrap(), 0x1122);
        assert_eq!(inner.get_and_add_i64(120, 1).unwrap(), 0x1122);
        let mut out = Vec::new();
        region.read_into(512 + 256 + 120, 8, &mut out).unwrap();
        assert_eq!(out, 0x1123i64.to_le_bytes());
        inner.put_bytes(0, b"abc").unwrap();
        let mut three = [0u8; 3];
        region.get_bytes(768, &mut three).unwrap();
        assert_eq!(&three, b"abc");
        // Alignment is the address's: a window at an odd offset shifts it.
        let odd = region.slice(4, 64).unwrap();
        assert!(matches!(odd.get_i64(0), Err(ShmError::Misaligned { .. })));
        odd.put_i32(0, -3).unwrap();
        odd.put_i64(4, 9).unwrap();
        assert_eq!(region.get_i32(4).unwrap(), -3);
        assert_eq!(region.get_i64(8).unwrap(), 9);
        assert!(matches!(inner.slice(64, 65), Err(ShmError::OutOfBounds { .. })));
    }

    #[test]
    fn windows_of_a_read_only_mapping_refuse_writes() {
        let path = std::env::temp_dir().join(format!("affinity-region-ro-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        file.set_len(4096).unwrap();
        let writable = Mapping::map_file(&file, true).unwrap().into_region();
        writable.put_i64(1032, 77).unwrap();
        let read_only = Mapping::map_file(&std::fs::File::open(&path).unwrap(), false).unwrap().into_region();
        std::fs::remove_file(&path).unwrap();
        let window = read_only.slice(1024, 64).unwrap();
        assert!(!window.is_writable());
        assert_eq!(window.get_i64(8).unwrap(), 77);
        assert!(matches!(window.put_i64(8, 1), Err(ShmError::ReadOnly)));
        assert!(matches!(window.get_and_add_i64(8, 1), Err(ShmError::ReadOnly)));
        assert!(matches!(window.writer(0, 64), Err(ShmError::ReadOnly)));
        // A no-op on a read-only mapping (a `prefetchw` there would be harmless, but skipped).
        window.prefetch_write(0);
        assert_eq!(writable.get_i64(1032).unwrap(), 77);
    }

    #[test]
    fn streaming_zeroes_exactly_the_range_at_every_alignment() {
        let region = Mapping::anonymous(4 * STREAMING_ZERO_MIN).unwrap().into_region();
        for (index, len) in
            [(0, STREAMING_ZERO_MIN), (8, STREAMING_ZERO_MIN + 3), (37, 2 * STREAMING_ZERO_MIN + 61), (100, 50)]
        {
            region.set_memory(0, 4 * STREAMING_ZERO_MIN, 0xAB).unwrap();
            region.zero_streaming(index, len).unwrap();
            let mut out = Vec::new();
            region.read_into(0, 4 * STREAMING_ZERO_MIN, &mut out).unwrap();
            for (at, &byte) in out.iter().enumerate() {
                let expected = if (index..index + len).contains(&at) { 0 } else { 0xAB };
                assert_eq!(byte, expected, "byte {at} after zeroing {len} at {index}");
            }
        }
        assert!(region.zero_streaming(1, 4 * STREAMING_ZERO_MIN).is_err());
    }

    #[test]
    fn atomics_read_back_what_was_written() {
        let region = Mapping::anonymous(4096).unwrap().into_region();
        region.put_i64_release(8, -5).unwrap();
        assert_eq!(region.get_and_add_i64(8, 10).unwrap(), -5);
        assert!(region.compare_and_set_i64(8, 5, 9).unwrap());
        assert!(!region.compare_and_set_i64(8, 5, 11).unwrap());
        assert_eq!(region.get_i64_acquire(8).unwrap(), 9);
        region.put_bytes(100, b"hello").unwrap();
        let mut out = Vec::new();
        region.read_into(100, 5, &mut out).unwrap();
        assert_eq!(out, b"hello");
    }

    #[test]
    fn align_up_rounds_and_reports_overflow() {
        assert_eq!(align_up(33, 32), Some(64));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(usize::MAX, 32), None);
    }
}
