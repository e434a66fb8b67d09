//! Child processes for the standalone-driver integration tests: the `affinity-driver` and
//! `affinity-ipc` executables, killed (SIGKILL) when dropped, with bounded waits.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "temp_dir.rs"]
mod temp_dir;

pub use temp_dir::TempDir;

/// The driver executable.
pub const DRIVER: &str = env!("CARGO_BIN_EXE_affinity-driver");
/// The publisher / subscriber tool.
pub const IPC: &str = env!("CARGO_BIN_EXE_affinity-ipc");

/// A fresh, empty directory under the temp dir, named for the test and this process, removed
/// when dropped.
pub fn tempdir(prefix: &str, name: &str) -> TempDir {
    TempDir::new(&format!("{prefix}-{name}"))
}

/// A child process killed (SIGKILL) when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits for a line containing `marker` on stdout (among the first 100 lines).
    pub fn wait_for_line(&mut self, marker: &str) -> String {
        let stdout = self.0.stdout.as_mut().expect("stdout piped");
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        for _ in 0..100 {
            line.clear();
            let read = reader.read_line(&mut line).expect("read child stdout");
            assert!(read > 0, "child exited before printing {marker:?}");
            if line.contains(marker) {
                return line;
            }
        }
        panic!("no {marker:?} in the child's first 100 lines");
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < timeout, "process did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, signal) };
    }
}

/// Starts `affinity-driver --dir dir --term-length 1m extra...` and waits until it is ready;
/// its stderr goes where `stderr` says.
pub fn start_driver(dir: &Path, extra: &[&str], stderr: Stdio) -> Proc {
    let mut child = Proc(
        Command::new(DRIVER)
            .arg("--dir")
            .arg(dir)
            .args(["--term-length", "1m"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn affinity-driver"),
    );
    child.wait_for_line("ready in");
    child
}

/// Waits for the child to exit successfully (at most `timeout`) and returns its stdout.
pub fn output(mut child: Proc, timeout: Duration) -> String {
    let status = child.wait_exit(timeout);
    let mut text = String::new();
    child.0.stdout.take().expect("stdout").read_to_string(&mut text).expect("read stdout");
    assert!(status.success(), "child failed ({status}): {text}");
    text
}
