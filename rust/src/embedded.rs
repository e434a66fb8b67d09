//! The embedded media driver: a driver run inside this process on the very structures a
//! standalone driver uses (`shm/`), with a client attached to it through its directory.
//!
//! This module composes the two sides and is neither of them: it imports the driver
//! (`DriverConductor`) and the client ([`AttachedClient`]); the client never sees the driver,
//! it is handed an [`InProcessDriver`] (the threading name, the invoker's duty cycle as a
//! closure, and what to do on close), and `driver/` imports nothing from `client/`.
//!
//! Each embedded driver gets a private directory `<root>/<pid>-<n>` under
//! [`embedded_root`] (0700), removed on close; directories left by processes that died are
//! swept when the next embedded driver starts, only when they are ours (a real directory of
//! this user holding [`EMBEDDED_MARKER`]). The root is never followed through a symbolic
//! link and must belong to this user ([`crate::safe_fs::private_dir`]).
//!
//! Threading: [`Threading::Invoker`] runs no thread: the application (or any client
//! call waiting for the driver) runs the duty cycle. The other modes run the driver's agents on
//! one, two or three threads ([`MediaDriver`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

use crate::client::attached::{AttachedClient, DutyCycle, InProcessDriver, OnClose};
use crate::driver::agent::{MediaDriver, CLOSE_DRAIN};
use crate::driver::{DriverContext, Threading};
use crate::error::Error;
use crate::groups::runtime::responder;
use crate::safe_fs;
use crate::shm::cnc::{field as cnc_field, CNC_FILE, CNC_MAGIC};
use crate::shm::directory::{self, process_exists, DIR_MODE};
use crate::shm::log_buffer::Unsent;

type Result<T> = std::result::Result<T, Error>;

/// Suffix of the per-user folder holding embedded drivers' directories.
pub const EMBEDDED_ROOT_SUFFIX: &str = "-embedded";

/// Where embedded drivers' private directories live: `/dev/shm/affinity-<user>-embedded`.
pub fn embedded_root() -> PathBuf {
    directory::per_user_dir(EMBEDDED_ROOT_SUFFIX)
}

/// An embedded driver: the driver's settings and where and how it is embedded.
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// The driver's settings (threading, idle, logs, timeouts, ...); `dir` is replaced by the
    /// private directory.
    pub driver: DriverContext,
    /// Where the private directory is made ([`embedded_root`] by default).
    pub root: PathBuf,
    /// Threaded modes: an empty poll or a refused offer yields the CPU once (default true).
    pub yields_when_idle: bool,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        let root = embedded_root();
        Self { driver: DriverContext::new(root.clone()), root, yields_when_idle: true }
    }
}

/// The file that marks a directory under [`embedded_root`] as an embedded driver's private
/// directory (written first, mode 0600): the stale sweep removes nothing without it (or a cnc
/// file with our magic).
pub const EMBEDDED_MARKER: &str = "affinity-embedded";

/// Whether `dir` is an embedded driver's private directory of this user: a real directory (not
/// a link) owned by this user holding [`EMBEDDED_MARKER`] or a cnc file with our magic, each a
/// regular file of this user.
fn is_ours(dir: &Path) -> bool {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let uid = safe_fs::current_uid();
    let Ok(meta) = std::fs::symlink_metadata(dir) else { return false };
    if !meta.is_dir() || meta.uid() != uid {
        return false;
    }
    let owned = |file: &std::fs::File| file.metadata().is_ok_and(|m| m.uid() == uid);
    if safe_fs::open_regular(&dir.join(EMBEDDED_MARKER), u64::MAX).is_ok_and(|file| owned(&file)) {
        return true;
    }
    let Ok(cnc) = safe_fs::open_regular(&dir.join(CNC_FILE), u64::MAX) else { return false };
    let mut magic = [0u8; 8];
    owned(&cnc)
        && cnc.read_exact_at(&mut magic, cnc_field::MAGIC as u64).is_ok()
        && i64::from_le_bytes(magic) == CNC_MAGIC
}

