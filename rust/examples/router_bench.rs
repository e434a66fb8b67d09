//! Subject router figures: one subscription on an idle router, the sans-IO core alone, then
//! end to end over loopback.
//!
//! ```text
//! cargo run --release --example router_bench [MAX_PARK_US]
//! ROUTER_BENCH_PATH_ONLY=1 cargo run --release --example router_bench   # the idle path only
//! ```
//!
//! * idle path (first): a router, one source and one subscriber, each on its own embedded
//!   driver, new subjects subscribed one at a time 5 ms apart: SUBSCRIBE -> first image, split
//!   at the source's REQUEST; one UDP hop alone after the same idle gap; the idle CPU of those
//!   threads.
//!
//! Prints each figure as one JSON line (`measurement`, `value`, `unit`, `note`).
//!
//! `MAX_PARK_US` sets the drivers' longest idle park (default: the driver's 1 ms).
//!
//! Workload: 10,000 subjects `/bench/u<i % 1000>/s<i>` in one data service with an affinity
//! rule on the user, two sources (SrcA, SrcB); 100 subscribers, subscriber `s` subscribes to
//! the 1,000 subjects with `i % 10 == s % 10`, so every subject has 10 subscribers and one
//! update is delivered 10 times. Payloads are 100 bytes.
//!
//! * core relay: packed update messages fed to `RouterCore::on_message`, outbox drained;
//!   deliveries per second (= updates × 10).
//! * core routing: 200,000 SUBSCRIBEs of new subjects fed to `RouterCore::on_message`.
//! * end to end: a `RouterRuntime`, two `SubjectSource`s (one thread each, answering every
//!   REQUEST with an image, then publishing updates round-robin in batches) and 100
//!   `SubjectSubscriber`s on one client polled by one thread; new subjects routed per second
//!   (first SUBSCRIBE sent, each subscriber sending its 1,000 in one batch → last REQUEST
//!   received), deliveries per second over 5 s, new subscriptions per second when every
//!   SUBSCRIBE is a new subject (200,000: 2,000 per subscriber, first SUBSCRIBE → last REQUEST,
//!   and → last image), and SUBSCRIBE → first image latency (p50/p99 of 1,000 new subjects, one
//!   at a time), split at the source's receipt of the REQUEST (SUBSCRIBE → REQUEST at the
//!   source, REQUEST → image at the subscriber), with the time the process's threads waited
//!   runnable for a CPU and their wake-ups per sample (`/proc/self/task/*/schedstat`).
//! * idle: with every image in and nothing flowing, for 3 s, the CPU share and wake-ups per
//!   second of the peers' threads, the router thread and the drivers' threads.
//!
//! The benchmark's own polling threads back off ([`POLLER_IDLE`]) rather than spin.
//! `benches/ab_router.sh` runs two builds of it interleaved (`docs/benchmarks.md`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use affinity::client::{ClientApi, ClientHandle, MessageBatch};
use affinity::control::Timing;
use affinity::control::{Heartbeat, Role};
use affinity::driver::idle::{IdleStrategy, Idler};
use affinity::embedded::{self, EmbeddedConfig};
use affinity::routing::policy::builtin;
use affinity::routing::{RoutingTable, Selection, SourceGroupSpec};
use affinity::subjects::backlog::DEFAULT_BACKLOG_BUDGET;
use affinity::subjects::codec::{FLAG_IMAGE, FLAG_UPDATE};
use affinity::subjects::runtime::{PeerOptions, RouterOptions, RouterRuntime, SubjectSource, SubjectSubscriber};
use affinity::subjects::{RecordKind, RouterCore, SubjectRecord};

