//! Routing throughput without criterion: medians of 5 runs, from `std::time`.
//!
//! `cargo bench -p affinity --bench routing` (all), or `... -- subscribes` / `... -- lookups` for
//! one part (a profile of the subscribe path without the lookups around it).
//!
//! * sticky lookups: `route_member` for subjects seen before whose composite is bound
//!   (one subject-map probe, then the composite's slot; no regex, no `Arc` clone); also through
//!   `route_primary`, which builds the whole `LegDecision`.
//! * subscribed lookups: `route_member` for subjects that are themselves subscribed.
//! * distinct new subjects (the headline): `subscribe` where every call is a subject (and
//!   composite) the table has never seen (include-pattern regex + affinity regex + hash + bind);
//!   also as a batch would: `reserve` for the batch, then `subscribe_member`.
//! * distinct subjects over 10 000 composites: every subject new, but its affinity composite
//!   (the user) already bound after the first 10 000.
//! * mixed subscribes: the same calls over a set where each subject comes twice, so half of the
//!   calls are only reference-count bumps of a subscription made earlier in the run.
//!
//! The distinct-subject rates are also given per CPU second of the benchmark's thread: on a
//! shared machine the wall clock counts the time other processes hold the core.

use std::hint::black_box;
use std::time::{Duration, Instant};

use affinity::routing::policy::builtin;
use affinity::routing::{RoutingTable, Selection, SourceGroupSpec};

const USERS: usize = 10_000;
const RUNS: usize = 5;

fn table(selection: Selection) -> RoutingTable {
    let mut table = RoutingTable::new();
    let service = table.add_service("trades", &["^/PRIVATE/[^/]+/FXTRADE"]).unwrap();
    table
        .add_source_group(
            service,
            SourceGroupSpec {
                name: "adapters".to_owned(),
                priority_groups: vec![(1..=4).map(|i| format!("TradeAdapter{i}")).collect()],
                rules: vec![("trading-adapters".to_owned(), "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE".to_owned())],
                selection,
                policy: builtin("workload").unwrap(),
            },
        )
        .unwrap();
    table
}

