//! The duty cycles of an invoker-mode driver serving a network publication and its image
//! allocate nothing, idle or carrying a message: every wait loop of an application (a poll that
//! found nothing, an offer held back) runs one, and a `malloc`/`free` pair per receive was a
//! fifth of an idle cycle's cost (a send made five). The allocations of the test's own thread
//! are counted by a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use affinity::driver::Threading;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::media::ports::free_udp_port;

/// Counts the allocations of the thread it runs on, then lets [`System`] make them.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: allocations during the thread's teardown are not counted.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

// SAFETY: every call is passed straight to `System`, which upholds the contract.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        unsafe { System.realloc(pointer, layout, new_size) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Idle cycles counted (a few milliseconds: periodic work such as the conductor's client checks
/// every 100 ms may fall inside and allocate a little; a receive allocating made two per cycle).
const CYCLES: u64 = 20_000;

/// Messages sent one at a time, each waited for.
const MESSAGES: u64 = 2_000;

#[test]
fn invoker_duty_cycles_allocate_nothing_idle_or_carrying_messages() {
    let mut config = EmbeddedConfig::default();
    config.driver.threading = Threading::Invoker;
    let client = embedded::start(config).unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    let mut subscription = client.add_subscription(&channel, 7).unwrap();
    let publication = client.add_publication(&channel, 7).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !publication.is_connected().unwrap() {
        assert!(Instant::now() < deadline, "the publication never connected");
        client.do_work().unwrap();
    }
    // Past the connection's first status messages and the first lap's page population.
    for _ in 0..CYCLES {
        client.do_work().unwrap();
    }
    let before = allocations();
    for _ in 0..CYCLES {
        client.do_work().unwrap();
    }
    let made = allocations() - before;
    assert!(made < CYCLES / 100, "{made} allocations in {CYCLES} idle duty cycles");
    // One message at a time: sent (one `sendmmsg`), received, read, acknowledged.
    let mut round_trip = |allocations_counted: bool| {
        let before = allocations();
        for sequence in 0..MESSAGES {
            while publication.try_offer(&sequence.to_le_bytes()).unwrap().is_err() {
                client.do_work().unwrap();
            }
            let mut received = 0;
            let deadline = Instant::now() + Duration::from_secs(10);
            while received == 0 {
                assert!(Instant::now() < deadline, "message {sequence} never arrived");
                client.do_work().unwrap();
                received = subscription.poll(10, |_| {}).unwrap();
            }
        }
        let made = allocations() - before;
        assert!(!allocations_counted || made < MESSAGES / 10, "{made} allocations carrying {MESSAGES} messages");
    };
    round_trip(false);
    round_trip(true);
}