const SUBJECTS: usize = 10_000;
const SUBSCRIBERS: usize = 100;
const FANOUT: usize = 10;
const PAYLOAD: usize = 100;
const USERS: usize = 1000;
const NEW_SUBJECTS: usize = 200_000;
const RUN: Duration = Duration::from_secs(5);
const LATENCY_SAMPLES: usize = 1000;
const DEADLINE: Duration = Duration::from_secs(60);
const SOURCES: [&str; 2] = ["SrcA", "SrcB"];
/// New subjects per subscriber in the all-new phase (100 subscribers: 200,000 new subjects).
const NEW_PER_SUBSCRIBER: usize = 2000;
/// How the benchmark's own polling threads (sources, subscribers' poller, the latency probe)
/// wait when a poll found nothing: a few spins and yields, then parks of at most 50 µs, so on
/// two cores they leave the CPU to the drivers and the router instead of spinning on it.
const POLLER_IDLE: IdleStrategy = IdleStrategy::Backoff {
    spins: 10,
    yields: 10,
    min_park: Duration::from_micros(1),
    max_park: Duration::from_micros(50),
};
/// Prefix of the latency phase's subjects (the sources note when their REQUEST arrived).
const LATENCY_PREFIX: &str = "/bench/lat";

fn table() -> RoutingTable {
    let mut table = RoutingTable::new();
    let service = table.add_service("bench", &["^/bench/"]).unwrap();
    let spec = SourceGroupSpec {
        name: "sources".into(),
        priority_groups: vec![SOURCES.iter().map(|s| (*s).to_owned()).collect()],
        rules: vec![("bench".into(), "^/bench/([^/]+)/".into())],
        selection: Selection::Modulo,
        policy: builtin("workload").unwrap(),
    };
    table.add_source_group(service, spec).unwrap();
    table
}

fn subject(i: usize) -> String {
    format!("/bench/u{}/s{i}", i % USERS)
}

fn record(kind: RecordKind, flags: u16, sender: u64, subject: &str, payload: &[u8], out: &mut Vec<u8>) {
    SubjectRecord { kind, flags, sender, subject, payload }.emit(out).unwrap();
}

fn heartbeat(id: u64, role: Role, name: &str) -> Heartbeat {
    Heartbeat {
        fingerprint: affinity::subjects::fingerprint(),
        member_id: id,
        leaving: false,
        role,
        name: name.into(),
        endpoint: format!("127.0.0.1:{}", 20000 + id),
        index: 0,
        count: 0,
        pid: 1,
        claims: Vec::new(),
        figures: Vec::new(),
    }
}

/// Packs records into messages of about 16 KiB.
fn pack(records: impl Iterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
    let mut messages = vec![Vec::new()];
    for r in records {
        if messages.last().unwrap().len() + r.len() > 16 * 1024 {
            messages.push(Vec::new());
        }
        messages.last_mut().unwrap().extend_from_slice(&r);
    }
    messages
}

