//! Multicast never leaves the machine: a test that sends multicast re-executes itself inside a
//! private network namespace (`unshare -n`, loopback only, multicast routed to `lo`) unless
//! `AFFINITY_IN_NETNS` says it already runs in one.

use std::process::Command;

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
    assert!(status.success(), "{test} failed inside its private network namespace: {status}");
    false
}
