//! Term memory: one anonymous private mapping per term, committed page by page as it is
//! touched and returned to the OS when the term is dropped.
//!
//! `vec![0u8; n]` is `calloc`, which is lazy only while glibc serves the request with `mmap`:
//! once anything in the process frees a large block (below 32 MiB) glibc raises its dynamic
//! mmap threshold, later 16 MiB terms come from the heap, get zeroed page by page (~16 MB of
//! RSS and ~40 ms per idle publication) and are kept by the allocator after `free`. A mapping
//! of our own does not depend on what the allocator did before.

use std::ops::{Deref, DerefMut};

use memmap2::{MmapMut, MmapOptions};

/// Zero-filled memory for one term.
pub enum TermMemory {
    /// An anonymous private mapping (`MAP_NORESERVE`): untouched pages cost nothing.
    Mapped(MmapMut),
    /// Heap memory, used only when the mapping could not be made.
    Heap(Vec<u8>),
}

impl TermMemory {
    /// `length` zero bytes, lazily committed.
    pub fn zeroed(length: usize) -> Self {
        if length == 0 {
            return TermMemory::Heap(Vec::new());
        }
        match MmapOptions::new().len(length).no_reserve_swap().map_anon() {
            Ok(map) => TermMemory::Mapped(map),
            Err(_) => TermMemory::Heap(vec![0; length]),
        }
    }
}

impl Deref for TermMemory {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            TermMemory::Mapped(map) => map,
            TermMemory::Heap(bytes) => bytes,
        }
    }
}

impl DerefMut for TermMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            TermMemory::Mapped(map) => map,
            TermMemory::Heap(bytes) => bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_memory_is_zeroed_writable_and_mapped() {
        let mut term = TermMemory::zeroed(64 * 1024);
        assert!(matches!(term, TermMemory::Mapped(_)));
        assert_eq!(term.len(), 64 * 1024);
        assert!(term.iter().all(|&b| b == 0));
        term[65_535] = 7;
        assert_eq!(term[65_535], 7);
    }
}
