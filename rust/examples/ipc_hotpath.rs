//! Single-process cost of the shared-log hot paths, publisher and subscriber side separately
//! (`docs/benchmarks.md`, "Media driver"): appends `--chunk` messages, reads them back, cleans
//! behind, and times the append and the read phases apart. No second core, no driver: what is
//! left is the per-message work of the appender and the reader.
//!
//! ```text
//! cargo run --release --no-default-features --example ipc_hotpath -- [--size 32] [--count 20000000]
//!     [--chunk 1024] [--term-length 67108864] [--mode offer|offer_batch]
//! ```

use std::time::{Duration, Instant};

use affinity::logbuffer::Offer;
use affinity::shm::log_buffer::{LogBuffer, LogParams};

fn main() {
    let mut size = 32usize;
    let mut count = 20_000_000u64;
    let mut chunk = 1024usize;
    let mut term_length = 64u32 << 20;
    let mut only = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--mode" {
            only = args.next().expect("--mode offer|offer_batch");
            continue;
        }
        let value: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{flag} needs a number"));
        match flag.as_str() {
            "--size" => size = value as usize,
            "--count" => count = value,
            "--chunk" => chunk = value as usize,
            "--term-length" => term_length = value as u32,
            other => panic!("unknown option {other}"),
        }
    }
    let params = LogParams {
        term_length,
        mtu: 1408,
        page_size: 4096,
        initial_term_id: 0,
        session_id: 1,
        stream_id: 2,
        correlation_id: 3,
    };
    let payload = vec![7u8; size];
    for mode in ["offer", "offer_batch"] {
        if !only.is_empty() && only != mode {
            continue;
        }
        let log = LogBuffer::anonymous(&params).expect("log");
        let (mut clean, mut read_position) = (0i64, 0i64);
        let mut scratch = Vec::new();
        let (mut append_time, mut read_time) = (Duration::ZERO, Duration::ZERO);
        let (mut sent, mut received) = (0u64, 0u64);
        let batch: Vec<&[u8]> = vec![payload.as_slice(); chunk];
        while sent < count {
            let limit = read_position + log.publication_window();
            let start = Instant::now();
            let mut taken = 0;
            while taken < chunk {
                if mode == "offer" {
                    match log.offer(&payload, 0, limit).expect("offer") {
                        Offer::Appended(_) => taken += 1,
                        Offer::AdminAction => {}
                        other => panic!("{other:?}"),
                    }
                } else {
                    let (n, outcome) = log.offer_batch(&batch[taken..], 0, limit).expect("offer_batch");
                    taken += n;
                    if !matches!(outcome, Offer::Appended(_) | Offer::AdminAction) {
                        panic!("{outcome:?}");
                    }
                }
            }
            sent += taken as u64;
            let middle = Instant::now();
            append_time += middle - start;
            read_position = log
                .read(read_position, usize::MAX, &mut scratch, |_, fragment| {
                    received += 1;
                    std::hint::black_box(fragment);
                })
                .expect("read");
            // A term end leaves the rest for the next read (padding).
            read_position = log.read(read_position, usize::MAX, &mut scratch, |_, _| received += 1).expect("read");
            read_time += middle.elapsed();
            log.clean_to(&mut clean, read_position - i64::from(log.term_length())).expect("clean");
        }
        assert_eq!(sent, received);
        println!(
            "{{\"mode\":\"{mode}\",\"size\":{size},\"messages\":{sent},\"append_ns_per_msg\":{:.2},\"read_ns_per_msg\":{:.2}}}",
            append_time.as_nanos() as f64 / sent as f64,
            read_time.as_nanos() as f64 / sent as f64
        );
    }
}
