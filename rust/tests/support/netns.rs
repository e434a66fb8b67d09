//! Multicast never leaves the machine: a test that sends multicast re-executes itself inside a
//! private network namespace (`unshare -n`, loopback only, multicast routed to `lo`) unless
//! `AFFINITY_IN_NETNS` says it already runs in one.

use std::io::Write as _;
use std::process::Command;

/// Exit status of a namespaced test that could not set up what it tests ([`skip`]): the outer
/// test reports it as skipped, not passed (the automake / TAP convention).
pub const SKIP_EXIT_CODE: i32 = 77;
/// Environment variable naming a file where every skipped test appends a line
/// `<test>: <reason>`; `scripts/test.sh` sets it and counts the lines in its summary.
pub const SKIPPED_TESTS_ENV: &str = "AFFINITY_SKIPPED_TESTS";

/// What the namespace runs before the test: loopback up, multicast on, 224.0.0.0/4 to `lo`.
const INNER: &str =
    r#"ip link set lo up && ip link set lo multicast on && ip route add 224.0.0.0/4 dev lo && exec "$@""#;

/// Runs the rest of the test only inside a private network namespace: outside one, re-executes
/// this test (`test`, its exact name) in a fresh namespace, asserts it passed and returns false.
pub fn in_private_netns(test: &str) -> bool {
    if std::env::var_os("AFFINITY_IN_NETNS").is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let unshare_flags = if Command::new("unshare").args(["-n", "true"]).status().is_ok_and(|s| s.success()) {
        "-n"
    } else if Command::new("unshare").args(["-rn", "true"]).status().is_ok_and(|s| s.success()) {
        "-rn"
    } else {
        panic!(
            "multicast tests need a private network namespace but `unshare -n` (and `unshare -rn`) is not \
             permitted here; run as root or enable unprivileged user namespaces"
        );
    };
    // One namespace test at a time: they measure timing on a 2-core machine.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let status = Command::new("unshare")
        .args([unshare_flags, "bash", "-c", INNER, "netns"])
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("AFFINITY_IN_NETNS", "1")
        .status()
        .expect("run unshare");
    if status.code() == Some(SKIP_EXIT_CODE) {
        println!("SKIPPED: {test} (the reason is above and in ${SKIPPED_TESTS_ENV})");
        return false;
    }
    assert!(status.success(), "{test} failed inside its private network namespace: {status}");
    false
}

/// Inside the namespace: `test` cannot set up what it exists to test. Prints `SKIPPED: test:
/// reason`, appends that to the file named by [`SKIPPED_TESTS_ENV`] (when set) and ends the
/// process with [`SKIP_EXIT_CODE`], which the outer test reports as a skip. Rust's test harness
/// has no skipped state: this is how the summary of `scripts/test.sh` gets to count it.
#[allow(dead_code)] // not every test binary including this module skips
pub fn skip(test: &str, reason: &str) -> ! {
    let line = format!("{test}: {reason}");
    println!("SKIPPED: {line}");
    if let Some(path) = std::env::var_os(SKIPPED_TESTS_ENV) {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        match file.and_then(|mut file| writeln!(file, "{line}")) {
            Ok(()) => {}
            Err(error) => eprintln!("cannot record the skip in {}: {error}", path.to_string_lossy()),
        }
    }
    let _ = std::io::stdout().flush();
    std::process::exit(SKIP_EXIT_CODE);
}