/// Removes the directories under `root` whose process (the `<pid>` of `<pid>-<n>`) is gone and
/// that are ours ([`EMBEDDED_MARKER`]); returns how many were removed. Anything else is left
/// alone.
pub fn sweep_stale(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.split_once('-')).and_then(|(pid, _)| pid.parse::<i64>().ok())
        else {
            continue;
        };
        let path = entry.path();
        if pid != i64::from(std::process::id())
            && !process_exists(pid)
            && is_ours(&path)
            && std::fs::remove_dir_all(&path).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// Makes `<root>/<pid>-<n>` with its [`EMBEDDED_MARKER`] (root and directory 0700; the root
/// must be a real directory of this user that no one else may write).
fn private_dir(root: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let io = |path: &Path, what: &str, e: std::io::Error| {
        Error::Driver(format!("embedded driver directory {}: {what}: {e}", path.display()))
    };
    safe_fs::private_dir(root, true).map_err(|e| Error::Driver(format!("embedded drivers' root {e}")))?;
    sweep_stale(root);
    loop {
        let dir = root.join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(&dir) {
            Ok(()) => {
                let marker = dir.join(EMBEDDED_MARKER);
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(safe_fs::PRIVATE_FILE_MODE)
                    .open(&marker)
                    .map_err(|e| io(&marker, "cannot create", e))?;
                return Ok(dir);
            }
            // Left by an earlier process with our pid: take the next number.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&dir, "cannot create", e)),
        }
    }
}

/// Closing: the driver serves its publications for at most `drain` (`agent::CLOSE_DRAIN` when
/// `None`; end of stream to subscribers), removes its files, then the private directory goes.
/// Returns what its publications had not sent by then (dropped with the driver).
fn stop_driver(driver: MediaDriver, drain: Option<Duration>) -> Unsent {
    let dir = driver.dir().to_path_buf();
    let unsent = driver.close_within(drain.unwrap_or(CLOSE_DRAIN));
    let _ = std::fs::remove_dir_all(dir);
    unsent.unwrap_or_default()
}

/// Starts an embedded driver in a private directory and attaches a client to it. Closing the
/// client stops the driver (`stop_driver`).
pub fn start(config: EmbeddedConfig) -> Result<AttachedClient> {
    let dir = private_dir(&config.root)?;
    let driver = match MediaDriver::launch(DriverContext { dir: dir.clone(), ..config.driver.clone() }) {
        Ok(driver) => driver,
        Err(error) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(launch_error(error));
        }
    };
    let threading = config.driver.threading.name();
    let command_timeout = config.driver.command_timeout;
    let in_process = match config.driver.threading {
        Threading::Invoker => invoker(driver, command_timeout),
        Threading::Shared | Threading::SharedNetwork | Threading::Dedicated => {
            let (wake, data_wake) = (driver.wake(), driver.data_wake());
            let on_close: OnClose = Box::new(move |drain| stop_driver(driver, drain));
            InProcessDriver {
                threading,
                duty_cycle: None,
                on_close,
                command_timeout,
                yields_when_idle: config.yields_when_idle,
                wake,
                data_wake,
            }
        }
    };
    AttachedClient::connect_in_process(&dir, in_process)
}

/// A launch refused for a setting is a setting error (Python `ConfigError`).
fn launch_error(error: crate::shm::ShmError) -> Error {
    match error {
        crate::shm::ShmError::Parameter(message) => Error::Setting(message),
        other => other.into(),
    }
}

fn poisoned() -> Error {
    Error::Driver("a thread panicked while running the embedded driver's duty cycle (a bug); the driver stopped".into())
}