/// CPU time this thread has used: unlike the wall clock, it does not count the time other
/// processes on a shared machine hold the core.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec for the call to fill in.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Wall-clock and CPU-time rates of `count` operations run by `work`.
fn rates(count: usize, work: impl FnOnce()) -> (f64, f64) {
    let (start, cpu) = (Instant::now(), thread_cpu_time());
    work();
    let (wall, cpu) = (start.elapsed(), thread_cpu_time().saturating_sub(cpu));
    (count as f64 / wall.as_secs_f64(), count as f64 / cpu.as_secs_f64())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn report(name: &str, per_second: Vec<f64>) {
    let runs: Vec<String> = per_second.iter().map(|v| format!("{:.2}", v / 1e6)).collect();
    println!("{name:<62} median {:>7.2} M/s   runs [{}]", median(per_second) / 1e6, runs.join(", "));
}

fn main() {
    // `cargo bench` passes `--bench`; a plain argument names the only part to run.
    let only = std::env::args().skip(1).find(|argument| !argument.starts_with("--"));
    let runs = |part: &str| only.as_deref().is_none_or(|only| only == part);
    for selection in [Selection::Modulo, Selection::Rendezvous] {
        let subscribed: Vec<String> = (0..USERS).map(|u| format!("/PRIVATE/user{u}-0/FXTRADE")).collect();
        let seen: Vec<String> = (0..USERS).map(|u| format!("/PRIVATE/user{u}-1/FXTRADE")).collect();
        let mut routing = table(selection);
        for subject in &subscribed {
            routing.subscribe(subject).unwrap();
        }
        for subject in &seen {
            routing.route_primary(subject).unwrap();
        }
        let lookups = if runs("lookups") { 5_000_000 } else { 0 };
        let mut sticky = Vec::new();
        let mut sticky_decision = Vec::new();
        let mut own = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            for i in 0..lookups {
                black_box(routing.route_member(&seen[i % USERS]).unwrap());
            }
            sticky.push(lookups as f64 / start.elapsed().as_secs_f64());
            let start = Instant::now();
            for i in 0..lookups {
                black_box(routing.route_primary(&seen[i % USERS]).unwrap().member);
            }
            sticky_decision.push(lookups as f64 / start.elapsed().as_secs_f64());
            let start = Instant::now();
            for i in 0..lookups {
                black_box(routing.route_member(&subscribed[i % USERS]).unwrap());
            }
            own.push(lookups as f64 / start.elapsed().as_secs_f64());
        }
        if runs("lookups") {
            report(&format!("sticky lookups ({})", selection.name()), sticky);
            report(&format!("sticky lookups, route_primary ({})", selection.name()), sticky_decision);
            report(&format!("subscribed-subject lookups ({})", selection.name()), own);
        }
        if !runs("subscribes") {
            continue;
        }

        let count = 200_000;
        let distinct = |run: usize| -> Vec<String> {
            (0..count).map(|i| format!("/PRIVATE/user{i}-{}/FXTRADE", run + 2)).collect()
        };
        let shared = |run: usize| -> Vec<String> {
            (0..count)
                .map(|i| format!("/PRIVATE/user{}-{}/FXTRADE", i % USERS, (run + 2) * count + i / USERS))
                .collect()
        };
        let mixed = |run: usize| -> Vec<String> {
            (0..count).map(|i| format!("/PRIVATE/user{}-{}/FXTRADE", i % (count / 2), run + 2)).collect()
        };
        let (fresh, batch) = subscribe_rates(selection, &distinct);
        report(&format!("distinct new subjects: subscribe ({})", selection.name()), fresh.wall);
        report(&format!("distinct new subjects: reserve+subscribe_member ({})", selection.name()), batch.wall);
        report(&format!("  per CPU second: subscribe ({})", selection.name()), fresh.cpu);
        report(&format!("  per CPU second: reserve+subscribe_member ({})", selection.name()), batch.cpu);
        let (fresh, batch) = subscribe_rates(selection, &shared);
        report(&format!("distinct subjects, {USERS} composites: subscribe ({})", selection.name()), fresh.wall);
        report(&format!("distinct subjects, {USERS} composites: reserve+member ({})", selection.name()), batch.wall);
        let (fresh, batch) = subscribe_rates(selection, &mixed);
        report(&format!("mixed, half re-subscribes: subscribe ({})", selection.name()), fresh.wall);
        report(&format!("mixed, half re-subscribes: reserve+member ({})", selection.name()), batch.wall);
    }
}

/// Rates of each run, by the wall clock and per CPU second of the benchmark's thread.
#[derive(Default)]
struct Rates {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Rates {
    fn push(&mut self, (wall, cpu): (f64, f64)) {
        self.wall.push(wall);
        self.cpu.push(cpu);
    }
}

/// Subscribes per second over `subjects(run)` for each run, into a fresh table: through
/// `subscribe`, and through `reserve` + `subscribe_member`.
fn subscribe_rates(selection: Selection, subjects: &dyn Fn(usize) -> Vec<String>) -> (Rates, Rates) {
    let mut fresh = Rates::default();
    let mut batch = Rates::default();
    for run in 0..RUNS {
        let subjects = subjects(run);
        let mut routing = table(selection);
        fresh.push(rates(subjects.len(), || {
            for subject in &subjects {
                black_box(routing.subscribe(subject).unwrap());
            }
        }));
        black_box(routing.drain_events());
        drop(routing);
        let mut routing = table(selection);
        batch.push(rates(subjects.len(), || {
            routing.reserve(subjects.len());
            for subject in &subjects {
                black_box(routing.subscribe_member(subject).unwrap());
            }
        }));
        black_box(routing.drain_events());
        drop(routing);
    }
    (fresh, batch)
}
