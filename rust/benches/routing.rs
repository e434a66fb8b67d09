//! Routing throughput without criterion: medians of 5 runs, from `std::time`.
//!
//! `cargo bench -p affinity --bench routing`
//!
//! * sticky lookups: `route_member` for subjects seen before whose composite is bound
//!   (one subject-map probe, then the composite's slot; no regex, no `Arc` clone); also through
//!   `route_primary`, which builds the whole `LegDecision`.
//! * subscribed lookups: `route_member` for subjects that are themselves subscribed.
//! * new subjects: `subscribe` of never-seen subjects (include-pattern regex + affinity regex +
//!   hash + bind), each subscribed twice (the second only counts); also as a batch would:
//!   `reserve` for the batch, then `subscribe_member`.

use std::hint::black_box;
use std::time::Instant;

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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn report(name: &str, per_second: Vec<f64>) {
    let runs: Vec<String> = per_second.iter().map(|v| format!("{:.2}", v / 1e6)).collect();
    println!("{name:<40} median {:>7.2} M/s   runs [{}]", median(per_second) / 1e6, runs.join(", "));
}

fn main() {
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
        let lookups = 5_000_000;
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
        report(&format!("sticky lookups ({})", selection.name()), sticky);
        report(&format!("sticky lookups, route_primary ({})", selection.name()), sticky_decision);
        report(&format!("subscribed-subject lookups ({})", selection.name()), own);

        let mut fresh = Vec::new();
        let mut batch = Vec::new();
        let count = 200_000;
        for run in 0..RUNS {
            let subjects: Vec<String> =
                (0..count).map(|i| format!("/PRIVATE/user{}-{}/FXTRADE", i % (count / 2), run + 2)).collect();
            let mut routing = table(selection);
            let start = Instant::now();
            for subject in &subjects {
                black_box(routing.subscribe(subject).unwrap());
            }
            fresh.push(count as f64 / start.elapsed().as_secs_f64());
            black_box(routing.drain_events());
            let mut routing = table(selection);
            let start = Instant::now();
            routing.reserve(subjects.len());
            for subject in &subjects {
                black_box(routing.subscribe_member(subject).unwrap());
            }
            batch.push(count as f64 / start.elapsed().as_secs_f64());
            black_box(routing.drain_events());
        }
        report(&format!("new subjects: regex+hash+bind ({})", selection.name()), fresh);
        report(&format!("new subjects: reserve+subscribe_member ({})", selection.name()), batch);
    }
}
