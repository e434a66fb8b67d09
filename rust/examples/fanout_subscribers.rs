//! Subject subscribers in Rust for the cluster benchmark's fan-out (`benches/bench_cluster.py
//! --rust-subscribers`): the Python benchmark's own polling thread is the bound of its Python
//! subscribers, these are not.
//!
//! ```text
//! fanout_subscribers ROUTERS SUBJECT COUNT SECONDS HOST
//! ```
//!
//! `ROUTERS`: comma-separated router channels, subscriber `i` uses router `i % len`. One
//! embedded driver, `COUNT` `SubjectSubscriber`s with inboxes on `HOST`, each subscribing to
//! `SUBJECT`, polled by one thread (backing off when idle). Prints `subscribed` once every
//! SUBSCRIBE is sent, `imaged` once every subscriber has its image, then counts the updates
//! delivered from the first one for `SECONDS` and prints one JSON line (`delivered`,
//! `seconds`). Every wait is bounded (60 s); a subscriber that never got its image fails the
//! run (exit 1).

use std::io::Write;
use std::time::{Duration, Instant};

use affinity::client::ClientHandle;
use affinity::control::Timing;
use affinity::driver::idle::{IdleStrategy, Idler};
use affinity::embedded::{self, EmbeddedConfig};
use affinity::subjects::codec::{FLAG_IMAGE, FLAG_UPDATE};
use affinity::subjects::runtime::{PeerOptions, SubjectSubscriber};

/// How long any step may wait.
const DEADLINE: Duration = Duration::from_secs(60);
/// How the polling thread waits when a round over every subscriber found nothing.
const POLLER_IDLE: IdleStrategy = IdleStrategy::Backoff {
    spins: 10,
    yields: 10,
    min_park: Duration::from_micros(1),
    max_park: Duration::from_micros(50),
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, routers, subject, count, seconds, host] = &args[..] else {
        eprintln!("usage: fanout_subscribers ROUTERS SUBJECT COUNT SECONDS HOST");
        std::process::exit(2);
    };
    let routers: Vec<&str> = routers.split(',').collect();
    let count: usize = count.parse().expect("COUNT: a number");
    let window = Duration::from_secs_f64(seconds.parse().expect("SECONDS: a number"));
    let client = ClientHandle::from(embedded::start(EmbeddedConfig::default()).expect("an embedded driver"));
    let timing = Timing::new(Duration::from_millis(100), Duration::from_secs(2)).expect("timing");
    let subscribers: Vec<SubjectSubscriber> = (0..count)
        .map(|i| {
            let options = PeerOptions {
                routers: vec![routers[i % routers.len()].to_owned()],
                name: format!("rust-fan-{i}"),
                host: host.clone(),
                timing,
                secret: None,
            };
            let subscriber = SubjectSubscriber::new(&client, &options).expect("a subscriber");
            assert!(subscriber.subscribe(subject).expect("subscribe"), "the link to the router is full");
            subscriber
        })
        .collect();
    println!("subscribed");
    std::io::stdout().flush().unwrap();
    let (mut images, mut delivered) = (0usize, 0u64);
    let mut first_update: Option<Instant> = None;
    let mut idler = Idler::new(POLLER_IDLE);
    let mut announced = false;
    let start = Instant::now();
    loop {
        let mut work = 0;
        for subscriber in &subscribers {
            work += subscriber
                .peer()
                .poll_with(1024, |r| {
                    if r.flags & FLAG_IMAGE != 0 {
                        images += 1;
                    } else if r.flags & FLAG_UPDATE != 0 && images >= count {
                        first_update.get_or_insert_with(Instant::now);
                        delivered += 1;
                    }
                })
                .expect("poll");
        }
        if let Some(first) = first_update {
            if first.elapsed() >= window {
                break;
            }
        } else if start.elapsed() > DEADLINE {
            eprintln!("{images} images of {count}, no update within {} s", DEADLINE.as_secs());
            std::process::exit(1);
        }
        if images >= count && !announced {
            announced = true;
            println!("imaged");
            std::io::stdout().flush().unwrap();
        }
        idler.idle(work);
    }
    let elapsed = first_update.map(|f| f.elapsed()).unwrap_or_default().as_secs_f64();
    println!("{{\"delivered\":{delivered},\"seconds\":{elapsed:.3}}}");
    std::io::stdout().flush().unwrap();
    drop(subscribers);
    client.close();
}
