#!/usr/bin/env bash
# Interleaved A/B of the cluster forward queues' publish path (the core's
# `rust/crates/messaging/src/subjects/cluster/forward.rs`, std only): the file at BASE (a git
# revision) and the working tree's, compiled side by side into one throwaway binary under
# $WORK (their `crate::` paths resolved to the working tree's affinity-messaging, the record
# codec they parse with), run in alternating order per round; prints ns per publish, median (min-max) per
# variant, and the new/old ratio per round's pair, with the load average before and after.
#   usage: benches/ab_forward_queues.sh BASE          env: WORK (/tmp/forward_queues_ab)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: benches/ab_forward_queues.sh BASE_REVISION}
WORK=${WORK:-/tmp/forward_queues_ab}
FILE=rust/crates/messaging/src/subjects/cluster/forward.rs
mkdir -p "$WORK/src"
CRATE="s/crate::subjects::/affinity_messaging::subjects::/g"
git show "$BASE:$FILE" | sed '/^#\[cfg(test)\]/,$d' | sed "$CRATE" >"$WORK/src/old.rs"
sed '/^#\[cfg(test)\]/,$d' "$FILE" | sed "$CRATE" >"$WORK/src/new.rs"
cat >"$WORK/Cargo.toml" <<TOML
[package]
name = "forward_queues_ab"
version = "0.1.0"
edition = "2021"
[dependencies]
affinity-messaging = { path = "$PWD/rust/crates/messaging", default-features = false }
[workspace]
TOML
cat >"$WORK/src/main.rs" <<'RUST'
#![allow(dead_code)]
mod new;
mod old;
use std::hint::black_box;
use std::time::Instant;

/// Publishes per timed run, and rounds (each runs both variants, in alternating order).
const PUBLISHES: usize = 200_000;
const ROUNDS: usize = 21;

macro_rules! run {
    ($m:ident, $targets:expr) => {{
        let mut queues = $m::ForwardQueues::new(1 << 30);
        let targets: Vec<($m::QueueKey, bool)> = $targets.iter().map(|&(i, r)| ($m::QueueKey::Node(i), r)).collect();
        let record = [7u8; 64];
        let mut sent = 0usize;
        let start = Instant::now();
        for n in 0..PUBLISHES {
            black_box(queues.publish_all(&targets, (n % 8) as u64, &record, |_, r| sent += r.len()));
            if n % 1024 == 1023 {
                for (key, _) in &targets {
                    queues.flush(key, |_| true);
                }
                black_box(queues.take_notices());
            }
        }
        black_box(sent);
        start.elapsed().as_nanos() as f64 / PUBLISHES as f64
    }};
}

fn spread(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!("{:.2} ({:.2}-{:.2})", v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let cases: [(&str, &[(usize, bool)]); 3] = [
        ("one master, live", &[(0, true)]),
        ("two mirrors, both live", &[(0, true), (1, true)]),
        ("two mirrors, one dead (queue within bound, flushed every 1024)", &[(0, true), (1, false)]),
    ];
    for (name, targets) in cases {
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            if round % 2 == 0 {
                old.push(run!(old, targets));
                new.push(run!(new, targets));
            } else {
                new.push(run!(new, targets));
                old.push(run!(old, targets));
            }
        }
        let ratios = old.iter().zip(&new).map(|(a, b)| b / a).collect();
        println!(
            "{name}: ns per publish old {}, new {}; new/old {}",
            spread(old.clone()),
            spread(new.clone()),
            spread(ratios)
        );
    }
}
RUST
echo "base $BASE, new = working tree; load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
CARGO_TARGET_DIR="$WORK/target" cargo build --quiet --release --manifest-path "$WORK/Cargo.toml"
"$WORK/target/release/forward_queues_ab"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