fn invoker(driver: MediaDriver, command_timeout: Duration) -> InProcessDriver {
    let driver = Arc::new(Mutex::new(Some(driver)));
    let cycle: DutyCycle = {
        let driver = Arc::clone(&driver);
        Arc::new(move || match driver.try_lock() {
            Ok(mut guard) => guard.as_mut().map(MediaDriver::do_work).ok_or(Error::Closed("client")),
            Err(TryLockError::WouldBlock) => Ok(0),
            Err(TryLockError::Poisoned(_)) => Err(poisoned()),
        })
    };
    let on_close: OnClose = Box::new(move |drain| {
        let taken = match driver.lock() {
            Ok(mut guard) => guard.take(),
            // The driver's own state is still whole (a panic in its cycle left it mid-cycle at
            // worst): closing it removes its files.
            Err(poisoned) => poisoned.into_inner().take(),
        };
        taken.map(|driver| stop_driver(driver, drain)).unwrap_or_default()
    });
    InProcessDriver {
        threading: Threading::Invoker.name(),
        duty_cycle: Some(cycle),
        on_close,
        command_timeout,
        yields_when_idle: false,
        wake: None,
        data_wake: None,
    }
}

/// Why `affinity driver` did not run ([`run_driver_command`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverCommandError {
    /// A bad option (or `--help`: the usage): exit status 2.
    Usage(String),
    /// The driver or its bootstrap responder could not start: exit status 1.
    Failed(String),
}

/// The usage of `affinity driver` / `affinity-driver`: the driver's settings, then the options
/// of the bootstrap responder it may run beside.
pub fn driver_command_usage() -> String {
    format!("{}\n{}", crate::driver::standalone::usage(), responder::usage())
}

/// `affinity driver ARGS` / `affinity-driver ARGS`: the standalone driver in the foreground and,
/// with `--bootstrap-listen`, a bootstrap responder ([`responder::BootstrapResponder`]) on a
/// client attached to it through its directory (a thread of this process, over the client
/// API; `driver/` never sees it). Composed here, the one place that imports both sides: the
/// responder's options are taken out first ([`responder::take_options`]), the rest are the
/// driver's settings.
pub fn run_driver_command(
    args: &[String],
    stop: Option<&std::sync::atomic::AtomicBool>,
) -> std::result::Result<(), DriverCommandError> {
    run_driver_command_with(args, stop, |_| Ok(Box::new(())))
}

