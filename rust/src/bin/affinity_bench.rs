//! Throughput and latency benchmark driver (filled in by the transport work).
fn main() {}