fn core_figures() {
    let now = affinity::time::Instant::ZERO;
    let mut core = RouterCore::new(1, table(), None, Duration::from_secs(3600));
    let source_ids: HashMap<&str, u64> = SOURCES.iter().enumerate().map(|(i, s)| (*s, 10 + i as u64)).collect();
    for (label, id) in &source_ids {
        core.on_heartbeat(heartbeat(*id, Role::Source, label), now);
    }
    let subscribe = |s: usize, subject: &str| {
        let mut out = Vec::new();
        let reply = format!("127.0.0.1:{}\nsub{s}", 30000 + s);
        record(RecordKind::Subscribe, 0, 1000 + s as u64, subject, reply.as_bytes(), &mut out);
        out
    };
    let subs = pack(
        (0..SUBJECTS)
            .flat_map(|i| (0..FANOUT).map(move |k| (i, i % 10 + 10 * k)))
            .map(|(i, s)| subscribe(s, &subject(i))),
    );
    for message in &subs {
        core.on_message(message, now);
    }
    core.outbox().drain(|_, _| {});
    core.drain_log();
    let payload = [7u8; PAYLOAD];
    let updates = pack((0..SUBJECTS).map(|i| {
        let name = subject(i);
        let server = source_ids[core.serving(&name)[0]];
        let mut out = Vec::new();
        record(RecordKind::Data, FLAG_UPDATE, server, &name, &payload, &mut out);
        out
    }));
    let rounds = 30;
    let mut bytes = 0usize;
    let start = Instant::now();
    for _ in 0..rounds {
        for message in &updates {
            core.on_message(message, now);
            core.outbox().drain(|_, b| bytes += b.len());
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let delivered = (rounds * SUBJECTS * FANOUT) as f64;
    figure(
        "core relay (RouterCore::on_message + outbox drain)",
        delivered / elapsed,
        "deliveries/s",
        &format!(
            "{SUBJECTS} updates x {FANOUT} subscribers, {rounds} rounds, {:.0} MB/s out",
            bytes as f64 / elapsed / 1e6
        ),
    );
    assert_eq!(core.counters().relayed as usize, rounds * SUBJECTS * FANOUT);

    let mut core = RouterCore::new(1, table(), None, Duration::from_secs(3600));
    for (label, id) in &source_ids {
        core.on_heartbeat(heartbeat(*id, Role::Source, label), now);
    }
    let news = pack((0..NEW_SUBJECTS).map(|i| subscribe(i % SUBSCRIBERS, &format!("/bench/u{}/n{i}", i % 50_000))));
    let start = Instant::now();
    for message in &news {
        core.on_message(message, now);
        core.outbox().drain(|_, _| {});
        core.drain_log();
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(core.subject_count(), NEW_SUBJECTS);
    figure(
        "core routing, new subscriptions",
        NEW_SUBJECTS as f64 / elapsed,
        "subscriptions/s",
        &format!("{NEW_SUBJECTS} new subjects, 50,000 users"),
    );
}

/// Embedded drivers with the default idle strategy, or with its longest park set to
/// `max_park` (first argument, in microseconds).
fn client() -> Arc<ClientHandle> {
    let mut config = EmbeddedConfig::default();
    if let Some(max_park) = std::env::args().nth(1).and_then(|a| a.parse::<u64>().ok()) {
        config.driver.idle = IdleStrategy::Backoff {
            spins: 10,
            yields: 20,
            min_park: Duration::from_micros(1),
            max_park: Duration::from_micros(max_park),
        };
    }
    Arc::new(ClientHandle::from(embedded::start(config).unwrap()))
}

fn end_to_end() {
    let timing = Timing::new(Duration::from_millis(100), Duration::from_secs(5)).unwrap();
    let listen =
        format!("aeron:udp?endpoint={}", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let router_client = client();
    let router = RouterRuntime::start(
        router_client.clone(),
        table(),
        None,
        &RouterOptions {
            listen: listen.clone(),
            control: None,
            timing,
            backlog_budget: DEFAULT_BACKLOG_BUDGET,
            secret: None,
            forward: None,
        },
    )
    .unwrap();
    let options = |name: &str| PeerOptions {
        routers: vec![listen.clone()],
        name: name.into(),
        host: "127.0.0.1".into(),
        timing,
        secret: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let publishing = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicUsize::new(0));
    let published = Arc::new(AtomicU64::new(0));
    // When the REQUEST of each latency subject reached its source.
    let requested_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let source_client = client();
    let mut threads = Vec::new();
    for label in SOURCES {
        let source = SubjectSource::new(&source_client, &options(label)).unwrap();
        let (stop, publishing, requests, published, requested_at) =
            (stop.clone(), publishing.clone(), requests.clone(), published.clone(), requested_at.clone());
        threads.push(std::thread::spawn(move || {
            let payload = [9u8; PAYLOAD];
            let mut served: Vec<String> = Vec::new();
            let mut next = 0;
            let mut idler = Idler::new(POLLER_IDLE);
            while !stop.load(Ordering::Relaxed) {
                let mut new = Vec::new();
                source
                    .peer()
                    .poll_with(1024, |r| {
                        if r.kind == RecordKind::Request {
                            if r.subject.starts_with(LATENCY_PREFIX) {
                                requested_at.lock().unwrap().insert(r.subject.to_owned(), Instant::now());
                            }
                            new.push(r.subject.to_owned());
                        }
                    })
                    .unwrap();
                let answered = new.len();
                if !new.is_empty() {
                    requests.fetch_add(new.len(), Ordering::Relaxed);
                    source.publish_batch(new.iter().map(|s| (s.as_str(), &payload[..])), true).unwrap();
                    served.extend(new.into_iter().filter(|s| s.contains("/s")));
                }
                if publishing.load(Ordering::Relaxed) && !served.is_empty() {
                    let batch = 256.min(served.len());
                    let records = (0..batch).map(|k| (served[(next + k) % served.len()].as_str(), &payload[..]));
                    source.publish_batch(records, false).unwrap();
                    next = (next + batch) % served.len();
                    published.fetch_add(batch as u64, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_micros(50));
                } else {
                    idler.idle(answered);
                }
            }
        }));
    }
    while router.status().members.iter().any(|(_, up)| !up) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let subscriber_client = client();
    let subscribers: Vec<SubjectSubscriber> = (0..SUBSCRIBERS)
        .map(|s| SubjectSubscriber::new(&subscriber_client, &options(&format!("sub{s}"))).unwrap())
        .collect();
    let images = Arc::new(AtomicU64::new(0));
    let updates = Arc::new(AtomicU64::new(0));
    let subscribers = Arc::new(subscribers);
    let stop_polling = Arc::new(AtomicBool::new(false));
    let poller = {
        let (subscribers, stop, images, updates) =
            (subscribers.clone(), stop_polling.clone(), images.clone(), updates.clone());
        std::thread::spawn(move || {
            let mut idler = Idler::new(POLLER_IDLE);
            while !stop.load(Ordering::Relaxed) {
                let mut work = 0;
                for subscriber in subscribers.iter() {
                    work += subscriber
                        .peer()
                        .poll_with(1024, |r| {
                            if r.flags == FLAG_IMAGE {
                                images.fetch_add(1, Ordering::Relaxed);
                            } else if r.flags == FLAG_UPDATE {
                                updates.fetch_add(1, Ordering::Relaxed);
                            }
                        })
                        .unwrap();
                }
                idler.idle(work);
            }
        })
    };
    // Routing: every subscriber's subscriptions; the first of each subject is a new subject.
    let start = Instant::now();
    for (s, subscriber) in subscribers.iter().enumerate() {
        let names: Vec<String> = (s % 10..SUBJECTS).step_by(10).map(subject).collect();
        subscriber.subscribe_batch(names.iter().map(String::as_str)).unwrap();
    }
    while requests.load(Ordering::Relaxed) < SUBJECTS {
        assert!(start.elapsed() < DEADLINE, "only {} requests", requests.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_micros(200));
    }
    let routed = start.elapsed().as_secs_f64();
    figure(
        "end to end: new subjects routed (first SUBSCRIBE -> last REQUEST)",
        SUBJECTS as f64 / routed,
        "subjects/s",
        &format!("{SUBJECTS} subjects, {} subscriptions, {routed:.3} s", SUBJECTS * FANOUT),
    );
    while images.load(Ordering::Relaxed) < (SUBJECTS * FANOUT) as u64 {
        assert!(start.elapsed() < DEADLINE, "only {} images", images.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(1));
    }
    // Idle: what the runtime's threads cost while nothing flows (every image is in).
    idle_cpu("idle", "100 subscribers, 2 sources");
    // Relay.
    let before = router.status();
    let start = Instant::now();
    publishing.store(true, Ordering::Relaxed);
    std::thread::sleep(RUN);
    publishing.store(false, Ordering::Relaxed);
    let settle = Instant::now();
    let mut last = updates.load(Ordering::Relaxed);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = updates.load(Ordering::Relaxed);
        if now == last || settle.elapsed() > Duration::from_secs(10) {
            break;
        }
        last = now;
    }
    let elapsed = start.elapsed().as_secs_f64() - 0.2;
    let delivered = updates.load(Ordering::Relaxed);
    let sent = published.load(Ordering::Relaxed);
    let after = router.status();
    figure(
        "end to end relay",
        delivered as f64 / elapsed,
        "deliveries/s",
        &format!(
            "{sent} updates published, {delivered} delivered of {} expected, {elapsed:.1} s; router dropped {} records, relayed {}",
            sent * FANOUT as u64,
            after.runtime.dropped_records - before.runtime.dropped_records,
            after.counters.relayed - before.counters.relayed,
        ),
    );
    // New subscriptions: every SUBSCRIBE a subject nobody holds yet.
    let (requests_before, images_before) = (requests.load(Ordering::Relaxed), images.load(Ordering::Relaxed));
    let total = SUBSCRIBERS * NEW_PER_SUBSCRIBER;
    let start = Instant::now();
    for (s, subscriber) in subscribers.iter().enumerate() {
        let names: Vec<String> =
            (0..NEW_PER_SUBSCRIBER).map(|k| format!("/bench/u{}/n{}", k % USERS, s * NEW_PER_SUBSCRIBER + k)).collect();
        subscriber.subscribe_batch(names.iter().map(String::as_str)).unwrap();
    }
    while requests.load(Ordering::Relaxed) < requests_before + total {
        assert!(start.elapsed() < DEADLINE, "only {} requests", requests.load(Ordering::Relaxed) - requests_before);
        std::thread::sleep(Duration::from_micros(200));
    }
    let routed = start.elapsed().as_secs_f64();
    while images.load(Ordering::Relaxed) < images_before + total as u64 {
        assert!(start.elapsed() < DEADLINE, "only {} images", images.load(Ordering::Relaxed) - images_before);
        std::thread::sleep(Duration::from_micros(200));
    }
    let imaged = start.elapsed().as_secs_f64();
    let note = format!("{total} new subjects, {NEW_PER_SUBSCRIBER} per subscriber in one batch each");
    figure(
        "end to end: new subscriptions routed, all new subjects (first SUBSCRIBE -> last REQUEST)",
        total as f64 / routed,
        "subscriptions/s",
        &format!("{note}, {routed:.3} s"),
    );
    figure(
        "end to end: new subscriptions imaged, all new subjects (first SUBSCRIBE -> last image)",
        total as f64 / imaged,
        "subscriptions/s",
        &format!("{note}, {imaged:.3} s"),
    );
    // Latency: one subscriber, new subjects one at a time.
    stop_polling.store(true, Ordering::Relaxed);
    poller.join().unwrap();
    let probe = SubjectSubscriber::new(&subscriber_client, &options("probe")).unwrap();
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    let (mut to_source, mut to_image) = (Vec::new(), Vec::new());
    let got = Mutex::new(false);
    let sched_before = thread_sched();
    for i in 0..LATENCY_SAMPLES + 50 {
        let name = format!("{LATENCY_PREFIX}{}/l{i}", i % 7);
        let start = Instant::now();
        probe.subscribe(&name).unwrap();
        *got.lock().unwrap() = false;
        let mut idler = Idler::new(POLLER_IDLE);
        while !*got.lock().unwrap() {
            assert!(start.elapsed() < Duration::from_secs(5), "no image for {name}");
            let work = probe
                .peer()
                .poll_with(64, |r| {
                    if r.flags == FLAG_IMAGE && r.subject == name {
                        *got.lock().unwrap() = true;
                    }
                })
                .unwrap();
            idler.idle(work);
        }
        let done = Instant::now();
        if i >= 50 {
            samples.push(done - start);
            if let Some(at) = requested_at.lock().unwrap().remove(&name) {
                to_source.push(at - start);
                to_image.push(done - at);
            }
        }
        probe.unsubscribe(&name).unwrap();
    }
    let sched = sched_delta(&sched_before, &thread_sched(), None);
    let rounds = (LATENCY_SAMPLES + 50) as f64;
    let note = "every thread of the process, per sample of the latency phase (/proc/self/task/*/schedstat)";
    figure(
        "latency phase: time threads waited runnable for a CPU, per sample",
        sched.wait_ns as f64 / rounds / 1e3,
        "µs",
        note,
    );
    figure(
        "latency phase: times threads were scheduled in, per sample",
        sched.slices as f64 / rounds,
        "wake-ups",
        note,
    );
    let note = format!("{LATENCY_SAMPLES} new subjects, one at a time");
    figure("end to end latency SUBSCRIBE -> first image, p50", quantile(&mut samples, 0.5), "µs", &note);
    figure("end to end latency SUBSCRIBE -> first image, p99", quantile(&mut samples, 0.99), "µs", &note);
    let note = format!("{} of {LATENCY_SAMPLES} samples split at the source", to_source.len());
    figure("latency part: SUBSCRIBE -> REQUEST at the source, p50", quantile(&mut to_source, 0.5), "µs", &note);
    figure(
        "latency part: REQUEST at the source -> image at the subscriber, p50",
        quantile(&mut to_image, 0.5),
        "µs",
        &note,
    );
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    router.close();
}

/// How long the idle figures watch the threads.
const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Scheduler figures of this process's threads summed by thread name (as the kernel truncates
/// it, 15 bytes), from `/proc/self/task/*/schedstat`: nanoseconds run, nanoseconds spent
/// runnable waiting for a CPU, and times scheduled in.
#[derive(Clone, Copy, Default)]
struct Sched {
    run_ns: u64,
    wait_ns: u64,
    slices: u64,
}

fn thread_sched() -> HashMap<String, Sched> {
    let mut sched: HashMap<String, Sched> = HashMap::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let (Ok(name), Ok(stat)) =
            (std::fs::read_to_string(task.path().join("comm")), std::fs::read_to_string(task.path().join("schedstat")))
        else {
            continue;
        };
        let fields: Vec<u64> = stat.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        if let [run_ns, wait_ns, slices] = fields[..] {
            let entry = sched.entry(name.trim_end().to_owned()).or_default();
            entry.run_ns += run_ns;
            entry.wait_ns += wait_ns;
            entry.slices += slices;
        }
    }
    sched
}

/// The change of [`thread_sched`] between two readings, for threads named `name` (`None`: all).
fn sched_delta(before: &HashMap<String, Sched>, after: &HashMap<String, Sched>, name: Option<&str>) -> Sched {
    let mut delta = Sched::default();
    for (thread, now) in after {
        if name.is_some_and(|n| n != thread) {
            continue;
        }
        let then = before.get(thread).copied().unwrap_or_default();
        delta.run_ns += now.run_ns.saturating_sub(then.run_ns);
        delta.wait_ns += now.wait_ns.saturating_sub(then.wait_ns);
        delta.slices += now.slices.saturating_sub(then.slices);
    }
    delta
}

/// Prints, for each kind of runtime thread, the share of one core it ran and how often it was
/// scheduled in over [`IDLE_WINDOW`] with nothing flowing: the peers' heartbeat threads, the
/// router thread, the drivers.
fn idle_cpu(phase: &str, peers: &str) {
    let before = thread_sched();
    std::thread::sleep(IDLE_WINDOW);
    let after = thread_sched();
    let window = IDLE_WINDOW.as_secs_f64();
    let peers = format!("peer threads ({peers})");
    for (name, label) in [
        ("affinity-subjec", peers.as_str()),
        ("affinity-router", "router thread"),
        ("affinity-driver", "driver threads (3 embedded drivers)"),
    ] {
        let delta = sched_delta(&before, &after, Some(name));
        let note = format!("{} s with nothing flowing, /proc/self/task/*/schedstat", IDLE_WINDOW.as_secs());
        figure(&format!("{phase} CPU: {label}"), delta.run_ns as f64 / 1e9 / window * 100.0, "% of a core", &note);
        figure(&format!("{phase} wake-ups: {label}"), delta.slices as f64 / window, "per second", &note);
    }
}

/// The `q` quantile of `samples` in microseconds (0 when there are none).
fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort();
    samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)].as_secs_f64() * 1e6
}