/// [`run_driver_command`] with `extra` started once the driver is ready (given its directory),
/// after the bootstrap responder, and dropped before it and before the driver closes: how
/// `affinity driver --router FILE` runs the subject router in the driver's process (the
/// binding hands a router started on a client attached to the directory). An `extra` that
/// fails to start stops the driver and is the error ([`DriverCommandError::Failed`]).
pub fn run_driver_command_with(
    args: &[String],
    stop: Option<&std::sync::atomic::AtomicBool>,
    extra: impl FnOnce(&Path) -> std::result::Result<crate::driver::standalone::Companion, String>,
) -> std::result::Result<(), DriverCommandError> {
    use crate::driver::standalone;
    if args.iter().any(|arg| arg == "-h" || arg == "--help") {
        return Err(DriverCommandError::Usage(driver_command_usage()));
    }
    let (options, rest) = responder::take_options(args).map_err(DriverCommandError::Usage)?;
    let context = standalone::parse_args(&rest).map_err(DriverCommandError::Usage)?;
    let responder = |dir: &Path| -> std::result::Result<standalone::Companion, String> {
        let Some(options) = options else { return Ok(Box::new(())) };
        let failed = |e: &dyn std::fmt::Display| format!("bootstrap responder at {}: {e}", options.listen);
        let client = crate::client::ClientHandle::attach(dir, directory::COMMAND_TIMEOUT).map_err(|e| failed(&e))?;
        let started = responder::BootstrapResponder::start(Arc::new(client), &options).map_err(|e| failed(&e))?;
        println!(
            "affinity driver: answering BOOTSTRAP at {} for the {} group(s) of {}",
            options.listen,
            started.counters().groups,
            options.registry.display()
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        Ok(Box::new(started))
    };
    let start = |dir: &Path| -> std::result::Result<standalone::Companion, String> {
        let responder = responder(dir)?;
        let extra = extra(dir)?;
        // Dropped in order: the extra companion first, then the responder.
        Ok(Box::new((extra, responder)))
    };
    standalone::run_with(context, stop, start).map_err(DriverCommandError::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::MessageBatch;
    use crate::media::ports::free_udp_port;
    use crate::protocol::OfferError;
    use crate::shm::status::SystemCounter;
    use crate::shm::test_support::tempdir;
    use std::time::{Duration, Instant};

    fn config(root: &Path, threading: Threading) -> EmbeddedConfig {
        let driver = DriverContext { threading, ipc_term_length: 64 * 1024, ..DriverContext::new(root.to_path_buf()) };
        EmbeddedConfig { root: root.to_path_buf(), driver, ..EmbeddedConfig::default() }
    }

    fn entries(root: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(root).map(|e| e.flatten().map(|e| e.path()).collect()).unwrap_or_default()
    }

    /// Polls into `batch` until it holds `count` messages (bounded by time).
    fn poll_all(
        client: &AttachedClient,
        subscription: &mut crate::client::attached::AttachedSubscription,
        batch: &mut MessageBatch,
        count: usize,
    ) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while batch.len() < count && Instant::now() < deadline {
            client.do_work().unwrap();
            if subscription.poll_into(batch, 100).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    #[test]
    fn a_receiver_restarted_while_the_sender_counts_it_connected_gets_what_was_sent_once_it_ran() {
        // The publication's last status from the first receiver is younger than the connection
        // timeout, so it still counts as connected and sends at once; the second receiver has no
        // image of its session then and asks for a SETUP, which carries a later position. The
        // image joins at the first frame seen, and what was sent there is NAKed and resent.
        let root = tempdir();
        let sending = start(config(&root, Threading::Shared)).unwrap();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        let first = start(config(&root, Threading::Shared)).unwrap();
        let mut subscription = first.add_subscription(&channel, 9).unwrap();
        let publication = sending.add_publication(&channel, 9).unwrap();
        let mut batch = MessageBatch::default();
        let deadline = Instant::now() + Duration::from_secs(20);
        while publication.try_offer(b"before").unwrap().is_err() {
            assert!(Instant::now() < deadline, "never connected");
            std::thread::sleep(Duration::from_millis(1));
        }
        poll_all(&first, &mut subscription, &mut batch, 1);
        assert_eq!(batch.len(), 1, "the first receiver got nothing");
        first.close();
        let second = start(config(&root, Threading::Shared)).unwrap();
        let mut subscription = second.add_subscription(&channel, 9).unwrap();
        assert!(publication.is_connected().unwrap(), "the sender forgot the first receiver already");
        publication.try_offer(b"after").unwrap().expect("a connected publication takes the offer");
        let mut batch = MessageBatch::default();
        poll_all(&second, &mut subscription, &mut batch, 1);
        assert_eq!(batch.len(), 1, "what was sent once the second receiver ran was lost");
        assert_eq!(batch.message(0), b"after");
        for client in [sending, second] {
            client.close();
        }
    }

    #[test]
    fn a_client_waiting_for_data_is_woken_by_its_drivers_receiver_not_by_its_timeout() {
        // Two embedded drivers (shared threading): one receives, one sends every 5 ms. The
        // receiving side's wait of 10 s ends when data arrives; without the receiver's wake-up
        // it would sleep out the 10 s (and does, by design, with an invoker driver).
        let root = tempdir();
        let receiving = start(config(&root, Threading::Shared)).unwrap();
        let sending = start(config(&root, Threading::Shared)).unwrap();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        let mut subscription = receiving.add_subscription(&channel, 7).unwrap();
        let publication = sending.add_publication(&channel, 7).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                    let _ = publication.try_offer(b"ping");
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            let mut batch = MessageBatch::default();
            poll_all(&receiving, &mut subscription, &mut batch, 1);
            assert!(!batch.is_empty(), "no message arrived");
            for _ in 0..3 {
                let start = Instant::now();
                receiving.wait_for_data(Duration::from_secs(10));
                assert!(start.elapsed() < Duration::from_secs(5), "the wait ran out its timeout: no wake-up");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let invoker = start(config(&root, Threading::Invoker)).unwrap();
        let start = Instant::now();
        invoker.wait_for_data(Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(25), "an invoker client has no receiver thread to wake it");
        for client in [receiving, sending, invoker] {
            client.close();
        }
    }

    #[test]
    fn every_threading_mode_carries_ipc_and_udp_in_order_and_close_removes_the_private_directory() {
        let root = tempdir();
        let cases = Threading::ALL.into_iter().flat_map(|t| [(t, false), (t, true)]);
        for (threading, udp) in cases {
            // A port of its own for each UDP case: the one the case before released may have
            // been taken since.
            let channel = if udp {
                format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap())
            } else {
                "aeron:ipc".to_owned()
            };
            let channel = channel.as_str();
            let client = start(config(&root, threading)).unwrap();
            assert_eq!(client.threading(), threading.name());
            let dir = client.dir().to_path_buf();
            assert!(dir.starts_with(&root));
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
            let mut subscription = client.add_subscription(channel, 5).unwrap();
            let publication = client.add_publication(channel, 5).unwrap();
            let mut batch = MessageBatch::default();
            let mut sent = 0u32;
            let deadline = Instant::now() + Duration::from_secs(20);
            while sent < 1000 && Instant::now() < deadline {
                client.do_work().unwrap();
                match publication.try_offer(&sent.to_le_bytes()).unwrap() {
                    Ok(_) => sent += 1,
                    Err(OfferError::BackPressured | OfferError::NotConnected | OfferError::AdminAction) => {
                        if subscription.poll_into(&mut batch, 100).unwrap() == 0 {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                    Err(other) => panic!("{threading:?} {channel}: {other:?}"),
                }
            }
            poll_all(&client, &mut subscription, &mut batch, 1000);
            let got: Vec<u32> =
                (0..batch.len()).map(|i| u32::from_le_bytes(batch.message(i).try_into().unwrap())).collect();
            assert_eq!(got, (0..1000).collect::<Vec<u32>>(), "{threading:?} {channel}");
            let last = batch.headers.last().map(|h| h.position);
            assert_eq!(last, Some(publication.position().unwrap()), "a header's position is its frame's end");
            drop(publication);
            drop(subscription);
            client.close();
            assert!(!dir.exists(), "{threading:?}: {} left behind", dir.display());
        }
        assert!(entries(&root).is_empty());
    }

    #[test]
    fn a_directory_whose_process_died_is_swept_and_a_live_ones_is_kept() {
        let root = tempdir();
        // pid i32::MAX cannot exist on Linux (pid_max is at most 2^22).
        let dead = root.join(format!("{}-0", i32::MAX));
        let live = root.join(format!("{}-0", std::process::id()));
        let other = root.join("not-ours");
        for dir in [&dead, &live, &other] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(EMBEDDED_MARKER), b"").unwrap();
        }
        let client = start(config(&root, Threading::Shared)).unwrap();
        assert!(!dead.exists() && live.exists() && other.exists());
        assert_ne!(client.dir(), live, "an existing directory of this pid is not reused");
        client.close();
    }

    #[test]
    fn the_sweep_removes_only_directories_carrying_our_marker_or_cnc() {
        let root = tempdir();
        let outside = tempdir();
        let photo = outside.join("1-photo");
        std::fs::create_dir(&photo).unwrap();
        std::fs::write(photo.join(EMBEDDED_MARKER), b"").unwrap();
        // No marker: a folder someone else put there, or a file of the same form.
        let unmarked = root.join(format!("{}-1", i32::MAX));
        std::fs::create_dir(&unmarked).unwrap();
        std::fs::write(unmarked.join("holiday.jpg"), b"jpg").unwrap();
        std::fs::write(root.join(format!("{}-2", i32::MAX)), b"file").unwrap();
        // A link to a marked folder elsewhere: never followed.
        let link = root.join(format!("{}-3", i32::MAX));
        std::os::unix::fs::symlink(&photo, &link).unwrap();
        // A marker that is a link to a file elsewhere does not count.
        let linked_marker = root.join(format!("{}-4", i32::MAX));
        std::fs::create_dir(&linked_marker).unwrap();
        std::os::unix::fs::symlink(photo.join(EMBEDDED_MARKER), linked_marker.join(EMBEDDED_MARKER)).unwrap();
        // Ours: a cnc with our magic (a driver directory of an older build).
        let with_cnc = root.join(format!("{}-5", i32::MAX));
        std::fs::create_dir(&with_cnc).unwrap();
        crate::shm::cnc::Cnc::create(&with_cnc.join(CNC_FILE), &crate::shm::test_support::small_cnc(), 1, 0).unwrap();
        assert_eq!(sweep_stale(&root), 1);
        assert!(!with_cnc.exists());
        assert!(unmarked.join("holiday.jpg").exists() && root.join(format!("{}-2", i32::MAX)).exists());
        assert!(std::fs::symlink_metadata(&link).is_ok() && photo.join(EMBEDDED_MARKER).exists());
        assert!(linked_marker.exists());
    }

    #[test]
    fn the_sweep_removes_the_directory_of_a_killed_process_its_parent_has_not_reaped() {
        // Spark's Python daemon reaps its killed workers late: a zombie holds nothing.
        let root = tempdir();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let dir = root.join(format!("{}-0", child.id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(EMBEDDED_MARKER), b"").unwrap();
        assert_eq!(sweep_stale(&root), 0, "a running process keeps its directory");
        child.kill().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while process_exists(i64::from(child.id())) {
            assert!(Instant::now() < deadline, "the killed child never became a zombie");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sweep_stale(&root), 1, "the zombie's directory is stale");
        assert!(!dir.exists());
        child.wait().unwrap();
    }

    #[test]
    fn a_symlinked_root_is_refused_and_its_target_left_alone() {
        let root = tempdir();
        let target = tempdir();
        let photo = target.join(format!("{}-photo", i32::MAX));
        std::fs::create_dir(&photo).unwrap();
        std::fs::write(photo.join(EMBEDDED_MARKER), b"").unwrap();
        let link = root.join("embedded");
        std::os::unix::fs::symlink(&*target, &link).unwrap();
        let error = start(config(&link, Threading::Shared)).err().expect("a symlinked root is refused").to_string();
        assert!(error.contains(&format!("{}: is a symbolic link", link.display())), "{error}");
        assert!(photo.join(EMBEDDED_MARKER).exists());
        assert_eq!(entries(&target).len(), 1, "nothing made in the target");
    }

    #[test]
    fn invoker_commands_from_many_threads_all_succeed_while_one_thread_runs_the_duty_cycle() {
        let root = tempdir();
        let client = start(config(&root, Threading::Invoker)).unwrap();
        let publications = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|stream| {
                    let client = &client;
                    scope.spawn(move || client.add_publication("aeron:ipc", 100 + stream))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap().unwrap()).collect::<Vec<_>>()
        });
        let ids: std::collections::HashSet<i64> = publications.iter().map(|p| p.registration_id()).collect();
        assert_eq!(ids.len(), 16);
        client.do_work().unwrap();
        let open = client.counters().value(SystemCounter::IpcPublications as usize).unwrap();
        assert_eq!(open, 16, "exactly the publications handed back exist in the driver");
        drop(publications);
        client.close();
    }

    #[test]
    fn an_interrupted_command_leaves_nothing_in_the_driver() {
        let root = tempdir();
        let client = start(config(&root, Threading::Invoker)).unwrap();
        // The caller gives up before the driver ran (its answer comes later).
        let outcome = client.add_publication_with("aeron:ipc", 9, || Err("interrupted"));
        assert_eq!(outcome.err(), Some("interrupted"));
        let value = |counter: SystemCounter| client.counters().value(counter as usize).unwrap();
        // Whichever cycle answered, the abandoned publication is removed again.
        for _ in 0..50 {
            client.do_work().unwrap();
        }
        assert!(value(SystemCounter::Commands) >= 2, "the add and its removal reached the driver");
        assert_eq!(value(SystemCounter::IpcPublications), 0);
        let kept = client.add_publication("aeron:ipc", 9).unwrap();
        client.do_work().unwrap();
        assert_eq!(value(SystemCounter::IpcPublications), 1);
        drop(kept);
        client.close();
    }

    #[test]
    fn a_client_reads_system_counters_by_key_and_keeps_only_its_own_publications_events() {
        use crate::shm::cnc::{Cnc, CNC_FILE};
        use crate::shm::command::Response;
        use crate::shm::status::{DriverEventInfo, DriverEventKindInfo};
        let root = tempdir();
        let client = start(config(&root, Threading::Invoker)).unwrap();
        client.counters().counter(SystemCounter::InvalidDataFrames.id()).unwrap().set(7).unwrap();
        let counters = client.system_counters().unwrap();
        assert_eq!((counters.invalid_data_frames, counters.send_errors), (7, 0));

        let publication = client.add_publication("aeron:ipc", 3).unwrap();
        // The driver is idle (invoker): this test writes the events the driver would broadcast.
        let cnc = Cnc::open(&client.dir().join(CNC_FILE), true).unwrap();
        let mut transmitter = cnc.to_clients_transmitter().unwrap();
        let event = |connected: bool| DriverEventInfo {
            time: 1.5,
            level: "INFO".into(),
            channel: "aeron:udp?endpoint=127.0.0.1:1".into(),
            stream_id: 3,
            session_id: 9,
            kind: DriverEventKindInfo::ConnectionChanged { connected },
            message: format!("INFO connection changed: connected={connected}"),
        };
        for (registration_id, connected) in [(publication.registration_id(), true), (-77, false)] {
            let json = serde_json::to_string(&event(connected)).unwrap();
            let (id, bytes) = Response::DriverEvent { publication_registration_id: registration_id, json }.encode();
            transmitter.transmit(id, &bytes).unwrap();
        }
        assert_eq!(client.drain_events().unwrap(), vec![event(true)]);
        assert!(client.drain_events().unwrap().is_empty(), "drained once");
        drop(publication);
        client.close();
    }

    #[test]
    fn a_socket_the_driver_cannot_bind_is_an_os_error_with_its_errno_and_leaves_nothing() {
        let root = tempdir();
        let client = start(config(&root, Threading::Shared)).unwrap();
        // 192.0.2.1 (TEST-NET-1) is no local address: bind fails with EADDRNOTAVAIL.
        let error = client.add_subscription("aeron:udp?endpoint=192.0.2.1:40000", 1).err().unwrap();
        match error {
            Error::Os { context, source } => {
                assert_eq!(source.raw_os_error(), Some(libc::EADDRNOTAVAIL));
                assert!(context.contains("192.0.2.1:40000") && !context.ends_with(&source.to_string()), "{context}");
            }
            other => panic!("{other:?}"),
        }
        let subscriptions = client.counters().value(SystemCounter::Subscriptions.id()).unwrap();
        assert_eq!(subscriptions, 0);
        client.close();
    }
}
