//! A receiving process for the multicast integration tests (`rust/tests/multicast.rs`), which
//! start it in the roles below (in a private network namespace, never on a real network):
//!
//! * `multicast_test_role consume CHANNEL` — subscribes and consumes until killed (the test
//!   kills it with SIGKILL) or for at most 60 s; prints `subscribed` once the subscription is up.
//! * `multicast_test_role receive CHANNEL COUNT` — receives COUNT numbered messages in order and
//!   exits 0; exits 1 with a message if one is lost, reordered or corrupted, or after 40 s.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use affinity::client::attached::AttachedClient;
use affinity::client::MessageBatch;
use affinity::embedded::{self, EmbeddedConfig};

#[path = "../../tests/support/messages.rs"]
mod messages;

/// The stream every multicast test uses.
const STREAM: i32 = 10;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["consume", channel] => consume(channel),
        ["receive", channel, count] => match count.parse() {
            Ok(count) => receive(channel, count),
            Err(error) => Err(format!("COUNT {count:?}: {error}")),
        },
        _ => Err("usage: multicast_test_role consume CHANNEL | receive CHANNEL COUNT".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("multicast_test_role: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A client on a shared-memory driver of its own, in this process.
fn client() -> Result<AttachedClient, String> {
    embedded::start(EmbeddedConfig::default()).map_err(|e| e.to_string())
}

fn consume(channel: &str) -> Result<(), String> {
    let client = client()?;
    let mut subscription = client.add_subscription(channel, STREAM).map_err(|e| e.to_string())?;
    println!("subscribed");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut batch = MessageBatch::default();
    while Instant::now() < deadline {
        batch.clear();
        if subscription.poll_into(&mut batch, 256).map_err(|e| e.to_string())? == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    Ok(())
}

fn receive(channel: &str, count: u64) -> Result<(), String> {
    let client = client()?;
    let mut subscription = client.add_subscription(channel, STREAM).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut batch = MessageBatch::default();
    let mut next = 0;
    while next < count {
        if Instant::now() >= deadline {
            return Err(format!("received only {next} of {count}: {:?}", subscription.images()));
        }
        batch.clear();
        if subscription.poll_into(&mut batch, 256).map_err(|e| e.to_string())? == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        for index in 0..batch.len() {
            let got = batch.message(index);
            if messages::index_of(got) != Some(next) {
                return Err(format!("expected message {next}, got {:?}: lost or reordered", messages::index_of(got)));
            }
            if got != &messages::message(next, messages::SIZE)[..] {
                return Err(format!("message {next} corrupted"));
            }
            next += 1;
        }
    }
    let images = subscription.images().map_err(|e| e.to_string())?;
    println!("receiver done: {count} messages, images {images:?}");
    Ok(())
}