/// Prints one figure as a JSON line (`benches/run_all.sh` records them with the machine load).
fn figure(measurement: &str, value: f64, unit: &str, note: &str) {
    let escape = |text: &str| text.replace('\\', "\\\\").replace('"', "\\\"");
    println!(
        "{{\"bench\":\"router\",\"measurement\":\"{}\",\"value\":{value:.1},\"unit\":\"{}\",\"note\":\"{}\"}}",
        escape(measurement),
        escape(unit),
        escape(note)
    );
}

/// Samples of the idle path and of the single hop.
const PATH_SAMPLES: usize = 400;
/// Quiet time before each idle-path sample: long enough for every thread on the path to reach
/// its longest idle park (the drivers' backoff reaches 1 ms after about 2 ms).
const PATH_GAP: Duration = Duration::from_millis(5);
/// Stream of the single-hop probe (any stream the subjects do not use).
const HOP_STREAM: i32 = 4242;

/// One subscription on an otherwise idle router: a `RouterRuntime`, one `SubjectSource`, one
/// `SubjectSubscriber`, each on its own embedded driver (as three processes would be), a new
/// subject subscribed every [`PATH_GAP`]; the source notes when each REQUEST arrived and the
/// sample when its image arrived. Then one UDP hop alone between two of those drivers (a
/// publication offered, a subscription polled by [`POLLER_IDLE`], the same gap before each).
fn idle_path() {
    let timing = Timing::new(Duration::from_millis(100), Duration::from_secs(5)).unwrap();
    let listen =
        format!("aeron:udp?endpoint={}", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let mut table = RoutingTable::new();
    let service = table.add_service("path", &["^/path/"]).unwrap();
    let spec = SourceGroupSpec {
        name: "path".into(),
        priority_groups: vec![vec!["Path".to_owned()]],
        rules: Vec::new(),
        selection: Selection::Modulo,
        policy: builtin("workload").unwrap(),
    };
    table.add_source_group(service, spec).unwrap();
    let router_client = client();
    let options = RouterOptions {
        listen: listen.clone(),
        control: None,
        timing,
        backlog_budget: DEFAULT_BACKLOG_BUDGET,
        secret: None,
        forward: None,
    };
    let router = RouterRuntime::start(router_client.clone(), table, None, &options).unwrap();
    let peer = |name: &str| PeerOptions {
        routers: vec![listen.clone()],
        name: name.into(),
        host: "127.0.0.1".into(),
        timing,
        secret: None,
    };
    let (source_client, subscriber_client) = (client(), client());
    let source = SubjectSource::new(&source_client, &peer("Path")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let requested_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let server = {
        let (stop, requested_at) = (stop.clone(), requested_at.clone());
        std::thread::spawn(move || {
            let mut idler = Idler::new(POLLER_IDLE);
            while !stop.load(Ordering::Relaxed) {
                let mut new = Vec::new();
                source
                    .peer()
                    .poll_with(64, |r| {
                        if r.kind == RecordKind::Request {
                            requested_at.lock().unwrap().insert(r.subject.to_owned(), Instant::now());
                            new.push(r.subject.to_owned());
                        }
                    })
                    .unwrap();
                for subject in &new {
                    source.publish(subject, &[9u8; PAYLOAD], true).unwrap();
                }
                idler.idle(new.len());
            }
        })
    };
    let started = Instant::now();
    while router.status().members.iter().any(|(_, up)| !up) {
        assert!(started.elapsed() < DEADLINE, "the path's source never came up");
        std::thread::sleep(Duration::from_millis(5));
    }
    let subscriber = SubjectSubscriber::new(&subscriber_client, &peer("path-sub")).unwrap();
    let (mut total, mut to_source, mut to_image) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..PATH_SAMPLES + 20 {
        std::thread::sleep(PATH_GAP);
        let name = format!("/path/s{i}");
        let start = Instant::now();
        subscriber.subscribe(&name).unwrap();
        let mut got = false;
        let mut idler = Idler::new(POLLER_IDLE);
        while !got {
            assert!(start.elapsed() < Duration::from_secs(5), "no image for {name}");
            let work = subscriber.peer().poll_with(64, |r| got |= r.flags == FLAG_IMAGE && r.subject == name).unwrap();
            idler.idle(work);
        }
        let done = Instant::now();
        let at = requested_at.lock().unwrap().remove(&name);
        if i >= 20 {
            total.push(done - start);
            if let Some(at) = at {
                to_source.push(at - start);
                to_image.push(done - at);
            }
        }
        subscriber.unsubscribe(&name).unwrap();
    }
    // Idle: what this router and its three peers' drivers cost with nothing flowing.
    idle_cpu("idle path", "1 subscriber, 1 source");
    let note = format!("{PATH_SAMPLES} new subjects, one subscriber, one source, {} ms apart", PATH_GAP.as_millis());
    figure("idle path: SUBSCRIBE -> first image, p50", quantile(&mut total, 0.5), "µs", &note);
    figure("idle path: SUBSCRIBE -> first image, p99", quantile(&mut total, 0.99), "µs", &note);
    figure("idle path part: SUBSCRIBE -> REQUEST at the source, p50", quantile(&mut to_source, 0.5), "µs", &note);
    figure("idle path part: REQUEST at the source -> image, p50", quantile(&mut to_image, 0.5), "µs", &note);
    // One hop alone: the subscriber's driver to the source's driver.
    let hop_channel =
        format!("aeron:udp?endpoint={}", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let inbox = source_client.add_subscription_handle(&hop_channel, HOP_STREAM).unwrap();
    let outbox = subscriber_client.add_publication_handle(&hop_channel, HOP_STREAM).unwrap();
    let started = Instant::now();
    while !outbox.is_connected().unwrap() {
        assert!(started.elapsed() < DEADLINE, "the hop probe never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut hops = Vec::new();
    let mut batch = MessageBatch::default();
    for i in 0..PATH_SAMPLES + 20 {
        std::thread::sleep(PATH_GAP);
        let start = Instant::now();
        while outbox.try_offer(&[7u8; PAYLOAD]).is_err() {
            assert!(start.elapsed() < Duration::from_secs(5), "the hop probe's offer was refused");
            std::thread::yield_now();
        }
        let mut idler = Idler::new(POLLER_IDLE);
        loop {
            assert!(start.elapsed() < Duration::from_secs(5), "the hop probe's message never arrived");
            batch.clear();
            let work = inbox.poll_into(&mut batch, 16).unwrap();
            if work > 0 {
                break;
            }
            idler.idle(work);
        }
        if i >= 20 {
            hops.push(start.elapsed());
        }
    }
    let note = format!("{PATH_SAMPLES} messages of {PAYLOAD} B, {} ms apart, driver to driver", PATH_GAP.as_millis());
    figure("one UDP hop after idle, p50", quantile(&mut hops, 0.5), "µs", &note);
    figure("one UDP hop after idle, p99", quantile(&mut hops, 0.99), "µs", &note);
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    subscriber.peer().close();
    router.close();
}

fn main() {
    idle_path();
    if std::env::var_os("ROUTER_BENCH_PATH_ONLY").is_some() {
        return;
    }
    core_figures();
    end_to_end();
}
