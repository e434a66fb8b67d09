//! Idle publications cost what they use: term buffers are committed lazily (only touched pages
//! count towards RSS) and returned to the OS when the publication goes, whatever the process's
//! allocator did before. One test per file: RSS is per process.

use std::time::{Duration, Instant};

use affinity::embedded::{self, EmbeddedConfig};
use affinity::logbuffer::StreamIdentity;
use affinity::shm::log_buffer::{LogBuffer, LogParams};

/// Resident set size of this process, from `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("resident pages");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).expect("page size")
}

const PUBLICATIONS: usize = 200;
/// Per idle publication (16 MiB terms, three partitions = 48 MiB of address space).
const MAX_RSS_PER_PUBLICATION: u64 = 512 * 1024;

#[test]
fn idle_udp_publications_cost_little_memory_and_return_it_on_close() {
    // Any earlier free of a large block (Python, Arrow, another library) raises glibc's dynamic
    // mmap threshold; term buffers taken from the heap after that were zeroed page by page.
    let block = vec![1u8; 20 << 20];
    std::hint::black_box(&block);
    drop(block);

    let client = embedded::start(EmbeddedConfig::default()).expect("client");
    let before = rss();
    let started = Instant::now();
    let publications: Vec<_> = (0..PUBLICATIONS)
        .map(|index| {
            let channel = format!("aeron:udp?endpoint=127.0.0.1:{}|linger=0", 20_000 + index);
            client.add_publication(&channel, 1).expect("publication")
        })
        .collect();
    let created_in = started.elapsed();
    let grown = rss().saturating_sub(before);
    eprintln!("{PUBLICATIONS} idle publications: +{} KiB RSS in {created_in:?}", grown / 1024);
    assert!(
        grown <= MAX_RSS_PER_PUBLICATION * PUBLICATIONS as u64,
        "{PUBLICATIONS} idle publications grew RSS by {} MiB (> {} KiB each)",
        grown >> 20,
        MAX_RSS_PER_PUBLICATION / 1024
    );

    // Close: the memory goes back once the publications are gone (linger=0).
    let peak_before = rss();
    drop(publications);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = rss();
    while after > before + (8 << 20) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = rss();
    }
    eprintln!(
        "after close: {} KiB above the start (peak {} KiB)",
        after.saturating_sub(before) / 1024,
        peak_before.saturating_sub(before) / 1024
    );
    assert!(after <= before + (8 << 20), "memory not returned: {} MiB above the start", (after - before) >> 20);
    client.close();

    // Written terms cost their pages, and dropping the logs gives them back.
    let identity = StreamIdentity { session_id: 1, stream_id: 1, initial_term_id: 0, term_length: 16 << 20 };
    let before = rss();
    let params = LogParams::for_stream(&identity, 1408);
    let logs: Vec<LogBuffer> = (0..8).map(|_| LogBuffer::anonymous(&params).expect("log")).collect();
    for log in &logs {
        log.term(0).expect("term 0").set_memory(0, 16 << 20, 1).expect("write term 0");
    }
    let written = rss().saturating_sub(before);
    assert!(written >= 8 * (15 << 20), "8 written 16 MiB terms only added {} MiB", written >> 20);
    drop(logs);
    let after = rss();
    assert!(after <= before + (8 << 20), "dropped logs kept {} MiB", after.saturating_sub(before) >> 20);
}
